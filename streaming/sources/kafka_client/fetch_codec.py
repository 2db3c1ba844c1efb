"""Fetch (API key 1) v4..v12: requests encoded and responses decoded by hand from Kafka's JSON schemas.

The probe stage sends one multi-partition Fetch per leader every trigger (about 1,800 at 1,000
brokers); kafka-python's schema classes build an object per topic and per partition and walk
them field by field to encode each one, which was a large part of that stage's cost on the IO
thread. The layout is apache/kafka's
clients/src/main/resources/common/message/FetchRequest.json (the fields of v4..v12)::

  ReplicaId int32, MaxWaitMs int32, MinBytes int32, MaxBytes int32 (v3+),
  IsolationLevel int8 (v4+), SessionId int32 (v7+), SessionEpoch int32 (v7+),
  Topics [Topic string (v0-12),
          Partitions [Partition int32, CurrentLeaderEpoch int32 (v9+), FetchOffset int64,
                      LastFetchedEpoch int32 (v12+), LogStartOffset int64 (v5+),
                      PartitionMaxBytes int32]],
  ForgottenTopicsData [Topic string (v7-12), Partitions [int32]] (v7+), RackId string (v11+)

The answer, apache/kafka's FetchResponse.json (v4..v12)::

  ThrottleTimeMs int32 (v1+), ErrorCode int16 (v7+), SessionId int32 (v7+),
  Responses [Topic string (v0-12),
             Partitions [PartitionIndex int32, ErrorCode int16, HighWatermark int64,
                         LastStableOffset int64 (v4+), LogStartOffset int64 (v5+),
                         AbortedTransactions nullable [ProducerId int64, FirstOffset int64] (v4+),
                         PreferredReadReplica int32 (v11+), Records nullable records]]

is decoded by :class:`FetchDecoder` into light objects with the attribute names of
kafka-python's ``FetchResponse`` that the client reads (kafka-python built several objects per
partition and walked every field through its schema classes).

``"flexibleVersions": "12+"``: in v12 arrays, strings and records are compact (unsigned varint
length + 1, 0 = null) and every struct ends in a tagged-field section; ClusterId (v12+) is a
tagged field whose default (null) is not written, and the answer's tagged fields (DivergingEpoch,
CurrentLeader, SnapshotId: replication and KIP-951 hints a consumer of offsets does not use) are
skipped. tests/test_kafka_fetch_codec.py checks the bytes against the schemas by hand and against
kafka-python's encoder and decoder for every version from FETCH_MIN_VERSION to FETCH_MAX_VERSION.
"""

from __future__ import annotations

import struct

from kafka.protocol.consumer import FetchRequest

from udfs.varint import encode_uvarint as _uvarint
from udfs.varint import read_uvarint as _read_uvarint

__all__ = ["FETCH_MAX_VERSION", "FETCH_MIN_VERSION", "FetchAnswer", "FetchDecoder", "FetchFor", "FetchPartition"]

#: Fetch v4: last_stable_offset + isolation level (KIP-98); v5 log_start_offset (KIP-107).
FETCH_MIN_VERSION = 4
#: Fetch v13+ addresses topics by topic id (KIP-516); v12 is the last name-based version.
FETCH_MAX_VERSION = 12

#: (partition, current leader epoch (-1 unknown), fetch offset, partition max bytes)
FetchPartition = tuple[int, int, int, int]

_HEAD = struct.Struct(">iiiib")  # ReplicaId, MaxWaitMs, MinBytes, MaxBytes, IsolationLevel
_SESSION = struct.Struct(">ii")  # SessionId, SessionEpoch (v7+)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
# one partition entry per version range: the fields each version has, in schema order
_PART_V4 = struct.Struct(">iqi")  # Partition, FetchOffset, PartitionMaxBytes
_PART_V5 = struct.Struct(">iqqi")  # + LogStartOffset (v5+)
_PART_V9 = struct.Struct(">iiqqi")  # + CurrentLeaderEpoch (v9+)
_PART_V12 = struct.Struct(">iiqiqiB")  # + LastFetchedEpoch (v12+), then the entry's tagged fields (none)

_NO_EPOCH = -1  # LastFetchedEpoch: "-1 if there is none" (a consumer fetching from an offset)
_NO_LOG_START = -1  # LogStartOffset: "only used when the request is sent by the follower"


_SMALL = [bytes((n,)) for n in range(0x80)]  # an unsigned varint below 128 is that one byte


