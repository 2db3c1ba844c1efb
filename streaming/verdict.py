"""The rule that decides "hanging" and the legacy abort's coordinator epoch (detection.md §0, §3-§4,
revision 3.1). Pure: no Spark, no I/O; every input is an explicit argument.

``judge(txn, view, evidence, now_ms=, thresholds=) -> Verdict`` is the only decision. It is called
twice for one open transaction, with the same dataclasses, by two callers that know different
facts; a fact a caller does not know is left at its default (``None``/``False``), and every
default is the *safe* reading (incomplete view, no epoch evidence):

1. The per-producer state function (``streaming/state_machine.py``) fills what the producer's own
   state holds:

   - :class:`OpenTxn`: all fields. ``first_epoch`` = producer epoch of O's first batch (the entry's
     ``Epoch`` when O was seeded from a snapshot); ``prev_marker`` = P's marker immediately before
     O's first batch on tp when it was read with no gap in between (``None`` otherwise).
   - :class:`CoordinatorView`: ``current`` (a ``__transaction_state`` source is configured and was
     read up to ``now``), ``mapped`` (a record for P's transactional id was read: a record naming
     P, or the tombstone / newer-producer-id record that removed P's mapping), ``record`` (C, when
     the id's latest record still names P), ``txn_partition`` (the partition those records are in). For files and dumps the job knows at plan time which
     ``__transaction_state`` partitions the input holds, so the state call may also fill
     ``partition_count`` and ``read_partitions``.
   - :class:`EpochEvidence`: ``last_marker``, ``snapshot``, ``read_from_zero``,
     ``producer_max_marker_epoch`` (P's markers on every partition of its state).

2. The driver-side enrichment (``streaming/alerts.py``) rebuilds the same three objects from the
   state's row (``to_dict``/``from_dict`` round-trip them) and adds the global facts with
   ``dataclasses.replace``: ``CoordinatorView.partition_count`` (metadata / config
   ``txn_state_partitions``), ``read_partitions`` (the ``__transaction_state`` partitions read up
   to ``now``), ``all_coordinators_max`` (highest ``partitionLeaderEpoch`` over them), and
   ``EpochEvidence.describe_producers`` (the leader's DescribeProducers entry, live path, 2.8+),
   ``CoordinatorView.described`` (the coordinator's DescribeTransactions answer, live path, 3.0+:
   it decides ownership instead of the log's record), the currency of the coordinator copies, and
   a :class:`PartitionProof` of tp (detection.md §0). It then calls :func:`judge` again and
   publishes that verdict; it decides nothing itself.

Revision 3 / 3.1 (detection.md §0, §3.1): ``verified`` is a proof; every missing proof is a
stable string in ``Verdict.unverified_reasons``; no verdict, cause or epoch comes from comparing
two sources' clocks (a clock may only add a reason or turn hanging into late).

Adding global facts never changes ``status`` (late vs hanging depends only on C, which the state
call already has), except when ``read_partitions`` shows that P's own ``txn_partition`` was not
read up to ``now`` (its mapping is then not current: §3.2 ``exceeds-max-timeout``); it can change ``cause``/``verified`` (an unmapped producer becomes
``coordinator-unaware`` once the view is complete), the coordinator epoch, and ``blocked``.
A verdict with ``blocked`` set must not be published: the partition is re-read first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from streaming.vocab import (
    CLOCK_SKEW,
    COORDINATOR_COPY_BEHIND,
    COORDINATOR_COPY_EMPTY,
    COORDINATOR_VIEW_INCOMPLETE,
    CRC_GAP,
    NEWEST_SEGMENT_NOT_PROVEN,
    NO_COORDINATOR_INPUT,
    START_OFFSET_NOT_PROVEN,
)

# The vocabulary is defined in streaming.vocab; re-exported here for readers of judge().
from streaming.vocab import EPOCH_SOURCES as EPOCH_SOURCES
from streaming.vocab import HANGING_CAUSES as HANGING_CAUSES
from streaming.vocab import LATE_CAUSES as LATE_CAUSES
from udfs.model import OPEN_TXN_STATES

PREPARE_STATES = ("PrepareCommit", "PrepareAbort")
TWO_PC_TIMEOUT_MS = 2_147_483_647  # Integer.MAX_VALUE: KIP-939's "no timeout" (isDistributedTwoPhaseCommitTxn)
# Errors.java: INVALID_PRODUCER_EPOCH(47), TRANSACTION_COORDINATOR_FENCED(52).
COORDINATOR_FENCED_ERROR = "TRANSACTION_COORDINATOR_FENCED (error 52)"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """``max_timeout_ms`` mirrors the broker's ``transaction.max.timeout.ms`` (default 15 min);
    ``padding_ms`` is the 5-minute buffer of Kafka's ``PartitionsWithLateTransactionsCount``."""

    max_timeout_ms: int = 900_000
    padding_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class Marker:
    """One control batch of P on tp. ``kind`` is COMMIT/ABORT, or None for an empty control batch
    left by the cleaner (type and ``coordinator_epoch`` unknown). ``timestamp`` is the batch's
    maxTimestamp: the partition leader's clock when it handled WriteTxnMarkers
    (``MemoryRecords.withEndTransactionMarker`` uses ``System.currentTimeMillis()``)."""

    offset: int
    producer_epoch: int
    coordinator_epoch: int | None
    kind: str | None
    timestamp: int
    # The highest data epoch of the transaction this marker closed on tp (None: nothing of P was
    # open when it was read, or the data was not read). One above ``producer_epoch``'s data
    # (``closed_epoch == producer_epoch - 1``) is a *bumped* marker: transaction version 2
    # always (``TransactionMetadata.prepareComplete`` bumps the epoch at every end under TV2,
    # KIP-890), and a coordinator-initiated abort under versions 0/1
    # (``TransactionCoordinator.onEndTransactionComplete`` / ``abortTimedOutTransactions`` →
    # ``prepareFenceProducerEpoch``). detection.md §3.1, revision 3.1.
    closed_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """An open transaction O of producer id P on ``topic``-``partition``.

    ``max_epoch``: highest producer epoch of P on tp (data, markers, snapshot entry) = the legacy
    abort's E. ``first_epoch``: epoch of O's first batch. ``prev_marker``: see module docstring.
    """

    topic: str
    partition: int
    producer_id: int
    first_offset: int
    last_offset: int
    first_ts: int
    last_ts: int
    max_epoch: int
    first_epoch: int
    prev_marker: Marker | None = None

    @property
    def tp(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """C: the latest ``__transaction_state`` value whose producer id is P (kafka-formats §5.4).
    ``partitions`` are "topic-partition" strings (None for a null array); ``last_update_ts`` is
    TransactionLastUpdateTimestampMs, for a Prepare* record its prepare time."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[str, ...] | None
    timeout_ms: int
    start_ts: int
    last_update_ts: int
    # ClientTransactionVersion of the value (v1 tagged field 2, Kafka 4.0+; 0 = versions 0/1,
    # 2 = transaction version 2); None when the input does not say (text dumps before 4.1).
    client_txn_version: int | None = None
    # ``start_exact`` False: the input does not print TransactionStartTimestampMs (text dumps
    # before 4.1) and ``start_ts`` is only an upper bound of the start (the update time of the first
    # Ongoing record read after the id's previous Complete*/Empty record), -1 when no record proves
    # one. ``prev_final_ts``: the update time of that previous Complete*/Empty record (a lower
    # bound of the start, -1 when none was read). detection.md §3.1.
    start_exact: bool = True
    prev_final_ts: int = -1

    @property
    def two_phase_commit(self) -> bool:
        """KIP-939: ``TransactionMetadata.isDistributedTwoPhaseCommitTxn`` is ``txnTimeoutMs ==
        Integer.MAX_VALUE``; the coordinator never times such a transaction out
        (``TransactionStateManager.timedOutTransactions`` skips it)."""
        return self.timeout_ms == TWO_PC_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    """The coordinator's DescribeTransactions answer (KIP-664, 3.0+) for P's transactional id
    (``TransactionCoordinator.handleDescribeTransactions``): its *current* in-memory state and
    partition set. ``found`` False: TRANSACTIONAL_ID_NOT_FOUND. In PrepareCommit/PrepareAbort the
    partition set holds only the partitions whose marker is not written yet
    (``TransactionMarkerRequestCompletionHandler`` → ``txnMetadata.removePartition``), which is
    why ``TransactionsCommand.FindHangingTransactionsCommand.filterHangingTransactions`` calls a
    transaction hanging iff its partition is absent from that set. It outranks the log
    (detection.md §0)."""

    found: bool
    state: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: tuple[str, ...] = ()
    timeout_ms: int = -1
    start_ts: int = -1


@dataclass(frozen=True, slots=True)
class CoordinatorView:
    """What the ``__transaction_state`` input says about P (detection.md §3.1).

    ``current``: a coordinator source exists and was read up to at least ``now``.
    ``mapped``: a partition read holds a record for P's transactional id (also when its latest
    record is a tombstone or names a newer producer id: that proves P unknown).
    ``record``: C, only when ``mapped`` and the id's latest record still names P.
    ``txn_partition``: the ``__transaction_state`` partition holding P's transactional id (when
    mapped); if ``read_partitions`` is known and lacks it, P's mapping is not current.
    ``partition_count``: n of ``__transaction_state``; ``read_partitions``: the partitions read up
    to ``now`` (None: this caller does not know). ``all_coordinators_max``: highest
    ``partitionLeaderEpoch`` over the partitions read.
    """

    current: bool = False
    mapped: bool = False
    record: CoordinatorRecord | None = None
    txn_partition: int | None = None
    partition_count: int | None = None
    read_partitions: frozenset[int] | None = None
    all_coordinators_max: int | None = None
    # Currency of the copies (detection.md §0, revision 3.1). ``copies_current``: every copy read
    # was proven read to the broker's end (live: its high watermark; ``scan --bootstrap-server``:
    # ListOffsets end offsets equal to the copies' ends); then the two facts below do not matter.
    # ``empty_partitions``: read copies holding no record at all; ``newest_ts``: (partition, newest
    # record timestamp) per read copy; ``gap_partitions``: copies with a CRC gap (incomplete from
    # the gap on, so never in ``read_partitions``).
    copies_current: bool = False
    empty_partitions: frozenset[int] = frozenset()
    newest_ts: tuple[tuple[int, int], ...] = ()
    gap_partitions: frozenset[int] = frozenset()
    # ``described``: the coordinator's live DescribeTransactions answer for P's transactional id
    # (live path, 3.0+); when set it decides ownership instead of ``record`` (detection.md §3.1).
    # ``txn_version``: the cluster's finalized ``transaction.version`` feature when known (2: every
    # marker is bumped, revision 3.1).
    described: DescribedTransaction | None = None
    txn_version: int | None = None

    def __post_init__(self) -> None:
        if self.record is not None and not self.mapped:
            raise ValueError("CoordinatorView: a coordinator record for P implies mapped=True")

    @property
    def mapping_current(self) -> bool:
        """The source is current and so is P's own partition, as far as this caller knows."""
        if not self.current:
            return False
        return self.txn_partition is None or self.read_partitions is None or self.txn_partition in self.read_partitions

    @property
    def complete(self) -> bool:
        """Every partition 0..n-1 was read up to now (False when either fact is unknown)."""
        if not self.current or self.partition_count is None or self.read_partitions is None:
            return False
        return all(p in self.read_partitions for p in range(self.partition_count))

    def covering_partitions(self) -> tuple[int, ...] | None:
        """The copies that should cover P (revision 3.1): the partition of P's coordinator record
        (or of the transactional id that once mapped P); when nothing maps P, every partition
        (any of them could hold P's id). None when n is not known."""
        if self.txn_partition is not None:
            return (self.txn_partition,)
        if self.partition_count is None:
            return None
        return tuple(range(self.partition_count))

    def unproven_copies(self, first_ts: int) -> tuple[frozenset[int], frozenset[int]]:
        """(empty, behind): covering copies that cannot show they are current for an open
        transaction whose first write is at ``first_ts``. A clock here only takes proof away."""
        cover = self.covering_partitions()
        if self.copies_current or cover is None or self.read_partitions is None:
            return frozenset(), frozenset()
        newest = dict(self.newest_ts)
        read = [p for p in cover if p in self.read_partitions]
        empty = frozenset(p for p in read if p in self.empty_partitions)
        behind = frozenset(p for p in read if p not in empty and p in newest and newest[p] < first_ts)
        return empty, behind

    def missing_partitions(self) -> tuple[int, ...] | None:
        """``__transaction_state`` partitions not read up to now; None when this caller does not know
        n or the partitions read. A job with no coordinator source passes ``read_partitions=frozenset()``."""
        if self.partition_count is None or self.read_partitions is None:
            return None
        return tuple(p for p in range(self.partition_count) if p not in self.read_partitions)


