"""The status page without a browser: the store (pure Python), rendering, the HTTP server
(auth, headers, routes), the alerts-file feed and the ``[ui]`` settings."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request

import pytest

from streaming.config import ConfigError, UiConfig, as_config, interval_seconds, load
from streaming.ui import render, serve_for_job
from streaming.ui.feeds import JsonlTail
from streaming.ui.server import UIServer
from streaming.ui.store import DAY_MS, FindingStore, decode_key, encode_key

T0 = 1_700_000_000_000
MIN = 60_000


def alert(status="hanging", *, topic="orders", partition=0, pid=4002, first=9, at=T0 + 60 * MIN, **kw):
    """An alert of schema version 1 (docs/alerts.md), with overrides."""
    a = {"schema_version": 1, "key": f"prod/{topic}/{partition}/{pid}/{first}", "status": status,
         "cause": {"hanging": "write-after-marker", "late": "markers-pending"}.get(status),
         "verified": True, "cluster": "prod", "topic": topic, "partition": partition, "producer_id": pid,
         "producer_epoch": 2, "first_offset": first, "last_offset": first + 3, "first_ts": T0, "last_ts": T0 + 5,
         "open_ms": at - T0, "idle_ms": at - T0 - 5, "records": 4, "bytes": 2048, "batches": 2,
         "transactional_id": "payments-7", "coordinator_state": "CompleteCommit", "coordinator_epoch": 2,
         "coordinator_epoch_source": "last-marker", "lso": first, "high_watermark": first + 10, "pins_lso": True,
         "data_deleted": False, "detected_at": at,
         "abort_command_new": None, "abort_command_legacy": None, "required_permission": None, "resolution": None,
         "threshold_ms": 1_200_000, "clock_skew": False, "input": f"{topic}-{partition}/0.log@601", "verify_hint": None}
    if status == "hanging":
        a["abort_command_new"] = (f"kafka-transactions.sh --bootstrap-server 'k1:9092' abort --topic '{topic}' "
                                  f"--partition {partition} --start-offset {first}")
        a["abort_command_legacy"] = (f"kafka-transactions.sh --bootstrap-server 'k1:9092' abort --topic '{topic}' "
                                     f"--partition {partition} --producer-id {pid} --producer-epoch 2 "
                                     f"--coordinator-epoch 2")
        a["required_permission"] = "CLUSTER_ACTION on the cluster"
    if status == "resolved":
        a.update(cause=None, resolution="aborted")
    a.update(kw)
    return a


class Clock:
    def __init__(self, t: float = T0 / 1000 + 3600) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- store ---------------------------------------------------------------------------------

def test_groups_history_and_resolution():
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("late", at=T0 + 21 * MIN))
    s.ingest(alert("hanging", at=T0 + 30 * MIN))
    s.ingest(alert("hanging", at=T0 + 31 * MIN))  # at-least-once replay: no new history entry
    s.ingest(alert("hanging", pid=7, first=20, verified=False, cause="exceeds-max-timeout",
                   missing_txn_partitions=[3, 17]))
    snap = s.snapshot()
    assert [f["key"] for f in snap["groups"]["hanging"]] == ["prod/orders/0/4002/9"]
    assert [f["key"] for f in snap["groups"]["unverified"]] == ["prod/orders/0/7/20"]
    assert snap["groups"]["late"] == []
    assert snap["counts"] == {"hanging": 1, "late": 0, "unverified": 1, "resolved_24h": 0,
                              "unavailable_partitions": 0}
    s.ingest(alert("resolved", at=T0 + 40 * MIN))
    snap = s.snapshot()
    assert snap["groups"]["hanging"] == [] and [r["key"] for r in snap["resolved"]] == ["prod/orders/0/4002/9"]
    doc = s.finding("prod/orders/0/4002/9")
    assert not doc["finding"]["open"]
    assert [(h["status"], h["at_ms"]) for h in doc["finding"]["history"]] == [
        ("late", T0 + 21 * MIN), ("hanging", T0 + 30 * MIN), ("resolved", T0 + 40 * MIN)]


def test_resolved_leave_after_24_hours_and_unknown_keys_are_none():
    clock = Clock((T0 + 40 * MIN) / 1000)
    s = FindingStore(mode="feed", wall=clock)
    s.ingest(alert("hanging"))
    s.ingest(alert("resolved", at=T0 + 40 * MIN))
    assert len(s.snapshot()["resolved"]) == 1
    clock.t += DAY_MS / 1000 + 1
    assert s.snapshot()["resolved"] == [] and s.finding("prod/orders/0/4002/9") is None
    assert s.history == {}


def test_derived_age_and_lso_lag_use_the_latest_partition_facts():
    clock = Clock()
    s = FindingStore(mode="job", wall=clock)
    a = alert("hanging")
    s.observe_batch(3, {"alerts": [a], "open_alerts": {a["key"]: {"status": "hanging", "alert": a}},
                        "partitions": {"orders-0": {"lso": 9, "high_watermark": 40, "log_start_offset": 0},
                                       "__transaction_state-3": {"lso": 5, "high_watermark": 5}},
                        "open_transactions": [{"topic": "orders", "partition": 0, "first_offset": 9, "first_ts": T0}],
                        "gaps": [{"reason": "retention deleted offsets 0..1"}], "rows": 12, "progress": 2,
                        "now_ms": T0 + 90 * MIN, "duration_s": 0.5})
    f = s.snapshot()["groups"]["hanging"][0]
    assert f["age_ms"] == 90 * MIN  # the job's clock, not the wall clock
    assert f["lso_lag_records"] == 31 and f["lso_lag_ms"] == 90 * MIN and f["pins_lso_now"] is True
    snap = s.snapshot()
    assert snap["lagging"] == [{"topic": "orders", "partition": 0, "lso": 9, "high_watermark": 40, "lag_records": 31,
                                "lag_ms": 90 * MIN, "findings": [{"key": a["key"], "url": f["url"]}]}]
    job = snap["job"]
    assert (job["batch_id"], job["rows"], job["gaps"], job["duration_s"]) == (3, 12, 1, 0.5)
    assert job["gap_reasons"] == ["retention deleted offsets 0..1"] and job["positions_total"] == 2


def test_open_alerts_seed_a_restart_and_drop_what_the_job_no_longer_holds():
    s = FindingStore(mode="job", wall=Clock())
    a, b = alert("hanging"), alert("late", pid=8, first=30)
    s.observe_batch(0, {"alerts": [], "open_alerts": {a["key"]: {"status": "hanging", "alert": a},
                                                      b["key"]: {"status": "late", "alert": b}}})
    assert set(s.open) == {a["key"], b["key"]}
    s.observe_batch(1, {"alerts": [], "open_alerts": {a["key"]: {"status": "hanging", "alert": a}}})
    assert set(s.open) == {a["key"]}


def test_partition_availability_records_and_stale_findings():
    s = FindingStore(mode="feed", wall=Clock())
    down = {"schema_version": 1, "key": "prod/orders/1", "status": "unavailable", "cluster": "prod",
            "topic": "orders", "partition": 1, "reason": "LEADER_NOT_AVAILABLE", "since_ms": T0}
    s.ingest(down)
    s.ingest(alert("hanging", partition=1, stale=True, last_read_ms=T0 + 5 * MIN))
    snap = s.snapshot()
    assert [p["key"] for p in snap["unavailable"]] == ["prod/orders/1"]
    assert snap["counts"]["unavailable_partitions"] == 1
    html = render.overview_fragment(snap)
    assert "LEADER_NOT_AVAILABLE" in html and "stale-badge" in html
    s.ingest(dict(down, status="available"))
    assert s.snapshot()["unavailable"] == []


def test_staleness_job_mode_by_time_feed_mode_by_error():
    clock = Clock()
    s = FindingStore(mode="job", stale_after_s=30, wall=clock)
    assert s.staleness() == (False, None)
    clock.t += 31
    stale, why = s.staleness()
    assert stale and "no micro-batch yet" in why
    s.observe_batch(0, {"alerts": []})
    assert s.staleness() == (False, None)
    clock.t += 45
    assert s.staleness()[0] and "for 45 s" in s.staleness()[1]
    f = FindingStore(mode="feed", wall=clock)
    clock.t += 3600
    assert f.staleness() == (False, None)  # a quiet job writes no alerts: not stale by itself
    f.note_feed_error("alerts topic 'a' on k:9092: NoBrokersAvailable")
    assert f.staleness() == (True, "reading alerts failed: alerts topic 'a' on k:9092: NoBrokersAvailable")
    f.note_feed_ok("line 3")
    assert f.staleness() == (False, None)


def test_bad_records_are_reported_never_raised():
    s = FindingStore(mode="job", wall=Clock())
    assert not s.ingest({"status": "hanging"})
    assert not s.ingest(dict(alert("hanging"), status="exploded"))
    s.observe_batch(1, {"alerts": [None], "open_alerts": "junk"})  # logged, the job goes on
    msgs = [e["message"] for e in s.snapshot()["feed"]["errors"]]
    assert "record without a key (status 'hanging')" in msgs
    assert "prod/orders/0/4002/9: unknown status 'exploded'" in msgs


def test_key_encoding_round_trip():
    for key in ("prod/orders/0/4002/9", "a b/ünï/1/2/3", "x?y#z/t/0/1/2"):
        tok = encode_key(key)
        assert "/" not in tok and "=" not in tok and "+" not in tok
        assert decode_key(tok) == key
    assert decode_key("!!!") is None


# -- rendering -----------------------------------------------------------------------------

def test_optional_fields_shown_when_present_and_never_invented():
    bare = FindingStore(mode="feed", wall=Clock())
    bare.ingest(alert("hanging"))
    html = render.finding_page(bare.finding("prod/orders/0/4002/9"))
    assert "Confirmed by" in html  # the KPI header exists ...
    for absent in ("DescribeProducers", "Missing __transaction_state", "billing-app", "Other fields"):
        assert absent not in html  # ... but no value is made up
    rich = FindingStore(mode="feed", wall=Clock())
    rich.ingest(alert("hanging", confirmed_by=["DescribeProducers", "DescribeTransactions"],
                      blocked_groups=["billing-app"], coordinator_epoch_source="producer-last-marker",
                      evidence={"first_batch": {"base_offset": 9, "producer_epoch": 2},
                                "last_marker": {"offset": 7, "coordinator_epoch": 2, "type": "COMMIT"},
                                "describe_producers": {"current_txn_start_offset": 9, "coordinator_epoch": 2},
                                "future_part": {"answer": 42}},
                      ingested_via="brand-new-field"))
    html = render.finding_page(rich.finding("prod/orders/0/4002/9"))
    for present in ("DescribeProducers, DescribeTransactions", "billing-app", "The producer&#39;s last marker",
                    "DescribeProducers said", "current_txn_start_offset", "future_part", "Other fields",
                    "brand-new-field", "COORDINATOR_FENCED (error 52), the partition holds a higher epoch"):
        assert present in html, present


def test_everything_is_escaped():
    s = FindingStore(mode="feed", wall=Clock())
    evil = "<script>alert(1)</script>"
    s.ingest(alert("hanging", transactional_id=evil, blocked_groups=[evil], evidence={"x": evil}))
    pages = [render.overview_page(s.snapshot()), render.finding_page(s.finding("prod/orders/0/4002/9")),
             render.overview_json(s.snapshot())]
    for page in pages:
        assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[1]
    doc = json.loads(pages[2])
    assert doc["groups"]["hanging"][0]["transactional_id"] == evil  # the data itself is intact
    assert "<script>alert(1)" not in doc["html"] and "&lt;script&gt;" in doc["html"]


def test_late_findings_have_no_command_and_say_why():
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("late"))
    html = render.finding_page(s.finding("prod/orders/0/4002/9"))
    assert "No command: the coordinator still owns this transaction" in html
    assert 'class="copy"' not in html and "kafka-transactions.sh" not in html


# -- server --------------------------------------------------------------------------------

def _get(url, headers=None, method="GET"):
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):
        return None


def test_server_routes_headers_and_read_only():
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("hanging"))
    with UIServer(s, UiConfig(port=0)) as srv:
        assert srv.settings.bind == "127.0.0.1" and srv.url.startswith("http://127.0.0.1:")
        code, hdrs, body = _get(srv.url)
        assert code == 200 and "orders-0" in body
        assert "script-src 'self'" in hdrs["Content-Security-Policy"] and hdrs["X-Frame-Options"] == "DENY"
        code, _, body = _get(srv.url + "api/state")
        doc = json.loads(body)
        assert code == 200 and doc["counts"]["hanging"] == 1 and "orders-0" in doc["html"]
        assert "html" not in json.loads(_get(srv.url + "api/state?html=0")[2])
        tok = encode_key("prod/orders/0/4002/9")
        for path in (f"finding/{tok}", "finding?key=prod%2Forders%2F0%2F4002%2F9"):
            code, _, body = _get(srv.url + path)
            assert code == 200 and "--start-offset 9" in body, path
        assert json.loads(_get(srv.url + f"api/finding/{tok}")[2])["finding"]["producer_id"] == 4002
        assert _get(srv.url + f"finding/{encode_key('prod/nope/0/1/2')}")[0] == 404
        assert _get(srv.url + "api/finding/xyz")[0] == 404
        assert _get(srv.url + "static/app.js")[1]["Content-Type"].startswith("text/javascript")
        assert _get(srv.url + "static/../server.py")[0] == 404
        assert _get(srv.url + "api/state", method="POST")[0] == 405


def test_basic_auth_and_token():
    s = FindingStore(mode="feed", wall=Clock())
    with UIServer(s, UiConfig(port=0, basic_user="ops", basic_password="pw1", token="tok-123")) as srv:
        assert _get(srv.url)[0] == 401
        assert _get(srv.url + "healthz")[0] == 200
        good = base64.b64encode(b"ops:pw1").decode()
        bad = base64.b64encode(b"ops:nope").decode()
        assert _get(srv.url, {"Authorization": f"Basic {good}"})[0] == 200
        assert _get(srv.url, {"Authorization": f"Basic {bad}"})[0] == 401
        assert _get(srv.url + "api/state", {"Authorization": "Bearer tok-123"})[0] == 200
        assert _get(srv.url + "api/state", {"Authorization": "Bearer tok-12"})[0] == 401
        code, hdrs, _ = _get(srv.url + "?token=tok-123")
        assert code == 303 and hdrs["Location"] == "/" and "HttpOnly" in hdrs["Set-Cookie"]
        assert _get(srv.url, {"Cookie": "txnwatch_token=tok-123"})[0] == 200
        assert _get(srv.url, {"Cookie": "txnwatch_token=wrong"})[0] == 401


def test_no_credential_of_the_config_reaches_a_page(tmp_path):
    """sasl/ssl passwords and the page's own secrets never appear in any response."""
    secrets = ["sasl-S3CRET-pw", "keystore-S3CRET", "ui-S3CRET-pass", "ui-S3CRET-token"]
    cfg = load(None, env={})
    cfg["kafka"].update(bootstrap_servers="k1:9092", sasl_plain_username="svc", sasl_plain_password=secrets[0],
                        security_protocol="SASL_SSL", ssl_keyfile="/etc/keys/" + secrets[1])
    cfg["ui"].update(enabled=True, port=0, basic_user="ops", basic_password=secrets[2], token=secrets[3])
    on_batch: list = []
    srv = serve_for_job(as_config(cfg).ui, as_config(cfg).streaming, on_batch, source="txnwatch-prod (kafka-txn)")
    try:
        a = alert("hanging", sasl_plain_password=secrets[0], evidence={"ssl_keyfile": secrets[1]})
        on_batch[0](0, {"alerts": [a], "open_alerts": {a["key"]: {"status": "hanging", "alert": a}}})
        auth = {"Authorization": f"Bearer {secrets[3]}"}
        bodies = [_get(srv.url + p, auth)[2] for p in
                  ("", "api/state", f"finding/{encode_key(a['key'])}", f"api/finding/{encode_key(a['key'])}",
                   "nope")]
        assert "orders-0" in bodies[0]
        for body in bodies:
            for secret in secrets:
                assert secret not in body
        assert secrets[2] not in repr(srv.settings) and secrets[3] not in repr(srv.settings)
    finally:
        srv.close()


