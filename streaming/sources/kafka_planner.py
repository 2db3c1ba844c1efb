"""The kafka source's driver-side planner: what each micro-batch reads (see streaming/sources/kafka.py
for the read modes, availability and resets it implements).

It needs no Spark: :meth:`KafkaPlanner.initial` and :meth:`KafkaPlanner.plan` take and return
:class:`~streaming.sources.kafka_plan_state.PlanState` objects and talk to the cluster through a
``KafkaWire`` (the process's cached client, or one given to it); the source shell
(kafka_source.py) only converts the state to and from Spark's offset dicts.

A plan runs in stages, each one method, in this order (per-stage timing can wrap each call):

1. metadata: :meth:`_discover` (topics and partitions watched, ``__transaction_state`` included);
2. ListOffsets: :meth:`_offsets_settled` (high watermark, LSO, log start per partition; a high
   watermark below what was read is asked again), :meth:`_ride_through` (``run --once``), and
   :meth:`_drop_deleted` (a vanished partition is confirmed deleted through ListOffsets);
3. carry-over: :meth:`_carry` (per-partition availability, unread ranges, resets, positions, full
   mode's ends) — no request;
4. probe fetches (probe mode): :meth:`_probe_decide` picks the partitions whose LSO moved,
   :meth:`_probe_fetch` fetches at those LSOs (one multi-partition Fetch per leader);
5. planning (probe mode): :meth:`_probe_fold` turns the answers into reads, closes and memos.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from itertools import compress
from typing import Any

import numpy as np

from streaming.sources.kafka_client.results import DELETED, OK, OffsetsTable
from streaming.sources.kafka_clients import client_for
from streaming.sources.kafka_options import OFFSETS_TOPIC, TXN_TOPIC, split_key, tp_key
from streaming.sources.kafka_plan_state import (
    ClusterAvailability,
    PartitionDown,
    PlanColumns,
    PlanState,
    Position,
    ProbeMemo,
    ProbeRead,
    Reset,
    Seen,
)
from streaming.sources.kafka_reader import whole_batch
from streaming.sources.kafka_unread import unread_since
from streaming.sources.kafka_wire import KafkaAuthorizationError, KafkaUnavailable, KafkaWire, KafkaWireError
from udfs.record_batch import scan_batches_many

log = logging.getLogger(__name__)
# The error of every partition while no broker answers Metadata (gap reason "unavailable: ...").
NO_BROKER_ANSWERED = "no broker answered"

# (topic, partition, key, ListOffsets answer) of a data partition left to the probe stages
ProbeTodo = tuple[str, int, str, Any]
# (topic, partition, key, LSO, high watermark) of a partition whose LSO is fetched
ProbeNeed = tuple[str, int, str, int, int]


def plan_reset(topic: str, partition: int, nxt: int, old_id: str | None, off: Any) -> Reset | None:
    """Where to resume when the partition's log is no longer the one read up to ``nxt``.

    * Topic id changed (Metadata v10+, Kafka 2.8+): the topic was deleted and created again under
      the same name. Offsets from ``nxt`` of the old topic were never read; the new topic is
      read from its log start.
    * Same topic id and high watermark below ``nxt`` (the caller has re-checked that it stays
      there): the log was truncated, as after an unclean leader election. Offsets ``hw..nxt-1``
      as read before no longer exist, and the new leader may already have appended below ``hw``
      (where it diverged is not known without OffsetsForLeaderEpoch). Reading resumes at the new
      LSO (at most ``hw``): every transaction still open in the new log starts there or later,
      the same argument that makes the LSO a safe default start.
    * High watermark below ``nxt`` and no topic ids to compare (broker < 2.8, or offsets stored
      before ids were kept): truncation and re-creation cannot be told apart, so the partition
      is read again from its log start (events below ``hw`` may repeat rather than be lost).

    Returns None when the log continues (``first``/``last`` of the result are the offsets its
    gap row names).
    """
    new_id = off.topic_id
    if old_id and new_id and old_id != new_id:
        return Reset(off.log_start, True, nxt, None,
                     f"topic {topic} was deleted and recreated (topic id {old_id} -> {new_id}); offsets from "
                     f"{nxt} of the old topic were not read; reading the new topic from its log start "
                     f"{off.log_start}")
    hw = off.high_watermark
    if hw >= nxt:
        return None
    if old_id and old_id == new_id:
        restart = max(min(off.lso if off.lso >= 0 else hw, hw), off.log_start)
        return Reset(restart, None, restart, nxt - 1,
                     f"{topic}-{partition} high watermark went back from {nxt} to {hw}: log truncated (unclean "
                     f"leader election?); offsets {hw}..{nxt - 1} as read before are gone and {restart}..{hw - 1} "
                     f"may differ; re-reading from the new LSO {restart}")
    return Reset(off.log_start, True, hw, nxt - 1,
                 f"{topic}-{partition} high watermark went back from {nxt} to {hw}, without topic ids to "
                 f"compare (broker < 2.8): truncated or recreated; offsets {hw}..{nxt - 1} as read before "
                 f"are gone; reading again from the log start {off.log_start} (events may repeat)")


def _above(values: np.ndarray, bound: int) -> np.ndarray:
    """``values > bound`` for int64 ``values`` and any Python int ``bound`` (beyond int64's
    range the answer is the same for every value)."""
    if bound < -2 ** 63:
        return np.ones(len(values), dtype=bool)
    if bound >= 2 ** 63 - 1:
        return np.zeros(len(values), dtype=bool)
    return values > bound


class KafkaPlanner:
    """Plans the kafka source's micro-batches on the driver.

    ``opts`` is :func:`streaming.sources.kafka_options.parse_options`' dict; ``wire`` a client to
    use (tests), else the process's cached client for ``opts``. :attr:`cluster` is whether any
    broker answered the last plan (driver memory only, see kafka_plan_state.py)."""

    def __init__(self, opts: dict[str, Any], wire: KafkaWire | None = None) -> None:
        self.opts = opts
        self._given_wire = wire
        self.cluster = ClusterAvailability()
        # partitions whose leader did not answer this plan's probe in time: {key: error}
        self._probe_stalled: dict[str, str] = {}
        self._no_txn_topic_logged = False
        self._listed_all: dict[str, list[int]] | None = None  # this discovery's all-topics listing
        self._offsets_readable: bool | None = None  # Read on __consumer_offsets, checked once
        self._found: tuple[list, PlanColumns] | None = None  # the last discovery and its rows

    def wire(self) -> KafkaWire:
        return self._given_wire if self._given_wire is not None else client_for(self.opts)

    # -- initial offsets ------------------------------------------------------------------------

    def initial(self) -> PlanState:
        """Where the query starts (``starting_offsets``); waits, up to ``unavailable_timeout_ms``,
        while no broker answers (there is nothing to return before one does)."""
        while True:
            now = int(time.time() * 1000)
            try:
                tps = self._discover().tps()
                offs, down = self.wire().offsets_available(tps)
                break
            except KafkaUnavailable as exc:
                self._cluster_down(exc, now)
                time.sleep(min(self.opts["retry_backoff_ms"] * 8, 5000) / 1000)
        self.cluster.up()
        explicit = self._explicit()
        state = PlanState()
        for t, p in tps:
            o = offs.get((t, p))
            if o is None or o.deleted:
                continue
            state.parts[tp_key(t, p)] = self._initial_for(t, p, o, explicit)
        state.unavail = {tp_key(*tp): self._still_down(None, err, now) for tp, err in down.items()}
        return state

    def _initial_for(self, topic: str, partition: int, off: Any, explicit: dict) -> Position:
        if topic == TXN_TOPIC:
            return Position(off.log_start, True)
        if str(partition) in explicit.get(topic, {}):
            o = int(explicit[topic][str(partition)])
            return Position(max(o, off.log_start), o <= off.log_start)
        mode = self.opts["starting"] if self.opts["starting"] in ("lso", "earliest", "latest") else "lso"
        if mode == "earliest":
            return Position(off.log_start, True)
        if mode == "latest":
            return Position(off.high_watermark, off.high_watermark == off.log_start)
        return Position(off.lso, off.lso == off.log_start)

    def _explicit(self) -> dict:
        return {} if self.opts["starting"] in ("lso", "earliest", "latest") else json.loads(self.opts["starting"])

    # -- one plan -------------------------------------------------------------------------------

    def plan(self, start: PlanState) -> PlanState:
        """The next plan after ``start``. When no broker answers, a plan with every partition
        unavailable (:meth:`_all_unavailable`), until ``unavailable_timeout_ms`` has passed (then
        raises).

        Probe mode at scale: the ListOffsets answers are arrays (``KafkaWire.offsets_table``),
        compared with ``start``'s (:class:`PlanColumns`); a partition whose answer and state
        make every per-partition step a no-op (:meth:`_quiet`) keeps ``start``'s entries as they
        are, and only the others go through stages 3 to 5."""
        now = int(time.time() * 1000)
        was_down = start.unavail
        probe = self.opts["read_mode"] == "probe"
        try:
            found = self._discover()  # stage 1: metadata
            # stage 2: ListOffsets; partitions still in their backoff are not asked this trigger
            wait = [r for k, d in was_down.items() if d.retry_at > now and (r := found.index.get(k)) is not None]
            table, trow = self._offsets_settled(found, wait, start)
        except KafkaUnavailable as exc:
            self._cluster_down(exc, now)
            return self._all_unavailable(start, now)
        self.cluster.up()
        if table.down:
            self._ride_through(table)
        end = PlanState(parts=dict(start.parts),  # Position is never changed in place: shared
                        clock=max(start.clock, now), ids=dict(start.ids), gone=dict(start.gone),
                        behind=dict(start.behind), planned=now,
                        probe=dict(start.probe or {}) if probe else None)
        # where earlier reads stopped short (kafka_unread.py): read again from there
        fresh, end.unread_seen = unread_since(self.opts["unread_ledger"], start.unread_seen)
        for k, off in fresh.items():
            end.behind[k] = min(off, end.behind.get(k, off))
        quiet = self._quiet(found, table, trow, start, end, now)
        rows = np.flatnonzero(~quiet)
        keys = found.keys
        tps = [split_key(keys[r]) for r in rows.tolist()]
        # the answered rows (OK or DELETED) of the partitions that are not quiet, read at once
        i = trow[rows]
        answered = i >= 0
        answered[answered] = np.isin(table.status[i[answered]], (OK, DELETED))
        offs = dict(zip(compress(tps, answered.tolist()), table.rows(i[answered]), strict=True))
        down = table.down
        # seen: the quiet partitions' facts as they were; the others' are set again by _carry
        end.seen = dict(start.seen)
        for r in rows.tolist():
            end.seen.pop(keys[r], None)
        if len(end.seen) > int(quiet.sum()):  # partitions no longer listed
            for k in list(end.seen.keys() - found.key_set):
                del end.seen[k]
        end.dropped = self._drop_deleted(found, offs, end.parts, start.ids, end.gone)
        probe_todo = self._carry(start, end, tps, offs, down, now)  # stage 3: no request
        for k in end.resets:
            end.gone.pop(split_key(k)[0], None)
        end.txn_n = found.count(TXN_TOPIC)
        if end.probe is not None:
            self._probe_stalled = {}
            known = found.key_set
            if not end.probe.keys() <= known:  # (checked in C first: at scale no partition has gone)
                end.probe = {k: m for k, m in end.probe.items() if k in known}  # unavailable ones keep theirs
            need = self._probe_decide(probe_todo, start, end, now)  # stage 4: which LSOs to fetch
            found_at = self._probe_fetch([(t, p, lso) for t, p, _, lso, _ in need])  # stage 4: Fetch at them
            self._probe_fold(need, found_at, end, now)  # stage 5: planning
            for k, error in self._probe_stalled.items():  # not read this trigger: availability records
                end.unavail[k] = self._still_down(was_down.get(k), error, now)
            end.cols = self._columns(found, start, end, rows)
        return end

    def _quiet(self, found: PlanColumns, table: OffsetsTable, trow: np.ndarray, start: PlanState, end: PlanState,
               now: int) -> np.ndarray:
        """Per row of ``found``: whether stages 3 to 5 would leave the partition exactly as
        ``start`` has it (its position, facts and probe memo the same objects, no read, close,
        reset, emit or availability record), so that they are skipped for it.

        That is the case, in probe mode, for a data partition answered now with the same high
        watermark, LSO, log start, leader and topic id as ``start`` saw, not read up to beyond
        its high watermark (no reset, ``plan_reset``), neither down before (``start.unavail``) nor
        with an unread rest (``end.behind``), and either
        * without a probe memo, nothing open (LSO at the high watermark) and its position already
          at the high watermark, not from the log start (``_probe_decide``: ``Position(hw, False)``), or
        * with a memo of this LSO that found a window (``end``), not followed, whose transaction
          is not yet ``probe_follow_after_ms`` old (``_probe_decide``: "the same oldest open
          transaction as last time: nothing to fetch").
        Anything else (and everything in full read mode, or without ``start``'s columns over the
        same partitions) takes the whole path."""
        n = len(found)
        sc = start.cols
        if end.probe is None or sc is None or not sc.same_rows(found):
            return np.zeros(n, dtype=bool)
        asked = trow >= 0
        tr = np.where(asked, trow, 0)
        if not len(table):
            return np.zeros(n, dtype=bool)
        hw, lso, ls = table.high_watermark[tr], table.lso[tr], table.log_start[tr]
        q = (asked & (table.status[tr] == OK) & sc.has_part & sc.has_seen & (hw == sc.hw) & (lso == sc.lso)
             & (ls == sc.ls) & (table.leader[tr] == sc.leader) & (sc.next <= hw))
        # the same topic id as start knew (None and None included): plan_reset and ids unchanged
        old = np.asarray([table._id_index.get(start.ids[t], -3) if start.ids.get(t) else -1 for t in found.topics]
                         or [-1], dtype=np.int64)
        q &= table.id_of[tr] == old[found.topic_of]
        for i, t in enumerate(found.topics):
            if t == TXN_TOPIC:  # replayed in full: always the whole path
                q[int(found.starts[i]):int(found.starts[i + 1])] = False
        index = found.index
        for k in list(start.unavail) + list(end.behind):
            r = index.get(k)
            if r is not None:
                q[r] = False
        lso_now = np.where((lso >= 0) & (lso <= hw), lso, hw)  # as _probe_decide: LSO unknown = hw
        has_memo = np.zeros(n, dtype=bool)
        # end.probe is still start's memos here (a copy), which start holds as arrays over the same
        # rows (sc.same_rows(found)): built once, also for its offset log entry
        memos = start.memo_arrays()
        if memos is not None and len(memos.rows):
            on = memos.rows >= 0
            r = memos.rows[on]
            has_memo[r] = True
            m_lso = memos.column("lso")[0][on]
            _, end_none = memos.column("end")
            _, follow_none = memos.column("follow")
            first_ts, first_ts_none = memos.column("first_ts")
            # now - first_ts < probe_follow_after_ms, in int64 without overflow: first_ts > now - after
            young = first_ts_none[on] | _above(first_ts[on], now - self.opts["probe_follow_after_ms"])
            waiting = (follow_none[on] & ~end_none[on] & (m_lso == lso_now[r]) & (lso_now[r] < hw[r]) & young)
            q[r[~waiting]] = False
        q &= has_memo | ((lso_now >= hw) & (sc.next == hw) & ~sc.fls)
        return q

    def _columns(self, found: PlanColumns, start: PlanState, end: PlanState, rows: np.ndarray) -> PlanColumns:
        """``end``'s parts and seen as columns over ``found``'s partitions: ``start``'s rows
        where stages 3-5 were skipped, the others read back from ``end``'s dicts."""
        cols = found.like()
        if start.cols is not None and start.cols.same_rows(found):
            cols.copy_values(start.cols)
            cols.fill(rows.tolist(), end.parts, end.seen)
        else:
            cols.fill(range(len(found)), end.parts, end.seen)
        return cols

    def _carry(self, start: PlanState, end: PlanState, tps: list[tuple[str, int]], offs: dict, down: dict,
               now: int) -> list[ProbeTodo]:
        """Stage 3: availability, unread ranges, resets and each partition's position; full mode's
        ends (for ``tps``: the partitions :meth:`_quiet` did not set aside). Returns the data
        partitions left to the probe stages (probe mode)."""
        was_down = start.unavail
        for tp in tps:
            k = tp_key(*tp)
            if tp in down:
                end.unavail[k] = self._still_down(was_down.get(k), down[tp], now)
            elif k in was_down and tp not in offs:
                end.unavail[k] = was_down[k]  # in backoff: not asked
        explicit = self._explicit()
        probe = end.probe is not None
        parts = end.parts
        todo: list[ProbeTodo] = []
        for t, p in tps:
            o = offs.get((t, p))
            if o is None or o.deleted:
                continue
            k = tp_key(t, p)
            if k not in parts and k in was_down:  # unavailable since the query started
                parts[k] = self._initial_for(t, p, o, explicit)
                end.starts[k] = parts[k].next
            elif k not in parts:  # a new partition (pattern match or partition added): all of it is new
                parts[k] = Position(o.log_start, True)
                end.starts[k] = o.log_start
                if t in end.gone:  # a topic dropped as deleted is back: a new topic, from its log start
                    end.resets[k] = Reset(o.log_start, True, None, None,
                                          f"topic {t} was deleted and created again (topic id "
                                          f"{end.gone[t] or 'unknown'} -> {o.topic_id or 'unknown'}): {t}-{p} is a "
                                          f"new partition, read from its log start {o.log_start}; nothing of the "
                                          f"old topic carries over")
            else:
                reset = plan_reset(t, p, parts[k].next, start.ids.get(t), o)
                if reset is not None:
                    end.resets[k] = reset
                    flag = parts[k].from_log_start if reset.from_log_start is None else reset.from_log_start
                    parts[k] = Position(reset.restart, flag)
            if k in end.behind:
                self._carry_unread(k, t, end.behind.pop(k), end)
            if o.topic_id:
                end.ids[t] = o.topic_id
            end.seen[k] = Seen(o.high_watermark, o.lso if o.lso >= 0 else None,
                               o.log_start if o.log_start >= 0 else None, o.leader)
            if probe and t != TXN_TOPIC:
                todo.append((t, p, k, o))
                continue
            nxt = parts[k].next
            hi = o.high_watermark
            if self.opts["max_offsets"] and t != TXN_TOPIC and hi - nxt > self.opts["max_offsets"]:
                hi = nxt + self.opts["max_offsets"]
                end.lagging.append(k)
            parts[k] = Position(max(hi, nxt), parts[k].from_log_start)
        return todo

    def _carry_unread(self, k: str, topic: str, off: int, end: PlanState) -> None:
        """Plan partition ``k`` to be read again from ``off``, where an earlier read stopped.

        Full reads (and ``__transaction_state``) start there (``rereads``); in probe mode a
        followed partition follows from there, and an unread probe window is probed again at the
        LSO (the transaction it held is found again if still open; an LSO that moved on closed
        it). A log that went backwards (``resets``) is read again from its restart anyway."""
        if k in end.resets or k not in end.parts:
            return
        if end.probe is not None and topic != TXN_TOPIC:
            m = end.probe.get(k)
            if m is not None and m.follow is not None:
                end.probe[k] = replace(m, follow=min(m.follow, off))
            elif m is not None and (m.end is None or off < m.end):
                del end.probe[k]
            return
        if off < end.parts[k].next:
            end.rereads[k] = off

    # -- stage 1: metadata ----------------------------------------------------------------------

    def _discover(self) -> PlanColumns:
        """The partitions watched (``__transaction_state`` included), as the rows of empty
        :class:`PlanColumns` sorted by topic and partition; the same object while discovery
        finds the same partitions, so that plans can compare their columns row by row."""
        w = self.wire()
        found = w.partitions(self.opts["topics"] or None, self.opts["pattern"], self.opts["include_internal"])
        if self.opts["topics"] and self.opts["pattern"]:
            found.update(w.partitions(self.opts["topics"], None, True))
        found.update(self._txn_partitions(w))
        if self.opts["watch_consumer_offsets"] and OFFSETS_TOPIC not in found:
            found.update(self._offsets_partitions(w))
        listing = [(t, sorted(set(found[t]))) for t in sorted(found) if found[t]]
        if self._found is None or self._found[0] != listing:
            self._found = (listing, PlanColumns.of_keys(listing))
        return self._found[1]

    def _offsets_partitions(self, w: KafkaWire) -> dict[str, list[int]]:
        """``__consumer_offsets``'s partitions, watched like data partitions (issue 25 item 1): an
        open transaction there is a TxnOffsetCommit that holds its consumer groups
        (UNSTABLE_OFFSET_COMMIT). Taken from the all-topics listing :meth:`_txn_partitions` just
        made (never named: brokers before 2.8 would create it). Read on it is checked once with one
        small Fetch: a principal without it is told which ACL to add and the data partitions are
        watched as before, instead of the job stopping on the first read (the one clear error a
        watched data topic gets)."""
        listed = self._listed_all if self._listed_all is not None else w.partitions(None, None, True)
        parts = listed.get(OFFSETS_TOPIC)
        if not parts:
            return {}
        if self._offsets_readable is None:
            try:
                start = w.offsets([(OFFSETS_TOPIC, parts[0])])[(OFFSETS_TOPIC, parts[0])].log_start
                w.fetch(OFFSETS_TOPIC, parts[0], max(int(start), 0), 1024)
                self._offsets_readable = True
            except KafkaAuthorizationError as exc:
                log.warning("kafka source: not watching %s (open transactional offset commits that hold consumer "
                            "groups): %s. Grant Read on it (docs/deployment.md) or set [kafka] "
                            "watch_consumer_offsets = false", OFFSETS_TOPIC, exc)
                self._offsets_readable = False
            except KafkaWireError as exc:
                log.info("kafka source: %s not readable yet (%s): looking again next trigger", OFFSETS_TOPIC, exc)
                return {}
        return {OFFSETS_TOPIC: parts} if self._offsets_readable else {}

    def _txn_partitions(self, w: KafkaWire) -> dict[str, list[int]]:
        """``__transaction_state``'s partitions, from a list of all topics: never from a Metadata
        request naming it. Brokers before 2.8 create a missing internal topic named in any
        Metadata request, whatever AllowAutoTopicCreation says (``KafkaApis.getTopicMetadata`` ->
        ``createInternalTopic``; KAFKA-9751 moved creation to the controller in 2.8), and an
        all-topics request never creates anything. A cluster without it has never had a
        transactional producer (a producer's first FindCoordinator for its transactional id creates it,
        ``KafkaApis.getCoordinator``, before its InitProducerId): the
        data partitions are watched all the same, and the next listing finds it once it exists."""
        listed = w.partitions(None, None, True)
        self._listed_all = listed  # reused by _offsets_partitions: one all-topics listing per discovery
        if TXN_TOPIC in listed:
            self._no_txn_topic_logged = False
            return {TXN_TOPIC: listed[TXN_TOPIC]}
        # Absent from the list: missing, or not Describe-able (Kafka leaves such topics out of an
        # all-topics answer, KafkaApis.handleTopicMetadataRequest). From 2.8 naming it is safe and
        # tells the two apart (a missing ACL raises KafkaAuthorizationError naming it).
        ambiguous = w.names_create_internal_topics()
        if not ambiguous:
            named = w.partitions([TXN_TOPIC], None, True)
            if TXN_TOPIC in named:
                return {TXN_TOPIC: named[TXN_TOPIC]}
        if not self._no_txn_topic_logged:
            why = ("" if not ambiguous else
                   f" (or this principal may not Describe Topic:{TXN_TOPIC}, which leaves it out of the topic list: "
                   f"kafka-acls.sh --add --allow-principal <principal> --operation Describe --topic {TXN_TOPIC}; "
                   f"brokers before 2.8 would create it if it were named, so txnwatch does not ask for it by name)")
            log.warning("kafka source: the cluster at %s has no %s topic%s: no transactional producer has "
                        "initialised yet, so there is no transaction to watch; watching the data partitions "
                        "and looking for it again every trigger (txnwatch never creates it)",
                        self.opts["bootstrap"], TXN_TOPIC, why)
            self._no_txn_topic_logged = True
        return {}

    # -- stage 2: ListOffsets -------------------------------------------------------------------

    def _offsets_settled(self, found: PlanColumns, wait: list[int], start: PlanState
                         ) -> tuple[OffsetsTable, np.ndarray]:
        """Offsets of ``found``'s partitions but the rows ``wait`` (in their backoff), as a table
        and, per row of ``found``, its row in the table (-1: not asked). Where a high watermark is
        below what was already read (and the topic id does not already prove a new topic) it is
        asked again, with backoff, up to ``empty_fetch_retries`` times: a new leader reports a
        lower high watermark until its followers' fetches tell it the old one (seconds at most),
        a truncated log stays lower."""
        w = self.wire()
        n = len(found)
        if wait:
            keep = np.ones(n, dtype=bool)
            keep[wait] = False
            rows = np.flatnonzero(keep)
            trow = np.full(n, -1, dtype=np.int64)
            trow[rows] = np.arange(len(rows))
            table = w.offsets_table(found.asked(rows))
        else:
            rows = trow = np.arange(n)
            table = w.offsets_table(found.asked())
        # the position each asked partition was read up to (-1: none yet)
        sc = start.cols
        if sc is not None and sc.same_rows(found):
            nxt = np.where(sc.has_part[rows], sc.next[rows], -1)
        else:
            keys = found.keys
            nxt = np.asarray([(pos.next if (pos := start.parts.get(keys[r])) is not None else -1)
                              for r in rows.tolist()] or [0], dtype=np.int64)[:len(rows)]
        ids = start.ids
        old = np.asarray([table._id_index.get(ids[t], -3) if ids.get(t) else -1 for t in table.topics] or [-1],
                         dtype=np.int64)[table.topic_of]
        recreated = (old != -1) & (table.id_of >= 0) & (table.id_of != old)
        for attempt in range(1, self.opts["empty_fetch_retries"] + 1):
            behind = np.flatnonzero((table.status == OK) & (table.high_watermark < nxt) & ~recreated)
            if not len(behind):
                break
            time.sleep(min(self.opts["retry_backoff_ms"] * 2 ** (attempt - 1), 5000) / 1000)
            more, still = w.offsets_available([table.tp(r) for r in behind.tolist()])
            table.merge(more, still)
            recreated[behind] = [bool(ids.get(t) and o.topic_id and ids[t] != o.topic_id)
                                 if (o := more.get((t, p))) is not None else False
                                 for t, p in (table.tp(r) for r in behind.tolist())]
        return table, trow

    def _ride_through(self, table: OffsetsTable) -> None:
        """``run --once``: wait (bounded by ``ride_through_ms``) for unavailable partitions to
        come back, so a short leader election does not leave a partition unread."""
        budget = self.opts["ride_through_ms"]
        deadline = time.monotonic() + budget / 1000
        delay = self.opts["retry_backoff_ms"] / 1000
        w = self.wire()
        while table.down and budget and time.monotonic() < deadline:
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 5.0)
            more, still = w.offsets_available(list(table.down))
            table.merge(more, still)

    def _drop_deleted(self, found: PlanColumns, offs: dict, parts: dict[str, Position],
                      known_ids: dict[str, str], gone: dict[str, str | None]) -> dict[str, str]:
        """Partitions planned before whose topic the brokers now confirm deleted: removed from
        ``parts`` (never planned again) and returned as ``{key: reason}`` for one ``unavailable``
        gap row each; ``gone`` remembers the topic (and its id) so that a topic created again
        under the name is reported as new (see :meth:`_carry`).

        A partition counts as deleted only when ``deletion_confirmations`` Metadata answers in a
        row, asked fresh with backoff, all lack it (kafka_client.metadata.confirmed_gone; one broker's cache
        may lag, ``KafkaApis.handleTopicMetadataRequest`` answers from it): a partition missing
        from discovery is asked once through ListOffsets, which does that confirmation.
        """
        listed = found.key_set
        # checked in C first: at scale a partition has rarely gone
        vanished = [] if parts.keys() <= listed else [split_key(k) for k in parts if k not in listed]
        confirmed = dict(offs)
        if vanished:
            more, _ = self.wire().offsets_available(vanished)
            confirmed.update(more)
        dropped: dict[str, str] = {}
        for tp, o in confirmed.items():
            k = tp_key(*tp)
            if not o.deleted or k not in parts:
                continue
            nxt = parts.pop(k).next
            gone[tp[0]] = known_ids.get(tp[0])
            dropped[k] = (f"{tp[0]}-{tp[1]} was deleted: {self.opts['deletion_confirmations']} fresh Metadata answers "
                          f"in a row lack it (UNKNOWN_TOPIC_OR_PARTITION); read up to offset {nxt}, no longer planned")
            log.warning("kafka source: %s", dropped[k])
        return dropped

    # -- stages 4 and 5: probe mode -------------------------------------------------------------
    # Offsets gain ``probe`` (per partition a ProbeMemo), ``reads`` (ranges to read now),
    # ``closes`` (``[producer id, new LSO]`` of probed transactions the LSO has passed) and
    # ``emit`` (partitions whose progress row is due: their offsets changed, or they are read,
    # closed, reset or back from an outage). See the module docstring of kafka.py.

    def _follow(self, end: PlanState, k: str, lo: int, hw: int, window: bool) -> None:
        """Read partition ``k`` in full from ``lo`` (``max_offsets_per_trigger`` applies)."""
        cap = self.opts["max_offsets"]
        hi = min(hw, lo + cap) if cap else hw
        if hi < hw:
            end.lagging.append(k)
        end.reads[k] = ProbeRead(lo, hi, window)
        end.parts[k] = Position(hi, False)
        end.probe[k] = replace(end.probe[k], follow=hi)

    def _probe_decide(self, todo: list[ProbeTodo], start: PlanState, end: PlanState, now: int) -> list[ProbeNeed]:
        """Stage 4a (no request): per data partition, from its ListOffsets answer and its memo,
        whether nothing is open, the LSO passed the probed transaction (a close), the partition is
        followed, the same transaction is still the oldest open one, or its LSO must be fetched
        (returned)."""
        memo = end.probe
        need: list[ProbeNeed] = []
        follow_after = self.opts["probe_follow_after_ms"]
        for t, p, k, o in todo:
            hw, ls = o.high_watermark, max(o.log_start, 0)
            # LSO unknown (-1: a ListOffsets v0/v1 broker, < 0.11, which has no transactions)
            lso = o.lso if 0 <= o.lso <= hw else hw
            m = memo.pop(k, None)
            if start.seen.get(k) != end.seen.get(k) or k in start.unavail or k in end.resets:
                end.emit.append(k)
            if m is not None and m.pid is not None and lso != m.lso and lso > max(m.first, ls):
                # The LSO is the first offset of the oldest open transaction (pinned at the log
                # start when retention deleted it: UnifiedLog.updateFirstUnstableOffset), so an
                # LSO above it proves the probed transaction is no longer open. (A followed
                # partition's reads also give its marker; the state ignores whichever comes second.)
                end.closes[k] = [[int(m.pid), int(lso)]]
                m = replace(m, pid=None)  # closed once
            if m is not None and k in end.resets:
                m = None  # the log went backwards: start again from its LSO
            if m is not None and m.follow is not None:
                if lso >= hw and m.follow >= hw:
                    end.parts[k] = Position(hw, False)  # read through, nothing open: back to probing
                else:
                    memo[k] = m
                    self._follow(end, k, max(m.follow, ls), hw, False)
                continue
            if lso >= hw:
                end.parts[k] = Position(hw, False)  # nothing open: nothing to read
            elif m is not None and m.lso == lso and m.end is not None:
                memo[k] = m  # the same oldest open transaction as last time: nothing to fetch
                if m.first_ts is not None and now - m.first_ts >= follow_after:
                    self._follow(end, k, lso, hw, True)
            else:
                need.append((t, p, k, lso, hw))
        return need

    def _probe_fold(self, need: list[ProbeNeed], found: list[tuple[Any, ...] | None], end: PlanState,
                    now: int) -> None:
        """Stage 5: the probe answers become memos and reads (or follows); ``emit`` gains every
        partition read or closed."""
        follow_after = self.opts["probe_follow_after_ms"]
        for (_t, _p, k, lso, hw), got in zip(need, found, strict=True):
            if got is None:  # no answer now: probed again next trigger
                end.probe[k] = ProbeMemo(lso, None, None, None, None)
                continue
            stop, pid, first, first_ts, note = got
            end.probe[k] = ProbeMemo(lso, stop, pid, first, first_ts)
            if first_ts is not None and now - first_ts >= follow_after:
                # old enough to become a finding: read everything from the LSO from now on, so
                # every transaction open behind it is seen too (as the full read mode sees it)
                self._follow(end, k, lso, hw, True)
            else:
                end.reads[k] = ProbeRead(lso, stop, True, note)
                end.parts[k] = Position(stop, False)
        emitted = set(end.emit)  # a set: the first plan emits every partition (a list scan each was quadratic)
        for k in list(end.reads) + list(end.closes):
            if k not in emitted:
                emitted.add(k)
                end.emit.append(k)

    def _probe_fetch(self, items: list[tuple[str, int, int]]) -> list[tuple[Any, ...] | None]:
        """:meth:`_probe_fetch_once`, asked again with backoff for the partitions that gave no
        answer while ``ride_through_ms`` lasts (``run --once`` has no next trigger to probe them)."""
        out = self._probe_fetch_once(items)
        deadline = time.monotonic() + self.opts["ride_through_ms"] / 1000
        delay = self.opts["retry_backoff_ms"] / 1000
        while any(o is None for o in out) and time.monotonic() < deadline:
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 5.0)
            idx = [i for i, o in enumerate(out) if o is None]
            for i, o in zip(idx, self._probe_fetch_once([items[i] for i in idx]), strict=True):
                out[i] = o
                if o is not None:  # answered on a retry: not stalled after all
                    self._probe_stalled.pop(tp_key(items[i][0], items[i][1]), None)
        return out

    def _probe_fetch_once(self, items: list[tuple[str, int, int]]) -> list[tuple[Any, ...] | None]:
        """For each ``(topic, partition, lso)``: ``(end, producer id, first offset, first timestamp,
        None)`` of the first transactional data batch at or after the LSO (``end`` = its last
        offset + 1), or ``(lso + 1, None, None, None, note)`` when the bytes there hold none (the executor's read of
        that offset reports what is there: a corrupt batch as a gap, else ``note``), or None when the
        partition did not answer. One multi-partition Fetch per leader, ``probe_bytes`` per
        partition; a partition whose first batch is larger is fetched alone with room for it."""
        if not items:
            return []
        w = self.wire()
        size = self.opts["probe_bytes"]
        # probe_bytes bounds each partition; one request per leader carries all of its partitions
        answers = w.fetch_many(items, size, partition_max_bytes=size)
        out: list[tuple[Any, ...] | None] = [None] * len(items)
        got: list[tuple[int, str, int, int, Any, bytes]] = []  # (item, topic, partition, LSO, answer, its bytes)
        for n, (t, p, lso) in enumerate(items):
            res = answers.get((t, p))
            if res is None and w.stalled(t, p):
                self._probe_stalled[tp_key(t, p)] = (f"leader of {t}-{p} did not answer a probe within "
                                                      f"{self.opts['broker_timeout_ms']} ms (broker_timeout_ms)")
                continue
            data = res.records if res is not None else None
            budget = size
            while not whole_batch(data) and budget < self.opts["fetch_max_bytes"]:
                if data is not None and len(data) >= 12:  # a partial first batch: ask with room for it
                    budget = max(budget * 2, 12 + int.from_bytes(data[8:12], "big", signed=True))
                try:
                    res = w.fetch(t, p, lso, min(budget, self.opts["fetch_max_bytes"]))
                except KafkaAuthorizationError:
                    raise  # one clear error naming the missing ACL, as a full read gives
                except KafkaWireError:
                    res = None  # not readable now: probed again next trigger
                if res is None or not res.ok:
                    break
                if not res.records:
                    break  # nothing at the LSO (a new leader catching up): probed again next trigger
                data = res.records
                budget *= 2
            if res is None or not res.ok or not data:
                continue
            got.append((n, t, p, lso, res, data))
        if not got:
            return out
        # every answer's batch headers decoded together, and the first transactional data batch
        # ending at or after its LSO found for all of them at once: numpy's fixed cost per call,
        # paid per probed partition, was most of this at thousands of probes per trigger
        scans = scan_batches_many([g[5] for g in got], validate_crc=False, sources=[f"{g[1]}-{g[2]}" for g in got],
                                  allow_partial_tail=True)
        lens = [len(sc) for sc in scans]
        ends = np.cumsum(lens)
        cols = {k: np.concatenate([sc.columns[k] for sc in scans])
                for k in ("last_offset", "is_transactional", "is_control", "producer_id", "base_offset",
                          "first_timestamp")}
        lso_of = np.repeat(np.array([g[3] for g in got], dtype=np.int64), lens)
        hits = np.flatnonzero((cols["last_offset"] >= lso_of) & cols["is_transactional"] & ~cols["is_control"])
        first = np.searchsorted(hits, ends - np.asarray(lens, dtype=np.int64))  # first hit at or after each start
        for j, (n, t, p, lso, res, data) in enumerate(got):
            k = int(first[j])
            if k < len(hits) and hits[k] < ends[j]:
                i = int(hits[k])
                # first write: baseTimestamp, or maxTimestamp for LogAppendTime (detection.md §1)
                out[n] = (int(cols["last_offset"][i]) + 1, int(cols["producer_id"][i]), int(cols["base_offset"][i]),
                          int(cols["first_timestamp"][i]), None)
            elif scans[j].errors:
                out[n] = (lso + 1, None, None, None, None)  # the read of the LSO's batch reports the error
            else:
                out[n] = (lso + 1, None, None, None,
                          f"probe: {t}-{p} has LSO {lso} below its high watermark {res.high_watermark} but no "
                          f"transactional batch follows it in {len(data)} bytes; the transaction holding the LSO "
                          f"is not identified (read_mode = full reads it)")
        return out

    # -- availability -----------------------------------------------------------------------------

    def _still_down(self, prev: PartitionDown | None, error: str, now: int) -> PartitionDown:
        """Availability bookkeeping of a partition that could not be read this plan."""
        tries = (prev.tries if prev else 0) + 1
        backoff = min(self.opts["retry_backoff_ms"] * 2 ** (tries - 1), self.opts["unavailable_backoff_max_ms"])
        return PartitionDown(error, prev.since if prev else now, tries, now + backoff)

    def _all_unavailable(self, start: PlanState, now: int) -> PlanState:
        """The plan while no broker answers: every partition known so far is unavailable (its gap
        row "unavailable: no broker answered", no progress row, no read), so the job's availability
        records, progress line and metrics show the outage instead of running no micro-batch at
        all. Offsets, the clock and what plans carry (ids, deleted topics, unread rest, probe memo)
        stay as they were; nothing of the previous plan's one-off work (resets, rereads, drops,
        probe reads) repeats. Every partition is asked again at the next trigger: the whole cluster
        is asked anyway."""
        unavail = {k: replace(self._still_down(start.unavail.get(k), NO_BROKER_ANSWERED, now), retry_at=now)
                   for k in sorted(set(start.parts) | set(start.unavail))}
        return PlanState(parts={k: Position(v.next, v.from_log_start) for k, v in start.parts.items()},
                         clock=start.clock, unavail=unavail, ids=dict(start.ids), gone=dict(start.gone),
                         seen=dict(start.seen), behind=dict(start.behind), unread_seen=start.unread_seen,
                         probe=dict(start.probe) if start.probe is not None else None, planned=now,
                         txn_n=start.txn_n)

    def _cluster_down(self, exc: KafkaUnavailable, now: int) -> None:
        """No broker answered: fine for ``unavailable_timeout_ms``, then one clear error."""
        waited = self.cluster.down(now, str(exc))
        if waited >= self.opts["unavailable_timeout_ms"]:
            raise KafkaUnavailable(
                f"Kafka unreachable: no broker answered for {waited / 1000:.0f} s (unavailable_timeout_ms = "
                f"{self.opts['unavailable_timeout_ms']}); bootstrap servers: {self.opts['bootstrap']}; "
                f"last attempt: {exc}") from exc
        log.warning("kafka source: no broker answered (%s); retrying, %d s left before giving up", exc,
                    (self.opts["unavailable_timeout_ms"] - waited) // 1000)
