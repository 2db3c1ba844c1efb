"""Every branch of spec/detection.md §3 (with §3.1 and the refinements) and every §4 epoch source.

Expected values are written by hand; the evidence objects are built literally in each test.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shlex

import pytest

from streaming.alerts import AlertConfig, abort_commands, shell_quote
from streaming.verdict import (
    EPOCH_SOURCES,
    CoordinatorRecord,
    CoordinatorView,
    DescribedTransaction,
    DescribeProducersAnswer,
    EpochEvidence,
    Marker,
    OpenTxn,
    PartitionProof,
    SnapshotSeed,
    Thresholds,
    coordinator_epoch_for,
    evidence_from_dict,
    judge,
    threshold_for,
    to_dict,
    txn_from_dict,
    view_from_dict,
)

T0 = 1_700_000_000_000
TH = Thresholds()  # 15 min + 5 min
THRESHOLD = 1_200_000
LATE = T0 + 2 * THRESHOLD  # a "now" well past the threshold
ALL50 = frozenset(range(50))


def txn(first_ts=T0, last_ts=None, epoch=3, first_epoch=3, prev_marker=None, first_offset=100):
    return OpenTxn("orders", 0, 42, first_offset, first_offset + 20, first_ts,
                   last_ts if last_ts is not None else first_ts + 10, epoch, first_epoch, prev_marker)


def rec(state="Ongoing", partitions=("orders-0",), timeout_ms=60_000, start_ts=T0, pid=42, epoch=3,
        last_update_ts=T0 + 5_000):
    return CoordinatorRecord("app-1", state, pid, epoch, partitions, timeout_ms, start_ts, last_update_ts)


def mapped(r=None, **kw):
    """P's transactional id was read (in partition 12); ``r`` None = tombstoned / superseded."""
    return CoordinatorView(current=True, mapped=True, record=r, txn_partition=12, **kw)


UNMAPPED_PARTIAL = CoordinatorView(current=True, partition_count=50, read_partitions=frozenset({3, 12, 30}))
UNMAPPED_COMPLETE = CoordinatorView(current=True, partition_count=50, read_partitions=ALL50, all_coordinators_max=13)
NO_SOURCE = CoordinatorView(current=False, partition_count=4, read_partitions=frozenset())

M5 = Marker(offset=90, producer_epoch=3, coordinator_epoch=5, kind="COMMIT", timestamp=T0 - 1_000)
EV = EpochEvidence(last_marker=M5, producer_max_marker_epoch=5)


def run(now=LATE, view=UNMAPPED_COMPLETE, t=None, ev=EV, th=TH):
    return judge(t or txn(), view, ev, now_ms=now, thresholds=th)


# --- §2/§3 threshold and clock ------------------------------------------------------------------

def test_threshold_is_max_of_broker_and_producer_timeout_plus_padding():
    assert threshold_for(TH, None) == 1_200_000
    assert threshold_for(TH, rec(timeout_ms=3_600_000)) == 3_900_000
    assert threshold_for(Thresholds(60_000, 0), rec(timeout_ms=1_000)) == 60_000


def test_open_until_strictly_past_threshold_then_no_epoch():
    v = run(now=T0 + 1_200_000)
    assert (v.status, v.cause, v.coordinator_epoch, v.coordinator_epoch_source) == ("open", None, None, None)
    v = run(now=T0 + 1_200_001)
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-unaware", True)


def test_age_is_measured_from_first_write_not_last():
    v = run(now=T0 + 1_200_001, t=txn(last_ts=T0 + 1_200_000))
    assert (v.status, v.open_ms, v.idle_ms) == ("hanging", 1_200_001, 1)


def test_clock_skew_clamped_and_flagged():
    v = run(now=T0 - 5, t=txn(first_ts=T0, last_ts=T0 + 10))
    assert (v.status, v.open_ms, v.idle_ms, v.clock_skew) == ("open", 0, 0, True)


def test_producer_timeout_only_counts_with_a_current_record():
    long_timeout = rec(timeout_ms=3_600_000)
    assert run(now=T0 + 2_000_000, view=mapped(long_timeout)).status == "open"
    stale = dataclasses.replace(mapped(long_timeout), current=False)
    v = run(now=T0 + 2_000_000, view=stale)
    assert (v.status, v.cause, v.threshold_ms) == ("hanging", "exceeds-max-timeout", 1_200_000)


# --- §3.1 the coordinator view --------------------------------------------------------------------

def test_unmapped_with_complete_view_is_coordinator_unaware_verified():
    v = run(view=UNMAPPED_COMPLETE)
    assert (v.status, v.cause, v.verified, v.missing_txn_partitions) == ("hanging", "coordinator-unaware", True, None)


def test_unmapped_with_incomplete_view_is_unverified_and_lists_missing_partitions():
    v = run(view=UNMAPPED_PARTIAL)
    assert (v.status, v.cause, v.verified) == ("hanging", "exceeds-max-timeout", False)
    assert v.missing_txn_partitions == tuple(p for p in range(50) if p not in (3, 12, 30))
    assert len(v.missing_txn_partitions) == 47


