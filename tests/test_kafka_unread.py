"""Offsets advance only over data read or proven gone (issue 20 item 1), against the fake over a
real socket.

A range planned for a micro-batch whose read stops short is reported as an ``unavailable:`` gap
row starting where reading stopped, with no progress row; the driver's ``foreachBatch`` records
that row in the unread ledger (``record_unread``, called here as the batch writer calls it) and
the next plan (also by a restarted reader) reads the partition again from there. Each fault is
modelled by tests/kafka_fake_broker.py after the Kafka source cited there.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from streaming.sources.kafka import KafkaStreamReader, read_partition
from streaming.sources.kafka_unread import LEDGER_OPTION, record_unread
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker, stage_segment

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
ORDERS = SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000000.log"
ORDERS_HW = 13  # the staged segment holds offsets 0..12
SOURCE = {"request_timeout_ms": "3000", "retries": "2", "retry_backoff_ms": "10", "cluster": "live",
          "empty_fetch_retries": "1"}

_watchdog = kafka_watchdog(90)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "kafka-logs"
    stage_segment(r, "orders", 0, ORDERS)
    return r


def reader(broker: FakeKafkaBroker, ledger: Path, **opts: str) -> KafkaStreamReader:
    return KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]',
                              "starting_offsets": "earliest", LEDGER_OPTION: str(ledger), **SOURCE, **opts})


def read(r: KafkaStreamReader, start: dict, end: dict) -> pd.DataFrame:
    parts = [p for g in r.partitions(start, end) for p in g.parts if p.topic == "orders"]
    ev = pd.concat([read_partition(p, r.opts) for p in parts], ignore_index=True)
    return ev[ev["topic"] == "orders"]


def offsets_read(ev: pd.DataFrame) -> set[int]:
    data = ev[ev["kind"].isin(["data", "marker"])]
    return {o for f, last in zip(data["first_offset"], data["last_offset"], strict=True)
            for o in range(int(f), int(last) + 1)}


def rows(ev: pd.DataFrame) -> list[tuple]:
    """The data and marker rows of a read (what the state machine gets)."""
    data = ev[ev["kind"].isin(["data", "marker"])]
    return sorted(zip(data["kind"], data["producer_id"].astype(int), data["first_offset"].astype(int),
                      data["last_offset"].astype(int), data["marker"].fillna(""), strict=True))


def fetch_offsets(broker: FakeKafkaBroker, since: int) -> list[int]:
    """Offsets of orders-0 the fake was asked to Fetch, from request ``since`` of its log on."""
    return [p.fetch_offset for rec in broker.requests_for("fetch")[since:] for t in rec.request.topics
            if t.topic == "orders" for p in t.partitions if p.partition == 0]


def batch_writer_sees(ledger: Path, batch_id: int, ev: pd.DataFrame) -> None:
    """What ``microbatch.BatchWriter`` does with the micro-batch's gap rows."""
    record_unread(str(ledger), batch_id, ev[ev["kind"] == "gap"].to_dict("records"))


def assert_not_read_yet(ev: pd.DataFrame, first: int) -> None:
    gaps = ev[ev["kind"] == "gap"]
    assert len(gaps) == 1, gaps["reason"].tolist()
    g = gaps.iloc[0]
    assert g["reason"].startswith("unavailable: ") and f"read again from offset {first}" in g["reason"]
    assert (g["first_offset"], g["last_offset"]) == (first, ORDERS_HW - 1)
    assert (ev["kind"] == "progress").sum() == 0  # not read up to now: no verdict, no LSO resolution


