"""The one micro-batch loop: the Spark job, the in-process engine and every test harness run it.

One micro-batch, in this order, whatever the engine:

1. **events**: the rows the source planned and read for the batch (Spark: the streaming
   DataFrame; in process: the source's reader, called by the caller of :class:`LocalLoop`).
2. **state**: per ``route_pid``, :func:`state_rows` — the body of the ``applyInPandasWithState``
   function — with the key's stored state; afterwards, for every key whose event-time timeout the
   watermark (the previous micro-batch's newest event time, zero delay) has passed, once more
   with no events. Progress and gap rows (``route_pid = -1``) pass through the same operator, so
   the publishing step sees them in the same micro-batch as the alerts they enrich.
3. **publish** (:class:`BatchWriter`, the ``foreachBatch`` body): a batch id already published
   publishes nothing again; where each partition's read stopped short goes to the unread ledger;
   the open sets and availability are observed; the enricher turns state rows into alerts
   (:meth:`streaming.alerts.Enricher.process`), the live cluster confirms each one
   (:func:`streaming.broker_confirm.annotate`), pinned-LSO findings follow; availability records
   first, then the alerts, go to every sink in order; then the batch is recorded as published
   (enricher, availability and pinned-LSO files saved with the batch id).
4. **progress/metrics**: every ``on_batch`` callback (progress log line, Prometheus metrics,
   status page) gets the batch's statistics.

Delivery. Source offsets and the state store are **exactly-once**: Spark's checkpoint (offset
log, commit log, one state-store version per batch) replays an interrupted batch with the same
input and the same state. The alert sinks are **at-least-once**: a batch is recorded as
published only after every sink returned (the Kafka sink returns once the broker acknowledged),
so a crash between a sink and that record publishes the batch's alerts again on restart;
consumers dedupe on the alert key (DESIGN §7). The enricher's lifecycle (late → hanging →
resolved) is saved with the batch id, so a replayed batch id (``<= last_batch_id``) runs the
state operator to the end (Spark must commit the store's version) and publishes nothing.

Engines are thin adapters around steps 2-4: :func:`spark_state_fn` (the function given to
``applyInPandasWithState``, see :func:`detect`) and :func:`spark_foreach_batch` (the function
given to ``foreachBatch``); :class:`LocalStates` (the state operator in memory, Spark's order)
and :class:`LocalLoop` (one in-process micro-batch after another). The in-process engine keeps
its state in memory only: it serves one scan, or one test, with nothing to restart.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from streaming.alerts import Enricher
from streaming.availability import Availability
from streaming.event_rows import (
    COORDINATOR,
    COORDINATOR_FIELDS,
    KIND,
    ROW_FIELDS,
    EventRecord,
    as_rows,
    event_time_of,
    table_rows,
)
from streaming.events import FIELD_NAMES
from streaming.gc_pause import collector_paused
from streaming.pinned_lso import PinnedLso
from streaming.state_machine import (
    OUT_NAMES,
    EngineConfig,
    ProducerState,
    event_records,
    process_events,
    process_key,
)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

log = logging.getLogger("txnwatch")

STATE_SCHEMA = "doc string"
_PASSTHROUGH = ("progress", "gap")


# ── step 2: the state operator ────────────────────────────────────────────────────────────────


def state_rows(cfg: EngineConfig, pid: int, events: list[dict[str, Any]] | list[tuple], state) -> list[dict[str, Any]]:
    """One call of the state operator for key ``pid`` over its events of the micro-batch (dicts of
    ``state_machine.event_records``, or for ``pid`` >= 0 event rows of :mod:`streaming.event_rows`;
    none when a timeout fires): the rows it emits. ``state`` is Spark's ``GroupState`` (the state
    row holds the JSON document) or :class:`LocalGroupState` (same methods; it holds the
    :class:`ProducerState` itself, so the in-process engine never serialises a document it does
    not persist)."""
    wm = state.getCurrentWatermarkMs()
    if pid < 0:
        rows = []
        for e in events:
            if e["kind"] in _PASSTHROUGH:
                r = dict.fromkeys(OUT_NAMES)
                r.update({k: e.get(k) for k in OUT_NAMES if k in e})
                r["out_kind"] = e["kind"]
                r["now_ms"] = e["event_time_ms"]
                rows.append(r)
        return rows
    events = as_rows(events)
    now = max([t for t in map(event_time_of, events) if t is not None] + [wm, 0])
    if getattr(state, "holds_producer_state", False):
        st = state.get[0] if state.exists else ProducerState(pid)
        out, keep, timer = process_events(st, events, now_ms=now, cfg=cfg)
        new_doc = (st,) if keep else None
    else:
        out, doc, timer = process_key(pid, events, state.get[0] if state.exists else None, now_ms=now, cfg=cfg)
        new_doc = None if doc is None else (doc,)
    if new_doc is None:
        if state.exists:
            state.remove()
    else:
        state.update(new_doc)
        if timer is not None:
            state.setTimeoutTimestamp(max(timer, wm + 1, 1))
    return out


#: The Spark state operator's output: one JSON object per output row, with every field of
#: :data:`~streaming.state_machine.OUT_NAMES` (null ones as null), read back by
#: :func:`spark_foreach_batch`. PySpark turns each key's output frame into Arrow column by column
#: (``PandasToArrowConversion`` per yielded frame): for the 41 typed output columns that cost
#: ~1.8 ms of CPU per key (a frame of 2 rows, 405 keys: 0.74 s), for this one column ~0.14 ms
#: (issue 23). The output is not part of the state store (its key and value schemas are), so
#: checkpoints written with the typed output stay readable.
OUT_PACKED = "out"


def out_ddl() -> str:
    """The state operator's output schema (Spark DDL): :data:`OUT_PACKED`."""
    return f"{OUT_PACKED} string"


