"""Per-producer-id state: open transactions, last markers, coordinator view, alert lifecycle.

Pure Python (no Spark): ``streaming.pipeline`` calls :func:`process_key` from
``applyInPandasWithState`` and ``tests/`` call it directly. State is kept as one JSON document per
producer id (DESIGN §6), so it can evolve without a state-schema migration.

Pairing is :mod:`udfs.pairing`'s rule (detection.md §1): per partition, in offset order, a
transactional data span opens a transaction if none is open and otherwise joins it whatever its
epoch; any control batch of the producer id closes it, an empty one too. Events at offsets
already applied on a partition are ignored, which makes overlapping inputs (two dumps of one
segment, a segment and its dump) harmless.

Snapshots (detection.md §1, WAVE2 contract A): a partition seeded from its newest producer
snapshot at offset N has every row stamped ``snapshot_offset = N``. P's entry (a ``snapshot`` row)
seeds P's state; a producer with no entry was absent from the snapshot (no state at N). Rows with
``last_offset < N`` are already summarised by the snapshot: they are *preview only* — they never
open or close anything nor teach epochs, and only add to the data-loss preview and first-write
time of the transaction the snapshot says is open when it starts at or before them.

The state judges each open transaction with what it knows (:meth:`ProducerState.evidence`) and
emits a row with that evidence as JSON (``evidence``); the driver adds the cluster-wide facts
(``streaming.alerts``) and judges again. The state never publishes a verdict itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.event_rows import (
    BATCH_COUNT,
    BYTES,
    COORDINATOR,
    COORDINATOR_EPOCH,
    EVENT_TIME_MS,
    FIRST_OFFSET,
    FIRST_TS,
    KIND,
    LAST_OFFSET,
    LAST_TS,
    LSO,
    PARTITION,
    PRODUCER_EPOCH,
    RECORD_COUNT,
    SNAPSHOT_OFFSET,
    SOURCE,
    SOURCE_POSITION,
    TOPIC,
    EventRecord,
    as_row,
    as_rows,
)
from streaming.verdict import (
    CoordinatorRecord,
    CoordinatorView,
    EpochEvidence,
    Marker,
    OpenTxn,
    SnapshotSeed,
    Thresholds,
    Verdict,
    judge,
    threshold_for,
    to_dict,
)
from udfs.model import CONTROL_NAMES, OPEN_TXN_STATES
from udfs.pairing import Step, marker_coordinator_epoch, pair

SCHEMA_VERSION = 2  # 2: rules v2 evidence (first epoch, marker kinds/times, snapshot seed)
# Coordinator states that end a transaction: their update time bounds the next start from below.
FINAL_STATES = ("Empty", "CompleteCommit", "CompleteAbort")

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
    ("txn_partition_count", "int"),  # progress of __transaction_state: its partition count
    ("evidence", "string"),  # alert: JSON {txn, view, ev, thresholds} the driver re-judges (verdict.to_dict)
    ("lagging", "bool"),  # progress rows: the partition was read short of now (i12-live, WAVE2 contract C)
    ("end_proven", "bool"),  # progress rows: the read reached the partition's end (detection.md §0)
    ("crc_failed", "bool"),  # gap rows: a batch that failed its CRC
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


class ProducerState:
    """State of one producer id P. ``parts`` is keyed by "topic<TAB>partition".

    Per partition: ``open`` (O, or None), ``next_offset`` (first offset not yet applied),
    ``max_epoch`` (E of the legacy abort: highest producer epoch of data, typed markers and the
    snapshot entry), ``last_marker`` (P's newest control batch read at or after the snapshot:
    offset, producer_epoch, coordinator_epoch, kind, timestamp; an empty control batch has
    coordinator_epoch and kind None), ``max_marker_ce`` (highest coordinator epoch of P's markers
    there), ``read_from_zero``, ``snapshot`` (the seed: offset, present, coordinator_epoch) and
    the preview of rows below the snapshot (``preview``, ``preview_next``).
    """

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
        doc = json.loads(text) if text else None
        if doc is not None and doc.get("v") != SCHEMA_VERSION:
            # State written by the rules-v1 engine lacks the evidence rules v2 need (first epoch,
            # marker kinds and times, the snapshot seed); guessing it could produce a wrong epoch.
            raise ValueError(f"producer {producer_id}: state schema version {doc.get('v')} is not "
                             f"{SCHEMA_VERSION}; start this job with a new checkpoint")
        return cls(producer_id, doc)

    # --- events -------------------------------------------------------------------------------

    def _part(self, topic: str, partition: int) -> dict[str, Any]:
        key = _tp(topic, partition)
        p = self.parts.get(key)
        return self._new_part(key, topic, partition) if p is None else p

    def _new_part(self, key: str, topic: str, partition: int) -> dict[str, Any]:
        """A partition's entry, created (``key``: :func:`_tp` of ``topic``, ``partition``)."""
        p = self.parts[key] = {
            "topic": topic, "partition": partition, "open": None, "next_offset": -1, "max_epoch": -1,
            "last_marker": None, "max_marker_ce": -1, "read_from_zero": False, "snapshot": None,
            "preview": None, "preview_next": -1,
        }
        return p

    def apply(self, ev: tuple | Mapping[str, Any], cfg: EngineConfig) -> list[dict[str, Any]]:
        """Apply one event (an event row of :mod:`streaming.event_rows`, or a mapping of event
        fields, turned into one); returns resolved-alert rows, if any."""
        return self.apply_rows((ev if ev.__class__ is tuple else as_row(ev),), cfg)

    def apply_rows(self, rows: Iterable[tuple], cfg: EngineConfig) -> list[dict[str, Any]]:
        """Apply event rows (:mod:`streaming.event_rows`) one after the other, in the order given;
        returns resolved-alert rows, if any."""
        # Hot path: one pass per event, in one loop (no call per event). A row's integer fields are
        # ints or None already and are unpacked into locals in one step; consecutive rows of one
        # partition share its lookup; the pairing step is udfs.pairing.pair's (_pair_step), looked
        # up per event kind.
        out: list[dict[str, Any]] = []
        parts = self.parts
        last_event_ms = self.last_event_ms
        # the steps as locals: reading an Enum member off its class costs ~10x a local read (3.11)
        step_open, step_join, step_close = Step.OPEN, Step.JOIN, Step.CLOSE
        cur_topic = cur_partition = p = None
        for ev in rows:
            (kind, topic, partition, first, last, window, et, epoch, snap_off, from_zero, first_ts, last_ts,
             batches, records, nbytes, marker, ce, folded_epoch, source, position, _coordinator) = ev
            if et is not None and et > last_event_ms:
                self.last_event_ms = last_event_ms = et
            if kind == "txn_state":
                self._apply_coordinator(ev)
                continue
            if p is None or partition != cur_partition or topic != cur_topic:
                key = f"{topic}\t{partition}"  # _tp, inline: once per partition of every producer
                p = parts.get(key)
                if p is None:
                    p = self._new_part(key, topic, partition)
                cur_topic, cur_partition = topic, partition
            if from_zero is True:
                p["read_from_zero"] = True
            if kind == "snapshot":
                self._apply_snapshot(p, ev)
                continue
            if kind == "lso_passed":
                out += self._apply_lso_passed(p, ev, cfg)
                continue
            if snap_off is not None:
                if p["snapshot"] is None or p["snapshot"]["offset"] < snap_off:
                    # The partition was seeded from a snapshot without an entry for P (contract A): P
                    # had no producer state on tp at that offset. Its own entry, if any, came first.
                    p["snapshot"] = {"offset": snap_off, "present": False, "coordinator_epoch": -1}
                    p["next_offset"] = max(p["next_offset"], snap_off)
                if last < snap_off:
                    self._apply_preview(p, ev)
                    continue
            if first < p["next_offset"]:
                continue  # already applied (overlapping inputs)
            # window (probe mode): the window this row was read in starts at this LSO
            if window is not None and window > p["next_offset"]:
                # Nothing of P on tp was read between what the state last saw and this window: its
                # last marker as known here may not be P's last one before this row (rule 2 then
                # comes from the driver's look-back).
                p["last_marker"] = None
            p["next_offset"] = last + 1
            if kind != "marker":
                marker = None
            # An empty control batch carries no record: its epoch field is kept, but the legacy
            # abort's E must err low, so it never raises max_epoch (contract A).
            if epoch is not None and marker != "EMPTY" and epoch > p["max_epoch"]:
                p["max_epoch"] = epoch
            if folded_epoch is not None and folded_epoch > p["max_epoch"]:
                p["max_epoch"] = folded_epoch  # transactions the read folded into this (last) marker
            o = p["open"]
            step = (_STEP_IF_OPEN if o is not None else _STEP_IF_NONE).get(kind) or _pair_step(kind, o is not None)
            if step is step_open:
                lm = p["last_marker"]
                p["open"] = {
                    "first_offset": first, "last_offset": last,
                    "first_ts": first_ts, "last_ts": last_ts,
                    "batches": batches or 0, "records": records or 0,
                    "bytes": nbytes or 0, "first_epoch": epoch if epoch is not None else -1,
                    "data_epoch": epoch if epoch is not None else -1,  # highest producer epoch of O's data
                    # pairing: nothing of P lies between its last marker and O's first batch
                    "prev_marker": lm if lm is not None and lm["offset"] < first else None,
                    "alert": None, "sig": None, "source": source, "position": position,
                    "from_snapshot": False, "probe": window is not None,
                }
            elif step is step_join:
                # A probe window holds only O's first batch, so a batch joining O means the
                # partition is followed from O on: the state has O's span, the driver need not
                # read it again.
                o["probe"] = False
                if epoch is not None:
                    o["data_epoch"] = max(o.get("data_epoch", o["first_epoch"]), epoch)
                o["last_offset"] = max(o["last_offset"], last)
                o["last_ts"] = max(o["last_ts"], last_ts)
                o["batches"] += batches or 0
                o["records"] += records or 0
                o["bytes"] += nbytes or 0
            elif step is step_close:
                if o is not None and o.get("alert") in ("late", "hanging"):
                    resolution = {"COMMIT": "committed", "ABORT": "aborted"}.get(marker, "closed")
                    out.append(self._row(cfg, p, o, status="resolved", now_ms=et or last_ts, resolution=resolution))
                p["open"] = None
                # The data epoch of the transaction this marker closed (None: nothing of P was open
                # on tp as read): one below the marker's epoch is a bumped marker (revision 3.1).
                closed_epoch = None if o is None else o.get("data_epoch", o["first_epoch"])
                # marker_coordinator_epoch, inline for a marker name (every row's): only a COMMIT or
                # ABORT with an epoch >= 0 teaches one
                if marker.__class__ is str:
                    ce = ce if marker in _TYPED_MARKER_NAMES and ce is not None and ce >= 0 else None
                else:
                    ce = marker_coordinator_epoch(marker, ce)
                # An empty marker (cleaner) proves a marker existed but not its coordinator epoch:
                # the previous marker's epoch is not carried forward (it may be lower than this one's).
                p["last_marker"] = {
                    "offset": first, "producer_epoch": epoch if epoch is not None else -1,
                    "coordinator_epoch": ce, "kind": marker if marker in ("COMMIT", "ABORT") else None,
                    "timestamp": last_ts if last_ts is not None else -1,
                    "closed_epoch": closed_epoch if closed_epoch is not None and closed_epoch >= 0 else None}
                if ce is not None and ce > p["max_marker_ce"]:
                    p["max_marker_ce"] = ce
        return out

    def _apply_lso_passed(self, p: dict[str, Any], ev: tuple, cfg: EngineConfig) -> list[dict[str, Any]]:
        """Probe mode: tp's LSO moved to the row's ``lso`` without the marker being read. The LSO is
        the first offset of the oldest open transaction, so P's transaction on tp starting below it
        is closed (resolution ``lso-advanced``: which marker closed it was not read). P's last
        marker is not touched: nothing about it was learnt."""
        o, lso = p["open"], ev[LSO]
        if o is None or lso is None or o["first_offset"] >= lso:
            return []
        out = []
        if o.get("alert") in ("late", "hanging"):
            out.append(self._row(cfg, p, o, status="resolved", now_ms=ev[EVENT_TIME_MS] or o["last_ts"],
                                 resolution="lso-advanced"))
        p["open"] = None
        p["last_marker"] = None  # P's marker that closed it was not read
        return out

    def _apply_preview(self, p: dict[str, Any], ev: tuple) -> None:
        """A row below the seed snapshot's offset (contract A): the snapshot already holds its effect
        on P's state, so it only adds to the data-loss preview and first-write time of the
        transaction the snapshot says is open, when that transaction starts at or before it."""
        first = ev[FIRST_OFFSET]
        if first < p["preview_next"]:
            return  # overlapping inputs
        p["preview_next"] = ev[LAST_OFFSET] + 1
        if ev[KIND] != "data":
            p["preview"] = None  # P's data before a marker belongs to a closed transaction
            return
        span = {"first_offset": first, "last_offset": ev[LAST_OFFSET], "first_ts": ev[FIRST_TS],
                "last_ts": ev[LAST_TS], "batches": ev[BATCH_COUNT] or 0,
                "records": ev[RECORD_COUNT] or 0, "bytes": ev[BYTES] or 0}
        o = p["open"]
        if o is not None and o["from_snapshot"] and o["first_offset"] <= first:
            _add_span(o, span)
        elif p["preview"] is None:
            p["preview"] = span
        else:
            _add_span(p["preview"], span)

    def _apply_snapshot(self, p: dict[str, Any], ev: tuple) -> None:
        """P's entry in the newest snapshot of tp: the state after every offset below its offset."""
        snap_off, epoch = ev[SNAPSHOT_OFFSET], ev[PRODUCER_EPOCH]
        if snap_off is None:
            return
        seed = p["snapshot"]
        if seed is not None and (seed["offset"] > snap_off or (seed["offset"] == snap_off and seed["present"])):
            return  # an older snapshot, or this entry again (overlapping inputs)
        ce = ev[COORDINATOR_EPOCH]
        p["snapshot"] = {"offset": snap_off, "present": True, "coordinator_epoch": ce if ce is not None else -1}
        if epoch is not None:
            p["max_epoch"] = max(p["max_epoch"], epoch)
        first = ev[FIRST_OFFSET]
        if first is not None and first >= 0 and p["open"] is None and p["next_offset"] <= snap_off:
            ts = ev[LAST_TS]
            # A snapshot keeps only the last batch's timestamp: the transaction is at least that
            # old (open_ms is a lower bound) until the preview of earlier segments extends it.
            o = p["open"] = {
                "first_offset": first, "last_offset": ev[LAST_OFFSET] or first,
                "first_ts": ts, "last_ts": ts, "batches": 0, "records": 0, "bytes": 0,
                "first_epoch": epoch if epoch is not None else -1, "prev_marker": None,
                "alert": None, "sig": None, "source": ev[SOURCE], "position": ev[SOURCE_POSITION],
                "from_snapshot": True,
            }
            pv = p["preview"]
            if pv is not None and pv["first_offset"] >= first:
                _add_span(o, pv)
            p["preview"] = None
        p["next_offset"] = max(p["next_offset"], snap_off)

    def _apply_coordinator(self, ev: tuple) -> None:
        pid, tid, tombstone, state, start, update, txn_partitions, timeout, client_txn_version = ev[COORDINATOR]
        if tombstone or pid != self.producer_id:
            if self.coord is not None and self.coord.get("tid") not in (None, tid):
                return  # news about a transactional id this producer no longer belongs to
            self.coord = {
                "tid": tid, "forgotten": "tombstone" if tombstone else f"superseded by producer id {pid}",
                "txn_partition": ev[PARTITION],
            }
            return
        prev = self.coord if self.coord and self.coord.get("tid") == tid and not self.coord.get("forgotten") else {}
        # The id's previous Complete*/Empty record (detection.md §3.1): its update time bounds the
        # start of the id's next transaction from below (TransactionMetadata.prepareTransitionTo
        # sets txnStartTimestamp only on the move to Ongoing, after it).
        exact = start is not None
        if exact:
            prev_final = None  # the start is written: no bound needed
        elif state in FINAL_STATES:
            prev_final = update
        else:
            prev_final = prev.get("prev_final_ts") if prev.get("producer_id") == pid else None
        if start is None and state == "Ongoing":
            # Text dumps before 4.1 do not print TransactionStartTimestampMs. The record that moved
            # the id to Ongoing carries txnLastUpdateTimestamp = txnStartTimestamp
            # (TransactionMetadata.prepareAddPartitions from Empty/Complete*), and every later Ongoing
            # record of the same transaction a later one: the first Ongoing record read after the
            # previous Complete*/Empty is an upper bound of the start. A run of Ongoing records is
            # one transaction only when the producer epoch does not change (TV2 bumps it at every
            # end) and each record's partition set strictly grows: the coordinator writes an Ongoing
            # record only for partitions not yet in the transaction
            # (TransactionCoordinator.handleAddPartitionsToTransaction: "partitions.subsetOf(
            # txnMetadata.topicPartitions)" replies at once). Anything else means records between
            # them are missing from the input (a segment left out): a new transaction.
            new_parts = set(txn_partitions or ())
            same_txn = prev.get("state") == "Ongoing" and prev.get("producer_epoch") == ev[PRODUCER_EPOCH] \
                and prev.get("producer_id") == pid and new_parts > set(prev.get("partitions") or ())
            start = prev.get("start_ts") if same_txn else None
            if start is None:
                start = update if update is not None and update >= 0 else None
        self.coord = {
            "tid": tid, "forgotten": None, "state": state, "producer_id": pid,
            "producer_epoch": ev[PRODUCER_EPOCH],
            "partitions": list(txn_partitions) if txn_partitions is not None else None,
            "timeout_ms": timeout, "start_ts": start, "start_exact": exact,
            "prev_final_ts": prev_final,
            "last_update_ts": update, "client_txn_version": client_txn_version,
            "txn_partition": ev[PARTITION],
        }

    # --- verdicts -----------------------------------------------------------------------------

    def coordinator_view(self, cfg: EngineConfig) -> CoordinatorView:
        """What this producer's state knows of the coordinator (detection.md §3.1); completeness
        and the partitions read are global facts the driver adds (``streaming.alerts``)."""
        c = self.coord
        if c is None:
            return CoordinatorView(current=cfg.coordinator_available)
        record = None
        if not c.get("forgotten"):
            record = CoordinatorRecord(
                transactional_id=c["tid"], state=c["state"], producer_id=c["producer_id"],
                producer_epoch=_or(c["producer_epoch"], -1),
                partitions=tuple(c["partitions"]) if c["partitions"] is not None else None,
                timeout_ms=_or(c["timeout_ms"], 0), start_ts=_or(c["start_ts"], -1),
                last_update_ts=_or(c.get("last_update_ts"), -1), client_txn_version=c.get("client_txn_version"),
                start_exact=c.get("start_exact", True), prev_final_ts=_or(c.get("prev_final_ts"), -1))
        return CoordinatorView(current=cfg.coordinator_available, mapped=True, record=record,
                               txn_partition=c.get("txn_partition"))

    def evidence(self, cfg: EngineConfig, p: dict[str, Any], o: dict[str, Any]) -> tuple[OpenTxn, CoordinatorView,
                                                                                          EpochEvidence]:
        """The verdict's three inputs for O as far as this producer's state knows them."""
        pm = o.get("prev_marker")
        txn = OpenTxn(p["topic"], p["partition"], self.producer_id, o["first_offset"], o["last_offset"],
                      o["first_ts"], o["last_ts"], p["max_epoch"], o["first_epoch"],
                      prev_marker=Marker(**pm) if pm else None)
        lm, seed = p["last_marker"], p["snapshot"]
        ces = [q["max_marker_ce"] for q in self.parts.values() if q["max_marker_ce"] >= 0]
        ev = EpochEvidence(last_marker=Marker(**lm) if lm else None, snapshot=SnapshotSeed(**seed) if seed else None,
                           read_from_zero=p["read_from_zero"], producer_max_marker_epoch=max(ces) if ces else None)
        return txn, self.coordinator_view(cfg), ev

    def _judge(self, cfg: EngineConfig, p: dict[str, Any], o: dict[str, Any], now_ms: int) -> Verdict:
        txn, view, ev = self.evidence(cfg, p, o)
        return judge(txn, view, ev, now_ms=now_ms, thresholds=cfg.thresholds_for(p["topic"]))

    def evaluate(self, cfg: EngineConfig, now_ms: int) -> list[dict[str, Any]]:
        """Judge every open transaction; emit a row when its finding changes (status, cause,
        verification or coordinator epoch), so the driver always re-judges current evidence."""
        out = []
        for p in self.parts.values():
            o = p["open"]
            if o is None:
                continue
            v = self._judge(cfg, p, o, now_ms)
            if v.status not in ("late", "hanging"):
                continue
            sig = [v.status, v.cause, v.verified, v.coordinator_epoch, v.coordinator_epoch_source]
            if sig != o.get("sig"):
                o["alert"], o["sig"] = v.status, sig
                out.append(self._row(cfg, p, o, status=v.status, now_ms=now_ms, verdict=v))
        return out

    def next_timer(self, cfg: EngineConfig) -> int | None:
        """Event time at which something will change without input: the first not-yet-alerted
        open transaction crossing its threshold, or the eviction of an idle producer."""
        times = []
        view = self.coordinator_view(cfg)
        record = view.record if view.current else None
        for p in self.parts.values():
            o = p["open"]
            if o is not None and o["alert"] is None:
                times.append(o["first_ts"] + threshold_for(cfg.thresholds_for(p["topic"]), record) + 1)
        if self.evictable() and self.last_event_ms >= 0:
            times.append(self.last_event_ms + cfg.evict_after_ms)
        return min(times) if times else None

    def evictable(self) -> bool:
        """Nothing open and no coordinator work pending (detection state can be dropped)."""
        for p in self.parts.values():  # (a loop: called twice per producer per micro-batch)
            if p["open"] is not None:
                return False
        c = self.coord
        return c is None or bool(c.get("forgotten")) or c.get("state") not in OPEN_TXN_STATES

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
             verdict: Verdict | None = None, resolution: str | None = None) -> dict[str, Any]:
        c = self.coord or {}
        txn, view, ev = self.evidence(cfg, p, o)
        thresholds = cfg.thresholds_for(p["topic"])
        if verdict is None:
            verdict = judge(txn, view, ev, now_ms=now_ms, thresholds=thresholds)
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
            evidence=evidence_json(txn, view, ev, thresholds, probe=bool(o.get("probe"))),
        )
        return row


