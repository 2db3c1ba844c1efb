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

    __slots__ = ("API_VERSION", "throttle_time_ms", "_topics", "_offsets", "flat", "request")

    def __init__(self, version: int, throttle_time_ms: int, topics: list[TopicColumns] | None,
                 flat: tuple[np.ndarray, np.ndarray] | None = None, request: ListOffsetsFor | None = None):
        self.API_VERSION = version
        self.throttle_time_ms = throttle_time_ms
        self._topics = topics
        self._offsets: dict[tuple[str, int], tuple[int, int]] | None = None
        # (error codes, offsets) of every partition in the order ``request.wanted`` asked them:
        # set when the answer has exactly the layout of that request (_AnswerLayout)
        self.flat = flat
        self.request = request

    @property
    def topics(self) -> list[TopicColumns]:
        if self._topics is None:
            errors, offs = self.flat
            out, lo = [], 0
            for name, ps in self.request.wanted:
                hi = lo + len(ps)
                out.append((name, np.asarray(ps, dtype=np.int32), errors[lo:hi], offs[lo:hi]))
                lo = hi
            self._topics = out
        return self._topics

    @property
    def offsets(self) -> dict[tuple[str, int], tuple[int, int]]:
        if self._offsets is None:
            self._offsets = {(name, p): (e, o) for name, parts, errors, offs in self.topics
                             for p, e, o in zip(parts.tolist(), errors.tolist(), offs.tolist(), strict=True)}
        return self._offsets

    def __repr__(self) -> str:
        n = len(self.flat[0]) if self.flat is not None else sum(len(t[1]) for t in self.topics)
        return f"ListOffsetsResponse_v{self.API_VERSION}({n} partitions)"

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

    def __init__(self, version: int, request: ListOffsetsFor | None = None):
        self.version = version
        self.request = request

    def parse_header(self, data):
        return ListOffsetsResponse[self.version].parse_header(data)

    def decode(self, data) -> ListOffsetsAnswer:
        buf = data.read() if hasattr(data, "read") else bytes(data)
        if self.request is not None:
            got = self.request.layout(self.version).read(buf)
            if got is not None:
                throttle, errors, offs = got
                return ListOffsetsAnswer(self.version, throttle, None, (errors, offs), self.request)
        try:
            return ListOffsetsAnswer.decode_body(buf, self.version)
        except (IndexError, struct.error, UnicodeDecodeError) as exc:  # kafka-python's parser expects these
            raise ValueError(f"corrupt ListOffsets v{self.version} response: {exc}") from exc


_REQ_DTYPE = {
    2: np.dtype([("p", ">i4"), ("ts", ">i8")]),
    4: np.dtype([("p", ">i4"), ("e", ">i4"), ("ts", ">i8")]),
    6: np.dtype([("p", ">i4"), ("e", ">i4"), ("ts", ">i8"), ("tags", "u1")]),
}


_REQ_STRUCT = {2: struct.Struct(">iq"), 4: struct.Struct(">iiq"), 6: struct.Struct(">iiqB")}


def _epochs_of(parts: list[int], epochs: Any) -> list[int]:
    """CurrentLeaderEpoch per partition (-1 unknown). ``epochs``: partition -> epoch (a dict),
    an int array indexed by partition (-1 unknown), or None."""
    if epochs is None:
        return [-1] * len(parts)
    if isinstance(epochs, np.ndarray):
        n = len(epochs)
        return [int(epochs[p]) if 0 <= p < n else -1 for p in parts]
    return [epochs.get(p, -1) for p in parts]


def _partition_entries(parts: Any, epochs: Any, timestamp: int, version: int) -> bytes:
    """One topic's request partitions: PartitionIndex int32, CurrentLeaderEpoch int32 (v4+, -1
    where unknown), Timestamp int64, an empty tagged-field section (v6+)."""
    ps = parts.tolist() if isinstance(parts, np.ndarray) else list(parts)
    if version >= 6:
        pack = _REQ_STRUCT[6].pack
        return b"".join([pack(p, e, timestamp, 0) for p, e in zip(ps, _epochs_of(ps, epochs), strict=True)])
    if version >= 4:
        pack = _REQ_STRUCT[4].pack
        return b"".join([pack(p, e, timestamp) for p, e in zip(ps, _epochs_of(ps, epochs), strict=True)])
    pack = _REQ_STRUCT[2].pack
    return b"".join([pack(p, timestamp) for p in ps])


def _length(n: int, flexible: bool, fixed: struct.Struct) -> bytes:
    return _uvarint(n + 1) if flexible else fixed.pack(n)