def test_leader_lost_after_planning_is_read_again_next_plan_even_after_a_restart(root, tmp_path):
    """The plan saw a leader; before the executor fetched, the partition lost it (every replica
    down: ``KRaftMetadataCache.getPartitionMetadata`` leader -1, the old leader answering
    NOT_LEADER_OR_FOLLOWER from ``ReplicaManager.getPartitionOrError``). Before issue 20 the range
    became a gap and the next plan started at 13: offsets 0..12 were never read."""
    ledger = tmp_path / "ck" / "txnwatch-unread.json"
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, ledger)
        init = r.initialOffset()
        end1 = r.latestOffset(init, None)
        assert end1["parts"]["orders\t0"][0] == ORDERS_HW
        clean = rows(read(r, init, end1))
        assert offsets_read(read(r, init, end1)) >= {0, 12}  # the range holds data at both ends
        broker.offline("orders", 0)
        ev1 = read(r, init, end1)
        assert_not_read_yet(ev1, 0)
        assert offsets_read(ev1) == set()
        batch_writer_sees(ledger, 0, ev1)
        broker.online("orders", 0)
        # the driver restarts: a new reader, the committed end offsets of batch 0 as its start
        r2 = reader(broker, ledger)
        end2 = r2.latestOffset(end1, None)
        n = len(broker.requests_for("fetch"))
        ev2 = read(r2, end1, end2)
        assert fetch_offsets(broker, n)[0] == 0  # read again from where the failed read stopped
        assert rows(ev2) == clean
        assert (ev2["kind"] == "gap").sum() == 0 and (ev2["kind"] == "progress").sum() == 1
        # the ledger entry is taken once: the plan after that reads nothing again
        batch_writer_sees(ledger, 1, ev2)
        end3 = r2.latestOffset(end2, None)
        n = len(broker.requests_for("fetch"))
        assert rows(read(r2, end2, end3)) == [] and fetch_offsets(broker, n) == []


def test_tiered_storage_empty_answers_are_retried_never_a_gap(root, tmp_path):
    """``DelayedRemoteFetch`` expiring (``remote.fetch.max.wait.ms``): empty records, error NONE,
    the high watermark above the fetch offset. The data exists: the range is read again next
    plan, never turned into a gap."""
    ledger = tmp_path / "ck" / "txnwatch-unread.json"
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, ledger)
        init = r.initialOffset()
        end1 = r.latestOffset(init, None)
        clean = rows(read(r, init, end1))
        broker.remote_fetch_timeout("orders", 0)
        ev1 = read(r, init, end1)
        assert_not_read_yet(ev1, 0)
        batch_writer_sees(ledger, 0, ev1)
        broker.clear_faults()
        end2 = r.latestOffset(end1, None)
        assert rows(read(r, end1, end2)) == clean


def test_empty_answers_within_the_ride_through_read_everything_in_the_same_plan(root, tmp_path):
    """``run --once`` (``ride_through_ms``): a fault that ends within the ride-through leaves
    exactly what a clean read gives, in one plan."""
    ledger = tmp_path / "ck" / "txnwatch-unread.json"
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, ledger, ride_through_ms="30000")
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        clean = read(r, init, end)
        broker.remote_fetch_timeout("orders", 0, requests=6)
        ev = read(r, init, end)
        answered_empty = broker._remote_empty[("orders", 0)]
    assert answered_empty == 0  # every injected empty answer was consumed
    assert (ev["kind"] == "gap").sum() == 0
    assert rows(ev) == rows(clean) and offsets_read(ev) >= {0, 12}
    assert (ev["kind"] == "progress").sum() == 1


def test_offset_out_of_range_below_the_log_start_is_the_only_gap(root, tmp_path):
    """Proven gone: OFFSET_OUT_OF_RANGE with a log start above the fetch offset
    (``UnifiedLog.read`` / ``LocalLog.read`` below the log start) is one gap naming both offsets,
    then reading continues at the log start."""
    ledger = tmp_path / "ck" / "txnwatch-unread.json"
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, ledger)
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        broker.advance_log_start("orders", 0, 5)
        ev = read(r, init, end)
    gaps = ev[ev["kind"] == "gap"]
    assert len(gaps) == 1 and (gaps.iloc[0]["first_offset"], gaps.iloc[0]["last_offset"]) == (0, 4)
    assert not gaps.iloc[0]["reason"].startswith("unavailable: ")
    assert min(offsets_read(ev)) >= 5 and max(offsets_read(ev)) == ORDERS_HW - 1
    assert (ev["kind"] == "progress").sum() == 1


