"""Where the in-process engine's time goes: the stages of ``txnwatch scan --engine local`` of the
pipeline benchmark's dataset, each against the header decode of the same files, in one process.

Run: ``PYTHONPATH=. .venv/bin/python bench/pipeline_stages.py [--mb 150] [--seed 2] [--reps 3]``
(the dataset of ``bench/pipeline.py``, written or reused the same way).

Stages, timed wall-clock and CPU (``time.process_time``) around the very calls
``streaming.cli._scan_local`` makes, best of ``--reps`` each:

* plan: ``SegmentsBatchReader.partitions()`` (every file read and its headers scanned, CRC on; the
  read reuses these scans);
* read: ``read()`` of every input partition (coordinator decode, spans and markers, the in-read
  reduction, partition replay, proofs, Arrow batches);
* event rows: the batches as one Arrow table (``local_engine.read_source``) and that table as event
  rows per producer id (``event_rows.table_rows``: no pandas frame, no dict per event);
* state: the state function per producer id (``LocalStates.micro_batch`` without table_rows);
* writer: the foreachBatch writer (enrichment, verdicts, sinks) and the no-data batch.

Prints each stage's seconds and its ratio to the decode, the load average, and the findings (the
dataset's expected count). Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.decode import cpu_model, load_segments  # noqa: E402
from bench.pipeline import prepare_dataset  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=150)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)

    import pyarrow as pa

    import streaming.microbatch as le
    from streaming.alerts import AlertConfig, Enricher
    from streaming.config import Config, engine_config
    from streaming.event_rows import table_rows
    from streaming.gc_pause import collector_paused
    from streaming.microbatch import BatchWriter, SinkSet
    from streaming.runner import file_source_options
    from streaming.sources import logdir
    from streaming.sources.segments import SegmentsBatchReader
    from udfs.record_batch import scan_batches

    root, as_of, expected, _ = prepare_dataset(args.mb, args.seed)
    print(f"cpu {cpu_model()} ({os.cpu_count()} logical cores), python {sys.version.split()[0]}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
    datas = [d for _, d in load_segments(root)]
    scan_batches(datas[0])
    decode = decode_cpu = float("inf")
    for _ in range(args.reps):
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        batches = sum(len(scan_batches(d)) for d in datas)
        decode, decode_cpu = min(decode, time.perf_counter() - t), min(decode_cpu, time.process_time() - c)
    del datas
    cfg = Config()
    opts = {**file_source_options(cfg, path=str(root)), "as_of": str(as_of)}  # as cli.scan_paths
    ecfg = engine_config(cfg, coordinator_available=True)
    best: dict[str, tuple[float, float]] = {}
    findings = events = 0

    def keep(name: str, t: float, c: float) -> None:
        w, u = time.perf_counter() - t, time.process_time() - c
        old = best.get(name, (float("inf"), float("inf")))
        best[name] = (min(old[0], w), min(old[1], u))

    for _ in range(args.reps):
        gc.collect()
        r = SegmentsBatchReader(opts)
        logdir.PLAN_SCANS = {}
        t, c = time.perf_counter(), time.process_time()
        parts = r.partitions()
        keep("plan (file reads, header scan)", t, c)
        t, c = time.perf_counter(), time.process_time()
        out = [b for p in parts for b in r.read(p)]
        keep("read (decode, events, reduction, proofs)", t, c)
        logdir.PLAN_SCANS = None
        t, c = time.perf_counter(), time.process_time()
        with collector_paused():  # as LocalStates.micro_batch runs it
            table = pa.Table.from_batches(out)
            grouped = table_rows(table)
        keep("event rows (Arrow table -> rows per producer)", t, c)
        real = le.table_rows
        le.table_rows = lambda _t, grouped=grouped: grouped
        try:
            states = le.LocalStates(ecfg)
            t, c = time.perf_counter(), time.process_time()
            rows = states.micro_batch(table)
            keep("state (the state function per producer id)", t, c)
        finally:
            le.table_rows = real
        with tempfile.TemporaryDirectory() as tmp:
            enricher = Enricher(AlertConfig(txn_state_partitions=cfg.coordinator.txn_state_partitions),
                                os.path.join(tmp, "sink.json"))
            write = BatchWriter(enricher, SinkSet())
            t, c = time.perf_counter(), time.process_time()
            write(rows, 0)
            timed_out = states.micro_batch(None)
            if timed_out:
                write(timed_out, 1)
            keep("writer (enrichment, verdicts, sinks) + no-data batch", t, c)
            findings = len(enricher.active)
        events = len(table)
    print(f"dataset {root}: {batches:,} batches, {events:,} events, {findings} findings (expected {expected})")
    print(f"  {'stage':<55}{'seconds':>9}{'x decode':>10}{'CPU s':>8}{'x CPU':>7}")
    print(f"  {'header decode (scan_batches, CRC on)':<55}{decode:>9.3f}{1:>10.2f}{decode_cpu:>8.3f}{1:>7.2f}")
    total = total_cpu = 0.0
    for name, (w, u) in best.items():
        total, total_cpu = total + w, total_cpu + u
        print(f"  {name:<55}{w:>9.3f}{w / decode:>10.2f}{u:>8.3f}{u / decode_cpu:>7.2f}")
    print(f"  {'sum of the stages (no CLI start, no imports)':<55}{total:>9.3f}{total / decode:>10.2f}"
          f"{total_cpu:>8.3f}{total_cpu / decode_cpu:>7.2f}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return 0 if findings == expected else 1


if __name__ == "__main__":
    sys.exit(main())
