"""The live path at the largest cluster sizes (issue 23 item 1), simulated below the transport.

A cluster of ``--brokers`` brokers, ``--partitions`` data partitions and ``--open`` open
transactions, ``--hanging`` of them hanging (two hours old, no coordinator record) and ``--late``
of them late (an hour old, the coordinator still has them Ongoing), the rest young and moving
(bench/cluster_sim.py: ``--finish`` of them commit and as many start between two triggers,
``--progress`` append). The brokers are simulated in this process *under kafka-python's
transport* (bench/cluster_sim.py replaces ``KafkaConnectionManager._build_transport``): the
watchdog's client (KafkaWire), planner (``KafkaStreamReader``, probe mode, as ``txnwatch run``
configures it), executor reads (``read_arrow``: the Arrow batches the source yields), state (``LocalStates``: the state function
per producer id), verdicts and broker confirmation (``BatchWriter``: Enricher, DescribeProducers /
DescribeTransactions / ListTransactions through kafka-python's admin client), and sinks (a JSONL
file; the enricher's, availability's and pinned-LSO's state files) are the product's code. What
Spark itself adds per micro-batch is not in these figures: the job runs in process, micro-batch
by micro-batch, as tests/live_inprocess.py runs it, plus the offsets' JSON round trip and write
that Spark's offset log does every trigger (stage ``offset log``).

Per trigger it prints the stage breakdown (exclusive wall time per stage, and how much of it the
simulated brokers spent answering, which a real cluster spends on its own machines), the
requests by API, and at the end the medians over the triggers after the first (the first
replays ``__transaction_state`` from its start and probes every partition with an open
transaction), the time to the first hanging alert, and the driver's RSS::

    python bench/cluster_scale.py --partitions 200000 --brokers 1000 --open 50000 --hanging 300

``--profile PATH`` writes a cProfile of one steady-state trigger (the third) to PATH and prints
its top functions. The machine is shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.cluster_sim import BOOTSTRAP, SimCluster, install, self_check
from streaming.alerts import REQUIRED_PERMISSION, Enricher, abort_commands
from streaming.availability import Availability
from streaming.config import as_config, engine_config, load
from streaming.microbatch import BatchWriter, LocalStates, SinkSet
from streaming.pinned_lso import PinnedLso
from streaming.runner import alert_config, broker_confirm, source_options
from streaming.sinks.jsonl import JsonlSink
from streaming.sources.kafka import KafkaStreamReader, close_wires, read_arrow
from streaming.sources.kafka_plan_state import PlanState
from streaming.sources.kafka_unread import LEDGER_OPTION, ledger_path

STAGES = ("metadata", "ListOffsets", "plan", "probe fetches", "offset log", "read", "state", "verdicts", "sinks")


class Stages:
    """Exclusive wall time per stage (a nested stage's time is not counted in the outer one), and
    the simulated brokers' answering time that fell within each stage."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.stack: list[str] = []
        self.wall: collections.Counter = collections.Counter()
        self.simt: collections.Counter = collections.Counter()
        self.cpu: collections.Counter = collections.Counter()  # process CPU (every thread) per stage
        self._t = time.perf_counter()
        self._c = time.process_time()
        self._s = 0.0

    def _sim_total(self) -> float:
        return sum(self.sim.sim_s.values())

    def _switch(self) -> None:
        now, c, s = time.perf_counter(), time.process_time(), self._sim_total()
        if self.stack:
            self.wall[self.stack[-1]] += now - self._t
            self.cpu[self.stack[-1]] += c - self._c
            self.simt[self.stack[-1]] += s - self._s
        self._t, self._c, self._s = now, c, s

    def enter(self, name: str) -> None:
        self._switch()
        self.stack.append(name)

    def leave(self) -> None:
        self._switch()
        self.stack.pop()

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*a, **kw):
            self.enter(name)
            try:
                return fn(*a, **kw)
            finally:
                self.leave()
        return timed

    def reset(self) -> tuple[dict, dict]:
        out = dict(self.wall), dict(self.simt)
        self.last_cpu = dict(self.cpu)
        self.cpu.clear()
        self.wall.clear()
        self.simt.clear()
        return out


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    vals = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            k, v = line.split(":")
            vals[k] = int(v.split()[0]) / 1024
    return vals.get("VmRSS", 0.0), vals.get("VmHWM", 0.0)


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Job:
    """The live job's micro-batches in this process, wired as ``pipeline.start_query`` wires them."""

    def __init__(self, sim: SimCluster, tmp: Path, args: argparse.Namespace) -> None:
        cfg = load(None, env={})
        cfg["cluster"] = "bench"
        cfg["kafka"]["bootstrap_servers"] = BOOTSTRAP
        cfg["kafka"]["metadata_max_age_ms"] = args.metadata_max_age_ms
        cfg["kafka"]["topic_pattern"] = "t[0-9]+"
        config = as_config(cfg)
        fmt, opts, _ = source_options(config, "kafka", None)
        assert fmt == "kafka-txn" and opts["read_mode"] == "probe", opts
        ck = str(tmp / "ck")
        os.makedirs(ck, exist_ok=True)
        ledger = ledger_path(ck)
        opts[LEDGER_OPTION] = ledger
        self.offset_dir = Path(ck) / "offsets"
        self.offset_dir.mkdir()
        self.stages = st = Stages(sim)
        self.reader = KafkaStreamReader(opts)
        pl = self.reader.planner
        pl._discover = st.wrap("metadata", pl._discover)
        pl._offsets_settled = st.wrap("ListOffsets", pl._offsets_settled)
        pl._probe_fetch = st.wrap("probe fetches", pl._probe_fetch)
        # the planner state's JSON form, which Spark's offset log stores and hands back each trigger
        if not hasattr(PlanState, "_bench_plain"):
            PlanState._bench_plain = (PlanState.to_json, PlanState.from_json.__func__)
        to_json, from_json = PlanState._bench_plain
        PlanState.to_json = st.wrap("offset log", to_json)
        PlanState.from_json = classmethod(st.wrap("offset log", from_json))
        ecfg = engine_config(config, coordinator_available=True)
        self.states = LocalStates(ecfg)
        self.states.micro_batch = st.wrap("state", self.states.micro_batch)
        self.evidence = broker_confirm(config)
        self.enricher = Enricher(alert_config(config, live=True), ck + "/txnwatch-sink.json", broker=self.evidence)
        self.enricher.save = st.wrap("sinks", self.enricher.save)
        availability = Availability(ck + "/txnwatch-availability.json")
        availability.save = st.wrap("sinks", availability.save)
        acfg = alert_config(config, live=True)
        pinned = PinnedLso(ck + "/txnwatch-pinned-lso.json",
                           lambda topic: ecfg.thresholds_for(topic).max_timeout_ms + ecfg.thresholds_for(topic).padding_ms,
                           functools.partial(abort_commands, cfg=acfg), REQUIRED_PERMISSION)
        pinned.save = st.wrap("sinks", pinned.save)
        self.alerts: list[dict[str, Any]] = []
        jsonl = JsonlSink(str(tmp / "alerts.jsonl"))
        self.sinks = SinkSet(sinks=[st.wrap("sinks", jsonl), self.alerts.extend])
        self.write = st.wrap("verdicts", BatchWriter(self.enricher, self.sinks, availability, ledger, pinned))
        self.offset: dict | None = None
        self.batch_id = 0
        self.rows = 0

    def trigger(self) -> None:
        st = self.stages
        st.enter("plan")
        try:
            start = self.offset or self.reader.initialOffset()
            end = self.reader.latestOffset(start)
        finally:
            st.leave()
        st.enter("offset log")  # what Spark's offset log does with the plan every trigger
        text = json.dumps(end)
        (self.offset_dir / str(self.batch_id)).write_text(text)
        end = json.loads(text)
        st.leave()
        st.enter("read")
        try:
            batches = [b for b in (read_arrow(p, self.reader.opts) for p in self.reader.partitions(start, end))
                       if b is not None]
            events = pa.Table.from_batches(batches) if batches else None
        finally:
            st.leave()
        self.rows = 0 if events is None else len(events)
        out = self.states.micro_batch(events)
        self.write(out, self.batch_id)
        self.batch_id += 1
        self.offset = end

    def close(self) -> None:
        self.evidence.close()
        close_wires()


