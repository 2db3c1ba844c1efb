"""The hand-made Fetch request encoder (streaming/sources/kafka_client/fetch_codec.py) and the
hand-made request/response headers (streaming/sources/kafka_client/transport.py).

Expected bytes are written by hand from apache/kafka's
clients/src/main/resources/common/message/FetchRequest.json, RequestHeader.json and
ResponseHeader.json (field order, widths, ``flexibleVersions``); every version the client sends is
also compared with kafka-python's own schema-driven encoder, which the client used before.
"""

from __future__ import annotations

import io

import pytest
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer import FetchRequest, FetchResponse

from streaming.sources.kafka_client.fetch_codec import (
    FETCH_MAX_VERSION,
    FETCH_MIN_VERSION,
    FetchDecoder,
    FetchFor,
)
from streaming.sources.kafka_client.transport import read_response_header, request_header

ONE = [("a", [(3, 5, 77, 99)])]  # topic "a", partition 3, leader epoch 5, offset 77, 99 bytes


def _request(wanted, version):
    r = FetchFor(wanted, max_wait_ms=0, min_bytes=1, max_bytes=1000, isolation_level=0)
    return r.encode(version=version)


def test_v4_bytes_follow_fetch_request_json():
    # FetchRequest.json v4: ReplicaId int32, MaxWaitMs int32, MinBytes int32, MaxBytes int32 (3+),
    # IsolationLevel int8 (4+), Topics [Topic string, Partitions [Partition int32,
    # FetchOffset int64, PartitionMaxBytes int32]]; not flexible: INT32 array and INT16 string lengths
    expected = bytes.fromhex(
        "ffffffff" "00000000" "00000001" "000003e8" "00"
        "00000001" "0001" "61"
        "00000001" "00000003" "000000000000004d" "00000063")
    assert _request(ONE, 4) == expected


def test_v12_bytes_follow_fetch_request_json():
    # v7 adds SessionId/SessionEpoch and ForgottenTopicsData, v9 CurrentLeaderEpoch, v11 RackId,
    # v12 LastFetchedEpoch and the flexible encoding (compact lengths = n + 1, tagged-field
    # sections after each struct and at the end; ClusterId is tagged and null, so not written)
    expected = bytes.fromhex(
        "ffffffff" "00000000" "00000001" "000003e8" "00" "00000000" "ffffffff"
        "02" "02" "61"
        "02" "00000003" "00000005" "000000000000004d" "ffffffff" "ffffffffffffffff" "00000063" "00"
        "00"
        "01" "01" "00")
    assert _request(ONE, 12) == expected


def _kafka_python(wanted, version):
    topics = [FetchRequest.FetchTopic(topic=t, partitions=[FetchRequest.FetchTopic.FetchPartition(
        partition=p, current_leader_epoch=e, fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=m) for p, e, o, m in parts]) for t, parts in wanted]
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1000, isolation_level=0, session_id=0,
                        session_epoch=-1, topics=topics, forgotten_topics_data=[], rack_id="",
                        version=version).encode()


@pytest.mark.parametrize("version", range(FETCH_MIN_VERSION, FETCH_MAX_VERSION + 1))
def test_every_version_equals_kafka_pythons_encoder(version):
    wanted = [("orders", [(0, 7, 0, 1 << 20), (2, -1, 123456789012, 4096)]), ("ünïcode-topic", [(1, 0, 5, 10)]),
              ("empty", [])]
    assert _request(wanted, version) == _kafka_python(wanted, version)


def test_versions_outside_the_encoded_range_are_refused():
    with pytest.raises(ValueError):
        _request(ONE, FETCH_MIN_VERSION - 1)
    with pytest.raises(ValueError):
        _request(ONE, FETCH_MAX_VERSION + 1)


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", ["txnwatch", "", None, "clïent"])
def test_request_header_equals_kafka_pythons(flexible, client_id):
    mine = request_header(1, 12, 7, client_id, flexible)
    theirs = RequestHeader(request_api_key=1, request_api_version=12, correlation_id=7,
                           client_id=client_id).encode(flexible=flexible)
    assert mine == theirs


def test_request_header_bytes_follow_request_header_json():
    # RequestHeader.json: RequestApiKey int16, RequestApiVersion int16, CorrelationId int32,
    # ClientId nullable string always with an INT16 length ("flexibleVersions": "none"), and
    # in v2 (flexible) an empty tagged-field section
    assert request_header(1, 12, 7, "ab", True) == bytes.fromhex("0001" "000c" "00000007" "0002" "6162" "00")
    assert request_header(2, 5, 9, None, False) == bytes.fromhex("0002" "0005" "00000009" "ffff")


