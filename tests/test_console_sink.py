"""The console sink prints why a finding is not verified and, for late findings, what to do instead of
an abort (issue 19: unverified_reasons and the prepared-2pc remedy reach the operator's terminal)."""

from __future__ import annotations

import io

from streaming.alerts import AlertConfig, finalize
from streaming.sinks.console import ConsoleSink, format_table


def _row(status, cause, **kw):
    row = {"key": "c/orders/0/7/3", "status": status, "cause": cause, "verified": True, "cluster": "c",
           "topic": "orders", "partition": 0, "producer_id": 7, "producer_epoch": 1, "first_offset": 3,
           "transactional_id": "xa-1", "coordinator_epoch": 2, "coordinator_epoch_source": "last-marker"}
    row.update(kw)
    return row


def test_unverified_reasons_and_their_hints_are_printed():
    alert = finalize(_row("hanging", "coordinator-unaware", verified=False,
                          unverified_reasons=["newest-segment-not-proven", "clock-skew"]), None, AlertConfig("k:9092"))
    text = format_table([alert])
    assert "UNVERIFIED" in text
    assert "#   not verified: newest-segment-not-proven, clock-skew" in text
    assert "replication-offset-checkpoint" in text and "--as-of" in text  # what supplies each proof
    assert "--start-offset 3" in text  # the commands are still printed, under the warning


def test_prepared_2pc_is_late_with_the_force_terminate_remedy_and_no_abort():
    # KIP-939: TransactionsCommand's forceTerminateTransaction subcommand (KAFKA-19003), never abort
    alert = finalize(_row("late", "prepared-2pc"), None, AlertConfig("k:9092"))
    out = io.StringIO()
    ConsoleSink(out)([alert])
    text = out.getvalue()
    assert "late: do not abort" in text
    assert "forceTerminateTransaction --transactionalId 'xa-1'" in text
    assert " abort --topic" not in text
    assert alert["unverified_reasons"] == [] and alert["abort_command_new"] is None


def test_group_offsets_held_names_the_pending_commits_and_the_abort():
    # issue 25: an open TxnOffsetCommit on __consumer_offsets-3 (GroupMetadataManager.storeOffsets)
    alert = finalize(_row("hanging", "coordinator-unaware", key="c/__consumer_offsets/3/7/3",
                          topic="__consumer_offsets", partition=3), None, AlertConfig("k:9092"))
    alert.update(blocked_groups=["billing"], pending_offset_commits=[
        {"group": "billing", "topic": "orders", "partition": 0, "committed_offset": 40, "record_offset": 3,
         "unstable": True, "reason": None}])
    text = format_table([alert])
    assert "group-offsets-held: an open transactional offset commit on __consumer_offsets; its groups get " \
           "UNSTABLE_OFFSET_COMMIT: billing orders-0" in text
    assert "#   blocked consumer groups: billing" in text
    assert "abort --topic '__consumer_offsets' --partition 3 --start-offset 3" in text