def _json_default(v: Any) -> Any:
    """A numpy scalar (``item``) or array (``tolist``) in an output row, as Arrow would have
    taken it; anything else is an error, as it was for Arrow."""
    for conv in ("item", "tolist"):
        if hasattr(v, conv):
            return getattr(v, conv)()
    raise TypeError(f"output field value {v!r} ({type(v).__name__}) is not JSON serialisable")


def pack_out_rows(rows: list[dict[str, Any]]) -> list[str]:
    """State operator output rows → their :data:`OUT_PACKED` strings: exactly the
    :data:`~streaming.state_machine.OUT_NAMES` fields, absent ones null (as the typed frame
    ``pd.DataFrame(rows, columns=OUT_NAMES)`` had them)."""
    dumps = json.dumps
    return [dumps({n: r.get(n) for n in OUT_NAMES}, separators=(",", ":"), default=_json_default) for r in rows]


def unpack_out_rows(values: Any) -> list[dict[str, Any]]:
    """:data:`OUT_PACKED` strings → the output rows :class:`BatchWriter` takes (every
    :data:`~streaming.state_machine.OUT_NAMES` field a key)."""
    return [json.loads(v) for v in values]


#: The state operator's input besides the key: the event's fields but ``event_time`` packed into
#: one JSON string per row (:func:`detect`). PySpark converts each key's slice of the input
#: column by column to pandas (``ArrowBatchTransformer.to_pandas`` + ``pd.concat`` per key in the
#: worker's ``SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE`` path): with the ~40 event columns that was
#: ~3.4 ms of CPU per key, with the key, ``event_time`` and this one column ~0.4 ms.
#: A producer's own rows (``route_pid`` >= 0) carry only :data:`ROW_JSON_FIELDS`, what the state
#: machine reads of them (:mod:`streaming.event_rows`); progress and gap rows (``route_pid`` < 0)
#: every field, as the state function passes them through whole.
PACKED = "ev"

#: The fields of an event row (:data:`streaming.event_rows.ROW_FIELDS`, with its coordinator
#: part's :data:`~streaming.event_rows.COORDINATOR_FIELDS`), in event schema order: what
#: :func:`pack_events` packs of a producer's own rows.
ROW_JSON_FIELDS: tuple[str, ...] = tuple(
    n for n in FIELD_NAMES if n in set(ROW_FIELDS[:COORDINATOR]) | set(COORDINATOR_FIELDS)) + ("event_time_ms",)
