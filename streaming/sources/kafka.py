"""``kafka`` source: the live path. Raw Fetch of data partitions and ``__transaction_state``
(PySpark 4.2+ ``DataSourceStreamReader``), header-only decoding, Arrow rows of the event schema.

Options: ``bootstrap_servers`` (required), ``topics`` (JSON list) and/or ``topic_pattern``
(regex, re-evaluated every trigger), ``include_internal`` (let the pattern match internal topics
such as ``__consumer_offsets``), ``starting_offsets`` (``lso`` default, ``earliest``, ``latest`` or
JSON ``{"topic": {"0": offset}}``), ``max_offsets_per_trigger`` (per data partition; the
coordinator log is never throttled), ``fetch_max_bytes`` (per Fetch request), ``validate_crc``,
``cluster``, ``read_mode`` (``full`` default here; ``probe``: see below), ``probe_bytes`` (per
partition), ``broker_timeout_ms`` (default ``min(request_timeout_ms, 10000)``: all brokers are
asked at once and a broker that has not answered by then leaves its partitions *unavailable*
for that trigger, so one stalled broker does not hold up the others),
``probe_follow_after_ms``, ``client_id``, ``request_timeout_ms``, ``retries``, ``retry_backoff_ms``,
``empty_fetch_retries`` (default 4: how often an empty answer below the planned end is retried,
with a metadata refresh and doubling backoff, before the unread rest is left to the next plan),
``unread_ledger`` (set by ``pipeline.start_query``: the file through which ``foreachBatch`` tells
the next plan where reads stopped short, streaming/sources/kafka_unread.py),
``deletion_confirmations`` (default 3: agreeing Metadata answers before a partition counts as
deleted), ``metadata_max_age_ms`` (default 0 here, 30000 from ``txnwatch run``: how long topic
discovery reuses a Metadata answer, as a Kafka client's ``metadata.max.age.ms``; see KafkaWire), ``unavailable_timeout_ms`` (default 600000: how long no broker may answer before the
query fails with one error naming the bootstrap servers), ``ride_through_ms`` (default 0; ``run
--once`` sets it: how long planning waits for unavailable partitions to come back before
planning without them), and the kafka-python security settings of
:data:`streaming.sources.kafka_security.SECURITY_KEYS`. Secrets
(``sasl_plain_password``, ``ssl_password``) must be references (``env:NAME``, ``file:PATH``),
never the secret itself, because Spark prints data source options in query plans; they are
resolved (and the OAUTHBEARER token provider imported) in each process that connects.

Read modes (``read_mode``): ``full`` reads every byte of every watched data partition from its
starting offset. ``probe`` (what ``txnwatch run`` uses by default) reads only what is open, so a
trigger's cost grows with open transactions, not with bytes or partitions:

* every trigger, ListOffsets for all watched partitions (one request per leader broker and
  isolation level): a partition whose LSO equals its high watermark has nothing open and costs
  nothing more — not even a progress row unless its offsets changed (the driver keeps the last);
* where the LSO is below the high watermark and **moved** since the last probe, one Fetch at the
  LSO (multi-partition, per leader, ``probe_bytes`` each, on the driver): the first transactional
  data batch there opens the oldest open transaction (producer id, epoch, first offset, first
  write). The window ``[LSO, that batch]`` is read by the executors like any range, so the state
  sees it as full mode would;
* when the LSO moves past a probed transaction, an ``lso_passed`` row closes it in the state
  (the LSO is the first offset of the oldest open transaction; ``UnifiedLog.updateFirstUnstableOffset``
  pins it at the log start when retention deleted that offset, hence ``max(first, log start)``);
* once a partition's oldest open transaction is older than ``probe_follow_after_ms`` (``run``
  passes the smallest ``max_timeout_ms``: no coordinator keeps a transaction open longer), the
  partition is *followed*: read in full from that LSO on (``max_offsets_per_trigger`` applies),
  so the transactions stuck behind it are seen exactly as full mode sees them, until it is read
  through with nothing open. Without following, only the oldest open transaction of a partition
  is known (the others when the LSO reaches them);
* on a finding of a probed transaction the driver reads its span forwards
  (``BrokerEvidence.span_after``) and P's previous marker backwards (``last_marker_before``).

Why starting at the LSO is correct: every transaction that began before the LSO is closed by
definition (the LSO is the first offset of the oldest open transaction), so nothing before it can
hang, and start-up work no longer depends on how much log is retained. What it costs: the legacy
abort's coordinator epoch cannot come from a marker read before the LSO; ``earliest`` reads the
full history so the ``last-marker``/``log-start`` sources (detection.md §4) apply.
``__transaction_state`` is always read from its log start (compacted: one record per id).

Availability (per partition): a partition whose leader is unknown (Metadata leader -1,
LEADER_NOT_AVAILABLE), whose leader answers a leader/storage error (NOT_LEADER_OR_FOLLOWER,
REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED/UNKNOWN_LEADER_EPOCH) after a metadata refresh,
or whose leader does not answer, is *unavailable* for that plan: it is not read, its next offset
stays where reading stopped, and it is asked again with doubling backoff
(``retry_backoff_ms`` up to ``unavailable_backoff_max_ms``, default 60000) in later triggers.
Its read emits one ``gap`` row with reason ``unavailable: <error>`` and **no progress row**, so
nothing downstream treats it as read up to now. The same holds for a partition that becomes
unreadable after planning, or whose Fetch answers stay empty below the planned end (tiered
storage, a new leader catching up): offsets advance only over data read or proven gone
(OFFSET_OUT_OF_RANGE with a log start above them), the rest is read again from where reading
stopped by the next plan (streaming/sources/kafka_unread.py), and ``ride_through_ms`` rides
faults out within the same plan first (the enricher's view-completeness rule for
``__transaction_state``; no verdict and no LSO resolution for a data partition). Every other
partition is read and judged in the same micro-batch. Offsets carry
``"unavail": {"topic<TAB>partition": {"error", "since", "tries", "retry_at"}}``. Only when no
broker answers Metadata for ``unavailable_timeout_ms`` does planning raise.

Clock (detection.md §2): the driver's wall clock when it planned the micro-batch, carried by
every row as ``event_time``; it moves every trigger. A data partition planned short of its high
watermark (``max_offsets_per_trigger``) is *lagging*: every row of its read carries
``lagging = true``, and the driver publishes no new verdict on it until a read takes it through
the clock again (streaming/availability.py), because a transaction there may be closed by a
marker not read yet. One lagging partition therefore no longer stops verdicts elsewhere.
Coordinator partitions are read to their high watermark in every micro-batch; one whose read (or
whose replay rebuilt from its log start) has a gap or fails gets no progress row, so the
coordinator view is incomplete until it is read again, never "complete and empty".
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from streaming.availability import UNAVAILABLE_PREFIX, unavailable_reason
from streaming.events import spark_schema, to_arrow, to_frame
from streaming.normalize import gap_event, lso_passed_event, progress_event
from streaming.partition_read import (
    BatchPiece,
    CoordinatorReplay,
    Offsets,
    ReadContext,
    TxnPiece,
    data_partition_events,
    txn_partition_events,
)
from streaming.sources.kafka_security import check_source_options, kafka_python_kwargs
from streaming.sources.kafka_unread import LEDGER_OPTION, unread_since
from streaming.sources.kafka_wire import KafkaAuthorizationError, KafkaUnavailable, KafkaWire, KafkaWireError
from udfs.record_batch import BatchScan, empty_columns, scan_batches
from udfs.txn_log import decode_txn_log_segment

TXN_TOPIC = "__transaction_state"
# The error of every partition while no broker answers Metadata (gap reason "unavailable: ...").
NO_BROKER_ANSWERED = "no broker answered"
log = logging.getLogger(__name__)


def _options(options: dict[str, str]) -> dict[str, Any]:
    boot = options.get("bootstrap_servers")
    if not boot:
        raise ValueError("kafka source: option 'bootstrap_servers' is required")
    topics = json.loads(options.get("topics") or "[]")
    pattern = options.get("topic_pattern") or None
    if not topics and not pattern:
        raise ValueError("kafka source: give 'topics' (JSON list) or 'topic_pattern' (regex)")
    start = options.get("starting_offsets", "lso")
    if start not in ("lso", "earliest", "latest"):
        try:
            json.loads(start)
        except json.JSONDecodeError:
            raise ValueError(f"kafka source: starting_offsets must be lso, earliest, latest or JSON, got {start!r}") from None
    mopt = options.get("max_offsets_per_trigger")
    return {
        "bootstrap": boot,
        "topics": topics,
        "pattern": pattern,
        "include_internal": options.get("include_internal", "false").lower() == "true",
        "starting": start,
        "max_offsets": int(mopt) if mopt not in (None, "", "0", "None") else None,
        "fetch_max_bytes": int(options.get("fetch_max_bytes", str(4 << 20))),
        "validate_crc": options.get("validate_crc", "true").lower() != "false",
        "cluster": options.get("cluster", "default"),
        "client_id": options.get("client_id", "txnwatch"),
        "request_timeout_ms": int(options.get("request_timeout_ms", "30000")),
        "retries": int(options.get("retries", "8")),
        "retry_backoff_ms": int(options.get("retry_backoff_ms", "200")),
        "empty_fetch_retries": int(options.get("empty_fetch_retries", "4")),
        "deletion_confirmations": int(options.get("deletion_confirmations", "3")),
        "metadata_max_age_ms": int(options.get("metadata_max_age_ms", "0")),
        "unavailable_timeout_ms": int(options.get("unavailable_timeout_ms", "600000")),
        "unavailable_backoff_max_ms": int(options.get("unavailable_backoff_max_ms", "60000")),
        "ride_through_ms": int(options.get("ride_through_ms", "0")),
        "unread_ledger": options.get(LEDGER_OPTION) or None,
        # how long one broker may take to answer (all are asked at once): its partitions are
        # unavailable after that, the others keep their cadence (kafka_parallel.py)
        "broker_timeout_ms": int(options.get("broker_timeout_ms") or min(int(options.get("request_timeout_ms",
                                                                                         "30000")), 10000)),
        "groups_per_broker": max(1, int(options.get("groups_per_broker", "1"))),
        "read_mode": _read_mode(options.get("read_mode", "full"), start),
        "probe_bytes": int(options.get("probe_bytes", str(16 << 10))),
        "probe_follow_after_ms": int(options.get("probe_follow_after_ms", "900000")),
        # unresolved (references, dotted paths): picklable, resolved by _wire in each process
        "security": check_source_options(options),
    }


def _read_mode(mode: str, start: str) -> str:
    if mode not in ("probe", "full"):
        raise ValueError(f"kafka source: read_mode must be probe or full, got {mode!r}")
    if mode == "probe" and start != "lso":
        raise ValueError(f"kafka source: read_mode = probe always starts at the LSO (it reads only what is open); "
                         f"starting_offsets = {start!r} needs read_mode = full")
    return mode


_WIRES: dict[tuple, KafkaWire] = {}
_WIRES_LOCK = threading.Lock()


def _wire(opts: dict[str, Any]) -> KafkaWire:
    """One client per configuration per process (driver, or executor Python worker)."""
    key = (opts["bootstrap"], opts["client_id"], opts["request_timeout_ms"], opts["retries"],
           opts["retry_backoff_ms"], opts["deletion_confirmations"], opts["metadata_max_age_ms"],
           opts["broker_timeout_ms"], tuple(sorted(opts["security"].items())))
    with _WIRES_LOCK:
        w = _WIRES.get(key)
        if w is None:
            w = _WIRES[key] = KafkaWire(opts["bootstrap"], client_id=opts["client_id"],
                                        request_timeout_ms=opts["request_timeout_ms"], retries=opts["retries"],
                                        retry_backoff_ms=opts["retry_backoff_ms"],
                                        deletion_confirmations=opts["deletion_confirmations"],
                                        metadata_max_age_ms=opts["metadata_max_age_ms"],
                                        broker_timeout_ms=opts["broker_timeout_ms"],
                                        **kafka_python_kwargs(opts["security"]))
        return w


def close_wires() -> None:
    """Close every cached client of this process (query stop, tests)."""
    with _WIRES_LOCK:
        wires = list(_WIRES.values())
        _WIRES.clear()
    for w in wires:
        try:
            w.close()
        except Exception:  # closing is best effort
            pass


class KafkaPartition(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int, clock: int, from_log_start: bool,
                 reset: dict[str, Any] | None = None, unavailable: str | None = None,
                 offsets: tuple[int | None, int | None, int | None] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.clock = clock
        self.from_log_start = from_log_start
        self.reset = reset  # planned restart after the log went backwards (_plan_reset)
        self.unavailable = unavailable  # the error that made the partition unreadable at planning
        self.offsets = offsets  # (high watermark, LSO, log start) from the driver's ListOffsets
        self.lagging = False  # planned short of its high watermark (max_offsets_per_trigger)
        self.txn_partition_count: int | None = None  # __transaction_state's partitions (Metadata)
        self.read_from_zero: bool | None = None  # reading began at offset 0 and the log start is 0
        # probe mode: [producer id, new LSO] of transactions the LSO has passed since the last plan
        self.closes: list[list[int]] = []
        self.probe = False  # probe mode: a window after the LSO, not a continuation of earlier reads
        self.note: str | None = None  # probe mode: why the window holds no transaction (a gap row)


class KafkaGroup(InputPartition):
    """One Spark input partition: partitions led by one broker (or a share of them, see
    ``groups_per_broker``), read together with multi-partition Fetch requests."""

    def __init__(self, broker: int, parts: list[KafkaPartition]) -> None:
        self.broker = broker
        self.parts = parts


def _plan_reset(topic: str, partition: int, nxt: int, old_id: str | None, off: Any) -> dict[str, Any] | None:
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

    Returns None when the log continues, else ``{"restart", "from_log_start", "first", "last",
    "reason"}`` (``first``/``last`` = the offsets the gap row names).
    """
    new_id = off.topic_id
    if old_id and new_id and old_id != new_id:
        return {"restart": off.log_start, "from_log_start": True, "first": nxt, "last": None,
                "reason": f"topic {topic} was deleted and recreated (topic id {old_id} -> {new_id}); offsets from "
                          f"{nxt} of the old topic were not read; reading the new topic from its log start "
                          f"{off.log_start}"}
    hw = off.high_watermark
    if hw >= nxt:
        return None
    if old_id and old_id == new_id:
        restart = max(min(off.lso if off.lso >= 0 else hw, hw), off.log_start)
        return {"restart": restart, "from_log_start": None, "first": restart, "last": nxt - 1,
                "reason": f"{topic}-{partition} high watermark went back from {nxt} to {hw}: log truncated (unclean "
                          f"leader election?); offsets {hw}..{nxt - 1} as read before are gone and {restart}..{hw - 1} "
                          f"may differ; re-reading from the new LSO {restart}"}
    return {"restart": off.log_start, "from_log_start": True, "first": hw, "last": nxt - 1,
            "reason": f"{topic}-{partition} high watermark went back from {nxt} to {hw}, without topic ids to "
                      f"compare (broker < 2.8): truncated or recreated; offsets {hw}..{nxt - 1} as read before "
                      f"are gone; reading again from the log start {off.log_start} (events may repeat)"}


