"""The in-process engine's log-dir read with a fixed clock (``SegmentsBatchReader.read_in_turn``,
issue 23 item 2): each partition planned, then read at once, before the next is planned.

What it must give is what the batch reader's two steps give (``partitions()`` plans every
partition, then ``read()`` reads the packed groups): the same rows in the same order, every row
stamped with the fixed clock (``as_of``, detection.md §2), one progress row per partition
directory read (a log dir holds one directory per topic-partition, ``LogManager.loadLogs``,
listed in name order by ``log_layout.list_partitions``), and the scenario's own findings.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from streaming.alerts import AlertConfig, Enricher
from streaming.local_engine import read_source, run_scan
from streaming.pipeline import SinkSet
from streaming.simulate.scenarios import write_scenario
from streaming.sources.segments import SegmentsBatchReader
from streaming.state_machine import EngineConfig
from tests.scenario_truth import expected_findings, projected


def _planned_then_read(opts: dict[str, str]) -> pa.Table:
    reader = SegmentsBatchReader(opts)
    return pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)])


@pytest.mark.parametrize("name", ["commit", "markers-pending", "txn-state-compacted", "random-mix"])
def test_read_in_turn_gives_the_planned_reads_rows_in_their_order(tmp_path, name):
    params = {"target_bytes": 300_000} if name == "random-mix" else {}
    sc = write_scenario(name, tmp_path / "logs", seed=7, **params)
    opts = {"path": str(sc.root), "as_of": str(sc.as_of_ms)}
    in_turn = SegmentsBatchReader(opts).read_in_turn()
    assert in_turn is not None
    got = pa.Table.from_batches(list(in_turn))
    assert got.num_rows > 0
    assert got.equals(_planned_then_read(opts))
    # the fixed clock on every row (detection.md §2: as_of replaces the newest timestamp read)
    times = pc.unique(got.column("event_time").cast(pa.int64())).to_pylist()
    assert times == [sc.as_of_ms * 1000]
    # one progress row per partition directory, in name order (LogManager.loadLogs: one dir per
    # topic-partition)
    dirs = sorted(p.name for p in sc.root.iterdir() if p.is_dir())
    progress = got.filter(pc.equal(got.column("kind"), "progress"))
    assert [f"{t}-{p}" for t, p in zip(progress.column("topic").to_pylist(), progress.column("partition").to_pylist(),
                                       strict=True)] == dirs


def test_without_a_fixed_clock_the_reader_plans_every_partition_first(tmp_path):
    # the clock is then the newest timestamp of all partitions (detection.md §2): not known
    # before every partition is planned, so there is no read in turn
    sc = write_scenario("commit", tmp_path / "logs", seed=7)
    assert SegmentsBatchReader({"path": str(sc.root)}).read_in_turn() is None


def test_the_local_engine_reading_in_turn_finds_the_scenarios_findings(tmp_path):
    sc = write_scenario("markers-pending", tmp_path / "logs", seed=7)
    enricher = Enricher(AlertConfig())
    run_scan(read_source(SegmentsBatchReader({"path": str(sc.root), "as_of": str(sc.as_of_ms)})),
             EngineConfig(cluster="r"), enricher, SinkSet())
    want = expected_findings(sc, files=True)
    assert want and projected(a["alert"] for a in enricher.active.values()) == want


def test_the_in_process_read_keeps_no_replay_memo_and_a_worker_read_does(tmp_path):
    # the memo serves a worker's next micro-batch on the same partition (a read that starts where
    # this one ended); the in-process engine reads each partition once, from its start
    from streaming.sources import logdir
    from streaming.sources.log_layout import list_files, list_partitions

    sc = write_scenario("commit", tmp_path / "logs", seed=7)
    paths = {p.path for p in list_partitions(str(sc.root))}
    read_source(SegmentsBatchReader({"path": str(sc.root), "as_of": str(sc.as_of_ms)}))
    assert paths and not paths & set(logdir._MEMO)
    part = next(p for p in list_partitions(str(sc.root)) if not p.is_txn_state)
    plan = logdir.plan_partition(part, None)
    logdir.read_partition(list_files(part), plan.chunks, start=None, end=plan.end)
    assert logdir._MEMO[part.path][0] == plan.end
