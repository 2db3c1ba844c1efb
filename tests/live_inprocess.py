"""The live job's micro-batches run in this process (tests only): the ``kafka-txn`` stream
reader's ``latestOffset``/``partitions``/``read`` on the driver, then the one micro-batch loop
(:class:`streaming.microbatch.LocalLoop`: the state function per ``route_pid`` with event-time
timeouts fired once the watermark passes them, and the ``foreachBatch`` body).

It runs the very functions the Spark job runs, minus Spark: the mode-equality test runs every
scenario twice (probe and full read modes) and a Spark query per scenario and mode would take
most of the suite's time budget. ``tests/test_kafka_probe.py`` also runs one Spark query in
probe mode, so the glue is covered there.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from streaming.alerts import Enricher
from streaming.availability import Availability
from streaming.microbatch import BatchWriter, LocalLoop, SinkSet
from streaming.sources.kafka import KafkaStreamReader, read_arrow
from streaming.state_machine import EngineConfig


class LiveJob:
    """One live job (reader, the one loop with the state per producer id and the enricher),
    driven micro-batch by micro-batch; ``alerts``: everything it published, in order."""

    def __init__(self, options: dict[str, str], cfg: EngineConfig, enricher: Enricher) -> None:
        self.reader = KafkaStreamReader(options)
        self.enricher = enricher
        self.alerts: list[dict[str, Any]] = []
        self.loop = LocalLoop(cfg, BatchWriter(enricher, SinkSet(sinks=[self.alerts.extend]), Availability()))
        self.offset: dict | None = None

    @property
    def docs(self) -> dict[int, tuple]:
        return self.loop.docs

    def trigger(self) -> dict:
        start = self.offset or self.reader.initialOffset()
        end = self.reader.latestOffset(start)
        batches = [b for b in (read_arrow(p, self.reader.opts) for p in self.reader.partitions(start, end))
                   if b is not None]
        self.loop.run_batch(pa.Table.from_batches(batches) if batches else None)
        self.offset = end
        return end

    def close(self) -> None:
        """Close the enricher's broker clients (the cached source clients: ``close_wires``)."""
        close = getattr(self.enricher.broker, "close", None)
        if close is not None:
            close()
