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

Every row of a read carries ``from_log_start`` (detection.md §4.2) when the source knows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from streaming.events import to_frame
from streaming.normalize import (
    data_events,
    progress_event,
    reduce_coordinator_records,
    route_coordinator_rows,
    snapshot_events,
    txn_state_rows,
)
from udfs.producer_state import PartitionState

# Fold what opens and closes within a read before the state operator sees it
# (normalize.reduce_closed_in_read / reduce_coordinator_records). Off only to compare results.
REDUCE_IN_READ = True


@dataclass(frozen=True)
class ReadContext:
    """Where a read's rows come from and the clock they carry (detection.md §2).

    ``from_log_start``: the partition's reading began at its log start offset and no snapshot
    stands in for earlier history; None leaves the column unset.
    """

    topic: str
    partition: int
    source: str
    cluster: str
    clock_ms: int
    from_log_start: bool | None = None

    @property
    def common(self) -> dict[str, Any]:
        return dict(source=self.source, cluster=self.cluster, event_time_ms=self.clock_ms)


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


@dataclass(frozen=True)
class SnapshotSeed:
    """The producer snapshot a read of a data partition starts from (detection.md §1)."""

    entries: list[dict[str, Any]]
    offset: int
    source_position: str


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
) -> pd.DataFrame:
    """Events of one read of a data partition, ending with its progress row.

    ``state``: the partition replay up to where this read starts (seeded from ``seed`` by the
    caller when it starts there); the pieces are applied to it (batches with a bad CRC skipped)
    and, unless ``broker`` gives the partition's offsets, it supplies the progress row's high
    watermark (next offset) and LSO. ``seed``: emit the snapshot's entries as events.
    """
    common = ctx.common
    frames: list[pd.DataFrame] = []
    if seed is not None:
        frames.append(snapshot_events(seed.entries, topic=ctx.topic, partition=ctx.partition,
                                      snapshot_offset=seed.offset, source_position=seed.source_position, typed=False,
                                      **common))
    for piece in pieces:
        reduce_from = (seed.offset if seed is not None else 0) if REDUCE_IN_READ else None
        frames.append(data_events(piece.cols, topic=ctx.topic, partition=ctx.partition,
                                  source_position=piece.source_position, position_format=piece.position_format,
                                  reduce_from=reduce_from, typed=False, **common))
        if state is not None:
            state.apply(piece.cols, piece.cols["crc_valid"] != 0)
    if broker is not None:
        offsets = broker
    elif state is not None:
        offsets = Offsets(state.next_offset, state.lso(state.next_offset), log_start_offset)
    else:
        raise ValueError("data_partition_events needs the broker's offsets or a partition replay")
    prog = progress_event(topic=ctx.topic, partition=ctx.partition, high_watermark=offsets.high_watermark,
                          lso=offsets.lso, log_start_offset=offsets.log_start_offset,
                          source_position=progress_position, **common)
    frames.append(pd.DataFrame.from_records([*gaps, prog]))
    return _finish(frames, ctx)


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


@dataclass(frozen=True)
class TxnPiece:
    """Decoded ``__transaction_state`` records of one piece of a read, in offset order, with the
    highest partitionLeaderEpoch of its batches (-1: none) and the offset after it (None: unknown)."""

    records: list[dict[str, Any]]
    source_position: str
    leader_epoch: int = -1
    next_offset: int | None = None


def txn_partition_events(
    ctx: ReadContext,
    pieces: Sequence[TxnPiece],
    replay: CoordinatorReplay,
    *,
    gaps: Sequence[dict[str, Any]] = (),
    broker: Offsets | None = None,
    log_start_offset: int | None = None,
    progress_position: str | None = None,
) -> pd.DataFrame:
    """Events of one read of a ``__transaction_state`` partition, ending with its progress row.

    ``replay`` (the records before this read) is advanced in place. Without ``broker`` offsets the
    progress row's high watermark and LSO are the replay's next offset (a coordinator log has no
    open transactions of its own).
    """
    frames: list[pd.DataFrame] = []
    for piece in pieces:
        records = reduce_coordinator_records(piece.records) if REDUCE_IN_READ else piece.records
        rows = txn_state_rows(records, partition=ctx.partition, source_position=piece.source_position,
                              topic=ctx.topic, **ctx.common)
        frames.append(pd.DataFrame.from_records(route_coordinator_rows(rows, replay.known)))
        replay.advance(piece.leader_epoch, piece.next_offset)
    offsets = broker or Offsets(replay.next_offset, replay.next_offset, log_start_offset)
    prog = progress_event(topic=ctx.topic, partition=ctx.partition, high_watermark=offsets.high_watermark,
                          lso=offsets.lso, log_start_offset=offsets.log_start_offset,
                          source_position=progress_position, **ctx.common)
    prog["coordinator_epoch"] = replay.max_epoch
    frames.append(pd.DataFrame.from_records([*gaps, prog]))
    return _finish(frames, ctx)


def _finish(frames: list[pd.DataFrame], ctx: ReadContext) -> pd.DataFrame:
    # pieces come untyped (event_time in ms): typed once here, the fixed cost of to_frame is per call
    out = pd.concat([f for f in frames if len(f)], ignore_index=True)
    if ctx.from_log_start is not None:
        out["from_log_start"] = ctx.from_log_start
    return to_frame(out)
