"""One read of one partition → its events: the single read path every source ends in. No Spark.

A source (``kafka``: Fetch bytes; ``segments``: byte ranges of segment files; ``dumps`` and
``scan``: loose files and dump text) decides *what* to read and decodes it into batch tables
(columns of :func:`udfs.record_batch.scan_batches`, or of a parsed dump) or ``__transaction_state``
records. What those become is decided here, the same way for all of them:

* data partition: the seed snapshot's entries (when the read starts from one), the spans and
  markers of every piece (:func:`streaming.normalize.data_events`), the gaps, and one progress
  row whose high watermark and LSO are the broker's (live) or the partition replay's
  (:class:`udfs.producer_state.PartitionState`, for files);
* ``__transaction_state`` partition: the records of every piece routed to every producer id they
  concern (:func:`streaming.normalize.route_coordinator_records`), the gaps, and one progress
  row carrying the highest coordinator epoch (partitionLeaderEpoch) seen.

Every row of a read carries ``from_log_start`` and ``read_from_zero`` when the source knows them.

Producer snapshots (detection.md §1, kafka-formats.md §6): the broker's producer state is the
*newest* snapshot plus the batches at offsets ≥ its offset. At start-up
``ProducerStateManager.truncateAndReload`` deletes snapshots at or below the log start, and
``loadFromSnapshot`` loads the newest one left, deleting a corrupt one (``CorruptSnapshotException``)
and falling back to the next newest. :func:`newest_readable_snapshot` makes the same choice over
whatever snapshots a source found; a read seeded from it stamps ``snapshot_offset`` on its data,
marker and progress rows and replays only the batches at or after it. Batches before it still
produce their rows (split at the snapshot offset, so no span straddles it): the state uses them
only for the data-loss preview and first-write time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from streaming.event_table import EventTable
from streaming.events import to_frame
from streaming.normalize import (
    data_event_arrays,
    data_event_columns,
    data_events,
    progress_event,
    reduce_coordinator_records,
    route_coordinator_rows,
    snapshot_events,
    snapshot_rows,
    txn_state_rows,
)

# The snapshot choice and the two replays live beside their decoders (udfs); re-exported here for
# the sources that build reads from them.
from udfs.producer_state import PartitionState, replay_batches
from udfs.snapshot import SnapshotCandidate, SnapshotSeed, newest_readable_snapshot
from udfs.txn_log import CoordinatorReplay

__all__ = ["BatchPiece", "CoordinatorReplay", "Offsets", "ReadContext", "SnapshotCandidate", "SnapshotSeed",
           "TxnPiece", "data_partition_events", "newest_readable_snapshot", "replay_batches", "split_at",
           "txn_partition_events"]

# Fold what opens and closes within a read before the state operator sees it
# (normalize.reduce_closed_in_read / reduce_coordinator_records). Off only to compare results.
REDUCE_IN_READ = True


@dataclass(frozen=True)
class ReadContext:
    """Where a read's rows come from and the clock they carry (detection.md §2).

    ``from_log_start``: the partition's reading began at its log start offset and no snapshot
    stands in for earlier history; ``read_from_zero``: it began at offset 0 and the log start is 0
    (nothing ever deleted: detection.md §4 rule ``log-start``); None leaves a column unset.
    ``snapshot_offset``: the offset of the snapshot the partition's state was seeded from (the same
    for every read of the partition), stamped on its data, marker and progress rows.
    ``txn_partition_count``: ``__transaction_state``'s partition count, for its progress rows.
    ``lagging``: the live source read the partition's bytes only up to a lagging end (its
    planned high watermark not reached), stamped on every row of the read; ``window_lso``: the
    live probe read a window from this LSO, stamped as ``lso`` on its span and marker rows (the
    state knows what the window skipped). ``first_read``: the source's first read of the
    partition (the ``segments`` source's read that starts at its first byte, in the micro-batch
    that plans it first): the state holds nothing of it before this read, which lets the in-read
    reduction fold what opens and closes before each producer's first marker too
    (:func:`streaming.normalize.reduce_closed_in_read`, first piece, no seed snapshot).
    """

    topic: str
    partition: int
    source: str
    cluster: str
    clock_ms: int
    from_log_start: bool | None = None
    read_from_zero: bool | None = None
    snapshot_offset: int | None = None
    txn_partition_count: int | None = None
    lagging: bool | None = None
    window_lso: int | None = None
    first_read: bool = False

    @property
    def common(self) -> dict[str, Any]:
        return dict(source=self.source, cluster=self.cluster, event_time_ms=self.clock_ms)

    @property
    def stamps(self) -> dict[str, Any]:
        """The values every row of the read carries (None: left unset)."""
        return {k: v for k, v in (("from_log_start", self.from_log_start), ("read_from_zero", self.read_from_zero),
                                  ("lagging", self.lagging)) if v is not None}


@dataclass(frozen=True)
class Offsets:
    """A partition's offsets as the broker reported them (the progress row of a live read)."""

    high_watermark: int | None
    lso: int | None
    log_start_offset: int | None


