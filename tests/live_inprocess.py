"""The live job's micro-batches run in this process (tests only): the ``kafka-txn`` stream
reader's ``latestOffset``/``partitions``/``read`` on the driver, the state function per
``route_pid`` (with event-time timeouts fired once the watermark — the previous micro-batch's
newest event time, Spark's rule with a zero delay — passes them), and the ``foreachBatch`` writer.

It runs the very functions the Spark job runs, minus Spark: the mode-equality test runs every
scenario twice (probe and full read modes) and a Spark query per scenario and mode would take
most of the suite's time budget. ``tests/test_kafka_probe.py`` also runs one Spark query in
probe mode, so the glue is covered there.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from streaming.alerts import Enricher
from streaming.availability import Availability
from streaming.local_engine import LocalGroupState, _Rows
from streaming.pipeline import SinkSet, make_batch_writer, state_rows
from streaming.sources.kafka import KafkaStreamReader, read_partition
from streaming.state_machine import EngineConfig


class LiveJob:
    """One live job (reader, state per producer id, enricher) driven micro-batch by micro-batch."""

    def __init__(self, options: dict[str, str], cfg: EngineConfig, enricher: Enricher) -> None:
        self.reader = KafkaStreamReader(options)
        self.cfg = cfg
        self.enricher = enricher
        self.alerts: list[dict[str, Any]] = []
        self.write = make_batch_writer(enricher, SinkSet(sinks=[self.alerts.extend]), Availability())
        self.docs: dict[int, tuple] = {}
        self.timeouts: dict[int, int | None] = {}
        self.watermark = 0
        self.offset: dict | None = None
        self.batch_id = 0
        self.rows_read = 0

    def trigger(self) -> dict:
        start = self.offset or self.reader.initialOffset()
        end = self.reader.latestOffset(start)
        frames = [read_partition(p, self.reader.opts) for p in self.reader.partitions(start, end)]
        frames = [f for f in frames if len(f)]
        events = pd.concat(frames, ignore_index=True) if frames else None
        out: list[dict[str, Any]] = []
        keys: set[int] = set()
        if events is not None:
            self.rows_read += len(events)
            for pid, frame in events.groupby("route_pid", sort=True):
                keys.add(int(pid))
                out += self._call(int(pid), [frame])
        for pid, t in list(self.timeouts.items()):
            if pid not in keys and t is not None and t <= self.watermark and pid in self.docs:
                out += self._call(pid, [])
        self.write(_Rows(out), self.batch_id)
        self.batch_id += 1
        if events is not None and len(events):
            newest = pd.to_datetime(events["event_time"], utc=True).max()
            self.watermark = max(self.watermark, int(newest.value // 1_000_000))
        self.offset = end
        return end

    def close(self) -> None:
        """Close the enricher's broker clients (the cached source clients: ``close_wires``)."""
        close = getattr(self.enricher.broker, "close", None)
        if close is not None:
            close()

    def _call(self, pid: int, frames: list[pd.DataFrame]) -> list[dict[str, Any]]:
        st = LocalGroupState(self.docs.get(pid), self.watermark)
        rows = state_rows(self.cfg, pid, frames, st)
        if st.exists:
            self.docs[pid] = st.get
            self.timeouts[pid] = st.timeout_ms
        else:
            self.docs.pop(pid, None)
            self.timeouts.pop(pid, None)
        return rows