def test_one_missing_partition_is_enough_to_forbid_unaware():
    view = CoordinatorView(current=True, partition_count=50, read_partitions=ALL50 - {49}, all_coordinators_max=13)
    v = run(view=view, ev=EpochEvidence())
    assert (v.cause, v.verified, v.missing_txn_partitions) == ("exceeds-max-timeout", False, (49,))
    assert (v.coordinator_epoch, v.coordinator_epoch_source) == (None, "unknown")


def test_state_call_without_global_facts_is_unverified_with_unknown_missing_list():
    v = run(view=CoordinatorView(current=True))
    assert (v.cause, v.verified, v.missing_txn_partitions) == ("exceeds-max-timeout", False, None)


def test_no_coordinator_source_is_unverified_and_every_partition_missing():
    v = run(view=NO_SOURCE)
    assert (v.status, v.cause, v.verified, v.missing_txn_partitions) == (
        "hanging", "exceeds-max-timeout", False, (0, 1, 2, 3))
    assert v.threshold_ms == 1_200_000


def test_lagging_source_ignores_even_a_record_that_owns_the_partition():
    view = dataclasses.replace(mapped(rec(state="PrepareCommit")), current=False)
    v = run(view=view)
    assert (v.status, v.cause, v.verified) == ("hanging", "exceeds-max-timeout", False)


def test_tombstoned_or_superseded_id_in_a_read_partition_proves_unknown_even_when_incomplete():
    v = run(view=mapped(None, partition_count=50, read_partitions=frozenset({12})))
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-unaware", True)
    assert v.missing_txn_partitions is None


def test_mapping_from_a_partition_not_read_up_to_now_is_not_current():
    view = mapped(rec(state="PrepareCommit"), partition_count=50, read_partitions=ALL50 - {12})
    v = run(view=view)
    assert (v.status, v.cause, v.verified) == ("hanging", "exceeds-max-timeout", False)
    assert v.missing_txn_partitions == (12,)


def test_record_without_mapping_is_rejected():
    with pytest.raises(ValueError, match="mapped=True"):
        CoordinatorView(current=True, record=rec())


def test_record_of_another_producer_id_is_rejected():
    with pytest.raises(ValueError, match="producer id 7 passed for producer id 42"):
        run(view=mapped(rec(pid=7)))


# --- §3 coordinator record branches ---------------------------------------------------------------

@pytest.mark.parametrize("state", ["PrepareCommit", "PrepareAbort"])
def test_markers_pending_is_late(state):
    v = run(view=mapped(rec(state=state)))
    assert (v.status, v.cause, v.verified) == ("late", "markers-pending", True)
    # late findings carry the epoch, informational (never a command: alerts.py)
    assert (v.coordinator_epoch, v.coordinator_epoch_source) == (5, "last-marker")


def test_ongoing_coordinator_stuck():
    v = run(view=mapped(rec(state="Ongoing", timeout_ms=60_000, start_ts=T0)))
    assert (v.status, v.cause) == ("late", "coordinator-stuck")


def test_ongoing_long_transaction():
    # the coordinator's current transaction started 1 s ago and lists the partition
    v = run(view=mapped(rec(state="Ongoing", timeout_ms=60_000, start_ts=LATE - 1_000)))
    assert (v.status, v.cause) == ("late", "long-transaction")
    # without a start time the coordinator is not proven stuck
    v = run(view=mapped(rec(state="Ongoing", start_ts=-1)))
    assert (v.status, v.cause) == ("late", "long-transaction")


@pytest.mark.parametrize("state,parts", [("Empty", None), ("CompleteCommit", ()), ("CompleteAbort", ())])
def test_coordinator_finished_without_partition(state, parts):
    v = run(view=mapped(rec(state=state, partitions=parts)))
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-finished-without-partition", True)


def test_ongoing_without_this_partition_is_hanging():
    v = run(view=mapped(rec(state="Ongoing", partitions=("orders-1", "other-0"))))
    assert (v.status, v.cause) == ("hanging", "coordinator-finished-without-partition")


def test_write_after_marker_needs_same_epoch_as_first_batch():
    # KAFKA-9144 late produce under TV0/1: the marker closed data of its own epoch 3 (not bumped),
    # then a batch of epoch 3 reopened tp (ProducerAppendInfo.checkProducerEpoch accepts equal epochs).
    done = mapped(rec(state="CompleteCommit", partitions=()))
    same = Marker(90, 3, 5, "COMMIT", T0 - 1_000, closed_epoch=3)
    v = run(view=done, t=txn(first_epoch=3, prev_marker=same))
    assert (v.status, v.cause) == ("hanging", "write-after-marker")
    # TV2 / fencing: the marker carried epoch 4, the data 3 -> not the late-produce pattern
    higher = Marker(90, 4, 5, "COMMIT", T0 - 1_000, closed_epoch=3)
    v = run(view=done, t=txn(first_epoch=3, epoch=4, prev_marker=higher))
    assert (v.status, v.cause) == ("hanging", "coordinator-finished-without-partition")
    # previous event unknown (O seeded from a snapshot / read gap)
    v = run(view=done, t=txn(prev_marker=None))
    assert v.cause == "coordinator-finished-without-partition"


# --- revision 3.1: write-after-marker only after a marker that was not bumped ------------------------

