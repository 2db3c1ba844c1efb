"""One pairing rule (``udfs.pairing``): every place that pairs markers with data agrees with it.

For every partition of every simulator scenario, the open transactions and the last markers per
producer after a replay from the log start must agree between

* ``udfs.producer_state.PartitionState`` over the segment bytes (the reference: the product's
  partition replay);
* ``streaming.state_machine.ProducerState`` over the events ``streaming.normalize`` makes of
  the same bytes;
* the simulator's broker model (``streaming.simulate.broker_state.apply_batch``) replaying what
  it wrote, and its live state (what the broker held before any compaction);
* the test broker's own, independent pairing (``tests/kafka_fake_broker.py``, which follows
  ``ProducerAppendInfo.append`` and ignores empty control batches).

Plus the one case scenarios cannot contain: an empty control batch while a transaction is open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streaming.normalize import data_events
from streaming.simulate.broker_state import TXN_STATE_TOPIC, ProducerStateEntry, apply_batch
from streaming.simulate.encode import COMMIT, encode_batch, encode_empty_batch, encode_marker, encode_record
from streaming.simulate.scenarios import SCENARIOS, Scenario, write_scenario
from streaming.state_machine import EngineConfig, ProducerState
from tests.kafka_fake_broker import _PartitionLog
from udfs.model import CONTROL_COMMIT, CONTROL_EMPTY
from udfs.pairing import Step, marker_coordinator_epoch, pair
from udfs.producer_state import PartitionState
from udfs.record_batch import scan_batches

SMALL = {"random-mix": {"target_bytes": 2 << 20, "segment_bytes": 256 << 10}}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Scenario]:
    base = tmp_path_factory.mktemp("pairing")
    return {n: write_scenario(n, base / n, seed=3, **SMALL.get(n, {})) for n in SCENARIOS}


def _columns(part_dir: Path) -> dict[str, np.ndarray]:
    """The batch table of a partition directory, segments in offset order."""
    tables = [scan_batches(seg.read_bytes()).columns for seg in sorted(part_dir.glob("*.log"))]
    return {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}


def _reference(cols: dict[str, np.ndarray]) -> dict[int, tuple[int, int, int]]:
    """producer id -> (open first offset or -1, last marker offset, its coordinator epoch, the data
    epoch that marker closed or -1: detection.md §3.1 revision 3.1, bumped markers)."""
    st = PartitionState()
    st.apply(cols)
    return {pid: (e.txn_first_offset, e.last_marker_offset, e.coordinator_epoch, e.last_marker_closed_epoch)
            for pid, e in st.producers.items()}


def _state_machine(cols: dict[str, np.ndarray], topic: str, partition: int) -> dict[int, tuple[int, int, int]]:
    events = data_events(cols, topic=topic, partition=partition, source="test", cluster="c", event_time_ms=0)
    cfg = EngineConfig(cluster="c")
    out: dict[int, tuple[int, int, int]] = {}
    for pid, g in events.groupby("producer_id"):
        st = ProducerState(int(pid))
        for ev in g.sort_values("first_offset").to_dict("records"):
            ev = {k: (None if not isinstance(v, list | tuple) and pd.isna(v) else v) for k, v in ev.items()}
            st.apply({**ev, "event_time_ms": 0}, cfg)
        p = st.parts[f"{topic}\t{partition}"]
        lm = p["last_marker"] or {}
        # What the broker's entry holds: an empty control batch teaches no coordinator epoch, so it
        # is the highest one a COMMIT/ABORT taught (the state keeps it as max_marker_ce; the last
        # marker itself then says "unknown" for the verdict, detection.md §4 rule 2).
        out[int(pid)] = (
            p["open"]["first_offset"] if p["open"] else -1,
            lm.get("offset", -1),
            p["max_marker_ce"],
            lm["closed_epoch"] if lm.get("closed_epoch") is not None else -1,
        )
    return out


def _simulator(sc: Scenario, topic: str, partition: int) -> dict[int, ProducerStateEntry]:
    state: dict[int, ProducerStateEntry] = {}
    for b in sc.cluster.batches(topic, partition):
        apply_batch(state, b)
    return state


def _open(view: dict[int, Any], first: Any) -> dict[int, int]:
    return {pid: first(v) for pid, v in view.items() if first(v) >= 0}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_pairing_agrees_with_the_rule(written: dict[str, Scenario], name: str) -> None:
    sc = written[name]
    checked = 0
    for topic, partition in sc.cluster.partitions():
        part_dir = sc.root / f"{topic}-{partition}"
        if topic == TXN_STATE_TOPIC or not any(part_dir.glob("*.log")):
            continue
        cols = _columns(part_dir)
        if len(cols["base_offset"]) and int(cols["base_offset"][0]) > 0:
            # Retention deleted the log's head: its producer state lives in the newest snapshot,
            # which the pairing rule does not see (tests/test_snapshot_sources.py and the
            # scenario matrix cover that replay).
            continue
        ref = _reference(cols)
        where = f"{name} {topic}-{partition}"
        # the state machine: same open transactions, same last markers
        assert _state_machine(cols, topic, partition) == ref, where
        # the simulator's broker model, replayed over what is on disk and live
        sim = _simulator(sc, topic, partition)
        ref_open = _open(ref, lambda v: v[0])
        assert _open(sim, lambda e: e.txn_first_offset) == ref_open, where
        live = sc.cluster.producer_state(topic, partition)
        assert _open(live, lambda e: e.txn_first_offset) == ref_open, where
        for pid, (_first, marker_offset, ce, _closed) in ref.items():
            if marker_offset >= 0 and ce >= 0:
                assert sim[pid].coordinator_epoch == ce, (where, pid)
        # the test broker's independent implementation
        fake = _PartitionLog(topic, partition, part_dir).state(0, 0)[0]
        assert fake.open_transactions == ref_open, where
        checked += 1
    assert checked > 0


def _batch_table(raw: bytes) -> dict[str, np.ndarray]:
    return scan_batches(raw).columns


def test_empty_control_batch_closes_and_teaches_no_coordinator_epoch() -> None:
    """detection.md §1: data, COMMIT (coordinator epoch 5), data, then the cleaner's empty control
    batch: the second transaction is closed, the last marker is the empty one at offset 3, and
    the coordinator epoch stays the one the COMMIT taught. (The broker would leave it open on a
    replay, but the cleaner never leaves such a log: see udfs.pairing.)"""
    pid, epoch = 7, 2
    raw = (
        encode_batch(0, [encode_record(0, b"a")], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                     is_transactional=True)
        + encode_marker(1, pid, epoch, COMMIT, 5, 1_000, 0)
        + encode_batch(2, [encode_record(0, b"b")], producer_id=pid, producer_epoch=epoch, base_sequence=1,
                       is_transactional=True)
        + encode_empty_batch(3, max_timestamp=2_000, producer_id=pid, producer_epoch=epoch)
    )
    cols = _batch_table(raw)
    assert list(cols["control_type"]) == [-1, CONTROL_COMMIT, -1, CONTROL_EMPTY]
    # the empty batch closed the data of epoch 2 at offset 2
    assert _reference(cols) == {pid: (-1, 3, 5, 2)}
    assert _state_machine(cols, "t", 0) == {pid: (-1, 3, 5, 2)}


def test_rule_table() -> None:
    assert pair(False, transactional=True, control=False) is Step.OPEN
    assert pair(True, transactional=True, control=False) is Step.JOIN
    assert pair(True, transactional=True, control=True) is Step.CLOSE
    assert pair(False, transactional=True, control=True) is Step.CLOSE
    assert pair(True, transactional=False, control=False) is Step.IGNORE
    assert pair(False, transactional=True, control=False, producer_id=-1) is Step.IGNORE
    assert marker_coordinator_epoch("COMMIT", 4) == 4
    assert marker_coordinator_epoch(CONTROL_COMMIT, 0) == 0
    assert marker_coordinator_epoch("EMPTY", 4) is None
    assert marker_coordinator_epoch(CONTROL_EMPTY, 4) is None
    assert marker_coordinator_epoch("ABORT", -1) is None
    assert marker_coordinator_epoch("UNREADABLE", 3) is None


def test_last_marker_remembers_the_data_epoch_it_closed() -> None:
    """detection.md §3.1 revision 3.1: under TV2 (KIP-890, TransactionMetadata.prepareComplete)
    the marker's epoch is one above the data it closed (data 0, COMMIT 1; data 1, ABORT 2): the
    replay and the state machine both keep, for the last marker, the data epoch it closed."""
    pid = 9
    raw = (
        encode_batch(0, [encode_record(0, b"a")], producer_id=pid, producer_epoch=0, base_sequence=0,
                     is_transactional=True)
        + encode_marker(1, pid, 1, COMMIT, 4, 1_000, 0)
        + encode_batch(2, [encode_record(0, b"b")], producer_id=pid, producer_epoch=1, base_sequence=0,
                       is_transactional=True)
        + encode_marker(3, pid, 2, COMMIT, 4, 2_000, 0)
    )
    cols = _batch_table(raw)
    assert _reference(cols) == {pid: (-1, 3, 4, 1)}
    assert _state_machine(cols, "t", 0) == {pid: (-1, 3, 4, 1)}
    # a marker with nothing open before it closed nothing it can vouch for: -1
    lone = encode_marker(0, pid, 1, COMMIT, 4, 1_000, 0)
    assert _reference(_batch_table(lone)) == {pid: (-1, 0, 4, -1)}
    assert _state_machine(_batch_table(lone), "t", 0) == {pid: (-1, 0, 4, -1)}
