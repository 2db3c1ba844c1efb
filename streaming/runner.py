"""``txnwatch run``: the always-on job (Kafka, a log dir, or a drop directory of dumps → sinks).

Logs one progress line per micro-batch, stops cleanly on SIGTERM/SIGINT (the query is stopped
between micro-batches, sinks are flushed by then) and resumes from its checkpoint on restart.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from typing import Any

from streaming.alerts import AlertConfig
from streaming.broker_evidence import BrokerEvidence, KafkaLookback
from streaming.config import (
    Config,
    ConfigError,
    KafkaConfig,
    SinksConfig,
    StreamingConfig,
    engine_config,
    spark_conf,
)
from streaming.gc_pause import widen_young_generation
from streaming.microbatch import SinkSet
from streaming.pipeline import spark_session, start_query, stop_gracefully
from streaming.sources.kafka_security import spark_source_options
from streaming.vocab import HANGING, LATE

log = logging.getLogger("txnwatch")


def checkpoint_dir(streaming: StreamingConfig, cluster: str) -> str:
    """``streaming.checkpoint`` or ``checkpoints/<cluster>/`` (URLs pass through to Spark)."""
    if streaming.checkpoint:
        return streaming.checkpoint
    return os.path.abspath(os.path.join("checkpoints", cluster))


def build_sinks(sinks_cfg: SinksConfig, kafka: KafkaConfig, *, console_out=None) -> SinkSet:
    """The configured alert sinks (any combination of jsonl, console, kafka)."""
    sinks = SinkSet()
    enabled = sinks_cfg.enabled
    unknown = set(enabled) - {"jsonl", "console", "kafka"}
    if unknown:
        raise ConfigError(f"sinks.enabled: unknown sink(s) {sorted(unknown)} (known: jsonl, console, kafka)")
    if "jsonl" in enabled:
        from streaming.sinks.jsonl import JsonlSink

        sinks.sinks.append(JsonlSink(sinks_cfg.jsonl_path))
    if "console" in enabled:
        from streaming.sinks.console import ConsoleSink

        sinks.sinks.append(ConsoleSink(console_out))
    if "kafka" in enabled:
        from streaming.sinks.kafka_topic import KafkaAlertSink

        if not kafka.bootstrap_servers:
            raise ConfigError("sinks.enabled contains kafka but kafka.bootstrap_servers is empty")
        from streaming.sinks.kafka_topic import BufferedAlertSink

        # returns once the broker acknowledged the micro-batch's alerts (at least once across a
        # kill -9); retries in order through topic outages
        sinks.sinks.append(BufferedAlertSink(KafkaAlertSink.from_config(kafka, sinks_cfg)))
    return sinks


def file_source_options(cfg: Config, **where: str) -> dict[str, str]:
    """The options a file source (``segments``, ``dumps``) takes from the config, plus ``where``
    (``path``, ``dir``, ``paths``...). Spark's data source options are strings: this and
    :func:`source_options` are where a :class:`Config` becomes them, each source's ``_options``
    (``parse_options`` for ``kafka-txn``) where they become typed again."""
    return {**where, "cluster": cfg.cluster,
            # how many __transaction_state partitions make the coordinator view complete (detection.md §3.1)
            "txn_state_partitions": str(cfg.coordinator.txn_state_partitions),
            "clock_skew_tolerance_ms": str(cfg.thresholds.clock_skew_tolerance_ms)}


def source_options(cfg: Config, source: str, path: str | None, *,
                   once: bool = False) -> tuple[str, dict[str, str], bool]:
    """(format, options, coordinator available) for the chosen source of ``txnwatch run``."""
    if source in ("segments", "dumps"):
        if not path:
            raise ConfigError(f"--path is required with --source {source}")
        if not os.path.isdir(path):
            raise ConfigError(f"--path {path}: not a directory")
        if source == "segments":
            from streaming.sources.logdir import list_partitions

            coord = any(p.is_txn_state for p in list_partitions(path))
            return "segments", file_source_options(cfg, path=path), coord
        # Whether __transaction_state dumps are dropped too cannot be known in advance; without
        # them every finding must stay "exceeds-max-timeout, unverified" (never coordinator-unaware).
        return "dumps", file_source_options(cfg, dir=path), cfg.dumps.coordinator_view
    k = cfg.kafka
    if not k.bootstrap_servers:
        raise ConfigError("kafka.bootstrap_servers is required for --source kafka (config, "
                          "TXNWATCH_KAFKA_BOOTSTRAP_SERVERS or --bootstrap-server)")
    if k.read_mode not in ("probe", "full"):
        raise ConfigError(f"kafka.read_mode: expected \"probe\" or \"full\", got {k.read_mode!r}")
    if k.read_mode == "probe" and k.starting_offsets != "lso":
        raise ConfigError(f"kafka.starting_offsets = {k.starting_offsets!r} needs kafka.read_mode = \"full\": "
                          "the probe mode reads only what is open, from the LSO")
    opts = {"bootstrap_servers": k.bootstrap_servers, "cluster": cfg.cluster,
            "topics": json.dumps(list(k.topics)), "topic_pattern": k.topic_pattern,
            "include_internal": str(k.include_internal).lower(),
            "watch_consumer_offsets": str(k.watch_consumer_offsets).lower(), "starting_offsets": k.starting_offsets,
            "max_offsets_per_trigger": str(k.max_offsets_per_trigger), "fetch_max_bytes": str(k.fetch_max_bytes),
            "client_id": k.client_id, "request_timeout_ms": str(k.request_timeout_ms),
            "broker_timeout_ms": str(k.broker_timeout_ms),
            "unavailable_timeout_ms": str(k.unavailable_timeout_ms), "groups_per_broker": str(k.groups_per_broker),
            "read_mode": k.read_mode, "probe_bytes": str(k.probe_bytes),
            "metadata_max_age_ms": str(k.metadata_max_age_ms),
            "probe_follow_after_ms": str(follow_after_ms(cfg)),
            "security_protocol": k.security_protocol}
    if once:
        opts["ride_through_ms"] = str(k.once_ride_through_ms)
    # Secrets become env:/file: references (never plan-visible options); runs before Spark starts.
    opts.update(spark_source_options(k.security()))
    return "kafka-txn", opts, True


def follow_after_ms(cfg: Config) -> int:
    """Probe mode: from which age on a partition's oldest open transaction makes the source read
    the partition in full. The smallest ``max_timeout_ms`` (cluster-wide or per topic): no
    coordinator keeps a transaction open longer (``transaction.max.timeout.ms``), and a finding
    needs that plus ``padding_ms``, which leaves the padding to read what is open behind it."""
    t = cfg.thresholds
    return min([t.max_timeout_ms] + [v.max_timeout_ms for v in t.topics.values() if v.max_timeout_ms is not None])


#: ``run --once`` ended with partitions it could not read (it judged the rest).
EXIT_UNREAD = 3


def alert_config(cfg: Config, *, live: bool) -> AlertConfig:
    """The enrichment's settings. ``txn_state_partitions`` only for files and dumps: on the live
    path n comes from the cluster's metadata (progress rows), never from a configured guess."""
    return AlertConfig(bootstrap_servers=cfg.kafka.bootstrap_servers or None,
                       txn_state_partitions=None if live else cfg.coordinator.txn_state_partitions,
                       clock_skew_tolerance_ms=cfg.thresholds.clock_skew_tolerance_ms)