def test_bumped_marker_then_batch_of_its_epoch_is_next_transaction_not_late_write():
    # TV2 (KIP-890): TransactionMetadata.prepareComplete bumps the epoch, so the marker that closed
    # data of epoch 3 carries 4, and the producer's next transaction writes epoch 4: a batch of the
    # marker's epoch after it is that next transaction, not a late write of the closed one.
    done = mapped(rec(state="CompleteCommit", partitions=(), epoch=4))
    bumped = Marker(90, 4, 5, "COMMIT", T0 - 1_000, closed_epoch=3)
    v = run(view=done, t=txn(first_epoch=4, epoch=4, prev_marker=bumped))
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-finished-without-partition", True)
    # The same under TV0/1 after a coordinator-initiated abort (prepareFenceProducerEpoch bumps 3 -> 4).
    aborted = Marker(90, 4, 5, "ABORT", T0 - 1_000, closed_epoch=3)
    v = run(view=done, t=txn(first_epoch=4, epoch=4, prev_marker=aborted))
    assert v.cause == "coordinator-finished-without-partition"


def test_tv2_record_or_cluster_version_says_every_marker_is_bumped():
    # The closed data was not read (closed_epoch None), or it was and looks unbumped: the coordinator
    # record's ClientTransactionVersion 2 (or finalized transaction.version 2) says the marker was bumped.
    same = Marker(90, 4, 5, "COMMIT", T0 - 1_000, closed_epoch=4)
    tv2 = mapped(dataclasses.replace(rec(state="CompleteCommit", partitions=(), epoch=5), client_txn_version=2))
    v = run(view=tv2, t=txn(first_epoch=4, epoch=4, prev_marker=same))
    assert v.cause == "coordinator-finished-without-partition"
    cluster_tv2 = dataclasses.replace(mapped(rec(state="CompleteCommit", partitions=())), txn_version=2)
    v = run(view=cluster_tv2, t=txn(first_epoch=4, epoch=4, prev_marker=same))
    assert v.cause == "coordinator-finished-without-partition"
    # TV0/1 record, marker not bumped: the late-produce pattern
    v = run(view=mapped(dataclasses.replace(rec(state="CompleteCommit", partitions=(), epoch=4),
                                            client_txn_version=0)),
            t=txn(first_epoch=4, epoch=4, prev_marker=same))
    assert v.cause == "write-after-marker"


def test_marker_whose_closed_data_was_not_read_never_refines_to_write_after_marker():
    # A marker read with nothing of P open before it (the read began at it): whether it was bumped
    # is unknown, so the general cause stands.
    unknown = Marker(90, 3, 5, "COMMIT", T0 - 1_000, closed_epoch=None)
    v = run(view=mapped(rec(state="CompleteCommit", partitions=())), t=txn(first_epoch=3, prev_marker=unknown))
    assert (v.status, v.cause) == ("hanging", "coordinator-finished-without-partition")


# --- revision 3: the "Prepare* marker landed" timestamp rule is withdrawn -----------------------------

PREP_TS = T0 + 5_000  # TransactionLastUpdateTimestampMs of the PrepareCommit record


@pytest.mark.parametrize("state,kind", [("PrepareCommit", "COMMIT"), ("PrepareAbort", "ABORT")])
@pytest.mark.parametrize("skew_ms", [-41, 0, 20, 3_600_000])
def test_prepare_naming_tp_stays_markers_pending_whatever_the_marker_timestamps(state, kind, skew_ms):
    # detection.md §3.1 revision 3: under TV0/1 the previous transaction's marker has the same
    # producer id, epoch and result as C's (TransactionMarkerChannelManager.addTxnMarkersToSend
    # uses txnMetadata.producerEpoch); only two brokers' clocks told them apart, so a Prepare* record
    # naming tp keeps O late: the coordinator's marker will close whatever is open
    # (ProducerAppendInfo.appendEndTxnMarker).
    landed = Marker(offset=95, producer_epoch=3, coordinator_epoch=6, kind=kind, timestamp=PREP_TS + skew_ms,
                    closed_epoch=3)
    t = txn(first_offset=100, first_epoch=3, prev_marker=landed)
    v = run(view=mapped(rec(state=state, last_update_ts=PREP_TS)), t=t, ev=EpochEvidence(last_marker=landed))
    assert (v.status, v.cause, v.verified) == ("late", "markers-pending", True)
    # late findings carry the epoch, informational (§4)
    assert (v.coordinator_epoch, v.coordinator_epoch_source) == (6, "last-marker")


# --- §4 coordinator epoch sources, first rule that applies ----------------------------------------

def ce(ev, view=UNMAPPED_PARTIAL, t=None):
    c = coordinator_epoch_for(t or txn(), view, ev)
    return c.epoch, c.source


def test_describe_producers_is_exact_and_wins():
    dp = DescribeProducersAnswer(found=True, producer_epoch=4, coordinator_epoch=9, current_txn_start_offset=100)
    assert ce(dataclasses.replace(EV, describe_producers=dp)) == (9, "describe-producers")
    dp_none = DescribeProducersAnswer(found=True, producer_epoch=4, coordinator_epoch=-1, current_txn_start_offset=100)
    assert ce(EpochEvidence(describe_producers=dp_none)) == (0, "describe-producers")
    # the legacy E is the leader's current epoch for the producer
    v = run(ev=dataclasses.replace(EV, describe_producers=dp))
    assert (v.producer_epoch, v.coordinator_epoch, v.blocked) == (4, 9, None)


