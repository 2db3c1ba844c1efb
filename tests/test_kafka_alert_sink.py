"""The alerts-topic sink on old and ACL-restricted clusters (issue 11 items 7 and 8).

The fake emulates real releases (tests/broker_api_versions.py): CreateTopics before v4 (Kafka 2.4)
needs an explicit partition count and replication factor, and InitProducerId without a
transactional id needs the IDEMPOTENT_WRITE ACL (before 2.8 nothing else grants it).
"""

from __future__ import annotations

import faulthandler
import logging
import time
from pathlib import Path

import pytest

from streaming.config import as_config, load
from streaming.sinks.kafka_topic import AlertSinkError, KafkaAlertSink
from tests.kafka_fake_broker import FakeKafkaBroker

ALERTS = [{"key": "c/t/0/7/3", "status": "hanging", "n": 1}, {"key": "c/t/0/8/9", "status": "late", "n": 2}]


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(60, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "logs"
    r.mkdir()
    return r


def sink_for(broker: FakeKafkaBroker, **kw) -> KafkaAlertSink:
    return KafkaAlertSink(broker.bootstrap_servers, "txnwatch-alerts", request_timeout_ms=5000, **kw)


def produced(broker: FakeKafkaBroker) -> int:
    return broker.partition_state("txnwatch-alerts", 0).high_watermark


def create_request(broker: FakeKafkaBroker):
    (req,) = broker.requests_for("create_topics")
    (topic,) = req.request.topics
    return req.version, topic.num_partitions, topic.replication_factor


# ------------------------------------------------------------------ 7. CreateTopics before 2.4
@pytest.mark.parametrize("release", [(2, 3), (2, 4), (4, 0)], ids=lambda v: ".".join(map(str, v)))
def test_alerts_topic_is_created_with_explicit_partitions_and_replication(root, release):
    with FakeKafkaBroker(root, broker_version=release, num_nodes=2) as broker:
        sink = sink_for(broker)
        sink(ALERTS)
        sink.close()
        version, partitions, replication = create_request(broker)
        assert (partitions, replication) == (1, 2)  # default: min(3, brokers)
        assert version < 4 if release < (2, 4) else version >= 4  # CreateTopics v4: KIP-464 defaults
        assert produced(broker) == len(ALERTS)


def test_configured_partitions_and_replication_factor_are_used(root):
    with FakeKafkaBroker(root, broker_version=(2, 3), num_nodes=3) as broker:
        sink = sink_for(broker, partitions=2, replication_factor=3)
        sink(ALERTS)
        sink.close()
        assert create_request(broker)[1:] == (2, 3)
        assert broker.topics()["txnwatch-alerts"] == [0, 1]


def test_replication_factor_above_the_broker_count_is_a_clear_error(root):
    with FakeKafkaBroker(root, broker_version=(2, 3)) as broker:
        with pytest.raises(AlertSinkError, match="txnwatch-alerts.*(INVALID_REPLICATION_FACTOR|InvalidReplicationFactor)"):
            sink_for(broker, replication_factor=3)(ALERTS)


def test_sink_settings_come_from_the_sinks_section():
    cfg = load(None, env={})
    cfg["kafka"]["bootstrap_servers"] = "k:9092"
    sink = KafkaAlertSink.from_config(as_config(cfg).kafka, as_config(cfg).sinks)
    assert (sink.partitions, sink.replication_factor, sink.idempotence) == (1, 0, "auto")
    cfg["sinks"].update(kafka_topic_partitions=4, kafka_topic_replication_factor=2, kafka_idempotence="false")
    sink = KafkaAlertSink.from_config(as_config(cfg).kafka, as_config(cfg).sinks)
    assert (sink.partitions, sink.replication_factor, sink.idempotence) == (4, 2, "false")
    cfg["sinks"]["kafka_idempotence"] = "maybe"
    with pytest.raises(ValueError, match="kafka_idempotence"):
        KafkaAlertSink.from_config(as_config(cfg).kafka, as_config(cfg).sinks)


# ------------------------------------------------------------------ 8. IDEMPOTENT_WRITE before 2.8
def test_without_idempotent_write_acl_the_sink_falls_back_once_and_says_so(root, caplog):
    with FakeKafkaBroker(root, broker_version=(2, 7), idempotent_write_acl=False) as broker:
        sink = sink_for(broker)
        with caplog.at_level(logging.WARNING, logger="txnwatch"):
            sink(ALERTS)
            sink(ALERTS[:1])
        sink.close()
        assert produced(broker) == 3
        inits = broker.requests_for("init_producer_id")
        assert len(inits) >= 1 and all(r.request.transactional_id is None for r in inits)
        produces = broker.requests_for("produce")
        assert produces and all(r.request.acks == -1 for r in produces)
    notes = [r for r in caplog.records if "IDEMPOTENT_WRITE" in r.getMessage()]
    assert len(notes) == 1 and "acks=all" in notes[0].getMessage()


def test_idempotence_true_refuses_to_fall_back(root):
    with FakeKafkaBroker(root, broker_version=(2, 7), idempotent_write_acl=False) as broker:
        with pytest.raises(AlertSinkError, match="IDEMPOTENT_WRITE"):
            sink_for(broker, idempotence="true")(ALERTS)
        assert produced(broker) == 0


def test_idempotence_false_never_asks_for_a_producer_id(root):
    with FakeKafkaBroker(root, broker_version=(2, 7), idempotent_write_acl=False) as broker:
        sink = sink_for(broker, idempotence="false")
        sink(ALERTS)
        sink.close()
        assert produced(broker) == 2 and broker.requests_for("init_producer_id") == []


def test_topic_write_acl_is_enough_from_2_8(root, caplog):
    with FakeKafkaBroker(root, broker_version=(2, 8), idempotent_write_acl=False) as broker:
        sink = sink_for(broker)
        with caplog.at_level(logging.WARNING, logger="txnwatch"):
            sink(ALERTS)
        sink.close()
        assert produced(broker) == 2 and len(broker.requests_for("init_producer_id")) == 1
    assert not [r for r in caplog.records if "IDEMPOTENT_WRITE" in r.getMessage()]


def test_buffered_topic_sink_rides_through_an_offline_partition_and_a_leader_move(root):
    """Issue 14 item 6, issue 20 item 10: the alerts topic's partition goes offline (leader -1)
    and later its leader moves. A call returns only after the broker acknowledged every alert it
    was given (acks=all), so it waits through the outage, retrying; nothing is lost and the order
    per key is kept (each key's last record is its last alert). While the partition is offline
    the fake answers Produce with NOT_LEADER_OR_FOLLOWER / LEADER_NOT_AVAILABLE (as
    ``ReplicaManager.appendRecords`` does for a partition without a leader), which acknowledges
    nothing."""
    import json as _json
    import threading

    from kafka import KafkaConsumer

    from streaming.sinks.kafka_topic import BufferedAlertSink

    with FakeKafkaBroker(root, num_nodes=2) as broker:
        topic_sink = BufferedAlertSink(KafkaAlertSink(broker.bootstrap_servers, "txnwatch-alerts", request_timeout_ms=2000),
                                       backoff_ms=100, backoff_max_ms=400)
        given = [{"key": f"c/t/0/{i % 3}/1", "status": s, "n": i} for i, s in
                 enumerate(["late", "late", "late", "hanging", "hanging", "hanging", "resolved", "resolved"])]
        topic_sink(given[:2])
        assert topic_sink.pending == 0 and produced(broker) == 2  # returned after the acknowledgement
        broker.offline("txnwatch-alerts", 0)
        produces = len(broker.requests_for("produce")) + len(broker.requests_for("metadata"))
        returned = threading.Event()
        caller = threading.Thread(target=lambda: (topic_sink(given[2:5]), returned.set()), daemon=True)
        caller.start()
        deadline = time.monotonic() + 30
        # the sink keeps asking (Metadata/Produce retries) while the call has not returned
        while len(broker.requests_for("produce")) + len(broker.requests_for("metadata")) < produces + 3:
            assert time.monotonic() < deadline, "the sink did not retry"
            time.sleep(0.05)
        assert not returned.is_set() and topic_sink.pending == 3 and produced(broker) == 2
        broker.online("txnwatch-alerts", 0)
        caller.join(60)
        assert returned.is_set() and topic_sink.pending == 0 and produced(broker) >= 5
        old = broker.leader("txnwatch-alerts", 0)
        broker.move_leader("txnwatch-alerts", 0, next(n for n in broker.node_ids if n != old))
        topic_sink(given[5:])
        assert topic_sink.pending == 0
        topic_sink.close()
        consumer = KafkaConsumer("txnwatch-alerts", bootstrap_servers=broker.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000, group_id=None)
        got = [_json.loads(m.value) for m in consumer]
        consumer.close()
    firsts = list(dict.fromkeys(a["n"] for a in got))
    assert firsts == [a["n"] for a in given]  # every alert, first appearances in the given order
    last = {a["key"]: a["n"] for a in got}
    assert last == {a["key"]: a["n"] for a in given}


def test_buffered_topic_sink_call_raises_when_not_acknowledged_in_time(root):
    """Issue 20 item 10: with ``ack_timeout_s`` the wait is bounded and the call raises (the
    micro-batch fails and is replayed) instead of returning with alerts unacknowledged."""
    from streaming.sinks.kafka_topic import BufferedAlertSink

    with FakeKafkaBroker(root) as broker:
        topic_sink = BufferedAlertSink(KafkaAlertSink(broker.bootstrap_servers, "txnwatch-alerts", request_timeout_ms=1000),
                                       backoff_ms=100, backoff_max_ms=200, ack_timeout_s=3)
        topic_sink(ALERTS[:1])
        broker.offline("txnwatch-alerts", 0)
        with pytest.raises(AlertSinkError, match="not acknowledged"):
            topic_sink(ALERTS[1:])
        assert produced(broker) == 1
        broker.online("txnwatch-alerts", 0)
        topic_sink.close()
