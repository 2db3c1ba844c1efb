"""Partition availability on the live path: the records, and what stays unjudged meanwhile.

The ``kafka`` source reads every partition it can and, for one it cannot (no leader, a leader or
storage error, a leader that does not answer), emits a ``gap`` row whose reason starts with
:data:`UNAVAILABLE_PREFIX` and no progress row (streaming/sources/kafka.py). This module, on the
driver, turns those rows into the alert stream's availability records (WAVE2 contract C):

* ``status: "unavailable"`` once, when a partition becomes unreadable;
* ``status: "available"`` once, when a progress row for it arrives again;

keyed ``cluster/topic/partition`` so that a compacted alerts topic keeps the latest per partition.
Findings on a data partition that became unavailable keep their status and are published once
more with ``stale: true`` and ``last_read_ms`` (the partition's last read). New verdicts for a
partition that is unavailable or lagging (read short of its high watermark) are held back through
the enricher's ``hold``/``release`` (:meth:`Availability.apply_holds`), because the partition was
not read through the clock: a transaction there may already be closed.
"""

from __future__ import annotations

import json
from typing import Any

from streaming.gc_pause import collector_paused
from streaming.vocab import ALERT_SCHEMA_VERSION, AVAILABILITY_STATUSES, AVAILABLE, UNAVAILABLE

UNAVAILABLE_PREFIX = "unavailable: "
TXN_TOPIC = "__transaction_state"


def unavailable_reason(error: str) -> str:
    """The gap reason of an unreadable partition (``unavailable: LEADER_NOT_AVAILABLE ...``)."""
    return UNAVAILABLE_PREFIX + error


def is_availability_record(alert: dict[str, Any]) -> bool:
    return alert.get("status") in AVAILABILITY_STATUSES


def _tp(row: dict[str, Any]) -> str:
    return f"{row['topic']}-{int(row['partition'])}"


