"""Broker-shaped log directories: layout, planning and reading. Pure (no Spark).

A log dir holds one folder per partition, ``<topic>-<partition>``, with segment files
``<20-digit base offset>.log`` and producer snapshots ``<20-digit offset>.snapshot`` (index files
and ``-delete``/``-future`` folders are ignored). A position in a partition is (segment base
offset, byte position in that segment); a partition is read in segment order, so events come in
offset order across segments.

The ``segments`` Spark source plans with :func:`plan_partition` on the driver (header scan of the
new bytes only: finds the last whole batch and the newest timestamp) and reads with
:func:`read_range` on executors.

Producer state (detection.md §1): a data partition is seeded from its *newest readable* snapshot
(:func:`newest_snapshot`), chosen once, at the partition's first plan, and kept for every later
read (the offset travels in the source's offsets), so every row of the partition carries the same
``snapshot_offset``. Every segment is still read from the first one: batches below the snapshot
produce preview rows. The log start offset is the first segment's base offset, raised by the log
dir's ``log-start-offset-checkpoint`` entry (``LogLoader.load``: max of the two).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from streaming import partition_read
from streaming.normalize import gap_event
from streaming.partition_read import (
    BatchPiece,
    CoordinatorReplay,
    ReadContext,
    SnapshotCandidate,
    SnapshotSeed,
    TxnPiece,
    data_partition_events,
    newest_readable_snapshot,
    replay_batches,
    txn_partition_events,
)
from udfs.checkpoint import CHECKPOINT_FILE, read_log_start_checkpoint
from udfs.model import DecodeError
from udfs.producer_state import PartitionState
from udfs.record_batch import BatchScan, scan_batches
from udfs.snapshot import decode_snapshot
from udfs.txn_log import decode_txn_log_reduced, decode_txn_log_segment

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


def _load_snapshot(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return [], [f"cannot read {path}: {exc.strerror}"]
    snap = decode_snapshot(data, source=path)
    return snap.entries, [f"{e.reason} (byte {e.position})" for e in snap.errors]


def snapshot_candidates(part: PartitionDir) -> list[SnapshotCandidate]:
    """Every ``.snapshot`` file of the partition, as seed candidates."""
    return [SnapshotCandidate(off, f"{part.name}/{os.path.basename(path)}",
                              lambda path=path: _load_snapshot(path)) for off, path in snapshots(part)]


def newest_snapshot(part: PartitionDir) -> tuple[SnapshotSeed | None, list[tuple[str, str]]]:
    """The newest readable snapshot of a data partition (detection.md §1) and the newer ones
    skipped, as (file, reason): corrupt ones, and ones above the log end offset, which the broker
    deletes before loading (``ProducerStateManager.truncateAndReload``). ``__transaction_state``
    partitions have none."""
    if part.is_txn_state:
        return None, []
    cands = snapshot_candidates(part)
    above: list[tuple[str, str]] = []
    segs = segments(part)
    if segs and cands and cands[-1].offset > segs[-1][0]:  # only then can one lie above the end
        end = log_end_offset(segs)
        above = [(c.source_position, f"producer snapshot at offset {c.offset} lies above the log end offset "
                  f"{end}: ignored, as the broker deletes it before loading (ProducerStateManager.truncateAndReload)")
                 for c in cands if c.offset > end]
        cands = [c for c in cands if c.offset <= end]
    seed, skipped = newest_readable_snapshot(cands)
    return seed, above + skipped


def log_end_offset(segs: list[tuple[int, str]]) -> int:
    """The offset after the last whole batch of a partition's segments (headers only)."""
    for _base, path in reversed(segs):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        scan = scan_batches(data, validate_crc=False, allow_partial_tail=True)
        if len(scan):
            return int(scan.columns["last_offset"].max()) + 1
    return segs[-1][0]


def log_start_offset(part: PartitionDir) -> tuple[int | None, str | None]:
    """The partition's log start offset: its first segment's base offset, or the log dir's
    ``log-start-offset-checkpoint`` entry when higher (``LogLoader.load``); and a reason when the
    checkpoint file is unreadable (it is then ignored, as the entry is only ever a raise)."""
    segs = segments(part)
    first = segs[0][0] if segs else None
    ckpt, problem = read_log_start_checkpoint(os.path.join(os.path.dirname(part.path), CHECKPOINT_FILE))
    entry = ckpt.get((part.topic, part.partition))
    known = [x for x in (first, entry) if x is not None]
    return (max(known) if known else None), problem


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
    seed_offset: int = -1  # first plan only: offset of the snapshot the partition is seeded from


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
        if PLAN_SCANS is None:
            scan = scan_batches(data, validate_crc=False, allow_partial_tail=True)
        else:  # scanned as the read will scan it, and kept for it (see PLAN_SCANS)
            scan = scan_batches(data, validate_crc=True, source=path, base_position=pos, allow_partial_tail=True)
            if not scan.errors and not scan.tail_bytes:
                PLAN_SCANS[(path, pos, pos + len(data))] = scan
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
        seed, _skipped = newest_snapshot(part)
        if seed is not None:
            plan.seed_offset = seed.offset
            if plan.end is None:
                plan.end = (seed.offset, 0)  # a snapshot alone is something to read
            ts = [e["timestamp"] for e in seed.entries if e["timestamp"] >= 0]
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

