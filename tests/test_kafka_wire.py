"""KafkaWire (streaming/sources/kafka_wire.py) against the fake broker over real loopback sockets.

Every test drives kafka-python's real network stack (KafkaWire, KafkaProducer) against
tests/kafka_fake_broker.py. No test needs a real Kafka. All clients use short timeouts and a
per-test watchdog kills the run (with tracebacks) if anything hangs.
"""

from __future__ import annotations

import faulthandler
import json
import pickle
import socket
import struct
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from streaming.sources.kafka_wire import (
    FETCH_MAX_VERSION,
    FetchStatus,
    KafkaUnavailable,
    KafkaWire,
    KafkaWireError,
)
from tests.kafka_fake_broker import (
    DEFAULT_API_VERSIONS,
    FakeKafkaBroker,
    build_control_batch,
    scan_batches,
    stage_segment,
)

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
ORDERS = SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000000.log"
ORDERS_EXPECTED = json.loads((SAMPLES / "synthetic" / "scenario_orders-0_expected.json").read_text())
TXN_STATE_40 = SAMPLES / "synthetic" / "tv2_txn_state-40_00000000000000000000.log"
TXN_STATE_30 = SAMPLES / "real" / "fvaleri_kafka39___transaction_state-30_00000000000000000000.log"
OUTPUT_TOPIC = SAMPLES / "real" / "fvaleri_kafka39_output-topic-0_00000000000000000000.log"

ORDERS_HW = ORDERS_EXPECTED["batches"][-1]["lastOffset"] + 1  # 13
ORDERS_LSO = ORDERS_EXPECTED["expected_LSO"]  # 9

FAST = dict(client_id="txnwatch-test", request_timeout_ms=1500, retries=3, retry_backoff_ms=20,
            retry_backoff_max_ms=200, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
            bootstrap_timeout_ms=2000)


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(60, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def log_root(tmp_path: Path) -> Path:
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "output-topic", 0, OUTPUT_TOPIC)
    stage_segment(root, "__transaction_state", 40, TXN_STATE_40)
    stage_segment(root, "__transaction_state", 30, TXN_STATE_30)
    return root


@pytest.fixture
def broker(log_root: Path):
    with FakeKafkaBroker(log_root) as b:
        yield b


@pytest.fixture
def make_wire():
    wires: list[KafkaWire] = []

    def make(servers: str, **overrides) -> KafkaWire:
        w = KafkaWire(servers, **{**FAST, **overrides})
        wires.append(w)
        return w

    yield make
    for w in wires:
        w.close()


@pytest.fixture
def wire(broker, make_wire) -> KafkaWire:
    return make_wire(broker.bootstrap_servers)


def whole_batches(data: bytes) -> list[bytes]:
    """Complete batches of a fetch response (a trailing partial batch is dropped)."""
    out, pos = [], 0
    while len(data) - pos >= 12:
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if pos + 12 + length > len(data):
            break
        out.append(data[pos:pos + 12 + length])
        pos += 12 + length
    return out


def batch_offsets(batch: bytes) -> tuple[int, int]:
    base = struct.unpack_from(">q", batch, 0)[0]
    return base, base + struct.unpack_from(">i", batch, 23)[0]


# ------------------------------------------------------------------------------------ metadata
def test_partitions_topics_pattern_and_internal(broker, wire):
    assert wire.partitions() == {"orders": [0], "output-topic": [0]}
    assert wire.partitions(include_internal=True) == {
        "__transaction_state": [30, 40], "orders": [0], "output-topic": [0]}
    # explicitly named internal topics are always returned
    assert wire.partitions(["__transaction_state"]) == {"__transaction_state": [30, 40]}
    assert wire.partitions(pattern=r"ord.*") == {"orders": [0]}
    assert wire.partitions(pattern=r"ord") == {}  # full match, like Java's Pattern.matches
    assert wire.partitions(pattern=r"__trans.*") == {}
    assert wire.partitions(pattern=r"__trans.*", include_internal=True) == {"__transaction_state": [30, 40]}
    assert wire.partitions(["__transaction_state"], pattern=r"out.*") == {
        "__transaction_state": [30, 40], "output-topic": [0]}
    # unknown topics are absent and are NOT auto-created by looking at them
    assert wire.partitions(["nope", "orders"]) == {"orders": [0]}
    assert "nope" not in broker.topics()
    assert wire.leader("orders", 0) == 1
    assert all(r.version >= 1 for r in broker.requests_for("metadata"))


