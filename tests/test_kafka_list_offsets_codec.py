"""The hand-written ListOffsets codecs (KafkaWire's request encoder and response decoder, the broker
fake's response encoder) produce and read exactly what kafka-python's schema-driven classes do,
for every version either side uses; plus one round trip over a real socket per version."""

from __future__ import annotations

import io

import pytest
from kafka.protocol.consumer import ListOffsetsRequest

from streaming.simulate.encode import encode_batch
from streaming.sources.kafka_client.list_offsets_codec import (
    LIST_OFFSETS_MAX_VERSION,
    LIST_OFFSETS_MIN_VERSION,
)
from streaming.sources.kafka_client.list_offsets_codec import ListOffsetsDecoder as _ListOffsetsDecoder
from streaming.sources.kafka_client.list_offsets_codec import ListOffsetsFor as _ListOffsets
from streaming.sources.kafka_wire import KafkaWire
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import DEFAULT_API_VERSIONS, FakeKafkaBroker, _ListOffsetsAnswer

_watchdog = kafka_watchdog(60)

WIRE_VERSIONS = range(LIST_OFFSETS_MIN_VERSION, LIST_OFFSETS_MAX_VERSION + 1)
WANTED = [("orders", [0, 1, 5]), ("x" * 300, list(range(300))), ("empty", [])]  # long name: varint lengths
ANSWERS = [("orders", [(0, 0, -1, 13, 0), (1, 6, -1, -1, 3)]),
           ("t" * 200, [(i, 0, -1, i * 1000, i) for i in range(200)]),
           ("empty", [])]


def _reference_request(version: int, timestamp: int, isolation: int) -> ListOffsetsRequest:
    T = ListOffsetsRequest.ListOffsetsTopic
    ref = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, timeout_ms=1234, topics=[
        T(name=n, partitions=[T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                              for p in ps]) for n, ps in WANTED])
    ref.API_VERSION = version
    ref.with_header(correlation_id=9, client_id="cid")
    return ref


@pytest.mark.parametrize("version", WIRE_VERSIONS)
@pytest.mark.parametrize("spec", [(-2, 0), (-1, 0), (-1, 1)])
def test_wire_request_bytes_equal_kafka_python(version, spec):
    ts, isolation = spec
    req = _ListOffsets(WANTED, ts, isolation, 1234)
    req.API_VERSION = version
    req.with_header(correlation_id=9, client_id="cid")
    ref = _reference_request(version, ts, isolation)
    assert req.encode(header=True, framed=True) == ref.encode(header=True, framed=True)
    assert req.encode() == ref.encode()


@pytest.mark.parametrize("version", WIRE_VERSIONS)
def test_wire_decodes_what_kafka_python_encodes(version):
    answer = _ListOffsetsAnswer(version, ANSWERS)
    answer.with_header(correlation_id=5)
    body = answer._kafka_python().encode(header=True)  # kafka-python's own encoder, not the fake's
    decoder = _ListOffsetsDecoder(version)
    buf = io.BytesIO(body)
    assert decoder.parse_header(buf).correlation_id == 5
    got = decoder.decode(buf)
    assert got.offsets == {(n, i): (code, off) for n, ps in ANSWERS for i, code, _, off, _ in ps}
    assert got.API_VERSION == version and got.throttle_time_ms == 0
    with pytest.raises(ValueError):  # trailing garbage is a corrupt answer, not silently ignored
        decoder.decode(io.BytesIO(body[4 + (1 if version >= 6 else 0):] + b"\x00"))


@pytest.mark.parametrize("version", range(0, 12))
def test_fake_response_bytes_equal_kafka_python(version):
    answer = _ListOffsetsAnswer(version, ANSWERS)
    answer.with_header(correlation_id=77)
    assert answer.encode(header=True, framed=True) == answer._kafka_python().encode(header=True, framed=True)


@pytest.mark.parametrize("version", WIRE_VERSIONS)
def test_round_trip_over_a_socket_at_each_version(tmp_path, version):
    versions = dict(DEFAULT_API_VERSIONS)
    versions[ListOffsetsRequest.API_KEY] = (version, version)
    with FakeKafkaBroker(tmp_path, num_nodes=2, api_versions=versions) as broker:
        broker.create_topic("orders", 3)
        broker.append_batches("orders", 1, encode_batch(0, 3, producer_id=7, producer_epoch=0, base_sequence=0,
                                                        is_transactional=True))
        with KafkaWire(broker.bootstrap_servers, retries=1, retry_backoff_ms=10) as w:
            offs = w.offsets([("orders", p) for p in range(3)])
        assert {r.version for r in broker.requests_for("list_offsets")} == {version}
    assert (offs[("orders", 1)].high_watermark, offs[("orders", 1)].lso) == (3, 0)
    assert (offs[("orders", 0)].high_watermark, offs[("orders", 0)].log_start) == (0, 0)


