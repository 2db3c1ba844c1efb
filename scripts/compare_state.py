"""Refactoring check of the state step: every producer's state document and every published alert
of the in-process engine, written by one checkout and compared with another's.

Not a test (tests keep hand-written expectations from Kafka's behaviour): a check that a change
meant to be behaviour-preserving (issue 23: event rows instead of event dicts, the state held in
memory by the in-process engine) is. Run it with each checkout's code first on ``sys.path``:

    python scripts/compare_state.py dump --root /path/to/old/checkout --out old.json
    python scripts/compare_state.py dump --root . --out new.json
    python scripts/compare_state.py diff old.json new.json

Cases: every simulator scenario (seed 11, random-mix at 2 MB) read as segments and as dump text,
each as one micro-batch (then the timers, as ``scan``) and split into three micro-batches two ways
(contiguous thirds; every third row), and with ``--pipeline`` also the pipeline benchmark's
dataset as one micro-batch. A checkout whose ``LocalStates`` takes Arrow tables runs every case
twice, once with the table and once with its pandas frame; both must match the other checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any


def _cases(root: Path, pipeline: bool) -> list[tuple[str, str, dict[str, str]]]:
    from streaming.simulate.scenarios import SCENARIOS, write_scenario

    out = []
    for name in sorted(SCENARIOS):
        params = {"target_bytes": 2_000_000} if name == "random-mix" else {}
        sc = write_scenario(name, root / name, seed=11, **params)
        out.append((f"{name}/segments", "segments", {"path": str(sc.root), "as_of": str(sc.as_of_ms)}))
        files = sorted(os.path.join(r, n) for r, _d, names in os.walk(sc.root) for n in names
                       if n.endswith((".log", ".snapshot")))
        out.append((f"{name}/dumps", "dumps", {"paths": json.dumps(files), "as_of": str(sc.as_of_ms)}))
    if pipeline:
        from bench.pipeline import prepare_dataset
        from streaming.config import Config
        from streaming.runner import file_source_options

        data, as_of, _expected, _ = prepare_dataset(150, 2)
        out.append(("pipeline-150mb/segments", "segments",
                    {**file_source_options(Config(), path=str(data)), "as_of": str(as_of)}))
    return out


def _run(batches: list[Any]) -> dict[str, Any]:
    from streaming.alerts import AlertConfig, Enricher
    from streaming.microbatch import BatchWriter, LocalLoop, SinkSet
    from streaming.state_machine import EngineConfig

    published: list[dict] = []
    enricher = Enricher(AlertConfig())
    loop = LocalLoop(EngineConfig(cluster="r"), BatchWriter(enricher, SinkSet(sinks=[published.extend])))
    for b in batches:
        loop.run_batch(b)
    loop.run_timers()
    alerts = [json.dumps({k: v for k, v in a.items() if k != "detected_at"}, sort_keys=True, default=str)
              for a in published]
    docs = {str(pid): loop.docs[pid][0] for pid in sorted(loop.docs)}
    active = sorted(json.dumps({k: v for k, v in e["alert"].items() if k != "detected_at"}, sort_keys=True,
                               default=str) for e in enricher.active.values())
    return {"alerts": alerts, "docs": docs, "active": active}


def _read_table(reader: Any) -> Any:
    """Every event the reader yields as one Arrow table (``local_engine.read_source`` after issue
    23; before it, that function returned this table's pandas frame)."""
    import pyarrow as pa

    from streaming.events import arrow_schema
    from streaming.sources import logdir

    logdir.PLAN_SCANS = {}
    try:
        batches = [b for p in reader.partitions() for b in reader.read(p)]
    finally:
        logdir.PLAN_SCANS = None
    return pa.Table.from_batches(batches) if batches else arrow_schema().empty_table()


def dump(root: Path, out: Path, pipeline: bool, scratch: Path) -> None:
    sys.path.insert(0, str(root.resolve()))
    import pyarrow as pa

    from streaming.sources.dumps import DumpsBatchReader
    from streaming.sources.segments import SegmentsBatchReader

    arrow = "table_rows" in (root / "streaming" / "microbatch.py").read_text()
    result: dict[str, Any] = {}
    # the same scenario directory for both checkouts: file paths are part of the alerts
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    try:
        for case, kind, opts in _cases(scratch, pipeline):
            reader = (SegmentsBatchReader if kind == "segments" else DumpsBatchReader)(opts)
            table = _read_table(reader)
            n = table.num_rows
            splits = {"one": [list(range(n))]}
            if not case.startswith("pipeline"):
                splits["thirds"] = [list(range(i * n // 3, (i + 1) * n // 3)) for i in range(3)]
                splits["every-third"] = [list(range(i, n, 3)) for i in range(3)]
            for split, parts in splits.items():
                tables = [table.take(pa.array(p, type=pa.int64())) for p in parts]
                if arrow:
                    result[f"{case}/{split}/arrow"] = _run(tables)
                frames = [t.to_pandas() for t in tables]  # what read_source handed over before
                result[f"{case}/{split}/pandas"] = _run(frames)
            print(case, n, "events", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out.write_text(json.dumps(result, sort_keys=True))


def diff(a: Path, b: Path) -> int:
    old, new = json.loads(a.read_text()), json.loads(b.read_text())
    bad = checked = 0
    for key, got in sorted(new.items()):
        base = key.rsplit("/", 1)[0]
        want = old.get(f"{base}/pandas")
        if want is None:
            print(f"{key}: no such case in {a}")
            bad += 1
            continue
        checked += 1
        for part in ("alerts", "docs", "active"):
            if got[part] != want[part]:
                bad += 1
                print(f"{key}: {part} differ")
    n_docs = sum(len(v["docs"]) for v in new.values())
    n_alerts = sum(len(v["alerts"]) for v in new.values())
    print(f"{checked} cases compared ({n_docs} state documents, {n_alerts} published alerts): "
          f"{'identical' if not bad else f'{bad} differences'}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--root", required=True, type=Path, help="the checkout whose code runs")
    d.add_argument("--out", required=True, type=Path)
    d.add_argument("--pipeline", action="store_true", help="also the pipeline benchmark's 150 MB dataset")
    d.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "txnwatch-compare-state",
                   help="where the scenarios are written (the same path for both checkouts)")
    c = sub.add_parser("diff")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        dump(args.root, args.out, args.pipeline, args.scratch)
        return 0
    return diff(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