@pytest.mark.parametrize("dp,seen", [
    (DescribeProducersAnswer(True, 3, 9, 150), "CurrentTxnStartOffset 150"),
    (DescribeProducersAnswer(True, 3, 9, -1), "CurrentTxnStartOffset -1"),
    (DescribeProducersAnswer(False), "no entry for the producer"),
])
def test_describe_producers_mismatch_blocks_the_finding(dp, seen):
    v = run(ev=dataclasses.replace(EV, describe_producers=dp))
    assert (v.coordinator_epoch, v.coordinator_epoch_source) == (None, None)
    assert v.blocked == (f"DescribeProducers on orders-0's leader reports {seen} for producer 42, not first "
                         "offset 100: re-read orders-0 before emitting this finding")


def test_last_marker():
    assert ce(EpochEvidence(last_marker=M5, read_from_zero=True, producer_max_marker_epoch=8)) == (5, "last-marker")


def test_last_marker_at_or_after_snapshot_offset_counts():
    snap = SnapshotSeed(offset=90, present=True, coordinator_epoch=2)
    assert ce(EpochEvidence(last_marker=M5, snapshot=snap)) == (5, "last-marker")  # M5 at offset 90


def test_marker_below_snapshot_offset_is_not_last_marker():
    snap = SnapshotSeed(offset=91, present=True, coordinator_epoch=2)
    assert ce(EpochEvidence(last_marker=M5, snapshot=snap, producer_max_marker_epoch=5)) == (2, "snapshot")


def test_snapshot_entry_minus_one_is_zero_and_absent_producer_is_zero():
    assert ce(EpochEvidence(snapshot=SnapshotSeed(80, True, -1))) == (0, "snapshot")
    assert ce(EpochEvidence(snapshot=SnapshotSeed(80, True, 6))) == (6, "snapshot")
    assert ce(EpochEvidence(snapshot=SnapshotSeed(80, False), producer_max_marker_epoch=9)) == (0, "snapshot")


def test_empty_marker_after_snapshot_disables_snapshot_and_last_marker():
    empty = Marker(95, 3, None, None, T0)
    ev = EpochEvidence(last_marker=empty, snapshot=SnapshotSeed(80, True, 6), read_from_zero=True,
                       producer_max_marker_epoch=4)
    assert ce(ev) == (4, "producer-last-marker")


def test_log_start_only_from_offset_zero_without_any_marker():
    assert ce(EpochEvidence(read_from_zero=True, producer_max_marker_epoch=7)) == (0, "log-start")
    # read from a log start above 0: P's marker may have been deleted
    assert ce(EpochEvidence(read_from_zero=False, producer_max_marker_epoch=7))[1] == "producer-last-marker"
    assert ce(EpochEvidence(read_from_zero=False)) == (None, "unknown")
    # an empty control batch (cleaner) proves a marker existed: 0 might be too low
    empty = Marker(95, 3, None, None, T0)
    assert ce(EpochEvidence(last_marker=empty, read_from_zero=True)) == (None, "unknown")


def test_producer_last_marker_and_its_fenced_advice():
    c = coordinator_epoch_for(txn(), UNMAPPED_PARTIAL, EpochEvidence(producer_max_marker_epoch=7))
    assert (c.epoch, c.source) == (7, "producer-last-marker")
    assert c.hint == ("coordinator epoch 7 is the highest among producer 42's markers on the partitions read and "
                      "may be below what orders-0's leader holds: if the abort is rejected with "
                      "TRANSACTION_COORDINATOR_FENCED (error 52), provide orders-0's newest producer snapshot or "
                      "read orders-0 from its log start for the exact epoch; never raise the number by guessing")


def test_producer_last_marker_comes_before_all_coordinators_max():
    assert ce(EpochEvidence(producer_max_marker_epoch=3), view=UNMAPPED_COMPLETE) == (3, "producer-last-marker")


def test_all_coordinators_max_only_with_complete_view_and_no_mapping():
    assert ce(EpochEvidence(), view=UNMAPPED_COMPLETE) == (13, "all-coordinators-max")
    partial = dataclasses.replace(UNMAPPED_PARTIAL, all_coordinators_max=13)
    assert ce(EpochEvidence(), view=partial) == (None, "unknown")
    # complete, but a coordinator maps P: its future markers could be fenced by a higher number
    owned = mapped(rec(state="CompleteCommit", partitions=()), partition_count=50, read_partitions=ALL50,
                   all_coordinators_max=13)
    assert ce(EpochEvidence(), view=owned) == (None, "unknown")
    # tombstoned: no coordinator maps P any more
    gone = mapped(None, partition_count=50, read_partitions=ALL50, all_coordinators_max=13)
    assert ce(EpochEvidence(), view=gone) == (13, "all-coordinators-max")
    # complete but not current (lagging): never
    lag = dataclasses.replace(UNMAPPED_COMPLETE, current=False)
    assert ce(EpochEvidence(), view=lag) == (None, "unknown")


def test_unknown_names_the_inputs_that_would_give_it():
    v = run(view=UNMAPPED_PARTIAL, ev=EpochEvidence())
    assert (v.coordinator_epoch, v.coordinator_epoch_source) == (None, "unknown")
    assert v.epoch_hint == ("coordinator epoch of producer 42 on orders-0 unknown, no legacy command: provide "
                            "orders-0's newest producer snapshot (.snapshot file or its kafka-dump-log.sh dump), or "
                            "read orders-0 from its log start so the producer's last marker there is found")


