"""``txnwatch abort`` over the simulator's named scenarios, served by the broker fake (2.7: the
log path; 3.9: DescribeProducers and the KIP-664 coordinator APIs).

The expectations are the scenarios' own, written by their authors from Kafka's behaviour
(``streaming/simulate/scenarios.py``: status, cause, verified, producer epoch and coordinator
epoch of every finding): a verified hanging finding is confirmed and its marker carries exactly
the scenario's producer id, producer epoch and coordinator epoch, and after ``--execute`` the
transaction is closed; a late finding is refused as owned by the coordinator; an unverified one is
refused as unverified. Left out, with the reason: ``retention-restart`` (the fake now loads its
producer state from the ``.snapshot`` and keeps the LSO pinned at the log start, 10, with both
transactions open at 6 and 7, see ``tests/test_fake_producer_snapshot.py``; ``txnwatch abort``
then refuses them as "closed: last stable offset 10 past first offset 6", reading a pinned LSO
as a finished transaction) and ``txn-leader-epoch-bump`` (its
coordinator epoch comes from the producer's markers on other partitions, rule 5: covered by
``test_an_alert_epoch_from_a_rule_that_errs_low_is_replaced_by_the_exact_one``).
"""

from __future__ import annotations

import io
import json

import pytest

from streaming.abort.command import run_abort
from streaming.config import load_config
from streaming.sources.kafka import close_wires
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.test_kafka_source import live_scenario

SCENARIOS = ["write-after-marker", "failover-write-after-marker", "write-after-older-marker",
             "partition-never-added", "txn-id-expired", "txn-state-compacted", "markers-pending",
             "coordinator-stuck", "long-transaction", "partial-coordinator-view"]


@pytest.fixture(autouse=True)
def _close_cached_clients():
    yield
    close_wires()


def _run(broker, tmp_path, finding: dict, *, execute: bool) -> tuple[int, str]:
    key = f"live/{finding['topic']}/{finding['partition']}/{finding['producer_id']}/{finding['first_offset']}"
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text(json.dumps({"key": key, "producer_epoch": finding["producer_epoch"],
                                  "coordinator_epoch": finding["coordinator_epoch"],
                                  "coordinator_epoch_source": finding["coordinator_epoch_source"]}) + "\n")
    cfg = load_config(None, env={}, overrides={
        "cluster": "live", "kafka.bootstrap_servers": broker.bootstrap_servers, "kafka.request_timeout_ms": 3000,
        "kafka.groups_refresh_ms": 0, "abort.audit_path": str(tmp_path / "audit.jsonl"),
        "sinks.jsonl_path": str(alerts)})
    out = io.StringIO()
    code = run_abort(key, cfg, bootstrap=None, alerts_path=None, execute=execute, yes=execute, out=out)
    return code, out.getvalue()


@pytest.mark.parametrize("version", [(2, 7), (3, 9)], ids=["2.7", "3.9"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_abort_agrees_with_the_scenarios_findings(tmp_path, name, version):
    sc = live_scenario(tmp_path, name)
    assert sc.expected
    with FakeKafkaBroker(sc.root, broker_version=version, auto_create_topics=False) as broker:
        for f in sc.expected:
            code, text = _run(broker, tmp_path, f, execute=False)
            if f["status"] == "late":
                assert code == 4 and "- coordinator-owns:" in text, text
            elif not f["verified"]:
                assert code == 4 and "- unverified:" in text, text
            else:
                assert code == 0, text
                assert f"verdict now: hanging ({f['cause']}), verified" in text
                assert (f"producer id {f['producer_id']}, producer epoch {f['producer_epoch']}, coordinator epoch "
                        f"{f['coordinator_epoch']}") in text
        assert broker.request_counts()["write_txn_markers"] == 0
        for f in [f for f in sc.expected if f["status"] == "hanging" and f["verified"]]:
            code, text = _run(broker, tmp_path, f, execute=True)
            assert code == 0, text
            # the leader's producer state (ProducerStateManager): nothing of P open at the first offset
            st = broker.partition_state(f["topic"], f["partition"])
            assert st.open_transactions.get(f["producer_id"]) is None
