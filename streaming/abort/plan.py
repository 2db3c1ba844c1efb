"""The verdict on a fresh re-read, the reasons to refuse, and what the abort would send.

The decision is ``streaming.verdict.judge`` on the re-read facts (the same rule as the job's; this
module only fills its inputs and reads ``status``, ``verified`` and the two epochs). Refusals
(issue 22), each with a sentence: the partition has no leader; the transaction is closed (LSO past
the first offset, the producer's marker, or the leader reports nothing open there); the producer
epoch or coordinator epoch the abort would send differs from the alert's command; the coordinator
still owns the transaction (Ongoing/Prepare* naming the partition); the finding is not hanging or
not verified now (detection.md §0); a fact could not be re-read.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from streaming.abort.key import AlertKey
from streaming.abort.reread import Reread, lso_passed
from streaming.alerts import AlertConfig, abort_commands
from streaming.verdict import (
    CoordinatorView,
    EpochEvidence,
    OpenTxn,
    PartitionProof,
    Thresholds,
    Verdict,
    judge,
)
from udfs.model import OPEN_TXN_STATES

# refusal codes (docs/runbook.md lists them with what to do)
NO_LEADER = "no-leader"
CLOSED = "closed"
NOT_PROVEN = "not-proven"
EPOCH_CHANGED = "producer-epoch-changed"
COORDINATOR_EPOCH_CHANGED = "coordinator-epoch-changed"
COORDINATOR_OWNS = "coordinator-owns"
NOW_LATE = "now-late"
NOT_HANGING = "not-hanging"
UNVERIFIED = "unverified"
NO_COORDINATOR_EPOCH = "no-coordinator-epoch"


# detection.md §4: sources that give the leader's exact value, and those that may err low
EXACT_EPOCH_SOURCES = frozenset({"describe-producers", "last-marker", "snapshot", "log-start"})
INEXACT_EPOCH_SOURCES = frozenset({"producer-last-marker", "all-coordinators-max"})


@dataclass(frozen=True)
class Refusal:
    code: str
    sentence: str


@dataclass(frozen=True)
class AbortSpec:
    """What one WriteTxnMarkers (ABORT) carries: Kafka's ``AbortTransactionSpec``."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass(frozen=True)
class Plan:
    key: AlertKey
    reread: Reread
    verdict: Verdict | None
    spec: AbortSpec | None
    refusals: tuple[Refusal, ...]
    commands: tuple[str, str | None] | None = None

    @property
    def refused(self) -> bool:
        return bool(self.refusals) or self.spec is None

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "refusals": [{"code": r.code, "sentence": r.sentence} for r in self.refusals],
            "verdict": None if v is None else {"status": v.status, "cause": v.cause, "verified": v.verified,
                                               "producer_epoch": v.producer_epoch,
                                               "coordinator_epoch": v.coordinator_epoch,
                                               "coordinator_epoch_source": v.coordinator_epoch_source},
            "would_send": None if self.spec is None or self.refusals else {
                "api": "WriteTxnMarkers", "result": "ABORT", "leader": self.reread.leader,
                "topic": self.spec.topic, "partition": self.spec.partition, "producer_id": self.spec.producer_id,
                "producer_epoch": self.spec.producer_epoch, "coordinator_epoch": self.spec.coordinator_epoch},
        }


def _closed(r: Reread) -> Refusal | None:
    key, first = r.key, r.key.first_offset
    if r.offsets is not None and lso_passed(r.offsets, first):
        return Refusal(CLOSED, f"the transaction is closed: {key.tp}'s last stable offset is now {r.offsets.lso}, "
                               f"past its first offset {first}; there is nothing to abort")
    lg, dp = r.log, r.describe_producers
    if lg is not None and lg.closing_marker is not None:
        m = lg.closing_marker
        return Refusal(CLOSED, f"the transaction is closed: producer {key.producer_id}'s {m.kind} marker at offset "
                               f"{m.offset} of {key.tp} ended it; there is nothing to abort")
    if dp is not None:
        if not dp.found:
            return Refusal(CLOSED, f"the transaction is closed: DescribeProducers on {key.tp}'s leader has no state "
                                   f"for producer {key.producer_id}")
        if dp.current_txn_start_offset < 0:
            return Refusal(CLOSED, f"the transaction is closed: DescribeProducers on {key.tp}'s leader reports no "
                                   f"open transaction for producer {key.producer_id}")
        if dp.current_txn_start_offset != first:
            return Refusal(CLOSED, f"no open transaction of producer {key.producer_id} starts at offset {first} now: "
                                   f"DescribeProducers on {key.tp}'s leader reports one starting at "
                                   f"{dp.current_txn_start_offset} (the key names a closed transaction)")
    if lg is not None and lg.complete and lg.open_start != first:
        now = ("no open transaction" if lg.open_start is None
               else f"an open transaction starting at offset {lg.open_start}")
        return Refusal(CLOSED, f"the transaction is closed: the re-read of {key.tp} from offset {lg.start} to the "
                               f"high watermark {lg.end} shows {now} for producer {key.producer_id}, not one "
                               f"starting at {first}")
    return None


