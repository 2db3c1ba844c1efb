"""``scan`` of small inputs without Spark: the same job, run in this process.

Starting a SparkSession and a streaming query costs seconds before the first row is read; for
one dump file or a small log dir that is nearly all of a scan. This engine runs the very loop
the streaming scan runs (:mod:`streaming.microbatch`), in the same order:

* the source's *batch* reader (``partitions()`` then ``read()``), which plans and reads exactly
  what the available-now stream's single micro-batch reads (same clock, same ranges); with a
  fixed clock the segments reader plans and reads one partition after the other instead
  (``SegmentsBatchReader.read_in_turn``: the same rows, each file's batch table used while in
  the CPU cache and its memory reused);
* the micro-batch over those events (:class:`streaming.microbatch.LocalLoop`: the state function
  per ``route_pid``, then the ``foreachBatch`` body: enrichment, sinks), then, like Spark's no-data
  batch after the watermark moved to the clock, the timers the watermark has passed.

Nothing is parallel, so the Spark engine stays the choice for large inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streaming.alerts import Enricher
from streaming.events import arrow_schema
from streaming.gc_pause import collector_paused
from streaming.microbatch import BatchWriter, LocalLoop, SinkSet
from streaming.state_machine import EngineConfig

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa


def read_source(reader: Any) -> pa.Table:
    """Every event a source's batch reader yields, as one Arrow table (the state operator reads
    its columns directly: no pandas frame in between, see ``streaming.event_rows``)."""
    import pyarrow as pa

    from streaming.sources import logdir

    logdir.PLAN_SCANS = {}  # each file's headers scanned once, when planned (logdir.PLAN_SCANS)
    logdir.PLAN_TXN = {}  # the coordinator partitions' records decoded together (logdir.PLAN_TXN)
    try:
        # an allocation burst without reference cycles (decoded records, replays, event columns):
        # young collections would promote it and start a full one (streaming.gc_pause)
        with collector_paused():
            in_turn = getattr(reader, "read_in_turn", lambda: None)()  # segments with a fixed clock
            batches = list(in_turn) if in_turn is not None else [b for p in reader.partitions() for b in reader.read(p)]
    finally:
        logdir.PLAN_SCANS = None
        logdir.PLAN_TXN = None
    if not batches:
        return arrow_schema().empty_table()
    return pa.Table.from_batches(batches)


def run_scan(events: pd.DataFrame | pa.Table, cfg: EngineConfig, enricher: Enricher,
             sinks: SinkSet) -> Mapping[int, tuple]:
    """The streaming scan's micro-batches over ``events``, in process (see the module docstring):
    the available-now batch, then the no-data batch that fires the timers the watermark passed.
    Returns the state row per producer id (its JSON document) as the last micro-batch left it."""
    loop = LocalLoop(cfg, BatchWriter(enricher, sinks))
    loop.run_batch(events)
    loop.run_timers()
    return loop.docs
