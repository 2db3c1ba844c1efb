"""Issue acceptance: bad rows injected into a scenario are quarantined with reasons by the
data-quality gate while the detection job keeps producing its alerts."""

from __future__ import annotations

import json

import pytest

from streaming.config import as_config, load
from streaming.runner import run_job
from streaming.simulate.encode import encode_batch
from streaming.simulate.scenarios import write_scenario
from streaming.sinks.jsonl import read_jsonl

pytestmark = pytest.mark.spark


def test_bad_rows_quarantined_while_alerts_still_fire(spark, tmp_path):
    sc = write_scenario("write-after-marker", tmp_path / "logs", seed=5)
    # A transactional batch whose baseOffset is negative: the CRC does not cover baseOffset, so
    # only the data contract can catch it (offsets non-negative).
    bad = sc.root / "bad-0"
    bad.mkdir()
    (bad / f"{0:020d}.log").write_bytes(encode_batch(-5, 2, producer_id=77, producer_epoch=0, base_sequence=0,
                                                     is_transactional=True, base_timestamp=sc.as_of_ms - 10,
                                                     max_timestamp=sc.as_of_ms - 10))
    cfg = load(None, env={})
    cfg["cluster"] = "q"
    cfg["streaming"]["checkpoint"] = str(tmp_path / "ck")
    cfg["sinks"].update(enabled=["jsonl"], jsonl_path=str(tmp_path / "alerts.jsonl"))
    cfg["quality"].update(enabled=True, engine="pandas", quarantine_path=str(tmp_path / "quarantine.jsonl"))
    assert run_job(as_config(cfg), source="segments", path=str(sc.root), once=True) == 0
    alerts = read_jsonl(str(tmp_path / "alerts.jsonl"))
    assert [(a["status"], a["cause"]) for a in alerts] == [("hanging", "write-after-marker")]
    quarantined = [json.loads(line) for line in open(tmp_path / "quarantine.jsonl")]
    assert quarantined, "the bad row was not quarantined"
    assert all(q["row"]["topic"] == "bad" for q in quarantined)
    # the span itself, and the partition's progress row whose high watermark derives from it
    assert {(q["row"]["kind"], q["row"]["first_offset"]) for q in quarantined} == {("data", -5), ("progress", None)}
    assert all(q["expectation"] and q["reason"] and "bad-0/" in q["source_position"] for q in quarantined)
