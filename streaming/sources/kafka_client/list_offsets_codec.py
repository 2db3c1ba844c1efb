"""ListOffsets (API key 2) request and response, encoded by hand from Kafka's JSON schemas.

Planning asks every leader for three offsets of thousands of partitions per trigger; kafka-python's
schema-driven classes build one object per partition to encode the request and another one per
partition to decode the answer, which at 10,000 partitions cost more than everything else of a
trigger's planning (bench/plan_profile.py). The layouts below are apache/kafka's
clients/src/main/resources/common/message/ListOffsetsRequest.json and ListOffsetsResponse.json
(v0-v10; kafka-python 3.0.12's copies add v11, KIP-1023, with no field change)::

  request   ReplicaId int32, IsolationLevel int8 (v2+),
            Topics [Name string, Partitions [PartitionIndex int32, CurrentLeaderEpoch int32 (v4+),
                    Timestamp int64]], TimeoutMs int32 (v10+)
  response  ThrottleTimeMs int32 (v2+),
            Topics [Name string, Partitions [PartitionIndex int32, ErrorCode int16,
                    Timestamp int64, Offset int64, LeaderEpoch int32 (v4+)]]

``"flexibleVersions": "6+"``: from v6 arrays and strings are compact (unsigned varint length + 1)
and every struct ends in a tagged-field section. Headers are the client core's (request header
v1/v2, response header v0/v1). tests/test_kafka_list_offsets_codec.py compares both directions
with kafka-python's own encoder/decoder for every version from LIST_OFFSETS_MIN_VERSION to
LIST_OFFSETS_MAX_VERSION.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from udfs.varint import encode_uvarint as _uvarint
from udfs.varint import read_uvarint as _read_uvarint

__all__ = ["LIST_OFFSETS_MAX_VERSION", "LIST_OFFSETS_MIN_VERSION", "ListOffsetsAnswer", "ListOffsetsDecoder",
           "ListOffsetsFor", "TopicColumns"]

#: ListOffsets v2: isolation_level (LATEST + READ_COMMITTED = LSO).
LIST_OFFSETS_MIN_VERSION = 2
#: The newest ListOffsets version :class:`ListOffsetsFor` encodes (kafka-python 3.0.12's newest).
LIST_OFFSETS_MAX_VERSION = 11

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
# v6+: the partition's tagged-field count (an unsigned varint, almost always the single byte 0)
# is read with the fixed fields; anything else is skipped field by field
_RESP_PARTITION = {2: struct.Struct(">ihqq"), 4: struct.Struct(">ihqqi"), 6: struct.Struct(">ihqqiB")}


def _read_length(buf: bytes, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """An array or string length: a compact one (unsigned varint of length + 1, -1 = null) in
    flexible versions, else the fixed-width ``fixed`` (INT32 arrays, INT16 strings)."""
    if flexible:
        n, pos = _read_uvarint(buf, pos)
        return n - 1, pos
    return fixed.unpack_from(buf, pos)[0], pos + fixed.size


def _skip_tags(buf: bytes, pos: int) -> int:
    """Skip a tagged-field section (count, then tag + size + data per field)."""
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos


# The per-partition entry as numpy reads it (big-endian, packed): PartitionIndex int32, ErrorCode
# int16, Timestamp int64, Offset int64, LeaderEpoch int32 (v4+), tagged-field count (v6+, a varint
# that is the single byte 0 when there are none). Same layouts as _RESP_PARTITION.
_RESP_DTYPE = {
    2: np.dtype([("p", ">i4"), ("e", ">i2"), ("ts", ">i8"), ("off", ">i8")]),
    4: np.dtype([("p", ">i4"), ("e", ">i2"), ("ts", ">i8"), ("off", ">i8"), ("le", ">i4")]),
    6: np.dtype([("p", ">i4"), ("e", ">i2"), ("ts", ">i8"), ("off", ">i8"), ("le", ">i4"), ("tags", "u1")]),
}

#: One topic of an answer as arrays: (name, partition indexes int32, error codes int16, offsets int64).
TopicColumns = tuple[str, np.ndarray, np.ndarray, np.ndarray]


def _topic_scalar(buf: bytes, pos: int, m: int, version: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One topic's ``m`` partition entries read one by one (any tagged fields skipped): the
    fallback of :meth:`ListOffsetsAnswer.decode_body` when an entry is not the fixed layout."""
    flexible = version >= 6
    part = _RESP_PARTITION[6 if flexible else 4 if version >= 4 else 2]
    parts = np.empty(m, np.int32)
    errors = np.empty(m, np.int16)
    offs = np.empty(m, np.int64)
    for j in range(m):
        fields = part.unpack_from(buf, pos)
        pos += part.size
        parts[j], errors[j], offs[j] = fields[0], fields[1], fields[3]
        if flexible and fields[5]:  # tagged fields present: skip them properly
            pos = _skip_tags(buf, pos - 1)
    return parts, errors, offs, pos


