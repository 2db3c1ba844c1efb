"""The cluster's finalized transaction.version, shown per cluster (issue 25 item 2; informational).

Kafka behaviour followed: ApiVersions v3+ carries FinalizedFeaturesEpoch (tag 1, -1 = the list is
not valid) and FinalizedFeatures (tag 2) (ApiVersionsResponse.json); a feature that is not
finalized is level 0 for the coordinator (TransactionStateManager.transactionVersionLevel:
finalizedFeatures().getOrDefault(TransactionVersion.FEATURE_NAME, 0)). ApiVersions v3 arrived in
2.4 (KIP-511/KIP-584): the 2.3 table answers at most v2, so no features are reported there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.broker_confirm import KafkaBrokerConfirm, annotate
from streaming.cluster_features import transaction_version_of
from tests.kafka_fake_broker import FakeKafkaBroker


def _confirm(broker: FakeKafkaBroker, **kw) -> KafkaBrokerConfirm:
    return KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000, **kw)


@pytest.mark.parametrize("version,features,expected", [
    ((4, 0), {"metadata.version": 25, "transaction.version": 2}, 2),   # 4.0 cluster upgraded to TV 2
    ((4, 0), {"metadata.version": 25, "transaction.version": 1}, 1),
    ((4, 0), {"metadata.version": 25}, 0),                            # TV not finalized: level 0
    ((3, 0), {}, None),                                               # epoch -1: list not valid
    ((2, 3), {"transaction.version": 2}, None),                       # ApiVersions v0-2: no features
], ids=["4.0-tv2", "4.0-tv1", "4.0-tv0", "3.0-no-epoch", "2.3-no-v3"])
def test_transaction_version_from_api_versions(tmp_path: Path, version, features, expected) -> None:
    with FakeKafkaBroker(tmp_path / "logs", broker_version=version) as broker:
        for name, level in features.items():
            broker.finalize_feature(name, level)
        with _confirm(broker) as confirm:
            assert confirm.transaction_version() == expected


def test_read_once_per_refresh_interval(tmp_path: Path) -> None:
    ticks = [0.0]
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 0)) as broker:
        broker.finalize_feature("transaction.version", 2)
        with _confirm(broker, clock=lambda: ticks[0]) as confirm:
            assert confirm.transaction_version() == 2
            asked = len(broker.requests_for("api_versions"))
            broker.finalize_feature("transaction.version", 1)  # an operator downgrade
            ticks[0] = 30.0
            assert confirm.transaction_version() == 2  # cached
            assert len(broker.requests_for("api_versions")) == asked
            ticks[0] = 61.0
            assert confirm.transaction_version() == 1


def test_pure_rule() -> None:
    assert transaction_version_of({"transaction.version": 2}, 7) == 2
    assert transaction_version_of({}, 0) == 0
    assert transaction_version_of({"transaction.version": 2}, -1) is None
    assert transaction_version_of({"transaction.version": 2}, None) is None


def test_alert_metric_and_status_page_show_it(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    from streaming.metrics import Metrics
    from streaming.quality.alert_contract import alert_errors
    from streaming.ui import render
    from streaming.ui.store import FindingStore
    from tests.test_ui import alert as ui_alert

    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 0)) as broker:
        broker.create_topic("orders", 1)
        broker.finalize_feature("transaction.version", 2)
        a = ui_alert("hanging", topic="orders", partition=0, first=0)
        with _confirm(broker) as confirm:
            annotate(a, confirm)
    assert a["transaction_version"] == 2
    assert not [e for e in alert_errors(a) if "transaction_version" in e]
    m = Metrics(0, cluster="prod", attach_listener=False)
    try:
        m.observe(0, {"alerts": [], "open_alerts": {}, "partitions": {}, "transaction_version": 2,
                      "now_ms": 1, "duration_s": 0.1})
        text = generate_latest(m.registry).decode()
    finally:
        m.close()
    assert 'txnwatch_transaction_version{cluster="prod"} 2.0' in text
    job = FindingStore(mode="job")
    job.observe_batch(0, {"alerts": [], "open_alerts": {}, "partitions": {}, "transaction_version": 2})
    assert job.snapshot()["job"]["transaction_version"] == 2
    assert 'id="job-transaction-version"' in render.overview_page(job.snapshot()) and \
        ">2</dd>" in render.overview_page(job.snapshot())
    feed = FindingStore(mode="feed")
    feed.ingest(a)
    assert feed.snapshot()["clusters"] == {"prod": {"transaction_version": 2}}
    assert "Transaction version of prod" in render.overview_page(feed.snapshot())
