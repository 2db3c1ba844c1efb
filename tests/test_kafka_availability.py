"""Issue 14: per-partition availability on the live path, against the broker fake.

The fake models each outage after the Apache Kafka source it cites (tests/kafka_fake_broker.py:
``offline``/``online``, ``fail_partition``, ``stop_node``/``start_node``, ``move_leader``);
these tests drive the ``kafka-txn`` source's planning and reading and the driver-side
availability records (streaming/availability.py).
"""

from __future__ import annotations

import time

import pandas as pd
import pytest

from streaming.availability import Availability
from streaming.config import as_config
from streaming.simulate.encode import encode_batch
from streaming.simulate.scenarios import write_scenario
from streaming.sources.kafka import KafkaStreamReader, read_partition
from streaming.sources.kafka_wire import KafkaUnavailable
from tests.conftest import kafka_watchdog
from tests.kafka_fake_broker import FakeKafkaBroker
from tests.streaming_wait import wait_until

FAST = {"request_timeout_ms": "2000", "retries": "2", "retry_backoff_ms": "10", "cluster": "live"}
TXN = "__transaction_state"


_watchdog = kafka_watchdog(120)


@pytest.fixture
def sc(tmp_path):
    base = int(time.time() * 1000) - 3_600_000
    return write_scenario("write-after-marker", tmp_path / "logs", seed=5, base_time_ms=base)


def reader(broker: FakeKafkaBroker, **opts: str) -> KafkaStreamReader:
    return KafkaStreamReader({"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*",
                              "starting_offsets": "earliest", **FAST, **opts})


def events(r: KafkaStreamReader, start: dict, end: dict) -> pd.DataFrame:
    return pd.concat([read_partition(p, r.opts) for p in r.partitions(start, end)], ignore_index=True)


def plan(r: KafkaStreamReader, start: dict) -> dict:
    """The next plan, once every unavailable partition's retry backoff (``retry_at``) has passed."""
    due = max((d["retry_at"] for d in start.get("unavail", {}).values()), default=0)
    wait_until(lambda: time.time() * 1000 >= due, "the unavailable partitions' retry backoff", timeout_s=10,
               poll_s=0.005)
    return r.latestOffset(start, None)


def progressed(ev: pd.DataFrame) -> set[tuple[str, int]]:
    prog = ev[ev["kind"] == "progress"]
    return set(zip(prog["topic"], prog["partition"].astype(int), strict=True))


def unavailable_gaps(ev: pd.DataFrame) -> dict[tuple[str, int], str]:
    g = ev[(ev["kind"] == "gap") & ev["reason"].str.startswith("unavailable: ", na=False)]
    return {(t, int(p)): r for t, p, r in zip(g["topic"], g["partition"], g["reason"], strict=True)}


def offsets_read(ev: pd.DataFrame, topic: str, partition: int) -> list[int]:
    d = ev[ev["kind"].isin(["data", "marker"]) & (ev["topic"] == topic) & (ev["partition"] == partition)]
    return sorted(o for f, last in zip(d["first_offset"], d["last_offset"], strict=True)
                  for o in range(int(f), int(last) + 1))


def all_partitions(broker: FakeKafkaBroker) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in broker.topics().items() for p in ps}


def test_partitions_offline_from_the_start_do_not_stop_the_others(sc):
    """Item 1/7: leader -1 from the start (KRaftMetadataCache: LEADER_NOT_AVAILABLE) for one
    coordinator partition and one data partition; every other partition is read and has its
    progress row; the two come back with the next leader epoch and are read from where the
    starting rule puts them."""
    with FakeKafkaBroker(sc.root) as broker:
        broker.offline(TXN, 34)
        broker.offline("orders", 0)
        r = reader(broker)
        init = r.initialOffset()  # old code: KafkaUnavailable after the retries
        down = {(TXN, 34), ("orders", 0)}
        assert {tuple(k.split("\t")) for k in init["unavail"]} == {(t, str(p)) for t, p in down}
        end = plan(r, init)
        ev = events(r, init, end)
        assert set(unavailable_gaps(ev)) == down
        assert all("LEADER_NOT_AVAILABLE" in reason for reason in unavailable_gaps(ev).values())
        assert progressed(ev) == all_partitions(broker) - down
        assert offsets_read(ev, "orders", 1)  # the rest is read in the same micro-batch
        broker.online(TXN, 34)
        broker.online("orders", 0)
        end2 = plan(r, end)
        assert not end2["unavail"]
        ev2 = events(r, end, end2)
        assert not unavailable_gaps(ev2) and progressed(ev2) == all_partitions(broker)
        assert offsets_read(ev2, "orders", 0)[0] == 0  # earliest: from its log start
        assert (ev2["kind"] == "txn_state").any()


