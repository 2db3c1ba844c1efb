"""The outside truth of a comparison test: the findings a scenario declares (``Scenario.expected``,
written by hand from Kafka's behaviour in ``streaming/simulate/scenarios.py``), projected to what
identifies a finding and what it claims. A test comparing two product paths asserts each side
against this too, so that a fault both paths share (a dropped finding, a wrong verdict) fails it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TRUTH = ("topic", "partition", "producer_id", "first_offset", "status", "cause", "verified")


def _key(f: dict[str, Any]) -> tuple:
    return (f["topic"], f["partition"], f["first_offset"], f["producer_id"])


def expected_findings(sc: Any, *, files: bool, fields: tuple[str, ...] = TRUTH) -> list[dict[str, Any]]:
    """The scenario's findings, sorted. ``files=True``: as a scan of its files sees them, each
    finding's ``from_files`` applied (what the files alone prove, detection.md §0); ``False``: as
    the live path (every partition read to its high watermark, the coordinator asked) sees them."""
    out = []
    for e in sc.expected:
        e = {**e, **(e.get("from_files") or {})} if files else e
        out.append({k: e.get(k) for k in fields})
    return sorted(out, key=_key)


def projected(findings: Iterable[dict[str, Any]], fields: tuple[str, ...] = TRUTH) -> list[dict[str, Any]]:
    """Findings (alerts) projected to ``fields``, sorted like :func:`expected_findings`; resolved
    alerts are left out (they are not findings)."""
    return sorted(({k: f.get(k) for k in fields} for f in findings if f.get("status") != "resolved"), key=_key)
