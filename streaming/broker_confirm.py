"""The live cluster's own answers about a finding: KIP-664 and consumer groups (WAVE2 contract B).

:class:`KafkaBrokerConfirm` implements three of the four :class:`~streaming.broker_evidence.
BrokerEvidence` questions with kafka-python 3.0's ``KafkaAdminClient`` (its KIP-664 mixin and
group admin), each asked only when the bootstrap broker's ApiVersions answer lists the API:

* ``describe_producers`` - DescribeProducers (api key 61, Kafka 2.8+) to tp's leader
  (``KafkaApis.handleDescribeProducersRequest`` -> ``UnifiedLog.activeProducers``): per producer
  id its ``ProducerEpoch``, ``CoordinatorEpoch`` (of its last marker on tp, -1 if none) and
  ``CurrentTxnStartOffset`` (-1: no open transaction). It is detection.md §4 rule 1
  (``describe-producers``); :func:`producers_agree` is the cross-check with the log.
* ``describe_transaction`` - DescribeTransactions (65, Kafka 3.0+) to the transaction coordinator
  (``TransactionCoordinator.handleDescribeTransactions``): its in-memory state, producer id and
  epoch, partitions, timeout and start time. TRANSACTIONAL_ID_NOT_FOUND is an answer (the
  coordinator does not know the id), not a failure.
* ``blocked_groups`` / ``group_positions`` - ListGroups + OffsetFetch (``list_groups``/
  ``list_group_offsets``), then the partition itself (``streaming.group_hold``): the groups the
  transaction *holds now* (committed offset at or below the LSO it pins, no delivered record in
  between) and the groups merely *lagging* behind it (records still to read, or an older
  transaction pins the LSO first). All groups' offsets are cached and refreshed every
  ``groups_refresh_ms``; the LSO and the records in between are read per finding.

``last_marker_before`` is delegated to the look-back reader given as ``lookback`` (i10-wire's
``KafkaLookback``), so one object answers the whole protocol.

Failures: an answer that cannot be had (API missing, broker unreachable, leader moving) is
``None`` = unknown, never a guess. Authorization failures are reported with the same one message
as the live source (``kafka_security.authorization_message``: the missing ACL and the
``kafka-acls.sh`` command): DescribeProducers needs Read on the topic, which the job needs for
Fetch anyway, so a refusal raises :class:`~streaming.sources.kafka_wire.KafkaAuthorizationError`;
DescribeTransactions (Describe on the TransactionalId) and the group lookup (Describe on the
Cluster and on the groups) are optional: the message is logged once and the answer stays None.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.groups import ListGroupsRequest
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.structs import TopicPartition

from streaming.broker_evidence import BrokerEvidence, LookbackResult, SpanResult
from streaming.cluster_features import finalized_levels, transaction_version_of
from streaming.group_hold import DEFAULT_HOLD_MAX_BYTES, classify_groups, committed_between_reader
from streaming.sources.kafka_security import authorization_message, principal_of
from streaming.sources.kafka_wire import KafkaAuthorizationError
from streaming.verdict import DescribeProducersAnswer
from udfs.offset_commit import held_groups, pending_by_partition

log = logging.getLogger(__name__)

DESCRIBE_PRODUCERS = "DescribeProducers"
DESCRIBE_TRANSACTIONS = "DescribeTransactions"
LIST_TRANSACTIONS = "ListTransactions"
OFFSETS_TOPIC = "__consumer_offsets"
UNSTABLE_OFFSET_COMMIT = 88  # Errors.UNSTABLE_OFFSET_COMMIT (KIP-447)
#: how long one listing of the long-running transactions is reused
TXN_LIST_REFRESH_S = 60.0
#: coordinator states in which the coordinator still owns the transaction's partitions
_OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
DEFAULT_GROUPS_REFRESH_MS = 60_000
#: how long a read of the finalized features is reused (they change only on an operator upgrade)
FEATURES_REFRESH_S = 60.0
_API_VERSIONS_KEY = 18


def id_pattern(transactional_ids: Iterable[str]) -> str:
    """A ListTransactions TransactionalIdPattern (a Java regex, KIP-1152) selecting exactly these
    ids: anchored alternation, each id escaped with ``re.escape``, which puts a backslash only
    before non-alphanumeric characters, and Java's ``Pattern`` takes a backslash before any
    non-alphabetic character as that character itself."""
    return "^(?:" + "|".join(re.escape(t) for t in sorted(set(transactional_ids))) + ")$"


def producer_answer(answers: dict[int, DescribeProducersAnswer] | None,
                    producer_id: int) -> DescribeProducersAnswer | None:
    """P's entry of a DescribeProducers answer; ``found=False`` when the leader has none, None when
    there is no answer (API unsupported or unreachable)."""
    if answers is None:
        return None
    return answers.get(int(producer_id), DescribeProducersAnswer(found=False))


def producers_agree(answer: DescribeProducersAnswer | None, first_offset: int) -> str | None:
    """None when the leader's CurrentTxnStartOffset is the finding's first offset; otherwise what
    the leader says instead (the finding must not be acted on until tp is read again)."""
    if answer is None:
        return None
    if not answer.found:
        return "DescribeProducers: the leader has no state for this producer"
    if answer.current_txn_start_offset != first_offset:
        now = ("no open transaction" if answer.current_txn_start_offset < 0
               else f"CurrentTxnStartOffset {answer.current_txn_start_offset}")
        return f"DescribeProducers: the leader reports {now}, the log read gives first offset {first_offset}"
    return None


def transaction_covers(desc: dict[str, Any] | None, producer_id: int, tp: str) -> bool | None:
    """Whether the coordinator still owns the transaction on ``tp`` ("topic-partition") for P:
    an open state, P's producer id and tp among its partitions. None when unknown."""
    if desc is None:
        return None
    if desc.get("error"):
        return False if desc["error"] == "TRANSACTIONAL_ID_NOT_FOUND" else None
    return (desc["state"] in _OPEN_STATES and desc["producer_id"] == int(producer_id)
            and tp in desc["partitions"])


