"""What the Spark state operator's function reads: the events packed by ``microbatch.pack_events``
(one JSON column besides the key and ``event_time``) must give the state machine the same event
dicts as ``state_machine.event_records`` gives the in-process engine for the same rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streaming.events import FIELD_NAMES, make_row, spark_schema, to_frame
from streaming.microbatch import PACKED, detect, pack_events, packed_event_records
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
    got = packed_event_records(r[PACKED] for r in packed)
    want = event_records(to_frame(rows))
    assert [_full(g) for g in got] == [_full(w) for w in want]

    # written by hand: what the state machine relies on whatever either conversion does
    data, marker, txn, progress, gap = got
    assert data["producer_id"] == BIG_PID and type(data["producer_id"]) is int
    assert data["event_time_ms"] == T0  # sub-millisecond digits dropped (unix_millis truncates)
    assert data["from_log_start"] is True and data["read_from_zero"] is False
    assert data["marker"] is None and "marker" not in data  # null: left out of the JSON, reads None
    assert marker["coordinator_epoch"] == 0 and marker["marker"] == "COMMIT"
    assert txn["txn_partitions"] == ["t-0", "t-1"]
    assert txn["transactional_id"] == "tx-\u00e9\"q" and txn["tombstone"] is False
    assert progress["lagging"] is False and progress["end_proven"] is True and progress["lso"] == 14
    assert gap["crc_failed"] is True and gap["route_pid"] == -1
    assert [r["route_pid"] for r in packed] == [BIG_PID] * 3 + [-1] * 2


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
