"""Simulated Kafka clients: idempotent and transactional producers writing through a cluster.

The producers talk to the cluster only through :class:`Cluster`, the broker- and coordinator-side
calls a client's requests reach; :class:`~streaming.simulate.cluster_log.ClusterLog` implements it.
The cluster creates producers, producers never name the cluster's class: imports run one way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from streaming.simulate.broker_state import BatchInfo, ScenarioError, TxnMeta, wrap_seq
from streaming.simulate.encode import ABORT, COMMIT


class Cluster(Protocol):
    """What a producer's requests reach: the partition leader (Produce), the transaction
    coordinator (InitProducerId, AddPartitionsToTxn, EndTxn, expiration) and the cluster clock."""

    now_ms: int
    partition_verification: bool

    def append_data(self, topic: str, partition: int, n_records: int, *, producer_id: int = -1,
                    producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
                    compressed: bool = False, value_size: int | None = None,
                    keys: list[bytes] | None = None, clock_skew_ms: int = 0) -> BatchInfo: ...

    def coordinator_epoch(self, txn_partition: int) -> int: ...

    def txn_metadata(self, transactional_id: str) -> TxnMeta | None: ...

    def producer(self, transactional_id: str, tv: int = 0, *, timeout_ms: int = 60_000,
                 clock_skew_ms: int = 0, initial_epoch: int = 0) -> TransactionalProducer: ...

    def expire(self, *transactional_ids: str, force: bool = False) -> None: ...

    def _init_existing(self, meta: TxnMeta) -> None: ...

    def _add_partitions(self, meta: TxnMeta, tps: Iterable[tuple[str, int]]) -> None: ...

    def _end(self, meta: TxnMeta, result: int, *, fence: bool = False,
             markers: Iterable[tuple[str, int]] | None = None) -> None: ...


class IdempotentProducer:
    """Idempotent, non-transactional producer: batches with a producer id, epoch 0 and sequences,
    attribute bit 4 clear."""

    def __init__(self, cluster: Cluster, producer_id: int):
        self.cluster = cluster
        self.producer_id = producer_id
        self.producer_epoch = 0
        self._seq: dict[tuple[str, int], int] = {}

    def send(self, topic: str, partition: int, n_records: int = 1, *, compressed: bool = False) -> int:
        """Append one batch; returns its base offset."""
        seq = self._seq.get((topic, partition), 0)
        info = self.cluster.append_data(
            topic,
            partition,
            n_records,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
            compressed=compressed,
        )
        self._seq[(topic, partition)] = wrap_seq(seq, n_records)
        return info.base_offset


class TransactionalProducer:
    """One producer *instance* with a transactional id (create with ``ClusterLog.producer``).

    Client API: :meth:`begin`, :meth:`send`, :meth:`commit`, :meth:`abort`. Coordinator-side
    events: :meth:`timeout_abort`, :meth:`fence` (a new instance), :meth:`expire`. Fault hooks:
    ``send(add_partition=False)`` (pre-KIP-890 broker accepts data for a partition never added),
    :meth:`zombie_send` (a late write that lands after the marker, KAFKA-9144),
    ``commit(markers=[...])`` / ``commit(markers=[])`` (markers pending after Prepare*).
    """

    def __init__(self, cluster: Cluster, meta: TxnMeta, clock_skew_ms: int = 0):
        self.cluster = cluster
        self.meta = meta
        self.transactional_id = meta.transactional_id
        self.tv = meta.tv
        self.clock_skew_ms = clock_skew_ms
        self.producer_id = meta.producer_id
        self.producer_epoch = meta.producer_epoch
        self.fenced = False
        self.in_txn = False
        self._txn_tps: list[tuple[str, int]] = []
        self._seq: dict[tuple[str, int], int] = {}
        self._seq_owner = (self.producer_id, self.producer_epoch)

    # -- helpers ----------------------------------------------------------------------------------

    @property
    def txn_partition(self) -> int:
        return self.meta.txn_partition

    @property
    def coordinator_epoch(self) -> int:
        return self.cluster.coordinator_epoch(self.meta.txn_partition)

    def _usable(self) -> None:
        if self.fenced:
            raise ScenarioError(
                f"{self.transactional_id}: producer {self.producer_id}/{self.producer_epoch} is fenced"
            )
        if self.cluster.txn_metadata(self.transactional_id) is not self.meta:
            raise ScenarioError(f"{self.transactional_id}: transactional id no longer exists")

    def _sync_from_meta(self) -> None:
        self.producer_id, self.producer_epoch = self.meta.producer_id, self.meta.producer_epoch

    def _next_seq(self, tp: tuple[str, int], n: int) -> int:
        # the Java client restarts sequences at 0 whenever its (producer id, epoch) changes
        if self._seq_owner != (self.producer_id, self.producer_epoch):
            self._seq.clear()
            self._seq_owner = (self.producer_id, self.producer_epoch)
        seq = self._seq.get(tp, 0)
        self._seq[tp] = wrap_seq(seq, n)
        return seq

    # -- client API -------------------------------------------------------------------------------

    def begin(self) -> None:
        """``beginTransaction()``: purely client-side; the coordinator learns about the
        transaction when the first partition is added."""
        self._usable()
        if self.in_txn:
            raise ScenarioError("transaction already in progress")
        self.in_txn = True
        self._txn_tps = []

    def add_partitions(self, tps: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for several partitions at once (one Ongoing record)."""
        self._usable()
        if not self.in_txn:
            self.begin()
        tps = list(tps)
        self.cluster._add_partitions(self.meta, tps)
        for tp in tps:
            if tp not in self._txn_tps:
                self._txn_tps.append(tp)

    def send(
        self,
        topic: str,
        partition: int,
        n_records: int = 1,
        *,
        compressed: bool = False,
        add_partition: bool = True,
        value_size: int | None = None,
        keys: list[bytes] | None = None,
    ) -> int:
        """Produce one transactional batch; returns its base offset. The partition is added to
        the transaction first (AddPartitionsToTxn; under TV2 implicitly by the leader), unless
        ``add_partition=False``: the pre-KIP-890 fault where a broker accepted data for a
        partition the coordinator does not list (rejected with ``partition_verification``)."""
        self._usable()
        if not self.in_txn:
            self.begin()
        tp = (topic, partition)
        if tp not in self._txn_tps:
            if add_partition or self.tv == 2:
                self.cluster._add_partitions(self.meta, [tp])
            elif self.cluster.partition_verification:
                raise ScenarioError(
                    f"{topic}-{partition}: INVALID_TXN_STATE (partition not added, KIP-890 verification)"
                )
            self._txn_tps.append(tp)
        return self._write(topic, partition, n_records, compressed, value_size, keys)

    def _write(
        self,
        topic: str,
        partition: int,
        n_records: int,
        compressed: bool,
        value_size: int | None,
        keys: list[bytes] | None,
    ) -> int:
        seq = self._next_seq((topic, partition), n_records)
        info = self.cluster.append_data(
            topic,
            partition,
            n_records,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
            transactional=True,
            compressed=compressed,
            value_size=value_size,
            keys=keys,
            clock_skew_ms=self.clock_skew_ms,
        )
        return info.base_offset

    def commit(self, *, markers: Iterable[tuple[str, int]] | None = None) -> None:
        """``commitTransaction()``: EndTxn(commit) → PrepareCommit, COMMIT markers, CompleteCommit.

        ``markers``: write markers only to these partitions (``[]`` = none): the rest stay
        pending and the coordinator remains in PrepareCommit until ``ClusterLog.write_markers``.
        """
        self._end(COMMIT, markers)

    def abort(self, *, markers: Iterable[tuple[str, int]] | None = None, empty: bool = False) -> None:
        """``abortTransaction()``: EndTxn(abort) → PrepareAbort, ABORT markers, CompleteAbort.
        ``empty=True`` (TV2 only) sends EndTxn(abort) although nothing was added: PrepareAbort
        from Empty/Complete* with a bumped epoch and no markers."""
        self._end(ABORT, markers, empty=empty)

    def _end(self, result: int, markers: Iterable[tuple[str, int]] | None, empty: bool = False) -> None:
        self._usable()
        if not self.in_txn and not empty:
            raise ScenarioError("no transaction in progress")
        self.in_txn = False
        if not self.meta.partitions and not (empty and self.tv == 2):
            # nothing was added: the client completes locally, the coordinator writes nothing
            self._txn_tps = []
            return
        self.cluster._end(self.meta, result, markers=markers)
        self._sync_from_meta()
        self._txn_tps = []

    # -- coordinator side -------------------------------------------------------------------------

    def timeout_abort(self, *, force: bool = False) -> None:
        """The coordinator aborts the Ongoing transaction after ``transaction.timeout.ms``
        (``start + timeout < now``; ``force`` skips that check): PrepareAbort/markers/CompleteAbort
        with epoch E+1 (KAFKA-6119, every TV). This instance is fenced afterwards; call
        :meth:`reinit` to continue."""
        meta = self.meta
        if meta.state != "Ongoing":
            raise ScenarioError(
                f"{self.transactional_id}: only Ongoing transactions time out (state {meta.state})"
            )
        if not force and meta.start_ms + meta.timeout_ms >= self.cluster.now_ms:
            raise ScenarioError(f"{self.transactional_id}: transaction has not timed out yet")
        self.cluster._end(meta, ABORT, fence=True)
        self.fenced = True
        self.in_txn = False

    def reinit(self) -> None:
        """The same instance calls InitProducerId again (after a timeout abort or an abortable
        error): the epoch is bumped once more (E+2 after a timeout abort)."""
        if self.cluster.txn_metadata(self.transactional_id) is not self.meta:
            raise ScenarioError("transactional id no longer exists")
        self.cluster._init_existing(self.meta)
        self.fenced = False
        self.in_txn = False
        self._txn_tps = []
        self._sync_from_meta()

    def fence(self, **kwargs: Any) -> TransactionalProducer:
        """A new instance with the same transactional id calls InitProducerId: an open transaction
        is aborted with E+1 (markers E+1), the new instance gets E+2. Returns the new instance;
        this one is fenced."""
        new = self.cluster.producer(
            self.transactional_id, kwargs.pop("tv", self.tv), timeout_ms=self.meta.timeout_ms, **kwargs
        )
        self.fenced = True
        self.in_txn = False
        return new

    def expire(self, *, force: bool = False) -> None:
        """The coordinator expires this transactional id (tombstone)."""
        self.cluster.expire(self.transactional_id, force=force)

    # -- fault hooks ------------------------------------------------------------------------------

    def zombie_send(self, topic: str, partition: int, n_records: int = 1, *, compressed: bool = False) -> int:
        """A transactional batch from this instance's (producer id, epoch) that reaches the leader
        outside any transaction the coordinator knows: the late write of KAFKA-9144 (lands after
        the marker on a < 3.6 broker) or a zombie after fencing/expiration. No coordinator
        interaction; the broker's epoch check still applies."""
        if self.cluster.partition_verification:
            raise ScenarioError("INVALID_TXN_STATE: rejected by KIP-890 partition verification")
        return self._write(topic, partition, n_records, compressed, None, None)
