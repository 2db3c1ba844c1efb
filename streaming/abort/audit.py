"""The abort audit trail: every attempt (dry run, refusal, execution, the broker's answer) as one
JSON line appended to ``[abort] audit_path``, and published on the alerts topic as an ``abort``
record (``record_type = "abort"``, Kafka key ``<alert key>#abort@<ms>`` so that a compacted alerts
topic keeps every attempt and never replaces the finding's own record).

Each line says who ran it (OS user, host, process), what was re-read, what was decided and, for an
execution, what was sent and what the broker answered.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

RECORD_TYPE = "abort"
AUDIT_SCHEMA_VERSION = 1


def who() -> dict[str, Any]:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = f"uid:{os.getuid()}"
    return {"user": user, "host": socket.gethostname(), "pid": os.getpid()}


def audit_record(*, key: str, at_ms: int, mode: str, outcome: str, exit_code: int | None, message: str,
                 reread: dict[str, Any] | None = None, plan: dict[str, Any] | None = None,
                 sent: dict[str, Any] | None = None, answer: dict[str, Any] | None = None,
                 lso_after: int | None = None) -> dict[str, Any]:
    """One audit line. ``mode``: ``dry-run`` | ``execute``; ``outcome``: ``would-abort``,
    ``refused``, ``cancelled``, ``sending``, ``aborted``, ``rejected``, ``not-confirmed``, ``error``."""
    return {"schema_version": AUDIT_SCHEMA_VERSION, "record_type": RECORD_TYPE, "key": f"{key}#abort@{at_ms}",
            "finding_key": key, "at_ms": at_ms, "mode": mode, "outcome": outcome, "exit_code": exit_code,
            "message": message, "who": who(), "reread": reread, "plan": plan, "sent": sent, "answer": answer,
            "lso_after": lso_after}


class AuditLog:
    """Appends audit lines to ``path`` (fsync'ed: the line must survive a crash right after a
    marker was sent) and hands each to ``publish`` (the alerts-topic sink) when given. A failed
    publish is logged and does not change the outcome: the file is the record of truth."""

    def __init__(self, path: str, publish: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.path = os.path.abspath(path)
        self.publish = publish
        self.publish_errors: list[str] = []

    def write(self, record: dict[str, Any]) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.publish is not None:
            try:
                self.publish([record])
            except Exception as exc:  # the file already holds the line; say so and go on
                msg = f"could not publish the audit record on the alerts topic: {type(exc).__name__}: {exc}"
                self.publish_errors.append(msg)
                log.warning("%s", msg)


    def close(self) -> None:
        close = getattr(self.publish, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:  # the attempt is over; only say it
                self.publish_errors.append(f"closing the alerts-topic producer failed: {exc}")


def read_audit(path: str) -> list[dict[str, Any]]:
    """Every audit line of a file (lines that are not JSON objects are skipped)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("record_type") == RECORD_TYPE:
                out.append(rec)
    return out
