"""The kafka source's shell: Spark's ``DataSource`` / ``DataSourceStreamReader`` API, each method a
few lines handing over to the driver-side planner (kafka_planner.py, state in kafka_plan_state.py),
the input partitions (kafka_partitions.py) or the executor-side reader (kafka_reader.py). What the
source does is documented in streaming/sources/kafka.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from streaming.events import spark_schema
from streaming.gc_pause import widen_young_generation
from streaming.sources.kafka_clients import close_wires
from streaming.sources.kafka_options import parse_options
from streaming.sources.kafka_partitions import KafkaGroup, input_partitions
from streaming.sources.kafka_plan_state import PlanState
from streaming.sources.kafka_planner import KafkaPlanner
from streaming.sources.kafka_reader import read_arrow


class KafkaStreamReader(DataSourceStreamReader):
    """Offsets are :class:`PlanState` in its JSON form (kafka_plan_state.py says which fields
    there are and why each must survive a restart)."""

    def __init__(self, options: dict[str, str]) -> None:
        widen_young_generation()  # this process holds the whole cluster's plan (gc_pause)
        self.planner = KafkaPlanner(parse_options(options))
        self.opts = self.planner.opts  # the same dict: executors get it with every read
        # the last plans handed to Spark, as (JSON form, PlanState): Spark hands them back
        # (latestOffset's start, partitions' start and end) as dicts parsed from its offset log
        self._recent: list[tuple[dict, PlanState]] = []

    def _state(self, doc: dict) -> PlanState:
        """``PlanState.from_json(doc)``, or the plan this reader produced with an equal JSON form:
        comparing two dicts costs a fraction of building a typed state for each of 200,000
        partitions (bench/cluster_scale.py), and the offsets Spark hands back are the ones this
        reader returned unless the query restarted."""
        for js, state in reversed(self._recent):
            if js is doc or js == doc:
                return state
        return PlanState.from_json(doc)

    def _remember(self, js: dict, state: PlanState) -> dict:
        self._recent = [*self._recent[-1:], (js, state)]
        return js

    def initialOffset(self) -> dict:
        state = self.planner.initial()
        return self._remember(state.to_json(), state)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        state = self._state(start) if start else self.planner.initial()
        end = self.planner.plan(state)
        # no broker answered: the offsets Spark gave, unchanged, so it runs no micro-batch
        return start if start and end is state else self._remember(end.to_json(), end)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One input partition per leader broker (at most ``groups_per_broker`` per broker, at
        most ``max_input_partitions`` in all)."""
        return input_partitions(self._state(start), self._state(end), self.opts["groups_per_broker"],
                                self.opts["max_input_partitions"])

    def read(self, partition: KafkaGroup) -> Iterator[Any]:
        batch = read_arrow(partition, self.opts)
        if batch is not None:
            yield batch

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        close_wires()


class KafkaDataSource(DataSource):
    """``spark.readStream.format("kafka-txn").option("bootstrap_servers", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "kafka-txn"

    def schema(self) -> Any:
        return spark_schema()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))