def test_response_header_is_read_and_its_tagged_fields_skipped():
    # ResponseHeader.json: CorrelationId int32; v1 adds a tagged-field section (count, then tag,
    # size, data per field), skipped: the stream is left at the body
    buf = io.BytesIO(bytes.fromhex("0000002a") + b"body")
    assert read_response_header(buf, False) == 42 and buf.read() == b"body"
    buf = io.BytesIO(bytes.fromhex("0000002a" "00") + b"body")
    assert read_response_header(buf, True) == 42 and buf.read() == b"body"
    buf = io.BytesIO(bytes.fromhex("0000002a" "02" "00" "01" "ff" "05" "02" "abcd") + b"body")
    assert read_response_header(buf, True) == 42 and buf.read() == b"body"
    with pytest.raises(ValueError):
        read_response_header(io.BytesIO(b"\x00\x00"), False)
    with pytest.raises(ValueError):
        read_response_header(io.BytesIO(bytes.fromhex("0000002a" "01" "00" "05" "ab")), True)


def _answer(version, topics, throttle=0, error=0):
    R = FetchResponse
    P = R.FetchableTopicResponse.PartitionData
    A = P.AbortedTransaction

    def part(p):
        aborted = p["aborted_transactions"]
        return P(**{**p, "aborted_transactions": None if aborted is None else [A(**a) for a in aborted]})
    return R(throttle_time_ms=throttle, error_code=error, session_id=0, responses=[R.FetchableTopicResponse(
        topic=t, partitions=[part(p) for p in parts]) for t, parts in topics], version=version).encode()


_PARTS = [("orders", [
    dict(partition_index=0, error_code=0, high_watermark=13, last_stable_offset=9, log_start_offset=2,
         aborted_transactions=[{"producer_id": 7, "first_offset": 3}, {"producer_id": 8, "first_offset": 5}],
         preferred_read_replica=-1, records=b"\x00" * 70),
    dict(partition_index=4, error_code=6, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
         aborted_transactions=None, preferred_read_replica=-1, records=None)]),
    ("ünï", [dict(partition_index=1, error_code=0, high_watermark=5, last_stable_offset=5, log_start_offset=0,
                  aborted_transactions=[], preferred_read_replica=2, records=b"")]), ("none", [])]


def _fields(ans):
    return (ans.throttle_time_ms, getattr(ans, "error_code", 0) or 0,
            [(t.topic, [(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                         p.log_start_offset if ans.API_VERSION >= 5 else -1,
                         None if p.aborted_transactions is None else
                         [(a[0], a[1]) if isinstance(a, tuple) else (a.producer_id, a.first_offset)
                          for a in p.aborted_transactions],
                         p.preferred_read_replica if ans.API_VERSION >= 11 else -1,
                         None if p.records is None else bytes(p.records)) for p in t.partitions])
             for t in ans.responses])


@pytest.mark.parametrize("version", range(FETCH_MIN_VERSION, FETCH_MAX_VERSION + 1))
def test_every_answer_version_decodes_as_kafka_python_decodes_it(version):
    raw = _answer(version, _PARTS, throttle=25, error=0)
    mine = FetchDecoder(version).decode(raw)
    theirs = FetchResponse.decode(raw, version=version)
    assert _fields(mine) == _fields(theirs)
    assert mine.throttle_time_ms == 25 and mine.responses[0].partitions[0].aborted_transactions == [(7, 3), (8, 5)]


def test_v4_answer_bytes_follow_fetch_response_json():
    # FetchResponse.json v4: ThrottleTimeMs int32, Responses [Topic string, Partitions
    # [PartitionIndex int32, ErrorCode int16, HighWatermark int64, LastStableOffset int64,
    # AbortedTransactions nullable [ProducerId int64, FirstOffset int64], Records nullable bytes]]
    raw = bytes.fromhex(
        "00000000" "00000001" "0001" "61" "00000001"
        "00000003" "0000" "000000000000000d" "0000000000000009" "ffffffff" "00000003" "78797a")
    ans = FetchDecoder(4).decode(raw)
    (t,) = ans.responses
    (p,) = t.partitions
    assert (t.topic, p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
            p.aborted_transactions, p.records) == ("a", 3, 0, 13, 9, -1, None, b"xyz")


def test_v12_tagged_fields_of_the_answer_are_skipped():
    # FetchResponse.json v12: CurrentLeader is tagged field 1 of a partition (KIP-951 sends it with
    # NOT_LEADER_OR_FOLLOWER); the records after it must still be read in place
    R = FetchResponse
    P = R.FetchableTopicResponse.PartitionData
    part = P(partition_index=2, error_code=6, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
             aborted_transactions=None, preferred_read_replica=-1, records=b"",
             current_leader=P.LeaderIdAndEpoch(leader_id=3, leader_epoch=9))
    raw = R(throttle_time_ms=0, error_code=0, session_id=0, responses=[R.FetchableTopicResponse(
        topic="b", partitions=[part])], version=12).encode()
    assert FetchResponse.decode(raw, version=12).responses[0].partitions[0].current_leader is not None
    (p,) = FetchDecoder(12).decode(raw).responses[0].partitions
    assert (p.partition_index, p.error_code, p.records) == (2, 6, b"")


@pytest.mark.parametrize("version", [4, 12])
def test_a_cut_answer_is_a_decoding_error(version):
    raw = _answer(version, _PARTS)
    for cut in (3, len(raw) // 2, len(raw) - 1):
        with pytest.raises(ValueError):
            FetchDecoder(version).decode(raw[:cut])
    with pytest.raises(ValueError):
        FetchDecoder(version).decode(raw + b"\x00")
