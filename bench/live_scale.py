"""Scale benchmark of the live path (issue 12 item 6) against the broker fake.

Serves ``--partitions`` data partitions (100 per topic) over ``--brokers`` brokers plus
``--txn-partitions`` ``__transaction_state`` partitions, light transactional traffic (one committed
transaction every ``--traffic-ms`` on a random partition) and ``--hanging`` hanging transactions
(written two hours ago, never ended, no coordinator record), runs the streaming job for
``--triggers`` micro-batches and prints, per trigger: planning time (Spark's ``latestOffset`` +
``queryPlanning`` + ``getBatch``), execution time (``addBatch``: read, state, sinks), requests the
fake received by API, and the time to the first alert.

``--read-mode both`` (the default) runs the job twice in this process, with the source option
``read_mode=full`` and then ``read_mode=probe`` (each on a fresh log directory, fake cluster and
checkpoint; the SparkSession is shared, after an unreported warm-up job of
``--warmup-partitions`` partitions so that the first mode does not pay Spark's warm-up alone),
and prints both tables side by side plus one summary
line per mode: median trigger time over the batches after the first, median requests per
trigger, time to the first alert.

    PYTHONPATH=. .venv/bin/python bench/live_scale.py --partitions 10000 --triggers 6

The fake answers from Python on the same 2 cores as Spark: its time is part of what is measured.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streaming.alerts import AlertConfig
from streaming.config import as_config, engine_config, load
from streaming.pipeline import SinkSet, spark_session, start_query
from streaming.runner import broker_confirm
from streaming.simulate.encode import encode_batch
from streaming.sources.kafka_wire import METADATA_MAX_AGE_MS
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch, segment_file_name

PER_TOPIC = 100


def build_root(root: Path, partitions: int, txn_partitions: int, hanging: int, now_ms: int) -> list[tuple[str, int]]:
    """Empty partitions, plus the hanging transactions' first batches; returns where they are."""
    topics = max(1, (partitions + PER_TOPIC - 1) // PER_TOPIC)
    tps = [(f"t{i:03d}", p) for i in range(topics) for p in range(min(PER_TOPIC, partitions - i * PER_TOPIC))]
    for t, p in tps:
        d = root / f"{t}-{p}"
        d.mkdir(parents=True)
        (d / segment_file_name(0)).touch()
    for p in range(txn_partitions):
        d = root / f"__transaction_state-{p}"
        d.mkdir(parents=True)
        (d / segment_file_name(0)).touch()
    stuck = random.Random(7).sample(tps, hanging)
    old = now_ms - 2 * 3600 * 1000
    for i, (t, p) in enumerate(stuck):
        batch = encode_batch(0, 3, producer_id=5000 + i, producer_epoch=0, base_sequence=0, is_transactional=True,
                             base_timestamp=old, max_timestamp=old)
        (root / f"{t}-{p}" / segment_file_name(0)).write_bytes(batch)
    return stuck


def traffic(broker: FakeKafkaBroker, tps: list[tuple[str, int]], every_ms: int, stop: threading.Event) -> None:
    """One committed transaction (one data batch + its COMMIT marker) every ``every_ms``."""
    rng = random.Random(11)
    pid = 9000
    while not stop.wait(every_ms / 1000):
        t, p = rng.choice(tps)
        now = int(time.time() * 1000)
        pid += 1
        base = broker.append_batches(t, p, encode_batch(0, 2, producer_id=pid, producer_epoch=0, base_sequence=0,
                                                        is_transactional=True, base_timestamp=now, max_timestamp=now))
        broker.append_raw(t, p, build_control_batch(base + 2, pid, 0, commit=True, coordinator_epoch=0,
                                                    timestamp_ms=now))


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def run(args: argparse.Namespace, spark, mode: str) -> dict:
    """One measured run in read mode ``mode`` (its own log directory, fake cluster and checkpoint)."""
    tmp = Path(tempfile.mkdtemp(prefix="txnwatch-live-scale-"))
    now = int(time.time() * 1000)
    t0 = time.monotonic()
    stuck = build_root(tmp / "logs", args.partitions, args.txn_partitions, args.hanging, now)
    print(f"[{mode}] built {args.partitions} data + {args.txn_partitions} coordinator partitions in "
          f"{time.monotonic() - t0:.1f}s; hanging on {stuck}; load average {_load()}", flush=True)
    cfg = load(None, env={})
    cfg["cluster"] = "bench"
    stop = threading.Event()
    with FakeKafkaBroker(tmp / "logs", num_nodes=args.brokers) as broker:
        tps = [(t, p) for t, ps in broker.topics().items() if t != "__transaction_state" for p in ps]
        feeder = threading.Thread(target=traffic, args=(broker, tps, args.traffic_ms, stop), daemon=True)
        feeder.start()
        first_alert: list[float] = []
        batches: list[dict] = []
        seen = [0]

        def on_batch(batch_id: int, stats: dict) -> None:
            reqs = broker.requests
            n = len(reqs)
            by_api = collections.Counter(r.api for r in reqs[seen[0]:n])
            seen[0] = n
            batches.append({"id": batch_id, "by_api": by_api, "rows": stats["rows"]})
            if not first_alert and any(a["status"] == "hanging" for a in stats["alerts"]):
                first_alert.append(time.monotonic())

        sinks = SinkSet(sinks=[lambda alerts: None], on_batch=[on_batch])
        opts = {"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": "t.*", "cluster": "bench",
                "read_mode": mode, "metadata_max_age_ms": str(args.metadata_max_age_ms),
                # full mode reads the history (as before); probe mode always starts at the LSO
                **({"starting_offsets": "earliest"} if mode == "full" else {})}
        cfg["kafka"]["bootstrap_servers"] = broker.bootstrap_servers
        evidence = broker_confirm(as_config(cfg))  # what `txnwatch run` asks the cluster on a finding
        started = time.monotonic()
        q = start_query(spark, "kafka-txn", opts, engine_config(as_config(cfg), coordinator_available=True),
                        AlertConfig("bench:9092"), sinks, str(tmp / "ck"), trigger={"processingTime": "0 seconds"},
                        broker=evidence)
        try:
            while len(batches) < args.triggers and q.exception() is None:
                time.sleep(0.2)
        finally:
            q.stop()
            stop.set()
            evidence.close()
        if q.exception() is not None:
            raise SystemExit(f"query failed: {q.exception()}")
        progress = [p for p in q.recentProgress if p.get("batchId") is not None]
    shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    by_id = {b["id"]: b for b in batches}
    for p in progress:
        d = p["durationMs"]
        b = by_id.get(p["batchId"])
        if b is None:
            continue
        plan = d.get("latestOffset", 0) + d.get("queryPlanning", 0) + d.get("getBatch", 0)
        rows.append((p["batchId"], plan, d.get("addBatch", 0), d.get("triggerExecution", 0), b["by_api"], b["rows"]))
    steady = rows[1:] or rows  # batch 0 carries Spark start-up and the first full read
    return {
        "mode": mode,
        "rows": rows,
        "median_trigger_ms": statistics.median(r[3] for r in steady) if steady else None,
        "median_plan_ms": statistics.median(r[1] for r in steady) if steady else None,
        "median_exec_ms": statistics.median(r[2] for r in steady) if steady else None,
        "median_requests": statistics.median(sum(r[4].values()) for r in steady) if steady else None,
        "first_alert_s": (first_alert[0] - started) if first_alert else None,
        "load_after": _load(),
    }


_APIS = ("fetch", "list_offsets", "metadata", "api_versions")


def _cell(row) -> str:
    if row is None:
        return f"{'':>6} {'':>6} {'':>7} {'':>6} {'':>4} {'':<15}"
    _, plan, ex, trig, apis, nrows = row
    other = sum(v for k, v in apis.items() if k not in _APIS)
    by_api = "/".join(str(apis.get(k, 0)) for k in _APIS) + (f"+{other}" if other else "")
    return f"{plan:>6} {ex:>6} {trig:>7} {nrows:>6} {sum(apis.values()):>4} {by_api:<15}"


def report(args: argparse.Namespace, results: list[dict]) -> None:
    print(f"\n{args.partitions} data partitions over {args.brokers} brokers, {args.txn_partitions} coordinator "
          f"partitions, master {args.master}, metadata_max_age_ms={args.metadata_max_age_ms}")
    head = f"{'plan':>6} {'exec':>6} {'trigger':>7} {'rows':>6} {'reqs':>4} {'F/LO/Meta/ApiV':<15}"
    print(f"{'':>5}  " + "  |  ".join(f"{r['mode'] + ' (ms)':^{len(head)}}" for r in results))
    print(f"{'batch':>5}  " + "  |  ".join(head for _ in results))
    by_mode = [{row[0]: row for row in r["rows"]} for r in results]
    for bid in sorted({b for m in by_mode for b in m}):
        print(f"{bid:>5}  " + "  |  ".join(_cell(m.get(bid)) for m in by_mode))
    print("(ms; rows = events + progress rows of the batch; reqs = requests the fake received during the "
          "batch, by API: Fetch / ListOffsets / Metadata / ApiVersions (+ others))")
    for r in results:
        alert = f"{r['first_alert_s']:.1f} s" if r["first_alert_s"] is not None else "none"
        print(f"[{r['mode']}] steady state (batches after the first): median trigger {r['median_trigger_ms']} ms "
              f"(planning {r['median_plan_ms']} ms, execution {r['median_exec_ms']} ms), median requests per "
              f"trigger {r['median_requests']}, first alert after {alert}; load average after {r['load_after']}")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--txn-partitions", type=int, default=50)
    ap.add_argument("--hanging", type=int, default=5)
    ap.add_argument("--traffic-ms", type=int, default=200)
    ap.add_argument("--triggers", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--read-mode", default="both", choices=["both", "full", "probe"],
                    help="source option read_mode; both: full, then probe, in this process")
    ap.add_argument("--metadata-max-age-ms", type=int, default=METADATA_MAX_AGE_MS,
                    help="source option metadata_max_age_ms (KafkaWire's discovery cache)")
    ap.add_argument("--warmup-partitions", type=int, default=300,
                    help="first run an unreported job this size (full mode, 3 triggers), so that the "
                         "first measured mode does not pay the JVM's and Python workers' warm-up alone "
                         "(0: no warm-up)")
    args = ap.parse_args()
    modes = ["full", "probe"] if args.read_mode == "both" else [args.read_mode]
    print(f"load average before: {_load()}", flush=True)
    spark = spark_session(master=args.master, conf={"spark.sql.shuffle.partitions": "2"})
    if args.warmup_partitions > 0:
        small = argparse.Namespace(**{**vars(args), "partitions": args.warmup_partitions, "triggers": 3,
                                      "hanging": min(args.hanging, args.warmup_partitions)})
        w = run(small, spark, "full")
        print(f"[warm-up] {args.warmup_partitions} partitions: median trigger {w['median_trigger_ms']} ms "
              f"(not reported below)", flush=True)
    results = [run(args, spark, mode) for mode in modes]
    report(args, results)


if __name__ == "__main__":
    main()
