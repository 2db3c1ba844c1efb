"""The operator status page (docs/runbook.md "Status page").

:mod:`~streaming.ui.store` keeps what the page shows (fed by the job's ``on_batch`` callback or
by an alerts feed), :mod:`~streaming.ui.render` turns it into HTML/JSON with the Jinja2 templates
of this package, :mod:`~streaming.ui.server` serves it, :mod:`~streaming.ui.feeds` tails an
alerts file or the alerts topic, :mod:`~streaming.ui.fields` is the one list of alert fields the
page knows. No Spark here: the job reaches the page only through ``on_batch``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streaming.config import StreamingConfig, UiConfig

log = logging.getLogger("txnwatch")


def serve_for_job(ui: UiConfig, streaming: StreamingConfig, on_batch: list, *, source: str,
                  audit_path: str | None = None):
    """Start the page for a running job when ``[ui] enabled``; registers the store's
    ``observe_batch`` in ``on_batch`` (and, with ``audit_path``, a read of the ``txnwatch abort``
    audit file on every micro-batch). Returns the :class:`~streaming.ui.server.UIServer` or None."""
    stale_after_s = ui.stale_limit_s(streaming.trigger_interval)  # checked even when the page is off
    if not ui.enabled:
        return None
    from streaming.config import ConfigError
    from streaming.ui.server import UIServer
    from streaming.ui.store import FindingStore

    store = FindingStore(mode="job", source=source, stale_after_s=stale_after_s)
    try:
        server = UIServer(store, ui)
    except OSError as exc:
        raise ConfigError(f"ui.port/ui.bind: cannot listen on {ui.bind}:{ui.port}: "
                          f"{exc.strerror or exc}") from None
    on_batch.append(store.observe_batch)
    if audit_path:
        from streaming.ui.feeds import AuditTail

        tail = AuditTail(audit_path, store)

        def read_audit(_batch_id: int, _stats: dict) -> None:
            try:
                tail.poll_once()
            except Exception:  # the page must never fail a micro-batch
                log.exception("status page: could not read the abort audit file %s", audit_path)

        on_batch.append(read_audit)
    log.warning("status page on %s", server.url)
    return server
