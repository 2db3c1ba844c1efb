"""Structure the design relies on, checked on the source (issue 21 item 3): one micro-batch loop
(``streaming/microbatch.py``) that the Spark job, the in-process engine and every test harness
run, and one class per configuration section.

The loop was once wired five times (``pipeline.make_batch_writer``, ``local_engine``,
``tests/live_inprocess``, ``tests/engine_helper``, ``tests/test_broker_confirm``), each with its
own copy of "group by producer, call the state function, enrich, publish", and the copies had
drifted (the helpers skipped availability, the cluster's confirmation and the timers).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

LOOP = "streaming/microbatch.py"
#: The places that wired their own loop before issue 21: each must now run the one loop.
WIRED = ("streaming/pipeline.py", "streaming/local_engine.py", "tests/live_inprocess.py",
         "tests/engine_helper.py", "tests/test_broker_confirm.py")
#: The steps of a micro-batch (microbatch.py's docstring): calling one of them is running a loop.
STEPS = ("process_key",  # the state function (state_machine): step 2
         "applyInPandasWithState",  # the Spark state operator: step 2
         "observe_open_sets", "apply_holds",  # enrichment and availability: step 3
         "record_unread")  # the unread ledger, written before the batch counts as published: step 3


def _tree(rel: str) -> ast.Module:
    path = ROOT / rel
    return ast.parse(path.read_text(), filename=str(path))


def _product_and_harnesses() -> list[str]:
    product = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "streaming").rglob("*.py"))
    return product + [w for w in WIRED if w.startswith("tests/")]


def _called(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _receiver(node: ast.Call) -> str:
    f = node.func
    return ast.unparse(f.value) if isinstance(f, ast.Attribute) else ""


def _step_calls(rel: str) -> set[str]:
    """The loop steps module ``rel`` calls: :data:`STEPS`, an enricher's ``process`` (alerts out
    of state rows), the sinks' ``emit`` and, in the product, the cluster's ``annotate``."""
    out: set[str] = set()
    for node in ast.walk(_tree(rel)):
        if not isinstance(node, ast.Call):
            continue
        name = _called(node)
        if name in STEPS:
            out.add(name)
        elif name == "process" and _receiver(node).split(".")[-1].lower().endswith("enricher"):
            out.add("Enricher.process")
        elif name == "emit" and _receiver(node).split(".")[-1].lower().endswith("sinks"):
            out.add("SinkSet.emit")
        elif name == "annotate" and rel.startswith("streaming/"):  # tests may unit-test annotate itself
            out.add("annotate")
    return out


def test_the_steps_of_a_micro_batch_are_called_in_one_module():
    """Nobody but ``streaming/microbatch.py`` groups events per producer through the state
    function, turns state rows into alerts or publishes them: a second copy of the loop fails
    here, naming its module and the steps it calls."""
    holders = {rel: sorted(steps) for rel in _product_and_harnesses() if (steps := _step_calls(rel))}
    assert set(holders) == {LOOP}, holders
    assert holders[LOOP] == sorted({*STEPS, "Enricher.process", "SinkSet.emit", "annotate"})


def test_the_spark_job_hands_the_one_loop_to_foreach_batch():
    """The detection query's ``foreachBatch`` is the one loop's Spark adapter (the quality gate,
    a second query over the events, validates rows and publishes no alerts)."""
    passed = {}
    for rel in _product_and_harnesses():
        if rel.startswith("streaming/quality/"):
            continue
        for node in ast.walk(_tree(rel)):
            if isinstance(node, ast.Call) and _called(node) == "foreachBatch":
                passed[rel] = [ast.unparse(a) for a in node.args]
    assert list(passed) == ["streaming/pipeline.py"], passed
    (arg,) = passed["streaming/pipeline.py"]
    assert arg.startswith("spark_foreach_batch(BatchWriter("), arg


def _imports(rel: str) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_every_place_that_wired_a_loop_runs_the_one_loop():
    """Each of the five places reaches ``streaming.microbatch`` through its imports (directly or
    through another of them: the harnesses are thin callers of the local engine or ``LiveJob``)."""
    as_module = {w: w.removesuffix(".py").replace("/", ".") for w in WIRED}
    reaches = {w for w in WIRED if (ROOT / w).exists() and "streaming.microbatch" in _imports(w)}
    grew = True
    while grew:
        more = {w for w in WIRED if w not in reaches and (ROOT / w).exists()
                and any(as_module[r] in _imports(w) for r in reaches)}
        reaches |= more
        grew = bool(more)
    assert sorted(set(WIRED) - reaches) == []


def _dataclass_fields(path: Path) -> dict[str, frozenset[str]]:
    out = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            names = frozenset(s.target.id for s in node.body
                              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
            out[f"{path.relative_to(ROOT)}:{node.name}"] = names
    return out


def test_each_configuration_section_has_one_class():
    """``Config`` is the only configuration form (issue 21 item 3): the ``[ui]`` options once lived
    in ``UiConfig`` and again in ``streaming/ui/settings.py``'s ``UISettings``. No dataclass of the
    product outside ``streaming/config.py`` holds most (four or more) of a section's options."""
    sections = _dataclass_fields(ROOT / "streaming" / "config.py")
    others: dict[str, frozenset[str]] = {}
    for p in sorted((ROOT / "streaming").rglob("*.py")):
        if p.name != "config.py" or p.parent.name != "streaming":
            others.update(_dataclass_fields(p))
    twins = [(sec, other, sorted(fields & theirs)) for sec, fields in sections.items()
             for other, theirs in others.items()
             if len(fields & theirs) >= 4 and 2 * len(fields & theirs) > len(fields)]
    assert twins == []
