"""ListTransactions (API key 66, v0-v2; Kafka 3.0+, KIP-664) to every broker.

Each broker coordinates its own ``__transaction_state`` partitions, so one request goes to each
(Kafka's find-hanging step 4). Request fields: ``StateFilters[]`` and ``ProducerIdFilters[]`` (v0),
``DurationFilter`` (v1, Kafka 3.8+, KIP-994: "now - txnStartTimestamp > DurationFilter"),
``TransactionalIdPattern`` (v2, Kafka 4.1+, KIP-1152: a Java regex). The coordinator filters
(``TransactionStateManager.listTransactionStates``) and answers ``ErrorCode``,
``UnknownStateFilters[]`` and ``TransactionStates[TransactionalId, ProducerId, TransactionState]``.
Only the transactions the principal may Describe are listed (``KafkaApis.handleListTransactionsRequest``
leaves out the others), so an id missing from an answer is never a proof.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.transactions import ListTransactionsRequest

from streaming.broker_rules import OPEN_STATES
from streaming.kafka_admin.session import AdminSession

LIST_TRANSACTIONS = "ListTransactions"
#: how long one listing is reused
TXN_LIST_REFRESH_S = 60.0


def id_pattern(transactional_ids: Iterable[str]) -> str:
    """A ListTransactions TransactionalIdPattern (a Java regex, KIP-1152) selecting exactly these
    ids: anchored alternation, each id escaped with ``re.escape``, which puts a backslash only
    before non-alphanumeric characters, and Java's ``Pattern`` takes a backslash before any
    non-alphabetic character as that character itself."""
    return "^(?:" + "|".join(re.escape(t) for t in sorted(set(transactional_ids))) + ")$"


def _state(t: Any) -> str:
    return getattr(t.state, "value", str(t.state))


class TransactionListings:
    """The cluster's open transactions as ListTransactions gives them, each listing reused for
    ``TXN_LIST_REFRESH_S`` (``clock``: monotonic seconds)."""

    def __init__(self, session: AdminSession, clock: Callable[[], float]):
        self._session = session
        self._clock = clock
        #: ("long", min duration) or ("named", *ids) -> (read at, answer)
        self._cache: dict[tuple, tuple[float, dict[str, Any] | None]] = {}

    def transactional_ids_of(self, producer_id: int) -> set[str] | None:
        """Transactional ids whose coordinator currently maps ``producer_id`` (ProducerIdFilters,
        v0) on every broker. None when the API is missing; a broker that fails the request (e.g.
        COORDINATOR_LOAD_IN_PROGRESS) raises, so an empty set means every coordinator answered."""
        if not self._session.available(LIST_TRANSACTIONS, ListTransactionsRequest):
            return None
        by_broker = self._session.admin().list_transactions(producer_id_filters=[int(producer_id)])
        return {t.transactional_id for listings in by_broker.values() for t in listings
                if t.producer_id == int(producer_id)}

    def _listing(self, key: tuple, field: str, value: Any, since_version: int,
                 shape: Callable[[dict[int, list], Any], dict[str, Any]]) -> dict[str, Any] | None:
        """One listing per broker of the open transactions (StateFilters), narrowed by ``field`` =
        ``value`` where ListTransactions ``since_version`` is advertised, given ``shape(listing,
        value sent or None)`` and reused under ``key`` for ``TXN_LIST_REFRESH_S``. None when
        unknown: the brokers lack ListTransactions (before 3.0, not cached), cannot be reached, or
        refuse (a missing ACL is logged once)."""
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < TXN_LIST_REFRESH_S:
            return cached[1]
        if not self._session.available(LIST_TRANSACTIONS, ListTransactionsRequest):  # Kafka 3.0+
            return None
        kw: dict[str, Any] = {"state_filters": sorted(OPEN_STATES)}
        if self._session.max_version(ListTransactionsRequest) >= since_version:
            kw[field] = value
        try:
            listed = self._session.call(LIST_TRANSACTIONS, lambda: self._session.admin().list_transactions(**kw))
        except Errors.AuthorizationError as exc:
            self._session.once("lt-acl", logging.WARNING, "%s",
                               self._session.denied(LIST_TRANSACTIONS, exc, "<transactional id>"))
            listed = None
        answer = None if listed is None else shape(listed, kw.get(field))
        self._cache[key] = (now, answer)
        return answer

    def long_transactions(self, min_duration_ms: int) -> dict[str, Any] | None:
        """Open transactions running longer than ``min_duration_ms``: ``{"by_producer": {producer
        id: {"transactional_id", "state", "coordinator_id"}}, "duration_filter_ms": n or None}``.
        Where v1 is advertised the coordinator applies the duration filter, so only the
        long-running few come back; without it the answer holds every open transaction
        (``duration_filter_ms`` None). No pattern is sent: a finding without a transactional id has
        none to ask for (:meth:`transactions_named` sends it where the ids are known)."""
        def shape(listed: dict[int, list], duration: Any) -> dict[str, Any]:
            return {"by_producer": {int(t.producer_id): {"transactional_id": t.transactional_id, "state": _state(t),
                                                         "coordinator_id": node}
                                    for node, txns in listed.items() for t in txns},
                    "duration_filter_ms": duration}

        return self._listing(("long", int(min_duration_ms)), "duration_filter_ms", int(min_duration_ms), 1, shape)

    def transactions_named(self, transactional_ids: Iterable[str]) -> dict[str, Any] | None:
        """Open transactions of just these ids: ``{"by_id": {id: {"producer_id", "state",
        "coordinator_id"}}, "pattern": the TransactionalIdPattern sent, or None}``. Where v2 is
        advertised the coordinator filters by ``^(?:id1|id2|...)$`` (anchored, so it selects
        exactly these ids whether the broker matches the whole id or searches it); before v2 the
        state-filtered listing holds every open transaction and is narrowed here."""
        ids = sorted({str(t) for t in transactional_ids if t})
        if not ids:
            return {"by_id": {}, "pattern": None}
        wanted = set(ids)

        def shape(listed: dict[int, list], pattern: Any) -> dict[str, Any]:
            return {"by_id": {t.transactional_id: {"producer_id": int(t.producer_id), "state": _state(t),
                                                   "coordinator_id": node}
                              for node, txns in listed.items() for t in txns if t.transactional_id in wanted},
                    "pattern": pattern}

        return self._listing(("named", *ids), "transactional_id_pattern", id_pattern(ids), 2, shape)
