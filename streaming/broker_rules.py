"""The rules that compare the live cluster's admin answers with the log: evidence in, verdict inputs out.

No IO here: every function takes answers already had (a DescribeProducers entry, a
DescribeTransactions answer, the ``__transaction_state`` record read for the finding) or asks the
:class:`~streaming.broker_evidence.BrokerEvidence` given to it. The answers come from
:class:`~streaming.broker_confirm.KafkaBrokerConfirm` (the admin API modules under
:mod:`streaming.kafka_admin`).

* :func:`producers_agree` - detection.md §4 rule 1 (``describe-producers``): the leader's
  ``CurrentTxnStartOffset`` of P must be the finding's first offset;
* :func:`transaction_covers` / :func:`transaction_disagreements` - the coordinator's ownership of
  tp and where its live answer differs from ``__transaction_state``;
* :func:`confirmations` - ``confirmed_by`` and the disagreements of one alert;
* :func:`held_offset_commits` - the group offset commits a ``__consumer_offsets`` finding holds;
* :func:`annotate` - fills one late/hanging alert with all of the above.
"""

from __future__ import annotations

from typing import Any

from streaming.broker_evidence import BrokerEvidence
from streaming.verdict import DescribeProducersAnswer
from udfs.offset_commit import held_groups, pending_by_partition

DESCRIBE_PRODUCERS = "DescribeProducers"
DESCRIBE_TRANSACTIONS = "DescribeTransactions"
OFFSETS_TOPIC = "__consumer_offsets"
#: coordinator states in which the coordinator still owns the transaction's partitions
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def producer_answer(answers: dict[int, DescribeProducersAnswer] | None,
                    producer_id: int) -> DescribeProducersAnswer | None:
    """P's entry of a DescribeProducers answer; ``found=False`` when the leader has none, None when
    there is no answer (API unsupported or unreachable)."""
    if answers is None:
        return None
    return answers.get(int(producer_id), DescribeProducersAnswer(found=False))


def producers_agree(answer: DescribeProducersAnswer | None, first_offset: int) -> str | None:
    """None when the leader's CurrentTxnStartOffset is the finding's first offset; otherwise what
    the leader says instead (the finding must not be acted on until tp is read again)."""
    if answer is None:
        return None
    if not answer.found:
        return "DescribeProducers: the leader has no state for this producer"
    if answer.current_txn_start_offset != first_offset:
        now = ("no open transaction" if answer.current_txn_start_offset < 0
               else f"CurrentTxnStartOffset {answer.current_txn_start_offset}")
        return f"DescribeProducers: the leader reports {now}, the log read gives first offset {first_offset}"
    return None


def transaction_covers(desc: dict[str, Any] | None, producer_id: int, tp: str) -> bool | None:
    """Whether the coordinator still owns the transaction on ``tp`` ("topic-partition") for P:
    an open state, P's producer id and tp among its partitions. None when unknown."""
    if desc is None:
        return None
    if desc.get("error"):
        return False if desc["error"] == "TRANSACTIONAL_ID_NOT_FOUND" else None
    return (desc["state"] in OPEN_STATES and desc["producer_id"] == int(producer_id)
            and tp in desc["partitions"])


def transaction_disagreements(desc: dict[str, Any] | None, record: dict[str, Any] | None,
                              producer_id: int) -> list[str]:
    """Where the coordinator's live answer and the ``__transaction_state`` record read for the
    finding differ (state, producer id/epoch, partitions). The log may simply lag the coordinator;
    the alert reports the difference, the verdict stays the log's."""
    if desc is None or record is None or desc.get("error"):
        return []
    out = []
    if desc["state"] != record.get("state"):
        out.append(f"DescribeTransactions: coordinator state {desc['state']}, __transaction_state "
                   f"{record.get('state')}")
    if desc["producer_id"] != record.get("producer_id", producer_id):
        out.append(f"DescribeTransactions: producer id {desc['producer_id']}, __transaction_state "
                   f"{record.get('producer_id')}")
    elif record.get("producer_epoch") is not None and desc["producer_epoch"] != record["producer_epoch"]:
        out.append(f"DescribeTransactions: producer epoch {desc['producer_epoch']}, __transaction_state "
                   f"{record['producer_epoch']}")
    parts = record.get("partitions")
    if parts is not None and sorted(parts) != desc["partitions"]:
        out.append(f"DescribeTransactions: partitions {desc['partitions']}, __transaction_state {sorted(parts)}")
    return out


