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
