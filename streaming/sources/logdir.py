"""Broker-shaped log directories: layout, planning and reading. Pure (no Spark).

A log dir holds one folder per partition, ``<topic>-<partition>``, with segment files
``<20-digit base offset>.log`` and producer snapshots ``<20-digit offset>.snapshot`` (index files
and ``-delete``/``-future`` folders are ignored). A position in a partition is (segment base
offset, byte position in that segment); a partition is read in segment order, so events come in
offset order across segments.

The ``segments`` Spark source plans with :func:`plan_partition` on the driver (header scan of the
new bytes only: finds the last whole batch and the newest timestamp) and reads with
:func:`read_range` on executors.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from streaming.normalize import gap_event
from streaming.partition_read import (
    BatchPiece,
    CoordinatorReplay,
    ReadContext,
    SnapshotSeed,
    TxnPiece,
    data_partition_events,
    txn_partition_events,
)
from udfs.model import DecodeError
from udfs.producer_state import PartitionState
from udfs.record_batch import BatchScan, scan_batches
from udfs.snapshot import decode_snapshot
from udfs.txn_log import decode_txn_log_segment

TXN_TOPIC = "__transaction_state"
_PART_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT = re.compile(r"^(\d{20})\.snapshot$")


@dataclass(frozen=True)
class PartitionDir:
    path: str
    topic: str
    partition: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def is_txn_state(self) -> bool:
        return self.topic == TXN_TOPIC


def parse_partition_dir(path: str) -> PartitionDir | None:
    """``.../<topic>-<partition>`` → PartitionDir; None for anything else (e.g. ``-delete`` dirs)."""
    m = _PART_DIR.match(os.path.basename(os.path.normpath(path)))
    if not m:
        return None
    return PartitionDir(os.path.abspath(path), m.group("topic"), int(m.group("partition")))


def list_partitions(root: str) -> list[PartitionDir]:
    """Partition folders of a log dir (or the folder itself if it is one), sorted by name."""
    root = os.path.abspath(root)
    own = parse_partition_dir(root)
    if own is not None and any(_SEGMENT.match(f) or _SNAPSHOT.match(f) for f in os.listdir(root)):
        return [own]
    out = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if os.path.isdir(full):
            pd_ = parse_partition_dir(full)
            if pd_ is not None:
                out.append(pd_)
    return out


def segments(part: PartitionDir) -> list[tuple[int, str]]:
    """(base offset, path) of the partition's ``.log`` files in offset order."""
    out = []
    for name in os.listdir(part.path):
        m = _SEGMENT.match(name)
        if m:
            out.append((int(m.group(1)), os.path.join(part.path, name)))
    return sorted(out)


def snapshots(part: PartitionDir) -> list[tuple[int, str]]:
    out = []
    for name in os.listdir(part.path):
        m = _SNAPSHOT.match(name)
        if m:
            out.append((int(m.group(1)), os.path.join(part.path, name)))
    return sorted(out)


def seed_snapshot(part: PartitionDir) -> tuple[int, str] | None:
    """The snapshot that describes the state *before* the first available segment (the newest one
    at or below its base offset), or the newest snapshot when there are no segments. Later
    snapshots only summarise segments we read anyway."""
    snaps = snapshots(part)
    if not snaps:
        return None
    segs = segments(part)
    if not segs:
        return snaps[-1]
    eligible = [s for s in snaps if s[0] <= segs[0][0]]
    return eligible[-1] if eligible else None


@dataclass(frozen=True)
class Chunk:
    """Bytes [start, end) of one segment file."""

    segment: int
    path: str
    start: int
    end: int


@dataclass
class PartitionPlan:
    """What the driver decided to read for one partition in one micro-batch."""

    chunks: list[Chunk] = field(default_factory=list)
    end: tuple[int, int] | None = None  # new position (segment base, byte)
    max_ts: int | None = None
    more: bool = False  # whole batches remain beyond ``end`` (budget or cutoff reached)
    errors: list[DecodeError] = field(default_factory=list)


