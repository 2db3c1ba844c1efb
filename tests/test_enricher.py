"""The driver-side enrichment: the state's evidence plus the global facts, judged again.

State rows come from the real state function (``process_key``); the Enricher gets the
``__transaction_state`` progress rows a job would pass through. Expected values by hand.
"""

from __future__ import annotations

from streaming.alerts import AlertConfig, Enricher
from streaming.broker_evidence import LookbackResult, NoBrokerEvidence
from streaming.state_machine import EngineConfig, process_key
from streaming.verdict import DescribeProducersAnswer, Marker

T0 = 1_700_000_000_000
TH = 1_200_000
LIVE = EngineConfig(cluster="c", coordinator_available=True)


def data(first, ts=T0, epoch=0, pid=7, **kw):
    return dict(kind="data", topic="t", partition=0, producer_id=pid, producer_epoch=epoch, first_offset=first,
                last_offset=first, first_ts=ts, last_ts=ts, batch_count=1, record_count=3, bytes=100,
                event_time_ms=ts, source="kafka", **kw)


def coord(state, partitions, *, txn_partition, pid=7, epoch=0, updated=T0):
    return dict(kind="txn_state", topic="__transaction_state", partition=txn_partition, producer_id=pid,
                producer_epoch=epoch, first_offset=0, transactional_id="app", tombstone=False, txn_state=state,
                txn_partitions=partitions, txn_timeout_ms=60_000, txn_start_ts=T0, txn_last_update_ts=updated,
                coordinator_epoch=1, event_time_ms=T0)


def txn_progress(now, partitions, n=3, leader_epochs=None):
    """Progress rows of __transaction_state partitions read live up to ``now`` to their high
    watermark (leader epoch per partition), and of data partition t-0 read to its high watermark:
    the proof detection.md §0 asks of a verified finding (a read that reached the end)."""
    return [{"topic": "__transaction_state", "partition": k, "now_ms": now, "txn_partition_count": n,
             "coordinator_epoch": (leader_epochs or {}).get(k, 5), "high_watermark": 10, "lso": 10,
             "source": "kafka", "end_proven": True}
            for k in partitions] + [{"topic": "t", "partition": 0, "now_ms": now, "source": "kafka",
                                     "end_proven": True, "high_watermark": 11}]


def state_rows(events, now, pid=7):
    out, _doc, _timer = process_key(pid, events, None, now_ms=now, cfg=LIVE)
    return [o for o in out if o["out_kind"] == "alert"]


def brief(alerts):
    return [(a["status"], a["cause"], a["verified"], a["coordinator_epoch"], a["coordinator_epoch_source"],
             a["missing_txn_partitions"], a["abort_command_legacy"] is not None) for a in alerts]


NOW = T0 + TH + 1


def test_incomplete_view_is_unverified_and_gives_no_all_coordinators_max_command():
    # P is mapped by no record; partitions 0 and 1 of 3 were read up to now (leader epochs 5, 7).
    rows = state_rows([data(10)], NOW)
    assert [(r["status"], r["cause"], r["verified"]) for r in rows] == [("hanging", "exceeds-max-timeout", False)]
    e = Enricher(AlertConfig())
    out = e.process(rows, txn_progress(NOW, [0, 1], leader_epochs={0: 5, 1: 7}))
    assert brief(out) == [("hanging", "exceeds-max-timeout", False, None, "unknown", [2], False)]
    assert "__transaction_state partitions 2 were not read" in out[0]["verify_hint"]
    assert out[0]["evidence"]["first_batch"] == {"offset": 10, "timestamp": T0, "producer_epoch": 0}
    # the view completes in the next micro-batch (no state row): the open finding is judged again
    later = NOW + 10_000
    out = e.process([], txn_progress(later, [0, 1, 2], leader_epochs={0: 5, 1: 7, 2: 6}))
    assert brief(out) == [("hanging", "coordinator-unaware", True, 7, "all-coordinators-max", None, True)]
    assert out[0]["abort_command_legacy"].endswith("--producer-id 7 --producer-epoch 0 --coordinator-epoch 7")
    # each change is published once
    assert e.process([], txn_progress(later + 10_000, [0, 1, 2])) == []