def test_epoch_sources_vocabulary():
    assert EPOCH_SOURCES == ("describe-producers", "last-marker", "snapshot", "log-start", "producer-last-marker",
                             "all-coordinators-max", "unknown")
    with open("streaming/alert.schema.json") as f:
        schema = json.load(f)
    assert schema["properties"]["coordinator_epoch_source"]["enum"] == [None, *EPOCH_SOURCES]


# --- two callers, one function ---------------------------------------------------------------------

def test_enrichment_round_trip_and_global_facts():
    t = txn(prev_marker=M5)
    state_view = CoordinatorView(current=True)  # the per-producer call: P unmapped, globals unknown
    ev = EpochEvidence(last_marker=Marker(90, 3, None, None, T0), read_from_zero=False)
    first = judge(t, state_view, ev, now_ms=LATE, thresholds=TH)
    assert (first.status, first.cause, first.verified, first.coordinator_epoch_source) == (
        "hanging", "exceeds-max-timeout", False, "unknown")
    row = json.loads(json.dumps({"txn": to_dict(t), "view": to_dict(state_view), "ev": to_dict(ev)}))
    t2, v2, ev2 = txn_from_dict(row["txn"]), view_from_dict(row["view"]), evidence_from_dict(row["ev"])
    assert (t2, v2, ev2) == (t, state_view, ev)
    enriched = dataclasses.replace(v2, partition_count=50, read_partitions=ALL50, all_coordinators_max=13)
    second = judge(t2, enriched, ev2, now_ms=LATE, thresholds=TH)
    assert (second.status, second.cause, second.verified) == ("hanging", "coordinator-unaware", True)
    assert (second.coordinator_epoch, second.coordinator_epoch_source) == (13, "all-coordinators-max")


def test_view_round_trip_with_record():
    v = mapped(rec(state="PrepareAbort", partitions=("orders-0", "b-1")), partition_count=50,
               read_partitions=frozenset({12}), all_coordinators_max=4)
    assert view_from_dict(json.loads(json.dumps(to_dict(v)))) == v


# --- properties over evidence combinations ---------------------------------------------------------

RECORDS = [None, rec(state="Ongoing", start_ts=LATE - 1_000), rec(state="Ongoing"), rec(state="PrepareCommit"),
           rec(state="PrepareAbort", epoch=4), rec(state="CompleteCommit", partitions=()),
           rec(state="Empty", partitions=None)]
READS = [None, frozenset(), frozenset({12}), ALL50 - {7}, ALL50]
MARKERS = [None, M5, Marker(95, 3, None, None, T0), Marker(95, 3, 6, "COMMIT", T0 + 10_000),
           Marker(95, 4, 6, "ABORT", T0 + 10_000)]
SNAPS = [None, SnapshotSeed(92, True, 2), SnapshotSeed(80, False)]
DPS = [None, DescribeProducersAnswer(True, 3, 11, 100), DescribeProducersAnswer(True, 3, 11, 7)]
PLANTED = 99  # all_coordinators_max: only ever usable through that rule


def views():
    for current, is_mapped, r, read, n, amax in itertools.product(
            [True, False], [True, False], RECORDS, READS, [50, None], [None, PLANTED]):
        if r is not None and not is_mapped:
            continue
        yield CoordinatorView(current=current, mapped=is_mapped, record=r, txn_partition=12 if is_mapped else None,
                              partition_count=n, read_partitions=read, all_coordinators_max=amax)


def evidences():
    for lm, snap, zero, pm, dp in itertools.product(MARKERS, SNAPS, [True, False], [None, 1], DPS):
        yield EpochEvidence(describe_producers=dp, last_marker=lm, snapshot=snap, read_from_zero=zero,
                            producer_max_marker_epoch=pm)


def test_properties_over_evidence_combinations():
    count = 0
    for view in views():
        complete = (view.current and view.partition_count == 50 and view.read_partitions == ALL50)
        unmapped = view.record is None and not view.mapped
        for ev in evidences():
            for pm in (None, M5):
                t = txn(prev_marker=pm)
                v = judge(t, view, ev, now_ms=LATE, thresholds=TH)
                count += 1
                assert v.coordinator_epoch_source in (None, *EPOCH_SOURCES)
                assert v.coordinator_epoch_source != "coordinator-partition"
                if unmapped and not complete:
                    assert not v.verified and v.cause == "exceeds-max-timeout", (view, ev)
                if v.cause == "coordinator-unaware":
                    assert view.current and (view.mapped or complete)
                if v.coordinator_epoch == PLANTED:
                    assert v.coordinator_epoch_source == "all-coordinators-max"
                if v.coordinator_epoch_source == "all-coordinators-max":
                    assert complete and view.record is None and ev.producer_max_marker_epoch is None
                if ev.describe_producers is not None and ev.describe_producers.current_txn_start_offset != 100:
                    assert v.blocked and v.coordinator_epoch is None
                if v.coordinator_epoch_source == "unknown":
                    assert v.coordinator_epoch is None and v.epoch_hint
                # §0: verified iff no reason names a missing proof
                assert v.verified == (not v.unverified_reasons), (view, v)
                # global facts added by the enrichment never turn late into hanging or back, as long
                # as P's own coordinator partition stays read
                if view.read_partitions is not None and (view.txn_partition is None or 12 in view.read_partitions):
                    bare = dataclasses.replace(view, partition_count=None, read_partitions=None,
                                               all_coordinators_max=None)
                    assert judge(t, bare, dataclasses.replace(ev, describe_producers=None), now_ms=LATE,
                                 thresholds=TH).status == v.status
    assert count == 2 * sum(1 for _ in views()) * sum(1 for _ in evidences())