def _unverified_reason(r: Reread, v: Verdict) -> str:
    co = r.coordinator
    if co is not None and co.reason:
        return f"the coordinator could not be re-read ({co.reason})"
    if v.missing_txn_partitions:
        return f"__transaction_state partitions {list(v.missing_txn_partitions)} were not read"
    if r.problems:
        return "; ".join(r.problems)
    return "no coordinator view proves that no coordinator will finish it"


def make_plan(r: Reread, *, alert: dict[str, Any] | None, thresholds: Thresholds,
              bootstrap_servers: str | None) -> Plan:
    """Judge the re-read and list every reason to refuse (empty: the abort may be sent)."""
    key = r.key
    if r.leader is None:
        why = "; ".join(r.problems) or "Metadata does not list it"
        return Plan(key, r, None, None, (Refusal(NOT_PROVEN, f"{key.tp} is unknown to the cluster: {why}"),))
    if r.leader < 0:
        seen = f" ({'; '.join(r.problems)})" if r.problems else " (Metadata)"
        return Plan(key, r, None, None, (Refusal(NO_LEADER, (
            f"{key.tp} has no leader now{seen}: only the leader can write the marker; wait for the "
            f"election (kafka-topics.sh --describe --topic {key.topic}) and run this again")),))
    closed = _closed(r)
    if closed is not None:
        return Plan(key, r, None, None, (closed,))
    lg = r.log
    if lg is None or lg.first_ts is None or lg.open_start != key.first_offset:
        why = (lg.reason if lg is not None and lg.reason else
               f"the first batch at offset {key.first_offset} of {key.tp} was not read")
        return Plan(key, r, None, None, (Refusal(NOT_PROVEN, f"the transaction could not be re-read: {why}"),))
    dp, lb = r.describe_producers, r.lookback
    if not lg.complete and dp is None:
        # without the leader's own entry only a read to the high watermark shows that no marker
        # closed the transaction (an earlier open transaction may hold the LSO below it)
        return Plan(key, r, None, None, (Refusal(NOT_PROVEN, (
            f"the transaction could not be re-read to the end of {key.tp}: {lg.reason}; raise [kafka] "
            f"span_max_bytes or use a broker with DescribeProducers (2.8+)")),))
    marker = lb.marker if lb is not None else None
    epochs = [e for e in (lg.max_epoch, marker.producer_epoch if marker else None,
                          dp.producer_epoch if dp is not None and dp.found else None) if e is not None and e >= 0]
    txn = OpenTxn(topic=key.topic, partition=key.partition, producer_id=key.producer_id,
                  first_offset=key.first_offset, last_offset=lg.last_offset if lg.last_offset is not None
                  else key.first_offset, first_ts=lg.first_ts, last_ts=lg.last_ts if lg.last_ts is not None
                  else lg.first_ts, max_epoch=max(epochs), first_epoch=lg.first_epoch, prev_marker=marker)
    evidence = EpochEvidence(describe_producers=dp, last_marker=marker,
                             read_from_zero=bool(lb is not None and lb.read_from_zero))
    view = r.coordinator.view if r.coordinator is not None else CoordinatorView()
    # What this re-read proves of tp (detection.md §0): its end, by a read to the high watermark or
    # by the leader's own DescribeProducers entry naming this first offset; the start, since the
    # re-read found the transaction's first batch at the key's offset. The broker validated every
    # batch's CRC on append (LogValidator) and the live clock is this process's own.
    dp_confirms = dp is not None and dp.found and dp.current_txn_start_offset == key.first_offset
    proof = PartitionProof(end_proven=bool(lg.complete or dp_confirms))
    v = judge(txn, view, evidence, now_ms=r.at_ms, thresholds=thresholds, proof=proof)
    refusals: list[Refusal] = []
    if v.blocked:
        refusals.append(Refusal(NOT_PROVEN, v.blocked))
    if v.status == "open":
        refusals.append(Refusal(NOT_HANGING, (
            f"the transaction is not hanging: its first write was {v.open_ms // 1000} s ago, within the threshold of "
            f"{v.threshold_ms // 1000} s (transaction.max.timeout.ms + padding); its producer or coordinator may "
            f"still finish it")))
    elif v.status == "late":
        co = r.coordinator
        if co is not None and co.state in OPEN_TXN_STATES and \
                key.tp in (co.partitions or ()):
            refusals.append(Refusal(COORDINATOR_OWNS, (
                f"the coordinator reports transaction {co.transactional_id!r} {co.state} with {key.tp} among its "
                f"partitions ({co.source}): it will write the marker itself; an abort now could break the "
                f"transaction's atomicity (finding now late, {v.cause})")))
        else:
            refusals.append(Refusal(NOW_LATE, f"the finding is now late ({v.cause}): the coordinator still owns it"))
    elif not v.verified:
        codes = v.unverified_reasons  # the verdict's proof gaps (streaming.vocab.UNVERIFIED_REASONS)
        refusals.append(Refusal(UNVERIFIED, (
            f"the finding is hanging ({v.cause}) but not verified now (detection.md §0"
            f"{': ' + ', '.join(codes) if codes else ''}): {_unverified_reason(r, v)}")))
    if v.status == "hanging" and v.coordinator_epoch is None:
        refusals.append(Refusal(NO_COORDINATOR_EPOCH, (
            f"the coordinator epoch to send is not proven: {v.epoch_hint or 'no source for it was re-read'}")))
    if alert is not None:
        a_e, a_c = alert.get("producer_epoch"), alert.get("coordinator_epoch")
        if a_e is not None and int(a_e) != v.producer_epoch:
            refusals.append(Refusal(EPOCH_CHANGED, (
                f"producer {key.producer_id}'s epoch on {key.tp} is now {v.producer_epoch}; the alert's command "
                f"was built with epoch {a_e}: the producer was re-initialised or fenced since the alert")))
        # An alert whose epoch came from a rule that errs low (detection.md §4 rules 5-6) is
        # replaced by an exact re-read without a state change: only an exact one is compared.
        a_src = alert.get("coordinator_epoch_source")
        inexact = a_src in INEXACT_EPOCH_SOURCES and v.coordinator_epoch_source in EXACT_EPOCH_SOURCES
        if a_c is not None and v.coordinator_epoch is not None and int(a_c) != v.coordinator_epoch \
                and not inexact:
            refusals.append(Refusal(COORDINATOR_EPOCH_CHANGED, (
                f"the coordinator epoch for producer {key.producer_id} on {key.tp} is now {v.coordinator_epoch} "
                f"(source {v.coordinator_epoch_source}); the alert's command was built with {a_c}: a coordinator "
                f"wrote a marker for this producer or moved since the alert")))
    spec = None
    commands = None
    if v.coordinator_epoch is not None:
        spec = AbortSpec(key.topic, key.partition, key.producer_id, v.producer_epoch, v.coordinator_epoch)
        commands = abort_commands(topic=key.topic, partition=key.partition, first_offset=key.first_offset,
                                  producer_id=key.producer_id, producer_epoch=v.producer_epoch,
                                  coordinator_epoch=v.coordinator_epoch,
                                  cfg=AlertConfig(bootstrap_servers=bootstrap_servers))
    return Plan(key, r, v, spec, tuple(refusals), commands)