class _AnswerLayout:
    """The exact bytes an answer to one request has when every partition answers, in the
    request's order, without tagged fields: ListOffsetsResponse.json's layout with the
    request's topic names, partition counts and partition indexes filled in, and holes for what
    each partition answers (ThrottleTimeMs; per partition ErrorCode, Timestamp, Offset,
    LeaderEpoch). :meth:`read` checks an answer against it in one numpy comparison and then
    reads error codes and offsets at known positions; any other answer (another order, a
    missing partition, tagged fields) returns None and is decoded field by field."""

    def __init__(self, wanted: list[tuple[str, Any]], version: int):
        flexible = version >= 6
        size = _RESP_DTYPE[6 if flexible else 4 if version >= 4 else 2].itemsize
        hole = size - 4 - (1 if flexible else 0)  # ErrorCode .. LeaderEpoch
        tail = b"\x00" if flexible else b""
        entry_keep = b"\xff" * 4 + b"\x00" * hole + b"\xff" * len(tail)
        body: list[bytes] = [b"\x00\x00\x00\x00", _length(len(wanted), flexible, _I32)]
        keep: list[bytes] = [b"\x00" * 4, b"\xff" * len(body[1])]
        starts: list[int] = []
        pos = len(body[0]) + len(body[1])
        filler = b"\x00" * hole
        for name, ps in wanted:
            raw = name.encode()
            head = _length(len(raw), flexible, _I16) + raw + _length(len(ps), flexible, _I32)
            plist = ps.tolist() if isinstance(ps, np.ndarray) else list(ps)
            body.append(head)
            keep.append(b"\xff" * len(head))
            pos += len(head)
            for p in plist:
                starts.append(pos)
                body.append(_I32.pack(p) + filler + tail)
                keep.append(entry_keep)
                pos += size
            if flexible:
                body.append(b"\x00")
                keep.append(b"\xff")
                pos += 1
        if flexible:
            body.append(b"\x00")
            keep.append(b"\xff")
        self.template = np.frombuffer(b"".join(body), dtype=np.uint8)
        self.keep = np.frombuffer(b"".join(keep), dtype=np.uint8)
        at = np.asarray(starts, dtype=np.int64)
        self.error_at = (at + 4)[:, None] + np.arange(2)
        self.offset_at = (at + 14)[:, None] + np.arange(8)

    def read(self, buf: bytes) -> tuple[int, np.ndarray, np.ndarray] | None:
        """(throttle ms, error codes, offsets) in the request's order, or None when ``buf`` does
        not have this layout."""
        if len(buf) != len(self.template):
            return None
        got = np.frombuffer(buf, dtype=np.uint8)
        if ((got ^ self.template) & self.keep).any():
            return None
        throttle = int.from_bytes(buf[:4], "big", signed=True)
        errors = got[self.error_at].copy().view(">i2").reshape(-1).astype(np.int16)
        offs = got[self.offset_at].copy().view(">i8").reshape(-1).astype(np.int64)
        return throttle, errors, offs


class _ListOffsetsHeader(RequestHeader, init=False):
    def get_response_class(self):
        return ListOffsetsDecoder(self.request_api_version, getattr(self, "request", None))


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
        # the body per version and the answer layout per version: a request object may be sent
        # again while the partitions, leaders and epochs it asks about stay the same
        self._bodies: dict[int, bytes] = {}
        self._layouts: dict[int, _AnswerLayout] = {}

    def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
        self._header = _ListOffsetsHeader(request_api_key=self.API_KEY, request_api_version=self.API_VERSION,
                                          correlation_id=correlation_id, client_id=client_id)
        self._header.request = self

    def response_decoder(self) -> ListOffsetsDecoder:
        """The decoder of the answer at the negotiated version (what the header's response class
        gives, without building a header)."""
        return ListOffsetsDecoder(self.API_VERSION, self)

    def layout(self, version: int) -> _AnswerLayout:
        """The layout a full answer to this request has at ``version`` (built once)."""
        got = self._layouts.get(version)
        if got is None:
            got = self._layouts[version] = _AnswerLayout(self.wanted, version)
        return got

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        if version is not None:
            self.API_VERSION = version
        v = self.API_VERSION
        if v is None or not LIST_OFFSETS_MIN_VERSION <= v <= LIST_OFFSETS_MAX_VERSION:
            raise ValueError(f"ListOffsets v{v} is not encoded here")
        flexible = v >= 6
        body = self._bodies.get(v)
        if body is None:
            body = self._bodies[v] = self._body(v)
        if header:
            body = self._header.encode(flexible=flexible) + body
        return _I32.pack(len(body)) + body if framed else body

    def _body(self, v: int) -> bytes:
        flexible = v >= 6
        out: list[bytes] = [struct.pack(">ib", self.replica_id, self.isolation_level)]
        ts = self.timestamp
        out.append(_length(len(self.wanted), flexible, _I32))
        for name, parts in self.wanted:
            raw = name.encode()
            out.append(_length(len(raw), flexible, _I16) + raw + _length(len(parts), flexible, _I32))
            out.append(_partition_entries(parts, self.epochs.get(name), ts, v))
            if flexible:
                out.append(b"\x00")  # the topic's tagged fields: none
        if v >= 10:
            out.append(_I32.pack(self.timeout_ms))
        if flexible:
            out.append(b"\x00")
        return b"".join(out)