def _length(n: int, flexible: bool, fixed: struct.Struct) -> bytes:
    """An array or string length: compact (unsigned varint of n + 1) in flexible versions, else
    the fixed-width INT32 (arrays) or INT16 (strings)."""
    if flexible:
        return _SMALL[n + 1] if n < 0x7F else _uvarint(n + 1)
    return fixed.pack(n)


_I64 = struct.Struct(">q")
_RESP_HEAD = struct.Struct(">ihi")  # ThrottleTimeMs, ErrorCode, SessionId (v7+)
_PART_HEAD = struct.Struct(">ihqq")  # PartitionIndex, ErrorCode, HighWatermark, LastStableOffset (v4+)
_ABORTED = struct.Struct(">qq")  # ProducerId, FirstOffset


class FetchedPartition:
    """One partition of a Fetch answer (kafka-python's ``PartitionData`` attribute names)."""

    __slots__ = ("aborted_transactions", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "partition_index", "preferred_read_replica", "records")

    def __init__(self, partition_index: int, error_code: int, high_watermark: int, last_stable_offset: int,
                 log_start_offset: int, aborted_transactions: list[tuple[int, int]] | None,
                 preferred_read_replica: int, records: bytes | None) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions
        self.preferred_read_replica = preferred_read_replica
        self.records = records


class FetchedTopic:
    """One topic of a Fetch answer (kafka-python's ``FetchableTopicResponse`` attribute names)."""

    __slots__ = ("partitions", "topic")

    def __init__(self, topic: str, partitions: list[FetchedPartition]) -> None:
        self.topic = topic
        self.partitions = partitions


class FetchAnswer:
    """A decoded Fetch answer (kafka-python's ``FetchResponse`` attribute names)."""

    __slots__ = ("API_VERSION", "error_code", "responses", "session_id", "throttle_time_ms")

    def __init__(self, version: int, throttle_time_ms: int, error_code: int, session_id: int,
                 responses: list[FetchedTopic]) -> None:
        self.API_VERSION = version
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.session_id = session_id
        self.responses = responses

    def __repr__(self) -> str:
        n = sum(len(t.partitions) for t in self.responses)
        return f"FetchResponse_v{self.API_VERSION}(error {self.error_code}, {n} partitions)"


