"""``txnwatch demo`` (the README's first command) end to end, its metrics endpoint scraped over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from streaming.sinks.jsonl import read_jsonl
from tests.conftest import ROOT
from tests.test_run_cli import free_port, scrape_samples

# The failure modes streaming/demo.py plants, one producer each (DemoCluster.start_faults and
# late_write): three hanging causes and two late ones, on the partitions written there.
HANGING = {"coordinator-unaware", "coordinator-finished-without-partition", "write-after-marker"}
PLANTED = {
    # billing: data on payments-1 never added to the transaction; its commit writes no marker there
    # (pre-KIP-890 broker), the coordinator's CompleteCommit lists payments-0 only
    ("hanging", "coordinator-finished-without-partition", "payments", 1),
    # loader: the id expired (tombstone), then a zombie of it wrote on payments-0
    ("hanging", "coordinator-unaware", "payments", 0),
    # orders-app: the retried produce lands after the COMMIT marker on orders-1 (KAFKA-9144)
    ("hanging", "write-after-marker", "orders", 1),
    # settlement: PrepareCommit written, markers never (the coordinator still owns it: late)
    ("late", "markers-pending", "orders", 2),
    # reporting: Ongoing past its 60 s timeout, never aborted by the coordinator (late)
    ("late", "coordinator-stuck", "inventory", 0),
}


@pytest.mark.spark
@pytest.mark.slow
def test_demo_fires_every_planted_finding_and_serves_metrics(tmp_path):
    port = free_port()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    out = open(tmp_path / "out.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", "demo", "--workdir", str(tmp_path / "w"),
                             "--metrics-port", str(port), "--duration", "300"], cwd=ROOT, env=env, stdout=out,
                            stderr=subprocess.STDOUT, text=True)
    scrapes: list[dict] = []
    try:
        deadline = time.monotonic() + 420
        while proc.poll() is None and time.monotonic() < deadline:
            s = scrape_samples(f"http://127.0.0.1:{port}/metrics")
            if s:
                scrapes.append(s)
            time.sleep(0.2)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    text = (tmp_path / "out.log").read_text()
    assert rc == 0, text[-3000:]
    assert "every expected finding fired" in text
    # what the demo wrote, checked here rather than trusted from its own summary line: every
    # planted finding was published, on its partition, and no other cause
    alerts = read_jsonl(str(tmp_path / "w" / "alerts.jsonl"))
    published = {(a["status"], a["cause"], a["topic"], a["partition"]) for a in alerts
                 if a["status"] in ("late", "hanging")}
    assert published == PLANTED
    assert scrapes, "the demo's metrics endpoint never answered"
    batches = max(s.get(("txnwatch_microbatch_duration_seconds_count", (("cluster", "demo"),)), 0) for s in scrapes)
    assert batches >= 1
    # every hanging cause the endpoint reported is one the demo planted, never more than one each
    for s in scrapes:
        for (name, labels), value in s.items():
            if name == "txnwatch_hanging_transactions" and value:
                assert dict(labels)["cause"] in HANGING and value == 1, (labels, value)
