"""The alert key an operator copies (``cluster/topic/partition/producer_id/first_offset``) and the
newest alert published for it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AlertKey:
    cluster: str
    topic: str
    partition: int
    producer_id: int
    first_offset: int

    @property
    def tp(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return f"{self.cluster}/{self.topic}/{self.partition}/{self.producer_id}/{self.first_offset}"


def parse_key(text: str) -> AlertKey:
    """Parse an alert key; a ValueError names what is wrong. Kafka topic names hold no ``/``
    (``Topic.validate``: ASCII alphanumerics, ``.``, ``_`` and ``-``), so the last four parts are
    topic, partition, producer id and first offset and everything before them is the cluster."""
    parts = text.strip().rsplit("/", 4)
    if len(parts) != 5 or not all(parts[:2]):
        raise ValueError(f"alert key {text!r}: expected cluster/topic/partition/producer_id/first_offset")
    cluster, topic, *numbers = parts
    names = ("partition", "producer_id", "first_offset")
    values = []
    for name, raw in zip(names, numbers, strict=True):
        try:
            values.append(int(raw))
        except ValueError:
            raise ValueError(f"alert key {text!r}: {name} {raw!r} is not an integer") from None
        if values[-1] < 0:
            raise ValueError(f"alert key {text!r}: {name} {raw} is negative")
    return AlertKey(cluster, topic, *values)


def latest_alert(path: str, key: AlertKey) -> dict[str, Any] | None:
    """The newest record for ``key`` in a JSONL alerts file (the job's ``sinks.jsonl_path``);
    None when the file or the key is absent. Lines that are not JSON are skipped (a line being
    written by the job at this moment)."""
    if not path or not os.path.exists(path):
        return None
    wanted, found = str(key), None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if wanted not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("key") == wanted and rec.get("record_type", "alert") == "alert":
                found = rec
    return found