def test_partition_count_from_config_only_when_progress_does_not_say():
    rows = state_rows([data(10)], NOW)
    prog = [dict(r, txn_partition_count=None) for r in txn_progress(NOW, [0, 1])]
    # live: no configured guess — n unknown, the view cannot be complete, nothing is listed
    assert brief(Enricher(AlertConfig()).process(rows, prog)) == [
        ("hanging", "exceeds-max-timeout", False, None, "unknown", None, False)]
    # files: [coordinator] txn_state_partitions = 2 → both read → complete
    assert brief(Enricher(AlertConfig(txn_state_partitions=2)).process(rows, prog)) == [
        ("hanging", "coordinator-unaware", True, 5, "all-coordinators-max", None, True)]


def test_missing_coordinator_partition_returns_and_maps_p_to_prepare_commit():
    # P's transactional id lives in __transaction_state-2, whose record says PrepareCommit with t-0:
    # the state (which cannot know what was read) says late / markers-pending.
    rows = state_rows([data(10, epoch=1), coord("PrepareCommit", ["t-0"], txn_partition=2, epoch=1)], NOW)
    assert [(r["status"], r["cause"]) for r in rows] == [("late", "markers-pending")]
    e = Enricher(AlertConfig())
    # partition 2 lags: its mapping is not current → only markers-pending could explain O, unverified
    out = e.process(rows, txn_progress(NOW, [0, 1]))
    assert brief(out) == [("hanging", "exceeds-max-timeout", False, None, "unknown", [2], False)]
    assert "(__transaction_state-" in out[0]["verify_hint"]  # names the transactional id's own partition
    # partition 2 is read up to now again: late, once, with no command
    out = e.process([], txn_progress(NOW + 5000, [0, 1, 2]))
    assert brief(out) == [("late", "markers-pending", True, None, "unknown", None, False)]
    assert out[0]["abort_command_new"] is None and out[0]["evidence"]["coordinator_record"]["state"] == "PrepareCommit"
    assert e.process([], txn_progress(NOW + 9000, [0, 1, 2])) == []


class FakeBroker(NoBrokerEvidence):
    def __init__(self, dp=None, lookback=None):
        self.dp, self.lookback, self.calls = dp, lookback, []

    def describe_producers(self, topic, partition):
        self.calls.append(("describe_producers", topic, partition))
        return self.dp

    def last_marker_before(self, topic, partition, producer_id, first_offset):
        self.calls.append(("last_marker_before", topic, partition, producer_id, first_offset))
        return self.lookback or LookbackResult()


def test_describe_producers_is_rule_one_and_a_mismatch_blocks():
    rows = state_rows([data(10, epoch=1)], NOW)
    prog = txn_progress(NOW, [0, 1, 2])
    broker = FakeBroker(dp={7: DescribeProducersAnswer(True, producer_epoch=2, coordinator_epoch=11,
                                                       current_txn_start_offset=9)})
    e = Enricher(AlertConfig(), broker=broker)
    # the leader's transaction for P starts at 9, not 10: re-read first, publish nothing
    assert e.process(rows, prog) == [] and list(e.pending) == [rows[0]["key"]]
    broker.dp = {7: DescribeProducersAnswer(True, producer_epoch=2, coordinator_epoch=11, current_txn_start_offset=10)}
    out = e.process([], txn_progress(NOW + 1000, [0, 1, 2]))
    assert brief(out) == [("hanging", "coordinator-unaware", True, 11, "describe-producers", None, True)]
    assert out[0]["producer_epoch"] == 2 and out[0]["evidence"]["describe_producers"]["coordinator_epoch"] == 11
    assert e.pending == {}
    # the matching answer is cached for the finding: no further broker calls, nothing republished
    n = len(broker.calls)
    assert e.process([], txn_progress(NOW + 2000, [0, 1, 2])) == [] and len(broker.calls) == n