@dataclass(frozen=True, slots=True)
class PartitionProof:
    """How far the input proves what it says of data partition tp (detection.md §0).

    ``end_proven``: the read of tp reached tp's end (live: the high watermark of the read; a log
    directory: its newest segment; explicit files or dump text: only with the broker's
    ``replication-offset-checkpoint`` / ``recovery-point-offset-checkpoint`` in the input or a
    ListOffsets answer). ``crc_gaps``: offsets on tp where a batch failed its CRC and was not
    believed (``LogSegment.recover`` → ``RecordBatch.ensureValid``). ``start_proven``: O's first
    offset is its real first offset (False: retention deleted O's start and no snapshot or read says
    where it began). ``clock_skew``: a timestamp of O was flagged an outlier by the clock guard (§2).
    """

    end_proven: bool = False
    crc_gaps: tuple[int, ...] = ()
    start_proven: bool = True
    clock_skew: bool = False


@dataclass(frozen=True, slots=True)
class DescribeProducersAnswer:
    """The partition leader's DescribeProducers answer for P on tp (2.8+). ``found`` False: the
    answer has no entry for P. -1 means "none" for ``coordinator_epoch`` and the start offset."""

    found: bool
    producer_epoch: int = -1
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class SnapshotSeed:
    """The newest producer snapshot of tp that seeded the state: its offset N (state after all
    offsets < N) and P's entry in it (``present`` False: P had no state on tp at N)."""

    offset: int
    present: bool
    coordinator_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEvidence:
    """Inputs of detection.md §4. ``last_marker``: P's newest marker read on tp (any offset);
    ``read_from_zero``: tp was read from offset 0 (its log start was 0: nothing ever deleted);
    ``producer_max_marker_epoch``: highest known coordinator epoch among P's markers on any
    partition read."""

    describe_producers: DescribeProducersAnswer | None = None
    last_marker: Marker | None = None
    snapshot: SnapshotSeed | None = None
    read_from_zero: bool = False
    producer_max_marker_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class EpochChoice:
    epoch: int | None
    source: str | None
    hint: str | None = None
    blocked: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    status: str  # open | late | hanging
    cause: str | None
    verified: bool
    threshold_ms: int
    open_ms: int
    idle_ms: int
    clock_skew: bool
    producer_epoch: int  # E of the legacy abort
    coordinator_epoch: int | None  # C of the legacy abort (None: no legacy command)
    coordinator_epoch_source: str | None
    epoch_hint: str | None = None  # for "unknown" / "producer-last-marker": the input that gives it exactly
    missing_txn_partitions: tuple[int, ...] | None = None  # exceeds-max-timeout: what to provide
    blocked: str | None = None  # set: do not publish; re-read tp first (why)
    unverified_reasons: tuple[str, ...] = ()  # streaming.vocab.UNVERIFIED_REASONS; empty iff verified


