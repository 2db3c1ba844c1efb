"""Raw Kafka protocol client for the txnwatch ``kafka`` source (DESIGN §4).

:class:`KafkaWire` is what the ``kafka`` streaming source uses on the Spark driver (partition
discovery, offsets for admission control and planning) and on the executors (raw fetches). It is
built on kafka-python 3.0.x's own networking and protocol layers, not on ``KafkaConsumer``:

* ``kafka.net.NetworkSelector`` + ``kafka.net.KafkaConnectionManager`` (the same stack
  ``KafkaAdminClient`` uses): one IO thread per :class:`KafkaWire`, connection handling,
  ApiVersions negotiation, SASL/SSL, reconnect backoff, per-request timeouts;
* the JSON-schema driven request/response classes of ``kafka.protocol`` (``MetadataRequest``,
  ``FetchRequest``); ListOffsets requests and answers are encoded/decoded here by hand, from the
  same Kafka JSON schemas, because kafka-python's generic classes cost more than the rest of a
  trigger's planning at thousands of partitions (see ``_ListOffsets``). kafka-python decodes the ``Records`` field of a
  Fetch response as plain bytes (schema type ``records`` -> ``Bytes``), so the bytes we return are
  exactly what the broker sent: the same layout as a ``.log`` segment (spec/kafka-formats.md
  §1-§3), including control batches (transaction markers) and transactional data of open or
  aborted transactions. Nothing is decompressed or decoded here.

``KafkaConsumer`` cannot be used because it hides control batches, never returns aborted data
in READ_COMMITTED and does not expose producer ids/epochs per batch or partial batches.

Kafka APIs and versions (negotiated per broker with ApiVersions, within these bounds)
-------------------------------------------------------------------------------------
* **Metadata v1+** (``is_internal`` needs v1; ``allow_auto_topic_creation=False`` is sent and
  honoured from v4, so looking at a topic never creates it on brokers >= 0.11). Topics are
  addressed by name; their topic ids (v10+, Kafka 2.8+) are kept and reported in
  :class:`PartitionOffsets` so that the caller can tell a deleted-and-recreated topic from the
  same topic. v13 (Kafka 4.0) adds a top-level ``error_code``: REBOOTSTRAP_REQUIRED and other
  retriable codes are retried on another broker, anything else raises.
* **ListOffsets v2+**: v2 introduced ``isolation_level``; LATEST with READ_UNCOMMITTED (0) is the
  high watermark, LATEST with READ_COMMITTED (1) is the last stable offset (LSO), EARLIEST is the
  log start offset. Three requests per leader (a partition may appear only once per request).
* **Fetch v4..v12**, ``isolation_level=READ_UNCOMMITTED`` so that control batches and data of
  open/aborted transactions are returned. v4 is the first version with ``last_stable_offset``
  (KIP-98), v5 adds ``log_start_offset`` (KIP-107; -1 from a v4-only broker). v12 is the last
  version that addresses topics by *name*; v13+ need topic ids (KIP-516) and bring nothing the
  watchdog needs. Sessionless full fetches (``session_id=0``, ``session_epoch=-1``), replica id -1,
  ``current_leader_epoch`` = the leader epoch of the last Metadata answer (KIP-320, v9+; also
  ListOffsets v4+): a leader whose epoch differs answers FENCED_LEADER_EPOCH or
  UNKNOWN_LEADER_EPOCH (``Partition.getLocalLog`` / ``checkCurrentLeaderEpoch``) and metadata is
  refreshed. A Metadata answer whose leader epoch is below the one seen is not believed for
  that partition (``Metadata.updateLatestMetadata``).
  Kafka 4.x removed Fetch v0-v3 (KIP-896), so the v4 floor also works with 4.x brokers.

Fetch semantics callers must know (real Kafka behaviour, mirrored by the test fake)
-----------------------------------------------------------------------------------
* The returned bytes start at the batch *containing* the fetch offset, which may begin before
  it: skip batches whose last offset is below the fetch offset.
* The bytes are cut at ``max_bytes`` and may end in a **partial batch**: ignore a trailing batch
  whose ``12 + batchLength`` exceeds the remaining bytes and fetch again from its base offset.
* At least one whole batch is returned even if it is larger than ``max_bytes`` (KIP-74).
* ``records`` may be null (FetchResponse.json: nullable in every version); it is returned as
  ``b""``. One response never spans two segments.
* No records and no error below where the caller expected data means the answering leader's high
  watermark is lower (a new leader during a rolling restart learns it from its followers:
  ``UnifiedLog.read`` caps consumer reads at the high watermark). ``FetchResult.high_watermark``
  shows it; the caller retries and, if it stays low, reports the unread range (the source does).
* A broker over quota answers with *no partitions* and ``throttle_time_ms`` > 0
  (``KafkaApis.handleFetchRequest``): waited out and retried (not counted against ``retries``;
  at most ``4 x retries`` throttled answers per fetch, then :class:`KafkaUnavailable`).
* KIP-219 (2.0+ brokers): any answer may carry ``throttle_time_ms`` > 0, after which the broker
  mutes that connection. The answer is used, and the next request to that node waits until the
  throttle has passed (``NetworkClient.maybeThrottle``), while other nodes are asked as usual; a
  throttle is never a failure (see :meth:`KafkaWire._unthrottled`).
* Requests to different brokers go out at once (:mod:`streaming.sources.kafka_parallel`), each
  awaited up to ``broker_timeout_ms``: a stalled broker costs the others that long, once.
* ``PreferredReadReplica`` (Fetch v11+, KIP-392): a leader configured with a replica selector may
  answer with no records and a follower's id. No rack id is sent, so a correct broker never does;
  if one does, the same fetch is sent to that replica once (it serves reads up to its own high
  watermark), falling back to the leader with the usual retries.

Fault handling
--------------
* NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, REPLICA_NOT_AVAILABLE, FENCED/UNKNOWN_LEADER_EPOCH,
  KAFKA_STORAGE_ERROR, NETWORK_EXCEPTION, REQUEST_TIMED_OUT, a partition without leader, or a
  connection failure: refresh metadata (the leader may have moved), back off
  (``retry_backoff_ms`` doubling up to ``retry_backoff_max_ms``) and retry, at most ``retries``
  failed requests per operation; then :class:`KafkaUnavailable` naming the operation, the
  bootstrap servers, the partition leader, the last broker tried and the last error. A dead
  cluster therefore fails in bounded time: with the defaults (8 retries, 200 ms doubling to 5 s)
  about 20 s when connections are refused, at most about ``retries x (request_timeout_ms +
  retry_backoff_max_ms)`` when requests hang. The defaults ride out a broker restart or a leader
  election; lower them for fail-fast use.
* OFFSET_OUT_OF_RANGE is *returned* (``FetchResult.status == FetchStatus.OFFSET_OUT_OF_RANGE``),
  with the partition's current log start offset and high watermark looked up via ListOffsets
  (a broker answers OFFSET_OUT_OF_RANGE with -1 for both): the caller emits a gap and restarts
  at ``log_start_offset``.
* UNKNOWN_TOPIC_OR_PARTITION: metadata is refreshed; only when ``deletion_confirmations``
  (default 3) consecutive Metadata answers, with backoff between them and from whichever broker
  is least loaded, all lack the topic (or partition) is the result ``FetchStatus.DELETED``
  (``PartitionOffsets.deleted``): one broker with a stale metadata cache answers
  UNKNOWN_TOPIC_OR_PARTITION for a topic that exists. Otherwise it is retried like a leader error.
* TOPIC_AUTHORIZATION_FAILED (Metadata per topic, ListOffsets and Fetch per partition) and
  the other ``*_AUTHORIZATION_FAILED`` codes raise :class:`KafkaAuthorizationError` at once, with
  one message naming the missing ACL (operation and resource), the principal when the
  configuration tells it, and the ``kafka-acls.sh`` command that grants it. Note that Kafka
  leaves topics the principal may not Describe out of an all-topics Metadata answer, so a
  ``pattern`` silently skips them (``handleTopicMetadataRequest``).
* Any other partition error code of ListOffsets or Fetch (UNKNOWN_SERVER_ERROR, CORRUPT_MESSAGE,
  ...) is retried like a leader error (``OffsetFetcherUtils.handleListOffsetResponse``'s default
  branch; see streaming/sources/kafka_errors.py); only configuration errors
  (``kafka_errors.CONFIGURATION_ERRORS``: the message names the setting) stop at once.
* Anything else (authentication failures, unsupported versions, corrupt responses) raises
  :class:`KafkaWireError` immediately. Nothing is ever skipped silently.

Threading and Spark: a :class:`KafkaWire` may be shared by threads (every call runs as a
coroutine on its own IO thread; the calling thread blocks until it completes) and is picklable (only the configuration travels; connections are opened lazily on first
use in the process that uses it). Call :meth:`KafkaWire.close` (or use it as a context manager)
when done.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import random
import re
import socket
import ssl
import struct
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import kafka.errors as Errors
from kafka.cluster import collect_hosts
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest

from streaming.sources.kafka_errors import Action, configuration_message
from streaming.sources.kafka_errors import action as error_action
from streaming.sources.kafka_parallel import NodeDeadline, StalledNodes, per_node
from streaming.sources.kafka_security import AUTHORIZATION_ERRORS, authorization_message, principal_of
from udfs.varint import encode_uvarint as _uvarint
from udfs.varint import read_uvarint as _read_uvarint

log = logging.getLogger(__name__)

__all__ = [
    "FETCH_MAX_VERSION",
    "FETCH_MIN_VERSION",
    "LIST_OFFSETS_MAX_VERSION",
    "LIST_OFFSETS_MIN_VERSION",
    "METADATA_MAX_AGE_MS",
    "METADATA_MIN_VERSION",
    "FetchResult",
    "FetchStatus",
    "KafkaAuthorizationError",
    "KafkaUnavailable",
    "KafkaWire",
    "KafkaWireError",
    "PartitionOffsets",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

#: Fetch v4: last_stable_offset + isolation level (KIP-98); v5 log_start_offset (KIP-107).
FETCH_MIN_VERSION = 4
#: Fetch v13+ addresses topics by topic id (KIP-516); v12 is the last name-based version.
FETCH_MAX_VERSION = 12
#: ListOffsets v2: isolation_level (LATEST + READ_COMMITTED = LSO).
LIST_OFFSETS_MIN_VERSION = 2
#: The newest ListOffsets version :class:`_ListOffsets` encodes (kafka-python 3.0.12's newest).
LIST_OFFSETS_MAX_VERSION = 11
#: Metadata v1: is_internal flag (v4+: allow_auto_topic_creation honoured).
METADATA_MIN_VERSION = 1

_EARLIEST = -2
_LATEST = -1

# Partition-level errors after which the leader may have moved: refresh metadata and retry.
_LEADER_ERRORS = frozenset({
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    9,  # REPLICA_NOT_AVAILABLE
    13,  # NETWORK_EXCEPTION
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE (ListOffsets during leader change)
})
# ListOffsets rounds (a metadata refresh between them) before a partition counts as unavailable
# for this call in KafkaWire.offsets_available; the caller retries it with backoff later.
_PARTIAL_ROUNDS = 2
_OFFSET_OUT_OF_RANGE = 1
_UNKNOWN_TOPIC_OR_PARTITION = 3
_UNKNOWN_TOPIC_ID = 100

# kafka-python connection settings a caller may pass through unchanged.
# (metadata_max_age_ms is KafkaWire's own: kafka-python's cluster metadata keeps its default.)
_PASSTHROUGH = frozenset(KafkaConnectionManager.DEFAULT_CONFIG) - {"bootstrap_servers", "metrics",
                                                                     "metric_group_prefix", "metadata_max_age_ms"}

#: The ``metadata_max_age_ms`` the streaming source uses by default (see :class:`KafkaWire`).
METADATA_MAX_AGE_MS = 30_000


def error_name(code: int) -> str:
    """Kafka error name for an error code (``6`` -> ``"NOT_LEADER_OR_FOLLOWER"``)."""
    if code == 0:
        return "NONE"
    if code == 6:  # kafka-python still uses the pre-2.6 name NOT_LEADER_FOR_PARTITION
        return "NOT_LEADER_OR_FOLLOWER"
    if code == _REBOOTSTRAP_REQUIRED:
        return "REBOOTSTRAP_REQUIRED"
    if code == -1:  # kafka-python calls it UNKNOWN; Kafka's Errors name is UNKNOWN_SERVER_ERROR
        return "UNKNOWN_SERVER_ERROR"
    if code in Errors.kafka_errors:
        return Errors.kafka_errors[code].message
    return f"UNKNOWN_ERROR_{code}"


class KafkaWireError(Exception):
    """A Kafka request failed in a way retrying will not fix (or the response was unusable)."""

    def __init__(self, message: str, *, error_code: int | None = None):
        super().__init__(message)
        self.error_code = error_code
        self.error = error_name(error_code) if error_code is not None else None


class KafkaAuthorizationError(KafkaWireError):
    """The broker refused an operation for lack of an ACL; the message names the ACL to add."""


class KafkaUnavailable(KafkaWireError):
    """The cluster (or a partition leader) stayed unavailable through all bounded retries.

    ``last_error``: the last retriable error (``"NOT_LEADER_OR_FOLLOWER for t-0"``), when known.
    """

    last_error: str | None = None


_REBOOTSTRAP_REQUIRED = 129  # Metadata v13 top-level (KIP-1102); not known to kafka-python 3.0


class FetchStatus(enum.StrEnum):
    OK = "ok"
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    DELETED = "deleted"


@dataclass(frozen=True)
class PartitionOffsets:
    """Offsets of one partition. ``deleted`` partitions have -1 offsets and ``leader`` -1.

    ``topic_id``: the topic's id from Metadata v10+ (Kafka 2.8+, KIP-516) as a string, ``None``
    from older brokers. It changes when a topic is deleted and created again under the same name.
    """

    topic: str
    partition: int
    log_start: int
    high_watermark: int
    lso: int
    leader: int
    deleted: bool = False
    topic_id: str | None = None


@dataclass(frozen=True)
class FetchResult:
    """One partition of a Fetch response, with the raw ``records`` bytes.

    ``records`` is exactly the broker's byte string (segment layout, possibly ending in a partial
    batch, possibly starting before ``fetch_offset``). ``error_code``/``error`` are the Kafka
    partition error (0/"NONE" on success). For OFFSET_OUT_OF_RANGE, ``log_start_offset``,
    ``high_watermark`` and ``last_stable_offset`` come from a follow-up ListOffsets (-1 if that
    failed). For DELETED all offsets are -1. ``api_version`` is the Fetch version used.
    """

    topic: str
    partition: int
    fetch_offset: int
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    error_code: int
    error: str
    status: FetchStatus
    leader: int
    api_version: int

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.OK

    @property
    def out_of_range(self) -> bool:
        return self.status is FetchStatus.OFFSET_OUT_OF_RANGE

    @property
    def deleted(self) -> bool:
        return self.status is FetchStatus.DELETED


def _retriable_exception(exc: BaseException) -> bool:
    if isinstance(exc, (Errors.UnknownBrokerIdError, OSError)):
        return True
    if isinstance(exc, (Errors.SaslAuthenticationFailedError, Errors.AuthorizationError,
                        Errors.IncompatibleBrokerVersion, Errors.UnsupportedVersionError)):
        return False
    return isinstance(exc, Errors.RetriableError)


def _describe(exc: BaseException | str | None) -> str:
    if exc is None:
        return "none"
    if isinstance(exc, str):
        return exc
    text = str(exc)
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name


def _shutdown(net: NetworkSelector, manager: KafkaConnectionManager) -> None:
    try:
        if net._io_thread is not None and threading.current_thread() is not net._io_thread:
            net.run(manager.close)
    except Exception:  # best effort on close
        log.debug("KafkaWire: error closing connections", exc_info=True)
    try:
        net.close()
    except Exception:
        log.debug("KafkaWire: error stopping the IO loop", exc_info=True)


# ---------------------------------------------------------------- ListOffsets, encoded by hand
# Planning asks every leader for three offsets of thousands of partitions per trigger; kafka-python's
# schema-driven classes build one object per partition to encode the request and another one per
# partition to decode the answer, which at 10,000 partitions cost more than everything else of a
# trigger's planning (bench/plan_profile.py). The layouts below are apache/kafka's
# clients/src/main/resources/common/message/ListOffsetsRequest.json and ListOffsetsResponse.json
# (v0-v10; kafka-python 3.0.12's copies add v11, KIP-1023, with no field change):
#
#   request   ReplicaId int32, IsolationLevel int8 (v2+),
#             Topics [Name string, Partitions [PartitionIndex int32, CurrentLeaderEpoch int32 (v4+),
#                     Timestamp int64]], TimeoutMs int32 (v10+)
#   response  ThrottleTimeMs int32 (v2+),
#             Topics [Name string, Partitions [PartitionIndex int32, ErrorCode int16,
#                     Timestamp int64, Offset int64, LeaderEpoch int32 (v4+)]]
#
# "flexibleVersions": "6+": from v6 arrays and strings are compact (unsigned varint length + 1)
# and every struct ends in a tagged-field section. Headers stay kafka-python's (request header v1/
# v2, response header v0/v1). tests/test_kafka_list_offsets_codec.py compares both directions with
# kafka-python's own encoder/decoder for every version from LIST_OFFSETS_MIN_VERSION to
# LIST_OFFSETS_MAX_VERSION.

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_REQ_PARTITION = {2: struct.Struct(">iq"), 4: struct.Struct(">iiq"), 6: struct.Struct(">iiqb")}
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


class _ListOffsetsAnswer:
    """A decoded ListOffsets response: ``offsets`` maps (topic, partition) -> (error code, offset)."""

    __slots__ = ("API_VERSION", "throttle_time_ms", "offsets")

    def __init__(self, version: int, throttle_time_ms: int, offsets: dict[tuple[str, int], tuple[int, int]]):
        self.API_VERSION = version
        self.throttle_time_ms = throttle_time_ms
        self.offsets = offsets

    def __repr__(self) -> str:
        return f"ListOffsetsResponse_v{self.API_VERSION}({len(self.offsets)} partitions)"

    @staticmethod
    def decode_body(buf: bytes, version: int) -> _ListOffsetsAnswer:
        flexible = version >= 6
        part = _RESP_PARTITION[6 if flexible else 4 if version >= 4 else 2]
        unpack, size = part.unpack_from, part.size
        pos = 0
        throttle = 0
        if version >= 2:
            (throttle,) = _I32.unpack_from(buf, pos)
            pos += 4
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        n, pos = _read_length(buf, pos, flexible, _I32)
        for _ in range(max(n, 0)):
            ln, pos = _read_length(buf, pos, flexible, _I16)
            if ln < 0:
                raise ValueError("ListOffsets response with a null topic name")
            name = buf[pos:pos + ln].decode()
            pos += ln
            m, pos = _read_length(buf, pos, flexible, _I32)
            for _ in range(max(m, 0)):
                fields = unpack(buf, pos)
                pos += size
                offsets[(name, fields[0])] = (fields[1], fields[3])
                if flexible and fields[5]:  # tagged fields present: skip them properly
                    pos = _skip_tags(buf, pos - 1)
            if flexible:
                pos = _skip_tags(buf, pos)
        if flexible:
            pos = _skip_tags(buf, pos)
        if pos != len(buf):
            raise ValueError(f"ListOffsets v{version} response: {len(buf) - pos} bytes left over")
        return _ListOffsetsAnswer(version, throttle, offsets)


class _ListOffsetsDecoder:
    """Stands in for kafka-python's response class of one request (``parse_header`` + ``decode``)."""

    def __init__(self, version: int):
        self.version = version

    def parse_header(self, data):
        return ListOffsetsResponse[self.version].parse_header(data)

    def decode(self, data) -> _ListOffsetsAnswer:
        buf = data.read() if hasattr(data, "read") else bytes(data)
        try:
            return _ListOffsetsAnswer.decode_body(buf, self.version)
        except (IndexError, struct.error, UnicodeDecodeError) as exc:  # kafka-python's parser expects these
            raise ValueError(f"corrupt ListOffsets v{self.version} response: {exc}") from exc


