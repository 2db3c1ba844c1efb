"""The status page's part of the guarded abort (issue 22): per hanging finding the exact
``txnwatch abort KEY`` line with a copy button beside Kafka's two commands, and the audit trail of
attempts read from the audit file (or the alerts topic)."""

from __future__ import annotations

from streaming.abort.audit import AuditLog, audit_record
from streaming.ui import render
from streaming.ui.feeds import AuditTail
from streaming.ui.store import FindingStore
from tests.test_ui import T0, Clock, alert

KEY = "prod/orders/0/4002/9"


def test_hanging_finding_shows_the_guarded_abort_line_with_a_copy_button():
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("hanging"))
    html = render.finding_page(s.finding(KEY))
    assert f'<code id="cmd-abort-cli">txnwatch abort {KEY}</code>' in html
    assert 'data-copy="cmd-abort-cli"' in html
    # beside the two Kafka commands, each still with its own copy button
    assert 'data-copy="cmd-abort_command_new"' in html and 'data-copy="cmd-abort_command_legacy"' in html
    assert "No txnwatch abort attempt recorded" in html


def test_the_abort_line_quotes_a_key_a_shell_would_split():
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("hanging", key="prod cluster/orders/0/4002/9"))
    html = render.finding_page(s.finding("prod cluster/orders/0/4002/9"))
    assert "txnwatch abort &#39;prod cluster/orders/0/4002/9&#39;" in html


def test_late_finding_has_no_abort_line():
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("late"))
    html = render.finding_page(s.finding(KEY))
    assert "cmd-abort-cli" not in html and "txnwatch abort prod" not in html


def test_audit_trail_from_the_audit_file(tmp_path):
    path = tmp_path / "audit.jsonl"
    s = FindingStore(mode="feed", wall=Clock())
    s.ingest(alert("hanging"))
    tail = AuditTail(str(path), s)
    assert tail.poll_once() == 0 and s.staleness()[0] is False  # no file yet: normal, not stale
    log = AuditLog(str(path))
    log.write(audit_record(key=KEY, at_ms=T0 + 1000, mode="dry-run", outcome="would-abort", exit_code=0,
                           message="state confirmed; dry run, nothing sent"))
    log.write(audit_record(key=KEY, at_ms=T0 + 2000, mode="execute", outcome="refused", exit_code=4,
                           message="closed: the transaction is closed"))
    log.write(audit_record(key="prod/orders/1/7/3", at_ms=T0 + 3000, mode="dry-run", outcome="refused",
                           exit_code=4, message="other finding"))
    assert tail.poll_once() == 3
    s.ingest(audit_record(key=KEY, at_ms=T0 + 2000, mode="execute", outcome="refused", exit_code=4,
                          message="closed: the transaction is closed"))  # the same line via the topic
    f = s.finding(KEY)["finding"]
    assert [(a["outcome"], a["exit_code"]) for a in f["audit"]] == [("would-abort", 0), ("refused", 4)]
    html = render.finding_page(s.finding(KEY))
    assert "Abort attempts" in html and "would-abort" in html and "closed: the transaction is closed" in html
    assert "other finding" not in html
    assert not s.feed["errors"]


def test_the_job_page_reads_the_audit_file_on_every_micro_batch(tmp_path):
    from streaming.config import load_config
    from streaming.ui import serve_for_job

    path = tmp_path / "audit.jsonl"
    cfg = load_config(None, env={}, overrides={"ui.enabled": True, "ui.port": 0})
    on_batch: list = []
    server = serve_for_job(cfg.ui, cfg.streaming, on_batch, source="test", audit_path=str(path))
    try:
        server.store.ingest(alert("hanging"))
        for cb in on_batch:
            cb(0, {})  # no audit file yet: nothing happens, nothing raises
        AuditLog(str(path)).write(audit_record(key=KEY, at_ms=T0 + 1000, mode="execute", outcome="aborted",
                                               exit_code=0, message="the LSO moved"))
        for cb in on_batch:
            cb(1, {})
        assert [a["outcome"] for a in server.store.finding(KEY)["finding"]["audit"]] == ["aborted"]
    finally:
        server.close()
