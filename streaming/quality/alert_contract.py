"""The alert contract check: published alerts against ``streaming/alert.schema.json``.

The JSON Schema (draft 2020-12, checked with ``jsonschema``) is the contract of
``docs/alerts.md``; this module adds only what a schema cannot say: that the ``key`` is built
from the alert's own ``cluster/topic/partition/producer_id/first_offset``. Every failure names
the alert's key and the field.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any

from streaming.quality.result import ExpectationOutcome, QualityResult, json_value

ALERT_SUITE = "txnwatch_alerts"
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "alert.schema.json")
KEY_PARTS = ("cluster", "topic", "partition", "producer_id", "first_offset")
KEY_RULE = "key.matches_fields"


@functools.cache
def _validator() -> Any:
    import jsonschema

    with open(SCHEMA_PATH, encoding="utf-8") as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _field(error: Any) -> str:
    """The alert field a schema error is about (``required`` errors sit on the object itself)."""
    if error.absolute_path:
        return str(error.absolute_path[0])
    if error.validator == "required":
        for name in error.validator_value:
            if error.message.startswith(repr(name)):
                return str(name)
    return "<alert>"


def _rule(error: Any, field: str) -> str:
    """The schema location that failed, e.g. ``allOf/0/then/properties/abort_command_new/type``
    (``required/<field>`` for a missing field)."""
    path = "/".join(str(p) for p in error.absolute_schema_path)
    return f"{path}/{field}" if error.validator == "required" else path


def _condition(error: Any) -> str:
    """`` (when status is 'hanging')`` for errors of a conditional (``allOf``/``if``) branch."""
    where = list(error.absolute_schema_path)
    if len(where) < 2 or where[0] != "allOf":
        return ""
    cond = _validator().schema["allOf"][where[1]]["if"]["properties"]
    return " (when " + ", ".join(f"{k} is {json.dumps(v['const'] if 'const' in v else v.get('enum'))}" for k, v in cond.items()) + ")"


def alert_errors(alert: dict[str, Any]) -> list[dict[str, Any]]:
    """The contract violations of one alert: ``{key, field, expectation, reason}`` each."""
    key = alert.get("key")
    out = []
    for err in _validator().iter_errors(alert):
        field = _field(err)
        out.append({"key": key, "field": field, "expectation": _rule(err, field),
                    "reason": f"alert {key}: {field}: {err.message}{_condition(err)}"})
    out.sort(key=lambda e: (e["field"], e["expectation"]))
    parts = [alert.get(p) for p in KEY_PARTS]
    if key is not None and all(p is not None for p in parts):
        expected = "/".join(str(p) for p in parts)
        if key != expected:
            out.append({"key": key, "field": "key", "expectation": KEY_RULE,
                        "reason": f"alert {key}: key: not built from its own fields (expected {expected})"})
    return out


def validate_alerts(alerts: list[dict[str, Any]]) -> QualityResult:
    """Validate alert objects (as published by the sinks) against the contract.

    ``failures``: one entry per (alert, violation) with ``key``, ``field``, ``expectation`` (the
    schema location, or ``key.matches_fields``), ``reason`` (names key and field),
    ``source_position`` (the alert's ``input``) and the alert as ``row``. ``outcomes``: one per
    violated expectation, with the offending keys as examples.
    """
    t0 = time.monotonic()
    failures = []
    for a in alerts:
        for e in alert_errors(a):
            failures.append(dict(e, source_position=a.get("input"), row=json_value(a)))
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in failures:
        by_rule.setdefault(f["expectation"], []).append(f)
    outcomes = [ExpectationOutcome(rule=rule, expectation_type="json_schema", success=False,
                                   description=f"{fs[0]['field']}: {rule}", element_count=len(alerts),
                                   unexpected_count=len(fs), examples=[f["key"] for f in fs[:5]])
                for rule, fs in sorted(by_rule.items())]
    return QualityResult(ALERT_SUITE, not failures, outcomes, failures, rows_validated=len(alerts),
                         seconds=time.monotonic() - t0)