def test_wire_skips_tagged_fields_it_does_not_know():
    """v6+ answers may carry tagged fields (KIP-482) on any struct; they are skipped, not misread."""
    import struct

    part = struct.pack(">ihqqi", 3, 0, -1, 42, 0) + b"\x01\x07\x02xy"  # one tagged field: tag 7, 2 bytes
    body = struct.pack(">i", 0) + b"\x02" + b"\x02a" + b"\x02" + part + b"\x01\x00\x01z" + b"\x00"
    # topic tagged fields: one field (tag 0, 1 byte); top level: none
    got = _ListOffsetsDecoder(7).decode(io.BytesIO(body))
    assert got.offsets == {("a", 3): (0, 42)}


# -- the array decoder (ListOffsetsAnswer arrays, _AnswerLayout) -------------------------------
# Bytes written by hand from apache/kafka clients/src/main/resources/common/message/
# ListOffsetsResponse.json (the ListOffsetsResponse message), version 7 (flexible since v6):
# ThrottleTimeMs int32, Topics compact array of [Name compact string, Partitions compact array of
# [PartitionIndex int32, ErrorCode int16, Timestamp int64, Offset int64, LeaderEpoch int32,
# tagged fields], tagged fields], tagged fields. Compact lengths are unsigned varints of n + 1.


def _entry(p: int, error: int, offset: int, epoch: int, tags: bytes = b"\x00") -> bytes:
    import struct

    return struct.pack(">ihqqi", p, error, -1, offset, epoch) + tags


def _answer_v7(topics: list[tuple[str, list[bytes]]], throttle: int = 0) -> bytes:
    import struct

    out = struct.pack(">i", throttle) + bytes([len(topics) + 1])
    for name, entries in topics:
        out += bytes([len(name) + 1]) + name.encode() + bytes([len(entries) + 1]) + b"".join(entries) + b"\x00"
    return out + b"\x00"


# a: partition 0 answers offset 13; partition 1 answers NOT_LEADER_OR_FOLLOWER (6) with the
# fields' defaults (-1), as KafkaApis.buildErrorResponse fills them; b: partition 5, offset 42
_A0, _A1, _B5 = _entry(0, 0, 13, 0), _entry(1, 6, -1, -1), _entry(5, 0, 42, 3)


def _request() -> _ListOffsets:
    import numpy as np

    req = _ListOffsets([("a", np.array([0, 1])), ("b", np.array([5]))], -1, 1, 1000)
    req.API_VERSION = 7
    req.with_header(correlation_id=1, client_id="cid")
    return req


def test_array_decoder_reads_an_answer_in_the_request_layout():
    """An answer that names the request's partitions in its order is read through the request's
    layout: error codes and offsets as arrays in the request's order, per-partition errors kept."""
    req = _request()
    got = req.header.get_response_class().decode(io.BytesIO(_answer_v7([("a", [_A0, _A1]), ("b", [_B5])], 25)))
    assert got.flat is not None and got.request is req and got.throttle_time_ms == 25
    assert got.flat[0].tolist() == [0, 6, 0] and got.flat[1].tolist() == [13, -1, 42]
    assert got.offsets == {("a", 0): (0, 13), ("a", 1): (6, -1), ("b", 5): (0, 42)}
    from streaming.sources.kafka_client.list_offsets import _columns

    codes, offs = _columns(got, req.wanted, "node 1")
    assert codes.tolist() == [0, 6, 0] and offs.tolist() == [13, -1, 42]


