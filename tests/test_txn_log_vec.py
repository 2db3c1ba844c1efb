"""The one ``__transaction_state`` decoder (``udfs.txn_log``): its vectorised walk against its own
record-by-record path, and its in-read reduction against the reduction rule on record dicts.

``decode_txn_log_reduced(data)`` (the vectorised walk, with the by-record path for the batches it
does not take) must return exactly ``reduce_coordinator_records(decode_txn_log_segment(data)[0])``
(every batch record by record, as the decoder does when it does not reduce; ``MAX_RECORDS = -1``
makes sure of it) and the same scan with the same errors, for the sample files, every
simulator scenario's coordinator segments, and corrupted copies of them (bytes flipped, records
cut, lengths and versions broken, CRC check off so that the corruption reaches the record
decoder): bad input becomes an error naming the file, position and offset, never an exception.
The field values themselves are checked against hand-written expectations in
``tests/test_decoders.py`` (``test_txn_state_*``).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from streaming.normalize import reduce_coordinator_records
from streaming.simulate.encode import encode_txn_key, encode_txn_value_v0, encode_txn_value_v1
from streaming.simulate.scenarios import SCENARIOS, write_scenario
from udfs import txn_log
from udfs.record_batch import HEADER_SIZE, scan_batches
from udfs.txn_log import decode_txn_log_reduced, decode_txn_log_segment

SAMPLES = Path(__file__).parent / "fixtures" / "samples"


RECORD_ERRORS: list[str] = []


BY_RECORD = {"batches": 0, "by_record": 0}  # so that the walk is seen taking batches, not only the by-record path


def _by_record(data: bytes, **kw):
    """The decoder with the vectorised walk taking no batch: every record through ``decode_batch``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(txn_log, "MAX_RECORDS", -1)
        return decode_txn_log_segment(data, **kw)


def _types(recs):
    return [type(v) for r in recs for v in r.values()]


def _same(data: bytes, **kw) -> int:
    ref_recs, ref_scan = _by_record(data, **kw)
    RECORD_ERRORS.extend(e.reason for e in ref_scan.errors if "record" in e.reason)
    ref = reduce_coordinator_records(ref_recs)
    full, full_scan = decode_txn_log_segment(data, **kw)
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        real = txn_log.decode_batch
        mp.setattr(txn_log, "decode_batch", lambda *a: calls.append(1) or real(*a))
        got, scan = decode_txn_log_reduced(data, **kw)
    assert full == ref_recs
    assert _types(full) == _types(ref_recs)
    assert got == ref
    assert _types(got) == _types(ref)
    for s in (full_scan, scan):
        assert s.errors == ref_scan.errors
        for k, col in ref_scan.columns.items():
            assert (col == s.columns[k]).all(), k
    c = ref_scan.columns
    BY_RECORD["batches"] += int((~c["is_control"] & (c["crc_valid"] != 0)).sum())
    BY_RECORD["by_record"] += len(calls)
    return len(ref_recs)


def _txn_files() -> list[Path]:
    return sorted(p for p in SAMPLES.rglob("*.log") if "transaction_state" in p.name or "txn_state" in p.name)


def test_samples_decode_the_same():
    files = _txn_files()
    assert files
    assert sum(_same(f.read_bytes(), source=str(f)) for f in files) > 0


@pytest.fixture(scope="module")
def scenario_segments(tmp_path_factory) -> list[tuple[str, bytes]]:
    out = []
    root = tmp_path_factory.mktemp("scen")
    for name in sorted(SCENARIOS):
        params = {"target_bytes": 1_000_000} if name == "random-mix" else {}
        sc = write_scenario(name, root / name, seed=5, **params)
        for f in sorted(Path(sc.root).glob("__transaction_state-*/*.log")):
            data = f.read_bytes()
            if data:
                out.append((f"{name}/{f.parent.name}/{f.name}", data))
    return out


def test_every_scenario_decodes_the_same(scenario_segments):
    assert scenario_segments
    BY_RECORD.update(batches=0, by_record=0)
    assert sum(_same(d, source=name) for name, d in scenario_segments) > 0
    # the walk took the simulator's batches (the comparison is not the by-record path against itself)
    assert BY_RECORD["by_record"] < BY_RECORD["batches"] / 10, BY_RECORD


