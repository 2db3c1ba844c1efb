"""Data contract of the event table and of the alerts, checked with Great Expectations (GX Core 1.x).

Two expectation suites are defined in code, each from one list of :class:`Rule` objects:

``EVENT_RULES`` (the event table of :mod:`streaming.events`, validated on a **Spark** datasource)
    kind known; per-kind required keys (row conditions on ``kind``); offsets non-negative and
    ``first_offset <= last_offset`` within data spans and markers; ``producer_epoch`` in
    [-1, 32767]; ``coordinator_epoch >= -1``; ``txn_state`` a known coordinator state; progress
    offsets ordered (``log_start_offset <= lso <= high_watermark``); timestamps plausible
    (``first_ts``/``last_ts`` between 2010-01-01 and ``event_time`` + 1 day).
``ALERT_RULES`` (alert objects, validated on a **pandas** datasource)
    the contract of ``docs/alerts.md`` / ``streaming/alert.schema.json``: schema version, required
    fields, causes per status, commands present exactly when they must be, key consistent with
    its fields.

One definition, two uses: every rule yields the GX expectation (which decides success) *and* an
equivalent Spark SQL predicate that selects the failing rows, so that failures can be reported
with the rule name and the row's ``source_position`` and quarantined (:func:`quarantine_sink`).
The failing-row predicates are only evaluated for the rules GX reported as failed.

GX runs with an ephemeral context (nothing is written to disk) and analytics disabled.
On the Spark datasource GX runs about one Spark job per metric (≈50-110 for this suite), i.e.
seconds per validation whatever the number of rows; the pandas engine (``engine="pandas"``,
micro-batch sized inputs) is ~10x cheaper. :class:`QualityGate` validates a sample of
micro-batches (``docs/metrics.md``: measured overhead, defaults). ``python -m streaming.quality
measure`` repeats the measurement.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

os.environ["GX_ANALYTICS_ENABLED"] = "false"  # before great_expectations is imported anywhere

from streaming.events import KINDS  # noqa: E402
from streaming.vocab import (  # noqa: E402
    ALERT_FIELDS,
    COORDINATOR_STATES,
    EPOCH_SOURCES,
    HANGING_CAUSES,
    LATE_CAUSES,
    RESOLUTIONS,
)

log = logging.getLogger("txnwatch")

# Facts of the contract -----------------------------------------------------------------------
EPOCH_MIN, EPOCH_MAX = -1, 32767  # producer epoch: -1 (none) .. Short.MAX_VALUE
MIN_TS_MS = 1_262_304_000_000  # 2010-01-01T00:00:00Z: older timestamps are not plausible for Kafka 0.11+
FUTURE_SLACK_MS = 86_400_000  # a timestamp may be at most one day ahead of the event time

EVENT_SUITE = "txnwatch_events"
# Derived column added to the event table before validation (and dropped from reported rows):
# the latest plausible timestamp of a row, event_time + 1 day in epoch ms.
TS_LIMIT = "_ts_limit_ms"
TS_LIMIT_SQL = f"unix_millis(event_time) + {FUTURE_SLACK_MS}"
ALERT_SUITE = "txnwatch_alerts"


def _lit(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def _in(values: Iterable[Any]) -> str:
    return "(" + ", ".join(_lit(v) for v in values) + ")"


@dataclass(frozen=True)
class Rule:
    """One check of a contract: the GX expectation and the Spark predicate of its failing rows.

    ``check``: ``not_null`` | ``null`` | ``in_set`` | ``between`` | ``regex`` | ``a_ge_b``
    (column >= column_b, rows with either null ignored) | ``a_eq_b``.
    ``when`` is the row condition, written in the syntax common to Spark SQL and ``DataFrame.query``
    (``kind in ('data', 'marker')``, ``status == 'hanging'``). Column-map checks ignore nulls,
    like GX does, except ``not_null``.
    """

    name: str
    check: str
    description: str
    column: str | None = None
    when: str | None = None
    value_set: tuple[Any, ...] | None = None
    min_value: Any = None
    max_value: Any = None
    column_b: str | None = None
    regex: str | None = None

    # -- GX ---------------------------------------------------------------------------------
    def expectation(self, parser: str = "spark") -> Any:
        import great_expectations.expectations as gxe

        kw: dict[str, Any] = {"meta": {"rule": self.name, "description": self.description}}
        if self.when:
            kw.update(row_condition=self.when, condition_parser=parser)
        with warnings.catch_warnings():
            # string row conditions are deprecated since GX 1.9 in favour of Condition objects,
            # but are the only form shared by the Spark and pandas engines and our own filters.
            warnings.simplefilter("ignore", DeprecationWarning)
            if self.check == "not_null":
                return gxe.ExpectColumnValuesToNotBeNull(column=self.column, **kw)
            if self.check == "null":
                return gxe.ExpectColumnValuesToBeNull(column=self.column, **kw)
            if self.check == "in_set":
                return gxe.ExpectColumnValuesToBeInSet(column=self.column, value_set=list(self.value_set or ()),
                                                       **kw)
            if self.check == "between":
                return gxe.ExpectColumnValuesToBeBetween(column=self.column, min_value=self.min_value,
                                                         max_value=self.max_value, **kw)
            if self.check == "regex":
                return gxe.ExpectColumnValuesToMatchRegex(column=self.column, regex=self.regex, **kw)
            if self.check == "a_ge_b":
                return gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A=self.column, column_B=self.column_b, or_equal=True,
                    ignore_row_if="either_value_is_missing", **kw)
            if self.check == "a_eq_b":
                return gxe.ExpectColumnPairValuesToBeEqual(column_A=self.column, column_B=self.column_b,
                                                           ignore_row_if="either_value_is_missing", **kw)
        raise ValueError(f"rule {self.name}: unknown check {self.check!r}")

    # -- the same rule as a Spark SQL predicate selecting the failing rows -------------------
    def failing_predicate(self) -> str:
        c = f"`{self.column}`" if self.column else None
        if self.check == "not_null":
            bad = f"{c} IS NULL"
        elif self.check == "null":
            bad = f"{c} IS NOT NULL"
        elif self.check == "in_set":
            bad = f"{c} IS NOT NULL AND NOT ({c} IN {_in(self.value_set or ())})"
        elif self.check == "between":
            parts = []
            if self.min_value is not None:
                parts.append(f"{c} < {_lit(self.min_value)}")
            if self.max_value is not None:
                parts.append(f"{c} > {_lit(self.max_value)}")
            bad = f"{c} IS NOT NULL AND ({' OR '.join(parts)})"
        elif self.check == "regex":
            bad = f"{c} IS NOT NULL AND NOT ({c} RLIKE {_lit(self.regex)})"
        elif self.check in ("a_ge_b", "a_eq_b"):
            b = f"`{self.column_b}`"
            op = ">=" if self.check == "a_ge_b" else "="
            bad = f"{c} IS NOT NULL AND {b} IS NOT NULL AND NOT ({c} {op} {b})"
        else:
            raise ValueError(f"rule {self.name}: unknown check {self.check!r}")
        return f"({self.when}) AND ({bad})" if self.when else bad


def _kinds(*kinds: str) -> str:
    """Row condition valid both as Spark SQL and as ``DataFrame.query``."""
    return f"kind == {_lit(kinds[0])}" if len(kinds) == 1 else f"kind in {_in(kinds)}"


def _event_rules() -> tuple[Rule, ...]:
    r: list[Rule] = [
        Rule("kind.not_null", "not_null", "every event has a kind", column="kind"),
        Rule("kind.known", "in_set", f"kind is one of {', '.join(KINDS)}", column="kind", value_set=KINDS),
        Rule("event_time.not_null", "not_null", "every event carries the observation time (watermark)",
             column="event_time"),
    ]
    for col in ("topic", "partition", "producer_id", "first_offset", "last_offset"):
        r.append(Rule(f"span.{col}.not_null", "not_null", f"data spans and markers have {col}", column=col,
                      when=_kinds("data", "marker")))
    r += [
        Rule("span.producer_id.non_negative", "between", "producer_id >= 0 in data spans and markers",
             column="producer_id", when=_kinds("data", "marker"), min_value=0),
        Rule("marker.marker.not_null", "not_null", "a marker row names its control type", column="marker",
             when=_kinds("marker")),
        Rule("txn_state.transactional_id.not_null", "not_null", "coordinator records have a transactional id",
             column="transactional_id", when=_kinds("txn_state")),
        Rule("txn_state.coordinator_epoch.not_null", "not_null",
             "coordinator records carry the coordinator epoch (partitionLeaderEpoch)",
             column="coordinator_epoch", when=_kinds("txn_state")),
        Rule("txn_state.state.known", "in_set", "txn_state is a coordinator TransactionState name",
             column="txn_state", when=_kinds("txn_state"), value_set=COORDINATOR_STATES),
        Rule("progress.topic.not_null", "not_null", "progress rows name their topic", column="topic",
             when=_kinds("progress")),
        Rule("progress.partition.not_null", "not_null", "progress rows name their partition", column="partition",
             when=_kinds("progress")),
        Rule("gap.reason.not_null", "not_null", "gap rows say why bytes are missing", column="reason",
             when=_kinds("gap")),
        Rule("partition.non_negative", "between", "partition >= 0", column="partition", min_value=0),
    ]
    for col in ("first_offset", "last_offset"):
        r.append(Rule(f"offsets.{col}.non_negative", "between", f"{col} >= 0", column=col,
                      when=_kinds("data", "marker", "txn_state", "snapshot"), min_value=0))
    r += [
        Rule("span.first_le_last", "a_ge_b", "first_offset <= last_offset within a span or marker",
             column="last_offset", column_b="first_offset", when=_kinds("data", "marker")),
        Rule("producer_epoch.range", "between", f"producer_epoch in [{EPOCH_MIN}, {EPOCH_MAX}]",
             column="producer_epoch", min_value=EPOCH_MIN, max_value=EPOCH_MAX),
        Rule("coordinator_epoch.range", "between", "coordinator_epoch >= -1", column="coordinator_epoch",
             min_value=-1),
    ]
    for col in ("high_watermark", "lso", "log_start_offset"):
        r.append(Rule(f"progress.{col}.non_negative", "between", f"{col} >= 0", column=col,
                      when=_kinds("progress"), min_value=0))
    r += [
        Rule("progress.lso_le_high_watermark", "a_ge_b", "lso <= high_watermark", column="high_watermark",
             column_b="lso", when=_kinds("progress")),
        Rule("progress.log_start_le_high_watermark", "a_ge_b", "log_start_offset <= high_watermark",
             column="high_watermark", column_b="log_start_offset", when=_kinds("progress")),
    ]
    for col in ("first_ts", "last_ts"):
        r += [
            Rule(f"timestamps.{col}.after_2010", "between", f"{col} >= 2010-01-01", column=col,
                 min_value=MIN_TS_MS),
            Rule(f"timestamps.{col}.before_event_time_plus_1d", "a_ge_b", f"{col} <= event_time + 1 day",
                 column=TS_LIMIT, column_b=col),
        ]
    return tuple(r)


def _alert_rules() -> tuple[Rule, ...]:
    hanging, late, resolved = "status == 'hanging'", "status == 'late'", "status == 'resolved'"
    r: list[Rule] = [
        Rule("schema_version.is_1", "in_set", "schema_version == 1", column="schema_version", value_set=(1,)),
    ]
    for col in ("schema_version", "key", "status", "verified", "cluster", "topic", "partition", "producer_id",
                "first_offset", "data_deleted"):
        r.append(Rule(f"{col}.not_null", "not_null", f"{col} is required", column=col))
    r += [
        Rule("status.known", "in_set", "status is late, hanging or resolved", column="status",
             value_set=("late", "hanging", "resolved")),
        Rule("key.format", "regex", "key = cluster/topic/partition/producer_id/first_offset", column="key",
             regex=r"^[^/]+/.+/[0-9]+/[0-9]+/[0-9]+$"),
        Rule("key.matches_fields", "a_eq_b", "key is built from the alert's own fields", column="key",
             column_b="_expected_key"),
        Rule("partition.non_negative", "between", "partition >= 0", column="partition", min_value=0),
        Rule("producer_id.non_negative", "between", "producer_id >= 0", column="producer_id", min_value=0),
        Rule("first_offset.non_negative", "between", "first_offset >= 0", column="first_offset", min_value=0),
        Rule("producer_epoch.range", "between", f"producer_epoch in [{EPOCH_MIN}, {EPOCH_MAX}]",
             column="producer_epoch", min_value=EPOCH_MIN, max_value=EPOCH_MAX),
        Rule("coordinator_epoch.non_negative", "between", "coordinator_epoch >= 0", column="coordinator_epoch",
             min_value=0),
        Rule("coordinator_state.known", "in_set", "coordinator_state is a TransactionState name",
             column="coordinator_state", value_set=COORDINATOR_STATES),
        Rule("coordinator_epoch_source.known", "in_set", "coordinator_epoch_source is a known source",
             column="coordinator_epoch_source", value_set=EPOCH_SOURCES),
    ]
    for col in ("open_ms", "idle_ms", "records", "bytes", "batches"):
        r.append(Rule(f"{col}.non_negative", "between", f"{col} >= 0", column=col, min_value=0))
    r += [
        # hanging: a hanging cause, the new-broker command and the permission, no resolution
        Rule("hanging.cause.not_null", "not_null", "hanging alerts have a cause", column="cause", when=hanging),
        Rule("hanging.cause.known", "in_set", "hanging cause is a hanging cause", column="cause", when=hanging,
             value_set=HANGING_CAUSES),
        Rule("hanging.abort_command_new.not_null", "not_null", "hanging alerts carry abort_command_new",
             column="abort_command_new", when=hanging),
        Rule("hanging.abort_command_new.format", "regex", "abort_command_new is a kafka-transactions abort",
             column="abort_command_new", when=hanging, regex=" abort --topic "),
        Rule("hanging.required_permission.not_null", "not_null", "hanging alerts name the required permission",
             column="required_permission", when=hanging),
        Rule("hanging.resolution.null", "null", "hanging alerts have no resolution", column="resolution",
             when=hanging),
        # late: a late cause, never a command
        Rule("late.cause.not_null", "not_null", "late alerts have a cause", column="cause", when=late),
        Rule("late.cause.known", "in_set", "late cause is a late cause", column="cause", when=late,
             value_set=LATE_CAUSES),
        Rule("late.abort_command_new.null", "null", "late alerts have no abort_command_new",
             column="abort_command_new", when=late),
        Rule("late.abort_command_legacy.null", "null", "late alerts have no abort_command_legacy",
             column="abort_command_legacy", when=late),
        Rule("late.resolution.null", "null", "late alerts have no resolution", column="resolution", when=late),
        # resolved: a resolution, no cause, never a command
        Rule("resolved.resolution.not_null", "not_null", "resolved alerts say how", column="resolution",
             when=resolved),
        Rule("resolved.resolution.known", "in_set", "resolution is a known resolution", column="resolution",
             when=resolved, value_set=RESOLUTIONS),
        Rule("resolved.cause.null", "null", "resolved alerts have no cause", column="cause", when=resolved),
        Rule("resolved.abort_command_new.null", "null", "resolved alerts have no abort_command_new",
             column="abort_command_new", when=resolved),
        Rule("resolved.abort_command_legacy.null", "null", "resolved alerts have no abort_command_legacy",
             column="abort_command_legacy", when=resolved),
        # legacy command only when the coordinator epoch is known
        Rule("legacy_command.needs_epoch", "null", "no legacy command when the coordinator epoch is unknown",
             column="abort_command_legacy", when="coordinator_epoch_source == 'unknown'"),
    ]
    return tuple(r)


EVENT_RULES: tuple[Rule, ...] = _event_rules()
ALERT_RULES: tuple[Rule, ...] = _alert_rules()


# Results ------------------------------------------------------------------------------------
@dataclass
class ExpectationOutcome:
    """One expectation's result, as GX reported it."""

    rule: str
    expectation_type: str
    success: bool
    description: str
    element_count: int | None = None
    unexpected_count: int | None = None
    examples: list[Any] = field(default_factory=list)
    exception: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class QualityResult:
    """Outcome of one validation: GX decides ``success``; ``failures`` are the failing rows, one
    entry per (row, failed rule): ``expectation``, ``reason``, ``source_position``, ``row``."""

    suite: str
    success: bool
    outcomes: list[ExpectationOutcome]
    failures: list[dict[str, Any]]
    gx_result: Any = None
    rows_validated: int | None = None
    seconds: float = 0.0
    failures_truncated: bool = False

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [o for o in self.outcomes if not o.success]

    def failed_rule_names(self) -> set[str]:
        return {o.rule for o in self.failed}

    def gx_json(self) -> dict[str, Any]:
        """The GX validation result as a JSON-able dict."""
        return self.gx_result.to_json_dict() if self.gx_result is not None else {}

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "success": self.success, "rows_validated": self.rows_validated,
                "seconds": round(self.seconds, 3), "expectations": [o.to_dict() for o in self.outcomes],
                "failures": self.failures, "failures_truncated": self.failures_truncated}


