"""The streaming data-quality gate and its quarantine sink.

:class:`QualityGate` is a ``foreachBatch`` function that validates sampled micro-batches of the
event stream against the event suite (:func:`streaming.quality.gx.validate_events`) and hands the
failing rows to a :class:`QuarantineSink` (JSONL) and to :class:`streaming.metrics.Metrics`.
:func:`start_quality_query` runs it as its own streaming query beside the detection query.
Failing rows are reported and quarantined, never removed from detection.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.metrics import QUALITY_QUERY_PREFIX
from streaming.quality.gx import ENGINES, validate_events
from streaming.quality.result import QualityResult

if TYPE_CHECKING:
    from streaming.config import QualityConfig

log = logging.getLogger("txnwatch")


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
    def from_config(cls, quality: QualityConfig, *, metrics: Any = None) -> QualityGate:
        """From the ``[quality]`` section: sample_every (0 = the engine's default), row_fraction,
        engine, quarantine_path (empty = no quarantine file)."""
        path = quality.quarantine_path
        return cls(sample_every=quality.sample_every or None, row_fraction=float(quality.row_fraction),
                   engine=quality.engine, quarantine=quarantine_sink(path) if path else None, metrics=metrics)

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
