"""What the Spark state operator's function reads: the events packed by ``microbatch.pack_events``
(one JSON column besides the key and ``event_time``) must give the state machine the same event
dicts as ``state_machine.event_records`` gives the in-process engine for the same rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streaming.event_rows import ROW_FIELDS, as_row
from streaming.events import FIELD_NAMES, make_row, spark_schema, to_frame
from streaming.microbatch import PACKED, detect, pack_events, packed_event_records, packed_event_rows
from streaming.state_machine import EngineConfig, event_records

pytestmark = pytest.mark.spark
T0 = 1_700_000_000_123  # epoch ms; the timestamps below carry sub-millisecond digits
BIG_PID = 2**40 + 7  # beyond an int: must stay a long through JSON


def _ts(ms: int, us: int = 0) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(microsecond=(ms % 1000) * 1000 + us)


def _rows() -> list[dict]:
    return [
        make_row("data", source="segments", cluster="c", topic="t", partition=0, route_pid=BIG_PID,
                 producer_id=BIG_PID, producer_epoch=3, first_offset=10, last_offset=12, first_ts=T0 - 5,
                 last_ts=T0, batch_count=2, record_count=7, bytes=300, empty_batches=0,
                 from_log_start=True, read_from_zero=False, source_position="t-0@10",
                 event_time=_ts(T0, 999)),
        make_row("marker", source="segments", cluster="c", topic="t", partition=0, route_pid=BIG_PID,
                 producer_id=BIG_PID, producer_epoch=3, first_offset=13, last_offset=13, first_ts=T0 + 1,
                 last_ts=T0 + 1, batch_count=1, record_count=1, bytes=78, marker="COMMIT",
                 coordinator_epoch=0, event_time=_ts(T0 + 1)),
        make_row("txn_state", source="dumps", cluster="c", topic="__transaction_state", partition=4,
                 route_pid=BIG_PID, producer_id=BIG_PID, producer_epoch=3, transactional_id="tx-\u00e9\"q",
                 tombstone=False, txn_state="Ongoing", txn_partitions=["t-0", "t-1"], txn_timeout_ms=60_000,
                 txn_start_ts=T0 - 10, txn_last_update_ts=T0 - 2, prev_producer_id=-1, next_producer_id=-1,
                 client_txn_version=0, event_time=_ts(T0 - 2)),
        make_row("progress", source="segments", cluster="c", topic="t", partition=0, route_pid=-1,
                 high_watermark=14, lso=14, log_start_offset=0, lagging=False, end_proven=True,
                 event_time=_ts(T0 + 2)),
        make_row("gap", source="segments", cluster="c", topic="t", partition=1, route_pid=-1,
                 reason="crc mismatch at offset 5", crc_failed=True, event_time=_ts(T0 + 3)),
    ]


def _full(rec: dict) -> dict:
    """Every field of an event dict as the state machine reads it (absent = None); list cells as lists."""
    names = [n for n in FIELD_NAMES if n != "event_time"] + ["event_time_ms"]
    return {n: (list(rec[n]) if n == "txn_partitions" and rec[n] is not None else rec[n]) for n in names}


def test_packed_events_give_the_state_machine_the_event_records_dicts(spark):
    rows = _rows()
    df = spark.createDataFrame([tuple(r[n] for n in FIELD_NAMES) for r in rows], schema=spark_schema())
    packed = pack_events(df).collect()
    assert [c for c in pack_events(df).columns] == ["route_pid", "event_time", PACKED]
    want = event_records(to_frame(rows))
    # Progress and gap rows (route_pid -1) pass through the state operator whole: every field.
    got = packed_event_records(r[PACKED] for r in packed[3:])
    assert [_full(g) for g in got] == [_full(w) for w in want[3:]]
    # A producer's own rows: the event rows the state machine reads, as the in-process engine
    # makes them of its dicts (event_rows.as_row); only those fields are packed (issue 23).
    prod = packed_event_rows(BIG_PID, [r[PACKED] for r in packed[:3]])
    assert prod == [as_row(w) for w in want[:3]]

    # written by hand: what the state machine relies on whatever either conversion does
    data, marker, txn = (dict(zip(ROW_FIELDS, r, strict=True)) for r in prod)
    progress, gap = got
    assert data["event_time_ms"] == T0  # sub-millisecond digits dropped (unix_millis truncates)
    assert data["read_from_zero"] is False and data["first_offset"] == 10 and data["bytes"] == 300
    assert data["marker"] is None and data["coordinator"] is None  # null: left out of the JSON, reads None
    assert marker["coordinator_epoch"] == 0 and marker["marker"] == "COMMIT"
    assert txn["kind"] == "txn_state" and txn["producer_epoch"] == 3
    assert txn["coordinator"] == (BIG_PID, "tx-\u00e9\"q", False, "Ongoing", T0 - 10, T0 - 2, ["t-0", "t-1"], 60_000, 0)
    assert type(txn["coordinator"][0]) is int  # beyond an int: stays a long through JSON
    assert progress["lagging"] is False and progress["end_proven"] is True and progress["lso"] == 14
    assert gap["crc_failed"] is True and gap["route_pid"] == -1
    assert [r["route_pid"] for r in packed] == [BIG_PID] * 3 + [-1] * 2
    # fields the state machine does not read stay out of a producer's JSON
    assert "from_log_start" not in packed[0][PACKED] and "empty_batches" not in packed[0][PACKED]
    assert "end_proven" in packed[3][PACKED]


def test_spark_state_function_takes_a_coordinator_record_of_several_partitions(spark, tmp_path):
    # An Ongoing record without TransactionStartTimestampMs (text dumps before 4.1), listing two
    # partitions: ProducerState builds the partition set from txn_partitions. Spark handed the
    # 43-column frame's array cells over as numpy arrays, whose truth value raises for two or
    # more elements ("set(ev.get('txn_partitions') or ())"); the packed JSON gives a list.
    rows = [make_row("txn_state", source="dumps", cluster="c", topic="__transaction_state", partition=4,
                     route_pid=1000, producer_id=1000, producer_epoch=0, transactional_id="tx",
                     tombstone=False, txn_state="Ongoing", txn_partitions=["t-0", "t-1"], txn_timeout_ms=60_000,
                     txn_last_update_ts=T0, prev_producer_id=-1, next_producer_id=-1, event_time=_ts(T0))]
    spark.createDataFrame([tuple(r[n] for n in FIELD_NAMES) for r in rows], schema=spark_schema()) \
        .write.parquet(str(tmp_path / "in"))
    events = spark.readStream.schema(spark_schema()).parquet(str(tmp_path / "in"))
    out: list = []
    q = detect(events, EngineConfig(cluster="c")).writeStream.outputMode("update") \
        .option("checkpointLocation", str(tmp_path / "ck")) \
        .foreachBatch(lambda df, _b: out.extend(df.collect())).trigger(availableNow=True).start()
    q.awaitTermination()
    assert q.exception() is None  # the worker raised ValueError here before the packed input
    assert q.lastProgress["stateOperators"][0]["numRowsTotal"] == 1  # producer 1000's state
    # nothing was written to t-0 or t-1 by this producer: no open transaction, nothing to emit
    assert out == []