# GX plumbing --------------------------------------------------------------------------------
class _Gx:
    """The process-wide ephemeral GX context with one Spark and one pandas dataframe asset."""

    _lock = threading.Lock()
    _inst: _Gx | None = None

    def __init__(self) -> None:
        logging.getLogger("great_expectations").setLevel(logging.WARNING)  # no INFO chatter in the CLI
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import great_expectations as gx

            self.gx = gx
            from great_expectations.data_context.types.base import ProgressBarsConfig

            self.context = gx.get_context(mode="ephemeral")
            self.context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        self._spark_bd = None
        self._pandas_bd = None
        self.suites: dict[str, Any] = {}

    @classmethod
    def get(cls) -> _Gx:
        with cls._lock:
            if cls._inst is None:
                cls._inst = _Gx()
            return cls._inst

    def spark_batch_definition(self) -> Any:
        if self._spark_bd is None:
            ds = self.context.data_sources.add_spark("txnwatch_spark")
            self._spark_bd = ds.add_dataframe_asset("events").add_batch_definition_whole_dataframe("batch")
        return self._spark_bd

    def pandas_batch_definition(self) -> Any:
        if self._pandas_bd is None:
            ds = self.context.data_sources.add_pandas("txnwatch_pandas")
            self._pandas_bd = ds.add_dataframe_asset("alerts").add_batch_definition_whole_dataframe("batch")
        return self._pandas_bd

    def suite(self, name: str, rules: tuple[Rule, ...], parser: str) -> Any:
        if name not in self.suites:
            suite = self.gx.ExpectationSuite(name=name)
            for rule in rules:
                suite.add_expectation(rule.expectation(parser))
            self.suites[name] = suite
        return self.suites[name]