# ------------------------------------------------------------------------------------ offsets
def test_offsets_lso_below_high_watermark_with_open_transaction(broker, wire):
    offs = wire.offsets([("orders", 0), ("output-topic", 0), ("__transaction_state", 30)])
    o = offs[("orders", 0)]
    assert (o.log_start, o.high_watermark, o.lso, o.leader, o.deleted) == (0, ORDERS_HW, ORDERS_LSO, 1, False)
    assert o.lso < o.high_watermark
    closed = offs[("output-topic", 0)]  # data + COMMIT marker: nothing open
    assert (closed.log_start, closed.high_watermark, closed.lso) == (0, 2, 2)
    ts = offs[("__transaction_state", 30)]
    assert (ts.log_start, ts.high_watermark, ts.lso) == (0, 5, 5)
    reqs = broker.requests_for("list_offsets")
    assert {r.version for r in reqs} and min(r.version for r in reqs) >= 2
    seen = {(r.request.isolation_level, p.timestamp) for r in reqs for t in r.request.topics for p in t.partitions}
    assert seen == {(0, -2), (0, -1), (1, -1)}


def test_offsets_unknown_partition_is_reported_deleted(broker, wire):
    offs = wire.offsets([("orders", 0), ("orders", 7), ("nope", 0)])
    assert offs[("orders", 0)].high_watermark == ORDERS_HW
    assert offs[("orders", 7)].deleted and offs[("nope", 0)].deleted
    assert offs[("nope", 0)].high_watermark == -1
    assert wire.offsets([]) == {}


# ------------------------------------------------------------------------------------ fetch
def test_fetch_returns_the_segment_bytes_verbatim(broker, wire):
    r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.ok and r.status is FetchStatus.OK and r.error == "NONE" and r.error_code == 0
    assert r.records == ORDERS.read_bytes()
    assert (r.high_watermark, r.last_stable_offset, r.log_start_offset) == (ORDERS_HW, ORDERS_LSO, 0)
    assert r.api_version == FETCH_MAX_VERSION and r.leader == 1
    (req,) = broker.requests_for("fetch")
    assert req.request.isolation_level == 0  # READ_UNCOMMITTED: markers and open txns included
    assert req.request.topics[0].partitions[0].fetch_offset == 0
    # real broker bytes of __transaction_state (compacted coordinator log)
    r = wire.fetch("__transaction_state", 30, 0, 1 << 20)
    assert r.records == TXN_STATE_30.read_bytes()
    # a control batch (COMMIT marker written by a real 3.9 broker) comes through untouched
    r = wire.fetch("output-topic", 0, 1, 1 << 20)
    assert r.records == OUTPUT_TOPIC.read_bytes()[82:]
    assert struct.unpack_from(">h", r.records, 21)[0] & 0x20


def test_fetch_starts_at_the_batch_containing_the_offset(broker, wire):
    data = ORDERS.read_bytes()
    last = ORDERS_EXPECTED["batches"][-1]  # offsets 11-12, gzip
    r = wire.fetch("orders", 0, 12, 1 << 20)
    assert r.records == data[last["position"]:]
    assert batch_offsets(r.records) == (11, 12)
    at_end = wire.fetch("orders", 0, ORDERS_HW, 1 << 20)
    assert at_end.ok and at_end.records == b"" and at_end.high_watermark == ORDERS_HW


def test_fetch_honours_max_bytes_like_kafka(broker, wire):
    data = ORDERS.read_bytes()
    first = ORDERS_EXPECTED["batches"][0]["size"]  # 79
    # exact byte slice: the response may end in a partial batch
    r = wire.fetch("orders", 0, 0, 100)
    assert r.records == data[:100]
    assert [batch_offsets(b) for b in whole_batches(r.records)] == [(0, 1)]
    # smaller than the first batch: still one whole batch (KIP-74)
    r = wire.fetch("orders", 0, 0, 10)
    assert r.records == data[:first]


