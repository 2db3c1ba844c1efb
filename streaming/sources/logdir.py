"""Steps 2 and 3 of a log-dir read, *read* and *decode*: the bytes of segment, snapshot and
checkpoint files, decoded by :mod:`udfs` into batch tables, ``__transaction_state`` records and
producer snapshots, and the partition replays they feed. Pure (no Spark); builds no event.

Where this sits (the module docstring of :mod:`streaming.sources.segments` has the call trace):
:mod:`streaming.sources.log_layout` lists the files (step 1, re-exported here for importers),
this module reads and decodes them (:func:`read_partition` → :class:`PartitionRead`), and
:mod:`streaming.partition_read` turns that into events (step 4). Each step calls only the steps
after it and :mod:`udfs`; nothing here calls back into the listing once reading began, and
nothing here imports the events step. The driver plans with :func:`plan_partition` (header
scan of the new bytes only: finds the last whole batch and the newest timestamp).

Producer state (detection.md §1): a data partition is seeded from its *newest readable* snapshot
(:func:`newest_snapshot`), chosen once, at the partition's first plan, and kept for every later
read (the offset travels in the source's offsets), so every row of the partition carries the same
``snapshot_offset``. Every segment is still read from the first one: batches below the snapshot
produce preview rows. The log start offset is the first segment's base offset, raised by the log
dir's ``log-start-offset-checkpoint`` entry (``LogLoader.load``: max of the two).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from streaming.sources.log_layout import (  # noqa: F401 - the listing names, re-exported for importers
    TXN_TOPIC,
    Chunk,
    PartitionDir,
    PartitionFiles,
    chunks_between,
    list_files,
    list_partitions,
    parse_partition_dir,
    segments,
    snapshots,
)
from udfs.checkpoint import CHECKPOINT_FILE, read_log_start_checkpoint
from udfs.model import DecodeError
from udfs.producer_state import PartitionState, replay_batches
from udfs.record_batch import BatchScan, scan_batches
from udfs.snapshot import SnapshotCandidate, SnapshotSeed, newest_readable_snapshot, read_snapshot_file
from udfs.txn_log import CoordinatorReplay, decode_txn_log_reduced, decode_txn_log_segment


def snapshot_candidates(files: PartitionFiles) -> list[SnapshotCandidate]:
    """Every ``.snapshot`` file of the partition, as seed candidates."""
    return [SnapshotCandidate(off, f"{files.part.name}/{os.path.basename(path)}", partial(read_snapshot_file, path))
            for off, path in files.snapshots]


def newest_snapshot(files: PartitionFiles) -> tuple[SnapshotSeed | None, list[tuple[str, str]]]:
    """The newest readable snapshot of a data partition (detection.md §1) and the newer ones
    skipped, as (file, reason): corrupt ones, and ones above the log end offset, which the broker
    deletes before loading (``ProducerStateManager.truncateAndReload``). ``__transaction_state``
    partitions have none."""
    if files.part.is_txn_state:
        return None, []
    cands = snapshot_candidates(files)
    above: list[tuple[str, str]] = []
    segs = files.segments
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


def log_start_offset(files: PartitionFiles) -> tuple[int | None, str | None]:
    """The partition's log start offset: its first segment's base offset, or the log dir's
    ``log-start-offset-checkpoint`` entry when higher (``LogLoader.load``); and a reason when the
    checkpoint file is unreadable (it is then ignored, as the entry is only ever a raise)."""
    part, segs = files.part, files.segments
    first = segs[0][0] if segs else None
    ckpt, problem = read_log_start_checkpoint(os.path.join(os.path.dirname(part.path), CHECKPOINT_FILE))
    entry = ckpt.get((part.topic, part.partition))
    known = [x for x in (first, entry) if x is not None]
    return (max(known) if known else None), problem


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
                if part.is_txn_state and PLAN_TXN is not None:
                    PLAN_TXN[(path, pos, pos + len(data))] = data
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
        seed, _skipped = newest_snapshot(list_files(part))
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


# The bytes of the __transaction_state ranges kept in PLAN_SCANS (same keys), set together with it
# by the in-process engine: their read decodes the records from these bytes instead of reading
# the range again (a data partition's read needs only the kept scan).
PLAN_TXN: dict[tuple[str, int, int], bytes] | None = None


def _planned_scan(chunk: Chunk, validate_crc: bool) -> BatchScan | None:
    if PLAN_SCANS is None or not validate_crc:
        return None
    return PLAN_SCANS.pop((chunk.path, chunk.start, chunk.end), None)


def _planned_bytes(chunk: Chunk) -> bytes:
    """A ``__transaction_state`` range's bytes: kept from planning (PLAN_TXN), else read."""
    kept = PLAN_TXN.pop((chunk.path, chunk.start, chunk.end), None) if PLAN_TXN is not None else None
    return kept if kept is not None else _read(chunk)


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


