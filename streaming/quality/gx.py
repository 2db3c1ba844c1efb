"""Great Expectations (GX Core 1.x) glue: the ephemeral context, the event suite built from
:data:`streaming.quality.rules.EVENT_RULES`, and :func:`validate_events`.

GX runs with an ephemeral context (nothing is written to disk) and analytics disabled (set by
the package before GX is imported). On the Spark datasource GX runs about one Spark job per
metric (≈50-110 for this suite), i.e. seconds per validation whatever the number of rows; the
pandas engine (``engine="pandas"``, micro-batch sized inputs) is ~10x cheaper
(``docs/metrics.md``, ``bench/quality_overhead.py``). GX decides success; the rules' Spark
predicates then select the failing rows, only for the rules GX reported as failed.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Iterable
from typing import Any

from streaming.quality.result import ExpectationOutcome, QualityResult, json_value
from streaming.quality.rules import EVENT_RULES, EVENT_SUITE, TS_LIMIT, TS_LIMIT_SQL, Rule


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
            self._pandas_bd = ds.add_dataframe_asset("events").add_batch_definition_whole_dataframe("batch")
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
        d = json_value(d)
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