def plan_partition(
    part: PartitionDir,
    start: tuple[int, int] | None,
    max_bytes: int | None = None,
    cutoff_ts: int | None = None,
) -> PartitionPlan:
    """Find the whole batches after ``start`` (None = the first segment's beginning).

    Stops at a partial batch at the end of the newest segment (it is still being written); a
    partial tail of an older segment, or bytes that cannot be read, is left to the reader to
    report as a gap and skipped. ``max_bytes`` caps the bytes planned (at least one batch);
    ``cutoff_ts`` stops before the first batch whose maxTimestamp is later (used to read the
    coordinator log up to the clock and no further). ``plan.more`` says whole batches were left.
    """
    plan = PartitionPlan()
    segs = segments(part)
    budget = max_bytes
    for i, (base, path) in enumerate(segs):
        if start is not None and base < start[0]:
            continue
        pos = start[1] if start is not None and base == start[0] else 0
        size = os.path.getsize(path)
        if size <= pos:
            plan.end = (base, pos)
            continue
        if budget is not None and budget <= 0:
            plan.more = True
            break
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
        newest = i == len(segs) - 1
        scan = scan_batches(data, validate_crc=False, allow_partial_tail=True)
        consumed = scan.end_position
        if not newest and consumed < len(data):
            consumed = len(data)  # an older segment will not grow: let the reader report the tail
        fit = len(scan)
        sizes = np.cumsum(scan.columns["batch_size"].astype(np.int64))
        if budget is not None and fit:
            fit = max(int(np.searchsorted(sizes, budget, side="right")), 1)
        if cutoff_ts is not None and fit:
            late = np.flatnonzero(scan.columns["max_timestamp"][:fit] > cutoff_ts)
            if len(late):
                fit = int(late[0])
        if fit < len(scan):
            plan.more = True
            consumed = int(sizes[fit - 1]) if fit else 0
            _note_ts(plan, scan.columns["max_timestamp"][:fit])
            if consumed:
                plan.chunks.append(Chunk(base, path, pos, pos + consumed))
            if consumed or plan.end is None:
                plan.end = (base, pos + consumed)
            break
        if budget is not None and len(scan):
            budget -= int(sizes[-1])
        _note_ts(plan, scan.columns["max_timestamp"])
        if consumed > 0:
            plan.chunks.append(Chunk(base, path, pos, pos + consumed))
        plan.end = (base, pos + consumed)
    if start is None:
        snap = seed_snapshot(part)
        if snap is not None:
            if plan.end is None:
                plan.end = (snap[0], 0)  # a snapshot alone is something to read
            s = decode_snapshot(open(snap[1], "rb").read(), source=snap[1])
            ts = [e["timestamp"] for e in s.entries if e["timestamp"] >= 0]
            if ts:
                _note_ts(plan, np.asarray(ts))
    return plan


def _note_ts(plan: PartitionPlan, ts: np.ndarray) -> None:
    if len(ts):
        m = int(ts.max())
        if m >= 0:
            plan.max_ts = m if plan.max_ts is None else max(plan.max_ts, m)


def chunks_between(part: PartitionDir, start: tuple[int, int] | None, end: tuple[int, int]) -> list[Chunk]:
    """The byte ranges from position ``start`` (None: the beginning) to ``end``, segment by segment."""
    out = []
    for base, path in segments(part):
        if start is not None and base < start[0]:
            continue
        if base > end[0]:
            break
        lo = start[1] if start is not None and base == start[0] else 0
        hi = end[1] if base == end[0] else os.path.getsize(path)
        if hi > lo:
            out.append(Chunk(base, path, lo, hi))
    return out


# --- executor side -----------------------------------------------------------------------------

# Per-process memo of the partition prefix already replayed, so that consecutive micro-batches on
# the same Python worker extend it instead of re-reading the partition from its first segment.
_MEMO: dict[str, tuple[tuple[int, int], Any]] = {}
_MEMO_LOCK = threading.Lock()


def _read(chunk: Chunk) -> bytes:
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        return f.read(chunk.end - chunk.start)


def _scan(chunk: Chunk, data: bytes, validate_crc: bool) -> BatchScan:
    return scan_batches(data, validate_crc=validate_crc, source=chunk.path, base_position=chunk.start)


def _prefix_chunks(part: PartitionDir, start: tuple[int, int]) -> list[Chunk]:
    out = []
    for base, path in segments(part):
        if base > start[0]:
            break
        end = start[1] if base == start[0] else os.path.getsize(path)
        if end > 0:
            out.append(Chunk(base, path, 0, end))
    return out