def threshold_for(thresholds: Thresholds, record: CoordinatorRecord | None) -> int:
    """``max(max_timeout_ms, C's TransactionTimeoutMs) + padding_ms`` (detection.md §3), except for a
    two-phase-commit transaction (timeout Integer.MAX_VALUE, KIP-939): ``max_timeout_ms +
    padding_ms``, as the broker's late-transaction metric counts it."""
    timeout = thresholds.max_timeout_ms
    if record is not None and not record.two_phase_commit:
        timeout = max(timeout, record.timeout_ms)
    return timeout + thresholds.padding_ms


# Withdrawn in revision 3 (detection.md §3.1): "C is Prepare* but P's marker for C already landed
# on tp, by timestamps → hanging". Under transaction versions 0/1 the previous transaction's marker
# carries the same producer id, epoch and result as C's, and only the partition leader's clock (the
# marker's timestamp) against the coordinator's (C's TransactionLastUpdateTimestampMs) told them
# apart: 41 ms of skew between two brokers made that rule abort a commit in flight. A Prepare*
# record naming tp now keeps O ``late, markers-pending``; on the live path DescribeTransactions
# (the coordinator's current partition set, :class:`DescribedTransaction`) decides instead.


def _described_record(dt: DescribedTransaction, record: CoordinatorRecord | None) -> CoordinatorRecord:
    """The coordinator's live answer as a coordinator record (it outranks the log's record)."""
    return CoordinatorRecord(
        transactional_id=record.transactional_id if record is not None else "", state=dt.state or "",
        producer_id=dt.producer_id, producer_epoch=dt.producer_epoch, partitions=tuple(dt.partitions),
        timeout_ms=dt.timeout_ms, start_ts=dt.start_ts, last_update_ts=-1,
        client_txn_version=record.client_txn_version if record is not None else None)


