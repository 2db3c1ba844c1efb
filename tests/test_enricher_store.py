"""The sink's memory (txnwatch-sink.json) survives restarts for local paths and checkpoint URLs."""

from __future__ import annotations

import pytest

import streaming.alerts as alerts
from streaming.alerts import AlertConfig, Enricher


def test_local_round_trip(tmp_path):
    e = Enricher(AlertConfig(), str(tmp_path / "ck" / "txnwatch-sink.json"))
    e.last_batch_id = 4
    e.partitions["t-0"] = {"lso": 3}
    e.save()
    again = Enricher(AlertConfig(), str(tmp_path / "ck" / "txnwatch-sink.json"))
    assert again.last_batch_id == 4 and again.partitions == {"t-0": {"lso": 3}}



def _progress(partition: int, hw: int, lso: int, end_proven: bool) -> dict:
    return {"topic": "t", "partition": partition, "high_watermark": hw, "lso": lso, "log_start_offset": 0,
            "end_proven": end_proven, "source": "kafka", "now_ms": 1000}


def test_saves_after_a_few_changed_partitions_restore_every_partition(tmp_path):
    # save() encodes only the per-partition entries progress changed since the save before; a
    # restart must still read every partition's latest facts (and none of an earlier save's).
    path = str(tmp_path / "ck" / "txnwatch-sink.json")
    e = Enricher(AlertConfig(), path)
    for p in range(3):
        e.observe_progress(_progress(p, 10, 10, True))
    e.last_batch_id = 0
    e.save()
    e.observe_progress(_progress(1, 20, 15, False))  # partition 1 moves, its LSO held by an open txn
    e.observe_progress(_progress(3, 5, 5, True))  # a new partition
    e.last_batch_id = 1
    e.save()
    e.observe_progress(_progress(2, 30, 30, True))
    e.last_batch_id = 2
    e.save()
    again = Enricher(AlertConfig(), path)
    assert again.last_batch_id == 2
    assert again.partitions == {"t-0": {"high_watermark": 10, "lso": 10, "log_start_offset": 0},
                                "t-1": {"high_watermark": 20, "lso": 15, "log_start_offset": 0},
                                "t-2": {"high_watermark": 30, "lso": 30, "log_start_offset": 0},
                                "t-3": {"high_watermark": 5, "lso": 5, "log_start_offset": 0}}
    assert again.end_proven == {"t-0": True, "t-1": False, "t-2": True, "t-3": True}
    assert again.sources == {"t-0": "kafka", "t-1": "kafka", "t-2": "kafka", "t-3": "kafka"}
    # the restarted one saves incrementally too, and a map replaced by other code is written whole
    again.observe_progress(_progress(0, 11, 11, True))
    again.end_proven = {"t-0": False}
    again.last_batch_id = 3
    again.save()
    third = Enricher(AlertConfig(), path)
    assert third.partitions["t-0"] == {"high_watermark": 11, "lso": 11, "log_start_offset": 0}
    assert third.partitions["t-1"]["lso"] == 15 and third.end_proven == {"t-0": False}

@pytest.mark.spark
def test_state_file_entries_are_json_dumps_text():
    # save() writes each entry as json.dumps (default arguments: ", " and ": " separators, ASCII
    # escapes) would; _json_text gives that text without an encoder per entry. Expected by hand.
    cases = [
        ("t-0", '"t-0"'),
        ("caf\u00e9\t\"q\"", '"caf\\u00e9\\t\\"q\\""'),
        (12, "12"), (-3, "-3"), (True, "true"), (False, "false"), (None, "null"),
        ({"high_watermark": 10, "lso": None, "log_start_offset": 0},
         '{"high_watermark": 10, "lso": null, "log_start_offset": 0}'),
        ({}, "{}"),
        # anything else is json.dumps' own text
        (1.5, "1.5"), ([1, "a"], '[1, "a"]'), ({"a": [1]}, '{"a": [1]}'), ({1: True}, '{"1": true}'),
        ({"a": {"b": 1}}, '{"a": {"b": 1}}'),
    ]
    for value, text in cases:
        assert alerts._json_text(value) == text, value


