"""Decoders against every real and synthetic vector of samples/README-vectors.md, plus fuzzing."""

from __future__ import annotations

import json
import random
import struct

import crc32c as crc32c_pkg
import pytest

from tests.conftest import SAMPLES, read_hex
from udfs.model import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY, CONTROL_NONE
from udfs.partitioning import java_string_hash, txn_state_partition
from udfs.producer_state import PartitionState
from udfs.record_batch import scan_batches
from udfs.snapshot import decode_snapshot
from udfs.txn_log import decode_txn_key, decode_txn_log_segment, decode_txn_value
from udfs.varint import crc32c

REAL = SAMPLES / "real"
SYN = SAMPLES / "synthetic"


def test_crc32c_check_value():
    # kafka-python's table-driven implementation is an independent reference
    from kafka.record._crc32c import crc as reference_crc32c

    assert crc32c(b"123456789") == 0xE3069283
    assert reference_crc32c(b"123456789") == 0xE3069283
    data = bytes(range(256)) * 7
    assert crc32c(data) == reference_crc32c(data)


@pytest.mark.parametrize("path", sorted(list(REAL.glob("*.log")) + list(SYN.glob("*.log"))), ids=lambda p: p.name)
def test_every_segment_sample_validates(path):
    scan = scan_batches(path.read_bytes(), source=str(path))
    assert scan.errors == []
    assert len(scan) > 0
    assert (scan.columns["crc_valid"] == 1).all()
    assert scan.end_position == path.stat().st_size


def test_fvaleri_output_topic_segment():
    scan = scan_batches((REAL / "fvaleri_kafka39_output-topic-0_00000000000000000000.log").read_bytes())
    assert len(scan) == 2
    d, m = scan.row(0), scan.row(1)
    assert (d["base_offset"], d["attributes"], d["producer_id"], d["producer_epoch"], d["base_sequence"]) == (0, 0x10, 1, 0, 0)
    assert d["record_count"] == 1 and d["crc"] == 758896000 and d["batch_size"] == 82
    assert d["control_type"] == CONTROL_NONE and d["is_transactional"] and not d["is_control"]
    assert (m["base_offset"], m["position"], m["attributes"], m["base_sequence"]) == (1, 82, 0x30, -1)
    assert m["control_type"] == CONTROL_COMMIT and m["coordinator_epoch"] == 0
    assert m["max_timestamp"] == 1742739703234 and m["crc"] == 2557578104
    st = PartitionState()
    st.apply(scan.columns)
    assert st.open_transactions() == {} and st.lso(scan.next_offset) == 2


def test_klog_markers_carry_coordinator_epoch_4():
    scan = scan_batches(read_hex(REAL / "klog_kafka3x_transactional-foo-0_commit_markers_coordEpoch4.hex"))
    assert [scan.row(i)["coordinator_epoch"] for i in range(2)] == [4, 4]
    assert [int(c) for c in scan.columns["crc"]] == [4234329125, 1079808135]
    assert list(scan.columns["control_type"]) == [CONTROL_COMMIT, CONTROL_COMMIT]


def test_consumer_offsets_pair():
    scan = scan_batches(read_hex(REAL / "fvaleri_kafka39_consumer_offsets-12_offsets7-8.hex"))
    assert [int(c) for c in scan.columns["crc"]] == [4292816145, 1231080676]
    assert list(scan.columns["base_offset"]) == [7, 8]
    assert scan.row(1)["control_type"] == CONTROL_COMMIT and scan.row(1)["coordinator_epoch"] == 0


def test_scenario_orders_expected_headers_and_pairing():
    exp = json.loads((SYN / "scenario_orders-0_expected.json").read_text())
    scan = scan_batches((SYN / "scenario_orders-0_00000000000000000000.log").read_bytes())
    assert len(scan) == len(exp["batches"])
    for i, b in enumerate(exp["batches"]):
        r = scan.row(i)
        assert r["position"] == b["position"] and r["batch_size"] == b["size"]
        assert (r["base_offset"], r["last_offset"]) == (b["baseOffset"], b["lastOffset"])
        assert r["attributes"] == int(b["attributes"], 16)
        assert (r["producer_id"], r["producer_epoch"], r["base_sequence"]) == (
            b["producerId"], b["producerEpoch"], b["baseSequence"])
        assert r["record_count"] == b["count"] and r["crc"] == b["crc"]
        assert (r["base_timestamp"], r["max_timestamp"]) == (b["baseTimestamp"], b["maxTimestamp"])
        assert r["is_transactional"] == b["isTransactional"] and r["is_control"] == b["isControl"]
        assert {0: "none", 1: "gzip"}[r["compression"]] == b["compression"]
        if "marker" in b:
            assert r["control_type"] == {"COMMIT": CONTROL_COMMIT, "ABORT": CONTROL_ABORT}[b["marker"]]
            assert r["coordinator_epoch"] == b["coordinatorEpoch"]
    st = PartitionState()
    st.apply(scan.columns)
    assert st.open_transactions() == {4002: 9, 4000: 11}
    assert st.lso(scan.next_offset) == exp["expected_LSO"]
    for pid, e in exp["expected_final_producer_state"].items():
        entry = st.producers.get(int(pid))
        if e["currentTxnFirstOffset"] is None and entry is None:
            continue  # non-transactional producer 4003: we never track it
        assert entry.producer_epoch == e["producerEpoch"]
        assert (entry.txn_first_offset if entry.txn_first_offset >= 0 else None) == e["currentTxnFirstOffset"]
        if e["coordinatorEpoch"] >= 0 or entry.coordinator_epoch >= 0:
            assert entry.coordinator_epoch == e["coordinatorEpoch"]


