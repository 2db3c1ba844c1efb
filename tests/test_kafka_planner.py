"""The kafka source's driver-side planner (streaming/sources/kafka_planner.py) driven directly,
without Spark, against the socket broker fake: its typed state across triggers (probe memos, per-
partition and whole-cluster availability, unread carry-over, resets) and that state's round trip
through the offsets JSON Spark writes to its offset log.

Every expected value is written from Kafka's behaviour, named where it is used: ListOffsets LATEST
under READ_COMMITTED answers the last stable offset (``Partition.fetchOffsetForTimestamp`` ->
``fetchOffsetSnapshot``), which is the first offset of the oldest open transaction, else the high
watermark (``ProducerStateManager.firstUnstableOffset``; ``UnifiedLog.updateFirstUnstableOffset``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from streaming.simulate.encode import encode_batch
from streaming.sources.kafka_options import parse_options
from streaming.sources.kafka_partitions import planned_ranges
from streaming.sources.kafka_plan_state import (
    PartitionDown,
    PlanState,
    Position,
    ProbeMemo,
    ProbeRead,
    Reset,
    Seen,
)
from streaming.sources.kafka_planner import NO_BROKER_ANSWERED, KafkaPlanner
from streaming.sources.kafka_unread import record_unread
from streaming.sources.kafka_wire import KafkaUnavailable
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch, segment_file_name

_watchdog = kafka_watchdog(120)

NEVER = str(10 ** 12)  # probe_follow_after_ms: never follow (these tests look at the probe itself)
NOW = int(time.time() * 1000)
OLD = NOW - 2 * 3600 * 1000


def planner(broker: FakeKafkaBroker, wire, **opts: str) -> KafkaPlanner:
    return KafkaPlanner(parse_options({"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": "orders",
                                       "retry_backoff_ms": "10", "empty_fetch_retries": "1", **opts}), wire)


def orders_log(root: Path) -> dict[int, Path]:
    """orders-0: producer 7 (epoch 2) writes offsets 0, 1, 2 in one open transaction;
    orders-1: producer 8 writes offset 0 and commits it (marker at offset 1)."""
    segs = {}
    for p in range(2):
        (root / f"orders-{p}").mkdir(parents=True)
        segs[p] = root / f"orders-{p}" / segment_file_name(0)
    segs[0].write_bytes(b"".join(encode_batch(i, 1, producer_id=7, producer_epoch=2, base_sequence=i,
                                              is_transactional=True, base_timestamp=OLD + i, max_timestamp=OLD + i)
                                 for i in range(3)))
    segs[1].write_bytes(encode_batch(0, 1, producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True,
                                     base_timestamp=OLD, max_timestamp=OLD)
                        + build_control_batch(1, 8, 0, commit=True, coordinator_epoch=0, timestamp_ms=OLD))
    return segs


def fetched(broker: FakeKafkaBroker, since: int) -> list[tuple[str, int, int]]:
    """(topic, partition, fetch offset) of every Fetch the fake answered since request ``since``."""
    out = []
    for r in broker.requests[since:]:
        if r.api != "fetch":  # the fake records API names as kafka-python spells them
            continue
        for t in r.request.topics:
            name = getattr(t, "topic", None) or getattr(t, "name", None)
            out += [(name, p.partition, p.fetch_offset) for p in t.partitions]
    return out


def wait_past(ms: int) -> None:
    """Until the wall clock reaches ``ms`` (a partition's ``retry_at``), with a deadline."""
    deadline = time.monotonic() + 10
    while int(time.time() * 1000) < ms:
        assert time.monotonic() < deadline, "the clock did not reach retry_at"
        time.sleep(0.005)


def test_initial_offsets_start_at_the_last_stable_offset(tmp_path, wires):
    """``starting_offsets = lso``: each partition starts at ListOffsets(LATEST, READ_COMMITTED),
    the LSO. orders-0 has producer 7's transaction open from offset 0, so its LSO is 0 (= its log
    start: read from the log start); orders-1's transaction is committed, so its LSO is its high
    watermark 2. The fake has no ``__transaction_state`` (no transactional producer has asked for
    its coordinator: ``KafkaApis.getCoordinator`` creates the topic on the first
    FindCoordinator(TRANSACTION)), so it is not planned."""
    orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        p = planner(broker, wires(broker))
        state = p.initial()
    assert state.parts == {"orders\t0": Position(0, True), "orders\t1": Position(2, False)}
    assert state.unavail == {} and state.initial
    # the initial offsets' JSON holds only what Spark needs to start from
    assert state.to_json() == {"parts": {"orders\t0": [0, True], "orders\t1": [2, False]}, "clock": -1,
                               "unavail": {}}


def test_probe_state_across_triggers(tmp_path, wires):
    """Probe mode, three triggers.

    1. orders-0's LSO 0 is below its high watermark 3: one Fetch at offset 0 finds producer 7's
       first transactional batch (offsets 0..0), the window read is [0, 1); orders-1's LSO equals
       its high watermark (nothing open): no Fetch, nothing to read.
    2. Nothing written: the LSO is still 0 (the same oldest open transaction), so no Fetch, no
       read and no progress row due (the ListOffsets facts did not change).
    3. The transaction is aborted (marker at offset 3, ``ProducerStateManager.completeTxn`` ends
       it): the LSO becomes the high watermark 4, above the probed first offset 0, which proves
       producer 7's transaction closed: ``closes = [[7, 4]]``, still without a Fetch.
    """
    segs = orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        p = planner(broker, wires(broker), read_mode="probe", probe_follow_after_ms=NEVER)
        s0 = p.initial()
        mark = len(broker.requests)
        s1 = p.plan(s0)
        assert fetched(broker, mark) == [("orders", 0, 0)]
        assert s1.probe == {"orders\t0": ProbeMemo(lso=0, end=1, pid=7, first=0, first_ts=OLD)}
        assert s1.reads == {"orders\t0": ProbeRead(0, 1, True)}
        assert s1.parts == {"orders\t0": Position(1, False), "orders\t1": Position(2, False)}
        assert s1.seen == {"orders\t0": Seen(3, 0, 0, 1), "orders\t1": Seen(2, 2, 0, 1)}
        assert s1.emit == ["orders\t0", "orders\t1"]  # first plan: every partition's facts are new

        mark = len(broker.requests)
        s2 = p.plan(s1)
        assert fetched(broker, mark) == []
        assert s2.probe == s1.probe and s2.reads == {} and s2.emit == [] and s2.closes == {}

        segs[0].write_bytes(segs[0].read_bytes() + build_control_batch(3, 7, 2, commit=False, coordinator_epoch=0,
                                                                       timestamp_ms=NOW))
        mark = len(broker.requests)
        s3 = p.plan(s2)
        assert fetched(broker, mark) == []
        assert s3.closes == {"orders\t0": [[7, 4]]}
        assert s3.probe == {}  # nothing open any more: nothing remembered
        assert s3.parts["orders\t0"] == Position(4, False) and s3.emit == ["orders\t0"]
    # the micro-batch of trigger 3 carries the close to the executors (an lso_passed row)
    (part,) = planned_ranges(s2, s3)
    assert (part.topic, part.partition, part.start, part.end, part.closes) == ("orders", 0, 4, 4, [[7, 4]])


def test_probe_memo_survives_a_restart_through_the_offset_log(tmp_path, wires):
    """A new planner (a restarted driver) given the offsets JSON of the last plan keeps the probe
    memo: orders-0's LSO is unchanged (ListOffsets READ_COMMITTED still 0), so it knows the oldest
    open transaction already and fetches nothing."""
    orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        s1 = planner(broker, wires(broker), read_mode="probe", probe_follow_after_ms=NEVER).initial()
        s1 = planner(broker, wires(broker), read_mode="probe", probe_follow_after_ms=NEVER).plan(s1)
        logged = json.loads(json.dumps(s1.to_json()))  # as Spark writes and reads its offset log
        mark = len(broker.requests)
        s2 = planner(broker, wires(broker), read_mode="probe", probe_follow_after_ms=NEVER).plan(
            PlanState.from_json(logged))
        assert fetched(broker, mark) == []
        assert s2.probe == {"orders\t0": ProbeMemo(lso=0, end=1, pid=7, first=0, first_ts=OLD)}


def test_whole_cluster_outage_then_back(tmp_path, wires):
    """No broker answers (the only node stopped: its listener is closed, so no Metadata request
    can be sent anywhere): the plan keeps every offset and the clock where they were and marks
    every known partition unavailable ("no broker answered"), so the job's availability records,
    progress line and metrics show the outage; the cluster state records since when it is down; the first plan after the
    broker is back clears it, and the partitions are planned on from where they were. With ``unavailable_timeout_ms = 0`` the first
    unanswered plan raises one error naming the bootstrap servers."""
    orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        w = wires(broker, retries=1, request_timeout_ms=500, bootstrap_timeout_ms=500)
        p = planner(broker, w)
        s1 = p.plan(p.initial())
        assert p.cluster.down_since is None
        broker.stop_node(1)
        down = p.plan(s1)
        assert down.parts == s1.parts and down.clock == s1.clock
        assert set(down.unavail) == set(s1.parts)
        assert all(d.error == NO_BROKER_ANSWERED for d in down.unavail.values())
        since = p.cluster.down_since
        assert since is not None and p.cluster.last_error
        assert p.plan(s1).parts == s1.parts
        assert p.cluster.down_since == since  # from the first unanswered plan, not the latest
        p.opts["unavailable_timeout_ms"] = 0
        with pytest.raises(KafkaUnavailable, match=broker.bootstrap_servers):
            p.plan(s1)
        p.opts["unavailable_timeout_ms"] = 600000
        broker.start_node(1)
        # the client's connection may still be in its reconnect backoff (kafka-python
        # ``reconnect_backoff_ms``): until a plan is answered, the outage goes on from ``since``
        deadline = time.monotonic() + 30
        s2 = p.plan(s1)
        while p.cluster.down_since is not None:
            assert p.cluster.down_since == since and time.monotonic() < deadline
            s2 = p.plan(s1)
        assert p.cluster.down_since is None and p.cluster.last_error is None
        # ... and the leader's partitions may then be unavailable one plan, per partition
        while s2.unavail:
            assert time.monotonic() < deadline, s2.unavail
            wait_past(max(d.retry_at for d in s2.unavail.values()))
            s2 = p.plan(s2)
        assert s2.parts == s1.parts and p.cluster.down_since is None


def test_partition_availability_state_then_back(tmp_path, wires):
    """orders-1 loses its leader (``KRaftMetadataCache.getPartitionMetadata``: leader -1,
    LEADER_NOT_AVAILABLE): it is kept at its offset 2 with a ``PartitionDown`` record whose
    ``since`` is the first plan that found it down and whose ``tries`` count the plans that asked;
    ``retry_at`` doubles the backoff (10 ms, then 20 ms). A plan before ``retry_at`` does not ask
    it; back online, the record is gone and it is planned on from offset 2."""
    orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        p = planner(broker, wires(broker))
        s1 = p.plan(p.initial())
        broker.offline("orders", 1)
        s2 = p.plan(s1)
        d2 = s2.unavail["orders\t1"]
        assert "LEADER_NOT_AVAILABLE" in d2.error and d2.tries == 1 and d2.retry_at == d2.since + 10
        assert s2.parts["orders\t1"] == Position(2, False)
        wait_past(d2.retry_at)
        s3 = p.plan(s2)
        d3 = s3.unavail["orders\t1"]
        assert d3.since == d2.since and d3.tries == 2 and d3.retry_at - 20 >= d2.retry_at
        broker.online("orders", 1)
        wait_past(d3.retry_at)
        s4 = p.plan(s3)
        assert s4.unavail == {} and s4.parts["orders\t1"] == Position(2, False)
    (part,) = [r for r in planned_ranges(s3, s4) if r.partition == 1]
    assert (part.start, part.end, part.unavailable) == (2, 2, None)


def test_unread_carry_over_waits_while_the_partition_is_down(tmp_path, wires):
    """A read of orders-1 stopped at offset 0 (the executor's ``unavailable:`` gap row, recorded
    in the unread ledger by ``foreachBatch``): the next plan finds orders-1 without a leader, so
    the offset waits in ``behind``; once it is back, the plan reads it again from 0 (``rereads``)
    and ``behind`` is empty. Why it is carried at all: Spark commits a micro-batch's end offsets
    whatever its reads found (``MicroBatchExecution`` writes the commit log after the batch)."""
    orders_log(tmp_path / "logs")
    ledger = str(tmp_path / "unread.json")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        p = planner(broker, wires(broker), starting_offsets="earliest", unread_ledger=ledger)
        s1 = p.plan(p.initial())
        assert s1.parts["orders\t1"] == Position(2, True)
        record_unread(ledger, 0, [{"reason": "unavailable: leader lost", "topic": "orders", "partition": 1,
                                   "first_offset": 0}])
        broker.offline("orders", 1)
        s2 = p.plan(s1)
        assert s2.behind == {"orders\t1": 0} and s2.unread_seen == 0 and s2.rereads == {}
        broker.online("orders", 1)
        wait_past(s2.unavail["orders\t1"].retry_at)
        s3 = p.plan(PlanState.from_json(json.loads(json.dumps(s2.to_json()))))
        assert s3.behind == {} and s3.rereads == {"orders\t1": 0} and s3.unread_seen == 0
    (part,) = [r for r in planned_ranges(s2, s3) if r.partition == 1]
    assert (part.start, part.end) == (0, 2)


def test_truncated_log_is_a_typed_reset(tmp_path, wires):
    """Unclean leader election (``UnifiedLog.truncateTo``): orders-0 cut to offset 1 after it was
    read to 3. Same topic id, high watermark 1 below the next offset 3: the plan resumes at the
    new LSO (producer 7's transaction still open from offset 0, so LSO 0, at most the high
    watermark), and the gap names offsets 0..2 (restart .. previous next - 1)."""
    orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        p = planner(broker, wires(broker), starting_offsets="earliest")
        s1 = p.plan(p.initial())
        assert s1.parts["orders\t0"] == Position(3, True) and s1.ids.get("orders")
        broker.truncate("orders", 0, 1)
        s2 = p.plan(s1)
    reset = s2.resets["orders\t0"]
    assert (reset.restart, reset.from_log_start, reset.first, reset.last) == (0, None, 0, 2)
    assert s2.parts["orders\t0"] == Position(1, True)  # read again up to the new high watermark
    (part,) = [r for r in planned_ranges(s1, s2) if r.partition == 0]
    assert (part.start, part.end, part.reset) == (0, 1, reset)


def test_plan_state_round_trips_through_the_offset_json():
    """Every field of a plan, typed, survives JSON text (what Spark's offset log holds) unchanged;
    the JSON keys are the ones checkpoints written before the typed state use."""
    state = PlanState(
        parts={"orders\t0": Position(5, False), "__transaction_state\t3": Position(9, True)}, clock=1_700_000_000_000,
        unavail={"orders\t1": PartitionDown("LEADER_NOT_AVAILABLE for orders-1", 10, 2, 50)},
        ids={"orders": "AAAAAAAAAAAAAAAAAAAAAA"}, gone={"old": None}, seen={"orders\t0": Seen(7, 4, 0, 2)},
        behind={"orders\t2": 3}, unread_seen=4,
        probe={"orders\t0": ProbeMemo(4, 5, 7, 4, 123), "orders\t3": ProbeMemo(1, None, None, None, None, 6)},
        planned=1_700_000_000_000, resets={"orders\t0": Reset(4, None, 4, 8, "truncated")},
        dropped={"gone\t0": "deleted"}, starts={"orders\t0": 0}, rereads={"__transaction_state\t3": 2},
        lagging=["orders\t0"], txn_n=1, reads={"orders\t0": ProbeRead(4, 5, True, "no transaction")},
        closes={"orders\t0": [[7, 5]]}, emit=["orders\t0"])
    text = json.dumps(state.to_json())
    assert PlanState.from_json(json.loads(text)) == state
    assert set(json.loads(text)) == {"parts", "clock", "planned", "ids", "resets", "unavail", "dropped", "gone",
                                     "starts", "seen", "behind", "rereads", "unread_seen", "lagging", "txn_n",
                                     "probe", "reads", "closes", "emit"}
    assert json.loads(text)["probe"]["orders\t3"] == {"lso": 1, "end": None, "pid": None, "first": None,
                                                      "first_ts": None, "follow": 6}
    full = PlanState(parts=state.parts, planned=1)  # full read mode: no probe fields at all
    assert "probe" not in full.to_json() and PlanState.from_json(full.to_json()).probe is None


def test_unchanged_partitions_keep_their_plan_entries_and_changed_ones_get_the_whole_logic(tmp_path, wires):
    """Probe mode at scale (``KafkaPlanner._quiet``): a partition whose ListOffsets answer equals
    what the last plan saw, and whose memo says nothing is due, keeps that plan's entries as
    they are (the same objects: no per-partition work); one whose offsets changed goes through
    the whole logic.

    1. First plan: orders-0 probed at its LSO 0 (producer 7's open transaction), orders-1 has
       nothing open (LSO = high watermark 2).
    2. Nothing written: both keep their position, facts and memo objects, no Fetch, no row due.
    3. Producer 9 opens a transaction on orders-1 at offset 2 (one batch, offsets 2..3): its high
       watermark becomes 4 and its LSO 2 (``ProducerStateManager.firstUnstableOffset``), so it is
       probed at 2 and its window [2, 4) read; orders-0 still keeps plan 1's objects."""
    segs = orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        p = planner(broker, wires(broker), read_mode="probe", probe_follow_after_ms=NEVER)
        s1 = p.plan(p.initial())
        assert s1.cols is not None
        mark = len(broker.requests)
        s2 = p.plan(s1)
        assert fetched(broker, mark) == []
        for k in ("orders\t0", "orders\t1"):
            assert s2.parts[k] is s1.parts[k] and s2.seen[k] is s1.seen[k]
        assert s2.probe["orders\t0"] is s1.probe["orders\t0"]
        assert s2.emit == [] and s2.reads == {} and s2.closes == {}

        segs[1].write_bytes(segs[1].read_bytes() + encode_batch(2, 2, producer_id=9, producer_epoch=0,
                                                                base_sequence=0, is_transactional=True,
                                                                base_timestamp=NOW, max_timestamp=NOW))
        mark = len(broker.requests)
        s3 = p.plan(s2)
        assert fetched(broker, mark) == [("orders", 1, 2)]
        assert s3.seen["orders\t1"] == Seen(4, 2, 0, 1)
        assert s3.probe["orders\t1"] == ProbeMemo(lso=2, end=4, pid=9, first=2, first_ts=NOW)
        assert s3.reads == {"orders\t1": ProbeRead(2, 4, True)} and s3.emit == ["orders\t1"]
        assert s3.parts["orders\t1"] == Position(4, False)
        assert s3.parts["orders\t0"] is s1.parts["orders\t0"] and s3.probe["orders\t0"] is s1.probe["orders\t0"]
        # the columns mirror the dicts, and the offset log's compact form reads back to the same plan
        logged = PlanState.from_json(json.loads(json.dumps(s3.to_json())))
        assert logged == s3 and logged.cols is not None and logged.cols.keys == s3.cols.keys
        assert logged.cols.next.tolist() == s3.cols.next.tolist() == [1, 4]
        assert logged.cols.lso.tolist() == s3.cols.lso.tolist() == [0, 2]
        assert logged.parts["orders\t1"] == Position(4, False)  # after a restart reading goes on at 4
        # Spark replays an uncommitted micro-batch from the log alone (MicroBatchExecution.
        # populateStartOffsets: its entry and the one before it): partitions(start, end) plans the
        # same reads, orders-1's window [2, 4) at its LSO
        replay = planned_ranges(PlanState.from_json(json.loads(json.dumps(s2.to_json()))), logged)
        assert [vars(r) for r in replay] == [vars(r) for r in planned_ranges(s2, s3)]
        assert [(r.topic, r.partition, r.start, r.end, r.probe) for r in replay] == [("orders", 1, 2, 4, True)]


def test_an_unchanged_partition_whose_transaction_grew_old_is_followed(tmp_path, wires):
    """Offsets unchanged is not enough to skip a partition: its probed transaction becomes old
    enough to be a finding (``probe_follow_after_ms``), so the plan reads it in full from its LSO
    (``_probe_decide``: the same oldest open transaction, now followed) although no offset moved.
    Producer 7's transaction on orders-0 started two hours ago (``OLD``); the option drops from
    never to one second between the plans: the second plan follows orders-0 from its LSO 0 to its
    high watermark 3 (a window: it starts at the LSO)."""
    orders_log(tmp_path / "logs")
    with FakeKafkaBroker(tmp_path / "logs") as broker:
        p = planner(broker, wires(broker), read_mode="probe", probe_follow_after_ms=NEVER)
        s1 = p.plan(p.initial())
        assert s1.reads == {"orders\t0": ProbeRead(0, 1, True)}
        p.opts["probe_follow_after_ms"] = 1000
        s2 = p.plan(s1)
        assert s2.reads == {"orders\t0": ProbeRead(0, 3, True)}
        assert s2.probe["orders\t0"].follow == 3 and s2.parts["orders\t0"] == Position(3, False)


def test_offset_json_written_before_the_columns_is_read():
    """A checkpoint's offset log entry written before the compact form (``parts`` and ``seen`` as
    one entry per partition, no ``cols``) reads into the same plan; the compact form of that
    plan holds the rows with a position and facts packed in ``cols`` (kafka_offset_pack.py; its
    form is tests/test_kafka_offset_log.py's subject), the rest as before, and reads back to it."""
    old = {"parts": {"orders\t0": [1, False], "orders\t1": [2, True], "x\t0": [5, False]}, "clock": 7, "planned": 7,
           "ids": {}, "resets": {}, "unavail": {}, "dropped": {}, "gone": {}, "starts": {},
           "seen": {"orders\t0": [3, 0, 0, 1], "orders\t1": [2, None, None, 2]}, "behind": {}, "rereads": {},
           "unread_seen": -1, "lagging": [], "txn_n": 0,
           "probe": {"orders\t0": {"lso": 0, "end": 1, "pid": 7, "first": 0, "first_ts": 5}}, "reads": {},
           "closes": {}, "emit": []}
    state = PlanState.from_json(old)
    assert state.cols is None
    assert state.parts == {"orders\t0": Position(1, False), "orders\t1": Position(2, True), "x\t0": Position(5, False)}
    assert state.seen == {"orders\t0": Seen(3, 0, 0, 1), "orders\t1": Seen(2, None, None, 2)}
    assert state.probe == {"orders\t0": ProbeMemo(0, 1, 7, 0, 5)}
    from streaming.sources.kafka_plan_state import PlanColumns

    cols = PlanColumns.of_keys([("orders", [0, 1]), ("x", [0])])
    cols.fill(range(3), state.parts, state.seen)
    state.cols = cols
    js = json.loads(json.dumps(state.to_json()))
    assert js["cols"]["topics"] == ["orders"] and js["cols"]["rows"] == 2  # x-0 has no facts: not a row
    assert js["parts"] == {"x\t0": [5, False]} and js["seen"] == {}  # x-0 has no facts: kept as before
    back = PlanState.from_json(js)
    assert back == state and back.parts == state.parts and back.seen == state.seen


def test_malformed_offset_columns_are_a_clear_error():
    """An offset log entry whose ``cols`` arrays disagree in length (a damaged checkpoint) is
    refused naming the topic, never read as a shorter plan; a partition in both ``cols`` and
    ``parts`` is refused too (each partition has one place)."""
    bad = {"parts": {}, "clock": 1, "planned": 1, "cols": {"orders": [[0, 1], [1], [0, 0], [3, 2], [0, 2], [0, 0],
                                                                     [1, 1]]}}
    with pytest.raises(ValueError, match="orders"):
        PlanState.from_json(bad)
    twice = {"parts": {"orders\t0": [1, False]}, "clock": 1, "planned": 1,
             "cols": {"orders": [[0], [1], [0], [3], [0], [0], [1]]}}
    with pytest.raises(ValueError, match="both in cols and in parts"):
        PlanState.from_json(twice)
