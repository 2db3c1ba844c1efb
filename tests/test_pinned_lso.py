"""An LSO pinned at the log start by a transaction whose first batches retention deleted (issue
20 item 9), against the fake over a real socket.

The partition: producer 77 opens a transaction at offsets 0..1 and never finishes it; producer 88
commits one at 2..3 (marker at 4); offsets 5..9 are plain records. Retention then moves the log
start to 2. Kafka keeps 77's transaction open (``ProducerStateManager`` drops only unreplicated
transactions on ``onLogStartOffsetIncremented``; a producer with an open transaction never
expires) and pins the LSO at the log start (``UnifiedLog.maybeIncrementFirstUnstableOffset``:
``max(first unstable offset, logStartOffset)`` = 2). A read from the LSO sees 88's transaction
and nothing of 77: before issue 20, no finding at all.
"""

from __future__ import annotations

import functools
import time

import pandas as pd
import pytest

from streaming.alerts import REQUIRED_PERMISSION, AlertConfig, abort_commands
from streaming.broker_confirm import KafkaBrokerConfirm
from streaming.config import as_config
from streaming.pinned_lso import PinnedLso
from streaming.quality.alert_contract import validate_alerts
from streaming.simulate.encode import encode_batch
from streaming.sources.kafka import KafkaStreamReader, close_wires, read_partition
from streaming.vocab import (
    ALERT_FIELDS,
    HANGING,
    LATE,
    LSO_PINNED_AT_LOG_START,
    OPEN_BEFORE_LOG_START,
    RESOLVED,
)
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch

THRESHOLD = 60_000
_watchdog = kafka_watchdog(90)


@pytest.fixture(autouse=True)
def _close():
    yield
    close_wires()


def stage(broker: FakeKafkaBroker) -> int:
    now = int(time.time() * 1000) - 3_600_000
    broker.create_topic("orders")
    broker.append_batches("orders", 0, encode_batch(0, 2, producer_id=77, producer_epoch=3, base_sequence=0,
                                                    is_transactional=True, base_timestamp=now, max_timestamp=now))
    broker.append_batches("orders", 0, encode_batch(2, 2, producer_id=88, producer_epoch=0, base_sequence=0,
                                                    is_transactional=True, base_timestamp=now, max_timestamp=now))
    broker.append_batches("orders", 0, build_control_batch(4, 88, 0, commit=True, coordinator_epoch=5,
                                                           timestamp_ms=now))
    broker.append_batches("orders", 0, encode_batch(5, 5, base_timestamp=now, max_timestamp=now))
    broker.advance_log_start("orders", 0, 2)
    return now


def progress_rows(broker: FakeKafkaBroker) -> list[dict]:
    r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]',
                           "cluster": "live", "request_timeout_ms": "3000", "retries": "2"})
    init = r.initialOffset()
    end = r.latestOffset(init, None)
    ev = pd.concat([read_partition(g, r.opts) for g in r.partitions(init, end)], ignore_index=True)
    ev = ev[ev["topic"] == "orders"]
    # nothing of 77 reaches the state (88's transaction closes within the read)
    assert 77 not in set(ev.loc[ev["kind"].isin(["data", "marker"]), "producer_id"].astype(int))
    return ev[ev["kind"] == "progress"].to_dict("records")


def pinned_for(broker: FakeKafkaBroker) -> PinnedLso:
    return PinnedLso(None, lambda topic: THRESHOLD,
                     functools.partial(abort_commands, cfg=AlertConfig(broker.bootstrap_servers)), REQUIRED_PERMISSION)


