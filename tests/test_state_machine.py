"""The per-producer state machine without Spark: pairing, lifecycle, timers, eviction, routing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from streaming.alerts import AlertConfig, Enricher
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


def coord(state, partitions, pid=7, ts=T0, tid="app", ple=3, start=T0, timeout=60_000, tombstone=False, epoch=0,
          updated=None):
    return dict(kind="txn_state", topic="__transaction_state", partition=1, producer_id=None if tombstone else pid,
                producer_epoch=epoch, first_offset=0, transactional_id=tid, tombstone=tombstone, txn_state=state,
                txn_partitions=partitions, txn_timeout_ms=timeout, txn_start_ts=start, coordinator_epoch=ple,
                txn_last_update_ts=updated, event_time_ms=ts)


def snapshot(first, last, ts, epoch, ce, snap, pid=7, topic="t", partition=0):
    """P's entry in tp's newest producer snapshot at offset ``snap`` (first None: nothing open)."""
    return dict(kind="snapshot", topic=topic, partition=partition, producer_id=pid, producer_epoch=epoch,
                first_offset=first, last_offset=last, last_ts=ts, coordinator_epoch=ce, snapshot_offset=snap,
                event_time_ms=ts, source="segments")


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
    # no marker, no snapshot, not read from offset 0, no marker of P anywhere: unknown. (Rules v1 gave
    # 3 from the __transaction_state partition's leader epoch: that rule is withdrawn, it can fence.)
    assert (out[0]["coordinator_epoch"], out[0]["coordinator_epoch_source"]) == (None, "unknown")
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


def _finding(out):
    return [(o["status"], o["cause"], o["verified"], o["first_offset"], o["producer_epoch"], o["coordinator_epoch"],
             o["coordinator_epoch_source"]) for o in out]


def test_empty_marker_teaches_no_epoch():
    # COMMIT at 1 (coordinator epoch 4), then an empty control batch at 3 left by the cleaner with a
    # garbage epoch 9 in its header: it closes the transaction but teaches neither a coordinator
    # epoch for last-marker nor a producer epoch for E.
    evs = [data(0, epoch=1), marker(1, epoch=1, ce=4), data(2, epoch=1), marker(3, kind="EMPTY", epoch=9, ce=None),
           data(4, epoch=1)]
    out, doc, _ = step(evs, None, T0 + TH + 1, cfg=NOCOORD)
    p = ProducerState.from_json(7, doc).parts["t\t0"]
    # closed_epoch: the data epoch of the transaction it closed (offset 2, epoch 1; revision 3.1)
    assert p["last_marker"] == {"offset": 3, "producer_epoch": 9, "coordinator_epoch": None, "kind": None,
                                "timestamp": T0, "closed_epoch": 1}
    assert p["max_epoch"] == 1
    # rule 2 needs the last marker's epoch; rule 5 takes P's highest known marker epoch (4)
    assert _finding(out) == [("hanging", "exceeds-max-timeout", False, 4, 1, 4, "producer-last-marker")]


def test_write_after_marker_needs_the_markers_epoch():
    # same epoch: the late-produce pattern (KAFKA-9144)
    evs = [data(0, epoch=6), marker(1, epoch=6, ce=5), data(2, epoch=6), coord("CompleteCommit", [], epoch=6)]
    out, _, _ = step(evs, None, T0 + TH + 1)
    assert _finding(out) == [("hanging", "write-after-marker", True, 2, 6, 5, "last-marker")]
    # the marker's epoch is below O's: the next transaction of a bumped producer, which the
    # coordinator finished without tp — not the late-produce pattern
    evs = [data(0, epoch=6), marker(1, epoch=6, ce=5), data(2, epoch=7), coord("CompleteCommit", [], epoch=7)]
    out, _, _ = step(evs, None, T0 + TH + 1)
    assert _finding(out) == [("hanging", "coordinator-finished-without-partition", True, 2, 7, 5, "last-marker")]


def test_prepare_naming_tp_stays_markers_pending_whatever_the_marker_timestamps():
    # detection.md §3.1 revision 3 (the "marker landed" timestamp rule is withdrawn): PrepareCommit
    # written at T0+100 by the coordinator's clock, a COMMIT marker of epoch 3 on t-0 at T0+200 by
    # the leader's clock, then P wrote again at 6. Under TV0/1 the previous transaction's marker
    # looks the same (TransactionMarkerChannelManager.addTxnMarkersToSend: same producer id, epoch,
    # result) and only two brokers' clocks would order them: O stays late. If the marker was C's,
    # the coordinator writes CompleteCommit once its markers are acknowledged and O turns hanging.
    prep = coord("PrepareCommit", ["t-0"], epoch=3, updated=T0 + 100, ts=T0 + 100)
    for marker_ts in (T0 + 200, T0 + 50):
        evs = [data(0, epoch=3), prep, marker(5, epoch=3, ce=2, ts=marker_ts), data(6, epoch=3, ts=T0 + 300)]
        out, _, _ = step(evs, None, T0 + 300 + TH + 1)
        # late: the epoch and its source are informational (never a command)
        assert _finding(out) == [("late", "markers-pending", True, 6, 3, 2, "last-marker")]
    # the coordinator completes: now nothing will close O, and the marker before it closed data of
    # its own epoch (not bumped): the late-produce pattern
    done = coord("CompleteCommit", [], epoch=3, updated=T0 + 400, ts=T0 + 400)
    evs = [data(0, epoch=3), prep, marker(5, epoch=3, ce=2, ts=T0 + 200), data(6, epoch=3, ts=T0 + 300), done]
    out, _, _ = step(evs, None, T0 + 300 + TH + 1)
    assert _finding(out) == [("hanging", "write-after-marker", True, 6, 3, 2, "last-marker")]


def test_snapshot_rows_below_its_offset_are_preview_only():
    # tp seeded from its snapshot at 100: P's entry says a transaction is open from 60 (epoch 1,
    # coordinator epoch 3, last write T0-4000). Segments below 100 are still read: they only extend
    # the first-write time and the data-loss preview; the marker at 22 (epoch 9) teaches nothing.
    pre = [data(20, 21, ts=T0 - 9000, epoch=1, snapshot_offset=100),
           marker(22, epoch=1, ce=9, ts=T0 - 8000) | {"snapshot_offset": 100},
           data(60, 64, ts=T0 - 5000, epoch=1, snapshot_offset=100),
           data(80, 80, ts=T0 - 4000, epoch=1, snapshot_offset=100)]
    snap = snapshot(60, 80, T0 - 4000, epoch=1, ce=3, snap=100)
    expected = [("hanging", "exceeds-max-timeout", False, 60, 1, 3, "snapshot")]
    for calls in ([pre + [snap]], [pre, [snap]]):  # one call (snapshot applied first) or preview first
        doc = None
        for evs in calls:
            out, doc, _ = step(evs, doc, T0 - 5000 + TH + 1, cfg=NOCOORD)
        assert _finding(out) == expected
        o = out[0]
        assert (o["first_ts"], o["last_ts"], o["last_offset"], o["batches"], o["records"], o["bytes"]) == (
            T0 - 5000, T0 - 4000, 80, 2, 6, 200)
        p = ProducerState.from_json(7, doc).parts["t\t0"]
        assert p["last_marker"] is None and p["max_marker_ce"] == -1


def test_producer_absent_from_snapshot_holds_epoch_zero():
    # tp seeded from a snapshot at 100 without an entry for P: P had no state there. A preview row
    # opens nothing, a preview marker (coordinator epoch 7) teaches nothing; the transaction at 120
    # is judged with the snapshot rule: absent → 0 (exact).
    evs = [data(40, snapshot_offset=100), marker(50, ce=7) | {"snapshot_offset": 100},
           data(120, snapshot_offset=100)]
    out, doc, _ = step(evs, None, T0 + TH + 1, cfg=NOCOORD)
    assert _finding(out) == [("hanging", "exceeds-max-timeout", False, 120, 0, 0, "snapshot")]
    assert ProducerState.from_json(7, doc).parts["t\t0"]["snapshot"] == {"offset": 100, "present": False,
                                                                         "coordinator_epoch": -1}


def test_open_snapshot_entry_below_log_start_is_a_finding_with_data_deleted():
    # retention moved tp's log start to 500; the newest snapshot (600) still holds P's transaction
    # open from 10, which pins the LSO at the log start (the LSO never lies below it): a finding,
    # its data deleted, and not resolved by an LSO "above" its first offset.
    out, _, _ = step([snapshot(10, 12, T0, epoch=2, ce=4, snap=600)], None, T0 + TH + 1, cfg=NOCOORD)
    assert _finding(out) == [("hanging", "exceeds-max-timeout", False, 10, 2, 4, "snapshot")]
    e = Enricher(AlertConfig(txn_state_partitions=50))
    progress = [{"topic": "t", "partition": 0, "log_start_offset": 500, "lso": 500, "high_watermark": 700,
                 "now_ms": T0 + TH + 1}]
    (a,) = e.process(out, progress)
    assert e.process([], [dict(progress[0], now_ms=T0 + TH + 2)]) == []  # still pinned
    assert (a["data_deleted"], a["pins_lso"], a["coordinator_epoch"], a["coordinator_epoch_source"]) == (
        True, True, 4, "snapshot")
    assert a["abort_command_legacy"].endswith("--producer-id 7 --producer-epoch 2 --coordinator-epoch 4")


def test_producer_last_marker_across_partitions_and_log_start():
    # O on t-0: no marker there, not read from 0. P's markers elsewhere: t-1 (coordinator epoch 6),
    # t-2 (8): the highest one errs low at worst.
    evs = [data(0, partition=1), marker(1, ce=6, partition=1), data(0, partition=2), marker(1, ce=8, partition=2),
           data(5)]
    out, _, _ = step(evs, None, T0 + TH + 1, cfg=NOCOORD)
    assert _finding(out) == [("hanging", "exceeds-max-timeout", False, 5, 0, 8, "producer-last-marker")]
    # t-0 read from offset 0 and no marker of P there: the broker's entry never saw one → 0
    out, _, _ = step(evs[:4] + [data(5, read_from_zero=True)], None, T0 + TH + 1, cfg=NOCOORD)
    assert _finding(out) == [("hanging", "exceeds-max-timeout", False, 5, 0, 0, "log-start")]


def test_state_row_carries_its_evidence():
    out, _, _ = step([data(0, epoch=2), marker(1, epoch=2, ce=5), data(2, epoch=2), coord("CompleteCommit", [])],
                     None, T0 + TH + 1)
    ev = json.loads(out[0]["evidence"])
    assert ev["txn"]["prev_marker"] == {"offset": 1, "producer_epoch": 2, "coordinator_epoch": 5, "kind": "COMMIT",
                                        "timestamp": T0, "closed_epoch": 2}
    assert (ev["view"]["mapped"], ev["view"]["txn_partition"], ev["view"]["record"]["state"]) == (
        True, 1, "CompleteCommit")
    assert ev["thresholds"] == {"max_timeout_ms": 900_000, "padding_ms": 300_000}


def lso_passed(lso, pid=7, ts=T0, topic="t", partition=0):
    return dict(kind="lso_passed", topic=topic, partition=partition, producer_id=pid, lso=lso, event_time_ms=ts)


def test_lso_passed_closes_a_probed_transaction_only_once_the_lso_is_above_its_first_offset():
    """Probe mode (issue 12, detection.md §3 lifecycle): the LSO moving past O's first offset
    resolves O as ``lso-advanced``; an LSO at O's first offset (O still pins it) changes nothing;
    the unread closing marker leaves P's last marker unknown."""
    rows, doc, _ = step([marker(2), data(5, lso=5)], None, T0 + TH + 10_000, cfg=NOCOORD)
    assert [(r["status"], r["first_offset"]) for r in rows] == [("hanging", 5)]
    rows, doc, _ = step([lso_passed(5)], doc, T0 + TH + 20_000, cfg=NOCOORD)
    assert rows == []
    assert json.loads(doc)["parts"]["t\t0"]["open"]["first_offset"] == 5
    rows, doc, _ = step([lso_passed(9)], doc, T0 + TH + 30_000, cfg=NOCOORD)
    assert [(r["status"], r["resolution"], r["first_offset"]) for r in rows] == [("resolved", "lso-advanced", 5)]
    part = json.loads(doc)["parts"]["t\t0"] if doc else None
    assert part is None or (part["open"] is None and part["last_marker"] is None)