def _data_prefix(files: PartitionFiles, start: tuple[int, int] | None, validate_crc: bool,
                 seed: SnapshotSeed | None) -> PartitionState:
    """Producer state of the partition up to ``start``: the seed snapshot, then the batches at or
    after its offset (memoised per worker process)."""
    with _MEMO_LOCK:
        memo = _MEMO.get(files.part.path)
    if start is None:
        st = PartitionState()
        if seed is not None:
            st.load_snapshot(seed.entries, seed.offset)
        return st
    if memo is not None and memo[0] == start:
        return memo[1]
    st = _data_prefix(files, None, validate_crc, seed)
    for c in files.prefix:
        scan = _scan(c, _read(c), validate_crc)
        replay_batches(st, scan.columns, seed.offset if seed is not None else None)
    return st


def _seed_at(files: PartitionFiles, offset: int | None) -> tuple[SnapshotSeed | None, list[tuple[str, str]]]:
    """The seed of a partition: the snapshot the first plan chose (``offset``; -1 = none), or the
    newest readable one when no plan chose (``offset`` None: batch reads, old checkpoints)."""
    if offset is None:
        return newest_snapshot(files)
    if offset < 0:
        return None, []
    for c in snapshot_candidates(files):
        if c.offset == offset:
            entries, problems = c.load()
            if not problems:
                return SnapshotSeed(entries, offset, c.source_position), []
            return None, [(c.source_position, f"producer snapshot at offset {offset} chosen at the first read is "
                           f"now unreadable: {'; '.join(problems)}")]
    return None, [(files.part.name, f"producer snapshot at offset {offset} chosen at the first read is gone "
                   "(deleted by the broker); the partition's state is not seeded")]


def _txn_prefix(files: PartitionFiles, start: tuple[int, int] | None, validate_crc: bool,
                reduce: bool) -> CoordinatorReplay:
    """transactional id → last producer id, and the highest leader epoch, up to ``start``."""
    if start is None:
        return CoordinatorReplay()
    with _MEMO_LOCK:
        memo = _MEMO.get(files.part.path)
    if memo is not None and memo[0] == start:
        return memo[1]
    acc = CoordinatorReplay()
    for c in files.prefix:
        recs, scan = _decode_txn(_read(c), reduce, validate_crc=validate_crc, source=c.path, base_position=c.start)
        acc.fold(recs, *_txn_extent(scan))
    return acc


def _decode_txn(data: bytes, reduce: bool, **kw: Any) -> tuple[list[dict[str, Any]], BatchScan]:
    """A chunk's ``__transaction_state`` records: with ``reduce`` (``partition_read.REDUCE_IN_READ``)
    only those ``reduce_coordinator_records`` keeps, without a dict for the others
    (``udfs.txn_log.decode_txn_log_reduced``). The prefix replay (``CoordinatorReplay.fold``) needs
    only each id's last record, which the reduction keeps."""
    if reduce:
        return decode_txn_log_reduced(data, **kw)
    return decode_txn_log_segment(data, **kw)


def _txn_extent(scan: BatchScan) -> tuple[int, int | None]:
    """(highest partitionLeaderEpoch, next offset) of a scanned ``__transaction_state`` range."""
    if not len(scan):
        return -1, None
    return int(scan.columns["partition_leader_epoch"].max()), scan.next_offset


@dataclass
class PartitionRead:
    """One planned read of one partition, read and decoded (steps 2-3): what the events step
    (:mod:`streaming.partition_read`, driven by :mod:`streaming.sources.segments`) turns into rows.

    ``gaps``: (problem, source position or None) in the order found: the checkpoint, skipped
    snapshots (first read only), then each chunk's decode errors. Data partition: ``batches``
    (batch table, source position) per chunk, and ``high_watermark`` and ``lso`` of the partition
    replay through the read's end (the progress row's); ``seed`` on the first read
    only. ``__transaction_state``: ``records`` (records, source position, highest leader epoch,
    next offset) per chunk, already reduced when ``reduced``, and ``replay``, the coordinator
    replay *before* the read (the events step routes the records with it and advances it).
    ``first_read``: the read starts at the partition's beginning (no start: nothing of it was
    read before).
    """

    part: PartitionDir
    log_start_offset: int | None
    from_log_start: bool
    read_from_zero: bool
    snapshot_offset: int | None
    end_proven: bool
    progress_position: str
    gaps: list[tuple[DecodeError | str, str | None]] = field(default_factory=list)
    seed: SnapshotSeed | None = None
    batches: list[tuple[dict[str, np.ndarray], str]] = field(default_factory=list)
    high_watermark: int | None = None
    lso: int | None = None
    records: list[tuple[list[dict[str, Any]], str, int, int | None]] = field(default_factory=list)
    reduced: bool = False
    replay: CoordinatorReplay | None = None
    first_read: bool = False


