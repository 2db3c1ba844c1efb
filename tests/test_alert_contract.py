"""The alert contract check (JSON Schema + key consistency), without Spark."""

from __future__ import annotations

from streaming.alerts import AlertConfig, finalize
from streaming.quality.alert_contract import validate_alerts
from streaming.vocab import HANGING, RESOLVED, WRITE_AFTER_MARKER


def hanging_alert() -> dict:
    row = {"key": "c/orders/0/7/3", "status": HANGING, "cause": WRITE_AFTER_MARKER, "verified": True,
           "cluster": "c", "topic": "orders", "partition": 0, "producer_id": 7, "producer_epoch": 1,
           "first_offset": 3, "coordinator_epoch": 2, "coordinator_epoch_source": "last-marker"}
    return finalize(row, {"lso": 3, "high_watermark": 9, "log_start_offset": 0}, AlertConfig("k:9092"))


def test_published_alert_passes():
    res = validate_alerts([hanging_alert()])
    assert res.success and res.failures == [] and res.rows_validated == 1


def test_failures_name_key_field_and_condition():
    h = hanging_alert()
    resolved_with_cause = dict(h, status=RESOLVED, resolution="committed", abort_command_new=None,
                               abort_command_legacy=None)
    foreign_key = dict(h, key="c/orders/0/7/4")
    missing = {k: v for k, v in h.items() if k != "data_deleted"}
    res = validate_alerts([resolved_with_cause, foreign_key, missing])
    assert not res.success
    got = {(f["key"], f["field"], f["expectation"]) for f in res.failures}
    assert got == {
        (h["key"], "cause", "allOf/3/then/properties/cause/const"),
        ("c/orders/0/7/4", "key", "key.matches_fields"),
        (h["key"], "data_deleted", "allOf/0/else/required/data_deleted"),
    }
    cause = next(f for f in res.failures if f["field"] == "cause")
    assert cause["reason"] == f"alert {h['key']}: cause: None was expected (when status is \"resolved\")"
    assert {o.rule for o in res.failed} == {e for _k, _f, e in got}
