"""The kafka source's offset log entry (streaming/sources/kafka_plan_state.py,
streaming/sources/kafka_offset_pack.py): its packed form, the forms earlier versions wrote, and
damaged entries.

What Spark does with the entry, which every expectation here follows: the dict ``latestOffset``
returns is json-dumped (pyspark ``python_streaming_source_runner.latest_offset_*_func``:
``json.dumps(offset)``) into the checkpoint's offset log (``OffsetSeqLog``) before the
micro-batch runs, and dicts parsed back from that JSON (``json.loads``) are what
``latestOffset`` and ``partitions(start, end)`` get. On a restart
``MicroBatchExecution.populateStartOffsets`` takes the last entry (``offsetLog.getLatest()``) as
the batch to run and the one before it (``offsetLog.get(batchId - 1)``) as its start, and runs
that batch again when it was not committed: each entry alone must give back exactly the plan it
was written from. So every test here goes through ``json.dumps`` / ``json.loads`` and compares
with values written by hand."""

from __future__ import annotations

import base64
import copy
import json
import struct
import zlib

import numpy as np
import pytest

from streaming.sources.kafka_offset_pack import FORMAT, PackedOffsetsError, pack_column, unpack_column
from streaming.sources.kafka_plan_state import PlanColumns, PlanState, Position, ProbeMemo, Seen
from streaming.sources.kafka_source import KafkaStreamReader

BIG = 2 ** 40  # offsets of a long-lived partition: beyond int32


def raw(column: str) -> tuple[str, int, bytes]:
    """A packed column taken apart with the standard library alone: (dtype code, rows, bytes)."""
    code, rows, data = column.split(":")
    return code, int(rows), zlib.decompress(base64.b64decode(data))


def logged(state: PlanState) -> dict:
    """``state`` as Spark hands it back after writing it to the offset log."""
    return json.loads(json.dumps(state.to_json()))


def test_a_column_is_the_narrowest_little_endian_int_zlib_compressed_in_base64():
    """The form is ``<dtype>:<rows>:<base64 of zlib of the little-endian bytes>``, in the
    narrowest of int8/16/32/64 that holds every value; reading gives the values back exactly,
    int64's extremes included."""
    assert raw(pack_column(np.array([0, 127]))) == ("i1", 2, b"\x00\x7f")
    assert raw(pack_column(np.array([-1, 128]))) == ("i2", 2, struct.pack("<2h", -1, 128))
    assert raw(pack_column(np.array([-2 ** 31, 2 ** 31 - 1]))) == ("i4", 2, struct.pack("<2i", -2 ** 31, 2 ** 31 - 1))
    assert raw(pack_column(np.array([2 ** 31]))) == ("i8", 1, struct.pack("<q", 2 ** 31))
    assert raw(pack_column(np.zeros(0, dtype=np.int64))) == ("i1", 0, b"")
    extremes = np.array([-2 ** 63, 2 ** 63 - 1, 0], dtype=np.int64)
    assert unpack_column(pack_column(extremes), 3, "x").tolist() == [-2 ** 63, 2 ** 63 - 1, 0]


def plan() -> PlanState:
    """A plan as the planner leaves it in probe mode: ``orders`` 0-1 with positions and
    ListOffsets facts (columns), ``x-0`` with a position and no facts yet, probe memos for
    orders-0 (a transaction found at the LSO), orders-1 (followed) and ``y-3`` (a partition the
    columns do not list, e.g. one still in its backoff)."""
    state = PlanState(
        parts={"orders\t0": Position(BIG + 5, False), "orders\t1": Position(BIG + 9, True), "x\t0": Position(5, False)},
        clock=1_700_000_000_000, planned=1_700_000_000_000, ids={"orders": "AAAAAAAAAAAAAAAAAAAAAA"},
        seen={"orders\t0": Seen(BIG + 7, BIG + 3, 0, 2), "orders\t1": Seen(BIG + 9, None, None, 1000)},
        probe={"y\t3": ProbeMemo(4, None, None, None, None, None),
               "orders\t0": ProbeMemo(BIG + 3, BIG + 5, 2 ** 62, BIG + 3, 1_699_999_000_000),
               "orders\t1": ProbeMemo(BIG + 9, None, None, None, None, BIG + 9)},
        txn_n=0, emit=["orders\t0"])
    cols = PlanColumns.of_keys([("orders", [0, 1]), ("x", [0])])
    cols.fill(range(3), state.parts, state.seen)
    state.cols = cols
    return state