# --- abort commands (alerts.py helper used by every hanging alert) ---------------------------------

def test_commands_are_shell_safe():
    new, legacy = abort_commands(topic="we'ird $(rm -rf) topic", partition=3, first_offset=7, producer_id=1,
                                 producer_epoch=2, coordinator_epoch=0, cfg=AlertConfig("a:1,b:2"))
    argv = shlex.split(new)
    assert argv[:4] == ["kafka-transactions.sh", "--bootstrap-server", "a:1,b:2", "abort"]
    assert argv[argv.index("--topic") + 1] == "we'ird $(rm -rf) topic"
    assert shlex.split(legacy)[-6:] == ["--producer-id", "1", "--producer-epoch", "2", "--coordinator-epoch", "0"]
    assert shell_quote("a") == "'a'"


# --- §3 / §3.1 two-phase commit (KIP-939, revision 3.1) ----------------------------------------------

MAX_INT = 2_147_483_647  # Integer.MAX_VALUE: TransactionMetadata.isDistributedTwoPhaseCommitTxn


def test_two_phase_commit_threshold_is_max_timeout_plus_padding_not_its_timeout():
    # detection.md §3: threshold = max_timeout_ms + padding_ms for a 2PC transaction (what the
    # broker's PartitionsWithLateTransactionsCount counts), not Integer.MAX_VALUE + padding.
    assert threshold_for(TH, rec(timeout_ms=MAX_INT)) == 1_200_000
    assert run(now=T0 + 1_200_000, view=mapped(rec(timeout_ms=MAX_INT))).status == "open"


@pytest.mark.parametrize("age_ms", [1_200_001, 30 * 24 * 3600 * 1000])
def test_two_phase_commit_owning_tp_is_late_prepared_2pc_at_any_age(age_ms):
    # TransactionStateManager.timedOutTransactions skips isDistributedTwoPhaseCommitTxn: the
    # coordinator never aborts it; the external manager decides. Never hanging (§5), no command.
    two_pc = rec(state="Ongoing", timeout_ms=MAX_INT, start_ts=T0)
    v = run(now=T0 + age_ms, view=mapped(two_pc))
    assert (v.status, v.cause, v.verified, v.threshold_ms) == ("late", "prepared-2pc", True, 1_200_000)


def test_two_phase_commit_prepare_is_markers_pending_and_finished_is_hanging():
    # PrepareCommit: the external manager decided, Kafka writes the markers (markers-pending, late).
    v = run(view=mapped(rec(state="PrepareCommit", timeout_ms=MAX_INT)))
    assert (v.status, v.cause) == ("late", "markers-pending")
    # The 2PC transaction completed without tp: O is not that transaction; nothing closes it.
    v = run(view=mapped(rec(state="CompleteCommit", partitions=(), timeout_ms=MAX_INT)))
    assert (v.status, v.cause, v.threshold_ms) == ("hanging", "coordinator-finished-without-partition", 1_200_000)


# --- §3.1 coordinator-stuck when the dump does not print the start (3.0-4.0 text) ------------------

def test_coordinator_stuck_without_written_start_needs_the_previous_complete_record():
    # Text dumps before 4.1 print only txnLastUpdateTimestamp. TransactionMetadata sets
    # txnStartTimestamp on the move to Ongoing, after the id's previous CompleteCommit: that record's
    # time bounds the start below; the first Ongoing record after it bounds it above.
    timeout = 60_000
    now = T0 + 3_600_000
    # previous Complete at T0 - 1 h, first Ongoing seen at T0: started in [T0 - 1 h, T0], 1 h ago
    # at least -> past timeout + padding (360 s): stuck (TransactionStateManager.timedOutTransactions)
    bounded = dataclasses.replace(rec(state="Ongoing", timeout_ms=timeout, start_ts=T0), start_exact=False,
                                  prev_final_ts=T0 - 3_600_000)
    v = run(now=now, view=mapped(bounded))
    assert (v.status, v.cause) == ("late", "coordinator-stuck")
    # no previous Complete*/Empty record read: the Ongoing records may span two transactions whose
    # end records are missing, so the start is not bounded and the long transaction is not "stuck"
    unbounded = dataclasses.replace(bounded, prev_final_ts=-1)
    v = run(now=now, view=mapped(unbounded))
    assert (v.status, v.cause) == ("late", "long-transaction")
    # the previous Complete is recent: the current transaction cannot be older than it
    recent = dataclasses.replace(bounded, prev_final_ts=now - 100_000, start_ts=now - 90_000)
    v = run(now=now, view=mapped(recent))
    assert (v.status, v.cause) == ("late", "long-transaction")


# --- §0 / §3.1 the coordinator's own word: DescribeTransactions (3.0+) ---------------------------------