def _time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "?"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def describe(p: Plan) -> list[str]:
    """The re-read and the plan, as lines for the operator."""
    r, key = p.reread, p.key
    out = [f"re-read of {key.tp} at {_time(r.at_ms)}: leader {r.leader}"]
    if r.offsets is not None:
        out[-1] += (f", log start {r.offsets.log_start}, LSO {r.offsets.lso}, "
                    f"high watermark {r.offsets.high_watermark}")
    dp = r.describe_producers
    if dp is not None:
        out.append(f"  DescribeProducers: producer {key.producer_id} epoch {dp.producer_epoch}, coordinator epoch "
                   f"{dp.coordinator_epoch}, open transaction at {dp.current_txn_start_offset}"
                   if dp.found else f"  DescribeProducers: no state for producer {key.producer_id}")
    if r.lookback is not None:
        m = r.lookback.marker
        out.append(f"  producer's last marker before {key.first_offset}: "
                   + (f"{m.kind} at {m.offset} (epoch {m.producer_epoch}, coordinator epoch {m.coordinator_epoch})"
                      if m else f"none ({r.lookback.reason or 'read from offset 0'})"))
    co = r.coordinator
    if co is not None:
        what = (f"{co.transactional_id!r} {co.state} {list(co.partitions or ())}" if co.transactional_id
                else "no transactional id maps this producer" if co.source else f"unknown ({co.reason})")
        out.append(f"  coordinator ({co.source or 'not read'}): {what}")
    v = p.verdict
    if v is not None:
        out.append(f"verdict now: {v.status} ({v.cause}), {'verified' if v.verified else 'NOT verified'}; "
                   f"coordinator epoch {v.coordinator_epoch} from {v.coordinator_epoch_source}")
    if p.spec is not None and not p.refusals:
        s, lg = p.spec, r.log
        out.append(f"would send: WriteTxnMarkers ABORT to broker {r.leader} (the leader of {key.tp}): producer id "
                   f"{s.producer_id}, producer epoch {s.producer_epoch}, coordinator epoch {s.coordinator_epoch}")
        if lg is not None:
            least = "" if lg.complete else "at least "
            out.append(f"discards: {least}{lg.records} records, {lg.bytes} bytes in {lg.batches} batches (offsets "
                       f"{key.first_offset}-{lg.last_offset}) of producer {key.producer_id}")
        groups = r.blocked_groups
        out.append("unblocks consumer groups: " + (", ".join(groups) if groups else
                                                    "none known" if groups is not None else "unknown"))
        if p.commands is not None:
            new, legacy = p.commands
            out.append("or run Kafka's own tool (kafka-transactions.sh of 3.0+) instead:")
            if r.apis.get("DescribeProducers"):  # --start-offset looks the producer up with it (2.8+)
                out.append(f"  {new}")
            if legacy:
                out.append(f"  {legacy}")
    return out
