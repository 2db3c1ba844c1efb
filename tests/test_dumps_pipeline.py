"""The log-dump fallback end to end: dump text of several generations and the binary segments of
the same scenario give the same alerts, and both the scenario's own expected findings; real posted dumps give their ground-truth findings; the
drop-directory stream picks files up once, only when complete."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from streaming.alerts import AlertConfig
from streaming.cli import scan_paths
from streaming.config import as_config, engine_config, load
from streaming.pipeline import SinkSet, start_query
from streaming.simulate.scenarios import write_scenario
from streaming.sources.files import read_files
from streaming.sources.logdir import list_partitions, segments
from tests.conftest import SAMPLES
from tests.dump_render import render, render_log_dir
from tests.scenario_truth import expected_findings, projected
from tests.streaming_wait import BatchLog, wait_caught_up
from udfs.txn_log import decode_txn_log_segment

pytestmark = pytest.mark.spark
THREADS = SAMPLES / "public-threads"


def cfg():
    c = load(None, env={})
    c["cluster"] = "d"
    c["kafka"]["bootstrap_servers"] = "k:9092"
    return as_config(c)


def render_dir(root, out_dir, generation):
    """kafka-dump-log.sh output of every segment of a log dir, one text file per partition."""
    return render_log_dir(root, out_dir, generation, snapshots=False)


def comparable(findings):
    """Findings without what depends on the input's form: where they were read, and the
    coordinator record's TransactionStartTimestampMs, which dump text before 4.1 does not print
    (the evidence then says -1: unknown, or the bound the records give: ``start_exact`` false and
    ``prev_final_ts``, detection.md §3.1), nor the v1 tagged ClientTransactionVersion (None)."""
    out = []
    for f in findings:
        f = {k: v for k, v in f.items() if k not in ("input", "verify_hint")}
        rec = (f.get("evidence") or {}).get("coordinator_record")
        if rec is not None:
            f["evidence"] = dict(f["evidence"], coordinator_record={k: v for k, v in rec.items() if k not in (
                "start_ts", "start_exact", "prev_final_ts", "client_txn_version")})
        out.append(f)
    return sorted(out, key=lambda f: f["key"])


@pytest.mark.parametrize("generation", ["2.4", "3.3", "4.4"])
@pytest.mark.parametrize("scenario", ["write-after-marker", "partition-never-added", "markers-pending"])
def test_dump_text_and_binary_segments_give_identical_alerts(spark, tmp_path, scenario, generation):
    sc = write_scenario(scenario, tmp_path / "logs", seed=5)
    binary, _ = scan_paths([str(sc.root)], cfg(), as_of_ms=sc.as_of_ms, spark=spark)
    # with the broker's high-watermark checkpoint, which proves where each dumped log ends
    # (detection.md §0; without it every finding of dump text is unverified)
    files = render_dir(sc.root, tmp_path / "dumps", generation) + [str(sc.root / "replication-offset-checkpoint")]
    dumped, gaps = scan_paths(files, cfg(), as_of_ms=sc.as_of_ms, spark=spark)
    assert gaps == []
    assert binary and comparable(dumped) == comparable(binary)
    # both sides against the scenario's own findings (with the checkpoint, the files prove the ends)
    assert projected(binary) == expected_findings(sc, files=True)
    assert projected(dumped) == expected_findings(sc, files=True)
    assert all(re.search(r"\.txt:\d+$", f["input"]) for f in dumped)


def test_mixed_inputs_binary_segments_and_dumps(spark, tmp_path):
    sc = write_scenario("write-after-marker", tmp_path / "logs", seed=5)
    binary, _ = scan_paths([str(sc.root)], cfg(), as_of_ms=sc.as_of_ms, spark=spark)
    # data partitions as binary segments (in their folders), the coordinator log as dump text
    mixed = []
    for part in list_partitions(str(sc.root)):
        if part.is_txn_state:
            (tmp_path / "txn").mkdir(exist_ok=True)
            recs, _ = decode_txn_log_segment(open(segments(part)[0][1], "rb").read())
            t = tmp_path / "txn" / f"{part.name}.txt"
            t.write_text(render("txn_log", recs, "3.9", path=f"/data/{part.name}/{0:020d}.log"))
            mixed.append(str(t))
        else:
            mixed += [p for _b, p in segments(part)]
    mixed.append(str(sc.root / "replication-offset-checkpoint"))  # proves the explicit files' ends (§0)
    got, gaps = scan_paths(mixed, cfg(), as_of_ms=sc.as_of_ms, spark=spark)
    assert gaps == [] and comparable(got) == comparable(binary)
    assert projected(binary) == projected(got) == expected_findings(sc, files=True)


def _sections(path):
    """case-07's dumps, one per labelled section (each is a different moment or topic)."""
    text = path.read_text()
    parts = re.split(r"\n(?=## )", text)
    return {p.splitlines()[0][3:].strip(): p for p in parts if p.startswith("## ") and "Dumping " in p}


