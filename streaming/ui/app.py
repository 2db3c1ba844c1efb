"""``txnwatch ui``: the status page for a job that runs elsewhere (alerts file or topic)."""

from __future__ import annotations

import logging
import signal
import threading

from streaming.config import Config
from streaming.ui.feeds import AuditTail, JsonlTail, TopicFeed
from streaming.ui.server import UIServer
from streaming.ui.store import FindingStore

log = logging.getLogger("txnwatch")


def run_ui(cfg: Config, *, alerts_path: str | None, stop_event: threading.Event | None = None,
           on_ready=None) -> int:
    """Serve until SIGTERM/SIGINT (or ``stop_event``). ``alerts_path`` → follow that JSONL file,
    else read the config's alerts topic. ``on_ready(server)`` is called once it serves."""
    stale_after_s = cfg.ui.stale_limit_s(cfg.streaming.trigger_interval)
    if alerts_path:
        store = FindingStore(mode="feed", source=f"alerts file {alerts_path}", stale_after_s=stale_after_s)
        feed: JsonlTail | TopicFeed = JsonlTail(alerts_path, store)
    else:
        store = FindingStore(mode="feed", source=f"alerts topic {cfg.sinks.kafka_topic}",
                             stale_after_s=stale_after_s)
        feed = TopicFeed(cfg.kafka, cfg.sinks, store)
    stop = stop_event or threading.Event()

    def _on_signal(signum, _frame):
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
    reader = threading.Thread(target=feed.run, name="txnwatch-ui-feed", daemon=True)
    reader.start()
    # the abort audit trail (txnwatch abort on this machine; the alerts topic carries it too)
    audit = AuditTail(cfg.abort.audit_path, store)
    threading.Thread(target=audit.run, name="txnwatch-ui-audit", daemon=True).start()
    with UIServer(store, cfg.ui) as server:
        log.warning("status page on %s (reading %s)", server.url, store.source)
        if on_ready is not None:
            on_ready(server)
        stop.wait()
        feed.stop()
        audit.stop()
        reader.join(timeout=15)
    return 0
