"""State size per producer id: how much the streaming job keeps per producer (docs/deployment.md).

Run: ``.venv/bin/python bench/state_size.py [--mb 20] [--seed 1] [--producers 40] [--store hdfs rocksdb]``

1. Writes a ``random-mix`` scenario (``streaming.simulate.scenarios``; ``--producers`` transactional
   producers plus ``producers // 8`` idempotent ones and the four fault producers) into a
   temporary directory (``--keep DIR`` keeps it there instead).
2. Counts the distinct producer ids in the events (``route_pid >= 0``: the state keys) with the
   batch ``segments`` reader.
3. For each ``--store`` provider: runs the segments source with a fresh checkpoint through
   ``streaming.pipeline.start_query(..., trigger={"availableNow": True})`` (shuffle partitions
   ``--shuffle-partitions``, default 4 as in conf/txnwatch.toml), then reports

   * the bytes on disk under the checkpoint's ``state/`` folder (every file, all versions),
   * ``numRowsTotal`` / ``memoryUsedBytes`` of the state operator from the last progress,
   * the number of state rows and the total / mean / max length of the state documents
     (read back with the ``statestore`` data source),

   and divides by the number of producer ids with state.

Prints a JSON document (``--json``) or a table. Sizes depend on how many partitions each producer
writes to (one entry per partition touched), not on the number of records.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def du(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path`` (apparent sizes; CRC side files included)."""
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            total += os.path.getsize(os.path.join(root, n))
            files += 1
    return total, files


def measure(spark, store: str, log_dir: Path, work: Path, *, cluster: str, shuffle_partitions: int) -> dict:
    from pyspark.sql import functions as F

    from streaming.alerts import AlertConfig
    from streaming.config import engine_config, load_config
    from streaming.pipeline import SinkSet, start_query

    cfg = load_config(None, env={})
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[store])
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    ck = work / f"checkpoint-{store}"
    batches: list[int] = []
    sinks = SinkSet(on_batch=[lambda b, _s: batches.append(b)])
    t0 = time.perf_counter()
    q = start_query(spark, "segments", {"path": str(log_dir), "cluster": cluster},
                    engine_config(cfg, coordinator_available=True), AlertConfig(), sinks, str(ck),
                    trigger={"availableNow": True})
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    progress = [p for p in q.recentProgress if p.get("stateOperators")]
    op = progress[-1]["stateOperators"][0] if progress else {}
    state_bytes, state_files = du(ck / "state")
    st = spark.read.format("statestore").load(str(ck))
    # value: struct<groupState: struct<doc: string>, timeoutTimestamp: long>; key: struct<route_pid>.
    agg = st.select(F.length(F.col("value.groupState.doc")).alias("n")).agg(
        F.count("*").alias("rows"), F.sum("n").alias("sum"), F.max("n").alias("max")).first()
    # Size model: document bytes = a + b * (partitions the producer has written to).
    docs = [r["d"] for r in st.select(F.col("value.groupState.doc").alias("d")).collect()]
    xs = [len(json.loads(d).get("parts", {})) for d in docs]
    ys = [len(d.encode()) for d in docs]
    fit = _fit(xs, ys)
    return {
        "store": store,
        "provider": PROVIDERS[store],
        "micro_batches": len(batches),
        "seconds": round(elapsed, 1),
        "state_dir_bytes": state_bytes,
        "state_dir_files": state_files,
        "num_rows_total": op.get("numRowsTotal"),
        "memory_used_bytes": op.get("memoryUsedBytes"),
        "state_rows": agg["rows"],
        "doc_bytes_total": agg["sum"] or 0,
        "doc_bytes_max": agg["max"] or 0,
        "partitions_per_producer_mean": round(sum(xs) / len(xs), 2) if xs else 0,
        "partitions_per_producer_max": max(xs, default=0),
        "doc_bytes_fit": fit,
    }