def test_partition_offline_mid_run_resumes_where_reading_stopped(sc):
    """Item 1/7: a partition goes offline mid-run (no gap is invented for the time it is down),
    new records arrive meanwhile, it returns with the next leader epoch and reading resumes at the
    offset where it stopped: every offset read exactly once."""
    with FakeKafkaBroker(sc.root) as broker:
        r = reader(broker)
        init = r.initialOffset()
        end = plan(r, init)
        first = offsets_read(events(r, init, end), "orders", 1)
        stopped = end["parts"]["orders\t1"][0]
        broker.offline("orders", 1)
        down = plan(r, end)
        assert "orders\t1" in down["unavail"] and down["parts"]["orders\t1"][0] == stopped
        ev = events(r, end, down)
        assert ("orders", 1) in unavailable_gaps(ev) and ("orders", 1) not in progressed(ev)
        assert ("orders", 0) in progressed(ev)
        now = int(time.time() * 1000)
        broker.append_batches("orders", 1, encode_batch(0, 2, producer_id=4242, producer_epoch=0, base_sequence=0,
                                                        is_transactional=True, base_timestamp=now,
                                                        max_timestamp=now))
        broker.online("orders", 1)
        epoch = broker.partition_state("orders", 1).leader_epoch
        assert epoch >= 2  # offline and back: two elections
        back = plan(r, down)
        ev = events(r, down, back)
        again = offsets_read(ev, "orders", 1)
        assert ("orders", 1) in progressed(ev) and not (ev["kind"] == "gap").any()
        assert again and again[0] == stopped
        assert len(set(first + again)) == len(first + again)  # nothing read twice
        assert again[-1] == back["parts"]["orders\t1"][0] - 1


@pytest.mark.parametrize("error", ["KAFKA_STORAGE_ERROR", "REPLICA_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER"])
def test_leader_errors_make_only_that_partition_unavailable(sc, error):
    """Item 1: ReplicaManager.getPartitionOrError errors on one partition's leader."""
    with FakeKafkaBroker(sc.root) as broker:
        broker.fail_partition("orders", 1, error)
        r = reader(broker)
        init = r.initialOffset()
        end = plan(r, init)
        ev = events(r, init, end)
        assert set(unavailable_gaps(ev)) == {("orders", 1)} and error in unavailable_gaps(ev)[("orders", 1)]
        assert progressed(ev) == all_partitions(broker) - {("orders", 1)}
        broker.heal_partition("orders", 1)
        end2 = plan(r, end)
        assert ("orders", 1) in progressed(events(r, end, end2))


def test_leader_moves_between_planning_and_fetch_no_gap_no_duplicate(sc):
    """Item 4: the leader moves to another node after ListOffsets (Fetch answered
    NOT_LEADER_OR_FOLLOWER by the old one), and a stale leader epoch is fenced once
    (Partition.checkCurrentLeaderEpoch): metadata is refreshed, the read retried on the new
    leader; the events equal those of an undisturbed read."""
    with FakeKafkaBroker(sc.root, num_nodes=3) as broker:
        r = reader(broker)
        init = r.initialOffset()
        end = plan(r, init)
        calm = events(r, init, end)
        old = broker.leader("orders", 0)
        broker.move_leader("orders", 0, next(n for n in broker.node_ids if n != old))
        broker.inject_partition_error("orders", 1, "FENCED_LEADER_EPOCH", apis=("fetch",))
        broker.inject_partition_error(TXN, 48, "UNKNOWN_LEADER_EPOCH", apis=("fetch",))
        moved = events(r, init, end)
        cols = ["kind", "topic", "partition", "producer_id", "first_offset", "last_offset", "marker"]
        assert not (moved["kind"] == "gap").any()
        key = cols[:2] + ["partition", "first_offset"]
        assert (moved[cols].sort_values(key).reset_index(drop=True)
                .equals(calm[cols].sort_values(key).reset_index(drop=True)))