# -- feeds and settings --------------------------------------------------------------------

def test_jsonl_tail_partial_lines_bad_lines_and_truncation(tmp_path):
    path = tmp_path / "alerts.jsonl"
    s = FindingStore(mode="feed", wall=Clock())
    tail = JsonlTail(str(path), s)
    assert tail.poll_once() == 0 and s.staleness()[0]  # no file yet
    line = json.dumps(alert("hanging"))
    path.write_text(line[:40])
    assert tail.poll_once() == 0 and not s.open  # half a line waits for its newline
    with open(path, "a") as f:
        f.write(line[40:] + "\n{not json\n" + json.dumps(alert("late", pid=8, first=30)) + "\n")
    assert tail.poll_once() == 2 and len(s.open) == 2 and not s.staleness()[0]
    assert any(f"{path}:2: not JSON" in e["message"] for e in s.feed["errors"])
    path.write_text(json.dumps(alert("resolved", at=T0 + 61 * MIN)) + "\n")  # truncated and rewritten
    tail.poll_once()
    assert "prod/orders/0/4002/9" in s.resolved and "prod/orders/0/4002/9" not in s.open


def test_run_ui_serves_an_alerts_file(tmp_path):
    from streaming.ui.app import run_ui

    path = tmp_path / "alerts.jsonl"
    path.write_text(json.dumps(alert("hanging")) + "\n")
    cfg = load(None, env={})
    cfg["ui"]["port"] = 0
    stop, ready = threading.Event(), []
    th = threading.Thread(target=run_ui, args=(as_config(cfg),), kwargs=dict(alerts_path=str(path), stop_event=stop,
                                                                  on_ready=ready.append))
    th.start()
    try:
        import time

        deadline = time.monotonic() + 20
        doc = {}
        while time.monotonic() < deadline:
            if ready:
                doc = json.loads(_get(ready[0].url + "api/state?html=0")[2])
                if doc["counts"]["hanging"]:
                    break
            time.sleep(0.2)
        assert doc["counts"]["hanging"] == 1 and doc["mode"] == "feed" and str(path) in doc["source"]
    finally:
        stop.set()
        th.join(20)
    assert not th.is_alive()


