"""The per-producer state machine without Spark: pairing, lifecycle, timers, eviction, routing."""

from __future__ import annotations

import pandas as pd

from streaming.normalize import route_coordinator_records, txn_state_events
from streaming.state_machine import EngineConfig, ProducerState, process_key
from streaming.verdict import Thresholds

T0 = 1_700_000_000_000
TH = 1_200_000
CFG = EngineConfig(cluster="c", coordinator_available=True)
NOCOORD = EngineConfig(cluster="c", coordinator_available=False)


def data(first, last=None, ts=T0, epoch=0, pid=7, topic="t", partition=0, **kw):
    return dict(kind="data", topic=topic, partition=partition, producer_id=pid, producer_epoch=epoch,
                first_offset=first, last_offset=last if last is not None else first, first_ts=ts, last_ts=ts,
                batch_count=1, record_count=3, bytes=100, event_time_ms=ts, source="segments", **kw)


def marker(off, kind="COMMIT", ts=T0, epoch=0, ce=4, pid=7, topic="t", partition=0):
    return dict(kind="marker", topic=topic, partition=partition, producer_id=pid, producer_epoch=epoch,
                first_offset=off, last_offset=off, first_ts=ts, last_ts=ts, marker=kind, coordinator_epoch=ce,
                event_time_ms=ts)


def coord(state, partitions, pid=7, ts=T0, tid="app", ple=3, start=T0, timeout=60_000, tombstone=False):
    return dict(kind="txn_state", topic="__transaction_state", partition=1, producer_id=None if tombstone else pid,
                producer_epoch=0, first_offset=0, transactional_id=tid, tombstone=tombstone, txn_state=state,
                txn_partitions=partitions, txn_timeout_ms=timeout, txn_start_ts=start, coordinator_epoch=ple,
                event_time_ms=ts)


def step(events, doc, now, cfg=CFG, pid=7):
    """One state-function call; returns (alert rows, state, timer)."""
    out, doc, timer = process_key(pid, events, doc, now_ms=now, cfg=cfg)
    return [o for o in out if o["out_kind"] == "alert"], doc, timer


def test_open_set_reported_only_when_it_changes():
    out, doc, _ = process_key(7, [data(10)], None, now_ms=T0, cfg=CFG)
    assert [(o["out_kind"], o["topic"], o["first_offset"]) for o in out] == [("open_set", "t", 10)]
    out, doc, _ = process_key(7, [data(11)], doc, now_ms=T0, cfg=CFG)
    assert out == []  # joined the same transaction: the set did not change
    out, doc, _ = process_key(7, [marker(12)], doc, now_ms=T0, cfg=CFG)
    assert [(o["out_kind"], o["topic"]) for o in out] == [("open_set", None)]


def test_commit_closes_and_nothing_is_reported():
    out, doc, timer = step([data(0, 2), marker(3)], None, T0 + 10 * TH)
    assert out == []
    assert timer == T0 + 7 * 24 * 3600 * 1000  # only the eviction timer remains


def test_tv2_marker_epoch_plus_one_closes_and_next_txn_reuses_epoch():
    evs = [data(0, epoch=5), marker(1, epoch=6), data(2, epoch=6), marker(3, epoch=7), data(4, epoch=7)]
    out, doc, _ = step(evs, None, T0 + 5)
    st = ProducerState.from_json(7, doc)
    p = st.parts["t\t0"]
    assert p["open"]["first_offset"] == 4 and p["max_epoch"] == 7 and p["last_marker"]["offset"] == 3


def test_data_joins_open_txn_whatever_its_epoch():
    out, doc, _ = step([data(0, epoch=1), data(5, epoch=3)], None, T0)
    p = ProducerState.from_json(7, doc).parts["t\t0"]
    assert p["open"]["first_offset"] == 0 and p["open"]["last_offset"] == 5 and p["open"]["batches"] == 2


def test_lifecycle_late_to_hanging_to_resolved_each_once():
    d0 = [data(10, ts=T0), coord("Ongoing", ["t-0"], start=T0 + TH, timeout=60_000, ts=T0)]
    out, doc, timer = step(d0, None, T0 + 5)
    assert out == [] and timer == T0 + TH + 1
    out, doc, _ = step([], doc, T0 + TH + 1)
    assert [(o["status"], o["cause"]) for o in out] == [("late", "long-transaction")]
    out, doc, _ = step([], doc, T0 + TH + 100)
    assert out == []  # re-evaluation without change emits nothing
    out, doc, _ = step([coord("CompleteCommit", [], ts=T0 + TH + 200)], doc, T0 + TH + 200)
    assert [(o["status"], o["cause"]) for o in out] == [("hanging", "coordinator-finished-without-partition")]
    # not read from the log start, no marker, no snapshot: the coordinator's partition epoch
    assert (out[0]["coordinator_epoch"], out[0]["coordinator_epoch_source"]) == (3, "coordinator-partition")
    out, doc, _ = step([marker(20, kind="ABORT", ts=T0 + TH + 300)], doc, T0 + TH + 300)
    assert [(o["status"], o["resolution"]) for o in out] == [("resolved", "aborted")]
    out, doc, _ = step([], doc, T0 + 3 * TH)
    assert out == []


