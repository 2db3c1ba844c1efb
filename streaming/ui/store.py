"""What the status page shows, kept in memory and fed from the alert stream (pure Python).

Three feeds use the same :class:`FindingStore`:

* the running job: :meth:`FindingStore.observe_batch` is an ``on_batch`` callback of
  :class:`streaming.microbatch.SinkSet`; it reads the micro-batch ``stats`` of
  ``microbatch.BatchWriter`` (``alerts`` published, ``open_alerts`` = the enricher's open set,
  ``partitions`` = latest high watermark / LSO / log start per partition, ``open_transactions``,
  ``gaps``, ``rows``, ``progress``, ``now_ms`` = the job's event-time clock, ``duration_s``);
* ``txnwatch ui --alerts FILE`` and ``--config CFG``: :meth:`FindingStore.ingest` per alert
  record (the JSONL file or the alerts topic, see :mod:`streaming.ui.feeds`).

Records are handled by status: ``late``/``hanging`` open a finding (history
late ↔ hanging), ``resolved`` closes it (kept for ``resolved_window_ms``), ``unavailable`` /
``available`` are per-partition availability records (key ``cluster/topic/partition``).
Replays are harmless: a record whose status equals the key's current status only refreshes the
fields (sinks are at-least-once; a compacted alerts topic keeps the latest record per key).
"""

from __future__ import annotations

import base64
import binascii
import logging
import shlex
import threading
import time
from collections.abc import Callable
from typing import Any

from streaming.metrics import _num
from streaming.ui.fields import (
    CAUSE_TEXT,
    GROUPS,
    KIND_TEXT,
    OPEN_STATUSES,
    PARTITION_STATUSES,
    RESOLVED_STATUS,
    is_secret_key,
)

log = logging.getLogger("txnwatch")

DAY_MS = 24 * 3600 * 1000
TXN_STATE_TOPIC = "__transaction_state"
MAX_POSITIONS = 200  # read positions listed on the page (the JSON has them all)
MAX_FEED_ERRORS = 20


def encode_key(key: str) -> str:
    """URL path segment for a finding key: base64url without padding (keys hold '/', and
    proxies disagree on '%2F')."""
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii").rstrip("=")


def decode_key(token: str) -> str | None:
    """Inverse of :func:`encode_key`; None for anything that is not one."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        return raw.decode("utf-8") or None
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def _int(v: Any) -> int | None:
    """A number of a record as int; None for null, NaN, booleans and non-numbers."""
    f = _num(v)
    return None if f is None else int(f)


def _tp_order(name: str) -> tuple[str, int]:
    """"topic-partition" sorted by topic, then partition as a number."""
    topic, _, part = name.rpartition("-")
    return (topic, int(part)) if topic and part.isdigit() else (name, -1)


def group_of(alert: dict[str, Any]) -> str:
    """Overview group: unverified findings first, whatever their status (fields.GROUPS)."""
    if alert.get("verified") is False:
        return "unverified"
    return "hanging" if alert.get("status") == "hanging" else "late"


def public_view(record: dict[str, Any]) -> dict[str, Any]:
    """A record without any credential-looking key (fields.SECRET_MARKERS), recursively."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if is_secret_key(str(k)):
            continue
        out[k] = public_view(v) if isinstance(v, dict) else v
    return out