def _stuck(c: CoordinatorRecord, now_ms: int, padding_ms: int) -> bool:
    """``now − C.start > C.timeout + padding`` (detection.md §3.1: the coordinator should have
    aborted it: ``TransactionStateManager.timedOutTransactions`` takes Ongoing transactions with
    ``txnStartTimestamp + txnTimeoutMs < now``). When the input does not print the start
    (``start_exact`` False), it is bounded below by the id's previous Complete*/Empty record and
    above by the first Ongoing record after it: ``coordinator-stuck`` needs that lower bound to
    exceed the threshold (and the upper one, which implies it), else a long transaction would be
    called stuck."""
    limit = c.timeout_ms + padding_ms
    if c.start_exact:
        return c.start_ts >= 0 and now_ms - c.start_ts > limit
    return (c.prev_final_ts >= 0 and now_ms - c.prev_final_ts > limit
            and c.start_ts >= 0 and now_ms - c.start_ts > limit)


def _late_write(txn: OpenTxn, c: CoordinatorRecord, txn_version: int | None) -> bool:
    """``write-after-marker`` (detection.md §3.1): P's previous event on tp is a marker with the
    epoch of O's first batch, and that marker was not *bumped*. After a bumped marker (its epoch one
    above the data it closed: transaction version 2 always, a coordinator abort under versions 0/1)
    a batch of the marker's epoch is the producer's next transaction, which the partition leader
    accepts (``ProducerAppendInfo.checkProducerEpoch`` only rejects an epoch below the entry's), not
    a late write of the closed one. Only a marker proven not bumped (the data epoch it closed was
    read and equals its own) refines the cause; TV2 by the record or the cluster never does."""
    pm = txn.prev_marker
    if pm is None or pm.producer_epoch != txn.first_epoch:
        return False
    if (c.client_txn_version or 0) >= 2 or (txn_version or 0) >= 2:
        return False
    return pm.closed_epoch is not None and pm.closed_epoch == pm.producer_epoch


