"""Header-only scanner for Kafka record batches (kafka-formats.md §1-§4).

Input: a buffer of concatenated log entries, i.e. a ``.log`` segment or the ``records`` field of a
Fetch response (the broker sends segment bytes verbatim). Output: a *batch table*, one numpy
column per name in :data:`udfs.model.BATCH_COLUMNS`, plus :class:`~udfs.model.DecodeError` entries
for whatever could not be read.

Why it is fast: the only per-batch Python work is following the length chain (one
``struct.unpack_from`` per entry) and, optionally, one C CRC call. All header fields are then
gathered at once by viewing the 61-byte headers as a packed big-endian numpy record array. Records
of data batches are never decompressed or parsed; only the single record of a control batch is
read (markers are always uncompressed, §3.3), and that too is vectorised for the canonical 17-byte
EndTxnMarker record.

It never raises on bad bytes: a corrupt length, an unknown magic or a truncated tail ends the scan
with an error entry; a CRC mismatch or an unreadable control record is reported per batch and the
scan goes on (the batch length was plausible, so the next entry is where it says).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from udfs.model import (
    BATCH_COLUMNS,
    CONTROL_EMPTY,
    CONTROL_NONE,
    CONTROL_UNREADABLE,
    DecodeError,
)
from udfs.varint import crc32c
from udfs.varint import read_varint as _read_varint

HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_ENTRY_SIZE = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0: smaller size fields are corruption
MARKER_BATCH_LENGTH = 66  # 78-byte marker batch (§3.1)

_HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("record_count", ">i4"),
    ]
)
assert _HEADER_DTYPE.itemsize == HEADER_SIZE

# Canonical control record bytes (§3.2): length 16, attrs 0, tsDelta 0, offsetDelta 0, keyLen 4,
# key version 0, type T, valueLen 6, value version 0, coordinatorEpoch C, headers 0.
_CANON_PREFIX = np.frombuffer(bytes([0x20, 0, 0, 0, 0x08, 0, 0]), dtype=np.uint8)

_UNPACK_LEN = struct.Struct(">i").unpack_from
_UNPACK_OFFSET = struct.Struct(">q").unpack_from


@dataclass
class BatchScan:
    """Result of :func:`scan_batches`.

    ``end_position`` is where reading stopped (relative to the buffer, *not* shifted by
    ``base_position``): everything before it was consumed as whole entries. ``legacy_entries``
    counts magic 0/1 messages that were skipped by length (they cannot be transactional).
    ``tail_bytes`` is how many bytes after ``end_position`` were left unread.
    ``legacy_last_offset`` is the highest offset field of those magic 0/1 entries (None when
    there were none): for a compressed wrapper it is the offset of its last inner message
    (``LogValidator`` gives the wrapper the last inner offset), so a reader resumes at it + 1.
    """

    columns: dict[str, np.ndarray]
    errors: list[DecodeError] = field(default_factory=list)
    end_position: int = 0
    tail_bytes: int = 0
    legacy_entries: int = 0
    legacy_last_offset: int | None = None

    def __len__(self) -> int:
        return len(self.columns["base_offset"])

    @property
    def next_offset(self) -> int | None:
        """Offset after the last v2 batch read (None when no batch was read)."""
        if len(self) == 0:
            return None
        return int(self.columns["last_offset"][-1]) + 1

    def row(self, i: int) -> dict[str, object]:
        """One batch as a dict of Python scalars (for tools and tests, not the hot path)."""
        return {name: col[i].item() for name, col in self.columns.items()}


def empty_columns() -> dict[str, np.ndarray]:
    """A batch table with zero rows."""
    return {name: np.empty(0, dtype=dtype) for name, dtype in BATCH_COLUMNS.items()}


def _chain(buf: memoryview, source: str | None, base_position: int, allow_partial_tail: bool):
    """Follow the entry-length chain. Returns (v2 positions, legacy count, end, tail, errors,
    highest legacy offset or None)."""
    n = len(buf)
    pos = 0
    v2: list[int] = []
    append = v2.append
    legacy = 0
    legacy_last: int | None = None
    errors: list[DecodeError] = []
    unpack = _UNPACK_LEN
    while n - pos > 17:
        size = unpack(buf, pos + 8)[0]
        if size < MIN_ENTRY_SIZE:
            errors.append(
                DecodeError(base_position + pos, f"corrupt batch length {size} (minimum {MIN_ENTRY_SIZE})", source)
            )
            return v2, legacy, pos, n - pos, errors, legacy_last
        end = pos + LOG_OVERHEAD + size
        if end > n:
            break
        magic = buf[pos + 16]
        if magic == 2:
            if size < HEADER_SIZE - LOG_OVERHEAD:
                errors.append(
                    DecodeError(
                        base_position + pos,
                        f"corrupt batch length {size} (a v2 batch needs at least {HEADER_SIZE - LOG_OVERHEAD})",
                        source,
                    )
                )
                return v2, legacy, pos, n - pos, errors, legacy_last
            append(pos)
        elif magic < 2:
            legacy += 1
            off = _UNPACK_OFFSET(buf, pos)[0]
            legacy_last = off if legacy_last is None else max(legacy_last, off)
        else:
            errors.append(DecodeError(base_position + pos, f"unknown magic {magic} (expected 0, 1 or 2)", source))
            return v2, legacy, pos, n - pos, errors, legacy_last
        pos = end
    tail = n - pos
    if tail and not allow_partial_tail:
        errors.append(
            DecodeError(base_position + pos, f"truncated tail: {tail} bytes do not hold a whole batch", source)
        )
    return v2, legacy, pos, tail, errors, legacy_last


def parse_control_record(buf: memoryview, start: int, end: int) -> tuple[int, int]:
    """Decode the first record of a control batch: returns (control type, coordinator epoch).

    ``start`` is the first byte after the 61-byte header, ``end`` the end of the batch. Raises
    ValueError with a reason on malformed input. The coordinator epoch is -1 for control types
    other than ABORT/COMMIT (only those carry an EndTxnMarker value).
    """
    length, pos = _read_varint(buf, start, end)
    rec_end = pos + length
    if length < 0 or rec_end > end:
        raise ValueError(f"control record length {length} exceeds the batch")
    pos += 1  # attributes
    _, pos = _read_varint(buf, pos, rec_end)  # timestampDelta
    _, pos = _read_varint(buf, pos, rec_end)  # offsetDelta
    (_, ctype), pos = _versioned(buf, pos, rec_end, _CONTROL_KEY, "control record key", "version, type")
    if ctype not in (0, 1):
        return ctype, -1
    (_, coord_epoch), _ = _versioned(buf, pos, rec_end, _END_TXN_MARKER, "EndTxnMarker value",
                                     "version, coordinatorEpoch", version_name="EndTxnMarker version")
    return ctype, coord_epoch


_CONTROL_KEY = struct.Struct(">hh")  # ControlRecordType key: version, type
_END_TXN_MARKER = struct.Struct(">hi")  # EndTxnMarker value: version, coordinatorEpoch


def _versioned(buf: memoryview, pos: int, rec_end: int, fmt: struct.Struct, what: str, needs: str,
               version_name: str | None = None) -> tuple[tuple[int, ...], int]:
    """A control record's key or value: varint length, then at least ``fmt`` (a non-negative
    INT16 version first). Returns its fields and the position after it; raises ValueError."""
    n, pos = _read_varint(buf, pos, rec_end)
    if n < fmt.size or pos + n > rec_end:
        raise ValueError(f"{what} length {n} (needs {fmt.size} bytes: {needs})")
    fields = fmt.unpack_from(buf, pos)
    if fields[0] < 0:
        raise ValueError(f"{version_name or what + ' version'} {fields[0]} is negative")
    return fields, pos + n


def scan_batches(
    data: bytes | bytearray | memoryview,
    *,
    validate_crc: bool = True,
    source: str | None = None,
    base_position: int = 0,
    allow_partial_tail: bool = False,
) -> BatchScan:
    """Scan concatenated log entries and return the v2 batch headers as columns.

    ``validate_crc``: check each batch's CRC-32C over bytes [21, 12+batchLength) (on by default
    for files; a Fetch reader may turn it off because the broker already validated on append).
    ``base_position`` is added to reported positions (for a buffer read from the middle of a
    file). ``allow_partial_tail``: a Fetch response may end with a partial batch (the broker cuts
    at max bytes); for files a partial tail is reported as an error.
    """
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    positions, legacy, end_pos, tail, errors, legacy_last = _chain(buf, source, base_position, allow_partial_tail)
    n = len(positions)
    result = BatchScan(columns=empty_columns(), errors=errors, end_position=end_pos, tail_bytes=tail,
                       legacy_entries=legacy, legacy_last_offset=legacy_last)
    if n == 0:
        return result

    raw = np.frombuffer(buf, dtype=np.uint8)
    pos_arr = np.asarray(positions, dtype=np.int64)
    # Row i of this strided view is the 61 bytes at position i: gathering rows copies only headers.
    windows = np.lib.stride_tricks.as_strided(raw, shape=(len(raw) - HEADER_SIZE + 1, HEADER_SIZE), strides=(1, 1))
    headers = windows[pos_arr]
    h = headers.view(_HEADER_DTYPE).reshape(n)

    attrs = h["attributes"].astype(np.int16)
    ts_type = ((attrs >> 3) & 1).astype(np.int8)
    has_dh = (attrs & 0x40) != 0
    base_ts = h["base_timestamp"].astype(np.int64)
    max_ts = h["max_timestamp"].astype(np.int64)
    is_control = (attrs & 0x20) != 0
    batch_length = h["batch_length"].astype(np.int64)
    base_offset = h["base_offset"].astype(np.int64)
    record_count = h["record_count"].astype(np.int32)

    cols = result.columns
    cols["position"] = pos_arr + base_position
    cols["base_offset"] = base_offset
    cols["last_offset"] = base_offset + h["last_offset_delta"].astype(np.int64)
    cols["batch_size"] = (batch_length + LOG_OVERHEAD).astype(np.int32)
    cols["partition_leader_epoch"] = h["partition_leader_epoch"].astype(np.int32)
    cols["magic"] = h["magic"].astype(np.int8)
    cols["crc"] = h["crc"].astype(np.uint32)
    cols["attributes"] = attrs
    cols["compression"] = (attrs & 0x07).astype(np.int8)
    cols["timestamp_type"] = ts_type
    cols["is_transactional"] = (attrs & 0x10) != 0
    cols["is_control"] = is_control
    cols["has_delete_horizon"] = has_dh
    cols["base_timestamp"] = base_ts
    # LogAppendTime batches and cleaner-stamped batches (baseTimestamp = deleteHorizonMs) do not
    # carry the first record's CreateTime in the header; maxTimestamp is the best the header has.
    cols["first_timestamp"] = np.where((ts_type == 1) | has_dh, max_ts, base_ts)
    cols["max_timestamp"] = max_ts
    cols["producer_id"] = h["producer_id"].astype(np.int64)
    cols["producer_epoch"] = h["producer_epoch"].astype(np.int16)
    cols["base_sequence"] = h["base_sequence"].astype(np.int32)
    cols["record_count"] = record_count

    if validate_crc:
        crcs = cols["crc"]
        starts = (pos_arr + 21).tolist()
        ends = (pos_arr + LOG_OVERHEAD + batch_length).tolist()
        # map() keeps the per-batch work in C: slice, CRC call, collect.
        computed = np.fromiter(map(crc32c, map(buf.__getitem__, map(slice, starts, ends))), dtype=np.uint32, count=n)
        valid = (computed == crcs).astype(np.int8)
        cols["crc_valid"] = valid
        for i in np.flatnonzero(valid == 0):
            errors.append(
                DecodeError(
                    int(pos_arr[i]) + base_position,
                    f"CRC-32C mismatch: stored {int(crcs[i])}, computed "
                    f"{crc32c(buf[positions[i] + 21 : positions[i] + LOG_OVERHEAD + int(batch_length[i])])}",
                    source,
                    base_offset=int(base_offset[i]),
                    crc=True,
                )
            )
    else:
        cols["crc_valid"] = np.full(n, -1, dtype=np.int8)

    control_type = np.full(n, CONTROL_NONE, dtype=np.int16)
    coord_epoch = np.full(n, -1, dtype=np.int32)
    ctrl_idx = np.flatnonzero(is_control)
    if len(ctrl_idx):
        control_type[ctrl_idx[record_count[ctrl_idx] == 0]] = CONTROL_EMPTY
        with_rec = ctrl_idx[record_count[ctrl_idx] > 0]
        compressed = with_rec[(attrs[with_rec] & 0x07) != 0]
        for i in compressed:
            control_type[i] = CONTROL_UNREADABLE
            errors.append(
                DecodeError(int(pos_arr[i]) + base_position, "control batch is compressed; markers never are",
                            source, base_offset=int(base_offset[i]))
            )
        plain = with_rec[(attrs[with_rec] & 0x07) == 0]
        if len(plain):
            # Fast path: the canonical 78-byte marker batch read straight from fixed positions.
            canon = plain[batch_length[plain] == MARKER_BATCH_LENGTH]
            if len(canon):
                rec = raw[pos_arr[canon, None] + HEADER_SIZE + np.arange(17)]
                ok = (rec[:, :7] == _CANON_PREFIX).all(axis=1) & (rec[:, 9] == 0x0C) & (rec[:, 10] == 0) & (
                    rec[:, 11] == 0) & (rec[:, 16] == 0)
                types = (rec[:, 7].astype(np.int16) << 8) | rec[:, 8]
                ok &= types <= 1
                ce = (
                    (rec[:, 12].astype(np.int64) << 24)
                    | (rec[:, 13].astype(np.int64) << 16)
                    | (rec[:, 14].astype(np.int64) << 8)
                    | rec[:, 15]
                ).astype(np.uint32).view(np.int32)
                control_type[canon[ok]] = types[ok]
                coord_epoch[canon[ok]] = ce[ok]
                slow = np.concatenate([plain[batch_length[plain] != MARKER_BATCH_LENGTH], canon[~ok]])
            else:
                slow = plain
            for i in slow:
                start = positions[i] + HEADER_SIZE
                end = positions[i] + LOG_OVERHEAD + int(batch_length[i])
                try:
                    ctype, cep = parse_control_record(buf, start, end)
                except (ValueError, struct.error) as exc:
                    control_type[i] = CONTROL_UNREADABLE
                    errors.append(DecodeError(int(pos_arr[i]) + base_position, f"control record: {exc}", source,
                                              base_offset=int(base_offset[i])))
                    continue
                control_type[i] = ctype
                coord_epoch[i] = cep
    cols["control_type"] = control_type
    cols["coordinator_epoch"] = coord_epoch
    errors.sort(key=lambda e: e.position)
    return result


def iter_records(buf: memoryview, start: int, end: int, count: int):
    """Yield (offset_delta, timestamp_delta, key, value) of the uncompressed records in [start, end).

    Only used for ``__transaction_state`` batches (uncompressed by rule, one record each, or a few
    tombstones). ``key``/``value`` are memoryviews or None. Raises ValueError on malformed input.
    """
    pos = start
    for _ in range(count):
        length, pos = _read_varint(buf, pos, end)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise ValueError(f"record length {length} exceeds the batch")
        pos += 1
        ts_delta, pos = _read_varint(buf, pos, rec_end)
        off_delta, pos = _read_varint(buf, pos, rec_end)
        key, pos = _nullable_bytes(buf, pos, rec_end, "key")
        value, pos = _nullable_bytes(buf, pos, rec_end, "value")
        yield off_delta, ts_delta, key, value
        pos = rec_end


def _nullable_bytes(buf: memoryview, pos: int, rec_end: int, what: str) -> tuple[memoryview | None, int]:
    """A record's key or value: varint length (-1: null), then the bytes (``DefaultRecord.readFrom``)."""
    n, pos = _read_varint(buf, pos, rec_end)
    if n < 0:
        return None, pos
    if pos + n > rec_end:
        raise ValueError(f"record {what} length {n} exceeds the record")
    return buf[pos : pos + n], pos + n