class ListOffsetsAnswer:
    """A decoded ListOffsets response: ``topics`` is one :data:`TopicColumns` per topic, in the
    answer's order; ``offsets`` maps (topic, partition) -> (error code, offset) (built on first
    use: the planner reads the arrays, one dict entry per partition is what it avoids)."""

    __slots__ = ("API_VERSION", "throttle_time_ms", "topics", "_offsets")

    def __init__(self, version: int, throttle_time_ms: int, topics: list[TopicColumns]):
        self.API_VERSION = version
        self.throttle_time_ms = throttle_time_ms
        self.topics = topics
        self._offsets: dict[tuple[str, int], tuple[int, int]] | None = None

    @property
    def offsets(self) -> dict[tuple[str, int], tuple[int, int]]:
        if self._offsets is None:
            self._offsets = {(name, p): (e, o) for name, parts, errors, offs in self.topics
                             for p, e, o in zip(parts.tolist(), errors.tolist(), offs.tolist(), strict=True)}
        return self._offsets

    def __repr__(self) -> str:
        return f"ListOffsetsResponse_v{self.API_VERSION}({sum(len(t[1]) for t in self.topics)} partitions)"

    @staticmethod
    def decode_body(buf: bytes, version: int) -> ListOffsetsAnswer:
        """Decode a response body. A topic's partition entries have a fixed size after its name
        (ListOffsetsResponse.json: every field is fixed-width, and in flexible versions the
        entry ends in its tagged-field count, 0 when there are none), so they are read as one
        numpy record array; a topic where any entry carries tagged fields is read entry by entry
        instead (:func:`_topic_scalar`), since those shift the entries after it."""
        flexible = version >= 6
        layout = 6 if flexible else 4 if version >= 4 else 2
        dtype = _RESP_DTYPE[layout]
        size = dtype.itemsize
        pos = 0
        throttle = 0
        if version >= 2:
            (throttle,) = _I32.unpack_from(buf, pos)
            pos += 4
        topics: list[TopicColumns] = []
        n, pos = _read_length(buf, pos, flexible, _I32)
        for _ in range(max(n, 0)):
            ln, pos = _read_length(buf, pos, flexible, _I16)
            if ln < 0:
                raise ValueError("ListOffsets response with a null topic name")
            if pos + ln > len(buf):
                raise ValueError("ListOffsets response ends inside a topic name")
            name = buf[pos:pos + ln].decode()
            pos += ln
            m, pos = _read_length(buf, pos, flexible, _I32)
            m = max(m, 0)
            end = pos + m * size
            if end > len(buf):
                raise ValueError(f"ListOffsets v{version} response ends inside the partitions of {name}")
            rows = np.frombuffer(buf, dtype=dtype, count=m, offset=pos)
            if flexible and m and rows["tags"].any():
                parts, errors, offs, pos = _topic_scalar(buf, pos, m, version)
            else:
                parts, errors, offs = (rows["p"].astype(np.int32), rows["e"].astype(np.int16),
                                       rows["off"].astype(np.int64))
                pos = end
            topics.append((name, parts, errors, offs))
            if flexible:
                pos = _skip_tags(buf, pos)
        if flexible:
            pos = _skip_tags(buf, pos)
        if pos != len(buf):
            raise ValueError(f"ListOffsets v{version} response: {len(buf) - pos} bytes left over")
        return ListOffsetsAnswer(version, throttle, topics)


class ListOffsetsDecoder:
    """Stands in for kafka-python's response class of one request (``parse_header`` + ``decode``)."""

    def __init__(self, version: int):
        self.version = version

    def parse_header(self, data):
        return ListOffsetsResponse[self.version].parse_header(data)

    def decode(self, data) -> ListOffsetsAnswer:
        buf = data.read() if hasattr(data, "read") else bytes(data)
        try:
            return ListOffsetsAnswer.decode_body(buf, self.version)
        except (IndexError, struct.error, UnicodeDecodeError) as exc:  # kafka-python's parser expects these
            raise ValueError(f"corrupt ListOffsets v{self.version} response: {exc}") from exc


