"""What a validation returns: per-check outcomes and the failing rows (shared by the event
suite, the alert contract, the gate, the quarantine sink and ``txnwatch validate``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any


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


def json_value(v: Any) -> Any:
    """A Spark row value (datetime, Row, nested) as a JSON-able value."""
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if hasattr(v, "asDict"):
        return json_value(v.asDict(recursive=True))
    return v