def test_txn_state_v0_segment_fvaleri():
    recs, scan = decode_txn_log_segment(
        (REAL / "fvaleri_kafka39___transaction_state-30_00000000000000000000.log").read_bytes())
    assert scan.errors == []
    assert [r["txn_state"] for r in recs] == ["Empty", "Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert recs[0]["txn_partitions"] is None  # null array in Empty
    assert recs[4]["txn_partitions"] == []  # empty array in Complete*
    assert recs[2]["txn_partitions"] == ["output-topic-0", "__consumer_offsets-12"]
    assert {r["transactional_id"] for r in recs} == {"kafka-txn-0"}
    assert all(r["producer_id"] == 1 and r["producer_epoch"] == 0 and r["txn_timeout_ms"] == 60000 for r in recs)
    assert all(r["coordinator_epoch"] == 0 and r["value_version"] == 0 for r in recs)
    assert recs[4]["txn_start_ts"] == recs[1]["txn_start_ts"] == 0x195C361845C


def test_txn_state_klog_partition_leader_epoch_4():
    recs, scan = decode_txn_log_segment((REAL / "klog_kafka3x___transaction_state-4_offsets0-6.log").read_bytes())
    assert len(recs) == 7 and scan.errors == []
    assert {r["coordinator_epoch"] for r in recs} == {4}
    assert [r["txn_state"] for r in recs].count("CompleteCommit") == 2


def test_txn_state_v1_flexible_value_from_trunk():
    scan = scan_batches(read_hex(REAL / "kafka-pr22615_trunk2026___transaction_state-30_offset0_v1_value.hex"))
    assert scan.errors == [] and int(scan.columns["crc"][0]) == 326836132
    value = bytes.fromhex("0001 0000000000000000 0000 0000ea60 00 00 0000019eda4a6142 ffffffffffffffff 01 00 08 "
                          "0000000000000000".replace(" ", ""))
    v = decode_txn_value(value)
    assert v["value_version"] == 1 and v["producer_id"] == 0 and v["txn_timeout_ms"] == 60000
    assert v["txn_state"] == "Empty" and v["txn_partitions"] is None
    assert v["txn_last_update_ts"] == 1781778768194 and v["txn_start_ts"] == -1
    assert v["prev_producer_id"] == 0 and v["next_producer_id"] == -1 and v["client_txn_version"] == 0


def test_txn_state_tv2_synthetic_with_tombstone():
    exp = json.loads((SYN / "tv2_txn_state-40_expected.json").read_text())
    recs, scan = decode_txn_log_segment((SYN / "tv2_txn_state-40_00000000000000000000.log").read_bytes())
    assert scan.errors == []
    assert recs[-1]["tombstone"] and recs[-1]["producer_id"] is None
    states = [r["txn_state"] for r in recs[:-1]]
    assert states == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing", "PrepareCommit",
                      "CompleteCommit"]
    assert [r["producer_epoch"] for r in recs[1:7]] == [5, 6, 6, 6, 7, 7]
    assert all(r["client_txn_version"] == 2 for r in recs[1:7])
    assert recs[3]["txn_partitions"] == [] and recs[0]["txn_partitions"] is None
    assert {r["coordinator_epoch"] for r in recs} == {3}
    assert txn_state_partition("tv2-app") == 40
    # Every non-tombstone record against the sample's own expectations (values cross-checked by its
    # author against kafka-python's flexible-version encoder fed with TransactionLogValue.json).
    # Status codes are TransactionState.java's ids: 0 Empty, 1 Ongoing, 2 PrepareCommit,
    # 3 PrepareAbort, 4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence.
    state_names = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                   5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
    assert len(exp["records"]) == len(recs) - 1 and exp["last_record"].startswith("offset 7: tombstone")
    crc_by_position = dict(zip(scan.columns["position"].tolist(), scan.columns["crc"].tolist(), strict=True))
    for e, r in zip(exp["records"], recs, strict=False):
        parts = (None if e["partitions"] is None
                 else [f"{topic}-{p}" for topic, ps in e["partitions"] for p in ps])
        assert (r["offset"], r["timestamp"], r["transactional_id"]) == (e["offset"], e["recordTimestamp"],
                                                                       exp["transactionalId"])
        assert (r["producer_id"], r["producer_epoch"], r["txn_state"]) == (
            e["producerId"], e["producerEpoch"], state_names[e["transactionStatus"]])
        assert (r["txn_partitions"], r["txn_last_update_ts"], r["txn_start_ts"], r["client_txn_version"]) == (
            parts, e["lastUpdateTimestampMs"], e["startTimestampMs"], e["clientTransactionVersion"])
        assert r["coordinator_epoch"] == exp["partitionLeaderEpoch_on_batches"]
        assert crc_by_position[r["position"]] == e["batchCrc"]