def confirmations(alert: dict[str, Any], producers: DescribeProducersAnswer | None,
                  transaction: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """(``confirmed_by``, disagreements) for a late/hanging alert.

    DescribeProducers agrees when the leader's open transaction of P starts at the finding's first
    offset. DescribeTransactions agrees when the coordinator's ownership of tp matches the status:
    ``late`` needs the coordinator to still own it, ``hanging`` needs it not to.
    """
    confirmed: list[str] = []
    problems: list[str] = []
    dp_problem = producers_agree(producers, int(alert["first_offset"]))
    if producers is not None:
        (problems.append(dp_problem) if dp_problem else confirmed.append(DESCRIBE_PRODUCERS))
    tp = f"{alert['topic']}-{int(alert['partition'])}"
    covers = transaction_covers(transaction, int(alert["producer_id"]), tp)
    if covers is not None:
        if covers == (alert["status"] == "late"):
            confirmed.append(DESCRIBE_TRANSACTIONS)
        else:
            owner = "still owns" if covers else "does not own"
            problems.append(f"DescribeTransactions: the coordinator {owner} {tp} for this producer "
                            f"(state {transaction.get('state') or transaction.get('error')})")
    return confirmed, problems



def held_offset_commits(evidence: Any, partition: int, producer_id: int,
                        first_offset: int) -> list[dict[str, Any]] | None:
    """A finding on ``__consumer_offsets``: the group offset commits its open transaction holds,
    each with ``unstable`` = the group's OffsetFetch(require_stable) answers UNSTABLE_OFFSET_COMMIT
    for that partition (True), answers an offset (False: not pending there, e.g. the marker came),
    or could not be asked (None). Undecodable batches appear with their ``reason``."""
    pending = evidence.pending_offset_commits(partition, producer_id, first_offset)
    if pending is None:
        return None
    pending = pending_by_partition(pending)
    wanted: dict[str, set[tuple[str, int]]] = {}
    for e in pending:
        if e["group"] is not None:
            wanted.setdefault(e["group"], set()).add((e["topic"], e["partition"]))
    ask = getattr(evidence, "unstable_offsets", None)
    unstable = ask({g: sorted(tps) for g, tps in wanted.items()}) if ask is not None and wanted else None
    return [{"group": e["group"], "topic": e["topic"], "partition": e["partition"],
             "committed_offset": e["committed_offset"], "record_offset": e["offset"],
             "unstable": (None if unstable is None or e["group"] is None
                          else unstable.get((e["group"], e["topic"], e["partition"]))),
             "reason": e["reason"]} for e in pending]


def annotate(alert: dict[str, Any], evidence: BrokerEvidence) -> dict[str, Any]:
    """Fill ``evidence.describe_producers``/``describe_transactions``, ``confirmed_by`` and
    ``blocked_groups`` of one late/hanging alert in place (others are left as they are).

    A DescribeProducers disagreement withholds ``abort_command_legacy`` (its producer and
    coordinator epochs come from a log the leader contradicts) and says why in ``verify_hint``;
    ``abort_command_new`` stays: ``kafka-transactions.sh abort --start-offset`` asks the leader
    itself and refuses an offset no open transaction starts at.
    """
    if alert.get("status") not in ("late", "hanging"):
        return alert
    topic, partition, pid = alert["topic"], int(alert["partition"]), int(alert["producer_id"])
    first = int(alert["first_offset"])
    known = (alert.get("evidence") or {}).get("describe_producers")
    if known is not None:  # the enricher asked already (verdict rule 1): the same answer, not a second call
        dp = DescribeProducersAnswer(**{k: known[k] for k in ("found", "producer_epoch", "coordinator_epoch",
                                                              "current_txn_start_offset")})
    else:
        dp = producer_answer(evidence.describe_producers(topic, partition), pid)
    tid = alert.get("transactional_id")
    dt = evidence.describe_transaction(tid) if tid else None
    confirmed, problems = confirmations(alert, dp, dt)
    found: dict[str, Any] = dict(alert.get("evidence") or {})
    listing = getattr(evidence, "long_transactions", None)
    if not tid and listing is not None and alert.get("threshold_ms") is not None:
        # No transactional id from the log: the coordinators' listing of long-running open
        # transactions names it if a coordinator still runs one for this producer. Evidence
        # only: neither the verdict nor confirmed_by reads it.
        lt = listing(int(alert["threshold_ms"]))
        if lt is not None:
            entry = lt["by_producer"].get(pid)
            found["list_transactions"] = {"found": entry is not None, **(entry or {}),
                                          "duration_filter_ms": lt["duration_filter_ms"]}
    named = getattr(evidence, "transactions_named", None)
    if tid and dt is None and named is not None:
        # DescribeTransactions gave no answer (coordinator unreachable, moving, or not allowed):
        # a listing of just this id says whether a coordinator still runs an open transaction for
        # it. Evidence only, like the listing of findings without an id.
        lt = named([tid])
        if lt is not None:
            entry = lt["by_id"].get(tid)
            found["list_transactions"] = {"found": entry is not None, "transactional_id": tid, **(entry or {}),
                                          "pattern": lt["pattern"]}
    if dp is not None:
        disagreement = producers_agree(dp, first)
        found["describe_producers"] = {"found": dp.found, "producer_epoch": dp.producer_epoch,
                                       "coordinator_epoch": dp.coordinator_epoch,
                                       "current_txn_start_offset": dp.current_txn_start_offset,
                                       "agrees": disagreement is None, "disagreement": disagreement}
        if disagreement and alert.get("abort_command_legacy"):
            alert["abort_command_legacy"] = None
            alert["verify_hint"] = (f"{disagreement}: legacy command withheld until {topic}-{partition} is read "
                                    f"again")
    if dt is not None:
        record = found.get("coordinator_record")
        if record is None and alert.get("coordinator_state") is not None:
            record = {"state": alert["coordinator_state"], "producer_id": pid}
        found["describe_transactions"] = {**dt, "disagreements": transaction_disagreements(dt, record, pid)
                                          + [p for p in problems if p.startswith(DESCRIBE_TRANSACTIONS)]}
    alert["evidence"] = found or alert.get("evidence")
    alert["confirmed_by"] = confirmed if (dp is not None or dt is not None) else None
    tv = getattr(evidence, "transaction_version", None)
    alert["transaction_version"] = tv() if tv is not None else None
    if topic == OFFSETS_TOPIC:
        # kind group-offsets-held: the groups it holds are those whose offset commits it keeps
        # pending (OffsetFetch require_stable answers UNSTABLE_OFFSET_COMMIT), not readers of
        # __consumer_offsets; "lagging" does not apply to them.
        if getattr(evidence, "pending_offset_commits", None) is not None:
            alert["pending_offset_commits"] = held_offset_commits(evidence, partition, pid, first)
            alert["blocked_groups"] = held_groups(alert["pending_offset_commits"])
            alert["lagging_groups"] = None
        return alert
    positions = getattr(evidence, "group_positions", None)
    if positions is not None:
        held_lagging = positions(topic, partition, first)
        alert["blocked_groups"], alert["lagging_groups"] = held_lagging if held_lagging is not None else (None, None)
    else:
        alert["blocked_groups"] = evidence.blocked_groups(topic, partition, first)
    return alert