def test_fetch_loop_with_small_max_bytes_reassembles_the_log(broker, wire):
    data = ORDERS.read_bytes()
    got, offset, rounds = [], 0, 0
    while offset < ORDERS_HW:
        rounds += 1
        r = wire.fetch("orders", 0, offset, 150)
        assert r.ok and len(r.records) <= max(150, 97)
        batches = [b for b in whole_batches(r.records) if batch_offsets(b)[1] >= offset]
        assert batches, "no progress"
        got.extend(batches)
        offset = batch_offsets(batches[-1])[1] + 1
    assert b"".join(got) == data and rounds > 3


def test_fake_can_trim_to_whole_batches(log_root, make_wire):
    with FakeKafkaBroker(log_root, partial_batches=False) as b:
        r = make_wire(b.bootstrap_servers).fetch("orders", 0, 0, 100)
        assert r.records == ORDERS.read_bytes()[:79]


def test_fetch_never_spans_segments_and_sees_appends(broker, wire):
    data = ORDERS.read_bytes()
    broker.roll_segment("orders", 0)  # new empty segment 00000000000000000013.log
    marker = build_control_batch(ORDERS_HW, 4002, 2, commit=False, coordinator_epoch=2,
                                 timestamp_ms=1_700_000_100_000, partition_leader_epoch=7)
    broker.append_raw("orders", 0, marker)  # ABORT closes pid 4002's open transaction (offset 9)
    r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.records == data  # first segment only
    assert r.high_watermark == ORDERS_HW + 1 and r.last_stable_offset == 11  # pid 4000's txn still open
    r2 = wire.fetch("orders", 0, ORDERS_HW, 1 << 20)
    assert r2.records == marker
    assert broker.partition_state("orders", 0).segments == [0, ORDERS_HW]


def test_fetch_v4_only_broker_has_no_log_start_offset(log_root, make_wire):
    versions = dict(DEFAULT_API_VERSIONS)
    versions[1] = (4, 4)  # Fetch v4 (Kafka 0.11.0 minus KIP-107)
    with FakeKafkaBroker(log_root, api_versions=versions) as b:
        r = make_wire(b.bootstrap_servers).fetch("orders", 0, 0, 1 << 20)
        assert r.api_version == 4 and r.log_start_offset == -1
        assert (r.high_watermark, r.last_stable_offset) == (ORDERS_HW, ORDERS_LSO)
        assert r.records == ORDERS.read_bytes()


def test_older_api_versions_are_negotiated(log_root, make_wire):
    versions = dict(DEFAULT_API_VERSIONS)
    versions[18] = (0, 2)  # ApiVersions: kafka-python's v4 is answered UNSUPPORTED_VERSION (v0 format)
    versions[3] = (1, 8)  # Metadata
    versions[2] = (2, 5)  # ListOffsets
    versions[1] = (4, 11)  # Fetch
    with FakeKafkaBroker(log_root, api_versions=versions) as b:
        w = make_wire(b.bootstrap_servers)
        assert w.offsets([("orders", 0)])[("orders", 0)].lso == ORDERS_LSO
        r = w.fetch("orders", 0, 0, 1 << 20)
        assert r.api_version == 11 and r.log_start_offset == 0 and r.records == ORDERS.read_bytes()
        assert [r.version for r in b.requests_for("api_versions")][:2] == [4, 2]
        assert {r.version for r in b.requests_for("list_offsets")} == {5}


def test_fetch_is_refused_by_a_broker_without_fetch_v4(log_root, make_wire):
    versions = dict(DEFAULT_API_VERSIONS)
    versions[1] = (0, 3)
    with FakeKafkaBroker(log_root, api_versions=versions) as b:
        with pytest.raises(KafkaWireError) as exc:
            make_wire(b.bootstrap_servers).fetch("orders", 0, 0, 1 << 20)
        assert not isinstance(exc.value, KafkaUnavailable)
        assert "Fetch" in str(exc.value)


