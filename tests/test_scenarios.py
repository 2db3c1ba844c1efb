"""Scenario writer: every scenario writes valid broker-shaped logs and sensible expectations.

The logs are checked with kafka-python's independent decoder (CRCs, records), the layout rules
of kafka-formats.md §1 (file names, offsets), and a tiny broker-style replay in this file that
lists the transactions still open at ``as_of_ms``: the ones older than the threshold must be
exactly the expected findings.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from streaming.simulate.broker_state import ScenarioError, java_hashmap_order, segment_name
from streaming.simulate.cluster_log import ClusterLog
from streaming.simulate.encode import ABORT, COMMIT
from streaming.simulate.scenarios import (
    DEFAULT_MAX_TIMEOUT_MS,
    DEFAULT_PADDING_MS,
    POSITIVE_SCENARIOS,
    SCENARIOS,
    Scenario,
    write_scenario,
)
from udfs.varint import crc32c

SYNTH = Path(__file__).parent / "fixtures" / "samples" / "synthetic"
SMALL = {"random-mix": {"target_bytes": 3 << 20, "segment_bytes": 256 << 10}}
FINDING_KEYS = {
    "status",
    "cause",
    "topic",
    "partition",
    "producer_id",
    "producer_epoch",
    "first_offset",
    "coordinator_epoch",
    "coordinator_epoch_source",
    "verified",
}
OPTIONAL_KEYS = {"data_deleted", "missing_txn_partitions", "from_files"}
CAUSES = {
    "late": {"markers-pending", "coordinator-stuck", "long-transaction", "prepared-2pc"},
    "hanging": {"coordinator-unaware", "coordinator-finished-without-partition", "write-after-marker",
                "exceeds-max-timeout"},
}


# --- independent reading helpers ----------------------------------------------------------------


def read_dir(part_dir: Path) -> list[tuple[str, object, list]]:
    """(segment file name, kafka-python batch, records) for every entry of a partition dir."""
    out = []
    for seg in sorted(part_dir.glob("*.log")):
        data = seg.read_bytes()
        recs = MemoryRecords(data)
        while recs.has_next():
            batch = recs.next_batch()
            assert batch.validate_crc(), f"{seg}: bad CRC at {batch.base_offset}"
            out.append((seg.name, batch, list(batch)))
        assert recs.valid_bytes() == len(data), f"{seg}: trailing bytes"
    return out


def txn_values(root: Path) -> list[tuple[str, bytes | None, int]]:
    """(transactional id, value, coordinator epoch) of every __transaction_state record."""
    out = []
    for d in sorted(root.glob("__transaction_state-*")):
        for _, batch, recs in read_dir(d):
            for r in recs:
                (n,) = struct.unpack_from(">h", r.key, 2)
                out.append((r.key[4 : 4 + n].decode(), r.value, batch.leader_epoch))
    return out


def newest_snapshot(part_dir: Path) -> tuple[int, dict[int, dict]] | None:
    """(offset, producer id → entry) of the partition's newest snapshot, read with struct."""
    snaps = sorted(part_dir.glob("*.snapshot"))
    if not snaps:
        return None
    data = snaps[-1].read_bytes()
    (count,) = struct.unpack_from(">i", data, 6)
    entries = {}
    for i in range(count):
        pid, epoch, _seq, _last, _delta, ts, coord, first = struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i)
        entries[pid] = {"epoch": epoch, "ts": ts, "coordinator_epoch": coord, "first": first}
    return int(snaps[-1].name[:20]), entries


def open_transactions(root: Path) -> dict[tuple[str, int, int], dict]:
    """Broker-style pairing (per partition, per producer id, in offset order) of data partitions:
    the transactions still open at the end, keyed by (topic, partition, producer id). As the
    broker loads it: the newest snapshot's open entries, then the batches at or after its offset."""
    result = {}
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name.startswith("__transaction_state"):
            continue
        topic, _, partition = d.name.rpartition("-")
        open_: dict[int, dict] = {}
        snap = newest_snapshot(d)
        start = -1
        if snap is not None:
            start = snap[0]
            for pid, e in snap[1].items():
                if e["first"] >= 0:
                    open_[pid] = {"first_offset": e["first"], "first_ts": e["ts"], "epoch": e["epoch"]}
        for _, b, _ in read_dir(d):
            if b.magic < 2 or b.producer_id < 0 or b.last_offset < start:
                continue
            if b.is_control_batch:
                open_.pop(b.producer_id, None)
            elif b.is_transactional:
                o = open_.setdefault(
                    b.producer_id,
                    {
                        "first_offset": b.base_offset,
                        "first_ts": b.max_timestamp if b.timestamp_type == 1 else b.first_timestamp,
                        "epoch": b.producer_epoch,
                    },
                )
                o["epoch"] = max(o["epoch"], b.producer_epoch)
        for pid, o in open_.items():
            result[(topic, int(partition), pid)] = o
    return result


