"""Data-quality gate overhead: validating one micro-batch of events against the job's micro-batch.

Run: ``.venv/bin/python bench/quality_overhead.py [--mb 8] [--max-bytes 65536] [--reps 3] [--json]``

In one process: writes a scenario log (``random-mix`` of ``--mb`` MB by default), runs the
streaming job over it (``segments`` source, available-now trigger, ``max_bytes_per_trigger``)
and takes each micro-batch's ``triggerExecution`` time from the query progress (the peer run);
then validates a cached DataFrame with as many event rows as the median micro-batch, ``--reps``
times per (engine, GX result format) after one warm-up, and prints median validation time /
median micro-batch time. These ratios set the gate's default sampling (``docs/metrics.md``).
Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from typing import Any

from streaming.quality import validate_events


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def measure_overhead(spark: Any, log_dir: str, *, max_bytes_per_trigger: int | None = None, reps: int = 3,
                     variants: Iterable[tuple[str, str]] = (("spark", "BASIC"), ("spark", "BOOLEAN_ONLY"),
                                                            ("pandas", "BASIC"), ("pandas", "BOOLEAN_ONLY")),
                     ) -> dict[str, Any]:
    """Time the event suite on a micro-batch-sized DataFrame against the micro-batches of the job.

    1. Runs the streaming job (:func:`streaming.pipeline.start_query`, ``segments`` source,
       available-now trigger, ``max_bytes_per_trigger``) over ``log_dir`` and reads each
       micro-batch's ``triggerExecution`` duration and input row count from the query progress.
    2. Reads the same events with the batch reader, keeps as many rows as the median
       micro-batch, caches them, and validates them ``reps`` times per engine (after one warm-up).

    ``variants`` are (engine, GX result format) pairs. Returns the medians and the ratios
    (validation seconds / median micro-batch seconds) per variant.
    """
    from streaming.alerts import AlertConfig
    from streaming.pipeline import SinkSet, start_query
    from streaming.state_machine import EngineConfig

    opts = {"path": log_dir}
    if max_bytes_per_trigger:
        opts["max_bytes_per_trigger"] = str(max_bytes_per_trigger)
    ck = tempfile.mkdtemp(prefix="txnwatch-measure-")
    try:
        q = start_query(spark, "segments", opts, EngineConfig(), AlertConfig(), SinkSet(), ck,
                        trigger={"availableNow": True})
        q.awaitTermination()
        progress = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
    finally:
        shutil.rmtree(ck, ignore_errors=True)
    batch_s = [p["durationMs"]["triggerExecution"] / 1000.0 for p in progress]
    batch_rows = [int(p["numInputRows"]) for p in progress]
    rows = int(_median([float(r) for r in batch_rows])) if batch_rows else 0
    events = spark.read.format("segments").option("path", log_dir).load().limit(max(rows, 1)).persist()
    n = events.count()
    out: dict[str, Any] = {"micro_batches": len(progress), "batch_rows_median": rows, "rows_validated": n,
                           "batch_seconds_median": _median(batch_s), "batch_seconds": batch_s, "engines": {}}
    try:
        for engine, fmt in variants:
            validate_events(events, engine=engine, result_format=fmt)  # warm-up
            times = [validate_events(events, engine=engine, result_format=fmt).seconds for _ in range(reps)]
            med = _median(times)
            out["engines"][f"{engine}/{fmt}"] = {"seconds": times, "seconds_median": med,
                                                 "ratio": med / out["batch_seconds_median"] if batch_s else None}
    finally:
        events.unpersist()
    return out


def main(argv: list[str] | None = None) -> int:
    """``bench/quality_overhead.py [--scenario S] [--mb N] [--max-bytes B] [--reps R] [--json]``."""
    p = argparse.ArgumentParser(prog="bench/quality_overhead.py",
                                description="GX overhead per micro-batch vs. the job's micro-batch time")
    p.add_argument("--scenario", default="random-mix")
    p.add_argument("--mb", type=float, default=4.0, help="random-mix size in MB")
    p.add_argument("--max-bytes", type=int, default=256 << 10, help="max_bytes_per_trigger per partition")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--json", action="store_true", help="print the full measurement as JSON")
    args = p.parse_args(argv)
    from streaming.pipeline import spark_session
    from streaming.simulate.scenarios import write_scenario

    root = tempfile.mkdtemp(prefix="txnwatch-measure-logs-")
    try:
        params = {"target_bytes": int(args.mb * (1 << 20))} if args.scenario == "random-mix" else {}
        write_scenario(args.scenario, os.path.join(root, "logs"), **params)
        spark = spark_session(master=args.master, conf={"spark.sql.shuffle.partitions": "2"})
        res = measure_overhead(spark, os.path.join(root, "logs"), max_bytes_per_trigger=args.max_bytes,
                               reps=args.reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{args.scenario}, {res['micro_batches']} micro-batches, median {res['batch_rows_median']} rows and "
          f"{res['batch_seconds_median']:.2f} s per micro-batch (the peer run)")
    for variant, r in res["engines"].items():
        ratio = "-" if r["ratio"] is None else f"{r['ratio'] * 100:.0f} %"
        print(f"  {variant:22} validation {r['seconds_median']:.2f} s = {ratio} of a micro-batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
