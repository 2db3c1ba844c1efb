"""Every named scenario of the scenario writer through the whole Spark pipeline (``scan``):
exactly the expected findings (status, cause, producer id and epoch, first offset, coordinator
epoch and its source, verified; data_deleted / missing partitions where the scenario names them)
and nothing else; negative scenarios produce no findings. Late findings carry their coordinator
epoch and source too (informational, issue 10 rule 5), never a command.

The issue-10 scenarios also run over their ``kafka-dump-log.sh`` text (segments and snapshot
dumps) and through the streaming job in small micro-batches (the seed snapshot chosen at the first
read must hold for every later read), and an incident-shaped input (one dumped segment plus the
partition's newest snapshot dump lying after it) gives the legacy command with the snapshot's
coordinator epoch."""

from __future__ import annotations

import json
import struct

import jsonschema
import pytest

from streaming.alerts import AlertConfig, Enricher
from streaming.cli import scan_paths
from streaming.config import as_config, engine_config, load
from streaming.pipeline import SinkSet, start_query
from streaming.simulate.scenarios import POSITIVE_SCENARIOS, SCENARIOS, write_scenario
from tests.conftest import ROOT
from tests.dump_render import render_log_dir
from udfs.partitioning import txn_state_partition

pytestmark = pytest.mark.spark
SCHEMA = json.loads((ROOT / "streaming" / "alert.schema.json").read_text())
FIELDS = ("status", "cause", "topic", "partition", "producer_id", "producer_epoch", "first_offset",
          "coordinator_epoch", "coordinator_epoch_source", "verified")


ISSUE10 = ("partial-coordinator-view", "retention-restart", "txn-leader-epoch-bump", "write-after-older-marker")
# detection.md §4: every source a legacy command may come from (exact or erring low).
LEGACY_SOURCES = {"describe-producers", "last-marker", "snapshot", "log-start", "producer-last-marker",
                  "all-coordinators-max"}


def project(f, extra=()):
    return {k: f.get(k) for k in (*FIELDS, *extra)}


def expected_rows(sc):
    """The scenario's findings as a scan of its files sees them: with each finding's
    ``from_files`` (what the files alone prove, detection.md §0) applied."""
    files = [{k: v for k, v in {**e, **e.get("from_files", {})}.items() if k != "from_files"} for e in sc.expected]
    extra = sorted({k for e in files for k in e} - set(FIELDS))
    return extra, sorted((project(e, extra) for e in files), key=_key)


def check_commands(findings):
    for f in findings:
        if f["status"] == "hanging":
            assert f["abort_command_new"].endswith(f"--start-offset {f['first_offset']}")
            if f["coordinator_epoch"] is None:
                assert f["abort_command_legacy"] is None and f["coordinator_epoch_source"] == "unknown"
            else:
                assert f["coordinator_epoch_source"] in LEGACY_SOURCES
                assert f["abort_command_legacy"].endswith(
                    f"--producer-id {f['producer_id']} --producer-epoch {f['producer_epoch']} "
                    f"--coordinator-epoch {f['coordinator_epoch']}")
        else:
            assert f["abort_command_new"] is None and f["abort_command_legacy"] is None


def _key(r):
    return (r["topic"], r["partition"], r["first_offset"], r["producer_id"])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_findings(spark, tmp_path, name):
    params = {"target_bytes": 2_000_000} if name == "random-mix" else {}
    sc = write_scenario(name, tmp_path / "logs", seed=11, **params)
    cfg = load(None, env={})
    cfg["cluster"] = "matrix"
    findings, gaps = scan_paths([str(sc.root)], as_config(cfg), as_of_ms=sc.as_of_ms, spark=spark)
    for f in findings:
        jsonschema.validate(f, SCHEMA)
    assert gaps == []
    extra, want = expected_rows(sc)
    got = sorted((project(f, extra) for f in findings), key=_key)
    assert got == want
    assert bool(want) == (name in POSITIVE_SCENARIOS)
    check_commands(findings)
    check_invariants(sc, findings)


def coordinator_of(root):
    """producer id → (transactional id, its __transaction_state partition, present in the input?),
    from the coordinator records on disk (read with struct, not with txnwatch's decoder)."""
    from tests.test_scenarios import txn_values

    present = {int(d.name.rsplit("-", 1)[1]) for d in root.glob("__transaction_state-*")}
    out = {}
    for tid, value, _ple in txn_values(root):
        if value is not None:
            (pid,) = struct.unpack_from(">q", value, 2)
            n = txn_state_partition(tid, 50)
            out[pid] = (tid, n, n in present)
    return out


