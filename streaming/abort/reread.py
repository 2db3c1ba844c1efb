"""Re-read, from the broker and right before acting, everything an abort of one finding rests on.

What is read (issue 22; detection.md §0: the broker's own word is proof where it has the API):

1. **Metadata** for the topic: the partition's leader (-1: none; nothing can be written).
2. **ListOffsets** on the leader: log start, high watermark and LSO. An LSO above the first
   offset means the transaction is closed.
3. **Fetch** from the LSO through the high watermark (headers only), replayed with the broker's
   pairing rules (``ProducerAppendInfo.append``, detection.md §1): every transaction open now
   starts at or after the LSO, so the replay names the producer's open transaction exactly, the
   first write time, the extent an abort discards and any marker that closed it.
4. **DescribeProducers** (2.8+) on the leader: the producer's entry as the leader holds it
   (epoch, coordinator epoch, CurrentTxnStartOffset) - what the broker will check the marker
   against (``ProducerAppendInfo.checkProducerEpoch``/``checkCoordinatorEpoch``). And the
   producer's last marker below the first offset, read backwards
   (``streaming.broker_evidence.KafkaLookback``): the coordinator epoch before 2.8 (detection.md
   §4 rule 2) and the write-after-marker refinement of the cause.
5. The coordinator: on 3.0+ **ListTransactions** filtered by the producer id on every broker
   (every broker is the coordinator of its ``__transaction_state`` partitions; Kafka's
   find-hanging step 4) and **DescribeTransactions** of the id found; before 3.0 every
   ``__transaction_state`` partition read to its high watermark (detection.md §3.1), when readable.

Nothing here decides: :mod:`streaming.abort.plan` passes these facts to ``verdict.judge``.
Reads that fail are recorded as problems (a sentence each), never guessed around.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)

from streaming.abort.key import AlertKey
from streaming.broker_confirm import producer_answer
from streaming.broker_evidence import LookbackResult
from streaming.sources.kafka_wire import KafkaWireError, PartitionOffsets
from streaming.verdict import CoordinatorRecord, CoordinatorView, DescribeProducersAnswer, Marker
from udfs.model import CONTROL_ABORT, CONTROL_COMMIT

TXN_STATE_TOPIC = "__transaction_state"


@dataclass(frozen=True)
class LogRead:
    """The producer's batches on tp between ``start`` (the LSO) and ``end`` (the high watermark).

    ``open_start``: where P's open transaction starts after the replay (None: nothing open).
    The other fields describe that open transaction: first write time (first record's timestamp as
    the header tells it), last write, first batch's epoch, batches/records/bytes an abort
    discards. ``max_epoch``: highest epoch of P's batches read. ``closing_marker``: a marker of P at
    or after the key's first offset (it closed the transaction the key names). ``complete``: the
    read reached ``end``.
    """

    start: int
    end: int
    complete: bool
    reason: str | None = None
    open_start: int | None = None
    first_ts: int | None = None
    last_ts: int | None = None
    first_epoch: int | None = None
    last_offset: int | None = None
    batches: int = 0
    records: int = 0
    bytes: int = 0
    max_epoch: int | None = None
    closing_marker: Marker | None = None
    bytes_read: int = 0


@dataclass(frozen=True)
class CoordinatorRead:
    """What the coordinator says about P. ``source``: ``ListTransactions/DescribeTransactions`` or
    ``__transaction_state``; None when unknown (``reason`` says why)."""

    view: CoordinatorView
    source: str | None = None
    transactional_id: str | None = None
    state: str | None = None
    partitions: tuple[str, ...] | None = None
    reason: str | None = None


def lso_passed(off: PartitionOffsets, first_offset: int) -> bool:
    """Whether the partition's last stable offset proves the transaction starting at
    ``first_offset`` is no longer open. The broker never reports an LSO below the log start
    (``UnifiedLog.maybeIncrementFirstUnstableOffset``: max(first unstable offset, log start
    offset)), so a transaction whose first offset retention deleted holds the LSO *at* the log
    start: an LSO equal to the log start proves nothing for it, one above the log start does."""
    return off.lso > max(first_offset, off.log_start)


@dataclass(frozen=True)
class Reread:
    key: AlertKey
    at_ms: int
    leader: int | None  # -1: no leader; None: the topic or partition is unknown
    offsets: PartitionOffsets | None = None
    log: LogRead | None = None
    describe_producers: DescribeProducersAnswer | None = None
    lookback: LookbackResult | None = None
    coordinator: CoordinatorRead | None = None
    blocked_groups: list[str] | None = None
    apis: dict[str, bool] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """What was re-read, for the audit line."""
        off = self.offsets
        lg, dp, lb, co = self.log, self.describe_producers, self.lookback, self.coordinator
        return {
            "at_ms": self.at_ms, "leader": self.leader, "apis": dict(self.apis),
            "offsets": None if off is None else {"log_start": off.log_start, "high_watermark": off.high_watermark,
                                                  "lso": off.lso},
            "log": None if lg is None else {
                "start": lg.start, "end": lg.end, "complete": lg.complete, "reason": lg.reason,
                "open_start": lg.open_start, "max_epoch": lg.max_epoch, "records": lg.records, "bytes": lg.bytes,
                "batches": lg.batches, "last_offset": lg.last_offset,
                "closing_marker": None if lg.closing_marker is None else lg.closing_marker.offset},
            "describe_producers": None if dp is None else {
                "found": dp.found, "producer_epoch": dp.producer_epoch, "coordinator_epoch": dp.coordinator_epoch,
                "current_txn_start_offset": dp.current_txn_start_offset},
            "last_marker": None if lb is None or lb.marker is None else {
                "offset": lb.marker.offset, "producer_epoch": lb.marker.producer_epoch,
                "coordinator_epoch": lb.marker.coordinator_epoch},
            "coordinator": None if co is None else {
                "source": co.source, "transactional_id": co.transactional_id, "state": co.state,
                "partitions": list(co.partitions) if co.partitions is not None else None, "reason": co.reason},
            "blocked_groups": self.blocked_groups,
            "problems": list(self.problems),
        }


# ---------------------------------------------------------------------------------- the log
def read_producer(wire: Any, topic: str, partition: int, producer_id: int, first_offset: int, start: int,
                  end: int, *, max_bytes: int, fetch_bytes: int = 1 << 20) -> LogRead:
    """Replay P's batches on tp in ``[start, end)`` (ProducerAppendInfo.append; detection.md §1): a
    transactional data batch opens a transaction when none is open, else joins it whatever its
    epoch; a COMMIT/ABORT marker closes whatever is open; an empty control batch changes nothing."""
    from udfs.record_batch import scan_batches

    pos, spent = start, 0
    open_start = first_ts = last_ts = first_epoch = last_offset = max_epoch = None
    batches = records = size = 0
    closing: Marker | None = None
    reason: str | None = None
    while pos < end and reason is None:
        if spent >= max_bytes:
            reason = (f"the re-read of {topic}-{partition} stopped at offset {pos} after {spent} bytes "
                      f"([kafka] span_max_bytes = {max_bytes}), before the high watermark {end}")
            break
        res = wire.fetch(topic, partition, pos, min(fetch_bytes, max_bytes - spent))
        if not res.ok:
            reason = f"Fetch {topic}-{partition} at offset {pos}: {res.error}"
            break
        spent += len(res.records)
        if not res.records:
            reason = f"Fetch {topic}-{partition} at offset {pos} returned nothing below the high watermark {end}"
            break
        c = scan_batches(res.records, validate_crc=True, source=f"{topic}-{partition}",
                         allow_partial_tail=True).columns
        n = len(c["base_offset"])
        if n == 0:  # one batch larger than the fetch: ask again with twice the room
            fetch_bytes *= 2
            continue
        for i in range(n):
            base, last = int(c["base_offset"][i]), int(c["last_offset"][i])
            if last < pos or base >= end or int(c["producer_id"][i]) != producer_id:
                continue
            if int(c["crc_valid"][i]) == 0:  # never believe a batch whose CRC fails (detection.md §0)
                reason = f"{topic}-{partition} offset {base}: CRC mismatch"
                break
            epoch = int(c["producer_epoch"][i])
            max_epoch = epoch if max_epoch is None else max(max_epoch, epoch)
            if bool(c["is_control"][i]):
                ctype = int(c["control_type"][i])
                if int(c["record_count"][i]) == 0 or ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
                    continue
                if open_start is not None and base > first_offset >= open_start:
                    ce = int(c["coordinator_epoch"][i])
                    closing = Marker(offset=base, producer_epoch=epoch, coordinator_epoch=ce if ce >= 0 else None,
                                     kind="COMMIT" if ctype == CONTROL_COMMIT else "ABORT",
                                     timestamp=int(c["max_timestamp"][i]))
                open_start = first_ts = last_ts = first_epoch = last_offset = None
                batches = records = size = 0
                continue
            if not bool(c["is_transactional"][i]):
                continue
            if open_start is None:
                open_start, first_ts, first_epoch = base, int(c["first_timestamp"][i]), epoch
            batches += 1
            records += int(c["record_count"][i])
            size += int(c["batch_size"][i])
            last_offset = last
            last_ts = max(last_ts or -1, int(c["max_timestamp"][i]))
        pos = max(pos, int(c["last_offset"][-1]) + 1)
    # cut short (``reason``): what was read so far is kept (a lower bound of the extent) and
    # ``complete`` says it is not the whole story
    return LogRead(start, end, reason is None, reason=reason, open_start=open_start, first_ts=first_ts,
                   last_ts=last_ts, first_epoch=first_epoch, last_offset=last_offset, batches=batches,
                   records=records, bytes=size, max_epoch=max_epoch, closing_marker=closing, bytes_read=spent)


# ---------------------------------------------------------------------------------- the coordinator
def coordinator_by_admin(confirm: Any, producer_id: int, known_id: str | None = None) -> CoordinatorRead | None:
    """3.0+: ListTransactions filtered by P on every broker, then DescribeTransactions of the id.

    An id whose coordinator now names another producer id, or does not know it: P is unknown to it
    (mapped, no record). ``known_id``: the transactional id the alert named (the job read it from
    ``__transaction_state``); it is described even when ListTransactions does not list it for P (a
    newer producer id took it over: the coordinator's answer then proves P unknown, detection.md
    §3.1). No id at all: None. Kafka's find-hanging takes an empty listing as "no coordinator maps
    P", but the brokers leave out ids the principal may not Describe, so it proves nothing here:
    the caller reads ``__transaction_state`` (:func:`coordinator_by_log`)."""
    try:
        tids = confirm.transactional_ids_of(producer_id)
    except (Errors.KafkaError, OSError, KafkaWireError) as exc:
        return CoordinatorRead(CoordinatorView(), reason=f"ListTransactions failed: {type(exc).__name__}: {exc}")
    if tids is None:
        return CoordinatorRead(CoordinatorView(), reason="ListTransactions did not answer on every broker")
    source = "ListTransactions/DescribeTransactions"
    if not tids and known_id:
        tids = {known_id}
    if not tids:
        # Not a proof: KafkaApis.handleListTransactionsRequest leaves out the ids this principal may
        # not Describe. The caller reads __transaction_state instead.
        return None
    tid = sorted(tids)[0]
    desc = confirm.describe_transaction(tid)
    if desc is None:
        return CoordinatorRead(CoordinatorView(), transactional_id=tid,
                               reason=f"DescribeTransactions of {tid!r} gave no answer")
    if desc.get("error") == "TRANSACTIONAL_ID_NOT_FOUND" or (not desc.get("error")
                                                               and desc["producer_id"] != producer_id):
        state = desc.get("state") or desc.get("error")
        return CoordinatorRead(CoordinatorView(current=True, mapped=True), source=source, transactional_id=tid,
                               state=state, partitions=tuple(desc.get("partitions") or ()))
    if desc.get("error"):
        return CoordinatorRead(CoordinatorView(), transactional_id=tid,
                               reason=f"DescribeTransactions of {tid!r}: {desc['error']}")
    parts = tuple(desc["partitions"])
    record = CoordinatorRecord(transactional_id=tid, state=desc["state"], producer_id=producer_id,
                               producer_epoch=int(desc["producer_epoch"]), partitions=parts,
                               timeout_ms=int(desc["timeout_ms"]), start_ts=int(desc["start_ms"]),
                               last_update_ts=-1)  # not in the answer: marker_landed then reads "not landed"
    return CoordinatorRead(CoordinatorView(current=True, mapped=True, record=record), source=source,
                           transactional_id=tid, state=desc["state"], partitions=parts)


def coordinator_by_log(wire: Any, producer_id: int, *, max_bytes: int, fetch_bytes: int = 1 << 20) -> CoordinatorRead:
    """Before 3.0: every ``__transaction_state`` partition read from its log start to its high
    watermark (kafka-formats §5; detection.md §3.1). C = the latest record of the transactional id
    that names P; a later tombstone or producer id for that id removes P's mapping."""
    from udfs.txn_log import decode_txn_log_segment

    try:
        parts = wire.partitions([TXN_STATE_TOPIC], include_internal=True).get(TXN_STATE_TOPIC)
        if not parts:
            return CoordinatorRead(CoordinatorView(), reason=f"{TXN_STATE_TOPIC} does not exist on this cluster")
        offsets = wire.offsets([(TXN_STATE_TOPIC, p) for p in parts])
    except (KafkaWireError, OSError) as exc:
        return CoordinatorRead(CoordinatorView(), reason=f"{TXN_STATE_TOPIC} is not readable: {exc}")
    latest: dict[str, dict[str, Any]] = {}  # transactional id -> its newest record
    named: dict[str, int] = {}  # transactional id that ever named P -> its partition
    spent, read, max_epoch = 0, set(), -1
    for p in parts:
        off = offsets[(TXN_STATE_TOPIC, p)]
        pos = max(off.log_start, 0)
        while pos < off.high_watermark:
            if spent >= max_bytes:
                return CoordinatorRead(CoordinatorView(), reason=(
                    f"{TXN_STATE_TOPIC} read stopped after {spent} bytes ([kafka] lookback_max_bytes)"))
            try:
                res = wire.fetch(TXN_STATE_TOPIC, p, pos, fetch_bytes)
            except (KafkaWireError, OSError) as exc:
                return CoordinatorRead(CoordinatorView(), reason=f"{TXN_STATE_TOPIC}-{p} is not readable: {exc}")
            if not res.ok or not res.records:
                return CoordinatorRead(CoordinatorView(), reason=(
                    f"{TXN_STATE_TOPIC}-{p} at offset {pos}: {res.error if not res.ok else 'nothing returned'}"))
            spent += len(res.records)
            recs, scan = decode_txn_log_segment(res.records, source=f"{TXN_STATE_TOPIC}-{p}", allow_partial_tail=True)
            if scan.errors:
                return CoordinatorRead(CoordinatorView(), reason=(
                    f"{TXN_STATE_TOPIC}-{p}: {scan.errors[0]} (a damaged coordinator partition proves nothing)"))
            if len(scan) == 0:
                fetch_bytes *= 2
                continue
            for r in recs:
                if r["offset"] < pos:
                    continue
                latest[r["transactional_id"]] = dict(r, partition=p)
                max_epoch = max(max_epoch, int(r["coordinator_epoch"]))
                if not r["tombstone"] and r["producer_id"] == producer_id:
                    named[r["transactional_id"]] = p
            pos = max(pos, scan.next_offset or pos + 1)
        read.add(p)
    n = len(parts)
    base = dict(current=True, partition_count=n, read_partitions=frozenset(read),
                all_coordinators_max=max_epoch if max_epoch >= 0 else None)
    for tid, p in sorted(named.items()):
        r = latest[tid]
        if r["tombstone"] or r["producer_id"] != producer_id:
            continue
        record = CoordinatorRecord(transactional_id=tid, state=r["txn_state"], producer_id=producer_id,
                                   producer_epoch=int(r["producer_epoch"]),
                                   partitions=tuple(r["txn_partitions"]) if r["txn_partitions"] is not None else None,
                                   timeout_ms=int(r["txn_timeout_ms"]), start_ts=int(r["txn_start_ts"]),
                                   last_update_ts=int(r["txn_last_update_ts"]))
        return CoordinatorRead(CoordinatorView(mapped=True, record=record, txn_partition=p, **base),
                               source=TXN_STATE_TOPIC, transactional_id=tid, state=record.state,
                               partitions=record.partitions)
    if named:
        tid, p = sorted(named.items())[0]
        return CoordinatorRead(CoordinatorView(mapped=True, txn_partition=p, **base), source=TXN_STATE_TOPIC,
                               transactional_id=tid, state="removed" if latest[tid]["tombstone"] else "other producer id")
    return CoordinatorRead(CoordinatorView(mapped=False, **base), source=TXN_STATE_TOPIC)


