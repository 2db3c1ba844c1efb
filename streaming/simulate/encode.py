"""Byte-exact encoders for the Kafka structures txnwatch reads (kafka-formats.md §2-§6).

Pure Python, no Spark. Written from the spec, verified byte-for-byte against real broker bytes
(``tests/test_encode.py`` re-encodes every vector in ``tests/fixtures/samples``). Used by the
cluster simulator (``streaming.simulate``), the demo and the benchmarks to produce broker-shaped
log directories, and by tests to build corner cases the real samples do not cover.

What is covered:

* record batch magic v2 (``encode_record``, ``encode_batch``), transaction markers
  (``encode_marker``), the count-0 control batch the log cleaner leaves on compacted topics
  (``encode_empty_batch``), legacy magic 0/1 messages (``encode_legacy_message``);
* ``__transaction_state`` keys and values v0/v1 (``encode_txn_key``, ``encode_txn_value_v0``,
  ``encode_txn_value_v1``) and the one-record batches the coordinator appends
  (``encode_txn_log_batch``, ``encode_txn_tombstone_batch``);
* producer-state snapshot files v1 (``encode_snapshot``).

All integers are big-endian unless they are (zigzag) varints.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence

from crc32c import crc32c

__all__ = [
    "ABORT",
    "COMMIT",
    "COMPRESSION_CODES",
    "MARKER_BATCH_SIZE",
    "RECORD_BATCH_OVERHEAD",
    "SNAPSHOT_ENTRY_SIZE",
    "TXN_STATUS_CODES",
    "encode_batch",
    "encode_batch_header",
    "encode_control_record",
    "encode_empty_batch",
    "encode_legacy_message",
    "encode_marker",
    "encode_record",
    "encode_records",
    "encode_snapshot",
    "encode_txn_key",
    "encode_txn_log_batch",
    "encode_txn_tombstone_batch",
    "encode_txn_value_v0",
    "encode_txn_value_v1",
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "java_string_hash",
    "kafka_abs",
    "txn_state_partition",
    "zigzag32",
    "zigzag64",
]

RECORD_BATCH_OVERHEAD = 61  # DefaultRecordBatch.RECORD_BATCH_OVERHEAD
MARKER_BATCH_SIZE = 78  # 61-byte header + 17-byte control record (§3.1)
SNAPSHOT_ENTRY_SIZE = 46  # ProducerSnapshot v1 entry (§6)

# Field names of one ProducerSnapshot v1 entry, in ProducerStateManager's PRODUCER_SNAPSHOT_ENTRY_SCHEMA
# order (ProducerId, Epoch, LastSequence, LastOffset, OffsetDelta, Timestamp, CoordinatorEpoch,
# CurrentTxnFirstOffset). The simulator is the tests' oracle, so it names them itself rather than
# borrowing the decoders' table.
SNAPSHOT_ENTRY_KEYS = ("producer_id", "producer_epoch", "last_sequence", "last_offset", "offset_delta",
                       "timestamp", "coordinator_epoch", "current_txn_first_offset")

ABORT = 0  # ControlRecordType.ABORT
COMMIT = 1  # ControlRecordType.COMMIT

# attributes bits 0-2 (§2.2). Only none and gzip can be *written* here (stdlib only); the other
# codes are accepted together with a pre-compressed ``raw_payload``.
COMPRESSION_CODES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# TransactionStatus ids as persisted in __transaction_state (§5.5).
TXN_STATUS_CODES = {
    "Empty": 0,
    "Ongoing": 1,
    "PrepareCommit": 2,
    "PrepareAbort": 3,
    "CompleteCommit": 4,
    "CompleteAbort": 5,
    "Dead": 6,
    "PrepareEpochFence": 7,
}

_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40

# Header fields after the CRC (attributes .. recordsCount), i.e. the CRC-covered header part.
_HEADER_TAIL = struct.Struct(">hiqqqhii")
_HEADER_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc


# --- varints ------------------------------------------------------------------------------------


def zigzag32(n: int) -> int:
    """ZigZag-map a signed 32-bit int (``(n << 1) ^ (n >> 31)``), as Kafka's ``ByteUtils.writeVarint``."""
    if not -(1 << 31) <= n < (1 << 31):
        raise ValueError(f"varint out of int32 range: {n}")
    return ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF


