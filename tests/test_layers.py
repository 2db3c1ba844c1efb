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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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
    assert _cycles(_import_graph(_product_modules())) == []


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
    assert _cycles(_import_graph(modules, tmp_path)) == [["udfs.a", "udfs.b"], ["udfs.c", "udfs.d"]]


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
