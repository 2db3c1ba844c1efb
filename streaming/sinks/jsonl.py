"""JSONL alert sink: one alert object per line, appended and flushed per micro-batch."""

from __future__ import annotations

import json
import os
from typing import Any


class JsonlSink:
    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)

    def __call__(self, alerts: list[dict[str, Any]]) -> None:
        if not alerts:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            for a in alerts:
                f.write(json.dumps(a, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """All alerts of a JSONL file (tests and tools)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
