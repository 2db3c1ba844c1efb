"""``kill -9`` of ``txnwatch run --source kafka`` in the middle of a micro-batch, then a restart on
the same checkpoint (issue 11, crash safety).

The job runs as a subprocess (its own Spark driver) against a fake broker in this process, with
alerts going to a JSONL file and to a topic of the fake. The crash point is made exact by the
batch writer's test hook (``TXNWATCH_TEST_PAUSE``): the first micro-batch that publishes alerts
writes a marker file and stops either before any sink ran or between the JSONL sink and the
topic sink; the test then SIGKILLs the driver's whole process group (Python driver and its
Spark JVM) and restarts it without the hook.

What must hold: the uninterrupted run and the restarted job each publish the scenario's own
findings (key, status, cause, verified: the outside truth), and the restarted job publishes every
alert key that the uninterrupted run publishes, to both sinks; a key may be published twice only if the interrupted micro-batch had already
written it to a sink, and the repeat is the same alert (same key and status).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from streaming.microbatch import TEST_PAUSE_ENV
from streaming.sinks.jsonl import read_jsonl
from tests.conftest import ROOT
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.scenario_truth import expected_findings, projected
from tests.test_kafka_source import live_scenario

pytestmark = pytest.mark.spark

_BATCH = re.compile(r"^.*batch (\d+): \d+ rows", re.M)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crash")
    sc = live_scenario(tmp)
    with FakeKafkaBroker(sc.root) as broker:
        yield sc, broker, tmp


class Job:
    """One ``txnwatch run`` subprocess in its own process group, logging to a file."""

    def __init__(self, work: Path, broker: FakeKafkaBroker, name: str, topic: str, checkpoint: Path,
                 pause: str | None = None):
        self.work, self.name = work, name
        self.jsonl = work / f"{topic}.jsonl"
        conf = work / f"{name}.toml"
        conf.write_text(
            f'cluster = "live"\n'
            f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n'
            f'topics = ["orders", "__transaction_state"]\n'
            f'request_timeout_ms = 3000\n'
            f'[sinks]\nenabled = ["jsonl", "kafka"]\njsonl_path = "{self.jsonl}"\nkafka_topic = "{topic}"\n'
            f'[streaming]\ncheckpoint = "{checkpoint}"\ntrigger_interval = "1 second"\nshuffle_partitions = 2\n')
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        env.pop(TEST_PAUSE_ENV, None)
        self.marker = work / f"{name}.paused"
        if pause:
            env[TEST_PAUSE_ENV] = f"{pause}:{self.marker}"
        self.log_path = work / f"{name}.log"
        self._log = open(self.log_path, "w")  # a file, not a pipe: Spark logs enough to fill a pipe
        self.proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", "run", "--source", "kafka",
                                      "--config", str(conf)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=self._log, text=True, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text()

    def batches(self) -> list[int]:
        return [int(b) for b in _BATCH.findall(self.log())]

    def wait(self, done, what: str, timeout_s: float = 240.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert self.proc.poll() is None, f"{self.name} exited ({self.proc.returncode}): {self.log()[-3000:]}"
            assert time.monotonic() < deadline, f"{self.name}: timed out waiting for {what}: {self.log()[-3000:]}"
            time.sleep(0.2)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
            self._log.close()
        return rc


def topic_alerts(broker: FakeKafkaBroker, topic: str) -> list[tuple[str, dict]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000, group_id=None)
    try:
        return [(m.key.decode(), json.loads(m.value)) for m in consumer]
    finally:
        consumer.close()


def latest(alerts: list[dict]) -> list[dict]:
    """The last alert published per key."""
    return list({a["key"]: a for a in alerts}.values())


def run_until_published(job: Job, more_batches: int = 3) -> int:
    """Let a job publish its alerts and run ``more_batches`` further micro-batches, then stop it."""
    try:
        job.wait(lambda: bool(read_jsonl(str(job.jsonl))), "the first alerts")
        seen = len(job.batches())
        job.wait(lambda: len(job.batches()) >= seen + more_batches, f"{more_batches} more micro-batches")
    except BaseException:
        job.stop()
        raise
    return job.stop()


@pytest.fixture(scope="module")
def reference(cluster):
    """Alert keys of an uninterrupted run."""
    sc, broker, tmp = cluster
    job = Job(tmp, broker, "reference", "ref-alerts", tmp / "ck-reference")
    assert run_until_published(job) == 0, job.log()[-3000:]
    alerts = read_jsonl(str(job.jsonl))
    assert projected(latest(alerts)) == expected_findings(sc, files=False)
    assert sorted(k for k, _ in topic_alerts(broker, "ref-alerts")) == sorted(a["key"] for a in alerts)
    return alerts


@pytest.mark.parametrize("point", ["before-sinks", "after-sink-1"])
def test_kill_9_mid_batch_then_restart_publishes_every_key(cluster, reference, point):
    sc, broker, tmp = cluster
    topic, ck = f"alerts-{point}", tmp / f"ck-{point}"
    job = Job(tmp, broker, f"crash-{point}", topic, ck, pause=point)
    try:
        job.wait(job.marker.exists, f"the pause at {point}")
    except BaseException:
        job.kill9()
        raise
    job.kill9()  # the driver is inside foreachBatch: enricher state and Spark's commit not written
    assert job.marker.read_text() == point
    interrupted_jsonl = read_jsonl(str(job.jsonl))
    interrupted_topic = topic_alerts(broker, topic)
    if point == "before-sinks":
        assert interrupted_jsonl == [] and interrupted_topic == []
    else:  # the JSONL sink ran, the topic sink did not
        assert {a["key"] for a in interrupted_jsonl} == {a["key"] for a in reference}
        assert interrupted_topic == []

    restart = Job(tmp, broker, f"restart-{point}", topic, ck)
    assert run_until_published(restart) == 0, restart.log()[-3000:]
    assert "paused at" not in restart.log()

    ref_keys = {a["key"] for a in reference}
    published = read_jsonl(str(restart.jsonl))
    on_topic = topic_alerts(broker, topic)
    assert {a["key"] for a in published} == ref_keys
    assert {k for k, _ in on_topic} == ref_keys
    assert projected(latest(published)) == expected_findings(sc, files=False)
    assert projected(latest([a for _k, a in on_topic])) == expected_findings(sc, files=False)
    # repeats: only what the interrupted micro-batch had already written, and the same alert again
    repeats = Counter(a["key"] for a in published) - Counter(ref_keys)
    assert set(repeats) <= {a["key"] for a in interrupted_jsonl}
    by_key = {}
    for a in published:
        by_key.setdefault(a["key"], set()).add(a["status"])
    assert all(len(s) == 1 for s in by_key.values()), by_key
    assert Counter(k for k, _ in on_topic) == Counter(ref_keys)  # the topic sink never ran before the kill
    for a in published:  # the restarted live job asked the broker itself (KIP-664 on the fake)
        assert a["confirmed_by"] is not None and "DescribeProducers" in a["confirmed_by"], a


def test_kill_9_after_a_batch_recorded_as_published_loses_no_topic_alert(cluster, reference):
    """Issue 20 item 10: the alerts topic's partition is offline while the first publishing
    micro-batch runs. The topic sink must not let the batch be recorded as published
    (``after-save``) before the broker acknowledged its alerts (acks=all); a ``kill -9`` right
    after that point then loses nothing. (Before the fix the sink buffered and returned at once:
    the batch was recorded as published with its alerts still unsent, and the kill lost them.)
    The fake answers Metadata for the offline partition with leader -1 / LEADER_NOT_AVAILABLE
    (``MetadataCache.getPartitionMetadata`` with no live leader), so nothing is acknowledged."""
    sc, broker, tmp = cluster
    topic, ck = "alerts-after-save", tmp / "ck-after-save"
    broker.create_topic(topic)
    broker.offline(topic, 0)
    job = Job(tmp, broker, "crash-after-save", topic, ck, pause="after-save")

    def sink_requests() -> int:  # the alerts producer's requests (client id "<client_id>-alerts")
        return sum(1 for r in broker.requests_for("metadata") + broker.requests_for("produce")
                   if r.client_id == "txnwatch-alerts")

    try:
        # the JSONL sink runs first: once it has the alerts, the topic sink has been called
        job.wait(lambda: bool(read_jsonl(str(job.jsonl))), "the JSONL sink's alerts")
        asked = sink_requests()
        # a sink that returns before the acknowledgement lets the batch be recorded at once (a file
        # write); one that waits keeps asking for the offline partition's leader meanwhile
        job.wait(lambda: job.marker.exists() or sink_requests() >= asked + 10, "the sink's retries")
        recorded_before_ack = job.marker.exists()
        if not recorded_before_ack:
            broker.online(topic, 0)
            job.wait(job.marker.exists, "the pause after the batch was recorded")
    except BaseException:
        job.kill9()
        raise
    job.kill9()
    if recorded_before_ack:
        broker.online(topic, 0)  # (still offline: the old sink recorded the batch while it was)
    restart = Job(tmp, broker, "restart-after-save", topic, ck)
    assert run_until_published(restart) == 0, restart.log()[-3000:]
    ref_keys = {a["key"] for a in reference}
    assert {k for k, _ in topic_alerts(broker, topic)} == ref_keys
    assert not recorded_before_ack
