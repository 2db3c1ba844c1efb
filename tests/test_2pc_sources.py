"""Two-phase commit (KIP-939) and the KIP-890 tagged fields from each source (issue 25 item 3 check).

Layout of ``TransactionLogValue`` (transaction-coordinator/src/main/resources/common/message/
TransactionLogValue.json, trunk): v1 is flexible; the tagged fields are 0 PreviousProducerId
(int64, default -1), 1 NextProducerId (int64, -1), 2 ClientTransactionVersion (int16, 0). A
two-phase-commit transaction is one whose TransactionTimeoutMs is Integer.MAX_VALUE
(``TransactionMetadata.isDistributedTwoPhaseCommitTxn``); DescribeTransactions v0 carries no
tagged field, only that timeout (DescribeTransactionsResponse.json). Dump text of 4.x prints the
tags as JSON (covered in tests/test_dump_text_4x.py: nextProducerId 9002, clientTransactionVersion
2; 2PC from a 4.0 dump in tests/test_issue19_rules.py).
"""

from __future__ import annotations

from pathlib import Path

from streaming.broker_confirm import KafkaBrokerConfirm
from streaming.simulate.encode import encode_txn_log_batch, encode_txn_value_v1
from streaming.verdict import (
    CoordinatorView,
    EpochEvidence,
    OpenTxn,
    Thresholds,
    described_from_answer,
    judge,
)
from tests.kafka_fake_broker import FakeKafkaBroker
from udfs.txn_log import decode_txn_log_reduced, decode_txn_log_segment

MAX_INT = 2_147_483_647
T0 = 1_761_000_000_000


def _segment() -> bytes:
    value = encode_txn_value_v1(5001, 3, MAX_INT, "Ongoing", {"orders": [0, 1]}, T0 + 50, T0,
                                previous_producer_id=4999, next_producer_id=5002, client_transaction_version=2)
    return encode_txn_log_batch(0, "xa-ledger", value, T0 + 50, 7)


def test_segments_decode_the_tagged_fields_and_the_2pc_timeout():
    want = {"transactional_id": "xa-ledger", "producer_id": 5001, "producer_epoch": 3, "txn_timeout_ms": MAX_INT,
            "txn_state": "Ongoing", "txn_partitions": ["orders-0", "orders-1"], "txn_last_update_ts": T0 + 50,
            "txn_start_ts": T0, "prev_producer_id": 4999, "next_producer_id": 5002, "client_txn_version": 2,
            "value_version": 1, "coordinator_epoch": 7}
    (rec,), scan = decode_txn_log_segment(_segment())
    assert scan.errors == [] and {k: rec[k] for k in want} == want
    # the vectorized reader keeps the id's one record with the same fields
    (red,), _ = decode_txn_log_reduced(_segment())
    assert {k: red[k] for k in want} == want


def test_describe_transactions_carries_the_2pc_timeout_into_the_verdict(tmp_path: Path):
    # TransactionCoordinator.handleDescribeTransactions answers the in-memory TransactionMetadata:
    # state Ongoing, timeout Integer.MAX_VALUE, orders-0 among its partitions -> detection.md §3.1:
    # late / prepared-2pc at any age past max_timeout + padding (20 min here: 2 h old).
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 0)) as broker:
        broker.set_transaction("xa-ledger", producer_id=5001, producer_epoch=3, state="Ongoing",
                               partitions={("orders", 0)}, timeout_ms=MAX_INT, start_ms=T0)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            answer = confirm.describe_transaction("xa-ledger")
    assert (answer["state"], answer["timeout_ms"], answer["partitions"]) == ("Ongoing", MAX_INT, ["orders-0"])
    dt = described_from_answer(answer)
    txn = OpenTxn("orders", 0, 5001, 10, 12, T0, T0 + 10, 3, 3, None)
    view = CoordinatorView(current=True, mapped=False, described=dt, partition_count=50,
                           read_partitions=frozenset(range(50)))
    v = judge(txn, view, EpochEvidence(), now_ms=T0 + 7_200_000, thresholds=Thresholds())
    assert (v.status, v.cause, v.threshold_ms) == ("late", "prepared-2pc", 1_200_000)