# ------------------------------------------------------------------------------------ faults
def test_leader_not_available_is_retried(broker, wire):
    wire.partitions(["orders"])
    broker.leader_not_available("orders", 0, count=2)
    r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.ok and r.records == ORDERS.read_bytes()
    assert len(broker.requests_for("fetch")) == 3
    broker.leader_not_available("orders", 0, count=2)
    assert wire.offsets([("orders", 0)])[("orders", 0)].lso == ORDERS_LSO


def test_leader_move_is_followed(log_root, make_wire):
    with FakeKafkaBroker(log_root, num_nodes=2) as b:
        w = make_wire(b.bootstrap_servers)
        assert w.fetch("orders", 0, 0, 1 << 20).leader == 1
        b.move_leader("orders", 0, 2)
        r = w.fetch("orders", 0, 0, 1 << 20)
        assert r.ok and r.leader == 2 and r.records == ORDERS.read_bytes()
        fetches = b.requests_for("fetch")
        assert [f.node_id for f in fetches] == [1, 1, 2]  # old leader answered NOT_LEADER_OR_FOLLOWER
        assert w.offsets([("orders", 0)])[("orders", 0)].leader == 2
        b.move_leader("orders", 0, 1)
        offs = w.offsets([("orders", 0)])[("orders", 0)]
        assert (offs.leader, offs.lso) == (1, ORDERS_LSO)


def test_leader_never_available_gives_up_with_clear_error(broker, wire):
    wire.partitions(["orders"])
    broker.move_leader("orders", 0, -1)
    with pytest.raises(KafkaUnavailable) as exc:
        wire.fetch("orders", 0, 0, 1 << 20)
    msg = str(exc.value)
    assert f"after {FAST['retries'] + 1} attempts" in msg  # bounded: the retries, then give up
    assert "LEADER_NOT_AVAILABLE" in msg and "orders-0" in msg and broker.bootstrap_servers in msg
    with pytest.raises(KafkaUnavailable):
        wire.offsets([("orders", 0)])


def test_offset_out_of_range_is_a_typed_gap_result(broker, wire):
    broker.advance_log_start("orders", 0, 5)
    r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.status is FetchStatus.OFFSET_OUT_OF_RANGE and r.out_of_range and not r.ok
    assert (r.error, r.error_code, r.records) == ("OFFSET_OUT_OF_RANGE", 1, b"")
    assert (r.log_start_offset, r.high_watermark, r.last_stable_offset) == (5, ORDERS_HW, ORDERS_LSO)
    # the caller emits a gap and restarts at the log start
    r2 = wire.fetch("orders", 0, r.log_start_offset, 1 << 20)
    assert r2.ok and r2.log_start_offset == 5
    assert r2.records == ORDERS.read_bytes()[ORDERS_EXPECTED["batches"][4]["position"]:]
    assert wire.offsets([("orders", 0)])[("orders", 0)].log_start == 5
    beyond = wire.fetch("orders", 0, ORDERS_HW + 10, 1 << 20)
    assert beyond.out_of_range and beyond.high_watermark == ORDERS_HW


def test_deleted_topic_is_a_typed_result(broker, wire):
    assert wire.fetch("orders", 0, 0, 1 << 20).ok
    broker.delete_topic("orders")
    r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.status is FetchStatus.DELETED and r.deleted
    assert r.error == "UNKNOWN_TOPIC_OR_PARTITION" and r.records == b""
    assert wire.offsets([("orders", 0)])[("orders", 0)].deleted
    assert "orders" not in wire.partitions()
    assert wire.fetch("never-existed", 3, 0, 1024).deleted
    # the fake renamed the partition dir like Kafka does
    assert any(p.name.startswith("orders-0.") and p.name.endswith("-delete") for p in broker.root.iterdir())


def test_dropped_connection_is_retried(broker, wire):
    wire.partitions(["orders"])
    broker.drop_connection(count=1, api="fetch")
    r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.ok and r.records == ORDERS.read_bytes()
    broker.drop_connection(count=1, api="list_offsets")
    assert wire.offsets([("orders", 0)])[("orders", 0)].high_watermark == ORDERS_HW


