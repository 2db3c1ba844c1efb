"""Prometheus endpoint on the driver (``docs/metrics.md`` lists every metric).

:class:`Metrics` serves its own :class:`prometheus_client.CollectorRegistry` over HTTP and is
fed once per micro-batch through :meth:`Metrics.observe`, registered as an ``on_batch`` callback
of :class:`streaming.microbatch.SinkSet`. ``observe(batch_id, stats)`` reads:

``open_alerts``  {key: {"status", "alert"}}: the open findings (late/hanging) → late/hanging
                 gauges, partitions with late transactions; also the per-partition open
                 transaction gauges when ``open_transactions`` is absent (findings only).
                 ``blocked_groups`` of the open findings → ``txnwatch_blocked_groups`` per partition.
``alerts``       alerts published by this micro-batch → ``txnwatch_alerts_total{status}``.
``gaps``         gap rows of this micro-batch → ``txnwatch_gaps_total``.
``partitions``   {"topic-partition": {high_watermark, lso, log_start_offset}} → LSO lag.
optional:
``open_transactions``  list of {topic, partition, first_ts}: every open transaction, not only
                 findings (preferred source of the per-partition open-transaction gauges).
``now_ms``       the job clock for ages (default: wall clock).
``duration_ms`` / ``duration_s``  the micro-batch duration; without it the duration comes from a
                 Spark ``StreamingQueryListener`` attached on the first micro-batch.
``source_lag``   records behind the source's end, as reported by the source.
``quarantined``  rows quarantined by the quality gate in this micro-batch.
``cluster``      the cluster label (default: the constructor's, else the alerts').
``transaction_version``  the cluster's finalized ``transaction.version`` (live path; None = not
                 reported) → ``txnwatch_transaction_version``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from streaming.vocab import FINDING_STATUSES, HANGING, HANGING_CAUSES, LATE, STATUSES

log = logging.getLogger("txnwatch")

TXN_STATE_TOPIC = "__transaction_state"
# Name prefix of the quality gate's own query (streaming.quality.gate), whose batches are not the job's.
QUALITY_QUERY_PREFIX = "txnwatch-quality"
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def _split_tp(name: str) -> tuple[str, str]:
    topic, _, part = name.rpartition("-")
    return (topic, part) if topic and part.lstrip("-").isdigit() else (name, "")


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


class Metrics:
    """The driver's Prometheus endpoint. ``port=0`` picks a free port (``.port`` tells which)."""

    def __init__(self, port: int, registry: CollectorRegistry | None = None, *, addr: str = "0.0.0.0",
                 cluster: str | None = None, attach_listener: bool = True, query_name: str | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.cluster = cluster
        self.query_name = query_name
        self._attach = attach_listener
        self._listener: Any = None
        self._listener_spark: Any = None
        self._lock = threading.Lock()
        self._seen: dict[str, set[tuple[str, ...]]] = {}
        r = self.registry
        tp = ["cluster", "topic", "partition"]
        self.open_transactions = Gauge(
            "txnwatch_open_transactions", "Open transactions per partition (findings only unless the job "
            "reports every open transaction)", tp, registry=r)
        self.max_open_seconds = Gauge(
            "txnwatch_max_open_transaction_seconds", "Age of the oldest open transaction per partition "
            "(KIP-664 MaxActiveTransactionDuration)", tp, registry=r)
        self.lso_lag = Gauge("txnwatch_lso_lag_records", "High watermark minus last stable offset per partition",
                             tp, registry=r)
        self.blocked_groups = Gauge(
            "txnwatch_blocked_groups", "Consumer groups an open finding holds now at the LSO (the alert's "
            "blocked_groups), per partition (live path)", ["cluster", "topic", "partition"], registry=r)
        self.late = Gauge("txnwatch_late_transactions", "Open findings with status late", ["cluster"], registry=r)
        self.transaction_version = Gauge(
            "txnwatch_transaction_version", "The cluster's finalized transaction.version feature level "
            "(ApiVersions v3+, KIP-890/KIP-1022; live path, informational)", ["cluster"], registry=r)
        self.hanging = Gauge("txnwatch_hanging_transactions", "Open findings with status hanging, by cause",
                             ["cluster", "cause"], registry=r)
        self.late_partitions = Gauge(
            "txnwatch_partitions_with_late_transactions", "Partitions holding a transaction open longer than the "
            "threshold (Kafka's PartitionsWithLateTransactionsCount, txnwatch threshold)", ["cluster"], registry=r)
        self.source_lag = Gauge("txnwatch_source_lag", "Records behind the end of the source, as reported by it",
                                ["cluster"], registry=r)
        self.batch_duration = Histogram("txnwatch_microbatch_duration_seconds", "Micro-batch duration",
                                        ["cluster"], buckets=DURATION_BUCKETS, registry=r)
        self.last_batch = Gauge("txnwatch_last_batch_timestamp_seconds",
                                "Wall-clock time the last micro-batch was published", ["cluster"], registry=r)
        self.gaps = Counter("txnwatch_gaps", "Gap rows (unreadable or missing input)", ["cluster"], registry=r)
        self.quarantined = Counter("txnwatch_quarantined", "Event rows quarantined by the quality gate",
                                   ["cluster"], registry=r)
        self.alerts = Counter("txnwatch_alerts", "Alerts published, by status", ["cluster", "status"], registry=r)
        self.unavailable = Gauge("txnwatch_partitions_unavailable", "Partitions the live source cannot read now "
                                 "(no leader, leader/storage error, leader not answering), by topic",
                                 ["cluster", "topic"], registry=r)
        self.lagging = Gauge("txnwatch_partitions_lagging", "Partitions read short of their high watermark this "
                             "micro-batch (max_offsets_per_trigger): no new verdicts there until caught up",
                             ["cluster", "topic"], registry=r)
        self.unavailable_seconds = Gauge("txnwatch_partitions_unavailable_seconds", "How long the longest-unavailable "
                                         "partition of the topic has been unreadable", ["cluster", "topic"], registry=r)
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port: int = self._server.server_port
        if cluster is not None:
            self._init_cluster(cluster)

    # -- helpers -----------------------------------------------------------------------------
    def _init_cluster(self, cluster: str) -> None:
        """Series that must exist at 0 before anything happens (so rules like ``> 0`` work)."""
        self.late.labels(cluster).set(0)
        self.late_partitions.labels(cluster).set(0)
        for c in HANGING_CAUSES:
            self.hanging.labels(cluster, c).set(0)
        for s in STATUSES:
            self.alerts.labels(cluster, s)
        self.gaps.labels(cluster)
        self.quarantined.labels(cluster)

    def _cluster_of(self, stats: dict[str, Any]) -> str:
        if self.cluster is None:
            cand = stats.get("cluster")
            if not cand:
                for entry in (stats.get("open_alerts") or {}).values():
                    cand = (entry.get("alert") or {}).get("cluster")
                    break
            if not cand:
                for a in stats.get("alerts") or []:
                    cand = a.get("cluster")
                    break
            self.cluster = str(cand or "default")
            self._init_cluster(self.cluster)
        return self.cluster

    def _set_series(self, name: str, gauge: Gauge, values: dict[tuple[str, ...], float]) -> None:
        """Set the labelled values and drop series not reported any more."""
        for labels, v in values.items():
            gauge.labels(*labels).set(v)
        for labels in self._seen.get(name, set()) - set(values):
            try:
                gauge.remove(*labels)
            except KeyError:  # pragma: no cover
                pass
        self._seen[name] = set(values)

    # -- per micro-batch ---------------------------------------------------------------------
    def observe(self, batch_id: int, stats: dict[str, Any]) -> None:
        """Update every metric from one micro-batch's stats (see the module docstring)."""
        with self._lock:
            self._observe(batch_id, stats)

    def _observe(self, batch_id: int, stats: dict[str, Any]) -> None:
        cl = self._cluster_of(stats)
        now_ms = _num(stats.get("now_ms"))
        now_ms = now_ms if now_ms is not None else time.time() * 1000.0
        active = [e for e in (stats.get("open_alerts") or {}).values() if isinstance(e, dict)]
        findings = [(e.get("status"), e.get("alert") or {}) for e in active]

        tv = _num(stats.get("transaction_version"))
        if tv is not None:
            self.transaction_version.labels(cl).set(tv)

        # cluster-wide finding gauges
        late = sum(1 for s, _ in findings if s == LATE)
        self.late.labels(cl).set(late)
        causes = dict.fromkeys(HANGING_CAUSES, 0)
        for s, a in findings:
            if s == HANGING:
                c = a.get("cause") or "unknown"
                causes[c] = causes.get(c, 0) + 1
        self._set_series("hanging", self.hanging, {(cl, c): float(n) for c, n in causes.items()})
        late_parts = {(a.get("topic"), a.get("partition")) for s, a in findings if s in FINDING_STATUSES}
        self.late_partitions.labels(cl).set(len(late_parts))
        blocked: dict[tuple[str, ...], set[str]] = {}
        for s, a in findings:
            if s in FINDING_STATUSES and a.get("blocked_groups") is not None:
                blocked.setdefault((cl, str(a.get("topic")), str(a.get("partition"))), set()).update(
                    a["blocked_groups"])
        self._set_series("blocked_groups", self.blocked_groups, {k: float(len(v)) for k, v in blocked.items()})

        # per partition: open transactions and the oldest one's age
        # the coordinator's own partitions never hold transactions: not reported per partition
        partitions = {k: v for k, v in (stats.get("partitions") or {}).items()
                      if _split_tp(k)[0] != TXN_STATE_TOPIC}
        opened: dict[tuple[str, str], list[float]] = {}
        if stats.get("open_transactions") is not None:
            for t in stats["open_transactions"]:
                ts = _num(t.get("first_ts"))
                opened.setdefault((str(t.get("topic")), str(t.get("partition"))), []).append(
                    max(0.0, (now_ms - ts) / 1000.0) if ts is not None else 0.0)
        else:
            for s, a in findings:
                if s not in FINDING_STATUSES:
                    continue
                ts = _num(a.get("first_ts"))
                age = max(0.0, (now_ms - ts) / 1000.0) if ts is not None else (_num(a.get("open_ms")) or 0) / 1000
                opened.setdefault((str(a.get("topic")), str(a.get("partition"))), []).append(age)
        keys = set(opened) | {_split_tp(name) for name in partitions}
        self._set_series("open", self.open_transactions,
                         {(cl, t, p): float(len(opened.get((t, p), []))) for t, p in keys})
        self._set_series("age", self.max_open_seconds,
                         {(cl, t, p): max(opened.get((t, p), [0.0])) for t, p in keys})

        lag: dict[tuple[str, ...], float] = {}
        for name, part in partitions.items():
            hw, lso = _num((part or {}).get("high_watermark")), _num((part or {}).get("lso"))
            if hw is not None and lso is not None:
                lag[(cl, *_split_tp(name))] = max(0.0, hw - lso)
        self._set_series("lso_lag", self.lso_lag, lag)

        self._set_series("lagging", self.lagging,
                         {(cl, t): float(n) for t, n in (stats.get("lagging") or {}).items()})
        down = stats.get("unavailable") or {}
        self._set_series("unavailable", self.unavailable, {(cl, t): float(n) for t, (n, _) in down.items()})
        self._set_series("unavailable_s", self.unavailable_seconds,
                         {(cl, t): age / 1000.0 for t, (_, age) in down.items()})

        # counters and the rest
        for a in stats.get("alerts") or []:
            self.alerts.labels(a.get("cluster") or cl, a.get("status") or "unknown").inc()
        gaps = stats.get("gaps") or []
        if gaps:
            self.gaps.labels(cl).inc(len(gaps))
        q = _num(stats.get("quarantined"))
        if q:
            self.quarantined.labels(cl).inc(q)
        lag_src = stats.get("source_lag")
        if isinstance(lag_src, dict):
            lag_src = sum(v for v in (_num(x) for x in lag_src.values()) if v is not None)
        if _num(lag_src) is not None:
            self.source_lag.labels(cl).set(_num(lag_src))
        dur = _num(stats.get("duration_s"))
        if dur is None and _num(stats.get("duration_ms")) is not None:
            dur = _num(stats.get("duration_ms")) / 1000.0
        if dur is not None:
            self.batch_duration.labels(cl).observe(dur)
        elif self._attach and self._listener is None:
            self._attach_active_session()
        self.last_batch.labels(cl).set(time.time())

    def add_quarantined(self, n: int) -> None:
        """Count rows quarantined outside ``observe`` (the quality gate)."""
        if n:
            with self._lock:
                self.quarantined.labels(self.cluster or "default").inc(n)

    def observe_duration(self, seconds: float) -> None:
        self.batch_duration.labels(self.cluster or "default").observe(seconds)

    # -- micro-batch durations from Spark ----------------------------------------------------
    def attach(self, spark: Any, query_name: str | None = None) -> None:
        """Record every micro-batch's ``batchDuration`` from a ``StreamingQueryListener``: only the
        query named ``query_name`` when given, else every query of the session except the quality
        gate's (``txnwatch-quality*``)."""
        from pyspark.sql.streaming import StreamingQueryListener

        metrics = self
        name = query_name or self.query_name

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                p = event.progress
                if name and p.name != name:
                    return
                if not name and (p.name or "").startswith(QUALITY_QUERY_PREFIX):
                    return  # the quality gate's own query (streaming.quality.gate.start_quality_query)
                if p.numInputRows or p.batchDuration:
                    metrics.observe_duration(p.batchDuration / 1000.0)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self._listener = _Listener()
        self._listener_spark = spark
        spark.streams.addListener(self._listener)

    def _attach_active_session(self) -> None:
        if "pyspark.sql" not in sys.modules:
            return
        try:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
            if spark is not None:
                self.attach(spark)
        except Exception as exc:  # metrics must never fail a micro-batch
            log.info("metrics: cannot attach a StreamingQueryListener: %s", exc)
            self._attach = False

    def close(self) -> None:
        """Stop serving and detach the listener."""
        if self._listener is not None and self._listener_spark is not None:
            try:
                self._listener_spark.streams.removeListener(self._listener)
            except Exception:  # session may be gone already
                pass
            self._listener = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> Metrics:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