# Scans of whole planned ranges kept from planning for the read that follows in the same process:
# the in-process engine (streaming.local_engine.read_source) sets a dict while it plans and reads,
# so that each file's batch headers are scanned once, not once to plan and once to read. A scan
# is kept only when the planned range ends at its last whole batch without any problem; the read
# of exactly that range, with the CRC check on, takes it (the same scan_batches call's result:
# same bytes, source, base position and CRC check). None (Spark: the driver plans, workers read):
# nothing kept.
PLAN_SCANS: dict[tuple[str, int, int], BatchScan] | None = None


def _planned_scan(chunk: Chunk, validate_crc: bool) -> BatchScan | None:
    if PLAN_SCANS is None or not validate_crc:
        return None
    return PLAN_SCANS.pop((chunk.path, chunk.start, chunk.end), None)
_MEMO_LOCK = threading.Lock()


def _read(chunk: Chunk) -> bytes:
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        return f.read(chunk.end - chunk.start)


def _scan(chunk: Chunk, data: bytes | None, validate_crc: bool) -> BatchScan:
    kept = _planned_scan(chunk, validate_crc)
    if kept is not None:
        return kept
    if data is None:
        data = _read(chunk)
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


def _data_prefix(part: PartitionDir, start: tuple[int, int] | None, validate_crc: bool,
                 seed: SnapshotSeed | None) -> PartitionState:
    """Producer state of the partition up to ``start``: the seed snapshot, then the batches at or
    after its offset (memoised per worker process)."""
    with _MEMO_LOCK:
        memo = _MEMO.get(part.path)
    if start is None:
        st = PartitionState()
        if seed is not None:
            st.load_snapshot(seed.entries, seed.offset)
        return st
    if memo is not None and memo[0] == start:
        return memo[1]
    st = _data_prefix(part, None, validate_crc, seed)
    for c in _prefix_chunks(part, start):
        scan = _scan(c, _read(c), validate_crc)
        replay_batches(st, scan.columns, seed.offset if seed is not None else None)
    return st


def _seed_at(part: PartitionDir, offset: int | None) -> tuple[SnapshotSeed | None, list[tuple[str, str]]]:
    """The seed of a partition: the snapshot the first plan chose (``offset``; -1 = none), or the
    newest readable one when no plan chose (``offset`` None: batch reads, old checkpoints)."""
    if offset is None:
        return newest_snapshot(part)
    if offset < 0:
        return None, []
    for c in snapshot_candidates(part):
        if c.offset == offset:
            entries, problems = c.load()
            if not problems:
                return SnapshotSeed(entries, offset, c.source_position), []
            return None, [(c.source_position, f"producer snapshot at offset {offset} chosen at the first read is "
                           f"now unreadable: {'; '.join(problems)}")]
    return None, [(part.name, f"producer snapshot at offset {offset} chosen at the first read is gone "
                   "(deleted by the broker); the partition's state is not seeded")]


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
        recs, scan = _decode_txn(_read(c), validate_crc=validate_crc, source=c.path, base_position=c.start)
        acc.fold(recs, *_txn_extent(scan))
    return acc