def test_array_decoder_falls_back_for_other_orders_tags_and_missing_partitions():
    """Anything but the request's exact layout is decoded field by field: topics in another order
    (matched by name and partition), a partition with a tagged field (KIP-482: tag 7, two bytes,
    skipped), a partition missing (the call fails naming it, as before)."""
    from streaming.sources.kafka_client.list_offsets import _columns
    from streaming.sources.kafka_wire import KafkaWireError

    req = _request()
    decoder = req.header.get_response_class()
    other = decoder.decode(io.BytesIO(_answer_v7([("b", [_B5]), ("a", [_A1, _A0])])))
    assert other.flat is None
    assert [c.tolist() for c in _columns(other, req.wanted, "node 1")] == [[0, 6, 0], [13, -1, 42]]
    tagged = decoder.decode(io.BytesIO(_answer_v7([("a", [_A0, _entry(1, 6, -1, -1, b"\x01\x07\x02xy")]),
                                                   ("b", [_B5])])))
    assert tagged.flat is None and tagged.offsets == {("a", 0): (0, 13), ("a", 1): (6, -1), ("b", 5): (0, 42)}
    short = decoder.decode(io.BytesIO(_answer_v7([("a", [_A0]), ("b", [_B5])])))
    assert short.flat is None
    with pytest.raises(KafkaWireError, match="lacks a-1"):
        _columns(short, req.wanted, "node 1")


def test_array_decoder_rejects_a_truncated_answer():
    """An answer cut inside a partition entry is corrupt (ValueError), never read short."""
    req = _request()
    body = _answer_v7([("a", [_A0, _A1]), ("b", [_B5])])
    with pytest.raises(ValueError):
        req.header.get_response_class().decode(io.BytesIO(body[:20]))


def test_offsets_table_handles_partition_errors_one_by_one(tmp_path):
    """``KafkaWire.offsets_table`` over the socket fake: orders-1 answers NOT_LEADER_OR_FOLLOWER
    once (a leader error: ``OffsetFetcherUtils.handleListOffsetResponse`` retries it after a
    metadata refresh), orders-2 answers it on every try (unavailable after the second round, with
    its error), orders-0 answers at once; a TOPIC_AUTHORIZATION_FAILED answer raises naming the
    ACL (``Action.DENIED``) instead of being retried."""
    from streaming.sources.kafka_client.results import DOWN, OK
    from streaming.sources.kafka_wire import KafkaAuthorizationError

    with FakeKafkaBroker(tmp_path, num_nodes=2) as broker:
        broker.create_topic("orders", 3)
        for p in range(3):
            broker.append_batches("orders", p, encode_batch(0, p + 1, producer_id=7, producer_epoch=0,
                                                            base_sequence=0, is_transactional=False))
        broker.not_leader("orders", 1, count=1)
        broker.inject_partition_error("orders", 2, "NOT_LEADER_OR_FOLLOWER", count=100, apis=("list_offsets",))
        with KafkaWire(broker.bootstrap_servers, retries=1, retry_backoff_ms=10) as w:
            t = w.offsets_table([("orders", [0, 1, 2])])
            assert t.status.tolist() == [OK, OK, DOWN]
            assert t.high_watermark[:2].tolist() == [1, 2] and t.log_start[:2].tolist() == [0, 0]
            assert t.down == {("orders", 2): "NOT_LEADER_OR_FOLLOWER for orders-2"}
            broker.clear_faults()
            broker.inject_partition_error("orders", 0, "TOPIC_AUTHORIZATION_FAILED", apis=("list_offsets",))
            with pytest.raises(KafkaAuthorizationError):
                w.offsets_table([("orders", [0, 1, 2])])


def test_slow_decoding_on_the_io_thread_does_not_count_against_a_broker_deadline(tmp_path, monkeypatch):
    """``broker_timeout_ms`` bounds how long a *broker* takes to answer. The client decodes the
    answers on its single IO thread; if that decoding ran inside each broker's wait, one slow
    decode (here the first answer's decode holds the IO thread 3 s, longer than the 2 s
    deadline, as decoding 200,000 partitions' answers did under load) would make brokers that
    answered in time look stalled and their partitions unavailable. Both brokers answer at once,
    so no partition may be reported unavailable and none asked twice."""
    import time as _time

    from streaming.sources.kafka_client import list_offsets_codec

    original = list_offsets_codec.ListOffsetsDecoder.decode
    calls = []

    def slow_once(self, data):
        calls.append(1)
        if len(calls) == 1:
            _time.sleep(3.0)  # the IO thread busy decoding, not a wait of the test
        return original(self, data)

    with FakeKafkaBroker(tmp_path, num_nodes=2) as broker:
        broker.create_topic("orders", 4)
        with KafkaWire(broker.bootstrap_servers, retries=1, retry_backoff_ms=10, broker_timeout_ms=2000) as w:
            w.offsets_available([("orders", p) for p in range(4)])  # connections and metadata first
            monkeypatch.setattr(list_offsets_codec.ListOffsetsDecoder, "decode", slow_once)
            before = len(broker.requests_for("list_offsets"))
            offs, down = w.offsets_available([("orders", p) for p in range(4)])
            asked = len(broker.requests_for("list_offsets")) - before
    assert down == {} and sorted(offs) == [("orders", p) for p in range(4)]
    # two leaders, three requests each, answered once: no broker was taken for stalled and asked again
    assert asked == 6 and len(calls) == 6