def test_look_back_marker_is_last_marker_and_a_stopped_look_back_says_so():
    rows = state_rows([data(10, epoch=3)], NOW)
    found = LookbackResult(marker=Marker(offset=4, producer_epoch=3, coordinator_epoch=9, kind="COMMIT",
                                         timestamp=T0 - 10), bytes_read=700)
    broker = FakeBroker(lookback=found)
    out = Enricher(AlertConfig(), broker=broker).process(rows, txn_progress(NOW, [0, 1]))
    assert brief(out) == [("hanging", "exceeds-max-timeout", False, 9, "last-marker", [2], True)]
    assert broker.calls[-1] == ("last_marker_before", "t", 0, 7, 10)
    stopped = LookbackResult(bytes_read=1024, reason="the look-back stopped after 1024 bytes")
    out = Enricher(AlertConfig(), broker=FakeBroker(lookback=stopped)).process(rows, txn_progress(NOW, [0, 1]))
    assert brief(out) == [("hanging", "exceeds-max-timeout", False, None, "unknown", [2], False)]
    assert out[0]["epoch_hint"].endswith("(the look-back stopped after 1024 bytes)")
    assert out[0]["epoch_hint"] in out[0]["verify_hint"]
    # the whole partition was read from offset 0 without a marker of P: log-start
    whole = LookbackResult(complete=True, read_from_zero=True, bytes_read=5000)
    out = Enricher(AlertConfig(), broker=FakeBroker(lookback=whole)).process(rows, txn_progress(NOW, [0, 1]))
    assert brief(out) == [("hanging", "exceeds-max-timeout", False, 0, "log-start", [2], True)]


def test_resolution_of_a_published_finding_and_of_a_held_one():
    rows = state_rows([data(10)], NOW)
    e = Enricher(AlertConfig())
    e.hold("t-0")  # t-0 not read through now: nothing new is published for it
    assert e.process(rows, txn_progress(NOW, [0, 1])) == []
    resolved = dict(rows[0], status="resolved", resolution="aborted", cause=None)
    assert e.process([resolved], []) == [] and e.pending == {}  # never published: nothing to resolve
    e.release("t-0")
    e.process(rows, txn_progress(NOW, [0, 1]))
    (r,) = e.process([resolved], [])
    assert (r["status"], r["resolution"], r["abort_command_new"], r["evidence"]) == ("resolved", "aborted", None, None)


def test_file_inputs_coordinator_partitions_stay_read_while_the_clock_moves():
    # segments read in several micro-batches: __transaction_state (never throttled) was read whole
    # in the first one, at an earlier clock than the finding's
    rows = state_rows([data(10)], NOW)
    # (each copy's newest record is after O's first write, so none is empty or behind: §0 rev 3.1;
    # a log directory listed by txnwatch: its newest segment proves t-0's end)
    early = [dict(r, source="segments", last_ts=T0 + 1) for r in txn_progress(NOW - 60_000, [0, 1, 2])]
    assert brief(Enricher(AlertConfig()).process(rows, early)) == [
        ("hanging", "coordinator-unaware", True, 5, "all-coordinators-max", None, True)]
    # the live path: a coordinator partition last read before now lags
    live = [dict(r, source="kafka") for r in txn_progress(NOW - 60_000, [0, 1, 2])]
    assert brief(Enricher(AlertConfig()).process(rows, live)) == [
        ("hanging", "exceeds-max-timeout", False, None, "unknown", [0, 1, 2], False)]


