"""Issue 20, items 2-7: the live client's error semantics, KIP-219 throttling, per-broker
isolation, no side effects on the cluster, topics that change and legacy entries, each against
the fake broker over real sockets.

Every expectation is written by hand from Apache Kafka's behaviour; the class and method each
one follows is named in the test.
"""

from __future__ import annotations

import gzip
import struct
import time
import zlib

import pandas as pd
import pytest

from streaming.simulate.encode import encode_batch
from streaming.sources.kafka import KafkaStreamReader, read_partition
from streaming.sources.kafka_plan_state import PlanState
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker, segment_file_name, stage_segment

# the same sample, client settings and source options as the fetch-fault tests
from tests.test_kafka_fetch_faults import ORDERS, ORDERS_HW, SOURCE

_watchdog = kafka_watchdog(90)




def reader(broker: FakeKafkaBroker, topics: str = '["orders"]', **opts: str) -> KafkaStreamReader:
    return KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": topics,
                              "starting_offsets": "earliest", **SOURCE, **opts})


def read_all(r: KafkaStreamReader, start: dict, end: dict, topic: str) -> pd.DataFrame:
    parts = [p for g in r.partitions(start, end) for p in g.parts if p.topic == topic]
    ev = pd.concat([read_partition(p, r.opts) for p in parts], ignore_index=True)
    return ev[ev["topic"] == topic]


def tx_batch(offset: int, count: int = 1, producer_id: int = 77) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch(offset, count, producer_id=producer_id, producer_epoch=0, base_sequence=0,
                        is_transactional=True, base_timestamp=now, max_timestamp=now)


# ------------------------------------------------------------------ legacy (magic 0/1) entries
def legacy_message(offset: int, value: bytes, *, magic: int = 1, attributes: int = 0) -> bytes:
    """One magic 0/1 log entry, laid out as ``org.apache.kafka.common.record.LegacyRecord``:
    offset int64, size int32, then crc int32 (CRC-32 over magic..end), magic int8, attributes
    int8, timestamp int64 (magic 1 only), key bytes (-1 = null), value bytes."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", 1_700_000_000_000)
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    record = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(record)) + record


def legacy_gzip_wrapper(first: int, values: list[bytes]) -> bytes:
    """A compressed magic 1 wrapper (attributes 1 = gzip) holding ``values`` as inner messages
    with relative offsets 0..n-1; the wrapper's own offset is that of its *last* inner message
    (``LogValidator.validateMessagesAndAssignOffsetsCompressed``: ``lastOffset`` is stamped on
    the wrapper), which is what a reader must step past."""
    inner = b"".join(legacy_message(i, v) for i, v in enumerate(values))
    return legacy_message(first + len(values) - 1, gzip.compress(inner), attributes=1)


def test_legacy_entries_are_stepped_over_and_the_v2_transaction_after_them_is_found(tmp_path):
    """Item 7. A log upgraded from the 0.10 message format: segment 0 holds magic 0/1 messages
    (offsets 0-2) and a gzip wrapper (offsets 3-4), segment 5 the first v2 batch, an open
    transaction. ``LocalLog.read`` never spans two segments, so the fetch at offset 0 answers
    legacy entries only; the reader must continue at offset 5, not give up on the range."""
    root = tmp_path / "kafka-logs"
    d = root / "legacy-0"
    d.mkdir(parents=True)
    seg0 = (legacy_message(0, b"a", magic=0) + legacy_message(1, b"b") + legacy_message(2, b"c")
            + legacy_gzip_wrapper(3, [b"d", b"e"]))
    (d / segment_file_name(0)).write_bytes(seg0)
    (d / segment_file_name(5)).write_bytes(tx_batch(5, 2))
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, '["legacy"]')
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        assert end["parts"]["legacy\t0"][0] == 7  # high watermark: the log end (fake: one replica)
        ev = read_all(r, init, end, "legacy")
    assert (ev["kind"] == "gap").sum() == 0, ev[ev["kind"] == "gap"]["reason"].tolist()
    data = ev[ev["kind"] == "data"]
    assert data[["first_offset", "last_offset", "producer_id"]].values.tolist() == [[5, 6, 77]]
    assert (ev["kind"] == "progress").sum() == 1


# ------------------------------------------------------------------ no side effects on the cluster
def _named_in_metadata(broker: FakeKafkaBroker, topic: str) -> int:
    return sum(1 for r in broker.requests_for("metadata")
               if r.request is not None and r.request.topics and any(t.name == topic for t in r.request.topics))


def test_a_pre_2_8_cluster_without_transaction_state_is_watched_and_never_gets_one(tmp_path, caplog):
    """Item 5. Kafka 2.7's KafkaApis.getTopicMetadata creates a missing internal topic named in
    a Metadata request (createInternalTopic), whatever AllowAutoTopicCreation says. txnwatch
    must find ``__transaction_state`` in a list of all topics and name it only once it exists;
    meanwhile the data partitions are planned and a log line says why there is no coordinator."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    with FakeKafkaBroker(root, broker_version=(2, 7)) as broker:
        r = reader(broker)
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        assert sorted(end["parts"]) == ["orders\t0"] and end["parts"]["orders\t0"][0] == ORDERS_HW
        assert end["txn_n"] == 0
        assert broker.internal_topics_created == []
        assert _named_in_metadata(broker, "__transaction_state") == 0
        assert any("no __transaction_state topic" in m for m in caplog.messages)
        # the first transactional producer creates it (here: by hand); the next plan reads it
        broker.create_topic("__transaction_state", 2)
        end2 = r.latestOffset(end, None)
        assert end2["txn_n"] == 2
        assert {"__transaction_state\t0", "__transaction_state\t1"} <= set(end2["parts"])
        assert broker.internal_topics_created == []


