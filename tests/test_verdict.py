"""Every branch of spec/detection.md §3 and every coordinator-epoch source of §4."""

from __future__ import annotations

import pytest

from streaming.alerts import AlertConfig, abort_commands, finalize, shell_quote
from streaming.verdict import (
    CoordinatorView,
    EpochEvidence,
    OpenTxn,
    Thresholds,
    coordinator_epoch_for,
    judge,
    threshold_for,
)

T0 = 1_700_000_000_000
TH = Thresholds()  # 15 min + 5 min
THRESHOLD = 1_200_000


def txn(first_ts=T0, last_ts=None, follows_marker=False, epoch=3):
    return OpenTxn("orders", 0, 42, 100, 120, first_ts, last_ts if last_ts is not None else first_ts + 10, epoch,
                   follows_marker)


def coord(state="Ongoing", partitions=("orders-0",), timeout_ms=60_000, start_ts=T0, pid=42, ple=7):
    return CoordinatorView("app-1", state, pid, 3, partitions, timeout_ms, start_ts, ple)


def run(now, c=None, available=True, t=None, ev=None, th=TH):
    return judge(t or txn(), c, coordinator_available=available, now_ms=now, thresholds=th,
                 evidence=ev or EpochEvidence(last_marker_epoch=5, had_marker=True))


def test_threshold_is_max_of_broker_and_producer_timeout_plus_padding():
    assert threshold_for(TH, None) == THRESHOLD
    assert threshold_for(TH, coord(timeout_ms=3_600_000)) == 3_600_000 + 300_000
    assert threshold_for(Thresholds(60_000, 0), coord(timeout_ms=1_000)) == 60_000


def test_open_until_strictly_past_threshold():
    assert run(T0 + THRESHOLD, None).status == "open"
    v = run(T0 + THRESHOLD + 1, None)
    assert v.status == "hanging" and v.cause == "coordinator-unaware"


def test_age_is_measured_from_first_write_not_last():
    # a zombie that keeps appending (last write 1 s ago) is still caught
    v = run(T0 + THRESHOLD + 1, None, t=txn(last_ts=T0 + THRESHOLD))
    assert v.status == "hanging" and v.idle_ms == 1 and v.open_ms == THRESHOLD + 1


def test_coordinator_unaware_when_no_record_maps_to_pid():
    v = run(T0 + 2 * THRESHOLD, None)
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-unaware", True)
    assert (v.producer_epoch, v.coordinator_epoch, v.coordinator_epoch_source) == (3, 5, "last-marker")


@pytest.mark.parametrize("state", ["PrepareCommit", "PrepareAbort"])
def test_markers_pending_is_late(state):
    v = run(T0 + 2 * THRESHOLD, coord(state=state))
    assert (v.status, v.cause) == ("late", "markers-pending")
    assert v.coordinator_epoch is None and v.coordinator_epoch_source is None  # never a command for late


def test_ongoing_coordinator_stuck_vs_long_transaction():
    now = T0 + 2 * THRESHOLD
    stuck = run(now, coord(state="Ongoing", timeout_ms=60_000, start_ts=T0))
    assert (stuck.status, stuck.cause) == ("late", "coordinator-stuck")
    # a producer with a long transaction.timeout.ms: its coordinator has not timed it out yet
    long_ = run(now, coord(state="Ongoing", timeout_ms=3 * THRESHOLD, start_ts=T0),
                t=txn(first_ts=now - 3 * THRESHOLD - 300_001 + 1))
    assert long_.status == "open"
    # the coordinator's current transaction started recently and lists the partition: the old
    # open data joined it (markers close whatever is open), so its marker will close it
    long_ = run(now, coord(state="Ongoing", timeout_ms=60_000, start_ts=now - 1_000))
    assert (long_.status, long_.cause) == ("late", "long-transaction")


@pytest.mark.parametrize("state", ["Empty", "CompleteCommit", "CompleteAbort"])
def test_coordinator_finished_without_partition(state):
    v = run(T0 + 2 * THRESHOLD, coord(state=state, partitions=() if state != "Empty" else None))
    assert (v.status, v.cause, v.verified) == ("hanging", "coordinator-finished-without-partition", True)


def test_ongoing_without_this_partition_is_hanging():
    v = run(T0 + 2 * THRESHOLD, coord(state="Ongoing", partitions=("orders-1", "other-0")))
    assert (v.status, v.cause) == ("hanging", "coordinator-finished-without-partition")


def test_write_after_marker_refinement():
    v = run(T0 + 2 * THRESHOLD, coord(state="CompleteCommit", partitions=()), t=txn(follows_marker=True))
    assert (v.status, v.cause) == ("hanging", "write-after-marker")


def test_no_coordinator_view_is_unverified_exceeds_max_timeout():
    v = run(T0 + 2 * THRESHOLD, None, available=False)
    assert (v.status, v.cause, v.verified) == ("hanging", "exceeds-max-timeout", False)
    # without a coordinator view the producer's own timeout is unknown: broker maximum applies
    assert v.threshold_ms == THRESHOLD


def test_clock_skew_clamped_and_flagged():
    v = run(T0 - 5, None, t=txn(first_ts=T0, last_ts=T0 + 10))
    assert v.status == "open" and v.open_ms == 0 and v.idle_ms == 0 and v.clock_skew


# --- §4 coordinator epoch sources, first rule that applies ---------------------------------------