def _fit(xs: list[int], ys: list[int]) -> dict[str, float] | None:
    """Least squares ``y = base + per_partition * x`` (None without spread in x)."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return {"base_bytes": round(my - b * mx, 1), "bytes_per_partition": round(b, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=20, help="scenario size in MB (target_bytes = MB * 1,000,000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--producers", type=int, default=40, help="transactional producers of random-mix")
    ap.add_argument("--records-per-batch", type=int, nargs="+",
                    help="random-mix records_per_batch choices (default (1, 5, 20, 50, 100, 200)); small values "
                         "give many small transactions, i.e. more active producers for the same bytes")
    ap.add_argument("--value-size", type=int, nargs="+", help="random-mix value_sizes choices (default (100, 400))")
    ap.add_argument("--store", nargs="+", choices=sorted(PROVIDERS), default=["hdfs", "rocksdb"])
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", help="write the scenario and checkpoints here (no log/ inside yet) and keep them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F

    from streaming.pipeline import spark_session
    from streaming.simulate.scenarios import write_scenario

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="txnwatch-state-size-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        extra = {}
        if args.records_per_batch:
            extra["records_per_batch"] = tuple(args.records_per_batch)
        if args.value_size:
            extra["value_sizes"] = tuple(args.value_size)
        sc = write_scenario("random-mix", work / "log", seed=args.seed, target_bytes=args.mb * 1_000_000,
                            producers=args.producers, **extra)
        t_write = time.perf_counter() - t0
        spark = spark_session(app="txnwatch-state-size", master=args.master,
                              conf={"spark.sql.shuffle.partitions": str(args.shuffle_partitions)})
        ev = spark.read.format("segments").option("path", str(sc.root)).option("cluster", "default").load()
        keyed = ev.where(F.col("route_pid") >= 0)
        counts = keyed.agg(F.countDistinct("route_pid").alias("pids"), F.count("*").alias("events")).first()
        by_kind = {r["kind"]: r["count"] for r in keyed.groupBy("kind").count().collect()}
        pids = counts["pids"]
        results = []
        for store in args.store:
            r = measure(spark, store, sc.root, work, cluster="default", shuffle_partitions=args.shuffle_partitions)
            r["state_dir_bytes_per_producer"] = round(r["state_dir_bytes"] / pids, 1)
            r["doc_bytes_per_producer"] = round(r["doc_bytes_total"] / max(r["state_rows"], 1), 1)
            if r["memory_used_bytes"] is not None and r["num_rows_total"]:
                r["memory_bytes_per_row"] = round(r["memory_used_bytes"] / r["num_rows_total"], 1)
            results.append(r)
        spark.stop()
        out = {
            "scenario": {"name": "random-mix", "seed": args.seed, "target_bytes": args.mb * 1_000_000,
                         "producers_param": args.producers, **{k: list(v) for k, v in extra.items()},
                         "bytes_written": sc.notes.get("bytes_written"), "write_seconds": round(t_write, 1)},
            "events_keyed": counts["events"],
            "events_by_kind": by_kind,
            "distinct_producer_ids": pids,
            "shuffle_partitions": args.shuffle_partitions,
            "python": platform.python_version(),
            "results": results,
        }
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"random-mix seed {args.seed}, {args.mb} MB, producers={args.producers}"
                  f"{''.join(f', {k}={v}' for k, v in extra.items())}: "
                  f"{counts['events']:,} keyed events, {pids:,} distinct producer ids; kinds {by_kind}")
            print(f"{'store':8} {'batches':>7} {'sec':>6} {'state/ bytes':>13} {'files':>6} {'B/pid':>8} "
                  f"{'rows':>6} {'mem B':>10} {'mem B/row':>9} {'doc B/row':>9} {'doc max':>8}")
            for r in results:
                print(f"{r['store']:8} {r['micro_batches']:>7} {r['seconds']:>6} {r['state_dir_bytes']:>13,} "
                      f"{r['state_dir_files']:>6} {r['state_dir_bytes_per_producer']:>8} {r['state_rows']:>6} "
                      f"{r['memory_used_bytes'] or 0:>10,} {r.get('memory_bytes_per_row', '-'):>9} "
                      f"{r['doc_bytes_per_producer']:>9} {r['doc_bytes_max']:>8}")
            r0 = results[0] if results else None
            if r0 and r0["doc_bytes_fit"]:
                f = r0["doc_bytes_fit"]
                print(f"state document ~ {f['base_bytes']} B + {f['bytes_per_partition']} B per partition written to "
                      f"(mean {r0['partitions_per_producer_mean']} partitions/producer, "
                      f"max {r0['partitions_per_producer_max']})")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
