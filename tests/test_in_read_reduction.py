"""In-read reduction (issue 12 item 4): what opens and closes within one read never reaches the
state operator, and nothing the state decides changes because of it.

* Every simulator scenario, read as a log dir (``segments``) and as loose files (``dumps``), runs
  through the scan engine with and without the reduction: identical published rows (alert keys,
  statuses, causes, epochs and their sources, positions) and identical producer states, and both
  end with the scenario's own expected findings.
* Hand-built batch tables check what :func:`streaming.normalize.reduce_closed_in_read` keeps
  (first/last marker, last COMMIT/ABORT before a trailing EMPTY, spans around them, rows below a
  seed snapshot's offset untouched) and hand-built coordinator records check
  :func:`streaming.normalize.reduce_coordinator_records`.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest

import streaming.partition_read as partition_read
from streaming.alerts import AlertConfig, Enricher
from streaming.local_engine import read_source, run_scan
from streaming.normalize import data_events, reduce_coordinator_records
from streaming.pipeline import SinkSet
from streaming.simulate.scenarios import SCENARIOS, write_scenario
from streaming.sources.dumps import DumpsBatchReader
from streaming.sources.segments import SegmentsBatchReader
from streaming.state_machine import EngineConfig, process_key
from tests.scenario_truth import expected_findings, projected
from udfs.model import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY, CONTROL_NONE


def _engine(reader, monkeypatch, reduce: bool):
    monkeypatch.setattr(partition_read, "REDUCE_IN_READ", reduce)
    events = read_source(reader)
    published: list[dict] = []
    states = run_scan(events, EngineConfig(cluster="r"), Enricher(AlertConfig()), SinkSet(sinks=[published.extend]))
    rows = sorted(json.dumps({k: v for k, v in a.items() if k != "detected_at"}, sort_keys=True, default=str)
                  for a in published)
    docs = {pid: doc[0] for pid, doc in states.items()}
    final = projected({a["key"]: a for a in published}.values())  # the last alert per key
    return len(events), rows, docs, final


@pytest.mark.parametrize("source", ["segments", "dumps"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_gives_the_same_results_with_and_without_the_reduction(tmp_path, monkeypatch, name, source):
    params = {"target_bytes": 2_000_000} if name == "random-mix" else {}
    sc = write_scenario(name, tmp_path / "logs", seed=11, **params)
    if source == "segments":
        opts = {"path": str(sc.root), "as_of": str(sc.as_of_ms)}
        make = SegmentsBatchReader
    else:
        files = sorted(os.path.join(r, n) for r, _d, names in os.walk(sc.root) for n in names
                       if n.endswith((".log", ".snapshot")))
        opts = {"paths": json.dumps(files), "as_of": str(sc.as_of_ms)}
        make = DumpsBatchReader
    n_full, rows_full, docs_full, final_full = _engine(make(opts), monkeypatch, reduce=False)
    n_reduced, rows_reduced, docs_reduced, final_reduced = _engine(make(opts), monkeypatch, reduce=True)
    assert rows_reduced == rows_full
    assert docs_reduced == docs_full
    # the outside truth, with and without the reduction: the scenario's own findings as its files
    # prove them; loose files without the broker's end-offset checkpoint prove no partition's end
    # (detection.md §0, newest-segment-not-proven), so there every finding is unverified
    want = expected_findings(sc, files=True)
    if source == "dumps":
        want = [dict(f, verified=False) for f in want]
    assert final_full == want
    assert final_reduced == want
    if name == "random-mix":
        assert sc.expected and any('"status": "hanging"' in r for r in rows_full)
        assert n_reduced < n_full


# --- hand-built batch tables ----------------------------------------------------------------------

def _table(batches: list[tuple]) -> dict[str, np.ndarray]:
    """(base offset, producer id, epoch, control type or CONTROL_NONE, coordinator epoch) per batch."""
    n = len(batches)
    base = np.array([b[0] for b in batches], dtype=np.int64)
    ctype = np.array([b[3] for b in batches], dtype=np.int32)
    return {
        "base_offset": base, "last_offset": base.copy(), "batch_size": np.full(n, 80, np.int32),
        "first_timestamp": 1_000 + base, "max_timestamp": 1_000 + base,
        "producer_id": np.array([b[1] for b in batches], dtype=np.int64),
        "producer_epoch": np.array([b[2] for b in batches], dtype=np.int16),
        "record_count": np.where(ctype == CONTROL_EMPTY, 0, 1).astype(np.int32),
        "is_control": ctype != CONTROL_NONE, "control_type": ctype,
        "coordinator_epoch": np.array([b[4] for b in batches], dtype=np.int32),
        "position": base * 80, "is_transactional": np.ones(n, bool), "crc_valid": np.ones(n, np.int8),
    }


def _events(batches: list[tuple], reduce_from: int | None, first_read: bool = False):
    return data_events(_table(batches), topic="t", partition=0, source="segments", cluster="c",
                       event_time_ms=9_000, reduce_from=reduce_from, first_read=first_read)


D, C, A, E = CONTROL_NONE, CONTROL_COMMIT, CONTROL_ABORT, CONTROL_EMPTY
# producer 7: span, COMMIT, span, ABORT, span (epoch 9), COMMIT(ce 3), EMPTY, span; producer 8 interleaved.
BATCHES = [
    (0, 7, 5, D, -1), (1, 8, 1, D, -1), (2, 7, 5, C, 2), (3, 7, 5, D, -1), (4, 7, 5, D, -1), (5, 7, 6, A, 2),
    (6, 8, 1, C, 2), (7, 7, 9, D, -1), (8, 7, 9, C, 3), (9, 7, 9, E, -1), (10, 7, 9, D, -1),
]


def test_reduction_keeps_what_the_state_needs_per_producer():
    full = _events(BATCHES, None)
    out = _events(BATCHES, 0)
    p7 = out[out["producer_id"] == 7]
    assert list(zip(p7["kind"], p7["first_offset"], strict=True)) == [
        ("data", 0), ("marker", 2), ("marker", 8), ("marker", 9), ("data", 10)]
    carrier = p7[p7["first_offset"] == 9].iloc[0]
    assert carrier["folded_txns"] == 2 and carrier["folded_max_epoch"] == 9
    assert p7[p7["first_offset"] != 9]["folded_txns"].isna().all()
    # producer 8 has one marker: nothing to fold
    assert out[out["producer_id"] == 8].drop(columns=["folded_txns", "folded_max_epoch"]).reset_index(drop=True) \
        .equals(full[full["producer_id"] == 8].drop(columns=["folded_txns", "folded_max_epoch"])
                .reset_index(drop=True))
    # the producer state ends the same either way
    for pid in (7, 8):
        docs = [process_key(pid, ev.assign(event_time_ms=9_000).drop(columns=["event_time"]).to_dict("records"),
                            None, now_ms=9_000, cfg=EngineConfig())[1] for ev in (full, out)]
        assert docs[0] == docs[1]


def test_rows_below_the_seed_snapshot_offset_are_not_reduced():
    out = _events(BATCHES, 6)
    p7 = out[out["producer_id"] == 7]
    # below 6 every row stays; from 6 on producer 7 has 7(span) C8 E9 10(span): 2 markers, nothing folded
    assert list(p7["first_offset"]) == [0, 2, 3, 5, 7, 8, 9, 10]
    assert p7["folded_txns"].isna().all()


# --- hand-built coordinator records -----------------------------------------------------------------

def _rec(offset: int, tid: str, pid: int | None, state: str | None, *, start: int | None = 100,
         prev: int | None = None) -> dict:
    return {"offset": offset, "transactional_id": tid, "producer_id": pid, "tombstone": pid is None,
            "txn_state": state, "txn_start_ts": start, "prev_producer_id": prev}


def test_coordinator_records_keep_runs_ends_routing_and_tombstones():
    recs = [
        _rec(0, "a", 1, "Empty"), _rec(1, "a", 1, "Ongoing"), _rec(2, "b", 5, "Ongoing"),
        _rec(3, "a", 1, "PrepareCommit"), _rec(4, "a", 1, "CompleteCommit"),
        _rec(5, "a", 2, "Empty"),  # new producer id: the routing event that tells id 1
        _rec(6, "a", 2, "Ongoing"), _rec(7, "a", 2, "Ongoing"), _rec(8, "b", None, None),
        _rec(9, "b", 6, "Empty", prev=5), _rec(10, "b", 6, "Ongoing", prev=5), _rec(11, "b", 6, "Ongoing"),
    ]
    kept = [r["offset"] for r in reduce_coordinator_records(recs)]
    assert kept == [0, 2, 4, 5, 7, 8, 9, 10, 11]


def test_coordinator_records_keep_the_move_to_ongoing_when_the_start_is_not_recorded():
    # text dumps before 4.1 print no TransactionStartTimestampMs: the state bounds it by the record
    # that moved the id to Ongoing and the Complete*/Empty record before it (detection.md §3.1:
    # TransactionMetadata sets txnStartTimestamp on the move to Ongoing, after the previous end)
    recs = [_rec(0, "a", 1, "Empty", start=None), _rec(1, "a", 1, "Ongoing", start=None),
            _rec(2, "a", 1, "Ongoing", start=None), _rec(3, "a", 1, "PrepareCommit", start=None),
            _rec(4, "a", 1, "CompleteCommit", start=None), _rec(5, "a", 1, "Ongoing", start=None),
            _rec(6, "a", 1, "Ongoing", start=None)]
    assert [r["offset"] for r in reduce_coordinator_records(recs)] == [0, 1, 4, 5, 6]
    with_start = [dict(r, txn_start_ts=50) for r in recs]
    assert [r["offset"] for r in reduce_coordinator_records(with_start)] == [0, 6]


def test_first_read_also_folds_what_the_first_marker_closes():
    """The partition's first read (nothing of it in the state before): producer 7's span at 0 and
    its first marker (COMMIT at 2) open and close a transaction within the read like the ones after
    them, so they are folded too. Left: the last COMMIT (8, ce 3: an EMPTY marker teaches none),
    the last marker (EMPTY at 9) carrying the fold and the span after it; producer 8 (one marker)
    keeps all. The producer states end as they do without any reduction."""
    full = _events(BATCHES, None)
    out = _events(BATCHES, 0, first_read=True)
    p7 = out[out["producer_id"] == 7]
    assert list(zip(p7["kind"], p7["first_offset"], strict=True)) == [("marker", 8), ("marker", 9), ("data", 10)]
    carrier = p7[p7["first_offset"] == 9].iloc[0]
    # folded: the spans at 0, 3-4 and 7 (3 transactions); epochs 5, 5, 6 (ABORT), 9: highest 9
    assert carrier["folded_txns"] == 3 and carrier["folded_max_epoch"] == 9
    assert list(out[out["producer_id"] == 8]["first_offset"]) == [1, 6]
    for pid in (7, 8):
        docs = [process_key(pid, ev.assign(event_time_ms=9_000).drop(columns=["event_time"]).to_dict("records"),
                            None, now_ms=9_000, cfg=EngineConfig())[1] for ev in (full, out)]
        assert docs[0] == docs[1]


def _write_partition(path, batches: list[tuple[int, int, int | None]]) -> list[int]:
    """A segment of ``orders-0`` holding (offset, epoch, marker type or None: a data batch) of
    producer 7; returns the byte position after each batch."""
    from streaming.simulate.encode import encode_batch, encode_marker

    data, ends = b"", []
    for offset, epoch, marker in batches:
        ts = 1_700_000_000_000 + offset
        if marker is None:
            data += encode_batch(offset, 1, producer_id=7, producer_epoch=epoch, base_sequence=offset,
                                 is_transactional=True, base_timestamp=ts)
        else:
            data += encode_marker(offset, 7, epoch, marker, 1, ts)
        ends.append(len(data))
    part = path / "orders-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(data)
    return ends


def test_only_the_first_read_of_a_partition_folds_its_first_marker(tmp_path):
    """The segments stream reading orders-0 in two micro-batches (max_bytes_per_trigger): the
    first read (from the partition's first byte) folds producer 7's span at 0 and first COMMIT at
    1 with the rest up to its last marker at 5; the second read starts where the state already
    holds the transaction open at 6, so its first COMMIT (7, which closes that transaction) and
    the span before its last marker stay, and only what lies between them (8, 9) is folded."""
    from streaming.sources.segments import SegmentsStreamReader

    C = CONTROL_COMMIT
    ends = _write_partition(tmp_path / "logs", [(0, 0, None), (1, 0, C), (2, 0, None), (3, 0, C), (4, 0, None),
                                                (5, 0, C), (6, 0, None), (7, 0, C), (8, 0, None), (9, 0, C),
                                                (10, 0, None), (11, 0, C)])
    reader = SegmentsStreamReader({"path": str(tmp_path / "logs"), "as_of": "1700000999000",
                                   "max_bytes_per_trigger": str(ends[6])})
    start = reader.initialOffset()
    got = []
    for _ in range(2):
        end = reader.latestOffset(start, object())  # a limit other than ReadAllAvailable: the budget applies
        rows = [r for p in reader.partitions(start, end) for b in reader.read(p)
                for r in pa.Table.from_batches([b]).to_pylist() if r["kind"] in ("data", "marker")]
        got.append([(r["kind"], r["first_offset"], r["folded_txns"]) for r in rows])
        start = end
    assert got == [
        [("data", 4, None), ("marker", 5, 2), ("data", 6, None)],
        [("marker", 7, None), ("data", 10, None), ("marker", 11, 1)],
    ]
