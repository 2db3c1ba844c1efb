"""Import layering that the design relies on, checked on the source (DESIGN §3).

Every import counts: module level, under ``if TYPE_CHECKING:``, inside a function, relative or
absolute. A cycle hidden behind ``TYPE_CHECKING`` or a function-local import is still a cycle to a
reader following the code, so the graph below is built from every ``import`` statement in the file.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PRODUCT_PACKAGES = ("udfs", "streaming")


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _product_modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PRODUCT_PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _import_statements(path: Path, root: Path = ROOT) -> list[tuple[str, list[str]]]:
    """Every import statement in ``path``, wherever it sits, as (module, names): ``import x.y``
    is ("x.y", []), ``from m import a, b`` is ("m", ["a", "b"]); relative modules are resolved
    against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((module, [a.name for a in node.names]))
    return out


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module name ``path`` imports; ``from pkg import name`` also yields ``pkg.name``."""
    return {m for module, names in _import_statements(path, root)
            for m in (module, *(f"{module}.{n}" for n in names))}


def _import_graph(modules: dict[str, Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the product modules it imports. ``from pkg import sub`` is an edge to ``pkg.sub``
    alone when ``sub`` is a module (Python runs ``pkg/__init__`` first, but ``pkg`` does not
    depend on the importer); any other name is an edge to the longest product module prefix."""
    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for module, names in _import_statements(path, root):
            subs = [f"{module}.{n}" for n in names]
            targets.update(s for s in subs if s in modules)
            if not names or any(s not in modules for s in subs):
                targets.add(owner(module))
        graph[name] = {t for t in targets if t and t != name}
    return graph


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_product_has_no_import_cycle():
    """No two product modules import each other, directly or through others, counting imports
    under ``TYPE_CHECKING`` and inside functions (issue 21: ``cluster_log`` <-> ``producers``)."""
    assert _import_cycles(_import_graph(_product_modules())) == []


def test_the_cycle_finder_sees_hidden_imports(tmp_path):
    """The finder itself: a cycle closed only under ``TYPE_CHECKING`` or only by a function-local
    relative import is reported; a one-way ``from pkg import sub`` is not a cycle with ``pkg``."""
    pkg = tmp_path / "udfs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from udfs import a\n")
    (pkg / "a.py").write_text("from udfs.b import B\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from udfs.a import A\n")
    (pkg / "c.py").write_text("import udfs.d\n")
    (pkg / "d.py").write_text("def f():\n    from . import c\n")
    modules = {_module_name(p, tmp_path): p for p in sorted(pkg.rglob("*.py"))}
    assert _import_cycles(_import_graph(modules, tmp_path)) == [["udfs.a", "udfs.b"], ["udfs.c", "udfs.d"]]


def test_the_simulator_imports_none_of_the_products_rules():
    """The scenario writer is the tests' oracle: data it writes must come from its own model of the
    broker, so that a test built on it can disagree with the product. Every import counts,
    function-local and ``TYPE_CHECKING`` ones included."""
    bad = {}
    for path in sorted((ROOT / "streaming" / "simulate").glob("*.py")):
        mods = {m for m in _imports(path)
                if m.split(".")[0] in PRODUCT_PACKAGES and not m.startswith("streaming.simulate")}
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
_API_MODULES = {"metadata", "list_offsets", "fetch", "write_txn_markers"}  # one module per Kafka API
_BELOW_THE_APIS = {"transport", "socket_transport", "core", "metadata_cache", "retry", "errors", "results",
                   "list_offsets_codec"}


def _imported_names(path: Path) -> set[str]:
    """Every module ``path`` imports and every ``module.name`` it imports from one, anywhere in the
    file (function-level and TYPE_CHECKING imports included: stricter than Python's runtime)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _client_imports(path: Path) -> set[str]:
    """Modules of the Kafka client (and the kafka_wire facade) that ``path`` imports."""
    out: set[str] = set()
    for name in _imported_names(path):
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle of ``graph`` (module -> modules it imports), each as the path around it."""
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
    return cycles


def test_the_kafka_client_modules_import_each_other_without_a_cycle():
    assert _cycles(_client_graph()) == []


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


# ---------------------------------------------------------------- the admin APIs (issue 21 item 2)
_ADMIN = "streaming.kafka_admin"
_ADMIN_APIS = {"describe_producers", "describe_transactions", "list_transactions", "groups", "features"}
#: the facade, the pure rules, and the admin modules, by the name the graph below gives them
_ADMIN_SIDE = {"broker_confirm": "streaming.broker_confirm", "broker_rules": "streaming.broker_rules"}


def _admin_imports(path: Path) -> set[str]:
    """The admin modules, ``broker_confirm`` and ``broker_rules`` that ``path`` imports."""
    out: set[str] = set()
    for name in _imported_names(path):
        if name.startswith(_ADMIN + "."):
            out.add(name[len(_ADMIN) + 1:].split(".")[0])
        out.update(short for short, full in _ADMIN_SIDE.items() if name == full or name.startswith(full + "."))
    return out


def _admin_paths() -> dict[str, Path]:
    paths = {p.stem: p for p in sorted((ROOT / "streaming" / "kafka_admin").glob("*.py")) if p.stem != "__init__"}
    paths.update({short: ROOT / (full.replace(".", "/") + ".py") for short, full in _ADMIN_SIDE.items()})
    return paths


def _admin_graph() -> dict[str, set[str]]:
    return {name: _admin_imports(p) - {name} for name, p in _admin_paths().items()}


def test_the_admin_modules_import_each_other_without_a_cycle():
    assert _cycles(_admin_graph()) == []


def test_the_admin_session_imports_no_api_every_api_uses_it_and_the_facade_is_the_top():
    graph = _admin_graph()
    assert set(graph) >= _ADMIN_APIS | {"session", "broker_confirm", "broker_rules"}  # nothing renamed away
    assert graph["session"] & (_ADMIN_APIS | {"broker_confirm"}) == set()
    assert {m for m in _ADMIN_APIS if "session" not in graph[m]} == set()
    assert {m for m, deps in graph.items() if "broker_confirm" in deps} == set()
    # the facade reaches every admin API (one module per API, none left unused)
    assert _ADMIN_APIS - graph["broker_confirm"] == set()


def test_the_broker_rules_do_no_io():
    """``broker_rules`` turns answers already had into verdict inputs: it imports no Kafka client
    (kafka-python, the admin modules, the txnwatch client) and no network module."""
    mods = _imports(ROOT / "streaming" / "broker_rules.py")
    io = sorted(m for m in mods if m.split(".")[0] in ("kafka", "socket", "ssl", "selectors", "asyncio")
                or m.startswith((_ADMIN, "streaming.sources", "streaming.broker_confirm")))
    assert io == []


def test_nothing_outside_the_kafka_client_calls_its_private_request_methods():
    """WriteTxnMarkers and any other raw request go through a public API module of the client
    (``kafka_client.write_txn_markers``), never through a wire's private ``_send``/``_run``."""
    private = {"_send", "_send_nowait", "_await", "_run", "_ensure_started"}
    client = ROOT / "streaming" / "sources" / "kafka_client"
    bad = []
    for path in sorted((ROOT / "streaming").rglob("*.py")):
        if client in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in private \
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert bad == []


def test_no_admin_module_is_longer_than_400_lines():
    long = {name: n for name, p in _admin_paths().items() if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
