"""Tests for ``udfs.dump_text`` (kafka-dump-log.sh text → batch tables, txn records, snapshot entries).

Three layers:
1. every real posted dump in ``fixtures/samples/{dumps,public-threads}``: exact error sets, printed
   values, the ground truth stated in the public-thread prose (open transactions per dump), and a
   cross-check against the binary decoders on the byte-exact reconstructions of the same segments;
2. a generation matrix: the same batches / txn records / snapshot entries rendered in every
   documented format generation (``tests/dump_render.py``) parse back to the same tables, modulo
   the documented conventions for fields a generation does not print;
3. robustness: garbage, truncation, shuffling, binary-ish input and a seeded mutation fuzz.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from tests.dump_render import GENERATIONS, render, txn_value_size, version
from udfs.dump_text import (
    CONTROL_NOT_PRINTED,
    DumpFile,
    detect_dump,
    merge_segments,
    parse_dump,
    path_info,
)
from udfs.model import (
    BATCH_COLUMNS,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_EMPTY,
    CONTROL_NONE,
    SNAPSHOT_ENTRY_KEYS,
    TXN_RECORD_KEYS,
)
from udfs.record_batch import iter_records, scan_batches
from udfs.snapshot import decode_snapshot
from udfs.txn_log import decode_txn_log_segment

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
DUMPS = SAMPLES / "dumps"
THREADS = SAMPLES / "public-threads"
ALL_SAMPLES = sorted(DUMPS.glob("*.txt")) + sorted(THREADS.glob("*.txt"))


def parse_sample(path: Path) -> tuple[str, list[DumpFile]]:
    text = path.read_text()
    return text, parse_dump(text, source=path.name)


def open_txns(f: DumpFile) -> dict[int, int]:
    """Broker pairing (detection.md §1): per producer id in offset order a transactional data batch
    opens a transaction if none is open; any control batch of that pid closes it. No epoch matching."""
    b = f.batches
    open_: dict[int, int] = {}
    for i in np.argsort(b["base_offset"], kind="stable"):
        if not b["is_transactional"][i]:
            continue
        pid = int(b["producer_id"][i])
        if b["is_control"][i]:
            open_.pop(pid, None)
        else:
            open_.setdefault(pid, int(b["base_offset"][i]))
    return open_


def line_of(text: str, needle: str, nth: int = 0) -> int:
    hits = [i for i, ln in enumerate(text.split("\n"), 1) if needle in ln]
    return hits[nth]


# --- 1. real samples ----------------------------------------------------------------------------------

# Where a sample is incomplete, exactly these lines are errors (line number → reason fragment).
EXPECTED_ERRORS = {
    # the author's "..." elisions inside the __consumer_offsets-12 dump
    "fvaleri_kafka39_kafka-dump-log_outputs.txt": {16: "elision", 21: "elision"},
    # only the first record of block A was retrievable: batch at offset 1 has no record line
    "kafka_trunk2026_transaction-log-decoder_json_samples.txt": {10: "count 1 but 0 record lines"},
    # "| offset: 1 CreateTime: 1781" (cut by the index) and the "[... remainder ...]" note
    "case-11-kafka-pr-22615-json-transaction-log-decoder.txt": {31: "missing keySize", 32: "elision"},
}


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: p.name)
def test_samples_parse_with_exactly_the_expected_errors(path: Path) -> None:
    text, files = parse_sample(path)
    assert detect_dump(text)
    errors = {e.position: e.reason for f in files for e in f.errors}
    expected = EXPECTED_ERRORS.get(path.name, {})
    assert sorted(errors) == sorted(expected), [e.describe() for f in files for e in f.errors]
    for line, fragment in expected.items():
        assert fragment in errors[line]
    for f in files:
        assert all(e.unit == "line" and e.source == path.name for e in f.errors)
        assert set(f.batches) == set(BATCH_COLUMNS)
        for name, dtype in BATCH_COLUMNS.items():
            assert f.batches[name].dtype == np.dtype(dtype), name
            assert len(f.batches[name]) == len(f)
        assert len(f.batch_lines) == len(f)
        assert all(tuple(r) == TXN_RECORD_KEYS for r in f.txn_records)
        assert all(tuple(e) == SNAPSHOT_ENTRY_KEYS for e in f.snapshot_entries)
        assert f.kind in ("data", "txn_log", "snapshot")
        assert (f.batches["magic"] == 2).all()


def test_fvaleri_kafka39_values() -> None:
    text, files = parse_sample(DUMPS / "fvaleri_kafka39_kafka-dump-log_outputs.txt")
    assert [(f.kind, f.topic, f.partition) for f in files] == [
        ("data", "output-topic", 0), ("data", "__consumer_offsets", 12), ("txn_log", "__transaction_state", 30)]
    out, co, ts = files
    assert out.path == "/var/lib/kafka/data/kafka-log10/output-topic-0/00000000000000000000.log"
    assert out.log_start_offset == 0 and out.file_offset == 0 and out.path_source == "dumping"
    assert out.row(0) == {
        "position": 0, "base_offset": 0, "last_offset": 0, "batch_size": 82, "partition_leader_epoch": 0, "magic": 2,
        "crc": 758896000, "crc_valid": 1, "attributes": 0x10, "compression": 0, "timestamp_type": 0,
        "is_transactional": True, "is_control": False, "has_delete_horizon": False,
        "base_timestamp": 1742739702864, "first_timestamp": 1742739702864, "max_timestamp": 1742739702864,
        "producer_id": 1, "producer_epoch": 0, "base_sequence": 0, "record_count": 1, "control_type": CONTROL_NONE,
        "coordinator_epoch": -1}
    m = out.row(1)
    assert (m["base_offset"], m["position"], m["batch_size"], m["attributes"], m["crc"]) == (1, 82, 78, 0x30, 2557578104)
    assert (m["control_type"], m["coordinator_epoch"], m["base_sequence"]) == (CONTROL_COMMIT, 0, -1)
    assert list(out.batch_lines) == [line_of(text, "baseOffset: 0 lastOffset: 0"), line_of(text, "baseOffset: 1 ")]
    # __consumer_offsets-12: transactional offset commit @7 closed by COMMIT @8 (elided lines around)
    assert list(co.batches["base_offset"]) == [7, 8]
    assert list(co.batches["control_type"]) == [CONTROL_NONE, CONTROL_COMMIT]
    assert co.batches["crc"][0] == 4292816145 and co.batches["batch_size"][0] == 121
    assert open_txns(out) == {} and open_txns(co) == {}
    # __transaction_state-30, 2.5–4.0 text decoder
    states = [(r["offset"], r["txn_state"], r["txn_partitions"]) for r in ts.txn_records]
    assert states == [(0, "Empty", None), (1, "Ongoing", ["output-topic-0"]),
                      (2, "Ongoing", ["output-topic-0", "__consumer_offsets-12"]),
                      (3, "PrepareCommit", ["output-topic-0", "__consumer_offsets-12"]), (4, "CompleteCommit", [])]
    r3 = ts.txn_records[3]
    assert r3["transactional_id"] == "kafka-txn-0" and r3["producer_id"] == 1 and r3["producer_epoch"] == 0
    assert r3["txn_timeout_ms"] == 60000 and r3["txn_last_update_ts"] == 1742739703132
    assert r3["timestamp"] == 1742739703134 and r3["coordinator_epoch"] == 0 and r3["position"] == 33
    assert r3["value_version"] == 0 and r3["key_version"] == 0 and r3["tombstone"] is False
    assert r3["txn_start_ts"] is None  # not printed by text formats
    assert (r3["prev_producer_id"], r3["next_producer_id"], r3["client_txn_version"], r3["next_producer_epoch"]) == (
        -1, -1, 0, -1)


@pytest.mark.parametrize(("dump_index", "segment"), [
    (0, "fvaleri_kafka39_output-topic-0_00000000000000000000.log"),
    (2, "fvaleri_kafka39___transaction_state-30_00000000000000000000.log"),
])
def test_fvaleri_dump_equals_binary_scan(dump_index: int, segment: str) -> None:
    """The dump and the byte-exact segment it printed give identical batch tables and txn records."""
    _, files = parse_sample(DUMPS / "fvaleri_kafka39_kafka-dump-log_outputs.txt")
    _assert_same_as_binary(files[dump_index], (SAMPLES / "real" / segment).read_bytes())


def test_klog_dump_equals_binary_scan() -> None:
    _, files = parse_sample(DUMPS / "klog_kafka3.0-3.1_txn_partition_and_txn_state_dumps.txt")
    _assert_same_as_binary(files[1], (SAMPLES / "real" / "klog_kafka3x___transaction_state-4_offsets0-6.log").read_bytes())


def _assert_same_as_binary(f: DumpFile, data: bytes) -> None:
    scan = scan_batches(data)
    for name in BATCH_COLUMNS:
        np.testing.assert_array_equal(f.batches[name], scan.columns[name], err_msg=name)
    recs, _ = decode_txn_log_segment(data)
    assert len(recs) == len(f.txn_records)
    for mine, theirs in zip(f.txn_records, recs, strict=True):
        # position: line number vs byte position (by definition); start ts: not printed in text
        diff = {k for k in TXN_RECORD_KEYS if mine[k] != theirs[k]}
        assert diff <= {"position", "txn_start_ts"}, diff


def test_klog_kafka30_values_and_coordinator_epoch() -> None:
    _, (data, ts) = parse_sample(DUMPS / "klog_kafka3.0-3.1_txn_partition_and_txn_state_dumps.txt")
    assert data.log_start_offset == 0 and data.topic == "transactional-foo"
    b = data.batches
    assert list(b["base_offset"]) == [0, 2, 3, 4, 5, 6]
    assert list(b["record_count"]) == [2, 1, 1, 1, 1, 1]
    assert list(b["control_type"]) == [-1, -1, -1, CONTROL_COMMIT, -1, CONTROL_COMMIT]
    assert list(b["coordinator_epoch"]) == [-1, -1, -1, 4, -1, 4]
    # two records: baseTimestamp = first record's CreateTime, maxTimestamp from the batch line
    assert (b["base_timestamp"][0], b["first_timestamp"][0], b["max_timestamp"][0]) == (
        1632840910484, 1632840910484, 1632840910502)
    assert list(b["crc"][[3, 5]]) == [4234329125, 1079808135]
    assert open_txns(data) == {}
    # coordinator epoch of every __transaction_state record = its batch's partitionLeaderEpoch (4)
    assert {r["coordinator_epoch"] for r in ts.txn_records} == {4}
    assert [r["txn_state"] for r in ts.txn_records] == [
        "Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert {r["transactional_id"] for r in ts.txn_records} == {"my-txnal-id"}


def test_klog_snapshot_dumps_2x_and_31_34() -> None:
    _, files = parse_sample(DUMPS / "klog_producer_snapshot_dumps_kafka2x_and_3.1-3.4.txt")
    assert [f.kind for f in files] == ["snapshot", "snapshot"]
    assert files[0].file_offset == 933607637 and files[0].topic is None
    expected = [
        {"producer_id": 171101, "producer_epoch": 12, "last_sequence": 0, "last_offset": 932442537, "offset_delta": 0,
         "timestamp": 1655628030307, "coordinator_epoch": 54, "current_txn_first_offset": -1},
        {"producer_id": 199398, "producer_epoch": 0, "last_sequence": 0, "last_offset": 933607621, "offset_delta": 0,
         "timestamp": 1655761267833, "coordinator_epoch": 57, "current_txn_first_offset": 933607621},
        {"producer_id": 173102, "producer_epoch": 16, "last_sequence": 0, "last_offset": 933203854, "offset_delta": 0,
         "timestamp": 1655704254875, "coordinator_epoch": 59, "current_txn_first_offset": -1},
    ]
    # 2.x (no lastTimestamp: the batch timestamp is the entry timestamp) and 3.1–3.4 read the same
    assert files[0].snapshot_entries == expected
    assert files[1].snapshot_entries == expected


def test_trunk2026_json_decoder_sample() -> None:
    text, (f,) = parse_sample(DUMPS / "kafka_trunk2026_transaction-log-decoder_json_samples.txt")
    assert f.kind == "txn_log" and (f.topic, f.partition) == ("__transaction_state", 30)
    (r,) = f.txn_records
    assert r == {
        "offset": 0, "position": 9, "timestamp": 1781778768196, "coordinator_epoch": 0,
        "transactional_id": "kafka-txn-0", "tombstone": False, "key_version": 0, "value_version": 1,
        "producer_id": 0, "producer_epoch": 0, "txn_timeout_ms": 60000, "txn_state": "Empty", "txn_partitions": None,
        "txn_last_update_ts": 1781778768194, "txn_start_ts": -1, "prev_producer_id": 0, "next_producer_id": -1,
        "client_txn_version": 0, "next_producer_epoch": -1}
    # the batch at offset 1 lost its record line: the batch is kept, its missing record reported
    assert list(f.batches["base_offset"]) == [0, 1] and f.batches["crc"][1] == 3923950402


def test_trunk2026_block_b_strings_as_record_lines() -> None:
    """Block B holds the exact key/value strings Kafka's own DumpLogSegmentsTest asserts (4.1–4.3,
    numeric status); placed on record lines they decode, including the <DELETE> tombstone and the
    'Unknown record type' key (an error in a txn log)."""
    lines = (DUMPS / "kafka_trunk2026_transaction-log-decoder_json_samples.txt").read_text().split("\n")
    i = lines.index("# block B (key string, then value string, as asserted; <DELETE> is the tombstone payload)")
    block = lines[i + 1:i + 8]
    pairs = [(block[0], block[1]), (block[2], block[3]), (block[4], block[5]), (block[6], None)]
    out = ["Dumping /d/__transaction_state-7/00000000000000000000.log", "Log starting offset: 0"]
    for off, (k, v) in enumerate(pairs):
        out.append(f"baseOffset: {off} lastOffset: {off} count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
                   f"producerEpoch: -1 partitionLeaderEpoch: 9 isTransactional: false isControl: false "
                   f"deleteHorizonMs: OptionalLong.empty position: {off * 100} CreateTime: {off + 1} size: 100 "
                   f"magic: 2 compresscodec: none crc: 1 isvalid: true")
        vs = -1 if v in (None, "<DELETE>") else len(v)
        rec = f"| offset: {off} CreateTime: {off + 1} keySize: 9 valueSize: {vs} sequence: -1 headerKeys: [] key: {k}"
        out.append(rec + (f" payload: {v}" if v is not None else ""))
    (f,) = parse_dump("\n".join(out), source="blockB")
    assert [e.position for e in f.errors] == [10]
    assert "could not decode" in f.errors[0].reason
    r0, r1, r2 = f.txn_records
    assert (r0["transactional_id"], r0["producer_id"], r0["txn_state"], r0["txn_partitions"], r0["value_version"]) == (
        "txnId", 123, "Empty", [], 0)
    assert r1["tombstone"] is True and r1["producer_id"] is None and r1["value_version"] is None
    assert r2["txn_partitions"] == ["topic1-0", "topic1-1", "topic1-2", "topic2-3", "topic2-4", "topic2-5"]
    assert (r2["prev_producer_id"], r2["next_producer_id"], r2["producer_epoch"], r2["txn_start_ts"]) == (11, 10, 2, 13)
    assert {r["coordinator_epoch"] for r in f.txn_records} == {9}


def _case(name: str) -> tuple[str, list[DumpFile]]:
    return parse_sample(next(THREADS.glob(f"{name}*.txt")))


def test_case07_lifecycle_open_transactions_per_dump() -> None:
    text, files = _case("case-07")
    assert [(f.topic, f.partition) for f in files] == [("transaction-topic", 0), ("transaction2-topic", 0),
                                                       ("transaction4-topic", 0)] + [("transaction-topic", 0)] * 4
    # S1 commit, S2 abort-on-exit, S3 open (pid 2 @0), S4 empty abort, S5 open (pid 0 @1),
    # S6 closed by a HIGHER-epoch ABORT (epoch 2 closes data of epoch 1), S7 commit
    assert [open_txns(f) for f in files] == [{}, {}, {2: 0}, {}, {0: 1}, {}, {}]
    s1, s2, s3, s4, s5, s6, s7 = files
    assert list(s1.batches["control_type"]) == [CONTROL_NONE, CONTROL_COMMIT]
    assert list(s2.batches["producer_epoch"]) == [1, 1] and s2.batches["control_type"][1] == CONTROL_ABORT
    assert (s3.batches["producer_id"][0], s3.batches["record_count"][0], s3.batches["batch_size"][0]) == (2, 5, 145)
    assert s4.row(0)["control_type"] == CONTROL_ABORT and s4.row(0)["is_control"]
    assert list(s6.batches["producer_epoch"]) == [0, 1, 2]
    assert list(s6.batches["control_type"]) == [CONTROL_ABORT, CONTROL_NONE, CONTROL_ABORT]
    assert list(s6.batches["coordinator_epoch"]) == [0, -1, 0]
    assert list(s7.batches["base_offset"]) == [0, 1, 6, 7, 12]
    assert list(s7.batches["producer_id"]) == [0, 0, 0, 1, 1]
    assert s7.row(4)["control_type"] == CONTROL_COMMIT and s7.row(4)["max_timestamp"] == 1681912004447
    # record timestamps: first record 1681911996865 < batch max 1681911996881
    assert (s7.row(3)["base_timestamp"], s7.row(3)["max_timestamp"]) == (1681911996865, 1681911996881)
    assert s7.batch_lines[4] == line_of(text, "baseOffset: 12 lastOffset: 12")


def test_case08_transaction_state_decoder() -> None:
    _, files = _case("case-08")
    assert [(f.kind, f.topic) for f in files] == [
        ("data", "transaction-topic"), ("txn_log", "__transaction_state"), ("data", "transaction-topic"),
        ("data", "transaction-topic"), ("txn_log", "__transaction_state"), ("data", "__consumer_offsets")]
    aborted, ts_abort, before, after, ts_commit, offsets = files
    assert open_txns(aborted) == {} and aborted.batches["control_type"][1] == CONTROL_ABORT
    assert open_txns(before) == {0: 0}  # "before commit": open at that instant
    assert open_txns(after) == {}
    for ts, tid, states in ((ts_abort, "txn-2", ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort"]),
                            (ts_commit, "txn-1", ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"])):
        assert [r["txn_state"] for r in ts.txn_records] == states
        assert {(r["transactional_id"], r["producer_id"], r["producer_epoch"], r["txn_timeout_ms"])
                for r in ts.txn_records} == {(tid, 0, 0, 30000)}
        assert ts.txn_records[1]["txn_partitions"] == ["transaction-topic-0"]
        assert ts.txn_records[3]["txn_partitions"] == [] and ts.txn_records[0]["txn_partitions"] is None
        assert [r["value_version"] for r in ts.txn_records] == [0] * 4
    # the offsets dump lost its "Dumping" line: the path comes from the command's --files
    assert offsets.path_source == "command" and offsets.partition == 0
    assert len(offsets) == 10 and not offsets.batches["is_transactional"].any()
    assert offsets.txn_records == [] and open_txns(offsets) == {}


def test_case09_healthy_eos() -> None:
    _, (wc, co, ts) = _case("case-09")
    assert (wc.topic, wc.log_start_offset, wc.path_source) == ("wc-output", 0, "dumping")
    assert wc.row(0)["record_count"] == 16 and wc.row(0)["last_offset"] == 15 and wc.row(0)["batch_size"] == 256
    assert wc.row(1)["control_type"] == CONTROL_COMMIT and wc.row(1)["coordinator_epoch"] == 0
    # __consumer_offsets-12 without its Dumping line ("Starting offset" + deleteHorizonMs: 3.2)
    assert (co.topic, co.partition, co.path_source) == ("__consumer_offsets", 12, "command")
    assert list(co.batches["producer_id"]) == [-1, 0, 0, -1]
    assert list(co.batches["is_transactional"]) == [False, True, True, False]
    assert list(co.batches["control_type"]) == [-1, -1, CONTROL_COMMIT, -1]
    assert open_txns(wc) == {} and open_txns(co) == {}
    assert [(r["txn_state"], r["txn_partitions"]) for r in ts.txn_records] == [
        ("Empty", None), ("Ongoing", ["wc-output-0"]), ("Ongoing", ["__consumer_offsets-12", "wc-output-0"]),
        ("PrepareCommit", ["__consumer_offsets-12", "wc-output-0"]), ("CompleteCommit", [])]
    assert {r["transactional_id"] for r in ts.txn_records} == {"my-unique-static-tid"}
    assert ts.partition == 33


def test_case11_json_decoder_truncated() -> None:
    text, (f,) = _case("case-11")
    (r,) = f.txn_records
    assert (r["transactional_id"], r["txn_state"], r["producer_id"], r["value_version"], r["prev_producer_id"]) == (
        "kafka-txn-0", "Empty", 0, 1, 0)
    assert len(f) == 2  # the batch line of offset 1 is complete; its record line is not
    assert f.errors[0].position == line_of(text, "| offset: 1 CreateTime: 1781")


def test_case13_format_variants() -> None:
    _, files = _case("case-13")
    v1, v2, v3, snap = files
    assert [f.kind for f in files] == ["data", "data", "data", "snapshot"]
    assert (v1.row(0)["last_offset"], v1.row(0)["record_count"]) == (933607638, 2)  # as printed (author edit)
    for f in (v1, v2, v3):
        r = f.row(0)
        assert (r["base_offset"], r["partition_leader_epoch"], r["crc"], r["producer_id"], r["batch_size"]) == (
            933607637, 63, 1118624748, -1, 165)
        assert r["compression"] == 0 and r["max_timestamp"] == 1655761268674 and not r["is_transactional"]
        assert f.records_printed
    assert v2.log_start_offset == 0 and v3.row(0)["record_count"] == 1
    assert [e["current_txn_first_offset"] for e in snap.snapshot_entries] == [933607621, 933607621]
    assert {e["timestamp"] for e in snap.snapshot_entries} == {1655761267833}
    assert snap.path is None


# --- 2. generation matrix ---------------------------------------------------------------------------


def _rows_of(cols: dict[str, np.ndarray]) -> list[dict]:
    return [{k: cols[k][i].item() for k in BATCH_COLUMNS} for i in range(len(cols["base_offset"]))]


def _matrix_batches() -> list[dict]:
    """Binary scans of the synthetic scenario and the real 3.9 segment, plus hand-made headers for
    what those lack (LogAppendTime, delete horizon, empty batches, zstd with offset gaps, bad CRC,
    a KRaft control type, extreme values)."""
    rows = _rows_of(scan_batches((SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000000.log").read_bytes()).columns)
    pos = rows[-1]["position"] + rows[-1]["batch_size"]
    base = rows[-1]["last_offset"] + 1

    def row(**kw) -> dict:
        nonlocal pos, base
        r = dict(position=pos, base_offset=base, last_offset=base, batch_size=78, partition_leader_epoch=7, magic=2,
                 crc=123, crc_valid=1, compression=0, timestamp_type=0, is_transactional=True, is_control=False,
                 has_delete_horizon=False, base_timestamp=1_700_000_100_000, max_timestamp=1_700_000_100_000,
                 producer_id=5000, producer_epoch=3, base_sequence=0, record_count=1, control_type=CONTROL_NONE,
                 coordinator_epoch=-1)
        r.update(kw)
        r["attributes"] = (r["compression"] | r["timestamp_type"] << 3 | int(r["is_transactional"]) << 4
                           | int(r["is_control"]) << 5 | int(r["has_delete_horizon"]) << 6)
        r["first_timestamp"] = r["max_timestamp"] if r["timestamp_type"] == 1 or r["has_delete_horizon"] \
            else r["base_timestamp"]
        pos += r["batch_size"]
        base = r["last_offset"] + 1
        return r

    t = 1_700_000_200_000
    rows += [
        row(timestamp_type=1, record_count=3, last_offset=base + 2, base_timestamp=t, max_timestamp=t + 900),
        row(is_control=True, base_sequence=-1, has_delete_horizon=True, base_timestamp=t + 86_400_000,
            max_timestamp=t + 1000, control_type=CONTROL_COMMIT, coordinator_epoch=5),
        row(is_control=True, base_sequence=-1, record_count=0, batch_size=61, base_timestamp=t + 2000,
            max_timestamp=t + 2000, control_type=CONTROL_EMPTY),
        row(record_count=0, batch_size=61, base_sequence=4, base_timestamp=t + 3000, max_timestamp=t + 3000),
        row(compression=4, record_count=4, last_offset=base + 10, base_sequence=2_147_483_646, base_timestamp=t + 4000,
            max_timestamp=t + 4100, batch_size=200),
        row(crc_valid=0, crc=2**32 - 1, producer_id=2**62, producer_epoch=32767, base_sequence=9,
            base_timestamp=t + 5000, max_timestamp=t + 5000),
        row(is_transactional=False, is_control=True, producer_id=-1, producer_epoch=-1, base_sequence=-1,
            control_type=2, partition_leader_epoch=-1, base_timestamp=t + 6000, max_timestamp=t + 6000),
        row(is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1, compression=2,
            record_count=2, last_offset=base + 1, base_timestamp=t + 7000, max_timestamp=t + 7001),
    ]
    return rows


def _expected_batches(rows: list[dict], gen: tuple[int, int], deep: bool, skip_meta: bool = False) -> list[dict]:
    """The documented conventions (udfs.dump_text module docstring), applied to source rows."""
    out = []
    for r in rows:
        e = dict(r)
        records_only = deep and gen < (2, 2)
        records = deep and not skip_meta and r["record_count"] > 0
        if records_only:
            if r["record_count"] == 0:
                continue  # an empty batch has no record to print: invisible in ≤2.1 deep dumps
            ts = [r["base_timestamp"] if r["timestamp_type"] == 0 and not r["has_delete_horizon"]
                  else r["max_timestamp"]] + [r["max_timestamp"]] * (r["record_count"] - 1)
            e.update(batch_size=0, partition_leader_epoch=-1, crc=0, crc_valid=-1, has_delete_horizon=False,
                     max_timestamp=max(ts), base_timestamp=ts[0] if r["timestamp_type"] == 0 else max(ts))
            if gen < (1, 0):
                e["producer_epoch"] = -1
        else:
            dh = r["has_delete_horizon"] and gen >= (3, 2)
            if gen < (2, 1):
                e["is_control"] = r["is_transactional"] and r["base_sequence"] == -1
            if gen < (2, 0):
                e["record_count"] = -1
            e["has_delete_horizon"] = dh
            if dh:
                e["base_timestamp"] = r["base_timestamp"]
            elif records and r["timestamp_type"] == 0:
                e["base_timestamp"] = r["base_timestamp"] if not r["has_delete_horizon"] else r["max_timestamp"]
            else:
                e["base_timestamp"] = r["max_timestamp"]
            if not e["is_control"]:
                e.update(control_type=CONTROL_NONE, coordinator_epoch=-1)
            elif e["record_count"] == 0:
                e.update(control_type=CONTROL_EMPTY, coordinator_epoch=-1)
            elif not records:
                e.update(control_type=CONTROL_NOT_PRINTED, coordinator_epoch=-1)
        e["first_timestamp"] = e["max_timestamp"] if e["timestamp_type"] == 1 or e["has_delete_horizon"] \
            else e["base_timestamp"]
        e["attributes"] = (e["compression"] | e["timestamp_type"] << 3 | int(e["is_transactional"]) << 4
                           | int(e["is_control"]) << 5 | int(e["has_delete_horizon"]) << 6)
        out.append(e)
    return out


MODES = [(g, deep, pd) for g in GENERATIONS for deep in (True, False) for pd in (True, False)
         if not (not deep and pd and version(g) >= (1, 1))]  # 1.1+: --print-data-log implies deep


@pytest.mark.parametrize(("gen", "deep", "print_data"), MODES)
def test_generation_matrix_batches(gen: str, deep: bool, print_data: bool) -> None:
    rows = _matrix_batches()
    text = render("data", rows, gen, deep=deep, print_data=print_data)
    files = parse_dump(text, source=gen)
    (f,) = files
    expected = _expected_batches(rows, version(gen), deep)
    got = [f.row(i) for i in range(len(f))]
    assert got == expected
    bad = {r["base_offset"] for r in rows if r["crc_valid"] == 0}
    if deep and version(gen) < (2, 2):
        assert f.errors == []  # no CRC printed, nothing to flag
    else:
        assert [(e.base_offset, "isvalid: false" in e.reason) for e in f.errors] == [(o, True) for o in sorted(bad)]
    assert f.records_printed == deep and f.kind == "data" and f.topic == "orders"


def test_generation_matrix_same_table_within_families() -> None:
    """Batches without LogAppendTime/delete horizon (the real + synthetic scans) read back exactly as
    the binary scanner read them from every generation that prints batch lines and records."""
    rows = _rows_of(scan_batches((SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000000.log").read_bytes()).columns)
    rows += _rows_of(scan_batches((SAMPLES / "real" / "fvaleri_kafka39_output-topic-0_00000000000000000000.log")
                                  .read_bytes()).columns)
    for r in rows[-2:]:
        r["position"] += 10_000
        r["base_offset"] += 100
        r["last_offset"] += 100
    tables = {}
    for gen in GENERATIONS:
        if version(gen) < (2, 2):
            continue
        (f,) = parse_dump(render("data", rows, gen))
        tables[gen] = f.batches
        assert [f.row(i) for i in range(len(f))] == rows, gen
    first = next(iter(tables.values()))
    for gen, t in tables.items():
        for k in BATCH_COLUMNS:
            np.testing.assert_array_equal(t[k], first[k], err_msg=f"{gen} {k}")


def test_skip_record_metadata_and_trailing_bytes() -> None:
    rows = _matrix_batches()
    for gen in ("2.8", "3.9", "4.2"):
        text = render("data", rows, gen, skip_record_metadata=True, trailing_bytes=17)
        (f,) = parse_dump(text, source="skip")
        assert [f.row(i) for i in range(len(f))] == _expected_batches(rows, version(gen), True, skip_meta=True)
        reasons = [e.reason for e in f.errors]
        assert any("truncated tail: 17 invalid bytes" in r for r in reasons)
        assert f.errors[-1].position == len(text.rstrip("\n").split("\n"))
        assert sum("isvalid: false" in r for r in reasons) == 1 and len(reasons) == 2


def _matrix_txn_records() -> list[dict]:
    recs: list[dict] = []
    for name in ("real/fvaleri_kafka39___transaction_state-30_00000000000000000000.log",
                 "real/klog_kafka3x___transaction_state-4_offsets0-6.log",
                 "synthetic/tv2_txn_state-40_00000000000000000000.log"):
        got, scan = decode_txn_log_segment((SAMPLES / name).read_bytes())
        assert not scan.errors
        recs += got
    # tagged fields and a transactional id with spaces/UTF-8 (values are opaque text after "key: ")
    extra = dict(recs[-2], transactional_id="ü txn payload: x", prev_producer_id=11, next_producer_id=12,
                 next_producer_epoch=3, client_txn_version=2, txn_partitions=["a-0", "a-1", "b.c-7"], txn_state="Ongoing")
    recs.append(extra)
    for i, r in enumerate(recs):
        r["offset"] = i
        r["position"] = None
    return recs


def test_txn_value_size_matches_real_bytes() -> None:
    """The renderer's value-size formula (also what the parser's version inference relies on)
    equals the real serialized sizes, v0 and v1."""
    for name in ("real/fvaleri_kafka39___transaction_state-30_00000000000000000000.log",
                 "real/klog_kafka3x___transaction_state-4_offsets0-6.log",
                 "synthetic/tv2_txn_state-40_00000000000000000000.log"):
        data = (SAMPLES / name).read_bytes()
        got, scan = decode_txn_log_segment(data)
        buf = memoryview(data)
        sizes = []
        for i in range(len(scan)):
            p = int(scan.columns["position"][i])
            for _, _, _, value in iter_records(buf, p + 61, p + int(scan.columns["batch_size"][i]), 1):
                sizes.append(-1 if value is None else len(value))
        assert [txn_value_size(r) for r in got] == sizes, name


def _expected_txn(rec: dict, gen: tuple[int, int]) -> dict:
    e = dict(rec)
    e["position"] = None
    if gen < (2, 2):
        e["coordinator_epoch"] = None  # ≤2.1 deep lines print no partition leader epoch
    if gen >= (4, 1) or rec["tombstone"]:
        return e
    e["txn_start_ts"] = None
    if e["txn_state"] == "Empty":
        e["txn_partitions"] = None
    if e["value_version"] == 1:
        e.update(prev_producer_id=None, next_producer_id=None, client_txn_version=None, next_producer_epoch=None)
    return e


@pytest.mark.parametrize("gen", GENERATIONS)
def test_generation_matrix_txn_records(gen: str) -> None:
    recs = _matrix_txn_records()
    text = render("txn_log", recs, gen)
    (f,) = parse_dump(text, source=gen)
    g = version(gen)
    expected = [_expected_txn(r, g) for r in recs]
    if g < (2, 5):
        # KAFKA-9293: the ≤2.4 decoder dies on the first tombstone; the parser reports where.
        first_tomb = next(i for i, r in enumerate(recs) if r["tombstone"])
        expected = expected[:first_tomb]
        crash = [e for e in f.errors if e.reason.startswith("the tool failed here")]
        assert [e.position for e in crash] == [line_of(text, "Exception in thread")]
        # 2.2–2.4 print the tombstone's batch line before dying on its record
        lost = [e.base_offset for e in f.errors if "count 1 but 0 record lines" in e.reason]
        assert lost == ([recs[first_tomb]["offset"]] if g >= (2, 2) else [])
        assert len(f.errors) == len(crash) + len(lost)
    else:
        assert f.errors == []
    got = [dict(r, position=None) for r in f.txn_records]
    assert got == expected
    assert f.kind == "txn_log" and f.partition == 30


@pytest.mark.parametrize("gen", ["0.11", "1.0", "1.1", "2.8", "3.0", "3.1", "3.4", "3.5", "4.2", "4.3", "4.4"])
def test_generation_matrix_snapshot_entries(gen: str) -> None:
    entries = decode_snapshot((SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000008.snapshot")
                              .read_bytes()).entries
    entries = entries + [dict(entries[2], producer_id=2**40, last_sequence=5, offset_delta=3, last_offset=99,
                              current_txn_first_offset=-1, coordinator_epoch=0)]
    text = render("snapshot", entries, gen)
    (f,) = parse_dump(text, source=gen)
    g = version(gen)
    expected = []
    for e in entries:
        e = dict(e)
        if (1, 0) <= g < (3, 1) and e["last_offset"] < 0:
            e["timestamp"] = -1  # 1.0–3.0 print no entry timestamp without batch metadata
        expected.append(e)
    assert f.errors == [] and f.kind == "snapshot" and f.file_offset == 8
    assert f.snapshot_entries == expected


def test_snapshot_35_lines_from_synthetic_expectations() -> None:
    import json
    exp = json.loads((SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000008.snapshot.expected.json")
                     .read_text())
    text = "Dumping /x/orders-0/00000000000000000008.snapshot\n" + "\n".join(exp["expected_dump_line_kafka_3_5_to_4_2"])
    (f,) = parse_dump(text)
    assert render("snapshot", f.snapshot_entries, "3.5", path="/x/orders-0/00000000000000000008.snapshot") == text + "\n"
    snap = decode_snapshot((SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000008.snapshot").read_bytes())
    assert f.snapshot_entries == snap.entries


# --- 3. specific behaviour ------------------------------------------------------------------------


def _batch(off: int, **kw) -> str:
    f = {"baseOffset": off, "lastOffset": off, "count": 1, "baseSequence": 0, "lastSequence": 0, "producerId": 7,
         "producerEpoch": 1, "partitionLeaderEpoch": 2, "isTransactional": "true", "isControl": "false",
         "deleteHorizonMs": "OptionalLong.empty", "position": off * 70, "CreateTime": 1000 + off, "size": 70,
         "magic": 2, "compresscodec": "none", "crc": 5, "isvalid": "true"}
    f.update(kw)
    return " ".join(f"{k}: {v}" for k, v in f.items() if v is not None)


def test_messy_posting_crlf_indentation_prompts_prefixes() -> None:
    body = [
        "Here is what we saw on the broker:",
        "```",
        "[kafka@broker-0 ~]$ bin/kafka-dump-log.sh --deep-iteration \\",
        "    --files /data/orders-3/00000000000000000100.log",
        "    Dumping /data/orders-3/00000000000000000100.log",
        "    Starting offset: 100",
        "kafka_1  | " + _batch(100),
        "kafka_1  | | offset: 100 CreateTime: 1100 keysize: -1 valuesize: 3 sequence: 0 headerKeys: []",
        "> " + _batch(101, isTransactional="true", isControl="true", baseSequence=-1, lastSequence=-1),
        "> | offset: 101 CreateTime: 1101 keysize: 4 valuesize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT "
        "coordinatorEpoch: 3",
        "",
        "$ " + _batch(102, count=2, lastOffset=103),
        "\t| offset: 102 CreateTime: 1102 keysize: -1 valuesize: 3 sequence: 0 headerKeys: [] payload: a",
        "| offset: 103 CreateTime: 1102 keysize: -1 valuesize: 3 sequence: 1 headerKeys: [] payload: b c",
        "continuation of a payload with a newline in it",
        "```",
        "The isTransactional: true flag shows it (prose mentioning one field is ignored).",
    ]
    text = "\r\n".join(body)
    (f,) = parse_dump(text, source="post")
    assert f.errors == [] and f.path_source == "dumping" and (f.topic, f.partition) == ("orders", 3)
    assert f.log_start_offset == 100 and f.file_offset == 100
    assert list(f.batches["base_offset"]) == [100, 101, 102]
    assert list(f.batches["control_type"]) == [CONTROL_NONE, CONTROL_ABORT, CONTROL_NONE]
    assert f.batches["coordinator_epoch"][1] == 3
    assert list(f.batch_lines) == [7, 9, 12]
    assert open_txns(f) == {7: 102}
    # lone-CR line endings (old Mac) give the same result
    (g,) = parse_dump("\r".join(body), source="post")
    assert [g.row(i) for i in range(len(g))] == [f.row(i) for i in range(len(f))]


def test_topic_partition_override_and_path_info() -> None:
    text = "Starting offset: 0\n" + _batch(0) + "\n"
    (f,) = parse_dump(text)
    assert (f.topic, f.partition, f.path, f.kind) == (None, None, None, "data")
    (g,) = parse_dump(text, topic="payments", partition=4)
    assert (g.topic, g.partition) == ("payments", 4)
    assert path_info("/k/__transaction_state-12/00000000000000001234.log") == ("__transaction_state", 12, 1234, "log")
    assert path_info(r"C:\kafka\my.topic-with-dash-7\00000000000000000000.snapshot") == ("my.topic-with-dash", 7, 0,
                                                                                          "snapshot")
    assert path_info("/k/t-0.0123456789abcdef0123456789abcdef-delete/00000000000000000005.log")[:3] == ("t", 0, 5)
    (t,) = parse_dump(text, topic="__transaction_state")
    assert t.kind == "txn_log"


def test_shallow_old_versions_control_inference_and_not_printed() -> None:
    # 1.1 shallow: no count, no isControl; the marker is the transactional batch without sequence
    rows = _matrix_batches()[:4]
    (f,) = parse_dump(render("data", rows, "1.1", deep=False))
    assert list(f.batches["is_control"]) == [False, False, True, False]
    assert list(f.batches["control_type"]) == [-1, -1, CONTROL_NOT_PRINTED, -1]
    assert list(f.batches["record_count"]) == [-1] * 4
    assert open_txns(f) == {4000: 4, 4001: 2}  # the inferred marker at 3 closed pid 4000's transaction at 0


def test_kraft_control_json_and_legacy_entries() -> None:
    lines = [
        "Dumping /k/__cluster_metadata-0/00000000000000000000.log", "Log starting offset: 0",
        _batch(0, isTransactional="false", isControl="true", producerId=-1, producerEpoch=-1, baseSequence=-1,
               lastSequence=-1),
        '| offset: 0 CreateTime: 1 keySize: 4 valueSize: 19 sequence: -1 headerKeys: [] SnapshotHeader {"version":0}',
        _batch(1, isTransactional="false", isControl="true", producerId=-1, producerEpoch=-1, baseSequence=-1,
               lastSequence=-1),
        '| offset: 1 CreateTime: 1 keySize: 4 valueSize: 19 sequence: -1 headerKeys: [] LeaderChange: {"leaderId":1}',
        "offset: 5 position: 140 CreateTime: 1 size: 40 magic: 1 compresscodec: none crc: 1 isvalid: true",
        "| offset: 5 CreateTime: 1 keySize: -1 valueSize: 3 isValid: true crc: 1} payload: abc",
        "offset: 6 position: 180 NoTimestampType: -1 size: 40 magic: 0 compresscodec: NONE crc: 1 isvalid: true",
    ]
    (f,) = parse_dump("\n".join(lines))
    assert f.errors == []
    assert list(f.batches["control_type"]) == [3, 2]
    assert f.legacy_entries == 2


def test_value_version_inference_and_state_spellings() -> None:
    recs = _matrix_txn_records()
    tv2 = [r for r in recs if r["value_version"] == 1 and not r["tombstone"]]
    (f,) = parse_dump(render("txn_log", tv2, "4.0"))  # 4.0 writes v1 values but prints text
    assert [r["value_version"] for r in f.txn_records] == [1] * len(tv2)
    assert all(r["client_txn_version"] is None for r in f.txn_records)
    text = render("txn_log", recs[:2], "3.9").replace("state=Ongoing", "state=ONGOING")
    (g,) = parse_dump(text)
    assert [r["txn_state"] for r in g.txn_records] == ["Empty", "Ongoing"] and g.errors == []
    bad = render("txn_log", recs[:2], "3.9").replace("state=Ongoing", "state=Sleeping")
    (h,) = parse_dump(bad)
    assert len(h.txn_records) == 1 and "unknown transaction state 'Sleeping'" in h.errors[0].reason


def test_header_mismatch_and_unreadable_fields_are_reported() -> None:
    lines = ["Dumping /k/t-0/00000000000000000010.log", "Starting offset: 0",
             _batch(10, producerId="x7"),
             "| offset: 10 CreateTime: 1 keysize: -1 valuesize: 1 sequence: 0 headerKeys: []",
             _batch(11, producerEpoch=40000),
             _batch(12, compresscodec="brotli"),
             _batch(13, crc=-1),
             _batch(14, isvalid=None),
             _batch(15, deleteHorizonMs="OptionalLong[abc]"),
             _batch(16, magic=1),
             _batch(17, CreateTime=None),
             _batch(18) + " producerId: 8",
             _batch(19)]
    (f,) = parse_dump("\n".join(lines), source="bad")
    reasons = {e.position: e.reason for e in f.errors}
    assert "header offset 0 differs" in reasons[1]
    assert "producerId: 'x7' is not an integer" in reasons[3]
    assert "record line of an unreadable batch line (line 3)" in reasons[4]
    assert "producerEpoch: 40000 is out of range" in reasons[5]
    assert "unknown codec 'brotli'" in reasons[6]
    assert "crc: -1 is out of range" in reasons[7]
    assert "missing isvalid" in reasons[8]
    assert "deleteHorizonMs" in reasons[9]
    assert "magic 1" in reasons[10]
    assert "missing CreateTime/LogAppendTime" in reasons[11]
    assert "printed twice" in reasons[12]
    assert list(f.batches["base_offset"]) == [19]  # nothing invented from unreadable lines


def test_record_line_problems() -> None:
    lines = ["Dumping /k/t-0/00000000000000000000.log", "Log starting offset: 0",
             "| offset: 0 CreateTime: 1 keySize: -1 valueSize: 1 sequence: 0 headerKeys: []",  # before any batch
             _batch(0, isControl="true", baseSequence=-1),
             "| offset: 0 CreateTime: 1 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: MAYBE "
             "coordinatorEpoch: 0",
             _batch(1, isControl="true", baseSequence=-1),
             "| offset: 1 CreateTime: 1 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMar...",
             _batch(2),
             "| offset: 2 CreateTime: 1 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT "
             "coordinatorEpoch: 0",
             _batch(3, count=2, lastOffset=4),
             "| offset: 3 CreateTime: 1 keySize: -1 valueSize: 1 sequence: 0 headerKeys: []"]
    (f,) = parse_dump("\n".join(lines), source="rec")
    reasons = {e.position: e.reason for e in f.errors}
    assert "without its batch line" in reasons[3]
    assert "endTxnMarker: 'MAYBE'" in reasons[5]
    assert "without endTxnMarker" in reasons[7]
    assert "control record in a batch printed with isControl: false" in reasons[9]
    assert "count 2 but 1 record lines" in reasons[10]
    # control type unknown where the record line was unreadable; never guessed
    assert list(f.batches["control_type"]) == [CONTROL_NOT_PRINTED, CONTROL_NOT_PRINTED, CONTROL_NONE, CONTROL_NONE]


def test_garbage_and_binary_input() -> None:
    assert parse_dump("") == []
    assert parse_dump("just some prose\nwith: colons but nothing else\n") == []
    assert not detect_dump("hello world\nfoo: bar baz: 1\n")
    assert not detect_dump(b"\x00\x01\x02binary")
    rnd = random.Random(7)
    blob = bytes(rnd.randrange(256) for _ in range(20000))
    for text in (blob.decode("latin-1"), blob.decode("utf-8", "replace")):
        files = parse_dump(text, source="blob")
        n = len(text.split("\n")) if "\n" in text or "\r" not in text else len(text.split("\r"))
        for f in files:
            assert len(f) == 0 and not f.txn_records and not f.snapshot_entries
            assert all(1 <= e.position <= n for e in f.errors)
    # a dump-like line with a mangled start is reported, not dropped
    (f,) = parse_dump("xxOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 producerId: 1 producerEpoch: 0\n")
    assert f.errors[0].position == 1 and "unrecognised dump line" in f.errors[0].reason


def test_truncated_at_every_character() -> None:
    """Cut a 3.9 batch line at every character: never an exception,
    never a batch read from an incomplete line, always an error at the cut line."""
    head = "Dumping /d/output-topic-0/00000000000000000000.log\nLog starting offset: 0\n"
    line = _batch(0)
    for cut in range(1, len(line)):
        (f,) = parse_dump(head + line[:cut], source="cut")
        complete = line[:cut] == line or line[:cut].rstrip() == line  # only the full line is a batch
        assert len(f) == (1 if complete else 0), cut
        if not complete and cut >= len("baseOffset:"):  # shorter fragments are not recognisable
            assert [e.position for e in f.errors] == [3], (cut, line[:cut])


def test_shuffled_dump_reports_and_invents_nothing() -> None:
    text, _ = parse_sample(THREADS / "case-07-ableasdale-lifecycle-open-abort-epoch-bump.txt")
    rnd = random.Random(3)
    lines = text.split("\n")
    for _ in range(20):
        rnd.shuffle(lines)
        files = parse_dump("\n".join(lines), source="shuffled")
        _check_invariants("\n".join(lines), files)
        assert sum(len(f.errors) for f in files) > 0


def test_merge_segments_orders_by_offset_and_drops_overlaps() -> None:
    rows = _matrix_batches()
    seg_a = render("data", rows[:5], "3.9", path="/k/orders-0/00000000000000000000.log")
    seg_b = render("data", rows[5:], "3.9", path=f"/k/orders-0/{rows[5]['base_offset']:020d}.log")
    snap = render("snapshot", [], "3.9")
    txn = render("txn_log", _matrix_txn_records()[:3], "3.9")
    files = parse_dump(seg_b + txn + snap + seg_a, source="m")
    merged = merge_segments(files)
    assert [(f.kind, f.topic) for f in merged] == [("data", "orders"), ("txn_log", "__transaction_state"),
                                                   ("snapshot", "orders")]
    data = merged[0]
    assert list(data.batches["base_offset"]) == [r["base_offset"] for r in rows]  # by offset, not text order
    assert data.segment_paths == ["/k/orders-0/00000000000000000000.log",
                                  f"/k/orders-0/{rows[5]['base_offset']:020d}.log"]
    assert len(data.batch_lines) == len(data)
    # the same segment dumped twice (a later, longer dump): the repeated batches are dropped, reported
    again = parse_dump(render("data", rows[:3], "3.9", path="/k/orders-0/00000000000000000000.log")
                       + render("data", rows[:5], "3.9", path="/k/orders-0/00000000000000000000.log"), source="m")
    (m,) = merge_segments(again)
    assert list(m.batches["base_offset"]) == [r["base_offset"] for r in rows[:5]]
    overlap = [e for e in m.errors if "segments overlap" in e.reason]
    assert [e.base_offset for e in overlap] == [r["base_offset"] for r in rows[:3]]


def test_detect_dump() -> None:
    for p in ALL_SAMPLES:
        assert detect_dump(p.read_text())
    assert detect_dump("   | offset: 3 CreateTime: 1 keySize: 1")
    assert detect_dump(b"Dumping /x/t-0/00000000000000000000.log\n")
    assert not detect_dump("Dumping the logs was not helpful.\nbaseOffsets are fine")


# --- 4. fuzz ----------------------------------------------------------------------------------------

_CHARS = "0123456789-: |.abcxyzOffset\x00\ufffd\t[]{}()\"',=\\…"


def _lines_of(text: str) -> list[str]:
    sep = "\n" if "\n" in text or "\r" not in text else "\r"
    return [ln[:-1] if ln.endswith("\r") else ln for ln in text.split(sep)]


def _check_invariants(text: str, files: list[DumpFile]) -> None:
    lines = _lines_of(text)
    n = len(lines)
    err_lines: set[int] = set()
    for f in files:
        assert f.kind in ("data", "txn_log", "snapshot", "unknown")
        for e in f.errors:
            assert e.unit == "line" and 1 <= e.position <= n and e.reason
            err_lines.add(e.position)
        for name, dtype in BATCH_COLUMNS.items():
            assert f.batches[name].dtype == np.dtype(dtype) and len(f.batches[name]) == len(f)
        assert len(f.batch_lines) == len(f)
        for i in range(len(f)):
            ln = lines[f.batch_lines[i] - 1]
            r = f.row(i)
            # every value of the row is printed on its line (nothing invented)
            assert re.search(rf"(?<![A-Za-z])(?:baseOffset|offset): {r['base_offset']}(?!\S)", ln), (ln, r)
            assert re.search(rf"(?<![A-Za-z])producerId: {r['producer_id']}(?!\S)", ln), (ln, r)
            assert re.search(rf"(?<![A-Za-z])position: {r['position']}(?!\S)", ln), (ln, r)
        for t in f.txn_records:
            assert tuple(t) == TXN_RECORD_KEYS
            ln = lines[t["position"] - 1]
            assert t["transactional_id"] in ln and (t["offset"] is None or f"offset: {t['offset']} " in ln), ln
        for s in f.snapshot_entries:
            assert tuple(s) == SNAPSHOT_ENTRY_KEYS
    # nothing silently dropped: every batch line is a row or an error; every snapshot line an entry or an error
    rows_at = {int(x) for f in files for x in f.batch_lines}
    snap_lines = [i for i, ln in enumerate(lines, 1) if ln.strip().startswith("producerId: ")]
    for i, ln in enumerate(lines, 1):
        if ln.strip().startswith("baseOffset:"):
            assert i in rows_at or i in err_lines, (i, ln)
    n_entries = sum(len(f.snapshot_entries) for f in files)
    assert n_entries + len([i for i in snap_lines if i in err_lines]) >= len(snap_lines)


def _mutate(lines: list[str], rnd: random.Random) -> list[str]:
    lines = list(lines)
    for _ in range(rnd.randint(1, 3)):
        if not lines:
            lines.append("")
        i = rnd.randrange(len(lines))
        op = rnd.randrange(11)
        ln = lines[i]
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, ln)
        elif op == 2:
            j = rnd.randrange(len(lines))
            lines[i], lines[j] = lines[j], ln
        elif op == 3 and ln:
            lines[i] = ln[: rnd.randrange(len(ln))]
        elif op == 4 and ln:
            k = rnd.randrange(len(ln))
            lines[i] = ln[:k] + rnd.choice(_CHARS) + ln[k + 1:]
        elif op == 5:
            lines.insert(i, "".join(chr(rnd.randrange(1, 0x3000)) for _ in range(rnd.randrange(60))))
        elif op == 6 and ln:
            lines[i] = re.sub(r"\d", lambda m: rnd.choice("0123456789x-"), ln, count=rnd.randint(1, 3))
        elif op == 7 and i + 1 < len(lines):
            lines[i: i + 2] = [ln + rnd.choice(["", " ", "..."]) + lines[i + 1]]
        elif op == 8 and ln:
            k = rnd.randrange(len(ln))
            lines[i: i + 1] = [ln[:k], ln[k:]]
        elif op == 9:
            lines[i] = rnd.choice(["$ ", "    ", "> ", "kafka_1 | ", "...", "…"]) + ln
        else:
            k = rnd.randrange(len(lines))
            window = lines[k: k + 6]
            rnd.shuffle(window)
            lines[k: k + 6] = window
    return lines


def test_fuzz_mutations() -> None:
    corpus = [p.read_text() for p in ALL_SAMPLES]
    rows = _matrix_batches()
    corpus += [render("data", rows, g) for g in ("0.11", "1.0", "2.1", "2.8", "3.9")]
    corpus += [render("data", rows, "2.0", deep=False), render("txn_log", _matrix_txn_records(), "4.4"),
               render("txn_log", _matrix_txn_records(), "2.4"), render("snapshot", decode_snapshot(
                   (SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000008.snapshot").read_bytes()).entries,
                   "1.0")]
    split = [c.split("\n") for c in corpus]
    rnd = random.Random(20260822)
    for k in range(3000):
        lines = _mutate(split[k % len(split)], rnd)
        text = ("\r\n" if k % 7 == 0 else "\n").join(lines)
        files = parse_dump(text, source="fuzz")
        _check_invariants(text, files)
        for f in files:
            assert all(e.source == "fuzz" for e in f.errors)


def test_txn_log_recognised_by_content_when_the_path_is_lost() -> None:
    text = (DUMPS / "klog_kafka3.0-3.1_txn_partition_and_txn_state_dumps.txt").read_text()
    body = text[text.index("Dumping /tmp/kafka-0-logs/__transaction_state-4"):].split("\n", 1)[1]
    # an undecodable key on one record: an error only once the file is known to be a txn log
    lines = body.split("\n")
    lines[2] = lines[2].split(" key: ")[0] + " key: unknown::version=3"
    (f,) = parse_dump("\n".join(lines), source="nopath")
    assert (f.kind, f.path, f.topic) == ("txn_log", None, None)
    assert len(f.txn_records) == 6 and [e.position for e in f.errors] == [3]
    (g,) = parse_dump("\n".join(lines), source="nopath", topic="__transaction_state", partition=4)
    assert g.partition == 4 and g.kind == "txn_log" and [e.position for e in g.errors] == [3]
    # the same key in a data partition's dump (e.g. --offsets-decoder output) is not our business
    (h,) = parse_dump("\n".join(lines), source="nopath", topic="orders")
    assert (h.kind, h.txn_records, h.errors) == ("data", [], [])