_REQ_DTYPE = {
    2: np.dtype([("p", ">i4"), ("ts", ">i8")]),
    4: np.dtype([("p", ">i4"), ("e", ">i4"), ("ts", ">i8")]),
    6: np.dtype([("p", ">i4"), ("e", ">i4"), ("ts", ">i8"), ("tags", "u1")]),
}


def _partition_entries(parts: Any, epochs: Any, timestamp: int, version: int) -> bytes:
    """One topic's request partitions: PartitionIndex int32, CurrentLeaderEpoch int32 (v4+, -1
    where unknown), Timestamp int64, an empty tagged-field section (v6+), written as one numpy
    record array. ``epochs``: partition -> leader epoch (a dict), or an int array indexed by
    partition (-1 unknown), or None."""
    p = np.asarray(parts, dtype=np.int64)
    rows = np.zeros(len(p), dtype=_REQ_DTYPE[6 if version >= 6 else 4 if version >= 4 else 2])
    rows["p"] = p
    rows["ts"] = timestamp
    if version >= 4:
        if epochs is None or not len(p):
            rows["e"] = -1
        elif isinstance(epochs, np.ndarray):
            inside = (p >= 0) & (p < len(epochs))
            rows["e"] = np.where(inside, epochs[np.clip(p, 0, max(len(epochs) - 1, 0))], -1)
        else:
            rows["e"] = [epochs.get(x, -1) for x in p.tolist()]
    return rows.tobytes()


class _ListOffsetsHeader(RequestHeader, init=False):
    def get_response_class(self):
        return ListOffsetsDecoder(self.request_api_version)


class ListOffsetsFor(ListOffsetsRequest, init=False):
    """A ListOffsets request for many partitions with one timestamp, encoded by hand (see the module docstring).

    The client core negotiates the version (within LIST_OFFSETS_MIN/MAX_VERSION) and encodes the
    body with :meth:`encode`; the header's response class, :class:`ListOffsetsDecoder`, decodes
    the answer into a :class:`ListOffsetsAnswer`. ``encode(header=True, framed=True)`` gives the
    whole frame as kafka-python's ``KafkaProtocol`` would send it (the codec tests use it).
    """

    def __init__(self, by_topic: list[tuple[str, list[int]]], timestamp: int, isolation: int, timeout_ms: int,
                 epochs: dict[str, dict[int, int]] | None = None):
        super().__init__(replica_id=-1, isolation_level=isolation, topics=[], timeout_ms=timeout_ms,
                         min_version=LIST_OFFSETS_MIN_VERSION, max_version=LIST_OFFSETS_MAX_VERSION)
        self.wanted = by_topic
        self.timestamp = timestamp
        # topic -> {partition: leader epoch}: CurrentLeaderEpoch (v4+, KIP-320), -1 where unknown
        self.epochs = epochs or {}

    def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
        self._header = _ListOffsetsHeader(request_api_key=self.API_KEY, request_api_version=self.API_VERSION,
                                          correlation_id=correlation_id, client_id=client_id)

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        if version is not None:
            self.API_VERSION = version
        v = self.API_VERSION
        if v is None or not LIST_OFFSETS_MIN_VERSION <= v <= LIST_OFFSETS_MAX_VERSION:
            raise ValueError(f"ListOffsets v{v} is not encoded here")
        flexible = v >= 6
        out: list[bytes] = []
        if header:
            out.append(self._header.encode(flexible=flexible))
        out.append(struct.pack(">ib", self.replica_id, self.isolation_level))
        ts = self.timestamp
        out.append(_uvarint(len(self.wanted) + 1) if flexible else _I32.pack(len(self.wanted)))
        for name, parts in self.wanted:
            raw = name.encode()
            out.append((_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw)
            out.append(_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
            ep = self.epochs.get(name)
            out.append(_partition_entries(parts, ep, ts, v))
            if flexible:
                out.append(b"\x00")  # the topic's tagged fields: none
        if v >= 10:
            out.append(_I32.pack(self.timeout_ms))
        if flexible:
            out.append(b"\x00")
        body = b"".join(out)
        return _I32.pack(len(body)) + body if framed else body


