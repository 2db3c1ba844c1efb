"""``segments`` source: a broker-shaped log directory as a Spark stream or batch (PySpark 4.2+
Python Data Source API). Thin glue over :mod:`streaming.sources.log_layout` (list),
:mod:`streaming.sources.logdir` (read, decode) and :mod:`streaming.partition_read` (events).

A read, call by call (``SegmentsBatchReader.read`` / ``SegmentsStreamReader.read`` of one input
partition, per topic-partition of the group; enforced by ``tests/test_layers.py``):

1. list — ``log_layout.parse_partition_dir``, ``log_layout.list_files`` (``segments``,
   ``snapshots``, sizes, the ranges before the read's start): directory listings only;
2. read — ``logdir.read_partition``: ``log_start_offset`` (checkpoint file), ``_seed_at`` /
   ``newest_snapshot`` (snapshot files), ``end_state``, the prefix replay (``_data_prefix`` /
   ``_txn_prefix``, memoised per worker) and each planned chunk's bytes (``_read``/``_scan``);
3. decode — called by step 2 alone, chunk by chunk, never calling back: ``udfs.checkpoint``,
   ``udfs.snapshot`` (``newest_readable_snapshot`` → ``read_snapshot_file`` →
   ``decode_snapshot``), ``udfs.record_batch.scan_batches``, ``udfs.txn_log.decode_txn_log_reduced``,
   and the replays (``udfs.producer_state.replay_batches``, ``CoordinatorReplay.fold``); step 2
   returns a :class:`~streaming.sources.logdir.PartitionRead`;
4. events — :func:`read_events` → ``partition_read.data_partition_events`` /
   ``txn_partition_events`` → ``normalize`` (spans, markers, coordinator rows, gaps, progress),
   gathered column by column into the task's ``event_table.EventTable`` (one Arrow batch per task,
   no pandas; :func:`read_range`, for callers that want a frame, types it with ``events.to_frame``).

No step calls a step before it, so no module is entered again once the read has moved on.

Options: ``path`` (required), ``cluster`` (default ``default``), ``as_of`` (epoch ms: fixed
clock), ``validate_crc`` (default true), ``max_bytes_per_trigger`` (per data partition;
``__transaction_state`` is never throttled), ``txn_state_partitions`` (the
``__transaction_state`` partition count, config ``[coordinator] txn_state_partitions``, default 50),
``clock_skew_tolerance_ms`` (the clock's skew guard, default 1 h: detection.md §2),
``input_partitions`` (how many Spark input partitions a micro-batch's reads are packed into,
default 3 x the driver's CPU count: see below).

Input partitions: the topic-partitions to read are packed, in order, into at most
``input_partitions`` contiguous groups of about equal bytes (:func:`pack`); one task reads a group
partition by partition, exactly as it would read them one per task, and types the rows of the
whole group once (a typing pass has a fixed cost per call whatever the row count, and every
Spark task is a Python worker round trip: 115 one-partition tasks on the issue-12 dataset).

Offsets: ``{"parts": {"<topic>-<partition>": [segment base, byte position, newest ts read,
seed snapshot offset]}, "clock": ms}``; the seed snapshot (-1: none) is chosen at the
partition's first plan and kept, so every read of it stamps the same ``snapshot_offset``. Every row of a micro-batch carries the clock as ``event_time``.

The clock is the newest timestamp read so far (detection.md §2), or ``as_of``, with one guard:
while a data partition still has a backlog (``max_bytes_per_trigger``), the clock may not pass
the newest timestamp read from it, because a transaction there may be closed by a marker not
read yet. Coordinator partitions are not limited in bytes but are read exactly up to the clock:
never behind it (no "coordinator forgot it" from a lagging view) and never ahead of the data
(no "finished without this partition" before the partition's marker was read).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

from streaming.clock_guard import DEFAULT_TOLERANCE_MS, guarded_clock
from streaming.events import spark_schema
from streaming.sources.log_layout import (
    TXN_TOPIC,
    Chunk,
    PartitionDir,
    chunks_between,
    list_files,
    list_partitions,
    parse_partition_dir,
)
from streaming.sources.logdir import PartitionRead, plan_partition, read_partition

# Step 4 (events: normalize, partition_read, event_table) imports pandas and pyarrow (~0.35 CPU s).
# Only the reading task needs it: the Python processes Spark starts to plan (the schema, the
# streaming source runner, the read planner) import this module too, and never read (issue 23).
if TYPE_CHECKING:
    import pandas as pd

    from streaming.event_table import EventTable


def plan_offsets(opts: dict[str, Any], start: dict, max_bytes: int | None) -> dict:
    """Driver side: where each partition's next read ends, and the micro-batch clock."""
    parts = {k: list(v) for k, v in start.get("parts", {}).items()}
    clock = start.get("clock", -1)
    newest_by: dict[str, int] = {}  # per partition, for the skew guard (streaming.clock_guard)
    lagging: list[int] = []
    coord = []
    for part in list_partitions(opts["path"]):
        if part.is_txn_state:
            coord.append(part)
            continue
        pos = parts.get(part.name)
        plan = plan_partition(part, tuple(pos[:2]) if pos else None, max_bytes)
        seen = max(pos[2] if pos else -1, plan.max_ts if plan.max_ts is not None else -1)
        if plan.end is not None:
            parts[part.name] = [*plan.end, seen, _seed_of(pos, plan.seed_offset)]
        newest_by[part.name] = seen
        if plan.more:
            lagging.append(seen)
    if lagging:
        bound = min(lagging) if opts["as_of"] is None else min(min(lagging), opts["as_of"])
        clock = max(clock, bound)
    elif opts["as_of"] is not None:
        clock = opts["as_of"]
    else:
        for part in coord:  # nothing lags: the coordinator's newest record is input time too
            pos = parts.get(part.name)
            plan = plan_partition(part, tuple(pos[:2]) if pos else None)
            newest_by[part.name] = max(pos[2] if pos else -1, plan.max_ts if plan.max_ts is not None else -1)
        # the newest timestamp that is not an outlier (detection.md §2, revision 3)
        guarded, _outliers = guarded_clock(newest_by, tolerance_ms=opts.get("skew_tolerance_ms", DEFAULT_TOLERANCE_MS))
        clock = max(clock, guarded)
    for part in coord:
        pos = parts.get(part.name)
        plan = plan_partition(part, tuple(pos[:2]) if pos else None, cutoff_ts=clock)
        if plan.end is not None:
            parts[part.name] = [*plan.end, max(pos[2] if pos else -1, plan.max_ts or -1)]
    return {"parts": parts, "clock": clock}