_ROW_GET = ROW_FIELDS[:COORDINATOR]


def packed_event_records(values: Any) -> list[dict[str, Any]]:
    """The :data:`PACKED` JSON strings of one key (an iterable of str) → the dicts
    ``state_machine.event_records`` gives for the same rows: JSON numbers of long/int fields are
    Python ints, booleans bools, ``array<string>`` lists, ``event_time`` is ``event_time_ms``
    (``unix_millis``); null fields are left out (``to_json`` drops them), which
    :class:`~streaming.state_machine.EventRecord` reads as None, as ``event_records`` does for a
    field null in every row of a kind. A producer's rows hold :data:`ROW_JSON_FIELDS` only."""
    return json.loads(_json_array(values), object_hook=EventRecord)


def _json_array(values: Any) -> str:
    """One key's :data:`PACKED` strings (each a whole JSON object, as ``to_json`` writes it) as
    one JSON array: decoded by one ``json.loads`` call instead of one per event (its per-call
    Python layers cost as much as the C scanner's work on these short objects)."""
    return "[" + ",".join(values) + "]"


def packed_event_rows(pid: int, values: Any) -> list[Any]:
    """What the state function reads for key ``pid`` from its :data:`PACKED` strings: for a
    producer (``pid`` >= 0) event rows, the tuples :func:`streaming.event_rows.as_row` makes of
    the same events' dicts (a JSON integer is already an int, null a left-out field: read as
    None, an ``array<string>`` a list, so as_row's conversions have nothing to do); for the
    passthrough key (-1) the dicts of :func:`packed_event_records`. One ``dict.get`` per field
    in C instead of as_row's Python loop over a dict with a ``__missing__`` hook."""
    if pid < 0:
        return packed_event_records(values)
    rows = []
    for d in json.loads(_json_array(values)):
        get = d.get
        row = tuple(map(get, _ROW_GET))
        rows.append(row + ((tuple(map(get, COORDINATOR_FIELDS)),) if row[KIND] == "txn_state" else (None,)))
    return rows


def pack_events(df):
    """Events DataFrame (Spark) → ``route_pid``, ``event_time`` and :data:`PACKED`: what the
    state operator gets (:func:`detect`)."""
    from pyspark.sql import functions as F

    def packed(names):
        fields = [F.col(n) for n in names if n not in ("event_time", "event_time_ms")]
        fields.append(F.unix_millis("event_time").alias("event_time_ms"))
        return F.to_json(F.struct(*fields), {"ignoreNullFields": "true"})

    return df.select("route_pid", "event_time",
                     F.when(F.col("route_pid") >= 0, packed(ROW_JSON_FIELDS)).otherwise(packed(FIELD_NAMES))
                     .alias(PACKED))


