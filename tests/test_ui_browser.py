"""The status page in a real browser (headless Chromium from Debian, driven by Selenium).

The first test serves the page from a running ``txnwatch run --source kafka`` against the broker
fake and checks what an operator relies on: every open finding listed with the right fields,
the copy button puts the exact command on the clipboard, the finding page shows its evidence, a
resolved finding leaves the open list without a page reload, and the stale banner appears when
the job stops. The others feed the store directly and take the screenshots linked from
docs/runbook.md: empty, busy (200 open findings) and an outage. They are written to a temporary
directory (a test run never rewrites the tracked docs/ui/*.png); ``TXNWATCH_UPDATE_SCREENSHOTS=1``
writes them into docs/ui to refresh the runbook's pictures.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from streaming.config import UiConfig, as_config, load
from streaming.runner import run_job
from streaming.simulate.cluster_log import ClusterLog
from streaming.simulate.scenarios import AGE_MS
from streaming.sinks.jsonl import read_jsonl
from streaming.ui.server import UIServer
from streaming.ui.store import FindingStore
from tests.conftest import ROOT
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch
from tests.ui_browser import (
    chromium,
    full_height_screenshot,
    grant_clipboard,
    read_clipboard,
    require_browser,
)
from tests.ui_samples import batch_stats, busy_findings, positions, synthetic, with_facts

# Screenshots go to a temporary directory so a test run never rewrites the tracked docs/ui/*.png;
# TXNWATCH_UPDATE_SCREENSHOTS=1 writes them into docs/ui (to refresh the runbook's pictures).
SHOTS = (ROOT / "docs" / "ui" if os.environ.get("TXNWATCH_UPDATE_SCREENSHOTS") == "1"
         else Path(tempfile.mkdtemp(prefix="txnwatch-shots-")))
MIN = 60_000


@pytest.fixture(autouse=True)
def _browser_available():
    require_browser()


@pytest.fixture(autouse=True)
def _close_cached_clients():
    yield
    from streaming.sources.kafka import close_wires

    close_wires()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def build_cluster(root: Path, base_ms: int) -> ClusterLog:
    """Two hanging transactions (coordinator-unaware, write-after-marker) and a late one
    (markers pending), plus healthy traffic; every timestamp at or before ``base + span``."""
    c = ClusterLog(root, base_ms, coordinator_epoch=3, seed=11)
    for topic, parts in (("orders", 2), ("payments", 1), ("heartbeat", 1)):
        c.create_topic(topic, parts)
    ok = c.producer("checkout", tv=0)
    for _ in range(3):
        ok.begin()
        ok.send("orders", 0, 3)
        ok.commit()
        c.advance(500)
    loader = c.producer("loader", tv=0)
    loader.begin()
    loader.send("payments", 0, 2)
    loader.commit()
    loader.expire(force=True)
    loader.zombie_send("payments", 0, 3)
    app = c.producer("orders-app", tv=0)
    app.begin()
    app.send("orders", 1, 3)
    app.commit()
    app.zombie_send("orders", 1, 2)
    settle = c.producer("settlement", tv=0)
    settle.begin()
    settle.send("orders", 0, 4)
    settle.commit(markers=[])
    c.advance(AGE_MS)
    hb = c.producer("txnwatch-heartbeat", tv=0)
    hb.begin()
    hb.send("heartbeat", 0, 1)
    hb.commit()
    c.flush()
    return c


def live_cluster(tmp_path: Path) -> ClusterLog:
    """The cluster with its newest timestamp a few seconds before now (the live clock)."""
    probe = build_cluster(tmp_path / "probe", 1_700_000_000_000)
    span = probe.max_timestamp - 1_700_000_000_000
    return build_cluster(tmp_path / "logs", int(time.time() * 1000) - span - 5_000)


def open_findings(jsonl: Path) -> dict[str, dict]:
    """Latest record per key, open ones only (what the page must list)."""
    latest: dict[str, dict] = {}
    for a in read_jsonl(str(jsonl)):
        latest[a["key"]] = a
    return {k: a for k, a in latest.items() if a["status"] in ("late", "hanging")}


def rows(driver) -> dict[str, object]:
    """Open-finding rows by key; {} when the page re-rendered them while they were read (the
    overview refreshes in place, so an element found a moment ago may be stale: ask again)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return {r.get_attribute("data-key"): r for r in driver.find_elements(By.CSS_SELECTOR, "tr.finding")}
    except StaleElementReferenceException:
        return {}