CASE07_TRUTH = {  # section title → (topic, producer id, first offset, producer epoch) left open
    "Dump Log Data": None,
    "What if we don't commit explicitly?": None,
    "What if we don't commit but keep the producer running?": ("transaction4-topic", 2, 0, 0),
    "What if we roll back our transaction?": None,
    "What if we then start a new (uncommitted) transaction after our aborted transaction?":
        ("transaction-topic", 0, 1, 1),
    "What if we abort that too?": None,  # closed by the HIGHER-epoch ABORT (epoch 2 closes epoch-1 data)
    "And finally, what if we now properly commit?": None,
}


def test_case07_ground_truth_per_dump(spark, tmp_path):
    sections = _sections(THREADS / "case-07-ableasdale-lifecycle-open-abort-epoch-bump.txt")
    assert set(sections) == set(CASE07_TRUTH)
    for i, (title, text) in enumerate(sections.items()):
        f = tmp_path / f"s{i}.txt"
        f.write_text(text)
        events = read_files([str(f)], cluster="d")
        assert (events["kind"] == "gap").sum() == 0, title
        clock = int(events["event_time"].max().value // 1_000_000)
        # at dump time nothing is old enough to be asserted hanging (no age evidence); every section,
        # closed ones included, is scanned at both clocks
        now_findings, _ = scan_paths([str(f)], cfg(), spark=spark)
        assert now_findings == [], title
        later, _ = scan_paths([str(f)], cfg(), as_of_ms=clock + 2 * 3600_000, spark=spark)
        if CASE07_TRUTH[title] is None:
            assert later == [], title  # closed by its marker (ProducerStateManager: a marker ends the txn)
            continue
        topic, pid, first, epoch = CASE07_TRUTH[title]
        assert [(a["topic"], a["producer_id"], a["first_offset"], a["producer_epoch"], a["status"], a["cause"],
                 a["verified"]) for a in later] == [(topic, pid, first, epoch, "hanging", "exceeds-max-timeout", False)]
        assert later[0]["verify_hint"] and later[0]["abort_command_new"]


def test_case07_closed_sections_have_nothing_open_even_much_later(tmp_path):
    from tests.engine_helper import run_engine

    sections = _sections(THREADS / "case-07-ableasdale-lifecycle-open-abort-epoch-bump.txt")
    for i, (title, text) in enumerate(sections.items()):
        f = tmp_path / f"s{i}.txt"
        f.write_text(text)
        events = read_files([str(f)], cluster="d", as_of_ms=4_000_000_000_000)
        found = run_engine(events, coordinator_available=False)
        opened = sorted((a["topic"], a["producer_id"], a["first_offset"], a["producer_epoch"]) for a in found)
        want = [CASE07_TRUTH[title]] if CASE07_TRUTH[title] else []
        assert opened == want, title


@pytest.mark.parametrize("name", ["case-09-strimzi-2022-healthy-eos-wc-output.txt",
                                  "case-08-ableasdale-transaction-state-decoder.txt"])
def test_other_public_threads_have_no_findings_at_dump_time(spark, name):
    findings, gaps = scan_paths([str(THREADS / name)], cfg(), spark=spark)
    assert findings == [] and gaps == []


def test_every_sample_parses_without_gaps_where_complete():
    expected_gaps = {  # sample → number of gap rows (elisions and cut lines the posters made)
        "fvaleri_kafka39_kafka-dump-log_outputs.txt": 2,
        "kafka_trunk2026_transaction-log-decoder_json_samples.txt": 1,
        "case-11-kafka-pr-22615-json-transaction-log-decoder.txt": 2,
        # snapshot dumps posted without their "Dumping <path>" line: the partition is unknown
        "klog_producer_snapshot_dumps_kafka2x_and_3.1-3.4.txt": 2,
        "case-13-dump-format-variants-2.7-2.8-3.x.txt": 1,
    }
    for path in sorted((SAMPLES / "dumps").glob("*.txt")) + sorted(THREADS.glob("*.txt")):
        ev = read_files([str(path)], cluster="d")
        assert int((ev["kind"] == "gap").sum()) == expected_gaps.get(path.name, 0), path.name


def test_snapshot_dump_with_topic_override_seeds_open_transaction(tmp_path):
    from tests.engine_helper import run_engine

    text = (SAMPLES / "dumps" / "klog_producer_snapshot_dumps_kafka2x_and_3.1-3.4.txt").read_text()
    f = tmp_path / "snap.txt"
    f.write_text(text)
    ev = read_files([str(f)], cluster="d", topic="orders", partition=3, as_of_ms=4_000_000_000_000)
    assert (ev["kind"] == "gap").sum() == 0 and (ev["kind"] == "snapshot").sum() > 0
    found = run_engine(ev, coordinator_available=False)
    assert found and all(a["coordinator_epoch_source"] == "snapshot" for a in found)


def test_garbage_and_binary_junk_become_gaps(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 10)
    prose = tmp_path / "notes.txt"
    prose.write_text("hello\nthis is not a dump\n")
    ev = read_files([str(junk), str(prose), str(tmp_path / "missing.txt")], cluster="d")
    reasons = ev[ev["kind"] == "gap"]["reason"].tolist()
    assert len(reasons) == 3 and any("cannot read" in r for r in reasons)
    assert (ev["kind"].isin(["data", "marker"])).sum() == 0


def test_drop_directory_stream_reads_complete_files_once(spark, tmp_path):
    sc = write_scenario("write-after-marker", tmp_path / "logs", seed=5)
    files = render_dir(sc.root, tmp_path / "rendered", "3.9")
    drop = tmp_path / "drop"
    drop.mkdir()
    c = cfg()
    alerts = []
    batches = BatchLog()
    sinks = SinkSet(sinks=[alerts.extend], on_batch=[batches])
    q = start_query(spark, "dumps", {"dir": str(drop), "cluster": "d", "as_of": str(sc.as_of_ms)},
                    engine_config(c, coordinator_available=True), AlertConfig("k:9092"), sinks, str(tmp_path / "ck"),
                    trigger={"processingTime": "1 second"})
    try:
        partial = drop / "part.txt.tmp"
        partial.write_text("baseOffset: 0 lastOffset")  # half-written: must not be read
        wait_caught_up(q)  # a trigger listed the directory with the partial file in it
        assert alerts == [] and sum(batches.rows) == 0
        for f in files:  # write-then-rename: each file appears complete
            tmp = drop / (".incoming-" + f.split("/")[-1])
            shutil.copy(f, tmp)
            tmp.rename(drop / f.split("/")[-1])
        wait_caught_up(q)  # every file read, every micro-batch they call for (timers too) run
        n = len(alerts)
        ran = list(batches.ids)
        wait_caught_up(q)  # one more trigger over the same directory
    finally:
        q.stop()
    assert sum(batches.rows) > 0
    assert batches.ids == ran  # nothing was left to run
    assert n == 1 and len(alerts) == 1
    assert (alerts[0]["status"], alerts[0]["cause"]) == ("hanging", "write-after-marker")
    logs = [p for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit()]
    offsets = json.loads(max(logs, key=lambda p: int(p.name)).read_text().splitlines()[-1])
    assert sorted(offsets["done"]) == sorted(str(drop / f.split("/")[-1]) for f in files)


def test_scan_cli_topic_partition_override_and_exit_codes(spark, tmp_path, capsys):
    from streaming.cli import main

    snap = SAMPLES / "dumps" / "klog_producer_snapshot_dumps_kafka2x_and_3.1-3.4.txt"
    rc = main(["scan", str(snap), "--json", "--as-of", "4000000000000", "--topic", "orders", "--partition", "3"])
    out = capsys.readouterr()
    findings = [json.loads(line) for line in out.out.splitlines() if line.startswith("{")]
    assert rc == 2 and findings
    assert {(f["topic"], f["partition"], f["coordinator_epoch_source"]) for f in findings} == {("orders", 3, "snapshot")}
    assert main(["scan", str(snap), "--topic", "orders"]) == 1
    assert "--topic and --partition go together" in capsys.readouterr().err
    assert main(["scan", str(tmp_path / "nope.txt")]) == 1
    assert "no such file" in capsys.readouterr().err