def _hint_unknown(txn: OpenTxn) -> str:
    return (f"coordinator epoch of producer {txn.producer_id} on {txn.tp} unknown, no legacy command: provide "
            f"{txn.tp}'s newest producer snapshot (.snapshot file or its kafka-dump-log.sh dump), or read "
            f"{txn.tp} from its log start so the producer's last marker there is found")


def _hint_fenced(txn: OpenTxn, epoch: int) -> str:
    return (f"coordinator epoch {epoch} is the highest among producer {txn.producer_id}'s markers on the "
            f"partitions read and may be below what {txn.tp}'s leader holds: if the abort is rejected with "
            f"{COORDINATOR_FENCED_ERROR}, provide {txn.tp}'s newest producer snapshot or read {txn.tp} from its "
            f"log start for the exact epoch; never raise the number by guessing")


def coordinator_epoch_for(txn: OpenTxn, view: CoordinatorView, evidence: EpochEvidence, *,
                          current: bool = True) -> EpochChoice:
    """The legacy abort's coordinator epoch: the first rule of detection.md §4 that applies.

    Every rule is exact or errs low: too low is rejected loudly (error 52), too high is stored by
    the leader and fences the real coordinator's later markers for P on tp.
    """
    dp = evidence.describe_producers
    if dp is not None:
        if not dp.found or dp.current_txn_start_offset != txn.first_offset:
            seen = (f"CurrentTxnStartOffset {dp.current_txn_start_offset}" if dp.found
                    else "no entry for the producer")
            return EpochChoice(None, None, blocked=(
                f"DescribeProducers on {txn.tp}'s leader reports {seen} for producer {txn.producer_id}, "
                f"not first offset {txn.first_offset}: re-read {txn.tp} before emitting this finding"))
        return EpochChoice(max(dp.coordinator_epoch, 0), "describe-producers")
    lm, snap = evidence.last_marker, evidence.snapshot
    # A marker below the snapshot's offset is already inside the snapshot's entry.
    lm_after_snapshot = lm is not None and (snap is None or lm.offset >= snap.offset)
    if lm_after_snapshot and lm.coordinator_epoch is not None:
        return EpochChoice(max(lm.coordinator_epoch, 0), "last-marker")
    if snap is not None and not lm_after_snapshot:
        return EpochChoice(max(snap.coordinator_epoch, 0) if snap.present else 0, "snapshot")
    if evidence.read_from_zero and lm is None:
        return EpochChoice(0, "log-start")  # the leader's entry never saw a marker: -1, and 0 passes
    pm = evidence.producer_max_marker_epoch
    if pm is not None and pm >= 0:
        return EpochChoice(pm, "producer-last-marker", hint=_hint_fenced(txn, pm))
    amax = view.all_coordinators_max
    # Rule 6 only on a view complete *and current* (revision 3): ``current`` False when a copy
    # that should cover P is empty or behind O's first write.
    if view.complete and current and view.record is None and amax is not None and amax >= 0:
        return EpochChoice(amax, "all-coordinators-max")
    return EpochChoice(None, "unknown", hint=_hint_unknown(txn))