# ------------------------------------------------------------------ error semantics of the Java client
def test_unknown_server_error_on_list_offsets_and_fetch_is_retried_not_fatal(tmp_path):
    """Item 2. ``OffsetFetcherUtils.handleListOffsetResponse`` retries a partition on any
    unexpected code (its ``default`` branch) and ``FetchCollector.handleInitializeErrors`` logs
    UNKNOWN_SERVER_ERROR and fetches again: one such answer neither stops the job nor loses data."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    with FakeKafkaBroker(root) as broker:
        r = reader(broker)
        init = r.initialOffset()
        broker.inject_partition_error("orders", 0, "UNKNOWN_SERVER_ERROR", 1, apis=("list_offsets",))
        end = r.latestOffset(init, None)
        assert end["parts"]["orders\t0"][0] == ORDERS_HW and end["unavail"] == {}
        broker.inject_partition_error("orders", 0, "UNKNOWN_SERVER_ERROR", 1, apis=("fetch",))
        ev = read_all(r, init, end, "orders")
    assert (ev["kind"] == "gap").sum() == 0
    assert (ev["kind"] == "progress").sum() == 1
    assert max(ev.loc[ev["kind"].isin(["data", "marker"]), "last_offset"]) == ORDERS_HW - 1


def test_a_partition_answering_unknown_server_error_for_ever_is_unavailable_not_fatal(tmp_path):
    """Item 2. The error persists: that partition becomes unavailable (availability records),
    the other one is planned; nothing raises."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "orders", 1, ORDERS)
    with FakeKafkaBroker(root) as broker:
        r = reader(broker)
        init = r.initialOffset()
        broker.fail_partition("orders", 1, "UNKNOWN_SERVER_ERROR")
        end = r.latestOffset(init, None)
    assert end["parts"]["orders\t0"][0] == ORDERS_HW
    assert "UNKNOWN_SERVER_ERROR" in end["unavail"]["orders\t1"]["error"]


def test_offset_not_available_during_an_election_is_retried(tmp_path, wires):
    """Item 2. ``Partition.fetchOffsetForTimestamp`` answers OFFSET_NOT_AVAILABLE until the new
    leader's high watermark reaches its epoch start offset; the client retries on the new leader."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    with FakeKafkaBroker(root, num_nodes=2) as broker:
        w = wires(broker)
        assert w.offsets([("orders", 0)])[("orders", 0)].high_watermark == ORDERS_HW
        broker.elect_leader("orders", 0, 2, catching_up=2)
        offs, down = w.offsets_available([("orders", 0)])
        # two rounds per call (KafkaWire._PARTIAL_ROUNDS): NOT_LEADER from node 1, then node 2
        # still catching up; the partition is asked again (later trigger) and answers
        if down:
            assert "OFFSET_NOT_AVAILABLE" in down[("orders", 0)] or "NOT_LEADER" in down[("orders", 0)]
            offs, down = w.offsets_available([("orders", 0)])
        assert down == {} and offs[("orders", 0)].high_watermark == ORDERS_HW and offs[("orders", 0)].leader == 2


def test_current_leader_epoch_is_sent_in_fetch_and_list_offsets(tmp_path, wires):
    """Item 2 (KIP-320). Fetch v9+ and ListOffsets v4+ carry CurrentLeaderEpoch = the epoch of
    the last Metadata answer (the Java client's ``FetchRequest.PartitionData.currentLeaderEpoch``
    from ``SubscriptionState.FetchPosition.currentLeader``); the fake's leader checks it
    (``Partition.checkCurrentLeaderEpoch``)."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    with FakeKafkaBroker(root, num_nodes=2) as broker:
        broker.move_leader("orders", 0, 2)
        broker.move_leader("orders", 0, 1)  # leader epoch 2 now
        w = wires(broker)
        w.offsets([("orders", 0)])
        w.fetch("orders", 0, 0, 1 << 20)
        lo = [p.current_leader_epoch for r in broker.requests_for("list_offsets") for t in r.request.topics
              for p in t.partitions]
        fe = [p.current_leader_epoch for r in broker.requests_for("fetch") for t in r.request.topics
              for p in t.partitions]
    assert lo and set(lo) == {2}
    assert fe == [2]