def spark_state_fn(cfg: EngineConfig) -> Callable:
    """Spark adapter of step 2: the function given to ``applyInPandasWithState`` (its input is
    what :func:`detect` hands over: ``route_pid``, ``event_time`` and :data:`PACKED`)."""

    def fn(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        pid = int(key[0])
        events: list[Any] = []
        for p in pdfs:
            if len(p):
                events += packed_event_rows(pid, p[PACKED].tolist())
        rows = state_rows(cfg, pid, events, state)
        if rows:
            yield pd.DataFrame({OUT_PACKED: pack_out_rows(rows)})

    return fn


def detect(events_df, cfg: EngineConfig):
    """Streaming (or batch) events DataFrame → the state operator's output DataFrame (Spark).

    The operator gets three columns: the key, ``event_time`` (the watermarked column: Spark's
    ``FlatMapGroupsWithState`` execs look for it in their input to know a watermark is set, and
    with an event-time timeout drop input rows the watermark has passed) and every event field
    packed into one JSON string (:data:`PACKED`); the events' schema does not change. The state
    (``STATE_SCHEMA``) and the key are what they were, so existing checkpoints keep working."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    df = events_df.select(*FIELD_NAMES)
    if df.isStreaming:
        df = df.withWatermark("event_time", "0 seconds")
    return pack_events(df).groupBy("route_pid").applyInPandasWithState(
        spark_state_fn(cfg), out_ddl(), STATE_SCHEMA, "Update", GroupStateTimeout.EventTimeTimeout)


class LocalGroupState:
    """The part of Spark's ``GroupState`` the state function uses, for one key in memory. The state
    row holds the key's :class:`ProducerState` (``holds_producer_state``), not its JSON document:
    the in-process engine keeps its state in memory only, and the document is made on demand
    (:attr:`LocalStates.docs`)."""

    holds_producer_state = True

    def __init__(self, doc: tuple | None, watermark_ms: int) -> None:
        self._doc = doc
        self._wm = watermark_ms
        self.timeout_ms: int | None = None

    @property
    def exists(self) -> bool:
        return self._doc is not None

    @property
    def get(self) -> tuple:
        if self._doc is None:
            raise ValueError("state does not exist")
        return self._doc

    def update(self, doc: tuple) -> None:
        self._doc = doc

    def remove(self) -> None:
        self._doc = None
        self.timeout_ms = None

    def setTimeoutTimestamp(self, ms: int) -> None:
        self.timeout_ms = ms

    def getCurrentWatermarkMs(self) -> int:
        return self._wm


class StateDocs(Mapping[int, tuple]):
    """The state row per producer id as Spark's store would hold it (``(JSON document,)``), made
    from the in-memory states when read."""

    def __init__(self, held: dict[int, tuple]) -> None:
        self._held = held

    def __getitem__(self, pid: int) -> tuple:
        return (self._held[pid][0].to_json(),)

    def __iter__(self) -> Iterator[int]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)


def _frame_events(events: pd.DataFrame) -> tuple[dict[int, list[dict[str, Any]]], int | None]:
    """A pandas event frame → (its event dicts per route_pid, the newest event time in ms or None)."""
    # The frame -> dicts conversion once for all keys (per key it cost a pass over ~40 columns
    # each time); per element it is the same conversion, so each key gets the dicts it would get.
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for rec in event_records(events):
        if rec["route_pid"] is not None:  # as groupby, which drops null keys
            by_pid.setdefault(int(rec["route_pid"]), []).append(rec)
    newest = pd.to_datetime(events["event_time"], utc=True).max()
    return by_pid, None if newest is pd.NaT else int(newest.value // 1_000_000)


class LocalStates:
    """In-process adapter of step 2: the state operator's keys across micro-batches, in memory,
    in Spark's order: each micro-batch calls the state function for every key with events (at
    the watermark the previous micro-batch left), then for every other key whose event-time
    timeout that watermark has passed; afterwards the watermark moves to the batch's newest event
    time (zero delay)."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.held: dict[int, tuple] = {}  # route_pid -> (ProducerState,), for keys that have state
        self.timeouts: dict[int, int | None] = {}
        self.watermark = 0

    @property
    def docs(self) -> StateDocs:
        """The state row per producer id (its JSON document), as the last micro-batch left it."""
        return StateDocs(self.held)

    def micro_batch(self, events: pd.DataFrame | pa.Table | None) -> list[dict[str, Any]]:
        """The state operator's output rows for one micro-batch of ``events`` (an event frame or
        Arrow table; None: no data)."""
        with collector_paused():
            return self._micro_batch(events)

    def _micro_batch(self, events: pd.DataFrame | pa.Table | None) -> list[dict[str, Any]]:
        by_pid: dict[int, list[Any]] = {}
        newest = None
        if events is not None and len(events):
            if isinstance(events, pd.DataFrame):
                by_pid, newest = _frame_events(events)
            else:  # Arrow: event rows straight from the columns, no frame and no dict per event
                by_pid, newest = table_rows(events)
        out: list[dict[str, Any]] = []
        keys = sorted(by_pid)
        for pid in keys:
            # a key's events are dropped once applied: their memory then serves the states built
            # next instead of new pages (the in-process engine holds a whole scan's events)
            out += self._call(pid, by_pid.pop(pid))
        called = set(keys)
        for pid, t in sorted(self.timeouts.items()):
            if pid not in called and t is not None and t <= self.watermark:
                out += self._call(pid, [])
        if newest is not None:
            self.watermark = max(self.watermark, newest)
        return out

    def _call(self, pid: int, events: list[Any]) -> list[dict[str, Any]]:
        st = LocalGroupState(self.held.get(pid), self.watermark)
        rows = state_rows(self.cfg, pid, events, st)
        if st.exists:
            self.held[pid], self.timeouts[pid] = st.get, st.timeout_ms
        else:
            self.held.pop(pid, None)
            self.timeouts.pop(pid, None)
        return rows


