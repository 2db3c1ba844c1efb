"""Newest-snapshot semantics of every file input (detection.md §1), without Spark: the seed is the
newest readable snapshot wherever it lies, a corrupt one is a gap and the next newest is used,
rows carry ``snapshot_offset``, and the log start comes from the first segment, the
``log-start-offset-checkpoint`` file or the dump's ``Starting offset``."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.simulate.scenarios import write_scenario
from streaming.sources.files import read_files
from streaming.sources.logdir import list_partitions, plan_partition
from streaming.sources.segments import read_range
from tests.dump_render import render_log_dir
from udfs.checkpoint import parse_log_start_checkpoint


def _logdir_events(root: Path, name: str):
    (part,) = [p for p in list_partitions(str(root)) if p.name == name]
    plan = plan_partition(part, None)
    return read_range(part, plan.chunks, start=None, end=plan.end, cluster="c", clock_ms=1,
                      seed_offset=plan.seed_offset, txn_partition_count=50), plan


@pytest.fixture(scope="module")
def retained(tmp_path_factory):
    return write_scenario("retention-restart", tmp_path_factory.mktemp("r") / "logs", seed=1)


def test_logdir_seeds_from_the_newest_snapshot_after_the_first_segment(retained):
    ev, plan = _logdir_events(retained.root, "orders-0")
    start = retained.notes["log_start"]
    assert plan.seed_offset > start
    snap = ev[ev["kind"] == "snapshot"]
    assert set(snap["snapshot_offset"]) == {plan.seed_offset}
    opens = sorted(zip(snap["first_offset"].dropna(), snap.loc[snap["first_offset"].notna(), "coordinator_epoch"],
                       strict=True))
    assert opens == [(6, 3), (7, 3)]
    rows = ev[ev["kind"].isin(["data", "marker", "progress"])]
    assert set(rows["snapshot_offset"]) == {plan.seed_offset}
    # spans never straddle the snapshot: every data row lies wholly below or at/after it
    data = ev[ev["kind"] == "data"]
    assert ((data["last_offset"] < plan.seed_offset) | (data["first_offset"] >= plan.seed_offset)).all()
    (prog,) = ev[ev["kind"] == "progress"].to_dict("records")
    assert prog["log_start_offset"] == start and prog["read_from_zero"] is False
    assert prog["lso"] == start  # the deleted transactions pin the LSO at the log start


def test_corrupt_newest_snapshot_is_a_gap_and_the_next_newest_seeds(tmp_path):
    sc = write_scenario("healthy-mix", tmp_path / "logs", seed=2)
    part_dir = sc.root / "orders-0"
    snaps = sorted(part_dir.glob("*.snapshot"))
    assert len(snaps) >= 2
    raw = bytearray(snaps[-1].read_bytes())
    raw[-1] ^= 0xFF  # CRC-32C no longer matches
    snaps[-1].write_bytes(bytes(raw))
    ev, plan = _logdir_events(sc.root, "orders-0")
    assert plan.seed_offset == int(snaps[-2].name[:20])
    (gap,) = ev[ev["kind"] == "gap"].to_dict("records")
    assert gap["source_position"] == f"orders-0/{snaps[-1].name}" and "CRC-32C mismatch" in gap["reason"]
    files = read_files([str(p) for p in sorted(part_dir.iterdir())], cluster="c")
    assert set(files.loc[files["kind"] == "snapshot", "snapshot_offset"]) == {plan.seed_offset}
    assert files.loc[files["kind"] == "gap", "source_position"].tolist() == [str(snaps[-1])]


def test_dump_text_one_segment_and_the_newest_snapshot(retained, tmp_path):
    seg = retained.notes["segment_with_later_batch"]
    (text,) = [f for f in render_log_dir(retained.root, tmp_path / "d", "3.2", only={"orders-0": [seg]})
               if f.endswith("orders-0.txt")]
    ev = read_files([text], cluster="c")
    assert (ev["kind"] == "gap").sum() == 0
    (prog,) = ev[ev["kind"] == "progress"].to_dict("records")
    snap_off = int(ev.loc[ev["kind"] == "snapshot", "snapshot_offset"].iloc[0])
    assert snap_off > seg and prog["snapshot_offset"] == snap_off
    assert prog["log_start_offset"] == seg and prog["read_from_zero"] is False  # "Starting offset: <seg>"


def test_snapshot_dump_without_its_path_is_a_gap(retained, tmp_path):
    (text,) = [f for f in render_log_dir(retained.root, tmp_path / "d", "3.9")
               if f.endswith("orders-0.txt")]
    body = Path(text).read_text()
    snap_part = body[body.index("Dumping /var/lib/kafka/data/orders-0/") :].split("Dumping ")[-1]
    lines = snap_part.splitlines()[1:]  # entries without their "Dumping <path>" line
    loose = tmp_path / "loose.txt"
    loose.write_text("\n".join(lines) + "\n")
    ev = read_files([str(loose)], cluster="c", topic="orders", partition=0)
    assert ev["kind"].tolist() == ["gap"] and "without its offset" in ev["reason"].iloc[0]


def test_checkpoint_file_raises_the_log_start_and_rejects_bad_files(retained, tmp_path):
    ck = tmp_path / "log-start-offset-checkpoint"
    start = retained.notes["log_start"]
    ck.write_text(f"0\n1\norders 0 {start + 2}\n")
    files = [str(p) for p in sorted((retained.root / "orders-0").iterdir())] + [str(ck)]
    ev = read_files(files, cluster="c")
    (prog,) = ev[ev["kind"] == "progress"].to_dict("records")
    assert prog["log_start_offset"] == start + 2
    assert parse_log_start_checkpoint("0\n2\nt 0 5\n") == ({}, "log-start-offset-checkpoint: line 2 announces 2 "
                                                            "entries, the file holds 1")
    assert parse_log_start_checkpoint("1\n0\n")[1].endswith("unknown checkpoint version 1 (expected 0)")
    assert parse_log_start_checkpoint("0\n1\nt x 5\n")[1].startswith("log-start-offset-checkpoint line 3")
    assert parse_log_start_checkpoint("") == ({}, None)


def test_txn_state_progress_carries_the_partition_count(retained):
    ev, _ = _logdir_events(retained.root, sorted(p.name for p in list_partitions(str(retained.root))
                                                 if p.is_txn_state)[0])
    (prog,) = ev[ev["kind"] == "progress"].to_dict("records")
    assert prog["txn_partition_count"] == 50 and prog["read_from_zero"] is True
