"""Named scenarios: broker-shaped log directories plus the findings a detector must report.

Each scenario drives a :class:`~streaming.simulate.cluster_log.ClusterLog` (:data:`SCENARIOS`,
:func:`write_scenario`) and states the findings a detector must report (``Scenario.expected``),
derived from ``spec/detection.md`` §3-§4 by the scenario author, not by running a detector.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.simulate.broker_state import TXN_ID_EXPIRATION_MS, ScenarioError
from streaming.simulate.cluster_log import ClusterLog
from streaming.simulate.encode import txn_state_partition

DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms default
DEFAULT_PADDING_MS = 300_000
DEFAULT_THRESHOLD_MS = DEFAULT_MAX_TIMEOUT_MS + DEFAULT_PADDING_MS
# How far past the threshold scenarios move the clock before the final write, so that a
# transaction a detector fails to close shows up as a (false) finding.
AGE_MS = 25 * 60_000


@dataclass
class Scenario:
    """A written scenario: where, the evaluation clock and the findings a detector must report.

    ``expected``: one dict per finding at ``as_of_ms`` with default thresholds
    (``max_timeout_ms`` 900000 + ``padding_ms`` 300000), keys ``status`` (late|hanging),
    ``cause``, ``topic``, ``partition``, ``producer_id``, ``producer_epoch`` (highest epoch of the
    producer on that partition), ``first_offset``, ``coordinator_epoch`` / ``coordinator_epoch_source``
    (detection.md §4 with the whole log dir read from offset 0) and ``verified``; optional
    ``data_deleted`` and ``missing_txn_partitions`` where a scenario is about them.
    ``notes["hand_epochs"]``: the epochs were not derived from reading the partition from offset 0
    (retention, snapshots, a partial coordinator view): the author wrote them from detection.md §4.
    """

    name: str
    root: Path
    as_of_ms: int
    expected: list[dict[str, Any]]
    description: str = ""
    cluster: ClusterLog | None = field(default=None, repr=False)
    notes: dict[str, Any] = field(default_factory=dict)


def finding(
    status: str,
    cause: str,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    first_offset: int,
    coordinator_epoch: int,
    coordinator_epoch_source: str,
    verified: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """One expected finding (see :class:`Scenario`); ``extra``: ``data_deleted``,
    ``missing_txn_partitions``, ``from_files``: what the log dir's files alone prove when it is
    less than a broker's answers (detection.md §0: e.g. ``{"verified": False}`` when a coordinator
    copy's newest record predates the transaction, ``{"cause": ..., "verified": False}``), written
    by hand like the rest; the finding itself is what the live path (every partition read to its
    high watermark) or ``scan --bootstrap-server`` finds."""
    unknown = set(extra) - {"data_deleted", "missing_txn_partitions", "from_files"}
    if unknown:
        raise ValueError(f"unknown finding fields {sorted(unknown)}")
    return {
        **extra,
        "status": status,
        "cause": cause,
        "topic": topic,
        "partition": partition,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "first_offset": first_offset,
        "coordinator_epoch": coordinator_epoch,
        "coordinator_epoch_source": coordinator_epoch_source,
        "verified": verified,
    }


def finding_from_log(
    c: ClusterLog, status: str, cause: str, topic: str, partition: int, producer_id: int, first_offset: int,
    from_files: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An expected finding whose epochs are read off the written log (:meth:`ClusterLog.abort_params`).

    For scenarios whose layout is random, where the author cannot write the numbers down; the
    named scenarios state them as literals so that ``tests/test_scenarios.py`` can check the two
    against each other. Call it once the producer has written its last batch on the partition.
    """
    ap = c.abort_params(topic, partition, producer_id)
    return finding(
        status,
        cause,
        topic,
        partition,
        producer_id,
        ap["producer_epoch"],
        first_offset,
        ap["coordinator_epoch"],
        ap["coordinator_epoch_source"],
        **({"from_files": from_files} if from_files else {}),
    )


def _cluster(root: Path, seed: int, base_time_ms: int, **kw: Any) -> ClusterLog:
    kw.setdefault("coordinator_epoch", 3)
    return ClusterLog(root, base_time_ms, seed=seed, **kw)


def _finish(
    c: ClusterLog, name: str, expected: list[dict[str, Any]], description: str, **notes: Any
) -> Scenario:
    """Age everything past the alert threshold, then a last healthy transaction so that the
    newest timestamp (the evaluation clock) is a ``__transaction_state`` record: the coordinator
    view is read up to ``as_of_ms``."""
    c.advance(AGE_MS)
    hb = c.producer("txnwatch-heartbeat", 0)
    hb.begin()
    hb.send("heartbeat", 0, 1)
    hb.commit()
    c.flush()
    c.write_end_checkpoints()  # as a broker's log dir holds them (copied with the files, they prove the ends)
    return Scenario(name, c.root, c.max_timestamp, expected, description, c, dict(notes))


def _find_ids(prefix: str, txn_partition: int, n: int, partitions: int = 50) -> list[str]:
    """Deterministic transactional ids that share one ``__transaction_state`` partition."""
    out, i = [], 0
    while len(out) < n:
        tid = f"{prefix}-{i}"
        if txn_state_partition(tid, partitions) == txn_partition:
            out.append(tid)
        i += 1
    return out


