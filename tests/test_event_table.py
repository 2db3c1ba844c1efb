"""``streaming.event_table.EventTable``: the segments reader's rows gathered column by column and
typed once into Arrow (issue 23 item 2), instead of a pandas frame per piece and a ``pd.concat``
per partition and group.

The contract is the event schema (DESIGN §5, ``streaming.events``): every field, its Arrow type,
null where a row has no value. The hand-built cases below write the expected cells by hand; the
scenario cases check that the reader's batch is the one its pandas path
(``segments.read_range(typed=False)``, still used by ``read_range``'s callers) gives for the
same reads, typed by pyarrow's own ``RecordBatch.from_pandas`` — including the gap rows of a
batch that fails its CRC (``LogSegment.recover`` → ``RecordBatch.ensureValid``: never applied).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import streaming.sources.segments as segments
from streaming.event_table import EventTable
from streaming.events import FIELD_NAMES, arrow_schema, make_row, to_frame
from streaming.simulate.scenarios import write_scenario
from streaming.sources.log_layout import parse_partition_dir


def reference(df: pd.DataFrame) -> pa.RecordBatch:
    return pa.RecordBatch.from_pandas(to_frame(df), schema=arrow_schema(), preserve_index=False)


def test_parts_of_columns_and_rows_become_one_batch_of_the_event_schema():
    t = EventTable()
    # two spans and a marker of one read: per-row arrays, and one value for the whole part
    t.add_columns(3, {
        "kind": np.array(["data", "marker", "data"], dtype=object),
        "producer_id": np.array([7, 7, 9], dtype=np.int64),
        "producer_epoch": np.array([0, 0, 3], dtype=np.int16),
        "coordinator_epoch": np.array([np.nan, 5.0, np.nan]),  # the spans lack it: NaN
        "marker": np.array([np.nan, "COMMIT", np.nan], dtype=object),
        "folded_txns": np.array([pd.NA, 4, pd.NA], dtype=object),
        "topic": "orders", "partition": 2, "source": "segments", "cluster": "c",
        "event_time": 1_700_000_000_123, "from_log_start": True,
    })
    # a progress row and a coordinator row with a partition list, as dicts
    t.add_rows([
        make_row("progress", topic="orders", partition=2, route_pid=-1, high_watermark=10, lso=None,
                 end_proven=True, event_time=1_700_000_000_123),
        {"kind": "txn_state", "topic": "__transaction_state", "partition": 0, "route_pid": 9,
         "txn_partitions": ["orders-2", "orders-3"], "tombstone": False, "event_time": 1_700_000_000_000},
        {"kind": "txn_state", "topic": "__transaction_state", "partition": 0, "route_pid": 9,
         "txn_partitions": [], "tombstone": True, "event_time": 1_700_000_000_000},
    ])
    b = t.to_arrow()
    assert b.schema.equals(arrow_schema())
    assert b.num_rows == len(t) == 6
    col = {name: b.column(name).to_pylist() for name in FIELD_NAMES}
    assert col["kind"] == ["data", "marker", "data", "progress", "txn_state", "txn_state"]
    assert col["topic"] == ["orders"] * 4 + ["__transaction_state"] * 2
    assert col["partition"] == [2, 2, 2, 2, 0, 0]
    assert col["source"] == ["segments"] * 3 + [None] * 3
    assert col["producer_id"] == [7, 7, 9, None, None, None]
    assert col["producer_epoch"] == [0, 0, 3, None, None, None]
    assert col["coordinator_epoch"] == [None, 5, None, None, None, None]
    assert col["marker"] == [None, "COMMIT", None, None, None, None]
    assert col["folded_txns"] == [None, 4, None, None, None, None]
    assert col["route_pid"] == [None, None, None, -1, 9, 9]
    assert col["high_watermark"] == [None, None, None, 10, None, None]
    assert col["lso"] == [None] * 6
    assert col["end_proven"] == [None, None, None, True, None, None]
    assert col["from_log_start"] == [True, True, True, None, None, None]
    # a list cell stays one cell; an empty partition list is not a null one
    assert col["txn_partitions"] == [None, None, None, None, ["orders-2", "orders-3"], []]
    assert col["tombstone"] == [None, None, None, None, False, True]
    assert [ts.timestamp() * 1000 for ts in col["event_time"][:4]] == [1_700_000_000_123] * 4
    assert col["reason"] == [None] * 6


def test_a_gap_at_a_garbled_base_offset_keeps_every_digit():
    """A CRC failure's gap row carries the batch's base offset as read (``DecodeError.base_offset``):
    a garbled one may exceed 2**53, which a float64 column (the old frames' concat) rounded."""
    t = EventTable()
    t.add_columns(1, {"kind": np.array(["data"], dtype=object), "first_offset": np.array([5]), "event_time": 1})
    t.add_rows([make_row("gap", topic="t", partition=0, route_pid=-1, first_offset=2**62 + 1, crc_failed=True,
                         reason="CRC-32C mismatch", source_position="t-0/0.log@61", event_time=1)])
    b = t.to_arrow()
    assert b.column("first_offset").to_pylist() == [5, 2**62 + 1]
    assert b.column("crc_failed").to_pylist() == [None, True]


def test_an_int32_overflow_is_refused_and_an_empty_table_has_no_rows():
    t = EventTable()
    t.add_columns(1, {"kind": "data", "partition": 2**40, "event_time": 0})
    with pytest.raises(pa.ArrowInvalid):
        t.to_arrow()
    assert len(EventTable()) == 0
    assert EventTable().to_arrow().num_rows == 0


def _flip_a_record_byte(root):
    """Corrupt one data batch of ``orders-0`` after its header's CRC-covered start, so it fails
    its CRC with its base offset intact (the reader reports a gap with ``crc_failed``)."""
    path = sorted((root / "orders-0").glob("*.log"))[0]
    data = bytearray(path.read_bytes())
    data[70] ^= 0x5A  # inside the first batch's records (the header is 61 bytes)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name,corrupt", [
    ("commit", False), ("retention-restart", False), ("txn-state-compacted", False),
    ("long-txn-split-txn-log", False), ("coordinator-failover", True), ("random-mix", False),
])
def test_the_readers_batch_is_its_pandas_paths(tmp_path, name, corrupt):
    params = {"target_bytes": 400_000} if name == "random-mix" else {}
    sc = write_scenario(name, tmp_path / "d", seed=1, **params)
    if corrupt:
        _flip_a_record_byte(sc.root)
    r = segments.SegmentsBatchReader({"path": str(sc.root), "cluster": "c", "input_partitions": "2"})
    gaps = 0
    for group in r.partitions():
        frames = [segments.read_range(parse_partition_dir(one.part_path), one.chunks, start=None, end=tuple(one.end),
                                      cluster="c", clock_ms=one.clock, seed_offset=one.seed_offset,
                                      txn_partition_count=50, typed=False) for one in group.parts]
        want = reference(pd.concat([f for f in frames if len(f)], ignore_index=True))
        (got,) = list(r.read(group))
        assert got.schema.equals(want.schema)
        for field, a, b in zip(FIELD_NAMES, want.columns, got.columns, strict=True):
            assert a.equals(b), (field, a, b)
        gaps += sum(1 for k in got.column("kind").to_pylist() if k == "gap")
    assert (gaps > 0) == corrupt