def read_partition(
    files: PartitionFiles,
    chunks: list[Chunk],
    *,
    start: tuple[int, int] | None,
    end: tuple[int, int] | None,
    validate_crc: bool = True,
    seed_offset: int | None = None,
    reduce: bool = True,
) -> PartitionRead:
    """Read and decode one planned read of one partition (no event is built here).

    ``seed_offset``: the snapshot the partition's first plan chose (-1: none; None: choose the
    newest readable one now). ``reduce``: decode ``__transaction_state`` reduced to the records
    the events keep (``partition_read.REDUCE_IN_READ``).
    """
    part = files.part
    segs = files.segments
    log_start, ckpt_problem = log_start_offset(files)
    gaps: list[tuple[DecodeError | str, str | None]] = []
    if ckpt_problem and start is None:
        gaps.append((f"log start offset checkpoint ignored: {ckpt_problem}", None))
    seed, skipped = (None, []) if part.is_txn_state else _seed_at(files, seed_offset)
    if start is None and seed_offset is not None and not part.is_txn_state:
        # the plan chose past corrupt newer snapshots: report them with the first read
        skipped = newest_snapshot(files)[1] + skipped
    if start is None:
        gaps += [(reason, where_) for where_, reason in skipped]
    # A seed snapshot means the producers' history before it is summarised, not read.
    out = PartitionRead(part, log_start, from_log_start=part.is_txn_state or seed is None,
                        read_from_zero=bool(segs) and segs[0][0] == 0 and log_start == 0,
                        snapshot_offset=seed.offset if seed is not None else None,
                        end_proven=end_state(files, end) == "end", progress_position=_where(part, end), gaps=gaps,
                        seed=seed if start is None else None, first_read=start is None)
    if part.is_txn_state:
        out.replay = _txn_prefix(files, start, validate_crc, reduce).copy()
        out.reduced = reduce
        after = out.replay.copy()
        for c in chunks:
            recs, scan = _decode_txn(_planned_bytes(c), reduce, validate_crc=validate_crc, source=c.path,
                                     base_position=c.start, scan=_planned_scan(c, validate_crc))
            extent = _txn_extent(scan)
            out.records.append((recs, f"{part.name}/{os.path.basename(c.path)}", *extent))
            gaps += [(e, None) for e in scan.errors]
            after.fold(recs, *extent)  # what routing the records will leave: the next read's prefix
        memo: Any = after
    else:
        st = _data_prefix(files, start, validate_crc, seed)
        st = PartitionState(producers={k: replace(v) for k, v in st.producers.items()}, next_offset=st.next_offset)
        for c in chunks:
            scan = _scan(c, None, validate_crc)
            out.batches.append((scan.columns, f"{part.name}/{os.path.basename(c.path)}"))
            gaps += [(e, None) for e in scan.errors]
            replay_batches(st, scan.columns, out.snapshot_offset)
        out.high_watermark, out.lso = st.next_offset, st.replayed_lso(log_start)
        memo = st
    # The in-process engine (PLAN_SCANS set) reads each partition once, from its start: the memo
    # would never be read, and not keeping it lets each replay's memory serve the next one.
    if end is not None and PLAN_SCANS is None:
        with _MEMO_LOCK:
            _MEMO[part.path] = (end, memo)
    return out


def end_state(files: PartitionFiles, end: tuple[int, int] | None) -> str:
    """Where a read ending at ``end`` stands against the partition's end (detection.md §0: a log
    directory's end is its newest segment, the broker's own listing): "end" when no whole batch
    lies after ``end`` in this segment or a newer one (a partial tail is still being written),
    "more" when whole batches remain (a backlog: the next read takes them), "unknown" when the
    bytes after it are not a batch or cannot be read."""
    segs = files.segments
    if end is None or not segs:
        return "unknown"
    for base, path in segs:
        if base < end[0]:
            continue
        pos = end[1] if base == end[0] else 0
        try:
            size = files.sizes[path]
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


def _where(part: PartitionDir, end: tuple[int, int] | None) -> str:
    """Where a read of the partition ended, for progress rows."""
    return f"{part.name}/{end[0]:020d}.log@{end[1]}" if end else part.name
