"""``scan --engine spark`` session settings (issue 23 item 2): how many state (shuffle)
partitions a scan's temporary checkpoint gets. No Spark is started: the session factory is
replaced by one that records the settings it is given.

Spark's local master syntax (``SparkContext.createTaskScheduler``: ``local`` = 1 thread,
``local[N]``, ``local[*]`` = the JVM's available processors, ``local[N,F]`` = N threads with F
task failures allowed) gives the task slots of a local run.
"""

from __future__ import annotations

import pytest

import streaming.spark_session as spark_session
from streaming import cli
from streaming.config import Config


@pytest.mark.parametrize(("master", "slots"), [
    ("local", 1), ("local[2]", 2), ("local[3,2]", 3), ("local[*]", "cpu"),
    ("spark://host:7077", None), ("yarn", None),
])
def test_local_cores_reads_the_task_slots_of_a_local_master(master, slots, monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(cli.os, "cpu_count", lambda: 7)
    assert cli.local_cores(master) == (7 if slots == "cpu" else slots)


def test_under_spark_submit_the_master_is_not_read(monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    assert cli.local_cores("local[2]") is None


def _session_conf(monkeypatch, paths, master):
    got = {}

    def fake(**kw):
        got.update(kw)
        return "session"

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(spark_session, "spark_session", fake)
    cfg = Config()
    assert cfg.streaming.shuffle_partitions == 4  # the default the expectations below start from
    assert cli.scan_session(cfg, paths, master=master) == "session"
    return got["conf"]["spark.sql.shuffle.partitions"]


def test_a_large_scan_gets_one_state_partition_per_core_at_most(tmp_path, monkeypatch):
    big = tmp_path / "big.log"
    with open(big, "wb") as f:  # sparse: its size is what counts (SCAN_ONE_PARTITION_BYTES)
        f.truncate(cli.SCAN_ONE_PARTITION_BYTES + 1)
    assert _session_conf(monkeypatch, [str(big)], "local[2]") == "2"
    assert _session_conf(monkeypatch, [str(big)], "local[8]") == "4"  # never more than configured
    assert _session_conf(monkeypatch, [str(big)], "spark://host:7077") == "4"


def test_a_small_scan_keeps_one_state_partition(tmp_path, monkeypatch):
    small = tmp_path / "small.log"
    small.write_bytes(b"x")
    assert _session_conf(monkeypatch, [str(small)], "local[2]") == "1"


def test_read_groups_weigh_coordinator_bytes_heavier():
    """segments.pack cuts the planned reads into contiguous groups of about equal read cost; a
    byte of __transaction_state (records decoded whole) counts TXN_STATE_BYTE_WEIGHT (3) data
    bytes (headers only). 20 coordinator bytes then weigh as much as both 30-byte data reads
    together: the coordinator partition gets a task of its own, where plain bytes (20 + 30 vs 30)
    put a data read with it."""
    from streaming.sources.log_layout import Chunk
    from streaming.sources.segments import TXN_STATE_BYTE_WEIGHT, SegmentsPartition, pack

    assert TXN_STATE_BYTE_WEIGHT == 3

    def part(name: str, size: int) -> SegmentsPartition:
        path = f"/logs/{name}"
        return SegmentsPartition(path, [Chunk(0, f"{path}/00000000000000000000.log", 0, size)], None, [0, size], 0)

    parts = [part("__transaction_state-0", 20), part("a-0", 30), part("b-0", 30)]
    groups = pack(parts, 2)
    assert [[p.part_path for p in g.parts] for g in groups] == [
        ["/logs/__transaction_state-0"], ["/logs/a-0", "/logs/b-0"]]