def test_txn_key_and_unknown_versions_are_errors_not_exceptions():
    assert decode_txn_key(bytes.fromhex("0000000b6b61666b612d74786e2d30")) == (0, "kafka-txn-0")
    with pytest.raises(ValueError, match="version 1"):
        decode_txn_key(bytes.fromhex("0001000161"))
    with pytest.raises(ValueError, match="version 9"):
        decode_txn_value(bytes.fromhex("0009") + bytes(40))
    with pytest.raises(ValueError, match="TransactionStatus 9"):
        decode_txn_value(bytes.fromhex("0000") + bytes(14) + b"\x09" + bytes(20))


def test_snapshot_synthetic():
    path = SYN / "scenario_orders-0_00000000000000000008.snapshot"
    exp = json.loads((SYN / "scenario_orders-0_00000000000000000008.snapshot.expected.json").read_text())
    snap = decode_snapshot(path.read_bytes(), source=str(path))
    assert snap.errors == [] and snap.version == 1 and snap.crc_valid and snap.crc == exp["crc32c"]
    assert snap.offset == 8
    want = [{"producer_id": e["producerId"], "producer_epoch": e["epoch"], "last_sequence": e["lastSequence"],
             "last_offset": e["lastOffset"], "offset_delta": e["offsetDelta"], "timestamp": e["timestamp"],
             "coordinator_epoch": e["coordinatorEpoch"], "current_txn_first_offset": e["currentTxnFirstOffset"]}
            for e in exp["entries"]]
    assert snap.entries == want


def test_snapshot_corruption_reported():
    data = bytearray((SYN / "scenario_orders-0_00000000000000000008.snapshot").read_bytes())
    data[20] ^= 0xFF
    snap = decode_snapshot(bytes(data))
    assert not snap.crc_valid and "CRC-32C mismatch" in snap.errors[0].reason
    snap = decode_snapshot(bytes(data[:60]))
    assert any("truncated" in e.reason for e in snap.errors)
    assert decode_snapshot(b"\x00\x02" + bytes(8)).errors[0].reason.startswith("unknown snapshot version 2")


def test_bad_crc_control_batch_flagged():
    scan = scan_batches(read_hex(REAL / "kafka-python_SYNTHETIC_control_batch_BAD_CRC.hex"))
    assert scan.columns["crc_valid"][0] == 0
    assert "CRC-32C mismatch" in scan.errors[0].reason and "0" in scan.errors[0].reason


@pytest.mark.parametrize("name", ["kafka-python_real_v0_messages_x4.hex", "kafka-python_real_v1_messages_x4.hex"])
def test_legacy_messages_skipped_by_length(name):
    data = read_hex(REAL / name)
    scan = scan_batches(data)
    assert len(scan) == 0 and scan.legacy_entries == 4 and scan.errors == [] and scan.end_position == len(data)


def test_other_real_vectors():
    v2 = scan_batches(read_hex(REAL / "kafka-python_real_v2_batches_x4.hex"))
    assert len(v2) == 4 and (v2.columns["producer_id"] == -1).all()
    assert list(v2.columns["partition_leader_epoch"]) == [1, 2, 2, 0]
    gz = scan_batches(read_hex(REAL / "segmentio_real_v2_gzip_batch.hex"))
    assert gz.row(0)["compression"] == 1 and gz.row(0)["record_count"] == 2 and gz.errors == []
    idem = scan_batches(read_hex(REAL / "kafkajs_client_idempotent_batch_produce_v7.hex"))
    r = idem.row(0)
    assert (r["producer_id"], r["producer_epoch"], r["base_sequence"], r["record_count"], r["attributes"]) == (
        4004, 0, 0, 10, 0)
    empty = scan_batches(read_hex(REAL / "sarama_empty_batch_and_empty_control_batch.hex"))
    assert list(empty.columns["record_count"]) == [0, 0]
    assert empty.row(1)["attributes"] == 0x20 and empty.row(1)["control_type"] == CONTROL_EMPTY
    assert (empty.columns["crc_valid"] == 1).all()


