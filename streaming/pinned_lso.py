"""An LSO pinned at the log start by a transaction no read has seen (issue 20 item 9).

When retention (or DeleteRecords) removes the first batches of a transaction that is still open,
the partition's LSO stays at the log start: ``UnifiedLog.maybeIncrementFirstUnstableOffset``
takes ``max(first unstable offset, logStartOffset)``, and ``ProducerStateManager`` keeps the
open transaction (``ongoingTxns``; ``onLogStartOffsetIncremented`` only drops *unreplicated*
ones, and a producer with an open transaction never expires). A read from the LSO then sees only
that transaction's later batches, or none at all, so the state machine may never open it: no
finding, although ``read_committed`` consumers of the partition are stuck.

This module, on the driver, looks at each micro-batch's progress rows of data partitions read
through now: a partition whose ``lso == log_start_offset < high_watermark`` while the state knows
no open transaction there starting at or below the LSO is *pinned by an unseen transaction*.

* Brokers 2.8+ (DescribeProducers): the leader's own list names every producer with an open
  transaction (``CurrentTxnStartOffset >= 0``); each one starting at or below the LSO becomes a
  finding with its producer id, epoch, start offset (below the log start: ``data_deleted``) and,
  when the leader has a marker of it, the coordinator epoch (source ``describe-producers``).
  ``kafka-transactions.sh abort --start-offset`` resolves the start offset through the same
  DescribeProducers answer. An answer listing none means the broker has nothing open there:
  no finding (the broker's word outranks an inference, detection.md §0).
* Without DescribeProducers (older brokers, or no answer): one finding with ``producer_id``
  null, the LSO and the log start, and in ``verify_hint`` what to dump to identify the producer.

Status: ``late`` (cause ``lso-pinned-at-log-start``) from the first trigger it is seen pinned,
``hanging`` (cause ``open-before-log-start``) once it stayed pinned longer than the topic's
threshold (``transaction.max.timeout.ms`` + padding: no coordinator keeps a transaction open
longer). Both are ``verified: false``: nothing here checks the coordinator. ``resolved``
(``lso-advanced``) when the LSO leaves the log start. Key: ``cluster/topic/partition/<producer
id>/<start offset>`` when identified (the key a read of the whole transaction would give), else
``cluster/topic/partition/unknown/<log start when first seen pinned>``. State is persisted beside
the checkpoint like the enricher's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from streaming.vocab import (
    ALERT_FIELDS,
    ALERT_SCHEMA_VERSION,
    COORDINATOR_VIEW_INCOMPLETE,
    HANGING,
    LATE,
    LSO_PINNED_AT_LOG_START,
    OPEN_BEFORE_LOG_START,
    RESOLVED,
    START_OFFSET_NOT_PROVEN,
    finding_kind,
)

TXN_TOPIC = "__transaction_state"
UNKNOWN_PRODUCER = "unknown"


def _int(v: Any) -> int | None:
    try:
        return None if v is None or v != v else int(v)
    except (TypeError, ValueError):
        return None


def dump_hint(topic: str, partition: int, lso: int) -> str:
    """What to run to identify the producer holding an LSO pinned at the log start."""
    return (f"the transaction holding the LSO {lso} of {topic}-{partition} began below the log start (retention "
            f"deleted its first batches), so no read shows its producer. Identify it: on brokers 2.8+ run "
            f"kafka-transactions.sh --bootstrap-server B describe-producers --topic '{topic}' --partition "
            f"{partition} (the producer whose CurrentTransactionStartOffset is at or below {lso}); on older "
            f"brokers dump the newest producer snapshot on the partition leader: kafka-dump-log.sh --files "
            f"<log.dirs>/{topic}-{partition}/<newest offset>.snapshot (the entry with currentTxnFirstOffset "
            f"Some(N)/OptionalLong[N], N <= {lso}, gives producerId, producerEpoch and coordinatorEpoch for the "
            f"legacy abort)")


def _lowest_open(open_txns: Iterable[dict[str, Any]], wanted: set[tuple[str, int]]) -> dict[str, int]:
    """``topic-partition`` -> the lowest first offset of an open transaction the state knows
    there, for the ``(topic, partition)`` pairs of ``wanted``."""
    seen_open: dict[str, int] = {}
    for t in open_txns:
        if (t.get("topic"), t.get("partition")) in wanted and t.get("first_offset") is not None:
            tp = f"{t['topic']}-{int(t['partition'])}"
            seen_open[tp] = min(int(t["first_offset"]), seen_open.get(tp, int(t["first_offset"])))
    return seen_open


class PinnedLso:
    """Tracks pinned partitions and publishes their findings (see the module docstring).

    ``threshold_for(topic)``: ``max_timeout_ms + padding_ms`` of the topic. ``commands(...)``:
    the abort commands of an identified finding (``streaming.alerts.abort_commands``)."""

    def __init__(self, path: str | None, threshold_for: Callable[[str], int],
                 commands: Callable[..., tuple[str, str | None]], required_permission: str | None = None) -> None:
        from streaming.alerts import _read_text

        self.path = path
        self.threshold_for = threshold_for
        self.commands = commands
        self.required_permission = required_permission
        text = _read_text(path) if path else None
        self.pinned: dict[str, dict[str, Any]] = json.loads(text).get("pinned", {}) if text else {}
        self._saved = text  # the file's text as last read or written: an unchanged one is not written again

    def save(self) -> None:
        from streaming.alerts import _write_text

        if not self.path:
            return
        text = json.dumps({"pinned": self.pinned})
        if text != self._saved:  # the same text is already in the file (atomically replaced)
            _write_text(self.path, text)
            self._saved = text

    def observe(self, progress: Iterable[dict[str, Any]], open_txns: Iterable[dict[str, Any]], now_ms: int | None,
                unreadable: set[str], broker: Any = None) -> list[dict[str, Any]]:
        """One micro-batch: its progress rows, the state's open transactions, the partitions not
        read through now (``topic-partition``), the cluster's answers → alerts to publish."""
        if now_ms is None:
            return []
        rows = []  # (row, tp, hw, lso, log start, LSO at the log start below the high watermark)
        wanted: set[tuple[str, int]] = set()  # partitions whose LSO sits at the log start
        for row in progress:
            if row.get("topic") in (None, TXN_TOPIC) or row.get("lagging"):
                continue
            hw, lso, ls = _int(row.get("high_watermark")), _int(row.get("lso")), _int(row.get("log_start_offset"))
            if hw is None or lso is None or ls is None:
                continue  # not known now: keep what is tracked as it is
            at_start = lso == ls < hw
            if at_start:
                wanted.add((row["topic"], int(row["partition"])))
            rows.append((row, f"{row['topic']}-{int(row['partition'])}", hw, lso, ls, at_start))
        # the state's lowest open first offset per partition, of those partitions only (the
        # state's open transactions carry int partitions: Enricher.observe_open_sets)
        seen_open = _lowest_open(open_txns, wanted) if wanted else {}
        out: list[dict[str, Any]] = []
        for row, tp, hw, lso, ls, at_start in rows:
            pinned = at_start and not (tp in seen_open and seen_open[tp] <= lso)
            entry = self.pinned.get(tp)
            if entry is not None and not pinned:
                out += self._resolve(self.pinned.pop(tp), now_ms, lso, hw)
            elif pinned:
                if entry is None:
                    entry = self.pinned[tp] = {"cluster": row.get("cluster") or "default", "topic": row["topic"],
                                               "partition": int(row["partition"]), "since_ms": now_ms,
                                               "first_log_start": ls, "producers": None, "published": {}}
                entry.update(lso=lso, high_watermark=hw, log_start=ls)
                if entry["producers"] is None and broker is not None:
                    entry["producers"] = self._identify(broker, entry)
        for tp, entry in sorted(self.pinned.items()):
            if tp not in unreadable:
                out += self._publish(entry, now_ms)
        return out

    @staticmethod
    def _identify(broker: Any, entry: dict[str, Any]) -> list[dict[str, int]] | None:
        """The leader's open transactions starting at or below the LSO (None: no answer)."""
        answers = broker.describe_producers(entry["topic"], entry["partition"])
        if answers is None:
            return None
        return [{"producer_id": int(pid), "producer_epoch": a.producer_epoch, "coordinator_epoch": a.coordinator_epoch,
                 "start": a.current_txn_start_offset}
                for pid, a in sorted(answers.items())
                if a.found and 0 <= a.current_txn_start_offset <= entry["lso"]]

    def _findings(self, entry: dict[str, Any]) -> list[dict[str, Any]]:
        base = f"{entry['cluster']}/{entry['topic']}/{entry['partition']}"
        if entry["producers"] is None:
            return [{"key": f"{base}/{UNKNOWN_PRODUCER}/{entry['first_log_start']}", "producer_id": None,
                     "producer_epoch": None, "first_offset": None, "coordinator_epoch": None}]
        return [{"key": f"{base}/{p['producer_id']}/{p['start']}", "producer_id": p["producer_id"],
                 "producer_epoch": p["producer_epoch"], "first_offset": p["start"],
                 "coordinator_epoch": p["coordinator_epoch"] if p["coordinator_epoch"] >= 0 else None}
                for p in entry["producers"]]

    def _publish(self, entry: dict[str, Any], now_ms: int) -> list[dict[str, Any]]:
        threshold = self.threshold_for(entry["topic"])
        status = HANGING if now_ms - entry["since_ms"] >= threshold else LATE
        out = []
        for f in self._findings(entry):
            if entry["published"].get(f["key"]) == status:
                continue  # each status once per key
            entry["published"][f["key"]] = status
            out.append(self._alert(entry, f, status, now_ms, threshold))
        return out

    def _resolve(self, entry: dict[str, Any], now_ms: int, lso: int, hw: int) -> list[dict[str, Any]]:
        out = []
        for f in self._findings(entry):
            if f["key"] in entry["published"]:
                alert = self._alert(entry, f, RESOLVED, now_ms, self.threshold_for(entry["topic"]))
                alert.update(lso=lso, high_watermark=hw, pins_lso=False, resolution="lso-advanced")
                out.append(alert)
        return out

    def _alert(self, entry: dict[str, Any], f: dict[str, Any], status: str, now_ms: int,
               threshold: int) -> dict[str, Any]:
        a: dict[str, Any] = dict.fromkeys(ALERT_FIELDS)
        identified = f["producer_id"] is not None
        new = legacy = None
        if status == HANGING and identified:
            new, legacy = self.commands(topic=entry["topic"], partition=entry["partition"],
                                        first_offset=f["first_offset"], producer_id=f["producer_id"],
                                        producer_epoch=f["producer_epoch"], coordinator_epoch=f["coordinator_epoch"])
        a.update({
            "schema_version": ALERT_SCHEMA_VERSION, "key": f["key"], "status": status,
            "cause": None if status == RESOLVED else (OPEN_BEFORE_LOG_START if status == HANGING
                                                     else LSO_PINNED_AT_LOG_START),
            "verified": status == RESOLVED,
            "cluster": entry["cluster"], "topic": entry["topic"], "partition": entry["partition"],
            "producer_id": f["producer_id"], "producer_epoch": f["producer_epoch"], "first_offset": f["first_offset"],
            "coordinator_epoch": f["coordinator_epoch"],
            "coordinator_epoch_source": (None if not identified else "describe-producers"
                                         if f["coordinator_epoch"] is not None else "unknown"),
            "lso": entry["lso"], "high_watermark": entry["high_watermark"], "pins_lso": True, "data_deleted": True,
            "detected_at": now_ms, "abort_command_new": new, "abort_command_legacy": legacy,
            "required_permission": self.required_permission if status == HANGING else None,
            "threshold_ms": threshold, "clock_skew": False, "input": f"{entry['topic']}-{entry['partition']}",
            "log_start_offset": entry["log_start"], "pinned_since_ms": entry["since_ms"],
            "kind": finding_kind(entry["topic"]),
            "confirmed_by": ["DescribeProducers"] if identified else None,
            # detection.md §0: never verified; the coordinator was not checked, and without a broker
            # answer naming the producer nothing says where its transaction began
            "unverified_reasons": [] if status == RESOLVED else (
                [COORDINATOR_VIEW_INCOMPLETE] if identified else [START_OFFSET_NOT_PROVEN, COORDINATOR_VIEW_INCOMPLETE]),
        })
        if status != RESOLVED:
            a["verify_hint"] = (dump_hint(entry["topic"], entry["partition"], entry["lso"]) if not identified else
                                f"DescribeProducers: producer {f['producer_id']} has a transaction open on "
                                f"{entry['topic']}-{entry['partition']} since offset {f['first_offset']}, below the "
                                f"log start {entry['log_start']} (its first batches were deleted); the coordinator "
                                f"was not checked: run kafka-transactions.sh describe-producers and describe "
                                f"--transactional-id before aborting")
        return a
