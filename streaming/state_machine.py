"""Per-producer-id state: open transactions, last markers, coordinator view, alert lifecycle.

Pure Python (no Spark): ``streaming.pipeline`` calls :func:`process_key` from
``applyInPandasWithState`` and ``tests/`` call it directly. State is kept as one JSON document per
producer id (DESIGN §6), so it can evolve without a state-schema migration.

Pairing is :mod:`udfs.pairing`'s rule (detection.md §1): per partition, in offset order, a
transactional data span opens a transaction if none is open and otherwise joins it whatever its
epoch; any control batch of the producer id closes it, an empty one too. Events at offsets
already applied on a partition are ignored, which makes overlapping inputs (a snapshot plus the
segments it summarises, two dumps of one segment) harmless.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from streaming.verdict import CoordinatorView, EpochEvidence, OpenTxn, Thresholds, judge, threshold_for
from udfs.pairing import Step, marker_coordinator_epoch, pair

SCHEMA_VERSION = 1

# Columns of what the state operator emits (alerts-in-the-making plus passthrough rows).
OUT_FIELDS: tuple[tuple[str, str], ...] = (
    ("out_kind", "string"),  # alert | open_set | progress | gap
    ("key", "string"),
    ("status", "string"),
    ("cause", "string"),
    ("verified", "bool"),
    ("cluster", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("producer_id", "long"),
    ("producer_epoch", "int"),
    ("first_offset", "long"),
    ("last_offset", "long"),
    ("first_ts", "long"),
    ("last_ts", "long"),
    ("now_ms", "long"),
    ("open_ms", "long"),
    ("idle_ms", "long"),
    ("threshold_ms", "long"),
    ("records", "long"),
    ("bytes", "long"),
    ("batches", "long"),
    ("transactional_id", "string"),
    ("coordinator_state", "string"),
    ("coordinator_epoch", "int"),
    ("coordinator_epoch_source", "string"),
    ("txn_partition", "int"),  # the __transaction_state partition of the producer's coordinator record
    ("resolution", "string"),
    ("clock_skew", "bool"),
    ("from_snapshot", "bool"),
    ("source", "string"),
    ("source_position", "string"),
    ("high_watermark", "long"),
    ("lso", "long"),
    ("log_start_offset", "long"),
    ("reason", "string"),
)
OUT_NAMES = tuple(n for n, _ in OUT_FIELDS)


@dataclass(frozen=True)
class EngineConfig:
    """Everything the state function needs besides its input (picklable: shipped to executors).

    ``coordinator_available``: the job reads ``__transaction_state`` (always for the live source;
    for files, when coordinator partitions or transaction-log dumps are among the inputs).
    ``topic_thresholds`` override ``thresholds`` per topic. ``evict_after_ms``: idle event time
    after which a producer with nothing open and no pending coordinator work is dropped.
    """

    cluster: str = "default"
    thresholds: Thresholds = field(default_factory=Thresholds)
    topic_thresholds: dict[str, Thresholds] = field(default_factory=dict)
    coordinator_available: bool = True
    evict_after_ms: int = 7 * 24 * 3600 * 1000

    def thresholds_for(self, topic: str) -> Thresholds:
        return self.topic_thresholds.get(topic, self.thresholds)


def _tp(topic: str, partition: int) -> str:
    return f"{topic}\t{partition}"


def alert_key(cluster: str, topic: str, partition: int, producer_id: int, first_offset: int) -> str:
    """The alert key ``cluster/topic/partition/producer_id/first_offset`` (stable across restarts)."""
    return f"{cluster}/{topic}/{partition}/{producer_id}/{first_offset}"


def _i(v: Any) -> int | None:
    """Int or None from a pandas cell (NA/NaN → None)."""
    if v is None:
        return None
    try:
        if isinstance(v, float) and math.isnan(v):
            return None
        return int(v)
    except (TypeError, ValueError):
        return None


class ProducerState:
    """State of one producer id. ``parts`` is keyed by "topic<TAB>partition"."""

    def __init__(self, producer_id: int, doc: dict[str, Any] | None = None) -> None:
        self.producer_id = producer_id
        doc = doc or {}
        self.parts: dict[str, dict[str, Any]] = doc.get("parts", {})
        self.coord: dict[str, Any] | None = doc.get("coord")
        self.last_event_ms: int = doc.get("last_event_ms", -1)
        self.reported_open: str = doc.get("reported_open", "[]")

    def to_json(self) -> str:
        return json.dumps({"v": SCHEMA_VERSION, "parts": self.parts, "coord": self.coord,
                           "last_event_ms": self.last_event_ms, "reported_open": self.reported_open},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, producer_id: int, text: str | None) -> ProducerState:
        return cls(producer_id, json.loads(text) if text else None)

    # --- events -------------------------------------------------------------------------------

    def _part(self, topic: str, partition: int) -> dict[str, Any]:
        key = _tp(topic, partition)
        p = self.parts.get(key)
        if p is None:
            p = self.parts[key] = {
                "topic": topic, "partition": partition, "open": None, "next_offset": -1, "max_epoch": -1,
                "last_marker": None, "had_marker": False, "from_log_start": False, "snapshot_epoch": None,
            }
        return p

    def apply(self, ev: dict[str, Any], cfg: EngineConfig) -> list[dict[str, Any]]:
        """Apply one event (a dict of event fields); returns resolved-alert rows, if any."""
        kind = ev["kind"]
        et = _i(ev.get("event_time_ms"))
        if et is not None:
            self.last_event_ms = max(self.last_event_ms, et)
        if kind == "txn_state":
            self._apply_coordinator(ev)
            return []
        topic, partition = ev["topic"], int(ev["partition"])
        p = self._part(topic, partition)
        if ev.get("from_log_start"):
            p["from_log_start"] = True
        epoch = _i(ev.get("producer_epoch"))
        if kind == "snapshot":
            return self._apply_snapshot(p, ev, epoch)
        first = int(ev["first_offset"])
        if first < p["next_offset"]:
            return []  # already applied (overlapping inputs)
        p["next_offset"] = int(ev["last_offset"]) + 1
        if epoch is not None:
            p["max_epoch"] = max(p["max_epoch"], epoch)
        folded_epoch = _i(ev.get("folded_max_epoch"))
        if folded_epoch is not None:  # transactions the read folded into this (last) marker
            p["max_epoch"] = max(p["max_epoch"], folded_epoch)
        step = pair(p["open"] is not None, transactional=kind in ("data", "marker"), control=kind == "marker")
        if step is Step.OPEN:
            lm = p["last_marker"]
            p["open"] = {
                "first_offset": first, "last_offset": int(ev["last_offset"]),
                "first_ts": int(ev["first_ts"]), "last_ts": int(ev["last_ts"]),
                "batches": int(ev["batch_count"] or 0), "records": int(ev["record_count"] or 0),
                "bytes": int(ev["bytes"] or 0), "follows_marker": lm is not None and lm["offset"] < first,
                "alert": None, "source": ev.get("source"), "position": ev.get("source_position"),
                "from_snapshot": False,
            }
            return []
        if step is Step.JOIN:
            o = p["open"]
            o["last_offset"] = max(o["last_offset"], int(ev["last_offset"]))
            o["last_ts"] = max(o["last_ts"], int(ev["last_ts"]))
            o["batches"] += int(ev["batch_count"] or 0)
            o["records"] += int(ev["record_count"] or 0)
            o["bytes"] += int(ev["bytes"] or 0)
            return []
        if step is Step.CLOSE:
            out = []
            o = p["open"]
            marker = ev.get("marker")
            if o is not None and o.get("alert") in ("late", "hanging"):
                resolution = {"COMMIT": "committed", "ABORT": "aborted"}.get(marker, "closed")
                out.append(self._row(cfg, p, o, status="resolved", now_ms=_i(ev.get("event_time_ms")) or
                                     int(ev["last_ts"]), resolution=resolution))
            p["open"] = None
            p["had_marker"] = True
            ce = marker_coordinator_epoch(marker, _i(ev.get("coordinator_epoch")))
            if ce is not None:
                p["last_marker"] = {"offset": first, "epoch": epoch, "coordinator_epoch": ce, "type": marker}
            elif p["last_marker"] is None or p["last_marker"]["offset"] < first:
                # An empty marker (cleaner) proves a marker existed but not its coordinator epoch.
                prev_ce = p["last_marker"]["coordinator_epoch"] if p["last_marker"] else None
                p["last_marker"] = {"offset": first, "epoch": epoch, "coordinator_epoch": prev_ce, "type": marker}
            return out
        return []

    def _apply_snapshot(self, p: dict[str, Any], ev: dict[str, Any], epoch: int | None) -> list[dict[str, Any]]:
        snap_off = _i(ev.get("snapshot_offset"))
        if snap_off is not None and snap_off < p["next_offset"]:
            return []  # the segments already told us more than this snapshot
        if epoch is not None:
            p["max_epoch"] = max(p["max_epoch"], epoch)
        ce = _i(ev.get("coordinator_epoch"))
        p["snapshot_epoch"] = ce if ce is not None else -1
        first = _i(ev.get("first_offset"))
        if first is not None and p["open"] is None:
            ts = int(ev["last_ts"])
            p["open"] = {
                "first_offset": first, "last_offset": _i(ev.get("last_offset")) or first,
                # A snapshot keeps only the last batch's timestamp: the transaction is at least
                # that old, so open_ms is a lower bound.
                "first_ts": ts, "last_ts": ts, "batches": 0, "records": 0, "bytes": 0,
                "follows_marker": False, "alert": None, "source": ev.get("source"),
                "position": ev.get("source_position"), "from_snapshot": True,
            }
        if snap_off is not None:
            p["next_offset"] = max(p["next_offset"], snap_off)
        return []

    def _apply_coordinator(self, ev: dict[str, Any]) -> None:
        tid = ev.get("transactional_id")
        pid = _i(ev.get("producer_id"))
        ple = _i(ev.get("coordinator_epoch"))
        prev_epoch = self.coord.get("partition_epoch", -1) if self.coord and self.coord.get("tid") == tid else -1
        if ev.get("tombstone") or pid != self.producer_id:
            if self.coord is not None and self.coord.get("tid") not in (None, tid):
                return  # news about a transactional id this producer no longer belongs to
            self.coord = {
                "tid": tid, "forgotten": "tombstone" if ev.get("tombstone") else f"superseded by producer id {pid}",
                "partition_epoch": max(prev_epoch, ple if ple is not None else -1),
                "txn_partition": _i(ev.get("partition")),
            }
            return
        state = ev.get("txn_state")
        start = _i(ev.get("txn_start_ts"))
        if start is None and state == "Ongoing":
            # Text dumps before 4.1 do not print TransactionStartTimestampMs: the transaction
            # started at the update time of the record that moved the id to Ongoing.
            prev = self.coord if self.coord and self.coord.get("tid") == tid and not self.coord.get("forgotten") else {}
            start = prev.get("start_ts") if prev.get("state") == "Ongoing" else None
            if start is None:
                start = _i(ev.get("txn_last_update_ts")) or _i(ev.get("first_ts"))
        self.coord = {
            "tid": tid, "forgotten": None, "state": state, "producer_id": pid,
            "producer_epoch": _i(ev.get("producer_epoch")),
            "partitions": list(ev["txn_partitions"]) if ev.get("txn_partitions") is not None else None,
            "timeout_ms": _i(ev.get("txn_timeout_ms")), "start_ts": start,
            "partition_epoch": max(prev_epoch, ple if ple is not None else -1),
            "txn_partition": _i(ev.get("partition")),
        }

    # --- verdicts -----------------------------------------------------------------------------

    def coordinator_view(self) -> CoordinatorView | None:
        c = self.coord
        if c is None or c.get("forgotten"):
            return None
        return CoordinatorView(
            transactional_id=c["tid"], state=c["state"], producer_id=c["producer_id"],
            producer_epoch=c["producer_epoch"] if c["producer_epoch"] is not None else -1,
            partitions=tuple(c["partitions"]) if c["partitions"] is not None else None,
            timeout_ms=c["timeout_ms"] if c["timeout_ms"] is not None else 0,
            start_ts=c["start_ts"] if c["start_ts"] is not None else -1,
            partition_epoch=c["partition_epoch"],
        )

    def _judge(self, cfg: EngineConfig, p: dict[str, Any], o: dict[str, Any], now_ms: int):
        txn = OpenTxn(p["topic"], p["partition"], self.producer_id, o["first_offset"], o["last_offset"],
                      o["first_ts"], o["last_ts"], p["max_epoch"], o["follows_marker"])
        lm = p["last_marker"]
        evidence = EpochEvidence(
            last_marker_epoch=lm["coordinator_epoch"] if lm else None,
            had_marker=p["had_marker"], read_from_log_start=p["from_log_start"],
            snapshot_epoch=p["snapshot_epoch"],
        )
        return judge(txn, self.coordinator_view(), coordinator_available=cfg.coordinator_available,
                     now_ms=now_ms, thresholds=cfg.thresholds_for(p["topic"]), evidence=evidence)

    def evaluate(self, cfg: EngineConfig, now_ms: int) -> list[dict[str, Any]]:
        """Judge every open transaction; emit a row for each status change (late/hanging)."""
        out = []
        for p in self.parts.values():
            o = p["open"]
            if o is None:
                continue
            v = self._judge(cfg, p, o, now_ms)
            if v.status in ("late", "hanging") and v.status != o["alert"]:
                o["alert"] = v.status
                out.append(self._row(cfg, p, o, status=v.status, now_ms=now_ms, verdict=v))
        return out

    def next_timer(self, cfg: EngineConfig) -> int | None:
        """Event time at which something will change without input: the first not-yet-alerted
        open transaction crossing its threshold, or the eviction of an idle producer."""
        times = []
        view = self.coordinator_view() if cfg.coordinator_available else None
        for p in self.parts.values():
            o = p["open"]
            if o is not None and o["alert"] is None:
                times.append(o["first_ts"] + threshold_for(cfg.thresholds_for(p["topic"]), view) + 1)
        if self.evictable() and self.last_event_ms >= 0:
            times.append(self.last_event_ms + cfg.evict_after_ms)
        return min(times) if times else None

    def evictable(self) -> bool:
        """Nothing open and no coordinator work pending (detection state can be dropped)."""
        if any(p["open"] is not None for p in self.parts.values()):
            return False
        c = self.coord
        return c is None or bool(c.get("forgotten")) or c.get("state") not in ("Ongoing", "PrepareCommit",
                                                                                "PrepareAbort")

    def open_set_rows(self, cfg: EngineConfig) -> list[dict[str, Any]]:
        """The producer's open transactions, when they changed since last reported: the sink keeps
        the latest set per producer id, which is how metrics count every open transaction (not only
        findings) without a row per producer per micro-batch. An empty set is one row with no topic."""
        opens = sorted((p["topic"], p["partition"], p["open"]["first_offset"], p["open"]["first_ts"])
                       for p in self.parts.values() if p["open"] is not None)
        sig = json.dumps(opens)
        if sig == self.reported_open:
            return []
        self.reported_open = sig
        rows = []
        for topic, partition, first_offset, first_ts in opens or [(None, None, None, None)]:
            row = dict.fromkeys(OUT_NAMES)
            row.update(out_kind="open_set", cluster=cfg.cluster, producer_id=self.producer_id, topic=topic,
                       partition=partition, first_offset=first_offset, first_ts=first_ts)
            rows.append(row)
        return rows

    def _row(self, cfg: EngineConfig, p: dict[str, Any], o: dict[str, Any], *, status: str, now_ms: int,
             verdict=None, resolution: str | None = None) -> dict[str, Any]:
        c = self.coord or {}
        if verdict is None:
            verdict = self._judge(cfg, p, o, now_ms)
        row = dict.fromkeys(OUT_NAMES)
        row.update(
            out_kind="alert",
            key=alert_key(cfg.cluster, p["topic"], p["partition"], self.producer_id, o["first_offset"]),
            status=status, cause=verdict.cause if status != "resolved" else None,
            verified=verdict.verified, cluster=cfg.cluster, topic=p["topic"], partition=p["partition"],
            producer_id=self.producer_id, producer_epoch=verdict.producer_epoch,
            first_offset=o["first_offset"], last_offset=o["last_offset"], first_ts=o["first_ts"],
            last_ts=o["last_ts"], now_ms=now_ms, open_ms=verdict.open_ms, idle_ms=verdict.idle_ms,
            threshold_ms=verdict.threshold_ms, records=o["records"], bytes=o["bytes"], batches=o["batches"],
            transactional_id=c.get("tid"), coordinator_state=None if c.get("forgotten") else c.get("state"),
            coordinator_epoch=verdict.coordinator_epoch, coordinator_epoch_source=verdict.coordinator_epoch_source,
            txn_partition=c.get("txn_partition"),
            resolution=resolution, clock_skew=verdict.clock_skew, from_snapshot=o.get("from_snapshot", False),
            source=o.get("source"), source_position=o.get("position"),
        )
        return row


def process_key(
    producer_id: int,
    events: list[dict[str, Any]],
    state_json: str | None,
    *,
    now_ms: int,
    cfg: EngineConfig,
) -> tuple[list[dict[str, Any]], str | None, int | None]:
    """One call of the state function for one producer id.

    ``events`` are event dicts (with ``event_time_ms`` as int); they are applied in partition
    offset order. Returns (output rows, new state JSON or None to remove the state, timeout).
    """
    st = ProducerState.from_json(producer_id, state_json)
    out: list[dict[str, Any]] = []
    order = {"snapshot": 0, "txn_state": 1, "data": 2, "marker": 2}
    events = sorted(events, key=lambda e: (order.get(e["kind"], 3), e.get("topic") or "",
                                           _i(e.get("partition")) or 0, _i(e.get("first_offset")) or 0))
    for ev in events:
        out.extend(st.apply(ev, cfg))
    out.extend(st.evaluate(cfg, now_ms))
    evict = st.evictable() and st.last_event_ms >= 0 and now_ms - st.last_event_ms >= cfg.evict_after_ms
    out.extend(st.open_set_rows(cfg))
    if evict:
        return out, None, None
    return out, st.to_json(), st.next_timer(cfg)


def event_records(df: Any) -> list[dict[str, Any]]:
    """An event frame (typed by ``events.to_frame``, or as Spark hands it over: nullable integers
    as float64 with NaN, booleans as object) → the dicts :func:`process_key` takes: Python ints,
    bools and strings, None for null, ``event_time`` replaced by ``event_time_ms`` (epoch ms).

    Column by column instead of ``DataFrame.to_dict("records")``, which boxes every cell through
    pandas' scalar machinery and dominated the state operator's time on large reads.
    """
    import numpy as np
    import pandas as pd

    from streaming.events import EVENT_FIELDS

    types = dict(EVENT_FIELDS)
    names: list[str] = []
    columns: list[list[Any]] = []
    for name in df.columns:
        col = df[name]
        mask = col.isna().to_numpy()
        typ = types.get(name)
        if typ == "timestamp":
            ts = pd.to_datetime(col, utc=True).dt.tz_convert(None)
            vals = ts.to_numpy("datetime64[ms]").astype(np.int64).tolist()
            name = f"{name}_ms"
        elif typ in ("long", "int", "short"):
            vals = col.fillna(0).to_numpy(dtype=np.int64).tolist() if mask.any() else \
                col.to_numpy(dtype=np.int64).tolist()
        elif typ == "bool":
            vals = [False if m else bool(v) for v, m in zip(col.tolist(), mask.tolist(), strict=True)]
        else:
            vals = col.to_numpy(dtype=object).tolist()
        if mask.any():
            vals = [None if m else v for v, m in zip(vals, mask.tolist(), strict=True)]
        names.append(name)
        columns.append(vals)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
