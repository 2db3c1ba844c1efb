"""Issue 12 item 2: one Spark input partition per leader broker (at most ``groups_per_broker``
each), multi-partition Fetch requests, and no Fetch at all for partitions with nothing new."""

from __future__ import annotations

import faulthandler
import time

import pandas as pd
import pytest

from streaming.simulate.scenarios import write_scenario
from streaming.sources.kafka import KafkaStreamReader, close_wires, read_partition
from tests.kafka_fake_broker import FakeKafkaBroker

FAST = {"request_timeout_ms": "2000", "retries": "2", "retry_backoff_ms": "10", "cluster": "live"}
COLS = ["kind", "topic", "partition", "producer_id", "producer_epoch", "first_offset", "last_offset", "marker",
        "high_watermark", "lso", "log_start_offset", "transactional_id", "txn_state"]


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
    close_wires()


def reader(broker: FakeKafkaBroker, **opts: str) -> KafkaStreamReader:
    return KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*",
                              "starting_offsets": "earliest", **FAST, **opts})


def read_all(r: KafkaStreamReader, start: dict, end: dict) -> pd.DataFrame:
    ev = pd.concat([read_partition(g, r.opts) for g in r.partitions(start, end)], ignore_index=True)
    return ev[COLS].sort_values(["kind", "topic", "partition", "first_offset", "producer_id"]).reset_index(drop=True)


def test_one_input_partition_per_broker_and_multi_partition_fetches(tmp_path):
    base = int(time.time() * 1000) - 3_600_000
    sc = write_scenario("random-mix", tmp_path / "logs", seed=3, base_time_ms=base)
    with FakeKafkaBroker(sc.root, num_nodes=3) as broker:
        tps = {(t, p) for t, ps in broker.topics().items() for p in ps}
        r = reader(broker)
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        groups = r.partitions(init, end)
        assert len(groups) == len({g.broker for g in groups}) <= 3  # old code: one per partition
        assert {(p.topic, p.partition) for g in groups for p in g.parts} == tps
        for g in groups:
            assert {broker.leader(p.topic, p.partition) for p in g.parts} == {g.broker}
        before = len(broker.requests_for("fetch"))
        grouped = read_all(r, init, end)
        fetches = broker.requests_for("fetch")[before:]
        assert max(sum(len(t.partitions) for t in f.request.topics) for f in fetches) > 1
        split = reader(broker, groups_per_broker="4")
        assert len(split.partitions(init, end)) > len(groups)
        assert read_all(split, init, end).equals(grouped)  # same events however they are grouped
        # nothing new: progress rows for every partition, from ListOffsets, and no Fetch at all
        nxt = r.latestOffset(end, None)
        before = len(broker.requests_for("fetch"))
        idle = read_all(r, end, nxt)
        assert len(broker.requests_for("fetch")) == before
        prog = idle[idle["kind"] == "progress"]
        assert set(zip(prog["topic"], prog["partition"], strict=True)) == tps
        last = grouped[grouped["kind"] == "progress"].set_index(["topic", "partition"])
        now = prog.set_index(["topic", "partition"])
        for col in ("high_watermark", "lso", "log_start_offset"):
            assert now[col].sort_index().equals(last[col].sort_index())
