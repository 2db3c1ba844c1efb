"""The segments stream under an available-now trigger plans the log dir once (issue 23 item 2).

``prepareForTriggerAvailableNow`` plans from the initial offset with no byte limit (the target);
the first ``latestOffset`` asks for exactly that plan again (same start, no limit), so the reader
hands the target over instead of scanning every segment's headers a second time. The offsets must
be those the two-plan path gave: written here by hand from the bytes each test writes.

Offsets (streaming/sources/segments.py): per partition [segment base offset, byte position after
the last whole batch, newest batch maxTimestamp read, seed snapshot offset (-1: none)], and the
clock: the newest maxTimestamp of the log dir (no outlier among two partitions 4 ms apart).
"""

from __future__ import annotations

from pyspark.sql.streaming.datasource import ReadAllAvailable

import streaming.sources.segments as segments
from streaming.simulate.encode import encode_batch, encode_marker

T0 = 1_700_000_000_000
CONTROL_COMMIT = 1  # ControlRecordType.COMMIT


def _data(offset: int, ts: int) -> bytes:
    # one record, timestampDelta 0: the batch's maxTimestamp is its base timestamp
    # (DefaultRecordBatch: maxTimestamp = the largest record timestamp)
    return encode_batch(offset, 1, producer_id=7, producer_epoch=0, base_sequence=offset,
                        is_transactional=True, base_timestamp=ts)


def _log_dir(root):
    """orders-0: producer 7's data at 0 and 1 and its COMMIT at 2 (ts T0, T0+1, T0+2);
    orders-1: one data batch at 0 (ts T0+4). Returns (log dir, byte length of each segment)."""
    seg0 = _data(0, T0) + _data(1, T0 + 1) + encode_marker(2, 7, 0, CONTROL_COMMIT, 1, T0 + 2)
    seg1 = _data(0, T0 + 4)
    for name, data in (("orders-0", seg0), ("orders-1", seg1)):
        (root / name).mkdir(parents=True)
        (root / name / "00000000000000000000.log").write_bytes(data)
    return root, len(seg0), len(seg1)


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = segments.plan_offsets

    def counted(opts, start, max_bytes):
        calls.append(1)
        return real(opts, start, max_bytes)

    monkeypatch.setattr(segments, "plan_offsets", counted)
    return calls


def test_available_now_plans_the_log_dir_once_with_the_two_plan_offsets(tmp_path, monkeypatch):
    root, n0, n1 = _log_dir(tmp_path / "logs")
    expected = {"parts": {"orders-0": [0, n0, T0 + 2, -1], "orders-1": [0, n1, T0 + 4, -1]}, "clock": T0 + 4}
    calls = _counting(monkeypatch)

    once = segments.SegmentsStreamReader({"path": str(root)})
    once.prepareForTriggerAvailableNow()
    end = once.latestOffset(once.initialOffset(), ReadAllAvailable())
    assert end == expected
    assert len(calls) == 1  # the target's plan only (two before: the target's, then the batch's)

    # A reader without the target (processing-time trigger) plans the same offsets itself.
    calls.clear()
    plain = segments.SegmentsStreamReader({"path": str(root)})
    assert plain.latestOffset(plain.initialOffset(), ReadAllAvailable()) == expected
    assert len(calls) == 1

    # The no-data micro-batch after it plans from the end as before: nothing new, same offsets.
    calls.clear()
    assert once.latestOffset(end, ReadAllAvailable()) == expected
    assert len(calls) == 1


def test_available_now_reads_up_to_what_existed_when_the_query_started(tmp_path):
    """A batch appended after the target was planned is left out of the first micro-batch, as
    the cap of the two-plan path left it out (SupportsTriggerAvailableNow: what is available when
    the query starts), and the handed-over offsets are a copy the caller may change."""
    root, n0, n1 = _log_dir(tmp_path / "logs")
    reader = segments.SegmentsStreamReader({"path": str(root)})
    reader.prepareForTriggerAvailableNow()
    with open(root / "orders-0" / "00000000000000000000.log", "ab") as f:
        f.write(_data(3, T0 + 9))
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert end == {"parts": {"orders-0": [0, n0, T0 + 2, -1], "orders-1": [0, n1, T0 + 4, -1]}, "clock": T0 + 4}
    end["parts"]["orders-0"][1] = 0
    assert reader.latestOffset(reader.initialOffset(), ReadAllAvailable())["parts"]["orders-0"] == [0, n0, T0 + 2, -1]


def test_a_byte_limit_still_plans_each_micro_batch(tmp_path, monkeypatch):
    """With max_bytes_per_trigger the first micro-batch is not the target (it stops at the
    budget): planned as before. orders-0's first batch is the budget (at least one batch)."""
    root, n0, n1 = _log_dir(tmp_path / "logs")
    first = len(_data(0, T0))
    calls = _counting(monkeypatch)
    reader = segments.SegmentsStreamReader({"path": str(root), "max_bytes_per_trigger": str(first)})
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert len(calls) == 2
    # orders-0 stops after its first batch (more left: the clock may not pass T0, its newest read)
    assert end == {"parts": {"orders-0": [0, first, T0, -1], "orders-1": [0, n1, T0 + 4, -1]}, "clock": T0}