def test_metadata_older_than_seen_is_not_believed(tmp_path, wires):
    """Item 2. ``Metadata.updateLatestMetadata``: an answer whose leader epoch is below the last
    seen one keeps the cached leader. Here every broker's cache lags after the leader moved to
    node 2 (``stale_leader``: the old leader 1, epoch 0); the client keeps node 2 and never
    sends a partition request to node 1."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    with FakeKafkaBroker(root, num_nodes=2) as broker:
        w = wires(broker)
        broker.move_leader("orders", 0, 2)  # epoch 1
        assert w.offsets([("orders", 0)])[("orders", 0)].leader == 2
        broker.stale_leader("orders", 0, leader=1, leader_epoch=0)
        w.refresh_metadata(["orders"])
        assert w.leader("orders", 0) == 2
        before = len(broker.requests)
        res = w.fetch("orders", 0, 0, 1 << 20)
        off = w.offsets([("orders", 0)])[("orders", 0)]
        to_node_1 = [r for r in broker.requests[before:] if r.api in ("fetch", "list_offsets") and r.node_id == 1]
    assert res.ok and off.high_watermark == ORDERS_HW
    assert to_node_1 == []


# ------------------------------------------------------------------ KIP-219 throttling
def test_a_kip219_throttle_is_waited_out_on_that_broker_only(tmp_path, wires):
    """Item 3. A 2.0+ broker answers at once with throttle_time_ms and mutes the connection
    (``KafkaApis.sendResponseMaybeThrottle``, ``KafkaChannel`` MUTED_AND_THROTTLED); the Java
    client's ``NetworkClient.maybeThrottle`` sends nothing more to that node until the throttle
    ends and keeps using the others. The throttle (800 ms) is longer than all the client's
    retry backoffs together (10 + 20 + 40 ms): counted as failures, the partition would be
    unavailable; honoured, both partitions answer and nothing is sent into the muted connection."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "orders", 1, ORDERS)
    tps = [("orders", 0), ("orders", 1)]
    with FakeKafkaBroker(root, num_nodes=2) as broker:  # orders-0 led by node 1, orders-1 by node 2
        w = wires(broker)
        assert {tp: o.leader for tp, o in w.offsets(tps).items()} == {("orders", 0): 1, ("orders", 1): 2}
        broker.throttle("fetch", 800, count=1, node_id=1)
        assert w.fetch("orders", 0, 0, 1 << 20).records == ORDERS.read_bytes()  # a throttled full answer
        offs, down = w.offsets_available(tps)
        assert down == {}
        assert {tp: o.high_watermark for tp, o in offs.items()} == {tp: ORDERS_HW for tp in tps}
        assert broker.sent_while_muted[1] == 0
        assert broker.answered_while_other_blocked[2] >= 1  # node 2 served during node 1's throttle
        assert w.throttle_waits >= 1