def _tp_key(topic: str, partition: int) -> str:
    return f"{topic}\t{partition}"


class KafkaStreamReader(DataSourceStreamReader):
    """Offsets: ``{"parts": {"topic<TAB>partition": [next offset, read from log start]},
    "clock": ms, "ids": {topic: topic id}, "resets": {"topic<TAB>partition": restart}}``.

    ``ids`` (Metadata v10+, absent for older brokers and older checkpoints) tell a recreated
    topic from the same one; ``resets`` name the partitions whose log went backwards since the
    previous plan (see :func:`_plan_reset`) and are read from the restart offset, not from the
    previous end.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.opts = _options(options)
        self._down_since: int | None = None  # wall ms of the first plan no broker answered
        self._probe_stalled: dict[str, str] = {}  # partitions whose leader did not answer the probe in time

    def _discover(self) -> list[tuple[str, int]]:
        w = _wire(self.opts)
        found = w.partitions(self.opts["topics"] or None, self.opts["pattern"], self.opts["include_internal"])
        if self.opts["topics"] and self.opts["pattern"]:
            found.update(w.partitions(self.opts["topics"], None, True))
        found.update(self._txn_partitions(w))
        return sorted((t, p) for t, ps in found.items() for p in ps)

    def _txn_partitions(self, w: KafkaWire) -> dict[str, list[int]]:
        """``__transaction_state``'s partitions, from a list of all topics: never from a Metadata
        request naming it. Brokers before 2.8 create a missing internal topic named in any
        Metadata request, whatever AllowAutoTopicCreation says (``KafkaApis.getTopicMetadata`` ->
        ``createInternalTopic``; KAFKA-9751 moved creation to the controller in 2.8), and an
        all-topics request never creates anything. A cluster without it has never had a
        transactional producer (the first InitProducerId with a transactional id creates it): the
        data partitions are watched all the same, and the next listing finds it once it exists."""
        listed = w.partitions(None, None, True)
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
        if not getattr(self, "_no_txn_topic_logged", False):
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

    def _initial_for(self, topic: str, partition: int, off: Any, explicit: dict) -> tuple[int, bool]:
        if topic == TXN_TOPIC:
            return off.log_start, True
        if str(partition) in explicit.get(topic, {}):
            o = int(explicit[topic][str(partition)])
            return max(o, off.log_start), o <= off.log_start
        mode = self.opts["starting"] if self.opts["starting"] in ("lso", "earliest", "latest") else "lso"
        if mode == "earliest":
            return off.log_start, True
        if mode == "latest":
            return off.high_watermark, off.high_watermark == off.log_start
        return off.lso, off.lso == off.log_start

    def _explicit(self) -> dict:
        return {} if self.opts["starting"] in ("lso", "earliest", "latest") else json.loads(self.opts["starting"])

    def initialOffset(self) -> dict:
        while True:
            now = int(time.time() * 1000)
            try:
                tps = self._discover()
                offs, down = _wire(self.opts).offsets_available(tps)
                break
            except KafkaUnavailable as exc:  # nothing to return yet: wait, up to the timeout
                self._cluster_down(exc, now)
                time.sleep(min(self.opts["retry_backoff_ms"] * 8, 5000) / 1000)
        self._down_since = None
        explicit = self._explicit()
        parts = {}
        for t, p in tps:
            o = offs.get((t, p))
            if o is None or o.deleted:
                continue
            parts[_tp_key(t, p)] = list(self._initial_for(t, p, o, explicit))
        unavail = {_tp_key(*tp): self._still_down(None, err, now) for tp, err in down.items()}
        return {"parts": parts, "clock": -1, "unavail": unavail}

    def _still_down(self, prev: dict[str, Any] | None, error: str, now: int) -> dict[str, Any]:
        """Availability bookkeeping of a partition that could not be read this plan."""
        tries = (prev or {}).get("tries", 0) + 1
        backoff = min(self.opts["retry_backoff_ms"] * 2 ** (tries - 1), self.opts["unavailable_backoff_max_ms"])
        return {"error": error, "since": (prev or {}).get("since", now), "tries": tries, "retry_at": now + backoff}

    def _cluster_down(self, exc: KafkaUnavailable, now: int) -> None:
        """No broker answered: fine for ``unavailable_timeout_ms``, then one clear error."""
        if self._down_since is None:
            self._down_since = now
        waited = now - self._down_since
        if waited >= self.opts["unavailable_timeout_ms"]:
            raise KafkaUnavailable(
                f"Kafka unreachable: no broker answered for {waited / 1000:.0f} s (unavailable_timeout_ms = "
                f"{self.opts['unavailable_timeout_ms']}); bootstrap servers: {self.opts['bootstrap']}; "
                f"last attempt: {exc}") from exc
        log.warning("kafka source: no broker answered (%s); retrying, %d s left before giving up", exc,
                    (self.opts["unavailable_timeout_ms"] - waited) // 1000)

    def _all_unavailable(self, start: dict, now: int) -> dict:
        """The plan while no broker answers: every partition known so far is unavailable (its gap
        row, no progress row, no read), so the job's availability records, progress line and
        metrics show the outage instead of running no micro-batch at all. Offsets, the clock and
        what earlier plans carried (ids, deleted topics, unread rest, probe memo) stay as they were;
        nothing of the previous plan's one-off work (resets, rereads, drops, probe reads) repeats.
        Every partition is asked again at the next trigger: the whole cluster is asked anyway."""
        was_down = start.get("unavail", {})
        unavail = {k: {**self._still_down(was_down.get(k), NO_BROKER_ANSWERED, now), "retry_at": now}
                   for k in sorted(set(start["parts"]) | set(was_down))}
        carried = ("parts", "clock", "ids", "gone", "behind", "unread_seen", "seen", "txn_n", "probe")
        return {**{k: start[k] for k in carried if k in start}, "planned": now, "unavail": unavail}

    def _ride_through(self, offs: dict, down: dict) -> None:
        """``run --once``: wait (bounded by ``ride_through_ms``) for unavailable partitions to
        come back, so a short leader election does not leave a partition unread."""
        budget = self.opts["ride_through_ms"]
        deadline = time.monotonic() + budget / 1000
        delay = self.opts["retry_backoff_ms"] / 1000
        w = _wire(self.opts)
        while down and budget and time.monotonic() < deadline:
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 5.0)
            more, still = w.offsets_available(list(down))
            offs.update(more)
            down.clear()
            down.update(still)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        start = start or self.initialOffset()
        now = int(time.time() * 1000)
        parts = {k: list(v) for k, v in start["parts"].items()}
        known_ids = start.get("ids", {})  # topic ids as of the previous plan (Metadata v10+)
        ids = dict(known_ids)
        was_down = start.get("unavail", {})
        try:
            tps = self._discover()
            # partitions still in their backoff are not asked this trigger
            ask = [tp for tp in tps if was_down.get(_tp_key(*tp), {}).get("retry_at", 0) <= now]
            offs, down = self._offsets_settled(ask, parts, known_ids)
        except KafkaUnavailable as exc:
            self._cluster_down(exc, now)
            return self._all_unavailable(start, now)
        self._down_since = None
        if down:
            self._ride_through(offs, down)
        gone = dict(start.get("gone", {}))  # topic -> its id when it was dropped as deleted
        dropped = self._drop_deleted(tps, offs, parts, known_ids, gone)
        unavail: dict[str, dict[str, Any]] = {}
        for tp in tps:
            k = _tp_key(*tp)
            if tp in down:
                unavail[k] = self._still_down(was_down.get(k), down[tp], now)
            elif k in was_down and tp not in offs:
                unavail[k] = was_down[k]  # in backoff: not asked
        # where earlier reads stopped short (kafka_unread.py): read again from there
        behind = dict(start.get("behind", {}))
        fresh, unread_seen = unread_since(self.opts["unread_ledger"], start.get("unread_seen", -1))
        for k, off in fresh.items():
            behind[k] = min(off, behind.get(k, off))
        rereads: dict[str, int] = {}  # partitions whose read starts before their previous end
        probe_memo = dict(start.get("probe", {}))
        resets: dict[str, dict[str, Any]] = {}
        starts: dict[str, int] = {}  # partitions first planned now: where their reading begins
        seen: dict[str, list] = {}  # [high watermark, LSO, log start, leader] as planned
        lagging: list[str] = []  # data partitions planned short of their high watermark
        explicit = self._explicit()
        probe = self.opts["read_mode"] == "probe"
        probe_todo: list[tuple[str, int, str, Any]] = []
        for t, p in tps:
            o = offs.get((t, p))
            if o is None or o.deleted:
                continue
            k = _tp_key(t, p)
            if k not in parts and k in was_down:  # unavailable since the query started
                parts[k] = list(self._initial_for(t, p, o, explicit))
                starts[k] = parts[k][0]
            elif k not in parts:  # a new partition (pattern match or partition added): all of it is new
                parts[k] = [o.log_start, True]
                starts[k] = o.log_start
                if t in gone:  # a topic dropped as deleted is back: a new topic, from its log start
                    resets[k] = {"restart": o.log_start, "from_log_start": True, "first": None, "last": None,
                                 "reason": f"topic {t} was deleted and created again (topic id {gone[t] or 'unknown'}"
                                           f" -> {o.topic_id or 'unknown'}): {t}-{p} is a new partition, read "
                                           f"from its log start {o.log_start}; nothing of the old topic carries "
                                           f"over"}
            else:
                reset = _plan_reset(t, p, parts[k][0], known_ids.get(t), o)
                if reset is not None:
                    resets[k] = reset
                    flag = parts[k][1] if reset["from_log_start"] is None else reset["from_log_start"]
                    parts[k] = [reset["restart"], flag]
            if k in behind:
                self._carry_unread(k, t, behind.pop(k), parts, resets, rereads, probe_memo)
            if o.topic_id:
                ids[t] = o.topic_id
            seen[k] = [o.high_watermark, o.lso if o.lso >= 0 else None, o.log_start if o.log_start >= 0 else None,
                       o.leader]
            if probe and t != TXN_TOPIC:
                probe_todo.append((t, p, k, o))
                continue
            nxt = parts[k][0]
            end = o.high_watermark
            if self.opts["max_offsets"] and t != TXN_TOPIC and end - nxt > self.opts["max_offsets"]:
                end = nxt + self.opts["max_offsets"]
                lagging.append(k)
            parts[k] = [max(end, nxt), parts[k][1]]
        # per-partition clock: the clock always moves; rows of a lagging partition say so (and
        # the driver holds new verdicts on it back until it is read through the clock again)
        clock = max(start.get("clock", -1), now)
        for k in resets:
            gone.pop(k.split("\t")[0], None)
        out = {"parts": parts, "clock": clock, "planned": now, "ids": ids, "resets": resets, "unavail": unavail,
               "dropped": dropped, "gone": gone,
               "starts": starts, "seen": seen, "behind": behind, "rereads": rereads, "unread_seen": unread_seen,
               "lagging": lagging, "txn_n": sum(1 for t, _ in tps if t == TXN_TOPIC)}
        if probe:
            self._probe_stalled = {}
            out.update(self._probe_plan({**start, "probe": probe_memo}, probe_todo, parts, seen, resets, was_down,
                                        {_tp_key(*tp) for tp in tps}, lagging, now))
            for k, error in self._probe_stalled.items():  # not read this trigger: the availability records
                unavail[k] = self._still_down(was_down.get(k), error, now)
        return out

    def _carry_unread(self, k: str, topic: str, off: int, parts: dict[str, list], resets: dict[str, Any],
                      rereads: dict[str, int], probe_memo: dict[str, Any]) -> None:
        """Plan partition ``k`` to be read again from ``off``, where an earlier read stopped.

        Full reads (and ``__transaction_state``) start there (``rereads``); in probe mode a
        followed partition follows from there, and an unread probe window is probed again at the
        LSO (the transaction it held is found again if still open; an LSO that moved on closed
        it). A log that went backwards (``resets``) is read again from its restart anyway."""
        if k in resets or k not in parts:
            return
        if self.opts["read_mode"] == "probe" and topic != TXN_TOPIC:
            m = probe_memo.get(k)
            if m is not None and m.get("follow") is not None:
                probe_memo[k] = {**m, "follow": min(m["follow"], off)}
            elif m is not None and (m.get("end") is None or off < m["end"]):
                del probe_memo[k]
            return
        if off < parts[k][0]:
            rereads[k] = off

    def _drop_deleted(self, tps: list[tuple[str, int]], offs: dict, parts: dict[str, list],
                      known_ids: dict[str, str], gone: dict[str, str | None]) -> dict[str, str]:
        """Partitions planned before whose topic the brokers now confirm deleted: removed from
        ``parts`` (never planned again) and returned as ``{key: reason}`` for one ``unavailable``
        gap row each; ``gone`` remembers the topic (and its id) so that a topic created again
        under the name is reported as new (see latestOffset).

        A partition counts as deleted only when ``deletion_confirmations`` Metadata answers in a
        row, asked fresh with backoff, all lack it (KafkaWire._confirmed_gone; one broker's cache
        may lag, ``KafkaApis.handleTopicMetadataRequest`` answers from it): a partition missing
        from discovery is asked once through ListOffsets, which does that confirmation.
        """
        listed = set(tps)
        vanished = []
        for k in parts:
            t, p = k.split("\t")
            if (t, int(p)) not in listed:
                vanished.append((t, int(p)))
        confirmed = dict(offs)
        if vanished:
            more, _ = _wire(self.opts).offsets_available(vanished)
            confirmed.update(more)
        dropped: dict[str, str] = {}
        for tp, o in confirmed.items():
            k = _tp_key(*tp)
            if not o.deleted or k not in parts:
                continue
            nxt = parts.pop(k)[0]
            gone[tp[0]] = known_ids.get(tp[0])
            dropped[k] = (f"{tp[0]}-{tp[1]} was deleted: {self.opts['deletion_confirmations']} fresh Metadata answers "
                          f"in a row lack it (UNKNOWN_TOPIC_OR_PARTITION); read up to offset {nxt}, no longer planned")
            log.warning("kafka source: %s", dropped[k])
        return dropped

    def _probe_plan(self, start: dict, todo: list[tuple[str, int, str, Any]], parts: dict[str, list],
                    seen: dict[str, list], resets: dict[str, Any], was_down: dict[str, Any],
                    known: set[str], lagging: list[str], now: int) -> dict[str, Any]:
        """Probe mode: what to read of each data partition this trigger (see the module docstring).

        Offsets gain ``probe`` (per partition: the LSO last probed, the end of the window read
        there, the producer id, first offset and first timestamp of the transaction found at it,
        and ``follow``, the next offset while the partition is followed), ``reads`` (``[start,
        end, window?, note?]`` ranges to read now), ``closes`` (``[producer id, new LSO]`` of probed
        transactions the LSO has passed) and ``emit`` (partitions whose progress row is due: their
        offsets changed, or they are read, closed, reset or back from an outage).
        """
        prev = start.get("probe", {})
        prev_seen = start.get("seen", {})
        memo = {k: m for k, m in prev.items() if k in known}  # unavailable ones keep theirs
        reads: dict[str, list[Any]] = {}
        closes: dict[str, list[list[int]]] = {}
        emit: list[str] = []
        need: list[tuple[str, int, str, int, int]] = []  # (topic, partition, key, LSO, high watermark)
        follow_after = self.opts["probe_follow_after_ms"]
        cap = self.opts["max_offsets"]

        def follow(k: str, lo: int, hw: int, window: bool) -> None:
            hi = min(hw, lo + cap) if cap else hw
            if hi < hw:
                lagging.append(k)
            reads[k] = [lo, hi, window]
            parts[k] = [hi, False]
            memo[k] = {**memo.get(k, {}), "follow": hi}

        for t, p, k, o in todo:
            hw, ls = o.high_watermark, max(o.log_start, 0)
            # LSO unknown (-1: a ListOffsets v0/v1 broker, < 0.11, which has no transactions)
            lso = o.lso if 0 <= o.lso <= hw else hw
            m = memo.pop(k, None)
            if prev_seen.get(k) != seen.get(k) or k in was_down or k in resets:
                emit.append(k)
            if m is not None and m.get("pid") is not None and lso != m["lso"] and lso > max(m["first"], ls):
                # The LSO is the first offset of the oldest open transaction (pinned at the log
                # start when retention deleted it: UnifiedLog.updateFirstUnstableOffset), so an
                # LSO above it proves the probed transaction is no longer open. (A followed
                # partition's reads also give its marker; the state ignores whichever comes second.)
                closes[k] = [[int(m["pid"]), int(lso)]]
                m = {**m, "pid": None}  # closed once
            if m is not None and k in resets:
                m = None  # the log went backwards: start again from its LSO
            if m is not None and m.get("follow") is not None:
                if lso >= hw and m["follow"] >= hw:
                    parts[k] = [hw, False]  # read through, nothing open: back to probing
                else:
                    memo[k] = m
                    follow(k, max(m["follow"], ls), hw, False)
                continue
            if lso >= hw:
                parts[k] = [hw, False]  # nothing open: nothing to read
            elif m is not None and m["lso"] == lso and m.get("end") is not None:
                memo[k] = m  # the same oldest open transaction as last time: nothing to fetch
                if m.get("first_ts") is not None and now - m["first_ts"] >= follow_after:
                    follow(k, lso, hw, True)
            else:
                need.append((t, p, k, lso, hw))
        for (_t, _p, k, lso, hw), found in zip(need, self._probe_fetch([(t, p, lso) for t, p, _, lso, _ in need]),
                                               strict=True):
            if found is None:  # no answer now: probed again next trigger
                memo[k] = {"lso": lso, "end": None, "pid": None, "first": None, "first_ts": None}
                continue
            end, pid, first, first_ts, note = found
            memo[k] = {"lso": lso, "end": end, "pid": pid, "first": first, "first_ts": first_ts}
            if first_ts is not None and now - first_ts >= follow_after:
                # old enough to become a finding: read everything from the LSO from now on, so
                # every transaction open behind it is seen too (as the full read mode sees it)
                follow(k, lso, hw, True)
            else:
                reads[k] = [lso, end, True] + ([note] if note else [])
                parts[k] = [end, False]
        for k in list(reads) + list(closes):
            if k not in emit:
                emit.append(k)
        return {"probe": memo, "reads": reads, "closes": closes, "emit": emit}

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
                    self._probe_stalled.pop(_tp_key(items[i][0], items[i][1]), None)
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
        w = _wire(self.opts)
        size = self.opts["probe_bytes"]
        # probe_bytes bounds each partition; one request per leader carries all of its partitions
        answers = w.fetch_many(items, size, partition_max_bytes=size)
        out: list[tuple[Any, ...] | None] = []
        for t, p, lso in items:
            res = answers.get((t, p))
            if res is None and w.stalled(t, p):
                self._probe_stalled[_tp_key(t, p)] = (f"leader of {t}-{p} did not answer a probe within "
                                                      f"{self.opts['broker_timeout_ms']} ms (broker_timeout_ms)")
                out.append(None)
                continue
            data = res.records if res is not None else None
            budget = size
            while not _whole_batch(data) and budget < self.opts["fetch_max_bytes"]:
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
                out.append(None)
                continue
            scan = scan_batches(data, validate_crc=False, source=f"{t}-{p}", allow_partial_tail=True)
            cols = scan.columns
            opening = np.flatnonzero((cols["last_offset"] >= lso) & cols["is_transactional"] & ~cols["is_control"])
            if len(opening):
                i = int(opening[0])
                # first write: baseTimestamp, or maxTimestamp for LogAppendTime (detection.md §1)
                out.append((int(cols["last_offset"][i]) + 1, int(cols["producer_id"][i]), int(cols["base_offset"][i]),
                            int(cols["first_timestamp"][i]), None))
            elif scan.errors:
                out.append((lso + 1, None, None, None, None))  # the read of the LSO's batch reports the error
            else:
                out.append((lso + 1, None, None, None,
                            f"probe: {t}-{p} has LSO {lso} below its high watermark {res.high_watermark} but no "
                            f"transactional batch follows it in {len(data)} bytes; the transaction holding the LSO "
                            f"is not identified (read_mode = full reads it)"))
        return out

    def _offsets_settled(self, tps: list[tuple[str, int]], parts: dict[str, list],
                         ids: dict[str, str]) -> tuple[dict, dict]:
        """Offsets of ``tps``; where a high watermark is below what was already read (and the
        topic id does not already prove a new topic) it is asked again, with backoff, up to
        ``empty_fetch_retries`` times: a new leader reports a lower high watermark until its
        followers' fetches tell it the old one (seconds at most), a truncated log stays lower."""
        w = _wire(self.opts)
        offs, down = w.offsets_available(tps)
        for attempt in range(1, self.opts["empty_fetch_retries"] + 1):
            behind = [tp for tp, o in offs.items() if not o.deleted and _tp_key(*tp) in parts
                      and o.high_watermark < parts[_tp_key(*tp)][0]
                      and not (ids.get(tp[0]) and o.topic_id and ids[tp[0]] != o.topic_id)]
            if not behind:
                break
            time.sleep(min(self.opts["retry_backoff_ms"] * 2 ** (attempt - 1), 5000) / 1000)
            more, still = w.offsets_available(behind)
            offs.update(more)
            down.update(still)
            for tp in still:
                offs.pop(tp, None)
        return offs, down

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One input partition per leader broker (at most ``groups_per_broker`` per broker)."""
        by_broker: dict[int, list[KafkaPartition]] = {}
        seen = end.get("seen", {})
        lagging = set(end.get("lagging", []))
        for part in self._planned(start, end):
            k = _tp_key(part.topic, part.partition)
            part.lagging = k in lagging
            part.txn_partition_count = end.get("txn_n") if part.topic == TXN_TOPIC else None
            facts = seen.get(k)
            if facts is not None and part.unavailable is None:
                part.offsets = tuple(facts[:3])
                # WAVE2 contract A: began at offset 0 with nothing ever deleted (log start still 0)
                part.read_from_zero = bool(part.from_log_start) and facts[2] == 0
            by_broker.setdefault(facts[3] if facts is not None else -1, []).append(part)
        n = self.opts["groups_per_broker"]
        return [KafkaGroup(b, parts[i::n]) for b, parts in sorted(by_broker.items()) for i in range(min(n, len(parts)))]

    def _planned(self, start: dict, end: dict) -> list[KafkaPartition]:
        out = []
        clock = max(end.get("clock", -1), 0)
        resets = end.get("resets", {})
        unavail = end.get("unavail", {})
        probe = "probe" in end
        reads, closes, emit = end.get("reads", {}), end.get("closes", {}), set(end.get("emit", []))
        for k, (e, from_start) in end["parts"].items():
            t, p = k.split("\t")
            s = start.get("parts", {}).get(k)
            s_off = s[0] if s else end.get("starts", {}).get(k, e)
            if k in unavail:  # not read this trigger: only its gap row, no progress row
                out.append(KafkaPartition(t, int(p), s_off, s_off, clock, bool(from_start),
                                          unavailable=unavail[k]["error"]))
                continue
            reset = resets.get(k)
            if probe and t != TXN_TOPIC:
                if k not in reads and k not in emit and k not in closes and reset is None:
                    continue  # nothing changed there: no row at all (the driver keeps its last facts)
                lo, hi, window, *note = reads[k] if k in reads else (e, e, False)
                part = KafkaPartition(t, int(p), lo, hi, clock, False, reset)
                part.probe, part.closes, part.note = window, closes.get(k, []), (note or [None])[0]
                out.append(part)
                continue
            if reset is not None:  # the log went backwards: resume where latestOffset decided
                s_off = reset["restart"]
            elif k in end.get("rereads", {}):  # an earlier read stopped there (kafka_unread.py)
                s_off = min(s_off, end["rereads"][k])
            # Every partition emits its progress row every micro-batch (high watermark, LSO, log
            # start, for timers and enrichment); one with nothing new is not fetched for it.
            out.append(KafkaPartition(t, int(p), s_off, e, clock, bool(from_start), reset))
        for k, down in unavail.items():
            if k not in end["parts"]:  # unavailable since the query started: no offsets yet
                t, p = k.split("\t")
                out.append(KafkaPartition(t, int(p), -1, -1, clock, False, unavailable=down["error"]))
        for k, reason in end.get("dropped", {}).items():  # deleted: one last row saying so
            t, p = k.split("\t")
            out.append(KafkaPartition(t, int(p), -1, -1, clock, False, unavailable=reason))
        return out

    def read(self, partition: KafkaGroup) -> Iterator[Any]:
        df = read_partition(partition, self.opts)
        if len(df):
            yield to_arrow(df)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        close_wires()


# Per-process memo for coordinator partitions: transactional id → producer id and the highest
# leader epoch, up to an offset, so tombstones reach the producer id they concern.
_TXN_MEMO: dict[tuple, tuple[int, CoordinatorReplay]] = {}


class _RangeRead:
    """One partition's planned range [start, end), read by one or more Fetch answers.

    Offsets advance only over data read or proven gone (issue 20 item 1). Every offset of the
    range is read, or proven gone by the broker (OFFSET_OUT_OF_RANGE with a log start above it: a
    gap row naming both offsets), or **not read yet**: when the leader is lost after planning, or
    an answer holds no records below the planned end (tiered storage's ``DelayedRemoteFetch``
    expiring, a new leader whose high watermark still lags), the read is retried with a metadata
    refresh and doubling backoff (``empty_fetch_retries`` times, and on for as long as
    ``ride_through_ms`` lasts: ``run --once``); then the rest ``[offset, end)`` becomes one
    ``unavailable:`` gap row whose ``first_offset`` is where reading stopped, the partition gets
    no progress row, and the next plan reads it again from there (streaming/sources/kafka_unread.py).
    A batch larger than the fetch size is fetched again with room for it.
    ``reset`` (from planning, see :func:`_plan_reset`) is a gap to report before reading.
    ``last`` is the last Fetch answer; ``unavailable`` is set when the rest was not read (then no
    progress row may be emitted for it).
    """

    def __init__(self, opts: dict[str, Any], topic: str, partition: int, start: int, end: int,
                 common: dict[str, Any], reset: dict[str, Any] | None = None) -> None:
        self.opts, self.topic, self.partition, self.end, self.common = opts, topic, partition, end, common
        self.scans: list[BatchScan] = []
        self.raws: list[bytes] = []
        self.gaps: list[dict[str, Any]] = []
        self.last: Any = None
        self.offset = start
        self.empty_answers = 0
        self.unavailable = False
        self.max_bytes = opts["fetch_max_bytes"]
        self.deadline = time.monotonic() + opts.get("ride_through_ms", 0) / 1000
        self.retries = 0  # retries after the first failure to read the rest (ride-through)
        self.done = start >= end
        if reset is not None:
            self._gap(reset["reason"], reset["first"], reset["last"])

    def _gap(self, reason: str, first: int | None, last: int | None = None, crc: bool = False) -> None:
        g = gap_event(reason, topic=self.topic, partition=self.partition, first_offset=first,
                      last_offset=last, **self.common)
        if crc:
            g["crc_failed"] = True  # never believed (RecordBatch.ensureValid): the enrichment weighs it
        self.gaps.append(g)

    def fetch_alone(self, w: KafkaWire) -> None:
        """One single-partition Fetch (KafkaWire.fetch: every fault handled, bounded retries)."""
        try:
            res = w.fetch(self.topic, self.partition, self.offset, self.max_bytes)
        except KafkaUnavailable as exc:
            # became unreadable after planning and stayed so through the bounded retries
            self.not_read(w, unavailable_reason(exc.last_error or str(exc)))
            return
        self.take(w, res)

    def not_read(self, w: KafkaWire, why: str) -> None:
        """The rest ``[offset, end)`` could not be read now: ride through while ``ride_through_ms``
        lasts (backoff, metadata refresh, read again), else hand it to the next plan."""
        if time.monotonic() < self.deadline:
            self.retries += 1
            if self.retries == 1:
                log.warning("kafka source: %s-%s: offsets %d..%d not read (%s); retrying for up to %.0f s",
                            self.topic, self.partition, self.offset, self.end - 1, why,
                            max(self.deadline - time.monotonic(), 0))
            time.sleep(min(self.opts["retry_backoff_ms"] * 2 ** min(self.retries - 1, 10), 5000,
                           max(self.deadline - time.monotonic(), 0) * 1000) / 1000)
            try:
                w.refresh_metadata([self.topic])
            except KafkaWireError:
                pass  # the next fetch reports it
            return
        self.became_unavailable(why)

    def became_unavailable(self, error: str) -> None:
        """The rest ``[offset, end)`` cannot be read now: one ``unavailable:`` gap row from where
        reading stopped (the next plan reads it again from there: kafka_unread.py), no progress row."""
        why = error if error.startswith(UNAVAILABLE_PREFIX) else unavailable_reason(error)
        log.warning("kafka source: %s-%s: offsets %d..%d not read (%s); read again from offset %d next trigger",
                    self.topic, self.partition, self.offset, self.end - 1, why[len(UNAVAILABLE_PREFIX):],
                    self.offset)
        self._gap(f"{why}; offsets {self.offset}..{self.end - 1} not read yet: read again from offset "
                  f"{self.offset} next trigger", self.offset, self.end - 1)
        self.unavailable = self.done = True

    def take(self, w: KafkaWire, res: Any) -> None:
        """Fold one Fetch answer for this partition (at ``self.offset``) into the read."""
        opts, topic, partition, offset, end = self.opts, self.topic, self.partition, self.offset, self.end
        self.last = res
        if res.deleted:
            self._gap(f"{topic}-{partition} was deleted; stopped reading it at offset {offset}", offset, end - 1)
            self.done = True
            return
        if res.out_of_range:
            ls = res.log_start_offset
            if ls is None or ls < 0 or ls <= offset:
                # not proven gone: past this leader's log end (LocalLog.read), a leader behind
                self.not_read(w, f"OFFSET_OUT_OF_RANGE at offset {offset} with log start {ls} at or below it "
                                  "(the leader's log ends before it)")
                return
            self._gap(f"retention deleted offsets {offset}..{ls - 1} before they were read; continuing at the log "
                      f"start {ls}", offset, ls - 1)
            self.offset = ls
            self.done = ls >= end
            return
        data = res.records or b""
        if not data:
            if self.empty_answers < opts["empty_fetch_retries"]:
                self.empty_answers += 1
                _wait_for_high_watermark(w, opts, topic, self.empty_answers)
                return
            self.not_read(w, f"no records at offset {offset} after {self.empty_answers + 1} fetches (high watermark "
                              f"{res.high_watermark}, planned end {end}: a new leader not caught up, or a tiered-"
                              f"storage read that timed out)")
            return
        self.empty_answers = 0
        scan = scan_batches(data, validate_crc=opts["validate_crc"], source=f"{topic}-{partition}",
                            allow_partial_tail=True)
        cols = scan.columns
        keep = (cols["last_offset"] >= offset) & (cols["base_offset"] < end)
        n_keep = int(keep.sum())
        chain_broken = any(not e.reason.startswith("CRC-32C") and not e.reason.startswith("control record")
                           for e in scan.errors)
        for e in scan.errors:
            self._gap(f"{e.reason} (fetch at offset {offset})", e.base_offset if e.base_offset is not None else offset,
                      crc=e.crc)
        if n_keep:
            self.scans.append(BatchScan(columns={k: v[keep] for k, v in cols.items()}))
            self.raws.append(data)
            self.offset = int(cols["last_offset"][keep].max()) + 1
        # magic 0/1 entries (pre-0.11 message format) cannot be transactional: step over them by
        # their offsets, so that a fetch holding only legacy entries (one response never spans
        # two segments) moves the read on instead of ending it
        legacy_next = scan.legacy_last_offset + 1 if scan.legacy_last_offset is not None else None
        stepped = legacy_next is not None and legacy_next > self.offset
        if stepped:
            self.offset = legacy_next
        if chain_broken:
            # The batch chain is unreadable past this point: skip to the planned end, loudly.
            self._gap(f"unreadable bytes: offsets {self.offset}..{end - 1} skipped", self.offset, end - 1)
            self.done = True
        elif (not n_keep and not stepped and not scan.errors and not _whole_batch(data)
              and self.max_bytes < _MAX_FETCH_BYTES):
            # only part of a batch fits the fetch size (pre-KIP-74 brokers, partition limits):
            # ask again with room for it, never skip it
            need = 12 + int.from_bytes(data[8:12], "big", signed=True) if len(data) >= 12 else 2 * self.max_bytes
            self.max_bytes = min(max(2 * self.max_bytes, need), _MAX_FETCH_BYTES)
        elif not n_keep and not stepped:
            if not (len(cols["last_offset"]) and int(cols["base_offset"].min()) >= end):
                self._gap(f"no whole readable batch at offset {offset} in {len(data)} bytes; offsets "
                          f"{offset}..{end - 1} not read", offset, end - 1)
            self.done = True  # (or the next batch starts at or past the planned end: nothing between)
        else:
            self.done = self.offset >= end


def _read_ranges(w: KafkaWire, reads: list[_RangeRead]) -> None:
    """Read every range to its end: one multi-partition Fetch per round for all ranges still
    open (KafkaWire.fetch_many, one request per leader); a partition whose answer was not a
    plain success is fetched alone, with the full fault handling of KafkaWire.fetch."""
    starved: list[_RangeRead] = []
    while True:
        todo = [r for r in reads if not r.done]
        if not todo:
            return
        # partitions the last round's byte budget did not reach go first (KIP-74 guarantees the
        # first partition of a response one whole batch, the others only what is left)
        todo.sort(key=lambda r: r not in starved)
        answers = w.fetch_many([(r.topic, r.partition, r.offset) for r in todo], todo[0].opts["fetch_max_bytes"])
        starved, moved = [], False
        for r in todo:
            res = answers.get((r.topic, r.partition))
            if res is None and w.stalled(r.topic, r.partition):
                # its leader did not answer within broker_timeout_ms: unavailable now rather
                # than holding up this micro-batch (and so every other broker's partitions)
                r.not_read(w, f"leader of {r.topic}-{r.partition} did not answer within "
                              f"{r.opts['broker_timeout_ms']} ms (broker_timeout_ms)")
                moved = True
            elif res is None:
                r.fetch_alone(w)
                moved = True
            elif not _whole_batch(res.records) and res.high_watermark > r.offset:
                starved.append(r)  # cut by the request's max_bytes, not an empty log: next round
            else:
                r.take(w, res)
                moved = True
        if not moved:
            for r in starved:
                r.fetch_alone(w)
            starved = []


_MAX_FETCH_BYTES = 1 << 30  # a fetch size growing to fit one batch stops here (message.max.bytes is far below)


def _whole_batch(records: bytes | None) -> bool:
    """Whether a Fetch answer holds at least one whole batch (12-byte log overhead + batchLength)."""
    if not records or len(records) < 12:
        return False
    return len(records) >= 12 + int.from_bytes(records[8:12], "big", signed=True)


def _fetch_range(w: KafkaWire, opts: dict[str, Any], topic: str, partition: int, start: int, end: int,
                 common: dict[str, Any], reset: dict[str, Any] | None = None) -> _RangeRead:
    """Fetch [start, end) of one partition (see :class:`_RangeRead`)."""
    r = _RangeRead(opts, topic, partition, start, end, common, reset)
    _read_ranges(w, [r])
    return r


def _wait_for_high_watermark(w: KafkaWire, opts: dict[str, Any], topic: str, attempt: int) -> None:
    """Back off (doubling, at most 5 s), then refresh metadata: leadership may have moved again."""
    time.sleep(min(opts["retry_backoff_ms"] * 2 ** (attempt - 1), 5000) / 1000)
    try:
        w.refresh_metadata([topic])
    except KafkaUnavailable:
        pass  # the next fetch reports it


def read_partition(part: KafkaPartition | KafkaGroup, opts: dict[str, Any]) -> pd.DataFrame:
    """Executor side: events of one planned read (a partition, or a broker's group), each
    partition ending with its progress row (none when it was or became unavailable)."""
    return read_group(part.parts if isinstance(part, KafkaGroup) else [part], opts)


def read_group(parts: list[KafkaPartition], opts: dict[str, Any]) -> pd.DataFrame:
    """Executor side: events of one Spark input partition (the partitions of one leader broker).

    Unavailable partitions give their gap row; partitions with nothing new give their progress
    row from the driver's ListOffsets without any Fetch; the rest are read together with
    multi-partition Fetch requests.
    """
    w = _wire(opts)
    frames: list[pd.DataFrame] = []
    rows: list[dict[str, Any]] = []  # single-row results (gaps of unavailable partitions, idle progress)
    reads: list[tuple[KafkaPartition, _RangeRead, Any, str | None]] = []
    for part in parts:
        common = dict(source="kafka", cluster=opts["cluster"], event_time_ms=part.clock)
        t, p = part.topic, part.partition
        if part.unavailable is not None:
            rows.append(gap_event(unavailable_reason(part.unavailable), topic=t, partition=p,
                                  first_offset=part.start if part.start >= 0 else None, **common))
            continue
        if part.closes:
            rows += [lso_passed_event(topic=t, partition=p, producer_id=pid, lso=lso, **common)
                     for pid, lso in part.closes]
        if part.note:
            rows.append(gap_event(part.note, topic=t, partition=p, first_offset=part.start, **common))
        acc = broken = None
        if t == TXN_TOPIC:
            acc, broken, unreadable = _txn_replay(w, opts, part, common)
            if unreadable:  # issue 20 item 8: nothing of it is believed now; read again next plan
                rows.append(gap_event(broken, topic=t, partition=p, first_offset=part.start,
                                      last_offset=part.end - 1 if part.end > part.start else None, **common))
                continue
            if broken is not None:
                rows.append(gap_event(broken, topic=t, partition=p, first_offset=part.start, **common))
        if part.start >= part.end and part.reset is None and part.offsets is not None:
            if broken is None:  # an incomplete coordinator replay is not read up to now: no progress
                rows.append(_idle_progress(part, common, acc))
            continue
        reads.append((part, _RangeRead(opts, t, p, part.start, part.end, common, part.reset), acc, broken))
    _read_ranges(w, [r for _, r, _, _ in reads])
    for part, r, acc, broken in reads:
        # a coordinator partition read with a gap (or on an incomplete replay) is incomplete from
        # there on (detection.md §0): no progress row, so the view is never "complete and empty"
        incomplete = part.topic == TXN_TOPIC and (broken is not None or bool(r.gaps))
        broker = None if r.unavailable or incomplete else _broker_offsets(w, part.topic, part.partition, r.last)
        frames.append(_events_of(part, opts, r, acc, broker))
    if rows:
        frames.append(to_frame(rows))
    return pd.concat(frames, ignore_index=True) if frames else to_frame([])


def _idle_progress(part: KafkaPartition, common: dict[str, Any], acc: CoordinatorReplay | None) -> dict[str, Any]:
    """The progress row of a partition with nothing new, from the driver's ListOffsets (the same
    row :func:`_events_of` would end with; built as a dict because thousands of idle partitions
    per trigger are the common case)."""
    hw, lso, log_start = part.offsets
    row = progress_event(topic=part.topic, partition=part.partition, high_watermark=hw, lso=lso,
                         log_start_offset=log_start, source_position=f"{part.topic}-{part.partition}@offset {part.end}",
                         **common)
    if acc is not None:
        row["coordinator_epoch"] = acc.max_epoch
        row["txn_partition_count"] = part.txn_partition_count
    row["from_log_start"] = part.from_log_start
    row["read_from_zero"] = part.read_from_zero
    if part.lagging:
        row["lagging"] = True
    row["end_proven"] = not part.lagging  # ListOffsets: nothing beyond the high watermark to read
    return row


def _txn_replay(w: KafkaWire, opts: dict[str, Any], part: KafkaPartition,
                common: dict[str, Any]) -> tuple[CoordinatorReplay, str | None, bool]:
    """The id → producer map of a coordinator partition up to ``part.start`` (memo, else rebuilt
    from the coordinator log's start: it is compacted), why it is incomplete (None: it is not),
    and whether it could not be read at all now (then the partition is read again next plan).

    Only a replay read without a gap is memoised (:func:`_events_of`), so a rebuild that failed
    never becomes an empty view taken for a complete one (issue 20 item 8)."""
    t, p = part.topic, part.partition
    memo = _TXN_MEMO.get((opts["bootstrap"], p))
    acc = CoordinatorReplay()
    if memo is not None and memo[0] == part.start:
        return memo[1].copy(), None, False
    if part.start > 0:
        try:
            offs = w.offsets([(t, p)])[(t, p)]
            rr = _fetch_range(w, opts, t, p, offs.log_start, part.start, common)
        except KafkaUnavailable as exc:
            rr, offs = None, str(exc)
        if rr is None or rr.unavailable:
            why = "; ".join(g["reason"] for g in rr.gaps) if rr is not None else offs
            return acc, unavailable_reason(
                f"{t}-{p}: its records before offset {part.start} could not be read again to rebuild the "
                f"coordinator view ({why}); the view stays incomplete; offsets {part.start}..{part.end - 1} "
                f"read again from offset {part.start} next trigger"), True
        for raw in rr.raws:
            recs, sc = decode_txn_log_segment(raw, validate_crc=False, allow_partial_tail=True)
            acc.fold([r for r in recs if r["offset"] < part.start], _leader_epoch(sc))
        if rr.gaps:
            return acc, (f"{t}-{p}: coordinator view incomplete: its replay before offset {part.start} has a gap ("
                         + "; ".join(g["reason"] for g in rr.gaps) + ")"), False
    return acc, None, False


def _events_of(part: KafkaPartition, opts: dict[str, Any], r: _RangeRead, acc: CoordinatorReplay | None,
               broker: Offsets | None) -> pd.DataFrame:
    """Events of one partition's read; no progress row when it became unreadable (``broker`` None)."""
    t, p = part.topic, part.partition
    ctx = ReadContext(t, p, "kafka", opts["cluster"], part.clock, from_log_start=part.from_log_start,
                      read_from_zero=part.read_from_zero, txn_partition_count=part.txn_partition_count)
    position = f"{t}-{p}@offset {part.end}"
    if t == TXN_TOPIC:
        pieces = []
        for raw in r.raws:
            recs, sc = decode_txn_log_segment(raw, validate_crc=False, allow_partial_tail=True)
            recs = [x for x in recs if part.start <= x["offset"] < part.end]
            pieces.append(TxnPiece(recs, f"{t}-{p}", _leader_epoch(sc)))
        out = txn_partition_events(ctx, pieces, acc, gaps=r.gaps, broker=broker or Offsets(None, None, None),
                                   progress_position=position, end_proven=not part.lagging)
        if broker is None:  # unreadable or incomplete (read_group): never memoised
            _TXN_MEMO.pop((opts["bootstrap"], p), None)
        else:
            _TXN_MEMO[(opts["bootstrap"], p)] = (part.end, acc)
    else:
        pieces = []
        if r.scans:
            cols = {k: np.concatenate([s.columns[k] for s in r.scans]) for k in empty_columns()}
            cols["position"] = cols["base_offset"]  # a fetch has no file position: name offsets
            pieces.append(BatchPiece(cols, f"{t}-{p}", "{prefix}@offset {pos}"))
        # read to the high watermark it was planned to (live standard, detection.md §0) unless lagging
        out = data_partition_events(ctx, pieces, gaps=r.gaps, broker=broker or Offsets(None, None, None),
                                    progress_position=position, end_proven=not part.lagging)
    if part.lagging:
        out["lagging"] = pd.array([True] * len(out), dtype="boolean")
    if part.probe:
        # a window read from the LSO: rows say where it starts (the state knows what it skipped)
        out.loc[out["kind"].isin(("data", "marker")), "lso"] = part.start
    return out if broker is not None else _without_progress(out)


def _without_progress(df: pd.DataFrame) -> pd.DataFrame:
    """A partition that became unreadable mid-read was not read up to now: no progress row."""
    return df[df["kind"] != "progress"].reset_index(drop=True)


def _leader_epoch(scan: BatchScan) -> int:
    """Highest partitionLeaderEpoch (= coordinator epoch) of a fetched coordinator range, -1 if empty."""
    return int(scan.columns["partition_leader_epoch"].max()) if len(scan) else -1


def _broker_offsets(w: KafkaWire, topic: str, partition: int, last: Any) -> Offsets:
    """The partition's offsets from the last Fetch response, else from ListOffsets."""
    hw = lso = log_start = None
    if last is not None and last.high_watermark is not None and last.high_watermark >= 0:
        hw, lso, log_start = last.high_watermark, last.last_stable_offset, last.log_start_offset
    else:
        o = w.offsets([(topic, partition)]).get((topic, partition))
        if o is not None and not o.deleted:
            hw, lso, log_start = o.high_watermark, o.lso, o.log_start
    return Offsets(hw, lso if lso is not None and lso >= 0 else None,
                   log_start if log_start is not None and log_start >= 0 else None)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("kafka-txn").option("bootstrap_servers", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "kafka-txn"

    def schema(self) -> Any:
        return spark_schema()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))