def check_invariants(sc, findings):
    """Issue 10 "done when": no verified finding about a producer the input cannot prove unknown,
    and no legacy command whose coordinator epoch could exceed what P's coordinator uses."""
    coords = coordinator_of(sc.root)
    present = {int(d.name.rsplit("-", 1)[1]) for d in sc.root.glob("__transaction_state-*")}
    for f in findings:
        known = coords.get(f["producer_id"])
        if f["verified"]:
            # verified needs P's own coordinator partition in the input, or all 50 partitions
            assert (known is not None and known[2]) or len(present) == 50, f
        if f["abort_command_legacy"] is not None and known is not None:
            assert f["coordinator_epoch"] <= sc.cluster.coordinator_epoch(known[1]), f


@pytest.mark.parametrize("name", ISSUE10)
def test_issue10_scenarios_over_dump_text(spark, tmp_path, name):
    """Every issue-10 rule over kafka-dump-log.sh text of the same log dir (segments with their
    "Log starting offset" headers, snapshot dumps, the checkpoint files given alongside)."""
    sc = write_scenario(name, tmp_path / "logs", seed=11)
    files = render_log_dir(sc.root, tmp_path / "dumps", "3.9")
    if (sc.root / "log-start-offset-checkpoint").exists():
        files.append(str(sc.root / "log-start-offset-checkpoint"))
    # the broker's high-watermark checkpoint proves where each dumped log ends (detection.md §0);
    # without it every finding of explicit dumps is unverified (newest-segment-not-proven)
    files.append(str(sc.root / "replication-offset-checkpoint"))
    cfg = load(None, env={})
    cfg["cluster"] = "matrix"
    findings, gaps = scan_paths(files, as_config(cfg), as_of_ms=sc.as_of_ms, spark=spark)
    assert gaps == []
    extra, want = expected_rows(sc)
    assert sorted((project(f, extra) for f in findings), key=_key) == want
    check_commands(findings)
    check_invariants(sc, findings)


@pytest.mark.parametrize(("name", "trigger_bytes"), [
    ("retention-restart", 200), ("txn-leader-epoch-bump", 200), ("partial-coordinator-view", 4000),
    ("write-after-older-marker", 4000), ("markers-pending", 4000)])
def test_issue10_scenarios_through_the_streaming_job_in_small_batches(spark, tmp_path, name, trigger_bytes):
    """Every issue-10 rule through the streaming job, the segments source read in many
    micro-batches: the snapshot chosen at the partition's first read seeds it and stamps every
    later read; the findings (epochs and their sources included) are the scan's expectations."""
    sc = write_scenario(name, tmp_path / "logs", seed=11)
    cfg = load(None, env={})
    cfg["cluster"] = "matrix"
    ck = tmp_path / "ck"
    opts = {"path": str(sc.root), "cluster": "matrix", "as_of": str(sc.as_of_ms),
            "max_bytes_per_trigger": str(trigger_bytes)}
    q = start_query(spark, "segments", opts, engine_config(as_config(cfg), coordinator_available=True),
                    AlertConfig(bootstrap_servers=None), SinkSet(), str(ck), trigger={"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None
    findings = [e["alert"] for e in Enricher(AlertConfig(bootstrap_servers=None),
                                             str(ck / "txnwatch-sink.json")).active.values()]
    extra, want = expected_rows(sc)
    assert sorted((project(f, extra) for f in findings), key=_key) == want


@pytest.mark.parametrize("generation", ["2.4", "3.1", "3.9", "4.3"])
def test_incident_one_segment_and_the_newest_snapshot_dump(spark, tmp_path, generation):
    """Issue 10 rule 2, the incident shape: kafka-dump-log.sh of one segment of orders-0 plus the
    partition's newest .snapshot dump, which lies after the segment; no coordinator input. Both
    zombies are open in the snapshot (started below the segment: data_deleted); no coordinator
    view: exceeds-max-timeout, unverified, and the legacy command carries the snapshot's exact
    coordinator epoch 3 (never the log-start 0 of a partition that does not start at 0)."""
    sc = write_scenario("retention-restart", tmp_path / "logs", seed=11)
    seg = sc.notes["segment_with_later_batch"]
    render_log_dir(sc.root, tmp_path / "all", generation, only={"orders-0": [seg]})
    files = [str(tmp_path / "all" / "orders-0.txt")]
    cfg = load(None, env={})
    cfg["cluster"] = "matrix"
    findings, gaps = scan_paths(files, as_config(cfg), as_of_ms=sc.as_of_ms, spark=spark)
    assert gaps == []
    q, p = sorted(sc.expected, key=lambda e: e["first_offset"])
    got = sorted((f["producer_id"], f["first_offset"], f["status"], f["cause"], f["verified"], f["producer_epoch"],
                   f["coordinator_epoch"], f["coordinator_epoch_source"], f["data_deleted"]) for f in findings)
    assert got == sorted([
        (q["producer_id"], 6, "hanging", "exceeds-max-timeout", False, 0, 3, "snapshot", True),
        (p["producer_id"], 7, "hanging", "exceeds-max-timeout", False, 0, 3, "snapshot", True),
    ])
    check_commands(findings)
