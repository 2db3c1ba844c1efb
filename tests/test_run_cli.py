"""``txnwatch run``: configuration layering, sinks (JSONL + Kafka topic + console), restart from
the checkpoint without duplicates, per-batch progress lines, clean stop on SIGTERM."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest
from kafka import KafkaConsumer

from streaming.config import ConfigError, as_config, load
from streaming.runner import run_job
from streaming.simulate.scenarios import write_scenario
from streaming.sinks.jsonl import read_jsonl
from tests.conftest import ROOT
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.streaming_wait import BatchLog, ProgressLogBatches, wait_until
from tests.test_kafka_source import live_scenario


@pytest.fixture(autouse=True)
def _close_cached_clients():
    yield
    from streaming.sources.kafka import close_wires

    close_wires()


def test_config_layering_and_errors(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('cluster = "prod"\n[thresholds]\npadding_ms = 1000\n[thresholds.topics.payments]\n'
                 'max_timeout_ms = 3600000\n')
    cfg = load(str(f), env={"TXNWATCH_THRESHOLDS_PADDING_MS": "2000", "TXNWATCH_SINKS_ENABLED": "jsonl,kafka"},
               overrides={"kafka.bootstrap_servers": "k1:9092"})
    assert cfg["cluster"] == "prod" and cfg["thresholds"]["padding_ms"] == 2000
    assert cfg["sinks"]["enabled"] == ["jsonl", "kafka"] and cfg["kafka"]["bootstrap_servers"] == "k1:9092"
    assert cfg["thresholds"]["topics"]["payments"]["max_timeout_ms"] == 3600000
    f.write_text("[thresholds]\npadding_ms = \"five\"\n")
    with pytest.raises(ConfigError, match=r"thresholds.padding_ms: expected an integer"):
        load(str(f), env={})
    f.write_text("[kafka]\nbootstrap = 1\n")
    with pytest.raises(ConfigError, match=r"kafka.bootstrap: unknown option"):
        load(str(f), env={})
    with pytest.raises(ConfigError, match="TXNWATCH_THRESHOLDS_PADDING_MS"):
        load(None, env={"TXNWATCH_THRESHOLDS_PADDING_MS": "soon"})


@pytest.mark.spark
def test_run_against_broker_with_all_sinks_and_restart(spark, tmp_path):
    sc = live_scenario(tmp_path)
    with FakeKafkaBroker(sc.root) as broker:
        cfg = load(None, env={})
        cfg["cluster"] = "live"
        cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, topic_pattern=".*",
                            request_timeout_ms=3000)
        cfg["streaming"].update(checkpoint=str(tmp_path / "ck"), trigger_interval="1 second")
        cfg["sinks"].update(enabled=["jsonl", "console", "kafka"], jsonl_path=str(tmp_path / "alerts.jsonl"))
        jsonl = tmp_path / "alerts.jsonl"
        batches = BatchLog()
        progress_log = ProgressLogBatches(batches)

        def run_until(pred, more_batches):
            """Run the job until ``pred()``, then ``more_batches`` further micro-batches (the live
            source has input at every trigger); returns (rc, console, ids of the batches run)."""
            stop = threading.Event()
            out = io.StringIO()
            rc = {}
            start = len(batches.ids)
            th = threading.Thread(target=lambda: rc.setdefault("rc", run_job(as_config(cfg), source="kafka", path=None,
                                                                               stop_event=stop, console_out=out)))

            def check():
                assert th.is_alive(), f"the job ended early (rc {rc.get('rc')}): {out.getvalue()[-2000:]}"

            th.start()
            try:
                batches.wait_for(pred, "the first alerts", timeout_s=90, check=check)
                batches.wait_for_more(more_batches, check=check)
            finally:
                stop.set()
                th.join(60)
            assert not th.is_alive(), "the job did not stop"
            return rc.get("rc"), out.getvalue(), batches.ids[start:]

        logging.getLogger("txnwatch").addHandler(progress_log)
        try:
            rc, console, ran = run_until(lambda: bool(read_jsonl(str(jsonl))), more_batches=2)
            assert rc == 0
            first = read_jsonl(str(jsonl))
            want = {(e["topic"], e["partition"], e["producer_id"], e["first_offset"]) for e in sc.expected}
            assert {(a["topic"], a["partition"], a["producer_id"], a["first_offset"]) for a in first} == want
            assert "kafka-transactions.sh --bootstrap-server" in console
            consumer = KafkaConsumer("txnwatch-alerts", bootstrap_servers=broker.bootstrap_servers,
                                     auto_offset_reset="earliest", consumer_timeout_ms=5000, group_id=None)
            topic_alerts = [(m.key.decode(), json.loads(m.value)) for m in consumer]
            consumer.close()
            assert [(k, v) for k, v in topic_alerts] == [(a["key"], a) for a in first]
            # restart from the checkpoint: micro-batches run again, nothing new, nothing repeated
            rc, _, resumed = run_until(lambda: True, more_batches=3)
        finally:
            logging.getLogger("txnwatch").removeHandler(progress_log)
        assert rc == 0 and read_jsonl(str(jsonl)) == first
        # the restarted job went on from the checkpoint's batch ids, it did not start over
        assert len(resumed) >= 3 and ran[-1] < resumed[0] <= ran[-1] + 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_samples(url: str) -> dict:
    """{(sample name, sorted labels): value} of one scrape; {} while the endpoint is not up yet."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