def test_source_last_marker_wins():
    ev = EpochEvidence(last_marker_epoch=9, had_marker=True, read_from_log_start=True, snapshot_epoch=2)
    assert coordinator_epoch_for(ev, coord(ple=11), True) == (9, "last-marker")


def test_source_log_start_when_no_marker_ever():
    ev = EpochEvidence(read_from_log_start=True, snapshot_epoch=2)
    assert coordinator_epoch_for(ev, coord(ple=11), True) == (0, "log-start")


def test_log_start_not_used_when_a_marker_of_unknown_epoch_exists():
    # an empty control batch (cleaner) proves a marker existed: 0 might be too low
    ev = EpochEvidence(had_marker=True, read_from_log_start=True, snapshot_epoch=-1)
    assert coordinator_epoch_for(ev, coord(ple=11), True) == (0, "snapshot")


def test_source_snapshot_maps_minus_one_to_zero():
    assert coordinator_epoch_for(EpochEvidence(snapshot_epoch=-1), None, False) == (0, "snapshot")
    assert coordinator_epoch_for(EpochEvidence(snapshot_epoch=6), None, False) == (6, "snapshot")


def test_source_coordinator_partition():
    assert coordinator_epoch_for(EpochEvidence(), coord(ple=11), True) == (11, "coordinator-partition")


def test_source_all_coordinators_max_and_pending():
    ev = EpochEvidence(all_coordinators_max=13)
    assert coordinator_epoch_for(ev, None, True) == (13, "all-coordinators-max")
    assert coordinator_epoch_for(EpochEvidence(), None, True) == (None, "all-coordinators-max")


def test_source_unknown_without_any_evidence():
    assert coordinator_epoch_for(EpochEvidence(), None, False) == (None, "unknown")


def test_finalize_fills_all_coordinators_max_or_downgrades_to_unknown():
    raw = dict(key="c/orders/0/42/100", status="hanging", cause="coordinator-unaware", verified=True, cluster="c",
               topic="orders", partition=0, producer_id=42, producer_epoch=3, first_offset=100, last_offset=120,
               first_ts=T0, last_ts=T0, now_ms=T0 + 2 * THRESHOLD, coordinator_epoch=None,
               coordinator_epoch_source="all-coordinators-max")
    a = finalize(raw, {"lso": 100, "high_watermark": 500, "log_start_offset": 0}, 17, AlertConfig("k1:9092"))
    assert a["coordinator_epoch"] == 17 and a["coordinator_epoch_source"] == "all-coordinators-max"
    assert a["abort_command_legacy"].endswith("--producer-id 42 --producer-epoch 3 --coordinator-epoch 17")
    assert a["pins_lso"] is True and a["data_deleted"] is False
    b = finalize(raw, None, None, AlertConfig())
    assert b["coordinator_epoch_source"] == "unknown" and b["abort_command_legacy"] is None
    assert b["abort_command_new"] == ("kafka-transactions.sh --bootstrap-server <bootstrap> abort --topic 'orders' "
                                      "--partition 0 --start-offset 100")
    assert b["lso"] is None and b["pins_lso"] is None
    c = finalize(raw, {"lso": 90, "log_start_offset": 150}, 17, AlertConfig())
    assert c["data_deleted"] is True and c["pins_lso"] is False


def test_late_alert_never_has_commands():
    raw = dict(key="k", status="late", cause="markers-pending", verified=True, cluster="c", topic="t",
               partition=1, producer_id=1, producer_epoch=0, first_offset=5, coordinator_epoch=4,
               coordinator_epoch_source="last-marker")
    a = finalize(raw, None, 9, AlertConfig("b:1"))
    assert a["abort_command_new"] is None and a["abort_command_legacy"] is None
    assert a["required_permission"] is None and a["coordinator_epoch"] is None


def test_commands_are_shell_safe():
    new, legacy = abort_commands(topic="we'ird $(rm -rf) topic", partition=3, first_offset=7, producer_id=1,
                                 producer_epoch=2, coordinator_epoch=0, cfg=AlertConfig("a:1,b:2"))
    import shlex

    argv = shlex.split(new)
    assert argv[:4] == ["kafka-transactions.sh", "--bootstrap-server", "a:1,b:2", "abort"]
    assert argv[argv.index("--topic") + 1] == "we'ird $(rm -rf) topic"
    assert shlex.split(legacy)[-6:] == ["--producer-id", "1", "--producer-epoch", "2", "--coordinator-epoch", "0"]
    assert shell_quote("a") == "'a'"


def test_coordinator_partition_epoch_is_the_partitions_highest_at_enrichment():
    raw = dict(key="c/orders/0/42/100", status="hanging", cause="coordinator-finished-without-partition",
               verified=True, cluster="c", topic="orders", partition=0, producer_id=42, producer_epoch=3,
               first_offset=100, coordinator_epoch=5, coordinator_epoch_source="coordinator-partition",
               txn_partition=12)
    # another transactional id's record showed the coordinator moved to leader epoch 8 since
    a = finalize(raw, None, 9, AlertConfig(), coord_epochs={"__transaction_state-12": 8, "__transaction_state-3": 9})
    assert (a["coordinator_epoch"], a["coordinator_epoch_source"]) == (8, "coordinator-partition")
    assert a["abort_command_legacy"].endswith("--coordinator-epoch 8")
    # never lower than what the producer's own records showed
    b = finalize(raw, None, 9, AlertConfig(), coord_epochs={"__transaction_state-12": 4})
    assert b["coordinator_epoch"] == 5
