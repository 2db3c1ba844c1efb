"""``kafka`` source: the live path. Raw Fetch of data partitions and ``__transaction_state``
(PySpark 4.2+ ``DataSourceStreamReader``), header-only decoding, Arrow rows of the event schema.

Options: ``bootstrap_servers`` (required), ``topics`` (JSON list) and/or ``topic_pattern``
(regex, re-evaluated every trigger), ``include_internal`` (let the pattern match internal topics
such as ``__consumer_offsets``), ``starting_offsets`` (``lso`` default, ``earliest``, ``latest`` or
JSON ``{"topic": {"0": offset}}``), ``max_offsets_per_trigger`` (per data partition; the
coordinator log is never throttled), ``fetch_max_bytes`` (per Fetch request), ``validate_crc``,
``cluster``, ``client_id``, ``request_timeout_ms``, ``retries``, ``retry_backoff_ms``,
``empty_fetch_retries`` (default 4: how often an empty answer below the planned end is retried,
with a metadata refresh and doubling backoff, before the unread range becomes a gap),
``deletion_confirmations`` (default 3: agreeing Metadata answers before a partition counts as
deleted), and the kafka-python security settings of
:data:`streaming.sources.kafka_security.SECURITY_KEYS`. Secrets
(``sasl_plain_password``, ``ssl_password``) must be references (``env:NAME``, ``file:PATH``),
never the secret itself, because Spark prints data source options in query plans; they are
resolved (and the OAUTHBEARER token provider imported) in each process that connects.

Why starting at the LSO is correct: every transaction that began before the LSO is closed by
definition (the LSO is the first offset of the oldest open transaction), so nothing before it can
hang, and start-up work no longer depends on how much log is retained. What it costs: the legacy
abort's coordinator epoch cannot come from a marker read before the LSO; ``earliest`` reads the
full history so the ``last-marker``/``log-start`` sources (detection.md §4) apply.
``__transaction_state`` is always read from its log start (compacted: one record per id).

Clock (detection.md §2): the driver's wall clock when it planned the micro-batch, carried by
every row as ``event_time``. While a data partition is behind its high watermark (admission
control), the clock does not move: a transaction there may be closed by a marker not read yet.
Coordinator partitions are read to their high watermark in every micro-batch, and a failure to
read them fails the micro-batch (bounded retries, then a clear error), so the coordinator view is
never behind the clock.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from streaming.events import spark_schema, to_arrow
from streaming.normalize import gap_event
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
from streaming.sources.kafka_wire import KafkaWire
from udfs.record_batch import BatchScan, empty_columns, scan_batches
from udfs.txn_log import decode_txn_log_segment

TXN_TOPIC = "__transaction_state"


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
        # unresolved (references, dotted paths): picklable, resolved by _wire in each process
        "security": check_source_options(options),
    }


_WIRES: dict[tuple, KafkaWire] = {}
_WIRES_LOCK = threading.Lock()


def _wire(opts: dict[str, Any]) -> KafkaWire:
    """One client per configuration per process (driver, or executor Python worker)."""
    key = (opts["bootstrap"], opts["client_id"], opts["request_timeout_ms"], opts["retries"],
           opts["retry_backoff_ms"], opts["deletion_confirmations"], tuple(sorted(opts["security"].items())))
    with _WIRES_LOCK:
        w = _WIRES.get(key)
        if w is None:
            w = _WIRES[key] = KafkaWire(opts["bootstrap"], client_id=opts["client_id"],
                                        request_timeout_ms=opts["request_timeout_ms"], retries=opts["retries"],
                                        retry_backoff_ms=opts["retry_backoff_ms"],
                                        deletion_confirmations=opts["deletion_confirmations"],
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
                 reset: dict[str, Any] | None = None, read_from_zero: bool = False,
                 txn_partition_count: int | None = None) -> None:
        self.read_from_zero = read_from_zero  # read from its log start, which is 0 (nothing ever deleted)
        self.txn_partition_count = txn_partition_count  # __transaction_state partitions in Metadata
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.clock = clock
        self.from_log_start = from_log_start
        self.reset = reset  # planned restart after the log went backwards (_plan_reset)


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

    def _discover(self) -> list[tuple[str, int]]:
        w = _wire(self.opts)
        found = w.partitions(self.opts["topics"] or None, self.opts["pattern"], self.opts["include_internal"])
        if self.opts["topics"] and self.opts["pattern"]:
            found.update(w.partitions(self.opts["topics"], None, True))
        found.update(w.partitions([TXN_TOPIC], None, True))
        return sorted((t, p) for t, ps in found.items() for p in ps)

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

    def initialOffset(self) -> dict:
        tps = self._discover()
        offs = _wire(self.opts).offsets(tps)
        explicit = {} if self.opts["starting"] in ("lso", "earliest", "latest") else json.loads(self.opts["starting"])
        parts = {}
        for t, p in tps:
            o = offs.get((t, p))
            if o is None or o.deleted:
                continue
            parts[_tp_key(t, p)] = list(self._initial_for(t, p, o, explicit))
        return {"parts": parts, "clock": -1}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        start = start or self.initialOffset()
        now = int(time.time() * 1000)
        tps = self._discover()
        parts = {k: list(v) for k, v in start["parts"].items()}
        known_ids = start.get("ids", {})  # topic ids as of the previous plan (Metadata v10+)
        ids = dict(known_ids)
        offs = self._offsets_settled(tps, parts, known_ids)
        resets: dict[str, dict[str, Any]] = {}
        zero: list[str] = []  # partitions whose log start is 0 now (so it always was: it never decreases)
        lagging = False
        for t, p in tps:
            o = offs.get((t, p))
            if o is None or o.deleted:
                continue
            k = _tp_key(t, p)
            if k not in parts:  # a new partition (pattern match or partition added): all of it is new
                parts[k] = [o.log_start, True]
            else:
                reset = _plan_reset(t, p, parts[k][0], known_ids.get(t), o)
                if reset is not None:
                    resets[k] = reset
                    flag = parts[k][1] if reset["from_log_start"] is None else reset["from_log_start"]
                    parts[k] = [reset["restart"], flag]
            if o.topic_id:
                ids[t] = o.topic_id
            if o.log_start == 0:
                zero.append(k)
            nxt = parts[k][0]
            end = o.high_watermark
            if self.opts["max_offsets"] and t != TXN_TOPIC and end - nxt > self.opts["max_offsets"]:
                end = nxt + self.opts["max_offsets"]
                lagging = True
            parts[k] = [max(end, nxt), parts[k][1]]
        clock = start.get("clock", -1) if lagging else max(start.get("clock", -1), now)
        return {"parts": parts, "clock": clock, "planned": now, "ids": ids, "resets": resets, "zero": zero}

    def _offsets_settled(self, tps: list[tuple[str, int]], parts: dict[str, list], ids: dict[str, str]) -> dict:
        """Offsets of ``tps``; where a high watermark is below what was already read (and the
        topic id does not already prove a new topic) it is asked again, with backoff, up to
        ``empty_fetch_retries`` times: a new leader reports a lower high watermark until its
        followers' fetches tell it the old one (seconds at most), a truncated log stays lower."""
        w = _wire(self.opts)
        offs = w.offsets(tps)
        for attempt in range(1, self.opts["empty_fetch_retries"] + 1):
            behind = [tp for tp, o in offs.items() if not o.deleted and _tp_key(*tp) in parts
                      and o.high_watermark < parts[_tp_key(*tp)][0]
                      and not (ids.get(tp[0]) and o.topic_id and ids[tp[0]] != o.topic_id)]
            if not behind:
                break
            time.sleep(min(self.opts["retry_backoff_ms"] * 2 ** (attempt - 1), 5000) / 1000)
            offs.update(w.offsets(behind))
        return offs

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        out = []
        clock = max(end.get("clock", -1), 0)
        resets = end.get("resets", {})
        zero = set(end.get("zero", ()))
        # n of __transaction_state from the cluster's Metadata: the enrichment needs it to know
        # whether every coordinator partition was read (detection.md §3.1).
        n_txn = sum(1 for k in end["parts"] if k.split("\t")[0] == TXN_TOPIC) or None
        for k, (e, from_start) in end["parts"].items():
            t, p = k.split("\t")
            s = start.get("parts", {}).get(k)
            s_off = s[0] if s else e
            reset = resets.get(k)
            if reset is not None:  # the log went backwards: resume where latestOffset decided
                s_off = reset["restart"]
            # Every partition is read every micro-batch, even with nothing new, so that it emits
            # its progress row (high watermark, LSO, log start) for timers and enrichment.
            out.append(KafkaPartition(t, int(p), s_off, e, clock, bool(from_start), reset,
                                      read_from_zero=bool(from_start) and k in zero,
                                      txn_partition_count=n_txn if t == TXN_TOPIC else None))
        return out

    def read(self, partition: KafkaPartition) -> Iterator[Any]:
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


