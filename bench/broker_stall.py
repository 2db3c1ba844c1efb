"""One stalled broker against the others' trigger time (issue 20 item 4), against the broker fake.

Serves ``--partitions`` data partitions (spread over ``--brokers`` brokers by the fake's
``partition % brokers`` leadership) plus ``--txn-partitions`` ``__transaction_state`` partitions,
with light transactional traffic on every broker, and runs the ``kafka-txn`` source's triggers
the way Spark does, without Spark: ``latestOffset`` on the driver, then every input partition
(one per leader broker) read concurrently, one thread each, as executor tasks run. It does this
twice in one process, on fresh fake clusters: once with every broker healthy, once with broker
``--stall-node`` hung from the ``--stall-after``-th trigger on (every request to it read and
never answered, as when its log disk stalls and the request handler threads block).

Printed per trigger and run: the trigger's time (planning + the slowest read), the time until
the *healthy* brokers' partitions were planned and read (planning + the slowest healthy read),
and how many partitions were unavailable. The summary line is the ratio of the median healthy
time with the stall over the median without, over the triggers after the stall began (1.0 =
unchanged), plus the worst single trigger (the first one after the stall began pays
``broker_timeout_ms`` once: it is the deadline that decides the broker is not answering).

    PYTHONPATH=. .venv/bin/python bench/broker_stall.py --partitions 300 --triggers 12

The fake answers from Python on the same cores as the client: its time is part of what is
measured.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streaming.simulate.encode import encode_batch
from streaming.sources.kafka import KafkaStreamReader, close_wires, read_partition
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch, segment_file_name


def build_root(root: Path, partitions: int, txn_partitions: int) -> list[tuple[str, int]]:
    tps = [("orders", p) for p in range(partitions)]
    for t, p in tps + [("__transaction_state", p) for p in range(txn_partitions)]:
        d = root / f"{t}-{p}"
        d.mkdir(parents=True)
        (d / segment_file_name(0)).touch()
    return tps


def traffic(broker: FakeKafkaBroker, tps: list[tuple[str, int]], every_ms: int, stop: threading.Event) -> None:
    """One committed transaction (data batch + COMMIT marker) every ``every_ms`` on a random partition."""
    rng = random.Random(11)
    pid = 9000
    while not stop.wait(every_ms / 1000):
        t, p = rng.choice(tps)
        now = int(time.time() * 1000)
        pid += 1
        try:
            off = broker.append_batches(t, p, encode_batch(0, 2, producer_id=pid, producer_epoch=0, base_sequence=0,
                                                           is_transactional=True, base_timestamp=now,
                                                           max_timestamp=now))
            broker.append_batches(t, p, build_control_batch(off + 2, pid, 0, commit=True, coordinator_epoch=0, timestamp_ms=now))
        except Exception:  # the traffic thread must not die mid-run; the run reports what it read
            logging.getLogger(__name__).debug("traffic append failed", exc_info=True)


def run(args: argparse.Namespace, stall: bool) -> list[dict]:
    tmp = Path(tempfile.mkdtemp(prefix="txnwatch-stall-"))
    rows: list[dict] = []
    try:
        tps = build_root(tmp / "logs", args.partitions, args.txn_partitions)
        with FakeKafkaBroker(tmp / "logs", num_nodes=args.brokers) as broker:
            stop = threading.Event()
            th = threading.Thread(target=traffic, args=(broker, tps, args.traffic_ms, stop), daemon=True)
            th.start()
            r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]',
                                   "read_mode": args.read_mode, "request_timeout_ms": str(args.request_timeout_ms),
                                   "broker_timeout_ms": str(args.broker_timeout_ms), "retry_backoff_ms": "100",
                                   "cluster": "bench", "probe_follow_after_ms": "3600000"})
            start = r.initialOffset()
            pool = ThreadPoolExecutor(max_workers=args.brokers + 1)
            try:
                for i in range(args.triggers):
                    if stall and i == args.stall_after:
                        broker.stall(count=1 << 30, node_id=args.stall_node)
                    t0 = time.perf_counter()
                    end = r.latestOffset(start, None)
                    planned = time.perf_counter()
                    groups = r.partitions(start, end)

                    def read(g):
                        t = time.perf_counter()
                        read_partition(g, r.opts)
                        return g.broker, time.perf_counter() - t

                    done = list(pool.map(read, groups))
                    total = time.perf_counter() - t0
                    healthy = [d for b, d in done if b != args.stall_node]
                    rows.append({"trigger": i, "total": total, "plan": planned - t0,
                                 "healthy": (planned - t0) + max(healthy, default=0.0),
                                 "unavailable": len(end.get("unavail", {}))})
                    start = end
                    time.sleep(args.interval_ms / 1000)
            finally:
                stop.set()
                th.join(timeout=5)
                pool.shutdown(wait=False, cancel_futures=True)
                close_wires()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=300)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--txn-partitions", type=int, default=10)
    ap.add_argument("--triggers", type=int, default=12)
    ap.add_argument("--stall-after", type=int, default=2, help="trigger at which the broker hangs")
    ap.add_argument("--stall-node", type=int, default=2)
    ap.add_argument("--read-mode", default="probe", choices=["probe", "full"])
    ap.add_argument("--traffic-ms", type=int, default=50)
    ap.add_argument("--interval-ms", type=int, default=200, help="pause between triggers")
    ap.add_argument("--request-timeout-ms", type=int, default=30000)
    ap.add_argument("--broker-timeout-ms", type=int, default=1000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    print(f"# {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; {args.partitions} "
          f"partitions on {args.brokers} brokers, read_mode={args.read_mode}, broker {args.stall_node} hangs from "
          f"trigger {args.stall_after}; request_timeout_ms={args.request_timeout_ms}, "
          f"broker_timeout_ms={args.broker_timeout_ms}")
    base = run(args, stall=False)
    stalled = run(args, stall=True)
    print(f"{'trigger':>7} | {'no stall: plan':>14} {'total':>7} {'healthy':>8} | {'stall: plan':>11} {'total':>7} "
          f"{'healthy':>8} {'unavailable':>11}")
    for a, b in zip(base, stalled, strict=True):
        print(f"{a['trigger']:>7} | {a['plan'] * 1000:>12.0f}ms {a['total'] * 1000:>5.0f}ms {a['healthy'] * 1000:>6.0f}ms | "
              f"{b['plan'] * 1000:>9.0f}ms {b['total'] * 1000:>5.0f}ms {b['healthy'] * 1000:>6.0f}ms "
              f"{b['unavailable']:>11}")
    after = slice(args.stall_after, None)
    med_base = statistics.median(r["healthy"] for r in base[after])
    med_stall = statistics.median(r["healthy"] for r in stalled[after])
    worst = max(r["healthy"] for r in stalled[after])
    print(f"healthy brokers' trigger time, median over triggers {args.stall_after}..{args.triggers - 1}: "
          f"{med_base * 1000:.0f} ms without the stall, {med_stall * 1000:.0f} ms with it: ratio "
          f"{med_stall / med_base:.2f}; worst single trigger with the stall {worst * 1000:.0f} ms "
          f"(broker_timeout_ms = {args.broker_timeout_ms})")


if __name__ == "__main__":
    main()