def test_a_broker_that_stops_answering_makes_only_its_partitions_unavailable(sc):
    """Item 1/7: one of three brokers stops; Metadata from the others reports its partitions
    leaderless, they are unavailable, the rest is read; it comes back and they are read again."""
    with FakeKafkaBroker(sc.root, num_nodes=3) as broker:
        r = reader(broker)
        init = r.initialOffset()
        end = plan(r, init)
        events(r, init, end)
        victim = next(n for n in broker.node_ids if n != 1 and any(
            broker.leader(t, p) == n for t, p in all_partitions(broker)))
        led = {(t, p) for t, p in all_partitions(broker) if broker.leader(t, p) == victim}
        broker.stop_node(victim)
        down = plan(r, end)
        ev = events(r, end, down)
        assert set(unavailable_gaps(ev)) == led
        assert progressed(ev) == all_partitions(broker) - led
        broker.start_node(victim)
        back = plan(r, down)
        assert progressed(events(r, down, back)) == all_partitions(broker)


def test_no_broker_answering_waits_then_fails_naming_the_bootstrap_servers(sc):
    """Item 5: nothing reachable → until ``unavailable_timeout_ms`` every partition is unavailable
    (its gap row "unavailable: no broker answered", no progress row, offsets unchanged, nothing
    read: the job's records, progress line and metrics show the outage), then one error naming the
    bootstrap servers. (Before issue 21 the plan stayed unchanged and Spark ran no micro-batch: the
    outage showed nowhere but in a log warning.)"""
    with FakeKafkaBroker(sc.root) as broker:
        r = reader(broker, unavailable_timeout_ms="600000", retries="1")
        init = r.initialOffset()
        end = plan(r, init)
        broker.stop()
        down = r.latestOffset(end, None)  # within the timeout: every partition unavailable
        assert down["parts"] == end["parts"] and down["clock"] == end["clock"]
        ev = events(r, end, down)
        assert progressed(ev) == set()
        assert offsets_read(ev, "orders", 0) == []
        every = {(t, int(p)) for t, p in (k.split("\t") for k in end["parts"])}
        assert unavailable_gaps(ev) == {tp: "unavailable: no broker answered" for tp in every}
        r.opts["unavailable_timeout_ms"] = 0
        with pytest.raises(KafkaUnavailable) as err:
            r.latestOffset(end, None)
        assert "no broker answered" in str(err.value) and broker.bootstrap_servers in str(err.value)


def test_run_once_rides_through_a_short_outage(sc):
    """Item 5: with ``ride_through_ms`` (``run --once``) planning waits for a partition whose
    leader election ends within the budget instead of leaving it unread."""
    import threading

    with FakeKafkaBroker(sc.root) as broker:
        r = reader(broker, ride_through_ms="20000")
        init = r.initialOffset()
        broker.offline("orders", 1)

        def asked() -> int:
            return len(broker.requests_for("metadata")) + len(broker.requests_for("list_offsets"))

        # what one plan without the ride-through asks while the partition is leaderless
        plain = reader(broker)
        plain_init = plain.initialOffset()
        before = asked()
        assert plain.latestOffset(plain_init, None)["unavail"]
        one_plan = asked() - before
        before = asked()

        def election_ends() -> None:
            # the election ends once planning has asked about the leaderless partition more than a
            # plan that gives up would (it is riding through), not after a guessed time
            wait_until(lambda: asked() >= before + one_plan + 2, "the ride-through's repeated questions",
                       timeout_s=30, poll_s=0.005)
            broker.online("orders", 1)

        election = threading.Thread(target=election_ends, daemon=True)
        election.start()
        end = r.latestOffset(init, None)
        election.join(30)
        assert not end["unavail"]
        assert ("orders", 1) in progressed(events(r, init, end))


# ------------------------------------------------------------------ driver side: the records
class _Held:
    """The enricher's hold/release surface."""

    def __init__(self) -> None:
        self.held: set[str] = set()

    def hold(self, tp: str) -> None:
        self.held.add(tp)

    def release(self, tp: str) -> None:
        self.held.discard(tp)


def _gap(topic, partition, now, error="LEADER_NOT_AVAILABLE"):
    return {"topic": topic, "partition": partition, "cluster": "c", "reason": f"unavailable: {error}", "now_ms": now}


def _prog(topic, partition, now):
    return {"topic": topic, "partition": partition, "cluster": "c", "now_ms": now}


