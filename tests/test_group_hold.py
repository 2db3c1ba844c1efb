"""Blocked means held now (issue 25 item 7): held vs lagging consumer groups around the LSO.

Kafka's rules the expectations follow: a READ_COMMITTED fetch is bounded by the LSO
(``Partition.fetchOffsetSnapshot`` -> ``LocalLog.read`` with ``maxOffsetMetadata`` = LSO); the LSO
is the first offset of the oldest open transaction (``ProducerStateManager.firstUndecidedOffset``);
the consumer drops control batches and the batches of aborted transactions
(``CompletedFetch.nextFetchedRecord``, ``isBatchAborted``). Every expected group list below is
worked out by hand from the byte-built log written in each test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streaming.broker_confirm import KafkaBrokerConfirm, annotate
from streaming.group_hold import CommittedRecordScan, classify_groups
from streaming.simulate.encode import encode_batch
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch
from udfs.model import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_NONE

T0 = 1_760_000_000_000


def _data(offset: int, pid: int = -1, *, txn: bool = False, count: int = 1) -> bytes:
    return encode_batch(offset, count, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=0 if pid >= 0 else -1, is_transactional=txn, base_timestamp=T0 + offset)


def _marker(offset: int, pid: int, commit: bool) -> bytes:
    return build_control_batch(offset, pid, 0, commit=commit, coordinator_epoch=1, timestamp_ms=T0 + offset)


# events-0, offset by offset:
#   0      non-transactional record                      -> delivered to a read_committed consumer
#   1-2    pid 10 transactional data (one batch)         -> aborted by 3: skipped
#   3      ABORT marker of pid 10                        -> control: skipped
#   4      pid 11 transactional data                     -> committed by 5: delivered
#   5      COMMIT marker of pid 11
#   6      pid 12 transactional data                     -> aborted by 7: skipped
#   7      ABORT marker of pid 12
#   8      pid 20 transactional data, no marker          -> the open transaction: LSO = 8
#   9      non-transactional record (above the LSO: not readable committed)
EVENTS_0 = (_data(0) + _data(1, 10, txn=True, count=2) + _marker(3, 10, False) + _data(4, 11, txn=True)
            + _marker(5, 11, True) + _data(6, 12, txn=True) + _marker(7, 12, False) + _data(8, 20, txn=True)
            + _data(9))
GROUPS_0 = {
    "at-lso": 8,            # at the LSO: held
    "after-aborted": 6,     # [6, 8) = aborted data + its marker: nothing to read -> held
    "before-commit": 4,     # [4, 8) holds pid 11's committed record at 4 -> lagging
    "inside-aborted": 2,    # [2, 8) holds offset 4 (committed) -> lagging
    "from-start": 0,        # offset 0 is a plain record -> lagging
    "uncommitted": 9,       # past the transaction: neither
}


def _broker(tmp_path: Path) -> FakeKafkaBroker:
    b = FakeKafkaBroker(tmp_path / "logs")
    b.create_topic("events", 2)
    b.append_raw("events", 0, EVENTS_0)
    # events-1: pid 40 opens at 0, pid 41 opens at 1; neither has a marker. LSO = 0.
    b.append_raw("events", 1, _data(0, 40, txn=True) + _data(1, 41, txn=True))
    return b


def test_groups_on_both_sides_of_the_lso(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        assert broker.partition_state("events", 0).last_stable_offset == 8
        for g, o in GROUPS_0.items():
            broker.commit_offsets(g, {("events", 0): o})
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            held, lagging = confirm.group_positions("events", 0, 8)
            assert held == ["after-aborted", "at-lso"]
            assert lagging == ["before-commit", "from-start", "inside-aborted"]
            assert confirm.blocked_groups("events", 0, 8) == ["after-aborted", "at-lso"]
            # the coordinator commits pid 20's transaction: the LSO passes 8 and holds nobody now
            broker.append_raw("events", 0, _marker(10, 20, True))
            assert confirm.group_positions("events", 0, 8) == ([], [])


def test_an_older_transaction_pins_the_lso_first(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        broker.commit_offsets("g0", {("events", 1): 0})
        broker.commit_offsets("g1", {("events", 1): 1})
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            # pid 41's transaction at 1: the LSO is 0 (pid 40), so nobody is held by it now
            assert confirm.group_positions("events", 1, 1) == ([], ["g0", "g1"])
            # pid 40's transaction at 0 pins the LSO: g0 is held; g1 (at 1) is past it
            assert confirm.group_positions("events", 1, 0) == (["g0"], [])


def test_annotate_fills_both_lists(tmp_path: Path) -> None:
    from streaming.quality.alert_contract import alert_errors

    with _broker(tmp_path) as broker:
        for g, o in GROUPS_0.items():
            broker.commit_offsets(g, {("events", 0): o})
        alert = {"status": "hanging", "topic": "events", "partition": 0, "producer_id": 20, "first_offset": 8}
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            annotate(alert, confirm)
    assert alert["blocked_groups"] == ["after-aborted", "at-lso"]
    assert alert["lagging_groups"] == ["before-commit", "from-start", "inside-aborted"]
    assert not [e for e in alert_errors(alert) if "groups" in e]


def _cols(rows: list[tuple]) -> dict[str, np.ndarray]:
    """(base, last, pid, txn, control, control_type, record_count) rows as scan_batches columns."""
    names = ("base_offset", "last_offset", "producer_id", "is_transactional", "is_control", "control_type",
             "record_count")
    return {n: np.array([r[i] for r in rows]) for i, n in enumerate(names)}


@pytest.mark.parametrize("rows,lo,hi,expected", [
    # an emptied (compacted) plain batch holds no record: nothing delivered in [0, 2)
    ([(0, 0, -1, False, False, CONTROL_NONE, 0), (1, 1, 5, True, True, CONTROL_ABORT, 1)], 0, 2, False),
    # transactional data whose COMMIT comes after hi: delivered (the fate is read past hi)
    ([(0, 0, 5, True, False, CONTROL_NONE, 1), (1, 1, 6, True, False, CONTROL_NONE, 1),
      (2, 2, 5, True, True, CONTROL_COMMIT, 1)], 0, 1, True),
    # a batch that starts before lo but ends inside the range counts
    ([(0, 3, -1, False, False, CONTROL_NONE, 4)], 2, 5, True),
])
def test_committed_record_scan_rules(rows, lo, hi, expected) -> None:
    s = CommittedRecordScan(lo, hi)
    assert s.feed(_cols(rows)) is expected


def test_committed_record_scan_waits_for_the_marker() -> None:
    s = CommittedRecordScan(0, 1)
    assert s.feed(_cols([(0, 0, 5, True, False, CONTROL_NONE, 1)])) is None  # fate of pid 5 unknown yet
    assert s.pending == {5}


def test_classify_undecided_is_lagging_never_held() -> None:
    assert classify_groups({"a": 3, "b": 5}, 5, 5, lambda lo, hi: None) == (["b"], ["a"])
    assert classify_groups({"a": 3}, 5, None, lambda lo, hi: False) is None


# --- KIP-848 groups (issue 25 item 6) -------------------------------------------------------------


def test_kip848_consumer_groups_are_listed_with_the_types_filter_at_40(tmp_path: Path) -> None:
    """4.0 API table (ListGroups v5, OffsetFetch v9). Protocol types as the 4.0 coordinator lists
    them: a KIP-848 consumer group "consumer" (ConsumerGroup.protocolType), a share group "share"
    (ModernGroup.asListedGroup -> ShareGroup.protocolType), a Connect cluster's classic group "connect"."""
    root = tmp_path / "logs"
    with FakeKafkaBroker(root, broker_version=(4, 0)) as broker:
        broker.create_topic("events", 1)
        broker.append_raw("events", 0, EVENTS_0)
        broker.commit_offsets("classic-app", {("events", 0): 8})
        broker.commit_offsets("kip848-app", {("events", 0): 8}, group_type="consumer")
        broker.commit_offsets("kip848-behind", {("events", 0): 0}, group_type="consumer")
        broker.commit_offsets("share-app", {}, protocol_type="share", group_type="share")
        broker.commit_offsets("connect-cluster", {}, protocol_type="connect")
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            assert confirm.group_positions("events", 0, 8) == (["classic-app", "kip848-app"], ["kip848-behind"])
        (lg,) = broker.requests_for("list_groups")
        assert lg.version == 5 and sorted(lg.request.types_filter) == ["classic", "consumer"]
        fetched = [g.group_id for r in broker.requests_for("offset_fetch") for g in r.request.groups]
        assert sorted(fetched) == ["classic-app", "kip848-app", "kip848-behind"]  # share-app never asked


def test_a_group_offset_fetch_refuses_is_left_out_not_the_whole_lookup(tmp_path: Path) -> None:
    """3.9's AbstractGroup.asListedGroup listed share groups with protocol type "consumer"; on a
    broker without the v5 types filter such a group reaches OffsetFetch, which answers
    GROUP_ID_NOT_FOUND (ShareGroup.validateOffsetFetch) - as does a group deleted between the
    two requests. The other groups are still named."""
    root = tmp_path / "logs"
    with FakeKafkaBroker(root, broker_version=(3, 0)) as broker:
        broker.create_topic("events", 1)
        broker.append_raw("events", 0, EVENTS_0)
        broker.commit_offsets("classic-app", {("events", 0): 8})
        broker.commit_offsets("listed-as-consumer", {}, group_type="share")
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            assert confirm.blocked_groups("events", 0, 8) == ["classic-app"]
