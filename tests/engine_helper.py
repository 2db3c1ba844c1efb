"""Test helper: the one micro-batch loop (:mod:`streaming.microbatch`) run in-process over an
event frame, as ``scan --engine local`` runs it (:func:`streaming.local_engine.run_scan`).

Only for fast ground-truth checks in tests; the Spark engine runs the same loop.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from streaming.alerts import AlertConfig, Enricher
from streaming.local_engine import run_scan
from streaming.microbatch import SinkSet
from streaming.state_machine import EngineConfig


def run_engine(events: pd.DataFrame, *, coordinator_available: bool, cluster: str = "d") -> list[dict[str, Any]]:
    """Active findings after the scan's micro-batches over the events (the available-now batch,
    then the timers its watermark — the events' clock — passed)."""
    enricher = Enricher(AlertConfig(txn_state_partitions=50))  # files and dumps: [coordinator] default
    run_scan(events, EngineConfig(cluster=cluster, coordinator_available=coordinator_available), enricher, SinkSet())
    return [e["alert"] for e in enricher.active.values()]