def scan_batches_many(
    buffers: list[bytes | bytearray | memoryview],
    *,
    validate_crc: bool = True,
    sources: list[str | None] | None = None,
    allow_partial_tail: bool = False,
) -> list[BatchScan]:
    """``[scan_batches(b, validate_crc=..., source=s, allow_partial_tail=...) for b, s in ...]``,
    with the header decoding done once for all buffers: the whole entries of every buffer whose
    length chain has no error are joined and scanned together, then split back (``position``
    relative to each buffer again). A buffer whose chain has an error, or in which the joined
    scan finds one (a CRC mismatch, an unreadable control record), is scanned on its own, so
    every error is exactly the one buffer's (the others are joined again without it, once). Why: a live read gets one Fetch answer of a few
    batches per partition, thousands per trigger, and numpy's fixed cost per scan dominated."""
    srcs = sources if sources is not None else [None] * len(buffers)
    views = [memoryview(b).cast("B") if not isinstance(b, memoryview) else b.cast("B") for b in buffers]
    out: list[BatchScan | None] = [None] * len(buffers)
    chains = [_chain(v, s, 0, allow_partial_tail) for v, s in zip(views, srcs, strict=True)]
    joined = [i for i, ch in enumerate(chains) if not ch[4] and ch[0]]
    for _attempt in range(2):  # a buffer with a batch error is left out and the rest joined again, once
        if len(joined) < 2:
            break
        whole = b"".join(views[i][:chains[i][2]] for i in joined)
        scan = scan_batches(whole, validate_crc=validate_crc, allow_partial_tail=False)
        starts = np.cumsum([0] + [chains[i][2] for i in joined])
        if scan.errors:
            bad = set(np.searchsorted(starts, [e.position for e in scan.errors], side="right") - 1)
            joined = [i for j, i in enumerate(joined) if j not in bad]
            continue
        at = 0
        for j, i in enumerate(joined):
            positions, legacy, end, tail, _errors, legacy_last = chains[i]
            n = len(positions)
            cols = {k: v[at:at + n] for k, v in scan.columns.items()}
            cols["position"] = cols["position"] - int(starts[j])
            out[i] = BatchScan(columns=cols, errors=[], end_position=end, tail_bytes=tail,
                               legacy_entries=legacy, legacy_last_offset=legacy_last)
            at += n
        break
    for i, b in enumerate(buffers):
        if out[i] is None:
            out[i] = scan_batches(b, validate_crc=validate_crc, source=srcs[i], allow_partial_tail=allow_partial_tail)
    return out  # type: ignore[return-value]