class FindingStore:
    """Thread-safe: fed by one thread (the job's micro-batches or a feed), read by the server.

    ``mode`` is ``job`` (fed by micro-batches: ages use the job's clock, and the page turns stale
    when no micro-batch arrived for ``stale_after_s``) or ``feed`` (alerts file or topic: ages use
    the wall clock, and the page turns stale when the feed reports an error).
    """

    def __init__(self, *, mode: str = "job", source: str = "", stale_after_s: float = 30.0,
                 resolved_window_ms: int = DAY_MS, history_limit: int = 50,
                 wall: Callable[[], float] = time.time) -> None:
        if mode not in ("job", "feed"):
            raise ValueError(f"mode: expected 'job' or 'feed', got {mode!r}")
        self.mode = mode
        self.source = source
        self.stale_after_s = float(stale_after_s)
        self.resolved_window_ms = int(resolved_window_ms)
        self.history_limit = int(history_limit)
        self._wall = wall
        self._lock = threading.RLock()
        self.started_wall = wall()
        self.open: dict[str, dict[str, Any]] = {}
        self.resolved: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}
        # ``txnwatch abort`` attempts per finding key (audit records, streaming/abort/audit.py)
        self.audits: dict[str, list[dict[str, Any]]] = {}
        self.unavailable: dict[str, dict[str, Any]] = {}
        self.partitions: dict[str, dict[str, Any]] = {}
        self.open_transactions: list[dict[str, Any]] = []
        self.job: dict[str, Any] = {}
        self.clusters: dict[str, dict[str, Any]] = {}  # cluster -> {"transaction_version": n}
        self.job_clock_ms: int | None = None
        self.last_update_wall: float | None = None
        self.feed: dict[str, Any] = {"records": 0, "errors": [], "error": None, "position": None}
        self.version = 0  # bumped on every change (the page only re-renders on a change)

    # -- feeding ---------------------------------------------------------------------------
    def ingest(self, record: dict[str, Any]) -> bool:
        """One alert-stream record. Returns False (and notes why) for a record it cannot use."""
        with self._lock:
            ok = self._ingest(record)
            self.feed["records"] += 1
            self.version += 1
            if self.mode == "feed":
                self.last_update_wall = self._wall()
            return ok

    def _ingest(self, record: dict[str, Any]) -> bool:
        if not isinstance(record, dict):
            self._feed_error(f"record is not a JSON object: {str(record)[:80]}")
            return False
        if record.get("record_type") == "abort":
            return self._ingest_audit(record)
        key, status = record.get("key"), record.get("status")
        if not isinstance(key, str) or not key:
            self._feed_error(f"record without a key (status {status!r})")
            return False
        at = _int(record.get("detected_at"))
        if at is not None and (self.job_clock_ms is None or at > self.job_clock_ms) and self.mode == "job":
            self.job_clock_ms = at
        if status in PARTITION_STATUSES:
            if status == "unavailable":
                self.unavailable[key] = dict(record)
            else:
                self.unavailable.pop(key, None)
            return True
        if record.get("transaction_version") is not None and record.get("cluster"):
            self.clusters.setdefault(str(record["cluster"]), {})["transaction_version"] = \
                _int(record["transaction_version"])
        if status in OPEN_STATUSES:
            self.resolved.pop(key, None)  # a key re-opened (rare: same first offset re-judged)
            self.open[key] = dict(record)
            self._history(key, record)
            return True
        if status == RESOLVED_STATUS:
            self.open.pop(key, None)
            entry = dict(record)
            entry["resolved_at_ms"] = at if at is not None else int(self._wall() * 1000)
            self.resolved[key] = entry
            self._history(key, record)
            return True
        self._feed_error(f"{key}: unknown status {status!r}")
        return False

    def _history(self, key: str, record: dict[str, Any]) -> None:
        hist = self.history.setdefault(key, [])
        item = {"status": record.get("status"), "at_ms": _int(record.get("detected_at")),
                "cause": record.get("cause"), "verified": record.get("verified"),
                "resolution": record.get("resolution")}
        if hist and all(hist[-1].get(f) == item[f] for f in ("status", "cause", "verified")):
            return  # a replay of the same state (at-least-once sinks)
        hist.append(item)
        del hist[:-self.history_limit]

    def remove(self, key: str) -> None:
        """A tombstone on the alerts topic: forget the key."""
        with self._lock:
            for d in (self.open, self.resolved, self.history, self.unavailable):
                d.pop(key, None)
            self.version += 1

    def observe_batch(self, batch_id: int, stats: dict[str, Any]) -> None:
        """``on_batch`` callback of the job. Never raises: the page must not fail a micro-batch."""
        try:
            with self._lock:
                self._observe_batch(batch_id, stats)
        except Exception:  # logged, the job goes on
            log.exception("status page: could not take micro-batch %s", batch_id)

    def _observe_batch(self, batch_id: int, stats: dict[str, Any]) -> None:
        now_ms = _int(stats.get("now_ms"))
        if now_ms is not None:
            self.job_clock_ms = max(now_ms, self.job_clock_ms or now_ms)
        for a in stats.get("alerts") or []:
            self._ingest(a)
        active = stats.get("open_alerts")
        if isinstance(active, dict):
            # The enricher's open set is the job's truth: it seeds findings opened before a
            # restart (never re-published) and drops any the job no longer holds.
            for key, entry in active.items():
                alert = (entry or {}).get("alert") if isinstance(entry, dict) else None
                if isinstance(alert, dict) and key not in self.open:
                    self.open[key] = dict(alert)
                    self._history(key, alert)
            for key in [k for k in self.open if k not in active]:
                self.open.pop(key)
        if isinstance(stats.get("partitions"), dict):
            self.partitions = {k: dict(v or {}) for k, v in stats["partitions"].items()}
        if isinstance(stats.get("open_transactions"), list):
            self.open_transactions = list(stats["open_transactions"])
        gaps = stats.get("gaps") or []
        self.job = {
            "batch_id": batch_id,
            "at_wall_ms": int(self._wall() * 1000),
            "duration_s": stats.get("duration_s"),
            "rows": stats.get("rows"),
            "progress": stats.get("progress"),
            "gaps": len(gaps),
            "gap_reasons": [str(g.get("reason") or "")[:200] for g in gaps[:5]],
            "alerts": len(stats.get("alerts") or []),
            "source_lag": stats.get("source_lag"),
            "transaction_version": _int(stats.get("transaction_version")),
        }
        self.last_update_wall = self._wall()
        self.version += 1

    def note_feed_ok(self, position: str | None = None) -> None:
        """The feed (file or topic) was read successfully just now."""
        with self._lock:
            if self.feed["error"] is not None or position != self.feed["position"]:
                self.version += 1
            self.feed["error"] = None
            self.feed["position"] = position
            self.feed["ok_wall_ms"] = int(self._wall() * 1000)

    def note_bad_input(self, message: str) -> None:
        """A line or record that was skipped (shown under "Input problems"; not stale)."""
        with self._lock:
            self._feed_error(message)
            self.version += 1

    def note_feed_error(self, message: str) -> None:
        """The feed failed (file unreadable, alerts topic unreachable): the page turns stale."""
        with self._lock:
            self._feed_error(message)
            self.feed["error"] = message
            self.version += 1

    def _feed_error(self, message: str) -> None:
        errs = self.feed["errors"]
        errs.append({"at_ms": int(self._wall() * 1000), "message": message[:300]})
        del errs[:-MAX_FEED_ERRORS]

    # -- reading ---------------------------------------------------------------------------
    def reference_ms(self) -> int:
        """The clock ages are measured against (job clock in job mode, else wall)."""
        if self.mode == "job" and self.job_clock_ms is not None:
            return self.job_clock_ms
        return int(self._wall() * 1000)

    def staleness(self) -> tuple[bool, str | None]:
        now = self._wall()
        if self.mode == "job":
            last = self.last_update_wall if self.last_update_wall is not None else self.started_wall
            if now - last > self.stale_after_s:
                what = "no micro-batch" if self.last_update_wall is not None else "no micro-batch yet"
                return True, f"{what} for {now - last:.0f} s (limit {self.stale_after_s:.0f} s): the job may be stopped or stuck"
            return False, None
        if self.feed["error"]:
            return True, f"reading alerts failed: {self.feed['error']}"
        return False, None

    def _partition_facts(self, topic: Any, partition: Any) -> dict[str, Any]:
        return self.partitions.get(f"{topic}-{partition}") or {}

    def _finding_view(self, alert: dict[str, Any], ref: int) -> dict[str, Any]:
        v = public_view(alert)
        v["url"] = "/finding/" + encode_key(str(alert["key"]))
        v["group"] = group_of(alert)
        v["cause_text"] = CAUSE_TEXT.get(alert.get("cause") or "")
        v["kind_text"] = KIND_TEXT.get(alert.get("kind") or "")
        # the guarded abort (streaming/abort): re-checks the broker before writing the marker
        v["abort_cli"] = f"txnwatch abort {shlex.quote(str(alert['key']))}"
        first_ts = _int(alert.get("first_ts"))
        v["age_ms"] = max(0, ref - first_ts) if first_ts is not None else _int(alert.get("open_ms"))
        facts = self._partition_facts(alert.get("topic"), alert.get("partition"))
        lso = _int(facts.get("lso")) if facts.get("lso") is not None else _int(alert.get("lso"))
        hw = (_int(facts.get("high_watermark")) if facts.get("high_watermark") is not None
              else _int(alert.get("high_watermark")))
        v["current_lso"], v["current_high_watermark"] = lso, hw
        v["lso_lag_records"] = max(0, hw - lso) if lso is not None and hw is not None else None
        first = _int(alert.get("first_offset"))
        pins = (lso == first) if lso is not None and first is not None else alert.get("pins_lso")
        v["pins_lso_now"] = pins
        # While this transaction pins the LSO, read_committed consumers wait since its first write.
        v["lso_lag_ms"] = v["age_ms"] if pins else None
        return v

    def _lagging(self, ref: int, findings_by_tp: dict[tuple[str, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        oldest: dict[tuple[str, int], int] = {}
        for t in self.open_transactions:
            ts = _int(t.get("first_ts"))
            tp = (str(t.get("topic")), _int(t.get("partition")) or 0)
            if ts is not None:
                oldest[tp] = min(ts, oldest.get(tp, ts))
        for tp, lst in findings_by_tp.items():
            for f in lst:
                ts = _int(f.get("first_ts"))
                if ts is not None and f.get("pins_lso_now"):
                    oldest[tp] = min(ts, oldest.get(tp, ts))
        out = []
        for name, facts in self.partitions.items():
            topic, _, part = name.rpartition("-")
            if not topic or topic == TXN_STATE_TOPIC or not part.isdigit():
                continue
            lso, hw = _int(facts.get("lso")), _int(facts.get("high_watermark"))
            if lso is None or hw is None or hw <= lso:
                continue
            tp = (topic, int(part))
            ts = oldest.get(tp)
            out.append({"topic": topic, "partition": int(part), "lso": lso, "high_watermark": hw,
                        "lag_records": hw - lso, "lag_ms": max(0, ref - ts) if ts is not None else None,
                        "findings": [{"key": f["key"], "url": f["url"]} for f in findings_by_tp.get(tp, [])]})
        out.sort(key=lambda p: (-(p["lag_ms"] or -1), -p["lag_records"], p["topic"], p["partition"]))
        return out

    def snapshot(self) -> dict[str, Any]:
        """Everything the overview shows, as plain JSON-able data."""
        with self._lock:
            ref = self.reference_ms()
            self._prune(ref)
            groups: dict[str, list[dict[str, Any]]] = {g: [] for g, _, _ in GROUPS}
            by_tp: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for alert in self.open.values():
                v = self._finding_view(alert, ref)
                groups[v["group"]].append(v)
                by_tp.setdefault((str(alert.get("topic")), _int(alert.get("partition")) or 0), []).append(v)
            for lst in groups.values():
                lst.sort(key=lambda v: (-(v["age_ms"] or 0), str(v["key"])))
            resolved = sorted((public_view(dict(a, url="/finding/" + encode_key(k)))
                               for k, a in self.resolved.items()),
                              key=lambda a: (-(a["resolved_at_ms"] or 0), a["key"]))
            unavailable = sorted((public_view(r) for r in self.unavailable.values()), key=lambda r: str(r["key"]))
            stale, reason = self.staleness()
            positions = [{"partition": k, **{f: _int(v.get(f)) for f in ("log_start_offset", "lso", "high_watermark")}}
                         for k, v in sorted(self.partitions.items(), key=lambda kv: _tp_order(kv[0]))]
            return {
                "mode": self.mode,
                "source": self.source,
                "generated_ms": int(self._wall() * 1000),
                "reference_ms": ref,
                "last_update_ms": int(self.last_update_wall * 1000) if self.last_update_wall is not None else None,
                "stale": stale,
                "stale_reason": reason,
                "stale_after_ms": int(self.stale_after_s * 1000),
                "version": self.version,
                "counts": {**{g: len(lst) for g, lst in groups.items()}, "resolved_24h": len(resolved),
                           "unavailable_partitions": len(unavailable)},
                "groups": groups,
                "resolved": resolved,
                "unavailable": unavailable,
                "lagging": self._lagging(ref, by_tp),
                "clusters": {c: dict(v) for c, v in sorted(self.clusters.items())},
                "job": dict(self.job, clock_ms=self.job_clock_ms, positions=positions[:MAX_POSITIONS],
                            positions_total=len(positions)),
                "feed": {"records": self.feed["records"], "error": self.feed["error"],
                         "position": self.feed["position"], "errors": list(self.feed["errors"][-5:])},
            }

    def _ingest_audit(self, record: dict[str, Any]) -> bool:
        """One ``txnwatch abort`` attempt (from the audit file or the alerts topic). The same line
        may arrive from both: its ``key`` (``<finding>#abort@<ms>``) plus outcome dedupes it."""
        finding = record.get("finding_key")
        if not isinstance(finding, str) or not finding:
            self._feed_error("abort record without a finding_key")
            return False
        entry = {k: record.get(k) for k in ("key", "at_ms", "mode", "outcome", "exit_code", "message")}
        entry["user"] = (record.get("who") or {}).get("user")
        entry["host"] = (record.get("who") or {}).get("host")
        entry["sent"] = record.get("sent")
        lst = self.audits.setdefault(finding, [])
        if any(e["key"] == entry["key"] and e["outcome"] == entry["outcome"] for e in lst):
            return True
        lst.append(entry)
        lst.sort(key=lambda e: (_int(e.get("at_ms")) or 0))
        del lst[:-self.history_limit]
        return True

    def finding(self, key: str) -> dict[str, Any] | None:
        """One finding (open or resolved in the window) with its history, or None."""
        with self._lock:
            ref = self.reference_ms()
            self._prune(ref)
            alert = self.open.get(key) or self.resolved.get(key)
            if alert is None:
                return None
            v = self._finding_view(alert, ref)
            v["open"] = key in self.open
            v["history"] = [dict(h) for h in self.history.get(key, [])]
            v["audit"] = [dict(a) for a in self.audits.get(key, [])]
            stale, reason = self.staleness()
            return {"finding": v, "stale": stale, "stale_reason": reason, "reference_ms": ref,
                    "generated_ms": int(self._wall() * 1000), "version": self.version,
                    "last_update_ms": int(self.last_update_wall * 1000) if self.last_update_wall else None,
                    "stale_after_ms": int(self.stale_after_s * 1000), "mode": self.mode, "source": self.source}

    def _prune(self, ref: int) -> None:
        """Drop resolved findings older than the window (and their history)."""
        horizon = min(ref, int(self._wall() * 1000)) - self.resolved_window_ms
        for key in [k for k, a in self.resolved.items() if (a.get("resolved_at_ms") or 0) < horizon]:
            self.resolved.pop(key)
            if key not in self.open:
                self.history.pop(key, None)