def transaction_disagreements(desc: dict[str, Any] | None, record: dict[str, Any] | None,
                              producer_id: int) -> list[str]:
    """Where the coordinator's live answer and the ``__transaction_state`` record read for the
    finding differ (state, producer id/epoch, partitions). The log may simply lag the coordinator;
    the alert reports the difference, the verdict stays the log's."""
    if desc is None or record is None or desc.get("error"):
        return []
    out = []
    if desc["state"] != record.get("state"):
        out.append(f"DescribeTransactions: coordinator state {desc['state']}, __transaction_state "
                   f"{record.get('state')}")
    if desc["producer_id"] != record.get("producer_id", producer_id):
        out.append(f"DescribeTransactions: producer id {desc['producer_id']}, __transaction_state "
                   f"{record.get('producer_id')}")
    elif record.get("producer_epoch") is not None and desc["producer_epoch"] != record["producer_epoch"]:
        out.append(f"DescribeTransactions: producer epoch {desc['producer_epoch']}, __transaction_state "
                   f"{record['producer_epoch']}")
    parts = record.get("partitions")
    if parts is not None and sorted(parts) != desc["partitions"]:
        out.append(f"DescribeTransactions: partitions {desc['partitions']}, __transaction_state {sorted(parts)}")
    return out


def confirmations(alert: dict[str, Any], producers: DescribeProducersAnswer | None,
                  transaction: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """(``confirmed_by``, disagreements) for a late/hanging alert.

    DescribeProducers agrees when the leader's open transaction of P starts at the finding's first
    offset. DescribeTransactions agrees when the coordinator's ownership of tp matches the status:
    ``late`` needs the coordinator to still own it, ``hanging`` needs it not to.
    """
    confirmed: list[str] = []
    problems: list[str] = []
    dp_problem = producers_agree(producers, int(alert["first_offset"]))
    if producers is not None:
        (problems.append(dp_problem) if dp_problem else confirmed.append(DESCRIBE_PRODUCERS))
    tp = f"{alert['topic']}-{int(alert['partition'])}"
    covers = transaction_covers(transaction, int(alert["producer_id"]), tp)
    if covers is not None:
        if covers == (alert["status"] == "late"):
            confirmed.append(DESCRIBE_TRANSACTIONS)
        else:
            owner = "still owns" if covers else "does not own"
            problems.append(f"DescribeTransactions: the coordinator {owner} {tp} for this producer "
                            f"(state {transaction.get('state') or transaction.get('error')})")
    return confirmed, problems


class KafkaBrokerConfirm:
    """BrokerEvidence over a live cluster (see the module docstring).

    Args:
        bootstrap_servers: the watched cluster.
        security: kafka-python security keyword arguments (``kafka_security.kafka_python_kwargs``).
        groups_refresh_ms: how old the cached consumer-group offsets may get (``[kafka]
            groups_refresh_ms``); 0 turns the group lookup off.
        lookback: answers ``last_marker_before`` (None: "no look-back reader" for every finding).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, bootstrap_servers: str, *, client_id: str = "txnwatch-confirm",
                 security: dict[str, Any] | None = None, request_timeout_ms: int = 30000,
                 groups_refresh_ms: int = DEFAULT_GROUPS_REFRESH_MS, lookback: BrokerEvidence | None = None,
                 clock: Callable[[], float] = time.monotonic, hold_max_bytes: int = DEFAULT_HOLD_MAX_BYTES):
        self.bootstrap_servers = bootstrap_servers
        self._client_kwargs = dict(bootstrap_servers=bootstrap_servers, client_id=client_id,
                                   request_timeout_ms=request_timeout_ms, **(security or {}))
        self._principal = principal_of(security or {})
        self.groups_refresh_ms = groups_refresh_ms
        self.lookback = lookback
        self._clock = clock
        self._lock = threading.Lock()
        self._admin_client = None
        self._groups: dict[tuple[str, int], dict[str, int]] | None = None
        self._groups_at: float | None = None
        self._groups_off: str | None = None if groups_refresh_ms > 0 else "[kafka] groups_refresh_ms = 0"
        self._logged: set[str] = set()
        self._security = dict(security or {})
        self._request_timeout_ms = request_timeout_ms
        self._client_id = client_id
        self.hold_max_bytes = hold_max_bytes
        self._own_wire = None  # a KafkaWire for the group-hold reads when no look-back reader has one
        self._features: tuple[float, int | None] | None = None  # (read at, transaction.version)
        self._long_txns: tuple[float, int, dict[str, Any] | None] | None = None  # (read at, min duration, answer)
        self._named_txns: dict[tuple[str, ...], tuple[float, dict[str, Any] | None]] = {}  # ids -> (read at, answer)

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        with self._lock:
            if self._admin_client is not None:
                self._admin_client.close()
                self._admin_client = None
        close = getattr(self.lookback, "close", None)
        if close is not None:
            close()
        if self._own_wire is not None:
            self._own_wire.close()
            self._own_wire = None

    def __enter__(self) -> KafkaBrokerConfirm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _admin(self):
        if self._admin_client is None:
            from kafka.admin import KafkaAdminClient

            self._admin_client = KafkaAdminClient(**self._client_kwargs)
        return self._admin_client

    def supports(self, request_class: type) -> bool:
        """Whether the bootstrap broker's ApiVersions answer lists the request's API key."""
        versions = self._admin()._manager.broker_version_data.api_versions
        return request_class.API_KEY in versions

    def _available(self, api: str, request_class: type) -> bool:
        """Whether the API may be asked: listed by ApiVersions (logged once when not) and the
        cluster reachable (an unreachable cluster gives unknown answers, logged)."""
        try:
            if self.supports(request_class):
                return True
        except (Errors.KafkaError, OSError) as exc:
            log.warning("%s: cannot reach %s, answer unknown: %s: %s", api, self.bootstrap_servers,
                        type(exc).__name__, exc)
            return False
        self._once(api, logging.INFO, "%s not supported by the brokers at %s (ApiVersions): answer unknown",
                   api, self.bootstrap_servers)
        return False

    def _once(self, key: str, level: int, msg: str, *args: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, msg, *args)

    def _denied(self, api: str, exc: Errors.KafkaError, resource: str) -> str:
        return authorization_message(api, exc.errno, resource, principal=self._principal,
                                     bootstrap=self.bootstrap_servers)

    def _call(self, api: str, fn: Callable[[], Any],
              answers: tuple[type[BaseException], ...] = (Errors.AuthorizationError,)) -> Any:
        """Run one admin call; ``answers`` propagate (the caller turns them into an answer or a
        clear error), other Kafka and transport failures are logged and give None."""
        try:
            return fn()
        except answers:
            raise
        except (Errors.KafkaError, OSError) as exc:
            log.warning("%s against %s failed, answer unknown: %s: %s", api, self.bootstrap_servers,
                        type(exc).__name__, exc)
            return None

    # ------------------------------------------------------------------ BrokerEvidence
    def describe_producers(self, topic: str, partition: int) -> dict[int, DescribeProducersAnswer] | None:
        with self._lock:
            if not self._available(DESCRIBE_PRODUCERS, DescribeProducersRequest):  # Kafka 2.8+
                return None
            tp = TopicPartition(topic, int(partition))
            try:
                result = self._call(DESCRIBE_PRODUCERS, lambda: self._admin().describe_producers([tp]))
            except Errors.AuthorizationError as exc:
                raise KafkaAuthorizationError(self._denied(DESCRIBE_PRODUCERS, exc, topic),
                                              error_code=exc.errno) from exc
        if result is None or tp not in result:
            return None
        return {p.producer_id: DescribeProducersAnswer(found=True, producer_epoch=p.producer_epoch,
                                                       coordinator_epoch=p.coordinator_epoch,
                                                       current_txn_start_offset=p.current_transaction_start_offset)
                for p in result[tp].active_producers}

    def describe_transaction(self, transactional_id: str) -> dict[str, Any] | None:
        with self._lock:
            if not self._available(DESCRIBE_TRANSACTIONS, DescribeTransactionsRequest):  # Kafka 3.0+
                return None
            try:
                found = self._call(DESCRIBE_TRANSACTIONS,
                                   lambda: self._admin().describe_transactions([transactional_id]),
                                   (Errors.AuthorizationError, Errors.TransactionalIdNotFoundError))
            except Errors.TransactionalIdNotFoundError:
                return {"transactional_id": transactional_id, "error": "TRANSACTIONAL_ID_NOT_FOUND"}
            except Errors.AuthorizationError as exc:
                self._once(f"dt-acl:{transactional_id}", logging.WARNING, "%s",
                           self._denied(DESCRIBE_TRANSACTIONS, exc, transactional_id))
                return None
        if found is None or transactional_id not in found:
            return None
        d = found[transactional_id]
        return {"transactional_id": transactional_id, "coordinator_id": d.coordinator_id,
                "state": getattr(d.state, "value", str(d.state)), "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch, "timeout_ms": d.transaction_timeout_ms,
                "start_ms": d.transaction_start_time_ms,
                "partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions)}

    def transactional_ids_of(self, producer_id: int) -> set[str] | None:
        """Transactional ids whose coordinator currently maps ``producer_id``: ListTransactions
        (3.0+) with that producer-id filter on **every** broker (each coordinates its own
        ``__transaction_state`` partitions; Kafka's find-hanging step 4). None when the API is
        missing; a broker that fails the request (e.g. COORDINATOR_LOAD_IN_PROGRESS) raises, so
        an empty set is only returned when every coordinator answered."""
        with self._lock:
            if not self._available("ListTransactions", ListTransactionsRequest):
                return None
            by_broker = self._admin().list_transactions(producer_id_filters=[int(producer_id)])
        return {t.transactional_id for listings in by_broker.values() for t in listings
                if t.producer_id == int(producer_id)}

    def long_transactions(self, min_duration_ms: int) -> dict[str, Any] | None:
        """The coordinators' open transactions running longer than ``min_duration_ms``:
        ``{"by_producer": {producer id: {"transactional_id", "state", "coordinator_id"}},
        "duration_filter_ms": n or None}``, one ListTransactions per broker (KIP-664, 3.0+),
        reused for ``TXN_LIST_REFRESH_S``; None when unsupported or unreachable.

        Cheap on a big cluster: the coordinator filters (``TransactionStateManager
        .listTransactionStates``) by state (Ongoing/PrepareCommit/PrepareAbort, v0) and, where
        ListTransactions v1 is advertised (3.8+, KIP-994), by duration: "now - txnStartTimestamp >
        DurationFilter", so only the long-running few come back. Without v1 the answer holds every
        open transaction (``duration_filter_ms`` None). The KIP-1152 TransactionalIdPattern (v2)
        is not sent here: a finding without a transactional id has no pattern to ask for
        (:meth:`transactions_named` sends it where the ids are known).
        """
        now = self._clock()
        with self._lock:
            cached = self._long_txns
            if cached is not None and cached[1] == min_duration_ms and now - cached[0] < TXN_LIST_REFRESH_S:
                return cached[2]
            if not self._available(LIST_TRANSACTIONS, ListTransactionsRequest):  # Kafka 3.0+
                return None
            version = self._admin()._manager.broker_version_data.api_versions[ListTransactionsRequest.API_KEY][1]
            kw: dict[str, Any] = {"state_filters": sorted(_OPEN_STATES)}
            if version >= 1:
                kw["duration_filter_ms"] = int(min_duration_ms)
            try:
                listed = self._call(LIST_TRANSACTIONS, lambda: self._admin().list_transactions(**kw))
            except Errors.AuthorizationError as exc:
                self._once("lt-acl", logging.WARNING, "%s", self._denied(LIST_TRANSACTIONS, exc, "<transactional id>"))
                listed = None
            answer = None
            if listed is not None:
                by_pid = {}
                for node, txns in listed.items():
                    for t in txns:
                        by_pid[int(t.producer_id)] = {"transactional_id": t.transactional_id,
                                                      "state": getattr(t.state, "value", str(t.state)),
                                                      "coordinator_id": node}
                answer = {"by_producer": by_pid, "duration_filter_ms": kw.get("duration_filter_ms")}
            self._long_txns = (now, int(min_duration_ms), answer)
            return answer

    def transactions_named(self, transactional_ids: Iterable[str]) -> dict[str, Any] | None:
        """The coordinators' open transactions (Ongoing/PrepareCommit/PrepareAbort) of just these
        transactional ids: ``{"by_id": {id: {"producer_id", "state", "coordinator_id"}},
        "pattern": the TransactionalIdPattern sent, or None}``, one ListTransactions per broker,
        reused for ``TXN_LIST_REFRESH_S``; None when unsupported (before 3.0) or unreachable.

        Where ListTransactions v2 is advertised (4.1+, KIP-1152) the coordinator filters by the
        pattern ``^(?:id1|id2|...)$`` (each id escaped; anchored, so it selects exactly these ids
        whether the broker matches the whole id or searches it: ``TransactionStateManager
        .listTransactionStates``), so only these come back however many transactions the cluster
        runs. Before v2 the state-filtered listing holds every open transaction and is narrowed
        here. An id missing from the answer has no open transaction the principal may Describe
        (``KafkaApis.handleListTransactionsRequest`` leaves out the others): never a proof."""
        ids = sorted({str(t) for t in transactional_ids if t})
        if not ids:
            return {"by_id": {}, "pattern": None}
        now = self._clock()
        key = tuple(ids)
        with self._lock:
            cached = self._named_txns.get(key)
            if cached is not None and now - cached[0] < TXN_LIST_REFRESH_S:
                return cached[1]
            if not self._available(LIST_TRANSACTIONS, ListTransactionsRequest):  # Kafka 3.0+
                return None
            version = self._admin()._manager.broker_version_data.api_versions[ListTransactionsRequest.API_KEY][1]
            kw: dict[str, Any] = {"state_filters": sorted(_OPEN_STATES)}
            if version >= 2:
                kw["transactional_id_pattern"] = id_pattern(ids)
            try:
                listed = self._call(LIST_TRANSACTIONS, lambda: self._admin().list_transactions(**kw))
            except Errors.AuthorizationError as exc:
                self._once("lt-acl", logging.WARNING, "%s", self._denied(LIST_TRANSACTIONS, exc, "<transactional id>"))
                listed = None
            answer = None
            if listed is not None:
                wanted = set(ids)
                answer = {"by_id": {t.transactional_id: {"producer_id": int(t.producer_id),
                                                         "state": getattr(t.state, "value", str(t.state)),
                                                         "coordinator_id": node}
                                    for node, txns in listed.items() for t in txns if t.transactional_id in wanted},
                          "pattern": kw.get("transactional_id_pattern")}
            self._named_txns[key] = (now, answer)
            return answer

    def last_marker_before(self, topic: str, partition: int, producer_id: int, first_offset: int) -> LookbackResult:
        if self.lookback is None:
            return LookbackResult(reason="no look-back reader configured")
        return self.lookback.last_marker_before(topic, partition, producer_id, first_offset)

    def span_after(self, topic: str, partition: int, producer_id: int, first_offset: int) -> SpanResult:
        if self.lookback is None:
            return SpanResult(reason="no look-back reader configured")
        return self.lookback.span_after(topic, partition, producer_id, first_offset)

    def blocked_groups(self, topic: str, partition: int, first_offset: int) -> list[str] | None:
        """The groups the transaction at ``first_offset`` holds now (see :meth:`group_positions`)."""
        positions = self.group_positions(topic, partition, first_offset)
        return None if positions is None else positions[0]

    def group_positions(self, topic: str, partition: int,
                        first_offset: int) -> tuple[list[str], list[str]] | None:
        """(held, lagging) consumer groups of the transaction at ``first_offset`` on tp
        (``streaming.group_hold.classify_groups``); None when the groups or the partition's LSO
        cannot be read."""
        with self._lock:
            committed = self._group_offsets()
        if committed is None:
            return None
        mine = committed.get((topic, int(partition)), {})
        if not any(0 <= o <= first_offset for o in mine.values()):
            return [], []  # nobody is at or behind the transaction: nothing to read
        from streaming.sources.kafka_wire import KafkaWireError
        from udfs.record_batch import scan_batches

        try:
            wire = self._wire()
            offs = wire.offsets([(topic, int(partition))])[(topic, int(partition))]
            if offs.deleted or offs.lso < 0:
                log.warning("group hold: no LSO for %s-%d: groups unknown", topic, partition)
                return None
            lso = offs.lso
            between = committed_between_reader(
                lambda off, n: wire.fetch(topic, int(partition), off, n),
                lambda data: scan_batches(data, validate_crc=False, source=f"{topic}-{partition}",
                                          allow_partial_tail=True).columns,
                max_bytes=self.hold_max_bytes)
            return classify_groups(mine, int(first_offset), lso, between)
        except (KafkaWireError, OSError, ValueError) as exc:
            log.warning("group hold: reading %s-%d failed, groups unknown: %s", topic, partition, exc)
            return None

    def _wire(self):
        """The look-back reader's KafkaWire when it has one (the live job), else an own one."""
        get = getattr(self.lookback, "wire", None)
        if callable(get):
            return get()
        if self._own_wire is None:
            from streaming.sources.kafka_wire import KafkaWire

            self._own_wire = KafkaWire(self.bootstrap_servers, client_id=self._client_id,
                                       request_timeout_ms=self._request_timeout_ms, **self._security)
        return self._own_wire

    # ------------------------------------------------------------------ held offset commits
    def pending_offset_commits(self, partition: int, producer_id: int,
                               first_offset: int) -> list[dict[str, Any]] | None:
        """The offset commits of producer P's open transaction on ``__consumer_offsets``-partition
        from ``first_offset`` (``udfs.offset_commit.open_offset_commits`` over P's batches read
        forwards to P's marker or the high watermark, at most ``hold_max_bytes``); None when the
        partition cannot be read."""
        from streaming.sources.kafka_wire import KafkaWireError
        from udfs.offset_commit import open_offset_commits
        from udfs.record_batch import scan_batches

        topic, pos, spent, size, chunks = OFFSETS_TOPIC, int(first_offset), 0, 1 << 20, []
        try:
            wire = self._wire()
            while spent < self.hold_max_bytes:
                res = wire.fetch(topic, int(partition), pos, min(size, self.hold_max_bytes - spent))
                if not res.ok:
                    return None
                spent += len(res.records)
                scan = scan_batches(res.records, validate_crc=False, source=f"{topic}-{partition}",
                                    allow_partial_tail=True)
                c = scan.columns
                if not len(c["base_offset"]):
                    if not res.records:
                        break  # the high watermark: nothing more
                    size *= 2
                    continue
                keep = c["last_offset"] >= pos
                chunks.append(bytes(memoryview(res.records)[:scan.end_position]))
                mine_ctrl = keep & (c["producer_id"] == int(producer_id)) & c["is_control"]
                pos = int(c["last_offset"][-1]) + 1
                if mine_ctrl.any():
                    break  # P's marker: its transaction ended since the finding was read
        except (KafkaWireError, OSError, ValueError) as exc:
            log.warning("reading the offset commits of producer %s on %s-%s failed: %s", producer_id, topic,
                        partition, exc)
            return None
        # batches before first_offset returned by the first fetch belong to other transactions
        out = [e for e in open_offset_commits(b"".join(chunks), source=f"{topic}-{partition}")
               if e["producer_id"] == int(producer_id) and e["offset"] >= int(first_offset)]
        return out

    def unstable_offsets(self, wanted: dict[str, list[tuple[str, int]]]) -> dict[tuple[str, str, int], bool] | None:
        """Per (group, topic, partition): whether OffsetFetch with ``require_stable`` answers
        UNSTABLE_OFFSET_COMMIT (KIP-447, OffsetFetch v7+, Kafka 2.5+;
        ``GroupMetadataManager.getOffsets``: a pending transactional commit on the partition).
        None when the brokers lack v7 or the groups cannot be asked."""
        from kafka.protocol.consumer.group import OffsetFetchRequest as _OffsetFetch

        with self._lock:
            if not wanted:
                return {}
            try:
                admin = self._admin()
                if admin._manager.broker_version_data.api_versions.get(_OffsetFetch.API_KEY, (0, 0))[1] < 7:
                    self._once("require-stable", logging.INFO, "OffsetFetch v7 (require_stable, KIP-447) not "
                               "supported by %s: pending offset commits not confirmed", self.bootstrap_servers)
                    return None
                coordinators = admin._manager.run(admin._find_coordinator_ids, sorted(wanted))
            except Errors.AuthorizationError as exc:
                self._once("unstable-acl", logging.WARNING, "%s", self._denied("OffsetFetch", exc, "<group>"))
                return None
            except (Errors.KafkaError, OSError) as exc:
                log.warning("OffsetFetch require_stable: %s", exc)
                return None
            out: dict[tuple[str, str, int], bool] = {}
            Topic = _OffsetFetch.OffsetFetchRequestTopic
            for gid, tps in sorted(wanted.items()):
                by_topic: dict[str, list[int]] = {}
                for t, p in tps:
                    by_topic.setdefault(t, []).append(int(p))
                req = _OffsetFetch(group_id=gid, topics=[Topic(name=t, partition_indexes=sorted(ps))
                                                         for t, ps in sorted(by_topic.items())],
                                   require_stable=True, min_version=7, max_version=7)
                res = self._call("OffsetFetch", lambda req=req, gid=gid: admin._manager.run(
                    admin._manager.send, req, coordinators[gid]))
                if res is None or res.error_code:
                    continue
                for t in res.topics:
                    for part in t.partitions:
                        out[(gid, t.name, part.partition_index)] = part.error_code == UNSTABLE_OFFSET_COMMIT
            return out

    # ------------------------------------------------------------------ cluster features
    def transaction_version(self) -> int | None:
        """The cluster's finalized ``transaction.version`` (``streaming.cluster_features``), read
        with ApiVersions v3+ at most once per ``FEATURES_REFRESH_S``; None when the brokers do not
        report features (ApiVersions < v3, Kafka < 2.4) or cannot be reached."""
        now = self._clock()
        with self._lock:
            if self._features is not None and now - self._features[0] < FEATURES_REFRESH_S:
                return self._features[1]
            tv = self._read_transaction_version()
            self._features = (now, tv)
            return tv

    def _read_transaction_version(self) -> int | None:
        try:
            versions = self._admin()._manager.broker_version_data.api_versions
        except (Errors.KafkaError, OSError) as exc:
            log.warning("ApiVersions: cannot reach %s, transaction version unknown: %s", self.bootstrap_servers, exc)
            return None
        if versions.get(_API_VERSIONS_KEY, (0, 0))[1] < 3:
            self._once("features", logging.INFO, "the brokers at %s answer ApiVersions < v3 (no finalized "
                       "features, KIP-584): transaction version unknown", self.bootstrap_servers)
            return None
        from kafka.protocol.metadata.api_versions import ApiVersionsRequest

        admin = self._admin()
        req = ApiVersionsRequest(client_software_name="txnwatch", client_software_version="1", min_version=3)
        res = self._call("ApiVersions", lambda: admin._manager.run(admin._manager.send, req))
        if res is None:
            return None
        return transaction_version_of(*finalized_levels(res))

    # ------------------------------------------------------------------ consumer groups
    def _group_offsets(self) -> dict[tuple[str, int], dict[str, int]] | None:
        if self._groups_off is not None:
            return None
        now = self._clock()
        if self._groups is not None and self._groups_at is not None and \
                (now - self._groups_at) * 1000 < self.groups_refresh_ms:
            return self._groups
        if not (self._available("ListGroups", ListGroupsRequest)
                and self._available("OffsetFetch", OffsetFetchRequest)):
            return self._groups
        try:
            fresh = self._call("ListGroups/OffsetFetch", self._read_group_offsets)
        except Errors.AuthorizationError as exc:
            self._groups_off = f"{type(exc).__name__}"
            log.warning("consumer-group lookup turned off (blocked_groups stays null): %s. Grant Describe on the "
                        "Cluster and on the consumer groups (docs/deployment.md) to name the groups a hanging "
                        "transaction blocks", self._denied("OffsetFetch", exc, "<group>"))
            return None
        if fresh is not None:
            self._groups, self._groups_at = fresh, now
        return self._groups if fresh is not None else None

    def _read_group_offsets(self) -> dict[tuple[str, int], dict[str, int]]:
        admin = self._admin()
        # Without Describe on the Cluster, ListGroups lists only the groups the principal may
        # Describe (KafkaApis.handleListGroupsRequest): the answer is then partial, not wrong.
        ids = sorted({g["group_id"] for g in _offset_groups(admin)})
        out: dict[tuple[str, int], dict[str, int]] = {}
        for gid, offsets in _per_group(admin, ids):
            for tp, om in offsets.items():
                out.setdefault((tp.topic, tp.partition), {})[gid] = om.offset
        return out


#: group types whose committed offsets a read_committed consumer resumes from: classic groups and
#: KIP-848 consumer groups. Share groups keep no offsets (ShareGroup.validateOffsetFetch answers
#: GROUP_ID_NOT_FOUND). ListGroups v5 TypesFilter is matched with Group.GroupType.parse
#: (GroupMetadataManager.listGroups).
OFFSET_GROUP_TYPES = ("classic", "consumer")


def _offset_groups(admin) -> list[dict]:
    """The listed groups that commit consumer offsets. On ListGroups v5+ (4.0, KIP-848) the
    coordinator filters by type; ``protocol_type`` is "consumer" for both classic consumers and
    KIP-848 consumer groups (ConsumerGroup.protocolType), "" for groups that only commit offsets."""
    versions = admin._manager.broker_version_data.api_versions
    if versions.get(ListGroupsRequest.API_KEY, (0, 0))[1] >= 5:
        listed = admin.list_groups(types_filter=list(OFFSET_GROUP_TYPES))
    else:
        listed = admin.list_groups()
    return [g for g in listed if g.get("protocol_type") in ("consumer", "")
            and g.get("group_type", "classic").lower() in OFFSET_GROUP_TYPES + ("",)]


def _per_group(admin, ids: Iterable[str]) -> list[tuple[str, dict]]:
    """(group id, {TopicPartition: OffsetAndMetadata}) for every group: one OffsetFetch per
    coordinator where OffsetFetch v8 batches groups (3.0+, KIP-709), else one per group.

    The admin fetch sends no member id and member epoch -1 (v8 has neither field, v9's defaults
    are null/-1: OffsetFetchRequest.json), which a KIP-848 consumer group accepts from anyone
    (ConsumerGroup.validateOffsetFetch: "memberId == null && memberEpoch < 0" is the admin
    client). A group gone between ListGroups and OffsetFetch (GROUP_ID_NOT_FOUND, also a share
    group on brokers that list those as "consumer") fails the whole batched answer in kafka-python:
    the batch is then asked group by group and such groups are left out."""
    ids = list(ids)
    if not ids:
        return []
    if admin._manager.broker_version_data.api_versions.get(OffsetFetchRequest.API_KEY, (0, 0))[1] >= 8:
        try:
            return list(admin.list_group_offsets(ids).items())
        except (Errors.GroupIdNotFoundError, Errors.UnknownMemberIdError, Errors.StaleMemberEpochError):
            pass
    out = []
    for gid in ids:
        try:
            out.append((gid, admin.list_group_offsets({gid: None})[gid]))
        except (Errors.GroupIdNotFoundError, Errors.UnknownMemberIdError, Errors.StaleMemberEpochError) as exc:
            log.info("consumer group %s left out of the group lookup: %s", gid, type(exc).__name__)
    return out


def held_offset_commits(evidence: Any, partition: int, producer_id: int,
                        first_offset: int) -> list[dict[str, Any]] | None:
    """A finding on ``__consumer_offsets``: the group offset commits its open transaction holds,
    each with ``unstable`` = the group's OffsetFetch(require_stable) answers UNSTABLE_OFFSET_COMMIT
    for that partition (True), answers an offset (False: not pending there, e.g. the marker came),
    or could not be asked (None). Undecodable batches appear with their ``reason``."""
    pending = evidence.pending_offset_commits(partition, producer_id, first_offset)
    if pending is None:
        return None
    pending = pending_by_partition(pending)
    wanted: dict[str, set[tuple[str, int]]] = {}
    for e in pending:
        if e["group"] is not None:
            wanted.setdefault(e["group"], set()).add((e["topic"], e["partition"]))
    ask = getattr(evidence, "unstable_offsets", None)
    unstable = ask({g: sorted(tps) for g, tps in wanted.items()}) if ask is not None and wanted else None
    return [{"group": e["group"], "topic": e["topic"], "partition": e["partition"],
             "committed_offset": e["committed_offset"], "record_offset": e["offset"],
             "unstable": (None if unstable is None or e["group"] is None
                          else unstable.get((e["group"], e["topic"], e["partition"]))),
             "reason": e["reason"]} for e in pending]


def annotate(alert: dict[str, Any], evidence: BrokerEvidence) -> dict[str, Any]:
    """Fill ``evidence.describe_producers``/``describe_transactions``, ``confirmed_by`` and
    ``blocked_groups`` of one late/hanging alert in place (others are left as they are).

    A DescribeProducers disagreement withholds ``abort_command_legacy`` (its producer and
    coordinator epochs come from a log the leader contradicts) and says why in ``verify_hint``;
    ``abort_command_new`` stays: ``kafka-transactions.sh abort --start-offset`` asks the leader
    itself and refuses an offset no open transaction starts at.
    """
    if alert.get("status") not in ("late", "hanging"):
        return alert
    topic, partition, pid = alert["topic"], int(alert["partition"]), int(alert["producer_id"])
    first = int(alert["first_offset"])
    known = (alert.get("evidence") or {}).get("describe_producers")
    if known is not None:  # the enricher asked already (verdict rule 1): the same answer, not a second call
        dp = DescribeProducersAnswer(**{k: known[k] for k in ("found", "producer_epoch", "coordinator_epoch",
                                                              "current_txn_start_offset")})
    else:
        dp = producer_answer(evidence.describe_producers(topic, partition), pid)
    tid = alert.get("transactional_id")
    dt = evidence.describe_transaction(tid) if tid else None
    confirmed, problems = confirmations(alert, dp, dt)
    found: dict[str, Any] = dict(alert.get("evidence") or {})
    listing = getattr(evidence, "long_transactions", None)
    if not tid and listing is not None and alert.get("threshold_ms") is not None:
        # No transactional id from the log: the coordinators' listing of long-running open
        # transactions names it if a coordinator still runs one for this producer. Evidence
        # only: neither the verdict nor confirmed_by reads it.
        lt = listing(int(alert["threshold_ms"]))
        if lt is not None:
            entry = lt["by_producer"].get(pid)
            found["list_transactions"] = {"found": entry is not None, **(entry or {}),
                                          "duration_filter_ms": lt["duration_filter_ms"]}
    named = getattr(evidence, "transactions_named", None)
    if tid and dt is None and named is not None:
        # DescribeTransactions gave no answer (coordinator unreachable, moving, or not allowed):
        # a listing of just this id says whether a coordinator still runs an open transaction for
        # it. Evidence only, like the listing of findings without an id.
        lt = named([tid])
        if lt is not None:
            entry = lt["by_id"].get(tid)
            found["list_transactions"] = {"found": entry is not None, "transactional_id": tid, **(entry or {}),
                                          "pattern": lt["pattern"]}
    if dp is not None:
        disagreement = producers_agree(dp, first)
        found["describe_producers"] = {"found": dp.found, "producer_epoch": dp.producer_epoch,
                                       "coordinator_epoch": dp.coordinator_epoch,
                                       "current_txn_start_offset": dp.current_txn_start_offset,
                                       "agrees": disagreement is None, "disagreement": disagreement}
        if disagreement and alert.get("abort_command_legacy"):
            alert["abort_command_legacy"] = None
            alert["verify_hint"] = (f"{disagreement}: legacy command withheld until {topic}-{partition} is read "
                                    f"again")
    if dt is not None:
        record = found.get("coordinator_record")
        if record is None and alert.get("coordinator_state") is not None:
            record = {"state": alert["coordinator_state"], "producer_id": pid}
        found["describe_transactions"] = {**dt, "disagreements": transaction_disagreements(dt, record, pid)
                                          + [p for p in problems if p.startswith(DESCRIBE_TRANSACTIONS)]}
    alert["evidence"] = found or alert.get("evidence")
    alert["confirmed_by"] = confirmed if (dp is not None or dt is not None) else None
    tv = getattr(evidence, "transaction_version", None)
    alert["transaction_version"] = tv() if tv is not None else None
    if topic == OFFSETS_TOPIC:
        # kind group-offsets-held: the groups it holds are those whose offset commits it keeps
        # pending (OffsetFetch require_stable answers UNSTABLE_OFFSET_COMMIT), not readers of
        # __consumer_offsets; "lagging" does not apply to them.
        if getattr(evidence, "pending_offset_commits", None) is not None:
            alert["pending_offset_commits"] = held_offset_commits(evidence, partition, pid, first)
            alert["blocked_groups"] = held_groups(alert["pending_offset_commits"])
            alert["lagging_groups"] = None
        return alert
    positions = getattr(evidence, "group_positions", None)
    if positions is not None:
        held_lagging = positions(topic, partition, first)
        alert["blocked_groups"], alert["lagging_groups"] = held_lagging if held_lagging is not None else (None, None)
    else:
        alert["blocked_groups"] = evidence.blocked_groups(topic, partition, first)
    return alert
