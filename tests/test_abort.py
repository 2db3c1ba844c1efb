"""``txnwatch abort KEY``: the guarded abort against the fake broker over real sockets (issue 22).

Every expected value is written by hand from Kafka's behaviour (the class and method named at each
test). The staged partition ``orders-0``, the same for every test:

* offset 0: producer 4002, epoch 2, one transactional record; offset 1: its COMMIT marker with
  coordinator epoch 3 (``MemoryRecords.withEndTransactionMarker``);
* offsets 2-4: producer 4002, epoch 2, a transactional batch of 3 records written two hours ago and
  never closed: the finding ``prod/orders/0/4002/2``. LSO 2, high watermark 5.
* ``__transaction_state`` (2 partitions): ``payments-7`` -> producer 4002 epoch 2 CompleteCommit with
  no partitions (the coordinator finished without orders-0), in partition 0; partition 1 empty.
  On 3.0+ the fake's coordinator holds the same (``set_transaction``) for ListTransactions /
  DescribeTransactions.

So the leader's entry for 4002 (``ProducerStateManager``): epoch 2, coordinator epoch 3, open
transaction at 2; the abort Kafka's admin would send (``AbortTransactionHandler``): producer id
4002, epoch 2, coordinator epoch 3, ABORT.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from streaming.abort.audit import read_audit
from streaming.abort.command import run_abort
from streaming.config import load_config
from streaming.simulate.encode import encode_batch, encode_marker, encode_txn_log_batch, encode_txn_value_v0
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch
from tests.kafka_fake_txn_markers import marker_check

KEY = "prod/orders/0/4002/2"
PID, EPOCH, COORD_EPOCH, FIRST = 4002, 2, 3, 2
# the five releases of the issue; WriteTxnMarkers version each negotiates with kafka-python's
# v0-v2 classes (tests/broker_api_versions.py: 2.7 -> 27:(0,0); 2.8/3.0/3.9 -> (0,1); 4.0 -> (1,1))
VERSIONS = [(2, 7), (2, 8), (3, 0), (3, 9), (4, 0)]
MARKER_VERSION = {(2, 7): 0, (2, 8): 1, (3, 0): 1, (3, 9): 1, (4, 0): 1, (4, 3): 2}


def _stage(root: Path, *, coordinator_state: str = "CompleteCommit", partitions: dict | None = None) -> int:
    now = int(time.time() * 1000)
    old = now - 2 * 3600 * 1000
    data = (encode_batch(0, 1, producer_id=PID, producer_epoch=EPOCH, base_sequence=0, is_transactional=True,
                         base_timestamp=old - 60_000)
            + encode_marker(1, PID, EPOCH, 1, COORD_EPOCH, old - 59_000)
            + encode_batch(2, 3, producer_id=PID, producer_epoch=EPOCH, base_sequence=1, is_transactional=True,
                           base_timestamp=old))
    (root / "orders-0").mkdir(parents=True)
    (root / "orders-0" / "00000000000000000000.log").write_bytes(data)
    value = encode_txn_value_v0(PID, EPOCH, 60_000, coordinator_state, partitions if partitions is not None else {},
                                now - 1000, old if coordinator_state == "Ongoing" else -1)
    (root / "__transaction_state-0").mkdir()
    (root / "__transaction_state-0" / "00000000000000000000.log").write_bytes(
        encode_txn_log_batch(0, "payments-7", value, now - 1000, 7))
    (root / "__transaction_state-1").mkdir()
    (root / "__transaction_state-1" / "00000000000000000000.log").write_bytes(b"")
    return old


def _alert(path: Path, **over) -> None:
    alert = {"key": KEY, "status": "hanging", "verified": True, "topic": "orders", "partition": 0,
             "producer_id": PID, "first_offset": FIRST, "producer_epoch": EPOCH, "coordinator_epoch": COORD_EPOCH}
    alert.update(over)
    path.write_text(json.dumps(alert) + "\n")


class Cluster:
    def __init__(self, tmp_path: Path, version, *, coordinator_state="CompleteCommit", partitions=None,
                 describe_state: str | None = None, num_nodes: int = 1, sasl=None):
        self.root = tmp_path / "logs"
        self.root.mkdir()
        _stage(self.root, coordinator_state=coordinator_state, partitions=partitions)
        self.broker = FakeKafkaBroker(self.root, broker_version=version, auto_create_topics=False,
                                      num_nodes=num_nodes, sasl=sasl)
        if version >= (3, 0):
            parts = {("orders", 0)} if partitions else set()
            self.broker.set_transaction("payments-7", producer_id=PID, producer_epoch=EPOCH,
                                        state=describe_state or coordinator_state, partitions=parts,
                                        start_ms=int(time.time() * 1000))
        self.alerts = tmp_path / "alerts.jsonl"
        _alert(self.alerts)
        self.audit = tmp_path / "audit.jsonl"

    def __enter__(self):
        self.broker.start()
        return self

    def __exit__(self, *exc):
        self.broker.stop()

    def run(self, *, execute=False, yes=False, stdin: str | io.StringIO = "", **cfg_over) -> tuple[int, str]:
        cfg = load_config(None, env={}, overrides={
            "cluster": "prod", "kafka.bootstrap_servers": self.broker.bootstrap_servers,
            "kafka.request_timeout_ms": 5000, "kafka.groups_refresh_ms": 0,
            "abort.audit_path": str(self.audit), "abort.lso_wait_ms": 10_000,
            "sinks.jsonl_path": str(self.alerts), **cfg_over})
        out = io.StringIO()
        code = run_abort(KEY, cfg, bootstrap=None, alerts_path=None, execute=execute, yes=yes,
                         stdin=io.StringIO(stdin) if isinstance(stdin, str) else stdin, out=out)
        return code, out.getvalue()

    def markers_sent(self) -> int:
        return self.broker.request_counts()["write_txn_markers"]

    def lso(self) -> int:
        return self.broker.partition_state("orders", 0).last_stable_offset


# ------------------------------------------------------------------------------ success
@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v[0]}.{v[1]}")
def test_dry_run_confirms_the_state_and_sends_nothing(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        code, text = c.run()
        assert code == 0, text
        # nothing that writes was sent: no marker, no produce (the broker counts every request)
        assert c.markers_sent() == 0
        assert c.broker.request_counts()["produce"] == 0
        assert c.lso() == FIRST
    assert "producer id 4002, producer epoch 2, coordinator epoch 3" in text
    assert "discards: 3 records" in text
    assert "--producer-id 4002 --producer-epoch 2 --coordinator-epoch 3" in text
    # --start-offset needs DescribeProducers on the broker (TransactionsCommand.AbortTransactionCommand)
    assert ("--start-offset 2" in text) == (version >= (2, 8))
    lines = read_audit(str(c.audit))
    assert [(a["mode"], a["outcome"], a["exit_code"]) for a in lines] == [("dry-run", "would-abort", 0)]
    assert lines[0]["finding_key"] == KEY and lines[0]["who"]["user"]


@pytest.mark.parametrize("version", VERSIONS + [(4, 3)], ids=lambda v: f"{v[0]}.{v[1]}")
def test_execute_writes_the_abort_marker_and_the_lso_moves(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        code, text = c.run(execute=True, yes=True)
        assert code == 0, text
        # ProducerStateManager: the ABORT marker at offset 5 closes [2, 4]: LSO = high watermark 6
        assert c.lso() == 6
        (req,) = c.broker.requests_for("write_txn_markers")
        assert req.version == MARKER_VERSION[version]
        (m,) = req.request.markers
        assert (m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result) == (PID, 2, 3, False)
        assert [(t.name, list(t.partition_indexes)) for t in m.topics] == [("orders", [0])]
        if req.version >= 2:  # AbortTransactionHandler never sets it: the field's default, 0
            assert m.transaction_version == 0
    assert "moved to 6" in text
    outcomes = [(a["mode"], a["outcome"], a["exit_code"]) for a in read_audit(str(c.audit))]
    assert outcomes == [("execute", "sending", None), ("execute", "aborted", 0)]


# ------------------------------------------------------------------------------ refusals
def _refused(c: Cluster, code_word: str, *, execute=True) -> str:
    code, text = c.run(execute=execute, yes=execute)
    assert code == 4, text
    assert f"- {code_word}:" in text, text
    assert c.markers_sent() == 0
    (line,) = read_audit(str(c.audit))
    assert line["outcome"] == "refused" and line["exit_code"] == 4 and code_word in line["message"]
    return text


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v[0]}.{v[1]}")
def test_refuses_a_transaction_closed_since_the_alert(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        # the coordinator's marker landed after the alert (ProducerAppendInfo.appendEndTxnMarker):
        # LSO moves to 6, past the first offset 2
        c.broker.append_raw("orders", 0, build_control_batch(5, PID, EPOCH, commit=False, coordinator_epoch=3,
                                                             timestamp_ms=int(time.time() * 1000)))
        text = _refused(c, "closed")
    assert "last stable offset is now 6, past its first offset 2" in text


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v[0]}.{v[1]}")
def test_refuses_when_the_producer_epoch_was_bumped(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        # a batch of epoch 3 joins the open transaction (ProducerAppendInfo.appendDataBatch: a
        # transactional batch with a transaction open joins it); the leader's entry is now epoch 3
        c.broker.append_raw("orders", 0, encode_batch(5, 1, producer_id=PID, producer_epoch=3, base_sequence=0,
                                                      is_transactional=True, base_timestamp=int(time.time() * 1000)))
        text = _refused(c, "producer-epoch-changed")
    assert "epoch on orders-0 is now 3; the alert's command was built with epoch 2" in text


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v[0]}.{v[1]}")
def test_refuses_when_the_coordinator_epoch_differs_from_the_alert(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        _alert(c.alerts, coordinator_epoch=2)  # the command the operator copied carries 2; the leader holds 3
        text = _refused(c, "coordinator-epoch-changed")
    assert "is now 3" in text and "built with 2" in text


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v[0]}.{v[1]}")
def test_refuses_a_finding_now_late_because_the_coordinator_owns_it(tmp_path, version):
    # the coordinator's record now says Ongoing with orders-0 among its partitions
    # (TransactionCoordinator.handleDescribeTransactions on 3.0+, __transaction_state before)
    with Cluster(tmp_path, version, coordinator_state="Ongoing", partitions={"orders": [0]}) as c:
        text = _refused(c, "coordinator-owns")
    assert "'payments-7' Ongoing with orders-0 among its partitions" in text


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v[0]}.{v[1]}")
def test_refuses_an_unverified_finding(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        # no coordinator view: the coordinator forgot the id (nothing for ListTransactions) and
        # __transaction_state is not readable (Fetch: TOPIC_AUTHORIZATION_FAILED without Read)
        c.broker.forget_transactions()
        c.broker.deny("Read", "Topic", "__transaction_state")
        text = _refused(c, "unverified")
    assert "exceeds-max-timeout" in text


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v[0]}.{v[1]}")
def test_refuses_a_partition_without_leader(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        c.broker.offline("orders", 0)
        text = _refused(c, "no-leader")
    assert "orders-0 has no leader now" in text


def test_dry_run_refusal_is_exit_4_and_audited(tmp_path):
    with Cluster(tmp_path, (3, 0)) as c:
        c.broker.offline("orders", 0)
        _refused(c, "no-leader", execute=False)


# ------------------------------------------------------------------------------ broker-side checks
@pytest.mark.parametrize("version", [(2, 7), (3, 0), (4, 0)], ids=lambda v: f"{v[0]}.{v[1]}")
def test_epoch_bumped_between_recheck_and_marker_is_rejected_by_the_leader(tmp_path, version):
    with Cluster(tmp_path, version) as c:
        c.broker.on_next_write_txn_markers(lambda b: b.append_raw("orders", 0, encode_batch(
            5, 1, producer_id=PID, producer_epoch=3, base_sequence=0, is_transactional=True,
            base_timestamp=int(time.time() * 1000))))
        code, text = c.run(execute=True, yes=True)
        assert code == 1
        assert c.markers_sent() == 1
        assert c.lso() == FIRST  # ProducerAppendInfo.checkProducerEpoch: 2 < 3 -> INVALID_PRODUCER_EPOCH
    assert "INVALID_PRODUCER_EPOCH" in text and "Nothing was written" in text
    outcomes = [a["outcome"] for a in read_audit(str(c.audit))]
    assert outcomes == ["sending", "rejected"]


def test_coordinator_marker_between_recheck_and_abort_fences_it(tmp_path):
    with Cluster(tmp_path, (3, 9)) as c:
        # a coordinator with epoch 5 writes its marker first: the entry's coordinator epoch is 5,
        # ours (3) is fenced (ProducerAppendInfo.checkCoordinatorEpoch -> TRANSACTION_COORDINATOR_FENCED)
        c.broker.on_next_write_txn_markers(lambda b: b.append_raw("orders", 0, build_control_batch(
            5, PID, EPOCH, commit=True, coordinator_epoch=5, timestamp_ms=int(time.time() * 1000))))
        code, text = c.run(execute=True, yes=True)
        assert code == 1
    assert "TRANSACTION_COORDINATOR_FENCED" in text


@pytest.mark.parametrize(("version", "denied", "ok", "acl"), [
    ((3, 0), ["ClusterAction"], False, "CLUSTER_ACTION on the cluster (brokers before 3.8)"),
    ((4, 0), ["ClusterAction"], True, None),  # KIP-1037: ALTER on the cluster is enough from 3.8
    ((4, 0), ["ClusterAction", "Alter"], False, "ALTER on the cluster (Kafka 3.8+, KIP-1037"),
], ids=["3.0-no-cluster-action", "4.0-alter-suffices", "4.0-neither"])
def test_authorization_names_the_acl_of_the_broker_version(tmp_path, version, denied, ok, acl):
    with Cluster(tmp_path, version) as c:
        for op in denied:
            c.broker.deny(op, "Cluster", "kafka-cluster")
        code, text = c.run(execute=True, yes=True)
    if ok:
        assert code == 0, text
    else:
        assert code == 1
        assert "CLUSTER_AUTHORIZATION_FAILED" in text and acl in text and "--cluster" in text


# ------------------------------------------------------------------------------ confirmation
def test_execute_without_yes_asks_and_a_no_sends_nothing(tmp_path):
    with Cluster(tmp_path, (3, 9)) as c:
        code, text = c.run(execute=True, stdin="no\n")
        assert code == 1
        assert c.markers_sent() == 0 and c.lso() == FIRST
        assert "Type 'yes'" in text
        code, text = c.run(execute=True, stdin="yes\n")
        assert code == 0, text
        assert c.markers_sent() == 1 and c.lso() == 6
    outcomes = [a["outcome"] for a in read_audit(str(c.audit))]
    assert outcomes == ["not-confirmed", "sending", "aborted"]


def test_audit_log_holds_every_attempt(tmp_path):
    with Cluster(tmp_path, (2, 8)) as c:
        assert c.run()[0] == 0
        _alert(c.alerts, coordinator_epoch=9)
        assert c.run(execute=True, yes=True)[0] == 4
        _alert(c.alerts)
        assert c.run(execute=True, yes=True)[0] == 0
        assert c.run()[0] == 4  # closed now
    got = [(a["mode"], a["outcome"], a["exit_code"]) for a in read_audit(str(c.audit))]
    assert got == [("dry-run", "would-abort", 0), ("execute", "refused", 4), ("execute", "sending", None),
                   ("execute", "aborted", 0), ("dry-run", "refused", 4)]
    sent = read_audit(str(c.audit))[3]["sent"]
    assert (sent["producer_id"], sent["producer_epoch"], sent["coordinator_epoch"], sent["version"]) == (PID, 2, 3, 1)


# ------------------------------------------------------------------------------ the fake's own rule
def test_fake_marker_rule_follows_producer_append_info():
    entry = {"producer_epoch": 5, "coordinator_epoch": 3, "current_txn_start_offset": 10}
    # legacy (TV0/1): markerEpoch < current rejected, equal accepted
    assert marker_check(entry, producer_epoch=4, coordinator_epoch=3, transaction_version=0) == 47
    assert marker_check(entry, producer_epoch=5, coordinator_epoch=3, transaction_version=0) == 0
    # TV2 (KIP-890, trunk checkProducerEpoch): equal rejected while a transaction is open ...
    assert marker_check(entry, producer_epoch=5, coordinator_epoch=3, transaction_version=2) == 47
    assert marker_check(entry, producer_epoch=6, coordinator_epoch=3, transaction_version=2) == 0
    # ... and allowed as the idempotent retry of KAFKA-19999 when nothing is open
    closed = dict(entry, current_txn_start_offset=-1)
    assert marker_check(closed, producer_epoch=5, coordinator_epoch=3, transaction_version=2) == 0
    # checkCoordinatorEpoch: entry 3 > marker 2 -> TRANSACTION_COORDINATOR_FENCED; -1 entry accepts 0
    assert marker_check(entry, producer_epoch=5, coordinator_epoch=2, transaction_version=0) == 52
    assert marker_check(None, producer_epoch=0, coordinator_epoch=0, transaction_version=0) == 0


def test_every_attempt_is_published_on_the_alerts_topic_as_an_abort_record(tmp_path):
    from kafka import KafkaConsumer

    with Cluster(tmp_path, (3, 9)) as c:
        c.broker.auto_create_topics = True
        over = {"sinks.enabled": ["jsonl", "kafka"], "sinks.kafka_topic": "txnwatch-alerts"}
        assert c.run(**over)[0] == 0
        assert c.run(execute=True, yes=True, **over)[0] == 0
        consumer = KafkaConsumer("txnwatch-alerts", bootstrap_servers=c.broker.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000, group_id=None)
        got = [(m.key.decode(), json.loads(m.value)) for m in consumer]
        consumer.close()
    assert [(r["record_type"], r["finding_key"], r["outcome"]) for _, r in got] == [
        ("abort", KEY, "would-abort"), ("abort", KEY, "sending"), ("abort", KEY, "aborted")]
    # never the finding's own key: a compacted alerts topic keeps the finding's record and every attempt
    assert all(k.startswith(KEY + "#abort@") and k == r["key"] for k, r in got)
    assert got[2][1]["sent"]["coordinator_epoch"] == 3 and got[2][1]["answer"]["error"] == "NONE"


# ------------------------------------------------------------------------------ the command line
def test_cli_exit_codes_and_usage_errors(tmp_path, capsys):
    from streaming.cli import main

    with Cluster(tmp_path, (3, 0)) as c:
        conf = tmp_path / "txnwatch.toml"
        conf.write_text(f'cluster = "prod"\n[kafka]\nbootstrap_servers = "{c.broker.bootstrap_servers}"\n'
                        f'groups_refresh_ms = 0\n[sinks]\njsonl_path = "{c.alerts}"\n'
                        f'[abort]\naudit_path = "{c.audit}"\n')
        assert main(["abort", KEY, "--config", str(conf)]) == 0
        c.broker.offline("orders", 0)
        assert main(["abort", KEY, "--config", str(conf), "--execute", "--yes"]) == 4
        # a key of another cluster is refused before anything is read
        assert main(["abort", "staging/orders/0/4002/2", "--config", str(conf)]) == 1
        assert "names cluster 'staging'" in capsys.readouterr().err
        assert main(["abort", "prod/orders/x/4002/2", "--config", str(conf)]) == 1
        assert "partition 'x' is not an integer" in capsys.readouterr().err
        assert c.markers_sent() == 0
    assert [a["outcome"] for a in read_audit(str(c.audit))] == ["would-abort", "refused"]


def test_parse_key_takes_the_last_four_parts():
    from streaming.abort.key import AlertKey, parse_key

    assert parse_key("eu/prod/orders/3/4002/17") == AlertKey("eu/prod", "orders", 3, 4002, 17)
    with pytest.raises(ValueError, match="expected cluster/topic/partition/producer_id/first_offset"):
        parse_key("orders/3/4002/17")
    with pytest.raises(ValueError, match="first_offset -1 is negative"):
        parse_key("prod/orders/3/4002/-1")


def test_unreachable_cluster_is_exit_1_and_audited(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    _alert(tmp_path / "alerts.jsonl")
    cfg = load_config(None, env={}, overrides={
        "cluster": "prod", "kafka.bootstrap_servers": f"127.0.0.1:{port}", "kafka.request_timeout_ms": 2000,
        "abort.audit_path": str(tmp_path / "audit.jsonl"), "sinks.jsonl_path": str(tmp_path / "alerts.jsonl")})
    out = io.StringIO()
    assert run_abort(KEY, cfg, bootstrap=None, alerts_path=None, execute=True, yes=True, out=out) == 1
    assert "error: " in out.getvalue()
    assert [a["outcome"] for a in read_audit(str(tmp_path / "audit.jsonl"))] == ["error"]


def test_leader_moved_between_recheck_and_marker_is_explained_and_nothing_written(tmp_path):
    with Cluster(tmp_path, (3, 9), num_nodes=2) as c:
        # the marker reaches the old leader (Partition.appendRecordsToLeader on a follower:
        # NOT_LEADER_OR_FOLLOWER); AbortTransactionHandler would re-find the leader, txnwatch asks
        # for a new run so that the re-check is redone against the new leader
        c.broker.on_next_write_txn_markers(lambda b: b.move_leader("orders", 0, 2))
        code, text = c.run(execute=True, yes=True)
        assert code == 1
        assert c.lso() == FIRST
        assert "NOT_LEADER_OR_FOLLOWER" in text and "Run the command again" in text
        code, text = c.run(execute=True, yes=True)  # the next run goes to node 2
        assert code == 0, text
        assert [r.node_id for r in c.broker.requests_for("write_txn_markers")] == [1, 2]


def test_dry_run_names_the_consumer_groups_it_unblocks(tmp_path):
    with Cluster(tmp_path, (3, 0)) as c:
        # a read_committed consumer cannot pass the LSO (2): committed offsets at or below it wait
        c.broker.commit_offsets("billing", {("orders", 0): 2})
        c.broker.commit_offsets("audit-trail", {("orders", 0): 1})
        c.broker.commit_offsets("search", {("orders", 1): 0})
        code, text = c.run(**{"kafka.groups_refresh_ms": 60000})
    assert code == 0, text
    assert "unblocks consumer groups: audit-trail, billing" in text


@pytest.mark.parametrize("alert_names_the_id", [True, False])
def test_a_transactional_id_taken_over_by_a_new_producer_id_proves_the_producer_unknown(tmp_path,
                                                                                         alert_names_the_id):
    with Cluster(tmp_path, (3, 9)) as c:
        # the coordinator now maps payments-7 to producer id 5000 (TransactionCoordinator: a new
        # producer id for the transactional id); ListTransactions filtered by 4002 lists nothing,
        # and __transaction_state is not readable for this principal
        c.broker.set_transaction("payments-7", producer_id=5000, producer_epoch=0, state="Empty")
        c.broker.deny("Read", "Topic", "__transaction_state")
        _alert(c.alerts, **({"transactional_id": "payments-7"} if alert_names_the_id else {}))
        code, text = c.run()
        assert c.markers_sent() == 0
    if alert_names_the_id:  # DescribeTransactions of the alert's id names 5000: 4002 is unknown to it
        assert code == 0, text
        assert "hanging (coordinator-unaware), verified" in text
    else:  # nothing proves it: an empty ListTransactions may only mean no Describe ACL
        assert code == 4 and "- unverified:" in text


def test_state_changed_while_the_operator_answered_is_refused(tmp_path):
    with Cluster(tmp_path, (2, 8)) as c:
        class SlowOperator(io.StringIO):
            def readline(self, *a):
                # while the question waits, the producer comes back with epoch 3 and joins the
                # open transaction (ProducerAppendInfo.appendDataBatch)
                c.broker.append_raw("orders", 0, encode_batch(
                    5, 1, producer_id=PID, producer_epoch=3, base_sequence=0, is_transactional=True,
                    base_timestamp=int(time.time() * 1000)))
                return "yes\n"

        code, text = c.run(execute=True, stdin=SlowOperator())
        assert code == 4, text
        assert c.markers_sent() == 0
    assert "- producer-epoch-changed:" in text
    assert [a["outcome"] for a in read_audit(str(c.audit))] == ["refused"]


def test_marker_accepted_but_lso_not_moving_is_reported_as_exit_1(tmp_path):
    with Cluster(tmp_path, (3, 0)) as c:
        # the leader's high watermark stays at 2 (UnifiedLog: the LSO is capped at the high
        # watermark): the marker is in the log but the LSO reported by ListOffsets stays at 2
        c.broker.on_next_write_txn_markers(lambda b: b.lag_high_watermark("orders", 0, 2))
        code, text = c.run(execute=True, yes=True, **{"abort.lso_wait_ms": 1000})
        assert code == 1
        assert c.markers_sent() == 1
    assert "the broker accepted the marker but the LSO of orders-0 is still 2 after 1000 ms" in text
    assert [a["outcome"] for a in read_audit(str(c.audit))] == ["sending", "lso-not-moved"]


@pytest.mark.parametrize(("version", "refused"), [((2, 7), True), ((2, 8), False)], ids=["2.7", "2.8"])
def test_a_re_read_cut_short_is_not_proof_without_describe_producers(tmp_path, version, refused):
    with Cluster(tmp_path, version) as c:
        # another producer's batches after the transaction, and [kafka] span_max_bytes = 100: the
        # read of orders-0 stops before the high watermark; before 2.8 nothing else shows that no
        # marker closed the transaction after it
        c.broker.append_raw("orders", 0, b"".join(encode_batch(5 + i, 1, producer_id=77, producer_epoch=0,
                                                               base_sequence=i, base_timestamp=int(time.time() * 1000))
                                                  for i in range(3)))
        code, text = c.run(**{"kafka.span_max_bytes": 100})
    if refused:
        assert code == 4 and "- not-proven: the transaction could not be re-read to the end" in text
    else:  # the leader's DescribeProducers entry says it is open at 2; the preview is a lower bound
        assert code == 0, text
        assert "discards: at least " in text


@pytest.mark.parametrize(("version", "state"), [((2, 7), "PrepareAbort"), ((3, 9), "PrepareCommit")],
                         ids=["2.7-PrepareAbort", "3.9-PrepareCommit"])
def test_refuses_while_the_coordinator_has_markers_pending(tmp_path, version, state):
    # the coordinator decided (Prepare*) and still lists orders-0: its marker will come
    # (TransactionMarkerChannelManager); an abort now could contradict a COMMIT elsewhere
    with Cluster(tmp_path, version, coordinator_state=state, partitions={"orders": [0]}) as c:
        text = _refused(c, "coordinator-owns")
    assert f"'payments-7' {state} with orders-0 among its partitions" in text and "markers-pending" in text


def test_uses_the_jobs_sasl_settings_and_names_the_principal_in_the_acl_message(tmp_path):
    from tests.kafka_fake_security import SaslConfig

    with Cluster(tmp_path, (4, 0), sasl=SaslConfig.for_users({"ops": "s3cret"})) as c:
        for op in ("ClusterAction", "Alter"):
            c.broker.deny(op, "Cluster", "kafka-cluster", principal="User:ops")
        sasl = {"kafka.security_protocol": "SASL_PLAINTEXT", "kafka.sasl_mechanism": "PLAIN",
                "kafka.sasl_plain_username": "ops", "kafka.sasl_plain_password": "s3cret"}
        assert c.run(**sasl)[0] == 0
        code, text = c.run(execute=True, yes=True, **sasl)
        assert code == 1 and c.lso() == FIRST
    assert "--allow-principal User:ops --operation Alter --cluster" in text


def test_an_alert_epoch_from_a_rule_that_errs_low_is_replaced_by_the_exact_one(tmp_path):
    # detection.md §4 rule 5 (producer-last-marker) may be below the leader's value: the exact
    # re-read (the leader's DescribeProducers entry: 3) is not a state change and is what is sent
    with Cluster(tmp_path, (3, 9)) as c:
        _alert(c.alerts, coordinator_epoch=2, coordinator_epoch_source="producer-last-marker")
        code, text = c.run(execute=True, yes=True)
        assert code == 0, text
        (req,) = c.broker.requests_for("write_txn_markers")
        assert req.request.markers[0].coordinator_epoch == 3


def test_an_lso_held_at_the_log_start_does_not_close_a_transaction_retention_cut():
    """``UnifiedLog.maybeIncrementFirstUnstableOffset`` reports max(first unstable offset, log start
    offset): a transaction that began at 6 in a segment retention deleted (log start 10) holds the
    LSO at exactly 10, so LSO 10 > 6 is not proof that it closed (the re-check must go on to
    DescribeProducers, whose ``CurrentTxnStartOffset`` 6 says it is open); an LSO of 11 is proof,
    since an open transaction at 6 would hold it at 10. For a transaction inside the log the old rule
    stands: LSO 8 > first offset 7 closes it."""
    from streaming.abort.key import AlertKey
    from streaming.abort.plan import _closed
    from streaming.abort.reread import Reread, lso_passed
    from streaming.sources.kafka_wire import PartitionOffsets
    from streaming.verdict import DescribeProducersAnswer

    def offs(log_start: int, lso: int) -> PartitionOffsets:
        return PartitionOffsets("orders", 0, log_start, 18, lso, 1)

    assert not lso_passed(offs(10, 10), 6)
    assert lso_passed(offs(10, 11), 6)
    assert lso_passed(offs(0, 8), 7)
    assert not lso_passed(offs(0, 7), 7)
    key = AlertKey("c", "orders", 0, 1001, 6)
    still_open = DescribeProducersAnswer(found=True, producer_epoch=0, coordinator_epoch=3, current_txn_start_offset=6)
    assert _closed(Reread(key, 0, 1, offs(10, 10), describe_producers=still_open)) is None
    assert _closed(Reread(key, 0, 1, offs(10, 11), describe_producers=still_open)) is not None