def _dt(state="Ongoing", partitions=("orders-0",), pid=42, timeout_ms=60_000, start_ts=T0, found=True):
    return DescribedTransaction(found=found, state=state if found else None, producer_id=pid if found else -1,
                                producer_epoch=3, partitions=partitions, timeout_ms=timeout_ms, start_ts=start_ts)


def test_describe_transactions_prepare_without_tp_is_hanging_verified_by_the_broker():
    # The log still shows PrepareCommit listing orders-0; the coordinator's current set no longer
    # holds it: TransactionMarkerRequestCompletionHandler removed it once the marker was written.
    # FindHangingTransactionsCommand.filterHangingTransactions: tp absent -> hanging.
    marker = Marker(95, 3, 6, "COMMIT", T0 + 20, closed_epoch=3)
    log_view = mapped(rec(state="PrepareCommit"))
    v = run(view=dataclasses.replace(log_view, described=_dt("PrepareCommit", ("orders-1",))),
            t=txn(prev_marker=marker), ev=EpochEvidence(last_marker=marker))
    assert (v.status, v.cause, v.verified) == ("hanging", "write-after-marker", True)
    # still pending on tp: late, whatever the log says
    v = run(view=dataclasses.replace(mapped(rec(state="CompleteCommit", partitions=())),
                                     described=_dt("PrepareCommit", ("orders-0",))))
    assert (v.status, v.cause) == ("late", "markers-pending")


@pytest.mark.parametrize("dt", [_dt("CompleteCommit", ()), _dt("Empty", ())])
def test_describe_transactions_complete_or_empty_is_hanging(dt):
    v = run(view=dataclasses.replace(mapped(rec(state="PrepareAbort")), described=dt))
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-finished-without-partition", True)


@pytest.mark.parametrize("dt", [_dt(found=False), _dt(pid=77)])
def test_describe_transactions_unknown_id_or_other_producer_is_coordinator_unaware(dt):
    # TRANSACTIONAL_ID_NOT_FOUND (the tool's description == null), or the id now maps another
    # producer id: no coordinator will write P's marker.
    v = run(view=dataclasses.replace(mapped(rec(state="Ongoing")), described=dt))
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-unaware", True)


def test_describe_transactions_ongoing_uses_the_brokers_start_and_overrides_lagging_copies():
    stuck = dataclasses.replace(mapped(rec(state="Ongoing", start_ts=-1)), described=_dt(start_ts=T0),
                                newest_ts=((12, T0 - 1),), partition_count=50, read_partitions=frozenset({12}))
    v = run(view=stuck)
    # the copy of partition 12 is behind O's first write, but the broker answered: no copy reason
    assert (v.status, v.cause, v.verified, v.unverified_reasons) == ("late", "coordinator-stuck", True, ())
    two_pc = dataclasses.replace(mapped(rec()), described=_dt(timeout_ms=MAX_INT))
    assert run(view=two_pc).cause == "prepared-2pc"


# --- §0 unverified_reasons: one test per reason ------------------------------------------------------

END = PartitionProof(end_proven=True)


def reasons(view=UNMAPPED_COMPLETE, proof=END, t=None, now=LATE, ev=EV):
    v = judge(t or txn(), view, ev, now_ms=now, thresholds=TH, proof=proof)
    assert v.verified == (not v.unverified_reasons)
    return v


def test_verified_when_every_proof_is_there():
    v = reasons()
    assert (v.cause, v.verified, v.unverified_reasons) == ("coordinator-unaware", True, ())


def test_reason_newest_segment_not_proven():
    # explicit files without the broker's offset checkpoints: tp may continue past what was read
    v = reasons(proof=PartitionProof(end_proven=False))
    assert (v.status, v.cause, v.verified, v.unverified_reasons) == (
        "hanging", "coordinator-unaware", False, ("newest-segment-not-proven",))


def test_reason_coordinator_view_incomplete():
    v = reasons(view=UNMAPPED_PARTIAL)
    assert (v.cause, v.unverified_reasons) == ("exceeds-max-timeout", ("coordinator-view-incomplete",))


def test_reason_no_coordinator_input():
    v = reasons(view=NO_SOURCE)
    assert (v.cause, v.unverified_reasons) == ("exceeds-max-timeout", ("no-coordinator-input",))


def test_reason_coordinator_copy_empty_and_rule_6_withheld():
    # detection.md §0 rev 3.1: an empty copy has no newest record and cannot show it is current;
    # coordinator-unaware over it is unverified and all-coordinators-max does not apply.
    view = dataclasses.replace(UNMAPPED_COMPLETE, empty_partitions=frozenset({7}),
                               newest_ts=tuple((p, LATE) for p in range(50) if p != 7))
    v = reasons(view=view, ev=EpochEvidence())
    assert (v.cause, v.verified, v.unverified_reasons) == ("coordinator-unaware", False, ("coordinator-copy-empty",))
    assert (v.coordinator_epoch, v.coordinator_epoch_source) == (None, "unknown")
    # the broker proved the copies current (ListOffsets end offsets = the copies' ends): rule 6 again
    current = dataclasses.replace(view, copies_current=True)
    v = reasons(view=current, ev=EpochEvidence())
    assert (v.verified, v.coordinator_epoch, v.coordinator_epoch_source) == (True, 13, "all-coordinators-max")


