"""Fetch (API key 1) requests v4..v12, encoded by hand from Kafka's JSON schema.

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

``"flexibleVersions": "12+"``: in v12 arrays and strings are compact (unsigned varint length + 1)
and every struct ends in a tagged-field section; ClusterId (v12+) is a tagged field whose
default (null) is not written. The answer is decoded by kafka-python's ``FetchResponse`` as
before (the request header names it). tests/test_kafka_fetch_codec.py checks the bytes against
the schema by hand and against kafka-python's encoder for every version from FETCH_MIN_VERSION
to FETCH_MAX_VERSION.
"""

from __future__ import annotations

import struct

from kafka.protocol.consumer import FetchRequest

from udfs.varint import encode_uvarint as _uvarint

__all__ = ["FETCH_MAX_VERSION", "FETCH_MIN_VERSION", "FetchFor", "FetchPartition"]

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


def _length(n: int, flexible: bool, fixed: struct.Struct) -> bytes:
    """An array or string length: compact (unsigned varint of n + 1) in flexible versions, else
    the fixed-width INT32 (arrays) or INT16 (strings)."""
    return _uvarint(n + 1) if flexible else fixed.pack(n)


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