def test_settings():
    cfg = load(None, env={"TXNWATCH_UI_TOKEN": "t0k", "TXNWATCH_UI_ENABLED": "true"})
    s = as_config(cfg).ui
    assert (s.enabled, s.bind, s.port, s.token, s.auth_required) == (True, "127.0.0.1", 9465, "t0k", True)
    assert _stale(cfg) == 30.0  # 3 x "10 seconds" (the floor is 30 s)
    cfg["streaming"]["trigger_interval"] = "1 minute"
    assert _stale(cfg) == 180.0
    cfg["ui"]["stale_after_s"] = 7
    assert _stale(cfg) == 7.0
    assert interval_seconds("500 milliseconds") == 0.5 and interval_seconds("2 seconds") == 2.0
    with pytest.raises(ConfigError, match="trigger_interval"):
        interval_seconds("soon")
    cfg["ui"]["basic_user"] = "ops"
    with pytest.raises(ConfigError, match="basic_user and ui.basic_password"):
        as_config(cfg)
    cfg["ui"].update(basic_user="", port=70000)
    with pytest.raises(ConfigError, match="ui.port: expected 0-65535"):
        as_config(cfg)
    assert "t0k" not in repr(s)


def test_topic_feed_keeps_the_latest_record_per_key(tmp_path):
    from streaming.sinks.kafka_topic import KafkaAlertSink
    from streaming.sources.kafka import close_wires
    from streaming.ui.feeds import TopicFeed
    from tests.kafka_fake_broker import FakeKafkaBroker

    (tmp_path / "logs").mkdir()
    try:
        with FakeKafkaBroker(tmp_path / "logs") as broker:
            sink = KafkaAlertSink(broker.bootstrap_servers, "txnwatch-alerts", request_timeout_ms=5000)
            sink([alert("late", at=T0 + 21 * MIN), alert("hanging", pid=8, first=30), alert("hanging")])
            sink([alert("resolved", at=T0 + 70 * MIN)])
            sink.close()
            cfg = load(None, env={})
            cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=5000)
            store = FindingStore(mode="feed", wall=Clock())
            feed = TopicFeed(as_config(cfg).kafka, as_config(cfg).sinks, store, poll_ms=200)
            try:
                import time

                deadline = time.monotonic() + 30
                while store.feed["records"] < 4 and time.monotonic() < deadline:
                    feed.poll_once()
                feed._check()
            finally:
                feed._close_consumer()
        assert set(store.open) == {"prod/orders/0/8/30"} and set(store.resolved) == {"prod/orders/0/4002/9"}
        assert [h["status"] for h in store.history["prod/orders/0/4002/9"]] == ["late", "hanging", "resolved"]
        assert "txnwatch-alerts partition position/end 0: 4/4" == store.feed["position"]
    finally:
        close_wires()


