"""Open transactional offset commits in __consumer_offsets (issue 25 item 1, decoder part).

Record layouts written by hand from group-coordinator/src/main/resources/common/message/
OffsetCommitKey.json (versions 0-1: int16 version, string group, string topic, int32 partition;
strings are int16 length + UTF-8) and OffsetCommitValue.json (v3: int16 version, int64 offset,
int32 leaderEpoch, string metadata, int64 commitTimestamp); GroupMetadataKey is key version 2.
Pairing is detection.md §1 (udfs.pairing): a control batch closes the producer's transaction.
"""

from __future__ import annotations

import struct
from pathlib import Path

from streaming.simulate.encode import encode_batch, encode_marker, encode_record
from udfs.dump_text import parse_dump
from udfs.offset_commit import (
    OPEN_COMMIT_KEYS,
    decode_offset_commit_key,
    decode_offset_commit_value,
    open_offset_commits,
    open_offset_commits_in_dump,
)

FIX = Path(__file__).resolve().parent / "fixtures" / "dumps4x"


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack(">h", len(b)) + b


def key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return struct.pack(">h", version) + _s(group) + _s(topic) + struct.pack(">i", partition)


def value(offset: int) -> bytes:
    return struct.pack(">hqi", 3, offset, -1) + _s("") + struct.pack(">q", 1_700_000_000_000)


def _txn(base: int, pid: int, recs: list[tuple[bytes, bytes | None]], **kw) -> bytes:
    records = [encode_record(i, v, k) for i, (k, v) in enumerate(recs)]
    return encode_batch(base, records, producer_id=pid, producer_epoch=2, base_sequence=0, is_transactional=True,
                        base_timestamp=1_700_000_000_000, **kw)


def test_key_and_value_bytes() -> None:
    assert decode_offset_commit_key(key("billing", "orders", 3)) == ("billing", "orders", 3)
    assert decode_offset_commit_key(key("g", "t", 0, version=0)) == ("g", "t", 0)
    assert decode_offset_commit_key(struct.pack(">h", 2) + _s("billing")) is None  # group metadata
    assert decode_offset_commit_value(value(57)) == 57 and decode_offset_commit_value(None) is None


def test_open_commits_of_a_segment() -> None:
    # 0-1  pid 100: billing orders-0 -> 40, orders-1 -> 57 (opens its transaction)
    # 2    pid 101: reports clicks-0 -> 5;  3: COMMIT of pid 101 (closed)
    # 4    group metadata record, not transactional
    # 5    pid 100 again: billing orders-2 -> 9 (joins the open transaction; no marker follows)
    seg = (_txn(0, 100, [(key("billing", "orders", 0), value(40)), (key("billing", "orders", 1), value(57))])
           + _txn(2, 101, [(key("reports", "clicks", 0), value(5))])
           + encode_marker(3, 101, 2, 1, 7, 1_700_000_000_100)
           + encode_batch(4, [encode_record(0, b"meta", struct.pack(">h", 2) + _s("billing"))],
                          base_timestamp=1_700_000_000_200)
           + _txn(5, 100, [(key("billing", "orders", 2), value(9))]))
    got = open_offset_commits(seg)
    assert all(tuple(e) == OPEN_COMMIT_KEYS for e in got)
    assert [(e["producer_id"], e["txn_first_offset"], e["offset"], e["group"], e["topic"], e["partition"],
             e["committed_offset"], e["reason"]) for e in got] == [
        (100, 0, 0, "billing", "orders", 0, 40, None), (100, 0, 1, "billing", "orders", 1, 57, None),
        (100, 0, 5, "billing", "orders", 2, 9, None)]
    # the ABORT the coordinator writes when the transaction times out closes it
    assert open_offset_commits(seg + encode_marker(6, 100, 3, 0, 7, 1_700_000_900_000)) == []


def test_compressed_batch_is_reported_not_dropped() -> None:
    seg = _txn(0, 100, [(key("billing", "orders", 0), value(40))], compression="gzip")
    (e,) = open_offset_commits(seg)
    assert (e["producer_id"], e["group"], e["txn_first_offset"]) == (100, None, 0)
    assert "compressed" in e["reason"]