def test_rows_last_types_every_row_dict_after_the_column_parts():
    """The kafka source's group (``kafka_reader._read_table``): each partition's spans and markers
    as columns, its gap and progress rows as dicts; with ``rows_last`` the dicts of every partition
    come after all the columns, in the order added, as the source's batches always had them."""
    t = EventTable(rows_last=True)
    for part in (0, 1):
        t.add_columns(1, {"kind": np.array(["data"], dtype=object), "first_offset": np.array([10 + part]),
                          "topic": "orders", "partition": part, "lagging": True if part else None})
        t.add_rows([make_row("gap", topic="orders", partition=part, reason=f"bad {part}", first_offset=part),
                    make_row("progress", topic="orders", partition=part, high_watermark=20 + part)])
    assert len(t) == 6
    b = t.to_arrow()
    assert b.schema.equals(arrow_schema())
    assert b.column("kind").to_pylist() == ["data", "data", "gap", "progress", "gap", "progress"]
    assert b.column("partition").to_pylist() == [0, 1, 0, 0, 1, 1]
    assert b.column("first_offset").to_pylist() == [10, 11, 0, None, 1, None]
    assert b.column("high_watermark").to_pylist() == [None, None, None, 20, None, 21]
    assert b.column("reason").to_pylist() == [None, None, "bad 0", None, "bad 1", None]
    # a field None on every row dict (make_row's many unset fields) is null, not missing
    assert b.column("lagging").to_pylist() == [None, True, None, None, None, None]
    assert b.column("transactional_id").null_count == 6


def test_from_arrow_gives_to_frames_dtypes_and_cells():
    """``events.from_arrow`` (the kafka reader's frame form): the frame ``to_frame`` gives for the
    same rows, dtype for dtype, with partition lists as Python lists."""
    from streaming.events import from_arrow

    rows = [make_row("txn_state", topic="__transaction_state", partition=3, route_pid=9, producer_id=9,
                     first_offset=4, first_ts=1_700_000_000_001, txn_partitions=["orders-2"], tombstone=False,
                     event_time=1_700_000_000_123),
            make_row("progress", topic="orders", partition=2, route_pid=-1, high_watermark=10, end_proven=True,
                     event_time=1_700_000_000_123)]
    want = to_frame(rows)
    t = EventTable()
    t.add_rows(rows)
    got = from_arrow(t.to_arrow())
    assert list(got.columns) == list(want.columns)
    assert (got.dtypes == want.dtypes).all()
    assert got["txn_partitions"].tolist() == [["orders-2"], None]
    assert got.astype(object).where(got.notna(), None).values.tolist() == \
        want.astype(object).where(want.notna(), None).values.tolist()
    assert len(from_arrow(None)) == 0 and list(from_arrow(None).columns) == list(want.columns)