def test_live_proof_a_read_short_of_the_high_watermark_and_a_crc_gap_in_a_coordinator_partition():
    # detection.md §0, live path: t-0's end is proven by a read to its high watermark; a progress
    # row without that proof (end_proven false) leaves the finding unverified
    # (newest-segment-not-proven). The coordinator partitions were read to their high watermarks:
    # the copies are current without any timestamp comparison.
    rows = state_rows([data(10)], NOW)
    e = Enricher(AlertConfig())
    short = [dict(r, end_proven=False) if r["topic"] == "t" else r for r in txn_progress(NOW, [0, 1, 2])]
    out = e.process(rows, short)
    assert brief(out) == [("hanging", "coordinator-unaware", False, 5, "all-coordinators-max", None, True)]
    assert e.judge_row(rows[0], NOW).verdict.unverified_reasons == ("newest-segment-not-proven",)
    out = e.process([], txn_progress(NOW + 1000, [0, 1, 2]))
    assert brief(out) == [("hanging", "coordinator-unaware", True, 5, "all-coordinators-max", None, True)]
    # a batch of __transaction_state-1 fails its CRC (RecordBatch.ensureValid): that partition is
    # incomplete from there on, the view is no longer complete: no "coordinator-unaware"
    crc = {"topic": "__transaction_state", "partition": 1, "first_offset": 4, "crc_failed": True,
           "reason": "CRC-32C mismatch"}
    out = e.process([], txn_progress(NOW + 2000, [0, 1, 2]), gaps=[crc])
    assert brief(out) == [("hanging", "exceeds-max-timeout", False, None, "unknown", [1], False)]
    assert set(e.judge_row(rows[0], NOW + 2000).verdict.unverified_reasons) == {"crc-gap", "coordinator-view-incomplete"}


class DescribingBroker(FakeBroker):
    """DescribeTransactions answers as streaming.broker_confirm returns them (3.0+)."""

    def __init__(self, answer):
        super().__init__(dp=None)  # DescribeProducers unsupported: only DescribeTransactions answers
        self.answer = answer

    def describe_transaction(self, transactional_id):
        self.calls.append(("describe_transaction", transactional_id))
        return self.answer


def marker(first, ts=T0, epoch=0, pid=7, ce=1):
    return dict(kind="marker", topic="t", partition=0, producer_id=pid, producer_epoch=epoch, first_offset=first,
                last_offset=first, first_ts=ts, last_ts=ts, batch_count=1, record_count=1, bytes=78, marker="COMMIT",
                coordinator_epoch=ce, event_time_ms=ts, source="kafka")


def test_describe_transactions_decides_a_prepare_record_on_the_live_path():
    # detection.md §3.1 revision 3: the log's PrepareCommit lists t-0, and a COMMIT marker of the same
    # epoch sits before O. By the log alone O stays late (markers-pending): only clocks would say the
    # marker was C's. The coordinator's own answer decides (FindHangingTransactionsCommand
    # .filterHangingTransactions: tp absent from the description's partitions -> hanging).
    events = [data(8, epoch=2), marker(9, epoch=2), data(10, epoch=2),
              coord("PrepareCommit", ["t-0"], txn_partition=2, epoch=2)]
    rows = state_rows(events, NOW)
    assert [(r["status"], r["cause"]) for r in rows] == [("late", "markers-pending")]
    done = {"transactional_id": "app", "state": "CompleteCommit", "producer_id": 7, "producer_epoch": 2,
            "timeout_ms": 60_000, "start_ms": -1, "partitions": []}
    e = Enricher(AlertConfig(), broker=DescribingBroker(done))
    out = e.process(rows, txn_progress(NOW, [0, 1, 2]))
    # the marker at 9 closed data of its own epoch 2 (not bumped): the late-produce pattern
    assert [(a["status"], a["cause"], a["verified"], a["unverified_reasons"]) for a in out] == [
        ("hanging", "write-after-marker", True, [])]
    assert ("describe_transaction", "app") in e.broker.calls
    # the coordinator still lists t-0 as pending: late, whatever the log's timestamps
    pending = dict(done, state="PrepareCommit", partitions=["t-0"])
    e = Enricher(AlertConfig(), broker=DescribingBroker(pending))
    out = e.process(rows, txn_progress(NOW, [0, 1, 2]))
    assert [(a["status"], a["cause"], a["verified"]) for a in out] == [("late", "markers-pending", True)]
    # no answer (API missing or not authorized): the log decides, late
    e = Enricher(AlertConfig(), broker=DescribingBroker(None))
    out = e.process(rows, txn_progress(NOW, [0, 1, 2]))
    assert [(a["status"], a["cause"]) for a in out] == [("late", "markers-pending")]