def _fmt_stage(wall: dict, simt: dict, name: str) -> str:
    w, s = wall.get(name, 0.0), simt.get(name, 0.0)
    return f"{w:6.2f}" + (f" ({s:4.2f})" if s >= 0.005 else "       ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200_000)
    ap.add_argument("--brokers", type=int, default=1000)
    ap.add_argument("--open", type=int, default=50_000, help="open transactions at any time")
    ap.add_argument("--hanging", type=int, default=300)
    ap.add_argument("--late", type=int, default=200)
    ap.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    ap.add_argument("--finish", type=float, default=0.05, help="share of the young transactions that commit "
                                                               "between two triggers (as many start)")
    ap.add_argument("--progress", type=float, default=0.05, help="share of the young ones that append a batch")
    ap.add_argument("--triggers", type=int, default=8)
    ap.add_argument("--metadata-max-age-ms", type=int, default=30_000)
    ap.add_argument("--profile", default=None, help="write a cProfile of the third trigger here")
    args = ap.parse_args()

    print(f"load average before: {_load()}", flush=True)
    self_check()
    t0 = time.monotonic()
    sim = SimCluster(args.partitions, args.brokers, args.open, args.hanging, args.late, per_topic=args.per_topic,
                     finish=args.finish, progress=args.progress)
    rss0, _ = _rss_mib()
    print(f"cluster model: {args.partitions} partitions in {len(sim.topics)} topics, {args.brokers} brokers, "
          f"{sim.open_count()} open transactions ({args.hanging} hanging, {args.late} late), "
          f"{sim.stored_bytes() / 2**20:.1f} MiB of batches, built in {time.monotonic() - t0:.1f} s; "
          f"process RSS {rss0:.0f} MiB", flush=True)
    install(sim)
    tmp = Path(tempfile.mkdtemp(prefix="txnwatch-cluster-scale-"))
    hanging_keys, late_keys = sim.hanging_keys(), sim.late_keys()
    job = Job(sim, tmp, args)
    started = time.monotonic()
    first_alert: float | None = None
    found: set[tuple] = set()
    other_hanging: set[tuple] = set()
    late_found: set[tuple] = set()
    rows = []
    head = " ".join(f"{s:>14}" for s in STAGES)
    print(f"\n{'trig':>4} {'total':>6} {'cpu':>6} {'sim':>5} {head} {'rows':>7} {'reqs':>5}  requests by API")
    for n in range(args.triggers):
        if n:
            sim.step()
        before = collections.Counter(sim.requests)
        sim_before = sum(sim.sim_s.values())
        prof = cProfile.Profile() if args.profile and n == 2 else None
        seen = len(job.alerts)
        t, cpu0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        job.trigger()
        if prof:
            prof.disable()
        total = time.perf_counter() - t
        cpu = time.process_time() - cpu0  # every thread of this process: the client's IO thread too
        wall, simt = job.stages.reset()
        reqs = sim.requests - before
        for a in job.alerts[seen:]:
            key = (a.get("topic"), a.get("partition"), a.get("producer_id"), a.get("first_offset"))
            if a.get("status") == "hanging":
                (found if key in hanging_keys else other_hanging).add(key)
                if first_alert is None:
                    first_alert = time.monotonic() - started
            elif a.get("status") == "late" and key in late_keys:
                late_found.add(key)
        sim_s = sum(sim.sim_s.values()) - sim_before
        rows.append({"total": total, "cpu": cpu, "sim": sim_s, "wall": wall, "simt": simt, "reqs": sum(reqs.values()),
                     "by_api": reqs, "stage_cpu": job.stages.last_cpu})
        stages = " ".join(f"{_fmt_stage(wall, simt, s):>14}" for s in STAGES)
        apis = ", ".join(f"{k} {v}" for k, v in sorted(reqs.items()))
        print(f"{n:>4} {total:6.2f} {cpu:6.2f} {sim_s:5.2f} {stages} {job.rows:>7} {sum(reqs.values()):>5}  {apis}", flush=True)
        if prof:
            prof.dump_stats(args.profile)
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
            profile_text = s.getvalue()
    job.close()
    rss, hwm = _rss_mib()
    steady = rows[1:] or rows
    med = statistics.median(r["total"] for r in steady)
    med_sim = statistics.median(r["sim"] for r in steady)
    med_net = statistics.median(r["cpu"] - r["sim"] for r in steady)
    med_reqs = statistics.median(r["reqs"] for r in steady)
    med_cpu = statistics.median(r["cpu"] for r in steady)
    print("(seconds; total = wall time of the trigger, cpu = this process's CPU time in it, which does not grow "
          "when other jobs share the cores; per stage: exclusive wall time, in brackets the CPU time the simulated "
          "brokers spent answering within it; sim = all of the brokers' answering CPU in the trigger)")
    print("steady-state medians per stage: " + ", ".join(
        f"{s} {statistics.median(r['wall'].get(s, 0.0) for r in steady):.2f}" for s in STAGES))
    print("steady-state medians per stage, CPU of this process (every thread: the client's IO thread works for "
          "the stage that waits on it): " + ", ".join(
              f"{s} {statistics.median(r['stage_cpu'].get(s, 0.0) for r in steady):.2f}" for s in STAGES))
    by_api = collections.Counter()
    for r in steady:
        by_api.update(r["by_api"])
    print("requests per trigger by API (mean over steady triggers): " + ", ".join(
        f"{k} {v / len(steady):.0f}" for k, v in sorted(by_api.items())) + f"; {args.brokers} brokers")
    print(f"median trigger {med:.2f} s wall, {med_cpu:.2f} s CPU of which the simulated brokers' answers "
          f"{med_sim:.2f} s: the watchdog's own CPU per trigger {med_net:.2f} s")
    print(f"hanging found {len(found)}/{len(hanging_keys)}, late found {len(late_found)}/{len(late_keys)}, "
          f"hanging alerts on other transactions {len(other_hanging)}")
    print(f"driver RSS {rss:.0f} MiB (peak {hwm:.0f} MiB; the cluster model alone {rss0:.0f} MiB before the job "
          f"started)")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs ({_cpu()}), Python {platform.python_version()}; "
          f"load average after {_load()}")
    if args.profile:
        print(f"\ncProfile of trigger 2 (written to {args.profile}):\n{profile_text}")
    shutil.rmtree(tmp, ignore_errors=True)
    alert = f"{first_alert:.1f}" if first_alert is not None else "none"
    print(f"cluster-scale: partitions {args.partitions}, brokers {args.brokers}, open {args.open}, median trigger "
          f"{med:.2f} s, requests/trigger {med_reqs:.0f}, first alert {alert} s, hanging found "
          f"{len(found)}/{len(hanging_keys)}, driver RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
