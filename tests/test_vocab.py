"""The alert vocabulary is defined once: the JSON Schema and the published alerts agree with it."""

from __future__ import annotations

import json

from streaming import vocab as V
from streaming.alerts import AlertConfig, finalize
from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "streaming" / "alert.schema.json").read_text())
PROPS = SCHEMA["properties"]


def _enum(prop: dict) -> list:
    return [v for v in prop["enum"] if v is not None]


def _then(status: str) -> dict:
    for branch in SCHEMA["allOf"]:
        if branch["if"]["properties"].get("status") == {"const": status}:
            return branch["then"]["properties"]
    raise AssertionError(f"no allOf branch for status {status!r}")


def test_schema_properties_are_the_alert_fields():
    # findings' fields, then what only partition availability records carry
    assert list(PROPS) == list(V.ALERT_FIELDS) + [f for f in V.AVAILABILITY_FIELDS if f not in V.ALERT_FIELDS]
    assert set(SCHEMA["required"]) <= set(V.ALERT_FIELDS)
    assert PROPS["schema_version"] == {"const": V.ALERT_SCHEMA_VERSION}


def test_schema_enums_are_the_vocabulary():
    assert _enum(PROPS["status"]) == list(V.STATUSES)
    assert _enum(PROPS["cause"]) == list(V.CAUSES)
    assert _then(V.HANGING)["cause"]["enum"] == list(V.HANGING_CAUSES)
    assert _then(V.LATE)["cause"]["enum"] == list(V.LATE_CAUSES)
    assert _enum(PROPS["resolution"]) == list(V.RESOLUTIONS)
    assert _enum(PROPS["coordinator_epoch_source"]) == list(V.EPOCH_SOURCES)
    assert _enum(PROPS["coordinator_state"]) == list(V.COORDINATOR_STATES)
    # every enum of the schema is covered above (a new one must be added to the vocabulary)
    assert _enum(PROPS["kind"]) == list(V.FINDING_KINDS)
    enums = {name for name, p in PROPS.items() if "enum" in p}
    assert enums == {"status", "cause", "resolution", "coordinator_epoch_source", "coordinator_state", "kind"}


def test_vocabulary_is_consistent():
    assert not set(V.HANGING_CAUSES) & set(V.LATE_CAUSES)
    assert V.OPEN not in V.STATUSES and set(V.FINDING_STATUSES) < set(V.STATUSES)
    assert set(V.OPEN_COORDINATOR_STATES) < set(V.COORDINATOR_STATES)
    assert V.COORDINATOR_STATES[0] == "Empty" and V.COORDINATOR_STATES[-1] == "PrepareEpochFence"


def test_published_alert_has_exactly_the_alert_fields():
    row = {"key": "c/t/0/7/3", "status": V.HANGING, "cause": V.WRITE_AFTER_MARKER, "verified": True,
           "cluster": "c", "topic": "t", "partition": 0, "producer_id": 7, "producer_epoch": 1, "first_offset": 3,
           "coordinator_epoch": 2, "coordinator_epoch_source": "last-marker"}
    alert = finalize(row, None, AlertConfig("k:9092"))
    assert tuple(alert) == V.ALERT_FIELDS


def test_unverified_reasons_are_the_vocabulary_and_empty_when_verified():
    # detection.md §0: stable strings, enumerated by the schema; resolutions carry none
    items = PROPS["unverified_reasons"]["items"]["enum"]
    assert items == list(V.UNVERIFIED_REASONS)
    assert len(set(items)) == len(items)
    assert V.PREPARED_2PC in V.LATE_CAUSES and V.PREPARED_2PC not in V.HANGING_CAUSES
    row = {"key": "c/t/0/7/3", "status": V.RESOLVED, "cause": None, "verified": True, "cluster": "c", "topic": "t",
           "partition": 0, "producer_id": 7, "producer_epoch": 1, "first_offset": 3, "resolution": "committed"}
    assert finalize(row, None, AlertConfig("k:9092"))["unverified_reasons"] == []


def test_finding_kind_follows_the_topic():
    # Every transactional batch of __consumer_offsets is a TxnOffsetCommit written with the
    # producer's id (GroupMetadataManager.storeOffsets: isTxnOffsetCommit = producerId !=
    # NO_PRODUCER_ID; 4.x OffsetMetadataManager.commitTransactionalOffset): its open transaction
    # holds consumer-group offsets. Any other topic's is a data transaction.
    base = {"status": V.HANGING, "cause": V.COORDINATOR_UNAWARE, "verified": True, "cluster": "c", "partition": 3,
            "producer_id": 7, "producer_epoch": 1, "first_offset": 3, "coordinator_epoch": 2,
            "coordinator_epoch_source": "last-marker"}
    held = finalize(dict(base, key="c/__consumer_offsets/3/7/3", topic="__consumer_offsets"), None,
                    AlertConfig("k:9092"))
    data = finalize(dict(base, key="c/orders/3/7/3", topic="orders"), None, AlertConfig("k:9092"))
    assert (held["kind"], data["kind"]) == ("group-offsets-held", "transaction")
    # both abort commands name the __consumer_offsets partition (detection.md §4)
    assert held["abort_command_new"] == ("kafka-transactions.sh --bootstrap-server 'k:9092' abort --topic "
                                         "'__consumer_offsets' --partition 3 --start-offset 3")
    assert "--topic '__consumer_offsets' --partition 3 --producer-id 7 --producer-epoch 1 --coordinator-epoch 2" \
        in held["abort_command_legacy"]