def fresh(fn, timeout: float = 15):
    """``fn()`` again until it runs without meeting an element the in-place refresh replaced."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except StaleElementReferenceException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.spark
def test_page_over_a_running_job(spark, tmp_path):
    from selenium.webdriver.common.by import By

    c = live_cluster(tmp_path)
    port = free_port()
    jsonl = tmp_path / "alerts.jsonl"
    with FakeKafkaBroker(c.root) as broker:
        cfg = load(None, env={})
        cfg["cluster"] = "live"
        cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, topic_pattern=".*",
                            request_timeout_ms=3000)
        cfg["streaming"].update(checkpoint=str(tmp_path / "ck"), trigger_interval="1 second")
        cfg["sinks"].update(enabled=["jsonl"], jsonl_path=str(jsonl))
        cfg["ui"].update(enabled=True, port=port, stale_after_s=60)
        stop = threading.Event()
        result: dict[str, int] = {}
        job = threading.Thread(target=lambda: result.setdefault(
            "rc", run_job(as_config(cfg), source="kafka", path=None, stop_event=stop)))
        job.start()
        url = f"http://127.0.0.1:{port}/"
        try:
            wait_for(lambda: len(open_findings(jsonl)) >= 3 or not job.is_alive(), 180, "three findings")
            assert job.is_alive(), "the job ended early"
            want = open_findings(jsonl)
            assert sorted((a["status"], a["cause"]) for a in want.values()) == [
                ("hanging", "coordinator-unaware"), ("hanging", "write-after-marker"), ("late", "markers-pending")]
            with chromium() as d:
                d.get(url)
                wait_for(lambda: set(rows(d)) == set(want), 30, "every open finding on the page")
                d.execute_script("window.__noReload = 'still-here';")
                for key, a in want.items():
                    group = "unverified" if not a["verified"] else a["status"]

                    def cells(group=group, key=key):
                        row = d.find_element(By.CSS_SELECTOR, f"#group-{group} tr.finding[data-key='{key}']")
                        return {n: row.find_element(By.CSS_SELECTOR, f"td.c-{n}").text for n in
                                ("status", "tp", "producer", "txnid", "verified")}
                    cell = fresh(cells)
                    assert cell["status"].split() == [a["status"], a["cause"]], cell
                    assert cell["tp"].splitlines()[0] == f"{a['topic']}-{a['partition']}"
                    assert f"offset {a['first_offset']}" in cell["tp"]
                    assert cell["producer"] == f"{a['producer_id']} ({a['producer_epoch']})"
                    assert cell["txnid"] == (a["transactional_id"] or "—")
                    assert cell["verified"].splitlines()[0] == ("yes" if a["verified"] else "no")
                assert d.find_element(By.ID, "count-hanging").text == "2"
                assert d.find_element(By.ID, "count-late").text == "1"

                # finding page: evidence, data-loss preview, epoch source, both commands copied exactly
                hanging = next(a for a in want.values() if a["cause"] == "write-after-marker")
                fresh(lambda: d.find_element(By.CSS_SELECTOR,
                                             f"tr.finding[data-key='{hanging['key']}'] a.button").click())
                wait_for(lambda: d.find_elements(By.ID, "evidence"), 15, "the finding page")
                text = {i: d.find_element(By.ID, i).text for i in
                        ("ev-first_offset", "ev-last_offset", "ev-lso", "ev-high_watermark", "loss-records",
                         "loss-batches", "epoch-coordinator_epoch_source", "id-transactional_id")}
                assert text["ev-first_offset"] == str(hanging["first_offset"])
                assert text["ev-last_offset"] == str(hanging["last_offset"])
                assert text["ev-lso"] == str(hanging["lso"])
                assert text["ev-high_watermark"] == str(hanging["high_watermark"])
                assert text["loss-records"] == f"{hanging['records']:,}"
                assert text["loss-batches"] == f"{hanging['batches']:,}"
                assert text["epoch-coordinator_epoch_source"] == hanging["coordinator_epoch_source"]
                assert text["id-transactional_id"] == hanging["transactional_id"]
                assert d.find_element(By.ID, "epoch-rejected").text.startswith("If the abort is rejected:")
                assert [li.text.split()[0] for li in d.find_elements(By.CSS_SELECTOR, "#history li")] == ["hanging"]
                grant_clipboard(d, url)
                for field in ("abort_command_new", "abort_command_legacy"):
                    assert hanging[field], field
                    d.find_element(By.CSS_SELECTOR, f"button.copy[data-copy='cmd-{field}']").click()
                    wait_for(lambda f=field: d.execute_script("return window.__txnwatchLastCopied;")
                             == hanging[f], 10, f"copy of {field}")
                    assert read_clipboard(d) == hanging[field]
                # the guarded abort's line (streaming/abort): the key needs no shell quoting
                guarded = f"txnwatch abort {hanging['key']}"
                d.find_element(By.CSS_SELECTOR, "button.copy[data-copy='cmd-abort-cli']").click()
                wait_for(lambda: d.execute_script("return window.__txnwatchLastCopied;") == guarded, 10,
                         "copy of the txnwatch abort line")
                assert read_clipboard(d) == guarded
                full_height_screenshot(d, str(SHOTS / "finding.png"), max_height=2000)

                # the operator aborts the coordinator-unaware transaction: its ABORT marker lands
                d.set_window_size(1440, 1000)
                d.get(url)
                wait_for(lambda: rows(d), 15, "the overview")
                d.execute_script("window.__noReload = 'still-here';")
                zombie = next(a for a in want.values() if a["cause"] == "coordinator-unaware")
                broker.append_batches(zombie["topic"], zombie["partition"], build_control_batch(
                    0, zombie["producer_id"], zombie["producer_epoch"], commit=False,
                    coordinator_epoch=zombie["coordinator_epoch"] or 0, timestamp_ms=int(time.time() * 1000)))
                wait_for(lambda: zombie["key"] not in rows(d), 90, "the resolved finding to leave the open list")
                assert d.find_elements(By.CSS_SELECTOR, f"tr.resolved-row[data-key='{zombie['key']}']")
                assert d.execute_script("return window.__noReload;") == "still-here"  # refreshed in place
                assert set(rows(d)) == set(want) - {zombie["key"]}
                assert d.find_element(By.ID, "count-resolved").text == "1"
                assert d.find_element(By.ID, "stale-banner").get_attribute("hidden") is not None

                # the job stops: the page says so
                stop.set()
                job.join(90)
                banner = wait_for(lambda: (lambda b: b if b.is_displayed() else None)(
                    d.find_element(By.ID, "stale-banner")), 30, "the stale banner")
                assert "cannot reach txnwatch" in banner.text
        finally:
            stop.set()
            job.join(90)
    assert result.get("rc") == 0


# -- screenshots of fed states --------------------------------------------------------------

T0 = 1_763_600_000_000  # 2025-11-20 00:53 UTC


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_screenshot_empty():
    from selenium.webdriver.common.by import By

    now = T0
    clock = Clock(now / 1000)
    store = FindingStore(mode="job", source="txnwatch-prod (kafka-txn)", stale_after_s=30, wall=clock)
    store.observe_batch(412, batch_stats(now, [], positions(6)))
    with UIServer(store, UiConfig(port=0)) as srv, chromium(1440, 1000) as d:
        d.get(srv.url)
        assert d.find_element(By.ID, "count-hanging").text == "0"
        assert not d.find_element(By.ID, "stale-banner").is_displayed()
        assert d.find_element(By.ID, "job-batch").text.startswith("#412 at ")
        assert d.find_elements(By.CSS_SELECTOR, "tr.finding") == []
        full_height_screenshot(d, str(SHOTS / "empty.png"), max_height=1800)


def test_screenshot_busy_200_open_findings():
    from selenium.webdriver.common.by import By

    now = T0
    clock = Clock(now / 1000)
    store = FindingStore(mode="job", source="txnwatch-prod (kafka-txn)", stale_after_s=30, wall=clock)
    findings = busy_findings(200, now)
    store.observe_batch(412, batch_stats(now, findings, with_facts(positions(50), findings)))
    with UIServer(store, UiConfig(port=0)) as srv, chromium(1440, 1200) as d:
        d.get(srv.url)
        assert len(d.find_elements(By.CSS_SELECTOR, "tr.finding")) == 200
        assert [d.find_element(By.ID, f"count-{g}").text for g in ("hanging", "late", "unverified")] == \
            ["120", "50", "30"]
        d.save_screenshot(str(SHOTS / "busy.png"))


def test_screenshot_outage_and_time_based_stale_banner():
    from selenium.webdriver.common.by import By

    now = T0
    clock = Clock(now / 1000)
    store = FindingStore(mode="job", source="txnwatch-prod (kafka-txn)", stale_after_s=30, wall=clock)
    down = [{"schema_version": 1, "key": f"prod/{t}/{p}", "status": "unavailable", "cluster": "prod", "topic": t,
             "partition": p, "reason": r, "since_ms": now - 9 * MIN, "last_read_ms": now - 9 * MIN}
            for t, p, r in (("__transaction_state", 7, "LEADER_NOT_AVAILABLE"),
                            ("__transaction_state", 31, "LEADER_NOT_AVAILABLE"),
                            ("payments", 2, "leader broker 3 not answering"))]
    findings = [synthetic(0, now, status="hanging"),
                synthetic(1, now, status="hanging", verified=False, missing_txn_partitions=[7, 31],
                          verify_hint="confirm before aborting: __transaction_state-7 and -31 are unavailable"),
                synthetic(2, now, status="late", topic="payments", partition=2, key="prod/payments/2/4002/1074",
                          stale=True, last_read_ms=now - 9 * MIN)]
    store.observe_batch(412, dict(batch_stats(now, findings, with_facts(positions(50), findings)),
                                  alerts=down + findings))
    clock.t += 240  # four minutes without a micro-batch
    with UIServer(store, UiConfig(port=0)) as srv, chromium(1440, 1000) as d:
        d.get(srv.url)
        banner = d.find_element(By.ID, "stale-banner")
        assert banner.is_displayed() and "no micro-batch for 240 s" in banner.text
        assert d.find_element(By.ID, "count-unavailable").text == "3"
        assert len(d.find_elements(By.CSS_SELECTOR, "tr.unavailable-row")) == 3
        unverified = d.find_element(By.CSS_SELECTOR, "#group-unverified tr.finding")
        assert "missing __transaction_state 7, 31" in unverified.text
        assert d.find_elements(By.CSS_SELECTOR, "#group-late .stale-badge")
        full_height_screenshot(d, str(SHOTS / "outage.png"), max_height=2000)