def _add_span(o: dict[str, Any], span: dict[str, Any]) -> None:
    """Count an earlier part of the same transaction into ``o`` (preview below a snapshot)."""
    o["first_ts"] = min(o["first_ts"], span["first_ts"])
    o["last_ts"] = max(o["last_ts"], span["last_ts"])
    o["last_offset"] = max(o["last_offset"], span["last_offset"])
    for k in ("batches", "records", "bytes"):
        o[k] += span[k]


def _or(v: int | None, default: int) -> int:
    return default if v is None else v


def evidence_json(txn: OpenTxn, view: CoordinatorView, ev: EpochEvidence, thresholds: Thresholds, *,
                  probe: bool = False) -> str:
    """The state row's ``evidence`` column: what the driver re-judges with global facts added.
    ``probe``: O was found by the live source's probe (only its first batch was read): the driver
    reads its span before publishing (``BrokerEvidence.span_after``)."""
    doc = {"txn": to_dict(txn), "view": to_dict(view), "ev": to_dict(ev),
           "thresholds": {"max_timeout_ms": thresholds.max_timeout_ms, "padding_ms": thresholds.padding_ms}}
    if probe:
        doc["probe"] = True
    return json.dumps(doc, separators=(",", ":"))


def _pair_step(kind: str, has_open: bool) -> Step:
    """:func:`udfs.pairing.pair` for an event of ``kind``: data and marker rows are transactional
    batches, a marker a control batch (an event row is never of producer id -1)."""
    return pair(has_open, transactional=kind in ("data", "marker"), control=kind == "marker")