# ------------------------------------------------------------------ one slow broker
def test_a_stalled_broker_leaves_only_its_partitions_unavailable(tmp_path):
    """Item 4. Node 1's disk stalls: its ListOffsets is read and never answered (``stall``).
    All leaders are asked at once (Java's ``OffsetFetcher`` sends one request per node, each
    with its own timeout in ``NetworkClient``'s ``InFlightRequests``), so node 2's partition is
    planned, and orders-0 is unavailable after broker_timeout_ms (300 ms), long before the
    request timeout (20 s). The next plan does not send node 1 another request while the first
    is still in flight."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "orders", 1, ORDERS)
    with FakeKafkaBroker(root, num_nodes=2) as broker:
        r = reader(broker, broker_timeout_ms="300", request_timeout_ms="20000")
        init = r.initialOffset()
        broker.stall(count=1, api="list_offsets", node_id=1)
        end = r.latestOffset(init, None)
        assert end["parts"]["orders\t1"][0] == ORDERS_HW
        assert "did not answer" in end["unavail"]["orders\t0"]["error"]
        to_node_1 = sum(1 for q in broker.requests_for("list_offsets") if q.node_id == 1)
        deadline = time.monotonic() + 10
        while time.time() < end["unavail"]["orders\t0"]["retry_at"] / 1000 and time.monotonic() < deadline:
            time.sleep(0.01)  # past the partition's availability backoff (retry_backoff_ms = 10)
        end2 = r.latestOffset(end, None)
        assert "has not answered a request sent" in end2["unavail"]["orders\t0"]["error"]
        assert sum(1 for q in broker.requests_for("list_offsets") if q.node_id == 1) == to_node_1
        assert broker.answered_while_other_blocked[2] >= 1


def test_a_stalled_fetch_makes_its_partition_unavailable_without_holding_the_read(tmp_path):
    """Item 4, executor side: the Fetch of a planned range is never answered; after
    broker_timeout_ms the partition gets its ``unavailable`` gap row and no progress row
    (streaming/availability.py), instead of the read waiting request_timeout_ms x retries."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "orders", 1, ORDERS)
    with FakeKafkaBroker(root, num_nodes=2) as broker:
        r = reader(broker, broker_timeout_ms="300", request_timeout_ms="20000")
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        broker.stall(count=1, api="fetch", node_id=1)
        ev = read_all(r, init, end, "orders")
    p0, p1 = ev[ev["partition"] == 0], ev[ev["partition"] == 1]
    assert list(p0["kind"]) == ["gap"] and p0.iloc[0]["reason"].startswith("unavailable")
    assert "broker_timeout_ms" in p0.iloc[0]["reason"]
    assert (p1["kind"] == "progress").sum() == 1 and (p1["kind"] == "gap").sum() == 0


def test_probe_bytes_bounds_each_partition_not_the_request(tmp_path):
    """Item 4. Three partitions of one leader, each with an open transaction at its LSO: one
    probe Fetch carries all three with PartitionMaxBytes = probe_bytes and a request MaxBytes
    large enough for all (``KafkaApis.handleFetchRequest`` fills partitions in order up to the
    request's MaxBytes, KIP-74), so no partition is starved into a Fetch of its own."""
    root = tmp_path / "kafka-logs"
    for p in range(3):
        d = root / f"orders-{p}"
        d.mkdir(parents=True)
        (d / segment_file_name(0)).write_bytes(tx_batch(0, 5, producer_id=100 + p))
    with FakeKafkaBroker(root) as broker:
        r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]',
                               "read_mode": "probe", "probe_bytes": "4096", **SOURCE})
        init = r.initialOffset()
        before = len(broker.requests_for("fetch"))
        end = r.latestOffset(init, None)
        fetches = broker.requests_for("fetch")[before:]
    assert len(fetches) == 1
    req = fetches[0].request
    assert sorted(p.partition for t in req.topics for p in t.partitions) == [0, 1, 2]
    assert {p.partition_max_bytes for t in req.topics for p in t.partitions} == {4096}
    assert req.max_bytes >= 3 * 4096
    memos = PlanState.from_json(end).probe  # the offsets dict holds the memos packed
    assert sorted(memos) == ["orders\t0", "orders\t1", "orders\t2"]
    assert sorted(m.pid for m in memos.values()) == [100, 101, 102]


