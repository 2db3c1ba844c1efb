"""The kafka source's executor side: a planned group of partition ranges (kafka_partitions.py)
becomes event rows. Reads go through multi-partition Fetch requests (one per leader and round);
data partitions become batch-header events, ``__transaction_state`` partitions coordinator events
(their id -> producer map replayed from the compacted log's start when this process has no memo);
every partition read up to its planned end ends with its progress row, a partition unreadable
now with an ``unavailable:`` gap row and none (see kafka.py, Availability).

A group's rows are gathered column by column (:class:`streaming.event_table.EventTable`: the spans
and markers of all its data partitions as one set of numpy columns, then the gap, progress and
coordinator rows) and typed once into the Arrow batch the source yields (:func:`read_arrow`): no
pandas frame per partition nor a concat per group, and no numpy work per partition either (a
round's Fetch answers are scanned together, the spans and markers of every data partition
computed at once: ``partition_read.data_reads_events``), because at 200,000 partitions a trigger
reads a few thousand partitions of a few batches each (issue 23 item 1). :func:`read_partition` gives the same rows as a typed frame
(``events.from_arrow``) for callers that want one."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from streaming.availability import UNAVAILABLE_PREFIX, unavailable_reason
from streaming.event_table import EventTable
from streaming.events import from_arrow
from streaming.normalize import gap_event, lso_passed_event, progress_event
from streaming.partition_read import (
    CoordinatorReplay,
    Offsets,
    ReadContext,
    TxnPiece,
    data_reads_events,
    txn_partition_events,
)
from streaming.sources.kafka_clients import client_for
from streaming.sources.kafka_options import TXN_TOPIC
from streaming.sources.kafka_partitions import KafkaGroup, KafkaPartition
from streaming.sources.kafka_plan_state import Reset
from streaming.sources.kafka_wire import KafkaUnavailable, KafkaWire, KafkaWireError
from udfs.model import BATCH_COLUMNS
from udfs.record_batch import BatchScan, empty_columns, scan_batches, scan_batches_many
from udfs.txn_log import decode_txn_log_segment

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa

log = logging.getLogger(__name__)

# Per-process memo for coordinator partitions: transactional id → producer id and the highest
# leader epoch, up to an offset, so tombstones reach the producer id they concern.
_TXN_MEMO: dict[tuple, tuple[int, CoordinatorReplay]] = {}


class _RangeRead:
    """One partition's planned range [start, end), read by one or more Fetch answers.

    Offsets advance only over data read or proven gone (issue 20 item 1). Every offset of the
    range is read, or proven gone by the broker (OFFSET_OUT_OF_RANGE with a log start above it: a
    gap row naming both offsets), or **not read yet**: when the leader is lost after planning, or
    an answer holds no records below the planned end (tiered storage's ``DelayedRemoteFetch``
    expiring, a new leader whose high watermark still lags), the read is retried with a metadata
    refresh and doubling backoff (``empty_fetch_retries`` times, and on for as long as
    ``ride_through_ms`` lasts: ``run --once``); then the rest ``[offset, end)`` becomes one
    ``unavailable:`` gap row whose ``first_offset`` is where reading stopped, the partition gets
    no progress row, and the next plan reads it again from there (streaming/sources/kafka_unread.py).
    A batch larger than the fetch size is fetched again with room for it.
    ``reset`` (from planning, see ``kafka_planner.plan_reset``) is a gap to report before reading.
    ``last`` is the last Fetch answer; ``unavailable`` is set when the rest was not read (then no
    progress row may be emitted for it).
    """

    def __init__(self, opts: dict[str, Any], topic: str, partition: int, start: int, end: int,
                 common: dict[str, Any], reset: Reset | None = None) -> None:
        self.opts, self.topic, self.partition, self.end, self.common = opts, topic, partition, end, common
        # each answer's batch table and which of its batches are in the range (filtered once per
        # group, by _read_table, not per answer)
        self.scans: list[tuple[dict[str, np.ndarray], np.ndarray]] = []
        self.raws: list[bytes] = []
        self.gaps: list[dict[str, Any]] = []
        self.last: Any = None
        self.offset = start
        self.empty_answers = 0
        self.unavailable = False
        self.max_bytes = opts["fetch_max_bytes"]
        self.deadline = time.monotonic() + opts.get("ride_through_ms", 0) / 1000
        self.retries = 0  # retries after the first failure to read the rest (ride-through)
        self.done = start >= end
        if reset is not None:
            self._gap(reset.reason, reset.first, reset.last)

    def _gap(self, reason: str, first: int | None, last: int | None = None, crc: bool = False) -> None:
        g = gap_event(reason, topic=self.topic, partition=self.partition, first_offset=first,
                      last_offset=last, **self.common)
        if crc:
            g["crc_failed"] = True  # never believed (RecordBatch.ensureValid): the enrichment weighs it
        self.gaps.append(g)

    def fetch_alone(self, w: KafkaWire) -> None:
        """One single-partition Fetch (KafkaWire.fetch: every fault handled, bounded retries)."""
        try:
            res = w.fetch(self.topic, self.partition, self.offset, self.max_bytes)
        except KafkaUnavailable as exc:
            # became unreadable after planning and stayed so through the bounded retries
            self.not_read(w, unavailable_reason(exc.last_error or str(exc)))
            return
        self.take(w, res)

    def not_read(self, w: KafkaWire, why: str) -> None:
        """The rest ``[offset, end)`` could not be read now: ride through while ``ride_through_ms``
        lasts (backoff, metadata refresh, read again), else hand it to the next plan."""
        if time.monotonic() < self.deadline:
            self.retries += 1
            if self.retries == 1:
                log.warning("kafka source: %s-%s: offsets %d..%d not read (%s); retrying for up to %.0f s",
                            self.topic, self.partition, self.offset, self.end - 1, why,
                            max(self.deadline - time.monotonic(), 0))
            time.sleep(min(self.opts["retry_backoff_ms"] * 2 ** min(self.retries - 1, 10), 5000,
                           max(self.deadline - time.monotonic(), 0) * 1000) / 1000)
            try:
                w.refresh_metadata([self.topic])
            except KafkaWireError:
                pass  # the next fetch reports it
            return
        self.became_unavailable(why)

    def became_unavailable(self, error: str) -> None:
        """The rest ``[offset, end)`` cannot be read now: one ``unavailable:`` gap row from where
        reading stopped (the next plan reads it again from there: kafka_unread.py), no progress row."""
        why = error if error.startswith(UNAVAILABLE_PREFIX) else unavailable_reason(error)
        log.warning("kafka source: %s-%s: offsets %d..%d not read (%s); read again from offset %d next trigger",
                    self.topic, self.partition, self.offset, self.end - 1, why[len(UNAVAILABLE_PREFIX):],
                    self.offset)
        self._gap(f"{why}; offsets {self.offset}..{self.end - 1} not read yet: read again from offset "
                  f"{self.offset} next trigger", self.offset, self.end - 1)
        self.unavailable = self.done = True

    def take(self, w: KafkaWire, res: Any, scan: BatchScan | None = None) -> None:
        """Fold one Fetch answer for this partition (at ``self.offset``) into the read (``scan``:
        its records already scanned, by :func:`_scan_answers`)."""
        opts, topic, partition, offset, end = self.opts, self.topic, self.partition, self.offset, self.end
        self.last = res
        if res.deleted:
            self._gap(f"{topic}-{partition} was deleted; stopped reading it at offset {offset}", offset, end - 1)
            self.done = True
            return
        if res.out_of_range:
            ls = res.log_start_offset
            if ls is None or ls < 0 or ls <= offset:
                # not proven gone: past this leader's log end (LocalLog.read), a leader behind
                self.not_read(w, f"OFFSET_OUT_OF_RANGE at offset {offset} with log start {ls} at or below it "
                                  "(the leader's log ends before it)")
                return
            self._gap(f"retention deleted offsets {offset}..{ls - 1} before they were read; continuing at the log "
                      f"start {ls}", offset, ls - 1)
            self.offset = ls
            self.done = ls >= end
            return
        data = res.records or b""
        if not data:
            if self.empty_answers < opts["empty_fetch_retries"]:
                self.empty_answers += 1
                _wait_for_high_watermark(w, opts, topic, self.empty_answers)
                return
            self.not_read(w, f"no records at offset {offset} after {self.empty_answers + 1} fetches (high watermark "
                              f"{res.high_watermark}, planned end {end}: a new leader not caught up, or a tiered-"
                              f"storage read that timed out)")
            return
        self.empty_answers = 0
        if scan is None:
            scan = scan_batches(data, validate_crc=opts["validate_crc"], source=f"{topic}-{partition}",
                                allow_partial_tail=True)
        cols = scan.columns
        keep = (cols["last_offset"] >= offset) & (cols["base_offset"] < end)
        n_keep = int(keep.sum())
        chain_broken = any(not e.reason.startswith("CRC-32C") and not e.reason.startswith("control record")
                           for e in scan.errors)
        for e in scan.errors:
            self._gap(f"{e.reason} (fetch at offset {offset})", e.base_offset if e.base_offset is not None else offset,
                      crc=e.crc)
        if n_keep:
            self.scans.append((cols, keep))
            self.raws.append(data)
            self.offset = int(cols["last_offset"][keep].max()) + 1
        # magic 0/1 entries (pre-0.11 message format) cannot be transactional: step over them by
        # their offsets, so that a fetch holding only legacy entries (one response never spans
        # two segments) moves the read on instead of ending it
        legacy_next = scan.legacy_last_offset + 1 if scan.legacy_last_offset is not None else None
        stepped = legacy_next is not None and legacy_next > self.offset
        if stepped:
            self.offset = legacy_next
        if chain_broken:
            # The batch chain is unreadable past this point: skip to the planned end, loudly.
            self._gap(f"unreadable bytes: offsets {self.offset}..{end - 1} skipped", self.offset, end - 1)
            self.done = True
        elif (not n_keep and not stepped and not scan.errors and not whole_batch(data)
              and self.max_bytes < _MAX_FETCH_BYTES):
            # only part of a batch fits the fetch size (pre-KIP-74 brokers, partition limits):
            # ask again with room for it, never skip it
            need = 12 + int.from_bytes(data[8:12], "big", signed=True) if len(data) >= 12 else 2 * self.max_bytes
            self.max_bytes = min(max(2 * self.max_bytes, need), _MAX_FETCH_BYTES)
        elif not n_keep and not stepped:
            if not (len(cols["last_offset"]) and int(cols["base_offset"].min()) >= end):
                self._gap(f"no whole readable batch at offset {offset} in {len(data)} bytes; offsets "
                          f"{offset}..{end - 1} not read", offset, end - 1)
            self.done = True  # (or the next batch starts at or past the planned end: nothing between)
        else:
            self.done = self.offset >= end


def _read_ranges(w: KafkaWire, reads: list[_RangeRead]) -> None:
    """Read every range to its end: one multi-partition Fetch per round for all ranges still
    open (KafkaWire.fetch_many, one request per leader); a partition whose answer was not a
    plain success is fetched alone, with the full fault handling of KafkaWire.fetch."""
    starved: list[_RangeRead] = []
    while True:
        todo = [r for r in reads if not r.done]
        if not todo:
            return
        # partitions the last round's byte budget did not reach go first (KIP-74 guarantees the
        # first partition of a response one whole batch, the others only what is left)
        todo.sort(key=lambda r: r not in starved)
        answers = w.fetch_many([(r.topic, r.partition, r.offset) for r in todo], todo[0].opts["fetch_max_bytes"])
        scans = _scan_answers(todo, answers)
        starved, moved = [], False
        for r in todo:
            res = answers.get((r.topic, r.partition))
            if res is None and w.stalled(r.topic, r.partition):
                # its leader did not answer within broker_timeout_ms: unavailable now rather
                # than holding up this micro-batch (and so every other broker's partitions)
                r.not_read(w, f"leader of {r.topic}-{r.partition} did not answer within "
                              f"{r.opts['broker_timeout_ms']} ms (broker_timeout_ms)")
                moved = True
            elif res is None:
                r.fetch_alone(w)
                moved = True
            elif not whole_batch(res.records) and res.high_watermark > r.offset:
                starved.append(r)  # cut by the request's max_bytes, not an empty log: next round
            else:
                r.take(w, res, scans.get((r.topic, r.partition)))
                moved = True
        if not moved:
            for r in starved:
                r.fetch_alone(w)
            starved = []


def _scan_answers(todo: list[_RangeRead], answers: dict[tuple[str, int], Any]) -> dict[tuple[str, int], BatchScan]:
    """The batch tables of a round's answers with records, scanned together
    (``udfs.record_batch.scan_batches_many``: the same tables and errors as one scan per answer,
    the numpy work done once per round instead of once per partition)."""
    got = [(r, answers[(r.topic, r.partition)]) for r in todo if (r.topic, r.partition) in answers]
    got = [(r, res) for r, res in got if res.records]
    if not got:
        return {}
    scans = scan_batches_many([res.records for _, res in got], validate_crc=got[0][0].opts["validate_crc"],
                              sources=[f"{r.topic}-{r.partition}" for r, _ in got], allow_partial_tail=True)
    return {(r.topic, r.partition): sc for (r, _), sc in zip(got, scans, strict=True)}


_MAX_FETCH_BYTES = 1 << 30  # a fetch size growing to fit one batch stops here (message.max.bytes is far below)


def whole_batch(records: bytes | None) -> bool:
    """Whether a Fetch answer holds at least one whole batch (12-byte log overhead + batchLength)."""
    if not records or len(records) < 12:
        return False
    return len(records) >= 12 + int.from_bytes(records[8:12], "big", signed=True)


def _fetch_range(w: KafkaWire, opts: dict[str, Any], topic: str, partition: int, start: int, end: int,
                 common: dict[str, Any], reset: Reset | None = None) -> _RangeRead:
    """Fetch [start, end) of one partition (see :class:`_RangeRead`)."""
    r = _RangeRead(opts, topic, partition, start, end, common, reset)
    _read_ranges(w, [r])
    return r


def _wait_for_high_watermark(w: KafkaWire, opts: dict[str, Any], topic: str, attempt: int) -> None:
    """Back off (doubling, at most 5 s), then refresh metadata: leadership may have moved again."""
    time.sleep(min(opts["retry_backoff_ms"] * 2 ** (attempt - 1), 5000) / 1000)
    try:
        w.refresh_metadata([topic])
    except KafkaUnavailable:
        pass  # the next fetch reports it


def read_arrow(part: KafkaPartition | KafkaGroup, opts: dict[str, Any]) -> pa.RecordBatch | None:
    """Executor side: events of one planned read (a partition, or a broker's group) as one Arrow
    batch of ``events.arrow_schema()`` (None: no row), each partition ending with its progress row
    (none when it was or became unavailable)."""
    table = _read_table(part.parts if isinstance(part, KafkaGroup) else [part], opts)
    return table.to_arrow() if len(table) else None


def read_partition(part: KafkaPartition | KafkaGroup, opts: dict[str, Any]) -> pd.DataFrame:
    """:func:`read_arrow` as a typed event frame (``events.to_frame``'s dtypes)."""
    return read_group(part.parts if isinstance(part, KafkaGroup) else [part], opts)


def read_group(parts: list[KafkaPartition], opts: dict[str, Any]) -> pd.DataFrame:
    """The rows of one Spark input partition (the partitions of one leader broker) as a typed
    event frame (see :func:`_read_table`)."""
    table = _read_table(parts, opts)
    return from_arrow(table.to_arrow() if len(table) else None)


def _read_table(parts: list[KafkaPartition], opts: dict[str, Any]) -> EventTable:
    """Executor side: events of one Spark input partition (the partitions of one leader broker).

    Unavailable partitions give their gap row; partitions with nothing new give their progress
    row from the driver's ListOffsets without any Fetch; the rest are read together with
    multi-partition Fetch requests.
    """
    w = client_for(opts)
    rows: list[dict[str, Any]] = []  # single-row results (gaps of unavailable partitions, idle progress)
    reads: list[tuple[KafkaPartition, _RangeRead, Any, str | None]] = []
    templates: dict[int, dict[str, Any]] = {}  # _idle_progress: the progress row's common fields per clock
    for part in parts:
        common = dict(source="kafka", cluster=opts["cluster"], event_time_ms=part.clock)
        t, p = part.topic, part.partition
        if part.unavailable is not None:
            rows.append(gap_event(unavailable_reason(part.unavailable), topic=t, partition=p,
                                  first_offset=part.start if part.start >= 0 else None, **common))
            continue
        if part.closes:
            rows += [lso_passed_event(topic=t, partition=p, producer_id=pid, lso=lso, **common)
                     for pid, lso in part.closes]
        if part.note:
            rows.append(gap_event(part.note, topic=t, partition=p, first_offset=part.start, **common))
        acc = broken = None
        if t == TXN_TOPIC:
            acc, broken, unreadable = _txn_replay(w, opts, part, common)
            if unreadable:  # issue 20 item 8: nothing of it is believed now; read again next plan
                rows.append(gap_event(broken, topic=t, partition=p, first_offset=part.start,
                                      last_offset=part.end - 1 if part.end > part.start else None, **common))
                continue
            if broken is not None:
                rows.append(gap_event(broken, topic=t, partition=p, first_offset=part.start, **common))
        if part.start >= part.end and part.reset is None and part.offsets is not None:
            if broken is None:  # an incomplete coordinator replay is not read up to now: no progress
                rows.append(_idle_progress(part, common, acc, templates))
            continue
        reads.append((part, _RangeRead(opts, t, p, part.start, part.end, common, part.reset), acc, broken))
    _read_ranges(w, [r for _, r, _, _ in reads])
    # every partition's rows gathered column by column and typed once for the whole group:
    # pandas' cost per frame and per concat, paid per partition, dominated a trigger at
    # thousands of partitions read (bench/cluster_scale.py)
    out = EventTable(rows_last=True)
    # the data partitions' spans and markers computed once for the whole group (partition_read.
    # data_reads_events): numpy's fixed cost per call, paid per partition read, was most of the
    # read stage at 200,000 partitions (issue 23 item 1)
    data = [(part, r) for part, r, _, _ in reads if part.topic != TXN_TOPIC]
    tails = iter(_data_events(w, opts, data, out))
    for part, r, acc, broken in reads:
        if part.topic != TXN_TOPIC:
            out.add_rows(next(tails))
            continue
        # a coordinator partition read with a gap (or on an incomplete replay) is incomplete from
        # there on (detection.md §0): no progress row, so the view is never "complete and empty"
        incomplete = broken is not None or bool(r.gaps)
        broker = None if r.unavailable or incomplete else _broker_offsets(w, part.topic, part.partition, r.last)
        _events_of(part, opts, r, acc, broker, out)
    out.add_rows(rows)
    return out


def _context(part: KafkaPartition, opts: dict[str, Any]) -> ReadContext:
    """Where a planned read's rows come from: every row of a lagging read says so; a probe
    window's spans and markers say where it starts."""
    return ReadContext(part.topic, part.partition, "kafka", opts["cluster"], part.clock,
                       from_log_start=part.from_log_start, read_from_zero=part.read_from_zero,
                       txn_partition_count=part.txn_partition_count, lagging=True if part.lagging else None,
                       window_lso=part.start if part.probe else None)


def _data_events(w: KafkaWire, opts: dict[str, Any], data: list[tuple[KafkaPartition, _RangeRead]],
                 out: EventTable) -> list[list[dict[str, Any]]]:
    """Events of the reads of a group's data partitions: their spans and markers added to ``out``
    as one column part, and each read's gap and progress rows returned in read order (the
    caller adds them among the coordinator partitions' rows). A read gets no progress row when
    it became unreadable (the rest of its range is for the next plan)."""
    reads, tables, keys = [], [], []
    for i, (part, r) in enumerate(data):
        broker = None if r.unavailable else _broker_offsets(w, part.topic, part.partition, r.last)
        # read to the high watermark it was planned to (live standard, detection.md §0) unless lagging
        reads.append((_context(part, opts), r.gaps, broker, f"{part.topic}-{part.partition}@offset {part.end}",
                      not part.lagging))
        tables += r.scans
        keys += [i] * len(r.scans)
    if tables:
        keep = np.concatenate([k for _, k in tables])
        cols = {k: np.concatenate([t[k] for t, _ in tables])[keep] for k in BATCH_COLUMNS}
        key = np.repeat(np.array(keys, dtype=np.int64), [len(k) for _, k in tables])[keep]
    else:
        cols, key = empty_columns(), np.empty(0, dtype=np.int64)
    cols["position"] = cols["base_offset"]  # a fetch has no file position: name offsets
    return data_reads_events(reads, cols, key, "{prefix}@offset {pos}", out)


def _idle_progress(part: KafkaPartition, common: dict[str, Any], acc: CoordinatorReplay | None,
                   templates: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The progress row of a partition with nothing new, from the driver's ListOffsets (the same
    row :func:`_events_of` would end with; built as a dict because thousands of idle partitions
    per trigger are the common case). ``templates``: the caller's rows of the fields common to
    its partitions (``progress_event``'s row without the partition's own), per clock: each row is
    a copy of it with the partition's fields set (every field is one of the row's keys already,
    so the row and its key order are ``progress_event``'s)."""
    hw, lso, log_start = part.offsets
    base = None if templates is None else templates.get(part.clock)
    if base is None:
        base = progress_event(topic=part.topic, partition=part.partition, high_watermark=None, lso=None,
                              log_start_offset=None, **common)
        if templates is not None:
            templates[part.clock] = base
    row = base.copy()
    row.update(topic=part.topic, partition=part.partition, high_watermark=hw, lso=lso, log_start_offset=log_start,
               source_position=f"{part.topic}-{part.partition}@offset {part.end}")
    if acc is not None:
        row["coordinator_epoch"] = acc.max_epoch
        row["txn_partition_count"] = part.txn_partition_count
    row["from_log_start"] = part.from_log_start
    row["read_from_zero"] = part.read_from_zero
    if part.lagging:
        row["lagging"] = True
    row["end_proven"] = not part.lagging  # ListOffsets: nothing beyond the high watermark to read
    return row


def _txn_replay(w: KafkaWire, opts: dict[str, Any], part: KafkaPartition,
                common: dict[str, Any]) -> tuple[CoordinatorReplay, str | None, bool]:
    """The id → producer map of a coordinator partition up to ``part.start`` (memo, else rebuilt
    from the coordinator log's start: it is compacted), why it is incomplete (None: it is not),
    and whether it could not be read at all now (then the partition is read again next plan).

    Only a replay read without a gap is memoised (:func:`_events_of`), so a rebuild that failed
    never becomes an empty view taken for a complete one (issue 20 item 8)."""
    t, p = part.topic, part.partition
    memo = _TXN_MEMO.get((opts["bootstrap"], p))
    acc = CoordinatorReplay()
    if memo is not None and memo[0] == part.start:
        return memo[1].copy(), None, False
    if part.start > 0:
        try:
            offs = w.offsets([(t, p)])[(t, p)]
            rr = _fetch_range(w, opts, t, p, offs.log_start, part.start, common)
        except KafkaUnavailable as exc:
            rr, offs = None, str(exc)
        if rr is None or rr.unavailable:
            why = "; ".join(g["reason"] for g in rr.gaps) if rr is not None else offs
            return acc, unavailable_reason(
                f"{t}-{p}: its records before offset {part.start} could not be read again to rebuild the "
                f"coordinator view ({why}); the view stays incomplete; offsets {part.start}..{part.end - 1} "
                f"read again from offset {part.start} next trigger"), True
        for raw in rr.raws:
            recs, sc = decode_txn_log_segment(raw, validate_crc=False, allow_partial_tail=True)
            acc.fold([r for r in recs if r["offset"] < part.start], _leader_epoch(sc))
        if rr.gaps:
            return acc, (f"{t}-{p}: coordinator view incomplete: its replay before offset {part.start} has a gap ("
                         + "; ".join(g["reason"] for g in rr.gaps) + ")"), False
    return acc, None, False


def _events_of(part: KafkaPartition, opts: dict[str, Any], r: _RangeRead, acc: CoordinatorReplay | None,
               broker: Offsets | None, out: EventTable) -> None:
    """Events of one coordinator partition's read, gathered into ``out`` (:func:`_read_table` types
    the group's rows once); no progress row when it became unreadable or is incomplete
    (``broker`` None). Data partitions: :func:`_data_events`."""
    t, p = part.topic, part.partition
    ctx = _context(part, opts)
    position = f"{t}-{p}@offset {part.end}"
    offsets = broker or Offsets(None, None, None)
    pieces = []
    for raw in r.raws:
        recs, sc = decode_txn_log_segment(raw, validate_crc=False, allow_partial_tail=True)
        recs = [x for x in recs if part.start <= x["offset"] < part.end]
        pieces.append(TxnPiece(recs, f"{t}-{p}", _leader_epoch(sc)))
    txn_partition_events(ctx, pieces, acc, gaps=r.gaps, broker=offsets, progress_position=position,
                         end_proven=not part.lagging, collect=out, progress=broker is not None)
    if broker is None:  # unreadable or incomplete (_read_table): never memoised
        _TXN_MEMO.pop((opts["bootstrap"], p), None)
    else:
        _TXN_MEMO[(opts["bootstrap"], p)] = (part.end, acc)


def _leader_epoch(scan: BatchScan) -> int:
    """Highest partitionLeaderEpoch (= coordinator epoch) of a fetched coordinator range, -1 if empty."""
    return int(scan.columns["partition_leader_epoch"].max()) if len(scan) else -1


def _broker_offsets(w: KafkaWire, topic: str, partition: int, last: Any) -> Offsets:
    """The partition's offsets from the last Fetch response, else from ListOffsets."""
    hw = lso = log_start = None
    if last is not None and last.high_watermark is not None and last.high_watermark >= 0:
        hw, lso, log_start = last.high_watermark, last.last_stable_offset, last.log_start_offset
    else:
        o = w.offsets([(topic, partition)]).get((topic, partition))
        if o is not None and not o.deleted:
            hw, lso, log_start = o.high_watermark, o.lso, o.log_start
    return Offsets(hw, lso if lso is not None and lso >= 0 else None,
                   log_start if log_start is not None and log_start >= 0 else None)