def judge(txn: OpenTxn, view: CoordinatorView, evidence: EpochEvidence, *, now_ms: int,
          thresholds: Thresholds, proof: PartitionProof | None = None) -> Verdict:
    """Status, cause, verification and abort parameters of O at event time ``now_ms``.

    ``proof`` is what the input proves of tp (detection.md §0). ``None`` means "this caller does not
    know" (the per-producer state call): no reason is derived from it, and that verdict is never
    the published one — the driver's enrichment re-judges with a :class:`PartitionProof`.

    ``verified`` is a proof (§0): it is set only when no reason in ``unverified_reasons`` remains,
    and a reason is never removed by a clock comparison.
    """
    record = view.record if view.mapping_current else None
    if record is not None and record.producer_id != txn.producer_id:
        raise ValueError(f"coordinator record of producer id {record.producer_id} passed for producer id "
                         f"{txn.producer_id} ({txn.tp} offset {txn.first_offset})")
    dt = view.described
    open_ms, idle_ms = now_ms - txn.first_ts, now_ms - txn.last_ts
    skew = open_ms < 0 or idle_ms < 0 or (proof is not None and proof.clock_skew)
    open_ms, idle_ms = max(open_ms, 0), max(idle_ms, 0)
    c = record
    if dt is not None:  # the broker's own word decides (§0)
        c = _described_record(dt, record) if dt.found and dt.producer_id == txn.producer_id else None
    threshold = threshold_for(thresholds, c if c is not None else record)
    base = dict(threshold_ms=threshold, open_ms=open_ms, idle_ms=idle_ms, clock_skew=skew)
    if open_ms <= threshold:
        return Verdict("open", None, True, producer_epoch=txn.max_epoch, coordinator_epoch=None,
                       coordinator_epoch_source=None, **base)

    reasons: list[str] = []
    empty: frozenset[int] = frozenset()
    behind: frozenset[int] = frozenset()
    if dt is None:
        # What the __transaction_state copies prove; the coordinator's live answer replaces them.
        empty, behind = view.unproven_copies(txn.first_ts)
        cover = view.covering_partitions()
        if cover is not None and view.gap_partitions.intersection(cover):
            reasons.append(CRC_GAP)
    status, cause, verified = "hanging", "exceeds-max-timeout", False
    if dt is not None:
        verified = True
        if c is None:
            # TRANSACTIONAL_ID_NOT_FOUND, or the id now maps another producer id: no coordinator
            # will write a marker for P (FindHangingTransactionsCommand: no description → hanging).
            cause = "coordinator-unaware"
        else:
            status, cause = _decide(txn, c, view, now_ms, thresholds)
    elif not view.mapping_current:
        pass  # no coordinator source, or it (or P's own partition) lags: only markers-pending explains O
    elif record is None:
        # "P unknown" is proven only when every covering copy is current: an empty or lagging copy
        # may be the one that would have named P (revision 3.1). The cause stands, unverified, with
        # the reason below; rule 6 does not apply to it.
        if view.mapped or view.complete:
            cause, verified = "coordinator-unaware", True
    else:
        status, cause = _decide(txn, record, view, now_ms, thresholds)
        verified = True
    if cause == "exceeds-max-timeout":
        missing = view.missing_partitions()
        read_any = bool(view.read_partitions) or view.mapped
        if not read_any:
            reasons.append(NO_COORDINATOR_INPUT)
        elif missing is None or missing or not view.mapping_current or not (empty or behind):
            reasons.append(COORDINATOR_VIEW_INCOMPLETE)
    if empty:
        reasons.append(COORDINATOR_COPY_EMPTY)
    if behind:
        reasons.append(COORDINATOR_COPY_BEHIND)
    if proof is not None:
        if not proof.end_proven:
            reasons.append(NEWEST_SEGMENT_NOT_PROVEN)
        if proof.crc_gaps and CRC_GAP not in reasons:
            reasons.append(CRC_GAP)
        if not proof.start_proven:
            reasons.append(START_OFFSET_NOT_PROVEN)
    if skew:
        reasons.append(CLOCK_SKEW)
    verified = verified and not reasons

    choice = coordinator_epoch_for(txn, view, evidence, current=not empty and not behind)
    dp = evidence.describe_producers
    epoch_e = dp.producer_epoch if dp is not None and choice.source == "describe-producers" \
        and dp.producer_epoch >= 0 else txn.max_epoch
    return Verdict(status, cause, verified, producer_epoch=epoch_e, coordinator_epoch=choice.epoch,
                   coordinator_epoch_source=choice.source, epoch_hint=choice.hint,
                   missing_txn_partitions=view.missing_partitions() if cause == "exceeds-max-timeout" else None,
                   blocked=choice.blocked, unverified_reasons=tuple(reasons), **base)


