"""``udfs.producer_state.PartitionState.apply`` (per producer id, array reductions) against the
per-batch reference below (one ``udfs.pairing.pair`` step per batch, the shape the replay had
before it was vectorized): the same entries over every scenario's partitions, split into chunks
at random points (a replay continues across reads), and over random batch tables."""

from __future__ import annotations

import random

import numpy as np
import pytest

from streaming.simulate.scenarios import SCENARIOS, write_scenario
from udfs.model import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY
from udfs.pairing import Step, marker_coordinator_epoch, pair
from udfs.producer_state import PartitionState, ProducerEntry
from udfs.record_batch import scan_batches


def reference_apply(state: PartitionState, cols: dict, valid: np.ndarray | None = None) -> None:
    txn = cols["is_transactional"] & (cols["producer_id"] >= 0)
    if valid is not None:
        txn &= valid
    for i in np.flatnonzero(txn).tolist():
        pid = int(cols["producer_id"][i])
        e = state.producers.setdefault(pid, ProducerEntry(pid))
        step = pair(e.txn_first_offset >= 0, transactional=True, control=bool(cols["is_control"][i]), producer_id=pid)
        if step is Step.CLOSE:
            e.txn_first_offset = -1
            e.last_marker_offset = int(cols["base_offset"][i])
            ce = marker_coordinator_epoch(int(cols["control_type"][i]), int(cols["coordinator_epoch"][i]))
            if ce is not None:
                e.coordinator_epoch = ce
            if int(cols["control_type"][i]) == CONTROL_EMPTY:
                continue
        elif step is Step.OPEN:
            e.txn_first_offset = int(cols["base_offset"][i])
            e.txn_first_ts = int(cols["first_timestamp"][i])
            e.txn_last_offset = int(cols["last_offset"][i])
        elif step is Step.JOIN:
            e.txn_last_offset = int(cols["last_offset"][i])
        e.producer_epoch = max(e.producer_epoch, int(cols["producer_epoch"][i]))
        e.last_timestamp = int(cols["max_timestamp"][i])
    if len(cols["last_offset"]):
        state.next_offset = int(cols["last_offset"][-1]) + 1


def facts(state: PartitionState) -> dict:
    """What a replay means: open transactions (with first write and last offset), epochs, last
    marker and timestamp; a closed transaction's leftover first-write fields mean nothing."""
    out = {}
    for pid, e in state.producers.items():
        open_ = e.txn_first_offset >= 0
        out[pid] = (e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.txn_first_offset,
                    e.txn_first_ts if open_ else None, e.txn_last_offset if open_ else None, e.last_marker_offset)
    return out, state.next_offset


def chunks(cols: dict, rng: random.Random) -> list[dict]:
    n = len(cols["base_offset"])
    cuts = sorted({0, n, *(rng.randrange(n + 1) for _ in range(3))})
    return [{k: v[a:b] for k, v in cols.items()} for a, b in zip(cuts, cuts[1:], strict=False)]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_vectorized_replay_equals_the_per_batch_reference_on_every_scenario(tmp_path, name):
    params = {"target_bytes": 300_000} if name == "random-mix" else {}
    sc = write_scenario(name, tmp_path / "logs", seed=5, **params)
    rng = random.Random(name)
    checked = 0
    for seg_dir in sorted(p for p in sc.root.iterdir() if p.is_dir() and not p.name.startswith("__")):
        fast, ref = PartitionState(), PartitionState()
        for seg in sorted(seg_dir.glob("*.log")):
            cols = scan_batches(seg.read_bytes()).columns
            for part in chunks(cols, rng):
                valid = part["crc_valid"] != 0
                fast.apply(part, valid)
                reference_apply(ref, part, valid)
                checked += len(part["base_offset"])
        assert facts(fast) == facts(ref), seg_dir.name
    assert checked


def random_table(rng: random.Random, n: int) -> dict:
    base = np.arange(n, dtype=np.int64) * 2
    ctrl = np.array([rng.random() < 0.35 for _ in range(n)], dtype=bool)
    ctype = np.where(ctrl, np.array([rng.choice((CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY)) for _ in range(n)], dtype=np.int16), -1)
    cols = {
        "base_offset": base, "last_offset": base + 1,
        "producer_id": np.array([rng.choice((-1, 1, 2, 3)) for _ in range(n)], dtype=np.int64),
        "producer_epoch": np.array([rng.randrange(4) for _ in range(n)], dtype=np.int16),
        "is_transactional": np.array([rng.random() < 0.9 for _ in range(n)], dtype=bool),
        "is_control": ctrl, "control_type": ctype.astype(np.int16),
        "coordinator_epoch": np.array([rng.choice((-1, 0, 3, 7)) for _ in range(n)], dtype=np.int32),
        "first_timestamp": base * 10, "max_timestamp": base * 10 + 5,
        "crc_valid": np.array([rng.random() < 0.95 for _ in range(n)], dtype=np.int8),
    }
    return cols


def test_vectorized_replay_equals_the_reference_on_random_tables():
    rng = random.Random(12)
    for _ in range(300):
        fast, ref = PartitionState(), PartitionState()
        for part in chunks(random_table(rng, rng.randrange(0, 40)), rng) or [random_table(rng, 0)]:
            valid = part["crc_valid"] != 0
            fast.apply(part, valid)
            reference_apply(ref, part, valid)
        assert facts(fast) == facts(ref)
