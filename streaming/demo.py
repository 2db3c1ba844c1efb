"""``txnwatch demo``: the embedded default.

Writes a small cluster log with the scenario writer (three topics, healthy transactional,
idempotent and plain traffic, and transactions that will hang for each reason a coordinator
view can tell), starts the **streaming** job over it with a real checkpoint, keeps appending
data while the job runs (including the late write that creates a write-after-marker hang), and
prints the alerts as they fire. Stops by itself once every expected finding has fired or after
``duration_s``. The event-time clock is the newest timestamp in the log, so the demo moves the
synthetic clock forward a few minutes per step instead of waiting 20 real minutes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import threading
import time
from typing import Any

from streaming.config import engine_config, load_config
from streaming.microbatch import SinkSet
from streaming.pipeline import spark_session, start_query, stop_gracefully
from streaming.runner import alert_config, file_source_options
from streaming.simulate.cluster_log import ClusterLog
from streaming.sinks.console import ConsoleSink
from streaming.sinks.jsonl import JsonlSink, read_jsonl
from streaming.vocab import (
    COORDINATOR_FINISHED_WITHOUT_PARTITION,
    COORDINATOR_STUCK,
    COORDINATOR_UNAWARE,
    FINDING_STATUSES,
    HANGING,
    LATE,
    MARKERS_PENDING,
    WRITE_AFTER_MARKER,
)

MINUTE = 60_000
# The failure modes the demo cluster plants (it has a coordinator view, so never
# exceeds-max-timeout; it plants no long-running live producer, so no long-transaction).
EXPECTED_CAUSES = {
    (HANGING, COORDINATOR_UNAWARE),
    (HANGING, COORDINATOR_FINISHED_WITHOUT_PARTITION),
    (HANGING, WRITE_AFTER_MARKER),
    (LATE, MARKERS_PENDING),
    (LATE, COORDINATOR_STUCK),
}


class DemoCluster:
    """The demo's cluster: healthy producers plus one producer per failure mode."""

    def __init__(self, root: str, start_ms: int) -> None:
        self.c = ClusterLog(root, start_ms, coordinator_epoch=4, segment_bytes=64 * 1024, seed=7)
        for topic, parts in (("orders", 3), ("payments", 2), ("inventory", 1)):
            self.c.create_topic(topic, parts)
        self.healthy = [self.c.producer(f"checkout-{i}", tv=2 if i % 2 else 0) for i in range(3)]
        self.idem = self.c.idempotent_producer()
        self.step_no = 0

    def traffic(self, rounds: int = 4) -> None:
        """Committed and aborted transactions plus non-transactional writes."""
        rng = self.c.rng
        for _ in range(rounds):
            for p in self.healthy:
                p.begin()
                for _ in range(rng.randint(1, 3)):
                    p.send(rng.choice(["orders", "inventory"]), 0 if rng.random() < 0.5 else 0,
                           rng.randint(1, 20), compressed=rng.random() < 0.3)
                p.send("orders", rng.randint(0, 2), rng.randint(1, 5))
                if rng.random() < 0.15:
                    p.abort()
                else:
                    p.commit()
                self.c.advance(rng.randint(200, 2000))
            self.idem.send("inventory", 0, rng.randint(1, 10))
            self.c.advance(500)

    def start_faults(self) -> None:
        """Phase 1: the transactions that will hang (or stay late) once they are old enough."""
        # Coordinator finished without the partition: a pre-KIP-890 broker accepted data for a
        # partition the producer never added; the commit's markers skip it.
        billing = self.c.producer("billing", tv=0)
        billing.begin()
        billing.send("payments", 0, 5)
        billing.send("payments", 1, 3, add_partition=False)
        billing.commit()
        # Markers pending: the coordinator wrote PrepareCommit but never the markers.
        settle = self.c.producer("settlement", tv=0)
        settle.begin()
        settle.send("orders", 2, 4)
        settle.commit(markers=[])
        # Coordinator stuck: Ongoing far past its own timeout, never aborted.
        report = self.c.producer("reporting", tv=0, timeout_ms=60_000)
        report.begin()
        report.send("inventory", 0, 2)
        # Coordinator unaware: the id expired (tombstone), then a zombie of it wrote again.
        loader = self.c.producer("loader", tv=0)
        loader.begin()
        loader.send("payments", 0, 2)
        loader.commit()
        loader.expire(force=True)
        loader.zombie_send("payments", 0, 1)
        self.orders_app = self.c.producer("orders-app", tv=0)
        self.orders_app.begin()
        self.orders_app.send("orders", 1, 3)
        self.orders_app.commit()
        self.c.flush()

    def late_write(self) -> None:
        """Phase 2 (while the job runs): the retried produce of KAFKA-9144 lands after the
        COMMIT marker on a broker without partition verification."""
        self.orders_app.zombie_send("orders", 1, 2)
        self.c.flush()

    def step(self, minutes: int) -> None:
        self.step_no += 1
        self.traffic(rounds=2)
        self.c.advance(minutes * MINUTE)
        self.traffic(rounds=1)
        self.c.flush()