def test_a_probe_window_after_unread_offsets_forgets_the_last_marker_it_knew():
    """A window starting above what the state last saw of P on tp (``lso`` on the row): P may have
    had markers in between, so O's previous marker is unknown (rule 2 then comes from the
    driver's look-back), while a row read contiguously keeps it."""
    _, doc, _ = step([marker(2, ce=4)], None, T0)
    _, later, _ = step([data(40, lso=40)], doc, T0)
    assert json.loads(later)["parts"]["t\t0"]["open"]["prev_marker"] is None
    _, same, _ = step([data(3, lso=3)], doc, T0)
    assert json.loads(same)["parts"]["t\t0"]["open"]["prev_marker"]["offset"] == 2


def test_text_dump_start_bound_and_a_run_of_ongoing_records_that_is_two_transactions():
    # Text dumps before 4.1 print no TransactionStartTimestampMs (coord(start=None)). Producer
    # timeout 60 s; threshold 20 min; stuck needs now - start > 60 s + 5 min padding.
    # TransactionMetadata sets txnStartTimestamp on the move to Ongoing (after the previous
    # Complete*/Empty); TransactionCoordinator.handleAddPartitionsToTransaction writes a further
    # Ongoing record of the same transaction only when a partition is new.
    now = T0 + TH + 1
    empty = coord("Empty", None, start=None, updated=T0 - 3_600_000, ts=T0 - 3_600_000)
    ongoing1 = coord("Ongoing", ["t-0"], start=None, updated=T0 - 1_800_000, ts=T0 - 1_800_000)
    grows = coord("Ongoing", ["t-0", "t-1"], start=None, updated=T0 - 1_700_000, ts=T0 - 1_700_000)
    # one transaction (the set grew): started at the first Ongoing after the Empty, 30 min ago -> stuck
    out, _, _ = step([empty, ongoing1, grows, data(0, ts=T0)], None, now)
    assert [o["cause"] for o in out] == ["coordinator-stuck"]
    # same set again, 4 min before now: a record of another transaction (the ones between are not
    # in the input); its own update time bounds its start: 4 min < 6 min -> long-transaction
    again = coord("Ongoing", ["t-0"], start=None, updated=now - 240_000, ts=now - 240_000)
    out, _, _ = step([empty, ongoing1, again, data(0, ts=T0)], None, now)
    assert [o["cause"] for o in out] == ["long-transaction"]
    # no Complete*/Empty record read at all: nothing bounds the start from below -> not stuck
    out, _, _ = step([ongoing1, grows, data(0, ts=T0)], None, now)
    assert [o["cause"] for o in out] == ["long-transaction"]


