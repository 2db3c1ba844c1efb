"""``__transaction_state`` decode reduced to what a read keeps, with numpy (kafka-formats.md §5).

:func:`decode_txn_log_reduced` returns exactly
``udfs.txn_log.reduce_coordinator_records(decode_txn_log_segment(...)[0])`` and the same
``scan`` (errors included), but does not build a Python dict for every record:

1. the record framing of every batch (length, attributes, timestamp and offset deltas, key and
   value lengths), the ``TransactionLogKey`` and the whole ``TransactionLogValue`` (v0 and v1:
   fixed prefix, partitions, timestamps, tagged fields) are walked for all records at once with
   numpy index arithmetic, which *checks* every record and extracts what the reduction needs
   (transactional id, tombstone, producer id, PreviousProducerId);
2. a batch with anything the vectorized walk does not take on trust (a check failing, a varint
   longer than 4 bytes, a non-ASCII string, element tagged fields, more than 64 records, more than
   256 topics, compression, a null key, ...) is decoded by the Python decoder
   (:func:`udfs.txn_log.decode_batch`), which produces the records and the exact errors it always
   did;
3. the reduction runs on arrays (a stable sort by transactional id: a record is kept when it is a
   tombstone or its neighbour of the same id, before or after, has another (producer id,
   previous producer id) or is missing), and only the kept records are decoded into dicts, by
   the same Python functions (:func:`udfs.txn_log.make_record`).

Binary records always carry TransactionStartTimestampMs, so the reduction's rule for text dumps
without it (keep each move to Ongoing) never applies here.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from udfs.record_batch import HEADER_SIZE, BatchScan, scan_batches
from udfs.txn_log import batch_columns, decode_batch, make_record

MAX_RECORDS = 64  # records per batch taken by the vectorized walk (the coordinator writes 1)
MAX_TOPICS = 256  # topics per TransactionLogValue taken by the vectorized walk
MAX_TAGS = 16  # tagged fields per value taken by the vectorized walk
_PAD = 16


def _int(arr: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Big-endian signed integers of ``size`` bytes at ``pos`` (clipped: callers mask what they trust)."""
    pos = np.clip(pos, 0, len(arr) - _PAD)
    b = arr[pos[:, None] + np.arange(size)]
    return np.ascontiguousarray(b).view(f">i{size}").ravel().astype(np.int64)


def _uvarint(arr: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, position after, ok) of unsigned varints of at most 4 bytes ending by ``limit``."""
    pos = np.clip(pos, 0, len(arr) - _PAD)
    b0 = arr[pos]
    if not (b0 & 0x80).any():  # all one byte long (the usual case)
        return b0.astype(np.int64), pos + 1, pos + 1 <= limit
    b = arr[pos[:, None] + np.arange(4)].astype(np.int64)
    cont = (b & 0x80) != 0
    # length: 1 + number of leading continuation bytes (a 5th byte means "too long for us")
    n = np.where(~cont[:, 0], 1, np.where(~cont[:, 1], 2, np.where(~cont[:, 2], 3, np.where(~cont[:, 3], 4, 5))))
    val = b[:, 0] & 0x7F
    for j in range(1, 4):
        val = np.where(n > j, val | ((b[:, j] & 0x7F) << (7 * j)), val)
    ok = (n <= 4) & (pos + n <= limit)
    return val, pos + n, ok


def _varint(arr: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zigzag varints of at most 4 bytes (the record framing's)."""
    raw, end, ok = _uvarint(arr, pos, limit)
    return (raw >> 1) ^ -(raw & 1), end, ok