def test_fake_pins_the_lso_at_the_log_start(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        stage(broker)
        st = broker.partition_state("orders", 0)
        assert (st.log_start_offset, st.last_stable_offset, st.high_watermark) == (2, 2, 10)
        (prog,) = progress_rows(broker)
        assert (prog["log_start_offset"], prog["lso"], prog["high_watermark"]) == (2, 2, 10)


def test_describe_producers_names_the_transaction_the_lso_read_cannot_see(tmp_path):
    """Kafka 2.8+: DescribeProducers (``UnifiedLog.activeProducers``) lists producer 77 with
    CurrentTxnStartOffset 0, epoch 3 and coordinator epoch -1 (no marker of 77 on the partition)."""
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(2, 8)) as broker:
        stage(broker)
        progress = progress_rows(broker)
        pinned = pinned_for(broker)
        t0 = 1_000_000
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=3000) as confirm:
            late = pinned.observe(progress, [], t0, set(), confirm)
            again = pinned.observe(progress, [], t0 + 1, set(), confirm)
            hanging = pinned.observe(progress, [], t0 + THRESHOLD, set(), confirm)
        asked = len(broker.requests_for("describe_producers"))
        # the marker arrives (an operator aborted it): the LSO goes to the high watermark
        broker.append_batches("orders", 0, build_control_batch(10, 77, 3, commit=False, coordinator_epoch=5,
                                                               timestamp_ms=t0))
        resolved = pinned.observe(progress_rows(broker), [], t0 + THRESHOLD + 1, set(), None)
    assert asked == 1  # asked once, when first seen pinned
    (a,) = late
    assert tuple(a) == ALERT_FIELDS and validate_alerts(late + hanging + resolved).failures == []
    assert a["key"] == "live/orders/0/77/0" and a["status"] == LATE and a["cause"] == LSO_PINNED_AT_LOG_START
    assert (a["producer_id"], a["producer_epoch"], a["first_offset"]) == (77, 3, 0)
    assert (a["lso"], a["log_start_offset"], a["high_watermark"]) == (2, 2, 10)
    assert a["data_deleted"] and a["pins_lso"] and a["verified"] is False
    assert a["abort_command_new"] is None and a["confirmed_by"] == ["DescribeProducers"]
    assert again == []  # each status once per key
    (h,) = hanging
    assert h["status"] == HANGING and h["cause"] == OPEN_BEFORE_LOG_START and h["key"] == a["key"]
    assert h["abort_command_new"].endswith("abort --topic 'orders' --partition 0 --start-offset 0")
    assert h["abort_command_legacy"] is None  # coordinator epoch -1: no marker of 77 yet
    assert h["coordinator_epoch_source"] == "unknown"
    (r,) = resolved
    assert r["status"] == RESOLVED and r["resolution"] == "lso-advanced" and r["key"] == a["key"]


def test_without_describe_producers_the_pinned_lso_is_a_finding_with_an_unknown_producer(tmp_path):
    """Kafka 2.7 has no DescribeProducers: the finding names the LSO, the log start and what to
    dump (the producer snapshot holds ``currentTxnFirstOffset``)."""
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(2, 7)) as broker:
        stage(broker)
        progress = progress_rows(broker)
        with KafkaBrokerConfirm(broker.bootstrap_servers, request_timeout_ms=3000) as confirm:
            (a,) = pinned_for(broker).observe(progress, [], 1_000, set(), confirm)
        assert broker.requests_for("describe_producers") == []
    assert validate_alerts([a]).failures == []
    assert a["key"] == "live/orders/0/unknown/2" and a["producer_id"] is None and a["first_offset"] is None
    assert (a["status"], a["cause"], a["lso"], a["log_start_offset"]) == (LATE, LSO_PINNED_AT_LOG_START, 2, 2)
    assert "describe-producers" in a["verify_hint"] and ".snapshot" in a["verify_hint"]
    assert "currentTxnFirstOffset" in a["verify_hint"]


def test_a_transaction_the_state_opened_at_the_lso_is_not_reported_twice(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(2, 7)) as broker:
        stage(broker)
        progress = progress_rows(broker)
    seen = [{"topic": "orders", "partition": 0, "first_offset": 2, "first_ts": 0}]
    assert pinned_for(broker).observe(progress, seen, 1_000, set(), None) == []