def test_reason_coordinator_copy_behind():
    # P's own partition 12 holds CompleteCommit, but its newest record predates O's first write:
    # a lagging replica may miss the record that added orders-0 (a clock only takes proof away)
    view = mapped(rec(state="CompleteCommit", partitions=()), partition_count=50, read_partitions=ALL50,
                  newest_ts=((12, T0 - 1),))
    v = reasons(view=view)
    assert (v.status, v.cause, v.verified, v.unverified_reasons) == (
        "hanging", "coordinator-finished-without-partition", False, ("coordinator-copy-behind",))
    # a newest record at or after O's first write: current as far as the input can tell
    v = reasons(view=dataclasses.replace(view, newest_ts=((12, T0),)))
    assert v.verified


def test_reason_crc_gap_on_tp_or_on_the_covering_coordinator_copy():
    v = reasons(proof=PartitionProof(end_proven=True, crc_gaps=(57,)))
    assert (v.verified, v.unverified_reasons) == (False, ("crc-gap",))
    # a gap in P's __transaction_state partition makes it incomplete from there: not read
    view = mapped(rec(state="CompleteCommit", partitions=()), partition_count=50, read_partitions=ALL50 - {12},
                  gap_partitions=frozenset({12}))
    v = reasons(view=view)
    assert (v.cause, v.verified, v.unverified_reasons) == (
        "exceeds-max-timeout", False, ("crc-gap", "coordinator-view-incomplete"))


def test_reason_clock_skew():
    v = reasons(proof=PartitionProof(end_proven=True, clock_skew=True))
    assert (v.verified, v.clock_skew, v.unverified_reasons) == (False, True, ("clock-skew",))


def test_reason_start_offset_not_proven():
    v = reasons(proof=PartitionProof(end_proven=True, start_proven=False))
    assert (v.verified, v.unverified_reasons) == (False, ("start-offset-not-proven",))


def test_every_reason_is_in_the_vocabulary_and_documented():
    from streaming.vocab import UNVERIFIED_REASONS

    with open("docs/alerts.md") as f:
        doc = f.read()
    with open("streaming/alert.schema.json") as f:
        schema = json.load(f)
    assert schema["properties"]["unverified_reasons"]["items"]["enum"] == list(UNVERIFIED_REASONS)
    for r in UNVERIFIED_REASONS:
        assert f"`{r}`" in doc, r


# --- property: giving less input never turns an unverified finding verified -------------------------

def test_fewer_coordinator_partitions_or_less_proof_never_verify_more():
    import random

    rnd = random.Random(19)
    records = [None, rec(state="CompleteCommit", partitions=()), rec(state="Ongoing"), rec(state="PrepareCommit")]
    for _ in range(3000):
        r = rnd.choice(records)
        full_read = frozenset(p for p in range(8) if rnd.random() < 0.85)
        empty = frozenset(p for p in full_read if rnd.random() < 0.1)
        newest = tuple((p, rnd.choice((T0 - 5, T0, LATE))) for p in full_read if p not in empty)
        proof = PartitionProof(end_proven=rnd.random() < 0.8, crc_gaps=(5,) if rnd.random() < 0.1 else ())
        big = CoordinatorView(current=True, mapped=r is not None or rnd.random() < 0.2, record=r,
                              txn_partition=3 if r is not None else None, partition_count=8,
                              read_partitions=full_read, all_coordinators_max=9, empty_partitions=empty,
                              newest_ts=newest, copies_current=rnd.random() < 0.2)
        if big.mapped and r is None:
            big = dataclasses.replace(big, txn_partition=3)
        drop = frozenset(p for p in full_read if rnd.random() < 0.3)
        small = dataclasses.replace(big, read_partitions=full_read - drop, copies_current=False)
        less = PartitionProof(end_proven=proof.end_proven and rnd.random() < 0.7, crc_gaps=proof.crc_gaps)
        vb = judge(txn(), big, EV, now_ms=LATE, thresholds=TH, proof=proof)
        vs = judge(txn(), small, EV, now_ms=LATE, thresholds=TH, proof=less)
        if not vb.verified:
            assert not vs.verified, (big, small)
        if vs.coordinator_epoch_source == "all-coordinators-max":
            assert vb.coordinator_epoch_source == "all-coordinators-max"


def test_rule_6_needs_every_copy_current_not_only_every_partition_read():
    # revision 3: an epoch of 9 from a view only assumed complete fenced a coordinator using 2.
    # Nothing maps P, so every partition should cover it; partition 30's copy ends before O began.
    behind = dataclasses.replace(UNMAPPED_COMPLETE, newest_ts=tuple((p, T0 - 1 if p == 30 else LATE)
                                                                     for p in range(50)))
    v = reasons(view=behind, ev=EpochEvidence())
    assert (v.cause, v.verified, v.unverified_reasons) == ("coordinator-unaware", False, ("coordinator-copy-behind",))
    assert (v.coordinator_epoch, v.coordinator_epoch_source) == (None, "unknown")
    # every copy at or after O's first write: rule 6 applies (highest partitionLeaderEpoch, 13)
    current = dataclasses.replace(UNMAPPED_COMPLETE, newest_ts=tuple((p, T0) for p in range(50)))
    v = reasons(view=current, ev=EpochEvidence())
    assert (v.verified, v.coordinator_epoch, v.coordinator_epoch_source) == (True, 13, "all-coordinators-max")