def test_port_in_use_is_a_config_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        cfg = load(None, env={})
        cfg["ui"].update(enabled=True, port=s.getsockname()[1])
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
            serve_for_job(as_config(cfg).ui, as_config(cfg).streaming, [], source="x")


def _stale(cfg) -> float:
    c = as_config(cfg)
    return c.ui.stale_limit_s(c.streaming.trigger_interval)


def test_unverified_reasons_on_overview_and_finding_page():
    # issue 19: every reason an open finding is not verified is shown, with what would supply it
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("hanging", verified=False, cause="coordinator-unaware",
                   unverified_reasons=["newest-segment-not-proven", "coordinator-copy-empty"],
                   verify_hint="newest-segment-not-proven: give orders-0's whole log directory"))
    s.ingest(alert("hanging", pid=8, first=30, unverified_reasons=[]))
    overview = render.overview_page(s.snapshot())
    assert "newest-segment-not-proven, coordinator-copy-empty" in overview
    page = render.finding_page(s.finding("prod/orders/0/4002/9"))
    assert 'id="unverified-reasons"' in page
    assert "Not verified because" in page
    assert "An empty coordinator copy cannot show it is current" in page
    assert "the broker&#39;s offset checkpoint files" in page
    verified_page = render.finding_page(s.finding("prod/orders/0/8/30"))
    assert 'id="unverified-reasons"' not in verified_page