def event_suite(engine: str = "spark") -> Any:
    """The GX ``ExpectationSuite`` of the event table (row conditions for ``engine``)."""
    name = EVENT_SUITE if engine == "spark" else f"{EVENT_SUITE}_{engine}"
    return _Gx.get().suite(name, EVENT_RULES, engine)


def alert_suite() -> Any:
    """The GX ``ExpectationSuite`` of alert objects (pandas row conditions)."""
    return _Gx.get().suite(ALERT_SUITE, ALERT_RULES, "pandas")


def _outcomes(gx_result: Any, rules: tuple[Rule, ...]) -> list[ExpectationOutcome]:
    out = []
    for res in gx_result.results:
        cfg = res.expectation_config
        meta = cfg.meta or {}
        result = res.result or {}
        unexpected = result.get("unexpected_count")
        examples = list(result.get("partial_unexpected_list") or [])[:5]
        exc = res.exception_info or {}
        out.append(ExpectationOutcome(
            rule=meta.get("rule", cfg.type), expectation_type=cfg.type, success=bool(res.success),
            description=meta.get("description", ""), element_count=result.get("element_count"),
            unexpected_count=None if unexpected is None else int(unexpected), examples=examples,
            exception=exc.get("exception_message") if exc.get("raised_exception") else None))
    order = {r.name: i for i, r in enumerate(rules)}
    out.sort(key=lambda o: order.get(o.rule, len(order)))
    return out