def _seed_of(pos: list[int] | None, planned: int) -> int:
    """The seed snapshot offset kept in a partition's position (the first plan's choice)."""
    return pos[3] if pos is not None and len(pos) > 3 else planned


class SegmentsPartition(InputPartition):
    def __init__(self, part_path: str, chunks: list[Chunk], start: list[int] | None, end: list[int] | None,
                 clock: int, seed_offset: int | None = None) -> None:
        self.part_path = part_path
        self.chunks = chunks
        self.start = start
        self.end = end
        self.clock = clock
        self.seed_offset = seed_offset


class SegmentsGroup(InputPartition):
    """Several planned partition reads done by one task, in order (see the module docstring)."""

    def __init__(self, parts: list[SegmentsPartition]) -> None:
        self.parts = parts


#: How much more a byte of ``__transaction_state`` costs to read than a byte of a data partition:
#: its records are decoded whole (``udfs.txn_log``), a data partition's batches by their headers.
#: Measured on the issue-12 dataset (py-spy of ``scan --engine spark``, 2 read tasks): the 50
#: coordinator partitions' 29 MB took 71 samples, the data partitions' 128 MB ~98, ~3x per byte.
#: Packing by plain bytes gave the task holding them twice the other's work (112 vs 57 samples).
TXN_STATE_BYTE_WEIGHT = 3