def coordinator_timeouts(root: Path) -> dict[int, int]:
    """Producer id -> TransactionTimeoutMs from __transaction_state values (v0 and v1 share the
    first 17 bytes: version, pid, epoch, timeout, status)."""
    out = {}
    for _, value, _ in txn_values(root):
        if value is not None:
            _, pid, _, timeout = struct.unpack_from(">hqhi", value)
            out[pid] = timeout
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Scenario]:
    base = tmp_path_factory.mktemp("scenarios")
    return {name: write_scenario(name, base / name, seed=1, **SMALL.get(name, {})) for name in SCENARIOS}


# --- every scenario -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_logs_parse_and_are_broker_shaped(written: dict[str, Scenario], name: str) -> None:
    sc = written[name]
    assert sc.root.is_dir() and sc.as_of_ms > 0
    compacted = {f"{t}-{p}" for t, p in sc.cluster.compacted_partitions}
    dirs = [d for d in sc.root.iterdir() if d.is_dir()]
    assert any(d.name.startswith("__transaction_state-") for d in dirs)
    newest = -1
    for d in dirs:
        entries = read_dir(d)
        # A broker holds every __transaction_state partition, most of them never written to.
        assert entries or (d.name.startswith("__transaction_state-") and
                           [f.name for f in d.iterdir()] == ["00000000000000000000.log"]), d
        prev_last = -1
        first_in_seg: dict[str, int] = {}
        for seg, b, recs in entries:
            first_in_seg.setdefault(seg, b.base_offset)
            last = b.last_offset if b.magic >= 2 else b.base_offset
            assert b.base_offset > prev_last, f"{d.name}: offsets not increasing at {b.base_offset}"
            prev_last = last
            if b.magic >= 2:
                newest = max(newest, b.max_timestamp)
                if b.is_control_batch:
                    assert b.is_transactional and b.producer_id >= 0 and b.base_sequence == -1
                    assert len(recs) <= 1 and b.compression_type == 0
                if d.name.startswith("__transaction_state"):
                    assert b.producer_id == -1 and b.attributes & ~0x40 == 0
        for seg, first in first_in_seg.items():
            if d.name in compacted:
                # Kafka keeps a cleaned segment's name: it may be below its first batch now
                assert int(seg[:20]) <= first
            else:
                assert seg == segment_name(first), f"{d.name}/{seg} starts at {first}"
        for snap in d.glob("*.snapshot"):
            data = snap.read_bytes()
            version, crc, count = struct.unpack_from(">hIi", data)
            assert version == 1 and crc == crc32c(data[6:]) and len(data) == 10 + 46 * count
    assert newest == sc.as_of_ms


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_expected_findings(written: dict[str, Scenario], name: str) -> None:
    sc = written[name]
    assert bool(sc.expected) == (name in POSITIVE_SCENARIOS)
    timeouts = coordinator_timeouts(sc.root)
    open_ = open_transactions(sc.root)
    old = set()
    for (topic, partition, pid), o in open_.items():
        timeout = timeouts.get(pid, 0)
        # detection.md §3: a two-phase-commit transaction (KIP-939, timeout Integer.MAX_VALUE) is
        # measured against max_timeout_ms + padding_ms, as the broker's late-transaction metric does
        timeout = 0 if timeout == 2_147_483_647 else timeout
        threshold = max(DEFAULT_MAX_TIMEOUT_MS, timeout) + DEFAULT_PADDING_MS
        if sc.as_of_ms - o["first_ts"] > threshold:
            old.add((topic, partition, pid, o["first_offset"]))
    exp = {(e["topic"], e["partition"], e["producer_id"], e["first_offset"]) for e in sc.expected}
    assert exp == old, f"expected {exp}, open and old {old}"
    for e in sc.expected:
        assert FINDING_KEYS <= set(e) <= FINDING_KEYS | OPTIONAL_KEYS
        assert e["cause"] in CAUSES[e["status"]]
        assert e["verified"] is (e["cause"] != "exceeds-max-timeout")
        # what files alone prove may only be less (detection.md §0): never verified where the
        # broker-answered finding is not, and then exceeds-max-timeout is never verified either
        ff = {**e, **e.get("from_files", {})}
        assert set(e.get("from_files", {})) <= {"cause", "verified"} and ff["cause"] in CAUSES[e["status"]]
        assert not (ff["verified"] and not e["verified"]) and not (ff["verified"] and ff["cause"] == "exceeds-max-timeout")
        o = open_[(e["topic"], e["partition"], e["producer_id"])]
        assert e["producer_epoch"] >= o["epoch"]
        if sc.notes.get("hand_epochs"):
            continue  # not read from offset 0: the author's numbers are checked by the scenario tests below
        facts = sc.cluster.abort_params(e["topic"], e["partition"], e["producer_id"])
        assert e["producer_epoch"] == facts["producer_epoch"]
        assert e["coordinator_epoch"] == facts["coordinator_epoch"]
        assert e["coordinator_epoch_source"] == facts["coordinator_epoch_source"]