def test_truncation_corrupt_length_and_magic():
    data = (SYN / "scenario_orders-0_00000000000000000000.log").read_bytes()
    cut = scan_batches(data[:-30])
    assert len(cut) == 10 and cut.errors[-1].reason.startswith("truncated tail")
    assert cut.errors[-1].position == cut.end_position == 743
    partial = scan_batches(data[:-30], allow_partial_tail=True)
    assert partial.errors == [] and partial.tail_bytes > 0
    bad = bytearray(data)
    bad[79 + 8 : 79 + 12] = (5).to_bytes(4, "big")
    r = scan_batches(bytes(bad))
    assert len(r) == 1 and "corrupt batch length 5" in r.errors[0].reason and r.errors[0].position == 79
    bad = bytearray(data)
    bad[79 + 16] = 7
    r = scan_batches(bytes(bad))
    assert len(r) == 1 and "unknown magic 7" in r.errors[0].reason
    flipped = bytearray(data)
    flipped[79 + 40] ^= 1  # inside the CRC-covered header of batch 2
    r = scan_batches(bytes(flipped))
    assert len(r) == 11 and [e.position for e in r.errors] == [79] and r.columns["crc_valid"][1] == 0


def test_base_position_shifts_reported_positions():
    data = (REAL / "fvaleri_kafka39_output-topic-0_00000000000000000000.log").read_bytes()
    r = scan_batches(data[82:], base_position=82)
    assert list(r.columns["position"]) == [82]


def test_fuzz_scanners_never_raise():
    rng = random.Random(1234)
    seeds = [p.read_bytes() for p in sorted(REAL.glob("*.log")) + sorted(SYN.glob("*.log"))]
    seeds += [read_hex(p) for p in sorted(REAL.glob("*.hex"))]
    for i in range(3000):
        base = bytearray(rng.choice(seeds))
        if i % 3 == 0:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        else:
            for _ in range(rng.randint(1, 8)):
                if base:
                    base[rng.randrange(len(base))] = rng.getrandbits(8)
            data = bytes(base[: rng.randint(0, len(base))]) if i % 5 == 0 else bytes(base)
        scan = scan_batches(data)
        for e in scan.errors:
            assert e.reason and e.position >= 0
        _check_scan_against_the_format(data, scan)
        recs, _ = decode_txn_log_segment(data)
        # a record is believed only from inside a batch whose CRC holds (RecordBatch.ensureValid, as
        # LogSegment.recover applies it), at an offset inside that batch's range
        valid = {pos: (lo, hi) for pos, lo, hi, ok in zip(
            scan.columns["position"].tolist(), scan.columns["base_offset"].tolist(),
            scan.columns["last_offset"].tolist(), scan.columns["crc_valid"].tolist(), strict=True) if ok == 1}
        for r in recs:
            assert r["position"] in valid and valid[r["position"]][0] <= r["offset"] <= valid[r["position"]][1], r
        decode_snapshot(data)


def _check_scan_against_the_format(data: bytes, scan) -> None:
    """Every reported batch re-read by hand from the v2 layout (``DefaultRecordBatch``: baseOffset
    int64 @0, batchLength int32 @8, magic int8 @16, crc uint32 @17, CRC-32C over [21, 12+batchLength)
    as ``DefaultRecordBatch.isValid`` computes it), in order, inside the buffer and not overlapping."""
    prev_end = 0
    for i in range(len(scan)):
        pos = int(scan.columns["position"][i])
        base, length = struct.unpack_from(">qi", data, pos)
        assert pos >= prev_end and pos + 12 + length <= len(data)
        assert data[pos + 16] == 2 and int(scan.columns["magic"][i]) == 2
        assert int(scan.columns["base_offset"][i]) == base
        assert int(scan.columns["batch_size"][i]) == 12 + length
        (stored,) = struct.unpack_from(">I", data, pos + 17)
        assert int(scan.columns["crc"][i]) == stored
        valid = crc32c_pkg.crc32c(data[pos + 21: pos + 12 + length]) == stored
        assert int(scan.columns["crc_valid"][i]) == int(valid)
        prev_end = pos + 12 + length
    assert prev_end <= scan.end_position <= len(data)


def test_java_hash_partitions():
    assert java_string_hash("kafka-txn-0") == -1469191130
    assert txn_state_partition("kafka-txn-0") == 30
    assert txn_state_partition("my-group") == 12
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert txn_state_partition("polygenelubricants") == 0
    assert txn_state_partition("my-txnal-id", 50) == txn_state_partition("my-txnal-id")
    with pytest.raises(ValueError):
        txn_state_partition("x", 0)