def run_demo(workdir: str | None = None, duration_s: int = 120, master: str = "local[2]",
             out=None, metrics_port: int = 0, ui_port: int = 0) -> int:
    """Run the demo; returns 0 when every expected finding fired, 1 otherwise."""
    out = out or sys.stdout
    work = workdir or tempfile.mkdtemp(prefix="txnwatch-demo-")
    os.makedirs(work, exist_ok=True)
    logs, ck = os.path.join(work, "logs"), os.path.join(work, "checkpoint")
    alerts_path = os.path.join(work, "alerts.jsonl")
    out.write(f"txnwatch demo: writing a cluster log under {logs}\n")
    start_ms = int(time.time() * 1000) - 60 * MINUTE
    cluster = DemoCluster(logs, start_ms)
    cluster.traffic(rounds=6)
    cluster.start_faults()
    cluster.traffic(rounds=2)
    cluster.c.flush()

    cfg = load_config(None, env={}, overrides={"cluster": "demo", "kafka.bootstrap_servers": "localhost:9092"})
    seen: set[tuple[str, str]] = set()
    fired = threading.Event()

    def track(alerts: list[dict[str, Any]]) -> None:
        for a in alerts:
            if a["status"] in FINDING_STATUSES:
                seen.add((a["status"], a["cause"]))
        if EXPECTED_CAUSES <= seen:
            fired.set()

    sinks = SinkSet(sinks=[ConsoleSink(out), JsonlSink(alerts_path), track])
    metrics = None
    if metrics_port:
        from streaming.metrics import Metrics

        metrics = Metrics(metrics_port, cluster="demo", query_name="txnwatch-demo")
        sinks.on_batch.append(metrics.observe)
        out.write(f"metrics: http://127.0.0.1:{metrics.port}/metrics\n")
    ui = None
    if ui_port:
        from streaming.ui import serve_for_job

        ui = serve_for_job(dataclasses.replace(cfg.ui, enabled=True, port=ui_port),
                           dataclasses.replace(cfg.streaming, trigger_interval="2 seconds"), sinks.on_batch,
                           source="txnwatch demo")
        out.write(f"status page: {ui.url}\n")
    spark = spark_session(master=master, conf={"spark.sql.shuffle.partitions": "2"})
    q = start_query(spark, "segments", file_source_options(cfg, path=logs),
                    engine_config(cfg, coordinator_available=True), alert_config(cfg, live=False), sinks, ck,
                    trigger={"processingTime": "2 seconds"}, query_name="txnwatch-demo")
    out.write(f"streaming job started (checkpoint {ck}); appending data while it runs...\n")
    deadline = time.monotonic() + duration_s
    step = 0
    try:
        while time.monotonic() < deadline and not fired.is_set():
            if q.exception() is not None:
                out.write(f"query failed: {q.exception()}\n")
                return 1
            time.sleep(4)
            step += 1
            if step == 2:
                cluster.late_write()
                out.write("… a late produce of orders-app landed after its COMMIT marker (orders-1)\n")
            cluster.step(minutes=6)
        # one more trigger so alerts from the last append are published
        fired.wait(timeout=6)
    finally:
        stop_gracefully(q)
        if metrics is not None:
            metrics.close()
        if ui is not None:
            ui.close()
    alerts = read_jsonl(alerts_path)
    hanging = [a for a in alerts if a["status"] == HANGING]
    out.write(f"\n{len(alerts)} alert(s) written to {alerts_path} ({len(hanging)} hanging)\n")
    missing = EXPECTED_CAUSES - seen
    if missing:
        out.write(f"did not see: {sorted(missing)}\n")
        return 1
    out.write("every expected finding fired; the commands above are ready to paste.\n")
    return 0
