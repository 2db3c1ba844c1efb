"""``events.to_arrow`` (numpy columns straight to Arrow) against what it replaced,
``RecordBatch.from_pandas(to_frame(df))``: the same batch (schema, values, nulls) for the frames the
``segments`` reader builds over every simulator scenario, typed and untyped, and for hand-built
columns of every dtype a source hands over (NaN-holed floats, object booleans, strings with NaN,
missing columns, an empty frame); what the old path refused (a fractional offset, an Int32
overflow) is still refused.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import streaming.sources.segments as segments
from streaming.events import FIELD_NAMES, arrow_schema, to_arrow, to_frame
from streaming.simulate.scenarios import SCENARIOS, write_scenario
from streaming.sources.log_layout import parse_partition_dir


def reference(df: pd.DataFrame) -> pa.RecordBatch:
    """``events.to_arrow`` before issue 23."""
    return pa.RecordBatch.from_pandas(to_frame(df), schema=arrow_schema(), preserve_index=False)


def assert_same(df: pd.DataFrame) -> None:
    want, got = reference(df), to_arrow(df)
    assert got.schema.equals(want.schema)
    for name, a, b in zip(FIELD_NAMES, want.columns, got.columns, strict=True):
        assert a.equals(b), (name, a, b)


@pytest.fixture(scope="module")
def read_frames(tmp_path_factory) -> list[pd.DataFrame]:
    """The untyped frames of the segments reader's pandas path (``read_range(typed=False)``, one
    per planned partition, and their concatenation per group of input partitions, as the reader
    handed them to ``to_arrow`` before it gathered columns: ``streaming.event_table``), over every
    scenario."""
    frames: list[pd.DataFrame] = []
    root = tmp_path_factory.mktemp("scen")
    for name in sorted(SCENARIOS):
        params = {"target_bytes": 1_000_000} if name == "random-mix" else {}
        sc = write_scenario(name, root / name, seed=3, **params)
        r = segments.SegmentsBatchReader({"path": str(sc.root), "cluster": "c", "input_partitions": "2"})
        for group in r.partitions():
            parts = [segments.read_range(parse_partition_dir(one.part_path), one.chunks, start=None,
                                         end=tuple(one.end), cluster="c", clock_ms=one.clock,
                                         seed_offset=one.seed_offset, txn_partition_count=50, typed=False)
                     for one in group.parts]
            frames += parts
            frames.append(pd.concat([f for f in parts if len(f)], ignore_index=True))
    return frames


def test_reads_of_every_scenario(read_frames):
    assert len(read_frames) >= len(SCENARIOS)
    for df in read_frames:
        assert_same(df)
        assert_same(to_frame(df))  # typed frames (the kafka and dumps sources type theirs first)


def test_hand_built_columns():
    n = 5
    nan = float("nan")
    df = pd.DataFrame({
        "kind": ["data", "marker", None, nan, "gap"],
        "topic": ["t", "t", "u", "u", "v"],
        "partition": np.arange(n, dtype=np.int64),
        "producer_id": [1.0, nan, 3.0, 2.0**40, -1.0],
        "producer_epoch": np.array([0, 1, 2, 3, 32767], dtype=np.int32),
        "first_offset": pd.array([1, None, 3, 4, 5], dtype="Int64"),
        "tombstone": [True, None, False, nan, True],
        "end_proven": np.array([True, False, True, True, False]),
        "lagging": pd.array([True, None, False, None, True], dtype="boolean"),
        "txn_partitions": [["a-0"], None, [], np.array(["b-1", "c-2"], dtype=object), nan],
        "event_time": np.array([1_700_000_000_123] * n, dtype=np.int64),
        "first_ts": [1.0, 2.0, nan, 4.0, 5.0],
    })
    assert_same(df)
    assert_same(df.iloc[:0])
    assert_same(pd.DataFrame({"kind": ["data"]}))  # every other column missing: null
    ts = df.copy()
    ts["event_time"] = pd.to_datetime(ts["event_time"], unit="ms", utc=True)
    assert_same(ts)


@pytest.mark.parametrize("bad", [
    {"first_offset": [1.5]},  # fractional offset
    {"partition": np.array([2**40], dtype=np.int64)},  # beyond int32
])
def test_refused_as_before(bad):
    df = pd.DataFrame({"kind": ["data"], **bad})
    with pytest.raises((TypeError, ValueError, pa.ArrowInvalid)):
        reference(df)
    with pytest.raises((TypeError, ValueError, pa.ArrowInvalid)):
        to_arrow(df)
