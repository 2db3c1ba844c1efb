"""``scan`` of small inputs without Spark: the same job, run in this process.

Starting a SparkSession and a streaming query costs seconds before the first row is read; for
one dump file or a small log dir that is nearly all of a scan. This engine runs the very code
the streaming scan runs, in the same order:

* the source's *batch* reader (``partitions()`` then ``read()``), which plans and reads exactly
  what the available-now stream's single micro-batch reads (same clock, same ranges);
* the state operator (:func:`streaming.pipeline.state_rows`) once per ``route_pid`` with a
  :class:`LocalGroupState`, then, like Spark's no-data batch after the watermark moved to the
  clock, once more for every key whose event-time timeout the watermark has passed;
* the ``foreachBatch`` writer (:func:`streaming.pipeline.make_batch_writer`): enrichment, sinks.

Nothing is parallel, so the Spark engine stays the choice for large inputs.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from streaming.alerts import Enricher
from streaming.events import FIELD_NAMES
from streaming.pipeline import SinkSet, make_batch_writer, state_rows_of
from streaming.state_machine import EngineConfig, event_records


class LocalGroupState:
    """The part of Spark's ``GroupState`` the state function uses, for one key in memory."""

    def __init__(self, doc: tuple | None, watermark_ms: int) -> None:
        self._doc = doc
        self._wm = watermark_ms
        self.timeout_ms: int | None = None

    @property
    def exists(self) -> bool:
        return self._doc is not None

    @property
    def get(self) -> tuple:
        if self._doc is None:
            raise ValueError("state does not exist")
        return self._doc

    def update(self, doc: tuple) -> None:
        self._doc = doc

    def remove(self) -> None:
        self._doc = None
        self.timeout_ms = None

    def setTimeoutTimestamp(self, ms: int) -> None:
        self.timeout_ms = ms

    def getCurrentWatermarkMs(self) -> int:
        return self._wm


class _Rows:
    """What ``make_batch_writer`` reads of a micro-batch DataFrame: ``collect()`` of rows."""

    class _Row(dict):
        def asDict(self) -> dict[str, Any]:
            return self

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = [self._Row(r) for r in rows]

    def collect(self) -> list[dict[str, Any]]:
        return self._rows


def read_source(reader: Any) -> pd.DataFrame:
    """Every event a source's batch reader yields, as one pandas frame."""
    import pyarrow as pa

    from streaming.sources import logdir

    logdir.PLAN_SCANS = {}  # each file's headers scanned once, when planned (logdir.PLAN_SCANS)
    try:
        batches = [b for p in reader.partitions() for b in reader.read(p)]
    finally:
        logdir.PLAN_SCANS = None
    if not batches:
        return pd.DataFrame(columns=list(FIELD_NAMES))
    return pa.Table.from_batches(batches).to_pandas()


class LocalStates:
    """The state operator's keys across micro-batches, in memory, in Spark's order: each
    micro-batch calls the state function for every key with events (at the watermark the
    previous micro-batch left), then for every other key whose event-time timeout that watermark
    has passed; afterwards the watermark moves to the batch's newest event time (zero delay)."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.docs: dict[int, tuple] = {}  # route_pid -> state row, for keys that have state
        self.timeouts: dict[int, int | None] = {}
        self.watermark = 0

    def micro_batch(self, events: pd.DataFrame | None) -> list[dict[str, Any]]:
        """The state operator's output rows for one micro-batch of ``events`` (None: no data)."""
        # The frame -> dicts conversion once for all keys (per key it cost a pass over ~40 columns
        # each time); per element it is the same conversion, so each key gets the dicts it would get.
        by_pid: dict[int, list[dict[str, Any]]] = {}
        for rec in event_records(events) if events is not None and len(events) else []:
            if rec["route_pid"] is not None:  # as groupby, which drops null keys
                by_pid.setdefault(int(rec["route_pid"]), []).append(rec)
        out: list[dict[str, Any]] = []
        for pid in sorted(by_pid):
            out += self._call(pid, by_pid[pid])
        for pid, t in sorted(self.timeouts.items()):
            if pid not in by_pid and t is not None and t <= self.watermark:
                out += self._call(pid, [])
        if events is not None and len(events):
            newest = pd.to_datetime(events["event_time"], utc=True).max()
            if newest is not pd.NaT:
                self.watermark = max(self.watermark, int(newest.value // 1_000_000))
        return out

    def _call(self, pid: int, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        st = LocalGroupState(self.docs.get(pid), self.watermark)
        rows = state_rows_of(self.cfg, pid, events, st)
        if st.exists:
            self.docs[pid], self.timeouts[pid] = st.get, st.timeout_ms
        else:
            self.docs.pop(pid, None)
            self.timeouts.pop(pid, None)
        return rows


def run_scan(events: pd.DataFrame, cfg: EngineConfig, enricher: Enricher,
             sinks: SinkSet) -> dict[int, tuple]:
    """The streaming scan's micro-batches over ``events``, in process (see the module docstring):
    the available-now batch, then the no-data batch that fires the timers the watermark passed.
    Returns the state row per producer id as the last micro-batch left it."""
    states = LocalStates(cfg)
    write = make_batch_writer(enricher, sinks)
    write(_Rows(states.micro_batch(events)), 0)
    timed_out = states.micro_batch(None)
    if timed_out:
        write(_Rows(timed_out), 1)
    return states.docs
