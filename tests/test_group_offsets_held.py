"""Groups held by an open transactional offset commit: the ``group-offsets-held`` finding kind,
live against the fake broker (issue 25 item 1).

What Kafka does, and what every expectation below is written from:

* ``sendOffsetsToTransaction`` -> TxnOffsetCommit: the group coordinator appends the group's
  offsets to ``__consumer_offsets`` as a *transactional* batch of the producer's id
  (``GroupMetadataManager.storeOffsets``: ``isTxnOffsetCommit = producerId != NO_PRODUCER_ID``;
  4.x ``OffsetMetadataManager.commitTransactionalOffset``). Keys: OffsetCommitKey v0/v1 (int16
  version, string group, string topic, int32 partition); value: OffsetCommitValue (int16 version,
  int64 offset, ...).
* The commits stay pending until the producer's COMMIT/ABORT marker lands on that partition
  (``GroupMetadataManager.handleTxnCompletion`` -> ``GroupMetadata.completePendingTxnOffsetCommit``;
  on load ``loadGroupsAndOffsets``): meanwhile an OffsetFetch with ``require_stable`` (v7+,
  KIP-447, Kafka 2.5+) answers UNSTABLE_OFFSET_COMMIT for them (``GroupMetadataManager.getOffsets``:
  ``requireStable && group.hasPendingOffsetCommitsForTopicPartition(tp)``; 4.x
  ``OffsetMetadataManager.fetchOffsets`` with ``hasPendingTransactionalOffsets``). A committed or
  aborted one holds nothing.
* Watched like a data partition, the open transaction gets the verdict of detection.md §3 and
  both abort commands for its ``__consumer_offsets`` partition.

Staged partitions (timestamps one hour ago, past the 20-minute threshold):

* ``orders-0``: producer 200 opens a transaction at 0..1 and never finishes it; 2..4 plain.
* ``__consumer_offsets-3``: producer 100's TxnOffsetCommit at 0 (billing orders-0 -> 40, orders-1
  -> 57), never ended; producer 101's at 1 (reports clicks-0 -> 5) with its COMMIT marker at 2;
  producer 102's at 3 (audit orders-0 -> 9) with its ABORT marker at 4; a plain OffsetCommit at 5
  (etl orders-0 -> 1).
* ``__transaction_state``: one empty partition. Read to its high watermark, the coordinator view
  is complete and maps neither 100 nor 200: both are ``coordinator-unaware`` (§3.1), confirmed by
  DescribeProducers (2.8+) naming each open transaction's start.
"""

from __future__ import annotations

import logging
import struct
import time

import pandas as pd
import pytest

from streaming.simulate.encode import encode_batch, encode_marker, encode_record
from streaming.sources.kafka import KafkaStreamReader, close_wires, read_partition
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker

_watchdog = kafka_watchdog(240)
OFFSETS = "__consumer_offsets"


@pytest.fixture(autouse=True)
def _close():
    yield
    close_wires()


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack(">h", len(b)) + b


def _key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", 1) + _s(group) + _s(topic) + struct.pack(">i", partition)


def _value(offset: int, ts: int) -> bytes:  # OffsetCommitValue v3: offset, leaderEpoch, metadata, commitTimestamp
    return struct.pack(">hqi", 3, offset, -1) + _s("") + struct.pack(">q", ts)


def _commit(base: int, pid: int, commits: list[tuple[str, str, int, int]], ts: int, *, txn: bool = True) -> bytes:
    recs = [encode_record(i, _value(o, ts), _key(g, t, p)) for i, (g, t, p, o) in enumerate(commits)]
    return encode_batch(base, recs, producer_id=pid if txn else -1, producer_epoch=0 if txn else -1,
                        base_sequence=0 if txn else -1, is_transactional=txn, base_timestamp=ts, max_timestamp=ts)


def stage(broker: FakeKafkaBroker) -> int:
    now = int(time.time() * 1000) - 3_600_000
    broker.create_topic("orders")
    broker.create_topic(OFFSETS, 4)
    broker.create_topic("__transaction_state", 1)
    broker.append_raw("orders", 0, encode_batch(0, 2, producer_id=200, producer_epoch=0, base_sequence=0,
                                                is_transactional=True, base_timestamp=now, max_timestamp=now)
                      + encode_batch(2, 3, base_timestamp=now, max_timestamp=now))
    broker.append_raw(OFFSETS, 3, _commit(0, 100, [("billing", "orders", 0, 40), ("billing", "orders", 1, 57)], now)
                      + _commit(1, 101, [("reports", "clicks", 0, 5)], now)
                      + encode_marker(2, 101, 0, 1, 4, now)  # COMMIT
                      + _commit(3, 102, [("audit", "orders", 0, 9)], now)
                      + encode_marker(4, 102, 0, 0, 4, now)  # ABORT
                      + _commit(5, -1, [("etl", "orders", 0, 1)], now, txn=False))
    return now


def _reader(broker: FakeKafkaBroker, **opts: str) -> KafkaStreamReader:
    return KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]',
                              "cluster": "live", "request_timeout_ms": "3000", "retries": "2", **opts})


def _watched(r: KafkaStreamReader) -> set[str]:
    return {k.split("\t")[0] for k in r.initialOffset()["parts"]}


# --- discovery -------------------------------------------------------------------------------------


