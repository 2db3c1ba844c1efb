"""Import layering that the design relies on, checked on the source (DESIGN §3)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_the_simulator_imports_none_of_the_products_rules():
    """The scenario writer is the tests' oracle: data it writes must come from its own model of the
    broker, so that a test built on it can disagree with the product."""
    bad = {}
    for path in sorted((ROOT / "streaming" / "simulate").glob("*.py")):
        mods = {m for m in _imports(path)
                if m.split(".")[0] in ("udfs", "streaming") and not m.startswith("streaming.simulate")}
        if mods:
            bad[path.name] = sorted(mods)
    assert bad == {}


def test_the_decoders_import_nothing_from_the_spark_application():
    """``udfs/`` holds pure decoders below ``streaming/`` (DESIGN §3): data flows one way."""
    bad = {p.name: sorted(m for m in _imports(p) if m.split(".")[0] == "streaming")
           for p in sorted((ROOT / "udfs").glob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}


# ---------------------------------------------------------------- the Kafka client (issue 21 item 2)
_CLIENT = "streaming.sources.kafka_client"
_API_MODULES = {"metadata", "list_offsets", "fetch"}  # one module per Kafka API
_BELOW_THE_APIS = {"transport", "socket_transport", "core", "metadata_cache", "retry", "errors", "results",
                   "list_offsets_codec"}


def _client_imports(path: Path) -> set[str]:
    """Modules of the Kafka client (and the kafka_wire facade) that ``path`` imports, anywhere in
    the file (function-level and TYPE_CHECKING imports included: stricter than Python's runtime)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.startswith(_CLIENT + "."):
                out.add(name[len(_CLIENT) + 1:].split(".")[0])
            elif name == "streaming.sources.kafka_wire":
                out.add("kafka_wire")
    return out


def _client_graph() -> dict[str, set[str]]:
    root = ROOT / "streaming" / "sources"
    graph = {p.stem: _client_imports(p) - {p.stem} for p in sorted((root / "kafka_client").glob("*.py"))
             if p.stem != "__init__"}
    graph["kafka_wire"] = _client_imports(root / "kafka_wire.py")
    return graph


def test_the_kafka_client_modules_import_each_other_without_a_cycle():
    graph = _client_graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep] if dep in path else [mod, dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


def test_the_client_core_imports_no_api_module_and_every_api_module_uses_the_core():
    graph = _client_graph()
    assert set(graph) >= _API_MODULES | _BELOW_THE_APIS | {"kafka_wire"}  # nothing renamed away unnoticed
    upward = {m: sorted(graph[m] & (_API_MODULES | {"kafka_wire"})) for m in _BELOW_THE_APIS}
    assert {m: deps for m, deps in upward.items() if deps} == {}
    assert {m for m in _API_MODULES if "core" not in graph[m]} == set()
    # the facade is the top: no client module imports it
    assert {m for m, deps in graph.items() if "kafka_wire" in deps} == set()


def test_only_the_socket_transport_touches_kafka_pythons_network_layer():
    """The seam of issue 21 (a benchmark runs the whole client over an in-process transport):
    nothing above the transport may reach for sockets or kafka-python's connection manager."""
    root = ROOT / "streaming" / "sources"
    paths = sorted((root / "kafka_client").glob("*.py")) + [root / "kafka_wire.py"]
    users = sorted(p.stem for p in paths
                   if {m for m in _imports(p) if m.startswith("kafka.net") or m in ("socket", "ssl", "selectors")})
    assert users == ["socket_transport"]


def test_no_kafka_client_module_is_longer_than_400_lines():
    root = ROOT / "streaming" / "sources"
    paths = sorted((root / "kafka_client").glob("*.py")) + [root / "kafka_wire.py"]
    long = {p.name: n for p in paths if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