def test_probe_window_whose_read_failed_is_probed_and_read_again(root, tmp_path):
    """Probe mode: the driver's probe at the LSO found the transaction there and planned the
    partition's read (followed from the LSO: the transaction is old); the leader was lost before
    the executor read it. The next plan follows from where that read stopped, not from its end."""
    ledger = tmp_path / "ck" / "txnwatch-unread.json"
    with FakeKafkaBroker(root) as broker:
        r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["orders"]',
                               "read_mode": "probe", LEDGER_OPTION: str(ledger), **SOURCE})
        init = r.initialOffset()
        end1 = r.latestOffset(init, None)
        window = end1["reads"]["orders\t0"]
        # the LSO is 9: producer 4002 wrote at 9 after its COMMIT marker at 8 (open; the staged
        # segment's batches are listed in tests/fixtures), and 4000's transaction at 11..12 is open
        # too. 4002's first write (1700000000060) is older than probe_follow_after_ms, so the
        # partition is followed: read from the LSO to the high watermark, [9, 13)
        assert window[:2] == [9, 13]
        broker.offline("orders", 0)
        ev1 = read(r, init, end1)
        gaps = ev1[ev1["kind"] == "gap"]
        assert len(gaps) == 1 and gaps.iloc[0]["first_offset"] == 9 and rows(ev1) == []
        batch_writer_sees(ledger, 0, ev1)
        broker.online("orders", 0)
        end2 = r.latestOffset(end1, None)
        assert end2["reads"]["orders\t0"][:2] == window[:2]
        ev2 = read(r, end1, end2)
    # 9: 4002's write after its marker; 10: not transactional; 11..12: 4000's open transaction
    assert [(k, p, f, last) for k, p, f, last, _ in rows(ev2)] == [("data", 4000, 11, 12), ("data", 4002, 9, 9)]


def test_probe_window_of_a_young_transaction_whose_read_failed_is_probed_again(tmp_path):
    """Probe mode, a transaction younger than ``probe_follow_after_ms``: only its window
    ``[LSO, its first batch's end)`` is read. The read failed, the LSO did not move: before issue
    20 the driver kept "same transaction as last time, nothing to fetch" and the state never saw
    it. Now the window is probed and read again."""
    from streaming.simulate.encode import encode_batch

    ledger = tmp_path / "ck" / "txnwatch-unread.json"
    now = int(time.time() * 1000)
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        broker.create_topic("fresh")
        broker.append_batches("fresh", 0, encode_batch(0, 2, producer_id=91, producer_epoch=0, base_sequence=0,
                                                       is_transactional=True, base_timestamp=now, max_timestamp=now))
        r = KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topics": '["fresh"]',
                               "read_mode": "probe", LEDGER_OPTION: str(ledger), **SOURCE})
        init = r.initialOffset()
        end1 = r.latestOffset(init, None)
        assert end1["reads"]["fresh\t0"][:3] == [0, 2, True]  # the window of 91's first batch

        def read_fresh(start: dict, end: dict) -> pd.DataFrame:
            parts = [p for g in r.partitions(start, end) for p in g.parts if p.topic == "fresh"]
            return pd.concat([read_partition(p, r.opts) for p in parts], ignore_index=True)

        broker.offline("fresh", 0)
        ev1 = read_fresh(init, end1)
        assert rows(ev1) == [] and (ev1["kind"] == "gap").sum() == 1
        batch_writer_sees(ledger, 0, ev1)
        broker.online("fresh", 0)
        end2 = r.latestOffset(end1, None)
        ev2 = read_fresh(end1, end2)
    assert [(k, p, f, last) for k, p, f, last, _ in rows(ev2)] == [("data", 91, 0, 1)]


def test_leader_lost_after_planning_and_back_within_the_ride_through_reads_everything(root, tmp_path):
    """``run --once``: the leader comes back while the read rides through: the same rows as a
    clean read, no gap, a progress row."""
    import threading

    ledger = tmp_path / "ck" / "txnwatch-unread.json"
    with FakeKafkaBroker(root) as broker:
        r = reader(broker, ledger, ride_through_ms="60000")
        init = r.initialOffset()
        end = r.latestOffset(init, None)
        clean = rows(read(r, init, end))
        broker.offline("orders", 0)
        before = len(broker.requests_for("metadata"))
        got: dict = {}
        t = threading.Thread(target=lambda: got.setdefault("ev", read(r, init, end)), daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        # the read keeps asking who leads the partition (no leader: no Fetch to send)
        while len(broker.requests_for("metadata")) < before + 6:
            assert time.monotonic() < deadline and t.is_alive()
            time.sleep(0.02)
        broker.online("orders", 0)
        t.join(60)
    ev = got["ev"]
    assert rows(ev) == clean and (ev["kind"] == "gap").sum() == 0 and (ev["kind"] == "progress").sum() == 1
