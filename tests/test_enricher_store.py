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


@pytest.mark.spark
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
