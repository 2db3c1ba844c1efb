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