def test_hadoop_filesystem_round_trip(spark, tmp_path, monkeypatch):
    # Treat a file: URL as a remote checkpoint so the write/read go through Hadoop's FileSystem
    # in the Spark JVM, exactly as hdfs:// or s3a:// checkpoints do.
    monkeypatch.setattr(alerts, "_is_url", lambda p: True)
    url = f"file://{tmp_path}/remote/txnwatch-sink.json"
    e = Enricher(AlertConfig(), url)
    assert e.last_batch_id == -1
    e.last_batch_id = 7
    e.save()
    e.last_batch_id = 8
    e.save()  # replaces the previous document
    assert Enricher(AlertConfig(), url).last_batch_id == 8


def _open_set(pid: int, *txns: tuple[str, int, int]) -> list[dict]:
    """The state's ``open_set`` rows of one producer (no row with a topic: nothing open)."""
    if not txns:
        return [{"out_kind": "open_set", "producer_id": pid, "topic": None, "partition": None,
                 "first_offset": None, "first_ts": None}]
    return [{"out_kind": "open_set", "producer_id": pid, "topic": t, "partition": p, "first_offset": o,
             "first_ts": 1000 + o} for t, p, o in txns]


def test_open_sets_saved_incrementally_restore_exactly(tmp_path):
    # save() encodes again only the open-transaction sets that changed since the
    # save before; the file must still be the whole state, formatted as json.dumps gives it
    import json

    path = str(tmp_path / "ck" / "txnwatch-sink.json")
    e = Enricher(AlertConfig(), path)
    e.observe_open_sets(_open_set(1, ("t", 0, 5)) + _open_set(2, ("t", 1, 7), ("u", 0, 3)))
    e.save()
    e.observe_open_sets(_open_set(1) + _open_set(3, ("t", 2, 9)))  # 1 committed, 3 began, 2 unchanged
    e.save()
    e.observe_open_sets(_open_set(2, ("u", 0, 3)))  # 2 finished its transaction on t-1
    e.save()
    text = (tmp_path / "ck" / "txnwatch-sink.json").read_text()
    assert text == json.dumps(json.loads(text))  # exactly json.dumps' layout
    again = Enricher(AlertConfig(), path)
    assert again.open_txns == {
        "2": [{"topic": "u", "partition": 0, "first_offset": 3, "first_ts": 1003}],
        "3": [{"topic": "t", "partition": 2, "first_offset": 9, "first_ts": 1009}]}
    assert sorted((t["topic"], t["partition"], t["first_offset"]) for t in again.open_transactions()) == [
        ("t", 2, 9), ("u", 0, 3)]


def test_availability_saved_incrementally_restores_exactly(tmp_path):
    import json

    from streaming.availability import Availability, unavailable_reason

    path = str(tmp_path / "ck" / "txnwatch-availability.json")
    av = Availability(path)
    prog = [{"topic": "t", "partition": p, "now_ms": 1000} for p in range(3)]
    av.observe([], prog, {}, 1000)
    av.save()
    gap = {"topic": "t", "partition": 1, "reason": unavailable_reason("LEADER_NOT_AVAILABLE"), "now_ms": 2000,
           "cluster": "c"}
    av.observe([gap], [{"topic": "t", "partition": 0, "now_ms": 2000},
                       {"topic": "t", "partition": 2, "now_ms": 2000, "lagging": True}], {}, 2000)
    av.save()
    av.observe([], [{"topic": "t", "partition": 1, "now_ms": 3000}], {}, 3000)  # t-1 is back
    av.save()
    text = (tmp_path / "ck" / "txnwatch-availability.json").read_text()
    assert text == json.dumps(json.loads(text))
    again = Availability(path)
    assert again.last_read == {"t-0": 2000, "t-1": 3000, "t-2": 1000}  # t-2 lagging: its last read stays
    assert again.lagging == {"t-2": "t"} and again.down == {}