def _json_value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if hasattr(v, "asDict"):
        return _json_value(v.asDict(recursive=True))
    return v


# Events ---------------------------------------------------------------------------------------
ENGINES = ("spark", "pandas")


def with_derived(df: Any) -> Any:
    """The Spark event DataFrame plus the derived columns the event rules refer to."""
    from pyspark.sql import functions as F

    return df.withColumn(TS_LIMIT, F.expr(TS_LIMIT_SQL))


def _pandas_events(df: Any) -> Any:
    """Spark events (with derived columns) → pandas for the pandas engine (micro-batch sized)."""
    return df.toPandas()


def failing_rows(df: Any, rules: Iterable[Rule], limit: int | None = 10_000) -> tuple[list[dict[str, Any]], int]:
    """Rows of a Spark DataFrame (with :func:`with_derived` columns) failing any of ``rules``,
    in one Spark job. Returns (one entry per (row, rule) with ``expectation``, ``reason``,
    ``source_position`` and the ``row``; number of distinct failing rows collected)."""
    from pyspark.sql import functions as F

    rules = list(rules)
    if not rules:
        return [], 0
    flags = F.array(*[F.when(F.expr(r.failing_predicate()), F.lit(r.name)) for r in rules])
    flagged = df.withColumn("_txnwatch_failed", F.filter(flags, lambda x: x.isNotNull())).where(
        F.size("_txnwatch_failed") > 0)
    if limit is not None:
        flagged = flagged.limit(limit)
    reasons = {r.name: r.description for r in rules}
    out = []
    rows = flagged.collect()
    for row in rows:
        d = row.asDict(recursive=True)
        names = d.pop("_txnwatch_failed")
        d.pop(TS_LIMIT, None)
        d = _json_value(d)
        for n in names:
            out.append({"expectation": n, "reason": reasons[n], "source_position": d.get("source_position"),
                        "row": d})
    return out, len(rows)