def _ascii(hi_cum: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Whether the bytes [start, start+length) are all ASCII (so valid UTF-8 decoding to themselves)."""
    s = np.clip(start, 0, len(hi_cum) - 1)
    e = np.clip(start + np.maximum(length, 0), 0, len(hi_cum) - 1)
    return hi_cum[e] == hi_cum[s]


def _walk_value(arr: np.ndarray, hi_cum: np.ndarray, vs: np.ndarray, vlen: np.ndarray):
    """Check TransactionLogValues [vs, vs+vlen) as ``decode_txn_value`` reads them.
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
    v0 = ok & (version == 0)
    v1 = ok & (version == 1)
    # v0: INT32 count (-1 = null), per topic INT16 length + bytes, INT32 count + INT32s
    ok0 = v0 & (p + 4 <= ve)
    count = np.where(ok0, _int(arr, p, 4), 0)
    ok0 &= (count >= -1) & (count <= MAX_TOPICS)
    p0 = p + 4
    for t in range(int(count[ok0].max(initial=0))):
        act = ok0 & (count > t)
        n = _int(arr, p0, 2)
        ok0 &= ~act | ((p0 + 2 <= ve) & (n >= 0) & (p0 + 2 + n <= ve) & _ascii(hi_cum, p0 + 2, n))
        act &= ok0
        q = p0 + 2 + n
        parts = _int(arr, q, 4)
        ok0 &= ~act | ((q + 4 <= ve) & (parts >= 0) & (q + 4 + 4 * parts <= ve))
        act &= ok0
        p0 = np.where(act, q + 4 + 4 * parts, p0)
    ok0 &= p0 + 16 <= ve
    # v1: compact arrays and strings (uvarint length + 1), element tags, then value tags
    cnt, p1, ok1 = _uvarint(arr, p, ve)
    ok1 &= v1 & (cnt - 1 <= MAX_TOPICS)
    cnt = np.where(ok1, cnt - 1, 0)
    for t in range(int(cnt[ok1].max(initial=0))):
        act = ok1 & (cnt > t)
        n, q, good = _uvarint(arr, p1, ve)
        n -= 1
        good &= (n >= 0) & (q + n <= ve) & _ascii(hi_cum, q, n)
        q = q + n
        parts, q, g2 = _uvarint(arr, q, ve)
        parts -= 1
        good &= g2 & (parts >= 0) & (q + 4 * parts <= ve)
        q = q + 4 * parts
        ntag, q, g3 = _uvarint(arr, q, ve)
        good &= g3 & (ntag == 0)  # element tagged fields: left to the Python decoder
        ok1 &= ~act | good
        p1 = np.where(act & ok1, q, p1)
    ok1 &= p1 + 16 <= ve
    p1 = p1 + 16
    ntags, p1, g = _uvarint(arr, p1, ve)
    ok1 &= g & (ntags <= MAX_TAGS)
    ntags = np.where(ok1, ntags, 0)
    for _ in range(int(ntags.max(initial=0))):
        act = ok1 & (ntags > _)
        tag, q, g1 = _uvarint(arr, p1, ve)
        size, q, g2 = _uvarint(arr, q, ve)
        good = g1 & g2 & (q + size <= ve)
        good &= np.where((tag == 0) | (tag == 1), size >= 8, np.where((tag == 2) | (tag == 3), size >= 2, True))
        ok1 &= ~act | good
        act &= ok1
        prev = np.where(act & (tag == 0), _int(arr, q, 8), prev)
        p1 = np.where(act, q + size, p1)
    return (ok0 | ok1) & ok, pid, prev


def decode_txn_log_reduced(
    data: bytes | memoryview,
    *,
    validate_crc: bool = True,
    source: str | None = None,
    base_position: int = 0,
    allow_partial_tail: bool = False,
    scan: BatchScan | None = None,
) -> tuple[list[dict[str, Any]], BatchScan]:
    """``reduce_coordinator_records(decode_txn_log_segment(...)[0])`` and the scan, computed as the
    module docstring says. Same arguments as :func:`udfs.txn_log.decode_txn_log_segment`."""
    if scan is None:
        scan = scan_batches(data, validate_crc=validate_crc, source=source, base_position=base_position,
                            allow_partial_tail=allow_partial_tail)
    nb = len(scan)
    if nb == 0:
        scan.errors.sort(key=lambda e: e.position)
        return [], scan
    buf = memoryview(data).cast("B")
    arr = np.zeros(len(buf) + _PAD, dtype=np.uint8)
    arr[: len(buf)] = np.frombuffer(buf, dtype=np.uint8)
    hi_cum = np.concatenate(([0], np.cumsum(arr >= 0x80)))
    c = scan.columns
    start = c["position"].astype(np.int64) - base_position
    end = start + c["batch_size"].astype(np.int64)
    count = c["record_count"].astype(np.int64)
    # control batches, and batches that failed their CRC (never believed: the broker never applies
    # one, LogSegment.recover -> RecordBatch.ensureValid), are skipped by both decoders
    control = c["is_control"].astype(bool) | (c["crc_valid"] == 0)
    # the rest goes to the Python decoder; offsets and timestamps kept far from int64 overflow
    fast_b = ~control & (c["compression"] == 0) & (count <= MAX_RECORDS) & (start >= 0) & (end <= len(buf)) & \
        (np.abs(c["base_offset"]) < 1 << 60) & (np.abs(c["base_timestamp"]) < 1 << 60)
    errors0 = list(scan.errors)

    # 1. record framing, record k of every fast batch at once
    rb, rk, roff, rts, rks, rkl, rvs, rvl = ([] for _ in range(8))
    pos = start + HEADER_SIZE
    for k in range(int(count[fast_b].max(initial=0))):
        act = fast_b & (count > k)
        idx = np.flatnonzero(act)
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
        ok &= g & (kl >= 0) & (p + kl <= rec_end)  # a null key is an error: Python decoder
        ks = p
        p = p + np.maximum(kl, 0)
        vl, p, g = _varint(arr, p, rec_end)
        ok &= g & ((vl < 0) | (p + vl <= rec_end))
        fast_b[idx[~ok]] = False
        rb.append(idx)
        rk.append(np.full(len(idx), k))
        roff.append(off)
        rts.append(ts)
        rks.append(ks)
        rkl.append(kl)
        rvs.append(p)
        rvl.append(vl)
        pos[idx] = rec_end
    if rb:
        rb, rk, roff, rts, rks, rkl, rvs, rvl = (np.concatenate(x) for x in (rb, rk, roff, rts, rks, rkl, rvs, rvl))
        order = np.lexsort((rk, rb))
        rb, rk, roff, rts, rks, rkl, rvs, rvl = (x[order] for x in (rb, rk, roff, rts, rks, rkl, rvs, rvl))
        live = fast_b[rb]
        rb, rk, roff, rts, rks, rkl, rvs, rvl = (x[live] for x in (rb, rk, roff, rts, rks, rkl, rvs, rvl))
    else:
        rb = rk = roff = rts = rks = rkl = rvs = rvl = np.empty(0, dtype=np.int64)

    # 2. keys (INT16 version 0, INT16 length, ASCII id) and values
    ok = (rkl >= 4) & (_int(arr, rks, 2) == 0)
    n = _int(arr, rks + 2, 2)
    ok &= (n >= 0) & (4 + n <= rkl) & _ascii(hi_cum, rks + 4, n)
    tomb = rvl < 0
    vok, pid, prev = _walk_value(arr, hi_cum, np.where(tomb, 0, rvs), np.where(tomb, 0, rvl))
    ok &= tomb | vok
    bad_b = np.unique(rb[~ok])
    fast_b[bad_b] = False
    live = fast_b[rb]
    rb, rk, roff, rts, rks, tomb, pid, prev, n = (x[live] for x in (rb, rk, roff, rts, rks, tomb, pid, prev, n))
    rvs, rvl, rkl = rvs[live], rvl[live], rkl[live]

    # transactional ids: the ASCII bytes as fixed-width rows, coded by np.unique, decoded once each
    codes: dict[str, int] = {}
    width = int(n.max(initial=0))
    if len(rb):
        idx = np.minimum((rks + 4)[:, None] + np.arange(max(width, 1)), len(arr) - 1)
        grid = np.where(np.arange(max(width, 1)) < n[:, None], arr[idx], 0).astype(np.uint8)
        # the length is part of the key: an id may end in NUL bytes
        keyed = np.concatenate((n.astype(">u2").view(np.uint8).reshape(-1, 2), grid), axis=1)
        uniq, first_at, inverse = np.unique(np.ascontiguousarray(keyed).view(f"V{keyed.shape[1]}").ravel(),
                                            return_index=True, return_inverse=True)
        names = [bytes(grid[j, : n[j]]).decode("ascii") for j in first_at.tolist()]
        for name in names:
            codes.setdefault(name, len(codes))
        tid = np.array([codes[name] for name in names], dtype=np.int64)[inverse.ravel()]
    else:
        tid = np.empty(0, dtype=np.int64)

    # 3. the Python decoder for the other batches
    cols = batch_columns(scan)
    slow_b = np.flatnonzero(~fast_b & ~control)
    slow_recs: list[dict[str, Any]] = []
    slow_at: list[int] = []
    errors = scan.errors
    for i in slow_b.tolist():
        before = len(slow_recs)
        decode_batch(buf, cols, i, base_position, source, slow_recs, errors)
        slow_at += [i] * (len(slow_recs) - before)
    if slow_recs:
        s_tid = np.array([codes.setdefault(r["transactional_id"], len(codes)) for r in slow_recs], dtype=np.int64)
        s_tomb = np.array([r["tombstone"] for r in slow_recs], dtype=bool)
        s_pid = np.array([-1 if r["tombstone"] else r["producer_id"] for r in slow_recs], dtype=np.int64)
        s_prev = np.array([-1 if r["tombstone"] else r["prev_producer_id"] for r in slow_recs], dtype=np.int64)
        s_b = np.array(slow_at, dtype=np.int64)
        s_k = np.arange(len(slow_recs), dtype=np.int64)  # batch order, then order within the batch
    else:
        s_tid = s_pid = s_prev = s_b = s_k = np.empty(0, dtype=np.int64)
        s_tomb = np.empty(0, dtype=bool)

    # 4. the reduction (txn_log.reduce_coordinator_records) on arrays, in offset (= file) order
    all_b = np.concatenate((rb, s_b))
    all_k = np.concatenate((rk, s_k))
    is_slow = np.concatenate((np.zeros(len(rb), dtype=bool), np.ones(len(s_b), dtype=bool)))
    which = np.concatenate((np.arange(len(rb)), np.arange(len(s_b))))
    t_ = np.concatenate((tid, s_tid))
    tb = np.concatenate((tomb, s_tomb))
    pi = np.concatenate((pid, s_pid))
    pp = np.concatenate((prev, s_prev))
    seq = np.lexsort((all_k, all_b))  # file order
    t_, tb, pi, pp, is_slow, which = (x[seq] for x in (t_, tb, pi, pp, is_slow, which))
    m = len(t_)
    by_id = np.lexsort((np.arange(m), t_))  # by id, file order within an id
    st, stb, spi, spp = t_[by_id], tb[by_id], pi[by_id], pp[by_id]
    same = np.zeros(m, dtype=bool)  # same run as the previous record of the id
    if m > 1:
        same[1:] = (st[1:] == st[:-1]) & ~stb[1:] & ~stb[:-1] & (spi[1:] == spi[:-1]) & (spp[1:] == spp[:-1])
    same_next = np.zeros(m, dtype=bool)
    same_next[:-1] = same[1:]
    keep_sorted = stb | ~same | ~same_next
    keep = np.zeros(m, dtype=bool)
    keep[by_id] = keep_sorted

    out: list[dict[str, Any]] = []
    for j in np.flatnonzero(keep).tolist():
        w = int(which[j])
        if is_slow[j]:
            out.append(slow_recs[w])
            continue
        i = int(rb[w])
        ks, kl = int(rks[w]), int(rkl[w])
        vs, vl = int(rvs[w]), int(rvl[w])
        try:
            out.append(make_record(cols, i, int(roff[w]), int(rts[w]), buf[ks : ks + kl],
                                   None if vl < 0 else buf[vs : vs + vl]))
        except (ValueError, struct.error):  # the walk accepted what the decoder does not: never trust it
            scan.errors[:] = errors0
            return _reference(data, scan, source, base_position)
    errors.sort(key=lambda e: e.position)
    return out, scan


def _reference(data: bytes | memoryview, scan: BatchScan, source: str | None,
               base_position: int) -> tuple[list[dict[str, Any]], BatchScan]:
    """The plain decode and reduction (only if the walk and the decoder ever disagree)."""
    from udfs.txn_log import decode_txn_log_segment, reduce_coordinator_records

    records, scan = decode_txn_log_segment(data, source=source, base_position=base_position, scan=scan)
    return reduce_coordinator_records(records), scan
