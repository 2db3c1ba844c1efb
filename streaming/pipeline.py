"""The Spark job's session and query: source → :mod:`streaming.microbatch` (the one loop) → sinks.

Thin glue: the micro-batch loop itself — the state function given to ``applyInPandasWithState``,
the ``foreachBatch`` body, their order and delivery guarantees — is :mod:`streaming.microbatch`,
which the in-process engine (:mod:`streaming.local_engine`) and the test harnesses run too. Every
decision is made in :mod:`streaming.state_machine` / :mod:`streaming.verdict` (per producer id)
and :mod:`streaming.alerts` (enrichment and commands, driver side).

Keys: data, marker, snapshot and coordinator rows are grouped by ``route_pid`` (their producer
id; coordinator rows are fanned out by the source, see ``normalize.route_coordinator_records``).
Progress and gap rows carry ``route_pid = -1`` and are passed through the same operator.

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
from typing import Any

from streaming.alerts import REQUIRED_PERMISSION, AlertConfig, Enricher, abort_commands
from streaming.availability import Availability
from streaming.broker_evidence import BrokerEvidence
from streaming.microbatch import BatchWriter, SinkSet, detect, spark_foreach_batch
from streaming.pinned_lso import PinnedLso
from streaming.state_machine import EngineConfig

log = logging.getLogger("txnwatch")

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


def start_query(spark, source_format: str, options: dict[str, str], cfg: EngineConfig, alert_cfg: AlertConfig,
                sinks: SinkSet, checkpoint: str, *, trigger: dict[str, Any] | None = None,
                query_name: str | None = None, broker: BrokerEvidence | None = None, end_offsets: Any = None):
    """Start the streaming job (the source's events through :func:`streaming.microbatch.detect`
    and the :class:`streaming.microbatch.BatchWriter`); returns the StreamingQuery. ``broker``: the live cluster's answers
    for the enrichment (None for files and dumps); ``end_offsets``: ``scan --bootstrap-server``'s
    ListOffsets lookup (:class:`streaming.alerts.Enricher`)."""
    ledger = None
    if source_format == "kafka-txn":
        from streaming.sources.kafka_unread import LEDGER_OPTION, ledger_path

        ledger = ledger_path(checkpoint)
        options = {**options, LEDGER_OPTION: ledger}
    events = spark.readStream.format(source_format).options(**options).load()
    out = detect(events, cfg)
    enricher = Enricher(alert_cfg, checkpoint.rstrip("/") + "/txnwatch-sink.json", broker=broker,
                        end_offsets=end_offsets)
    availability = Availability(checkpoint.rstrip("/") + "/txnwatch-availability.json")
    pinned = None
    if source_format == "kafka-txn":
        pinned = PinnedLso(checkpoint.rstrip("/") + "/txnwatch-pinned-lso.json",
                           lambda topic: cfg.thresholds_for(topic).max_timeout_ms + cfg.thresholds_for(topic).padding_ms,
                           functools.partial(abort_commands, cfg=alert_cfg), REQUIRED_PERMISSION)
    w = out.writeStream.outputMode("update").option("checkpointLocation", checkpoint).foreachBatch(
        spark_foreach_batch(BatchWriter(enricher, sinks, availability, ledger, pinned)))
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