def test_an_unreadable_partition_publishes_nothing_new(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(2, 7)) as broker:
        stage(broker)
        progress = progress_rows(broker)
    pinned = pinned_for(broker)
    assert len(pinned.observe(progress, [], 1_000, set(), None)) == 1
    assert pinned.observe([], [], 1_000 + THRESHOLD, {"orders-0"}, None) == []  # held while unreadable
    assert [a["status"] for a in pinned.observe([], [], 1_000 + THRESHOLD, set(), None)] == [HANGING]


def test_pinned_state_survives_a_restart(tmp_path):
    path = str(tmp_path / "ck" / "txnwatch-pinned-lso.json")
    with FakeKafkaBroker(tmp_path / "logs", broker_version=(2, 7)) as broker:
        stage(broker)
        progress = progress_rows(broker)
    first = PinnedLso(path, lambda t: THRESHOLD, functools.partial(abort_commands, cfg=AlertConfig("b:9092")))
    assert len(first.observe(progress, [], 1_000, set(), None)) == 1
    first.save()
    second = PinnedLso(path, lambda t: THRESHOLD, functools.partial(abort_commands, cfg=AlertConfig("b:9092")))
    assert second.observe(progress, [], 2_000, set(), None) == []  # late was published before the restart
    assert [a["status"] for a in second.observe(progress, [], 1_000 + THRESHOLD, set(), None)] == [HANGING]


def test_fake_answers_describe_producers_below_the_log_start(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        stage(broker)
        # ProducerStateManager keeps 77's open transaction although its batches are below the log start
        assert broker.producer_states("orders", 0)[77]["current_txn_start_offset"] == 0


def test_console_and_status_page_take_a_finding_without_a_producer(tmp_path):
    """The unknown-producer finding has no command: the console says so instead of printing None,
    and the status page's store ingests it."""
    from streaming.sinks.console import format_table
    from streaming.ui.store import FindingStore

    with FakeKafkaBroker(tmp_path / "logs", broker_version=(2, 7)) as broker:
        stage(broker)
        progress = progress_rows(broker)
    pinned = pinned_for(broker)
    pinned.observe(progress, [], 1_000, set(), None)
    (h,) = pinned.observe(progress, [], 1_000 + THRESHOLD, set(), None)
    text = format_table([h])
    assert "no abort command until the producer is identified" in text and "None" not in text
    store = FindingStore()
    assert store.ingest(h)
    assert store.finding("live/orders/0/unknown/2")["finding"]["cause"] == OPEN_BEFORE_LOG_START
    assert store.snapshot()  # the page's view builds


@pytest.mark.spark
@pytest.mark.parametrize("release", [(2, 7), (2, 8)], ids=["2.7", "2.8"])
def test_run_once_publishes_the_pinned_lso_finding(spark, tmp_path, release):
    """The job end to end (batch writer → sinks): ``run --once`` on the pinned partition publishes
    the late finding; before issue 20 it published nothing for it."""
    from streaming.config import load
    from streaming.runner import run_job
    from streaming.sinks.jsonl import read_jsonl

    with FakeKafkaBroker(tmp_path / "logs", broker_version=release) as broker:
        stage(broker)
        cfg = load(None, env={})
        cfg["cluster"] = "live"
        cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, topics=["orders"], request_timeout_ms=3000,
                            once_ride_through_ms=0)
        cfg["streaming"].update(checkpoint=str(tmp_path / "ck"))
        cfg["sinks"].update(enabled=["jsonl"], jsonl_path=str(tmp_path / "alerts.jsonl"))
        rc = run_job(as_config(cfg), source="kafka", path=None, once=True)
    out = read_jsonl(str(tmp_path / "alerts.jsonl"))
    assert rc == 0 and validate_alerts(out).failures == []
    want = "live/orders/0/unknown/2" if release < (2, 8) else "live/orders/0/77/0"
    assert [(a["key"], a["status"], a["cause"]) for a in out] == [(want, LATE, LSO_PINNED_AT_LOG_START)]
