"""The rule that decides "hanging" (spec/detection.md §3-§4, normative). Pure: no Spark.

:func:`judge` takes one open transaction, the coordinator's view of its producer id, the clock
and the thresholds, and returns the status, the cause, whether the finding is verified, and the
parameters of both abort commands with the source of the coordinator epoch. Everything else in
txnwatch (the Spark state function, ``scan``, the demo) calls this one function; the tests beside
it (``tests/test_verdict.py``) walk every branch.
"""

from __future__ import annotations

from dataclasses import dataclass

# The vocabulary is defined in streaming.vocab; re-exported here for readers of judge().
from streaming.vocab import EPOCH_SOURCES as EPOCH_SOURCES
from streaming.vocab import HANGING_CAUSES as HANGING_CAUSES
from streaming.vocab import LATE_CAUSES as LATE_CAUSES
from udfs.model import OPEN_TXN_STATES


@dataclass(frozen=True, slots=True)
class Thresholds:
    """``max_timeout_ms`` mirrors the broker's ``transaction.max.timeout.ms`` (default 15 min);
    ``padding_ms`` is the 5-minute buffer of Kafka's ``PartitionsWithLateTransactionsCount``."""

    max_timeout_ms: int = 900_000
    padding_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """An open transaction of producer id ``producer_id`` on ``topic``-``partition``.

    ``max_epoch`` is the highest producer epoch seen for the producer id on that partition (data
    batches, markers or a snapshot entry): what ``DescribeProducers`` would report and what the
    legacy abort must carry. ``follows_marker``: the transaction's first batch came after a marker
    of the same producer id on the partition (the late-produce pattern of KAFKA-9144).
    """

    topic: str
    partition: int
    producer_id: int
    first_offset: int
    last_offset: int
    first_ts: int
    last_ts: int
    max_epoch: int
    follows_marker: bool = False


@dataclass(frozen=True, slots=True)
class CoordinatorView:
    """The latest ``__transaction_state`` record whose producer id is the transaction's producer id.

    ``partitions`` are "topic-partition" strings (None when the record had a null array).
    ``partition_epoch`` is the highest ``partitionLeaderEpoch`` seen in that transactional id's
    ``__transaction_state`` partition, i.e. its coordinator's epoch (kafka-formats.md §5.6).
    """

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[str, ...] | None
    timeout_ms: int
    start_ts: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class EpochEvidence:
    """What is known about the coordinator epoch the broker holds for the producer on the partition.

    ``last_marker_epoch``: coordinatorEpoch of the producer's last (non-empty) marker there;
    ``had_marker``: any control batch of the producer was seen there (even an empty one);
    ``read_from_log_start``: the partition was read from its log start offset;
    ``snapshot_epoch``: coordinator epoch of a producer snapshot entry for it (may be -1);
    ``all_coordinators_max``: highest partitionLeaderEpoch over every ``__transaction_state``
    partition read (None when not known where the verdict is taken; filled in later).
    """

    last_marker_epoch: int | None = None
    had_marker: bool = False
    read_from_log_start: bool = False
    snapshot_epoch: int | None = None
    all_coordinators_max: int | None = None


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
    coordinator_epoch: int | None  # C of the legacy abort (None: unknown / not a hanging finding)
    coordinator_epoch_source: str | None


def threshold_for(thresholds: Thresholds, coordinator: CoordinatorView | None) -> int:
    """``max(max_timeout_ms, coordinator's TransactionTimeoutMs) + padding_ms`` (detection.md §3)."""
    timeout = thresholds.max_timeout_ms
    if coordinator is not None and coordinator.timeout_ms is not None:
        timeout = max(timeout, coordinator.timeout_ms)
    return timeout + thresholds.padding_ms


def coordinator_epoch_for(
    evidence: EpochEvidence, coordinator: CoordinatorView | None, coordinator_available: bool
) -> tuple[int | None, str]:
    """The legacy abort's coordinator epoch and its source (detection.md §4, first rule wins)."""
    if evidence.last_marker_epoch is not None and evidence.last_marker_epoch >= 0:
        return evidence.last_marker_epoch, "last-marker"
    if evidence.read_from_log_start and not evidence.had_marker:
        return 0, "log-start"  # the broker entry never saw a marker: it holds -1, and 0 passes
    if evidence.snapshot_epoch is not None:
        return max(evidence.snapshot_epoch, 0), "snapshot"
    if coordinator is not None and coordinator.partition_epoch is not None and coordinator.partition_epoch >= 0:
        return coordinator.partition_epoch, "coordinator-partition"
    if coordinator_available and coordinator is None:
        if evidence.all_coordinators_max is not None and evidence.all_coordinators_max >= 0:
            return evidence.all_coordinators_max, "all-coordinators-max"
        # No coordinator knows the producer, but the global maximum is taken where all
        # __transaction_state partitions are visible (alert enrichment): mark it pending there.
        return None, "all-coordinators-max"
    return None, "unknown"


def judge(
    txn: OpenTxn,
    coordinator: CoordinatorView | None,
    *,
    coordinator_available: bool,
    now_ms: int,
    thresholds: Thresholds,
    evidence: EpochEvidence,
) -> Verdict:
    """Status, cause and abort parameters of one open transaction at event time ``now_ms``.

    ``coordinator_available``: a ``__transaction_state`` source is configured and has been read up
    to at least ``now_ms`` (sources guarantee this per micro-batch; see DESIGN §6). ``coordinator``
    is then the producer id's current coordinator record, or None when no transactional id maps
    to it any more (never registered, tombstoned, or superseded by another producer id).
    """
    open_ms = now_ms - txn.first_ts
    idle_ms = now_ms - txn.last_ts
    skew = open_ms < 0 or idle_ms < 0
    open_ms, idle_ms = max(open_ms, 0), max(idle_ms, 0)
    threshold = threshold_for(thresholds, coordinator if coordinator_available else None)

    def result(status: str, cause: str | None, verified: bool) -> Verdict:
        epoch, source = (None, None)
        if status == "hanging":
            epoch, source = coordinator_epoch_for(evidence, coordinator, coordinator_available)
        return Verdict(status, cause, verified, threshold, open_ms, idle_ms, skew, txn.max_epoch, epoch, source)

    if open_ms <= threshold:
        return result("open", None, True)
    if not coordinator_available:
        # No coordinator can keep a transaction open past transaction.max.timeout.ms, so only
        # "markers pending" could still explain it: hanging, but to be confirmed before aborting.
        return result("hanging", "exceeds-max-timeout", False)
    if coordinator is None:
        return result("hanging", "coordinator-unaware", True)
    tp = f"{txn.topic}-{txn.partition}"
    owns = coordinator.state in OPEN_TXN_STATES and tp in (coordinator.partitions or ())
    if owns:
        if coordinator.state in ("PrepareCommit", "PrepareAbort"):
            return result("late", "markers-pending", True)
        started = coordinator.start_ts if coordinator.start_ts is not None and coordinator.start_ts >= 0 else None
        if started is not None and now_ms - started > coordinator.timeout_ms + thresholds.padding_ms:
            return result("late", "coordinator-stuck", True)
        return result("late", "long-transaction", True)
    cause = "write-after-marker" if txn.follows_marker else "coordinator-finished-without-partition"
    return result("hanging", cause, True)