def test_open_commits_of_dumps() -> None:
    (co, _ts) = parse_dump((FIX / "kafka-4.0_txn-log-text_offsets-json.txt").read_text())
    # offset 7: producer 4001's commit of billing orders-1 -> 57, no marker after it
    assert [(e["producer_id"], e["txn_first_offset"], e["group"], e["topic"], e["partition"], e["committed_offset"])
            for e in open_offset_commits_in_dump(co)] == [(4001, 7, "billing", "orders", 1, 57)]
    (c37,) = parse_dump((FIX / "kafka-3.7_offsets-text.txt").read_text())
    assert open_offset_commits_in_dump(c37) == []  # committed by the marker at 3
    (c24,) = parse_dump((FIX / "kafka-2.4_offsets-legacy.txt").read_text())
    assert open_offset_commits_in_dump(c24) == []  # aborted at 11
    shallow = ("Dumping /d/__consumer_offsets-5/00000000000000000000.log\nLog starting offset: 0\n"
               "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 producerId: 9 producerEpoch: 0 "
               "partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty "
               "position: 0 CreateTime: 1 size: 100 magic: 2 compresscodec: none crc: 1 isvalid: true\n")
    (sh,) = parse_dump(shallow)
    (e,) = open_offset_commits_in_dump(sh)
    assert e["producer_id"] == 9 and e["group"] is None and "not printed" in e["reason"]


# --- live: a finding on __consumer_offsets names the groups it holds -------------------------------


def _offsets_partition() -> bytes:
    # 0-1 pid 100: billing orders-0 -> 40, orders-1 -> 57;  2-3: pid 101 committed (reports clicks-0)
    # 4   pid 100 again: billing orders-0 -> 45 (the later commit of orders-0 is the pending one)
    return (_txn(0, 100, [(key("billing", "orders", 0), value(40)), (key("billing", "orders", 1), value(57))])
            + _txn(2, 101, [(key("reports", "clicks", 0), value(5))])
            + encode_marker(3, 101, 2, 1, 7, 1_700_000_000_100)
            + _txn(4, 100, [(key("billing", "orders", 0), value(45))]))


import pytest  # noqa: E402


@pytest.mark.parametrize("version,unstable", [((4, 0), True), ((3, 0), True), ((2, 3), None)],
                         ids=["4.0", "3.0", "2.3-no-require-stable"])
def test_annotate_names_the_held_offset_commits(tmp_path: Path, version, unstable) -> None:
    from streaming.broker_confirm import KafkaBrokerConfirm, annotate
    from streaming.quality.alert_contract import alert_errors
    from tests.kafka_fake_broker import FakeKafkaBroker

    with FakeKafkaBroker(tmp_path / "logs", broker_version=version) as broker:
        broker.create_topic("__consumer_offsets", 4)
        # The group coordinator loads this partition (GroupMetadataManager.loadGroupsAndOffsets):
        # producer 100's commits of billing orders-0/orders-1 stay pending (no marker), producer
        # 101's reports clicks-0 -> 5 is committed by its COMMIT marker at offset 3.
        broker.append_raw("__consumer_offsets", 3, _offsets_partition())
        broker.commit_offsets("billing", {("orders", 0): 30, ("orders", 1): 50})
        alert = {"status": "hanging", "topic": "__consumer_offsets", "partition": 3, "producer_id": 100,
                 "first_offset": 0}
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            annotate(alert, confirm)
            if unstable:  # OffsetFetch v7+ require_stable (KIP-447): pending -> UNSTABLE_OFFSET_COMMIT
                assert confirm.unstable_offsets({"billing": [("orders", 0), ("orders", 2)],
                                                 "reports": [("clicks", 0)]}) == {
                    ("billing", "orders", 0): True, ("billing", "orders", 2): False,
                    ("reports", "clicks", 0): False}
        # OffsetFetch asked with require_stable only where the broker has v7 (2.5+); 2.3 is not asked
        stable = [r for r in broker.requests_for("offset_fetch") if getattr(r.request, "require_stable", False)]
        assert bool(stable) == bool(unstable) and all(r.version == 7 for r in stable)
    assert alert["blocked_groups"] == ["billing"] and alert["lagging_groups"] is None
    assert alert["pending_offset_commits"] == [
        {"group": "billing", "topic": "orders", "partition": 0, "committed_offset": 45, "record_offset": 4,
         "unstable": unstable, "reason": None},
        {"group": "billing", "topic": "orders", "partition": 1, "committed_offset": 57, "record_offset": 1,
         "unstable": unstable, "reason": None}]
    assert not [e for e in alert_errors(alert) if "pending_offset_commits" in e]


def test_other_topics_get_no_offset_commit_lookup(tmp_path: Path) -> None:
    from streaming.broker_confirm import KafkaBrokerConfirm, annotate
    from tests.kafka_fake_broker import FakeKafkaBroker

    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 0)) as broker:
        broker.create_topic("orders", 1)
        broker.append_raw("orders", 0, _offsets_partition())
        alert = {"status": "hanging", "topic": "orders", "partition": 0, "producer_id": 100, "first_offset": 0}
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=5000) as confirm:
            annotate(alert, confirm)
        assert "pending_offset_commits" not in alert
        assert not broker.requests_for("fetch")


