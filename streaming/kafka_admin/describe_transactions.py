"""DescribeTransactions (API key 65, v0; Kafka 3.0+, KIP-664) to a transactional id's coordinator.

Request: ``TransactionalIds[]``; here one id. The coordinator answers from its in-memory state
(``TransactionCoordinator.handleDescribeTransactions``), per id ``ErrorCode``,
``TransactionalId``, ``TransactionState``, ``TransactionTimeoutMs``, ``TransactionStartTimeMs``,
``ProducerId``, ``ProducerEpoch`` and ``Topics[Topic, Partitions]``. TRANSACTIONAL_ID_NOT_FOUND is
an answer (the coordinator does not know the id), not a failure. It needs Describe on the
TransactionalId; without it the refusal is logged once and the answer stays unknown (None).
"""

from __future__ import annotations

import logging
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.transactions import DescribeTransactionsRequest

from streaming.broker_rules import DESCRIBE_TRANSACTIONS
from streaming.kafka_admin.session import AdminSession


def describe_transaction(session: AdminSession, transactional_id: str) -> dict[str, Any] | None:
    """``{"transactional_id", "coordinator_id", "state", "producer_id", "producer_epoch",
    "timeout_ms", "start_ms", "partitions": sorted "topic-partition"}``, or ``{"transactional_id",
    "error": "TRANSACTIONAL_ID_NOT_FOUND"}``; None when unknown."""
    if not session.available(DESCRIBE_TRANSACTIONS, DescribeTransactionsRequest):  # Kafka 3.0+
        return None
    try:
        found = session.call(DESCRIBE_TRANSACTIONS,
                             lambda: session.admin().describe_transactions([transactional_id]),
                             (Errors.AuthorizationError, Errors.TransactionalIdNotFoundError))
    except Errors.TransactionalIdNotFoundError:
        return {"transactional_id": transactional_id, "error": "TRANSACTIONAL_ID_NOT_FOUND"}
    except Errors.AuthorizationError as exc:
        session.once(f"dt-acl:{transactional_id}", logging.WARNING, "%s",
                     session.denied(DESCRIBE_TRANSACTIONS, exc, transactional_id))
        return None
    if found is None or transactional_id not in found:
        return None
    d = found[transactional_id]
    return {"transactional_id": transactional_id, "coordinator_id": d.coordinator_id,
            "state": getattr(d.state, "value", str(d.state)), "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch, "timeout_ms": d.transaction_timeout_ms,
            "start_ms": d.transaction_start_time_ms,
            "partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions)}
