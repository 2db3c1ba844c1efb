"""Event rows (``streaming/event_rows.py``): what the state function reads of each event, from an
event mapping and from an Arrow table of the event schema. Expected values are written by hand
from the events below."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from streaming.event_rows import (
    COORDINATOR,
    COORDINATOR_FIELDS,
    EVENT_TIME_MS,
    FIRST_OFFSET,
    KIND,
    PRODUCER_EPOCH,
    ROW_FIELDS,
    as_row,
    table_rows,
)
from streaming.events import make_row, to_arrow, to_frame

T = 1_700_000_000_123  # epoch ms


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_batches([to_arrow(to_frame(rows))])


def test_as_row_reads_integers_as_int_or_none_and_partition_sets_as_lists():
    row = as_row({"kind": "txn_state", "topic": "__transaction_state", "partition": np.int32(3),
                  "first_offset": 7.0, "producer_epoch": math.nan, "event_time_ms": T,
                  "producer_id": np.int64(42), "txn_partitions": np.array(["a-0", "b-1"], dtype=object),
                  "txn_state": "Ongoing"})
    assert len(row) == len(ROW_FIELDS)
    assert row[KIND] == "txn_state" and row[FIRST_OFFSET] == 7 and type(row[FIRST_OFFSET]) is int
    assert row[PRODUCER_EPOCH] is None  # NaN: null, as a pandas frame gives a null int
    assert row[EVENT_TIME_MS] == T
    coord = dict(zip(COORDINATOR_FIELDS, row[COORDINATOR], strict=True))
    assert coord["producer_id"] == 42 and type(coord["producer_id"]) is int
    assert coord["txn_partitions"] == ["a-0", "b-1"]
    assert coord["txn_state"] == "Ongoing" and coord["tombstone"] is None
    # only a coordinator record carries the coordinator fields
    assert as_row({"kind": "data", "producer_id": 42})[COORDINATOR] is None


def test_table_rows_groups_by_route_pid_in_table_order():
    rows = [
        make_row("data", topic="t", partition=0, route_pid=9, producer_id=9, producer_epoch=1, first_offset=10,
                 last_offset=12, first_ts=T - 5, last_ts=T - 1, batch_count=2, record_count=3, bytes=100,
                 source="segments", source_position="t-0/0.log@0", event_time=T),
        make_row("progress", topic="t", partition=0, route_pid=-1, high_watermark=14, event_time=T),
        make_row("marker", topic="t", partition=0, route_pid=4, producer_id=4, producer_epoch=0, first_offset=3,
                 last_offset=3, marker="COMMIT", coordinator_epoch=2, event_time=T),
        make_row("txn_state", topic="__transaction_state", partition=1, route_pid=9, producer_id=9,
                 producer_epoch=1, first_offset=0, transactional_id="app", tombstone=False, txn_state="Ongoing",
                 txn_partitions=["t-0"], txn_timeout_ms=60_000, txn_start_ts=T - 9, event_time=T),
        make_row("marker", topic="t", partition=0, route_pid=9, producer_id=9, producer_epoch=1, first_offset=13,
                 last_offset=13, marker="ABORT", coordinator_epoch=2, event_time=T),
        make_row("data", topic="t", partition=1, route_pid=None, producer_id=5, first_offset=0, last_offset=0,
                 event_time=T),  # no key: dropped, as a groupby drops null keys
    ]
    by_pid, newest = table_rows(_table(rows))
    assert newest == T
    assert sorted(by_pid) == [-1, 4, 9]
    assert [(r[KIND], r[FIRST_OFFSET]) for r in by_pid[9]] == [("data", 10), ("txn_state", 0), ("marker", 13)]
    assert [(r[KIND], r[FIRST_OFFSET]) for r in by_pid[4]] == [("marker", 3)]
    data = dict(zip(ROW_FIELDS, by_pid[9][0], strict=True))
    assert data == {"kind": "data", "topic": "t", "partition": 0, "first_offset": 10, "last_offset": 12,
                    "lso": None, "event_time_ms": T, "producer_epoch": 1, "snapshot_offset": None,
                    "read_from_zero": None, "first_ts": T - 5, "last_ts": T - 1, "batch_count": 2,
                    "record_count": 3, "bytes": 100, "marker": None, "coordinator_epoch": None,
                    "folded_max_epoch": None, "source": "segments", "source_position": "t-0/0.log@0",
                    "coordinator": None}
    coord = dict(zip(COORDINATOR_FIELDS, by_pid[9][1][COORDINATOR], strict=True))
    assert coord == {"producer_id": 9, "transactional_id": "app", "tombstone": False, "txn_state": "Ongoing",
                     "txn_start_ts": T - 9, "txn_last_update_ts": None, "txn_partitions": ["t-0"],
                     "txn_timeout_ms": 60_000, "client_txn_version": None}
    # passthrough rows stay mappings with every field (event_time as epoch ms)
    (progress,) = by_pid[-1]
    assert progress["kind"] == "progress" and progress["high_watermark"] == 14
    assert progress["event_time_ms"] == T and progress["lso"] is None


def test_table_rows_of_an_empty_table():
    assert table_rows(_table([make_row("data", route_pid=1, event_time=T)]).slice(0, 0)) == ({}, None)
