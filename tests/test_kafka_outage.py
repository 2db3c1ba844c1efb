"""Issue 14 "Done when": a cluster serving 50 ``__transaction_state`` partitions of which 3 are
offline, plus one offline data partition, with a hanging transaction elsewhere. The job alerts on
what it can read with the right ``verified`` flag and ``unavailable`` records; when the partitions
come back it reads them from where it stopped and the findings become what a fully available run
gives (the scenario's expectations)."""

from __future__ import annotations

import time

import pytest

from streaming.alerts import AlertConfig
from streaming.config import as_config, engine_config, load
from streaming.pipeline import SinkSet, start_query
from streaming.sources.kafka import close_wires
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.test_kafka_source import live_scenario

FAST = {"request_timeout_ms": "2000", "retries": "2", "retry_backoff_ms": "20"}
FIELDS = ("status", "cause", "verified", "topic", "partition", "producer_id", "producer_epoch", "first_offset",
          "coordinator_epoch", "coordinator_epoch_source")
OFFLINE_TXN = (7, 34, 48)  # the scenario's two coordinator partitions and an empty one


@pytest.fixture(autouse=True)
def _close_cached_clients():
    yield
    close_wires()


def _wait(pred, what: str, q, timeout_s: float = 150) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert q.exception() is None, q.exception()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.spark
def test_outage_of_coordinator_and_data_partitions_then_recovery(spark, tmp_path):
    sc = live_scenario(tmp_path)
    cfg = load(None, env={})
    cfg["cluster"] = "live"
    with FakeKafkaBroker(sc.root, num_nodes=3) as broker:
        broker.create_topic("__transaction_state", 50)
        for p in OFFLINE_TXN:
            broker.offline("__transaction_state", p)
        broker.offline("heartbeat", 0)
        out: list[dict] = []
        sinks = SinkSet(sinks=[out.extend])
        opts = {"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*", "cluster": "live",
                "starting_offsets": "earliest", **FAST}
        q = start_query(spark, "kafka-txn", opts, engine_config(as_config(cfg), coordinator_available=True),
                        AlertConfig("k:9092"), sinks, str(tmp_path / "ck"), trigger={"processingTime": "1 second"})
        try:
            findings = lambda: [a for a in out if a["status"] in ("late", "hanging")]  # noqa: E731
            _wait(lambda: findings(), "a finding during the outage", q)
            down = {a["key"] for a in out if a["status"] == "unavailable"}
            assert down == {f"live/__transaction_state/{p}" for p in OFFLINE_TXN} | {"live/heartbeat/0"}
            during = findings()[-1]
            # the producer's coordinator partition is unread: no proof either way
            assert (during["status"], during["cause"], during["verified"]) == ("hanging", "exceeds-max-timeout",
                                                                                False)
            assert set(OFFLINE_TXN) <= set(during["missing_txn_partitions"])
            for p in OFFLINE_TXN:
                broker.online("__transaction_state", p)
            broker.online("heartbeat", 0)
            _wait(lambda: {a["key"] for a in out if a["status"] == "available"} == down, "available records", q)
            _wait(lambda: findings()[-1]["verified"], "the finding re-judged with the full view", q)
        finally:
            q.stop()
    latest = {}
    for a in out:
        if a["status"] not in ("unavailable", "available"):
            latest[a["key"]] = a
    assert sorted(({k: a[k] for k in FIELDS} for a in latest.values()), key=str) == sorted(
        ({k: e[k] for k in FIELDS} for e in sc.expected), key=str)
