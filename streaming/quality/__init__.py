"""Data quality: the event table's contract (Great Expectations) and the alert contract (JSON Schema).

``rules``           the event rules: each one a GX expectation and the Spark predicate of its failing rows
``gx``              the GX glue: ephemeral context, event suite, :func:`validate_events`
``alert_contract``  :func:`validate_alerts`: alerts against ``streaming/alert.schema.json``
``result``          :class:`QualityResult`, what every validation returns
``gate``            the streaming gate (sampled micro-batches) and the quarantine sink
``validate``        the ``txnwatch validate`` command

The overhead measurement behind the gate's defaults is ``bench/quality_overhead.py``.
"""

from __future__ import annotations

import os

# Before great_expectations is imported anywhere (every submodule import runs this first).
os.environ["GX_ANALYTICS_ENABLED"] = "false"

from streaming.quality.alert_contract import ALERT_SUITE, validate_alerts
from streaming.quality.gate import (
    DEFAULT_SAMPLE_EVERY,
    QualityGate,
    QuarantineSink,
    quarantine_sink,
    start_quality_query,
)
from streaming.quality.gx import ENGINES, event_suite, failing_rows, validate_events, with_derived
from streaming.quality.result import ExpectationOutcome, QualityResult
from streaming.quality.rules import EVENT_RULES, EVENT_SUITE, TS_LIMIT, Rule
from streaming.quality.validate import format_report, read_inputs, run_validate

__all__ = [
    "ALERT_SUITE", "DEFAULT_SAMPLE_EVERY", "ENGINES", "EVENT_RULES", "EVENT_SUITE", "TS_LIMIT",
    "ExpectationOutcome", "QualityGate", "QualityResult", "QuarantineSink", "Rule", "event_suite",
    "failing_rows", "format_report", "quarantine_sink", "read_inputs", "run_validate", "start_quality_query",
    "validate_alerts", "validate_events", "with_derived",
]