def test_registry_and_write_scenario(tmp_path: Path) -> None:
    assert POSITIVE_SCENARIOS <= set(SCENARIOS)
    with pytest.raises(KeyError):
        write_scenario("no-such-scenario", tmp_path / "x")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("x")
    with pytest.raises(ScenarioError):
        write_scenario("commit", tmp_path / "busy")
    # deterministic for a seed
    a = write_scenario("healthy-mix", tmp_path / "a", seed=5)
    b = write_scenario("healthy-mix", tmp_path / "b", seed=5)
    fa = sorted(p.relative_to(a.root) for p in a.root.rglob("*.*"))
    assert fa == sorted(p.relative_to(b.root) for p in b.root.rglob("*.*"))
    assert all((a.root / f).read_bytes() == (b.root / f).read_bytes() for f in fa)


# --- epochs per transaction version (kafka-formats.md §8.3) -------------------------------------


def partition_log(sc: Scenario, name: str) -> list[tuple]:
    """(kind, producer id, epoch, coordinator epoch) per batch of one partition."""
    out = []
    for _, b, recs in read_dir(sc.root / name):
        if b.is_control_batch:
            if not recs:
                out.append(("EMPTY", b.producer_id, b.producer_epoch, None))
                continue
            kind = {ABORT: "ABORT", COMMIT: "COMMIT"}[recs[0].type]
            out.append((kind, b.producer_id, b.producer_epoch, struct.unpack(">hi", recs[0].value)[1]))
        elif b.producer_id >= 0:
            out.append(("TXN" if b.is_transactional else "IDEM", b.producer_id, b.producer_epoch, None))
        else:
            out.append(("PLAIN", -1, -1, None))
    return out


def test_tv2_epoch_walk(written: dict[str, Scenario]) -> None:
    log = [(k, e) for k, _, e, _ in partition_log(written["tv2-epoch-walk"], "orders-0")]
    assert log == [
        ("TXN", 0),
        ("COMMIT", 1),
        ("TXN", 1),
        ("ABORT", 2),
        ("TXN", 2),
        ("COMMIT", 3),
        ("TXN", 5),
        ("COMMIT", 6),
    ]
    states = [
        (v[16], struct.unpack_from(">h", v, 10)[0])
        for t, v, _ in txn_values(written["tv2-epoch-walk"].root)
        if t == "tv2-app"
    ]
    # PrepareAbort (3) from CompleteCommit with epoch 5 and no markers: the empty TV2 abort
    assert (3, 5) in states and states[-1] == (4, 6)
    for t, v, _ in txn_values(written["tv2-epoch-walk"].root):
        if t == "tv2-app" and v[16] != 0:
            assert v[:2] == b"\x00\x01" and v.endswith(b"\x02\x02\x00\x02")  # ClientTransactionVersion 2


