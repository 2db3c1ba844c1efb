"""Property (issue 19): whatever subset of a broker's files is given, in whatever order, a finding
is never more proven than the whole log directory makes it (detection.md §0).

One cluster log with several findings (a late write after a marker, a stuck Ongoing transaction, a
partition never added, closed transactions as noise) and small segments, so that every partition,
``__transaction_state`` included, has several. Each case gives a random subset of the
``__transaction_state`` partitions, of each partition's segments and snapshots, and of the
broker's checkpoint files, shuffled, as explicit files. A finding verified there must be verified
by the whole directory too, with the same status and cause: dropping input may only take proof
away. (A seeded random loop: hypothesis is not installed in the venv.)
"""

from __future__ import annotations

import random

import pytest

from streaming.cli import scan_paths
from streaming.config import as_config, load
from streaming.simulate.cluster_log import ClusterLog
from streaming.simulate.scenarios import AGE_MS

CASES = 24


def _tid(c: ClusterLog, partition: int, prefix: str) -> str:
    i = 0
    while c.txn_partition(f"{prefix}-{i}") != partition:
        i += 1
    return f"{prefix}-{i}"


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("subsets") / "logs"
    c = ClusterLog(root, coordinator_epoch=3, seed=5, segment_bytes=900, snapshot_on_roll=True)
    c.create_topic("orders", 2, leader_epoch=1)
    noise = [c.producer(f"noise-{i}", i % 3) for i in range(4)]

    def churn(rounds: int) -> None:
        for r in range(rounds):
            for i, p in enumerate(noise):
                p.begin()
                p.send("orders", (i + r) % 2, 2)
                p.commit()

    churn(3)
    # transactions whose marker lies in the next segment: a subset may hold the data without it
    for i, p in enumerate(noise):
        p.begin()
        p.send("orders", i % 2, 2)
        c.roll("orders", i % 2)
        p.commit()
    late = c.producer("late-writer", 0)  # write-after-marker on orders-0
    late.begin()
    late.send("orders", 0, 1)
    late.commit()
    late.zombie_send("orders", 0, 1)
    churn(2)
    stuck = c.producer("stuck-app", 1)  # Ongoing, never timed out: late, coordinator-stuck
    stuck.begin()
    stuck.send("orders", 1, 1)
    forgot = c.producer("forgot-app", 0)  # orders-1 never added: coordinator-finished-without-partition
    forgot.begin()
    forgot.send("orders", 0, 1)
    forgot.send("orders", 1, 1, add_partition=False)
    forgot.commit()
    # forgot-app's records end a __transaction_state segment: a subset may hold only the next one
    c.roll("__transaction_state", forgot.txn_partition)
    churn(2)
    c.advance(AGE_MS)
    # later records in the coordinator partitions used, so no copy lags the open transactions -
    # except stuck-app's: its copy's newest record (Ongoing) predates its batch, unverified (§0)
    for k in sorted({p.txn_partition for p in (late, forgot, *noise)} - {stuck.txn_partition}):
        b = c.producer(_tid(c, k, "busy"), 0)
        b.begin()
        b.send("orders", 0, 1)
        b.commit()
    c.restart()  # clean shutdown: a snapshot at each log end, log-start-offset-checkpoint
    c.write_end_checkpoints()
    return c.root, c.max_timestamp


def _scan(paths, as_of):
    cfg = load(None, env={})
    cfg["cluster"] = "subsets"
    findings, _gaps = scan_paths([str(p) for p in paths], as_config(cfg), as_of_ms=as_of, engine="local")
    return {f["key"]: f for f in findings}


def test_no_subset_of_the_input_is_more_proven_than_the_whole(log_dir):
    root, as_of = log_dir
    full = _scan([root], as_of)
    # the whole directory proves some findings and not others (the property is not vacuous)
    assert {f["verified"] for f in full.values()} == {True, False}
    rng = random.Random(19)
    parts = sorted(d for d in root.iterdir() if d.is_dir())
    checkpoints = sorted(p for p in root.iterdir() if p.is_file())
    verified_seen = 0
    for case in range(CASES):
        paths = []
        for d in parts:
            if d.name.startswith("__transaction_state") and rng.random() < 0.15:
                continue  # this broker does not host that coordinator partition
            files = sorted(d.iterdir())
            keep_all = rng.random() < 0.4
            paths += [f for f in files if keep_all or rng.random() < (0.3 if f.suffix == ".snapshot" else 0.7)]
        paths += [p for p in checkpoints if rng.random() < 0.6]
        rng.shuffle(paths)
        got = _scan(paths, as_of)
        for key, f in got.items():
            if not f["verified"]:
                continue
            verified_seen += 1
            whole = full.get(key)
            assert whole is not None and whole["verified"], (case, key, f["cause"], sorted(map(str, paths)))
            assert (f["status"], f["cause"]) == (whole["status"], whole["cause"]), (case, key)
    assert verified_seen  # some subsets still prove findings (the property is exercised both ways)