def test_consumer_offsets_is_watched_by_default_whatever_the_topics(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 0)) as broker:
        stage(broker)
        r = _reader(broker)
        assert _watched(r) == {"orders", OFFSETS, "__transaction_state"}
        assert _watched(_reader(broker, watch_consumer_offsets="false")) == {"orders", "__transaction_state"}
        init = r.initialOffset()
        # read like a data partition: the open TxnOffsetCommit of 100 pins its LSO at 0
        assert init["parts"][f"{OFFSETS}\t3"][0] == 0
        ev = pd.concat([read_partition(p, r.opts) for p in r.partitions(init, r.latestOffset(init, None))],
                       ignore_index=True)
        co = ev[(ev["topic"] == OFFSETS) & (ev["partition"] == 3)]
        assert sorted(co.loc[co["kind"] == "data", "producer_id"].astype(int)) == [100, 101, 102]
        # the markers of 101 (COMMIT) and 102 (ABORT) close theirs (ProducerStateManager semantics, §1)
        assert sorted(zip(co.loc[co["kind"] == "marker", "producer_id"].astype(int),
                          co.loc[co["kind"] == "marker", "marker"], strict=True)) == [(101, "COMMIT"), (102, "ABORT")]


def test_without_read_on_consumer_offsets_it_is_left_out_with_one_warning(tmp_path, caplog):
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(4, 0)) as broker:
        stage(broker)
        broker.deny("Read", "Topic", OFFSETS)
        with caplog.at_level(logging.WARNING):
            r = _reader(broker)
            assert _watched(r) == {"orders", "__transaction_state"}
            r.latestOffset(r.initialOffset(), None)
        warned = [m for m in caplog.messages if "not watching __consumer_offsets" in m]
        assert len(warned) == 1 and "Read" in warned[0]
        # checked once: one Fetch of __consumer_offsets in all (KafkaApis.handleFetchRequest refused it)
        assert len([q for q in broker.requests_for("fetch")
                    if any(t.topic == OFFSETS for t in getattr(q.request, "topics", []))]) == 1


# --- the job end to end --------------------------------------------------------------------------------


def _run(tmp_path, broker, watch: bool) -> list[dict]:
    from streaming.config import as_config, load
    from streaming.runner import run_job
    from streaming.sinks.jsonl import read_jsonl

    cfg = load(None, env={})
    cfg["cluster"] = "live"
    cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, topics=["orders"], request_timeout_ms=3000,
                        once_ride_through_ms=0, watch_consumer_offsets=watch)
    cfg["streaming"].update(checkpoint=str(tmp_path / f"ck-{watch}"))
    cfg["sinks"].update(enabled=["jsonl"], jsonl_path=str(tmp_path / f"alerts-{watch}.jsonl"))
    assert run_job(as_config(cfg), source="kafka", path=None, once=True) == 0
    return read_jsonl(str(tmp_path / f"alerts-{watch}.jsonl"))


def _essentials(a: dict) -> tuple:
    return (a["key"], a["status"], a["cause"], a["verified"], a["kind"], a["abort_command_new"],
            a["abort_command_legacy"], a["blocked_groups"])


@pytest.mark.spark
@pytest.mark.parametrize("release", [(4, 0), (3, 0)], ids=["4.0", "3.0"])
def test_run_once_reports_the_group_held_by_an_open_offset_commit(spark, tmp_path, release):
    from streaming.quality.alert_contract import validate_alerts

    with FakeKafkaBroker(tmp_path / "logs", broker_version=release) as broker:
        stage(broker)
        boot = broker.bootstrap_servers
        on = _run(tmp_path, broker, watch=True)
        off = _run(tmp_path, broker, watch=False) if release < (4, 0) else None
    assert validate_alerts(on).failures == []
    by_key = {a["key"]: a for a in on}
    # only 100's transaction: 101's was committed and 102's aborted by their markers
    assert sorted(by_key) == ["live/__consumer_offsets/3/100/0", "live/orders/0/200/0"]
    held = by_key["live/__consumer_offsets/3/100/0"]
    cmd = f"kafka-transactions.sh --bootstrap-server '{boot}' abort --topic '__consumer_offsets' --partition 3"
    assert _essentials(held) == (
        "live/__consumer_offsets/3/100/0", "hanging", "coordinator-unaware", True, "group-offsets-held",
        f"{cmd} --start-offset 0",
        # DescribeProducers (rule 1): 100 has no marker on the partition, CoordinatorEpoch -1 -> 0
        f"{cmd} --producer-id 100 --producer-epoch 0 --coordinator-epoch 0",
        ["billing"])
    assert held["pending_offset_commits"] == [
        {"group": "billing", "topic": "orders", "partition": 0, "committed_offset": 40, "record_offset": 0,
         "unstable": True, "reason": None},
        {"group": "billing", "topic": "orders", "partition": 1, "committed_offset": 57, "record_offset": 1,
         "unstable": True, "reason": None}]
    assert held["open_ms"] >= 3_600_000 - 60_000 and held["producer_id"] == 100
    data = by_key["live/orders/0/200/0"]
    assert (data["status"], data["cause"], data["kind"], data["pending_offset_commits"]) == (
        "hanging", "coordinator-unaware", "transaction", None)
    if off is not None:
        # before 4.0 nothing but the new kind changes: the data partition's finding is the same
        assert [a["key"] for a in off] == ["live/orders/0/200/0"]
        assert _essentials(off[0])[:7] == _essentials(data)[:7]