# -- issue 25: group-held findings and the cluster's transaction version ------------------------------

def test_overview_and_finding_page_show_a_group_offsets_held_finding():
    """A finding of kind group-offsets-held (an open TxnOffsetCommit on __consumer_offsets): the row
    names the kind, the groups it holds and the pending topic-partitions; a data transaction's row
    carries no kind badge."""
    from streaming.ui import render

    s = FindingStore(mode="feed", wall=Clock())
    commits = [{"group": "billing", "topic": "orders", "partition": 0, "committed_offset": 40, "record_offset": 0,
                "unstable": True, "reason": None},
               {"group": "billing", "topic": "orders", "partition": 1, "committed_offset": 57, "record_offset": 1,
                "unstable": True, "reason": None}]
    s.ingest(alert("hanging", topic="__consumer_offsets", partition=3, pid=100, first=0, cause="coordinator-unaware",
                   kind="group-offsets-held", blocked_groups=["billing"], lagging_groups=None,
                   pending_offset_commits=commits, transaction_version=2))
    s.ingest(alert("hanging", pid=200, first=0, kind="transaction", blocked_groups=[]))
    page = render.overview_page(s.snapshot())
    row = page.split('data-key="prod/__consumer_offsets/3/100/0"')[1].split("</tr>")[0]
    assert 'class="small warn kind"' in row and ">group-offsets-held</div>" in row
    assert "billing" in row.split('class="c-groups"')[1]
    assert "offset commits held: billing orders-0 → 40 (UNSTABLE_OFFSET_COMMIT); billing orders-1 → 57 " \
           "(UNSTABLE_OFFSET_COMMIT)" in row
    data_row = page.split('data-key="prod/orders/0/200/0"')[1].split("</tr>")[0]
    assert 'class="small warn kind"' not in data_row
    # the feed's per-cluster facts: the transaction version the alerts carry
    assert s.snapshot()["clusters"] == {"prod": {"transaction_version": 2}}
    assert "Transaction version of prod" in page
    finding = render.finding_page(s.finding("prod/__consumer_offsets/3/100/0"))
    assert 'id="finding-kind"' in finding and "Groups held: billing." in finding
    assert "UNSTABLE_OFFSET_COMMIT" in finding and "Finding kind" in finding
    assert "abort --topic &#39;__consumer_offsets&#39; --partition 3 --start-offset 0" in finding or \
        "abort --topic '__consumer_offsets' --partition 3 --start-offset 0" in finding


def test_job_page_shows_the_transaction_version():
    """The job's status page: the finalized transaction.version the last micro-batch read
    (ApiVersions v3+ FinalizedFeatures, KIP-584/KIP-890); "not reported" before 2.4 brokers."""
    from streaming.ui import render

    job = FindingStore(mode="job", wall=Clock())
    job.observe_batch(0, {"alerts": [], "open_alerts": {}, "partitions": {}, "transaction_version": None})
    assert "not reported" in render.overview_page(job.snapshot()).split('id="job-transaction-version"')[1][:200]
    job.observe_batch(1, {"alerts": [], "open_alerts": {}, "partitions": {}, "transaction_version": 2})
    assert render.overview_page(job.snapshot()).split('id="job-transaction-version"')[1].split("</dd>")[0] \
        .endswith(">2")
