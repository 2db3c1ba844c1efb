"""Data contract (Great Expectations) over the event table and the alerts."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest

from streaming import quality as Q
from streaming.config import as_config, load
from streaming.events import make_row, spark_schema
from streaming.quality import validate as validate_cmd
from streaming.simulate.scenarios import write_scenario

pytestmark = pytest.mark.spark

EVENT_MS = 1_700_001_500_028


def bad_rows() -> tuple[list[dict], dict[str, set[str]]]:
    """Hand-made bad event rows and, per source_position, the rules each must fail."""
    import datetime as dt

    et = dt.datetime.fromtimestamp(EVENT_MS / 1000, tz=dt.UTC)
    base = dict(source="segments", cluster="default", topic="orders", partition=0, route_pid=1000,
                producer_id=1000, producer_epoch=0, first_offset=3, last_offset=3, first_ts=EVENT_MS - 1000,
                last_ts=EVENT_MS - 1000, batch_count=1, record_count=1, bytes=70, event_time=et)
    rows = [
        make_row("data", **dict(base, first_offset=-5, source_position="bad/negative-offset")),
        make_row("bogus", **dict(base, source_position="bad/unknown-kind")),
        make_row("data", **dict(base, producer_epoch=40000, source_position="bad/epoch")),
        make_row("data", **dict(base, first_offset=10, last_offset=5, source_position="bad/order")),
        make_row("marker", **dict(base, marker=None, coordinator_epoch=-3, first_ts=1000,
                                  source_position="bad/marker")),
        make_row("data", **dict(base, last_ts=EVENT_MS + 3 * 86_400_000, topic=None,
                                source_position="bad/future")),
    ]
    expected = {
        "bad/negative-offset": {"offsets.first_offset.non_negative"},
        "bad/unknown-kind": {"kind.known"},
        "bad/epoch": {"producer_epoch.range"},
        "bad/order": {"span.first_le_last"},
        "bad/marker": {"coordinator_epoch.range", "timestamps.first_ts.after_2010", "marker.marker.not_null"},
        "bad/future": {"timestamps.last_ts.before_event_time_plus_1d", "span.topic.not_null"},
    }
    return rows, expected


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality")
    write_scenario("write-after-marker", root / "logs")
    return root / "logs"


@pytest.fixture(scope="module")
def events(spark, logdir):
    df = spark.read.format("segments").option("path", str(logdir)).load().persist()
    df.count()
    yield df
    df.unpersist()


@pytest.fixture(scope="module")
def dirty(spark, events):
    rows, expected = bad_rows()
    bad = spark.createDataFrame(rows, schema=spark_schema())
    df = events.unionByName(bad).persist()
    df.count()
    yield df, expected
    df.unpersist()


def test_rules_are_one_definition():
    names = [r.name for r in Q.EVENT_RULES]
    assert len(names) == len(set(names))
    suite = Q.event_suite()
    assert [e.meta["rule"] for e in suite.expectations] == names
    for r in Q.EVENT_RULES:  # every rule has its failing-row predicate
        assert r.failing_predicate()


def test_clean_scenario_passes(spark, logdir, events):
    # txnwatch validate over the log dir: the Spark datasource suite, GX JSON out, exit 0
    out, err = io.StringIO(), io.StringIO()
    assert Q.run_validate([str(logdir)], as_config(load()), as_json=True, spark=spark, out=out, err=err) == 0, err.getvalue()
    doc = json.loads(out.getvalue())
    assert doc["success"] is True
    assert len(doc["results"]) == len(Q.EVENT_RULES)
    assert doc["results"][0]["result"]["element_count"] == events.count()
    # same verdict from the pandas engine, with the structured result
    res = Q.validate_events(events, engine="pandas")
    assert res.success, [(o.rule, o.unexpected_count, o.examples) for o in res.failed]
    assert res.failures == [] and res.rows_validated == events.count()
    assert len(res.outcomes) == len(Q.EVENT_RULES) and all(o.success for o in res.outcomes)


def test_bad_rows_reported_and_quarantined(dirty, tmp_path):
    df, expected = dirty
    # Spark datasource, the streaming gate's result format: GX decides, predicates find the rows
    res = Q.validate_events(df, result_format="BOOLEAN_ONLY")
    assert not res.success
    got: dict[str, set[str]] = {}
    for f in res.failures:
        got.setdefault(f["source_position"], set()).add(f["expectation"])
    assert got == expected  # those rows, and only those, with the failed expectations
    assert {o.rule for o in res.failed} == set().union(*expected.values())

    qpath = tmp_path / "quarantine" / "events.jsonl"
    sink = Q.quarantine_sink(str(qpath))
    assert sink(res, batch_id=7) == len(res.failures)
    lines = [json.loads(x) for x in qpath.read_text().splitlines()]
    assert len(lines) == len(res.failures)
    for doc in lines:
        assert {"expectation", "reason", "source_position", "row"} <= set(doc)
        assert doc["row"]["source_position"] == doc["source_position"]
        assert Q.TS_LIMIT not in doc["row"] and doc["batch_id"] == 7
    assert {(d["source_position"], d["expectation"]) for d in lines} == {
        (p, e) for p, es in expected.items() for e in es}

    # one definition, two uses: GX's unexpected counts equal the rows the predicates select
    # (pandas engine with BASIC results; it also reaches the same verdicts as the Spark one)
    res_pd = Q.validate_events(df, engine="pandas", result_format="BASIC")
    assert not res_pd.success
    per_rule = Counter(f["expectation"] for f in res_pd.failures)
    assert {o.rule for o in res_pd.failed} == set(per_rule) == {o.rule for o in res.failed}
    for o in res_pd.outcomes:
        assert o.unexpected_count in (None, per_rule.get(o.rule, 0)), o
    assert {(f["source_position"], f["expectation"]) for f in res_pd.failures} == {
        (f["source_position"], f["expectation"]) for f in res.failures}
    epoch = next(o for o in res_pd.outcomes if o.rule == "producer_epoch.range")
    assert 40000 in epoch.examples


def test_gate_samples_micro_batches(dirty, tmp_path):
    df, expected = dirty

    class FakeMetrics:
        n = 0

        def add_quarantined(self, n):
            self.n += n

    fm = FakeMetrics()
    gate = Q.QualityGate(sample_every=3, engine="pandas", quarantine=Q.quarantine_sink(str(tmp_path / "q.jsonl")),
                         metrics=fm)
    assert gate(df, 1) is None and gate(df, 2) is None  # not sampled: no Spark job at all
    res = gate(df, 3)
    assert res is not None and not res.success
    n = sum(len(v) for v in expected.values())
    assert fm.n == n and len((tmp_path / "q.jsonl").read_text().splitlines()) == n
    assert (gate.validated, gate.skipped) == (1, 2)
    with pytest.raises(ValueError):
        Q.QualityGate(row_fraction=0)


def test_run_validate_failures_and_errors(spark, logdir, dirty, monkeypatch, tmp_path):
    cfg = load()
    out, err = io.StringIO(), io.StringIO()
    assert Q.run_validate([str(tmp_path / "missing")], as_config(cfg), spark=spark, out=out, err=err) == 1
    assert "no such file" in err.getvalue()

    df, expected = dirty
    monkeypatch.setattr(validate_cmd, "read_inputs", lambda *_a: df)
    cfg = dict(cfg, quality={"quarantine_path": str(tmp_path / "validate-q.jsonl")})
    assert Q.run_validate([str(logdir)], as_config(cfg), spark=spark, out=out, err=err) == 2, err.getvalue()
    text = out.getvalue()
    assert "FAILED" in text
    status = {ln.split()[0]: ln.split()[1] for ln in text.splitlines()
              if ln.startswith("  ") and len(ln.split()) > 1 and ln.split()[0] in {r.name for r in Q.EVENT_RULES}}
    assert len(status) == len(Q.EVENT_RULES)
    assert {n for n, st in status.items() if st == "FAIL"} == set().union(*expected.values())
    for pos in expected:
        assert pos in text
    assert len((tmp_path / "validate-q.jsonl").read_text().splitlines()) == sum(len(v) for v in expected.values())


def test_alert_suite(spark, logdir):
    from streaming.cli import scan_paths

    findings, _gaps = scan_paths([str(logdir)], as_config(load()), spark=spark)
    assert findings and all(a["status"] == "hanging" for a in findings)
    res = Q.validate_alerts(findings)
    assert res.success, [(o.rule, o.examples) for o in res.failed]

    h = findings[0]
    late = dict(h, status="late", cause="markers-pending", abort_command_new=None, abort_command_legacy=None,
                required_permission=None)
    resolved = dict(h, status="resolved", cause=None, resolution="committed", abort_command_new=None,
                    abort_command_legacy=None)
    assert Q.validate_alerts([h, late, resolved]).success

    broken = dict(h, abort_command_new=None)
    late_cmd = dict(late, abort_command_legacy=h["abort_command_legacy"] or "kafka-transactions.sh ... abort")
    wrong = dict(resolved, schema_version=2, key="other/x/0/1/2")
    res = Q.validate_alerts([h, broken, late_cmd, wrong])
    assert not res.success
    # every failure names the alert key and the field, in its fields and in its reason
    got = {(f["key"], f["field"]) for f in res.failures}
    assert got == {(broken["key"], "abort_command_new"), (late_cmd["key"], "abort_command_legacy"),
                   ("other/x/0/1/2", "schema_version"), ("other/x/0/1/2", "key")}
    for f in res.failures:
        assert f["reason"].startswith(f"alert {f['key']}: {f['field']}: ")
    assert "key.matches_fields" in {f["expectation"] for f in res.failures if f["key"] == "other/x/0/1/2"}
    missing = {k: v for k, v in h.items() if k != "verified"}
    assert [(f["key"], f["field"]) for f in Q.validate_alerts([missing]).failures] == [(h["key"], "verified")]
