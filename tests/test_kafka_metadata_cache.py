"""KafkaWire's discovery cache (``metadata_max_age_ms``, Kafka's ``metadata.max.age.ms``) against
the broker fake over real sockets: fewer Metadata requests, and still every deletion, new
partition, new topic, leader change and recreated topic noticed (at once after a failure or
offsets going backwards, else at the next refresh)."""

from __future__ import annotations

import pytest

from streaming.simulate.encode import encode_batch
from streaming.sources.kafka_wire import METADATA_MAX_AGE_MS, KafkaWire
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.streaming_wait import wait_until

_watchdog = kafka_watchdog(60)

TXN = "__transaction_state"
FAST = {"request_timeout_ms": 2000, "retries": 2, "retry_backoff_ms": 10, "retry_backoff_max_ms": 50}


@pytest.fixture
def broker(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs", num_nodes=2, auto_create_topics=False) as b:
        b.create_topic("orders", 2)
        b.create_topic("payments", 1)
        b.create_topic(TXN, 2)
        b.append_batches("orders", 0, encode_batch(0, 13))
        yield b


def discover(w: KafkaWire) -> dict[str, list[int]]:
    """What the source's planning asks every trigger: the pattern, then the coordinator topic."""
    found = w.partitions(None, ".*", False)
    found.update(w.partitions([TXN], None, True))
    return found


def metadata_count(broker: FakeKafkaBroker) -> int:
    return len(broker.requests_for("metadata"))


def test_default_is_fresh_every_call_and_the_source_default_is_30_s(broker):
    assert METADATA_MAX_AGE_MS == 30_000
    with KafkaWire(broker.bootstrap_servers, **FAST) as w:
        discover(w)
        before = metadata_count(broker)
        for _ in range(3):
            discover(w)
        assert metadata_count(broker) - before == 6  # two per call, as before the cache existed
    with pytest.raises(ValueError, match="metadata_max_age_ms"):
        KafkaWire(broker.bootstrap_servers, metadata_max_age_ms=-1)


def test_cache_answers_discovery_without_metadata_requests(broker):
    with KafkaWire(broker.bootstrap_servers, metadata_max_age_ms=60_000, **FAST) as w:
        first = discover(w)
        assert first == {"orders": [0, 1], "payments": [0], TXN: [0, 1]}
        before = metadata_count(broker)
        for _ in range(5):
            assert discover(w) == first
            offs, down = w.offsets_available([(t, p) for t, ps in first.items() for p in ps])
            assert not down and offs[("orders", 0)].high_watermark == 13
        assert metadata_count(broker) == before  # five triggers, no Metadata at all
        assert w.partitions(["payments"]) == {"payments": [0]}  # named topics too
        assert metadata_count(broker) == before


def test_new_partitions_and_topics_are_noticed_at_the_next_refresh(broker):
    with KafkaWire(broker.bootstrap_servers, metadata_max_age_ms=300, **FAST) as w:
        discover(w)
        broker.create_topic("orders", 3)  # a partition added
        broker.create_topic("refunds", 1)  # a new topic matching the pattern
        early = discover(w)
        assert early["orders"] == [0, 1] and "refunds" not in early  # still the cached answer
        # once the answer is older than metadata.max.age.ms, the next discovery asks again
        wait_until(lambda: "refunds" in discover(w), "a refresh past metadata_max_age_ms", timeout_s=10,
                   poll_s=0.05)
        late = discover(w)
        assert late["orders"] == [0, 1, 2] and late["refunds"] == [0]
        broker.create_topic("refunds", 2)
        w.refresh_metadata()  # an explicit refresh does not wait for the age
        assert discover(w)["refunds"] == [0, 1]


def test_deleted_topic_is_reported_and_dropped_from_discovery_at_once(broker):
    with KafkaWire(broker.bootstrap_servers, metadata_max_age_ms=60_000, **FAST) as w:
        tps = [(t, p) for t, ps in discover(w).items() for p in ps]
        broker.delete_topic("payments")
        before = metadata_count(broker)
        offs, down = w.offsets_available(tps)
        assert offs[("payments", 0)].deleted and not down
        # the deletion was confirmed by deletion_confirmations (3) fresh Metadata answers
        assert metadata_count(broker) - before >= 3
        before = metadata_count(broker)
        assert "payments" not in discover(w)
        assert metadata_count(broker) - before >= 1  # asked again: the cache was suspect


def test_leader_change_is_followed_and_makes_the_cache_suspect(broker):
    with KafkaWire(broker.bootstrap_servers, metadata_max_age_ms=60_000, **FAST) as w:
        tps = [(t, p) for t, ps in discover(w).items() for p in ps]
        old = broker.leader("orders", 0)
        new = next(n for n in broker.node_ids if n != old)
        broker.move_leader("orders", 0, new)
        offs, down = w.offsets_available(tps)
        assert not down and offs[("orders", 0)].leader == new and offs[("orders", 0)].high_watermark == 13
        before = metadata_count(broker)
        discover(w)
        # refreshed after the NOT_LEADER_OR_FOLLOWER: one all-topics answer (which also serves
        # the named coordinator topic)
        assert metadata_count(broker) - before == 1


def test_recreated_topic_with_lower_offsets_gets_its_new_topic_id_at_once(broker):
    with KafkaWire(broker.bootstrap_servers, metadata_max_age_ms=60_000, **FAST) as w:
        discover(w)
        old = w.offsets([("orders", 0)])[("orders", 0)]
        broker.delete_topic("orders")
        broker.create_topic("orders", 2)
        broker.append_batches("orders", 0, encode_batch(0, 2))
        new = w.offsets([("orders", 0)])[("orders", 0)]
    assert (old.high_watermark, new.high_watermark) == (13, 2)
    assert old.topic_id and new.topic_id and new.topic_id != old.topic_id


def test_recreated_topic_past_the_old_offsets_is_told_apart_at_the_next_refresh(broker):
    """The price of the cache (as for a Java consumer): nothing in a ListOffsets answer tells a
    recreated topic from the old one when its offsets did not go backwards; the topic id of the
    next Metadata refresh does."""
    with KafkaWire(broker.bootstrap_servers, metadata_max_age_ms=300, **FAST) as w:
        discover(w)
        old = w.offsets([("orders", 0)])[("orders", 0)]
        broker.delete_topic("orders")
        broker.create_topic("orders", 2)
        broker.append_batches("orders", 0, encode_batch(0, 20))
        discover(w)
        same = w.offsets([("orders", 0)])[("orders", 0)]
        # past metadata_max_age_ms a discovery refreshes, and the refresh carries the new topic id
        wait_until(lambda: bool(discover(w)) and w.offsets([("orders", 0)])[("orders", 0)].topic_id != old.topic_id,
                   "the refresh past metadata_max_age_ms", timeout_s=10, poll_s=0.05)
        new = w.offsets([("orders", 0)])[("orders", 0)]
    assert same.high_watermark == new.high_watermark == 20
    assert same.topic_id == old.topic_id != new.topic_id


def test_kafka_python_routes_node_ids_from_the_brokers_alone(broker):
    # kafka-python's ClusterMetadata only routes node ids for this client (SocketTransport.nodes /
    # address); the partitions are the MetadataCache's. Handing it whole answers made it keep every
    # decoded partition object until the next answer (fails before this change: it held them).
    with KafkaWire(broker.bootstrap_servers, **FAST) as w:
        found = discover(w)
        assert found == {"orders": [0, 1], "payments": [0], TXN: [0, 1]}
        cluster = w._transport._manager.cluster
        assert cluster._partitions == {} and cluster._broker_partitions == {}
        assert sorted(w._transport.nodes()) == sorted(b.node_id for b in cluster.brokers()) and len(cluster.brokers()) == 2
        assert all(w._transport.address(n) is not None for n in w._transport.nodes())
        assert w.offsets([("orders", 0)])[("orders", 0)].high_watermark == 13  # routed to its leader