class _ListOffsetsHeader(RequestHeader, init=False):
    def get_response_class(self):
        return _ListOffsetsDecoder(self.request_api_version)


class _ListOffsets(ListOffsetsRequest, init=False):
    """A ListOffsets request for many partitions with one timestamp, encoded by hand (see above).

    kafka-python still negotiates the version (within LIST_OFFSETS_MIN/MAX_VERSION), frames it,
    assigns the correlation id and matches the answer, which is decoded by
    :class:`_ListOffsetsDecoder` into a :class:`_ListOffsetsAnswer`.
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
        pack = _REQ_PARTITION[6 if flexible else 4 if v >= 4 else 2].pack
        ts = self.timestamp
        out.append(_uvarint(len(self.wanted) + 1) if flexible else _I32.pack(len(self.wanted)))
        for name, parts in self.wanted:
            raw = name.encode()
            out.append((_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw)
            out.append(_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
            ep = self.epochs.get(name, {})
            if flexible:
                out.extend([pack(p, ep.get(p, -1), ts, 0) for p in parts])
                out.append(b"\x00")
            elif v >= 4:
                out.extend([pack(p, ep.get(p, -1), ts) for p in parts])
            else:
                out.extend([pack(p, ts) for p in parts])
        if v >= 10:
            out.append(_I32.pack(self.timeout_ms))
        if flexible:
            out.append(b"\x00")
        body = b"".join(out)
        return _I32.pack(len(body)) + body if framed else body


class _Attempts:
    """Bounded retry bookkeeping for one public operation (runs on the IO thread)."""

    def __init__(self, wire: KafkaWire, what: str):
        self.wire = wire
        self.what = what
        self.count = 0
        self.throttles = 0
        self.started = time.monotonic()
        self.last_error: BaseException | str | None = None
        self.last_node: Any = None
        self.leader: Any = None  # partition leader involved, if any (for the message)

    async def failed(self, error: BaseException | str, node: Any = None) -> None:
        """Record a retriable failure; back off, or raise KafkaUnavailable when out of retries."""
        self.count += 1
        self.wire._metadata_suspect()
        await self._backoff(error, node, self.count, self.wire._config["retries"])

    async def throttled(self, throttle_time_ms: int, node: Any) -> None:
        """A broker over quota asked us to wait: sleep that long (not a failure, but bounded)."""
        self.throttles += 1
        error = f"throttled by the broker for {throttle_time_ms} ms (quota)"
        await self._backoff(error, node, self.throttles, 4 * max(1, self.wire._config["retries"]),
                            floor_s=throttle_time_ms / 1000)

    async def _backoff(self, error: BaseException | str, node: Any, count: int, limit: int,
                       floor_s: float = 0.0) -> None:
        self.last_error = error
        if node is not None:
            self.last_node = node
        cfg = self.wire._config
        if count > limit:
            exc = KafkaUnavailable(self.message())
            exc.last_error = _describe(error)
            raise exc
        delay = min(cfg["retry_backoff_ms"] * 2 ** (count - 1), cfg["retry_backoff_max_ms"]) / 1000
        manager = self.wire._manager
        if node is not None and manager is not None:
            delay = max(delay, min(manager.connection_delay(node), cfg["retry_backoff_max_ms"] / 1000))
        delay = max(delay * random.uniform(0.9, 1.1), floor_s)
        log.warning("KafkaWire: %s: attempt %d failed (%s); retrying in %.0f ms", self.what, count,
                    _describe(error), delay * 1000)
        await self.wire._net.sleep(delay)

    def message(self) -> str:
        elapsed = time.monotonic() - self.started
        broker = self.wire._node_desc(self.last_node) if self.last_node is not None else "n/a"
        leader = ""
        if self.leader is not None and self.leader != self.last_node:
            leader = f"partition leader: {self.wire._node_desc(self.leader)}; "
        return (f"Kafka unavailable: {self.what} failed after {self.count + self.throttles} attempts in {elapsed:.1f}s "
                f"(bootstrap servers: {self.wire.bootstrap_servers}; {leader}last broker tried: {broker}; "
                f"last error: {_describe(self.last_error)})")


class KafkaWire:
    """Raw-protocol Kafka client: metadata, offsets (HW + LSO + log start) and raw fetches.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list of ``host:port``.
        client_id: Kafka client id (shows up in broker request logs/quotas).
        security_protocol, sasl_*, ssl_*: passed to kafka-python unchanged (PLAINTEXT, SSL,
            SASL_PLAINTEXT, SASL_SSL; PLAIN, SCRAM-SHA-256/512, GSSAPI, OAUTHBEARER).
        request_timeout_ms: per-request timeout (a timed-out request closes its connection).
        retries: retries per operation for retriable conditions (leader moves, broker down).
        retry_backoff_ms / retry_backoff_max_ms: exponential backoff between retries.
        reconnect_backoff_ms / reconnect_backoff_max_ms: kafka-python's per-node reconnect backoff.
        socket_connection_setup_timeout_ms: TCP+TLS+ApiVersions+SASL setup timeout per attempt
            (default ``min(request_timeout_ms, 10000)``).
        bootstrap_timeout_ms: how long the first metadata bootstrap may take (default
            ``request_timeout_ms``) before :class:`KafkaUnavailable`.
        receive_message_max_bytes: largest accepted response frame (default 100 MB).
        deletion_confirmations: consecutive Metadata answers that must all lack a topic or
            partition before it is reported deleted (default 3; one stale broker cache is not enough).
        metadata_max_age_ms: how long :meth:`partitions` may answer from the last Metadata
            response instead of asking again. The constructor's default, 0, asks every time
            (fresh topic ids on every call: what callers that compare topic ids per call, and
            the tests written for that, expect); the streaming source's option of the same name
            defaults to :data:`METADATA_MAX_AGE_MS`, 30 s. This is the Kafka clients'
            ``metadata.max.age.ms`` ("The period of time in milliseconds after which we force a
            refresh of metadata even if we haven't seen any partition leadership changes to
            proactively discover any new brokers or partitions", apache/kafka
            ``CommonClientConfigs.METADATA_MAX_AGE_DOC``; a ``KafkaConsumer`` with a pattern
            subscription re-evaluates the pattern on each such refresh). Kafka's default is 5
            minutes (``ConsumerConfig``/``AdminClientConfig``: ``5 * 60 * 1000``); 30 s is
            recommended for the watchdog because it should notice a new topic or partition
            (which may already hold a hanging transaction) within a small fraction of its alert
            threshold (``[thresholds] max_timeout_ms``, 15 minutes by default), while a Metadata
            answer for 10,000 partitions is then asked at most once per 30 s instead of on every
            trigger. As in the Java clients, the cache is refreshed early, on
            the next call, after anything that suggests it is out of date: any retriable
            failure (leader errors, no leader, UNKNOWN_TOPIC_OR_PARTITION, connection failures),
            every deletion confirmation (which always asks the brokers), and an offset answer
            whose high watermark or log start went backwards (the topic may have been deleted and
            created again: its topic id is then refreshed before the offsets are returned).
            Partition leaders used for routing are always the newest known, whatever the age.
            What the cache costs: a topic deleted and created again under the same name, whose
            offsets did not go backwards, is told apart by its new topic id only at the next
            refresh (at most ``metadata_max_age_ms`` later) - as a Java consumer would.
        broker_timeout_ms: how long :meth:`offsets_available` and :meth:`fetch_many` wait for one
            broker (default ``request_timeout_ms``). All brokers are asked at once; the
            partitions of a broker that has not answered by then are unavailable for that call
            (its request stays in flight, and later calls do not wait on that broker again
            until it has answered or timed out): one stalled broker costs the others at most
            this long, once (streaming/sources/kafka_parallel.py).
        **kafka_configs: any other ``kafka.net.KafkaConnectionManager`` setting
            (``ssl_context``, ``ssl_check_hostname``, ``sasl_oauth_token_provider``,
            ``proxy_url``, ``client_dns_lookup``, ``api_version``, ...).
    """

    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str = "txnwatch",
                 security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
                 sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                 ssl_cafile: str | None = None, ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                 ssl_password: str | None = None, request_timeout_ms: int = 30000, retries: int = 8,
                 retry_backoff_ms: int = 200, retry_backoff_max_ms: int = 5000, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000, socket_connection_setup_timeout_ms: int | None = None,
                 bootstrap_timeout_ms: int | None = None, receive_message_max_bytes: int = 100_000_000,
                 deletion_confirmations: int = 3, metadata_max_age_ms: int = 0,
                 broker_timeout_ms: int | None = None, **kafka_configs: Any):
        unknown = set(kafka_configs) - _PASSTHROUGH
        if unknown:
            raise ValueError(f"unknown kafka-python connection settings: {sorted(unknown)}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        if deletion_confirmations < 1:
            raise ValueError("deletion_confirmations must be >= 1")
        if metadata_max_age_ms < 0:
            raise ValueError("metadata_max_age_ms must be >= 0")
        setup_ms = socket_connection_setup_timeout_ms or min(request_timeout_ms, 10000)
        if isinstance(bootstrap_servers, str):
            bootstrap_servers = [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
        if not bootstrap_servers:
            raise ValueError("bootstrap_servers is empty")
        collect_hosts(bootstrap_servers)  # validates host:port syntax early
        self._config: dict[str, Any] = {
            "bootstrap_servers": list(bootstrap_servers),
            "client_id": client_id,
            "security_protocol": security_protocol,
            "sasl_mechanism": sasl_mechanism,
            "sasl_plain_username": sasl_plain_username,
            "sasl_plain_password": sasl_plain_password,
            "ssl_cafile": ssl_cafile,
            "ssl_certfile": ssl_certfile,
            "ssl_keyfile": ssl_keyfile,
            "ssl_password": ssl_password,
            "request_timeout_ms": request_timeout_ms,
            "reconnect_backoff_ms": reconnect_backoff_ms,
            "reconnect_backoff_max_ms": reconnect_backoff_max_ms,
            "socket_connection_setup_timeout_ms": setup_ms,
            "socket_connection_setup_timeout_max_ms": setup_ms,
            "receive_message_max_bytes": receive_message_max_bytes,
            **kafka_configs,
            # txnwatch-level settings (not passed to kafka-python)
            "retries": retries,
            "retry_backoff_ms": retry_backoff_ms,
            "retry_backoff_max_ms": retry_backoff_max_ms,
            "bootstrap_timeout_ms": bootstrap_timeout_ms or request_timeout_ms,
            "deletion_confirmations": deletion_confirmations,
            "metadata_max_age_ms": int(metadata_max_age_ms),
            "broker_timeout_ms": int(broker_timeout_ms or request_timeout_ms),
        }
        self._init_runtime()

    # ------------------------------------------------------------------ lifecycle
    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._net: NetworkSelector | None = None
        self._manager: KafkaConnectionManager | None = None
        self._finalizer = None
        self._closed = False
        # topic -> {partition: leader node id (-1 = none)}, from our own Metadata requests
        self._leaders: dict[str, dict[int, int]] = {}
        # topic -> topic id (Metadata v10+), for telling a recreated topic from the same one
        self._topic_ids: dict[str, str] = {}
        # topic -> {partition: leader epoch} (Metadata v7+): sent as current_leader_epoch in
        # Fetch v9+ / ListOffsets v4+ (KIP-320) and used to reject older metadata
        self._epochs: dict[str, dict[int, int]] = {}
        # discovery cache (metadata_max_age_ms): topic -> (is_internal, sorted partitions, monotonic
        # time of the Metadata answer), when the last all-topics answer came, and since when
        # everything older is suspect (a failure happened)
        self._md_topics: dict[str, tuple[bool, list[int], float]] = {}
        self._md_all_at: float | None = None
        self._md_suspect_at = float("-inf")
        # (log start, high watermark) last returned per partition, to notice offsets going backwards
        self._last_offsets: dict[tuple[str, int], tuple[int, int]] = {}
        self.throttle_waits = 0  # requests held back by a KIP-219 throttle (see _unthrottled)
        self._stalled = StalledNodes()  # brokers with a request overdue past broker_timeout_ms

    def __getstate__(self) -> dict[str, Any]:
        return {"_config": dict(self._config)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._config = state["_config"]
        self._init_runtime()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaWire({self.bootstrap_servers!r}, client_id={self._config['client_id']!r})"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self._config["bootstrap_servers"])

    @property
    def broker_version(self) -> tuple[int, ...] | None:
        """Broker version inferred by kafka-python from ApiVersions (None before connecting)."""
        return self._manager.broker_version if self._manager is not None else None

    def close(self) -> None:
        """Close connections and stop the IO thread. Idempotent; the object cannot be reused."""
        with self._lock:
            self._closed = True
            if self._finalizer is not None:
                self._finalizer()
                self._finalizer = None
            self._net = self._manager = None

    def connect(self) -> None:
        """Start the IO thread and bootstrap cluster metadata (otherwise done on first use)."""
        self._ensure_started()

    def _ensure_started(self) -> None:
        with self._lock:
            if self._closed:
                raise KafkaWireError("KafkaWire is closed")
            if self._net is None:
                cfg = {k: v for k, v in self._config.items() if k in _PASSTHROUGH or k == "bootstrap_servers"}
                net = NetworkSelector(client_id=cfg["client_id"])
                manager = KafkaConnectionManager(net, **cfg)
                net.start()
                self._net, self._manager = net, manager
                self._finalizer = weakref.finalize(self, _shutdown, net, manager)
            manager = self._manager
        if manager.bootstrapped:
            return
        timeout_ms = self._config["bootstrap_timeout_ms"]
        if str(self._config.get("security_protocol") or "PLAINTEXT").upper() != "PLAINTEXT":
            self._check_security(manager)
        try:
            manager.bootstrap(timeout_ms)
        except (Errors.SaslAuthenticationFailedError, Errors.AuthorizationError) as exc:
            raise KafkaWireError(f"Kafka authentication/authorization failed against "
                                 f"{self.bootstrap_servers}: {_describe(exc)}") from exc
        except Errors.IncompatibleBrokerVersion as exc:
            raise KafkaWireError(f"Kafka broker at {self.bootstrap_servers} is incompatible: "
                                 f"{_describe(exc)}") from exc
        except Exception as exc:  # KafkaTimeoutError and friends
            raise KafkaUnavailable(
                f"Kafka unavailable: could not bootstrap cluster metadata from {self.bootstrap_servers} "
                f"within {timeout_ms} ms (last error: {self._bootstrap_diagnosis(manager, exc)})") from exc

    def _check_security(self, manager: KafkaConnectionManager) -> None:
        """Fail at once, and clearly, when TLS or SASL is refused.

        kafka-python's bootstrap retries a refused authentication like a network error until its
        timeout and then reports only the timeout; a wrong password or an untrusted certificate
        never heals by retrying (Kafka's Java clients treat AuthenticationException as fatal too).
        One connection to a bootstrap server is opened first; other failures are left to the
        bootstrap's retries. The connection stays open and is used by the bootstrap.
        """
        broker = manager.cluster.bootstrap_brokers()[0]

        async def probe() -> BaseException | None:
            try:
                conn = manager.get_connection(broker.node_id, timeout_ms=self._config["socket_connection_setup_timeout_ms"],
                                              pop_on_close=False, refresh_metadata_on_err=False,
                                              reset_backoff_on_connect=False)
                await conn
            except Exception as exc:  # classified below
                manager.close(broker.node_id)
                return exc
            return None

        exc = self._net.run(probe)
        if exc is None:
            return
        where = (f"{broker.host}:{broker.port} ({self._config.get('security_protocol')}"
                 f"{', ' + self._config['sasl_mechanism'] if self._config.get('sasl_mechanism') else ''}"
                 f"{', user ' + self._config['sasl_plain_username'] if self._config.get('sasl_plain_username') else ''})")
        cause = exc.__cause__ or (exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None)
        if isinstance(exc, (Errors.SaslAuthenticationFailedError, Errors.UnsupportedSaslMechanismError,
                            Errors.IllegalSaslStateError)):
            detail = re.sub(r"^(\[Error \d+\] )?(\w+: )*", "", str(exc))  # kafka-python repeats the class name
            if isinstance(exc, Errors.UnsupportedSaslMechanismError):
                detail = (f"the broker does not enable {self._config.get('sasl_mechanism')} on this listener "
                          f"(its sasl.enabled.mechanisms)")
            raise KafkaWireError(f"Kafka authentication failed at {where}: {type(exc).__name__}: {detail}") from exc
        # kafka-python wraps TLS failures as KafkaConnectionError("Handshake failed: <ssl error>")
        tls_failed = isinstance(cause, ssl.SSLError) or isinstance(exc, ssl.SSLError) or (
            isinstance(exc, Errors.KafkaConnectionError) and "Handshake failed" in str(exc))
        if tls_failed:
            detail = _describe(cause) if isinstance(cause, ssl.SSLError) else str(exc).split("Handshake failed: ")[-1]
            raise KafkaWireError(f"TLS handshake with {where} failed: {detail} (check ssl_cafile, "
                                 f"ssl_check_hostname, ssl_crlfile and the client certificate)") from exc

    def _bootstrap_diagnosis(self, manager: KafkaConnectionManager, exc: BaseException) -> str:
        for broker in manager.cluster.bootstrap_brokers():
            failure = manager.auth_failure(broker.node_id)
            if failure is not None:
                return f"authentication failed at {broker.host}:{broker.port}: {_describe(failure)}"
        problems = []
        for host, port, _ in collect_hosts(self._config["bootstrap_servers"], randomize=False):
            try:
                with socket.create_connection((host, port), timeout=1.0):
                    problems.append(f"{host}:{port} accepts TCP connections but the Kafka handshake/"
                                    f"metadata request failed ({_describe(exc)})")
            except OSError as err:
                problems.append(f"{host}:{port} {err.strerror or _describe(err)}")
        return "; ".join(problems) or _describe(exc)

    def _run(self, coro, *args):
        self._ensure_started()
        net = self._net
        if net is None:
            raise KafkaWireError("KafkaWire is closed")
        try:
            return net.run(coro, *args)
        except KafkaWireError:
            raise
        except Errors.KafkaError as exc:
            raise KafkaWireError(f"Kafka request failed against {self.bootstrap_servers}: "
                                 f"{_describe(exc)}") from exc

    # ------------------------------------------------------------------ public API
    def partitions(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                   include_internal: bool = False) -> dict[str, list[int]]:
        """Topic -> sorted partition ids, from a Metadata answer at most ``metadata_max_age_ms``
        old and newer than the last failure (see the constructor), else from a new request.

        ``topics`` are always included when they exist, internal or not (so the caller can
        always ask for ``__transaction_state``). ``pattern`` is matched against the whole topic
        name (``re.fullmatch``, like Java's ``Pattern.matches``); internal topics match it only
        with ``include_internal``. With neither, all topics are listed (internal ones only with
        ``include_internal``). Topics that do not exist are absent from the result (and logged).
        Partitions without a leader are listed (they exist); fetching them is retried.
        """
        return self._run(self._partitions_async, list(topics) if topics is not None else None, pattern,
                         include_internal)

    def offsets(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionOffsets]:
        """Log start, high watermark and LSO of partitions, asked from their leaders.

        Keys are ``(topic, partition)`` tuples (``TopicPartition`` inputs are accepted). Deleted
        or unknown partitions are returned with ``deleted=True`` and -1 offsets.
        """
        wanted = list(dict.fromkeys((str(t), int(p)) for t, p in tps))
        if not wanted:
            return {}
        return self._run(self._offsets_async, wanted)

    def offsets_available(self, tps: Iterable[tuple[str, int]]) -> tuple[
            dict[tuple[str, int], PartitionOffsets], dict[tuple[str, int], str]]:
        """Like :meth:`offsets`, but one unreadable partition does not fail the others.

        Returns ``(offsets, unavailable)``: ``unavailable`` maps each partition that still had no
        leader (Metadata leader -1 / LEADER_NOT_AVAILABLE), answered a leader error
        (NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED/UNKNOWN_LEADER_EPOCH,
        ...) or whose leader did not answer, after one metadata refresh and a second round, to
        the last error seen. Only when no broker answers Metadata does it raise
        :class:`KafkaUnavailable` (after the usual bounded retries).
        """
        wanted = list(dict.fromkeys((str(t), int(p)) for t, p in tps))
        if not wanted:
            return {}, {}
        return self._run(self._offsets_async, wanted, True)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, *, max_wait_ms: int = 0,
              min_bytes: int = 1) -> FetchResult:
        """Fetch raw record-batch bytes of one partition from ``offset`` (READ_UNCOMMITTED).

        ``max_bytes`` is both the partition and the request limit. ``max_wait_ms=0`` makes the
        broker answer immediately even when there is nothing new.
        """
        if max_bytes <= 0:
            raise ValueError("max_bytes must be > 0")
        if offset < 0:
            raise ValueError("offset must be >= 0")
        return self._run(self._fetch_async, topic, int(partition), int(offset), int(max_bytes), int(max_wait_ms),
                         int(min_bytes))

    def fetch_many(self, items: Iterable[tuple[str, int, int]], max_bytes: int, *,
                   partition_max_bytes: int | None = None) -> dict[tuple[str, int], FetchResult]:
        """One multi-partition Fetch per leader for ``(topic, partition, offset)`` items, sent to
        all leaders at once, each awaited up to ``broker_timeout_ms``.

        ``max_bytes`` is both the request and the per-partition limit (KIP-74: the first
        partition of a response gets at least one whole batch); with ``partition_max_bytes``,
        that bounds each partition and a request for n partitions may carry n times as much. Only
        plain successes are returned: a partition missing from the result (no known leader, a
        partition error, a throttled or failed request, a preferred read replica) is for the
        caller to fetch alone with :meth:`fetch`, which handles each of those cases, unless its
        leader is :meth:`stalled` (it did not answer in time: fetching alone would wait again).
        """
        wanted = [(str(t), int(p), int(o)) for t, p, o in items]
        if not wanted:
            return {}
        return self._run(self._fetch_many_async, wanted, int(max_bytes), partition_max_bytes)

    def stalled(self, topic: str, partition: int) -> bool:
        """Whether the partition's leader has a request overdue past ``broker_timeout_ms``."""
        leader = self._leaders.get(topic, {}).get(partition)
        return leader is not None and self._stalled.busy(leader) is not None

    async def _fetch_many_async(self, wanted: list[tuple[str, int, int]], max_bytes: int,
                                partition_max_bytes: int | None = None):
        unknown = sorted({t for t, p, _ in wanted if not self._known((t, p))})
        if unknown:  # a fresh executor process: one Metadata request for all, not one per partition
            try:
                await self._metadata_async(unknown, None)
            except KafkaWireError:
                pass  # left to the single-partition path and its retries
        by_leader: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
        for t, p, o in wanted:
            leader = self._leaders.get(t, {}).get(p, -1)
            if leader >= 0:
                by_leader[leader].append((t, p, o))
        requests = {leader: self._fetch_request_many(its, max_bytes, partition_max_bytes)
                    for leader, its in by_leader.items()}

        def job(leader: int):
            async def send():
                return await self._send(leader, requests[leader])
            return send

        # every leader at once, each on its own deadline (kafka_parallel.per_node)
        answers = await per_node(self._net, self._manager.wait_for, {leader: job(leader) for leader in requests},
                                 self._config["broker_timeout_ms"], self._stalled)
        out: dict[tuple[str, int], FetchResult] = {}
        for leader, response in answers.items():
            request, its = requests[leader], by_leader[leader]
            if isinstance(response, BaseException):  # left to the single-partition path (KafkaWire.fetch)
                continue
            if getattr(response, "error_code", 0):
                continue
            offsets = {(t, p): o for t, p, o in its}
            for topic in response.responses:
                for pd_ in topic.partitions:
                    tp = (topic.topic, pd_.partition_index)
                    if tp not in offsets or pd_.error_code != 0 or pd_.preferred_read_replica not in (-1, None):
                        continue
                    version = request.API_VERSION
                    out[tp] = FetchResult(tp[0], tp[1], offsets[tp], bytes(pd_.records or b""), pd_.high_watermark,
                                          pd_.last_stable_offset, pd_.log_start_offset if version >= 5 else -1, 0,
                                          "NONE", FetchStatus.OK, leader, version)
        return out

    def _fetch_request_many(self, items: list[tuple[str, int, int]], max_bytes: int,
                            partition_max_bytes: int | None = None):
        by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for t, p, o in items:
            by_topic[t].append((p, o))
        Topic = FetchRequest.FetchTopic
        request_max = max_bytes
        if partition_max_bytes is not None:
            request_max, max_bytes = partition_max_bytes * len(items), partition_max_bytes
        return FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=request_max, isolation_level=READ_UNCOMMITTED,
            session_id=0, session_epoch=-1,
            topics=[Topic(topic=t, partitions=[Topic.FetchPartition(
                partition=p, current_leader_epoch=self._epoch(t, p), fetch_offset=o, last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=max_bytes) for p, o in ps]) for t, ps in by_topic.items()],
            forgotten_topics_data=[], rack_id="", min_version=FETCH_MIN_VERSION, max_version=FETCH_MAX_VERSION)

    def names_create_internal_topics(self) -> bool:
        """Whether a Metadata request naming a missing internal topic may create it on these
        brokers: before 2.8, ``KafkaApis.getTopicMetadata`` sends it to ``createInternalTopic``
        whatever AllowAutoTopicCreation says; from 2.8 (KAFKA-9751) only when it is allowed,
        which KafkaWire never does. 2.8 is told by Metadata v10 (topic ids, new in 2.8) in the
        negotiated ApiVersions; unknown counts as "may create"."""
        self._ensure_started()
        bvd = self._manager.broker_version_data if self._manager is not None else None
        rng = (getattr(bvd, "api_versions", None) or {}).get(MetadataRequest.API_KEY)
        return rng is None or rng[1] < 10

    def leader(self, topic: str, partition: int) -> int | None:
        """Cached leader node id (-1: no leader, None: unknown/not yet looked up)."""
        return self._leaders.get(topic, {}).get(partition)

    def broker_count(self) -> int:
        """Number of brokers in the cluster, from a fresh Metadata request (any broker version;
        DescribeCluster needs 2.8+)."""
        return len(self._run(self._metadata_async, [], None).brokers)

    def refresh_metadata(self, topics: Iterable[str] | None = None) -> None:
        """Refresh the cached partition leaders and the discovery cache (all topics when
        ``topics`` is None) now, whatever their age."""
        self._run(self._metadata_async, list(topics) if topics is not None else None, None)

    # ------------------------------------------------------------------ internals (IO thread)
    def _denied(self, api: str, code: int, resource: str, node: Any) -> KafkaAuthorizationError:
        msg = authorization_message(api, code, resource, principal=principal_of(self._config),
                                    bootstrap=self.bootstrap_servers,
                                    broker=self._node_desc(node) if node is not None else None)
        return KafkaAuthorizationError(msg, error_code=code)

    def _node_desc(self, node_id: Any) -> str:
        if node_id == -1:
            return "none (no leader)"
        manager = self._manager
        meta = manager.cluster.broker_metadata(node_id) if manager is not None else None
        if meta is None:
            return f"node {node_id}"
        if isinstance(node_id, str) and node_id.startswith("bootstrap-"):
            return f"bootstrap server {meta.host}:{meta.port}"
        return f"node {node_id} at {meta.host}:{meta.port}"

    def _send_nowait(self, node_id: Any, request):
        """Queue a request on the node's connection now; returns kafka-python's Future."""
        return self._manager.send(request, node_id=node_id, request_timeout_ms=self._config["request_timeout_ms"])

    async def _await(self, future):
        # safety net on top of kafka-python's own per-request and connection-setup timers
        timeout_ms = (self._config["request_timeout_ms"] + self._config["socket_connection_setup_timeout_ms"]
                      + 1000)
        return await self._manager.wait_for(future, timeout_ms)

    async def _send(self, node_id: Any, request):
        await self._unthrottled(node_id)
        return await self._await(self._send_nowait(node_id, request))

    def _throttled_for(self, node_id: Any) -> int:
        """Milliseconds the node's connection stays throttled (KIP-219), 0 if it is not."""
        conn = self._manager._conns.get(node_id) if self._manager is not None else None
        if conn is None or "throttle" not in conn.paused:
            return 0
        return max(int((getattr(conn, "_throttle_time", 0) - time.monotonic()) * 1000), 1)

    async def _unthrottled(self, node_id: Any) -> None:
        """KIP-219: wait until the node's connection is no longer throttled.

        A broker (2.0+) answers at once with ``throttle_time_ms`` > 0 and mutes the connection for
        that long; the Java client's ``NetworkClient.maybeThrottle`` marks the node throttled
        (``ClusterConnectionStates.throttle``) and ``canSendRequest`` sends nothing to it until
        then, while other nodes are used as usual. kafka-python pauses the connection the same
        way (``KafkaConnection._maybe_throttle``) but *fails* a request sent meanwhile with
        NodeNotReadyError, which would count as a broker failure: so the request waits here,
        on this node only, and a throttle is never a failure.
        """
        manager = self._manager
        while manager is not None:
            conn = manager._conns.get(node_id)  # kafka-python 3.0 internals: the node's connection
            if conn is None or "throttle" not in conn.paused:
                return
            self.throttle_waits += 1
            await self._net.sleep(max(getattr(conn, "_throttle_time", 0) - time.monotonic(), 0.005))

    def _metadata_node(self) -> Any:
        manager = self._manager
        node = manager.least_loaded_node()
        if node is not None and self._stalled.busy(node) is not None:
            # a broker with an overdue request would hold Metadata up too: any other one will do
            others = [b.node_id for b in manager.cluster.brokers() if self._stalled.busy(b.node_id) is None]
            node = random.choice(others) if others else node
        if node is None:
            node = random.choice(manager.cluster.bootstrap_brokers()).node_id
        return node

    async def _metadata_async(self, topics: list[str] | None, attempts: _Attempts | None):
        """One successful Metadata response (retried); updates the leader cache."""
        attempts = attempts or _Attempts(self, "Metadata request")
        while True:
            node = self._metadata_node()
            request = MetadataRequest(
                topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
                min_version=METADATA_MIN_VERSION,
            )
            async def ask(node=node, request=request):
                return await self._send(node, request)

            # any broker can answer Metadata: one that does not within broker_timeout_ms is
            # left for another (per_node remembers it as stalled)
            response = (await per_node(self._net, self._manager.wait_for, {node: ask},
                                       self._config["broker_timeout_ms"], self._stalled))[node]
            if isinstance(response, BaseException):
                if not isinstance(response, NodeDeadline) and not _retriable_exception(response):
                    raise KafkaWireError(f"Metadata request to {self._node_desc(node)} failed: "
                                         f"{_describe(response)}") from response
                await attempts.failed(response, node)
                continue
            top_error = getattr(response, "error_code", 0) or 0  # Metadata v13+ (KIP-1102)
            if top_error:
                if top_error != _REBOOTSTRAP_REQUIRED and not Errors.for_code(top_error).retriable:
                    raise KafkaWireError(f"Metadata request to {self._node_desc(node)} failed: "
                                         f"{error_name(top_error)}", error_code=top_error)
                await attempts.failed(f"Metadata top-level error {error_name(top_error)}", node)
                continue
            if not response.brokers:
                await attempts.failed("Metadata response without brokers", node)
                continue
            self._manager.cluster.update_metadata(response)  # kafka-python routes node ids with it
            self._apply_metadata(response, topics)
            return response

    def _metadata_suspect(self) -> None:
        """Something failed: the next :meth:`partitions` asks the brokers again."""
        self._md_suspect_at = time.monotonic()

    def _metadata_fresh(self, at: float | None, now: float) -> bool:
        return at is not None and at > self._md_suspect_at and now - at < self._config["metadata_max_age_ms"] / 1000

    def _apply_metadata(self, response, topics: list[str] | None = None) -> None:
        now = time.monotonic()
        if topics is None:  # an all-topics answer replaces the discovery cache
            self._md_topics = {t.name: (bool(t.is_internal), sorted(p.partition_index for p in t.partitions), now)
                               for t in response.topics if t.error_code == 0 and t.name is not None}
            self._md_all_at = now
        for t in response.topics:
            if t.name is None:
                continue
            if topics is not None:
                if t.error_code == 0:
                    self._md_topics[t.name] = (bool(t.is_internal), sorted(p.partition_index for p in t.partitions),
                                               now)
                else:
                    self._md_topics.pop(t.name, None)
            if t.error_code == 0:
                topic_id = getattr(t, "topic_id", None)
                new_id = str(topic_id) if topic_id is not None and topic_id.int != 0 else None  # zero: v < 10
                self._leaders[t.name] = self._latest_leaders(t, new_id)
                if new_id is not None:
                    self._topic_ids[t.name] = new_id
            elif t.error_code in (_UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC_ID, 17):  # 17 INVALID_TOPIC
                self._leaders.pop(t.name, None)
                self._epochs.pop(t.name, None)

    def _latest_leaders(self, t, new_id: str | None) -> dict[int, int]:
        """Partition -> leader from one Metadata topic answer, never older than what was seen.

        Java's ``Metadata.updateLatestMetadata``: a partition whose leader epoch (v7+) is below the
        last seen one keeps the cached leader (the answering broker's metadata cache lags: every
        broker applies updates on its own); a new topic id resets the epoch (a recreated topic
        starts again at 0); no epoch in the answer (v < 7, or -1) forgets the last seen one.
        """
        old_leaders = self._leaders.get(t.name, {})
        old_epochs = self._epochs.get(t.name, {})
        recreated = new_id is not None and self._topic_ids.get(t.name) not in (None, new_id)
        leaders: dict[int, int] = {}
        epochs: dict[int, int] = {}
        for p in t.partitions:
            i = p.partition_index
            epoch = getattr(p, "leader_epoch", -1)
            epoch = -1 if epoch is None else epoch
            seen = old_epochs.get(i)
            if epoch >= 0 and seen is not None and epoch < seen and not recreated and i in old_leaders:
                log.debug("KafkaWire: %s-%s: metadata with leader epoch %d older than %d seen; keeping leader %s",
                          t.name, i, epoch, seen, old_leaders[i])
                leaders[i], epochs[i] = old_leaders[i], seen
                continue
            leaders[i] = p.leader_id
            if epoch >= 0:
                epochs[i] = epoch
        self._epochs[t.name] = epochs
        return leaders

    def _epoch(self, topic: str, partition: int) -> int:
        """current_leader_epoch to send (KIP-320): the last seen leader epoch, -1 if unknown."""
        return self._epochs.get(topic, {}).get(partition, -1)

    @staticmethod
    def _topic_errors(response, names: set[str]) -> dict[str, int]:
        return {t.name: t.error_code for t in response.topics if t.name in names and t.error_code}

    async def _partitions_async(self, topics: list[str] | None, pattern: str | None, include_internal: bool):
        attempts = _Attempts(self, "partition discovery (Metadata)")
        regex = re.compile(pattern) if pattern is not None else None
        result: dict[str, list[int]] = {}
        now = time.monotonic()
        if regex is not None or topics is None:
            if not self._metadata_fresh(self._md_all_at, now):
                await self._metadata_async(None, attempts)  # replaces self._md_topics
            for name, (internal, parts, _) in self._md_topics.items():
                if internal and not include_internal:
                    continue
                if regex is not None and not regex.fullmatch(name):
                    continue
                result[name] = list(parts)
        if topics:
            names = list(dict.fromkeys(topics))
            cached = [self._md_topics.get(n) for n in names]
            if all(c is not None and self._metadata_fresh(c[2], now) for c in cached):
                result.update({n: list(c[1]) for n, c in zip(names, cached, strict=True)})
                return dict(sorted(result.items()))
            while True:
                response = await self._metadata_async(names, attempts)
                errors = self._topic_errors(response, set(names))
                retriable = {n: c for n, c in errors.items()
                             if c not in (_UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC_ID)
                             and Errors.for_code(c).retriable}
                fatal = {n: c for n, c in errors.items()
                         if c not in (_UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC_ID) and n not in retriable}
                if fatal:
                    name, code = next(iter(fatal.items()))
                    if code in AUTHORIZATION_ERRORS:
                        raise self._denied("Metadata", code, name, None)
                    raise KafkaWireError(f"Metadata for topic {name!r} failed: {error_name(code)}", error_code=code)
                if retriable:
                    await attempts.failed(
                        "topic errors " + ", ".join(f"{n}={error_name(c)}" for n, c in retriable.items()))
                    continue
                break
            for t in response.topics:
                if t.error_code == 0 and t.name is not None:
                    result[t.name] = sorted(p.partition_index for p in t.partitions)
            missing = [n for n in names if n not in result]
            if missing:
                log.warning("KafkaWire: topics not found in cluster metadata: %s", missing)
        return dict(sorted(result.items()))

    def _known(self, tp: tuple[str, int]) -> bool:
        return tp[1] in self._leaders.get(tp[0], {})

    async def _confirmed_gone(self, tp: tuple[str, int], attempts: _Attempts) -> bool:
        """Whether ``deletion_confirmations`` Metadata answers in a row lack the partition.

        A single broker whose metadata cache lags answers UNKNOWN_TOPIC_OR_PARTITION for a topic
        that exists (the cache is updated asynchronously on every broker), so one answer is not
        proof. Refreshes are spaced by the retry backoff and go to the least loaded broker.
        """
        cfg = self._config
        self._metadata_suspect()
        for i in range(cfg["deletion_confirmations"]):
            if i:
                delay = min(cfg["retry_backoff_ms"] * 2 ** (i - 1), cfg["retry_backoff_max_ms"]) / 1000
                await self._net.sleep(delay)
            await self._metadata_async([tp[0]], attempts)
            if self._known(tp):
                return False
        return True

    async def _offsets_async(self, wanted: list[tuple[str, int]], partial: bool = False):
        attempts = _Attempts(self, f"ListOffsets for {len(wanted)} partition(s)")
        result: dict[tuple[str, int], PartitionOffsets] = {}
        unavailable: dict[tuple[str, int], str] = {}
        errors: dict[tuple[str, int], str] = {}  # latest retriable error per partition
        rounds = 0
        pending = list(wanted)
        if any(not self._known(tp) for tp in pending):
            await self._metadata_async(sorted({t for t, _ in pending}), attempts)
        while pending:
            retry: list[tuple[str, int]] = []
            last_error: BaseException | str | None = None
            last_node = None
            by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
            for tp in pending:
                if not self._known(tp) and await self._confirmed_gone(tp, attempts):
                    result[tp] = PartitionOffsets(tp[0], tp[1], -1, -1, -1, -1, deleted=True)
                    continue
                leader = self._leaders[tp[0]][tp[1]]
                if leader < 0:
                    retry.append(tp)
                    last_error = errors[tp] = f"no leader for {tp[0]}-{tp[1]} (LEADER_NOT_AVAILABLE)"
                    continue
                by_leader[leader].append(tp)
            # every leader is asked at once, each on its own deadline (kafka_parallel.per_node)
            deadline = self._config["broker_timeout_ms"] if partial else None
            by_node = await per_node(self._net, self._manager.wait_for,
                                     {leader: self._list_offsets_job(leader, tps) for leader, tps in by_leader.items()},
                                     deadline, self._stalled if partial else None)
            for leader, tps in by_leader.items():
                answers = by_node[leader]
                if isinstance(answers, NodeDeadline):
                    # a broker that does not answer in time: its partitions are unavailable for
                    # this call at once (a second round would only wait on it again)
                    left = self._throttled_for(leader)
                    why = (f"throttled by the broker (quota, KIP-219) for {left} ms more than broker_timeout_ms"
                           if left else str(answers))
                    for tp in tps:
                        unavailable[tp] = errors[tp] = f"leader {self._node_desc(leader)}: {why}"
                    continue
                if isinstance(answers, BaseException):
                    answers = [answers]
                failure = next((a for a in answers if isinstance(a, BaseException)), None)
                if failure is not None:
                    if not _retriable_exception(failure):
                        raise KafkaWireError(f"ListOffsets to {self._node_desc(leader)} failed: "
                                             f"{_describe(failure)}") from failure
                    retry.extend(tps)
                    last_error, last_node = failure, leader
                    for tp in tps:
                        errors[tp] = f"leader {self._node_desc(leader)} did not answer ({_describe(failure)})"
                    attempts.leader = leader
                    continue
                for tp in tps:
                    parts = [a.get(tp) for a in answers]
                    if any(p is None for p in parts):
                        raise KafkaWireError(f"ListOffsets response from {self._node_desc(leader)} lacks "
                                             f"{tp[0]}-{tp[1]}")
                    codes = [code for code, _ in parts if code]
                    if not codes:
                        (_, start), (_, hw), (_, lso) = parts
                        result[tp] = PartitionOffsets(tp[0], tp[1], start, hw, lso, leader,
                                                      topic_id=self._topic_ids.get(tp[0]))
                        continue
                    code = codes[0]
                    act = error_action(code)
                    if act is Action.DENIED:
                        raise self._denied("ListOffsets", code, tp[0], leader)
                    if act is Action.CONFIGURATION:
                        raise KafkaWireError(configuration_message("ListOffsets", code, error_name(code),
                                                                   f"{tp[0]}-{tp[1]}", self._node_desc(leader)),
                                             error_code=code)
                    # OffsetFetcherUtils.handleListOffsetResponse: leader/topic errors and every
                    # unexpected code (UNKNOWN_SERVER_ERROR, ...) retry the partition
                    if code not in _LEADER_ERRORS and act is not Action.UNKNOWN_TOPIC:
                        log.warning("KafkaWire: ListOffsets for %s-%s failed at %s with %s; retrying", tp[0], tp[1],
                                    self._node_desc(leader), error_name(code))
                    retry.append(tp)
                    last_error = errors[tp] = f"{error_name(code)} for {tp[0]}-{tp[1]}"
                    last_node = leader
            pending = retry
            if pending:
                self._metadata_suspect()
            if pending and partial:
                rounds += 1
                if rounds >= _PARTIAL_ROUNDS:
                    unavailable.update({tp: errors.get(tp, "retriable error") for tp in pending})
                    break
                # one metadata refresh (the leader may have moved), then ask the rest once more
                await self._net.sleep(self._config["retry_backoff_ms"] / 1000)
                await self._metadata_async(sorted({t for t, _ in pending}), attempts)
            elif pending:
                await attempts.failed(last_error or "retriable error", last_node)
                await self._metadata_async(sorted({t for t, _ in pending}), attempts)
        await self._check_backwards(result, attempts)
        if partial:
            return {tp: result[tp] for tp in wanted if tp in result}, unavailable
        return {tp: result[tp] for tp in wanted}

    async def _check_backwards(self, result: dict[tuple[str, int], PartitionOffsets], attempts: _Attempts) -> None:
        """With the discovery cache on, topic ids may be up to ``metadata_max_age_ms`` old. A high
        watermark or log start below what this client last returned means a truncation, a
        lagging new leader, or a topic deleted and created again: the topic's metadata is asked
        again before answering, so that the caller compares fresh topic ids."""
        last = self._last_offsets
        if self._config["metadata_max_age_ms"] > 0:
            back = sorted({tp[0] for tp, o in result.items() if not o.deleted and tp in last
                           and (o.high_watermark < last[tp][1] or o.log_start < last[tp][0])})
            if back:
                self._metadata_suspect()
                try:
                    await self._metadata_async(back, attempts)
                except KafkaWireError as exc:  # offsets are still right; ids stay as they were
                    log.warning("KafkaWire: metadata refresh after offsets went backwards failed: %s", exc)
                for tp, o in list(result.items()):
                    if tp[0] in back and not o.deleted:
                        result[tp] = dataclasses.replace(o, topic_id=self._topic_ids.get(tp[0]))
        for tp, o in result.items():
            if o.deleted:
                last.pop(tp, None)
            else:
                last[tp] = (o.log_start, o.high_watermark)

    def _list_offsets_job(self, leader: int, tps: list[tuple[str, int]]):
        """The three ListOffsets requests of one leader (log start, high watermark, LSO), pipelined
        on its connection once any KIP-219 throttle has passed: a list of three
        ``{(topic, partition): (error code, offset)}`` answers, or exceptions in their places."""

        async def job() -> list[Any]:
            await self._unthrottled(leader)
            futures: list[Any] = []
            for ts, isolation in ((_EARLIEST, READ_UNCOMMITTED), (_LATEST, READ_UNCOMMITTED),
                                  (_LATEST, READ_COMMITTED)):
                try:
                    futures.append(self._send_nowait(leader, self._list_offsets_request(tps, ts, isolation)))
                except Exception as exc:
                    futures.append(exc)
            answers: list[Any] = []
            for fut in futures:
                if isinstance(fut, BaseException):
                    answers.append(fut)
                    continue
                try:
                    answers.append((await self._await(fut)).offsets)
                except Exception as exc:
                    answers.append(exc)
            return answers

        return job

    def _list_offsets_request(self, tps: list[tuple[str, int]], timestamp: int, isolation: int):
        by_topic: dict[str, list[int]] = defaultdict(list)
        for t, p in tps:
            by_topic[t].append(p)
        return _ListOffsets(list(by_topic.items()), timestamp, isolation, self._config["request_timeout_ms"],
                            self._epochs)

    def _fetch_request(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
                       min_bytes: int):
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=READ_UNCOMMITTED,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=partition, current_leader_epoch=self._epoch(topic, partition), fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=max_bytes)])],
            forgotten_topics_data=[],
            rack_id="",
            min_version=FETCH_MIN_VERSION,
            max_version=FETCH_MAX_VERSION,
        )

    async def _fetch_async(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
                           min_bytes: int) -> FetchResult:
        tp = (topic, partition)
        attempts = _Attempts(self, f"Fetch {topic}-{partition} at offset {offset}")
        if not self._known(tp):
            await self._metadata_async([topic], attempts)
        while True:
            if not self._known(tp):
                if await self._confirmed_gone(tp, attempts):
                    return self._gone(tp, offset, _UNKNOWN_TOPIC_OR_PARTITION)
                continue
            leader = self._leaders[topic][partition]
            attempts.leader = leader
            if leader < 0:
                await attempts.failed(f"no leader for {topic}-{partition} (LEADER_NOT_AVAILABLE)")
                await self._metadata_async([topic], attempts)
                continue
            request = self._fetch_request(topic, partition, offset, max_bytes, max_wait_ms, min_bytes)
            try:
                response = await self._send(leader, request)
            except Exception as exc:
                if not _retriable_exception(exc):
                    raise KafkaWireError(f"Fetch {topic}-{partition} from {self._node_desc(leader)} failed: "
                                         f"{_describe(exc)}") from exc
                await attempts.failed(exc, leader)
                await self._metadata_async([topic], attempts)
                continue
            throttle_ms = getattr(response, "throttle_time_ms", 0) or 0
            if not response.responses and not getattr(response, "error_code", 0) and throttle_ms > 0:
                # over quota: KafkaApis.handleFetchRequest sends no partitions, only the wait
                await attempts.throttled(throttle_ms, leader)
                continue
            version = request.API_VERSION
            code, pdata = self._fetch_partition(response, tp, leader)
            if code == 0 and version >= 11 and not pdata.records and pdata.preferred_read_replica not in (
                    -1, None, leader):
                code, pdata, served_by = await self._fetch_from_replica(request, tp, pdata, leader)
                if pdata is None:
                    await attempts.failed(f"preferred read replica of {topic}-{partition} failed ({code})", leader)
                    continue
            else:
                served_by = leader
            if code == 0:
                return FetchResult(topic, partition, offset, bytes(pdata.records or b""), pdata.high_watermark,
                                   pdata.last_stable_offset, pdata.log_start_offset if version >= 5 else -1, 0,
                                   "NONE", FetchStatus.OK, served_by, version)
            if code == _OFFSET_OUT_OF_RANGE:
                start = hw = lso = -1
                try:
                    offs = (await self._offsets_async([tp]))[tp]
                    start, hw, lso = offs.log_start, offs.high_watermark, offs.lso
                except KafkaWireError as exc:
                    log.warning("KafkaWire: %s-%s: OFFSET_OUT_OF_RANGE at %d and the follow-up ListOffsets "
                                "failed: %s", topic, partition, offset, exc)
                log.info("KafkaWire: %s-%s: offset %d out of range (log start %d, high watermark %d)", topic,
                         partition, offset, start, hw)
                return FetchResult(topic, partition, offset, b"", hw, lso, start, code, error_name(code),
                                   FetchStatus.OFFSET_OUT_OF_RANGE, leader, version)
            if code in (_UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC_ID):
                if await self._confirmed_gone(tp, attempts):
                    return self._gone(tp, offset, code, leader, version)
                await attempts.failed(f"{error_name(code)} for {topic}-{partition} although metadata lists it",
                                      leader)
                continue
            act = error_action(code)
            if act is Action.DENIED:
                raise self._denied("Fetch", code, topic, leader)
            if act is Action.CONFIGURATION:
                raise KafkaWireError(configuration_message("Fetch", code, error_name(code), f"{topic}-{partition}",
                                                           self._node_desc(leader)), error_code=code)
            # FetchCollector.handleInitializeErrors: leader errors, UNKNOWN_LEADER_EPOCH and
            # UNKNOWN_SERVER_ERROR are fetched again (txnwatch also retries the rest, bounded;
            # see streaming/sources/kafka_errors.py)
            await attempts.failed(f"{error_name(code)} for {topic}-{partition}", leader)
            await self._metadata_async([topic], attempts)

    def _fetch_partition(self, response, tp: tuple[str, int], node: Any) -> tuple[int, Any]:
        """(error code, partition data) of ``tp`` in a Fetch response; a top-level error wins."""
        top_error = getattr(response, "error_code", 0) or 0
        if top_error:
            return top_error, None
        pdata = next((p for t in response.responses if t.topic == tp[0]
                      for p in t.partitions if p.partition_index == tp[1]), None)
        if pdata is None:
            raise KafkaWireError(f"Fetch response from {self._node_desc(node)} lacks {tp[0]}-{tp[1]}")
        return pdata.error_code, pdata

    async def _fetch_from_replica(self, request, tp: tuple[str, int], leader_data, leader: int):
        """Send the same Fetch to the preferred read replica the leader named (KIP-392), once.

        Returns (code, partition data, node); partition data is None when the replica failed.
        """
        replica = leader_data.preferred_read_replica
        log.warning("KafkaWire: %s-%s: leader %s redirected the fetch to replica %s although no rack id was "
                    "sent (replica.selector.class set on the broker?)", tp[0], tp[1], leader, replica)
        try:
            response = await self._send(replica, request)
            code, pdata = self._fetch_partition(response, tp, replica)
        except Exception as exc:  # any failure: back to the leader with retries
            if not _retriable_exception(exc) and not isinstance(exc, KafkaWireError):
                raise KafkaWireError(f"Fetch {tp[0]}-{tp[1]} from preferred read replica "
                                     f"{self._node_desc(replica)} failed: {_describe(exc)}") from exc
            return _describe(exc), None, replica
        if code != 0:
            return error_name(code), None, replica
        return code, pdata, replica

    @staticmethod
    def _gone(tp: tuple[str, int], offset: int, code: int, leader: int = -1, version: int = -1) -> FetchResult:
        log.warning("KafkaWire: %s-%s no longer exists (topic deleted?)", tp[0], tp[1])
        return FetchResult(tp[0], tp[1], offset, b"", -1, -1, -1, code, error_name(code), FetchStatus.DELETED,
                           leader, version)
