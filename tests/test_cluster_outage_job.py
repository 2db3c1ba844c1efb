"""Issue 21 item 6: the running ``txnwatch run --source kafka`` job (its own Spark driver, as the
README's job runs) through a whole-cluster outage and back, against the socket broker fake.

1. The job reads the cluster: ``late-writer`` committed its transaction, nothing is open.
2. Every broker stops (``FakeKafkaBroker.stop``: listeners closed, open connections reset). A Kafka
   client then finds no node to ask (``NetworkClient.handleDisconnections`` marks each node
   disconnected; ``leastLoadedNode`` has none), so every partition is unreadable: the progress line
   says ``partitions unavailable`` for each topic, the metrics endpoint (scraped over HTTP) shows
   ``txnwatch_partitions_unavailable`` per topic, and the alert stream one ``unavailable`` record per
   partition. The job keeps running (``unavailable_timeout_ms`` is far away).
3. The brokers come back on the same ports; ``late-writer``'s retried batch lands after its COMMIT
   marker (KAFKA-9144: ``ProducerStateManager`` starts a transaction at any transactional batch of a
   producer with none open, and no marker will ever end it). The job resumes from where it stopped,
   publishes ``available`` for every partition and finds that transaction: hanging,
   write-after-marker, verified (the coordinator's record is CompleteCommit without the partition:
   ``TransactionCoordinator`` will never write a marker there).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming.simulate.cluster_log import ClusterLog
from streaming.sinks.jsonl import read_jsonl
from tests.conftest import ROOT
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.streaming_wait import wait_until
from tests.test_run_cli import free_port, scrape_samples

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLUSTER = "outage"
TXN = "__transaction_state"
_PROGRESS = re.compile(r"batch (\d+): \d+ rows, .*open findings: (\d+) late, (\d+) hanging")
_DOWN = re.compile(r"batch (\d+): partitions unavailable: (.*)$", re.M)


class RunJob:
    """``txnwatch run --source kafka`` as a subprocess in its own process group, logging to a file."""

    def __init__(self, tmp: Path, broker: FakeKafkaBroker, metrics_port: int):
        self.jsonl = tmp / "alerts.jsonl"
        conf = tmp / "outage.toml"
        conf.write_text(
            f'cluster = "{CLUSTER}"\n'
            f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n'
            f'topics = ["orders", "{TXN}"]\nrequest_timeout_ms = 2000\nbroker_timeout_ms = 2000\n'
            f'unavailable_timeout_ms = 600000\n'
            f'[sinks]\nenabled = ["jsonl"]\njsonl_path = "{self.jsonl}"\n'
            f'[streaming]\ncheckpoint = "{tmp / "ck"}"\ntrigger_interval = "1 second"\nshuffle_partitions = 2\n'
            f'[metrics]\nport = {metrics_port}\n')
        self.log_path = tmp / "job.log"
        self._log = open(self.log_path, "w")  # a file, not a pipe: Spark logs enough to fill a pipe
        self.proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", "run", "--source", "kafka",
                                      "--config", str(conf)], cwd=ROOT,
                                     env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
                                     stdout=subprocess.DEVNULL, stderr=self._log, text=True, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text()

    def alive(self) -> None:
        assert self.proc.poll() is None, f"the job exited ({self.proc.returncode}): {self.log()[-3000:]}"

    def progress(self) -> list[tuple[int, int, int]]:
        """(batch id, late, hanging) of every progress line so far."""
        return [(int(b), int(late), int(h)) for b, late, h in _PROGRESS.findall(self.log())]

    def alerts(self) -> list[dict]:
        return read_jsonl(str(self.jsonl)) if self.jsonl.exists() else []

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=90)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
            self._log.close()


def _unavailable_by_topic(samples: dict) -> dict[str, float]:
    return {dict(labels)["topic"]: v for (name, labels), v in samples.items()
            if name == "txnwatch_partitions_unavailable" and dict(labels).get("cluster") == CLUSTER}


def test_the_running_job_through_a_whole_cluster_outage_and_back(tmp_path):
    # The writes are 40 minutes old by the producer's clock (CreateTime): past the default alert
    # threshold (transaction.max.timeout.ms 900000 + padding 300000) as soon as they are read.
    c = ClusterLog(tmp_path / "logs", int(time.time() * 1000) - 40 * 60_000, coordinator_epoch=3)
    c.create_topic("orders", 1, leader_epoch=5)
    p = c.producer("late-writer", 0)
    p.begin()
    p.send("orders", 0, 2)
    p.commit()
    c.flush()
    port = free_port()
    with FakeKafkaBroker(c.root) as broker:
        n_txn = len(broker.topics()[TXN])
        job = RunJob(tmp_path, broker, port)
        try:
            # 1. running, the cluster read, nothing open
            wait_until(lambda: bool(job.progress()), "the first progress line", timeout_s=180, check=job.alive)
            assert job.progress()[-1][1:] == (0, 0)
            before_outage = job.progress()[-1][0]

            # 2. every broker down
            broker.stop()
            # A micro-batch planned just before the stop can lose only the partition whose Fetch
            # failed mid-read (one 'unavailable' line for it); the plans made while no broker
            # answers mark every known partition (KafkaPlanner: "no broker answered").
            every = re.compile(rf"{TXN}: {n_txn} for up to \d+ s, orders: 1 for up to \d+ s")

            def down_lines() -> list[str]:
                return [line for b, line in _DOWN.findall(job.log()) if int(b) > before_outage]

            wait_until(lambda: any(every.fullmatch(line) for line in down_lines()),
                       "a progress line naming every partition unavailable", timeout_s=60, check=job.alive)
            want_down = {TXN: float(n_txn), "orders": 1.0}
            wait_until(lambda: _unavailable_by_topic(scrape_samples(f"http://127.0.0.1:{port}/metrics"))
                       == want_down, "txnwatch_partitions_unavailable on the metrics endpoint", timeout_s=30,
                       check=job.alive)
            wait_until(lambda: sum(a["status"] == "unavailable" for a in job.alerts()) == n_txn + 1,
                       "one unavailable record per partition", timeout_s=30, check=job.alive)
            assert {a["key"] for a in job.alerts() if a["status"] == "unavailable"} == \
                {f"{CLUSTER}/orders/0"} | {f"{CLUSTER}/{TXN}/{i}" for i in range(n_txn)}
            assert not [a for a in job.alerts() if a["status"] in ("late", "hanging")]

            # 3. the brokers are back; the producer's retried batch lands after its COMMIT marker
            broker.start()
            late = p.zombie_send("orders", 0, 1)
            c.flush()

            def found() -> list[dict]:
                return [a for a in job.alerts() if a["status"] == "hanging"]

            wait_until(lambda: bool(found()), "the hanging transaction after the outage", timeout_s=90,
                       check=job.alive)
            wait_until(lambda: _unavailable_by_topic(scrape_samples(f"http://127.0.0.1:{port}/metrics"))
                       in ({}, {TXN: 0.0, "orders": 0.0}), "the unavailable gauges cleared", timeout_s=30,
                       check=job.alive)
            wait_until(lambda: job.progress()[-1][1:] == (0, 1), "a progress line with the finding",
                       timeout_s=30, check=job.alive)
        except BaseException:
            job.stop()
            raise
        rc = job.stop()
    assert rc == 0, job.log()[-3000:]
    alerts = job.alerts()
    assert [(a["key"], a["status"], a["cause"], a["verified"], a["producer_id"], a["first_offset"])
            for a in alerts if a["status"] == "hanging"] == [
        (f"{CLUSTER}/orders/0/{p.producer_id}/{late}", "hanging", "write-after-marker", True, p.producer_id, late)]
    back = {a["key"] for a in alerts if a["status"] == "available"}
    assert back == {f"{CLUSTER}/orders/0"} | {f"{CLUSTER}/{TXN}/{i}" for i in range(n_txn)}
