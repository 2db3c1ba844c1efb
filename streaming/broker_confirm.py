"""The live cluster's own answers about a finding: KIP-664 and consumer groups (WAVE2 contract B).

:class:`KafkaBrokerConfirm` is the facade that answers the :class:`~streaming.broker_evidence.
BrokerEvidence` questions over a live cluster. Each method is one call into a module that holds
one Kafka admin API (under :mod:`streaming.kafka_admin`, on kafka-python 3.0's
``KafkaAdminClient``), each asked only when the bootstrap broker's ApiVersions answer lists it:

* ``describe_producers`` - :mod:`~streaming.kafka_admin.describe_producers` (key 61, Kafka 2.8+),
  detection.md §4 rule 1; a refusal raises
  :class:`~streaming.sources.kafka_wire.KafkaAuthorizationError` (the job needs Read anyway);
* ``describe_transaction`` / ``describe_transactions`` (many ids, one request per coordinator) -
  :mod:`~streaming.kafka_admin.describe_transactions` (key 65, 3.0+);
* ``transactional_ids_of`` / ``long_transactions`` / ``transactions_named`` -
  :mod:`~streaming.kafka_admin.list_transactions` (key 66, v0-v2: KIP-994 duration, KIP-1152 pattern);
* ``blocked_groups`` / ``group_positions`` / ``unstable_offsets`` - :mod:`~streaming.kafka_admin.groups`
  (ListGroups + OffsetFetch), then the partition itself (``streaming.group_hold``): the groups the
  transaction *holds now* and the groups merely *lagging* behind it;
* ``transaction_version`` - :mod:`~streaming.kafka_admin.features` (ApiVersions v3+);
* ``pending_offset_commits`` - P's open offset commits read from ``__consumer_offsets``.

``last_marker_before`` / ``span_after`` are delegated to the look-back reader given as
``lookback`` (``KafkaLookback``), so one object answers the whole protocol. The rules comparing
these answers with the log (``annotate`` and its parts) are in :mod:`streaming.broker_rules`,
re-exported here for the callers that import them from this module.

Failures: an answer that cannot be had (API missing, broker unreachable, leader moving) is
``None`` = unknown, never a guess (:class:`~streaming.kafka_admin.session.AdminSession`).
Optional answers (DescribeTransactions, ListTransactions, the group lookup) log a missing ACL once
with the ``kafka-acls.sh`` command and stay None.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from streaming.broker_evidence import BrokerEvidence, LookbackResult, SpanResult
from streaming.broker_rules import (
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    OFFSETS_TOPIC,
    annotate,
    confirmations,
    held_offset_commits,
    producer_answer,
    producers_agree,
    transaction_covers,
    transaction_disagreements,
)
from streaming.group_hold import DEFAULT_HOLD_MAX_BYTES, classify_groups, committed_between_reader
from streaming.kafka_admin import describe_producers as describe_producers_api
from streaming.kafka_admin import describe_transactions as describe_transactions_api
from streaming.kafka_admin import features as features_api
from streaming.kafka_admin import groups as groups_api
from streaming.kafka_admin.list_transactions import TransactionListings, id_pattern
from streaming.kafka_admin.session import AdminSession
from streaming.verdict import DescribeProducersAnswer

__all__ = ["DESCRIBE_PRODUCERS", "DESCRIBE_TRANSACTIONS", "KafkaBrokerConfirm", "annotate", "confirmations",
           "held_offset_commits", "id_pattern", "producer_answer", "producers_agree", "transaction_covers",
           "transaction_disagreements"]

log = logging.getLogger(__name__)

DEFAULT_GROUPS_REFRESH_MS = 60_000


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
        self._session = AdminSession(bootstrap_servers, dict(bootstrap_servers=bootstrap_servers, client_id=client_id,
                                                             request_timeout_ms=request_timeout_ms, **(security or {})),
                                     security or {})
        self.groups_refresh_ms = groups_refresh_ms
        self.lookback = lookback
        self._clock = clock
        self._lock = threading.Lock()
        self._groups = groups_api.GroupOffsets(self._session, clock, groups_refresh_ms)
        self._listings = TransactionListings(self._session, clock)
        self._security = dict(security or {})
        self._request_timeout_ms = request_timeout_ms
        self._client_id = client_id
        self.hold_max_bytes = hold_max_bytes
        self._own_wire = None  # a KafkaWire for the group-hold reads when no look-back reader has one
        self._features: tuple[float, int | None] | None = None  # (read at, transaction.version)

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        with self._lock:
            self._session.close()
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

    def supports(self, request_class: type) -> bool:
        """Whether the bootstrap broker's ApiVersions answer lists the request's API key."""
        return self._session.supports(request_class)

    # ------------------------------------------------------------------ BrokerEvidence
    def describe_producers(self, topic: str, partition: int) -> dict[int, DescribeProducersAnswer] | None:
        with self._lock:
            return describe_producers_api.describe_producers(self._session, topic, partition)

    def describe_transaction(self, transactional_id: str) -> dict[str, Any] | None:
        with self._lock:
            return describe_transactions_api.describe_transaction(self._session, transactional_id)

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """:meth:`describe_transaction` for many ids at once: one request per coordinator
        (:func:`~streaming.kafka_admin.describe_transactions.describe_transactions`)."""
        with self._lock:
            return describe_transactions_api.describe_transactions(self._session, transactional_ids)

    def transactional_ids_of(self, producer_id: int) -> set[str] | None:
        """Transactional ids whose coordinator currently maps ``producer_id`` (ListTransactions)."""
        with self._lock:
            return self._listings.transactional_ids_of(producer_id)

    def long_transactions(self, min_duration_ms: int) -> dict[str, Any] | None:
        """The coordinators' open transactions running longer than ``min_duration_ms``
        (:meth:`~streaming.kafka_admin.list_transactions.TransactionListings.long_transactions`)."""
        with self._lock:
            return self._listings.long_transactions(min_duration_ms)

    def transactions_named(self, transactional_ids: Iterable[str]) -> dict[str, Any] | None:
        """The coordinators' open transactions of just these ids
        (:meth:`~streaming.kafka_admin.list_transactions.TransactionListings.transactions_named`)."""
        with self._lock:
            return self._listings.transactions_named(transactional_ids)

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
            committed = self._groups.committed()
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
        """Per (group, topic, partition): whether OffsetFetch ``require_stable`` answers
        UNSTABLE_OFFSET_COMMIT (:func:`streaming.kafka_admin.groups.unstable_offsets`)."""
        with self._lock:
            return groups_api.unstable_offsets(self._session, wanted)

    # ------------------------------------------------------------------ cluster features
    def transaction_version(self) -> int | None:
        """The cluster's finalized ``transaction.version`` (``streaming.cluster_features``), read
        with ApiVersions v3+ at most once per ``FEATURES_REFRESH_S``; None when the brokers do not
        report features (ApiVersions < v3, Kafka < 2.4) or cannot be reached."""
        now = self._clock()
        with self._lock:
            if self._features is not None and now - self._features[0] < features_api.FEATURES_REFRESH_S:
                return self._features[1]
            tv = features_api.read_transaction_version(self._session)
            self._features = (now, tv)
            return tv
