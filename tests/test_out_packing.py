"""The Spark state operator's output rows travel as one JSON column (``microbatch.OUT_PACKED``,
issue 23): what :class:`streaming.microbatch.BatchWriter` gets back must be the row the typed
41-column frame gave it: exactly the ``OUT_NAMES`` fields, an absent field null, ints, bools and
strings as they were. Expectations written by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streaming.microbatch import OUT_PACKED, out_ddl, pack_out_rows, unpack_out_rows
from streaming.state_machine import OUT_NAMES

BIG = 2**40 + 7  # a producer id beyond an int: stays a long


def test_output_rows_round_trip_with_every_output_field():
    row = {"out_kind": "alert", "key": "c/t/0/1099511627783/10", "status": "hanging", "verified": False,
           "cluster": "c", "topic": "t", "partition": 0, "producer_id": BIG, "producer_epoch": 3,
           "first_offset": 10, "now_ms": 1_700_000_000_000, "evidence": '{"txn": {"a": 1}}',
           "clock_skew": True, "internal_note": "not an output field"}
    packed = pack_out_rows([row])
    assert len(packed) == 1
    (got,) = unpack_out_rows(packed)
    assert list(got) == list(OUT_NAMES)  # every output field, in order; the extra key dropped
    assert got["producer_id"] == BIG and type(got["producer_id"]) is int
    assert got["verified"] is False and got["clock_skew"] is True
    assert got["evidence"] == '{"txn": {"a": 1}}' and got["key"] == "c/t/0/1099511627783/10"
    assert got["partition"] == 0 and got["first_offset"] == 10 and got["now_ms"] == 1_700_000_000_000
    assert got["last_offset"] is None and got["reason"] is None and got["end_proven"] is None
    assert out_ddl() == f"{OUT_PACKED} string"


def test_numpy_scalars_become_python_values_and_other_objects_fail_loudly():
    (got,) = unpack_out_rows(pack_out_rows([{"out_kind": "progress", "partition": np.int32(4),
                                             "lso": np.int64(14), "lagging": np.bool_(False)}]))
    assert (got["partition"], got["lso"], got["lagging"]) == (4, 14, False)
    assert type(got["lso"]) is int and got["lagging"] is False
    with pytest.raises(TypeError, match="not JSON serialisable"):
        pack_out_rows([{"out_kind": object()}])


def test_packed_rows_are_compact_json_objects():
    (s,) = pack_out_rows([{"out_kind": "gap", "reason": "crc mismatch at offset 5"}])
    assert s.startswith('{"out_kind":"gap","key":null,') and json.loads(s)["reason"] == "crc mismatch at offset 5"


def test_one_keys_packed_events_decode_in_one_call_to_the_same_rows():
    """packed_event_rows joins a key's JSON objects into one array (one json.loads per key): each
    string is a whole object as Spark's to_json writes it (null fields left out), so the rows are
    those of decoding each alone. Written by hand: a data span, then its COMMIT marker (event_rows
    ROW_FIELDS order; coordinator part None off txn_state rows)."""
    from streaming.event_rows import ROW_FIELDS
    from streaming.microbatch import packed_event_records, packed_event_rows

    span = ('{"kind":"data","source":"segments","topic":"t","partition":0,"producer_id":7,"producer_epoch":0,'
            '"first_offset":0,"last_offset":1,"first_ts":5,"last_ts":6,"batch_count":2,"record_count":3,'
            '"bytes":200,"read_from_zero":true,"source_position":"t-0@0","event_time_ms":9}')
    marker = ('{"kind":"marker","source":"segments","topic":"t","partition":0,"producer_id":7,"producer_epoch":0,'
              '"first_offset":2,"last_offset":2,"marker":"COMMIT","coordinator_epoch":4,"event_time_ms":9}')
    rows = packed_event_rows(7, [span, marker])
    assert [dict(zip(ROW_FIELDS, r, strict=True)) for r in rows] == [
        {"kind": "data", "topic": "t", "partition": 0, "first_offset": 0, "last_offset": 1, "lso": None,
         "event_time_ms": 9, "producer_epoch": 0, "snapshot_offset": None, "read_from_zero": True, "first_ts": 5,
         "last_ts": 6, "batch_count": 2, "record_count": 3, "bytes": 200, "marker": None, "coordinator_epoch": None,
         "folded_max_epoch": None, "source": "segments", "source_position": "t-0@0", "coordinator": None},
        {"kind": "marker", "topic": "t", "partition": 0, "first_offset": 2, "last_offset": 2, "lso": None,
         "event_time_ms": 9, "producer_epoch": 0, "snapshot_offset": None, "read_from_zero": None, "first_ts": None,
         "last_ts": None, "batch_count": None, "record_count": None, "bytes": None, "marker": "COMMIT",
         "coordinator_epoch": 4, "folded_max_epoch": None, "source": "segments", "source_position": None,
         "coordinator": None},
    ]
    gap = '{"kind":"gap","route_pid":-1,"reason":"crc mismatch","crc_failed":true,"event_time_ms":9}'
    (g,) = packed_event_records([gap])
    assert g == {"kind": "gap", "route_pid": -1, "reason": "crc mismatch", "crc_failed": True, "event_time_ms": 9}
    assert g["lso"] is None  # EventRecord: an absent field reads null
    assert packed_event_rows(-1, [gap]) == [g] and packed_event_rows(7, []) == []
