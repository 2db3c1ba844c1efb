"""The live path against the broker fake over a real socket: the ``kafka-txn`` source (driver
planning and executor reads), faults, the streaming job end to end, and the alerts-topic sink."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaConsumer

from streaming.alerts import AlertConfig
from streaming.cli import scan_paths
from streaming.config import as_config, engine_config, load
from streaming.pipeline import SinkSet, start_query
from streaming.simulate.scenarios import write_scenario
from streaming.sinks.kafka_topic import AlertSinkError, KafkaAlertSink
from streaming.sources.kafka import KafkaStreamReader, close_wires, read_partition
from streaming.sources.kafka_wire import KafkaUnavailable
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.scenario_truth import expected_findings, projected
from tests.streaming_wait import wait_until

FAST = {"request_timeout_ms": "3000", "retries": "3"}


@pytest.fixture(autouse=True)
def _close_cached_clients():
    """Cached clients of a stopped broker would keep retrying in their background thread."""
    yield
    close_wires()


def live_scenario(tmp_path, name="write-after-marker", seed=5):
    """Write a scenario whose evaluation clock is (about) now, so wall-clock reads judge it
    exactly as the scenario's expectations do."""
    probe = write_scenario(name, tmp_path / "probe", seed=seed, base_time_ms=1_700_000_000_000)
    span = probe.as_of_ms - 1_700_000_000_000
    base = int(time.time() * 1000) - span - 5_000
    return write_scenario(name, tmp_path / "logs", seed=seed, base_time_ms=base)


def reader(broker, **opts):
    o = {"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*", "cluster": "live", **FAST}
    o.update(opts)
    return KafkaStreamReader(o)


def events_of(r, start, end):
    import pandas as pd

    frames = [read_partition(p, r.opts) for p in r.partitions(start, end)]
    return pd.concat(frames, ignore_index=True)


def test_planning_starts_data_at_lso_and_coordinator_at_log_start(tmp_path):
    sc = live_scenario(tmp_path)
    with FakeKafkaBroker(sc.root) as broker:
        r = reader(broker)
        init = r.initialOffset()
        parts = init["parts"]
        txn = {k: v for k, v in parts.items() if k.startswith("__transaction_state")}
        assert txn and all(v == [0, True] for v in txn.values())
        expected = sc.expected[0]
        key = f"{expected['topic']}\t{expected['partition']}"
        assert parts[key][0] == expected["first_offset"]  # the open transaction pins the LSO
        end = r.latestOffset(init, None)
        assert end["clock"] > 0
        ev = events_of(r, init, end)
        assert set(ev["kind"]) >= {"data", "progress", "txn_state"}
        prog = ev[(ev["kind"] == "progress") & (ev["topic"] == expected["topic"])
                  & (ev["partition"] == expected["partition"])].iloc[0]
        assert prog["lso"] == expected["first_offset"] and prog["high_watermark"] > prog["lso"]


def test_earliest_reads_history_and_admission_control_marks_lagging_partitions(tmp_path):
    """Issue 12 item 3: a partition behind max_offsets_per_trigger no longer freezes the clock for
    all; it is listed as lagging and every row of its read says so (the driver holds its verdicts)."""
    sc = live_scenario(tmp_path)
    with FakeKafkaBroker(sc.root) as broker:
        r = reader(broker, starting_offsets="earliest", max_offsets_per_trigger="2")
        init = r.initialOffset()
        assert all(v[0] == 0 and v[1] for v in init["parts"].values())
        end = r.latestOffset(init, None)
        assert end["clock"] > 0  # old code: -1 while any partition is behind
        data_keys = [k for k in end["parts"] if not k.startswith("__transaction_state")]
        assert all(end["parts"][k][0] <= 2 for k in data_keys)
        assert any(end["parts"][k][0] > 2 for k in end["parts"] if k.startswith("__transaction_state"))
        behind = {k for k in data_keys if broker.partition_state(*k.split("\t")[:1], int(k.split("\t")[1]))
                  .high_watermark > 2}
        assert behind and set(end["lagging"]) == behind
        ev = events_of(r, init, end)
        lag = ev[ev["lagging"].fillna(False).astype(bool)]
        assert {f"{t}\t{p}" for t, p in zip(lag["topic"], lag["partition"], strict=True)} == behind
        assert not ev[ev["topic"] == "__transaction_state"]["lagging"].fillna(False).astype(bool).any()


def test_faults_leader_moves_retention_and_deletion(tmp_path):
    sc = live_scenario(tmp_path)
    t, p = sc.expected[0]["topic"], sc.expected[0]["partition"]
    with FakeKafkaBroker(sc.root) as broker:
        r = reader(broker, starting_offsets="earliest")
        init = r.initialOffset()
        broker.leader_not_available(t, p, count=2)
        end = r.latestOffset(init, None)
        ev = events_of(r, init, end)
        assert (ev["kind"] == "gap").sum() == 0 and len(ev[(ev["topic"] == t) & (ev["kind"] == "data")])
        # retention moved the log start past what we were about to read
        broker.advance_log_start(t, p, 2)
        ev = events_of(r, init, end)
        gaps = ev[(ev["kind"] == "gap") & (ev["topic"] == t)]
        assert len(gaps) == 1 and "retention deleted offsets 0..1" in gaps.iloc[0]["reason"]
        # nothing wholly below the new log start is reported as read
        mine = (ev["topic"] == t) & (ev["partition"] == p)
        assert ev[mine & (ev["kind"] == "data")]["last_offset"].min() >= 2
        broker.delete_topic(t)
        ev = events_of(r, init, end)
        gaps = ev[(ev["kind"] == "gap") & (ev["topic"] == t) & (ev["partition"] == p)]
        assert len(gaps) == 1 and "deleted" in gaps.iloc[0]["reason"]
        # the deleted partition is no longer planned: once the brokers confirm it (issue 20 item 6)
        # it leaves the offsets, with one unavailable record, instead of staying there for ever
        end2 = r.latestOffset(end, None)
        assert f"{t}\t{p}" in end["parts"] and f"{t}\t{p}" not in end2["parts"]
        assert "was deleted" in end2["dropped"][f"{t}\t{p}"]


