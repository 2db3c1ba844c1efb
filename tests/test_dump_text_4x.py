"""Dump text of Kafka 4.0, 4.1 and later, and every ``--offsets-decoder`` generation (issue 25 item 4).

Each fixture in ``fixtures/dumps4x`` is written by hand from the DumpLogSegments source of its
release, read for this test:

* transaction-log decoder: 2.5-4.0 text (``TransactionLog.formatRecordKeyAndValue``, Scala
  ``kafka.tools.DumpLogSegments``); 4.1+ JSON from ``CoordinatorRecordMessageParser`` with
  ``TransactionLogValue.json``'s ``TransactionStatus`` an ``int8`` printed as a number
  (transaction-coordinator/src/main/resources/common/message/TransactionLogValue.json); 4.4
  prints the state name (KAFKA-20712, spec/kafka-dump-log.md §5);
* offsets decoder: 0.11-2.4 ``OffsetsMessageParser.parseOffsets`` (``offset::g:t:p`` / ``n[:m]``,
  tags 0.11.0.0 and 2.4.0), 2.5-3.7 ``GroupMetadataManager.formatRecordKeyAndValue``
  (``offset_commit::group=g,partition=t-p`` / ``offset=n[,metadata=m]`` / ``<DELETE>``, tags 2.5.0
  and 3.7.0), 3.8-4.2 Scala ``OffsetsMessageParser.prepareKey`` (KAFKA-16470, tag 3.8.0: JSON,
  ``"type"`` = key version) and 4.3+ Java ``org.apache.kafka.tools.DumpLogSegments
  .OffsetsMessageParser`` (``"type"`` = the record's apiKey: OffsetCommitKey 1,
  group-coordinator/.../OffsetCommitKey.json; an unknown type prints ``Unknown record type N at
  offset O, skipping.``);
* the class moved: ``kafka.tools.DumpLogSegments`` (Scala, ≤4.2) -> ``org.apache.kafka.tools
  .DumpLogSegments`` (Java, 4.3+); both names run through ``kafka-run-class.sh``.

Every expected value below is read off the fixture text by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from udfs.dump_text import CONTROL_ABORT, CONTROL_COMMIT, OFFSET_COMMIT_KEYS, parse_dump
from udfs.offsets_text import OffsetCommitText, OffsetsTextError, parse_offsets_record

FIX = Path(__file__).resolve().parent / "fixtures" / "dumps4x"


def _parse(name: str):
    return parse_dump((FIX / name).read_text(), source=name)


def _commits(f) -> list[tuple]:
    return [(r["offset"], r["group"], r["topic"], r["partition"], r["committed_offset"], r["producer_id"],
             r["is_transactional"]) for r in f.offset_commits]


def test_40_text_transaction_log_and_json_offsets() -> None:
    co, ts = _parse("kafka-4.0_txn-log-text_offsets-json.txt")
    assert (co.kind, co.topic, co.partition, co.errors) == ("data", "__consumer_offsets", 12, [])
    # offset 6: a plain commit; offset 7: producer 4001's transactional commit, no marker after it
    assert _commits(co) == [(6, "billing", "orders", 0, 40, -1, False), (7, "billing", "orders", 1, 57, 4001, True)]
    assert all(tuple(r) == OFFSET_COMMIT_KEYS for r in co.offset_commits)
    assert [r["style"] for r in co.offset_commits] == ["json", "json"]
    assert (ts.kind, ts.topic, ts.partition, ts.errors) == ("txn_log", "__transaction_state", 30, [])
    (r,) = ts.txn_records
    assert (r["transactional_id"], r["txn_state"], r["producer_id"], r["producer_epoch"], r["txn_partitions"]) == \
        ("billing-tx-0", "Ongoing", 4001, 2, ["__consumer_offsets-12"])
    # valueSize 65 is exactly a v0 value with one topic "__consumer_offsets" and one partition
    # (2+8+2+4+1+4+(2+18+4+4)+8+8): the text form's value version is inferred as 0
    assert r["value_version"] == 0 and r["txn_start_ts"] is None and r["coordinator_epoch"] == 5


def test_41_numeric_transaction_status() -> None:
    (ts,) = _parse("kafka-4.1_txn-log-json-numeric.txt")
    assert ts.errors == [] and (ts.topic, ts.partition, ts.path_source) == ("__transaction_state", 7, "dumping")
    got = [(r["offset"], r["txn_state"], r["txn_partitions"], r["tombstone"]) for r in ts.txn_records]
    # TransactionState ids: 1 Ongoing, 2 PrepareCommit, 4 CompleteCommit; offset 3 prints <DELETE>
    assert got == [(0, "Ongoing", ["orders-0", "orders-2"], False), (1, "PrepareCommit", ["orders-0", "orders-2"], False),
                   (2, "CompleteCommit", [], False), (3, None, None, True)]
    r0 = ts.txn_records[0]
    assert (r0["producer_id"], r0["producer_epoch"], r0["txn_timeout_ms"], r0["txn_start_ts"], r0["value_version"]) == \
        (77, 4, 60000, 1761999999000, 0)
    # a v0 value has no tagged fields: the defaults of TransactionLogValue.json
    assert (r0["prev_producer_id"], r0["next_producer_id"], r0["client_txn_version"]) == (-1, -1, 0)


def test_44_named_status_java_class_and_lost_dumping_line() -> None:
    (ts,) = _parse("kafka-4.4_txn-log-json-named_java-class_dumping-lost.txt")
    assert ts.errors == []
    # no "Dumping" line: the path is the --files argument of the org.apache.kafka.tools command
    assert (ts.path, ts.path_source) == ("/data/kafka/__transaction_state-41/00000000000000000200.log", "command")
    assert (ts.kind, ts.topic, ts.partition, ts.log_start_offset, ts.file_offset) == \
        ("txn_log", "__transaction_state", 41, 200, 200)
    (r,) = ts.txn_records
    assert (r["offset"], r["transactional_id"], r["txn_state"], r["producer_id"], r["producer_epoch"]) == \
        (200, "payments-3", "PrepareAbort", 9001, 32766)
    # v1 value: tagged fields printed only when non-default; previousProducerId absent -> -1
    assert (r["value_version"], r["next_producer_id"], r["prev_producer_id"], r["client_txn_version"]) == (1, 9002, -1, 2)
    assert r["txn_partitions"] == ["ledger-5"] and r["txn_timeout_ms"] == 900000


@pytest.mark.parametrize("cls", ["kafka.tools.DumpLogSegments", "org.apache.kafka.tools.DumpLogSegments"])
def test_both_class_names_give_the_path_when_dumping_is_lost(cls: str) -> None:
    text = (f"$ bin/kafka-run-class.sh {cls} --deep-iteration --files /d/orders-3/00000000000000000100.log\n"
            "Log starting offset: 100\n"
            "baseOffset: 100 lastOffset: 100 count: 1 baseSequence: 0 lastSequence: 0 producerId: 8 producerEpoch: 0 "
            "partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty "
            "position: 0 CreateTime: 5 size: 70 magic: 2 compresscodec: none crc: 1 isvalid: true\n"
            "| offset: 100 CreateTime: 5 keySize: -1 valueSize: 1 sequence: 0 headerKeys: []\n")
    (f,) = parse_dump(text)
    assert (f.topic, f.partition, f.path_source, f.errors) == ("orders", 3, "command", [])
    assert list(f.batches["base_offset"]) == [100] and bool(f.batches["is_transactional"][0])


def test_37_text_offsets_decoder() -> None:
    (co,) = _parse("kafka-3.7_offsets-text.txt")
    assert co.errors == []
    # group_metadata::group=reports (offset 0) is not an offset commit; offset 4 is a tombstone
    assert _commits(co) == [(1, "reports", "clicks", 0, 1500, 12, True), (2, "reports", "clicks", 1, 880, 12, True),
                            (4, "reports", "clicks", 0, None, -1, False)]
    assert {r["style"] for r in co.offset_commits} == {"2.5"}
    assert list(co.batches["control_type"])[2] == CONTROL_COMMIT


def test_24_legacy_offsets_decoder_group_with_colon() -> None:
    (co,) = _parse("kafka-2.4_offsets-legacy.txt")
    assert co.errors == [] and co.log_start_offset == 0
    assert _commits(co) == [(10, "app:eu", "payments", 0, 99, 33, True)]
    assert co.offset_commits[0]["style"] == "0.11"
    assert list(co.batches["control_type"])[1] == CONTROL_ABORT


def test_43_java_offsets_decoder_and_unknown_record_type() -> None:
    (co,) = _parse("kafka-4.3_offsets-json-java.txt")
    # type 3 (ConsumerGroupMetadataKey) is not an offset commit; type 1 is
    assert _commits(co) == [(1, "kip848-app", "events", 4, 1234, 500, True)]
    # the tool could not decode offset 2: it might have been an offset commit, so it is reported
    assert [(e.position, "could not decode" in e.reason, e.base_offset) for e in co.errors] == [(12, True, 2)]


def test_offsets_record_strings_of_every_generation() -> None:
    # literal key/value strings in the form each generation's format string produces
    assert parse_offsets_record("offset::g:t:3", "17") == OffsetCommitText("g", "t", 3, 17, "0.11")
    assert parse_offsets_record("offset::g:t:3", "17:meta:x") == OffsetCommitText("g", "t", 3, 17, "0.11")
    assert parse_offsets_record("offset_commit::group=g,partition=my-topic-12", "offset=5,metadata=") == \
        OffsetCommitText("g", "my-topic", 12, 5, "2.5")
    assert parse_offsets_record("offset_commit::group=g,partition=t-0", "<DELETE>") == \
        OffsetCommitText("g", "t", 0, None, "2.5")
    assert parse_offsets_record('{"type":"0","data":{"group":"g","topic":"t","partition":2}}',
                                '{"version":"1","data":{"offset":9,"metadata":"","commitTimestamp":1,'
                                '"expireTimestamp":-1}}') == OffsetCommitText("g", "t", 2, 9, "json")
    assert parse_offsets_record('{"type":"1","data":{"group":"g","topic":"t","partition":2}}', "<DELETE>") == \
        OffsetCommitText("g", "t", 2, None, "json")
    assert parse_offsets_record("group_metadata::group=g", "{}") is None
    assert parse_offsets_record('{"type":"2","data":{"group":"g"}}', "<DELETE>") is None


@pytest.mark.parametrize("key,payload,fragment", [
    ("offset_commit::group=g,partition=t-0", "offset=x", "is not offset=N"),
    ('{"type":"1","data":{"group":"g","topic":"t"}}', "<DELETE>", "group/topic/partition unreadable"),
    ('{"type":"1","data":{"group":"g","topic":"t","partition":0}}', '{"version":"3","data":{}}', "unreadable JSON"),
    ('{"type":"1","data":', None, "unreadable JSON"),
    ("Error at offset 4, skipping. boom", None, "could not decode"),
    ("unknown::version=7", None, "could not decode"),
])
def test_offsets_record_problems_name_the_field(key: str, payload: str | None, fragment: str) -> None:
    with pytest.raises(OffsetsTextError, match=fragment):
        parse_offsets_record(key, payload)


@pytest.mark.parametrize("cls", ["kafka.tools.DumpLogSegments", "org.apache.kafka.tools.DumpLogSegments"])
def test_a_class_name_this_kafka_lacks_is_reported_not_silent(cls: str) -> None:
    # What the JVM launcher prints when kafka-run-class.sh names a main class that is not on the
    # class path (Kafka 4.3 replaced the Scala kafka.tools.DumpLogSegments with the Java
    # org.apache.kafka.tools.DumpLogSegments; an older Kafka lacks the Java one).
    text = (f"$ bin/kafka-run-class.sh {cls} --deep-iteration --files /d/orders-3/00000000000000000100.log\n"
            f"Error: Could not find or load main class {cls}\n"
            f"Caused by: java.lang.ClassNotFoundException: {cls}\n")
    (f,) = parse_dump(text)
    assert (f.topic, f.partition, f.path_source, len(f)) == ("orders", 3, "command", 0)
    (e,) = f.errors
    assert e.position == 2 and f"no class {cls}" in e.reason and "/d/orders-3/00000000000000000100.log" in e.reason
