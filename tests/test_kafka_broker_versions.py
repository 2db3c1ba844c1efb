"""The live path against the recorded ApiVersions of real Kafka releases (issue 11 item 5).

The fake advertises exactly what a real broker of each release advertises
(tests/broker_api_versions.py) and answers an unsupported ApiVersions request the way that
release does. One small scenario per release: discovery, offsets, a fetch of the whole log and
one planned read through the ``kafka-txn`` source, with the versions the client negotiated.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.sources.kafka import KafkaStreamReader, read_partition
from streaming.sources.kafka_wire import FETCH_MAX_VERSION, KafkaUnavailable, KafkaWire, KafkaWireError
from tests.broker_api_versions import BROKER_API_VERSIONS, NEWEST, VERSIONS
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker, stage_segment

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
ORDERS = SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000000.log"
ORDERS_HW, ORDERS_LSO = 13, 9
WIRE = dict(client_id="txnwatch-test", request_timeout_ms=1500, retries=3, retry_backoff_ms=10,
            retry_backoff_max_ms=50, bootstrap_timeout_ms=2000)
# highest versions kafka-python 3.0 (the client library) can send
CLIENT_MAX = {1: FETCH_MAX_VERSION, 2: 11, 3: 13, 18: 4}
REQUIRED = ((0, 11), (1, 0), (2, 0), (2, 3), (2, 4), (2, 7), (2, 8), (3, 0), (3, 9), (4, 0), NEWEST)


_watchdog = kafka_watchdog(60)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "kafka-logs"
    stage_segment(r, "orders", 0, ORDERS)
    return r


def test_the_required_releases_are_recorded():
    assert set(REQUIRED) <= set(VERSIONS) and NEWEST == max(VERSIONS)


def negotiated(table: dict[int, tuple[int, int]], key: int) -> int:
    return min(table[key][1], CLIENT_MAX[key])


@pytest.mark.parametrize("release", VERSIONS, ids=lambda v: ".".join(map(str, v)))
def test_live_path_on_a_real_release(root, release):
    table = BROKER_API_VERSIONS[release]
    with FakeKafkaBroker(root, broker_version=release) as broker:
        with KafkaWire(broker.bootstrap_servers, **WIRE) as w:
            assert w.partitions(["orders"]) == {"orders": [0]}
            o = w.offsets([("orders", 0)])[("orders", 0)]
            assert (o.log_start, o.high_watermark, o.lso) == (0, ORDERS_HW, ORDERS_LSO)
            assert (o.topic_id is not None) == (table[3][1] >= 10)  # topic ids from Metadata v10 (2.8)
            res = w.fetch("orders", 0, 0, 1 << 20)
            assert res.ok and res.records == ORDERS.read_bytes()
            assert res.api_version == negotiated(table, 1)
            assert res.log_start_offset == (0 if res.api_version >= 5 else -1)
        r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]',
                               "starting_offsets": "earliest", "request_timeout_ms": "3000", "retries": "3",
                               "retry_backoff_ms": "10", "cluster": "live"})
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        ev = [read_partition(p, r.opts) for g in r.partitions(init, end) for p in g.parts if p.topic == "orders"][0]
        assert (ev["kind"] == "gap").sum() == 0 and (ev["kind"] == "data").any()
        assert ev[ev["kind"] == "progress"].iloc[0]["lso"] == ORDERS_LSO
        api_versions = [q.version for q in broker.requests_for("api_versions")]
        assert {q.version for q in broker.requests_for("fetch")} == {negotiated(table, 1)}
        assert {q.version for q in broker.requests_for("list_offsets")} == {negotiated(table, 2)}
        assert {q.version for q in broker.requests_for("metadata")} == {negotiated(table, 3)}
    # kafka-python opens with ApiVersions v4. Before 2.4 the UNSUPPORTED_VERSION answer lists
    # nothing and the client falls back to v0; from 2.4 on it names the broker's own range.
    if table[18][1] >= 4:
        assert set(api_versions) == {4}
    else:
        assert api_versions[:2] == [4, table[18][1] if release >= (2, 4) else 0]


def test_metadata_v13_top_level_error_is_retried_then_named(root):
    with FakeKafkaBroker(root, broker_version=(4, 0)) as broker:
        with KafkaWire(broker.bootstrap_servers, **WIRE) as w:
            broker.metadata_error(129, count=2)  # REBOOTSTRAP_REQUIRED (KIP-1102)
            assert w.partitions(["orders"]) == {"orders": [0]}
            broker.metadata_error(129, count=50)
            with pytest.raises(KafkaUnavailable, match="REBOOTSTRAP_REQUIRED"):
                w.partitions(["orders"])
            broker.clear_faults()
            broker.metadata_error("TOPIC_AUTHORIZATION_FAILED", count=1)
            with pytest.raises(KafkaWireError, match="TOPIC_AUTHORIZATION_FAILED") as err:
                w.partitions(["orders"])
            assert not isinstance(err.value, KafkaUnavailable)


@pytest.mark.parametrize("release", [(0, 11), NEWEST], ids=lambda v: ".".join(map(str, v)))
def test_fake_agrees_with_kafka_pythons_consumer_on_real_tables(root, release):
    """kafka-python's own consumer negotiates against the same tables and reads what the fake
    serves (an independent client of the fake's version handling)."""
    from kafka import KafkaConsumer, TopicPartition

    with FakeKafkaBroker(root, broker_version=release) as broker:
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None,
                                 enable_auto_commit=False, isolation_level="read_uncommitted",
                                 consumer_timeout_ms=1500, request_timeout_ms=3000)
        try:
            consumer.assign([TopicPartition("orders", 0)])
            consumer.seek_to_beginning()
            offsets = [m.offset for m in consumer]
        finally:
            consumer.close()
        versions = {q.version for q in broker.requests_for("fetch")}
    assert offsets and max(offsets) == ORDERS_HW - 1
    assert versions == {min(BROKER_API_VERSIONS[release][1][1], 12)}  # kafka-python fetches by name (<= v12)