def _decode_txn(data: bytes, **kw: Any) -> tuple[list[dict[str, Any]], BatchScan]:
    """A chunk's ``__transaction_state`` records: only those ``reduce_coordinator_records`` keeps
    when the read reduces (``partition_read.REDUCE_IN_READ``), decoded with numpy
    (``udfs.txn_log``); the same list and errors as decoding all and reducing. The prefix
    replay (``CoordinatorReplay.fold``) needs only each id's last record, which the reduction keeps."""
    if partition_read.REDUCE_IN_READ:
        return decode_txn_log_reduced(data, **kw)
    return decode_txn_log_segment(data, **kw)


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
    seed_offset: int | None = None,
    txn_partition_count: int | None = None,
    typed: bool = True,
) -> pd.DataFrame:
    """Events of one planned read of one partition, ending with its progress row (untyped with
    ``typed=False``: see ``partition_read.data_partition_events``).

    ``seed_offset``: the snapshot the partition's first plan chose (-1: none; None: choose the
    newest readable one now). ``txn_partition_count``: ``__transaction_state``'s partition count
    for its progress rows (config ``txn_state_partitions``).
    """
    gaps: list[dict[str, Any]] = []
    common = dict(source=source, cluster=cluster, event_time_ms=clock_ms)
    segs = segments(part)
    log_start, ckpt_problem = log_start_offset(part)
    if ckpt_problem and start is None:
        gaps.append(gap_event(f"log start offset checkpoint ignored: {ckpt_problem}", topic=part.topic,
                              partition=part.partition, **common))
    seed, skipped = (None, []) if part.is_txn_state else _seed_at(part, seed_offset)
    if start is None and seed_offset is not None and not part.is_txn_state:
        # the plan chose past corrupt newer snapshots: report them with the first read
        skipped = newest_snapshot(part)[1] + skipped
    if start is None:
        gaps += [_gap_at(where_, reason, part, common) for where_, reason in skipped]
    snap_off = seed.offset if seed is not None else None
    # A seed snapshot means the producers' history before it is summarised, not read.
    ctx = ReadContext(part.topic, part.partition, source, cluster, clock_ms,
                      from_log_start=part.is_txn_state or seed is None,
                      read_from_zero=bool(segs) and segs[0][0] == 0 and log_start == 0,
                      snapshot_offset=snap_off,
                      txn_partition_count=txn_partition_count if part.is_txn_state else None)
    where = _where(part, end)
    if part.is_txn_state:
        acc = _txn_prefix(part, start, validate_crc).copy()
        pieces = []
        for c in chunks:
            recs, scan = _decode_txn(_read(c), validate_crc=validate_crc, source=c.path, base_position=c.start,
                                     scan=_planned_scan(c, validate_crc))
            pieces.append(TxnPiece(recs, f"{part.name}/{os.path.basename(c.path)}", *_txn_extent(scan)))
            gaps += [gap_event(e, topic=part.topic, partition=part.partition, **common) for e in scan.errors]
        out = txn_partition_events(ctx, pieces, acc, gaps=gaps, log_start_offset=log_start, progress_position=where,
                                   typed=typed, end_proven=reached_end(segs, end))
        memo = acc
    else:
        st = _data_prefix(part, start, validate_crc, seed)
        st = PartitionState(producers={k: _copy(v) for k, v in st.producers.items()}, next_offset=st.next_offset)
        pieces = []
        for c in chunks:
            scan = _scan(c, None, validate_crc)
            pieces.append(BatchPiece(scan.columns, f"{part.name}/{os.path.basename(c.path)}"))
            gaps += [gap_event(e, topic=part.topic, partition=part.partition, **common) for e in scan.errors]
        # A backlog (max_bytes_per_trigger) is read through the micro-batch's clock but not to the
        # partition's end: its verdicts are published unverified until the read that reaches it.
        out = data_partition_events(ctx, pieces, state=st, seed=seed if start is None else None, gaps=gaps,
                                    log_start_offset=log_start, progress_position=where, typed=typed,
                                    end_proven=end_state(segs, end) == "end")
        memo = st
    if end is not None:
        with _MEMO_LOCK:
            _MEMO[part.path] = (end, memo)
    return out


def end_state(segs: list[tuple[int, str]], end: tuple[int, int] | None) -> str:
    """Where a read ending at ``end`` stands against the partition's end (detection.md §0: a log
    directory's end is its newest segment, the broker's own listing): "end" when no whole batch
    lies after ``end`` in this segment or a newer one (a partial tail is still being written),
    "more" when whole batches remain (a backlog: the next read takes them), "unknown" when the
    bytes after it are not a batch or cannot be read."""
    if end is None or not segs:
        return "unknown"
    for base, path in segs:
        if base < end[0]:
            continue
        pos = end[1] if base == end[0] else 0
        try:
            size = os.path.getsize(path)
            if size - pos < 12:
                continue
            with open(path, "rb") as f:
                f.seek(pos + 8)
                length = int.from_bytes(f.read(4), "big", signed=True)
        except OSError:
            return "unknown"
        if length < 0:
            return "unknown"
        if size - pos >= 12 + length:
            return "more"
    return "end"


def reached_end(segs: list[tuple[int, str]], end: tuple[int, int] | None) -> bool:
    """Did a read ending at ``end`` reach the partition's end (:func:`end_state`)?"""
    return end_state(segs, end) == "end"


def _gap_at(where: str, reason: str, part: PartitionDir, common: dict[str, Any]) -> dict[str, Any]:
    g = gap_event(reason, topic=part.topic, partition=part.partition, **common)
    g["source_position"] = where
    return g


def _where(part: PartitionDir, end: tuple[int, int] | None) -> str:
    """Where a read of the partition ended, for progress rows."""
    return f"{part.name}/{end[0]:020d}.log@{end[1]}" if end else part.name


def _copy(e: Any) -> Any:
    return replace(e)
