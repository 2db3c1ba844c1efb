"""The whole Spark pipeline (segments source → state → alerts) over the shared sample files."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from streaming.cli import scan_paths
from streaming.config import as_config, load
from tests.conftest import ROOT, SAMPLES

SYN = SAMPLES / "synthetic"
AS_OF = 1_700_003_600_000
SCHEMA = json.loads((ROOT / "streaming" / "alert.schema.json").read_text())

pytestmark = pytest.mark.spark


def logdir(tmp_path, *, txn_state=True, segment=True, snapshot=False):
    root = tmp_path / "logs"
    (root / "orders-0").mkdir(parents=True)
    if segment:
        shutil.copy(SYN / "scenario_orders-0_00000000000000000000.log", root / "orders-0" / f"{0:020d}.log")
    if snapshot:
        shutil.copy(SYN / "scenario_orders-0_00000000000000000008.snapshot", root / "orders-0" / f"{8:020d}.snapshot")
    if txn_state:
        (root / "__transaction_state-40").mkdir()
        shutil.copy(SYN / "tv2_txn_state-40_00000000000000000000.log", root / "__transaction_state-40" / f"{0:020d}.log")
    return root


def cfg():
    c = load(None, env={})
    c["cluster"] = "test"
    c["kafka"]["bootstrap_servers"] = "k1:9092"
    return as_config(c)


def check_schema(alerts):
    for a in alerts:
        jsonschema.validate(a, SCHEMA)


def test_hanging_write_after_marker_with_coordinator_view(spark, tmp_path):
    findings, gaps = scan_paths([str(logdir(tmp_path))], cfg(), as_of_ms=AS_OF, spark=spark)
    check_schema(findings)
    assert gaps == []
    # Only __transaction_state-40 is in the input and no record there maps producer 4002: one of
    # 50 partitions never proves that no coordinator knows it (rules v2, detection.md §3.1; rules v1
    # said coordinator-unaware, verified). Unverified, and the alert names the 49 missing partitions.
    assert [(f["producer_id"], f["first_offset"], f["status"], f["cause"]) for f in findings] == [
        (4002, 9, "hanging", "exceeds-max-timeout")]
    f = findings[0]
    assert not f["verified"] and f["producer_epoch"] == 2
    assert f["missing_txn_partitions"] == [p for p in range(50) if p != 40]
    assert (f["coordinator_epoch"], f["coordinator_epoch_source"]) == (2, "last-marker")
    assert f["lso"] == 9 and f["pins_lso"] and f["high_watermark"] == 13 and not f["data_deleted"]
    assert f["key"] == "test/orders/0/4002/9"
    assert f["abort_command_new"] == ("kafka-transactions.sh --bootstrap-server 'k1:9092' abort --topic 'orders' "
                                      "--partition 0 --start-offset 9")
    assert f["abort_command_legacy"].endswith("--producer-id 4002 --producer-epoch 2 --coordinator-epoch 2")
    assert f["open_ms"] == AS_OF - 1700000000060


def test_without_coordinator_view_findings_are_unverified(spark, tmp_path):
    findings, _ = scan_paths([str(logdir(tmp_path, txn_state=False))], cfg(), as_of_ms=AS_OF, spark=spark)
    check_schema(findings)
    assert [(f["producer_id"], f["first_offset"], f["cause"], f["verified"]) for f in findings] == [
        (4002, 9, "exceeds-max-timeout", False)]
    assert findings[0]["verify_hint"]


def test_snapshot_only_input_still_finds_the_open_transaction(spark, tmp_path):
    root = logdir(tmp_path, txn_state=False, segment=False, snapshot=True)
    findings, _ = scan_paths([str(root)], cfg(), as_of_ms=AS_OF, spark=spark)
    check_schema(findings)
    assert [(f["producer_id"], f["first_offset"], f["status"], f["coordinator_epoch_source"],
             f["coordinator_epoch"]) for f in findings] == [(4002, 7, "hanging", "snapshot", 0)]
    assert findings[0]["lso"] == 7


def test_snapshot_plus_segments_equals_segments(spark, tmp_path):
    a, _ = scan_paths([str(logdir(tmp_path / "a", snapshot=True))], cfg(), as_of_ms=AS_OF, spark=spark)
    b, _ = scan_paths([str(logdir(tmp_path / "b"))], cfg(), as_of_ms=AS_OF, spark=spark)
    # the same findings; only the evidence shows the snapshot that was read (the marker at 8 is at
    # its offset, so last-marker still names the epoch)
    assert [x["evidence"].pop("snapshot_entry") for x in a] == [{"offset": 8, "present": True,
                                                                 "coordinator_epoch": -1}]
    assert [x["evidence"].pop("snapshot_entry") for x in b] == [None]
    assert a == b
    # The outside truth (PROVENANCE.txt, written from ProducerStateManager): the snapshot after
    # offsets 0..7 holds 4002 open at 7; its COMMIT marker at 8 ends that (appendEndTxnMarker clears
    # currentTxnFirstOffset) and the write at 9 opens the transaction that hangs. Unverified for the
    # reason test_hanging_write_after_marker_with_coordinator_view gives (one coordinator partition).
    for found in (a, b):
        assert [(f["producer_id"], f["first_offset"], f["status"], f["cause"], f["verified"]) for f in found] == [
            (4002, 9, "hanging", "exceeds-max-timeout", False)]


def test_default_clock_is_newest_input_timestamp(spark, tmp_path):
    findings, _ = scan_paths([str(logdir(tmp_path / "a", txn_state=False))], cfg(), spark=spark)
    # newest timestamp in the data is 10 s after 4000's open batch and ~1 h after 4002's
    assert [(f["producer_id"], f["first_offset"]) for f in findings] == [(4002, 9)]
    assert findings[0]["detected_at"] == 1700003590001
    # the coordinator's tombstone for tv2-app (producer 4000) is 11 days later, more than the
    # skew tolerance (1 h) ahead of every other partition's newest timestamp: an outlier, never
    # the clock (detection.md §2, revision 3). The clock stays the data's newest timestamp.
    b = logdir(tmp_path / "b")
    findings, _ = scan_paths([str(b)], cfg(), spark=spark)
    assert [(f["producer_id"], f["first_offset"], f["detected_at"]) for f in findings] == [(4002, 9, 1700003590001)]
    # evaluated at the tombstone's time (--as-of), 4000's open transaction is old and forgotten
    # by its coordinator
    findings, _ = scan_paths([str(b)], cfg(), as_of_ms=1701000000000, spark=spark)
    # 4000's tombstone is in partition 40, which was read: proven unknown. 4002 is mapped by no
    # record of the one partition read: unverified (rules v2, detection.md §3.1).
    assert [(f["producer_id"], f["first_offset"], f["cause"]) for f in findings] == [
        (4002, 9, "exceeds-max-timeout"), (4000, 11, "coordinator-unaware")]
    assert {f["detected_at"] for f in findings} == {1701000000000}
    f4000 = findings[1]
    assert (f4000["transactional_id"], f4000["coordinator_state"]) == ("tv2-app", None)
    assert (f4000["coordinator_epoch"], f4000["coordinator_epoch_source"]) == (3, "last-marker")


def test_corrupt_batch_becomes_gap_and_rest_is_read(spark, tmp_path):
    root = logdir(tmp_path)
    seg = root / "orders-0" / f"{0:020d}.log"
    data = bytearray(seg.read_bytes())
    data[79 + 40] ^= 1  # batch at offset 2 (producer 4001) fails its CRC
    seg.write_bytes(bytes(data))
    findings, gaps = scan_paths([str(root)], cfg(), as_of_ms=AS_OF, spark=spark)
    assert [(g["topic"], g["reason"][:16]) for g in gaps] == [("orders", "CRC-32C mismatch")]
    assert "@79" in gaps[0]["source_position"]
    assert [(f["producer_id"], f["first_offset"]) for f in findings] == [(4002, 9)]
