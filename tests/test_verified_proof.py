"""Verified means proven (detection.md §0, revision 3; issue 19): what the *input* proves.

Each scenario is written as bytes by the scenario writer (``streaming.simulate``), damaged the way
real inputs are (a batch whose CRC fails, explicit files without the broker's checkpoint, only an
older segment, a lagging coordinator copy, a skewed clock, a snapshot above the log end, a
partition count that does not match the config), scanned with ``txnwatch scan``'s in-process
engine, and checked against verdicts, causes, reasons and epochs written by hand from Kafka's
behaviour (the Kafka method is named at each case). The same cases run over ``kafka-dump-log.sh``
text where the dump format can carry them (``isvalid: false``).

``unverified_reasons`` is read off the verdict the enrichment published (the alert field is
another change's): the test records each :meth:`Enricher.judge_row` result.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from streaming.alerts import Enricher
from streaming.cli import broker_end_offsets, main, scan_paths
from streaming.config import as_config, load
from streaming.simulate.cluster_log import ClusterLog
from streaming.simulate.scenarios import AGE_MS
from tests.dump_render import render_log_dir

EPOCH = 3  # the coordinator epoch (__transaction_state leader epoch) of every scenario here


# --- building inputs -------------------------------------------------------------------------------


def cluster(root: Path, **kw) -> ClusterLog:
    c = ClusterLog(root, coordinator_epoch=EPOCH, seed=1, **kw)
    c.create_topic("orders", 1, leader_epoch=0)
    return c


def tid_in(c: ClusterLog, partition: int, prefix: str) -> str:
    """A transactional id living in ``__transaction_state-<partition>`` (Utils.abs(hashCode) % n)."""
    i = 0
    while c.txn_partition(f"{prefix}-{i}") != partition:
        i += 1
    return f"{prefix}-{i}"


def tid_not_in(c: ClusterLog, partitions: set[int], prefix: str) -> str:
    i = 0
    while c.txn_partition(f"{prefix}-{i}") in partitions:
        i += 1
    return f"{prefix}-{i}"


def finish(c: ClusterLog, *, busy_partition: int | None = None, avoid: set[int] = frozenset()) -> int:
    """Age everything past the threshold (25 min > 15 + 5), then a last committed transaction as
    the clock (in ``busy_partition`` when given: that copy's newest record is then after every
    open transaction's first write), flush, and the broker's end-offset checkpoints. Returns the
    clock (newest timestamp)."""
    c.advance(AGE_MS)
    tid = tid_in(c, busy_partition, "busy") if busy_partition is not None else tid_not_in(c, set(avoid), "heartbeat")
    hb = c.producer(tid, 0)
    hb.begin()
    hb.send("heartbeat", 0, 1)
    hb.commit()
    c.flush()
    c.write_end_checkpoints()
    return c.max_timestamp


def batch_spans(path: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of every batch of a segment file (record-batch v2 framing,
    kafka-formats.md §2: baseOffset int64, batchLength int32 counted after those 12 bytes)."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append((pos, 12 + length, base))
        pos += 12 + length
    return out


def corrupt_batch(path: Path, index: int) -> tuple[int, int]:
    """Flip the last byte of batch ``index`` (inside the CRC-32C range, bytes 21.. of the batch):
    the stored CRC no longer matches, as after a torn write or a bit flip. Returns (position,
    base offset) of the damaged batch."""
    pos, size, base = batch_spans(path)[index]
    raw = bytearray(path.read_bytes())
    raw[pos + size - 1] ^= 0xFF
    path.write_bytes(bytes(raw))
    return pos, base


def seg0(root: Path, name: str) -> Path:
    return root / name / "00000000000000000000.log"


def dumps(root: Path, out: Path, *checkpoints: str) -> list[str]:
    """kafka-dump-log.sh text of the log dir (3.9 layout), plus the named checkpoint files."""
    return render_log_dir(root, out, "3.9") + [str(root / c) for c in checkpoints]


@pytest.fixture
def judged(monkeypatch):
    """Every verdict the enrichment judged, by alert key (the last one wins)."""
    seen: dict[str, object] = {}
    orig = Enricher.judge_row

    def record(self, row, now_ms):
        j = orig(self, row, now_ms)
        seen[row["key"]] = j.verdict
        return j

    monkeypatch.setattr(Enricher, "judge_row", record)
    return seen


def scan(paths, as_of=None, **kw):
    cfg = load(None, env={})
    cfg["cluster"] = "proof"
    return scan_paths([str(p) for p in paths], as_config(cfg), as_of_ms=as_of, engine="local", **kw)


def brief(findings, judged):
    """(status, cause, verified, reasons as a set, producer epoch, coordinator epoch, its source)."""
    return [(f["status"], f["cause"], f["verified"], frozenset(judged[f["key"]].unverified_reasons),
             f["producer_epoch"], f["coordinator_epoch"], f["coordinator_epoch_source"]) for f in findings]


# --- 1. intact ---------------------------------------------------------------------------------------


def late_write_after_commit(root: Path) -> tuple[ClusterLog, int, int, int]:
    """P commits on orders-0 (COMMIT marker, coordinator epoch 3), then a late write of the same
    epoch lands after the marker (KAFKA-9144). A busy producer in P's coordinator partition keeps
    that copy's newest record after the late write. Returns (cluster, P's partition k, the late
    write's offset, the clock)."""
    c = cluster(root)
    p = c.producer("late-writer", 0)
    k = p.txn_partition
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    late = p.zombie_send("orders", 0, 1)
    # the busy producer writes Ongoing / PrepareCommit / CompleteCommit into __transaction_state-k
    return c, k, late, finish(c, busy_partition=k)


def test_late_write_baseline_is_verified(tmp_path, judged):
    # Control case: nothing damaged. ProducerStateManager keeps the late batch open; the
    # coordinator's CompleteCommit lists orders-0 but O came after its marker of the same epoch:
    # write-after-marker, verified; E 0, C = the marker's coordinator epoch (last-marker).
    c, _k, late, now = late_write_after_commit(tmp_path / "logs")
    findings, gaps = scan([c.root], now)
    assert gaps == []
    assert [f["first_offset"] for f in findings] == [late]
    assert brief(findings, judged) == [("hanging", "write-after-marker", True, frozenset(), 0, EPOCH, "last-marker")]


def test_txn_state_batch_failing_its_crc_is_not_believed(tmp_path, judged):
    # The busy producer's last record in __transaction_state-k is damaged. A broker never applies
    # such a batch (LogSegment.recover -> RecordBatch.ensureValid truncates the log there), so
    # __transaction_state-k is incomplete from that offset on: P's own coordinator partition is
    # not proven read, no coordinator view for P (exceeds-max-timeout, detection.md §3 rule 2),
    # unverified with crc-gap and coordinator-view-incomplete; E 0, C 3 from P's marker.
    c, k, late, now = late_write_after_commit(tmp_path / "logs")
    pos, base = corrupt_batch(seg0(c.root, f"__transaction_state-{k}"), -1)
    findings, gaps = scan([c.root], now)
    assert [(g["source_position"], g["first_offset"]) for g in gaps] == [
        (f"{c.root}/__transaction_state-{k}/00000000000000000000.log@{pos}", base)]
    assert "CRC-32C mismatch" in gaps[0]["reason"]
    assert [f["first_offset"] for f in findings] == [late]
    assert brief(findings, judged) == [("hanging", "exceeds-max-timeout", False,
                                        frozenset({"crc-gap", "coordinator-view-incomplete"}), 0, EPOCH, "last-marker")]
    assert findings[0]["missing_txn_partitions"] == [k]


def test_txn_state_batch_failing_its_crc_in_dump_text(tmp_path, judged):
    # The same input as kafka-dump-log.sh text: the damaged batch prints "isvalid: false"
    # (DumpLogSegments prints batch.isValid); its record is not believed either.
    c, k, late, now = late_write_after_commit(tmp_path / "logs")
    _pos, base = corrupt_batch(seg0(c.root, f"__transaction_state-{k}"), -1)
    files = dumps(c.root, tmp_path / "dumps", "replication-offset-checkpoint")
    assert "isvalid: false" in Path(tmp_path / "dumps" / f"__transaction_state-{k}.txt").read_text()
    findings, gaps = scan(files, now)
    assert [(g["first_offset"], "isvalid: false" in g["reason"]) for g in gaps] == [(base, True)]
    assert [f["first_offset"] for f in findings] == [late]
    assert brief(findings, judged) == [("hanging", "exceeds-max-timeout", False,
                                        frozenset({"crc-gap", "coordinator-view-incomplete"}), 0, EPOCH, "last-marker")]


def committed(root: Path) -> tuple[ClusterLog, int, int, int]:
    """P commits two records on orders-0; the COMMIT marker is the partition's last batch."""
    c = cluster(root)
    p = c.producer("committer", 0)
    p.begin()
    first = p.send("orders", 0, 2)
    p.commit()
    now = finish(c, busy_partition=p.txn_partition)
    return c, p.txn_partition, first, now


@pytest.mark.parametrize("form", ["segments", "dump text"])
def test_marker_failing_its_crc_closes_nothing(tmp_path, judged, form):
    # The COMMIT marker on orders-0 is damaged. It is never applied (RecordBatch.ensureValid), so
    # the producer state keeps P's transaction open (ProducerStateManager: only a control batch
    # that is read closes it). The coordinator's record is CompleteCommit: the finding that
    # remains is "finished without the partition", and it rests on a batch not believed: crc-gap,
    # unverified. E 0; no marker believed, tp read from 0: C 0 (log-start).
    c, _k, first, now = committed(tmp_path / "logs")
    pos, base = corrupt_batch(seg0(c.root, "orders-0"), -1)
    paths = [c.root] if form == "segments" else dumps(c.root, tmp_path / "dumps", "replication-offset-checkpoint")
    findings, gaps = scan(paths, now)
    assert [g["first_offset"] for g in gaps] == [base]
    assert [f["first_offset"] for f in findings] == [first]
    assert brief(findings, judged) == [("hanging", "coordinator-finished-without-partition", False,
                                        frozenset({"crc-gap"}), 0, 0, "log-start")]


def test_intact_commit_has_no_finding(tmp_path, judged):
    c, _k, _first, now = committed(tmp_path / "logs")
    findings, gaps = scan([c.root], now)
    assert (findings, gaps) == ([], [])


# --- 2. complete: the data partition's end -----------------------------------------------------------


@pytest.mark.parametrize(("checkpoint", "verified"), [
    (None, False),  # explicit dumps: nothing corroborates that the last one is the newest segment
    ("replication-offset-checkpoint", True),  # ReplicaManager.checkpointHighWatermarks
    ("recovery-point-offset-checkpoint", True),  # LogManager.checkpointRecoveryOffsetsInDir
])
def test_dump_text_end_is_proven_only_by_the_brokers_checkpoint(tmp_path, judged, checkpoint, verified):
    c, _k, late, now = late_write_after_commit(tmp_path / "logs")
    files = dumps(c.root, tmp_path / "dumps", *([checkpoint] if checkpoint else []))
    findings, gaps = scan(files, now)
    assert gaps == []
    reasons = frozenset() if verified else frozenset({"newest-segment-not-proven"})
    assert brief(findings, judged) == [("hanging", "write-after-marker", verified, reasons, 0, EPOCH, "last-marker")]
    assert findings[0]["first_offset"] == late


def test_explicit_segment_files_need_the_checkpoint_a_directory_does_not(tmp_path, judged):
    # The same log given as a directory (the broker's own listing: its newest segment is there)
    # is verified; the same .log files named one by one are not, until the checkpoint is given.
    c, _k, _late, now = late_write_after_commit(tmp_path / "logs")
    files = sorted(str(p) for p in c.root.rglob("*.log"))
    findings, _ = scan(files, now)
    assert [(f["verified"], judged[f["key"]].unverified_reasons) for f in findings] == [
        (False, ("newest-segment-not-proven",))]
    findings, _ = scan([*files, c.root / "replication-offset-checkpoint"], now)
    assert [f["verified"] for f in findings] == [True]
    findings, _ = scan([c.root], now)
    assert [f["verified"] for f in findings] == [True]


def test_only_an_older_segment_is_not_the_end(tmp_path, judged):
    # orders-0 rolls after the late write and a committed transaction follows in the new
    # segment. Given only the first segment (and the checkpoint, which names the real end), the
    # read ends before the partition's end: a marker that closes O could lie in what is missing.
    c = cluster(tmp_path / "logs")
    p = c.producer("late-writer", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    late = p.zombie_send("orders", 0, 1)
    c.roll("orders", 0)
    q = c.producer("other", 0)
    q.begin()
    q.send("orders", 0, 1)
    q.commit()
    now = finish(c, busy_partition=p.txn_partition)
    older = seg0(c.root, "orders-0")
    others = [p_ for p_ in c.root.rglob("*.log") if p_.parent.name != "orders-0"]
    findings, _ = scan([older, *others, c.root / "replication-offset-checkpoint"], now)
    assert [(f["first_offset"], f["verified"], judged[f["key"]].unverified_reasons) for f in findings] == [
        (late, False, ("newest-segment-not-proven",))]


# --- 2. complete: the coordinator view -----------------------------------------------------------------


def test_txn_state_partition_beyond_the_configured_count_stops_the_scan(tmp_path, capsys):
    # The cluster has 51 __transaction_state partitions; the config says 50 (the default). A view
    # "complete" over 0..49 would prove nothing: the scan stops naming both numbers, exit 1 (the
    # usage/input error code of txnwatch scan), no traceback.
    c = ClusterLog(tmp_path / "logs", coordinator_epoch=EPOCH, txn_partitions=51)
    c.create_topic("orders", 1)
    p = c.producer(tid_in(c, 50, "app"), 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    c.flush()
    for paths in ([str(c.root)], render_log_dir(c.root, tmp_path / "dumps", "3.9")):
        capsys.readouterr()
        rc = main(["scan", "--engine", "local", *paths])
        err = capsys.readouterr().err
        assert rc == 1
        assert "__transaction_state-50" in err and "txn_state_partitions = 50" in err and "Traceback" not in err
    conf = tmp_path / "n51.toml"
    conf.write_text("[coordinator]\ntxn_state_partitions = 51\n")
    assert main(["scan", "--engine", "local", "--config", str(conf), str(c.root)]) == 0


def test_lagging_coordinator_copy_proves_nothing(tmp_path, judged):
    # P committed a first transaction on orders-0, then began a second one there: the coordinator
    # wrote Ongoing(orders-0) (AddPartitionsToTxn), then the batch. The copy of P's coordinator
    # partition given lags behind the leader: it ends before that Ongoing record. Read alone it
    # says CompleteCommit, and P's previous event on orders-0 is its marker of the same epoch:
    # "write-after-marker" - but its newest record is older than O's first write, so it may be a
    # lagging replica (detection.md §0, revision 3.1): coordinator-copy-behind, unverified.
    c = cluster(tmp_path / "logs")
    p = c.producer("slow-app", 0)
    k = p.txn_partition
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    c.advance(1000)
    p.begin()
    first = p.send("orders", 0, 1)
    now = finish(c, avoid={k})
    full = tmp_path / "full"
    import shutil

    shutil.copytree(c.root, full)
    path = seg0(c.root, f"__transaction_state-{k}")
    pos, _size, _base = batch_spans(path)[-1]  # the Ongoing record of the second transaction
    path.write_bytes(path.read_bytes()[:pos])
    findings, gaps = scan([c.root], now)
    assert gaps == []
    assert [f["first_offset"] for f in findings] == [first]
    assert brief(findings, judged) == [("hanging", "write-after-marker", False,
                                        frozenset({"coordinator-copy-behind"}), 0, EPOCH, "last-marker")]
    # the leader's real end (ListOffsets, scan --bootstrap-server) is past the copy's: still behind
    from tests.kafka_fake_broker import FakeKafkaBroker

    with FakeKafkaBroker(full) as b:
        findings, _ = scan([c.root], now, end_offsets=_asker(b))
    assert brief(findings, judged)[0][:4] == ("hanging", "write-after-marker", False,
                                              frozenset({"coordinator-copy-behind"}))


def _asker(broker):
    cfg = load(None, env={})
    cfg["kafka"]["bootstrap_servers"] = broker.bootstrap_servers
    return broker_end_offsets(as_config(cfg))


def test_list_offsets_corroborates_dump_ends_and_current_copies(tmp_path, judged):
    # Dump text without any checkpoint is unverified (newest-segment-not-proven); with
    # scan --bootstrap-server the broker's ListOffsets high watermarks equal where every dump
    # ends (data and coordinator partitions): the ends are proven and the copies current.
    from tests.kafka_fake_broker import FakeKafkaBroker

    c, _k, late, now = late_write_after_commit(tmp_path / "logs")
    files = dumps(c.root, tmp_path / "dumps")
    findings, _ = scan(files, now)
    assert [f["verified"] for f in findings] == [False]
    with FakeKafkaBroker(c.root) as b:
        findings, gaps = scan(files, now, end_offsets=_asker(b))
    assert gaps == []
    assert brief(findings, judged) == [("hanging", "write-after-marker", True, frozenset(), 0, EPOCH, "last-marker")]
    assert findings[0]["first_offset"] == late


def test_unreachable_broker_proves_nothing_and_does_not_fail_the_scan(tmp_path, judged):
    c, _k, _late, now = late_write_after_commit(tmp_path / "logs")
    files = dumps(c.root, tmp_path / "dumps")
    cfg = load(None, env={})
    cfg["kafka"]["bootstrap_servers"] = "127.0.0.1:1"  # nothing listens there
    findings, _ = scan(files, now, end_offsets=broker_end_offsets(as_config(cfg)))
    assert [(f["verified"], judged[f["key"]].unverified_reasons) for f in findings] == [
        (False, ("newest-segment-not-proven",))]


def test_empty_coordinator_copies_cannot_prove_a_producer_unknown(tmp_path, judged):
    # Nothing maps P (its id expired and compaction removed every record): any partition could
    # have held its id, and most copies are empty - a partition no id ever used and a replica
    # that fetched nothing look the same on disk (revision 3.1). Files alone: coordinator-unaware
    # over empty copies is unverified (coordinator-copy-empty). ListOffsets answering that every
    # copy ends where it was read (0 for the empty ones) makes them current: verified.
    from tests.kafka_fake_broker import FakeKafkaBroker

    c = cluster(tmp_path / "logs")
    gone = c.producer("gone-app", 0)
    gone.begin()
    gone.send("orders", 0, 1)
    gone.commit()
    zf = gone.zombie_send("orders", 0, 1)
    c.advance(8 * 24 * 3600 * 1000)  # past transactional.id.expiration.ms (7 days)
    c.expire("gone-app")
    c.roll("__transaction_state", gone.txn_partition)
    busy = c.producer(tid_in(c, gone.txn_partition, "busy"), 0)
    busy.begin()
    busy.send("orders", 0, 1)
    busy.commit()
    c.compact("__transaction_state", gone.txn_partition, delete_horizon_passed=True)
    now = finish(c, busy_partition=gone.txn_partition)
    findings, _ = scan([c.root], now)
    assert [f["first_offset"] for f in findings] == [zf]
    (b,) = brief(findings, judged)
    assert b[:3] == ("hanging", "coordinator-unaware", False) and "coordinator-copy-empty" in b[3]
    with FakeKafkaBroker(c.root) as broker:
        findings, _ = scan([c.root], now, end_offsets=_asker(broker))
    # no coordinator maps P and every copy is proven current: coordinator-unaware, verified; the
    # epoch is P's last marker on orders-0 (its commit before the late write: rule 2, last-marker)
    assert brief(findings, judged) == [("hanging", "coordinator-unaware", True, frozenset(), 0, EPOCH, "last-marker")]


# --- 3. clocks only downgrade ---------------------------------------------------------------------


def test_one_skewed_clock_never_becomes_now(tmp_path, judged):
    # A young transaction (10 min open at the real time) and one producer whose clock runs 3 h
    # ahead writing to another partition. Its timestamp is more than the tolerance (1 h) ahead of
    # the newest timestamp of every other partition: an outlier, never the clock (§2). The young
    # transaction stays open (10 min < 15 + 5 min): no finding. (Before: 3 h 10 min, "hanging".)
    c = cluster(tmp_path / "logs")
    c.create_topic("clicks", 1)
    young = c.producer("young-app", 0)
    young.begin()
    young.send("orders", 0, 1)
    c.advance(10 * 60_000)
    skewed = c.producer("skewed-app", 0, clock_skew_ms=3 * 3600_000)
    skewed.begin()
    skewed.send("clicks", 0, 1)
    skewed.commit()
    c.flush()
    c.write_end_checkpoints()
    findings, _ = scan([c.root])
    assert findings == []
    findings, _ = scan(dumps(c.root, tmp_path / "dumps", "replication-offset-checkpoint"))
    assert findings == []


def test_a_finding_resting_on_an_outlier_timestamp_is_unverified(tmp_path, judged):
    # P's late write after its marker opens O; 25 min later a second batch of O comes from an
    # instance whose clock runs 2 h ahead. orders-0's newest timestamp is an outlier (more than
    # 1 h ahead of every other partition), so the clock is the heartbeat's; O's last write lies
    # ahead of it: clock-skew, unverified (a clock may take proof away, never give it).
    c = cluster(tmp_path / "logs")
    p = c.producer("late-writer", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    late = p.zombie_send("orders", 0, 1)
    c.advance(AGE_MS)
    p.clock_skew_ms = 2 * 3600_000
    p.zombie_send("orders", 0, 1)
    p.clock_skew_ms = 0
    finish(c, busy_partition=p.txn_partition)
    findings, _ = scan([c.root])
    assert [f["first_offset"] for f in findings] == [late]
    (b,) = brief(findings, judged)
    assert b[2] is False and "clock-skew" in b[3] and findings[0]["clock_skew"] is True


# --- 4. snapshots and retention ----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["segments", "files"])
def test_snapshot_above_the_log_end_is_ignored(tmp_path, judged, form):
    # P commits on orders-0. A snapshot taken while P's transaction was open, named for an offset
    # above the log end (a leftover of a log truncated later), would say P is still open and
    # make every batch below it preview only. ProducerStateManager.truncateAndReload deletes
    # snapshots above the log end before loading: it is ignored (a gap names it), no finding.
    c, _k, first, now = committed(tmp_path / "logs")
    end = c.write_snapshot("orders", 0, first + 2)  # P open at first (its data batch applied, not the marker)
    above = end.with_name(f"{1000:020d}.snapshot")
    end.rename(above)
    paths = [c.root] if form == "segments" else sorted(str(p) for p in c.root.rglob("*.*") if p.is_file())
    findings, gaps = scan(paths, now)
    assert findings == []
    assert [("above the log end" in g["reason"], str(g["source_position"]).endswith(above.name)) for g in gaps] == [
        (True, True)]


def test_retention_without_a_snapshot_leaves_the_start_unproven(tmp_path, judged):
    # A zombie batch opens O right after a roll; retention deletes the segment before it (with
    # P's marker) and there is no snapshot: nothing read says O did not begin in the deleted
    # segment (the broker's ProducerStateEntry.currentTxnFirstOffset could be lower), so the
    # printed start offset is not proven: start-offset-not-proven. With the clean-shutdown
    # snapshot at the log end (ProducerStateManager.takeSnapshot), O's start is P's entry's.
    c = cluster(tmp_path / "logs")
    p = c.producer("zombie-app", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    c.roll("orders", 0)
    first = p.zombie_send("orders", 0, 1)
    c.delete_segments_below("orders", 0, first)
    now = finish(c, busy_partition=p.txn_partition)
    findings, _ = scan([c.root], now)
    assert [(f["first_offset"], f["verified"], judged[f["key"]].unverified_reasons) for f in findings] == [
        (first, False, ("start-offset-not-proven",))]
    c.write_snapshot("orders", 0)
    findings, _ = scan([c.root], now)
    assert [(f["first_offset"], f["verified"], judged[f["key"]].unverified_reasons) for f in findings] == [
        (first, True, ())]


# --- 5. every published verdict was judged with a proof -------------------------------------------


def test_the_enrichment_never_publishes_a_verdict_judged_without_proof(tmp_path, monkeypatch):
    import streaming.alerts as alerts

    calls = []
    orig = alerts.judge

    def spy(*args, **kw):
        calls.append(kw.get("proof"))
        return orig(*args, **kw)

    monkeypatch.setattr(alerts, "judge", spy)
    c, _k, _late, now = late_write_after_commit(tmp_path / "logs")
    findings, _ = scan([c.root], now)
    assert findings and calls and all(p is not None for p in calls)
