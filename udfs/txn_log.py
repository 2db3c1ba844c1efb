"""The ``__transaction_state`` decoder (kafka-formats.md §5): the one place whose code turns the
coordinator log's bytes into records.

Keys are ``TransactionLogKey`` v0 (the only version ever written). Values are
``TransactionLogValue`` v0 (non-flexible, every coordinator before 4.0 and 4.x with
``transaction.version`` 0) or v1 (flexible, 4.0+ with ``transaction.version`` ≥ 1) with tagged
fields 0 PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion, 3 NextProducerEpoch;
unknown tags are skipped by their size. A null value is a tombstone (the coordinator expired the
transactional id). The coordinator epoch of a record is its batch's ``partitionLeaderEpoch``.

One entry point, :func:`decode_txn_log` (``decode_txn_log_segment``: every record;
``decode_txn_log_reduced``: only those :func:`reduce_coordinator_records` keeps), one way through:

1. the batch table (:func:`udfs.record_batch.scan_batches`); control batches and batches that
   failed their CRC are skipped (never believed: the broker never applies one,
   ``LogSegment.recover`` -> ``RecordBatch.ensureValid``), their errors are the scan's;
2. the record framing of every batch (length, attributes, timestamp and offset deltas, key and
   value lengths), the ``TransactionLogKey`` and the whole ``TransactionLogValue`` (v0 and v1:
   fixed prefix, partitions, timestamps, tagged fields) are walked for all records at once with
   numpy index arithmetic (:func:`_walk_records`), which *checks* every record and extracts
   what the reduction needs (transactional id, tombstone, producer id, PreviousProducerId);
3. a batch with anything the walk does not take on trust (and every batch when nothing is reduced:
   all records become dicts then, the walk would only check them twice) (a check failing, a varint longer than 4
   bytes, a non-ASCII string, element tagged fields, more than ``MAX_RECORDS`` records, more than
   ``MAX_TOPICS`` topics, compression, a null key, ...) goes record by record through
   :func:`decode_batch`, which keeps its good records and names each bad one in an error;
4. with ``reduce``, the reduction runs on arrays (a stable sort by transactional id: a record is
   kept when it is a tombstone or its neighbour of the same id, before or after, has another
   (producer id, previous producer id) or is missing);
5. the records kept become dicts through :func:`make_record` (:func:`decode_txn_key` and
   :func:`decode_txn_value`): the walk only decides which records and checks them, every field of
   a record is read by these two functions, on both paths.

Binary records always carry TransactionStartTimestampMs, so the reduction's rule for text dumps
without it (keep each move to Ongoing) never applies to step 4; :func:`reduce_coordinator_records`
(the same rule on record dicts, for dump text) has it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from udfs.model import TXN_STATES, DecodeError
from udfs.record_batch import HEADER_SIZE, BatchScan, iter_records, scan_batches
from udfs.stable_order import stable_argsort
from udfs.varint import read_uvarint

MAX_RECORDS = 64  # records per batch taken by the vectorised walk (the coordinator writes 1)
MAX_TOPICS = 256  # topics per TransactionLogValue taken by the vectorised walk
MAX_TAGS = 16  # tagged fields per value taken by the vectorised walk
_ASCII_WIDTH = 256  # longest string the walk checks (topic names: 249); longer: decoded by record
# zero bytes after the buffer: a read of at most 8 bytes, or of a string's ``_ASCII_WIDTH`` window,
# from any position up to the buffer's end stays in the array
_PAD = 16 + _ASCII_WIDTH

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
        pos = self.pos
        if pos < self.end and self.buf[pos] < 0x80:  # one byte: nearly every length and count here
            self.pos = pos + 1
            return self.buf[pos]
        value, self.pos = read_uvarint(self.buf, pos, self.end)
        return value

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


def batch_columns(scan: BatchScan, rows: np.ndarray | None = None) -> dict[str, Any]:
    """The batch-table columns :func:`decode_batch` reads, as Python lists (indexing numpy arrays
    per batch boxes a numpy scalar every time); with ``rows`` only those batches, as dicts keyed
    by batch index (indexed alike: the reduction builds a few hundred of 200,000 records)."""
    if rows is None:
        return {k: scan.columns[k].tolist() for k in _BATCH_COLS}
    at = rows.tolist()
    return {k: dict(zip(at, scan.columns[k][rows].tolist(), strict=True)) for k in _BATCH_COLS}


def record_timestamp(cols: dict[str, Any], i: int, ts_delta: int) -> int:
    """A record's timestamp: base + delta for CreateTime batches without a delete horizon, else
    the batch's max timestamp."""
    if not cols["has_delete_horizon"][i] and cols["timestamp_type"][i] == 0:
        return int(cols["base_timestamp"][i]) + ts_delta
    return int(cols["max_timestamp"][i])


