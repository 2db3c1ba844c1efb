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


def tree_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process's descendants: ``jvm`` (the java process
    PySpark started) and ``python`` (the Python daemon and its workers, with the workers the
    daemon already reaped: a process's cutime/cstime), read from /proc."""
    tck = os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[int]] = {}
    stat: dict[int, tuple[str, list[str]]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2:].split()
        stat[int(d)] = (comm, rest)
        kids.setdefault(int(rest[1]), []).append(int(d))
    out = {"jvm": 0.0, "python": 0.0}
    stack = list(kids.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack += kids.get(pid, [])
        if pid not in stat:
            continue
        comm, rest = stat[pid]
        # rest[0] is the state: utime, stime, cutime, cstime are fields 14-17 of /proc/PID/stat
        own, reaped = int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14])
        if comm.startswith("java"):
            out["jvm"] += own / tck
        elif comm.startswith("python"):
            out["python"] += (own + reaped) / tck
    return out


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


# --- state at scale (issue 23 item 4): synthetic events straight into the state operator ------------


def synthetic_files(out: Path, *, producers: int, open_txns: int, files: int, extra_triggers: int,
                    touch: int, partitions: int, now_ms: int) -> list[tuple[Path, int]]:
    """Parquet files of events (``streaming.events.arrow_schema``), one per trigger, each with
    the number of producer ids (state keys) in it.

    Files 1..``files``: ``producers`` producer ids (ids 1..N) spread over them, each with one
    committed transaction (a data span then its COMMIT marker) on one of ``partitions`` partitions
    of topic ``scale``, except ``open_txns`` of them (every ``producers // open_txns``-th id),
    whose transaction stays open (a span with no marker) and is younger than any threshold, so
    nothing is late: the state keeps it, no alert is published. Then ``extra_triggers`` files of
    ``touch`` events each: new data on open transactions and a new committed transaction of
    closed producers, i.e. steady-state triggers against a full state store."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streaming.events import FIELD_NAMES, arrow_schema

    schema = arrow_schema()
    out.mkdir(parents=True, exist_ok=True)
    stride = max(1, producers // max(open_txns, 1)) if open_txns else producers + 1
    next_off = np.zeros(partitions, dtype=np.int64)  # next free offset per partition
    paths: list[tuple[Path, int]] = []

    def batch(pids: np.ndarray, marker: np.ndarray, ts: int) -> pa.Table:
        """A data span of each pid, followed by its COMMIT marker where ``marker``."""
        part = (pids % partitions).astype(np.int32)
        n_rows = len(pids) + int(marker.sum())
        pid_col = np.empty(n_rows, dtype=np.int64)
        part_col = np.empty(n_rows, dtype=np.int32)
        kind_col = np.empty(n_rows, dtype=object)
        first = np.empty(n_rows, dtype=np.int64)
        i = 0
        for pid, p, m in zip(pids.tolist(), part.tolist(), marker.tolist(), strict=True):
            pid_col[i], part_col[i], kind_col[i], first[i] = pid, p, "data", next_off[p]
            next_off[p] += 1
            i += 1
            if m:
                pid_col[i], part_col[i], kind_col[i], first[i] = pid, p, "marker", next_off[p]
                next_off[p] += 1
                i += 1
        is_m = kind_col == "marker"
        cols = {
            "kind": kind_col, "source": np.full(n_rows, "synthetic", dtype=object),
            "cluster": np.full(n_rows, "default", dtype=object), "topic": np.full(n_rows, "scale", dtype=object),
            "partition": part_col, "route_pid": pid_col, "producer_id": pid_col,
            "producer_epoch": np.zeros(n_rows, dtype=np.int32), "first_offset": first, "last_offset": first,
            "first_ts": np.full(n_rows, ts, dtype=np.int64), "last_ts": np.full(n_rows, ts, dtype=np.int64),
            "batch_count": np.ones(n_rows, dtype=np.int64), "record_count": np.where(is_m, 1, 3).astype(np.int64),
            "bytes": np.full(n_rows, 120, dtype=np.int64), "empty_batches": np.zeros(n_rows, dtype=np.int64),
            "marker": np.where(is_m, "COMMIT", None).astype(object),
            "coordinator_epoch": pa.array(np.zeros(n_rows, dtype=np.int32), mask=~is_m),
            "from_log_start": np.ones(n_rows, dtype=bool), "read_from_zero": np.ones(n_rows, dtype=bool),
            "source_position": np.full(n_rows, "synthetic", dtype=object),
            "event_time": pa.array(np.full(n_rows, ts * 1000, dtype=np.int64), type=pa.timestamp("us", tz="UTC")),
        }
        arrays = []
        for f in schema:
            v = cols.get(f.name)
            arrays.append(pa.nulls(n_rows, f.type) if v is None else pa.array(v, type=f.type))
        assert [f.name for f in schema] == list(FIELD_NAMES)
        return pa.Table.from_arrays(arrays, schema=schema)

    ids = np.arange(1, producers + 1, dtype=np.int64)
    is_open = (ids % stride == 0) if open_txns else np.zeros(producers, dtype=bool)
    if open_txns:
        is_open &= np.cumsum(is_open) <= open_txns
    for k, chunk in enumerate(np.array_split(np.arange(producers), files)):
        p = out / f"part-{k:04d}.parquet"
        pq.write_table(batch(ids[chunk], ~is_open[chunk], now_ms + k), p)
        paths.append((p, len(chunk)))
    rng = np.random.default_rng(1)
    open_ids, closed_ids = ids[is_open], ids[~is_open]
    for k in range(extra_triggers):
        # half on open transactions (a batch joins them), half new transactions of closed producers
        a = rng.choice(open_ids, min(len(open_ids), touch // 2), replace=False) if len(open_ids) else ids[:0]
        b = rng.choice(closed_ids, min(len(closed_ids), touch - len(a)), replace=False)
        pids = np.concatenate([a, b])
        p = out / f"part-{files + k:04d}.parquet"
        pq.write_table(batch(pids, np.isin(pids, b), now_ms + 1000 * (k + 1)), p)
        paths.append((p, len(pids)))
    return paths


def measure_scale(spark, store: str, events_dir: Path, work: Path, keys: list[int], *, shuffle_partitions: int,
                  timeout_s: float) -> dict:
    """The detection query (``pipeline.detect`` + the foreachBatch writer) over the synthetic
    files, one file per trigger, with ``store``'s state store provider and a fresh checkpoint."""
    from streaming.alerts import AlertConfig, Enricher
    from streaming.config import engine_config, load_config
    from streaming.events import spark_schema
    from streaming.microbatch import BatchWriter, SinkSet, detect, spark_foreach_batch

    cfg = load_config(None, env={})
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[store])
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    ck = work / f"checkpoint-scale-{store}"
    stats: list[dict] = []
    cpu = [tree_cpu()]

    def on_batch(b: int, s: dict) -> None:
        # CPU of the JVM and the Python workers since the previous batch (their foreachBatch call
        # comes after the state operator ran): the batch's CPU, with the writer's Spark jobs
        cpu.append(tree_cpu())
        stats.append({"batch": b, "open": len(s["open_transactions"]), "alerts": len(s["alerts"]),
                      "writer_s": s["duration_s"], "python_cpu_s": cpu[-1]["python"] - cpu[-2]["python"],
                      "jvm_cpu_s": cpu[-1]["jvm"] - cpu[-2]["jvm"]})

    sinks = SinkSet(on_batch=[on_batch])
    events = spark.readStream.schema(spark_schema()).option("maxFilesPerTrigger", 1).parquet(str(events_dir))
    enricher = Enricher(AlertConfig(), str(ck) + "-sink.json")
    w = detect(events, engine_config(cfg, coordinator_available=False)).writeStream.outputMode("update") \
        .option("checkpointLocation", str(ck)).foreachBatch(spark_foreach_batch(BatchWriter(enricher, sinks)))
    t0 = time.perf_counter()
    q = w.trigger(availableNow=True).start()
    q.awaitTermination(timeout_s)
    elapsed = time.perf_counter() - t0
    if q.isActive:
        q.stop()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    triggers = []
    by_batch = {st["batch"]: st for st in stats}
    for p in q.recentProgress:
        op = (p.get("stateOperators") or [{}])[0]
        st = by_batch.get(p["batchId"], {})
        n_keys = keys[p["batchId"]] if p["batchId"] < len(keys) else 0
        triggers.append({"batch": p["batchId"], "rows_in": p["numInputRows"], "keys": n_keys,
                         "python_cpu_s": st.get("python_cpu_s"), "jvm_cpu_s": st.get("jvm_cpu_s"),
                         "trigger_ms": p["durationMs"].get("triggerExecution"),
                         "add_batch_ms": p["durationMs"].get("addBatch"),
                         "state_rows": op.get("numRowsTotal"), "state_updated": op.get("numRowsUpdated"),
                         "state_update_ms": op.get("allUpdatesTimeMs"), "state_commit_ms": op.get("commitTimeMs"),
                         "state_memory_bytes": op.get("memoryUsedBytes"),
                         "custom": {k: v for k, v in (op.get("customMetrics") or {}).items()
                                    if k in ("rocksdbTotalBytesWritten", "rocksdbSstFileSize",
                                             "rocksdbPinnedBlocksMemoryUsage", "stateOnCurrentVersionSizeBytes")}})
    state_bytes, state_files = du(ck / "state")
    ck_bytes, ck_files = du(ck)
    from pyspark.sql import functions as F

    # State documents of producers with and without an open transaction (the "open" object of a
    # partition is what an open transaction adds to its producer's document).
    doc = F.col("value.groupState.doc")
    docs = {r["has_open"]: (r["n"], r["mean"], r["max"]) for r in spark.read.format("statestore").load(str(ck))
            .select(doc.contains('"open":{').alias("has_open"), F.length(doc).alias("len"))
            .groupBy("has_open").agg(F.count("*").alias("n"), F.avg("len").alias("mean"), F.max("len").alias("max"))
            .collect()}
    return {"store": store, "seconds": round(elapsed, 1), "triggers": triggers, "writer": stats,
            "state_dir_bytes": state_bytes, "state_dir_files": state_files,
            "checkpoint_bytes": ck_bytes, "checkpoint_files": ck_files,
            "driver_open_transactions": stats[-1]["open"] if stats else None,
            "docs_open": docs.get(True), "docs_closed": docs.get(False)}


