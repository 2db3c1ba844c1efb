"""Test helper: the state machine and alert enrichment run in-process over an event frame.

Only for fast ground-truth checks in tests; ``scan``/``run`` always go through Spark.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from streaming.alerts import AlertConfig, Enricher
from streaming.state_machine import EngineConfig, process_key


def run_engine(events: pd.DataFrame, *, coordinator_available: bool, cluster: str = "d") -> list[dict[str, Any]]:
    """Active findings after one evaluation of every producer at the events' clock."""
    cfg = EngineConfig(cluster=cluster, coordinator_available=coordinator_available)
    df = events.copy()
    df["event_time_ms"] = df["event_time"].map(lambda t: int(t.value // 1_000_000))
    now = int(df["event_time_ms"].max())
    raw = []
    for pid, g in df[df["route_pid"] >= 0].groupby("route_pid"):
        rows = [{k: (None if (not isinstance(v, list | tuple) and pd.isna(v)) else v) for k, v in r.items()}
                for r in g.to_dict("records")]
        out, _doc, _timer = process_key(int(pid), rows, None, now_ms=now, cfg=cfg)
        raw += [o for o in out if o["out_kind"] == "alert"]
    progress = [dict(r, now_ms=r["event_time_ms"]) for r in df[df["kind"] == "progress"].to_dict("records")]
    enricher = Enricher(AlertConfig(txn_state_partitions=50))  # files and dumps: [coordinator] default
    enricher.process(raw, progress)
    return [e["alert"] for e in enricher.active.values()]
