"""The Spark job: events → per-producer state (``applyInPandasWithState``) → alerts → sinks.

Thin glue: every decision is made in :mod:`streaming.state_machine` / :mod:`streaming.verdict`
(per producer id) and :mod:`streaming.alerts` (enrichment and commands, driver side).

Keys: data, marker, snapshot and coordinator rows are grouped by ``route_pid`` (their producer
id; coordinator rows are fanned out by the source, see ``normalize.route_coordinator_records``).
Progress and gap rows carry ``route_pid = -1`` and are passed through the same operator, so the
sink sees them in the same micro-batch as the alerts they enrich.

Time: the watermark is on ``event_time`` (observation time) with no delay; each producer's state
sets an event-time timeout for the moment its oldest not-yet-alerted open transaction crosses
its threshold, so a silent hanging transaction fires with no new input for that producer.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from streaming.alerts import REQUIRED_PERMISSION, AlertConfig, Enricher, abort_commands
from streaming.availability import Availability
from streaming.broker_evidence import BrokerEvidence
from streaming.events import FIELD_NAMES
from streaming.pinned_lso import PinnedLso
from streaming.state_machine import OUT_FIELDS, OUT_NAMES, EngineConfig, event_records, process_key

log = logging.getLogger("txnwatch")

STATE_SCHEMA = "doc string"
_PASSTHROUGH = ("progress", "gap")
# txnwatch's Spark settings (the config and spark-submit --conf win over them).
SPARK_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}


def out_ddl() -> str:
    return ", ".join(f"{n} {'boolean' if t == 'bool' else t}" for n, t in OUT_FIELDS)


def spark_session(app: str = "txnwatch", master: str | None = None, conf: dict[str, str] | None = None):
    """The SparkSession used by the CLI and tests (Python workers run this interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app)
    # Under spark-submit the master (and the cluster's settings) come from the submit command:
    # PYSPARK_GATEWAY_PORT is set because the JVM is already running. Never override them then.
    if master and "PYSPARK_GATEWAY_PORT" not in os.environ:
        b = b.master(master)
    defaults = dict(SPARK_DEFAULTS)
    defaults.update(conf or {})
    given: set[str] = set()
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # spark-submit --conf (and spark-defaults.conf) win over txnwatch's defaults and config.
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        given = {k for k, _ in SparkConf().getAll()}
    for k, v in defaults.items():
        if k not in given:
            b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_sources(spark)
    return spark


def register_sources(spark) -> None:
    from streaming.sources.dumps import DumpsDataSource
    from streaming.sources.kafka import KafkaDataSource
    from streaming.sources.segments import SegmentsDataSource

    spark.dataSource.register(SegmentsDataSource)
    spark.dataSource.register(DumpsDataSource)
    spark.dataSource.register(KafkaDataSource)


def state_rows(cfg: EngineConfig, pid: int, frames: list[pd.DataFrame], state) -> list[dict[str, Any]]:
    """One call of the state operator for key ``pid``: the rows it emits. ``state`` is Spark's
    ``GroupState`` or :class:`streaming.local_engine.LocalGroupState` (same methods)."""
    events: list[dict[str, Any]] = []
    frames = [p for p in frames if len(p)]
    if frames:
        events = event_records(frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True))
    return state_rows_of(cfg, pid, events, state)


def state_rows_of(cfg: EngineConfig, pid: int, events: list[dict[str, Any]], state) -> list[dict[str, Any]]:
    """:func:`state_rows` of events already turned into dicts (``state_machine.event_records``)."""
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
    now = max([e["event_time_ms"] for e in events if e["event_time_ms"] is not None] + [wm, 0])
    doc = None
    if state.exists:
        doc = state.get[0]
    out, new_doc, timer = process_key(pid, events, doc, now_ms=now, cfg=cfg)
    if new_doc is None:
        if state.exists:
            state.remove()
    else:
        state.update((new_doc,))
        if timer is not None:
            state.setTimeoutTimestamp(max(timer, wm + 1, 1))
    return out