def test_offsets_table_rows_read_at_once_are_the_rows_one_by_one():
    # OffsetsTable.rows(idx): the planner's thousands of answered rows per trigger, each as
    # PartitionOffsets; a DELETED row is -1 offsets, leader -1 and no topic id (UNKNOWN_TOPIC_ID
    # confirmed), an OK row its ListOffsets answers and the Metadata topic id. Expected by hand.
    from streaming.sources.kafka_client.results import DELETED, OK, OffsetsTable, PartitionOffsets

    table = OffsetsTable.asking([("a", [0, 1]), ("b", [3])])
    i = table.id_index("id-a")
    for row, (st, ls, hw, lso, leader, tid) in enumerate([(OK, 2, 10, 8, 5, i), (DELETED, -1, -1, -1, -1, -1),
                                                            (OK, 0, 4, 4, 6, -1)]):
        table.status[row], table.log_start[row], table.high_watermark[row] = st, ls, hw
        table.lso[row], table.leader[row], table.id_of[row] = lso, leader, tid
    assert table.rows([2, 0, 1]) == [
        PartitionOffsets("b", 3, 0, 4, 4, 6, topic_id=None),
        PartitionOffsets("a", 0, 2, 10, 8, 5, topic_id="id-a"),
        PartitionOffsets("a", 1, -1, -1, -1, -1, deleted=True)]
    assert table.rows([]) == []


def test_offsets_returned_are_remembered_per_partition_and_a_step_back_names_its_topic():
    # list_offsets._check_backwards remembers, per topic and partition, the log start and high
    # watermark this client returned (NO_OFFSET for a deleted partition, arrays grown to the
    # highest partition), and returned_offsets.went_back names the topics (table order) whose answered partition
    # is now below what was returned: truncation, a lagging leader, or the topic created again.
    import asyncio
    from types import SimpleNamespace

    from streaming.sources.kafka_client.list_offsets import _check_backwards
    from streaming.sources.kafka_client.metadata_cache import NO_OFFSET
    from streaming.sources.kafka_client.results import DELETED, DOWN, OK, OffsetsTable
    from streaming.sources.kafka_client.returned_offsets import went_back as _went_back

    def table(rows):
        t = OffsetsTable.asking([("a", [0, 2]), ("empty", []), ("b", [1]), ("c", [0])])
        for r, (st, ls, hw) in enumerate(rows):
            t.status[r], t.log_start[r], t.high_watermark[r] = st, ls, hw
        return t

    last: dict = {}
    core = SimpleNamespace(_cache=SimpleNamespace(last_offsets=last), _config={"metadata_max_age_ms": 0})
    asyncio.run(_check_backwards(core, table([(OK, 3, 10), (OK, 0, 5), (DELETED, -1, -1), (DOWN, -1, -1)]), None))
    assert {k: (ls.tolist(), hw.tolist()) for k, (ls, hw) in last.items()} == {
        "a": ([3, NO_OFFSET, 0], [10, NO_OFFSET, 5]), "b": ([NO_OFFSET, NO_OFFSET], [NO_OFFSET, NO_OFFSET])}
    prevs = [last.get(n) for n in ("a", "empty", "b", "c")]
    # a-2's high watermark went from 5 to 4; b-1 was deleted (nothing returned); c was never answered
    assert _went_back(table([(OK, 3, 10), (OK, 0, 4), (OK, 0, 0), (OK, 0, 1)]), prevs) == ["a"]
    assert _went_back(table([(OK, 2, 12), (OK, 0, 5), (OK, 0, 0), (OK, 0, 1)]), prevs) == ["a"]  # log start 3 -> 2
    assert _went_back(table([(OK, 3, 11), (OK, 1, 5), (OK, 0, 0), (OK, 0, 1)]), prevs) == []
    assert _went_back(table([(DOWN, -1, -1), (OK, 0, 5), (OK, 0, 0), (OK, 0, 1)]), prevs) == []  # unanswered: no proof
