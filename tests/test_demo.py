"""``txnwatch demo`` (the README's first command) end to end, its metrics endpoint scraped over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.test_run_cli import free_port, scrape_samples

# The failure modes streaming/demo.py plants, one producer each (its DemoCluster docstring):
# three hanging causes and two late ones.
HANGING = {"coordinator-unaware", "coordinator-finished-without-partition", "write-after-marker"}


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
    assert scrapes, "the demo's metrics endpoint never answered"
    batches = max(s.get(("txnwatch_microbatch_duration_seconds_count", (("cluster", "demo"),)), 0) for s in scrapes)
    assert batches >= 1
    # every hanging cause the endpoint reported is one the demo planted, never more than one each
    for s in scrapes:
        for (name, labels), value in s.items():
            if name == "txnwatch_hanging_transactions" and value:
                assert dict(labels)["cause"] in HANGING and value == 1, (labels, value)