def test_broker_down_is_a_clear_error(tmp_path):
    sc = live_scenario(tmp_path)
    with FakeKafkaBroker(sc.root) as broker:
        r = reader(broker, unavailable_timeout_ms="0")
        init = r.initialOffset()
        broker.stop()
        with pytest.raises(KafkaUnavailable) as err:
            r.latestOffset(init, None)
        assert "127.0.0.1" in str(err.value) and "no broker answered" in str(err.value)
        assert f"after {int(FAST['retries']) + 1} attempts" in str(err.value)  # bounded retries


@pytest.mark.spark
def test_streaming_job_against_the_broker_matches_the_scan(spark, tmp_path):
    sc = live_scenario(tmp_path)
    cfg = load(None, env={})
    cfg["cluster"] = "live"
    cfg["kafka"]["bootstrap_servers"] = "k:9092"
    scanned, _ = scan_paths([str(sc.root)], as_config(cfg), as_of_ms=sc.as_of_ms, spark=spark)
    with FakeKafkaBroker(sc.root) as broker:
        alerts: list = []
        sinks = SinkSet(sinks=[alerts.extend])
        opts = {"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*", "cluster": "live",
                "starting_offsets": "earliest", **FAST}
        q = start_query(spark, "kafka-txn", opts, engine_config(as_config(cfg), coordinator_available=True),
                        AlertConfig("k:9092"), sinks, str(tmp_path / "ck"), trigger={"processingTime": "1 second"})
        try:
            wait_until(lambda: bool(alerts), "the stream's first alerts", timeout_s=90,
                       check=lambda: _no_exception(q))
        finally:
            q.stop()
    assert q.exception() is None
    fields = ("key", "status", "cause", "verified", "producer_id", "producer_epoch", "first_offset", "last_offset",
              "coordinator_epoch", "coordinator_epoch_source", "transactional_id", "coordinator_state", "records",
              "batches", "lso", "pins_lso")
    assert [{k: a[k] for k in fields} for a in alerts] == [{k: a[k] for k in fields} for a in scanned]
    # both against the scenario's own findings: the scan of the log dir (files) and the stream from
    # the broker (live) see the same write-after-marker transaction
    assert projected(scanned) == expected_findings(sc, files=True)
    assert projected(alerts) == expected_findings(sc, files=False)


def _no_exception(q) -> None:
    assert q.exception() is None, q.exception()


def test_alerts_topic_sink_produces_keyed_json(tmp_path):
    (tmp_path / "logs").mkdir()
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        sink = KafkaAlertSink(broker.bootstrap_servers, "txnwatch-alerts", request_timeout_ms=5000)
        alerts = [{"key": "c/t/0/7/3", "status": "hanging", "n": 1}, {"key": "c/t/0/8/9", "status": "late", "n": 2}]
        sink(alerts)
        sink.close()
        consumer = KafkaConsumer("txnwatch-alerts", bootstrap_servers=broker.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000, group_id=None)
        got = [(m.key.decode(), json.loads(m.value)) for m in consumer]
        consumer.close()
        assert got == [(a["key"], a) for a in alerts]
        broker.stop()
        dead = KafkaAlertSink(broker.bootstrap_servers, "txnwatch-alerts", request_timeout_ms=2000,
                              create_topic=False)
        with pytest.raises(AlertSinkError, match="could not produce 1 alert"):
            dead(alerts[:1])


def test_corrupt_batch_becomes_a_gap_and_reading_continues(tmp_path):
    from streaming.simulate.encode import encode_batch

    root = tmp_path / "logs"
    (root / "t-0").mkdir(parents=True)
    now = int(time.time() * 1000)
    good = [encode_batch(i, 1, producer_id=9, producer_epoch=0, base_sequence=i, is_transactional=True,
                         base_timestamp=now, max_timestamp=now) for i in range(3)]
    bad = bytearray(good[1])
    bad[40] ^= 0xFF  # inside the CRC-covered header: the broker's bytes were damaged
    (root / "t-0" / f"{0:020d}.log").write_bytes(good[0] + bytes(bad) + good[2])
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, topics='["t"]', topic_pattern="", starting_offsets="earliest")
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        ev = events_of(r, init, end)
    mine = ev[ev["topic"] == "t"]
    gaps = mine[mine["kind"] == "gap"]
    assert len(gaps) == 1 and "CRC-32C mismatch" in gaps.iloc[0]["reason"] and gaps.iloc[0]["first_offset"] == 1
    data = mine[mine["kind"] == "data"]
    # the damaged batch is left out; the batches around it are read (one span, offsets 0..2)
    assert list(zip(data["first_offset"], data["last_offset"], data["batch_count"], strict=True)) == [(0, 2, 2)]