def make_state_fn(cfg: EngineConfig) -> Callable:
    """The function given to ``applyInPandasWithState`` (closes over the engine config)."""

    def fn(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        rows = state_rows(cfg, int(key[0]), list(pdfs), state)
        if rows:
            yield pd.DataFrame(rows, columns=list(OUT_NAMES))

    return fn


def detect(events_df, cfg: EngineConfig):
    """Streaming (or batch) events DataFrame → state operator output DataFrame."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    df = events_df.select(*FIELD_NAMES)
    if df.isStreaming:
        df = df.withWatermark("event_time", "0 seconds")
    return df.groupBy("route_pid").applyInPandasWithState(
        make_state_fn(cfg), out_ddl(), STATE_SCHEMA, "Update", GroupStateTimeout.EventTimeTimeout)


@dataclass
class SinkSet:
    """Where finalized alerts go; each sink is a callable taking a list of alert dicts."""

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


def make_batch_writer(enricher: Enricher, sinks: SinkSet, availability: Availability | None = None,
                      unread_ledger: str | None = None, pinned: PinnedLso | None = None) -> Callable:
    """``foreachBatch`` function: enrich, dedupe replays, publish, persist the enricher.

    ``availability`` (live path): availability records first, then the verdicts of partitions
    read this batch; verdicts of unreadable partitions are held back (streaming/availability.py).
    On the live path (``enricher.broker``) each late/hanging alert also gets the cluster's own
    confirmation (``streaming.broker_confirm.annotate``) before it is published.
    ``unread_ledger`` (live path): where each partition's read stopped short is recorded there
    first, so that the next plan reads it again (streaming/sources/kafka_unread.py).
    ``pinned`` (live path): findings of LSOs pinned at the log start by a transaction no read has
    seen (streaming/pinned_lso.py), after the state's own.
    """
    availability = availability or Availability()

    def write(batch_df, batch_id: int) -> None:
        t0 = time.monotonic()
        if batch_id <= enricher.last_batch_id:
            # Published before a stop that came ahead of Spark's commit: publish nothing again,
            # but still run the batch to the end, or the state store never commits this batch's
            # version and Spark 4 fails the query (STATE_STORE_COMMIT_VALIDATION_FAILED).
            log.info("micro-batch %s already published; replaying it without publishing", batch_id)
            batch_df.write.format("noop").mode("overwrite").save()
            return
        rows = [r.asDict() for r in batch_df.collect()]
        progress = [r for r in rows if r["out_kind"] == "progress"]
        gaps = [r for r in rows if r["out_kind"] == "gap"]
        if unread_ledger:
            from streaming.sources.kafka_unread import record_unread

            record_unread(unread_ledger, batch_id, gaps)  # before anything records the batch as done
        raw = [r for r in rows if r["out_kind"] == "alert"]
        raw.sort(key=lambda r: (r["topic"], r["partition"], r["first_offset"], r["now_ms"] or 0))
        enricher.observe_open_sets([r for r in rows if r["out_kind"] == "open_set"])
        now = max([r["now_ms"] for r in rows if r.get("now_ms") is not None] or [enricher.clock or 0]) or None
        records = availability.observe(gaps, progress, enricher.active, now)
        availability.apply_holds(enricher)
        alerts = enricher.process(raw, progress)
        if enricher.broker is not None:
            from streaming.broker_confirm import annotate

            for a in alerts:
                annotate(a, enricher.broker)
        if pinned is not None:
            alerts += pinned.observe(progress, enricher.open_transactions(), now, availability.not_read_through_now(),
                                     enricher.broker)
        alerts = records + alerts
        if alerts:
            _test_pause("before-sinks")
        sinks.emit(alerts)
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
        for cb in sinks.on_batch:
            cb(batch_id, stats)

    return write


def start_query(spark, source_format: str, options: dict[str, str], cfg: EngineConfig, alert_cfg: AlertConfig,
                sinks: SinkSet, checkpoint: str, *, trigger: dict[str, Any] | None = None,
                query_name: str | None = None, broker: BrokerEvidence | None = None):
    """Start the streaming job; returns the StreamingQuery. ``broker``: the live cluster's answers
    for the enrichment (None for files and dumps)."""
    ledger = None
    if source_format == "kafka-txn":
        from streaming.sources.kafka_unread import LEDGER_OPTION, ledger_path

        ledger = ledger_path(checkpoint)
        options = {**options, LEDGER_OPTION: ledger}
    events = spark.readStream.format(source_format).options(**options).load()
    out = detect(events, cfg)
    enricher = Enricher(alert_cfg, checkpoint.rstrip("/") + "/txnwatch-sink.json", broker=broker)
    availability = Availability(checkpoint.rstrip("/") + "/txnwatch-availability.json")
    pinned = None
    if source_format == "kafka-txn":
        pinned = PinnedLso(checkpoint.rstrip("/") + "/txnwatch-pinned-lso.json",
                           lambda topic: cfg.thresholds_for(topic).max_timeout_ms + cfg.thresholds_for(topic).padding_ms,
                           functools.partial(abort_commands, cfg=alert_cfg), REQUIRED_PERMISSION)
    w = out.writeStream.outputMode("update").option("checkpointLocation", checkpoint).foreachBatch(
        make_batch_writer(enricher, sinks, availability, ledger, pinned))
    if query_name:
        w = w.queryName(query_name)
    w = w.trigger(**(trigger or {"processingTime": "2 seconds"}))
    return w.start()


def stop_gracefully(query, timeout_s: float = 30.0) -> None:
    """Stop between micro-batches: an interrupted batch is replayed on restart anyway, but
    interrupting it mid-sink makes Spark log a long, alarming stack trace. (The live source has
    "data" at every trigger, its progress rows, so only the running trigger is waited for.)"""
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        if not query.status.get("isTriggerActive"):
            break
        time.sleep(0.05)
    query.stop()