def test_pid_rotation(written: dict[str, Scenario]) -> None:
    log = partition_log(written["pid-rotation"], "orders-0")
    (p,) = {pid for _, pid, e, _ in log if e == 32764}
    rot = [(k, pid == p, e) for k, pid, e, _ in log]
    assert rot == [
        ("TXN", True, 32764),
        ("COMMIT", True, 32765),
        ("TXN", True, 32765),
        ("COMMIT", True, 32766),
        ("TXN", True, 32766),
        ("COMMIT", True, 32767),
        ("TXN", False, 0),
        ("COMMIT", False, 1),
    ]
    values = [v for t, v, _ in txn_values(written["pid-rotation"].root) if t == "rotating-app"]
    prepare = next(v for v in values if struct.unpack_from(">h", v, 10)[0] == 32767)
    new_pid = log[-1][1]
    assert struct.pack(">q", new_pid) in prepare[-20:]  # tag 1 NextProducerId
    complete = values[values.index(prepare) + 1]
    assert struct.unpack_from(">qh", complete, 2) == (new_pid, 0) and complete[16] == 4
    assert struct.pack(">q", p) in complete[-20:]  # tag 0 PreviousProducerId


def test_timeout_abort_and_fencing_bump(written: dict[str, Scenario]) -> None:
    log = partition_log(written["timeout-abort"], "events-1")
    assert [(k, e) for k, _, e, _ in log] == [("TXN", 0), ("ABORT", 1)]
    log = partition_log(written["fenced"], "ledger-0")
    assert [(k, e) for k, _, e, _ in log] == [("TXN", 0), ("ABORT", 1), ("TXN", 2), ("COMMIT", 2)]


def test_coordinator_failover_epochs(written: dict[str, Scenario]) -> None:
    sc = written["coordinator-failover"]
    assert [(k, ce) for k, _, _, ce in partition_log(sc, "orders-0")] == [
        ("TXN", None),
        ("COMMIT", 3),
        ("COMMIT", 4),
    ]
    epochs = [ce for t, _, ce in txn_values(sc.root) if t == "failover-app"]
    assert epochs == sorted(epochs) and set(epochs) == {3, 4}
    data_ple = [b.leader_epoch for _, b, _ in read_dir(sc.root / "orders-1")]
    assert data_ple[0] == 9 and data_ple[-1] == 10


def test_compaction_leaves_empty_control_batches(written: dict[str, Scenario]) -> None:
    sc = written["compacted-empty-control"]
    kinds = [k for k, *_ in partition_log(sc, "store-changelog-0")]
    assert kinds.count("EMPTY") == 3 and kinds[:3] == ["PLAIN", "EMPTY", "EMPTY"]
    for _, b, recs in read_dir(sc.root / "store-changelog-0"):
        if b.is_control_batch and not recs:
            assert b.size_in_bytes == 61 and b.first_timestamp == -1 and b.attributes == 0x30
    gone = [t for t, v, _ in txn_values(written["txn-state-compacted"].root) if v is None]
    assert gone == []  # the expired id's tombstone is gone after the delete horizon