def test_timer_fires_for_silent_hanging_transaction():
    out, doc, timer = step([data(10, ts=T0)], None, T0, cfg=NOCOORD)
    assert out == [] and timer == T0 + TH + 1
    out, doc, timer = step([], doc, timer, cfg=NOCOORD)
    assert [(o["status"], o["cause"], o["verified"]) for o in out] == [("hanging", "exceeds-max-timeout", False)]
    assert timer is None


def test_write_after_marker_detected():
    evs = [data(0, epoch=2), marker(1, epoch=2, ce=5), data(2, epoch=2), coord("CompleteCommit", [])]
    out, _, _ = step(evs, None, T0 + TH + 1)
    assert [(o["status"], o["cause"], o["first_offset"]) for o in out] == [("hanging", "write-after-marker", 2)]
    assert (out[0]["coordinator_epoch"], out[0]["coordinator_epoch_source"], out[0]["producer_epoch"]) == (
        5, "last-marker", 2)


def test_coordinator_unaware_after_tombstone_and_after_supersede():
    out, _, _ = step([data(0), coord(None, None, tombstone=True)], None, T0 + TH + 1)
    assert [(o["status"], o["cause"]) for o in out] == [("hanging", "coordinator-unaware")]
    out, _, _ = step([data(0), coord("Ongoing", ["t-0"], pid=8)], None, T0 + TH + 1)
    assert [(o["status"], o["cause"]) for o in out] == [("hanging", "coordinator-unaware")]


def test_markers_pending_is_late_not_hanging():
    out, _, _ = step([data(0), coord("PrepareCommit", ["t-0"])], None, T0 + TH + 1)
    assert [(o["status"], o["cause"], o["coordinator_epoch"]) for o in out] == [("late", "markers-pending", None)]


def test_overlapping_inputs_are_applied_once():
    evs = [data(0, 4), data(0, 4), marker(5), marker(5)]
    out, doc, _ = step(evs, None, T0)
    p = ProducerState.from_json(7, doc).parts["t\t0"]
    assert p["open"] is None and p["next_offset"] == 6
    out, doc, _ = step([data(3, 4)], doc, T0)
    assert ProducerState.from_json(7, doc).parts["t\t0"]["open"] is None


def test_snapshot_seeds_open_txn_and_epochs():
    snap = dict(kind="snapshot", topic="t", partition=0, producer_id=7, producer_epoch=2, first_offset=7,
                last_offset=7, last_ts=T0, coordinator_epoch=-1, snapshot_offset=8, event_time_ms=T0)
    out, doc, _ = step([snap], None, T0 + TH + 1, cfg=NOCOORD)
    assert [(o["first_offset"], o["coordinator_epoch"], o["coordinator_epoch_source"]) for o in out] == [
        (7, 0, "snapshot")]
    # later segments replay on top: the marker at 8 resolves it
    out, doc, _ = step([marker(8, ts=T0 + TH + 5)], doc, T0 + TH + 5, cfg=NOCOORD)
    assert [(o["status"], o["resolution"]) for o in out] == [("resolved", "committed")]


def test_eviction_after_idle():
    cfg = EngineConfig(cluster="c", coordinator_available=True, evict_after_ms=1000)
    out, doc, timer = step([data(0), marker(1), coord("CompleteCommit", [])], None, T0)
    assert timer == T0 + 7 * 24 * 3600 * 1000
    out, doc, timer = step([], doc, T0 + 1000, cfg=cfg)
    assert doc is None and out == []


def test_per_topic_thresholds():
    cfg = EngineConfig(cluster="c", coordinator_available=False, topic_thresholds={"t": Thresholds(60_000, 0)})
    out, _, _ = step([data(0)], None, T0 + 60_001, cfg=cfg)
    assert [o["threshold_ms"] for o in out] == [60_000]


def test_route_coordinator_records_fans_out_to_previous_and_tombstoned_ids():
    recs = [
        dict(offset=0, position=0, timestamp=T0, coordinator_epoch=3, transactional_id="a", tombstone=False,
             producer_id=10, producer_epoch=0, txn_state="Empty", txn_partitions=None, prev_producer_id=-1),
        dict(offset=1, position=1, timestamp=T0, coordinator_epoch=3, transactional_id="a", tombstone=False,
             producer_id=11, producer_epoch=0, txn_state="Empty", txn_partitions=None, prev_producer_id=-1),
        dict(offset=2, position=2, timestamp=T0, coordinator_epoch=3, transactional_id="a", tombstone=True),
    ]
    ev = txn_state_events(recs, partition=1, source="s", cluster="c", event_time_ms=T0)
    known: dict[str, int] = {}
    routed = route_coordinator_records(ev, known)
    got = [(int(r.first_offset), int(r.route_pid)) for r in routed.itertuples()]
    assert got == [(0, 10), (1, 11), (1, 10), (2, 11)]
    assert known == {}
    assert isinstance(routed, pd.DataFrame)
