"""``udfs.record_batch.scan_batches_many``: many Fetch answers scanned at once give each answer's
own batch table, positions and errors (the live reader scans a round's answers this way). The
expected values are the samples' contents (samples/README-vectors.md, as tests/test_decoders.py
reads them), not another scan's output."""

from __future__ import annotations

from tests.conftest import SAMPLES, read_hex
from udfs.model import CONTROL_COMMIT, CONTROL_NONE
from udfs.record_batch import scan_batches_many

REAL = SAMPLES / "real"
SYN = SAMPLES / "synthetic"


def _answers() -> list[bytes]:
    orders = (SYN / "scenario_orders-0_00000000000000000000.log").read_bytes()
    return [
        # Kafka 3.9: a transactional data batch (offset 0, 82 bytes) and its COMMIT marker at 82
        (REAL / "fvaleri_kafka39_output-topic-0_00000000000000000000.log").read_bytes(),
        # two COMMIT markers of coordinator epoch 4, 78 bytes each (EndTxnMarker batches)
        read_hex(REAL / "klog_kafka3x_transactional-foo-0_commit_markers_coordEpoch4.hex"),
        # a control batch whose stored CRC is wrong
        read_hex(REAL / "kafka-python_SYNTHETIC_control_batch_BAD_CRC.hex"),
        # 10 whole batches and a partial one (a Fetch answer cut at max bytes: KIP-74)
        orders[:-30],
        # four magic 0 messages (skipped by length: never transactional)
        read_hex(REAL / "kafka-python_real_v0_messages_x4.hex"),
        b"",
        # the same segment again, its second batch's length field below Kafka's minimum entry size
        orders[:87] + (5).to_bytes(4, "big") + orders[91:],
    ]


def test_each_answer_gets_its_own_batches_positions_and_errors():
    a = _answers()
    out = scan_batches_many(a, sources=[f"t-{i}" for i in range(len(a))], allow_partial_tail=True)
    assert len(out) == len(a)
    fv, klog, bad, cut, legacy, empty, broken = out

    assert list(fv.columns["position"]) == [0, 82] and list(fv.columns["base_offset"]) == [0, 1]
    assert list(fv.columns["control_type"]) == [CONTROL_NONE, CONTROL_COMMIT]
    assert list(fv.columns["producer_id"]) == [1, 1] and fv.errors == []

    assert list(klog.columns["position"]) == [0, 78]
    assert list(klog.columns["coordinator_epoch"]) == [4, 4]
    assert [int(c) for c in klog.columns["crc"]] == [4234329125, 1079808135]
    assert list(klog.columns["crc_valid"]) == [1, 1] and klog.errors == []

    assert list(bad.columns["crc_valid"]) == [0]
    assert len(bad.errors) == 1 and bad.errors[0].reason.startswith("CRC-32C mismatch")
    assert bad.errors[0].source == "t-2" and bad.errors[0].position == 0 and bad.errors[0].crc

    # the 840-byte segment less 30 bytes: whole batches end at 743, 67 bytes of the last are left
    assert len(cut) == 10 and cut.errors == [] and cut.end_position == 743 and cut.tail_bytes == 840 - 30 - 743
    assert list(cut.columns["position"][:2]) == [0, 79] and list(cut.columns["producer_id"][:2]) == [4000, 4001]

    assert len(legacy) == 0 and legacy.legacy_entries == 4 and legacy.errors == []
    assert len(empty) == 0 and empty.errors == []

    assert len(broken) == 1 and len(broken.errors) == 1
    assert broken.errors[0].reason.startswith("corrupt batch length 5")
    assert broken.errors[0].source == "t-6" and broken.errors[0].position == 79


def test_without_validation_every_batch_is_unchecked():
    out = scan_batches_many(_answers()[:3], validate_crc=False)
    assert [list(s.columns["crc_valid"]) for s in out] == [[-1, -1], [-1, -1], [-1]]
    assert all(s.errors == [] for s in out)