def test_snapshot_reproduces_synthetic_vector(tmp_path: Path) -> None:
    """Rebuild the synthetic orders-0 partition with the low-level API: markers are byte-exact,
    data headers equal, and the producer snapshot at offset 8 is byte-identical to the sample."""
    spec = json.loads((SYNTH / "scenario_orders-0_expected.json").read_text())
    c = ClusterLog(tmp_path, 0)
    c.create_topic("orders", 1, leader_epoch=spec["partitionLeaderEpoch"])
    for b in spec["batches"]:
        c.now_ms = b["baseTimestamp"]
        if b["isControl"]:
            ctype = COMMIT if b["marker"] == "COMMIT" else ABORT
            c.append_marker("orders", 0, b["producerId"], b["producerEpoch"], ctype, b["coordinatorEpoch"])
        else:
            c.append_data(
                "orders",
                0,
                b["count"],
                producer_id=b["producerId"],
                producer_epoch=b["producerEpoch"],
                base_sequence=b["baseSequence"],
                transactional=b["isTransactional"],
                compressed=b["compression"] == "gzip",
                value_size=4 if b["baseOffset"] == 10 else 2,
            )  # value sizes of the sample ("a0".., "idem")
    c.flush()
    ours = (tmp_path / "orders-0" / segment_name(0)).read_bytes()
    real = (SYNTH / "scenario_orders-0_00000000000000000000.log").read_bytes()
    for b in spec["batches"]:
        pos = b["position"]
        if b["isControl"]:
            assert ours[pos : pos + b["size"]] == real[pos : pos + b["size"]]
        elif b["compression"] == "none":
            assert (
                ours[pos : pos + 17] == real[pos : pos + 17]
                and ours[pos + 21 : pos + 61] == real[pos + 21 : pos + 61]
            )
    snap = c.write_snapshot("orders", 0, 8)
    assert snap.read_bytes() == (SYNTH / "scenario_orders-0_00000000000000000008.snapshot").read_bytes()
    final = c.producer_state("orders", 0)
    for pid, e in spec["expected_final_producer_state"].items():
        st = final[int(pid)]
        assert (st.epoch, st.coordinator_epoch, st.last_seq, st.last_offset, st.timestamp) == (
            e["producerEpoch"],
            e["coordinatorEpoch"],
            e["lastSequence"],
            e["lastDataOffset"],
            e["lastTimestamp"],
        )
        assert st.txn_first_offset == (
            -1 if e["currentTxnFirstOffset"] is None else e["currentTxnFirstOffset"]
        )


def test_java_hashmap_order() -> None:
    assert java_hashmap_order([4002, 4000, 4001]) == [4000, 4001, 4002]
    assert java_hashmap_order([17, 1, 16]) == [16, 17, 1]  # buckets 0, 1, 1 in insertion order
    assert sorted(java_hashmap_order(list(range(100)))) == list(range(100))


# --- incremental writing and the simulated broker checks ----------------------------------------


def test_flush_appends_and_rolls(tmp_path: Path) -> None:
    c = ClusterLog(tmp_path, 1_000, segment_bytes=600)
    p = c.producer("inc", 0)
    p.begin()
    p.send("t", 0, 3)
    c.flush()
    seg0 = tmp_path / "t-0" / segment_name(0)
    size1 = seg0.stat().st_size
    p.commit()
    c.flush()
    assert seg0.stat().st_size == size1 + 78  # the marker was appended to the same file
    for _ in range(10):
        p.begin()
        p.send("t", 0, 2)
        p.commit()
    c.flush()
    segs = sorted((tmp_path / "t-0").glob("*.log"))
    assert len(segs) > 1 and all(s.stat().st_size <= 600 for s in segs)
    assert sum(1 for _ in read_dir(tmp_path / "t-0")) == 22
    txn_dir = tmp_path / f"__transaction_state-{c.txn_partition('inc')}"
    assert len(read_dir(txn_dir)) == 1 + 3 * 11


def test_broker_checks(tmp_path: Path) -> None:
    c = ClusterLog(tmp_path / "a", 0)
    old = c.producer("x", 0)
    old.begin()
    old.send("t", 0, 1)
    new = old.fence()
    with pytest.raises(ScenarioError):
        old.send("t", 0, 1)  # fenced instance
    with pytest.raises(ScenarioError):
        old.zombie_send("t", 0, 1)  # epoch 0 < 1 after the E+1 ABORT marker
    new.begin()
    new.send("t", 0, 1)
    with pytest.raises(ScenarioError):
        new.expire(force=True)  # never while a transaction is in flight
    with pytest.raises(ScenarioError):
        new.timeout_abort()  # not timed out yet
    new.commit(markers=[])
    with pytest.raises(ScenarioError):
        c.producer("x", 0)  # CONCURRENT_TRANSACTIONS while markers are pending
    c.write_markers("x")
    idem = c.idempotent_producer()
    idem.send("t", 0, 2)
    v = ClusterLog(tmp_path / "b", 0, partition_verification=True)
    q = v.producer("y", 0)
    q.begin()
    with pytest.raises(ScenarioError):
        q.send("t", 0, 1, add_partition=False)


def test_random_mix_reaches_target_size(tmp_path: Path) -> None:
    # Its speed is measured by bench/scenario_write.py, never asserted here.
    sc = write_scenario("random-mix", tmp_path / "rm", target_bytes=24 << 20, seed=3)
    written_bytes = sum(f.stat().st_size for f in sc.root.rglob("*.log"))
    assert written_bytes >= 24 << 20
    assert len(sc.expected) == 4