# _pair_step's results for the kinds that pair, looked up by the hot loop (they depend on nothing
# else): with a transaction open on the partition, and with none
_STEP_IF_OPEN = {kind: _pair_step(kind, True) for kind in ("data", "marker")}
_STEP_IF_NONE = {kind: _pair_step(kind, False) for kind in ("data", "marker")}

# the marker names marker_coordinator_epoch takes an epoch from (udfs.pairing: COMMIT, ABORT)
_TYPED_MARKER_NAMES = frozenset(n for n in CONTROL_NAMES.values() if marker_coordinator_epoch(n, 0) == 0)

_KIND_ORDER = {"snapshot": 0, "txn_state": 1, "data": 2, "marker": 2, "lso_passed": 2}


def _order(row: tuple) -> tuple:
    """Where an event row is applied among its producer's: snapshot entries, then coordinator
    records, then per partition in offset order; lso_passed sorts with the data by its LSO, ahead
    of a batch at that same offset (the LSO passed the previous transaction before a new one could
    start there)."""
    kind = row[KIND]
    return (_KIND_ORDER.get(kind, 3), row[TOPIC] or "", row[PARTITION] or 0,
            (row[LSO] if kind == "lso_passed" else row[FIRST_OFFSET]) or 0, kind != "lso_passed")