def test_unanswered_request_times_out_and_is_retried(broker, make_wire):
    w = make_wire(broker.bootstrap_servers, request_timeout_ms=400)
    w.partitions(["orders"])
    broker.stall(count=1, api="fetch")
    r = w.fetch("orders", 0, 0, 1 << 20)
    # the stalled request timed out on the client, which sent it again and got the answer
    assert r.ok and r.records == ORDERS.read_bytes()
    assert len(broker.requests_for("fetch")) == 2


def test_non_retriable_partition_error_raises(broker, wire):
    broker.inject_partition_error("orders", 0, "TOPIC_AUTHORIZATION_FAILED", apis=("fetch",))
    with pytest.raises(KafkaWireError) as exc:
        wire.fetch("orders", 0, 0, 1 << 20)
    assert not isinstance(exc.value, KafkaUnavailable)
    assert exc.value.error == "TOPIC_AUTHORIZATION_FAILED" and exc.value.error_code == 29


def test_broker_down_raises_kafka_unavailable_in_bounded_time_then_recovers(broker, wire):
    assert wire.fetch("orders", 0, 0, 1 << 20).ok
    broker.stop()
    with pytest.raises(KafkaUnavailable) as exc:
        wire.fetch("orders", 0, 0, 1 << 20)
    msg = str(exc.value)
    assert f"after {FAST['retries'] + 1} attempts" in msg  # bounded: the retries, then give up
    assert broker.bootstrap_servers in msg  # bootstrap servers
    assert f"node 1 at 127.0.0.1:{broker.port}" in msg  # the partition leader / broker tried
    assert "last error" in msg and "attempts" in msg
    with pytest.raises(KafkaUnavailable):
        wire.offsets([("orders", 0)])
    broker.start()  # same port
    deadline = time.monotonic() + 5
    while True:
        try:
            r = wire.fetch("orders", 0, 0, 1 << 20)
            break
        except KafkaUnavailable:
            if time.monotonic() > deadline:
                raise
    assert r.ok and r.records == ORDERS.read_bytes()


def test_bootstrap_failure_names_the_servers(make_wire):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more
    w = make_wire(f"127.0.0.1:{port}", bootstrap_timeout_ms=500)
    with pytest.raises(KafkaUnavailable) as exc:
        w.partitions(["orders"])
    msg = str(exc.value)
    assert "within 500 ms" in msg  # the configured bootstrap bound was the one applied
    assert f"127.0.0.1:{port}" in msg and "could not bootstrap" in msg and "refused" in msg.lower()


def test_configuration_is_validated():
    with pytest.raises(ValueError):
        KafkaWire("127.0.0.1:9092", no_such_setting=1)
    with pytest.raises(ValueError):
        KafkaWire("")
    w = KafkaWire("127.0.0.1:9092,127.0.0.1:9093", security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                  sasl_plain_username="u", sasl_plain_password="p", ssl_cafile="/ca.pem", ssl_check_hostname=False)
    assert w.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9093"
    with pytest.raises(ValueError):
        w.fetch("t", 0, 0, 0)
    w.close()
    with pytest.raises(KafkaWireError):
        w.partitions()


def test_pickles_for_spark_executors(broker, wire):
    assert wire.fetch("orders", 0, 0, 1 << 20).ok
    clone = pickle.loads(pickle.dumps(wire))
    try:
        r = clone.fetch("orders", 0, 9, 1 << 20)
        assert r.ok and batch_offsets(r.records) == (9, 9)
    finally:
        clone.close()


