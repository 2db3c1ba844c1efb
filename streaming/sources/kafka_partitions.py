"""The kafka source's input partitions (what the driver hands each Spark task) and how a plan
becomes them: one :class:`KafkaGroup` per leader broker (or ``groups_per_broker`` shares of
one), each holding the :class:`KafkaPartition` ranges that broker leads. Built on the driver by
:func:`input_partitions` from two plans; read on the executors by kafka_reader.py. Pure: no
request, no clock, so a replayed micro-batch gets the same reads."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from streaming.sources.kafka_options import TXN_TOPIC, split_key, tp_key
from streaming.sources.kafka_plan_state import PlanState, Reset


class KafkaPartition(InputPartition):
    """One partition's planned read ``[start, end)`` with what the executor needs to judge it
    (clock, the driver's ListOffsets facts, reset, unavailability, probe window and closes)."""

    def __init__(self, topic: str, partition: int, start: int, end: int, clock: int, from_log_start: bool,
                 reset: Reset | None = None, unavailable: str | None = None,
                 offsets: tuple[int | None, int | None, int | None] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.clock = clock
        self.from_log_start = from_log_start
        self.reset = reset  # planned restart after the log went backwards (plan_reset)
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
    ``groups_per_broker``), read together with multi-partition Fetch requests. Beyond
    ``max_input_partitions`` groups, several brokers' partitions share one (``broker`` is then
    -1): the reader still sends one request per leader, to all leaders at once."""

    def __init__(self, broker: int, parts: list[KafkaPartition]) -> None:
        self.broker = broker
        self.parts = parts


def input_partitions(start: PlanState, end: PlanState, groups_per_broker: int,
                     max_groups: int = 0) -> list[KafkaGroup]:
    """The reads of the micro-batch ``(start, end]``: one group per leader broker (at most
    ``groups_per_broker`` per broker), as Spark's ``partitions(start, end)``; more than
    ``max_groups`` groups (0: no bound) are dealt round-robin into ``max_groups``."""
    by_broker: dict[int, list[KafkaPartition]] = {}
    lagging = set(end.lagging)
    for part in planned_ranges(start, end):
        k = tp_key(part.topic, part.partition)
        part.lagging = k in lagging
        part.txn_partition_count = end.txn_n if part.topic == TXN_TOPIC else None
        facts = end.seen.get(k)
        if facts is not None and part.unavailable is None:
            part.offsets = (facts.high_watermark, facts.lso, facts.log_start)
            # WAVE2 contract A: began at offset 0 with nothing ever deleted (log start still 0)
            part.read_from_zero = bool(part.from_log_start) and facts.log_start == 0
        by_broker.setdefault(facts.leader if facts is not None else -1, []).append(part)
    n = groups_per_broker
    groups = [KafkaGroup(b, parts[i::n]) for b, parts in sorted(by_broker.items()) for i in range(min(n, len(parts)))]
    if not max_groups or len(groups) <= max_groups:
        return groups
    packed = [groups[i::max_groups] for i in range(max_groups)]
    return [KafkaGroup(share[0].broker if len({g.broker for g in share}) == 1 else -1,
                       [p for g in share for p in g.parts]) for share in packed]


def planned_ranges(start: PlanState, end: PlanState) -> list[KafkaPartition]:
    """Every partition's range of the micro-batch ``(start, end]``, before grouping."""
    out = []
    clock = max(end.clock, 0)
    probe = end.probe is not None
    emit = set(end.emit) if probe else set()
    txn_prefix = TXN_TOPIC + "\t"
    keys = end.parts.keys()
    if probe:
        # probe mode, nothing changed there: no row at all (the driver keeps its last facts);
        # decided before any per-partition work, as most of a large cluster's partitions are so
        due = set(end.unavail) | set(end.reads) | emit | set(end.closes) | set(end.resets)
        cols = end.cols
        if cols is not None and len(keys) == int(cols.has_part.sum()):  # every partition is a row of cols
            if TXN_TOPIC in cols.topics:
                i = cols.topics.index(TXN_TOPIC)
                due.update(cols.keys[int(cols.starts[i]):int(cols.starts[i + 1])])
        else:
            due.update(k for k in keys if k.startswith(txn_prefix))
        keys = [k for k in keys if k in due]
    for k in keys:
        pos = end.parts[k]
        t, p = split_key(k)
        e, from_start = pos.next, pos.from_log_start
        s = start.parts.get(k)
        s_off = s.next if s else end.starts.get(k, e)
        if k in end.unavail:  # not read this trigger: only its gap row, no progress row
            out.append(KafkaPartition(t, p, s_off, s_off, clock, bool(from_start), unavailable=end.unavail[k].error))
            continue
        reset = end.resets.get(k)
        if probe and t != TXN_TOPIC:
            r = end.reads.get(k)
            part = KafkaPartition(t, p, r.start if r else e, r.end if r else e, clock, False, reset)
            part.probe, part.note = (r.window, r.note) if r else (False, None)
            part.closes = end.closes.get(k, [])
            out.append(part)
            continue
        if reset is not None:  # the log went backwards: resume where the plan decided
            s_off = reset.restart
        elif k in end.rereads:  # an earlier read stopped there (kafka_unread.py)
            s_off = min(s_off, end.rereads[k])
        # Every partition emits its progress row every micro-batch (high watermark, LSO, log
        # start, for timers and enrichment); one with nothing new is not fetched for it.
        out.append(KafkaPartition(t, p, s_off, e, clock, bool(from_start), reset))
    for k, down in end.unavail.items():
        if k not in end.parts:  # unavailable since the query started: no offsets yet
            t, p = split_key(k)
            out.append(KafkaPartition(t, p, -1, -1, clock, False, unavailable=down.error))
    for k, reason in end.dropped.items():  # deleted: one last row saying so
        t, p = split_key(k)
        out.append(KafkaPartition(t, p, -1, -1, clock, False, unavailable=reason))
    return out