def process_events(st: ProducerState, events: list[tuple] | list[dict[str, Any]], *, now_ms: int,
                   cfg: EngineConfig) -> tuple[list[dict[str, Any]], bool, int | None]:
    """The body of :func:`process_key` on a producer's state held in memory: applies ``events``
    (event rows of :mod:`streaming.event_rows` or event mappings) in :func:`_order`, judges, and
    returns (output rows, whether the state is kept (False: evicted), its timeout)."""
    rows = sorted(as_rows(events), key=_order)  # stable: equal keys keep the input order, as before
    out = st.apply_rows(rows, cfg)
    out.extend(st.evaluate(cfg, now_ms))
    evict = st.evictable() and st.last_event_ms >= 0 and now_ms - st.last_event_ms >= cfg.evict_after_ms
    out.extend(st.open_set_rows(cfg))
    if evict:
        return out, False, None
    return out, True, st.next_timer(cfg)


def process_key(
    producer_id: int,
    events: list[dict[str, Any]] | list[tuple],
    state_json: str | None,
    *,
    now_ms: int,
    cfg: EngineConfig,
) -> tuple[list[dict[str, Any]], str | None, int | None]:
    """One call of the state function for one producer id.

    ``events`` are event dicts (with ``event_time_ms`` as int) or event rows
    (:mod:`streaming.event_rows`); they are applied in partition offset order. Returns (output
    rows, new state JSON or None to remove the state, timeout).
    """
    st = ProducerState.from_json(producer_id, state_json)
    out, keep, timer = process_events(st, events, now_ms=now_ms, cfg=cfg)
    if not keep:
        return out, None, None
    return out, st.to_json(), timer