@pytest.mark.spark
def test_run_subprocess_logs_progress_and_stops_on_sigterm(tmp_path):
    sc = write_scenario("write-after-marker", tmp_path / "logs", seed=5)
    conf = tmp_path / "t.toml"
    port = free_port()
    conf.write_text(f'cluster = "sub"\n[sinks]\nenabled = ["jsonl"]\njsonl_path = "{tmp_path / "a.jsonl"}"\n'
                    f'[streaming]\ncheckpoint = "{tmp_path / "ck"}"\ntrigger_interval = "1 second"\n'
                    f'shuffle_partitions = 2\n[metrics]\nport = {port}\n')
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    log = open(tmp_path / "stderr.log", "w")  # a file, not a pipe: Spark logs enough to fill a pipe
    proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", "run", "--source", "segments", "--path",
                             str(sc.root), "--config", str(conf)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=log, text=True)
    def alive() -> None:
        assert proc.poll() is None, (tmp_path / "stderr.log").read_text()[-3000:]

    try:
        # a generous deadline: the subprocess's Spark start-up alone took ~60 s on a loaded 2-core box
        wait_until(lambda: bool(read_jsonl(str(tmp_path / "a.jsonl"))), "the job's first alerts", timeout_s=300,
                   check=alive)
        # The running job's Prometheus endpoint, scraped over HTTP: the scenario plants exactly one
        # hanging transaction, of cause write-after-marker, and nothing late.
        want = {("txnwatch_hanging_transactions", (("cause", "write-after-marker"), ("cluster", "sub"))): 1.0,
                ("txnwatch_late_transactions", (("cluster", "sub"),)): 0.0,
                ("txnwatch_alerts_total", (("cluster", "sub"), ("status", "hanging"))): 1.0}
        seen: dict = {}

        def scraped() -> bool:
            seen.update(scrape_samples(f"http://127.0.0.1:{port}/metrics"))
            return all(seen.get(k) == v for k, v in want.items())

        wait_until(scraped, f"the metrics {want}", timeout_s=60, check=alive)
        assert {k: seen.get(k) for k in want} == want
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    err = (tmp_path / "stderr.log").read_text()
    assert rc == 0, err[-3000:]
    assert "txnwatch running: source=segments" in err
    assert "open findings: 0 late, 1 hanging" in err
    assert "stopping after the current micro-batch" in err