def _decide(txn: OpenTxn, c: CoordinatorRecord, view: CoordinatorView, now_ms: int,
            thresholds: Thresholds) -> tuple[str, str]:
    """(status, cause) given C, the coordinator's record for P (detection.md §3.1, Kafka's
    find-hanging rule: O is covered iff tp is in the coordinator's current partition set)."""
    parts = c.partitions or ()
    # PrepareEpochFence (KIP-360, in memory: DescribeTransactions may show it) keeps the partitions
    # and goes on to PrepareAbort (TransactionCoordinator.prepareFenceProducerEpoch): markers follow.
    owns = c.state in (*OPEN_TXN_STATES, "PrepareEpochFence") and txn.tp in parts
    if not owns:
        return "hanging", ("write-after-marker" if _late_write(txn, c, view.txn_version)
                           else "coordinator-finished-without-partition")
    if c.state in (*PREPARE_STATES, "PrepareEpochFence"):
        # The coordinator decided; its marker will close O whatever the timestamps say (revision 3).
        return "late", "markers-pending"
    if c.two_phase_commit:
        # KIP-939: an external transaction manager owns the decision; the coordinator never times
        # it out, so age never makes it hanging (§5). No abort command: the remedy is documented.
        return "late", "prepared-2pc"
    if _stuck(c, now_ms, thresholds.padding_ms):
        return "late", "coordinator-stuck"
    return "late", "long-transaction"