def broker_evidence(cfg: Config) -> BrokerEvidence:
    """What the driver may ask the live cluster about a finding (look-back for P's last marker);
    the connection is opened on the first finding that needs it."""
    from streaming.sources.kafka_security import kafka_python_kwargs
    from streaming.sources.kafka_wire import KafkaWire

    k = cfg.kafka

    def connect() -> KafkaWire:
        return KafkaWire(k.bootstrap_servers, client_id=k.client_id, request_timeout_ms=k.request_timeout_ms,
                         **kafka_python_kwargs(k.security()))

    return KafkaLookback(connect, max_bytes=k.lookback_max_bytes, span_max_bytes=k.span_max_bytes)


class ProgressLogger:
    """One log line per micro-batch: rows in, findings, batch duration, source lag, and the
    partitions that could not be read (by topic, with the longest outage)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.batches = 0
        self.unavailable: list[str] = []  # "topic-partition" unreadable as of the last batch
        self.judged = 0  # findings published over the run

    def __call__(self, batch_id: int, stats: dict[str, Any]) -> None:
        self.batches += 1
        active = stats["open_alerts"]
        late = sum(1 for a in active.values() if a["status"] == LATE)
        hanging = sum(1 for a in active.values() if a["status"] == HANGING)
        lag = sum(max((p.get("high_watermark") or 0) - (p.get("lso") or p.get("high_watermark") or 0), 0)
                  for p in stats["partitions"].values())
        log.warning("batch %d: %d rows, %d progress, %d gaps, %d alerts out; open findings: %d late, %d hanging; "
                    "LSO lag %d records", batch_id, stats["rows"], stats["progress"], len(stats["gaps"]),
                    len(stats["alerts"]), late, hanging, lag)
        self.unavailable = list(stats.get("unavailable_partitions") or [])
        self.judged += sum(1 for a in stats["alerts"] if a.get("status") not in ("unavailable", "available"))
        behind = stats.get("lagging") or {}
        if behind:
            log.warning("batch %d: partitions lagging (verdicts held until read through now): %s", batch_id,
                        ", ".join(f"{t}: {n}" for t, n in sorted(behind.items())))
        down = stats.get("unavailable") or {}
        if down:
            log.warning("batch %d: partitions unavailable: %s", batch_id, ", ".join(
                f"{t}: {n} for up to {age // 1000} s" for t, (n, age) in sorted(down.items())))


def broker_confirm(cfg: Config):
    """Every answer the live cluster gives about a finding: KIP-664 and consumer groups
    (``streaming.broker_confirm``), composed with the look-back of :func:`broker_evidence`."""
    from streaming.broker_confirm import KafkaBrokerConfirm
    from streaming.sources.kafka_security import kafka_python_kwargs

    k = cfg.kafka
    return KafkaBrokerConfirm(k.bootstrap_servers, client_id=f"{k.client_id}-confirm",
                              security=kafka_python_kwargs(k.security()), request_timeout_ms=k.request_timeout_ms,
                              groups_refresh_ms=k.groups_refresh_ms, lookback=broker_evidence(cfg))


def run_job(cfg: Config, *, source: str, path: str | None, once: bool = False,
            stop_event: threading.Event | None = None, console_out=None) -> int:
    """Start the streaming query and block until stopped (signal, ``stop_event`` or ``once``).

    ``cfg``: the :class:`Config` (:func:`streaming.config.load_config`)."""
    widen_young_generation()  # the writer's enricher and availability hold an entry per partition (gc_pause)
    fmt, opts, coord = source_options(cfg, source, path, once=once)
    sinks = build_sinks(cfg.sinks, cfg.kafka, console_out=console_out)
    progress = ProgressLogger()
    sinks.on_batch.append(progress)
    name = f"txnwatch-{cfg.cluster}"
    metrics = None
    if cfg.metrics.port:
        from streaming.metrics import Metrics

        metrics = Metrics(cfg.metrics.port, cluster=cfg.cluster, query_name=name)
        sinks.on_batch.append(metrics.observe)
        log.warning("metrics on http://0.0.0.0:%d/metrics", metrics.port)
    from streaming.ui import serve_for_job

    ui = serve_for_job(cfg.ui, cfg.streaming, sinks.on_batch, source=f"{name} ({fmt})",
                       audit_path=cfg.abort.audit_path)
    # run --once is one query and an exit, like scan: the JVM options for a short run
    # only the source this job reads (the quality gate reads the same one)
    spark = spark_session(master=cfg.streaming.master, conf=spark_conf(cfg.streaming), short_run=once,
                          sources=[fmt])
    ck = checkpoint_dir(cfg.streaming, cfg.cluster)
    trigger = {"availableNow": True} if once else {"processingTime": cfg.streaming.trigger_interval}
    broker = broker_confirm(cfg) if fmt == "kafka-txn" else None
    q = start_query(spark, fmt, opts, engine_config(cfg, coordinator_available=coord),
                    alert_config(cfg, live=fmt == "kafka-txn"), sinks, ck,
                    trigger=trigger, query_name=name, broker=broker)
    queries = [q]
    if cfg.quality.enabled:
        # The data-quality gate reads the same source as its own query (own checkpoint): the
        # detection query's foreachBatch only sees the state operator's output, not the events.
        from streaming.quality import QualityGate, start_quality_query

        gate = QualityGate.from_config(cfg.quality, metrics=metrics)
        queries.append(start_quality_query(spark, fmt, opts, gate, _join(ck, "quality"), trigger=trigger,
                                           query_name=f"txnwatch-quality-{cfg.cluster}"))
    log.warning("txnwatch running: source=%s checkpoint=%s", fmt, ck)
    stop = stop_event or threading.Event()

    def _on_signal(signum, _frame):
        log.warning("signal %d: stopping after the current micro-batch", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
    while all(x.isActive for x in queries) and not stop.is_set():
        q.awaitTermination(1)
    for x in queries:
        if x.isActive:
            stop_gracefully(x)
    errors = [x.exception() for x in queries if x.exception() is not None]
    for s in sinks.sinks:
        close = getattr(s, "close", None)
        if close:
            close()
    if broker is not None:
        broker.close()
    if metrics is not None:
        metrics.close()
    if ui is not None:
        ui.close()
    if errors:
        log.error("query failed: %s", errors[0])
        return 1
    if once and progress.unavailable:
        log.error("run --once: published %d finding(s) from the partitions it read; could not read %d "
                  "partition(s): %s", progress.judged, len(progress.unavailable), ", ".join(progress.unavailable))
        return EXIT_UNREAD
    return 0


def _join(base: str, sub: str) -> str:
    return base.rstrip("/") + "/" + sub
