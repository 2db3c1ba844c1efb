"""``partition_read.data_reads_events``: the reads of several data partitions turned into events at
once (the live source's group of a broker's partitions) keep every read's transactions apart,
even for one producer id writing to both partitions (a transaction spans partitions), and stamp
each read's rows with its own topic, partition, source position and lagging flag.

Expected rows by hand from Kafka's behaviour: a producer's transactional data batches on one
partition up to its COMMIT/ABORT marker are one transaction (``ProducerStateManager``: the
marker completes the ongoing transaction of that partition's producer state, which is per
partition; ``ProducerAppendInfo.appendEndTxnMarker``), the next data batch opens a new one.
"""

from __future__ import annotations

import numpy as np

from streaming.event_table import EventTable
from streaming.partition_read import Offsets, ReadContext, data_reads_events
from streaming.simulate.encode import encode_batch, encode_marker
from udfs.record_batch import scan_batches

PID = 7


def _data(offset: int, n: int, ts: int) -> bytes:
    return encode_batch(offset, n, producer_id=PID, producer_epoch=0, base_sequence=offset, is_transactional=True,
                        base_timestamp=ts)


def test_one_producer_on_two_partitions_keeps_two_sets_of_transactions():
    # partition a-0: a transaction at 0..2 committed at 3, a new one open at 4
    a = _data(0, 2, 100) + _data(2, 1, 110) + encode_marker(3, PID, 0, 1, 5, 120) + _data(4, 1, 130)
    # partition b-3 (read lagging): a transaction at 0 aborted at 1
    b = _data(0, 1, 200) + encode_marker(1, PID, 0, 0, 6, 210)
    tables = [scan_batches(a).columns, scan_batches(b).columns]
    cols = {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}
    cols["position"] = cols["base_offset"]
    key = np.array([0, 0, 0, 0, 1, 1])
    reads = [
        (ReadContext("a", 0, "kafka", "c1", 1_000), [], Offsets(5, 4, 0), "a-0@offset 5", True),
        (ReadContext("b", 3, "kafka", "c1", 1_000, lagging=True), [], Offsets(2, 2, 0), "b-3@offset 2", False),
    ]
    out = EventTable(rows_last=True)
    tails = data_reads_events(reads, cols, key, "{prefix}@offset {pos}", out)
    rows = out.to_arrow().to_pylist()
    got = [(r["kind"], r["topic"], r["partition"], r["producer_id"], r["first_offset"], r["last_offset"],
            r["batch_count"], r["marker"], r["coordinator_epoch"], r["source_position"], r["lagging"]) for r in rows]
    assert got == [
        ("data", "a", 0, PID, 0, 2, 2, None, None, "a-0@offset 0", None),
        ("marker", "a", 0, PID, 3, 3, 1, "COMMIT", 5, "a-0@offset 3", None),
        ("data", "a", 0, PID, 4, 4, 1, None, None, "a-0@offset 4", None),
        ("data", "b", 3, PID, 0, 0, 1, None, None, "b-3@offset 0", True),
        ("marker", "b", 3, PID, 1, 1, 1, "ABORT", 6, "b-3@offset 1", True),
    ]
    assert all(r["source"] == "kafka" and r["cluster"] == "c1" for r in rows)
    # each read's progress row: the broker's offsets, the newest batch timestamp, its own stamps
    (pa_,), (pb,) = tails
    assert (pa_["kind"], pa_["topic"], pa_["high_watermark"], pa_["lso"], pa_["last_ts"], pa_["end_proven"]) == (
        "progress", "a", 5, 4, 130, True)
    assert "lagging" not in pa_ or pa_["lagging"] is None
    assert (pb["topic"], pb["partition"], pb["high_watermark"], pb["last_ts"], pb["lagging"], pb["end_proven"]) == (
        "b", 3, 2, 210, True, False)


def test_a_read_without_broker_offsets_gets_its_gaps_and_no_progress_row():
    a = _data(0, 1, 100)
    cols = dict(scan_batches(a).columns)
    cols["position"] = cols["base_offset"]
    gap = {"kind": "gap", "topic": "a", "partition": 0, "reason": "unavailable: x"}
    reads = [(ReadContext("a", 0, "kafka", "c1", 1_000), [gap], None, "a-0@offset 1", True)]
    out = EventTable(rows_last=True)
    tails = data_reads_events(reads, cols, np.zeros(1, dtype=np.int64), "{prefix}@offset {pos}", out)
    assert tails == [[gap]]
    assert [r["kind"] for r in out.to_arrow().to_pylist()] == ["data"]
