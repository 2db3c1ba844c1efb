"""Decoder for ``__transaction_state`` records (kafka-formats.md §5).

Keys are ``TransactionLogKey`` v0 (the only version ever written). Values are
``TransactionLogValue`` v0 (non-flexible, every coordinator before 4.0 and 4.x with
``transaction.version`` 0) or v1 (flexible, 4.0+ with ``transaction.version`` ≥ 1) with tagged
fields 0 PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion, 3 NextProducerEpoch;
unknown tags are skipped by their size. A null value is a tombstone (the coordinator expired the
transactional id). The coordinator epoch of a record is its batch's ``partitionLeaderEpoch``.
"""

from __future__ import annotations

import struct
from typing import Any

from udfs.model import TXN_STATES, DecodeError
from udfs.record_batch import HEADER_SIZE, BatchScan, iter_records, scan_batches

# TransactionLogValue's fixed fields after the version: ProducerId, ProducerEpoch,
# TransactionTimeoutMs, TransactionStatus (the same in v0 and v1: v1's new fields are tagged, at the end).
_VALUE_PREFIX = struct.Struct(">qhib")
_TIMESTAMPS = struct.Struct(">qq")  # TransactionLastUpdateTimestampMs, TransactionStartTimestampMs


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(self.buf)

    def take(self, fmt: str, size: int) -> Any:
        if self.pos + size > self.end:
            raise ValueError(f"value ends at byte {self.end}, {size} more bytes needed at {self.pos}")
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def take_struct(self, st: struct.Struct) -> tuple[Any, ...]:
        """Several fields at once, from ``pos`` on."""
        pos = self.pos
        if pos + st.size > self.end:
            raise ValueError(f"value ends at byte {self.end}, {st.size} more bytes needed at {pos}")
        v = st.unpack_from(self.buf, pos)
        self.pos = pos + st.size
        return v

    def i8(self) -> int:
        return self.take(">b", 1)

    def i16(self) -> int:
        return self.take(">h", 2)

    def i32(self) -> int:
        return self.take(">i", 4)

    def i64(self) -> int:
        return self.take(">q", 8)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise ValueError(f"length {n} at byte {self.pos} runs past the value ({self.end} bytes)")
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b

    def uvarint(self) -> int:
        shift = 0
        out = 0
        while True:
            if self.pos >= self.end or shift > 63:
                raise ValueError(f"unsigned varint runs past the value at byte {self.pos}")
            b = self.buf[self.pos]
            self.pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def utf8(self, n: int) -> str:
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"string is not UTF-8: {exc}") from None


def decode_txn_key(key: bytes | memoryview) -> tuple[int, str]:
    """``TransactionLogKey``: (version, transactional id). Raises ValueError if malformed or not v0."""
    r = _Reader(key)
    version = r.i16()
    if version != 0:
        raise ValueError(f"unknown TransactionLogKey version {version} (only 0 exists)")
    n = r.i16()
    return version, r.utf8(n)


def decode_txn_value(value: bytes | memoryview) -> dict[str, Any]:
    """``TransactionLogValue`` v0 or v1 → dict (keys as in ``udfs.model.TXN_RECORD_KEYS``).

    Raises ValueError for unknown versions, unknown status codes or truncated bytes.
    """
    r = _Reader(value)
    version = r.i16()
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version} (known: 0, 1)")
    # The fixed prefix in one unpack: the coordinator writes one record per transition, so this
    # runs for every transaction several times and per-field calls dominated a scan's time.
    producer_id, producer_epoch, timeout_ms, status = r.take_struct(_VALUE_PREFIX)
    out: dict[str, Any] = {
        "value_version": version,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "txn_timeout_ms": timeout_ms,
    }
    if status not in TXN_STATES:
        raise ValueError(f"unknown TransactionStatus {status}")
    out["txn_state"] = TXN_STATES[status]
    partitions: list[str] | None
    if version == 0:
        count = r.i32()
        if count < -1:
            raise ValueError(f"TransactionPartitions count {count}")
        partitions = None if count == -1 else []
        for _ in range(max(count, 0)):
            topic = r.utf8(r.i16())
            n = _check_count(r.i32())
            partitions += [f"{topic}-{p}" for p in r.take_struct(struct.Struct(f">{n}i"))]
    else:
        count = r.uvarint() - 1
        partitions = None if count == -1 else []
        for _ in range(max(count, 0)):
            topic = r.utf8(r.uvarint() - 1)
            for _ in range(_check_count(r.uvarint() - 1)):
                partitions.append(f"{topic}-{r.i32()}")
            _skip_tags(r)  # the element's own tagged-field section
    out["txn_partitions"] = partitions
    out["txn_last_update_ts"], out["txn_start_ts"] = r.take_struct(_TIMESTAMPS)
    out.update(prev_producer_id=-1, next_producer_id=-1, client_txn_version=0, next_producer_epoch=-1)
    if version == 1:
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            size = r.uvarint()
            body = _Reader(r.raw(size))
            if tag == 0:
                out["prev_producer_id"] = body.i64()
            elif tag == 1:
                out["next_producer_id"] = body.i64()
            elif tag == 2:
                out["client_txn_version"] = body.i16()
            elif tag == 3:
                out["next_producer_epoch"] = body.i16()
            # unknown tags: skipped by size (forward compatibility is the point of tags)
    return out


