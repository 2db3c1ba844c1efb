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
import time
from typing import Any

from streaming.alerts import REQUIRED_PERMISSION, AlertConfig, Enricher, abort_commands
from streaming.availability import Availability
from streaming.broker_evidence import BrokerEvidence
from streaming.microbatch import BatchWriter, SinkSet, detect, spark_foreach_batch
from streaming.pinned_lso import PinnedLso
from streaming.spark_session import SPARK_DEFAULTS, register_sources, spark_session
from streaming.state_machine import EngineConfig

log = logging.getLogger("txnwatch")

# The session itself lives in streaming.spark_session (no pandas there: the benchmark's floor
# imports it); re-exported here for the callers that always imported it from this module.
__all__ = ["SPARK_DEFAULTS", "register_sources", "spark_session", "start_query", "stop_gracefully"]


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

