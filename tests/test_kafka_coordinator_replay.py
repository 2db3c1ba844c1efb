"""Coordinator replay (issue 20 item 8), against the fake over a real socket: a gap or a failed
read in a ``__transaction_state`` partition leaves the coordinator view incomplete (no progress
row for the partition, so the enricher never counts it read up to now and findings resting on it
stay unverified, detection.md §0), never "complete and empty".

The executor rebuilds a coordinator partition's id → producer map from the log start when its
process has no memo of it (a new Python worker, an executor restart). The fake answers that
rebuild's fetches empty, as a ``DelayedRemoteFetch`` whose ``remote.fetch.max.wait.ms`` expired
(``DelayedRemoteFetch.onComplete``: the local read result, no records, error NONE).
"""

from __future__ import annotations

import pandas as pd
import pytest

from streaming.sources import kafka_reader
from streaming.sources.kafka import KafkaStreamReader, close_wires, read_partition
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.test_kafka_source import live_scenario

TXN = "__transaction_state"
OPTS = {"request_timeout_ms": "3000", "retries": "2", "retry_backoff_ms": "10", "cluster": "live",
        "empty_fetch_retries": "1"}

_watchdog = kafka_watchdog(90)


@pytest.fixture(autouse=True)
def _fresh_clients():
    yield
    close_wires()
    kafka_reader._TXN_MEMO.clear()


def events(r: KafkaStreamReader, start: dict, end: dict) -> pd.DataFrame:
    return pd.concat([read_partition(g, r.opts) for g in r.partitions(start, end)], ignore_index=True)


def coordinator_partition_with_records(broker: FakeKafkaBroker) -> int:
    return next(p for p in broker.topics()[TXN] if broker.partition_state(TXN, p).high_watermark > 0)


def progress_of(ev: pd.DataFrame, p: int) -> pd.DataFrame:
    return ev[(ev["kind"] == "progress") & (ev["topic"] == TXN) & (ev["partition"] == p)]


def test_a_failed_rebuild_of_the_coordinator_replay_is_not_a_complete_empty_view(tmp_path):
    sc = live_scenario(tmp_path)
    with FakeKafkaBroker(sc.root) as broker:
        p = coordinator_partition_with_records(broker)
        r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*", **OPTS})
        init = r.initialOffset()
        end1 = r.latestOffset(init, None)
        ev1 = events(r, init, end1)
        assert len(progress_of(ev1, p)) == 1 and (ev1["kind"] == "txn_state").any()
        # a new executor process: no memo, so the replay up to offset end1 is rebuilt from the log
        # start; every answer of that rebuild comes back empty (tiered-storage read timing out)
        kafka_reader._TXN_MEMO.clear()
        broker.remote_fetch_timeout(TXN, p)
        end2 = r.latestOffset(end1, None)
        ev2 = events(r, end1, end2)
        # the partition is not read up to now: no progress row (before issue 20: a progress row
        # over an empty replay, i.e. a complete and empty coordinator view), one row saying why
        assert progress_of(ev2, p).empty
        gaps = ev2[(ev2["kind"] == "gap") & (ev2["topic"] == TXN) & (ev2["partition"] == p)]
        assert len(gaps) == 1 and "coordinator view" in gaps.iloc[0]["reason"]
        assert (kafka_reader._TXN_MEMO.get((broker.bootstrap_servers, p)) is None)  # nothing memoised
        # the other coordinator partitions are read as usual
        others = [q for q in broker.topics()[TXN] if q != p]
        assert all(len(progress_of(ev2, q)) == 1 for q in others)
        # once the broker answers again the partition is read up to now again
        broker.clear_faults()
        end3 = r.latestOffset(end2, None)
        assert len(progress_of(events(r, end2, end3), p)) == 1


def test_a_gap_inside_a_coordinator_read_leaves_the_partition_incomplete(tmp_path):
    """The coordinator partition's own range read stops short (its fetches answer empty below
    the high watermark): the rows read are kept, the partition gets no progress row."""
    sc = live_scenario(tmp_path)
    with FakeKafkaBroker(sc.root) as broker:
        p = coordinator_partition_with_records(broker)
        r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*", **OPTS})
        init = r.initialOffset()
        end1 = r.latestOffset(init, None)
        broker.remote_fetch_timeout(TXN, p)
        ev = events(r, init, end1)
        assert progress_of(ev, p).empty
        gaps = ev[(ev["kind"] == "gap") & (ev["topic"] == TXN) & (ev["partition"] == p)]
        assert len(gaps) == 1 and gaps.iloc[0]["first_offset"] == 0
        assert kafka_reader._TXN_MEMO.get((broker.bootstrap_servers, p)) is None