def zigzag64(n: int) -> int:
    """ZigZag-map a signed 64-bit int (``(n << 1) ^ (n >> 63)``), as ``ByteUtils.writeVarlong``."""
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"varlong out of int64 range: {n}")
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def encode_uvarint(n: int) -> bytes:
    """Unsigned base-128 varint, least significant group first (flexible-version lengths, tags)."""
    if n < 0:
        raise ValueError(f"unsigned varint must be >= 0, got {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Small non-negative values dominate (offset deltas, lengths): cache their encodings.
_VARINT_CACHE = [encode_uvarint(zigzag32(i)) for i in range(-1, 4096)]


def encode_varint(n: int) -> bytes:
    """Signed zigzag varint (int32), max 5 bytes: record lengths, offset deltas, key/value sizes."""
    if -1 <= n < 4095:
        return _VARINT_CACHE[n + 1]
    return encode_uvarint(zigzag32(n))


def encode_varlong(n: int) -> bytes:
    """Signed zigzag varlong (int64), max 10 bytes: the record's timestampDelta."""
    if -1 <= n < 4095:
        return _VARINT_CACHE[n + 1]
    return encode_uvarint(zigzag64(n))


# --- record batch v2 (§2) -----------------------------------------------------------------------


def _compression_code(compression: int | str) -> int:
    if isinstance(compression, str):
        try:
            return COMPRESSION_CODES[compression.lower()]
        except KeyError:
            raise ValueError(f"unknown compression {compression!r}") from None
    if not 0 <= compression <= 4:
        raise ValueError(f"unknown compression code {compression}")
    return compression


def encode_record(
    offset_delta: int,
    value: bytes | None,
    key: bytes | None = None,
    *,
    timestamp_delta: int = 0,
    headers: Sequence[tuple[str | bytes, bytes | None]] = (),
    attributes: int = 0,
) -> bytes:
    """One v2 record (§2.5): length varint, attributes int8 (unused, 0), timestampDelta varlong,
    offsetDelta varint, key (varint length, -1 = null), value (-1 = null = tombstone),
    header count varint, headers (key length + UTF-8 key, value length (-1 = null) + bytes)."""
    parts = [bytes((attributes & 0xFF,)), encode_varlong(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")  # zigzag(-1)
    else:
        parts += (encode_varint(len(key)), key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts += (encode_varint(len(value)), value)
    parts.append(encode_varint(len(headers)))
    for hkey, hval in headers:
        hk = hkey.encode("utf-8") if isinstance(hkey, str) else hkey
        parts += (encode_varint(len(hk)), hk)
        if hval is None:
            parts.append(b"\x01")
        else:
            parts += (encode_varint(len(hval)), hval)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def encode_records(n: int, value: bytes | None = b"", key: bytes | None = None, ts_step: int = 0) -> bytes:
    """``n`` back-to-back records with offsetDelta 0..n-1, timestampDelta ``i * ts_step``."""
    return b"".join(encode_record(i, value, key, timestamp_delta=i * ts_step) for i in range(n))


def encode_batch_header(
    base_offset: int,
    payload: bytes,
    *,
    record_count: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = 0,
) -> bytes:
    """Whole v2 batch from already-final ``payload`` bytes (plain records or one compressed stream).

    Layout §2.1; CRC-32C over bytes [21, end) i.e. attributes..end (§2.3). ``baseOffset`` and
    ``partitionLeaderEpoch`` are outside the CRC because the broker assigns them on append.
    """
    tail = _HEADER_TAIL.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c(payload, crc32c(tail))
    batch_length = 4 + 1 + 4 + len(tail) + len(payload)  # bytes after the batchLength field
    return _HEADER_HEAD.pack(base_offset, batch_length, partition_leader_epoch, 2, crc) + tail + payload


def encode_batch(
    base_offset: int,
    records: Sequence[bytes] | bytes | int = (),
    *,
    record_count: int | None = None,
    value: bytes | None = b"",
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int | str = 0,
    timestamp_type: int = 0,
    base_timestamp: int = -1,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
    raw_payload: bytes | None = None,
) -> bytes:
    """A record batch v2 (magic 2) exactly as a broker stores it (kafka-formats.md §2).

    ``records``: a list of encoded records (``encode_record``), their concatenation (then
    ``record_count`` is required), or an int n = n records with null key, value ``value``,
    offsetDelta 0..n-1, timestampDelta 0. ``raw_payload`` bypasses encoding/compression entirely
    (e.g. a captured gzip stream) and requires ``record_count``.

    Attributes (§2.2): codec bits from ``compression`` ("none"/"gzip" or 0-4), bit 3 from
    ``timestamp_type`` (1 = LogAppendTime), bit 4 ``is_transactional``, bit 5 ``is_control``,
    bit 6 when ``delete_horizon_ms`` is given (KIP-534, Kafka 3.1+; baseTimestamp then holds the
    delete horizon and record timestamp deltas must be relative to it). gzip is written with
    Python's gzip (mtime 0, level 9), byte-identical to Java only in the deflate stream, which is
    all a reader needs. ``max_timestamp`` defaults to ``base_timestamp``; ``last_offset_delta``
    defaults to count - 1 (0 for an empty batch).
    """
    codec = _compression_code(compression)
    if raw_payload is not None:
        if record_count is None:
            raise ValueError("raw_payload needs record_count")
        payload = raw_payload
        count = record_count
    else:
        if isinstance(records, int):
            count = records
            plain = encode_records(records, value)
        elif isinstance(records, bytes | bytearray | memoryview):
            if record_count is None:
                raise ValueError("concatenated records need record_count")
            count = record_count
            plain = bytes(records)
        else:
            count = len(records) if record_count is None else record_count
            plain = b"".join(records)
        if codec == 0:
            payload = plain
        elif codec == 1:
            # mtime=0 makes the stream deterministic; Python 3.11+ then emits zlib's gzip header.
            payload = gzip.compress(plain, compresslevel=9, mtime=0)
        else:
            raise ValueError("only none/gzip can be compressed here; pass raw_payload for other codecs")
    attributes = codec
    if timestamp_type:
        attributes |= _ATTR_TIMESTAMP_TYPE
    if is_transactional:
        attributes |= _ATTR_TRANSACTIONAL
    if is_control:
        attributes |= _ATTR_CONTROL
    if delete_horizon_ms is not None:
        attributes |= _ATTR_DELETE_HORIZON
        base_timestamp = delete_horizon_ms
    if max_timestamp is None:
        max_timestamp = base_timestamp
    if last_offset_delta is None:
        last_offset_delta = max(count - 1, 0)
    return encode_batch_header(
        base_offset,
        payload,
        record_count=count,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
    )


# --- control batches (§3) -----------------------------------------------------------------------


def encode_control_record(control_type: int, coordinator_epoch: int, *, timestamp_delta: int = 0) -> bytes:
    """The single record of a marker batch (§3.2): key = ControlRecordType v0 (version int16 0,
    type int16: 0 ABORT, 1 COMMIT), value = EndTransactionMarker v0 (version int16 0,
    coordinatorEpoch int32). 17 bytes when ``timestamp_delta`` is 0."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return encode_record(0, value, key, timestamp_delta=timestamp_delta)


def encode_marker(
    offset: int,
    producer_id: int,
    producer_epoch: int,
    control_type: int,
    coordinator_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = 0,
    *,
    timestamp_type: int = 0,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """A COMMIT (1) / ABORT (0) transaction marker as the partition leader appends it for
    ``WriteTxnMarkers`` (``MemoryRecords.withEndTransactionMarker``, §3.1): attributes
    transactional+control (0x30; 0x38 in a LogAppendTime topic), uncompressed, baseSequence -1,
    one record at offsetDelta 0, baseTimestamp = maxTimestamp = leader clock. The coordinator
    epoch goes into the record value; ``partition_leader_epoch`` is the *data* partition's leader
    epoch. 78 bytes.

    ``delete_horizon_ms``: the marker as re-written by the 3.1+ log cleaner on a compacted topic
    (attribute bit 6, baseTimestamp = horizon, record timestamp delta relative to it; 0x70).
    """
    ts_delta = 0 if delete_horizon_ms is None else timestamp - delete_horizon_ms
    return encode_batch(
        offset,
        [encode_control_record(control_type, coordinator_epoch, timestamp_delta=ts_delta)],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
        timestamp_type=timestamp_type,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        delete_horizon_ms=delete_horizon_ms,
    )


def encode_empty_batch(
    base_offset: int,
    *,
    last_offset_delta: int = 0,
    max_timestamp: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = 0,
    is_transactional: bool = True,
    is_control: bool = True,
    timestamp_type: int = 0,
) -> bytes:
    """A header-only batch (recordsCount 0, 61 bytes) as ``DefaultRecordBatch.writeEmptyHeader``
    writes it when the log cleaner removed every record but must keep the producer state
    (§3.3, §8.4 item 6): compression none, baseTimestamp -1 (NO_TIMESTAMP), maxTimestamp = the
    original batch's, lastOffsetDelta preserved, no delete-horizon bit. The defaults give the
    empty control batch left where a transaction marker used to be."""
    return encode_batch(
        base_offset,
        [],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        timestamp_type=timestamp_type,
        base_timestamp=-1,
        max_timestamp=max_timestamp,
        last_offset_delta=last_offset_delta,
    )


# --- legacy message sets (§4) -------------------------------------------------------------------


def encode_legacy_message(
    offset: int,
    value: bytes | None,
    key: bytes | None = None,
    *,
    magic: int = 1,
    timestamp: int = -1,
    attributes: int = 0,
) -> bytes:
    """A magic 0 or 1 message set entry (pre-0.11 formats, §4): offset int64, size int32,
    CRC-32 (IEEE, zlib) over [16, end), magic, attributes, timestamp (v1 only), key and value as
    int32 length (-1 = null) + bytes. Can never be transactional."""
    if magic not in (0, 1):
        raise ValueError("legacy magic must be 0 or 1")
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


# --- __transaction_state (§5) -------------------------------------------------------------------


def encode_txn_key(transactional_id: str) -> bytes:
    """``TransactionLogKey`` v0 (the only version): int16 0, int16 length, UTF-8 transactional id."""
    tid = transactional_id.encode("utf-8")
    return struct.pack(">hh", 0, len(tid)) + tid


def _status_code(status: int | str) -> int:
    if isinstance(status, str):
        return TXN_STATUS_CODES[status]
    return status


def _partition_items(
    partitions: Mapping[str, Sequence[int]] | Sequence[tuple[str, Sequence[int]]],
) -> list[tuple[str, Sequence[int]]]:
    return list(partitions.items()) if isinstance(partitions, Mapping) else list(partitions)


def encode_txn_value_v0(
    producer_id: int,
    producer_epoch: int,
    timeout_ms: int,
    status: int | str,
    partitions: Mapping[str, Sequence[int]] | Sequence[tuple[str, Sequence[int]]] | None,
    last_update_ms: int,
    start_ms: int,
) -> bytes:
    """``TransactionLogValue`` v0 (non-flexible; every coordinator before 4.0, and 4.x with
    ``transaction.version`` 0), §5.4: version int16 0, ProducerId int64, ProducerEpoch int16,
    TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions (int32 count, -1 =
    null; per topic int16-length name, int32 count, int32 ids), TransactionLastUpdateTimestampMs,
    TransactionStartTimestampMs. ``partitions`` None = null (state Empty), ``{}`` = empty array
    (Complete*); topics are written in the given order. 37 bytes with null/empty partitions."""
    parts = [struct.pack(">hqhib", 0, producer_id, producer_epoch, timeout_ms, _status_code(status))]
    if partitions is None:
        parts.append(struct.pack(">i", -1))
    else:
        items = _partition_items(partitions)
        parts.append(struct.pack(">i", len(items)))
        for topic, ids in items:
            t = topic.encode("utf-8")
            parts.append(struct.pack(">h", len(t)) + t + struct.pack(f">i{len(ids)}i", len(ids), *ids))
    parts.append(struct.pack(">qq", last_update_ms, start_ms))
    return b"".join(parts)


def encode_txn_value_v1(
    producer_id: int,
    producer_epoch: int,
    timeout_ms: int,
    status: int | str,
    partitions: Mapping[str, Sequence[int]] | Sequence[tuple[str, Sequence[int]]] | None,
    last_update_ms: int,
    start_ms: int,
    *,
    previous_producer_id: int = -1,
    next_producer_id: int = -1,
    client_transaction_version: int = 0,
    next_producer_epoch: int = -1,
) -> bytes:
    """``TransactionLogValue`` v1 (flexible, KIP-915; written by 4.0+ coordinators when the
    finalized ``transaction.version`` >= 1), §5.4: same fields as v0 but the partitions are a
    compact nullable array (uvarint N+1, 0 = null) of {compact string topic, compact int32 array,
    empty tag section}, followed by the top-level tagged fields, each written only when it differs
    from its default, in ascending tag order: 0 PreviousProducerId (-1), 1 NextProducerId (-1),
    2 ClientTransactionVersion (0), 3 NextProducerEpoch (-1)."""
    parts = [struct.pack(">hqhib", 1, producer_id, producer_epoch, timeout_ms, _status_code(status))]
    if partitions is None:
        parts.append(b"\x00")
    else:
        items = _partition_items(partitions)
        parts.append(encode_uvarint(len(items) + 1))
        for topic, ids in items:
            t = topic.encode("utf-8")
            parts += (encode_uvarint(len(t) + 1), t, encode_uvarint(len(ids) + 1))
            parts.append(struct.pack(f">{len(ids)}i", *ids))
            parts.append(b"\x00")  # the element's own (empty) tagged-field section
    parts.append(struct.pack(">qq", last_update_ms, start_ms))
    tags: list[tuple[int, bytes]] = []
    if previous_producer_id != -1:
        tags.append((0, struct.pack(">q", previous_producer_id)))
    if next_producer_id != -1:
        tags.append((1, struct.pack(">q", next_producer_id)))
    if client_transaction_version != 0:
        tags.append((2, struct.pack(">h", client_transaction_version)))
    if next_producer_epoch != -1:
        tags.append((3, struct.pack(">h", next_producer_epoch)))
    parts.append(encode_uvarint(len(tags)))
    for tag, data in tags:
        parts += (encode_uvarint(tag), encode_uvarint(len(data)), data)
    return b"".join(parts)


def encode_txn_log_batch(
    offset: int,
    transactional_id: str,
    value: bytes | None,
    timestamp: int,
    coordinator_epoch: int,
) -> bytes:
    """One ``__transaction_state`` append (§5.1): a batch with exactly one record (key = the
    transactional id, value = a TransactionLogValue or None for a tombstone), attributes 0
    (uncompressed, CreateTime, not transactional), producerId -1, epoch -1, baseSequence -1,
    base/max timestamp = coordinator clock, partitionLeaderEpoch = the __transaction_state
    partition's leader epoch, which is the coordinator epoch (§5.6)."""
    return encode_batch(
        offset,
        [encode_record(0, value, encode_txn_key(transactional_id))],
        partition_leader_epoch=coordinator_epoch,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
    )


def encode_txn_tombstone_batch(
    offset: int,
    transactional_ids: Sequence[str],
    timestamp: int,
    coordinator_epoch: int,
) -> bytes:
    """Tombstones (null values) for expired transactional ids (§5.7). The coordinator appends
    the tombstones of one ``__transaction_state`` partition together, so one batch can hold
    several records (offsetDelta 0..n-1, same timestamp)."""
    return encode_batch(
        offset,
        [encode_record(i, None, encode_txn_key(t)) for i, t in enumerate(transactional_ids)],
        partition_leader_epoch=coordinator_epoch,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
    )


# --- producer-state snapshot (§6) ---------------------------------------------------------------

_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
assert _SNAPSHOT_ENTRY.size == SNAPSHOT_ENTRY_SIZE

SnapshotEntry = Mapping[str, int] | Sequence[int]


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode`` as its Javadoc defines it: s[0]*31^(n-1) + ... + s[n-1] over the
    UTF-16 code units, in int arithmetic (wrapping at 32 bits)."""
    units = struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be"))
    n = len(units)
    h = sum(u * pow(31, n - 1 - i, 1 << 32) for i, u in enumerate(units)) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """``org.apache.kafka.common.utils.Utils.abs``: Integer.MIN_VALUE gives 0, not itself."""
    return 0 if n == -(1 << 31) else abs(n)


def txn_state_partition(transactional_id: str, partition_count: int = 50) -> int:
    """``TransactionStateManager.partitionFor``: Utils.abs(transactionalId.hashCode) % partition count."""
    return kafka_abs(java_string_hash(transactional_id)) % partition_count


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    """A producer-state ``.snapshot`` file, ``ProducerSnapshot`` version 1 (§6): version int16 1,
    CRC-32C (uint32) over bytes [6, EOF), int32 entry count, 46-byte entries (ProducerId int64,
    Epoch int16, LastSequence int32, LastOffset int64, OffsetDelta int32, Timestamp int64,
    CoordinatorEpoch int32, CurrentTxnFirstOffset int64).

    An entry is a mapping with the :data:`SNAPSHOT_ENTRY_KEYS` names or a tuple in that
    field order. Entries are written in the given order (the broker writes HashMap order).
    """
    rows = []
    for e in entries:
        vals = [e[k] for k in SNAPSHOT_ENTRY_KEYS] if isinstance(e, Mapping) else list(e)
        rows.append(_SNAPSHOT_ENTRY.pack(*vals))
    body = struct.pack(">i", len(rows)) + b"".join(rows)
    return struct.pack(">hI", 1, crc32c(body)) + body
