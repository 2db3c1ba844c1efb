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