def scale_main(args: argparse.Namespace) -> int:
    import resource

    from streaming.pipeline import spark_session

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="txnwatch-state-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        now_ms = 1_700_000_000_000
        t0 = time.perf_counter()
        files = synthetic_files(work / "events", producers=args.scale_producers, open_txns=args.scale_open,
                                files=args.scale_files, extra_triggers=args.scale_triggers, touch=args.scale_touch,
                                partitions=args.scale_partitions, now_ms=now_ms)
        print(f"state at scale: {args.scale_producers:,} producer ids, {args.scale_open:,} open, "
              f"{args.scale_partitions} partitions; {len(files)} event files written in "
              f"{time.perf_counter() - t0:.1f} s; load average {os.getloadavg()[0]:.2f}", flush=True)
        # The HDFS-backed store keeps every key's row in the executor's heap (local mode: the
        # driver's), in up to spark.sql.streaming.maxBatchesToRetainInMemory versions.
        spark = spark_session(app="txnwatch-state-scale", master=args.master,
                              conf={"spark.sql.shuffle.partitions": str(args.shuffle_partitions),
                                    "spark.driver.memory": args.driver_memory})
        results = []
        for store in args.store:
            r = measure_scale(spark, store, work / "events", work, [n for _p, n in files],
                              shuffle_partitions=args.shuffle_partitions, timeout_s=args.timeout)
            r["load_average"] = round(os.getloadavg()[0], 2)
            results.append(r)
            _print_scale(r, args)
        spark.stop()
        if args.json:
            print(json.dumps({"producers": args.scale_producers, "open": args.scale_open,
                              "partitions": args.scale_partitions, "files": args.scale_files,
                              "steady_triggers": args.scale_triggers, "touch": args.scale_touch,
                              "shuffle_partitions": args.shuffle_partitions, "python": platform.python_version(),
                              "driver_max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                              "results": results}, indent=2))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _print_scale(r: dict, args: argparse.Namespace) -> None:
    print(f"{r['store']}: {r['seconds']} s for {len(r['triggers'])} triggers, load average {r['load_average']}")
    print(f"  {'batch':>5} {'rows in':>9} {'keys':>8} {'trigger ms':>10} {'state upd ms':>12} {'commit ms':>9} "
          f"{'state rows':>10} {'state mem B':>13} {'py CPU s':>8} {'py ms/key':>9} {'jvm CPU s':>9}")
    for t in r["triggers"]:
        py, jvm, k = t.get("python_cpu_s"), t.get("jvm_cpu_s"), t.get("keys") or 0
        per_key = f"{1000 * py / k:.3f}" if py is not None and k else "-"
        print(f"  {t['batch']:>5} {t['rows_in']:>9,} {k:>8,} {t['trigger_ms'] or 0:>10,} "
              f"{t['state_update_ms'] or 0:>12,} {t['state_commit_ms'] or 0:>9,} {t['state_rows'] or 0:>10,} "
              f"{t['state_memory_bytes'] or 0:>13,} {py if py is not None else float('nan'):>8.1f} {per_key:>9} "
              f"{jvm if jvm is not None else float('nan'):>9.1f}")
    fill = [t for t in r["triggers"] if t["batch"] < args.scale_files and t.get("python_cpu_s") is not None]
    if fill:
        py = sum(t["python_cpu_s"] for t in fill)
        k = sum(t["keys"] for t in fill)
        print(f"  Python workers' CPU while the producer ids came in: {py:,.1f} s for {k:,} keys = "
              f"{1000 * py / max(k, 1):.3f} ms per key (JVM {sum(t['jvm_cpu_s'] for t in fill):,.1f} s)")
    steady = [t for t in r["triggers"] if t["batch"] >= args.scale_files]
    last = r["triggers"][-1] if r["triggers"] else {}
    rows = last.get("state_rows") or 0
    print(f"  state store: {rows:,} rows; state/ on disk {r['state_dir_bytes']:,} B in {r['state_dir_files']} files; "
          f"checkpoint {r['checkpoint_bytes']:,} B")
    if steady:
        med = sorted(t["trigger_ms"] for t in steady)[len(steady) // 2]
        upd = sorted(t["state_update_ms"] or 0 for t in steady)[len(steady) // 2]
        print(f"  steady triggers ({args.scale_touch:,} events each, full store): median trigger {med:,} ms, "
              f"state update {upd:,} ms")
    mem = last.get("state_memory_bytes")
    if mem and rows:
        print(f"  state store memory (memoryUsedBytes) {mem:,} B = {mem / rows:,.0f} B per producer id")
    do, dc = r.get("docs_open"), r.get("docs_closed")
    if do and dc:
        extra = do[1] - dc[1]
        print(f"  state documents: {do[0]:,} with an open transaction, mean {do[1]:,.0f} B (max {do[2]:,}); "
              f"{dc[0]:,} without, mean {dc[1]:,.0f} B; an open transaction adds {extra:,.0f} B "
              f"(target <= 1 KB: {'MET' if extra <= 1024 else 'NOT MET'})")
    if mem and rows and do and dc:
        per_row = mem / rows
        print(f"  memory per open transaction, counting its producer's whole row: "
              f"{per_row * do[1] / ((do[0] * do[1] + dc[0] * dc[1]) / rows):,.0f} B "
              f"(memoryUsedBytes shared out by document length)")


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
    g = ap.add_argument_group("state at scale (issue 23 item 4): synthetic events straight into the state operator")
    g.add_argument("--scale-producers", type=int, default=0,
                   help="producer ids (e.g. 1000000); 0 = the random-mix measurement above instead")
    g.add_argument("--scale-open", type=int, default=50000, help="of which with an open transaction")
    g.add_argument("--scale-partitions", type=int, default=1000, help="partitions they write to")
    g.add_argument("--scale-files", type=int, default=10, help="triggers that bring the producers in")
    g.add_argument("--scale-triggers", type=int, default=5, help="steady-state triggers after that")
    g.add_argument("--scale-touch", type=int, default=1000, help="events per steady-state trigger")
    g.add_argument("--driver-memory", default="4g", help="spark.driver.memory (local mode: the executor's heap too)")
    g.add_argument("--timeout", type=float, default=3600.0, help="seconds per store before the query is stopped")
    args = ap.parse_args(argv)
    if args.scale_producers:
        return scale_main(args)

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