def _fetch_range(w: KafkaWire, opts: dict[str, Any], topic: str, partition: int, start: int, end: int,
                 common: dict[str, Any], reset: dict[str, Any] | None = None,
                 ) -> tuple[list[BatchScan], list[dict[str, Any]], Any, list[bytes]]:
    """Fetch [start, end) as raw bytes. Returns (scans, gap rows, last fetch result, raw chunks).

    Every offset of the range is either read or named by a gap row, never skipped silently.
    ``reset`` (from planning, see :func:`_plan_reset`) is a gap to report before reading.
    An answer with no records below ``end`` (a new leader whose high watermark still lags the
    one the plan was made from) is retried ``empty_fetch_retries`` times with a metadata refresh
    and doubling backoff; if the high watermark stays low, the unread rest becomes one gap.
    """
    scans: list[BatchScan] = []
    raws: list[bytes] = []
    gaps: list[dict[str, Any]] = []
    if reset is not None:
        gaps.append(gap_event(reset["reason"], topic=topic, partition=partition, first_offset=reset["first"],
                              last_offset=reset["last"], **common))
    last = None
    offset = start
    empty_answers = 0
    while offset < end:
        res = w.fetch(topic, partition, offset, opts["fetch_max_bytes"])
        last = res
        if res.deleted:
            gaps.append(gap_event(f"{topic}-{partition} was deleted; stopped reading it at offset {offset}",
                                  topic=topic, partition=partition, first_offset=offset, last_offset=end - 1, **common))
            break
        if res.out_of_range:
            ls = res.log_start_offset
            if ls is None or ls < 0 or ls <= offset:
                gaps.append(gap_event(f"offset {offset} out of range and no log start to resume from",
                                      topic=topic, partition=partition, first_offset=offset, **common))
                break
            gaps.append(gap_event(f"retention deleted offsets {offset}..{ls - 1} before they were read; "
                                  f"continuing at the log start {ls}", topic=topic, partition=partition,
                                  first_offset=offset, last_offset=ls - 1, **common))
            offset = ls
            continue
        data = res.records or b""
        if not data:
            if empty_answers < opts["empty_fetch_retries"]:
                empty_answers += 1
                _wait_for_high_watermark(w, opts, topic, empty_answers)
                continue
            gaps.append(gap_event(
                f"no records at offset {offset} after {empty_answers + 1} fetches: the leader's high watermark "
                f"{res.high_watermark} is below the planned end {end} (new leader not caught up?); offsets "
                f"{offset}..{end - 1} not read", topic=topic, partition=partition, first_offset=offset,
                last_offset=end - 1, **common))
            break
        empty_answers = 0
        scan = scan_batches(data, validate_crc=opts["validate_crc"], source=f"{topic}-{partition}",
                            allow_partial_tail=True)
        cols = scan.columns
        keep = (cols["last_offset"] >= offset) & (cols["base_offset"] < end)
        n_keep = int(keep.sum())
        chain_broken = any(not e.reason.startswith("CRC-32C") and not e.reason.startswith("control record")
                           for e in scan.errors)
        for e in scan.errors:
            gaps.append(gap_event(f"{e.reason} (fetch at offset {offset})", topic=topic, partition=partition,
                                  first_offset=e.base_offset if e.base_offset is not None else offset, **common))
        if n_keep:
            scans.append(BatchScan(columns={k: v[keep] for k, v in cols.items()}))
            raws.append(data)
            offset = int(cols["last_offset"][keep].max()) + 1
        if chain_broken:
            # The batch chain is unreadable past this point: skip to the planned end, loudly.
            gaps.append(gap_event(f"unreadable bytes: offsets {offset}..{end - 1} skipped", topic=topic,
                                  partition=partition, first_offset=offset, last_offset=end - 1, **common))
            break
        if not n_keep:
            if len(cols["last_offset"]) and int(cols["base_offset"].min()) >= end:
                break  # the next batch starts at or past the planned end: nothing in between
            gaps.append(gap_event(f"no whole readable batch at offset {offset} in {len(data)} bytes; offsets "
                                  f"{offset}..{end - 1} not read", topic=topic, partition=partition,
                                  first_offset=offset, last_offset=end - 1, **common))
            break
    return scans, gaps, last, raws


