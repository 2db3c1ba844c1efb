"""Loose input files → events: ``kafka-dump-log.sh`` text of any generation, binary ``.log``
segments and producer ``.snapshot`` files, mixed. Pure (no Spark); the ``dumps`` source and
``txnwatch scan FILE...`` use it.

Each file is recognised by content (dump text vs. binary), then by name. Topic and partition
come from the dumped path (``.../<topic>-<partition>/<offset>.log``) or, for binary files, from
the parent folder; the ``topic``/``partition`` options override both. Segments of one partition
are replayed in base-offset order across files (never by timestamp).

Producer snapshots (detection.md §1): the newest readable snapshot of a partition (binary, or a
``kafka-dump-log.sh`` dump of any generation whose ``Dumping`` line names the file) seeds it,
wherever it lies relative to the segments given; batches below its offset still produce rows
(the state uses them as preview only). A snapshot whose offset is unknown (a dump that lost its
``Dumping <path>`` line) cannot be placed and is a gap. The log start offset is the first
segment given (its base offset, or the dump's ``Starting offset``), raised by a
``log-start-offset-checkpoint`` file given among the inputs.

What the input proves (detection.md §0), on each partition's progress row: ``end_proven`` when
the partition's files came from a log directory txnwatch listed itself (``log_dirs``: its newest
segment is there) or when a ``replication-offset-checkpoint`` / ``recovery-point-offset-checkpoint``
among the inputs names exactly the offset the read ended at; ``last_ts`` = the newest timestamp
read. A snapshot above the partition's log end offset is ignored with a gap, as the broker deletes
it before loading (``ProducerStateManager.truncateAndReload``). The clock is the newest timestamp
that is not an outlier (:mod:`streaming.clock_guard`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from streaming.clock_guard import DEFAULT_TOLERANCE_MS, guarded_clock
from streaming.events import to_frame
from streaming.normalize import gap_event
from streaming.partition_read import (
    BatchPiece,
    CoordinatorReplay,
    ReadContext,
    SnapshotCandidate,
    TxnPiece,
    data_partition_events,
    newest_readable_snapshot,
    txn_partition_events,
)
from streaming.sources.log_layout import TXN_TOPIC, parse_partition_dir
from udfs.checkpoint import CHECKPOINT_FILE, END_CHECKPOINT_FILES, parse_log_start_checkpoint
from udfs.dump_text import DumpFile, detect_dump, merge_segments, parse_dump
from udfs.producer_state import PartitionState
from udfs.record_batch import scan_batches
from udfs.snapshot import decode_snapshot, snapshot_offset_from_name
from udfs.txn_log import decode_txn_log_segment


@dataclass
class _Segment:
    base: int
    cols: dict[str, np.ndarray]
    source: str
    position_format: str


@dataclass
class _Snapshot:
    """A producer snapshot of the input: entries and the problems that make it unusable."""

    offset: int
    entries: list[dict[str, Any]]
    source: str
    problems: list[str]

    def candidate(self) -> SnapshotCandidate:
        return SnapshotCandidate(self.offset, self.source, lambda: (self.entries, self.problems))


@dataclass
class _Material:
    """Everything read for one partition, from any number of files."""

    segments: list[_Segment] = field(default_factory=list)
    txn: list[tuple[int, list[dict[str, Any]], str, int]] = field(default_factory=list)
    snapshots: list[_Snapshot] = field(default_factory=list)


def classify(path: str, head: bytes) -> str:
    """'dump' (kafka-dump-log text), 'snapshot', 'segment', 'checkpoint' (the log dir's
    ``log-start-offset-checkpoint``) or 'unknown'."""
    if os.path.basename(path) == CHECKPOINT_FILE:
        return "checkpoint"
    if os.path.basename(path) in END_CHECKPOINT_FILES:
        return "end_checkpoint"
    if detect_dump(head):
        return "dump"
    if path.endswith(".snapshot"):
        return "snapshot"
    if path.endswith(".log"):
        return "segment"
    scan = scan_batches(head[: 1 << 16], validate_crc=False, allow_partial_tail=True)
    if len(scan) and not scan.errors:
        return "segment"
    return "unknown"


def inputs_have_coordinator(paths: list[str]) -> bool:
    """Does any input carry ``__transaction_state`` (a transaction-log dump or segment)?"""
    for p in paths:
        if TXN_TOPIC + "-" in p:
            return True
        try:
            with open(p, "rb") as f:
                head = f.read(1 << 16)
        except OSError:
            continue
        if detect_dump(head) and (b"transaction_metadata" in head or b"TransactionLogValue" in head
                                  or b"__transaction_state" in head or b'"type":"0"' in head):
            return True
    return False


def read_files(paths: list[str], *, cluster: str, as_of_ms: int | None = None, topic: str | None = None,
               partition: int | None = None, source: str = "dumps", txn_partitions: int = 50,
               log_dirs: list[str] | None = None, skew_tolerance_ms: int = DEFAULT_TOLERANCE_MS,
               wall_ms: int | None = None) -> pd.DataFrame:
    """Events of a set of input files, ending with one progress row per partition.

    ``txn_partitions``: ``__transaction_state``'s partition count (config
    ``[coordinator] txn_state_partitions``), carried by its progress rows. ``log_dirs``: log
    directories given whole (their partitions' newest segments are among the files: end proven).
    ``skew_tolerance_ms`` / ``wall_ms``: the clock's skew guard (wall clock: now by default).
    """
    gaps: list[dict[str, Any]] = []
    data: dict[tuple[str, int], _Material] = {}
    txn: dict[int, _Material] = {}
    dumps: list[DumpFile] = []
    log_starts: dict[tuple[str, int], int] = {}
    ends: dict[tuple[str, int], set[int]] = {}  # what the broker's checkpoints say each log ends at
    listed: set[tuple[str, int]] = set()  # partitions whose files came from a listed log directory
    dirs = [os.path.abspath(d) for d in log_dirs or ()]
    common_gap = dict(source=source, cluster=cluster, event_time_ms=0)

    for path in paths:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            gaps.append(gap_event(f"cannot read {path}: {exc.strerror}", topic=topic, partition=partition,
                                  **common_gap))
            continue
        kind = classify(path, raw[: 1 << 16])
        if kind == "checkpoint":
            entries, problem = parse_log_start_checkpoint(raw.decode("utf-8", errors="replace"), path)
            if problem:
                gaps.append(gap_event(f"log start offset checkpoint ignored: {problem}", topic=None, partition=None,
                                      **common_gap))
            for k, v in entries.items():
                log_starts[k] = max(v, log_starts.get(k, v))
            continue
        if kind == "end_checkpoint":
            entries, problem = parse_log_start_checkpoint(raw.decode("utf-8", errors="replace"), path)
            if problem:
                gaps.append(gap_event(f"end offset checkpoint ignored: {problem}", topic=None, partition=None,
                                      **common_gap))
            for k, v in entries.items():
                ends.setdefault(k, set()).add(v)
            continue
        if kind == "dump":
            files = parse_dump(raw.decode("utf-8", errors="replace"), source=path, topic=topic, partition=partition)
            for f in files:
                gaps += [gap_event(e, topic=f.topic, partition=f.partition, **common_gap) for e in f.errors]
            dumps += files
            continue
        owner = parse_partition_dir(os.path.dirname(os.path.abspath(path)))
        t = topic if topic is not None else (owner.topic if owner else None)
        p = partition if partition is not None else (owner.partition if owner else None)
        if t is not None and p is not None and kind in ("segment", "snapshot") and any(
                os.path.abspath(path).startswith(d + os.sep) for d in dirs):
            listed.add((t, p))
        if kind == "unknown" or t is None or p is None:
            why = ("not a kafka-dump-log text, segment or snapshot" if kind == "unknown" else
                   "topic and partition unknown (no <topic>-<partition> parent folder; pass --topic/--partition)")
            gaps.append(gap_event(f"{path}: {why}", topic=t, partition=p, **common_gap))
            continue
        if kind == "snapshot":
            snap = decode_snapshot(raw, source=path)
            offset = snapshot_offset_from_name(path)
            if offset is None:
                gaps.append(gap_event(f"{path}: producer snapshot whose offset is unknown (the file name must be "
                                      "the 20-digit offset): not used", topic=t, partition=p, **common_gap))
                continue
            data.setdefault((t, p), _Material()).snapshots.append(_Snapshot(
                offset, snap.entries, path, [f"{e.reason} (byte {e.position})" for e in snap.errors]))
            continue
        base = _base_from_name(path)
        if t == TXN_TOPIC:
            recs, scan = decode_txn_log_segment(raw, source=path)
            gaps += [gap_event(e, topic=t, partition=p, **common_gap) for e in scan.errors]
            epoch = int(scan.columns["partition_leader_epoch"].max()) if len(scan) else -1
            txn.setdefault(p, _Material()).txn.append((base if base is not None else 0, recs, path, epoch))
        else:
            scan = scan_batches(raw, source=path)
            gaps += [gap_event(e, topic=t, partition=p, **common_gap) for e in scan.errors]
            seg_base = base if base is not None else (int(scan.columns["base_offset"][0]) if len(scan) else 0)
            data.setdefault((t, p), _Material()).segments.append(
                _Segment(seg_base, scan.columns, path, "{prefix}@{pos}"))

    for f in merge_segments(dumps):
        where = f.source or "<dump>"
        if f.kind in ("data", "txn_log") and (f.topic is None or f.partition is None):
            gaps.append(gap_event(f"{where} lines {f.first_line}-{f.last_line}: topic and partition unknown (the "
                                  f"'Dumping <path>' line is missing; pass --topic/--partition)",
                                  topic=None, partition=None, **common_gap))
            continue
        if f.kind == "data":
            cols = dict(f.batches)
            cols["position"] = f.batch_lines.astype(np.int64)
            # The first segment's "Starting offset" header is its base offset (from the file name).
            base = next((x for x in (f.file_offset, f.log_start_offset) if x is not None),
                        int(cols["base_offset"][0]) if len(f) else 0)
            data.setdefault((f.topic, f.partition), _Material()).segments.append(
                _Segment(base, cols, where, "{prefix}:{pos}"))
        elif f.kind == "txn_log":
            epochs = [r["coordinator_epoch"] for r in f.txn_records if r.get("coordinator_epoch") is not None]
            txn.setdefault(f.partition, _Material()).txn.append(
                (f.file_offset or 0, f.txn_records, where, max(epochs) if epochs else -1))
        elif f.kind == "snapshot":
            if f.topic is None or f.partition is None:
                gaps.append(gap_event(f"{where}: producer snapshot of an unknown partition (pass --topic/--partition)",
                                      topic=None, partition=None, **common_gap))
                continue
            if f.file_offset is None:
                gaps.append(gap_event(f"{where} lines {f.first_line}-{f.last_line}: producer snapshot dump of "
                                      f"{f.topic}-{f.partition} without its offset (the 'Dumping <path>' line names "
                                      "the NNNNNNNNNNNNNNNNNNNN.snapshot file): not used", topic=f.topic,
                                      partition=f.partition, **common_gap))
                continue
            data.setdefault((f.topic, f.partition), _Material()).snapshots.append(_Snapshot(
                f.file_offset, f.snapshot_entries, where,
                [f"line {e.position}: {e.reason}" for e in f.errors]))
        elif len(f) or f.txn_records or f.snapshot_entries:
            gaps.append(gap_event(f"{where} lines {f.first_line}-{f.last_line}: could not tell what was dumped",
                                  topic=f.topic, partition=f.partition, **common_gap))

    # A snapshot above the log end offset is deleted by the broker before it loads the newest one
    # (ProducerStateManager.truncateAndReload): ignored, with a gap naming it.
    for (t, p), m in data.items():
        if not m.segments:
            continue
        log_end = _read_end(m.segments)
        if log_end is None:
            log_end = max(sg.base for sg in m.segments)
        for sn in [sn for sn in m.snapshots if sn.offset > log_end]:
            m.snapshots.remove(sn)
            g = gap_event(f"producer snapshot at offset {sn.offset} lies above the log end offset {log_end}: "
                          "ignored, as the broker deletes it before loading (ProducerStateManager.truncateAndReload)",
                          topic=t, partition=p, **common_gap)
            g["source_position"] = sn.source
            gaps.append(g)

    # The file clock (detection.md §2): the newest timestamp of the input that is not an outlier
    # (streaming.clock_guard), unless --as-of.
    newest: dict[tuple[str, int], int] = {}
    for key, m in data.items():
        ts = [int(sg.cols["max_timestamp"][sg.cols["crc_valid"] != 0].max(initial=-1)) for sg in m.segments]
        ts += [e["timestamp"] for sn in m.snapshots if not sn.problems for e in sn.entries]
        newest[key] = max(ts, default=-1)
    for p, m in txn.items():
        newest[(TXN_TOPIC, p)] = max((r["timestamp"] for _b, recs, _src, _e in m.txn for r in recs
                                      if r.get("timestamp") is not None), default=-1)
    ts_max, _outliers = guarded_clock(newest, wall_ms=wall_ms, tolerance_ms=skew_tolerance_ms)
    clock = as_of_ms if as_of_ms is not None else max(ts_max, 0)

    def end_proven(tp: tuple[str, int], read_end: int | None) -> bool:
        return tp in listed or (read_end is not None and read_end in ends.get(tp, ()))

    frames: list[pd.DataFrame] = []
    known: dict[str, int] = {}  # one map for all coordinator partitions: an id lives in one of them
    for p in sorted(txn):
        pieces = []
        for _base, recs, src, epoch in sorted(txn[p].txn, key=lambda x: x[0]):
            recs = sorted(recs, key=lambda r: r["offset"])
            pieces.append(TxnPiece(recs, src, epoch, recs[-1]["offset"] + 1 if recs else None))
        first = min(b for b, _r, _s, _e in txn[p].txn)
        log_start = max(first, log_starts.get((TXN_TOPIC, p), first))
        ctx = ReadContext(TXN_TOPIC, p, source, cluster, clock, read_from_zero=log_start == 0,
                          txn_partition_count=txn_partitions)
        read_end = next((pc.next_offset for pc in reversed(pieces) if pc.next_offset is not None), None)
        events = txn_partition_events(ctx, pieces, CoordinatorReplay(known), log_start_offset=log_start,
                                      progress_position=pieces[-1].source_position,
                                      end_proven=end_proven((TXN_TOPIC, p), read_end))
        if first > 0:
            # A compacted log keeps offset 0 (LogCleaner.cleanSegments writes a cleaned group under
            # its first segment's base offset; __transaction_state takes no DeleteRecords): a copy
            # starting above 0 lacks its oldest segments, where P's record may be. Not read: no
            # progress row, so the coordinator view counts it missing (detection.md §0, §3.1).
            gaps.append(gap_event(f"{TXN_TOPIC}-{p} given from offset {first} only: its segments below are missing, "
                                  "so the partition is not counted as read", topic=TXN_TOPIC, partition=p,
                                  **common_gap))
            events = events[events["kind"] != "progress"]
        frames.append(events)

    for (t, p), m in sorted(data.items()):
        segs = sorted(m.segments, key=lambda s: s.base)
        seed, skipped = newest_readable_snapshot([sn.candidate() for sn in m.snapshots])
        for where, reason in skipped:
            g = gap_event(reason, topic=t, partition=p, **common_gap)
            g["source_position"] = where
            gaps.append(g)
        state = PartitionState()
        if seed is not None:
            state.load_snapshot(seed.entries, seed.offset)
        log_start = segs[0].base if segs else None
        if (t, p) in log_starts:
            log_start = max(log_starts[(t, p)], log_start if log_start is not None else -1)
        ctx = ReadContext(t, p, source, cluster, clock, from_log_start=seed is None and bool(segs) and segs[0].base == 0,
                          read_from_zero=bool(segs) and segs[0].base == 0 and log_start == 0,
                          snapshot_offset=seed.offset if seed is not None else None)
        pieces = [BatchPiece(s.cols, s.source, s.position_format) for s in segs]
        if not pieces and seed is None:
            continue  # only unusable snapshots: their gaps say so
        holes = _holes(segs)
        for prev, nxt, missing in holes:
            # Segments follow each other (a roll starts the next at the log end offset): offsets
            # between them are a segment not given, where a marker closing O could be.
            gaps.append(gap_event(f"{t}-{p}: offsets {missing[0]}..{missing[1]} between {prev.source} and "
                                  f"{nxt.source} are missing (a segment not given): the read is not complete",
                                  topic=t, partition=p, first_offset=missing[0], last_offset=missing[1],
                                  **common_gap))
        frames.append(data_partition_events(ctx, pieces, state=state, seed=seed, log_start_offset=log_start,
                                            progress_position=segs[-1].source if segs else seed.source_position,
                                            end_proven=not holes and end_proven((t, p), _read_end(segs))))

    for g in gaps:
        g["event_time"] = clock
    frames.append(to_frame(gaps))
    frames = [f for f in frames if len(f)]
    return to_frame(pd.concat(frames, ignore_index=True)) if frames else to_frame([])


def _holes(segs: list[_Segment]) -> list[tuple[_Segment, _Segment, tuple[int, int]]]:
    """(segment, next segment, (first, last) missing offset) for each pair of consecutive segments
    (base offset order) with offsets between the end of the one and the base of the next. A
    compacted topic can show such a hole legitimately (the cleaner drops batches); it then costs
    proof, never a wrong verdict."""
    out = []
    for prev, nxt in zip(segs, segs[1:], strict=False):
        end = _read_end([prev])
        end = prev.base if end is None else end
        if nxt.base > end:
            out.append((prev, nxt, (end, nxt.base - 1)))
    return out


def _read_end(segs: list[_Segment]) -> int | None:
    """The offset after the last batch of a partition's segments (None: no batch)."""
    ends = [int(sg.cols["last_offset"].max()) + 1 for sg in segs if len(sg.cols["last_offset"])]
    return max(ends) if ends else None


def _base_from_name(path: str) -> int | None:
    name = os.path.basename(path)
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() and len(stem) == 20 else None
