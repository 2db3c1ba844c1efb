"""DescribeTransactions for many transactional ids at once (issue 23 item 1), on the socket fake.

The coordinator answers every id of a request on its own: ``KafkaApis.handleDescribeTransactionsRequest``
calls ``TransactionCoordinator.handleDescribeTransactions`` once per id, which sets that id's
ErrorCode (TRANSACTIONAL_ID_NOT_FOUND when it holds no metadata for it,
COORDINATOR_LOAD_IN_PROGRESS while ``TransactionStateManager.getAndMaybeAddTransactionState`` finds
its partition still loading) and, with NONE, its state, producer id and epoch, timeout, start time
and partitions; the ACL check (DESCRIBE on the TransactionalId) is per id too
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED). So one id's error must not take the other ids' answers
with it. Expected answers are written from what the test told the fake's coordinator.
"""

from __future__ import annotations

import logging
from pathlib import Path

from streaming.broker_confirm import KafkaBrokerConfirm
from tests.kafka_fake_broker import FakeKafkaBroker


def _confirm(broker: FakeKafkaBroker) -> KafkaBrokerConfirm:
    return KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000)


def _stage(broker: FakeKafkaBroker) -> None:
    broker.set_transaction("pay-1", producer_id=11, producer_epoch=3, state="Ongoing",
                           partitions={("orders", 0), ("orders", 2)}, timeout_ms=60_000, start_ms=1_700_000_000_000)
    broker.set_transaction("pay-2", producer_id=12, producer_epoch=0, state="PrepareCommit",
                           partitions={("billing", 1)}, timeout_ms=900_000, start_ms=1_700_000_001_000)
    broker.set_transaction("pay-3", producer_id=13, producer_epoch=7, state="CompleteAbort",
                           timeout_ms=60_000, start_ms=-1)


# TransactionCoordinator.handleDescribeTransactions with NONE: state name, producer id/epoch,
# txnTimeoutMs, txnStartTimestamp, topicPartitions; the coordinator is the fake's first node, id 1.
PAY_1 = {"transactional_id": "pay-1", "coordinator_id": 1, "state": "Ongoing", "producer_id": 11,
         "producer_epoch": 3, "timeout_ms": 60_000, "start_ms": 1_700_000_000_000,
         "partitions": ["orders-0", "orders-2"]}
PAY_2 = {"transactional_id": "pay-2", "coordinator_id": 1, "state": "PrepareCommit", "producer_id": 12,
         "producer_epoch": 0, "timeout_ms": 900_000, "start_ms": 1_700_000_001_000, "partitions": ["billing-1"]}
PAY_3 = {"transactional_id": "pay-3", "coordinator_id": 1, "state": "CompleteAbort", "producer_id": 13,
         "producer_epoch": 7, "timeout_ms": 60_000, "start_ms": -1, "partitions": []}


def _describe_requests(broker: FakeKafkaBroker) -> list[list[str]]:
    return [list(r.request.transactional_ids) for r in broker.requests_for("describe_transactions")]


def test_many_ids_are_one_request_to_their_coordinator(tmp_path: Path):
    with FakeKafkaBroker(tmp_path) as broker:
        _stage(broker)
        with _confirm(broker) as confirm:
            got = confirm.describe_transactions(["pay-1", "pay-2", "pay-3", "pay-1"])
        sent = _describe_requests(broker)
    assert got == {"pay-1": PAY_1, "pay-2": PAY_2, "pay-3": PAY_3}
    # one coordinator (the fake's node 1 holds every __transaction_state partition): one request,
    # each id once
    assert sent == [["pay-1", "pay-2", "pay-3"]]


def test_one_ids_error_leaves_the_others_answers(tmp_path: Path, caplog):
    with FakeKafkaBroker(tmp_path) as broker:
        _stage(broker)
        broker.coordinator_loading("pay-2")  # its partition is loading: COORDINATOR_LOAD_IN_PROGRESS
        # KafkaApis.getCoordinator refuses FindCoordinator for pay-3 (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        broker.deny("Describe", "TransactionalId", "pay-3")
        with _confirm(broker) as confirm, caplog.at_level(logging.WARNING):
            got = confirm.describe_transactions(["pay-1", "pay-2", "never-seen", "pay-3"])
            sent = _describe_requests(broker)
            # the partition finished loading: the coordinator answers pay-2 again
            broker.coordinator_loading()
            again = confirm.describe_transactions(["pay-1", "pay-2"])
    # pay-1 keeps its own answer; never-seen's TRANSACTIONAL_ID_NOT_FOUND is an answer; pay-2 and
    # pay-3 are asked alone, as one id was asked before batching: unknown (None), the refusal
    # logged with the ACL to grant. pay-3 never reaches a DescribeTransactions request: no
    # coordinator is named for it.
    assert got == {"pay-1": PAY_1, "pay-2": None,
                   "never-seen": {"transactional_id": "never-seen", "error": "TRANSACTIONAL_ID_NOT_FOUND"},
                   "pay-3": None}
    assert sent == [["pay-1", "pay-2", "never-seen"], ["pay-2"]]
    assert any("Describe on TransactionalId:pay-3" in r.getMessage() for r in caplog.records)
    assert again == {"pay-1": PAY_1, "pay-2": PAY_2}