def _read_len(buf: bytes, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """An array/string/bytes length: compact (unsigned varint of n + 1, 0 = null -> -1) in
    flexible versions, else the fixed-width INT32 or INT16 (-1 = null)."""
    if flexible:
        b = buf[pos]
        if b < 0x80:  # a one-byte varint: nearly every length of an answer
            return b - 1, pos + 1
        n, pos = _read_uvarint(buf, pos)
        return n - 1, pos
    return fixed.unpack_from(buf, pos)[0], pos + fixed.size


def _skip_tags(buf: bytes, pos: int) -> int:
    """Skip a tagged-field section: a count, then per field a tag, a size and that many bytes."""
    if buf[pos] == 0:  # none: the usual case
        return pos + 1
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("Fetch response ends inside a tagged field")
    return pos


def _decode(buf: bytes, v: int) -> FetchAnswer:
    flexible = v >= 12
    if v >= 7:
        throttle, error, session = _RESP_HEAD.unpack_from(buf, 0)
        pos = _RESP_HEAD.size
    else:
        throttle, error, session, pos = _I32.unpack_from(buf, 0)[0], 0, 0, 4
    n_topics, pos = _read_len(buf, pos, flexible, _I32)
    topics: list[FetchedTopic] = []
    for _ in range(max(n_topics, 0)):
        ln, pos = _read_len(buf, pos, flexible, _I16)
        if ln < 0 or pos + ln > len(buf):
            raise ValueError("Fetch response with a null or cut topic name")
        name = buf[pos:pos + ln].decode()
        pos += ln
        n_parts, pos = _read_len(buf, pos, flexible, _I32)
        parts: list[FetchedPartition] = []
        for _ in range(max(n_parts, 0)):
            index, code, hw, lso = _PART_HEAD.unpack_from(buf, pos)
            pos += _PART_HEAD.size
            log_start = -1
            if v >= 5:
                (log_start,) = _I64.unpack_from(buf, pos)
                pos += 8
            n_aborted, pos = _read_len(buf, pos, flexible, _I32)
            aborted: list[tuple[int, int]] | None = None
            if n_aborted >= 0:
                aborted = []
                for _ in range(n_aborted):
                    aborted.append(_ABORTED.unpack_from(buf, pos))
                    pos += _ABORTED.size
                    if flexible:
                        pos = _skip_tags(buf, pos)
            replica = -1
            if v >= 11:
                (replica,) = _I32.unpack_from(buf, pos)
                pos += 4
            size, pos = _read_len(buf, pos, flexible, _I32)
            records = None
            if size >= 0:
                if pos + size > len(buf):
                    raise ValueError(f"Fetch response ends inside the records of {name}-{index}")
                records = buf[pos:pos + size]
                pos += size
            if flexible:
                pos = _skip_tags(buf, pos)
            parts.append(FetchedPartition(index, code, hw, lso, log_start, aborted, replica, records))
        if flexible:
            pos = _skip_tags(buf, pos)
        topics.append(FetchedTopic(name, parts))
    if flexible:
        pos = _skip_tags(buf, pos)
    if pos != len(buf):
        raise ValueError(f"Fetch v{v} response: {len(buf) - pos} bytes left over")
    return FetchAnswer(v, throttle, error, session, topics)


class FetchDecoder:
    """Decodes the answer to a :class:`FetchFor` of one version (the client core calls
    :meth:`decode` with the response body; a corrupt one raises ``ValueError``)."""

    __slots__ = ("version",)

    def __init__(self, version: int) -> None:
        self.version = version

    def decode(self, data) -> FetchAnswer:
        buf = data.read() if hasattr(data, "read") else bytes(data)
        try:
            return _decode(buf, self.version)
        except (IndexError, struct.error, UnicodeDecodeError) as exc:
            raise ValueError(f"corrupt Fetch v{self.version} response: {exc}") from exc


class FetchFor(FetchRequest, init=False):
    """A consumer's Fetch request (replica id -1, no fetch session, no rack) for ``wanted``:
    ``[(topic, [FetchPartition, ...])]`` in the order the broker should fill them
    (``KafkaApis.handleFetchRequest`` processes partitions in request order from v3). The client
    core negotiates the version (FETCH_MIN_VERSION..FETCH_MAX_VERSION) and encodes the body with
    :meth:`encode`; the answer is kafka-python's ``FetchResponse`` of that version."""

    def __init__(self, wanted: list[tuple[str, list[FetchPartition]]], *, max_wait_ms: int, min_bytes: int,
                 max_bytes: int, isolation_level: int):
        super().__init__(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                         isolation_level=isolation_level, session_id=0, session_epoch=-1, topics=[],
                         forgotten_topics_data=[], rack_id="", min_version=FETCH_MIN_VERSION,
                         max_version=FETCH_MAX_VERSION)
        self.wanted = wanted

    def response_decoder(self) -> FetchDecoder:
        """The decoder of the answer at the negotiated version (the client core asks it instead
        of building a request header only to look up the response class)."""
        return FetchDecoder(self.API_VERSION)

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        if version is not None:
            self.API_VERSION = version
        v = self.API_VERSION
        if v is None or not FETCH_MIN_VERSION <= v <= FETCH_MAX_VERSION:
            raise ValueError(f"Fetch v{v} is not encoded here")
        body = self._body(v)
        if header:
            body = self._header.encode(flexible=v >= 12) + body
        return _I32.pack(len(body)) + body if framed else body

    def _body(self, v: int) -> bytes:
        flexible = v >= 12
        out = [_HEAD.pack(self.replica_id, self.max_wait_ms, self.min_bytes, self.max_bytes, self.isolation_level)]
        if v >= 7:
            out.append(_SESSION.pack(self.session_id, self.session_epoch))
        out.append(_length(len(self.wanted), flexible, _I32))
        for topic, parts in self.wanted:
            raw = topic.encode()
            out.append(_length(len(raw), flexible, _I16) + raw + _length(len(parts), flexible, _I32))
            if v >= 12:
                pack = _PART_V12.pack
                out.extend([pack(p, e, o, _NO_EPOCH, _NO_LOG_START, m, 0) for p, e, o, m in parts])
                out.append(b"\x00")  # the topic's tagged fields: none
            elif v >= 9:
                pack = _PART_V9.pack
                out.extend([pack(p, e, o, _NO_LOG_START, m) for p, e, o, m in parts])
            elif v >= 5:
                pack = _PART_V5.pack
                out.extend([pack(p, o, _NO_LOG_START, m) for p, _e, o, m in parts])
            else:
                pack = _PART_V4.pack
                out.extend([pack(p, o, m) for p, _e, o, m in parts])
        if v >= 7:
            out.append(_length(0, flexible, _I32))  # ForgottenTopicsData: none (no fetch session)
        if v >= 11:
            out.append(_length(0, flexible, _I16))  # RackId "": no rack, so no preferred read replica (KIP-392)
        if flexible:
            out.append(b"\x00")  # the request's tagged fields: none (ClusterId null)
        return b"".join(out)
