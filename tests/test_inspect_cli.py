"""``txnwatch inspect`` end to end on every sample file, against the documented values.

Expected values come from ``tests/fixtures/samples/README-vectors.md``, the ``#`` comments of the
``.hex`` files, the ``.provenance.txt`` sidecars, the published ``kafka-dump-log`` outputs in
``samples/dumps/`` and the ``*_expected.json`` files of ``samples/synthetic/``. The CLI is run in
process (``streaming.cli.main``) so the whole file stays well under a few seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from streaming.cli import main

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
REAL = SAMPLES / "real"
SYN = SAMPLES / "synthetic"

# Fields every batch object must carry (the brief of the inspect command).
BATCH_FIELDS = (
    "base_offset", "last_offset", "partition_leader_epoch", "crc", "crc_valid", "is_transactional",
    "is_control", "producer_id", "producer_epoch", "record_count", "control_type", "coordinator_epoch",
)
TXN_FIELDS = (
    "transactional_id", "txn_state", "txn_partitions", "txn_timeout_ms", "txn_start_ts", "txn_last_update_ts",
    "prev_producer_id", "next_producer_id", "client_txn_version", "tombstone",
)


def run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop anything printed before
    rc = main(["inspect", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *args: str) -> tuple[int, list[dict], str]:
    rc, out, err = run(capsys, "--json", *args)
    return rc, [json.loads(line) for line in out.splitlines()], err


def batches(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["type"] == "batch"]


def txn_records(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["type"] == "txn_record"]


def assert_rows(got: list[dict], expected: list[dict], fields: tuple[str, ...]) -> None:
    assert len(got) == len(expected), [g.get("base_offset", g.get("offset")) for g in got]
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        for f in fields:
            assert f in g, f"row {i}: field {f} missing"
        diff = {k: (g.get(k), v) for k, v in e.items() if g.get(k) != v}
        assert not diff, f"row {i}: (got, expected) {diff}"


# --- expected batch tables ------------------------------------------------------------------------


def marker(base_offset: int, pid: int, epoch: int, ctype: str, coord_epoch: int, crc: int, **kw) -> dict:
    """A transactional control batch with one EndTxnMarker record."""
    return dict(base_offset=base_offset, last_offset=base_offset, producer_id=pid, producer_epoch=epoch,
                is_transactional=True, is_control=True, record_count=1, control_type=ctype,
                coordinator_epoch=coord_epoch, crc=crc, crc_valid=True, base_sequence=-1, **kw)


def data(base_offset: int, last_offset: int, pid: int, epoch: int, count: int, crc: int | None, *, txn: bool,
         **kw) -> dict:
    """A data batch (crc None: the documentation says "verified" without listing the value)."""
    row = dict(base_offset=base_offset, last_offset=last_offset, producer_id=pid, producer_epoch=epoch,
               record_count=count, crc_valid=True, is_transactional=txn, is_control=False, control_type=None,
               coordinator_epoch=None, **kw)
    if crc is not None:
        row["crc"] = crc
    return row


def txn_state_batch(offset: int, position: int, size: int, crc: int, ple: int, ts: int) -> dict:
    """A __transaction_state batch: one record, no producer id, not transactional (kafka-dump-log)."""
    return data(offset, offset, -1, -1, 1, crc, txn=False, position=position, batch_size=size,
                partition_leader_epoch=ple, max_timestamp=ts, base_sequence=-1)


# README-vectors.md §2 + fvaleri dump (Kafka 3.9.x): data batch @0, COMMIT marker @82.
FVALERI_OUTPUT = [
    data(0, 0, 1, 0, 1, 758896000, txn=True, position=0, batch_size=82, partition_leader_epoch=0,
         attributes=0x10, base_sequence=0, max_timestamp=1742739702864),
    marker(1, 1, 0, "COMMIT", 0, 2557578104, position=82, batch_size=78, partition_leader_epoch=0,
           attributes=0x30, max_timestamp=1742739703234),
]
# fvaleri dump of __transaction_state-30 (sizes 120/143/172/172/120, CRCs from the provenance file).
FVALERI_TXN_STATE_BATCHES = [
    txn_state_batch(0, 0, 120, 3663501755, 0, 1742739549438),
    txn_state_batch(1, 120, 143, 563111626, 0, 1742739702876),
    txn_state_batch(2, 263, 172, 1296972565, 0, 1742739702882),
    txn_state_batch(3, 435, 172, 598474139, 0, 1742739703134),
    txn_state_batch(4, 607, 120, 4205821491, 0, 1742739703240),
]
# klog dump of __transaction_state-4 (Kafka 3.0/3.1): every batch partitionLeaderEpoch 4.
KLOG_TXN_STATE_BATCHES = [
    txn_state_batch(0, 0, 120, 2207277534, 4, 1632840910297),
    txn_state_batch(1, 120, 149, 2028590545, 4, 1632840910511),
    txn_state_batch(2, 269, 149, 3719422551, 4, 1632840911586),
    txn_state_batch(3, 418, 120, 3726340669, 4, 1632840911620),
    txn_state_batch(4, 538, 149, 3298507796, 4, 1632840912092),
    txn_state_batch(5, 687, 149, 764186261, 4, 1632840912592),
    txn_state_batch(6, 836, 120, 1098902730, 4, 1632840912607),
]


def _scenario_batches() -> list[dict]:
    spec = json.loads((SYN / "scenario_orders-0_expected.json").read_text())
    out = []
    for b in spec["batches"]:
        out.append(dict(
            position=b["position"], batch_size=b["size"], base_offset=b["baseOffset"], last_offset=b["lastOffset"],
            partition_leader_epoch=spec["partitionLeaderEpoch"], attributes=int(b["attributes"], 16),
            producer_id=b["producerId"], producer_epoch=b["producerEpoch"], base_sequence=b["baseSequence"],
            record_count=b["count"], base_timestamp=b["baseTimestamp"], max_timestamp=b["maxTimestamp"],
            crc=b["crc"], crc_valid=True, is_transactional=b["isTransactional"], is_control=b["isControl"],
            compression=b["compression"], control_type=b.get("marker"), coordinator_epoch=b.get("coordinatorEpoch"),
        ))
    return out


def _tv2_spec() -> dict:
    return json.loads((SYN / "tv2_txn_state-40_expected.json").read_text())


def _tv2_batches() -> list[dict]:
    spec = _tv2_spec()
    ple = spec["partitionLeaderEpoch_on_batches"]
    rows = [data(r["offset"], r["offset"], -1, -1, 1, r["batchCrc"], txn=False, partition_leader_epoch=ple,
                 max_timestamp=r["recordTimestamp"]) for r in spec["records"]]
    # offset 7: the tombstone (its CRC is not listed; validity is checked).
    rows.append(dict(base_offset=7, last_offset=7, partition_leader_epoch=ple, crc_valid=True, is_control=False,
                     is_transactional=False, producer_id=-1, record_count=1))
    return rows


EXPECTED_BATCHES: dict[str, list[dict]] = {
    "real/fvaleri_kafka39_output-topic-0_00000000000000000000.log": FVALERI_OUTPUT,
    "real/fvaleri_kafka39_output-topic-0_txn_data_batch.hex": [FVALERI_OUTPUT[0]],
    "real/fvaleri_kafka39_output-topic-0_commit_marker.hex": [{**FVALERI_OUTPUT[1], "position": 0}],
    "real/fvaleri_kafka39_consumer_offsets-12_offsets7-8.hex": [
        data(7, 7, 1, 0, 1, 4292816145, txn=True, position=0, batch_size=121, partition_leader_epoch=0,
             attributes=0x10, base_sequence=0, max_timestamp=1742739703027),
        marker(8, 1, 0, "COMMIT", 0, 1231080676, position=121, batch_size=78, partition_leader_epoch=0,
               max_timestamp=1742739703213),
    ],
    "real/fvaleri_kafka39___transaction_state-30_00000000000000000000.log": FVALERI_TXN_STATE_BATCHES,
    "real/klog_kafka3x___transaction_state-4_offsets0-6.log": KLOG_TXN_STATE_BATCHES,
    "real/klog_kafka3x_transactional-foo-0_commit_markers_coordEpoch4.hex": [
        marker(4, 0, 0, "COMMIT", 4, 4234329125, position=0, batch_size=78, partition_leader_epoch=0,
               max_timestamp=1632840911601),
        marker(6, 0, 0, "COMMIT", 4, 1079808135, position=78, batch_size=78, partition_leader_epoch=0,
               max_timestamp=1632840912595),
    ],
    "real/kafka-pr22615_trunk2026___transaction_state-30_offset0_v1_value.hex": [
        data(0, 0, -1, -1, 1, 326836132, txn=False, batch_size=129),
    ],
    "real/kafka-python_real_v2_batches_x4.hex": [
        data(0, 0, -1, -1, 1, None, txn=False, position=0, partition_leader_epoch=1, base_sequence=-1,
             base_timestamp=1503229838908),
        data(1, 2, -1, -1, 2, None, txn=False, position=71, partition_leader_epoch=2, base_sequence=-1),
        data(3, 3, -1, -1, 1, None, txn=False, position=147, partition_leader_epoch=2, base_sequence=-1),
        data(0, 0, -1, -1, 1, None, txn=False, position=218, partition_leader_epoch=0, base_sequence=-1),
    ],
    "real/kafka-python_real_v1_messages_x4.hex": [],
    "real/kafka-python_real_v0_messages_x4.hex": [],
    "real/segmentio_real_v2_gzip_batch.hex": [
        data(0, 1, -1, -1, 2, 450167771, txn=False, batch_size=133, partition_leader_epoch=0, attributes=0x01,
             compression="gzip", base_sequence=-1, base_timestamp=1633414684500, max_timestamp=1633414684528),
    ],
    "real/kafkajs_client_idempotent_batch_produce_v7.hex": [
        data(0, 9, 4004, 0, 10, 1141450398, txn=False, batch_size=1041, partition_leader_epoch=0, attributes=0,
             base_sequence=0, base_timestamp=1509928155660),
    ],
    "real/sarama_empty_batch_and_empty_control_batch.hex": [
        dict(position=0, batch_size=61, base_offset=0, last_offset=0, partition_leader_epoch=0, attributes=0,
             crc=0x595FB7DD, crc_valid=True, is_transactional=False, is_control=False, producer_id=0,
             producer_epoch=0, base_sequence=0, record_count=0, control_type=None, coordinator_epoch=None),
        dict(position=61, batch_size=61, base_offset=0, last_offset=0, partition_leader_epoch=0, attributes=0x20,
             crc=0x512E43D9, crc_valid=True, is_transactional=False, is_control=True, producer_id=0,
             producer_epoch=0, base_sequence=0, record_count=0, control_type="EMPTY", coordinator_epoch=None),
    ],
    # Stored CRC 0x6597ffd0 is wrong (computed 0xd56b5fb4). Control bit without the transactional bit;
    # key = version 0, type 0 (ABORT); the value "opaque-control-message" is read the way Kafka's
    # EndTxnMarker.deserializeValue reads it: version 0x6f70 ("op", >= 0), coordinatorEpoch = "aque".
    "real/kafka-python_SYNTHETIC_control_batch_BAD_CRC.hex": [
        dict(position=0, base_offset=0, last_offset=0, crc=0x6597FFD0, crc_valid=False, attributes=0x20,
             is_transactional=False, is_control=True, producer_id=-1, producer_epoch=-1, record_count=1,
             control_type="ABORT", coordinator_epoch=int.from_bytes(b"aque", "big")),
    ],
    "synthetic/scenario_orders-0_00000000000000000000.log": _scenario_batches(),
    "synthetic/tv2_txn_state-40_00000000000000000000.log": _tv2_batches(),
}
LEGACY = {"real/kafka-python_real_v1_messages_x4.hex": 4, "real/kafka-python_real_v0_messages_x4.hex": 4}
BAD = {"real/kafka-python_SYNTHETIC_control_batch_BAD_CRC.hex"}


# --- expected __transaction_state records -----------------------------------------------------------


def txn(offset: int, tid: str, pid: int, epoch: int, state: str, parts: list[str] | None, last_update: int,
        start: int, *, timeout: int = 60000, prev: int = -1, nxt: int = -1, ctv: int = 0, **kw) -> dict:
    return dict(offset=offset, transactional_id=tid, tombstone=False, producer_id=pid, producer_epoch=epoch,
                txn_state=state, txn_partitions=parts, txn_timeout_ms=timeout, txn_start_ts=start,
                txn_last_update_ts=last_update, prev_producer_id=prev, next_producer_id=nxt,
                client_txn_version=ctv, **kw)


# Provenance of the fvaleri segment: v0 values, pid 1 epoch 0 timeout 60000; Empty has a null partition
# array, CompleteCommit an empty one; the start timestamp is retained through PrepareCommit/CompleteCommit.
_FV = "kafka-txn-0"
_FV_START = 1742739702876
FVALERI_TXN = [
    txn(0, _FV, 1, 0, "Empty", None, 1742739549435, -1, value_version=0, timestamp=1742739549438),
    txn(1, _FV, 1, 0, "Ongoing", ["output-topic-0"], 1742739702876, _FV_START, value_version=0),
    txn(2, _FV, 1, 0, "Ongoing", ["output-topic-0", "__consumer_offsets-12"], 1742739702882, _FV_START),
    txn(3, _FV, 1, 0, "PrepareCommit", ["output-topic-0", "__consumer_offsets-12"], 1742739703132, _FV_START,
        timestamp=1742739703134),
    txn(4, _FV, 1, 0, "CompleteCommit", [], 1742739703142, _FV_START, timestamp=1742739703240),
]
# klog dump (txnLastUpdateTimestamp printed). TransactionStartTimestampMs is not printed by that dump: the
# only value that reproduces the printed CRC is the first Ongoing's update time (README §1), as Kafka sets it.
# The old text decoder prints "partitions=[]" for Empty too; the bytes (CRC-exact) hold null, as
# TransactionLog.valueToBytes writes for Empty.
_KL = "my-txnal-id"
KLOG_TXN = [
    txn(0, _KL, 0, 0, "Empty", None, 1632840910282, -1, coordinator_epoch=4),
    txn(1, _KL, 0, 0, "Ongoing", ["transactional-foo-0"], 1632840910510, 1632840910510),
    txn(2, _KL, 0, 0, "PrepareCommit", ["transactional-foo-0"], 1632840911585, 1632840910510),
    txn(3, _KL, 0, 0, "CompleteCommit", [], 1632840911588, 1632840910510),
    txn(4, _KL, 0, 0, "Ongoing", ["transactional-foo-0"], 1632840912092, 1632840912092),
    txn(5, _KL, 0, 0, "PrepareCommit", ["transactional-foo-0"], 1632840912592, 1632840912092),
    txn(6, _KL, 0, 0, "CompleteCommit", [], 1632840912593, 1632840912092, coordinator_epoch=4),
]
# PR 22615 value (v1, flexible): Empty, partitions null, lastUpdate 1781778768194, start -1, one tagged
# field: tag 0 PreviousProducerId = 0 (NextProducerId / ClientTransactionVersion absent -> defaults).
PR22615_TXN = [txn(0, "kafka-txn-0", 0, 0, "Empty", None, 1781778768194, -1, prev=0, value_version=1)]

_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
           5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}


def _tv2_txn() -> list[dict]:
    spec = _tv2_spec()
    rows = []
    for r in spec["records"]:
        parts = None if r["partitions"] is None else [f"{t}-{p}" for t, ps in r["partitions"] for p in ps]
        rows.append(txn(r["offset"], spec["transactionalId"], r["producerId"], r["producerEpoch"],
                        _STATES[r["transactionStatus"]], parts, r["lastUpdateTimestampMs"], r["startTimestampMs"],
                        ctv=r["clientTransactionVersion"], timestamp=r["recordTimestamp"], value_version=1,
                        coordinator_epoch=spec["partitionLeaderEpoch_on_batches"]))
    rows.append(dict(offset=7, transactional_id=spec["transactionalId"], tombstone=True, txn_state=None,
                     producer_id=None, txn_partitions=None))
    return rows


# file -> (partition number for the __transaction_state-N folder, expected records)
TXN_LOGS: dict[str, tuple[int, list[dict]]] = {
    "real/fvaleri_kafka39___transaction_state-30_00000000000000000000.log": (30, FVALERI_TXN),
    "real/klog_kafka3x___transaction_state-4_offsets0-6.log": (4, KLOG_TXN),
    "synthetic/tv2_txn_state-40_00000000000000000000.log": (40, _tv2_txn()),
}
TXN_HEX = {"real/kafka-pr22615_trunk2026___transaction_state-30_offset0_v1_value.hex": PR22615_TXN}


def _sample_files() -> list[str]:
    out = []
    for d in (REAL, SYN):
        for p in sorted(d.iterdir()):
            if p.suffix in (".log", ".snapshot", ".hex"):
                out.append(str(p.relative_to(SAMPLES)))
    return out


def _args(rel: str) -> list[str]:
    path = str(SAMPLES / rel)
    return ["--hex", path] if rel.endswith(".hex") else [path]


# --- tests ----------------------------------------------------------------------------------------


def test_every_sample_file_has_expectations():
    files = set(_sample_files())
    covered = set(EXPECTED_BATCHES) | {"synthetic/scenario_orders-0_00000000000000000008.snapshot"}
    assert files == covered, f"not covered: {sorted(files - covered)}; missing: {sorted(covered - files)}"


@pytest.mark.parametrize("rel", sorted(EXPECTED_BATCHES))
def test_inspect_json_batches(capsys, rel):
    rc, objs, err = run_json(capsys, *_args(rel))
    assert {o["file"] for o in objs} <= {str(SAMPLES / rel)}
    assert_rows(batches(objs), EXPECTED_BATCHES[rel], BATCH_FIELDS)
    for b in batches(objs):
        assert b["magic"] == 2
    legacy = [o for o in objs if o["type"] == "legacy"]
    if rel in LEGACY:
        assert [o["entries"] for o in legacy] == [LEGACY[rel]]
    else:
        assert legacy == []
    if rel in BAD:
        assert rc != 0
    else:
        assert rc == 0, err
        assert err == ""


@pytest.mark.parametrize("rel", sorted(TXN_LOGS))
@pytest.mark.parametrize("mode", ["folder", "flag"])
def test_inspect_json_transaction_state_segments(capsys, tmp_path, rel, mode):
    partition, expected = TXN_LOGS[rel]
    if mode == "folder":  # detected from the broker folder name __transaction_state-N
        folder = tmp_path / f"__transaction_state-{partition}"
        folder.mkdir()
        path = folder / "00000000000000000000.log"
        shutil.copyfile(SAMPLES / rel, path)
        rc, objs, err = run_json(capsys, str(path))
    else:
        rc, objs, err = run_json(capsys, "--txn-log", str(SAMPLES / rel))
    assert rc == 0, err
    assert_rows(batches(objs), EXPECTED_BATCHES[rel], BATCH_FIELDS)
    recs = txn_records(objs)
    assert_rows(recs, expected, TXN_FIELDS)
    # Each record follows its batch, at the batch's position.
    positions = {b["base_offset"]: b["position"] for b in batches(objs)}
    assert all(r["position"] == positions[r["offset"]] for r in recs)


def test_transaction_state_segment_without_folder_or_flag_is_plain(capsys):
    rel = "real/fvaleri_kafka39___transaction_state-30_00000000000000000000.log"
    rc, objs, _ = run_json(capsys, str(SAMPLES / rel))
    assert rc == 0
    assert txn_records(objs) == []
    assert len(batches(objs)) == 5


@pytest.mark.parametrize("rel", sorted(TXN_HEX))
def test_inspect_json_transaction_state_hex(capsys, rel):
    rc, objs, err = run_json(capsys, "--txn-log", "--hex", str(SAMPLES / rel))
    assert rc == 0, err
    assert_rows(batches(objs), EXPECTED_BATCHES[rel], BATCH_FIELDS)
    assert_rows(txn_records(objs), TXN_HEX[rel], TXN_FIELDS)


def test_inspect_json_snapshot(capsys):
    rel = "synthetic/scenario_orders-0_00000000000000000008.snapshot"
    spec = json.loads((SYN / (Path(rel).name + ".expected.json")).read_text())
    rc, objs, err = run_json(capsys, str(SAMPLES / rel))
    assert rc == 0, err
    head, *entries = objs
    assert head["type"] == "snapshot"
    assert (head["version"], head["crc"], head["crc_valid"], head["entries"]) == (
        spec["version"], spec["crc32c"], True, len(spec["entries"]))
    assert head["offset"] == 8  # from the file name
    expected = [dict(type="producer", producer_id=e["producerId"], producer_epoch=e["epoch"],
                     last_sequence=e["lastSequence"], last_offset=e["lastOffset"], offset_delta=e["offsetDelta"],
                     timestamp=e["timestamp"], coordinator_epoch=e["coordinatorEpoch"],
                     current_txn_first_offset=e["currentTxnFirstOffset"]) for e in spec["entries"]]
    assert_rows(entries, expected, ())


def test_bad_crc_sample_fails_naming_file_and_position(capsys):
    rel = "real/kafka-python_SYNTHETIC_control_batch_BAD_CRC.hex"
    path = str(SAMPLES / rel)
    rc, objs, err = run_json(capsys, "--hex", path)
    assert rc != 0
    assert batches(objs)[0]["crc_valid"] is False
    assert path in err and "byte 0" in err and "CRC" in err
    assert f"stored {0x6597FFD0}" in err and f"computed {0xD56B5FB4}" in err
    # --no-crc: not checked, so no error.
    rc, objs, err = run_json(capsys, "--no-crc", "--hex", path)
    assert rc == 0 and err == ""
    assert batches(objs)[0]["crc_valid"] is None


@pytest.mark.parametrize("cut", [800, 750])  # inside the last batch's records / inside its header
def test_truncated_segment_fails_naming_file_and_position(capsys, tmp_path, cut):
    src = SYN / "scenario_orders-0_00000000000000000000.log"
    path = tmp_path / "orders-0" / "00000000000000000000.log"
    path.parent.mkdir()
    path.write_bytes(src.read_bytes()[:cut])
    rc, objs, err = run_json(capsys, str(path))
    assert rc != 0
    assert str(path) in err and "byte 743" in err and "truncated" in err
    # Everything before the cut is still reported.
    assert_rows(batches(objs), _scenario_batches()[:10], BATCH_FIELDS)


def test_truncated_snapshot_fails_naming_file(capsys, tmp_path):
    path = tmp_path / "00000000000000000008.snapshot"
    path.write_bytes((SYN / "scenario_orders-0_00000000000000000008.snapshot").read_bytes()[:100])
    rc, _objs, err = run_json(capsys, str(path))
    assert rc != 0
    assert str(path) in err and "byte" in err and "truncated" in err


def test_missing_file_fails(capsys, tmp_path):
    rc, _out, err = run(capsys, str(tmp_path / "nope.log"))
    assert rc != 0 and "nope.log" in err


@pytest.mark.parametrize("rel", _sample_files())
def test_table_mode_prints(capsys, rel):
    rc, out, err = run(capsys, *_args(rel))
    assert rc == (1 if rel in BAD else 0), err
    lines = out.splitlines()
    assert lines[0] == f"{SAMPLES / rel}:"
    n = len(EXPECTED_BATCHES.get(rel, []))
    assert sum(1 for ln in lines if ln.startswith("  offset ")) == n
    if rel in LEGACY:
        assert f"{LEGACY[rel]} legacy magic 0/1 messages skipped" in out
    if rel.endswith(".snapshot"):
        assert "snapshot v1 offset 8 entries 3 crc ok" in out


def test_table_mode_transaction_state(capsys):
    rc, out, err = run(capsys, "--txn-log", str(SAMPLES / "synthetic/tv2_txn_state-40_00000000000000000000.log"))
    assert rc == 0, err
    assert "txnId 'tv2-app' pid 4000 epoch 5 Ongoing partitions [orders-0]" in out
    assert "offset 7 txnId 'tv2-app' TOMBSTONE" in out


def test_directory_input_covers_all_segments(capsys):
    rc, objs, err = run_json(capsys, str(SYN))
    assert rc == 0, err
    assert {o["file"] for o in objs} == {str(SYN / n) for n in (
        "scenario_orders-0_00000000000000000000.log", "scenario_orders-0_00000000000000000008.snapshot",
        "tv2_txn_state-40_00000000000000000000.log")}