def scenario_commit(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """TV0 producer commits a transaction over three partitions (one gzip batch), with a plain
    and an idempotent producer on the same partitions. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=5)
    c.create_topic("payments", 1, leader_epoch=2)
    p = c.producer("order-service", 0)
    p.begin()
    p.send("orders", 0, 3)
    p.send("orders", 1, 2, compressed=True)
    p.send("payments", 0, 1)
    c.produce("orders", 0, 2)
    c.idempotent_producer().send("orders", 1, 4)
    p.send("orders", 0, 1)
    p.commit()
    return _finish(c, "commit", [], "TV0 commit across 3 partitions")


def scenario_client_abort(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """Client aborts: TV0 (same-epoch ABORT markers) and TV1 (flexible v1 values) commit then
    abort. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=1)
    p0 = c.producer("abort-v0", 0)
    p0.begin()
    p0.send("orders", 0, 2)
    p0.send("orders", 1, 1)
    p0.abort()
    p0.begin()
    p0.send("orders", 0, 1)
    p0.commit()
    p1 = c.producer("abort-v1", 1)
    p1.begin()
    p1.send("orders", 1, 3, compressed=True)
    p1.commit()
    p1.begin()
    p1.send("orders", 1, 1)
    p1.send("orders", 0, 1)
    p1.abort()
    return _finish(c, "client-abort", [], "client aborts under TV0 and TV1")