def validate_events(df: Any, *, engine: str = "spark", result_format: str = "BASIC", max_failures: int = 10_000,
                    persist: bool = True) -> QualityResult:
    """Validate a Spark DataFrame of events against the event suite.

    ``engine="spark"`` (default) validates the DataFrame with GX's Spark datasource;
    ``engine="pandas"`` collects it (``toPandas``, micro-batch sized inputs only) and validates
    with GX's pandas datasource, an order of magnitude cheaper (``docs/metrics.md``). Either
    way GX's result decides ``success``; the failing rows of the failed expectations are then
    selected from the Spark DataFrame with the rules' Spark predicates (``failures``, at most
    ``max_failures`` rows). ``persist`` caches the input for the duration.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    t0 = time.monotonic()
    gxh = _Gx.get()
    cached = False
    if persist and not df.is_cached:
        df = df.persist()
        cached = True
    try:
        data = with_derived(df)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            if engine == "spark":
                batch = gxh.spark_batch_definition().get_batch(batch_parameters={"dataframe": data})
                res = batch.validate(event_suite("spark"), result_format=result_format)
            else:
                batch = gxh.pandas_batch_definition().get_batch(
                    batch_parameters={"dataframe": _pandas_events(data)})
                res = batch.validate(event_suite("pandas"), result_format=result_format)
        outcomes = _outcomes(res, EVENT_RULES)
        failures: list[dict[str, Any]] = []
        truncated = False
        if not res.success:
            failed_names = {o.rule for o in outcomes if not o.success}
            failed = [r for r in EVENT_RULES if r.name in failed_names]
            failures, nrows = failing_rows(data, failed, limit=max_failures + 1)
            if nrows > max_failures:
                truncated = True
                last = failures[-1]["row"]
                failures = [f for f in failures if f["row"] is not last]
            else:  # BOOLEAN_ONLY reports no counts: take them from the failing rows
                counts: dict[str, int] = {}
                for f in failures:
                    counts[f["expectation"]] = counts.get(f["expectation"], 0) + 1
                for o in outcomes:
                    if not o.success and o.unexpected_count is None and o.exception is None:
                        o.unexpected_count = counts.get(o.rule, 0)
        n = next((o.element_count for o in outcomes if o.rule == "kind.not_null"), None)
        return QualityResult(EVENT_SUITE, bool(res.success), outcomes, failures, res, rows_validated=n,
                             seconds=time.monotonic() - t0, failures_truncated=truncated)
    finally:
        if cached:
            df.unpersist()


# Alerts ---------------------------------------------------------------------------------------
def alerts_frame(alerts: list[dict[str, Any]]) -> Any:
    """Alert dicts → pandas frame with every contract column (missing ones null) and the derived
    ``_expected_key`` used by ``key.matches_fields``."""
    import pandas as pd

    rows = []
    for a in alerts:
        r = {c: a.get(c) for c in ALERT_FIELDS}
        parts = [a.get("cluster"), a.get("topic"), a.get("partition"), a.get("producer_id"), a.get("first_offset")]
        r["_expected_key"] = None if any(p is None for p in parts) else "/".join(str(p) for p in parts)
        rows.append(r)
    df = pd.DataFrame(rows, columns=[*ALERT_FIELDS, "_expected_key"])
    return df.astype(object).where(df.notna(), None)


def validate_alerts(alerts: list[dict[str, Any]]) -> QualityResult:
    """Validate alert objects (as published by the sinks) against the alert suite (pandas)."""
    t0 = time.monotonic()
    gxh = _Gx.get()
    suite = alert_suite()
    pdf = alerts_frame(alerts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        batch = gxh.pandas_batch_definition().get_batch(batch_parameters={"dataframe": pdf})
        res = batch.validate(suite, result_format="COMPLETE")
    outcomes = _outcomes(res, ALERT_RULES)
    reasons = {r.name: r.description for r in ALERT_RULES}
    failures = []
    for er in res.results:
        if er.success:
            continue
        name = (er.expectation_config.meta or {}).get("rule", er.expectation_config.type)
        for idx in (er.result or {}).get("unexpected_index_list") or []:
            i = idx if isinstance(idx, int) else None
            if i is None or i >= len(alerts):
                continue
            failures.append({"expectation": name, "reason": reasons.get(name, ""), "key": alerts[i].get("key"),
                             "source_position": alerts[i].get("input"), "row": _json_value(alerts[i])})
    return QualityResult(ALERT_SUITE, bool(res.success), outcomes, failures, res, rows_validated=len(alerts),
                         seconds=time.monotonic() - t0)


# Quarantine -----------------------------------------------------------------------------------
class QuarantineSink:
    """Appends failed rows as JSONL: ``expectation``, ``reason``, ``source_position``, ``row``,
    plus ``suite``, ``batch_id`` (when known) and ``quarantined_at`` (epoch ms)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.count = 0

    def __call__(self, result: QualityResult | list[dict[str, Any]], batch_id: int | None = None) -> int:
        failures = result.failures if isinstance(result, QualityResult) else result
        suite = result.suite if isinstance(result, QualityResult) else None
        if not failures:
            return 0
        now = int(time.time() * 1000)
        with open(self.path, "a", encoding="utf-8") as f:
            for fl in failures:
                doc = {"expectation": fl["expectation"], "reason": fl.get("reason"),
                       "source_position": fl.get("source_position"), "suite": suite, "batch_id": batch_id,
                       "quarantined_at": now, "row": fl.get("row")}
                f.write(json.dumps(doc, separators=(",", ":"), default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.count += len(failures)
        return len(failures)

    def close(self) -> None:
        pass


def quarantine_sink(path: str) -> QuarantineSink:
    """A callable writing a :class:`QualityResult`'s failing rows to ``path`` (JSONL, appended)."""
    return QuarantineSink(path)


# Streaming gate with sampling -----------------------------------------------------------------
QUALITY_QUERY_PREFIX = "txnwatch-quality"
# Validate one micro-batch in N by default, per engine, so that the average overhead stays well
# under 20 % of the job's micro-batch time (measurements in docs/metrics.md).
DEFAULT_SAMPLE_EVERY = {"spark": 10, "pandas": 1}


class QualityGate:
    """``foreachBatch`` function validating sampled micro-batches of the event stream.

    Sampling: a micro-batch is validated when ``batch_id % sample_every == 0`` (default: 10 with
    the Spark engine, every micro-batch with the pandas engine); within it a ``row_fraction`` < 1
    validates a random sample of rows (seeded by the batch id). GX's cost is per Spark job, not
    per row, so ``sample_every`` is the knob that bounds the overhead (``docs/metrics.md``).
    The default result format is ``BOOLEAN_ONLY`` (GX decides; counts come from the failing rows). Failing rows go to ``quarantine`` (a :class:`QuarantineSink`) and are
    counted in ``metrics`` (:class:`streaming.metrics.Metrics`) when given.
    """

    def __init__(self, *, sample_every: int | None = None, row_fraction: float = 1.0, engine: str = "spark",
                 quarantine: Callable[..., int] | None = None, metrics: Any = None,
                 result_format: str = "BOOLEAN_ONLY") -> None:
        if sample_every is None:
            sample_every = DEFAULT_SAMPLE_EVERY.get(engine, 10)
        if sample_every < 1:
            raise ValueError("sample_every must be >= 1")
        if not 0.0 < row_fraction <= 1.0:
            raise ValueError("row_fraction must be in (0, 1]")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        self.sample_every = sample_every
        self.row_fraction = row_fraction
        self.engine = engine
        self.quarantine = quarantine
        self.metrics = metrics
        self.result_format = result_format
        self.validated = 0
        self.skipped = 0
        self.seconds = 0.0
        self.last: QualityResult | None = None

    @classmethod
    def from_config(cls, cfg: dict[str, Any], *, metrics: Any = None) -> QualityGate:
        """From an optional ``[quality]`` table: sample_every, row_fraction, engine, quarantine_path."""
        q = cfg.get("quality") or {}
        path = q.get("quarantine_path")
        every = q.get("sample_every")
        return cls(sample_every=int(every) if every else None, row_fraction=float(q.get("row_fraction", 1.0)),
                   engine=str(q.get("engine", "spark")), quarantine=quarantine_sink(path) if path else None,
                   metrics=metrics)

    def should_validate(self, batch_id: int) -> bool:
        return batch_id % self.sample_every == 0

    def __call__(self, batch_df: Any, batch_id: int) -> QualityResult | None:
        if not self.should_validate(batch_id):
            self.skipped += 1
            return None
        df = batch_df
        if self.row_fraction < 1.0:
            df = df.sample(fraction=self.row_fraction, seed=batch_id)
        res = validate_events(df, engine=self.engine, result_format=self.result_format)
        self.validated += 1
        self.seconds += res.seconds
        self.last = res
        n = 0
        if res.failures and self.quarantine is not None:
            n = self.quarantine(res, batch_id=batch_id)
        if self.metrics is not None:
            self.metrics.add_quarantined(n or len(res.failures))
        if not res.success:
            log.warning("quality: micro-batch %d failed %s (%d rows)", batch_id,
                        ", ".join(sorted(res.failed_rule_names())), len(res.failures))
        return res




def start_quality_query(spark: Any, source_format: str, options: dict[str, str], gate: QualityGate,
                        checkpoint: str, *, trigger: dict[str, Any] | None = None,
                        query_name: str | None = None) -> Any:
    """Run ``gate`` over the event stream of a source as its own streaming query (own checkpoint;
    the source is read a second time). Named ``txnwatch-quality...`` so that
    :class:`streaming.metrics.Metrics` does not count its micro-batches as the job's."""
    events = spark.readStream.format(source_format).options(**options).load()
    w = events.writeStream.option("checkpointLocation", checkpoint).foreachBatch(gate)
    w = w.queryName(query_name or QUALITY_QUERY_PREFIX)
    w = w.trigger(**(trigger or {"processingTime": "10 seconds"}))
    return w.start()


# CLI: txnwatch validate -----------------------------------------------------------------------
def _read_inputs(spark: Any, paths: list[str], cfg: dict[str, Any]) -> Any:
    dirs = [p for p in paths if os.path.isdir(p)]
    files = [p for p in paths if not os.path.isdir(p)]
    cluster = cfg.get("cluster", "default")
    frames = [spark.read.format("segments").option("path", d).option("cluster", cluster).load() for d in dirs]
    if files:
        try:
            import streaming.sources.dumps  # noqa: F401
        except ImportError:
            raise ValueError(f"{files[0]}: files need the dumps source (streaming.sources.dumps), which is not "
                             "available in this build; give a log directory instead") from None
        frames.append(spark.read.format("dumps").option("paths", json.dumps([os.path.abspath(f) for f in files]))
                      .option("cluster", cluster).load())
    df = frames[0]
    for f in frames[1:]:
        df = df.unionByName(f)
    return df


def format_report(result: QualityResult, out: Any = None) -> None:
    """Readable report: one line per expectation, then examples of failing rows."""
    out = out or sys.stdout
    w = max([len(o.rule) for o in result.outcomes] + [11])
    out.write(f"suite {result.suite}: {'PASSED' if result.success else 'FAILED'} "
              f"({result.rows_validated if result.rows_validated is not None else '?'} rows, "
              f"{len(result.outcomes)} expectations, {len(result.failed)} failed, {result.seconds:.1f} s)\n")
    out.write(f"  {'expectation'.ljust(w)}  result  unexpected  examples\n")
    for o in result.outcomes:
        ex = "" if o.success else ", ".join(json.dumps(_json_value(e), default=str) for e in o.examples[:3])
        if o.exception:
            ex = f"error: {o.exception.splitlines()[0] if o.exception else ''}"
        cnt = "" if o.unexpected_count is None else str(o.unexpected_count)
        out.write(f"  {o.rule.ljust(w)}  {'ok  ' if o.success else 'FAIL'}    {cnt.rjust(10)}  {ex}\n")
    if result.failures:
        out.write("failing rows (first 20):\n")
        for fl in result.failures[:20]:
            row = fl["row"]
            where = fl.get("source_position") or f"{row.get('topic')}-{row.get('partition')} ({row.get('kind')})"
            out.write(f"  {where}: {fl['expectation']}: {fl['reason']}\n")
        if len(result.failures) > 20:
            out.write(f"  ... {len(result.failures) - 20} more\n")


def run_validate(paths: list[str], cfg: dict[str, Any], as_json: bool = False, *, spark: Any = None,
                 out: Any = None, err: Any = None) -> int:
    """``txnwatch validate``: run the event suite over log directories (and dump files when the
    dumps source exists). Exit 0 when every expectation passes, 2 when some fail, 1 on error.
    ``quality.quarantine_path`` in the configuration, when set, receives the failing rows."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if not paths:
            raise ValueError("give at least one log directory")
        for p in paths:
            if not os.path.exists(p):
                raise ValueError(f"{p}: no such file or directory")
        if spark is None:
            from streaming.pipeline import spark_session

            st = cfg.get("streaming", {})
            spark = spark_session(master=st.get("master", "local[2]"),
                                  conf={"spark.sql.shuffle.partitions": str(st.get("shuffle_partitions", 4))})
        df = _read_inputs(spark, list(paths), cfg).persist()
        result = validate_events(df, result_format="SUMMARY")
        gaps = [] if as_json else [r.asDict() for r in df.where("kind = 'gap'").select(
            "topic", "partition", "source_position", "reason").limit(21).collect()]
        df.unpersist()
    except Exception as exc:  # noqa: BLE001 - reported, exit code 1
        err.write(f"txnwatch validate: {exc}\n")
        return 1
    qpath = (cfg.get("quality") or {}).get("quarantine_path")
    if qpath and result.failures:
        quarantine_sink(qpath)(result)
    if as_json:
        out.write(json.dumps(result.gx_json(), indent=2, default=str) + "\n")
    else:
        format_report(result, out)
        if gaps:  # valid events, but the operator should know what could not be read
            out.write("gap rows (input that could not be read):\n")
            for g in gaps[:20]:
                where = g["source_position"] or (f"{g['topic']}-{g['partition']}" if g["topic"] else None)
                out.write(f"  {where}: {g['reason']}\n" if where else f"  {g['reason']}\n")
            if len(gaps) > 20:
                out.write("  ...\n")
    return 0 if result.success else 2


# Overhead measurement -------------------------------------------------------------------------
def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def measure_overhead(spark: Any, log_dir: str, *, max_bytes_per_trigger: int | None = None, reps: int = 3,
                     variants: Iterable[tuple[str, str]] = (("spark", "BASIC"), ("spark", "BOOLEAN_ONLY"),
                                                            ("pandas", "BASIC"), ("pandas", "BOOLEAN_ONLY")),
                     ) -> dict[str, Any]:
    """Time the event suite on a micro-batch-sized DataFrame against the micro-batches of the job.

    1. Runs the streaming job (:func:`streaming.pipeline.start_query`, ``segments`` source,
       available-now trigger, ``max_bytes_per_trigger``) over ``log_dir`` and reads each
       micro-batch's ``triggerExecution`` duration and input row count from the query progress.
    2. Reads the same events with the batch reader, keeps as many rows as the median
       micro-batch, caches them, and validates them ``reps`` times per engine (after one warm-up).

    ``variants`` are (engine, GX result format) pairs. Returns the medians and the ratios
    (validation seconds / median micro-batch seconds) per variant.
    """
    import shutil
    import tempfile

    from streaming.alerts import AlertConfig
    from streaming.pipeline import SinkSet, start_query
    from streaming.state_machine import EngineConfig

    opts = {"path": log_dir}
    if max_bytes_per_trigger:
        opts["max_bytes_per_trigger"] = str(max_bytes_per_trigger)
    ck = tempfile.mkdtemp(prefix="txnwatch-measure-")
    try:
        q = start_query(spark, "segments", opts, EngineConfig(), AlertConfig(), SinkSet(), ck,
                        trigger={"availableNow": True})
        q.awaitTermination()
        progress = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
    finally:
        shutil.rmtree(ck, ignore_errors=True)
    batch_s = [p["durationMs"]["triggerExecution"] / 1000.0 for p in progress]
    batch_rows = [int(p["numInputRows"]) for p in progress]
    rows = int(_median([float(r) for r in batch_rows])) if batch_rows else 0
    events = spark.read.format("segments").option("path", log_dir).load().limit(max(rows, 1)).persist()
    n = events.count()
    out: dict[str, Any] = {"micro_batches": len(progress), "batch_rows_median": rows, "rows_validated": n,
                           "batch_seconds_median": _median(batch_s), "batch_seconds": batch_s, "engines": {}}
    try:
        for engine, fmt in variants:
            validate_events(events, engine=engine, result_format=fmt)  # warm-up
            times = [validate_events(events, engine=engine, result_format=fmt).seconds for _ in range(reps)]
            med = _median(times)
            out["engines"][f"{engine}/{fmt}"] = {"seconds": times, "seconds_median": med,
                                                 "ratio": med / out["batch_seconds_median"] if batch_s else None}
    finally:
        events.unpersist()
    return out


def _main(argv: list[str] | None = None) -> int:  # pragma: no cover - manual measurement
    """``python -m streaming.quality measure [--scenario S] [--mb N] [--max-bytes B] [--reps R]``."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(prog="python -m streaming.quality")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="GX overhead per micro-batch vs. the job's micro-batch time")
    m.add_argument("--scenario", default="random-mix")
    m.add_argument("--mb", type=float, default=4.0, help="random-mix size in MB")
    m.add_argument("--max-bytes", type=int, default=256 << 10, help="max_bytes_per_trigger per partition")
    m.add_argument("--reps", type=int, default=3)
    m.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)
    from streaming.pipeline import spark_session
    from streaming.scenarios import write_scenario

    root = tempfile.mkdtemp(prefix="txnwatch-measure-logs-")
    params = {"target_bytes": int(args.mb * (1 << 20))} if args.scenario == "random-mix" else {}
    write_scenario(args.scenario, os.path.join(root, "logs"), **params)
    spark = spark_session(master=args.master, conf={"spark.sql.shuffle.partitions": "2"})
    res = measure_overhead(spark, os.path.join(root, "logs"), max_bytes_per_trigger=args.max_bytes,
                           reps=args.reps)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
