"""The Prometheus endpoint: start on a free port, feed synthetic stats, scrape and parse (no Spark)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from streaming.metrics import HANGING_CAUSES, Metrics

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_700_003_600_000


def scrape(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{m.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def val(samples, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def alert(status: str, topic: str, partition: int, pid: int, first: int, cause: str | None, first_ts: int,
          cluster: str = "prod") -> dict:
    return {"schema_version": 1, "key": f"{cluster}/{topic}/{partition}/{pid}/{first}", "status": status,
            "cause": cause, "cluster": cluster, "topic": topic, "partition": partition, "producer_id": pid,
            "first_offset": first, "first_ts": first_ts, "open_ms": NOW - first_ts}


def active(*alerts: dict) -> dict:
    return {a["key"]: {"status": a["status"], "alert": a} for a in alerts}


@pytest.fixture
def metrics():
    m = Metrics(0, cluster="prod", attach_listener=False)
    yield m
    m.close()


def test_free_port_and_own_registry(metrics):
    assert metrics.port > 0
    assert metrics.registry is not REGISTRY
    assert REGISTRY.get_sample_value("txnwatch_late_transactions", {"cluster": "prod"}) is None
    s = scrape(metrics)
    # series that alert rules compare against exist at 0 before the first micro-batch
    assert val(s, "txnwatch_late_transactions", cluster="prod") == 0
    for c in HANGING_CAUSES:
        assert val(s, "txnwatch_hanging_transactions", cluster="prod", cause=c) == 0
    assert val(s, "txnwatch_alerts_total", cluster="prod", status="hanging") == 0
    # a second endpoint beside it: separate registry, no duplicate-registration error
    other = Metrics(0, cluster="dr", attach_listener=False)
    try:
        assert other.port != metrics.port
        assert val(scrape(other), "txnwatch_late_transactions", cluster="dr") == 0
    finally:
        other.close()


def test_observe_values(metrics):
    h1 = alert("hanging", "orders", 0, 4002, 9, "write-after-marker", NOW - 3_600_000)
    h2 = alert("hanging", "orders", 0, 4003, 12, "coordinator-unaware", NOW - 7_200_000)
    l1 = alert("late", "orders", 1, 4004, 3, "markers-pending", NOW - 1_500_000)
    r1 = dict(alert("resolved", "pay", 0, 7, 1, None, NOW - 9_000_000), resolution="committed")
    stats = {"rows": 40, "progress": 3, "gaps": [{"reason": "truncated"}, {"reason": "crc"}],
             "alerts": [h1, h2, l1, r1], "open_alerts": active(h1, h2, l1),
             "partitions": {"orders-0": {"high_watermark": 13, "lso": 9, "log_start_offset": 0},
                            "orders-1": {"high_watermark": 7, "lso": 3},
                            "my-topic-2": {"high_watermark": 5},
                            "__transaction_state-34": {"high_watermark": 11, "lso": 11}},
             "now_ms": NOW, "duration_ms": 1500, "source_lag": 42, "quarantined": 3}
    metrics.observe(0, stats)
    s = scrape(metrics)
    assert val(s, "txnwatch_late_transactions", cluster="prod") == 1
    assert val(s, "txnwatch_hanging_transactions", cluster="prod", cause="write-after-marker") == 1
    assert val(s, "txnwatch_hanging_transactions", cluster="prod", cause="coordinator-unaware") == 1
    assert val(s, "txnwatch_hanging_transactions", cluster="prod", cause="exceeds-max-timeout") == 0
    assert val(s, "txnwatch_partitions_with_late_transactions", cluster="prod") == 2
    # per partition (findings only: no open_transactions in the stats)
    assert val(s, "txnwatch_open_transactions", cluster="prod", topic="orders", partition=0) == 2
    assert val(s, "txnwatch_open_transactions", cluster="prod", topic="orders", partition=1) == 1
    assert val(s, "txnwatch_open_transactions", cluster="prod", topic="my-topic", partition=2) == 0
    assert val(s, "txnwatch_max_open_transaction_seconds", cluster="prod", topic="orders", partition=0) == 7200
    assert val(s, "txnwatch_max_open_transaction_seconds", cluster="prod", topic="orders", partition=1) == 1500
    assert val(s, "txnwatch_lso_lag_records", cluster="prod", topic="orders", partition=0) == 4
    assert val(s, "txnwatch_lso_lag_records", cluster="prod", topic="orders", partition=1) == 4
    assert val(s, "txnwatch_lso_lag_records", cluster="prod", topic="__transaction_state", partition=34) is None
    assert val(s, "txnwatch_lso_lag_records", cluster="prod", topic="my-topic", partition=2) is None  # LSO unknown
    assert val(s, "txnwatch_source_lag", cluster="prod") == 42
    assert val(s, "txnwatch_gaps_total", cluster="prod") == 2
    assert val(s, "txnwatch_quarantined_total", cluster="prod") == 3
    assert val(s, "txnwatch_alerts_total", cluster="prod", status="hanging") == 2
    assert val(s, "txnwatch_alerts_total", cluster="prod", status="late") == 1
    assert val(s, "txnwatch_alerts_total", cluster="prod", status="resolved") == 1
    assert val(s, "txnwatch_microbatch_duration_seconds_count", cluster="prod") == 1
    assert val(s, "txnwatch_microbatch_duration_seconds_sum", cluster="prod") == 1.5
    assert val(s, "txnwatch_microbatch_duration_seconds_bucket", cluster="prod", le="2.5") == 1
    assert val(s, "txnwatch_microbatch_duration_seconds_bucket", cluster="prod", le="1.0") == 0
    assert val(s, "txnwatch_last_batch_timestamp_seconds", cluster="prod") > 1.7e9

    # next micro-batch: h1 resolved, every open transaction reported, LSO moved on orders-0
    r = dict(h1, status="resolved", cause=None, resolution="aborted")
    stats2 = {"rows": 5, "progress": 1, "gaps": [], "alerts": [r], "open_alerts": active(h2, l1),
              "partitions": {"orders-0": {"high_watermark": 20, "lso": 12}, "orders-1": {"high_watermark": 9,
                                                                                        "lso": 3}},
              "open_transactions": [{"topic": "orders", "partition": 0, "first_ts": NOW - 7_200_000},
                                    {"topic": "orders", "partition": 0, "first_ts": NOW - 10_000},
                                    {"topic": "orders", "partition": 1, "first_ts": NOW - 1_500_000},
                                    {"topic": "orders", "partition": 3, "first_ts": NOW - 60_000},
                                    {"topic": "orders", "partition": 3, "first_ts": NOW + 5_000}],  # skewed
              "now_ms": NOW, "duration_s": 0.2}
    metrics.observe(1, stats2)
    s = scrape(metrics)
    assert val(s, "txnwatch_hanging_transactions", cluster="prod", cause="write-after-marker") == 0
    assert val(s, "txnwatch_hanging_transactions", cluster="prod", cause="coordinator-unaware") == 1
    assert val(s, "txnwatch_open_transactions", cluster="prod", topic="orders", partition=0) == 2
    assert val(s, "txnwatch_open_transactions", cluster="prod", topic="orders", partition=3) == 2
    assert val(s, "txnwatch_max_open_transaction_seconds", cluster="prod", topic="orders", partition=3) == 60
    assert val(s, "txnwatch_open_transactions", cluster="prod", topic="my-topic", partition=2) is None  # gone
    assert val(s, "txnwatch_lso_lag_records", cluster="prod", topic="orders", partition=0) == 8
    assert val(s, "txnwatch_alerts_total", cluster="prod", status="resolved") == 2  # counters accumulate
    assert val(s, "txnwatch_gaps_total", cluster="prod") == 2
    assert val(s, "txnwatch_source_lag", cluster="prod") == 42  # not reported again: last value kept
    assert val(s, "txnwatch_microbatch_duration_seconds_count", cluster="prod") == 2
    metrics.add_quarantined(4)
    assert val(scrape(metrics), "txnwatch_quarantined_total", cluster="prod") == 7


def test_cluster_from_alerts_and_close():
    m = Metrics(0, attach_listener=False)
    try:
        a = alert("hanging", "t", 0, 1, 0, "exceeds-max-timeout", NOW - 10_000, cluster="east")
        m.observe(0, {"rows": 1, "progress": 0, "gaps": [], "alerts": [a], "open_alerts": active(a),
                      "partitions": {}, "now_ms": NOW})
        s = scrape(m)
        assert val(s, "txnwatch_hanging_transactions", cluster="east", cause="exceeds-max-timeout") == 1
        assert val(s, "txnwatch_max_open_transaction_seconds", cluster="east", topic="t", partition=0) == 10
    finally:
        m.close()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{m.port}/metrics", timeout=2)


def _exported_series() -> set[str]:
    """Every sample name the metrics endpoint can expose (a histogram's _bucket/_sum/_count, a
    counter's _total/_created), from the registry the job serves."""
    m = Metrics(0, attach_listener=False)
    try:
        names = set()
        for fam in m.registry.collect():
            names.add(fam.name)
            kind = fam.type
            suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                        "summary": ("_sum", "_count", "_created")}.get(kind, ())
            names.update(fam.name + sfx for sfx in suffixes)
        return names
    finally:
        m.close()


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\btxnwatch_[a-z0-9_]+", expr))


def test_docs_examples_are_valid():
    """The rules file is real Prometheus rule YAML and the dashboard real JSON, and every
    expression in either names only series the code exports (a renamed metric fails here)."""
    import yaml  # declared in the test extras: the rules file is always parsed

    exported = _exported_series()
    dash = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert exprs
    doc = yaml.safe_load((ROOT / "docs" / "prometheus-rules.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert rules and all(set(r) >= {"alert", "expr", "labels", "annotations"} for r in rules)
    assert all(r["labels"].get("severity") in ("critical", "warning", "info") for r in rules)
    for expr in exprs + [r["expr"] for r in rules]:
        names = _metric_names(expr)
        assert names, f"expression names no txnwatch metric: {expr}"
        assert names <= exported, f"{expr} names {sorted(names - exported)}, which the code does not export"