def _wait_for_high_watermark(w: KafkaWire, opts: dict[str, Any], topic: str, attempt: int) -> None:
    """Back off (doubling, at most 5 s), then refresh metadata: leadership may have moved again."""
    time.sleep(min(opts["retry_backoff_ms"] * 2 ** (attempt - 1), 5000) / 1000)
    w.refresh_metadata([topic])


def read_partition(part: KafkaPartition, opts: dict[str, Any]) -> pd.DataFrame:
    """Executor side: events of one planned read of one partition, ending with its progress row."""
    w = _wire(opts)
    common = dict(source="kafka", cluster=opts["cluster"], event_time_ms=part.clock)
    t, p = part.topic, part.partition
    ctx = ReadContext(t, p, "kafka", opts["cluster"], part.clock, from_log_start=part.from_log_start,
                      read_from_zero=part.read_from_zero,
                      txn_partition_count=part.txn_partition_count)
    if t == TXN_TOPIC:
        memo_key = (opts["bootstrap"], p)
        memo = _TXN_MEMO.get(memo_key)
        acc = CoordinatorReplay()
        if memo is not None and memo[0] == part.start:
            acc = memo[1].copy()
        elif part.start > 0:
            # Rebuild the id → producer map from the coordinator log's start (it is compacted).
            offs = w.offsets([(t, p)])[(t, p)]
            _scans, _g, _l, raws = _fetch_range(w, opts, t, p, offs.log_start, part.start, common)
            for raw in raws:
                recs, sc = decode_txn_log_segment(raw, validate_crc=False, allow_partial_tail=True)
                acc.fold([r for r in recs if r["offset"] < part.start], _leader_epoch(sc))
        _scans, gaps, last, raws = _fetch_range(w, opts, t, p, part.start, part.end, common, part.reset)
        pieces = []
        for raw in raws:
            recs, sc = decode_txn_log_segment(raw, validate_crc=False, allow_partial_tail=True)
            recs = [r for r in recs if part.start <= r["offset"] < part.end]
            pieces.append(TxnPiece(recs, f"{t}-{p}", _leader_epoch(sc)))
        out = txn_partition_events(ctx, pieces, acc, gaps=gaps, broker=_broker_offsets(w, t, p, last),
                                   progress_position=f"{t}-{p}@offset {part.end}")
        _TXN_MEMO[memo_key] = (part.end, acc)
        return out
    scans, gaps, last, _raws = _fetch_range(w, opts, t, p, part.start, part.end, common, part.reset)
    pieces = []
    if scans:
        cols = {k: np.concatenate([s.columns[k] for s in scans]) for k in empty_columns()}
        cols["position"] = cols["base_offset"]  # a fetch has no file position: name offsets
        pieces.append(BatchPiece(cols, f"{t}-{p}", "{prefix}@offset {pos}"))
    return data_partition_events(ctx, pieces, gaps=gaps, broker=_broker_offsets(w, t, p, last),
                                 progress_position=f"{t}-{p}@offset {part.end}")


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
