"""Every named scenario of the scenario writer through the whole Spark pipeline (``scan``):
exactly the expected findings (status, cause, producer id and epoch, first offset, coordinator
epoch and its source, verified) and nothing else; negative scenarios produce no findings."""

from __future__ import annotations

import json

import jsonschema
import pytest

from streaming.cli import scan_paths
from streaming.config import load
from streaming.simulate.scenarios import POSITIVE_SCENARIOS, SCENARIOS, write_scenario
from tests.conftest import ROOT

pytestmark = pytest.mark.spark
SCHEMA = json.loads((ROOT / "streaming" / "alert.schema.json").read_text())
FIELDS = ("status", "cause", "topic", "partition", "producer_id", "producer_epoch", "first_offset",
          "coordinator_epoch", "coordinator_epoch_source", "verified")


def project(f):
    row = {k: f[k] for k in FIELDS}
    if row["status"] == "late":  # late findings never carry abort parameters
        row["coordinator_epoch"] = row["coordinator_epoch_source"] = None
    return row


def _key(r):
    return (r["topic"], r["partition"], r["first_offset"], r["producer_id"])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_findings(spark, tmp_path, name):
    params = {"target_bytes": 2_000_000} if name == "random-mix" else {}
    sc = write_scenario(name, tmp_path / "logs", seed=11, **params)
    cfg = load(None, env={})
    cfg["cluster"] = "matrix"
    findings, gaps = scan_paths([str(sc.root)], cfg, as_of_ms=sc.as_of_ms, spark=spark)
    for f in findings:
        jsonschema.validate(f, SCHEMA)
    assert gaps == []
    got = sorted((project(f) for f in findings), key=_key)
    want = sorted((project(e) for e in sc.expected), key=_key)
    assert got == want
    assert bool(want) == (name in POSITIVE_SCENARIOS)
    for f in findings:
        if f["status"] == "hanging":
            assert f["abort_command_new"].endswith(f"--start-offset {f['first_offset']}")
            assert f["abort_command_legacy"].endswith(
                f"--producer-id {f['producer_id']} --producer-epoch {f['producer_epoch']} "
                f"--coordinator-epoch {f['coordinator_epoch']}")
        else:
            assert f["abort_command_new"] is None and f["abort_command_legacy"] is None
