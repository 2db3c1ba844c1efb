"""DescribeTransactions (API key 65, v0; Kafka 3.0+, KIP-664) to a transactional id's coordinator.

Request: ``TransactionalIds[]``; here one id. The coordinator answers from its in-memory state
(``TransactionCoordinator.handleDescribeTransactions``), per id ``ErrorCode``,
``TransactionalId``, ``TransactionState``, ``TransactionTimeoutMs``, ``TransactionStartTimeMs``,
``ProducerId``, ``ProducerEpoch`` and ``Topics[Topic, Partitions]``. TRANSACTIONAL_ID_NOT_FOUND is
an answer (the coordinator does not know the id), not a failure. It needs Describe on the
TransactionalId; without it the refusal is logged once and the answer stays unknown (None).

:func:`describe_transactions` asks many ids at once: one request per coordinator (kafka-python's
``describe_transactions`` groups them so too), all coordinators at once. The coordinator answers
each id on its own (``KafkaApis.handleDescribeTransactionsRequest`` calls
``TransactionCoordinator.handleDescribeTransactions`` per id), so one id's error says nothing of
the others'; kafka-python's call raises on the first per-id error and drops the rest, so the
answers are read here per id: an answer or TRANSACTIONAL_ID_NOT_FOUND is taken as it is, and any
other error (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, an ACL refusal, a failed request)
sends that id alone through :func:`describe_transaction`, which answers exactly as before.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.metadata import CoordinatorType

from streaming.broker_rules import DESCRIBE_TRANSACTIONS
from streaming.kafka_admin.session import AdminSession

log = logging.getLogger(__name__)

_NOT_FOUND = Errors.TransactionalIdNotFoundError.errno


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
    return _answer(transactional_id, found[transactional_id])


def _answer(transactional_id: str, d: Any) -> dict[str, Any]:
    """kafka-python's ``TransactionDescription`` of one id as the answer dict."""
    return {"transactional_id": transactional_id, "coordinator_id": d.coordinator_id,
            "state": getattr(d.state, "value", str(d.state)), "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch, "timeout_ms": d.transaction_timeout_ms,
            "start_ms": d.transaction_start_time_ms,
            "partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions)}


def describe_transactions(session: AdminSession, transactional_ids: Iterable[str]) -> dict[str, dict[str, Any] | None]:
    """:func:`describe_transaction`'s answer for each id, asked with one DescribeTransactions
    request per coordinator; an id whose own answer is an error other than
    TRANSACTIONAL_ID_NOT_FOUND, or whose request failed, is asked again alone."""
    ids = list(dict.fromkeys(transactional_ids))
    asked = set(ids)
    if not ids or not session.available(DESCRIBE_TRANSACTIONS, DescribeTransactionsRequest):
        return {tid: None for tid in ids}
    out: dict[str, dict[str, Any] | None] = {}
    if len(ids) > 1:
        admin = session.admin()
        try:
            answered = admin._manager.run(_ask_coordinators, admin, ids)
        except (Errors.KafkaError, OSError) as exc:  # FindCoordinator failed: each id alone, as before
            log.debug("DescribeTransactions of %d ids at once failed (%s): asking each alone", len(ids), exc)
            answered = []
        for coordinator, states in answered:
            for txn in states:
                tid = txn.transactional_id
                if tid in out or tid not in asked:
                    continue
                if txn.error_code == _NOT_FOUND:
                    out[tid] = {"transactional_id": tid, "error": "TRANSACTIONAL_ID_NOT_FOUND"}
                elif txn.error_code == 0:
                    # kafka-python's own reading of one answer (the same object the one-id call gives)
                    found = admin._describe_transactions_process_response(
                        SimpleNamespace(transaction_states=[txn]), coordinator)
                    out[tid] = _answer(tid, found[tid])
    for tid in ids:
        if tid not in out:
            out[tid] = describe_transaction(session, tid)
    return out


async def _ask_coordinators(admin: Any, ids: list[str]) -> list[tuple[int, list[Any]]]:
    """(coordinator, its per-id answers) of every coordinator that answered; every request is
    sent before the first answer is awaited. A coordinator whose request failed is left out, and
    so is an id whose coordinator was not found."""
    try:
        coordinators = await admin._find_coordinator_ids(ids, key_type=CoordinatorType.TRANSACTION)
    except Errors.KafkaError:
        # kafka-python raises on the first key FindCoordinator refused (an id without the Describe
        # ACL: TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaApis.getCoordinator); the others' are
        # found one by one (kafka-python caches each), the refused ones are asked alone
        coordinators = {}
        for tid in ids:
            try:
                coordinators.update(await admin._find_coordinator_ids([tid], key_type=CoordinatorType.TRANSACTION))
            except Errors.KafkaError:
                continue
    by_coordinator: dict[int, list[str]] = defaultdict(list)
    for tid in ids:
        if coordinators.get(tid) is not None:
            by_coordinator[coordinators[tid]].append(tid)
    sent = [(node, admin._manager.send(admin._describe_transactions_request(tids), node_id=node))
            for node, tids in by_coordinator.items()]
    answered = []
    for node, future in sent:
        try:
            response = await future
        except Exception as exc:  # its ids are asked alone, which reports the failure
            log.debug("DescribeTransactions to node %s failed (%s): its ids are asked alone", node, exc)
            continue
        answered.append((node, list(response.transaction_states)))
    return answered