def test_a_plan_reads_back_from_its_offset_log_entry_alone():
    """The entry holds the columns' rows packed (``cols``) and the probe memos packed
    (``probe``); what the columns do not hold stays in ``parts``/``seen`` as before. Read back
    alone it is the same plan: every partition's next offset is where the plan said reading
    goes on (orders-0 at BIG + 5, orders-1 at its high watermark BIG + 9, from the log start),
    an LSO and a log start the broker did not give stay unknown, and the memos keep their
    fields, their Nones and their order."""
    state = plan()
    js = logged(state)
    assert js["parts"] == {"x\t0": [5, False]} and js["seen"] == {}  # x-0 has no facts: as before
    assert js["cols"]["format"] == js["probe"]["format"] == FORMAT
    assert js["cols"]["topics"] == ["orders"] and js["cols"]["rows"] == 2  # x has no row with both
    # next and LSO are written as their distance below the high watermark: 2 and 0, one byte each
    assert raw(js["cols"]["hw-next"]) == ("i1", 2, bytes([2, 0]))
    # orders-1's LSO was not given (-1): BIG + 9 - (-1) = BIG + 10, so that column needs int64
    assert raw(js["cols"]["hw-lso"]) == ("i8", 2, struct.pack("<2q", 4, BIG + 10))
    back = PlanState.from_json(js)
    assert back == state
    assert back.parts == {"orders\t0": Position(BIG + 5, False), "orders\t1": Position(BIG + 9, True),
                          "x\t0": Position(5, False)}
    assert back.seen == {"orders\t0": Seen(BIG + 7, BIG + 3, 0, 2), "orders\t1": Seen(BIG + 9, None, None, 1000)}
    assert list(back.probe.items()) == [
        ("y\t3", ProbeMemo(4, None, None, None, None, None)),
        ("orders\t0", ProbeMemo(BIG + 3, BIG + 5, 2 ** 62, BIG + 3, 1_699_999_000_000)),
        ("orders\t1", ProbeMemo(BIG + 9, None, None, None, None, BIG + 9))]
    assert back.cols.topics == ["orders"] and back.cols.partition.tolist() == [0, 1]
    assert back.cols.next.tolist() == [BIG + 5, BIG + 9] and back.cols.lso.tolist() == [BIG + 3, -1]
    # and its own entry is the same again (a restarted query writes what it read)
    assert logged(back) == js


def test_entries_written_by_earlier_versions_read():
    """The ``cols`` form before this one (per-topic JSON lists ``[partitions, next, from log
    start, hw, lso, log start, leader]``, -1 for an LSO or log start not given) with the probe
    memos as one JSON object per partition, as main 86a4112 wrote them, reads into the plan they
    hold; writing it again gives the packed form, which reads back to the same plan. (The form
    without ``cols`` at all is test_kafka_planner.test_offset_json_written_before_the_columns_is_read.)"""
    old = {"parts": {"x\t0": [5, False]}, "clock": 7, "planned": 7, "ids": {}, "resets": {}, "unavail": {},
           "dropped": {}, "gone": {}, "starts": {}, "seen": {}, "behind": {}, "rereads": {}, "unread_seen": -1,
           "lagging": [], "txn_n": 0,
           "cols": {"orders": [[0, 1], [BIG + 5, BIG + 9], [0, 1], [BIG + 7, BIG + 9], [BIG + 3, -1], [0, -1],
                               [2, 1000]]},
           "probe": {"orders\t0": {"lso": BIG + 3, "end": BIG + 5, "pid": 2 ** 62, "first": BIG + 3, "first_ts": 5},
                     "orders\t1": {"lso": BIG + 9, "end": None, "pid": None, "first": None, "first_ts": None,
                                   "follow": BIG + 9}},
           "reads": {}, "closes": {}, "emit": []}
    state = PlanState.from_json(json.loads(json.dumps(old)))
    assert state.parts == {"orders\t0": Position(BIG + 5, False), "orders\t1": Position(BIG + 9, True),
                           "x\t0": Position(5, False)}
    assert state.seen == {"orders\t0": Seen(BIG + 7, BIG + 3, 0, 2), "orders\t1": Seen(BIG + 9, None, None, 1000)}
    assert state.probe == {"orders\t0": ProbeMemo(BIG + 3, BIG + 5, 2 ** 62, BIG + 3, 5),
                           "orders\t1": ProbeMemo(BIG + 9, None, None, None, None, BIG + 9)}
    again = logged(state)
    assert again["cols"]["format"] == again["probe"]["format"] == FORMAT
    back = PlanState.from_json(again)
    assert back == state and back.cols.next.tolist() == [BIG + 5, BIG + 9]