class BatchDescribingBroker(FakeBroker):
    """DescribeTransactions of many ids at once (streaming.broker_confirm.describe_transactions)."""

    def __init__(self, answers):
        super().__init__(dp=None)
        self.answers = answers

    def describe_transaction(self, transactional_id):
        self.calls.append(("describe_transaction", transactional_id))
        return self.answers.get(transactional_id)

    def describe_transactions(self, transactional_ids):
        self.calls.append(("describe_transactions", tuple(transactional_ids)))
        return {t: self.answers.get(t) for t in transactional_ids}


def test_describe_transactions_of_every_finding_judged_is_one_question():
    # two producers' findings, each late by the log alone (markers-pending, as in the test above),
    # with transactional ids "app" and "app2": one question for both per clock, and the same
    # verdicts the one-id answers give (the coordinator's word decides, detection.md §3.1)
    rows = state_rows([data(8, epoch=2), marker(9, epoch=2), data(10, epoch=2),
                       coord("PrepareCommit", ["t-0"], txn_partition=2, epoch=2)], NOW)
    rows += state_rows([data(18, epoch=4, pid=8), marker(19, epoch=4, pid=8), data(20, epoch=4, pid=8),
                        dict(coord("PrepareCommit", ["t-0"], txn_partition=1, pid=8, epoch=4),
                             transactional_id="app2")], NOW, pid=8)
    assert [(r["producer_id"], r["status"], r["transactional_id"]) for r in rows] == [(7, "late", "app"),
                                                                                       (8, "late", "app2")]
    done = {"transactional_id": "app", "state": "CompleteCommit", "producer_id": 7, "producer_epoch": 2,
            "timeout_ms": 60_000, "start_ms": -1, "partitions": []}
    pending = {"transactional_id": "app2", "state": "PrepareCommit", "producer_id": 8, "producer_epoch": 4,
               "timeout_ms": 60_000, "start_ms": -1, "partitions": ["t-0"]}
    broker = BatchDescribingBroker({"app": done, "app2": pending})
    e = Enricher(AlertConfig(), broker=broker)
    out = e.process(rows, txn_progress(NOW, [0, 1, 2]))
    # app's coordinator finished without t-0: hanging (write-after-marker); app2's still lists t-0: late
    assert [(a["producer_id"], a["status"], a["cause"], a["verified"]) for a in out] == [
        (7, "hanging", "write-after-marker", True), (8, "late", "markers-pending", True)]
    asked = [c for c in broker.calls if c[0].startswith("describe_transaction")]
    assert asked == [("describe_transactions", ("app", "app2"))]
    # the next trigger judges both open findings again at the new clock: one question again
    assert e.process([], txn_progress(NOW + 1000, [0, 1, 2])) == []
    asked = [c for c in broker.calls if c[0].startswith("describe_transaction")]
    assert asked == [("describe_transactions", ("app", "app2"))] * 2


class Tv2Broker(FakeBroker):
    """A 4.0+ cluster whose finalized transaction.version is 2 (ApiVersions v3+ finalized features)."""

    def __init__(self):
        super().__init__(dp=None)

    def transaction_version(self):
        return 2


def test_finalized_transaction_version_2_says_the_marker_was_bumped():
    # detection.md §3.1 revision 3.1: "or the cluster's finalized transaction.version says version
    # 2": under TV2 (TransactionMetadata.prepareComplete bumps the epoch at every end) a batch of the
    # marker's epoch after it is the producer's next transaction, not a late write of the closed one.
    events = [data(8, epoch=3), marker(9, epoch=3), data(10, epoch=3),
              coord("CompleteCommit", [], txn_partition=2, epoch=3)]
    rows = state_rows(events, NOW)
    # by the log alone the marker closed data of its own epoch: the late-produce pattern (KAFKA-9144)
    out = Enricher(AlertConfig(), broker=FakeBroker()).process(rows, txn_progress(NOW, [0, 1, 2]))
    assert [(a["status"], a["cause"]) for a in out] == [("hanging", "write-after-marker")]
    out = Enricher(AlertConfig(), broker=Tv2Broker()).process(rows, txn_progress(NOW, [0, 1, 2]))
    assert [(a["status"], a["cause"], a["verified"]) for a in out] == [
        ("hanging", "coordinator-finished-without-partition", True)]