@dataclass(frozen=True)
class BatchPiece:
    """One contiguous batch table of a read: a fetched range, a segment chunk, a dumped segment.

    ``position_format`` names a batch in ``source_position`` (``{prefix}`` = ``source_position``,
    ``{pos}`` = the table's ``position`` column: byte position, dump line or offset).
    """

    cols: dict[str, np.ndarray]
    source_position: str
    position_format: str = "{prefix}@{pos}"


def split_at(cols: dict[str, np.ndarray], offset: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(batches wholly below ``offset``, batches at or after it) of a batch table, file order kept.
    A snapshot taken at ``offset`` already summarises the first part."""
    below = cols["last_offset"] < offset
    return {k: v[below] for k, v in cols.items()}, {k: v[~below] for k, v in cols.items()}


def data_partition_events(
    ctx: ReadContext,
    pieces: Sequence[BatchPiece],
    *,
    state: PartitionState | None = None,
    seed: SnapshotSeed | None = None,
    gaps: Sequence[dict[str, Any]] = (),
    broker: Offsets | None = None,
    log_start_offset: int | None = None,
    progress_position: str | None = None,
    typed: bool = True,
    end_proven: bool | None = None,
    collect: EventTable | None = None,
    progress: bool = True,
) -> pd.DataFrame | None:
    """Events of one read of a data partition, ending with its progress row.

    ``broker``: the partition's offsets as the source knows them (the broker's on a live read; a
    log-dir read passes those of its own replay, read to its end). ``state``: the partition replay
    up to where this read starts (seeded from ``seed`` by the
    caller when it starts there); the pieces are applied to it (batches with a bad CRC skipped,
    batches below ``ctx.snapshot_offset`` too) and, unless ``broker`` gives the partition's
    offsets, it supplies the progress row's high watermark (next offset) and LSO. ``seed``: emit
    the snapshot's entries as events (first read of the partition only). ``end_proven``: the
    read reached the partition's end (detection.md §0; None: the source cannot say). The progress
    row's ``last_ts`` is the newest timestamp of the read's batches that passed their CRC.
    ``collect``: append the rows to the :class:`~streaming.event_table.EventTable` instead of
    returning them (columns, no pandas at all). ``progress=False``: no progress row (the live
    source's read stopped before its planned end).
    """
    common = ctx.common
    columnar = isinstance(collect, EventTable)
    frames: list[pd.DataFrame] = []
    seed_rows: list[dict[str, Any]] = []
    columns: list[dict[str, Any]] = []
    if seed is not None:
        kw = dict(topic=ctx.topic, partition=ctx.partition, snapshot_offset=seed.offset,
                  source_position=seed.source_position, **common)
        if columnar:
            seed_rows = snapshot_rows(seed.entries, **kw)
        else:
            frames.append(snapshot_events(seed.entries, typed=False, **kw))
    for i, piece in enumerate(pieces):
        # Split at the snapshot so that no span straddles it: what lies below is preview only.
        parts = split_at(piece.cols, ctx.snapshot_offset) if ctx.snapshot_offset is not None else (piece.cols,)
        reduce_from = (ctx.snapshot_offset or 0) if REDUCE_IN_READ else None
        # the state has nothing of the partition before the first piece of its first read (a
        # later piece follows the rows of the earlier ones)
        first_read = ctx.first_read and i == 0 and ctx.snapshot_offset is None and seed is None
        for cols in parts:
            kw = dict(topic=ctx.topic, partition=ctx.partition, source_position=piece.source_position,
                      position_format=piece.position_format, reduce_from=reduce_from, first_read=first_read,
                      **common)
            if columnar:
                c = data_event_columns(cols, **kw)
                if c is not None:
                    columns.append(c)
            else:
                frames.append(data_events(cols, typed=False, **kw))
        if state is not None:
            replay_batches(state, piece.cols, ctx.snapshot_offset)
    if broker is not None:
        offsets = broker
    elif state is not None:
        offsets = Offsets(state.next_offset, state.replayed_lso(log_start_offset), log_start_offset)
    else:
        raise ValueError("data_partition_events needs the broker's offsets or a partition replay")
    newest = [int(p.cols["max_timestamp"][p.cols["crc_valid"] != 0].max(initial=-1)) for p in pieces
              if len(p.cols["max_timestamp"])]
    prog = _data_progress(ctx, offsets, progress_position, end_proven, max(newest) if newest else -1)
    rows = [*gaps, prog] if progress else list(gaps)
    if columnar:
        return _collect_table(seed_rows, columns, rows, ctx, collect)
    frames.append(_records_frame(rows, typed))
    return _finish(frames, ctx, typed)


def _data_progress(ctx: ReadContext, offsets: Offsets, progress_position: str | None, end_proven: bool | None,
                   newest_ts: int) -> dict[str, Any]:
    """The progress row of a data partition's read (``newest_ts``: the newest timestamp of its
    batches that passed their CRC, -1: none)."""
    prog = progress_event(topic=ctx.topic, partition=ctx.partition, high_watermark=offsets.high_watermark,
                          lso=offsets.lso, log_start_offset=offsets.log_start_offset,
                          source_position=progress_position, **ctx.common)
    if end_proven is not None:
        prog["end_proven"] = end_proven
    if newest_ts >= 0:
        prog["last_ts"] = newest_ts
    return prog


def data_reads_events(
    reads: Sequence[tuple[ReadContext, Sequence[dict[str, Any]], Offsets | None, str | None, bool | None]],
    cols: dict[str, np.ndarray],
    key: np.ndarray,
    position_format: str,
    collect: EventTable,
) -> list[list[dict[str, Any]]]:
    """:func:`data_partition_events` of many reads of data partitions at once, gathered into
    ``collect``: the same rows as ``data_partition_events(ctx, [BatchPiece(cols_i, f"{topic}-
    {partition}", position_format)], gaps=..., broker=..., progress_position=..., end_proven=...,
    collect=collect, progress=broker is not None)`` called for each read in turn, but the spans
    and markers of every read computed and added as one column part, and each read's gap and
    progress rows returned (in read order, stamped) for the caller to add where they belong.

    ``reads``: per read (context, gaps, the broker's offsets or None: no progress row, progress
    position, end_proven); ``cols``: the batch tables of every read one after another, ``key``
    each batch's read (its index in ``reads``). No seed snapshot (``ctx.snapshot_offset`` None)
    and no first read (``ctx.first_read`` False: the live source never folds before a first marker).
    Why: the live source reads thousands of partitions per trigger with a few batches each, and
    numpy's fixed cost per call, paid per partition, was most of the read stage (issue 23 item 1).
    """
    import pyarrow as pa

    if any(ctx.snapshot_offset is not None or ctx.first_read for ctx, *_ in reads):
        raise ValueError("data_reads_events: a read seeded from a snapshot, or a first read, goes through "
                         "data_partition_events")
    n_reads = len(reads)
    newest = np.full(n_reads, -1, dtype=np.int64)
    if len(key):
        np.maximum.at(newest, key, np.where(cols["crc_valid"] != 0, cols["max_timestamp"], -1).astype(np.int64))
    tails = []
    for (ctx, gaps, broker, position, end_proven), ts in zip(reads, newest.tolist(), strict=True):
        rows = list(gaps)
        if broker is not None:
            rows.append(_data_progress(ctx, broker, position, end_proven, ts))
        stamps = ctx.stamps
        tails.append([{**r, **stamps} for r in rows] if stamps else rows)
    got = data_event_arrays(cols, key, reduce_from=0 if REDUCE_IN_READ else None)
    if got is None:
        return tails
    out, row_key = got
    final: dict[str, Any] = {k: v for k, v in out.items() if k != "first_position"}
    at = pa.array(row_key, type=pa.int64())
    ctxs = [r[0] for r in reads]

    def per_read(values: list[Any], typ: Any) -> Any:
        """One value per read as a column of the rows (a scalar when every read has the same)."""
        first = values[0]
        if all(v == first and type(v) is type(first) for v in values):
            return first
        return pa.array(values, type=typ).take(at)

    final["topic"] = per_read([c.topic for c in ctxs], pa.string())
    final["partition"] = per_read([c.partition for c in ctxs], pa.int64())
    final["source"] = per_read([c.source for c in ctxs], pa.string())
    final["cluster"] = per_read([c.cluster for c in ctxs], pa.string())
    final["event_time"] = per_read([c.clock_ms for c in ctxs], pa.int64())
    for name in ("from_log_start", "read_from_zero", "lagging"):
        values = [getattr(c, name) for c in ctxs]
        if any(v is not None for v in values):
            final[name] = per_read(values, pa.bool_())
    if any(c.window_lso is not None for c in ctxs):
        final["lso"] = per_read([c.window_lso for c in ctxs], pa.int64())
    prefix = pa.array([f"{c.topic}-{c.partition}" for c in ctxs], type=pa.string()).take(at)
    head, sep, tail = position_format.partition("{pos}")
    if not head.startswith("{prefix}") or "{" in head[8:] + tail:
        raise ValueError(f"data_reads_events: position format {position_format!r} is not '{{prefix}}...{{pos}}...'")
    import pyarrow.compute as pc

    final["source_position"] = pc.binary_join_element_wise(
        prefix, head[8:], pc.cast(pa.array(out["first_position"], type=pa.int64()), pa.string()), tail, "")
    collect.add_columns(len(final["kind"]), final)
    return tails


@dataclass(frozen=True)
class TxnPiece:
    """Decoded ``__transaction_state`` records of one piece of a read, in offset order, with the
    highest partitionLeaderEpoch of its batches (-1: none) and the offset after it (None: unknown)."""

    records: list[dict[str, Any]]
    source_position: str
    leader_epoch: int = -1
    next_offset: int | None = None
    reduced: bool = False  # already what reduce_coordinator_records keeps (udfs.txn_log.decode_txn_log_reduced)


def txn_partition_events(
    ctx: ReadContext,
    pieces: Sequence[TxnPiece],
    replay: CoordinatorReplay,
    *,
    gaps: Sequence[dict[str, Any]] = (),
    broker: Offsets | None = None,
    log_start_offset: int | None = None,
    progress_position: str | None = None,
    typed: bool = True,
    end_proven: bool | None = None,
    collect: EventTable | None = None,
    progress: bool = True,
) -> pd.DataFrame | None:
    """Events of one read of a ``__transaction_state`` partition, ending with its progress row.

    ``replay`` (the records before this read) is advanced in place. Without ``broker`` offsets the
    progress row's high watermark and LSO are the replay's next offset (a coordinator log has no
    open transactions of its own). The progress row's ``last_ts`` is the newest record timestamp
    of the read (null: no record), ``end_proven``, ``collect`` and ``progress`` as for data
    partitions.
    """
    frames: list[pd.DataFrame] = []
    routed: list[dict[str, Any]] = []
    for piece in pieces:
        reduce = REDUCE_IN_READ and not piece.reduced
        records = reduce_coordinator_records(piece.records) if reduce else piece.records
        rows = txn_state_rows(records, partition=ctx.partition, source_position=piece.source_position,
                              topic=ctx.topic, **ctx.common)
        if collect is not None:
            routed += route_coordinator_rows(rows, replay.known)
        else:
            frames.append(_records_frame(route_coordinator_rows(rows, replay.known), typed))
        replay.advance(piece.leader_epoch, piece.next_offset)
    offsets = broker or Offsets(replay.next_offset, replay.next_offset, log_start_offset)
    prog = progress_event(topic=ctx.topic, partition=ctx.partition, high_watermark=offsets.high_watermark,
                          lso=offsets.lso, log_start_offset=offsets.log_start_offset,
                          source_position=progress_position, **ctx.common)
    prog["coordinator_epoch"] = replay.max_epoch
    prog["txn_partition_count"] = ctx.txn_partition_count
    if end_proven is not None:
        prog["end_proven"] = end_proven
    newest = [r["timestamp"] for piece in pieces for r in piece.records if r.get("timestamp") is not None]
    if newest:
        prog["last_ts"] = max(newest)
    tail = [*gaps, prog] if progress else list(gaps)
    if collect is not None:
        return _collect_table([], [], [*routed, *tail], ctx, collect)
    frames.append(_records_frame(tail, typed))
    return _finish(frames, ctx, typed)


def _records_frame(rows: list[dict[str, Any]], typed: bool) -> pd.DataFrame:
    """Row dicts (``make_row``: every field, mostly None) → a frame. Untyped (``typed=False``) the
    None fields are left out: a column null everywhere costs pandas' concat an element-by-element
    check; ``events.to_frame`` adds the missing columns, null, and types None and NaN alike."""
    if typed:
        return pd.DataFrame.from_records(rows)
    return pd.DataFrame.from_records([{k: v for k, v in r.items() if v is not None} for r in rows])


def _collect_table(seed_rows: list[dict[str, Any]], columns: list[dict[str, Any]], rows: list[dict[str, Any]],
                   ctx: ReadContext, out: EventTable) -> None:
    """:func:`_finish` for a caller gathering many reads column by column: the same rows, stamps
    and order (seed snapshot rows, spans and markers, then gap, progress or coordinator rows)."""
    stamps = ctx.stamps
    snap = ctx.snapshot_offset
    out.add_rows([{**r, **stamps} for r in seed_rows])
    for c in columns:  # spans and markers only
        c.update(stamps)
        if snap is not None:
            c["snapshot_offset"] = snap
        if ctx.window_lso is not None:
            c["lso"] = ctx.window_lso
        out.add_columns(len(c["kind"]), c)
    rows = [{**r, **stamps} for r in rows]
    if snap is not None:
        for r in rows:
            if r["kind"] == "progress":
                r["snapshot_offset"] = snap
    out.add_rows(rows)


def _finish(frames: list[pd.DataFrame], ctx: ReadContext, typed: bool = True) -> pd.DataFrame:
    """The read's rows in one frame, typed by ``events.to_frame`` unless ``typed=False`` (a caller
    that reads several partitions types their concatenation once: to_frame's cost is per call)."""
    # pieces come untyped (event_time in ms): typed once here, the fixed cost of to_frame is per call
    out = pd.concat([f for f in frames if len(f)], ignore_index=True)
    if ctx.from_log_start is not None:
        out["from_log_start"] = ctx.from_log_start
    if ctx.read_from_zero is not None:
        out["read_from_zero"] = ctx.read_from_zero
    if ctx.lagging is not None:
        out["lagging"] = ctx.lagging
    if ctx.window_lso is not None:
        out.loc[out["kind"].isin(("data", "marker")), "lso"] = ctx.window_lso
    if ctx.snapshot_offset is not None:
        stamped = out["kind"].isin(("data", "marker", "progress"))
        out.loc[stamped, "snapshot_offset"] = ctx.snapshot_offset
    return to_frame(out) if typed else out
