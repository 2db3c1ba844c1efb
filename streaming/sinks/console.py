"""Console sink: a table an operator can read at 3 a.m., with the commands on their own lines so
they can be copied whole."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any, TextIO

from streaming.vocab import HANGING, RESOLVED

COLUMNS = (
    ("STATUS", "status"), ("CAUSE", "cause"), ("TOPIC", "topic"), ("PART", "partition"),
    ("PRODUCER", "producer_id"), ("EPOCH", "producer_epoch"), ("FIRST", "first_offset"),
    ("LAST", "last_offset"), ("OPEN", "open_ms"), ("RECORDS", "records"), ("TXN ID", "transactional_id"),
    ("COORD", "coordinator_state"), ("LSO", "lso"),
)


def _dur(ms: Any) -> str:
    if ms is None:
        return "-"
    s = int(ms) // 1000
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d" if d else "") + (f"{h}h" if h or d else "") + f"{m:02d}m{s:02d}s"


def _cell(key: str, a: dict[str, Any]) -> str:
    v = a.get(key)
    if key == "open_ms":
        return _dur(v)
    if key == "status" and a.get("status") == HANGING and not a.get("verified", True):
        return "hanging?"
    return "-" if v is None else str(v)


def format_table(alerts: list[dict[str, Any]], *, commands: bool = True) -> str:
    """Alerts as an aligned table, followed by each hanging finding's commands."""
    if not alerts:
        return "no findings\n"
    rows = [[h for h, _ in COLUMNS]] + [[_cell(k, a) for _, k in COLUMNS] for a in alerts]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if commands:
        for a in alerts:
            if a.get("status") == RESOLVED:
                continue
            if a.get("status") in ("unavailable", "available"):
                lines.append("")
                lines.append(f"# {a['key']}  partition {a['status']}"
                             + (f": {a['reason']}" if a.get("reason") else "")
                             + ("; its findings are stale until it is read again" if a["status"] == "unavailable"
                                else ""))
                continue
            lines.append("")
            lines.append(f"# {a['key']}  {a['status']} ({a.get('cause')})"
                         + ("" if a.get("verified", True) else "  UNVERIFIED"))
            if a.get("confirmed_by") is not None:
                lines.append(f"#   confirmed by the brokers: {', '.join(a['confirmed_by']) or 'none'}")
            if a.get("kind") == "group-offsets-held":
                held = [f"{c['group']} {c['topic']}-{c['partition']}" for c in a.get("pending_offset_commits") or []
                        if c.get("group") is not None]
                lines.append("#   group-offsets-held: an open transactional offset commit on __consumer_offsets; its "
                             "groups get UNSTABLE_OFFSET_COMMIT" + (f": {', '.join(held)}" if held else ""))
            if a.get("blocked_groups"):
                lines.append(f"#   blocked consumer groups: {', '.join(a['blocked_groups'])}")
            if a.get("unverified_reasons"):
                lines.append(f"#   not verified: {', '.join(a['unverified_reasons'])}")
            if a.get("status") != HANGING:
                lines.append("#   late: do not abort; the coordinator still owns this transaction")
                if a.get("verify_hint"):
                    lines.append(f"#   {a['verify_hint']}")
                continue
            if a.get("verify_hint"):
                lines.append(f"#   {a['verify_hint']}")
            if a.get("abort_command_new") is None:  # the producer is not identified (pinned LSO)
                lines.append("#   no abort command until the producer is identified (see above)")
                continue
            lines.append("#   brokers 3.0+:")
            lines.append(f"    {a['abort_command_new']}")
            if a.get("abort_command_legacy"):
                lines.append(f"#   brokers < 3.0 (coordinator epoch from {a['coordinator_epoch_source']}):")
                lines.append(f"    {a['abort_command_legacy']}")
            else:
                lines.append("#   brokers < 3.0: coordinator epoch unknown; dump the producer snapshot or read the "
                             "partition from its log start to get it")
    return "\n".join(lines) + "\n"


class ConsoleSink:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def __call__(self, alerts: list[dict[str, Any]]) -> None:
        if not alerts:
            return
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        self.out.write(f"\n== txnwatch alerts @ {stamp} ==\n")
        self.out.write(format_table(alerts))
        self.out.flush()