def test_availability_records_once_per_change_stale_findings_and_held_verdicts():
    """Items 1 and 3: one ``unavailable`` record when a partition becomes unreadable (keyed
    cluster/topic/partition), none while it stays so, one ``available`` when it is read again;
    open findings on it are re-published once with ``stale`` and ``last_read_ms``; the enricher
    holds new verdicts on it until it is read again."""
    av = Availability()
    finding = {"key": "c/orders/0/7/3", "topic": "orders", "partition": 0, "status": "hanging"}
    active = {finding["key"]: {"status": "hanging", "alert": finding}}
    assert av.observe([], [_prog("orders", 0, 1000)], active, 1000) == []
    out = av.observe([_gap("orders", 0, 2000)], [_prog("orders", 1, 2000)], active, 2000)
    assert [(o["key"], o["status"]) for o in out] == [("c/orders/0", "unavailable"), ("c/orders/0/7/3", "hanging")]
    assert out[0]["reason"] == "LEADER_NOT_AVAILABLE" and out[0]["last_read_ms"] == 1000
    assert out[1]["stale"] is True and out[1]["last_read_ms"] == 1000
    assert av.observe([_gap("orders", 0, 3000)], [], active, 3000) == []
    assert av.unavailable_by_topic(5000) == {"orders": (1, 3000)}
    held = _Held()
    av.apply_holds(held)
    assert held.held == {"orders-0"}
    out = av.observe([], [_prog("orders", 0, 4000)], active, 4000)
    assert [(o["key"], o["status"]) for o in out] == [("c/orders/0", "available")]
    av.apply_holds(held)
    assert held.held == set()
    # a coordinator partition: the record, never a stale finding
    out = av.observe([_gap(TXN, 3, 5000)], [], active, 5000)
    assert [o["status"] for o in out] == ["unavailable"]


def test_availability_records_match_the_alert_schema():
    import jsonschema

    from tests.conftest import ROOT

    schema = __import__("json").loads((ROOT / "streaming" / "alert.schema.json").read_text())
    av = Availability()
    recs = av.observe([_gap("orders", 0, 2000)], [], {}, 2000)
    recs += av.observe([], [_prog("orders", 0, 3000)], {}, 3000)
    for r in recs:
        jsonschema.validate(r, schema)
    with pytest.raises(jsonschema.ValidationError):  # a finding still needs every finding field
        jsonschema.validate({"schema_version": 1, "key": "c/t/0/1/2", "status": "hanging", "cluster": "c",
                             "topic": "t", "partition": 0}, schema)


@pytest.mark.spark
def test_run_once_judges_the_rest_and_exits_3_naming_the_unread_partition(spark, tmp_path):
    """Item 5 end to end: ``run --once`` with a data partition that stays offline publishes the
    finding on the readable partition and the ``unavailable`` record, then exits with code 3."""
    from streaming.config import load
    from streaming.runner import EXIT_UNREAD, run_job
    from streaming.sinks.jsonl import read_jsonl
    from tests.test_kafka_source import live_scenario

    scn = live_scenario(tmp_path)
    with FakeKafkaBroker(scn.root) as broker:
        broker.offline("orders", 1)
        cfg = load(None, env={})
        cfg["cluster"] = "live"
        cfg["kafka"].update(bootstrap_servers=broker.bootstrap_servers, topic_pattern=".*",
                            request_timeout_ms=3000, once_ride_through_ms=500)
        cfg["streaming"].update(checkpoint=str(tmp_path / "ck"))
        cfg["sinks"].update(enabled=["jsonl"], jsonl_path=str(tmp_path / "alerts.jsonl"))
        rc = run_job(as_config(cfg), source="kafka", path=None, once=True)
    out = read_jsonl(str(tmp_path / "alerts.jsonl"))
    assert rc == EXIT_UNREAD
    assert [(a["key"], a["status"]) for a in out if a["status"] == "unavailable"] == [("live/orders/1", "unavailable")]
    want = {(e["topic"], e["partition"], e["producer_id"], e["first_offset"]) for e in scn.expected}
    assert {(a["topic"], a["partition"], a["producer_id"], a["first_offset"]) for a in out
            if a["status"] == "hanging"} == want


def test_lagging_partition_holds_only_its_own_verdicts():
    """Issue 12 item 3 (driver side): a progress row stamped ``lagging`` holds new verdicts on
    that partition only (Enricher.hold); once it is read through the clock they are released."""
    from streaming.alerts import AlertConfig, Enricher

    av = Availability()
    enricher = Enricher(AlertConfig("k:9092"))
    lag = dict(_prog("orders", 0, 1000), lagging=True)
    assert av.observe([], [lag, _prog("orders", 1, 1000)], {}, 1000) == []  # no availability record
    av.apply_holds(enricher)
    assert enricher.held == {"orders-0"} and av.lagging_by_topic() == {"orders": 1}
    av.observe([], [_prog("orders", 0, 2000)], {}, 2000)
    av.apply_holds(enricher)
    assert enricher.held == set() and av.lagging_by_topic() == {}
