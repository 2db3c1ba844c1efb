"""The broker fake rebuilds producer state from a ``.snapshot`` as a restarted broker does.

Kafka 3.8 ``UnifiedLog.rebuildProducerState`` -> ``ProducerStateManager.truncateAndReload``:
snapshots above the log end offset or at/below the log start offset are removed, ``loadFromSnapshot``
loads the latest remaining one (a corrupt one, ``readSnapshot`` throwing
``CorruptSnapshotException``, is deleted and the next latest tried), ``loadProducerEntry`` puts
every entry with a ``currentTxnFirstOffset`` into ``ongoingTxns`` (which
``firstUnstableOffset`` reads), and the segments are replayed from the snapshot's offset on.
``UnifiedLog.maybeIncrementFirstUnstableOffset`` then takes ``max(first unstable offset,
logStartOffset)``: a transaction that began in a segment retention deleted pins the LSO at the
log start. Before this, the fake replayed only the served segments and lost such transactions.

Snapshot bytes are built by hand here from ``PID_SNAPSHOT_MAP_SCHEMA`` (version int16 1, crc
uint32 = CRC-32C of bytes [6, EOF), int32 count, 46-byte entries: producer_id int64, epoch int16,
last_sequence int32, last_offset int64, offset_delta int32, timestamp int64, coordinator_epoch
int32, current_txn_first_offset int64).
"""

from __future__ import annotations

import functools
import struct

import crc32c
import pytest

from streaming.alerts import REQUIRED_PERMISSION, AlertConfig, abort_commands
from streaming.broker_confirm import KafkaBrokerConfirm
from streaming.pinned_lso import PinnedLso
from streaming.simulate.encode import encode_batch
from streaming.sources.kafka import close_wires
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch, segment_file_name
from tests.test_kafka_source import live_scenario
from tests.test_pinned_lso import progress_rows

_watchdog = kafka_watchdog(90)
NOW = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _close():
    yield
    close_wires()


