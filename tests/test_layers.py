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


# ------------------------------------------------- the segments read path (issue 21 item 1)
# Steps of a log-dir read (streaming/sources/segments.py's module docstring has the call trace):
# 1 list (log_layout: which files), 2 read (logdir: bytes of segments, snapshots, checkpoint) with
# 3 decode (udfs: bytes -> tables, records, snapshots; called only by the read step, chunk by
# chunk), 4 events (partition_read, normalize, events). segments.py is the shell that drives them.
_STEP = {"streaming.sources.log_layout": 1, "streaming.sources.logdir": 2, "streaming.partition_read": 4,
         "streaming.normalize": 4, "streaming.events": 4}
# Value and state objects carried from step to step: building or asking them is not a visit of
# the module that defines them. udfs.model is the decoders' shared vocabulary (names, codes),
# udfs.stable_order a sorting helper the decoders and the events step both use (no decoding).
_CARRIED = {"PartitionDir", "PartitionFiles", "Chunk", "PartitionRead", "ReadContext", "BatchPiece", "TxnPiece",
            "Offsets", "SnapshotSeed", "SnapshotCandidate", "SnapshotFile", "BatchScan", "DecodeError",
            "PartitionState", "ProducerEntry", "CoordinatorReplay"}


def _step(frame) -> int | None:
    mod = frame.f_globals.get("__name__", "")
    self = frame.f_locals.get("self")
    if frame.f_code.co_qualname.split(".")[0] in _CARRIED or (self is not None and type(self).__name__ in _CARRIED):
        return None
    if mod.startswith("udfs.") and mod not in ("udfs.model", "udfs.stable_order"):
        return 3
    return _STEP.get(mod)


def _trace_read(reader, group) -> list[tuple[int, int | None, str]]:
    """(step, step of the caller, function) of every call into a step module during ``reader.read``."""
    import sys

    calls: list[tuple[int, int | None, str]] = []

    def importing(frame) -> bool:
        # segments.py imports step 4 on the first read (its planner processes never read): the
        # module's own initialisation (dataclass factories...) then runs inside the read, and is
        # not a visit of the step by the read
        while frame is not None:
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                return True
            frame = frame.f_back
        return False

    def prof(frame, event, _arg):
        if event == "call" and not importing(frame):
            step = _step(frame)
            if step is not None:
                calls.append((step, _step(frame.f_back) if frame.f_back else None,
                              f"{frame.f_globals['__name__']}.{frame.f_code.co_qualname}"))

    sys.setprofile(prof)
    try:
        rows = list(reader.read(group))
    finally:
        sys.setprofile(None)
    assert rows and rows[0].num_rows
    return calls


def _one_partition_reads(tmp_path):
    """A log dir with a data partition seeded from a snapshot, older segments and a coordinator
    partition (scenario ``retention-restart``), read first whole, then from a mid position with
    no memo (a Spark worker's first read of it), so that every branch of the read runs."""
    from streaming.simulate.scenarios import write_scenario
    from streaming.sources import logdir
    from streaming.sources.segments import SegmentsBatchReader, SegmentsGroup

    sc = write_scenario("retention-restart", tmp_path / "d", seed=1)
    reader = SegmentsBatchReader({"path": str(sc.root), "input_partitions": "1"})
    parts = [p for g in reader.partitions() for p in g.parts]
    data = next(p for p in parts if p.part_path.endswith("orders-0"))
    txn = max((p for p in parts if "__transaction_state" in p.part_path), key=lambda p: sum(
        c.end - c.start for c in p.chunks))
    yield "data", reader, SegmentsGroup([data])
    yield "txn", reader, SegmentsGroup([txn])
    for name, one in (("data-from-middle", data), ("txn-from-middle", txn)):
        c = one.chunks[-1]
        scan_end = c.start + (c.end - c.start) // 2
        from udfs.record_batch import scan_batches

        with open(c.path, "rb") as f:
            f.seek(c.start)
            cols = scan_batches(f.read(scan_end - c.start), validate_crc=False, allow_partial_tail=True).columns
        if len(cols["position"]) < 2:
            continue
        mid = c.start + int(cols["position"][-1])
        logdir._MEMO.clear()
        later = type(one)(one.part_path, [type(c)(c.segment, c.path, mid, c.end)], [c.segment, mid], one.end,
                          one.clock, one.seed_offset)
        yield name, reader, SegmentsGroup([later])


def test_a_segments_read_goes_list_read_decode_events_without_return_trips(tmp_path):
    """Issue 21: followed call by call, ``SegmentsBatchReader.read`` visits list, then read (which
    alone calls the decoders), then events, and never calls back into a step it has left."""
    seen = 0
    for name, reader, group in _one_partition_reads(tmp_path):
        calls = _trace_read(reader, group)
        steps = [s for s, _, _ in calls]
        assert set(steps) == {1, 2, 3, 4}, (name, steps)
        # read and decode alternate chunk by chunk (rank 2); nothing goes back to a lower rank
        rank = [min(s, 2) if s < 4 else 4 for s in steps]
        back = [(calls[i - 1][2], calls[i][2]) for i in range(1, len(rank)) if rank[i] < rank[i - 1]]
        assert back == [], name
        # the decoders are reached only from the read step (or from one another)
        assert [(f, caller) for s, caller, f in calls if s == 3 and caller not in (2, 3)] == [], name
        # and never call back up (no callbacks from udfs into the steps above)
        assert [(f, s) for s, caller, f in calls if caller == 3 and s != 3] == [], name
        seen += 1
    assert seen == 4


def test_the_segments_read_steps_import_only_the_steps_after_them():
    """The same direction on the import graph: the lister imports no project module, the reader
    not the event builders, the event builders neither the reader nor the lister."""
    src = ROOT / "streaming"
    ours = {m for m in _imports(src / "sources" / "log_layout.py") if m.split(".")[0] in ("streaming", "udfs")}
    assert ours == set()
    reader = _imports(src / "sources" / "logdir.py")
    assert reader & {"streaming.partition_read", "streaming.normalize", "streaming.events",
                     "streaming.sources.segments"} == set()
    for events in ("partition_read.py", "normalize.py", "events.py"):
        assert {m for m in _imports(src / events) if m.startswith("streaming.sources")} == set(), events


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