#: Up to this many rows :func:`event_records` converts cell by cell: its column-wise path costs
#: a few pandas calls per column (~4 ms for ~40 columns whatever the row count), which is what
#: Spark's state operator paid per producer id, as it hands over one small frame per key.
SMALL_FRAME_ROWS = 256


def _null(v: Any) -> bool:
    """A null cell as ``Series.isna`` sees it (None, NaN, NA, NaT), without testing a list or array
    cell (``array<string>`` fields) for truth."""
    import pandas as pd

    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v)


def _small_event_records(df: Any, types: dict[str, str]) -> list[dict[str, Any]]:
    """:func:`event_records` of a small frame, cell by cell, with the column-wise path's values:
    ints and bools as Python ``int``/``bool``, timestamps as epoch ms (UTC, floored, as the
    datetime64[ms] cast), other cells as they are, None for null."""
    import pandas as pd

    def ms(v: Any) -> int:
        return pd.Timestamp(v).value // 1_000_000  # naive = UTC, as pd.to_datetime(utc=True)

    convs = []
    names = []
    for name in df.columns:
        typ = types.get(name)
        if typ == "timestamp":
            convs.append(ms)
            names.append(f"{name}_ms")
        else:
            convs.append(int if typ in ("long", "int", "short") else bool if typ == "bool" else None)
            names.append(name)
    out = []
    for row in df.to_numpy(dtype=object).tolist():
        out.append(EventRecord(zip(names, [None if _null(v) else v if c is None else c(v)
                                           for v, c in zip(row, convs, strict=True)], strict=True)))
    return out