def scenario_timeout_abort(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """The coordinator aborts timed-out transactions with epoch E+1 (markers E+1) for a TV0 and a
    TV2 producer; both re-initialise (E+2) and commit again. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("events", 2, leader_epoch=4)
    a = c.producer("slow-v0", 0, timeout_ms=60_000)
    b = c.producer("slow-v2", 2, timeout_ms=30_000)
    a.begin()
    a.send("events", 0, 2)
    a.send("events", 1, 1)
    b.begin()
    b.send("events", 0, 1)
    c.advance(61_000)
    a.timeout_abort()
    b.timeout_abort()
    a.reinit()
    b.reinit()
    a.begin()
    a.send("events", 0, 1)
    a.commit()
    b.begin()
    b.send("events", 0, 2)
    b.commit()
    return _finish(c, "timeout-abort", [], "coordinator timeout aborts with epoch bump, TV0 and TV2")


def scenario_fenced(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """A new instance fences a producer with an open transaction: PrepareAbort E+1, ABORT
    markers E+1, CompleteAbort, Empty E+2; the new instance commits with E+2. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("ledger", 2, leader_epoch=6)
    old = c.producer("ledger-writer", 0)
    old.begin()
    old.send("ledger", 0, 2)
    old.send("ledger", 1, 2)
    new = old.fence()
    new.begin()
    new.send("ledger", 0, 1)
    new.commit()
    # the zombie's late write is rejected on partitions where the E+1 marker landed
    try:
        old.zombie_send("ledger", 1, 1)
    except ScenarioError:
        pass
    else:  # pragma: no cover - the broker check must reject it
        raise ScenarioError("fenced zombie write was accepted")
    return _finish(c, "fenced", [], "new instance fences an open transaction")


def scenario_tv2_epoch_walk(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """TV2: every commit/abort bumps the epoch; markers carry E+1 and the next transaction's data
    uses that same E+1; an abort without data (PrepareAbort from CompleteCommit) bumps too. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=7)
    p = c.producer("tv2-app", 2)
    p.begin()
    p.send("orders", 0, 2)
    p.commit()  # data e0, markers e1
    p.begin()
    p.send("orders", 0, 1)
    p.abort()  # data e1, markers e2
    p.begin()
    p.send("orders", 0, 1)
    p.send("orders", 1, 2)
    p.commit()  # e2 -> e3
    p.begin()
    p.send("orders", 1, 3, compressed=True)
    p.commit()  # e3 -> e4
    p.abort(empty=True)  # e4 -> e5, no markers
    p.begin()
    p.send("orders", 0, 1)
    p.commit()  # e5 -> e6
    return _finish(c, "tv2-epoch-walk", [], "TV2 epoch walk e0..e6")


def scenario_pid_rotation(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """TV2 epoch overflow: data with epoch 32766 is committed with PrepareCommit (pid P, epoch
    32767, NextProducerId P'), markers P/32767, CompleteCommit (P', epoch 0, PreviousProducerId P);
    the next transaction writes P'/0. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=2)
    p = c.producer("rotating-app", 2, initial_epoch=32764)
    for n in (1, 2, 1):
        p.begin()
        p.send("orders", 0, n)
        p.commit()  # 32764 -> 32765 -> 32766 -> rotation
    p.begin()
    p.send("orders", 0, 2)
    p.commit()
    return _finish(c, "pid-rotation", [], "TV2 producer-id rotation at epoch 32767")


def scenario_write_after_marker(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """KAFKA-9144: a TV0 producer commits; a late batch of the same epoch lands right after the
    COMMIT marker on orders-0 (broker < 3.6). The producer keeps working on orders-1 only.
    Expected: hanging / write-after-marker, coordinator epoch of the last marker (3)."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=5)
    p = c.producer("late-writer", 0)
    p.begin()
    p.send("orders", 0, 2)
    p.send("orders", 1, 2)
    p.commit()
    late = p.zombie_send("orders", 0, 1)
    c.produce("orders", 0, 1)
    for _ in range(2):
        p.begin()
        p.send("orders", 1, 1)
        p.commit()
    exp = [
        finding("hanging", "write-after-marker", "orders", 0, p.producer_id, 0, late, 3, "last-marker"),
    ]
    return _finish(c, "write-after-marker", exp, "late write after the COMMIT marker")


def scenario_failover_write_after_marker(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Like write-after-marker, but the coordinator fails over (epoch 3 → 4) after the marker:
    the legacy abort must use the coordinator epoch the broker holds (3, from the last marker)."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=1)
    p = c.producer("failover-late", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    c.failover_coordinator("failover-late")
    late = p.zombie_send("orders", 0, 2)
    p.begin()
    p.send("orders", 1, 1)
    p.commit()  # markers now carry coordinator epoch 4
    exp = [finding("hanging", "write-after-marker", "orders", 0, p.producer_id, 0, late, 3, "last-marker")]
    return _finish(c, "failover-write-after-marker", exp, "late write, coordinator failover 3->4")


def scenario_partition_never_added(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Pre-KIP-890 broker accepts transactional data for payments-0, which the producer never
    added; the commit writes markers only to orders-0. Expected: hanging /
    coordinator-finished-without-partition, log-start coordinator epoch 0."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=3)
    c.create_topic("payments", 1, leader_epoch=8)
    p = c.producer("forgetful-app", 0)
    p.begin()
    p.send("orders", 0, 2)
    first = p.send("payments", 0, 1, add_partition=False)
    p.send("payments", 0, 2, compressed=True, add_partition=False)
    p.commit()
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    exp = [
        finding(
            "hanging",
            "coordinator-finished-without-partition",
            "payments",
            0,
            p.producer_id,
            0,
            first,
            0,
            "log-start",
        )
    ]
    return _finish(c, "partition-never-added", exp, "data for a partition never added to the transaction")


def scenario_txn_id_expired(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """A zombie batch opened a transaction on audit-0, a partition the coordinator never knew;
    a week later the coordinator expires the (CompleteCommit) id together with another idle id
    of the same ``__transaction_state`` partition (one tombstone batch with two records).
    Expected: hanging / coordinator-unaware."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=2)
    c.create_topic("audit", 1, leader_epoch=0)
    tid, other = _find_ids("legacy-app", 17, 2)
    p = c.producer(tid, 0)
    q = c.producer(other, 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    first = p.zombie_send("audit", 0, 2)
    q.begin()
    q.send("orders", 0, 1)
    q.commit()
    c.advance(TXN_ID_EXPIRATION_MS)
    c.expire(tid, other)
    exp = [finding("hanging", "coordinator-unaware", "audit", 0, p.producer_id, 0, first, 0, "log-start")]
    return _finish(c, "txn-id-expired", exp, "transactional id expired while a zombie txn is open")


def scenario_markers_pending(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """PrepareCommit is written but the markers never are (broker/network trouble). Both
    partitions are late / markers-pending (never an abort); orders-0 had an earlier marker."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=4)
    p = c.producer("stuck-markers", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    p.begin()
    f0 = p.send("orders", 0, 2)
    f1 = p.send("orders", 1, 1)
    p.send("orders", 0, 1)
    p.commit(markers=[])
    pid = p.producer_id
    exp = [
        finding("late", "markers-pending", "orders", 0, pid, 0, f0, 3, "last-marker"),
        finding("late", "markers-pending", "orders", 1, pid, 0, f1, 0, "log-start"),
    ]
    return _finish(c, "markers-pending", exp, "PrepareCommit without markers")


def scenario_coordinator_stuck(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """An Ongoing transaction (timeout 60 s) that the coordinator never aborts: 25+ minutes later
    ``now - start > timeout + padding``. Expected: late / coordinator-stuck."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=0)
    p = c.producer("never-timed-out", 1)
    p.begin()
    first = p.send("orders", 0, 3)
    # From files, unverified (detection.md §0, revision 3.1): the coordinator wrote Ongoing before
    # the first batch (AddPartitionsToTxn precedes Produce), so the copy's newest record is older
    # than O's first write: it cannot show it is current (coordinator-copy-behind).
    exp = [finding("late", "coordinator-stuck", "orders", 0, p.producer_id, 0, first, 0, "log-start",
                   from_files={"verified": False})]
    return _finish(c, "coordinator-stuck", exp, "Ongoing transaction the coordinator does not abort")


def scenario_long_transaction(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """A producer with ``transaction.timeout.ms`` = 1 h (broker max raised) whose clock is 10 min
    behind the coordinator's. The threshold is max(900000, 3600000) + 300000 = 3.9 M ms; at the
    evaluation time ``now - first_ts`` ≈ 4.3 M ms (a finding) but ``now - start`` ≈ 3.7 M ms ≤
    timeout + padding (not stuck). Expected: late / long-transaction."""
    timeout, skew = 3_600_000, -600_000
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("reports", 1, leader_epoch=1)
    p = c.producer("nightly-report", 0, timeout_ms=timeout, clock_skew_ms=skew)
    p.begin()
    first = p.send("reports", 0, 5)
    start = c.txn_metadata("nightly-report").start_ms
    c.advance(timeout + DEFAULT_PADDING_MS - 100_000 - AGE_MS)
    exp = [finding("late", "long-transaction", "reports", 0, p.producer_id, 0, first, 0, "log-start")]
    sc = _finish(c, "long-transaction", exp, "long transaction within its (raised) timeout + padding")
    first_ts = c.batches("reports", 0)[0].base_timestamp
    if not sc.as_of_ms - start <= timeout + DEFAULT_PADDING_MS < sc.as_of_ms - first_ts:  # pragma: no cover
        raise ScenarioError("long-transaction timing does not satisfy its own premise")
    return sc


def scenario_coordinator_failover(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Coordinator failover mid-commit: PrepareCommit under epoch 3, COMMIT reaches orders-0 with
    coordinator epoch 3, then the ``__transaction_state`` leader changes (epoch 4); the new
    coordinator resends markers to both partitions (a duplicate on orders-0) and writes
    CompleteCommit with partitionLeaderEpoch 4. Later transactions use 4. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=9)
    p = c.producer("failover-app", 0)
    other = c.producer("bystander", 2)
    p.begin()
    p.send("orders", 0, 2)
    p.send("orders", 1, 1)
    other.begin()
    other.send("orders", 1, 1)
    p.commit(markers=[("orders", 0)])
    c.failover_coordinator("failover-app")
    c.write_markers("failover-app")
    other.commit()
    c.bump_leader_epoch("orders", 1)  # a data-partition leader change too
    p.begin()
    p.send("orders", 1, 1)
    p.commit()
    return _finish(c, "coordinator-failover", [], "coordinator epoch bump 3->4 during a commit")


def scenario_compacted_empty_control(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """A compacted changelog: the cleaner removed the data of a committed (superseded) and of an
    aborted transaction and, past the delete horizon, their marker records, leaving count-0
    control batches. A later transaction in the active segment commits normally. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("store-changelog", 1, leader_epoch=2, compacted=True)
    p = c.producer("stream-app", 0)
    q = c.producer("stream-app-2", 1)
    c.produce("store-changelog", 0, 1)
    p.begin()
    p.send("store-changelog", 0, 3)
    q.begin()
    q.send("store-changelog", 0, 2)
    p.send("store-changelog", 0, 1)
    p.commit()
    q.abort()
    c.roll("store-changelog", 0)
    c.produce("store-changelog", 0, 1)
    p.begin()
    p.send("store-changelog", 0, 2)
    p.commit()
    c.roll("store-changelog", 0)
    c.produce("store-changelog", 0, 1)
    c.compact("store-changelog", 0, delete_horizon_passed=True)
    p.begin()
    p.send("store-changelog", 0, 1)
    p.commit()
    return _finish(c, "compacted-empty-control", [], "empty control batches left by the cleaner")


def scenario_txn_state_compacted(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """``__transaction_state`` compacted: older records per transactional id removed, an expired
    id's tombstone removed after the delete horizon. Findings survive compaction: a partition
    never added (hanging / coordinator-finished-without-partition) and a zombie transaction of the
    vanished id (hanging / coordinator-unaware)."""
    c = _cluster(root, seed, base_time_ms, segment_bytes=1 << 20)
    c.create_topic("orders", 2, leader_epoch=3)
    ids = _find_ids("compacted-app", 7, 3)
    busy = c.producer(ids[0], 0)
    forgetful = c.producer(ids[1], 1)
    gone = c.producer(ids[2], 0)
    for _ in range(3):
        busy.begin()
        busy.send("orders", 0, 1)
        busy.commit()
    forgetful.begin()
    forgetful.send("orders", 0, 1)
    nf = forgetful.send("orders", 1, 1, add_partition=False)
    forgetful.commit()
    gone.begin()
    gone.send("orders", 0, 1)
    gone.commit()
    zf = gone.zombie_send("orders", 1, 1)
    c.advance(TXN_ID_EXPIRATION_MS)
    c.expire(ids[2])
    c.roll("__transaction_state", 7)
    busy.begin()
    busy.send("orders", 0, 1)
    busy.commit()
    c.compact("__transaction_state", 7, delete_horizon_passed=True)
    exp = [
        finding(
            "hanging",
            "coordinator-finished-without-partition",
            "orders",
            1,
            forgetful.producer_id,
            0,
            nf,
            0,
            "log-start",
        ),
        # From files: compaction removed every record of ``gone``'s id, nothing maps P, so every
        # coordinator partition should cover it, and the 48 never written are empty copies that
        # cannot show they are current (detection.md §0, revision 3.1): coordinator-unaware over
        # empty copies is unverified until a broker answers.
        finding("hanging", "coordinator-unaware", "orders", 1, gone.producer_id, 0, zf, 0, "log-start",
                from_files={"verified": False}),
    ]
    return _finish(c, "txn-state-compacted", exp, "__transaction_state after compaction")


def scenario_partial_coordinator_view(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 10 rule 1. One broker's log dir: it replicates only the ``__transaction_state``
    partition of the heartbeat id, not the one of ``pending-elsewhere``, whose PrepareCommit is
    written and whose markers never are (markers-pending). No partition read maps the producer
    and the view is incomplete: hanging / exceeds-max-timeout, verified false, the 49 missing
    partitions listed; never coordinator-unaware (aborting would break the decided commit).
    Epochs as the data partitions show them: orders-0 holds the producer's COMMIT of an earlier
    transaction (coordinator epoch 3, last-marker), orders-1 was read from 0 without one
    (log-start)."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=4)
    tid = "pending-elsewhere"
    if c.txn_partition(tid) == c.txn_partition("txnwatch-heartbeat"):  # pragma: no cover - fixed ids
        raise ScenarioError("the scenario needs two different __transaction_state partitions")
    p = c.producer(tid, 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    p.begin()
    f0 = p.send("orders", 0, 2)
    f1 = p.send("orders", 1, 1)
    p.commit(markers=[])
    keep = c.txn_partition("txnwatch-heartbeat")
    missing = sorted(set(range(c.txn_partitions)) - {keep})
    pid = p.producer_id
    exp = [
        finding("hanging", "exceeds-max-timeout", "orders", 0, pid, 0, f0, 3, "last-marker", verified=False,
                missing_txn_partitions=missing),
        finding("hanging", "exceeds-max-timeout", "orders", 1, pid, 0, f1, 0, "log-start", verified=False,
                missing_txn_partitions=missing),
    ]
    sc = _finish(c, "partial-coordinator-view", exp, "markers pending in a __transaction_state partition "
                 "this broker does not hold", hand_epochs=True)
    c.keep_only_txn_partitions({keep})
    return sc


def scenario_retention_restart(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 10 rule 2. Two zombie transactions on orders-0 (late writes after their COMMITs,
    coordinator epoch 3): ``deleted-zombie``'s only batch and ``retained-zombie``'s first batch
    lie in segments that retention deletes; ``retained-zombie`` wrote again in a kept segment and
    once more after the broker restarted. The restart left the log start at the first kept
    segment, deleted the snapshots at or below it and kept the clean-shutdown snapshot at the log
    end: the newest snapshot lies after the first segment. Both transactions still pin the LSO.
    Expected from the snapshot: first offsets where the transactions started (not the first
    batch still on disk), coordinator epoch 3 (not 0: the log does not start at 0), data_deleted.
    The markers before the zombies are deleted, so nothing shows the late-produce pattern:
    coordinator-finished-without-partition."""
    c = _cluster(root, seed, base_time_ms, snapshot_on_roll=True)
    c.create_topic("orders", 1, leader_epoch=2)
    p = c.producer("retained-zombie", 0)
    q = c.producer("deleted-zombie", 0)
    busy = c.producer("busy-app", 0)
    for prod in (p, q):
        prod.begin()
        prod.send("orders", 0, 2)
        prod.commit()
    q_first = q.zombie_send("orders", 0, 1)
    p_first = p.zombie_send("orders", 0, 1)
    for _ in range(2):
        c.roll("orders", 0)
        busy.begin()
        busy.send("orders", 0, 1)
        busy.commit()
    p_later = p.zombie_send("orders", 0, 1)
    busy.begin()
    busy.send("orders", 0, 1)
    busy.commit()
    log_start = c.delete_segments_below("orders", 0, p_later)
    c.restart()
    busy.begin()
    busy.send("orders", 0, 1)
    busy.commit()
    p.zombie_send("orders", 0, 1)  # after the newest snapshot: joins the open transaction
    if not q_first < p_first < log_start <= p_later:  # pragma: no cover - layout premise
        raise ScenarioError("retention-restart layout does not satisfy its own premise")
    exp = [
        # From files, unverified (detection.md §0, revision 3.1): the ids' newest coordinator records
        # (their CompleteCommit) are older than the zombies' first writes; a copy that old may be a
        # lagging replica missing the record that covers them (coordinator-copy-behind).
        finding("hanging", "coordinator-finished-without-partition", "orders", 0, q.producer_id, 0, q_first, 3,
                "snapshot", data_deleted=True, from_files={"verified": False}),
        finding("hanging", "coordinator-finished-without-partition", "orders", 0, p.producer_id, 0, p_first, 3,
                "snapshot", data_deleted=True, from_files={"verified": False}),
    ]
    return _finish(c, "retention-restart", exp, "retention and a broker restart: newest snapshot after the first "
                   "segment, a transaction whose batches are all deleted", hand_epochs=True, log_start=log_start,
                   segment_with_later_batch=log_start)


def scenario_txn_leader_epoch_bump(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 10 rule 3. The producer's ``__transaction_state`` partition gets a new leader epoch
    (4) without a new coordinator: its records carry partitionLeaderEpoch 4, its markers keep
    coordinator epoch 3. A zombie batch opens a transaction on orders-0 right after a roll; the
    segments before it (with the producer's marker there) are deleted and orders-0 has no
    snapshot: it is read from an offset above 0. No last marker, snapshot or log start for
    orders-0: the epoch comes from the producer's markers on orders-1 (3,
    producer-last-marker); the withdrawn coordinator-partition rule would have said 4 and fenced
    the coordinator."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=1)
    tid = "reassigned-coordinator"
    p = c.producer(tid, 0)
    p.begin()
    p.send("orders", 0, 1)
    p.send("orders", 1, 1)
    p.commit()
    c.bump_txn_leader_epoch_only(tid)
    p.begin()
    p.send("orders", 1, 1)
    p.commit()
    c.roll("orders", 0)
    first = p.zombie_send("orders", 0, 2)
    c.produce("orders", 0, 1)
    p.begin()
    p.send("orders", 1, 1)
    p.commit()
    c.delete_segments_below("orders", 0, first)
    if (c.leader_epoch("__transaction_state", p.txn_partition), p.coordinator_epoch) != (4, 3):  # pragma: no cover
        raise ScenarioError("leader epoch bump did not keep the coordinator epoch")
    # From files, unverified (detection.md §1, §0): retention deleted everything of orders-0 before
    # the zombie batch and there is no snapshot, so nothing read proves the transaction did not
    # begin in a deleted segment (start-offset-not-proven): the broker's ProducerStateEntry may
    # start lower. (Live, the read starts at the LSO, which no open transaction lies below.)
    exp = [finding("hanging", "coordinator-finished-without-partition", "orders", 0, p.producer_id, 0, first, 3,
                   "producer-last-marker", from_files={"verified": False})]
    return _finish(c, "txn-leader-epoch-bump", exp, "__transaction_state leader epoch 3->4 without a coordinator "
                   "change; orders-0 read from above 0", hand_epochs=True)


def scenario_write_after_older_marker(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 10 rule 4. The producer's last event on orders-0 before the open transaction is a
    COMMIT marker of epoch 0; a new instance (epoch 1) writes to orders-0 without adding it
    (pre-KIP-890 broker) and commits only orders-1. The marker's epoch differs from the open
    transaction's: not the late-produce pattern, coordinator-finished-without-partition.
    Coordinator epoch of that marker (3, last-marker); producer epoch 1."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=5)
    tid = "reinitialised-app"
    p = c.producer(tid, 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    p2 = c.producer(tid, 0)  # a new instance: InitProducerId bumps the epoch to 1
    p2.begin()
    p2.send("orders", 1, 1)
    first = p2.send("orders", 0, 2, add_partition=False)
    p2.commit()
    exp = [finding("hanging", "coordinator-finished-without-partition", "orders", 0, p2.producer_id, 1, first, 3,
                   "last-marker")]
    return _finish(c, "write-after-older-marker", exp, "open transaction after a marker of a lower epoch")


TWO_PC_TIMEOUT_MS = 2_147_483_647  # KIP-939: Integer.MAX_VALUE = no timeout (isDistributedTwoPhaseCommitTxn)


def scenario_prepare_skewed_marker(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 19 item 3 (detection.md §3.1 revision 3). A TV0 producer commits a transaction over
    orders-0 and orders-1; the leaders of orders run 41 ms ahead of the coordinator, so their
    COMMIT markers (epoch 0, coordinator epoch 3) carry timestamps *after* the next transaction's
    PrepareCommit. The next transaction writes both partitions and its PrepareCommit is written,
    its markers never are. Under TV0 the previous marker has the same producer id, epoch and
    result as the pending one: only clocks would tell them apart. Expected: both late /
    markers-pending (never hanging: aborting would break a commit in flight)."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=4, leader_clock_skew_ms=41)
    p = c.producer("skewed-leader-app", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.send("orders", 1, 1)
    p.commit()
    p.begin()
    f0 = p.send("orders", 0, 2)
    f1 = p.send("orders", 1, 1)
    p.commit(markers=[])
    pid = p.producer_id
    exp = [
        finding("late", "markers-pending", "orders", 0, pid, 0, f0, 3, "last-marker"),
        finding("late", "markers-pending", "orders", 1, pid, 0, f1, 3, "last-marker"),
    ]
    return _finish(c, "prepare-skewed-marker", exp, "PrepareCommit after a same-epoch marker stamped by a fast clock")


def scenario_bumped_marker_next_txn(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 19 item 8 (detection.md §3.1 revision 3.1). A TV2 producer commits on orders-0: data
    epoch 0, COMMIT marker epoch 1 (bumped, KIP-890), CompleteCommit epoch 1. A batch of epoch 1
    then lands on orders-0 (the producer's next transaction; its partition never reached the
    coordinator), and the producer commits a transaction on orders-1 only (Ongoing e1 ->
    PrepareCommit/CompleteCommit e2). The marker before the open batch has the batch's epoch but
    was bumped: not a late write of the closed transaction. Expected: hanging /
    coordinator-finished-without-partition, producer epoch 1, coordinator epoch 3 (last marker)."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=2)
    p = c.producer("tv2-next-txn", 2)
    p.begin()
    p.send("orders", 0, 2)
    p.commit()
    nxt = p.zombie_send("orders", 0, 1)  # epoch 1: the epoch the bumped marker handed out
    p.begin()
    p.send("orders", 1, 1)
    p.commit()
    exp = [finding("hanging", "coordinator-finished-without-partition", "orders", 0, p.producer_id, 1, nxt, 3,
                   "last-marker")]
    return _finish(c, "bumped-marker-next-txn", exp, "next transaction after a bumped TV2 marker")


def scenario_two_phase_commit(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 19 item 7 (KIP-939). Two producers with TransactionTimeoutMs = Integer.MAX_VALUE (2PC):
    one has a transaction open on orders-0 that its external transaction manager has not decided
    (the coordinator never times it out); the other committed on orders-1 (data e0, marker e1,
    TV2) and then a batch of epoch 1 reached orders-1 outside any transaction the coordinator
    lists, and its next transaction commits on orders-2 only. The threshold of both is
    max_timeout_ms + padding_ms, not the 2PC timeout. Expected:
    orders-0 late / prepared-2pc (never hanging, no command); orders-1 hanging /
    coordinator-finished-without-partition."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 3, leader_epoch=1)
    # The participant's id shares its __transaction_state partition with the heartbeat id that
    # _finish writes last: that copy then holds a record newer than the open transaction's first
    # write (it can show it is current, detection.md §0), as a busy coordinator partition does.
    xa_id = _find_ids("xa-participant", txn_state_partition("txnwatch-heartbeat", 50), 1)[0]
    xa = c.producer(xa_id, 2, timeout_ms=TWO_PC_TIMEOUT_MS)
    xa.begin()
    first = xa.send("orders", 0, 3)
    done = c.producer("xa-done", 2, timeout_ms=TWO_PC_TIMEOUT_MS)
    done.begin()
    done.send("orders", 1, 1)
    done.commit()
    stray = done.zombie_send("orders", 1, 1)
    done.begin()
    done.send("orders", 2, 1)  # its next transaction, on orders-2 only
    done.commit()
    exp = [
        finding("late", "prepared-2pc", "orders", 0, xa.producer_id, 0, first, 0, "log-start"),
        finding("hanging", "coordinator-finished-without-partition", "orders", 1, done.producer_id, 1, stray, 3,
                "last-marker"),
    ]
    return _finish(c, "two-phase-commit", exp, "KIP-939 two-phase-commit transactions past the threshold")


def scenario_long_txn_split_txn_log(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Issue 19 item 5 (detection.md §3.1). A producer with transaction.timeout.ms = 1 h (clock 10 min
    behind) runs two transactions on reports-0, 20 minutes apart; each of its
    ``__transaction_state`` records lands in a segment of its own (Empty | Ongoing | Prepare,
    Complete | Ongoing ...). At the evaluation time the second transaction is within timeout +
    padding (late / long-transaction). ``notes["txn_partition"]`` and ``notes["split_segments"]``:
    the segments holding the two Ongoing records; a dump without the segment between them (3.0-4.0
    text prints no TransactionStartTimestampMs) must not turn into coordinator-stuck."""
    timeout, skew = 3_600_000, -600_000
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("reports", 1, leader_epoch=1)
    p = c.producer("nightly-batch", 0, timeout_ms=timeout, clock_skew_ms=skew)
    k = p.txn_partition
    c.roll("__transaction_state", k)
    p.begin()
    p.send("reports", 0, 1)
    ongoing1 = c.batches("__transaction_state", k)[-1].base_offset
    c.roll("__transaction_state", k)
    p.commit()
    c.roll("__transaction_state", k)
    c.advance(20 * 60_000)
    p.begin()
    first = p.send("reports", 0, 5)
    ongoing2 = c.batches("__transaction_state", k)[-1].base_offset  # in the partition's newest segment
    c.advance(timeout + DEFAULT_PADDING_MS - 100_000 - AGE_MS)
    exp = [finding("late", "long-transaction", "reports", 0, p.producer_id, 0, first, 3, "last-marker")]
    return _finish(c, "long-txn-split-txn-log", exp, "long transaction; its coordinator records in separate segments",
                   txn_partition=k, split_segments=[ongoing1, ongoing2])


def scenario_healthy_mix(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """Everything that must *not* alert: TV0/TV1/TV2 producers, commits and aborts, a timeout
    abort, fencing, idempotent and plain batches, gzip, a LogAppendTime topic, legacy v1
    messages from an old broker, leader changes, small segments with snapshots at every roll,
    and a few transactions still open but younger than the threshold."""
    c = _cluster(root, seed, base_time_ms, segment_bytes=4096, snapshot_on_roll=True)
    rng = random.Random(seed)
    c.create_topic("orders", 3, leader_epoch=5)
    c.create_topic("clicks", 2, leader_epoch=1, log_append_time=True)
    c.produce_legacy("orders", 2, 3, magic=1)
    producers = [c.producer(f"healthy-{i}", i % 3) for i in range(6)]
    idem = c.idempotent_producer()
    tps = [("orders", 0), ("orders", 1), ("orders", 2), ("clicks", 0), ("clicks", 1)]
    for rnd in range(40):
        p = producers[rng.randrange(len(producers))]
        p.begin()
        for tp in rng.sample(tps, rng.randint(1, 3)):
            p.send(*tp, rng.randint(1, 6), compressed=rng.random() < 0.3)
        if rng.random() < 0.2:
            idem.send(*rng.choice(tps), rng.randint(1, 4))
        if rng.random() < 0.2:
            c.produce(*rng.choice(tps), rng.randint(1, 3), compressed=rng.random() < 0.5)
        if rng.random() < 0.8:
            p.commit()
        else:
            p.abort()
        if rnd == 15:
            c.bump_leader_epoch("orders", 1)
        if rnd == 25:
            i = rng.randrange(len(producers))
            producers[i].begin()
            producers[i].send("orders", 0, 1)
            producers[i] = producers[i].fence()
        if rnd == 30:
            s = producers[0]
            s.begin()
            s.send("clicks", 1, 2)
            c.advance(61_000)
            s.timeout_abort()
            s.reinit()
        c.advance(rng.randint(0, 2_000))
    c.advance(AGE_MS)
    # still open at the end but young: "open", not a finding
    for p in producers[:3]:
        p.begin()
        p.send("orders", 0, 1)
    c.advance(1_000)
    hb = c.producer("txnwatch-heartbeat", 0)
    hb.begin()
    hb.send("heartbeat", 0, 1)
    hb.commit()
    c.flush()
    return Scenario("healthy-mix", c.root, c.max_timestamp, [], "healthy mix, nothing to report", c)


def scenario_random_mix(
    root: Path,
    *,
    seed: int = 0,
    base_time_ms: int = 1_700_000_000_000,
    target_bytes: int = 200 << 20,
    topics: int = 4,
    partitions: int = 4,
    producers: int = 40,
    segment_bytes: int = 4 << 20,
    records_per_batch: tuple[int, ...] = (1, 5, 20, 50, 100, 200),
    value_sizes: tuple[int, ...] = (100, 400),
    faults: int = 1,
) -> Scenario:
    """A large randomized cluster log for benchmarks: ``target_bytes`` of data over
    ``topics`` × ``partitions`` partitions from ``producers`` transactional producers (TV0/1/2),
    idempotent and plain producers, gzip on some batches, occasional timeout aborts and fencing.
    ``faults`` instances of each fault kind are injected at the start (write-after-marker,
    partition-never-added, markers-pending, coordinator-stuck) with dedicated transactional ids
    that are never used again, so their expected findings are known exactly. Batches are built
    from cached record blobs (bytes joins), so writing runs at disk speed."""
    c = _cluster(
        root,
        seed,
        base_time_ms,
        segment_bytes=segment_bytes,
        coordinator_epochs={n: (n * 7 + seed) % 6 for n in range(50)},
    )
    rng = random.Random(seed)
    names = [f"topic-{i}" for i in range(topics)]
    for t in names:
        c.create_topic(
            t, partitions, leader_epoch=rng.randint(0, 9), log_append_time=(t == names[-1] and topics > 1)
        )
    tps = [(t, p) for t in names for p in range(partitions)]
    expected: list[dict[str, Any]] = []

    def fault_tp() -> tuple[str, int]:
        return tps[rng.randrange(len(tps))]

    for k in range(faults):
        # write-after-marker
        p = c.producer(f"fault-late-{k}", 0)
        tp = fault_tp()
        p.begin()
        p.send(*tp, 2)
        p.commit()
        off = p.zombie_send(*tp, 1)
        expected.append(finding_from_log(c, "hanging", "write-after-marker", *tp, p.producer_id, off))
        # partition-never-added: make sure the two partitions differ
        p = c.producer(f"fault-unadded-{k}", 1)
        tp1 = fault_tp()
        tp2 = next(x for x in tps[rng.randrange(len(tps)) :] + tps if x != tp1)
        p.begin()
        p.send(*tp1, 1)
        off = p.send(*tp2, 3, add_partition=False)
        p.commit()
        expected.append(finding_from_log(c, "hanging", "coordinator-finished-without-partition", *tp2, p.producer_id, off))
        # markers-pending
        p = c.producer(f"fault-pending-{k}", 0)
        tp = fault_tp()
        p.begin()
        off = p.send(*tp, 2)
        p.commit(markers=[])
        expected.append(finding_from_log(c, "late", "markers-pending", *tp, p.producer_id, off))
        # coordinator-stuck
        p = c.producer(f"fault-stuck-{k}", 0)
        tp = fault_tp()
        p.begin()
        off = p.send(*tp, 1)
        # from files: its copy's newest record (Ongoing, written before the batch) predates O (§0)
        expected.append(finding_from_log(c, "late", "coordinator-stuck", *tp, p.producer_id, off,
                                         from_files={"verified": False}))

    prods = [
        c.producer(f"app-{i}", rng.choice((0, 0, 1, 2)), initial_epoch=rng.randint(0, 50))
        for i in range(producers)
    ]
    idems = [c.idempotent_producer() for _ in range(max(1, producers // 8))]
    while c.bytes_written < target_bytes:
        r = rng.random()
        if r < 0.1:
            idems[rng.randrange(len(idems))].send(
                *tps[rng.randrange(len(tps))], rng.choice(records_per_batch), compressed=rng.random() < 0.3
            )
            continue
        if r < 0.2:
            c.append_data(
                *tps[rng.randrange(len(tps))],
                rng.choice(records_per_batch),
                value_size=rng.choice(value_sizes),
                compressed=rng.random() < 0.3,
            )
            continue
        i = rng.randrange(len(prods))
        p = prods[i]
        p.begin()
        for tp in rng.sample(tps, rng.randint(1, 3)):
            for _ in range(rng.randint(1, 3)):
                p.send(
                    *tp,
                    rng.choice(records_per_batch),
                    value_size=rng.choice(value_sizes),
                    compressed=rng.random() < 0.25,
                )
        x = rng.random()
        if x < 0.85:
            p.commit()
        elif x < 0.97:
            p.abort()
        elif x < 0.985:
            c.advance(p.meta.timeout_ms + 1)
            p.timeout_abort()
            p.reinit()
        else:
            prods[i] = p.fence()
    return _finish(
        c, "random-mix", expected, f"randomized mix, {c.bytes_written} bytes", bytes_written=c.bytes_written
    )


SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "commit": scenario_commit,
    "client-abort": scenario_client_abort,
    "timeout-abort": scenario_timeout_abort,
    "fenced": scenario_fenced,
    "tv2-epoch-walk": scenario_tv2_epoch_walk,
    "pid-rotation": scenario_pid_rotation,
    "write-after-marker": scenario_write_after_marker,
    "failover-write-after-marker": scenario_failover_write_after_marker,
    "partition-never-added": scenario_partition_never_added,
    "txn-id-expired": scenario_txn_id_expired,
    "markers-pending": scenario_markers_pending,
    "coordinator-stuck": scenario_coordinator_stuck,
    "long-transaction": scenario_long_transaction,
    "coordinator-failover": scenario_coordinator_failover,
    "compacted-empty-control": scenario_compacted_empty_control,
    "txn-state-compacted": scenario_txn_state_compacted,
    "partial-coordinator-view": scenario_partial_coordinator_view,
    "retention-restart": scenario_retention_restart,
    "txn-leader-epoch-bump": scenario_txn_leader_epoch_bump,
    "write-after-older-marker": scenario_write_after_older_marker,
    "prepare-skewed-marker": scenario_prepare_skewed_marker,
    "bumped-marker-next-txn": scenario_bumped_marker_next_txn,
    "two-phase-commit": scenario_two_phase_commit,
    "long-txn-split-txn-log": scenario_long_txn_split_txn_log,
    "healthy-mix": scenario_healthy_mix,
    "random-mix": scenario_random_mix,
}

# Scenarios whose ``expected`` is non-empty.
POSITIVE_SCENARIOS = frozenset(
    {
        "write-after-marker",
        "failover-write-after-marker",
        "partition-never-added",
        "txn-id-expired",
        "markers-pending",
        "coordinator-stuck",
        "long-transaction",
        "txn-state-compacted",
        "random-mix",
        "partial-coordinator-view",
        "retention-restart",
        "txn-leader-epoch-bump",
        "write-after-older-marker",
        "prepare-skewed-marker",
        "bumped-marker-next-txn",
        "two-phase-commit",
        "long-txn-split-txn-log",
    }
)


def write_scenario(
    name: str, root: str | Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000, **params: Any
) -> Scenario:
    """Write the named scenario under ``root`` (must be empty or absent) and return it.
    ``params`` go to the scenario function (e.g. ``target_bytes`` for ``random-mix``)."""
    try:
        fn = SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise ScenarioError(f"{root} is not empty")
    return fn(root, seed=seed, base_time_ms=base_time_ms, **params)