# ---------------------------------------------------------------------------------- everything
def reread(key: AlertKey, *, wire: Any, confirm: Any, lookback: Any, span_max_bytes: int,
           txn_state_max_bytes: int, transactional_id: str | None = None,
           clock: Callable[[], float] = time.time) -> Reread:
    """Read every fact of the module docstring, in that order; stop at the first that makes the
    rest meaningless (no leader, partition gone, transaction closed)."""
    at_ms = int(clock() * 1000)
    topic, partition, pid, first = key.topic, key.partition, key.producer_id, key.first_offset
    problems: list[str] = []
    wire.refresh_metadata([topic])
    leader = wire.leader(topic, partition)
    if leader is None or leader < 0:
        return Reread(key, at_ms, leader)
    offs, unavailable = wire.offsets_available([(topic, partition)])
    off = offs.get((topic, partition))
    if off is None or off.deleted:
        why = unavailable.get((topic, partition)) or "the partition no longer exists"
        return Reread(key, at_ms, -1 if off is None else None, problems=(f"ListOffsets {key.tp}: {why}",))
    leader = off.leader if off.leader is not None and off.leader >= 0 else leader
    apis = {"DescribeProducers": confirm.supports(DescribeProducersRequest),
            "ListTransactions": confirm.supports(ListTransactionsRequest),
            "DescribeTransactions": confirm.supports(DescribeTransactionsRequest)}
    if lso_passed(off, first):
        return Reread(key, at_ms, leader, off, apis=apis)
    log = read_producer(wire, topic, partition, pid, first, min(off.lso, first), off.high_watermark,
                        max_bytes=span_max_bytes)
    if not log.complete:
        problems.append(log.reason or f"the re-read of {key.tp} did not reach the high watermark")
    dp = None
    if apis["DescribeProducers"]:
        dp = producer_answer(confirm.describe_producers(topic, partition), pid)
        if dp is None:
            problems.append(f"DescribeProducers on {key.tp}'s leader gave no answer")
    # P's last marker below O: the coordinator epoch before 2.8 (detection.md §4 rule 2), and on
    # every version the write-after-marker refinement of the cause (the same evidence as the job's)
    lb = lookback.last_marker_before(topic, partition, pid, first)
    coord = None
    if apis["ListTransactions"] and apis["DescribeTransactions"]:
        coord = coordinator_by_admin(confirm, pid, transactional_id)
    if coord is None:
        coord = coordinator_by_log(wire, pid, max_bytes=txn_state_max_bytes)
    groups = confirm.blocked_groups(topic, partition, first)
    return Reread(key, at_ms, leader, off, log, dp, lb, coord, groups, apis, tuple(problems))