def described_from_answer(d: dict[str, Any] | None) -> DescribedTransaction | None:
    """A DescribeTransactions answer as ``streaming.broker_confirm`` returns it (None: unsupported,
    unreachable or not authorized = unknown; ``error`` TRANSACTIONAL_ID_NOT_FOUND = the coordinator
    does not know the id) → :class:`DescribedTransaction`."""
    if d is None:
        return None
    if d.get("error"):
        return DescribedTransaction(found=False) if d["error"] == "TRANSACTIONAL_ID_NOT_FOUND" else None
    start = d.get("start_ms")
    return DescribedTransaction(found=True, state=d.get("state"), producer_id=int(d["producer_id"]),
                                producer_epoch=int(d.get("producer_epoch", -1)),
                                partitions=tuple(d.get("partitions") or ()),
                                timeout_ms=int(d.get("timeout_ms", -1)),
                                start_ts=int(start) if start is not None and start >= 0 else -1)


def to_dict(obj: OpenTxn | CoordinatorView | EpochEvidence) -> dict[str, Any]:
    """JSON-ready dict of one evidence object (for the state row the enrichment re-judges)."""
    d = asdict(obj)
    if isinstance(obj, CoordinatorView):
        if obj.read_partitions is not None:
            d["read_partitions"] = sorted(obj.read_partitions)
        d["empty_partitions"], d["gap_partitions"] = sorted(obj.empty_partitions), sorted(obj.gap_partitions)
        d["newest_ts"] = [list(x) for x in obj.newest_ts]
    return d


def view_from_dict(d: dict[str, Any]) -> CoordinatorView:
    rec, dt = d.get("record"), d.get("described")
    read = d.get("read_partitions")
    return CoordinatorView(
        current=d["current"], mapped=d["mapped"],
        record=CoordinatorRecord(**{**rec, "partitions": tuple(rec["partitions"])
                                    if rec["partitions"] is not None else None}) if rec else None,
        txn_partition=d.get("txn_partition"), partition_count=d.get("partition_count"),
        read_partitions=frozenset(read) if read is not None else None,
        all_coordinators_max=d.get("all_coordinators_max"), copies_current=d.get("copies_current", False),
        empty_partitions=frozenset(d.get("empty_partitions") or ()),
        newest_ts=tuple(tuple(x) for x in d.get("newest_ts") or ()),
        gap_partitions=frozenset(d.get("gap_partitions") or ()),
        described=DescribedTransaction(**{**dt, "partitions": tuple(dt.get("partitions") or ())}) if dt else None,
        txn_version=d.get("txn_version"))


def txn_from_dict(d: dict[str, Any]) -> OpenTxn:
    pm = d.get("prev_marker")
    return OpenTxn(**{**d, "prev_marker": Marker(**pm) if pm else None})


def evidence_from_dict(d: dict[str, Any]) -> EpochEvidence:
    dp, lm, snap = d.get("describe_producers"), d.get("last_marker"), d.get("snapshot")
    return EpochEvidence(
        describe_producers=DescribeProducersAnswer(**dp) if dp else None,
        last_marker=Marker(**lm) if lm else None, snapshot=SnapshotSeed(**snap) if snap else None,
        read_from_zero=d.get("read_from_zero", False), producer_max_marker_epoch=d.get("producer_max_marker_epoch"))
