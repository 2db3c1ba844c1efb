"""ListTransactions with the coordinator's own filters (issue 25 item 5).

Kafka behaviour followed (TransactionStateManager.listTransactionStates, tag 3.8.0): Dead is never
listed; state filters (v0, 3.0+) and, from v1 (3.8+, KIP-994), the duration filter keep a
transaction only when "now - txnStartTimestamp > DurationFilter". The fake broker models exactly
that (tests/kafka_fake_broker.py ``_on_list_transactions``). Before this change nothing in
txnwatch sent ListTransactions.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streaming.broker_confirm import KafkaBrokerConfirm, annotate
from tests.kafka_fake_broker import FakeKafkaBroker

MIN = 60_000


def _setup(broker: FakeKafkaBroker) -> None:
    now = int(time.time() * 1000)
    broker.set_transaction("slow-etl", producer_id=7, producer_epoch=3, state="Ongoing", start_ms=now - 10 * MIN)
    broker.set_transaction("fast-etl", producer_id=8, producer_epoch=0, state="Ongoing", start_ms=now - 1000)
    broker.set_transaction("idle", producer_id=9, producer_epoch=0, state="Empty")


@pytest.mark.parametrize("version,expected_pids,duration", [
    ((3, 9), [7], 5 * MIN),     # v1: the coordinator drops the 1 s old transaction and the Empty one
    ((3, 0), [7, 8], None),     # v0: no duration filter; the state filter still drops Empty
], ids=["3.9-v1", "3.0-v0"])
def test_filters_where_advertised(tmp_path: Path, version, expected_pids, duration) -> None:
    with FakeKafkaBroker(tmp_path / "logs", broker_version=version) as broker:
        _setup(broker)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            got = confirm.long_transactions(5 * MIN)
            assert sorted(got["by_producer"]) == expected_pids and got["duration_filter_ms"] == duration
            assert got["by_producer"][7] == {"transactional_id": "slow-etl", "state": "Ongoing", "coordinator_id": 1}
            assert confirm.long_transactions(5 * MIN) is got  # reused within TXN_LIST_REFRESH_S
        (req,) = broker.requests_for("list_transactions")
        assert sorted(req.request.state_filters) == ["Ongoing", "PrepareAbort", "PrepareCommit"]
        assert req.version == (1 if duration else 0)
        if duration:
            assert req.request.duration_filter == 5 * MIN


def test_unsupported_before_30(tmp_path: Path) -> None:
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(2, 8)) as broker:
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            assert confirm.long_transactions(5 * MIN) is None
        assert not broker.requests_for("list_transactions")


def test_annotate_names_the_transactional_id_only_when_the_log_did_not(tmp_path: Path) -> None:
    base = {"status": "hanging", "cause": "exceeds-max-timeout", "topic": "orders", "partition": 0,
            "first_offset": 0, "threshold_ms": 5 * MIN}
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(3, 9)) as broker:
        broker.create_topic("orders", 1)
        _setup(broker)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            unknown = annotate(dict(base, producer_id=7, transactional_id=None), confirm)
            gone = annotate(dict(base, producer_id=4242, transactional_id=None), confirm)
            named = annotate(dict(base, producer_id=7, transactional_id="slow-etl"), confirm)
        assert len(broker.requests_for("list_transactions")) == 1  # one listing served both findings
    assert unknown["evidence"]["list_transactions"] == {
        "found": True, "transactional_id": "slow-etl", "state": "Ongoing", "coordinator_id": 1,
        "duration_filter_ms": 5 * MIN}
    assert gone["evidence"]["list_transactions"] == {"found": False, "duration_filter_ms": 5 * MIN}
    assert "list_transactions" not in (named.get("evidence") or {})
    # evidence only: what the brokers confirm is untouched by the listing
    assert unknown["confirmed_by"] == gone["confirmed_by"]


# --- KIP-1152: the transactional-id pattern (ListTransactions v2, Kafka 4.1+) ------------------------


def _named_setup(broker: FakeKafkaBroker) -> None:
    now = int(time.time() * 1000)
    broker.set_transaction("etl.orders", producer_id=7, producer_epoch=3, state="Ongoing", start_ms=now - 10 * MIN)
    broker.set_transaction("etlXorders", producer_id=8, producer_epoch=0, state="Ongoing", start_ms=now - 10 * MIN)
    broker.set_transaction("billing", producer_id=9, producer_epoch=0, state="PrepareCommit", start_ms=now)
    broker.set_transaction("idle", producer_id=10, producer_epoch=0, state="CompleteCommit")


@pytest.mark.parametrize("version,pattern", [
    ((4, 3), r"^(?:billing|etl\.orders|idle)$"),  # v2 advertised (66: 0-2): the coordinator filters
    ((4, 0), None),                                # v1 only (66: 0-1): no pattern on the wire
    ((3, 0), None),                                # v0
], ids=["4.3-v2", "4.0-v1", "3.0-v0"])
def test_named_transactions_use_the_pattern_where_advertised(tmp_path: Path, version, pattern) -> None:
    with FakeKafkaBroker(tmp_path / "logs", broker_version=version) as broker:
        _named_setup(broker)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            got = confirm.transactions_named(["etl.orders", "billing", "idle"])
            assert confirm.transactions_named(["idle", "billing", "etl.orders"]) is got  # reused (same set)
        (req,) = broker.requests_for("list_transactions")
    # TransactionStateManager.listTransactionStates: open states only (state filter), and the
    # '.' of "etl.orders" is escaped, so "etlXorders" never matches; "idle" is CompleteCommit
    assert got == {"by_id": {"etl.orders": {"producer_id": 7, "state": "Ongoing", "coordinator_id": 1},
                             "billing": {"producer_id": 9, "state": "PrepareCommit", "coordinator_id": 1}},
                   "pattern": pattern}
    assert req.version == {(4, 3): 2, (4, 0): 1, (3, 0): 0}[version]
    assert sorted(req.request.state_filters) == ["Ongoing", "PrepareAbort", "PrepareCommit"]
    if pattern:
        assert req.request.transactional_id_pattern == pattern


def test_annotate_lists_the_id_when_describe_transactions_gave_no_answer(tmp_path: Path) -> None:
    base = {"status": "hanging", "cause": "coordinator-finished-without-partition", "topic": "orders",
            "partition": 0, "first_offset": 0, "threshold_ms": 5 * MIN}
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 3)) as broker:
        broker.create_topic("orders", 1)
        _named_setup(broker)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            confirm.describe_transaction = lambda tid: None  # the coordinator did not answer
            a = annotate(dict(base, producer_id=7, transactional_id="etl.orders"), confirm)
        (req,) = broker.requests_for("list_transactions")
    assert req.request.transactional_id_pattern == r"^(?:etl\.orders)$"
    assert a["evidence"]["list_transactions"] == {"found": True, "transactional_id": "etl.orders", "producer_id": 7,
                                                  "state": "Ongoing", "coordinator_id": 1,
                                                  "pattern": r"^(?:etl\.orders)$"}
    assert "DescribeTransactions" not in (a["confirmed_by"] or [])  # evidence only: a listing confirms nothing


def test_fake_coordinator_filters_by_the_pattern(tmp_path: Path) -> None:
    """The fake's v2 answer itself (TransactionStateManager.listTransactionStates with a pattern):
    only matching ids, and the escaped '.' does not match 'X'."""
    from kafka.admin import KafkaAdminClient

    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 3)) as broker:
        _named_setup(broker)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=5000)
        try:
            listed = admin.list_transactions(transactional_id_pattern=r"^(?:etl\.orders|idle)$")
            everything = admin.list_transactions(transactional_id_pattern=".*")
        finally:
            admin.close()
    assert sorted(t.transactional_id for ts in listed.values() for t in ts) == ["etl.orders", "idle"]
    assert sorted(t.transactional_id for ts in everything.values() for t in ts) == [
        "billing", "etl.orders", "etlXorders", "idle"]