# ── steps 3 and 4: publish, then progress/metrics ──────────────────────────────────────────────


@dataclass
class SinkSet:
    """Where finalized alerts go; each sink is a callable taking a list of alert dicts.
    ``on_batch`` callbacks get ``(batch_id, stats)`` once the batch is recorded as published."""

    sinks: list[Callable[[list[dict[str, Any]]], None]] = field(default_factory=list)
    on_batch: list[Callable[[int, dict[str, Any]], None]] = field(default_factory=list)

    def emit(self, alerts: list[dict[str, Any]]) -> None:
        for i, s in enumerate(self.sinks):
            s(alerts)
            if alerts and i + 1 < len(self.sinks):
                _test_pause(f"after-sink-{i + 1}")


#: Crash-test hook (tests/test_crash_restart.py): ``<point>:<marker file>`` makes the first
#: publishing micro-batch write the marker file and stop at ``point`` (``before-sinks``,
#: ``after-sink-N`` = after the N-th configured sink, or ``after-save`` = after the batch was
#: recorded as published) until the test kills the driver.
TEST_PAUSE_ENV = "TXNWATCH_TEST_PAUSE"


def _test_pause(point: str) -> None:
    spec = os.environ.get(TEST_PAUSE_ENV)
    if not spec or not spec.startswith(point + ":"):
        return
    marker = spec.split(":", 1)[1]
    if os.path.exists(marker):
        return  # paused once already (a restarted driver runs on)
    with open(marker, "w") as f:
        f.write(point)
    log.warning("%s: paused at %s", TEST_PAUSE_ENV, point)
    time.sleep(3600)


def _transaction_version(broker: Any) -> int | None:
    """The live cluster's finalized ``transaction.version`` (streaming.cluster_features); None
    without a broker or when it does not report features. Never fails a micro-batch."""
    read = getattr(broker, "transaction_version", None)
    if read is None:
        return None
    try:
        return read()
    except Exception:  # informational only
        log.exception("reading the cluster's transaction.version failed")
        return None