class Availability:
    """Which partitions are unreadable now, since when, and when each was last read.

    Persisted as one JSON file beside the checkpoint (the enricher's file helpers), so a restart
    neither repeats nor forgets a record.
    """

    def __init__(self, path: str | None = None) -> None:
        from streaming.alerts import _EntriesText, _read_text

        self.path = path
        text = _read_text(path) if path else None
        doc = json.loads(text) if text else {}
        self._saved = text  # the file's text as last read or written: an unchanged one is not written again
        self.down: dict[str, dict[str, Any]] = doc.get("down", {})
        self.last_read: dict[str, int] = doc.get("last_read", {})
        self.lagging: dict[str, str] = doc.get("lagging", {})  # "topic-partition" -> topic
        # save()'s text of each map, kept per entry: only :meth:`observe` changes them and marks
        # what it changed (last_read has an entry per partition of the cluster)
        self._entries = {"down": _EntriesText(), "last_read": _EntriesText(), "lagging": _EntriesText()}

    def save(self) -> None:
        from streaming.alerts import _write_text

        if not self.path:
            return
        entries = self._entries
        with collector_paused():  # last_read has an entry per partition (gc_pause)
            # json.dumps of {"down", "last_read", "lagging"}, each map encoding only its changed entries
            text = ("{" + ", ".join(f"{json.dumps(name)}: {entries[name].text(value)}" for name, value in
                                    (("down", self.down), ("last_read", self.last_read), ("lagging", self.lagging)))
                    + "}")
        if text != self._saved:  # the same text is already in the file (atomically replaced)
            _write_text(self.path, text)
            self._saved = text

    def not_read_through_now(self) -> set[str]:
        """``topic-partition`` names whose new verdicts must wait: unavailable or lagging."""
        return set(self.down) | set(self.lagging)

    def apply_holds(self, enricher: Any) -> None:
        """Hold new verdicts on partitions not read through now, release the others
        (``Enricher.hold``/``release``, WAVE2 contract C)."""
        wait = self.not_read_through_now()
        for tp in wait:
            enricher.hold(tp)
        for tp in set(enricher.held) - wait:
            enricher.release(tp)

    def unreadable(self, topic: str, partition: int) -> bool:
        """Not read through the clock: unavailable, or lagging behind its high watermark."""
        tp = f"{topic}-{int(partition)}"
        return tp in self.down or tp in self.lagging

    def observe(self, gaps: list[dict[str, Any]], progress: list[dict[str, Any]], active: dict[str, dict[str, Any]],
                now_ms: int | None) -> list[dict[str, Any]]:
        """One micro-batch's gap and progress rows → availability records and stale re-publications.

        ``active``: the enricher's open findings (key → {"status", "alert"}).
        """
        out: list[dict[str, Any]] = []
        read_now = set()
        changed = {name: ent.changed for name, ent in self._entries.items()}  # what save() encodes again
        for p in progress:
            tp = _tp(p)
            read_now.add(tp)
            if p.get("lagging"):
                if self.lagging.get(tp) != p["topic"]:
                    self.lagging[tp] = p["topic"]
                    changed["lagging"].add(tp)
                continue
            if self.lagging.pop(tp, None) is not None:
                changed["lagging"].add(tp)
            t = p.get("now_ms")
            if t is not None:
                was = self.last_read.get(tp)
                now_read = max(int(t), was if was is not None else 0)
                if now_read != was:
                    self.last_read[tp] = now_read
                    changed["last_read"].add(tp)
        for g in gaps:
            reason = g.get("reason") or ""
            if not reason.startswith(UNAVAILABLE_PREFIX) or g.get("topic") is None:
                continue
            tp = _tp(g)
            if tp in self.down or tp in read_now:
                if tp in self.down:
                    self.down[tp]["error"] = reason[len(UNAVAILABLE_PREFIX):]
                    changed["down"].add(tp)
                continue
            since = g.get("now_ms") if g.get("now_ms") is not None else now_ms
            self.down[tp] = {"topic": g["topic"], "partition": int(g["partition"]), "cluster": g.get("cluster"),
                             "since_ms": since, "error": reason[len(UNAVAILABLE_PREFIX):]}
            changed["down"].add(tp)
            out.append(self._record(UNAVAILABLE, self.down[tp], now_ms))
            if g["topic"] != TXN_TOPIC:
                out.extend(self._stale(g["topic"], int(g["partition"]), active))
        for tp in sorted(read_now & set(self.down)):
            entry = self.down.pop(tp)
            changed["down"].add(tp)
            out.append(self._record(AVAILABLE, entry, now_ms))
        return out

    def _record(self, status: str, entry: dict[str, Any], now_ms: int | None) -> dict[str, Any]:
        tp = f"{entry['topic']}-{entry['partition']}"
        cluster = entry.get("cluster") or "default"
        return {
            "schema_version": ALERT_SCHEMA_VERSION,
            "key": f"{cluster}/{entry['topic']}/{entry['partition']}",
            "status": status,
            "cluster": cluster,
            "topic": entry["topic"],
            "partition": entry["partition"],
            "reason": entry["error"] if status == UNAVAILABLE else None,
            "since_ms": entry.get("since_ms"),
            "unavailable_ms": (now_ms - entry["since_ms"]) if now_ms is not None and entry.get("since_ms") is not None
            else None,
            "last_read_ms": self.last_read.get(tp),
            "detected_at": now_ms,
        }

    def _stale(self, topic: str, partition: int, active: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        tp = f"{topic}-{partition}"
        return [dict(e["alert"], stale=True, last_read_ms=self.last_read.get(tp))
                for e in active.values() if e["alert"]["topic"] == topic and e["alert"]["partition"] == partition]

    def lagging_by_topic(self) -> dict[str, int]:
        """topic → partitions read short of the clock (admission control), for metrics/progress."""
        out: dict[str, int] = {}
        for topic in self.lagging.values():
            out[topic] = out.get(topic, 0) + 1
        return out

    def unavailable_by_topic(self, now_ms: int | None) -> dict[str, tuple[int, int]]:
        """topic → (unavailable partitions, longest time unavailable in ms), for metrics/progress."""
        out: dict[str, tuple[int, int]] = {}
        for e in self.down.values():
            n, longest = out.get(e["topic"], (0, 0))
            age = max((now_ms or 0) - (e.get("since_ms") or now_ms or 0), 0)
            out[e["topic"]] = (n + 1, max(longest, age))
        return out
