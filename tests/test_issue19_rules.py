"""Issue 19 rules (detection.md §3.1 revisions 3 and 3.1) from bytes, over kafka-dump-log.sh text.

Each scenario is written by the simulator (``streaming.simulate.scenarios``, an independent model
of the broker) and its log directory runs through ``scan`` in ``tests/test_scenario_matrix.py``;
here the same cases run over the dump text of the Kafka generation that wrote them, and one case
over a dump that lacks segments of the coordinator partition. Expected values are written by hand
from Kafka's behaviour (the method is named at each case), never taken from txnwatch's output:
(status, cause, verified, unverified_reasons, topic, partition, producer_epoch, first_offset,
coordinator_epoch, coordinator_epoch_source).

The broker's end-offset checkpoints are given with the dumps when the log dir holds them (a dump
alone does not prove a partition's end, detection.md §0).
"""

from __future__ import annotations

import pytest

from streaming.cli import scan_paths
from streaming.config import as_config, load
from streaming.simulate.scenarios import write_scenario
from tests.dump_render import render_log_dir

pytestmark = pytest.mark.spark
CHECKPOINTS = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint")


def _scan(spark, sc, files):
    files = list(files) + [str(sc.root / n) for n in CHECKPOINTS if (sc.root / n).exists()]
    cfg = load(None, env={})
    cfg["cluster"] = "i19"
    findings, gaps = scan_paths(files, as_config(cfg), as_of_ms=sc.as_of_ms, spark=spark)
    assert gaps == []
    for f in findings:
        if f["status"] == "late":
            assert f["abort_command_new"] is None and f["abort_command_legacy"] is None
    return sorted((f["status"], f["cause"], f["verified"], f["unverified_reasons"], f["topic"], f["partition"],
                   f["producer_epoch"], f["first_offset"], f["coordinator_epoch"], f["coordinator_epoch_source"])
                  for f in findings)


def test_prepare_after_a_marker_stamped_by_a_fast_leader_clock_stays_markers_pending(spark, tmp_path):
    # TV0 (3.1 text): txn 1 commits on orders-0/1 (COMMIT markers epoch 0, coordinator epoch 3,
    # stamped by leaders 41 ms ahead: MemoryRecords.withEndTransactionMarker uses the leader's
    # System.currentTimeMillis()); txn 2 writes offset 2 on both and its PrepareCommit is written,
    # its markers are not. TransactionMarkerChannelManager.addTxnMarkersToSend would send the same
    # producer id, epoch and result as txn 1's markers: the log cannot say which marker is whose
    # without comparing two brokers' clocks, so both stay late (revision 3 withdrew the rule).
    sc = write_scenario("prepare-skewed-marker", tmp_path / "logs", seed=11)
    got = _scan(spark, sc, render_log_dir(sc.root, tmp_path / "dumps", "3.1"))
    assert got == [
        ("late", "markers-pending", True, [], "orders", 0, 0, 2, 3, "last-marker"),
        ("late", "markers-pending", True, [], "orders", 1, 0, 2, 3, "last-marker"),
    ]


def test_batch_after_a_bumped_tv2_marker_is_not_write_after_marker(spark, tmp_path):
    # TV2 (4.0 text): TransactionMetadata.prepareComplete bumps the epoch, so the COMMIT marker at
    # orders-0 offset 2 carries epoch 1 over data of epoch 0; the batch of epoch 1 at offset 3 is
    # the producer's next transaction (ProducerAppendInfo.checkProducerEpoch accepts it), which
    # the coordinator completed without orders-0 (CompleteCommit epoch 2): hanging, not the
    # KAFKA-9144 late write.
    sc = write_scenario("bumped-marker-next-txn", tmp_path / "logs", seed=11)
    got = _scan(spark, sc, render_log_dir(sc.root, tmp_path / "dumps", "4.0"))
    assert got == [("hanging", "coordinator-finished-without-partition", True, [], "orders", 0, 1, 3, 3,
                    "last-marker")]


def test_two_phase_commit_is_late_prepared_2pc_and_its_threshold_is_max_timeout(spark, tmp_path):
    # KIP-939 (4.0 text prints txnTimeoutMs=2147483647): TransactionMetadata
    # .isDistributedTwoPhaseCommitTxn; TransactionStateManager.timedOutTransactions skips it.
    # orders-0: open 25 min past its Ongoing record, threshold 15 + 5 min -> late / prepared-2pc,
    # no command. orders-1: a batch of epoch 1 after the (bumped) COMMIT marker of the 2PC
    # producer's finished transaction, threshold also 20 min -> hanging.
    sc = write_scenario("two-phase-commit", tmp_path / "logs", seed=11)
    got = _scan(spark, sc, render_log_dir(sc.root, tmp_path / "dumps", "4.0"))
    assert got == [
        ("hanging", "coordinator-finished-without-partition", True, [], "orders", 1, 1, 2, 3, "last-marker"),
        ("late", "prepared-2pc", True, [], "orders", 0, 0, 0, 0, "log-start"),
    ]


@pytest.mark.parametrize("generation", ["3.0", "3.1"])
def test_long_transaction_over_text_without_start_is_not_coordinator_stuck(spark, tmp_path, generation):
    # 3.0/3.1 text prints txnLastUpdateTimestamp, not TransactionStartTimestampMs. The producer
    # (timeout 1 h) ran txn 1, committed, and 20 min later started txn 2 (first batch at offset 2,
    # after txn 1's COMMIT marker of coordinator epoch 3). Given the coordinator partition without
    # the segment holding txn 1's PrepareCommit and CompleteCommit, the two Ongoing records (same
    # producer id, epoch and partition set) look like one transaction started 20 min earlier.
    # TransactionMetadata sets txnStartTimestamp on the move to Ongoing, after the previous
    # Complete*; and TransactionCoordinator.handleAddPartitionsToTransaction writes a further
    # Ongoing record of one transaction only for partitions it does not hold yet, so a record whose
    # set does not grow starts another transaction. Txn 2 is within timeout + padding by its own
    # record -> long-transaction, not coordinator-stuck.
    sc = write_scenario("long-txn-split-txn-log", tmp_path / "logs", seed=11)
    k = sc.notes["txn_partition"]
    only = {f"__transaction_state-{k}": [0, *sc.notes["split_segments"]]}
    want = [("late", "long-transaction", True, [], "reports", 0, 0, 2, 3, "last-marker")]
    assert _scan(spark, sc, render_log_dir(sc.root, tmp_path / "split", generation, only=only)) == want
    # the whole partition dumped: the CompleteCommit before txn 2 bounds its start; same finding
    assert _scan(spark, sc, render_log_dir(sc.root, tmp_path / "whole", generation)) == want