class BatchWriter:
    """Steps 3 and 4 of a micro-batch: enrich, publish, record as published, report.

    ``availability`` (live path): availability records first, then the verdicts of partitions
    read this batch; verdicts of unreadable partitions are held back (streaming/availability.py).
    On the live path (``enricher.broker``) each late/hanging alert also gets the cluster's own
    confirmation (``streaming.broker_confirm.annotate``) before it is published.
    ``unread_ledger`` (live path): where each partition's read stopped short is recorded there
    first, so that the next plan reads it again (streaming/sources/kafka_unread.py).
    ``pinned`` (live path): findings of LSOs pinned at the log start by a transaction no read has
    seen (streaming/pinned_lso.py), after the state's own.
    """

    def __init__(self, enricher: Enricher, sinks: SinkSet, availability: Availability | None = None,
                 unread_ledger: str | None = None, pinned: PinnedLso | None = None) -> None:
        self.enricher = enricher
        self.sinks = sinks
        self.availability = availability or Availability()
        self.unread_ledger = unread_ledger
        self.pinned = pinned

    def published(self, batch_id: int) -> bool:
        """Whether ``batch_id`` was published before (a replay after a stop that came ahead of
        Spark's commit)."""
        return batch_id <= self.enricher.last_batch_id

    def __call__(self, rows: list[dict[str, Any]], batch_id: int) -> None:
        """Publish the state operator's output ``rows`` of micro-batch ``batch_id``."""
        if self.published(batch_id):
            log.info("micro-batch %s already published; publishing nothing again", batch_id)
            return
        t0 = time.monotonic()
        enricher, availability, pinned = self.enricher, self.availability, self.pinned
        progress = [r for r in rows if r["out_kind"] == "progress"]
        gaps = [r for r in rows if r["out_kind"] == "gap"]
        if self.unread_ledger:
            from streaming.sources.kafka_unread import record_unread

            record_unread(self.unread_ledger, batch_id, gaps)  # before anything records the batch as done
        raw = [r for r in rows if r["out_kind"] == "alert"]
        raw.sort(key=lambda r: (r["topic"], r["partition"], r["first_offset"], r["now_ms"] or 0))
        enricher.observe_open_sets([r for r in rows if r["out_kind"] == "open_set"])
        now = max([r["now_ms"] for r in rows if r.get("now_ms") is not None] or [enricher.clock or 0]) or None
        records = availability.observe(gaps, progress, enricher.active, now)
        availability.apply_holds(enricher)
        alerts = enricher.process(raw, progress, gaps=gaps)
        if enricher.broker is not None:
            from streaming.broker_confirm import annotate

            for a in alerts:
                annotate(a, enricher.broker)
        if pinned is not None:
            alerts += pinned.observe(progress, enricher.iter_open_transactions(), now, availability.not_read_through_now(),
                                     enricher.broker)
        alerts = records + alerts
        if alerts:
            _test_pause("before-sinks")
        self.sinks.emit(alerts)
        enricher.last_batch_id = batch_id
        enricher.save()
        availability.save()
        if pinned is not None:
            pinned.save()
        if alerts:
            _test_pause("after-save")  # recorded as published: the sinks must have acknowledged
        stats = {"rows": len(rows), "progress": len(progress), "gaps": gaps, "alerts": alerts,
                 "unavailable": availability.unavailable_by_topic(now),
                 "unavailable_partitions": sorted(availability.down),
                 "lagging": availability.lagging_by_topic(),
                 "open_alerts": dict(enricher.active), "partitions": dict(enricher.partitions),
                 "open_transactions": enricher.open_transactions(), "now_ms": enricher.clock,
                 "duration_s": time.monotonic() - t0,
                 # the cluster's finalized transaction.version (live path; cached by the broker client)
                 "transaction_version": _transaction_version(enricher.broker)}
        for cb in self.sinks.on_batch:
            cb(batch_id, stats)


def spark_foreach_batch(writer: BatchWriter) -> Callable:
    """Spark adapter of steps 3-4: the function given to ``foreachBatch``."""

    def foreach_batch(batch_df, batch_id: int) -> None:
        if writer.published(batch_id):
            # Published before a stop that came ahead of Spark's commit: publish nothing again,
            # but still run the batch to the end, or the state store never commits this batch's
            # version and Spark 4 fails the query (STATE_STORE_COMMIT_VALIDATION_FAILED).
            log.info("micro-batch %s already published; replaying it without publishing", batch_id)
            batch_df.write.format("noop").mode("overwrite").save()
            return
        writer(unpack_out_rows(r[0] for r in batch_df.collect()), batch_id)

    return foreach_batch


class LocalLoop:
    """In-process adapter of the whole loop: one micro-batch after another over event frames the
    caller read, with the state in memory (:class:`LocalStates`) and the one :class:`BatchWriter`."""

    def __init__(self, cfg: EngineConfig, writer: BatchWriter) -> None:
        self.states = LocalStates(cfg)
        self.writer = writer
        self.batch_id = 0

    @property
    def docs(self) -> StateDocs:
        """The state row per producer id as the last micro-batch left it."""
        return self.states.docs

    def run_batch(self, events: pd.DataFrame | pa.Table | None) -> None:
        """One micro-batch over ``events`` (an event frame or Arrow table; None or empty: a trigger
        that read nothing)."""
        self.writer(self.states.micro_batch(events), self.batch_id)
        self.batch_id += 1

    def run_timers(self) -> None:
        """Spark's no-data micro-batch after the watermark moved: fires the event-time timeouts it
        passed; published only when a timer emitted something."""
        rows = self.states.micro_batch(None)
        if rows:
            self.writer(rows, self.batch_id)
            self.batch_id += 1