def snapshot_bytes(*entries: tuple[int, int, int, int, int, int, int, int]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def stage(broker: FakeKafkaBroker) -> None:
    """Producer 77 (epoch 3) began a transaction at offset 1 in a segment retention deleted; the
    first kept segment starts at 5, where 77 writes again (sequence 2); the broker's snapshot at 6
    holds 77 (last offset 5, sequence 2, coordinator epoch 4 from an earlier marker, transaction
    first offset 1). After it: producer 88 commits 6..7 (marker 8), 77 writes at 9 (sequence 3)."""
    broker.create_topic("orders")
    d = broker.root / "orders-0"
    for f in d.glob("*.log"):
        f.unlink()
    (d / segment_file_name(5)).write_bytes(b"")
    broker.refresh()
    broker.append_batches("orders", 0, encode_batch(5, 1, producer_id=77, producer_epoch=3, base_sequence=2,
                                                    is_transactional=True, base_timestamp=NOW, max_timestamp=NOW))
    broker.append_batches("orders", 0, encode_batch(6, 2, producer_id=88, producer_epoch=0, base_sequence=0,
                                                    is_transactional=True, base_timestamp=NOW, max_timestamp=NOW))
    broker.append_batches("orders", 0, build_control_batch(8, 88, 0, commit=True, coordinator_epoch=4,
                                                           timestamp_ms=NOW))
    broker.append_batches("orders", 0, encode_batch(9, 1, producer_id=77, producer_epoch=3, base_sequence=3,
                                                    is_transactional=True, base_timestamp=NOW + 1,
                                                    max_timestamp=NOW + 1))
    (d / "00000000000000000006.snapshot").write_bytes(snapshot_bytes((77, 3, 2, 5, 0, NOW, 4, 1)))
    broker.refresh()


def test_the_loaded_snapshot_keeps_a_transaction_begun_in_a_deleted_segment_open(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        stage(broker)
        st = broker.partition_state("orders", 0)
        dp = broker.producer_states("orders", 0)
    assert (st.log_start_offset, st.high_watermark) == (5, 10)
    assert st.open_transactions == {77: 1}  # loadProducerEntry -> ongoingTxns
    assert st.last_stable_offset == 5  # max(firstUnstableOffset 1, logStartOffset 5)
    # the snapshot's entry, then ProducerAppendInfo.appendDataBatch for 77's batch at 9 (sequence 3)
    assert dp[77] == {"producer_epoch": 3, "last_sequence": 3, "last_timestamp": NOW + 1, "coordinator_epoch": 4,
                      "current_txn_start_offset": 1}
    assert dp[88]["current_txn_start_offset"] == -1 and dp[88]["coordinator_epoch"] == 4


def test_corrupt_and_out_of_range_snapshots_are_not_loaded(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        stage(broker)
        d = broker.root / "orders-0"
        # truncateAndReload removes snapshots above the log end (10) and at/below the log start (5)
        (d / "00000000000000000012.snapshot").write_bytes(snapshot_bytes((77, 3, 9, 11, 0, NOW, 4, 11)))
        (d / "00000000000000000005.snapshot").write_bytes(snapshot_bytes((66, 0, 0, 0, 0, NOW, 0, 0)))
        # readSnapshot: the stored CRC does not match -> CorruptSnapshotException, next latest tried
        bad = bytearray(snapshot_bytes((55, 0, 0, 6, 0, NOW, 0, 6)))
        bad[-1] ^= 1
        (d / "00000000000000000008.snapshot").write_bytes(bytes(bad))
        broker.refresh()
        st = broker.partition_state("orders", 0)
        dp = broker.producer_states("orders", 0)
    assert st.open_transactions == {77: 1} and st.last_stable_offset == 5
    assert set(dp) == {77, 88}


def test_without_the_snapshot_the_transaction_is_lost(tmp_path):
    """No snapshot: ``loadFromSnapshot`` starts at the log start and replays the kept segment,
    where 77's first batch in view (5) opens the transaction."""
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        stage(broker)
        (broker.root / "orders-0" / "00000000000000000006.snapshot").unlink()
        broker.refresh()
        st = broker.partition_state("orders", 0)
        dp = broker.producer_states("orders", 0)
    assert st.open_transactions == {77: 5} and st.last_stable_offset == 5
    assert dp[77]["current_txn_start_offset"] == 5 and dp[77]["coordinator_epoch"] == -1


def test_retention_restart_scenario_state_as_the_restarted_broker_holds_it(tmp_path):
    """The simulator's ``retention-restart``: log start 10 (first kept segment), newest snapshot
    at 15; ``deleted-zombie`` (producer 1001) opened at 6 and ``retained-zombie`` (1000) at 7,
    both in deleted segments, after COMMITs with coordinator epoch 3; 1000 wrote again at 12 and,
    after the restart, at 17. Values from the scenario's construction and its declared findings."""
    sc = live_scenario(tmp_path, "retention-restart", seed=11)
    declared = {f["producer_id"]: (f["first_offset"], f["coordinator_epoch"]) for f in sc.expected}
    assert declared == {1001: (6, 3), 1000: (7, 3)}
    with FakeKafkaBroker(sc.root) as broker:
        st = broker.partition_state("orders", 0)
        dp = broker.producer_states("orders", 0)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=3000) as confirm:
            wire = confirm.describe_producers("orders", 0)
        # the live path: PinnedLso names both transactions from DescribeProducers
        progress = progress_rows(broker)
        pinned = PinnedLso(None, lambda topic: 60_000,
                           functools.partial(abort_commands, cfg=AlertConfig(broker.bootstrap_servers)),
                           REQUIRED_PERMISSION)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=3000) as confirm:
            alerts = pinned.observe(progress, [], NOW, set(), confirm)
    assert (st.log_start_offset, st.last_stable_offset, st.high_watermark) == (10, 10, 18)
    assert st.open_transactions == {1001: 6, 1000: 7}
    assert {p: (e["current_txn_start_offset"], e["coordinator_epoch"]) for p, e in dp.items()
            if e["current_txn_start_offset"] >= 0} == declared
    assert {p: (a.current_txn_start_offset, a.coordinator_epoch) for p, a in wire.items()
            if a.current_txn_start_offset >= 0} == declared
    assert sorted((a["producer_id"], a["first_offset"], a["coordinator_epoch"]) for a in alerts) == \
        [(1000, 7, 3), (1001, 6, 3)]
    # detection.md §0: PinnedLso does not ask the coordinator, so these are unverified
    assert all(a["verified"] is False and a["data_deleted"] for a in alerts)