def event_records(df: Any) -> list[dict[str, Any]]:
    """An event frame (typed by ``events.to_frame``, or as Spark hands it over: nullable integers
    as float64 with NaN, booleans as object) → the dicts :func:`process_key` takes: Python ints,
    bools and strings, None for null, ``event_time`` replaced by ``event_time_ms`` (epoch ms).

    Column by column instead of ``DataFrame.to_dict("records")``, which boxes every cell through
    pandas' scalar machinery and dominated the state operator's time on large reads. Rows are
    grouped by ``kind``, and a field null in every row of the group is left out of its dicts
    (:class:`EventRecord` reads it as None: ``ev[k]``, ``ev.get(k)`` and ``k in ev`` followed by a
    None default all see the same null); building the dicts was most of the cost, and a data row
    is null in every coordinator field and the other way round.
    """
    import numpy as np
    import pandas as pd

    from streaming.events import EVENT_FIELDS

    n = len(df)
    if n == 0:
        return []
    types = dict(EVENT_FIELDS)
    if n <= SMALL_FRAME_ROWS:
        return _small_event_records(df, types)
    names: list[str] = []
    values: list[np.ndarray] = []
    nulls: list[np.ndarray] = []
    for name in df.columns:
        col = df[name]
        mask = col.isna().to_numpy()
        has_null = bool(mask.any())
        typ = types.get(name)
        # Each column becomes an object array of Python values in C (``astype(object)`` of an
        # int64/bool array boxes Python ints/bools), nulls set to None by mask: no Python loop
        # per cell. The values are those of the per-cell conversion this replaced.
        if typ == "timestamp":
            ts = pd.to_datetime(col, utc=True).dt.tz_convert(None)
            obj = ts.to_numpy("datetime64[ms]").astype(np.int64).astype(object)
            name = f"{name}_ms"
        elif typ in ("long", "int", "short"):
            obj = (col.fillna(0) if has_null else col).to_numpy(dtype=np.int64).astype(object)
        elif typ == "bool":
            # astype(bool) of an object array is bool(v) per cell (Spark hands booleans over as
            # object); the null cells are set to None below
            raw = col.to_numpy(dtype=object, copy=True)
            if has_null:
                raw[mask] = False
            obj = raw.astype(bool).astype(object)
        else:
            obj = col.to_numpy(dtype=object)
            if has_null:
                obj = obj.copy()  # never write into the frame's own storage
        if has_null:
            obj[mask] = None
        names.append(name)
        values.append(obj)
        nulls.append(mask)
    kinds = df["kind"].to_numpy(dtype=object) if "kind" in df.columns else np.full(n, None, dtype=object)
    codes, _uniq = pd.factorize(kinds, use_na_sentinel=False)
    out: list[Any] = [None] * n
    for g in range(len(_uniq)):
        rows = np.flatnonzero(codes == g)
        whole = len(rows) == n
        keep = [i for i in range(len(names)) if not (nulls[i].all() if whole else nulls[i][rows].all())]
        knames = [names[i] for i in keep]
        cols = [(values[i] if whole else values[i][rows]).tolist() for i in keep]
        recs = [EventRecord(zip(knames, row, strict=True)) for row in zip(*cols, strict=True)]
        if whole:
            return recs
        for i, rec in zip(rows.tolist(), recs, strict=True):
            out[i] = rec
    return out