def _check_count(n: int) -> int:
    if n < 0:
        raise ValueError(f"negative array count {n}")
    return n


def _skip_tags(r: _Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.raw(r.uvarint())


_BATCH_COLS = ("position", "base_offset", "is_control", "compression", "batch_size", "record_count", "base_timestamp",
               "has_delete_horizon", "timestamp_type", "max_timestamp", "partition_leader_epoch", "crc_valid")
_TOMBSTONE_VALUE = dict(value_version=None, producer_id=None, producer_epoch=None, txn_timeout_ms=None,
                        txn_state=None, txn_partitions=None, txn_last_update_ts=None, txn_start_ts=None,
                        prev_producer_id=None, next_producer_id=None, client_txn_version=None,
                        next_producer_epoch=None)


def batch_columns(scan: BatchScan) -> dict[str, list[Any]]:
    """The batch-table columns :func:`decode_batch` reads, as Python lists (indexing numpy arrays
    per batch boxes a numpy scalar every time)."""
    return {k: scan.columns[k].tolist() for k in _BATCH_COLS}


def record_timestamp(cols: dict[str, list[Any]], i: int, ts_delta: int) -> int:
    """A record's timestamp: base + delta for CreateTime batches without a delete horizon, else
    the batch's max timestamp."""
    if not cols["has_delete_horizon"][i] and cols["timestamp_type"][i] == 0:
        return int(cols["base_timestamp"][i]) + ts_delta
    return int(cols["max_timestamp"][i])


def make_record(cols: dict[str, list[Any]], i: int, off_delta: int, ts_delta: int,
                key: bytes | memoryview | None, value: bytes | memoryview | None) -> dict[str, Any]:
    """One record of batch ``i`` as a dict (all ``udfs.model.TXN_RECORD_KEYS``).
    Raises ValueError/struct.error when the key or value is malformed."""
    if key is None:
        raise ValueError("null key")
    key_version, txn_id = decode_txn_key(key)
    rec: dict[str, Any] = {
        "offset": int(cols["base_offset"][i]) + off_delta,
        "position": int(cols["position"][i]),
        "timestamp": record_timestamp(cols, i, ts_delta),
        "coordinator_epoch": int(cols["partition_leader_epoch"][i]),
        "transactional_id": txn_id,
        "key_version": key_version,
        "tombstone": value is None,
    }
    if value is None:
        rec.update(_TOMBSTONE_VALUE)
    else:
        rec.update(decode_txn_value(value))
    return rec


def decode_batch(buf: memoryview, cols: dict[str, list[Any]], i: int, base_position: int, source: str | None,
                 records: list[dict[str, Any]], errors: list[DecodeError]) -> None:
    """Decode the records of batch ``i`` into ``records``; problems go to ``errors`` (a bad
    record is skipped, a batch whose record framing is bad is skipped whole)."""
    pos = int(cols["position"][i]) - base_position
    base_offset = int(cols["base_offset"][i])
    if cols["is_control"][i]:
        return
    if cols["crc_valid"][i] == 0:
        return  # failed its CRC (reported by the scan): never believed, as the broker never applies it
    if cols["compression"][i] != 0:
        errors.append(DecodeError(pos + base_position, "compressed __transaction_state batch "
                                  "(the coordinator always writes them uncompressed)", source,
                                  base_offset=base_offset))
        return
    end = pos + int(cols["batch_size"][i])
    try:
        recs = list(iter_records(buf, pos + HEADER_SIZE, end, int(cols["record_count"][i])))
    except (ValueError, struct.error) as exc:
        errors.append(DecodeError(pos + base_position, f"record: {exc}", source, base_offset=base_offset))
        return
    for off_delta, ts_delta, key, value in recs:
        try:
            records.append(make_record(cols, i, off_delta, ts_delta, key, value))
        except (ValueError, struct.error) as exc:
            errors.append(DecodeError(pos + base_position, f"__transaction_state record at offset "
                                      f"{base_offset + off_delta}: {exc}", source, base_offset=base_offset))


def decode_txn_log_segment(
    data: bytes | memoryview,
    *,
    validate_crc: bool = True,
    source: str | None = None,
    base_position: int = 0,
    allow_partial_tail: bool = False,
    scan: BatchScan | None = None,
) -> tuple[list[dict[str, Any]], BatchScan]:
    """Decode every record of a ``__transaction_state`` segment (or Fetch records field).

    Returns (records, scan); decode problems are appended to ``scan.errors`` and the record is
    skipped (never an exception). Each record dict has all ``udfs.model.TXN_RECORD_KEYS``.
    """
    if scan is None:
        scan = scan_batches(data, validate_crc=validate_crc, source=source, base_position=base_position,
                            allow_partial_tail=allow_partial_tail)
    buf = memoryview(data).cast("B")
    cols = batch_columns(scan)
    records: list[dict[str, Any]] = []
    for i in range(len(scan)):
        decode_batch(buf, cols, i, base_position, source, records, scan.errors)
    scan.errors.sort(key=lambda e: e.position)
    return records, scan


def reduce_coordinator_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``__transaction_state`` records of one read that the state needs, in offset order.

    A record only replaces what the state knows of its transactional id, so within a run of
    records of one id with the same producer id and ``prev_producer_id`` (no tombstone between)
    the last one says it all, and the first one is the routing event (a new producer id: the old
    one learns it was superseded, ``route_coordinator_records``). Kept: every tombstone, the
    first and last record of every run, and, for records without TransactionStartTimestampMs
    (text dumps before 4.1), each record that moved its id to Ongoing and the Complete*/Empty
    record before it: the state bounds the transaction's start by them. ``partitionLeaderEpoch`` only grows along a partition, so the
    last record of a run also carries the run's highest coordinator epoch.
    """
    n = len(records)
    keep = [False] * n
    prev_key: dict[Any, Any] = {}
    prev_state: dict[Any, Any] = {}
    prev_idx: dict[Any, int] = {}
    run_keys = []
    for i, r in enumerate(records):
        tid = r["transactional_id"]
        key = None if r["tombstone"] else (r.get("producer_id"), r.get("prev_producer_id"))
        run_keys.append(key)
        state = None if r["tombstone"] else r.get("txn_state")
        if key is None or prev_key.get(tid, ()) != key:
            keep[i] = True
        elif state == "Ongoing" and r.get("txn_start_ts") is None and prev_state.get(tid) != "Ongoing":
            keep[i] = True
            # and the id's Complete*/Empty record before it: its time bounds the start from below
            # (detection.md §3.1, coordinator-stuck on text dumps)
            if prev_state.get(tid) in ("Empty", "CompleteCommit", "CompleteAbort"):
                keep[prev_idx[tid]] = True
        prev_key[tid] = key
        prev_state[tid] = state
        prev_idx[tid] = i
    next_key: dict[Any, Any] = {}
    for i in range(n - 1, -1, -1):
        tid = records[i]["transactional_id"]
        if next_key.get(tid, ()) != run_keys[i]:
            keep[i] = True
        next_key[tid] = run_keys[i]
    return [r for r, k in zip(records, keep, strict=True) if k]