# ------------------------------------------------------------------------------------ producers
def test_kafka_producer_acks_all_writes_to_the_fake(broker, wire):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", request_timeout_ms=3000,
                             max_block_ms=5000, retries=2, linger_ms=0)
    try:
        md1 = producer.send("alerts", key=b"k1", value=b'{"alert": 1}').get(timeout=5)
        md2 = producer.send("alerts", key=b"k2", value=b'{"alert": 2}').get(timeout=5)
    finally:
        producer.close(timeout=5)
    assert (md1.topic, md1.partition, md1.offset, md2.offset) == ("alerts", 0, 0, 1)
    produce = broker.requests_for("produce")
    assert produce and all(r.request.acks == -1 for r in produce)
    assert broker.requests_for("init_producer_id")  # enable_idempotence=True (default) works
    r = wire.fetch("alerts", 0, 0, 1 << 20)
    batches, _ = scan_batches(r.records)
    assert [b.base_offset for b in batches] == [0, 1] and r.high_watermark == 2 == r.last_stable_offset
    assert all(b.producer_id >= 1000 and not b.is_transactional for b in batches)


def test_transactional_producer_commit_abort_and_hanging(broker, wire):
    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="tx-app", request_timeout_ms=3000,
                      max_block_ms=5000)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("payments", b"a")
        p.send("payments", b"b")
        p.commit_transaction()
        p.begin_transaction()
        p.send("payments", b"c")
        p.flush(timeout=5)  # written, then aborted
        p.abort_transaction()
        p.begin_transaction()
        p.send("payments", b"d")
        p.flush(timeout=5)  # never committed: a hanging transaction
    finally:
        p.close(timeout=2)
    offs = wire.offsets([("payments", 0)])[("payments", 0)]
    r = wire.fetch("payments", 0, 0, 1 << 20)
    batches, _ = scan_batches(r.records)
    kinds = [("marker" if b.is_control else "data", b.control_type) for b in batches]
    assert kinds == [("data", None), ("marker", 1), ("data", None), ("marker", 0), ("data", None)]
    assert all(b.size == 78 for b in batches if b.is_control)
    assert len({b.producer_id for b in batches}) == 1
    open_first = batches[-1].base_offset
    assert (offs.lso, offs.high_watermark) == (open_first, open_first + 1)
    assert (r.last_stable_offset, r.high_watermark) == (open_first, open_first + 1)
    # a new incarnation of the same transactional id fences the old one and aborts its transaction
    p2 = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="tx-app",
                       request_timeout_ms=3000, max_block_ms=5000)
    try:
        p2.init_transactions()
    finally:
        p2.close(timeout=2)
    offs = wire.offsets([("payments", 0)])[("payments", 0)]
    assert offs.lso == offs.high_watermark == open_first + 2
    last = scan_batches(wire.fetch("payments", 0, open_first + 1, 1 << 20).records)[0][-1]
    assert last.is_control and last.control_type == 0 and last.producer_epoch == batches[-1].producer_epoch + 1


def test_fake_marker_writer_matches_real_broker_bytes():
    real = OUTPUT_TOPIC.read_bytes()[82:160]  # COMMIT marker written by Kafka 3.9 (CRC-verified fixture)
    ours = build_control_batch(1, 1, 0, commit=True, coordinator_epoch=0, timestamp_ms=1742739703234,
                               partition_leader_epoch=0)
    assert ours == real


@pytest.mark.parametrize("max_partition_fetch_bytes", [1 << 20, 100])
def test_fake_agrees_with_kafka_pythons_consumer(broker, max_partition_fetch_bytes):
    """Interop check of the fake itself: kafka-python's KafkaConsumer (which skips partial trailing
    batches and filters aborted transactions with the aborted list) reads it like a broker."""
    seen = {}
    for iso in ("read_committed", "read_uncommitted"):
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, isolation_level=iso, group_id=None,
                          enable_auto_commit=False, consumer_timeout_ms=500, request_timeout_ms=3000,
                          fetch_max_wait_ms=50, max_partition_fetch_bytes=max_partition_fetch_bytes)
        try:
            tp = TopicPartition("orders", 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            seen[iso] = ([m.offset for m in c], c.position(tp))
        finally:
            c.close()
    # pid 4001's transaction (offset 2) was aborted; READ_COMMITTED stops at the LSO (9)
    assert seen["read_committed"] == ([0, 1, 4, 7], ORDERS_LSO)
    assert seen["read_uncommitted"] == ([0, 1, 2, 4, 7, 9, 10, 11, 12], ORDERS_HW)