def test_compaction_before_delete_horizon_stamps_markers(tmp_path: Path) -> None:
    c = ClusterLog(tmp_path, 10_000)
    c.create_topic("cl", 1, compacted=True)
    p = c.producer("cp", 0)
    c.produce("cl", 0, 1)
    p.begin()
    p.send("cl", 0, 2)
    p.commit()
    c.roll("cl", 0)
    c.produce("cl", 0, 1)
    c.compact("cl", 0, delete_horizon_passed=False)
    entries = read_dir(tmp_path / "cl-0")
    marker = [(b, recs) for _, b, recs in entries if b.is_control_batch]
    ((b, (rec,)),) = marker
    assert b.attributes == 0x70 and b.first_timestamp > rec.timestamp and rec.commit
    assert [b.base_offset for _, b, _ in entries] == [0, 3, 4]
    with pytest.raises(ScenarioError):
        c.compact("nope", 0)


# --- issue 10: retention, restart, one broker's share, leader epoch without coordinator -------


def test_retention_restart_layout(written: dict[str, Scenario]) -> None:
    sc = written["retention-restart"]
    d = sc.root / "orders-0"
    start = sc.notes["log_start"]
    assert sorted(f.name for f in d.glob("*.log")) == [segment_name(start)]
    (snap,) = d.glob("*.snapshot")  # roll snapshots at or below the log start were deleted
    off, entries = newest_snapshot(d)
    assert off > start  # the newest snapshot lies after the first segment
    # Both zombies are open in the snapshot, with the coordinator epoch of their (deleted) COMMITs
    opens = sorted((e["first"], e["coordinator_epoch"]) for e in entries.values() if e["first"] >= 0)
    assert opens == [(6, 3), (7, 3)]
    assert all(e["first_offset"] < start for e in sc.expected)
    # nothing moved the log start inside a segment: the checkpoint has no entry
    assert (sc.root / "log-start-offset-checkpoint").read_text() == "0\n0\n"


def test_restart_keeps_checkpoint_and_deletes_snapshots_below_log_start(tmp_path: Path) -> None:
    c = ClusterLog(tmp_path, 0, segment_bytes=200, snapshot_on_roll=True)
    p = c.producer("r", 0)
    for _ in range(6):
        p.begin()
        p.send("t", 0, 1)
        p.commit()
    c.flush()
    bases = sorted(int(f.name[:20]) for f in (tmp_path / "t-0").glob("*.log"))
    assert len(bases) >= 3
    assert c.delete_segments_below("t", 0, bases[2]) == bases[2]
    c.delete_records("t", 0, bases[2] + 1)
    c.restart()
    snaps = sorted(int(f.name[:20]) for f in (tmp_path / "t-0").glob("*.snapshot"))
    assert snaps and all(s > bases[2] + 1 for s in snaps)  # truncateAndReload: none ≤ the log start
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == f"0\n1\nt 0 {bases[2] + 1}\n"


def test_partial_coordinator_view_layout(written: dict[str, Scenario]) -> None:
    sc = written["partial-coordinator-view"]
    present = sorted(int(d.name.rsplit("-", 1)[1]) for d in sc.root.glob("__transaction_state-*"))
    assert len(present) == 1
    for e in sc.expected:
        assert e["missing_txn_partitions"] == [n for n in range(50) if n not in present]
    assert not [t for t, _v, _e in txn_values(sc.root) if t == "pending-elsewhere"]


def test_txn_leader_epoch_bump_keeps_coordinator_epoch(written: dict[str, Scenario]) -> None:
    sc = written["txn-leader-epoch-bump"]
    epochs = [ce for t, _v, ce in txn_values(sc.root) if t == "reassigned-coordinator"]
    assert epochs[0] == 3 and epochs[-1] == 4  # the log's partitionLeaderEpoch went up
    markers = {ce for k, _pid, _e, ce in partition_log(sc, "orders-1") if k == "COMMIT"}
    assert markers == {3}  # ... the coordinator's markers did not
    (seg,) = (sc.root / "orders-0").glob("*.log")
    assert int(seg.name[:20]) == sc.expected[0]["first_offset"] > 0
    assert not list((sc.root / "orders-0").glob("*.snapshot"))