# --- offline: txnwatch scan over a log dir and over dump text ----------------------------------------


def test_scan_names_the_held_offset_commits_from_segments_and_dumps(tmp_path: Path) -> None:
    from streaming.cli import scan_paths
    from streaming.config import as_config, load

    d = tmp_path / "logs" / "__consumer_offsets-3"
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(_offsets_partition())
    cfg = load(None, env={})
    cfg["cluster"] = "offline"
    as_of = 1_700_000_000_000 + 3_600_000  # an hour after the writes: past any transaction timeout
    findings, _gaps = scan_paths([str(tmp_path / "logs")], as_config(cfg), as_of_ms=as_of, engine="local")
    (f,) = [a for a in findings if a["topic"] == "__consumer_offsets"]  # 101's committed one is no finding
    assert (f["partition"], f["producer_id"], f["first_offset"], f["status"]) == (3, 100, 0, "hanging")
    assert (f["kind"], f["blocked_groups"]) == ("group-offsets-held", ["billing"])
    assert f["pending_offset_commits"] == [
        {"group": "billing", "topic": "orders", "partition": 0, "committed_offset": 45, "record_offset": 4,
         "unstable": None, "reason": None},
        {"group": "billing", "topic": "orders", "partition": 1, "committed_offset": 57, "record_offset": 1,
         "unstable": None, "reason": None}]
    # the same from the hand-written 4.0 dump (producer 4001's commit of billing orders-1 at offset 7)
    dump = tmp_path / "co.txt"
    dump.write_text((FIX / "kafka-4.0_txn-log-text_offsets-json.txt").read_text())
    findings, _gaps = scan_paths([str(dump)], as_config(cfg), as_of_ms=1_761_000_005_000 + 3_600_000, engine="local")
    (f,) = [a for a in findings if a["topic"] == "__consumer_offsets"]
    assert (f["partition"], f["producer_id"], f["first_offset"]) == (12, 4001, 7)
    assert f["pending_offset_commits"] == [
        {"group": "billing", "topic": "orders", "partition": 1, "committed_offset": 57, "record_offset": 7,
         "unstable": None, "reason": None}]


def test_status_page_shows_the_held_offset_commits() -> None:
    from streaming.ui import render
    from streaming.ui.store import FindingStore
    from tests.test_ui import Clock, alert

    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("hanging", topic="__consumer_offsets", partition=3, pid=100, first=0, blocked_groups=[],
                   lagging_groups=["etl"], pending_offset_commits=[
                       {"group": "billing", "topic": "orders", "partition": 0, "committed_offset": 45,
                        "record_offset": 4, "unstable": True, "reason": None},
                       {"group": None, "topic": None, "partition": None, "committed_offset": None,
                        "record_offset": 6, "unstable": None, "reason": "batch at offset 6 is compressed (codec 1)"}]))
    page = render.overview_page(s.snapshot())
    assert "offset commits held: billing orders-0 → 45 (UNSTABLE_OFFSET_COMMIT); batch at offset 6 is compressed" \
        in page
    assert "behind it: etl" in page
    finding = render.finding_page(s.finding("prod/__consumer_offsets/3/100/0"))
    assert "Consumer-group offset commits it holds" in finding and "billing orders-0 → 45" in finding


def test_pending_commits_per_partition_follow_the_coordinator_load():
    """GroupMetadataManager.loadGroupsAndOffsets: within one producer's open transaction the later
    record of a group/topic/partition replaces the earlier (pendingOffsets(producerId).put) and a
    record without value removes it (pendingOffsets(producerId).remove)."""
    from udfs.offset_commit import held_groups, pending_by_partition

    seg = _txn(0, 100, [(key("billing", "orders", 0), value(40)), (key("billing", "orders", 1), value(57)),
                        (key("audit", "orders", 0), value(3))]) \
        + _txn(3, 100, [(key("billing", "orders", 0), value(45)), (key("audit", "orders", 0), None)])
    got = pending_by_partition(open_offset_commits(seg))
    assert [(e["group"], e["topic"], e["partition"], e["committed_offset"], e["offset"]) for e in got] == [
        ("billing", "orders", 0, 45, 3), ("billing", "orders", 1, 57, 1)]
    assert held_groups([dict(e, unstable=None) for e in got]) == ["billing"]
    # a group the coordinator answers stable (OffsetFetch require_stable gave an offset) is not held
    assert held_groups([dict(got[0], unstable=False), dict(got[1], group="etl", unstable=True)]) == ["etl"]