def test_text_dump_start_bound_with_partition_sets_as_pandas_hands_them_over():
    # The same records as above with txn_partitions as the state operator gets an array<string>
    # cell from a pandas frame (Arrow -> pandas: a numpy array, whose truth value is an error for
    # any length but one). TransactionMetadata.prepareAddPartitions: the first Ongoing record after
    # the Empty one carries txnLastUpdateTimestamp = txnStartTimestamp; the grown set is the same
    # transaction (TransactionCoordinator.handleAddPartitionsToTransaction), so it started 30 min
    # ago -> stuck. Before the fix the state function raised ValueError on the two-partition set.
    now = T0 + TH + 1
    empty = coord("Empty", np.array([], dtype=object), start=None, updated=T0 - 3_600_000, ts=T0 - 3_600_000)
    ongoing1 = coord("Ongoing", np.array(["t-0"], dtype=object), start=None, updated=T0 - 1_800_000,
                     ts=T0 - 1_800_000)
    grows = coord("Ongoing", np.array(["t-0", "t-1"], dtype=object), start=None, updated=T0 - 1_700_000,
                  ts=T0 - 1_700_000)
    out, _, _ = step([empty, ongoing1, grows, data(0, ts=T0)], None, now)
    assert [o["cause"] for o in out] == ["coordinator-stuck"]