def _data_prefix(part: PartitionDir, start: tuple[int, int] | None, validate_crc: bool) -> PartitionState:
    """Producer state of the partition up to ``start`` (memoised per worker process)."""
    with _MEMO_LOCK:
        memo = _MEMO.get(part.path)
    if start is None:
        st = PartitionState()
        snap = seed_snapshot(part)
        if snap is not None:
            s = decode_snapshot(open(snap[1], "rb").read(), source=snap[1])
            st.load_snapshot(s.entries, snap[0])
        return st
    if memo is not None and memo[0] == start:
        return memo[1]
    st = _data_prefix(part, None, validate_crc)
    for c in _prefix_chunks(part, start):
        scan = _scan(c, _read(c), validate_crc)
        st.apply(scan.columns, scan.columns["crc_valid"] != 0)
    return st


def _txn_prefix(part: PartitionDir, start: tuple[int, int] | None, validate_crc: bool) -> CoordinatorReplay:
    """transactional id → last producer id, and the highest leader epoch, up to ``start``."""
    if start is None:
        return CoordinatorReplay()
    with _MEMO_LOCK:
        memo = _MEMO.get(part.path)
    if memo is not None and memo[0] == start:
        return memo[1]
    acc = CoordinatorReplay()
    for c in _prefix_chunks(part, start):
        recs, scan = decode_txn_log_segment(_read(c), validate_crc=validate_crc, source=c.path,
                                            base_position=c.start)
        acc.fold(recs, *_txn_extent(scan))
    return acc


def _txn_extent(scan: BatchScan) -> tuple[int, int | None]:
    """(highest partitionLeaderEpoch, next offset) of a scanned ``__transaction_state`` range."""
    if not len(scan):
        return -1, None
    return int(scan.columns["partition_leader_epoch"].max()), scan.next_offset


def read_range(
    part: PartitionDir,
    chunks: list[Chunk],
    *,
    start: tuple[int, int] | None,
    end: tuple[int, int] | None,
    cluster: str,
    clock_ms: int,
    validate_crc: bool = True,
    source: str = "segments",
) -> pd.DataFrame:
    """Events of one planned read of one partition, ending with its progress row."""
    gaps: list[dict[str, Any]] = []
    common = dict(source=source, cluster=cluster, event_time_ms=clock_ms)
    segs = segments(part)
    log_start = segs[0][0] if segs else None
    # A seed snapshot means the producers' history before it is summarised, not read: the
    # "log-start" coordinator-epoch rule (detection.md §4.2) must not apply then.
    ctx = ReadContext(part.topic, part.partition, source, cluster, clock_ms,
                      from_log_start=part.is_txn_state or seed_snapshot(part) is None)
    where = _where(part, end)
    if part.is_txn_state:
        acc = _txn_prefix(part, start, validate_crc).copy()
        pieces = []
        for c in chunks:
            recs, scan = decode_txn_log_segment(_read(c), validate_crc=validate_crc, source=c.path,
                                                base_position=c.start)
            pieces.append(TxnPiece(recs, f"{part.name}/{os.path.basename(c.path)}", *_txn_extent(scan)))
            gaps += [gap_event(e, topic=part.topic, partition=part.partition, **common) for e in scan.errors]
        out = txn_partition_events(ctx, pieces, acc, gaps=gaps, log_start_offset=log_start, progress_position=where)
        memo = acc
    else:
        st = _data_prefix(part, start, validate_crc)
        st = PartitionState(producers={k: _copy(v) for k, v in st.producers.items()}, next_offset=st.next_offset)
        seed = None
        if start is None:
            snap = seed_snapshot(part)
            if snap is not None:
                s = decode_snapshot(open(snap[1], "rb").read(), source=snap[1])
                seed = SnapshotSeed(s.entries, snap[0], f"{part.name}/{os.path.basename(snap[1])}")
                gaps += [gap_event(e, topic=part.topic, partition=part.partition, **common) for e in s.errors]
        pieces = []
        for c in chunks:
            scan = _scan(c, _read(c), validate_crc)
            pieces.append(BatchPiece(scan.columns, f"{part.name}/{os.path.basename(c.path)}"))
            gaps += [gap_event(e, topic=part.topic, partition=part.partition, **common) for e in scan.errors]
        out = data_partition_events(ctx, pieces, state=st, seed=seed, gaps=gaps, log_start_offset=log_start,
                                    progress_position=where)
        memo = st
    if end is not None:
        with _MEMO_LOCK:
            _MEMO[part.path] = (end, memo)
    return out


def _where(part: PartitionDir, end: tuple[int, int] | None) -> str:
    """Where a read of the partition ended, for progress rows."""
    return f"{part.name}/{end[0]:020d}.log@{end[1]}" if end else part.name


def _copy(e: Any) -> Any:
    return replace(e)