def test_corrupted_segments_decode_the_same(scenario_segments):
    rng = random.Random(12)
    cases = 0
    for name, data in scenario_segments:
        scan = scan_batches(data, validate_crc=False)
        positions = scan.columns["position"].tolist()
        sizes = scan.columns["batch_size"].tolist()
        for _ in range(6):
            buf = bytearray(data)
            i = rng.randrange(len(positions))
            start, size = positions[i], sizes[i]
            how = rng.randrange(4)
            if how == 0:  # flip bytes inside the records (keys, values, varints)
                for _ in range(rng.randint(1, 4)):
                    j = rng.randrange(start + HEADER_SIZE, start + size) if size > HEADER_SIZE else start
                    buf[j] ^= 1 << rng.randrange(8)
            elif how == 1:  # set a byte of the records to 0xff (long varints, negative lengths)
                j = rng.randrange(start + HEADER_SIZE, start + size) if size > HEADER_SIZE else start
                buf[j] = 0xFF
            elif how == 2:  # a wrong record count
                struct.pack_into(">i", buf, start + 57, rng.choice([0, 2, 3, 200, -1]))
            else:  # cut the segment inside a batch
                buf = buf[: rng.randrange(start, start + size)]
            _same(bytes(buf), validate_crc=False, source=name, allow_partial_tail=how == 3)
            _same(bytes(buf), source=name)
            cases += 1
    assert cases
    # the corruption reached the record decoder (bad keys, values and framing), not only the batch scan
    assert any("__transaction_state record at offset" in r for r in RECORD_ERRORS)
    assert any(r.startswith("record: ") for r in RECORD_ERRORS)


def _batch(records: list[tuple[bytes, bytes | None]], base_offset: int = 0) -> bytes:
    """A one-batch segment of uncompressed records (CRC not computed: decode with validate_crc=False)."""
    def varint(v: int) -> bytes:
        v = (v << 1) ^ (v >> 63)
        out = b""
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])
    body = b""
    for k, (key, value) in enumerate(records):
        rec = b"\0" + varint(k) + varint(k) + varint(len(key)) + key
        rec += varint(-1) if value is None else varint(len(value)) + value
        rec += varint(0)
        body += varint(len(rec)) + rec
    n = len(records)
    header = struct.pack(">qiibIhiqqqhii", base_offset, HEADER_SIZE - 12 + len(body), 7, 2, 0, 0, n - 1,
                         1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, n)
    return header + body


def test_edge_values_decode_the_same():
    key = encode_txn_key("t-é")  # non-ASCII id: the Python decoder's path
    v0 = encode_txn_value_v0(7, 1, 60_000, "Ongoing", {"a": [0], "b": [1, 2]}, 1, 2)
    v1 = encode_txn_value_v1(8, 2, 60_000, "CompleteCommit", {}, 3, 4, previous_producer_id=7)
    v1b = encode_txn_value_v1(9, 0, 60_000, "Ongoing", {"c": [3]}, 3, 4, next_producer_id=10,
                              client_transaction_version=2)
    cases = [
        [(encode_txn_key("a"), v0), (encode_txn_key("a"), v0), (encode_txn_key("a"), v1), (encode_txn_key("a"), None),
         (encode_txn_key("c"), v1b), (encode_txn_key("c"), v1b), (encode_txn_key("c"), v1b)],
        [(key, v0), (encode_txn_key("a"), v0[:20])],  # truncated value
        [(encode_txn_key("a"), v1 + b"\0")],  # trailing byte
        [(encode_txn_key("a"), b"\0\x02" + v0[2:])],  # unknown version
        [(b"\0\x01" + encode_txn_key("a")[2:], v0)],  # unknown key version
        [(encode_txn_key("b"), v1[:-1])],  # tag section cut
    ]
    for recs in cases:
        _same(_batch(recs), validate_crc=False, source="edge")


def test_a_batch_failing_its_crc_is_never_believed_by_either_decoder(scenario_segments):
    # LogSegment.recover -> RecordBatch.ensureValid: a broker never applies a batch whose CRC-32C
    # does not match. Flip one byte inside every coordinator segment's last batch (bytes 21.. are
    # under the CRC): both decoders drop that batch's records and report one CRC error at its
    # position and base offset; the records of every other batch are unchanged.
    cases = 0
    for name, data in scenario_segments:
        cols = scan_batches(data).columns
        if not len(cols["position"]) or cols["is_control"][-1]:
            continue
        pos, size, base = int(cols["position"][-1]), int(cols["batch_size"][-1]), int(cols["base_offset"][-1])
        bad = bytearray(data)
        bad[pos + size - 1] ^= 0xFF
        intact, _ = decode_txn_log_segment(data[:pos])  # the file without its last batch
        for decode in (decode_txn_log_segment, decode_txn_log_reduced):
            recs, scan = decode(bytes(bad), source=name)
            assert [(e.position, e.base_offset, e.crc) for e in scan.errors] == [(pos, base, True)], name
            want = intact if decode is decode_txn_log_segment else reduce_coordinator_records(intact)
            assert recs == want, name
        cases += 1
    assert cases > 10
