"""Where one ``latestOffset`` (Spark planning) goes at scale, against the broker fake.

Starts the fake the way ``bench/live_scale.py`` does (``--partitions`` data partitions, 100 per
topic, plus ``--txn-partitions`` ``__transaction_state`` partitions over ``--brokers`` brokers),
then:

1. times ``KafkaStreamReader.latestOffset`` end to end (``--rounds`` calls after
   ``initialOffset``), with the requests the fake received per call;
2. runs the same calls again under ``cProfile`` on every thread involved: the caller
   (``latestOffset``), KafkaWire's IO thread (encoding, decoding, bookkeeping) and the fake's
   connection threads (answering Metadata and ListOffsets), and prints each one's top entries.

    PYTHONPATH=. .venv/bin/python bench/plan_profile.py --partitions 10000

No Spark: this is the driver-side planning path only.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.live_scale import build_root
from streaming.sources import kafka as ksrc
from streaming.sources.kafka_clients import client_for
from tests.kafka_fake_broker import FakeKafkaBroker


def _report(prof, label: str, top: int, rounds: int) -> None:
    stats = prof if isinstance(prof, pstats.Stats) else pstats.Stats(prof)
    total = max((v[3] for v in stats.stats.values()), default=0.0)  # largest cumulative time
    print(f"\n--- {label}: {total * 1000 / rounds:.0f} ms per latestOffset (largest cumulative entry)")
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats.stream = out
        stats.sort_stats(order).print_stats(top)
        lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
        first = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
        print(f"top {top} by {order} (seconds over {rounds} calls):")
        print("\n".join(lines[first:first + top + 1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--txn-partitions", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--metadata-max-age-ms", type=int, default=None,
                    help="KafkaWire metadata cache age (default: KafkaWire's own default)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="txnwatch-plan-profile-"))
    try:
        build_root(tmp / "logs", args.partitions, args.txn_partitions, 0, int(time.time() * 1000))
        with FakeKafkaBroker(tmp / "logs", num_nodes=args.brokers) as broker:
            opts = {"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": "t.*", "cluster": "bench",
                    "starting_offsets": "earliest"}
            reader = ksrc.KafkaStreamReader(opts)
            if args.metadata_max_age_ms is not None:
                w = client_for(reader.opts)
                w._config["metadata_max_age_ms"] = args.metadata_max_age_ms
            t0 = time.perf_counter()
            start = reader.initialOffset()
            print(f"initialOffset: {(time.perf_counter() - t0) * 1000:.0f} ms, {len(start['parts'])} partitions")
            times = []
            last_reqs: list = []
            for i in range(args.rounds):
                before = len(broker.requests)
                t0 = time.perf_counter()
                end = reader.latestOffset(start, None)
                ms = (time.perf_counter() - t0) * 1000
                times.append(ms)
                last_reqs = broker.requests[before:]
                apis = collections.Counter(r.api for r in last_reqs)
                print(f"latestOffset {i}: {ms:7.0f} ms  requests: "
                      + " ".join(f"{k}={v}" for k, v in sorted(apis.items())))
                start = end
            steady = times[1:] or times
            print(f"median latestOffset (calls 1..{len(times) - 1}): {statistics.median(steady):.0f} ms")

            # the same calls again, profiled on every thread they use: the caller (latestOffset),
            # KafkaWire's IO thread (encode, decode, retries) and the fake's connection threads
            w = client_for(reader.opts)
            io_prof, caller_prof = cProfile.Profile(), cProfile.Profile()
            fake_profs: dict[int, cProfile.Profile] = {}
            orig = broker._handle_frame

            def handle(node, payload):
                prof = fake_profs.setdefault(threading.get_ident(), cProfile.Profile())
                prof.enable()
                try:
                    return orig(node, payload)
                finally:
                    prof.disable()

            async def io_on():
                io_prof.enable()

            async def io_off():
                io_prof.disable()

            broker._handle_frame = handle
            w._transport.run(io_on)
            t0 = time.perf_counter()
            caller_prof.enable()
            for _ in range(args.rounds):
                start = reader.latestOffset(start, None)
            caller_prof.disable()
            wall = (time.perf_counter() - t0) * 1000 / args.rounds
            w._transport.run(io_off)
            broker._handle_frame = orig
            print(f"\nunder cProfile (all threads): {wall:.0f} ms per latestOffset")
            _report(caller_prof, "caller thread (KafkaStreamReader.latestOffset)", args.top, args.rounds)
            _report(io_prof, "KafkaWire IO thread", args.top, args.rounds)
            fake = pstats.Stats(*fake_profs.values()) if fake_profs else None
            if fake is not None:
                _report(fake, f"fake broker ({len(fake_profs)} connection threads)", args.top, args.rounds)
    finally:
        ksrc.close_wires()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