def _col(values: list[int], code: str | None = None, rows: int | None = None) -> str:
    """A column written by hand (standard library only): ``code`` little-endian ints."""
    fmt = {"i1": "b", "i2": "h", "i4": "i", "i8": "q"}[code or "i1"]
    data = struct.pack(f"<{len(values)}{fmt}", *values)
    return f"{code or 'i1'}:{len(values) if rows is None else rows}:{base64.b64encode(zlib.compress(data)).decode()}"


def _flip_last_byte(column: str) -> str:
    code, rows, data = column.split(":")
    b = bytearray(base64.b64decode(data))
    b[-1] ^= 0x01  # the last byte of zlib's Adler-32 of the bytes
    return f"{code}:{rows}:{base64.b64encode(bytes(b)).decode()}"


# (table, field, damaged value or a function of the good one, the error expected)
DAMAGE = [
    ("cols", "hw", "i1:2:@@not base64@@", r"offsets: cols field 'hw' is not base64"),
    ("cols", "hw", "i1:2:" + base64.b64encode(b"\x00\x01 not zlib").decode(),
     r"offsets: cols field 'hw' is not intact zlib data"),
    ("cols", "hw-next", _flip_last_byte, r"offsets: cols field 'hw-next' is not intact zlib data"),
    ("cols", "hw", "i1:2:" + base64.b64encode(zlib.compress(b"\x07")).decode(),
     r"offsets: cols field 'hw' holds 1 bytes where 2 rows of i1 need 2"),
    ("cols", "hw", "i1:2:" + base64.b64encode(zlib.compress(b"\x07\x07\x07")).decode(),
     r"offsets: cols field 'hw' holds more than the 2 bytes 2 rows of i1 need"),
    ("cols", "hw", "i1:2:" + base64.b64encode(zlib.compress(b"\x07\x07")[:-5]).decode(),
     r"offsets: cols field 'hw' holds \d bytes \(its zlib stream cut short\)"),
    ("cols", "ls", _col([0, -1], rows=3), r"offsets: cols field 'ls' says it holds '3' rows, the table has 2"),
    ("cols", "ls", "i1:\u00b2:" + _col([0, -1]).split(":")[2], r"offsets: cols field 'ls' says it holds '\u00b2' rows"),
    ("cols", "ls", "u9" + _col([0, -1])[2:], r"offsets: cols field 'ls' has dtype code 'u9', not one of i1, i2"),
    ("cols", "ls", "i2" + _col([0, -1])[2:], r"offsets: cols field 'ls' holds 2 bytes where 2 rows of i2 need 4"),
    ("cols", "leader", 7, r"offsets: cols field 'leader' is a int, not a packed column string"),
    ("cols", "leader", "i1;2;AAAA", r"offsets: cols field 'leader' is not '<dtype>:<rows>:<base64>'"),
    ("cols", "rows", 3, r"offsets: cols field 'topic' says it holds '2' rows, the table has 3"),
    ("cols", "p", _col([1, 0]), r"offsets: cols rows of topic 'orders' are not grouped by topic with partitions "
                                r"ascending \(partition 0 at row 1\)"),
    ("cols", "p", _col([-1, 0]), r"offsets: cols field 'p' of topic 'orders' has partition -1"),
    ("cols", "topic", _col([0, 1]), r"offsets: cols field 'topic' has an index outside its 1 topics"),
    ("cols", "fls", _col([0, 2]), r"offsets: cols field 'fls' of topic 'orders' has 2 for partition 1, not 0 or 1"),
    ("cols", "topics", ["orders", "orders"], r"offsets: cols field 'topics' is not a list of distinct topic names"),
    ("cols", "format", "int-columns/zlib-base64/2", r"offsets: cols has format 'int-columns/zlib-base64/2'"),
    ("cols", "hw-lso", None, r"offsets: cols fields differ from this version's: missing \['hw-lso'\]"),
    ("probe", "null", _col([0, 32, 0]), r"offsets: probe field 'null' of topic 'orders' has 32 for partition 0"),
    ("probe", "p", _col([3, 0, 0]), r"offsets: probe holds partition 0 of topic 'orders' twice"),
    ("probe", "pid", "i8:3:", r"offsets: probe field 'pid' holds 0 bytes \(its zlib stream cut short\) where 3 "
                              r"rows of i8 need 24"),
]


@pytest.mark.parametrize(("table", "field", "value", "error"), DAMAGE, ids=[f"{t}.{f}.{i}" for i, (t, f, _, _) in
                                                                             enumerate(DAMAGE)])
