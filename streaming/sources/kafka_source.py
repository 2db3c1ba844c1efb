"""The kafka source's shell: Spark's ``DataSource`` / ``DataSourceStreamReader`` API, each method a
few lines handing over to the driver-side planner (kafka_planner.py, state in kafka_plan_state.py),
the input partitions (kafka_partitions.py) or the executor-side reader (kafka_reader.py). What the
source does is documented in streaming/sources/kafka.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from streaming.events import spark_schema, to_arrow
from streaming.sources.kafka_clients import close_wires
from streaming.sources.kafka_options import parse_options
from streaming.sources.kafka_partitions import KafkaGroup, input_partitions
from streaming.sources.kafka_plan_state import PlanState
from streaming.sources.kafka_planner import KafkaPlanner
from streaming.sources.kafka_reader import read_partition


class KafkaStreamReader(DataSourceStreamReader):
    """Offsets are :class:`PlanState` in its JSON form (kafka_plan_state.py says which fields
    there are and why each must survive a restart)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.planner = KafkaPlanner(parse_options(options))
        self.opts = self.planner.opts  # the same dict: executors get it with every read

    def initialOffset(self) -> dict:
        return self.planner.initial().to_json()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        state = PlanState.from_json(start) if start else self.planner.initial()
        end = self.planner.plan(state)
        # no broker answered: the offsets Spark gave, unchanged, so it runs no micro-batch
        return start if start and end is state else end.to_json()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One input partition per leader broker (at most ``groups_per_broker`` per broker)."""
        return input_partitions(PlanState.from_json(start), PlanState.from_json(end), self.opts["groups_per_broker"])

    def read(self, partition: KafkaGroup) -> Iterator[Any]:
        df = read_partition(partition, self.opts)
        if len(df):
            yield to_arrow(df)

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