# ------------------------------------------------------------------ topics that change
def test_a_deleted_topic_is_dropped_with_one_record_and_its_recreation_is_reported(tmp_path):
    """Item 6. ``gone`` is deleted (the fake renames its directories ``<dir>.<id>-delete`` and
    Metadata answers UNKNOWN_TOPIC_OR_PARTITION, as ``KafkaApis.handleTopicMetadataRequest`` does
    for a topic no longer in the metadata cache). After the brokers confirm it (fresh Metadata
    answers with backoff), the next plan emits one ``unavailable`` gap row for gone-0 and stops
    planning it: later plans send no request for it. Created again (a new topic id, Metadata
    v10+), it is reported as a new topic read from its log start."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "gone", 0, ORDERS)
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, '["orders", "gone"]')
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        read_all(r, init, end, "gone")
        broker.delete_topic("gone")
        end2 = r.latestOffset(end, None)
        assert "gone\t0" not in end2["parts"] and "orders\t0" in end2["parts"]
        ev = read_all(r, end, end2, "gone")
        assert list(ev["kind"]) == ["gap"]
        assert ev.iloc[0]["reason"].startswith("unavailable: gone-0 was deleted")
        end3 = r.latestOffset(end2, None)
        asked = len([q for q in broker.requests if q.api in ("list_offsets", "fetch")])
        end4 = r.latestOffset(end3, None)
        assert not any(p.topic == "gone" for grp in r.partitions(end3, end4) for p in grp.parts)
        lo = [q for q in broker.requests if q.api in ("list_offsets", "fetch")][asked:]
        assert all(t.name != "gone" for q in lo if q.api == "list_offsets" for t in q.request.topics)
        broker.create_topic("gone", 1)
        broker.append_batches("gone", 0, tx_batch(0, 4))
        end5 = r.latestOffset(end4, None)
        ev5 = read_all(r, end4, end5, "gone")
    gaps = ev5[ev5["kind"] == "gap"]
    assert len(gaps) == 1 and "was deleted and created again" in gaps.iloc[0]["reason"]
    data = ev5[ev5["kind"] == "data"]
    assert data[["first_offset", "last_offset"]].values.tolist() == [[0, 3]]


def test_a_current_cluster_without_transaction_state_is_asked_by_name_and_never_gets_one(tmp_path, caplog):
    """Item 5, 2.8+: naming a missing internal topic with AllowAutoTopicCreation=false creates
    nothing (``AutoTopicCreationManager``, KAFKA-9751; 3.0 ``KafkaApis``: ``allowAutoCreation =
    config.autoCreateTopicsEnable && metadataRequest.allowAutoTopicCreation``), so txnwatch may ask
    for it by name to tell a missing topic from a missing Describe ACL."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    with FakeKafkaBroker(root) as broker:
        r = reader(broker)
        end = r.latestOffset(r.initialOffset(), None)
        assert end["txn_n"] == 0 and sorted(end["parts"]) == ["orders\t0"]
        assert broker.internal_topics_created == [] and "__transaction_state" not in broker.topics()
        assert _named_in_metadata(broker, "__transaction_state") >= 1
    assert any("no __transaction_state topic" in m for m in caplog.messages)


def test_a_configuration_error_stops_with_a_message_naming_the_setting(tmp_path, wires):
    """Item 2. UNSUPPORTED_COMPRESSION_TYPE is what ``KafkaApis.handleFetchRequest`` answers for
    zstd batches to a Fetch below v10: no retry heals it, the client's version setting does. The
    client stops with one message naming the setting (streaming/sources/kafka_errors.py)."""
    from streaming.sources.kafka_wire import KafkaWireError

    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    with FakeKafkaBroker(root) as broker:
        w = wires(broker)
        broker.inject_partition_error("orders", 0, 76, 1, apis=("fetch",))
        with pytest.raises(KafkaWireError, match=r"UNSUPPORTED_COMPRESSION_TYPE.*api_version") as err:
            w.fetch("orders", 0, 0, 1 << 20)
        assert "orders-0" in str(err.value)
        assert len(broker.requests_for("fetch")) == 1  # not retried


def test_a_throttle_longer_than_broker_timeout_is_named_as_a_throttle(tmp_path, wires):
    """Item 3/4 boundary. A throttle longer than broker_timeout_ms leaves that broker's
    partitions unavailable for the call (the others are not held up), and the reason says it is
    the broker's quota throttle, not a broker that stopped answering; nothing is sent into the
    muted connection."""
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    stage_segment(root, "orders", 1, ORDERS)
    tps = [("orders", 0), ("orders", 1)]
    with FakeKafkaBroker(root, num_nodes=2) as broker:
        w = wires(broker, broker_timeout_ms=200)
        w.offsets(tps)
        broker.throttle("fetch", 1500, count=1, node_id=1)
        w.fetch("orders", 0, 0, 1 << 20)
        offs, down = w.offsets_available(tps)
        assert list(offs) == [("orders", 1)]
        assert "throttled by the broker (quota, KIP-219)" in down[("orders", 0)]
        assert broker.sent_while_muted[1] == 0