def make_record(cols: dict[str, Any], i: int, off_delta: int, ts_delta: int,
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


def decode_batch(buf: memoryview, cols: dict[str, Any], i: int, base_position: int, source: str | None,
                 records: list[dict[str, Any]], errors: list[DecodeError]) -> None:
    """Decode the records of batch ``i`` one by one into ``records`` (step 3 of the module
    docstring: the batches the walk does not take); problems go to ``errors`` (a bad record is
    skipped, a batch whose record framing is bad is skipped whole)."""
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


def decode_txn_log(
    data: bytes | memoryview,
    *,
    reduce: bool = False,
    validate_crc: bool = True,
    source: str | None = None,
    base_position: int = 0,
    allow_partial_tail: bool = False,
    scan: BatchScan | None = None,
) -> tuple[list[dict[str, Any]], BatchScan]:
    """The records of a ``__transaction_state`` segment (or Fetch records field), in offset order:
    all of them, or with ``reduce`` only those :func:`reduce_coordinator_records` keeps.

    Returns (records, scan); decode problems are appended to ``scan.errors`` and the record is
    skipped (never an exception). Each record dict has all ``udfs.model.TXN_RECORD_KEYS``.
    """
    if scan is None:
        scan = scan_batches(data, validate_crc=validate_crc, source=source, base_position=base_position,
                            allow_partial_tail=allow_partial_tail)
    errors0 = list(scan.errors)
    by_record: set[int] = set()
    while True:
        out = _decode(memoryview(data).cast("B"), scan, source, base_position, reduce, by_record)
        if isinstance(out, list):
            break
        # The walk accepted a batch that make_record rejects: never trust the walk there, decode
        # that batch record by record (its errors are then exactly the record decoder's).
        scan.errors[:] = errors0
        by_record.add(out)
    scan.errors.sort(key=lambda e: e.position)
    return out, scan


def decode_txn_log_segment(data: bytes | memoryview, **kw: Any) -> tuple[list[dict[str, Any]], BatchScan]:
    """Every record of a ``__transaction_state`` segment: :func:`decode_txn_log` without reduction."""
    return decode_txn_log(data, reduce=False, **kw)


def decode_txn_log_reduced(data: bytes | memoryview, **kw: Any) -> tuple[list[dict[str, Any]], BatchScan]:
    """``reduce_coordinator_records(decode_txn_log_segment(...)[0])`` and the same scan, without a
    dict for the records the reduction drops: :func:`decode_txn_log` with ``reduce``."""
    return decode_txn_log(data, reduce=True, **kw)


def _decode(buf: memoryview, scan: BatchScan, source: str | None, base_position: int, reduce: bool,
            by_record: set[int]) -> list[dict[str, Any]] | int:
    """Steps 2-5 of the module docstring. Returns the records, or the index of a batch the walk
    accepted and :func:`make_record` did not (the caller decodes it by record)."""
    if not len(scan):
        return []
    c = scan.columns
    start = c["position"].astype(np.int64) - base_position
    end = start + c["batch_size"].astype(np.int64)
    count = c["record_count"].astype(np.int64)
    skipped = c["is_control"].astype(bool) | (c["crc_valid"] == 0)
    slow_recs: list[dict[str, Any]] = []
    if not reduce:
        cols = batch_columns(scan)
        # Every record becomes a dict: the walk would only check them twice (it pays where the
        # reduction drops most records without building them). Batch order, then order within
        # the batch, is file order.
        for i in np.flatnonzero(~skipped).tolist():
            decode_batch(buf, cols, i, base_position, source, slow_recs, scan.errors)
        return slow_recs
    # offsets and timestamps kept far from int64 overflow
    walk_b = ~skipped & (c["compression"] == 0) & (count <= MAX_RECORDS) & (start >= 0) & (end <= len(buf)) & \
        (np.abs(c["base_offset"]) < 1 << 60) & (np.abs(c["base_timestamp"]) < 1 << 60)
    if by_record:
        walk_b[list(by_record)] = False
    w = _walk_records(buf, start, end, count, walk_b)  # clears walk_b for the batches it does not take

    slow_at: list[int] = []
    slow_b = np.flatnonzero(~walk_b & ~skipped)
    cols = batch_columns(scan, slow_b)
    for i in slow_b.tolist():
        before = len(slow_recs)
        decode_batch(buf, cols, i, base_position, source, slow_recs, scan.errors)
        slow_at += [i] * (len(slow_recs) - before)

    # step 4: every record in file order (batch, then order within the batch), then the reduction
    n_fast = len(w["batch"])
    all_b = np.concatenate((w["batch"], np.array(slow_at, dtype=np.int64)))
    all_k = np.concatenate((w["index"], np.arange(len(slow_recs), dtype=np.int64)))
    is_slow = np.concatenate((np.zeros(n_fast, dtype=bool), np.ones(len(slow_recs), dtype=bool)))
    which = np.concatenate((np.arange(n_fast), np.arange(len(slow_recs))))
    # file order; one record per batch and nothing decoded by record: already in it
    one_each = not slow_recs and bool((all_b[1:] > all_b[:-1]).all())
    seq = np.arange(len(all_b)) if one_each else np.lexsort((all_k, all_b))
    codes = w["codes"]
    s_tid = [codes.setdefault(r["transactional_id"], len(codes)) for r in slow_recs]
    s_tomb = [r["tombstone"] for r in slow_recs]
    s_pid = [-1 if r["tombstone"] else r["producer_id"] for r in slow_recs]
    s_prev = [-1 if r["tombstone"] else r["prev_producer_id"] for r in slow_recs]
    keep = _run_ends(np.concatenate((w["tid"], np.array(s_tid, dtype=np.int64)))[seq],
                     np.concatenate((w["tomb"], np.array(s_tomb, dtype=bool)))[seq],
                     np.concatenate((w["pid"], np.array(s_pid, dtype=np.int64)))[seq],
                     np.concatenate((w["prev"], np.array(s_prev, dtype=np.int64)))[seq])
    seq = seq[keep]

    # step 5
    out: list[dict[str, Any]] = []
    rb, roff, rts = w["batch"], w["offset_delta"], w["ts_delta"]
    kept_fast = which[seq][~is_slow[seq]]
    for k, v in batch_columns(scan, np.unique(rb[kept_fast])).items():
        cols[k].update(v)
    rks, rkl, rvs, rvl = w["key_start"], w["key_len"], w["value_start"], w["value_len"]
    for slow, r in zip(is_slow[seq].tolist(), which[seq].tolist(), strict=True):
        if slow:
            out.append(slow_recs[r])
            continue
        i = int(rb[r])
        ks, kl, vs, vl = int(rks[r]), int(rkl[r]), int(rvs[r]), int(rvl[r])
        try:
            out.append(make_record(cols, i, int(roff[r]), int(rts[r]), buf[ks : ks + kl],
                                   None if vl < 0 else buf[vs : vs + vl]))
        except (ValueError, struct.error):
            return i
    return out


def _run_ends(tid: np.ndarray, tomb: np.ndarray, pid: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Which records (file order) :func:`reduce_coordinator_records` keeps of binary records (which
    always carry TransactionStartTimestampMs): tombstones and the first and last record of every
    run of one transactional id with the same (producer id, previous producer id)."""
    m = len(tid)
    by_id = stable_argsort(tid)  # by id, file order within an id
    st, stb, spi, spp = tid[by_id], tomb[by_id], pid[by_id], prev[by_id]
    same = np.zeros(m, dtype=bool)  # same run as the previous record of the id
    if m > 1:
        same[1:] = (st[1:] == st[:-1]) & ~stb[1:] & ~stb[:-1] & (spi[1:] == spi[:-1]) & (spp[1:] == spp[:-1])
    same_next = np.zeros(m, dtype=bool)
    same_next[:-1] = same[1:]
    keep = np.zeros(m, dtype=bool)
    keep[by_id] = stb | ~same | ~same_next
    return keep


def _walk_records(buf: memoryview, start: np.ndarray, end: np.ndarray, count: np.ndarray,
                  walk_b: np.ndarray) -> dict[str, Any]:
    """Step 2 of the module docstring for the batches ``walk_b`` marks; a batch with any record
    the walk does not take is cleared from ``walk_b`` and none of its records is returned.

    Returns per record (batch order, then record order) its batch, index in the batch, offset
    and timestamp deltas, key and value (start, length; length -1: null), and for the reduction
    the transactional id coded as an integer (``codes``: id → code), tombstone, producer id and
    PreviousProducerId."""
    names = ("batch", "index", "offset_delta", "ts_delta", "key_start", "key_len", "value_start", "value_len")
    if not walk_b.any():
        none = np.empty(0, dtype=np.int64)
        return {**dict.fromkeys((*names, "pid", "prev", "tid"), none), "tomb": np.empty(0, dtype=bool), "codes": {}}
    arr = np.empty(len(buf) + _PAD, dtype=np.uint8)
    arr[: len(buf)] = np.frombuffer(buf, dtype=np.uint8)
    arr[len(buf):] = 0

    # record framing, record k of every walked batch at once
    rb, rk, roff, rts, rks, rkl, rvs, rvl = ([] for _ in range(8))
    pos = start + HEADER_SIZE
    for k in range(int(count[walk_b].max(initial=0))):
        idx = np.flatnonzero(walk_b & (count > k))
        if not len(idx):
            break
        p, e = pos[idx], end[idx]
        length, p, ok = _varint(arr, p, e)
        rec_end = p + length
        ok &= (length >= 0) & (rec_end <= e)
        p = p + 1
        ts, p, g = _varint(arr, p, rec_end)
        ok &= g
        off, p, g = _varint(arr, p, rec_end)
        ok &= g
        kl, p, g = _varint(arr, p, rec_end)
        ok &= g & (kl >= 0) & (p + kl <= rec_end)  # a null key is an error: decoded by record
        ks = p
        p = p + np.maximum(kl, 0)
        vl, p, g = _varint(arr, p, rec_end)
        ok &= g & ((vl < 0) | (p + vl <= rec_end))
        walk_b[idx[~ok]] = False
        for col, v in zip((rb, rk, roff, rts, rks, rkl, rvs, rvl), (idx, np.full(len(idx), k), off, ts, ks, kl, p, vl),
                          strict=True):
            col.append(v)
        pos[idx] = rec_end
    if len(rb) == 1:  # one record per batch (what the coordinator writes): already in batch order
        r = {name: x[0] for name, x in zip(names, (rb, rk, roff, rts, rks, rkl, rvs, rvl), strict=True)}
    elif rb:
        r = {name: np.concatenate(x) for name, x in zip(names, (rb, rk, roff, rts, rks, rkl, rvs, rvl), strict=True)}
        order = np.lexsort((r["index"], r["batch"]))
        r = {name: x[order] for name, x in r.items()}
    else:
        r = {name: np.empty(0, dtype=np.int64) for name in names}

    # keys (INT16 version 0, INT16 length, ASCII id) and values
    rks, rkl, rvs, rvl = r["key_start"], r["key_len"], r["value_start"], r["value_len"]
    ok = (rkl >= 4) & (_int(arr, rks, 2) == 0)
    n = _int(arr, rks + 2, 2)
    ok &= (n >= 0) & (4 + n <= rkl)
    ok &= _ascii(arr, rks + 4, n, ok)
    tomb = rvl < 0
    vok, pid, prev = _walk_value(arr, np.where(tomb, 0, rvs), np.where(tomb, 0, rvl))
    ok &= tomb | vok
    walk_b[r["batch"][~ok]] = False
    live = walk_b[r["batch"]]
    if not live.all():
        r = {name: x[live] for name, x in r.items()}
        tomb, pid, prev, n = tomb[live], pid[live], prev[live], n[live]
    r["tomb"], r["pid"], r["prev"] = tomb, pid, prev

    # transactional ids: the ASCII bytes as fixed-width rows, coded by _unique_rows, decoded once each
    codes: dict[str, int] = {}
    width = int(n.max(initial=0))
    if len(n):
        w = max(width, 1)
        grid = np.where(np.arange(w) < n[:, None], _rows(arr, r["key_start"] + 4, w), 0).astype(np.uint8)
        # the length is part of the key: an id may end in NUL bytes
        keyed = np.concatenate((n.astype(">u2").view(np.uint8).reshape(-1, 2), grid), axis=1)
        first_at, inverse = _unique_rows(keyed)
        ids = [bytes(grid[j, : n[j]]).decode("ascii") for j in first_at.tolist()]
        for name in ids:
            codes.setdefault(name, len(codes))
        r["tid"] = np.array([codes[name] for name in ids], dtype=np.int64)[inverse.ravel()]
    else:
        r["tid"] = np.empty(0, dtype=np.int64)
    r["codes"] = codes
    return r


def _rows(arr: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes from each position, one row each (a copy): one gather from a view of
    ``arr`` as overlapping ``width``-byte items, not one index per byte. A position is moved
    back to leave ``width`` bytes in ``arr`` (only where the caller ignores the row: see ``_PAD``)."""
    items = np.ndarray((len(arr) - width + 1,), dtype=f"V{width}", buffer=arr, strides=(1,))
    return items[np.minimum(np.maximum(pos, 0), len(arr) - width)].view(np.uint8).reshape(-1, width)


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first occurrence of each distinct row, in byte order of the rows; each row's
    number in that order): ``np.unique`` of the rows as byte strings with ``return_index`` and
    ``return_inverse``, sorted as big-endian 64-bit words (numeric keys sort far faster than
    byte strings)."""
    n, width = rows.shape
    words = np.zeros((n, -(-width // 8) * 8), dtype=np.uint8)
    words[:, :width] = rows
    cols = words.view(">u8")
    order = np.lexsort(cols.T[::-1])  # stable: the first occurrence of a row comes first among equals
    s = cols[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def _int(arr: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Big-endian signed integers of ``size`` bytes at ``pos`` (clipped: callers mask what they trust)."""
    pos = np.minimum(np.maximum(pos, 0), len(arr) - _PAD)
    # ``arr`` as overlapping big-endian integers, one per byte position (unaligned reads)
    ints = np.ndarray((len(arr) - size + 1,), dtype=f">i{size}", buffer=arr, strides=(1,))
    return ints[pos].astype(np.int64)


def _uvarint(arr: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, position after, ok) of unsigned varints of at most 4 bytes ending by ``limit``."""
    pos = np.minimum(np.maximum(pos, 0), len(arr) - _PAD)
    b0 = arr[pos]
    c0 = b0 >= 0x80
    if not c0.any():  # all one byte long (the usual case)
        return b0.astype(np.int64), pos + 1, pos + 1 <= limit
    b1 = arr[pos + 1]
    # two bytes at most (record and value lengths); the longer ones below, on their rows alone
    val = np.where(c0, (b0 & 0x7F).astype(np.int64) | (b1.astype(np.int64) << 7), b0.astype(np.int64))
    n = 1 + c0.astype(np.int64)
    longer = np.flatnonzero(c0 & (b1 >= 0x80))
    if len(longer):
        b = _rows(arr, pos[longer], 4).astype(np.int64)
        cont = (b & 0x80) != 0
        # length: 1 + number of leading continuation bytes (a 5th byte means "too long for us")
        m = np.where(~cont[:, 2], 3, np.where(~cont[:, 3], 4, 5))
        v = (b[:, 0] & 0x7F) | ((b[:, 1] & 0x7F) << 7) | ((b[:, 2] & 0x7F) << 14)
        val[longer] = np.where(m > 3, v | ((b[:, 3] & 0x7F) << 21), v)
        n[longer] = m
    ok = (n <= 4) & (pos + n <= limit)
    return val, pos + n, ok


def _varint(arr: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zigzag varints of at most 4 bytes (the record framing's)."""
    raw, end, ok = _uvarint(arr, pos, limit)
    return (raw >> 1) ^ -(raw & 1), end, ok



def _ascii(arr: np.ndarray, start: np.ndarray, length: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Whether the bytes [start, start+length) are all ASCII (so valid UTF-8 decoding to themselves),
    for the strings ``where`` marks (True elsewhere: the caller ignores them). Only the strings'
    own bytes are looked at (ids and topic names, a few dozen bytes each), in one gather; a string
    longer than ``_ASCII_WIDTH`` is not taken on trust (False: its batch is decoded by record)."""
    out = np.ones(len(start), dtype=bool)
    n = np.where(where, length, 0)
    long = n > _ASCII_WIDTH
    out[long] = False
    rows = np.flatnonzero(where & ~long & (n > 0))
    if len(rows):
        n, s = n[rows], np.maximum(start[rows], 0)
        high = _rows(arr, s, int(n.max())) >= 0x80
        first = high.argmax(axis=1)  # the first byte >= 0x80 of each row's window (0: none)
        out[rows] = ~(high[np.arange(len(rows)), first] & (first < n))
    return out


def _walk_value(arr: np.ndarray, vs: np.ndarray, vlen: np.ndarray):
    """Check TransactionLogValues [vs, vs+vlen) as :func:`decode_txn_value` reads them.
    Returns (ok, producer id, previous producer id) per value."""
    ve = vs + vlen
    ok = vlen >= 17  # INT16 version + the fixed prefix (INT64, INT16, INT32, INT8)
    version = _int(arr, vs, 2)
    ok &= (version == 0) | (version == 1)
    pid = _int(arr, vs + 2, 8)
    status = _int(arr, vs + 16, 1)
    ok &= (status >= 0) & (status <= 7)
    prev = np.full(len(vs), -1, dtype=np.int64)
    p = vs + 17
    # each version's rows walked on their own, and each loop over topics or tags on the rows
    # that still have one (a record lists a few topics; the longest sets the loop's length)
    ok0 = np.zeros(len(vs), dtype=bool)
    ok1 = np.zeros(len(vs), dtype=bool)
    r0 = np.flatnonzero(ok & (version == 0))
    if len(r0):
        ok0[r0] = _walk_v0(arr, p[r0], ve[r0])
    r1 = np.flatnonzero(ok & (version == 1))
    if len(r1):
        ok1[r1], prev[r1] = _walk_v1(arr, p[r1], ve[r1])
    return (ok0 | ok1) & ok, pid, prev


def _walk_v0(arr: np.ndarray, p: np.ndarray, ve: np.ndarray) -> np.ndarray:
    """v0 values from their partitions array on (at ``p``, ending at ``ve``): INT32 count (-1 =
    null), per topic INT16 length + bytes, INT32 count + INT32s, then the two timestamps."""
    ok = p + 4 <= ve
    count = np.where(ok, _int(arr, p, 4), 0)
    ok &= (count >= -1) & (count <= MAX_TOPICS)
    p0 = p + 4
    for t in range(int(count[ok].max(initial=0))):
        rows = np.flatnonzero(ok & (count > t))
        q0, e = p0[rows], ve[rows]
        n = _int(arr, q0, 2)
        good = (q0 + 2 <= e) & (n >= 0) & (q0 + 2 + n <= e)
        good &= _ascii(arr, q0 + 2, n, good)
        q = q0 + 2 + n
        parts = _int(arr, q, 4)
        good &= (q + 4 <= e) & (parts >= 0) & (q + 4 + 4 * parts <= e)
        ok[rows] = good
        p0[rows[good]] = (q + 4 + 4 * parts)[good]
    return ok & (p0 + 16 <= ve)


def _walk_v1(arr: np.ndarray, p: np.ndarray, ve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """v1 values from their partitions array on: compact arrays and strings (uvarint length + 1),
    element tags, the two timestamps, then the value's tagged fields. Returns (ok,
    PreviousProducerId or -1)."""
    prev = np.full(len(p), -1, dtype=np.int64)
    cnt, p1, ok = _uvarint(arr, p, ve)
    ok &= cnt - 1 <= MAX_TOPICS
    cnt = np.where(ok, cnt - 1, 0)
    for t in range(int(cnt[ok].max(initial=0))):
        rows = np.flatnonzero(ok & (cnt > t))
        e = ve[rows]
        n, q, good = _uvarint(arr, p1[rows], e)
        n -= 1
        good &= (n >= 0) & (q + n <= e)
        good &= _ascii(arr, q, n, good)
        q = q + n
        parts, q, g2 = _uvarint(arr, q, e)
        parts -= 1
        good &= g2 & (parts >= 0) & (q + 4 * parts <= e)
        q = q + 4 * parts
        ntag, q, g3 = _uvarint(arr, q, e)
        good &= g3 & (ntag == 0)  # element tagged fields: left to the Python decoder
        ok[rows] = good
        p1[rows[good]] = q[good]
    ok &= p1 + 16 <= ve
    p1 = p1 + 16
    ntags, p1, g = _uvarint(arr, p1, ve)
    ok &= g & (ntags <= MAX_TAGS)
    ntags = np.where(ok, ntags, 0)
    for j in range(int(ntags.max(initial=0))):
        rows = np.flatnonzero(ok & (ntags > j))
        e = ve[rows]
        tag, q, g1 = _uvarint(arr, p1[rows], e)
        size, q, g2 = _uvarint(arr, q, e)
        good = g1 & g2 & (q + size <= e)
        good &= np.where((tag == 0) | (tag == 1), size >= 8, np.where((tag == 2) | (tag == 3), size >= 2, True))
        ok[rows] = good
        first = good & (tag == 0)
        prev[rows[first]] = _int(arr, q[first], 8)
        p1[rows[good]] = (q + size)[good]
    return ok, prev


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


@dataclass
class CoordinatorReplay:
    """What a read of a ``__transaction_state`` partition needs from the records before it:
    transactional id → last producer id (to route tombstones and supersessions), the highest
    partitionLeaderEpoch (= coordinator epoch, kafka-formats.md §5.6) and the next offset."""

    known: dict[str, int] = field(default_factory=dict)
    max_epoch: int = -1
    next_offset: int | None = None

    def copy(self) -> CoordinatorReplay:
        return CoordinatorReplay(dict(self.known), self.max_epoch, self.next_offset)

    def fold(self, records: Sequence[dict[str, Any]], leader_epoch: int = -1, next_offset: int | None = None) -> None:
        """Replay records (offset order) without emitting events: a prefix before the read."""
        for r in records:
            if r["tombstone"]:
                self.known.pop(r["transactional_id"], None)
            else:
                self.known[r["transactional_id"]] = r["producer_id"]
        self.advance(leader_epoch, next_offset)

    def advance(self, leader_epoch: int, next_offset: int | None) -> None:
        self.max_epoch = max(self.max_epoch, leader_epoch)
        if next_offset is not None:
            self.next_offset = next_offset
