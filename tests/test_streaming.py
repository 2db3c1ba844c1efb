"""Streaming behaviour on local[2]: event-time timers, restart from checkpoint, scan == stream."""

from __future__ import annotations

from collections import Counter

import pytest

from streaming.alerts import AlertConfig
from streaming.cli import scan_paths
from streaming.config import as_config, load
from streaming.pipeline import SinkSet, start_query
from streaming.simulate.cluster_log import ClusterLog
from streaming.sinks.jsonl import JsonlSink, read_jsonl
from streaming.state_machine import EngineConfig
from tests.streaming_wait import BatchLog

pytestmark = pytest.mark.spark
T0 = 1_700_000_000_000
MIN = 60_000


def run_once(spark, path, ck, *, options=None, cfg=None):
    """One available-now run over ``path`` with checkpoint ``ck``; returns (alerts, per-batch log)."""
    out, batches = [], []
    sinks = SinkSet(sinks=[out.extend], on_batch=[lambda b, s: batches.append((b, s["rows"], list(s["alerts"])))])
    opts = {"path": str(path), "cluster": "t", **(options or {})}
    q = start_query(spark, "segments", opts, cfg or EngineConfig(cluster="t"), AlertConfig("k:9092"), sinks, str(ck),
                    trigger={"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None
    return out, batches


def healthy(c, producer, topic, n, step_ms=MIN):
    for _ in range(n):
        producer.begin()
        producer.send(topic, 0, 2)
        producer.commit()
        c.advance(step_ms)


def test_silent_hanging_transaction_fires_from_the_timer(spark, tmp_path):
    c = ClusterLog(tmp_path / "logs", T0, coordinator_epoch=2)
    c.create_topic("a", 1)
    c.create_topic("b", 1)
    z = c.producer("zombie")
    z.begin()
    z.send("a", 0, 3)
    z.commit()
    z.zombie_send("a", 0, 1)  # open at offset 4, nobody will close it
    h = c.producer("healthy")
    healthy(c, h, "b", 3)
    c.flush()
    first, _ = run_once(spark, tmp_path / "logs", tmp_path / "ck")
    assert first == []
    # only partition b gets new data: producer 'zombie' receives no input any more
    healthy(c, h, "b", 25)
    c.flush()
    alerts, batches = run_once(spark, tmp_path / "logs", tmp_path / "ck")
    assert [(a["key"], a["status"], a["cause"]) for a in alerts] == [("t/a/0/1000/4", "hanging", "write-after-marker")]
    # it fired in a micro-batch that read no row of topic a (the no-data batch after the
    # watermark passed its timeout)
    fired_in = [b for b, _rows, al in batches if al]
    assert len(fired_in) == 1
    assert alerts[0]["detected_at"] >= alerts[0]["first_ts"] + 1_200_000
    assert alerts[0]["abort_command_legacy"].endswith("--producer-id 1000 --producer-epoch 0 --coordinator-epoch 2")


def _restart_scenario(root):
    """Two healthy producers (ids 1000, 1001), ``late-writer`` (1002) whose write after its COMMIT
    marker opens a transaction nobody ends (KAFKA-9144: ProducerStateManager starts a transaction
    at any transactional batch of a producer with none open), and ``stuck`` (1003) whose markers
    stay pending for 20 minutes, then are written. ``late-writer`` and ``stuck`` share
    ``__transaction_state-34``, whose newest record (stuck's CompleteCommit) is newer than the late
    write: the copy is current (detection.md §0). Returns the base offset of the late write."""
    c = ClusterLog(root, T0, coordinator_epoch=5, segment_bytes=4096, seed=3)
    for t in ("orders", "payments"):
        c.create_topic(t, 2)
    good = [c.producer(f"ok-{i}", tv=2 if i else 0) for i in range(2)]
    for step in range(30):
        for p in good:
            p.begin()
            p.send("orders", step % 2, 3)
            p.send("payments", 0, 1)
            p.send("payments", 1, 1)
            p.commit()
        if step == 3:
            bad = c.producer("late-writer")
            bad.begin()
            bad.send("orders", 1, 2)
            bad.commit()
            late_offset = bad.zombie_send("orders", 1, 1)
        if step == 8:
            stuck = c.producer("stuck", timeout_ms=60_000)
            stuck.begin()
            stuck.send("payments", 1, 2)
            stuck.commit(markers=[])  # markers pending: late
        if step == 28:
            stuck.cluster.write_markers("stuck")  # resolved, well after it became late
        c.advance(2 * MIN)
    c.flush()
    return late_offset


def _final_findings(alerts: list[dict]) -> list[tuple]:
    """What a sequence of published alerts leaves open: the latest alert per key, resolved ones
    dropped; as (key, status, cause, verified)."""
    last: dict[str, dict] = {}
    for a in alerts:
        last[a["key"]] = a
    return sorted((k, a["status"], a["cause"], a["verified"]) for k, a in last.items() if a["status"] != "resolved")


def _restart_truth(late_offset: int) -> list[tuple]:
    """The one finding at the end of :func:`_restart_scenario` (written by hand): producer 1002's
    late write on orders-1 is hanging, write-after-marker, verified (the whole log dir is read and
    its coordinator copy is current); ``stuck``'s markers were written, so it is resolved."""
    return [(f"t/orders/1/1002/{late_offset}", "hanging", "write-after-marker", True)]

def _alive(q) -> None:
    assert q.isActive, f"query stopped: {q.exception()}"


def test_restart_from_checkpoint_gives_the_same_alerts(spark, tmp_path):
    opts = {"max_bytes_per_trigger": "1500"}
    late_offset = _restart_scenario(tmp_path / "u")
    whole, _ = run_once(spark, tmp_path / "u", tmp_path / "ck-u", options=opts)
    assert {(a["status"], a["cause"]) for a in whole} >= {("hanging", "write-after-marker"),
                                                          ("late", "markers-pending"), ("resolved", None)}
    assert _final_findings(whole) == _restart_truth(late_offset)

    _restart_scenario(tmp_path / "r")
    jsonl = tmp_path / "r-alerts.jsonl"
    before = BatchLog()
    sinks = SinkSet(sinks=[JsonlSink(str(jsonl))], on_batch=[before])
    q = start_query(spark, "segments", {"path": str(tmp_path / "r"), "cluster": "t", **opts}, EngineConfig(cluster="t"),
                    AlertConfig("k:9092"), sinks, str(tmp_path / "ck-r"), trigger={"processingTime": "0 seconds"})
    try:
        before.wait_for_batch(4, check=lambda: _alive(q))
    finally:
        q.stop()  # mid-way: some micro-batches done, maybe one interrupted
    first_part = read_jsonl(str(jsonl))
    assert len(first_part) < len(whole)
    after = BatchLog()
    sinks2 = SinkSet(sinks=[JsonlSink(str(jsonl))], on_batch=[after])
    q = start_query(spark, "segments", {"path": str(tmp_path / "r"), "cluster": "t", **opts}, EngineConfig(cluster="t"),
                    AlertConfig("k:9092"), sinks2, str(tmp_path / "ck-r"), trigger={"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None
    # The restarted query resumed from the checkpoint and ran micro-batches over the rest: its
    # batch ids go on from the stopped run's (a batch interrupted after publishing is replayed
    # without publishing again, so at most one id is skipped) and they read rows.
    assert after.ids and before.ids[-1] < after.ids[0] <= before.ids[-1] + 2
    assert after.ids == list(range(after.ids[0], after.ids[0] + len(after.ids)))
    assert sum(after.rows) > 0
    resumed = read_jsonl(str(jsonl))
    # each change is published once; a finding read before its partition's end is reached is
    # unverified (detection.md §0) and published again, verified, by the read that reaches it
    assert Counter((a["key"], a["status"], a["verified"]) for a in resumed).most_common(1)[0][1] == 1
    strip = ("input",)
    assert [{k: v for k, v in a.items() if k not in strip} for a in resumed] == \
        [{k: v for k, v in a.items() if k not in strip} for a in whole]
    assert _final_findings(resumed) == _restart_truth(late_offset)


def test_scan_and_streaming_give_identical_alerts(spark, tmp_path):
    late_offset = _restart_scenario(tmp_path / "s")
    cfg = load(None, env={})
    cfg["cluster"] = "t"
    cfg["kafka"]["bootstrap_servers"] = "k:9092"
    findings, _ = scan_paths([str(tmp_path / "s")], as_config(cfg), spark=spark)
    streamed, _ = run_once(spark, tmp_path / "s", tmp_path / "ck")
    active = {}
    for a in streamed:
        if a["status"] == "resolved":
            active.pop(a["key"], None)
        else:
            active[a["key"]] = a
    assert sorted(active.values(), key=lambda a: a["key"]) == sorted(findings, key=lambda a: a["key"])
    assert _final_findings(findings) == _restart_truth(late_offset)
    assert _final_findings(streamed) == _restart_truth(late_offset)


def test_batch_published_before_its_commit_is_replayed_without_publishing(spark, tmp_path):
    # A stop between publishing a micro-batch and Spark's commit: on restart Spark runs that batch
    # again. It must run to the end (its state store version must commit) and publish nothing.
    _restart_scenario(tmp_path / "p")
    published, batches = run_once(spark, tmp_path / "p", tmp_path / "ck")
    assert published
    last = batches[-1][0]
    for name in (str(last), f".{last}.crc"):  # as if stopped right after publishing it
        (tmp_path / "ck" / "commits" / name).unlink(missing_ok=True)
    out = []
    q = start_query(spark, "segments", {"path": str(tmp_path / "p"), "cluster": "t"}, EngineConfig(cluster="t"),
                    AlertConfig("k:9092"), SinkSet(sinks=[out.extend]), str(tmp_path / "ck"),
                    trigger={"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None
    assert [p["batchId"] for p in q.recentProgress][:1] == [last]
    assert (tmp_path / "ck" / "commits" / str(last)).exists()
    assert out == []