def _weight(p: SegmentsPartition) -> int:
    return TXN_STATE_BYTE_WEIGHT if os.path.basename(p.part_path).startswith(TXN_TOPIC + "-") else 1


def pack(parts: list[SegmentsPartition], groups: int) -> list[SegmentsGroup]:
    """``parts`` in order, cut into at most ``groups`` contiguous groups of about equal read cost:
    bytes, those of ``__transaction_state`` weighted by :data:`TXN_STATE_BYTE_WEIGHT`."""
    if not parts:
        return []
    sizes = [sum(c.end - c.start for c in p.chunks) * _weight(p) + 1 for p in parts]
    target = sum(sizes) / max(1, groups)
    out: list[list[SegmentsPartition]] = [[]]
    acc = 0.0
    for p, size in zip(parts, sizes, strict=True):
        if out[-1] and acc + size / 2 > target * len(out) and len(out) < groups:
            out.append([])
        out[-1].append(p)
        acc += size
    return [SegmentsGroup(g) for g in out]


def _default_groups() -> int:
    return 3 * (os.cpu_count() or 1)


def _options(options: dict[str, str]) -> dict[str, Any]:
    path = options.get("path")
    if not path:
        raise ValueError("segments source: option 'path' (a log directory) is required")
    if not os.path.isdir(path):
        raise ValueError(f"segments source: path {path!r} is not a directory")
    as_of = options.get("as_of")
    mb = options.get("max_bytes_per_trigger")
    n = options.get("txn_state_partitions")
    tol = options.get("clock_skew_tolerance_ms")
    return {
        "skew_tolerance_ms": int(tol) if tol not in (None, "", "None") else DEFAULT_TOLERANCE_MS,
        "txn_partitions": int(n) if n not in (None, "", "None") else 50,
        "path": path,
        "cluster": options.get("cluster", "default"),
        "as_of": int(as_of) if as_of not in (None, "", "None") else None,
        "validate_crc": options.get("validate_crc", "true").lower() != "false",
        "max_bytes": int(mb) if mb not in (None, "", "None") else None,
        "groups": max(1, int(options.get("input_partitions") or _default_groups())),
    }


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
    ``typed=False``: see ``partition_read.data_partition_events``): the partition's files as
    listed (``part``, ``chunks``: :mod:`streaming.sources.log_layout`), read and decoded
    (:func:`streaming.sources.logdir.read_partition`), then turned into events
    (:func:`read_events`); see the module docstring for the call trace.

    ``seed_offset``: the snapshot the partition's first plan chose (-1: none; None: choose the
    newest readable one now). ``txn_partition_count``: ``__transaction_state``'s partition count
    for its progress rows (config ``txn_state_partitions``).
    """
    from streaming.partition_read import REDUCE_IN_READ

    files = list_files(part, start)
    read = read_partition(files, chunks, start=start, end=end, validate_crc=validate_crc, seed_offset=seed_offset,
                          reduce=REDUCE_IN_READ)
    return read_events(read, cluster=cluster, clock_ms=clock_ms, source=source,
                       txn_partition_count=txn_partition_count, typed=typed)


def read_events(read: PartitionRead, *, cluster: str, clock_ms: int, source: str = "segments",
                txn_partition_count: int | None = None, typed: bool = True,
                collect: EventTable | None = None) -> pd.DataFrame | None:
    """Step 4 of a log-dir read: a read and decoded partition (:class:`PartitionRead`) → its events
    (appended to ``collect`` instead when given)."""
    from streaming.normalize import gap_event
    from streaming.partition_read import (
        BatchPiece,
        Offsets,
        ReadContext,
        TxnPiece,
        data_partition_events,
        txn_partition_events,
    )

    part = read.part
    common = dict(source=source, cluster=cluster, event_time_ms=clock_ms)
    gaps = []
    for problem, where in read.gaps:
        g = gap_event(problem, topic=part.topic, partition=part.partition, **common)
        if where is not None:
            g["source_position"] = where
        gaps.append(g)
    ctx = ReadContext(part.topic, part.partition, source, cluster, clock_ms, from_log_start=read.from_log_start,
                      read_from_zero=read.read_from_zero, snapshot_offset=read.snapshot_offset,
                      txn_partition_count=txn_partition_count if part.is_txn_state else None,
                      first_read=read.first_read)
    if part.is_txn_state:
        pieces = [TxnPiece(*r, reduced=read.reduced) for r in read.records]
        return txn_partition_events(ctx, pieces, read.replay, gaps=gaps, log_start_offset=read.log_start_offset,
                                    progress_position=read.progress_position, typed=typed,
                                    end_proven=read.end_proven, collect=collect)
    # A backlog (max_bytes_per_trigger) is read through the micro-batch's clock but not to the
    # partition's end: its verdicts are published unverified until the read that reaches it.
    return data_partition_events(ctx, [BatchPiece(*b) for b in read.batches], seed=read.seed, gaps=gaps,
                                 broker=Offsets(read.high_watermark, read.lso, read.log_start_offset),
                                 progress_position=read.progress_position, typed=typed, end_proven=read.end_proven,
                                 collect=collect)


def _read_partition(p: SegmentsPartition | SegmentsGroup, opts: dict[str, Any]) -> Iterator[Any]:
    """The task's reads, one partition after the other as :func:`read_range` does them, gathered
    column by column (:class:`EventTable`) and yielded as one Arrow batch: no pandas on the way."""
    from streaming.event_table import EventTable
    from streaming.partition_read import REDUCE_IN_READ

    table = EventTable()
    for one in p.parts if isinstance(p, SegmentsGroup) else [p]:
        _read_into(one, opts, table, REDUCE_IN_READ)
    if len(table):
        yield table.to_arrow()


def _read_into(one: SegmentsPartition, opts: dict[str, Any], table: EventTable, reduce: bool) -> None:
    """One planned read of one partition, its events appended to ``table``."""
    part = parse_partition_dir(one.part_path)
    start = tuple(one.start) if one.start else None
    read = read_partition(list_files(part, start), one.chunks, start=start,
                          end=tuple(one.end) if one.end else None, validate_crc=opts["validate_crc"],
                          seed_offset=one.seed_offset, reduce=reduce)
    read_events(read, cluster=opts["cluster"], clock_ms=one.clock, txn_partition_count=opts["txn_partitions"],
                collect=table)


class SegmentsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = _options(options)
        self._target: dict[str, Any] | None = None

    def initialOffset(self) -> dict:
        return {"parts": {}, "clock": -1}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._compute(self.initialOffset(), unlimited=True)

    def _compute(self, start: dict, unlimited: bool) -> dict:
        """Next offsets and the clock of the micro-batch (see module docstring)."""
        return plan_offsets(self.opts, start, None if unlimited else self.opts["max_bytes"])

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        if start is None:
            start = self.initialOffset()
        if self._target is not None and self.opts["max_bytes"] is None and start == self.initialOffset():
            # AvailableNow's first micro-batch: planning again would be the very call that made the
            # target (same start, no byte limit: plan_offsets(opts, initial offset, None)) over
            # the same files, capped by the target. Over a log dir that did not change since the
            # query started that is the target itself; one that did is read up to the target
            # (what existed at the start), as the cap does. One header scan of the whole log dir
            # (~0.25 s on the 157 MB issue-12 dataset) instead of two.
            return {"parts": {k: list(v) for k, v in self._target["parts"].items()},
                    "clock": self._target["clock"]}
        unlimited = isinstance(limit, ReadAllAvailable) and self.opts["max_bytes"] is None
        nxt = self._compute(start, unlimited)
        if self._target is not None:
            # AvailableNow: never read past what existed when the query started.
            for name, pos in list(nxt["parts"].items()):
                tgt = self._target["parts"].get(name)
                if tgt is None:
                    nxt["parts"].pop(name)
                elif list(pos[:2]) > list(tgt[:2]):
                    nxt["parts"][name] = tgt
            nxt["clock"] = min(nxt["clock"], self._target["clock"]) if nxt["clock"] >= 0 else nxt["clock"]
        return nxt

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        out = []
        # Rows with event_time before the watermark (initially 0) would be dropped as late.
        clock = max(end.get("clock", -1), 0)
        sparts = start.get("parts", {})
        by_name = {p.name: p for p in list_partitions(self.opts["path"])}
        for name, epos in end.get("parts", {}).items():
            spos = sparts.get(name)
            part = by_name.get(name)
            if part is None or (spos is not None and list(spos[:2]) == list(epos[:2])):
                continue
            chunks = chunks_between(part, tuple(spos[:2]) if spos else None, tuple(epos[:2]))
            out.append(SegmentsPartition(part.path, chunks, spos[:2] if spos else None, list(epos[:2]), clock,
                                         epos[3] if len(epos) > 3 else None))
        return pack(out, self.opts["groups"])

    def read(self, partition: SegmentsPartition) -> Iterator[Any]:
        return _read_partition(partition, self.opts)

    def commit(self, end: dict) -> None:
        pass


class SegmentsBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = _options(options)

    def partitions(self) -> list[InputPartition]:
        plans = []
        newest: dict[str, int] = {}
        for part in list_partitions(self.opts["path"]):
            plan = plan_partition(part, None)
            if plan.end is None:
                continue
            plans.append((part, plan))
            newest[part.name] = plan.max_ts if plan.max_ts is not None else -1
        # the newest timestamp that is not an outlier (detection.md §2, revision 3), unless as_of
        clock = self.opts["as_of"] if self.opts["as_of"] is not None else \
            guarded_clock(newest, tolerance_ms=self.opts["skew_tolerance_ms"])[0]
        return pack([SegmentsPartition(p.path, plan.chunks, None, list(plan.end), max(clock, 0), plan.seed_offset)
                     for p, plan in plans], self.opts["groups"])

    def read(self, partition: SegmentsPartition) -> Iterator[Any]:
        return _read_partition(partition, self.opts)

    def read_in_turn(self) -> Iterator[Any] | None:
        """The in-process engine's read (``streaming.local_engine.read_source``) when the clock is
        fixed (``as_of``): each partition planned as :meth:`partitions` plans it and read at once
        as :meth:`read` reads it, before the next one is planned, all into one Arrow batch (the
        same rows, in the same order). Why: planning every partition first keeps every file's
        batch table (kept for its read, ``logdir.PLAN_SCANS``) until the reads, ~90 bytes per
        batch; read in turn, each is used while still in the CPU cache and its memory is
        reused by the next file. None without ``as_of``: the clock then needs every partition's
        plan first (the newest timestamp, detection.md §2)."""
        if self.opts["as_of"] is None:
            return None
        return self._in_turn(max(self.opts["as_of"], 0))

    def _in_turn(self, clock: int) -> Iterator[Any]:
        from streaming.event_table import EventTable
        from streaming.partition_read import REDUCE_IN_READ

        table = EventTable()
        for part in list_partitions(self.opts["path"]):
            plan = plan_partition(part, None)
            if plan.end is not None:
                _read_into(SegmentsPartition(part.path, plan.chunks, None, list(plan.end), clock, plan.seed_offset),
                           self.opts, table, REDUCE_IN_READ)
        if len(table):
            yield table.to_arrow()


class SegmentsDataSource(DataSource):
    """``spark.readStream.format("segments").option("path", DIR)`` (or ``spark.read``)."""

    @classmethod
    def name(cls) -> str:
        return "segments"

    def schema(self) -> Any:
        return spark_schema()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SegmentsStreamReader(dict(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        return SegmentsBatchReader(dict(self.options))