def test_a_damaged_entry_is_one_clear_error_naming_the_field(table, field, value, error):
    """A damaged packed value is refused with one error naming the table, the field and, where
    the damage sits in one topic's rows, the topic; never read as other offsets (a wrong
    position there would skip data and could turn into a wrong verdict), never an error from
    numpy's internals. The good entry reads (checked first), so each case fails on its damage
    alone."""
    good = logged(plan())
    assert PlanState.from_json(good) == plan()
    bad = copy.deepcopy(good)
    if value is None:
        del bad[table][field]
    else:
        bad[table][field] = value(good[table][field]) if callable(value) else value
    with pytest.raises(PackedOffsetsError, match=error) as info:
        PlanState.from_json(json.loads(json.dumps(bad)))
    # raised from None: no chained error of base64, zlib or numpy in what the operator sees
    assert info.value.__cause__ is None and (info.value.__context__ is None or info.value.__suppress_context__)


def test_the_reader_reuses_its_plan_only_for_an_equal_entry():
    """``KafkaStreamReader._state`` hands back the plan it made when the dict Spark gives back is
    equal to the one it returned (after the JSON round trip); any other dict is read from its own
    content: a packed column holding other values is another plan, a damaged one an error, never
    the remembered plan."""
    r = KafkaStreamReader({"bootstrap_servers": "localhost:1", "topics": '["orders"]', "read_mode": "probe"})
    state = plan()
    js = r._remember(state.to_json(), state)
    assert r._state(json.loads(json.dumps(js))) is state
    other = json.loads(json.dumps(js))
    other["cols"]["hw"] = _col([9, 9])
    assert r._state(other).seen["orders\t0"] == Seen(9, 9 - 4, 0, 2)  # hw-lso 4 below the entry's hw
    other["cols"]["hw"] = _flip_last_byte(js["cols"]["hw"])
    with pytest.raises(PackedOffsetsError, match="cols field 'hw'"):
        r._state(other)


def test_random_plans_read_back_exactly_from_their_entries():
    """Plans with values at the edges of what the fields hold (int64 extremes, offsets beyond
    int32, LSO / log start not given, every memo field None or not, partitions of a topic with
    no facts, no memos at all) read back from their entry alone as the plans they were: the
    entry's expectation is the plan itself (seeded, so a failure repeats)."""
    rng = np.random.default_rng(23)
    edge = [0, 1, 127, 128, 2 ** 31 - 1, 2 ** 31, BIG + 3, 2 ** 63 - 1]
    for case in range(40):
        listing = [(f"t{j}", sorted(rng.choice(300, size=int(rng.integers(1, 6)), replace=False).tolist()))
                   for j in range(int(rng.integers(1, 5)))]
        parts, seen, probe = {}, {}, {}
        for t, ps in listing:
            for p in ps:
                k = f"{t}\t{p}"
                if rng.random() < 0.9:
                    parts[k] = Position(int(rng.choice(edge)), bool(rng.integers(2)))
                if rng.random() < 0.8:
                    seen[k] = Seen(int(rng.choice(edge)), None if rng.random() < 0.3 else int(rng.choice(edge)),
                                   None if rng.random() < 0.3 else int(rng.choice(edge)), int(rng.integers(-1, 2000)))
                if case % 5 and rng.random() < 0.5:
                    opt = [None if rng.random() < 0.4 else int(rng.choice(edge + [-2 ** 63, -1])) for _ in range(5)]
                    probe[k] = ProbeMemo(int(rng.choice(edge)), *opt)
        state = PlanState(parts=parts, clock=5, planned=5, seen=seen, probe=probe, txn_n=0)
        cols = PlanColumns.of_keys(listing)
        cols.fill(range(len(cols)), parts, seen)
        state.cols = cols
        back = PlanState.from_json(logged(state))
        assert back == state, case
        assert list(back.probe) == list(state.probe), case  # the memos' order too


def test_a_plan_without_any_partition_with_facts_reads_back():
    """A probe-mode plan in which no partition has both a position and ListOffsets facts (say
    every leader was down at the first plan: positions from the initial offsets, no facts) has a
    packed ``cols`` of no rows and no topics; it reads back as that plan (its positions from
    ``parts``), not as an error that would stop the restarted query."""
    state = PlanState(parts={"orders\t0": Position(3, False)}, clock=5, planned=5, probe={}, txn_n=0)
    state.cols = PlanColumns.of_keys([("orders", [0])])
    state.cols.fill([0], state.parts, state.seen)
    js = logged(state)
    assert js["cols"]["rows"] == 0 and js["cols"]["topics"] == [] and js["parts"] == {"orders\t0": [3, False]}
    back = PlanState.from_json(js)
    assert back == state and back.parts == {"orders\t0": Position(3, False)} and len(back.cols) == 0
