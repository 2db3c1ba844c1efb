"""HTML and JSON of the status page: Jinja2 templates (package data, autoescape always on).

Pages are rendered from the plain data of :class:`streaming.ui.store.FindingStore`
(``snapshot()`` / ``finding()``); the same template fragment serves the first page load and the
JSON refresh (``html`` member), so there is one rendering path and every value is escaped by
Jinja before it reaches the browser.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from streaming.ui import fields

_ENV: Environment | None = None


def fmt_duration(ms: Any) -> str:
    """``3589941`` → ``59m 49s``; ``None`` → ``—``."""
    if ms is None or isinstance(ms, bool):
        return "—"
    s = int(ms) // 1000
    if s < 60:
        return f"{s}s" if ms >= 1000 or ms == 0 else f"{int(ms)}ms"
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    return f"{m}m {s}s"


def fmt_time(ms: Any) -> str:
    """Epoch ms → ``2023-11-14 22:13:20 UTC``."""
    if ms is None or isinstance(ms, bool):
        return "—"
    try:
        t = dt.datetime.fromtimestamp(int(ms) / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError, TypeError):
        return str(ms)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_bytes(n: Any) -> str:
    if n is None or isinstance(n, bool):
        return "—"
    n = int(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def fmt_value(v: Any, name: str = "") -> str:
    """One field value as text (lists joined, booleans as yes/no, times and durations readable)."""
    if v is None:
        return "—"
    if name in fields.TIME_FIELDS or name.endswith(("_at_ms", "since_ms", "read_ms")):
        return fmt_time(v)
    if name in fields.DURATION_FIELDS:
        return fmt_duration(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if name == "pending_offset_commits" and isinstance(v, list | tuple):
        return "; ".join(_held_commit(c) for c in v) if v else "none"
    if isinstance(v, list | tuple):
        return ", ".join(fmt_value(x) for x in v) if v else "none"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, int) and name == "bytes":
        return f"{v:,} ({fmt_bytes(v)})" if v >= 1024 else f"{v} B"
    if isinstance(v, int) and name in ("records", "batches"):
        return f"{v:,}"
    return str(v)


def _held_commit(c: Any) -> str:
    """One entry of ``pending_offset_commits``: "group topic-partition → offset (UNSTABLE_OFFSET_COMMIT)"."""
    if not isinstance(c, dict):
        return str(c)
    if c.get("group") is None:
        return str(c.get("reason") or "undecoded batch")
    stable = {True: " (UNSTABLE_OFFSET_COMMIT)", False: " (stable)"}.get(c.get("unstable"), "")
    return f"{c.get('group')} {c.get('topic')}-{c.get('partition')} → {c.get('committed_offset')}{stable}"


def env() -> Environment:
    """The page's Jinja environment (autoescape on for every template, undefined is an error)."""
    global _ENV
    if _ENV is None:
        e = Environment(loader=PackageLoader("streaming.ui", "templates"), autoescape=True,
                        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        e.filters.update(duration=fmt_duration, time=fmt_time, bytes=fmt_bytes, value=fmt_value)
        e.globals.update(fields=fields, is_secret=fields.is_secret_key)
        _ENV = e
    return _ENV


def overview_fragment(snapshot: dict[str, Any]) -> str:
    return env().get_template("_overview.html").render(data=snapshot)


def overview_page(snapshot: dict[str, Any]) -> str:
    return env().get_template("overview.html").render(data=snapshot)


def to_json(doc: dict[str, Any]) -> str:
    """JSON with ``<`` escaped (``\\u003c``): no HTML can be sniffed out of an API answer."""
    return json.dumps(doc, separators=(",", ":"), default=str).replace("<", "\\u003c")


def overview_json(snapshot: dict[str, Any], *, with_html: bool = True) -> str:
    doc = dict(snapshot)
    if with_html:
        doc["html"] = overview_fragment(snapshot)
    return to_json(doc)


def finding_fragment(doc: dict[str, Any]) -> str:
    return env().get_template("_finding.html").render(data=doc, f=doc["finding"], other=other_fields(doc["finding"]))


def finding_page(doc: dict[str, Any]) -> str:
    return env().get_template("finding.html").render(data=doc, f=doc["finding"], other=other_fields(doc["finding"]))


def finding_json(doc: dict[str, Any]) -> str:
    return to_json(dict(doc, html=finding_fragment(doc)))


def not_found_page(what: str) -> str:
    return env().get_template("not_found.html").render(what=what)


# Keys the store adds to a finding view (derived, shown in their own places).
_DERIVED = frozenset({"url", "group", "cause_text", "kind_text", "age_ms", "current_lso", "current_high_watermark",
                      "lso_lag_records", "lso_lag_ms", "pins_lso_now", "open", "history", "resolved_at_ms",
                      "abort_cli", "audit"})


def other_fields(finding: dict[str, Any]) -> list[tuple[str, Any]]:
    """Fields of the alert that no section names (a newer schema's additions): shown as they are."""
    known = fields.listed_fields() | _DERIVED
    return [(k, v) for k, v in sorted(finding.items()) if k not in known and not fields.is_secret_key(k)]
