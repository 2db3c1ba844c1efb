"""``dumps`` source: loose files (``kafka-dump-log.sh`` text, ``.log`` segments, ``.snapshot``
files) as a Spark stream or batch. Thin glue over :mod:`streaming.sources.files`.

Options: ``paths`` (JSON list of files: ``txnwatch scan FILE...``) or ``dir`` (a drop directory,
``txnwatch run --source dumps``), ``cluster``, ``as_of`` (epoch ms), ``topic``/``partition``
(for dumps that lost their ``Dumping <path>`` line), ``txn_state_partitions`` (the
``__transaction_state`` partition count, config ``[coordinator] txn_state_partitions``, default 50),
``log_dirs`` (JSON list of log directories whose files are among ``paths``, listed by txnwatch: their
partitions' ends are proven, detection.md §0), ``clock_skew_tolerance_ms`` (the clock's skew guard,
config ``[thresholds] clock_skew_tolerance_ms``, default 1 h).

Drop-directory contract: a file is read once, when it appears under its final name; writers
create it as ``.name`` or ``name.tmp`` (``.part``, ``.partial``, ``.inprogress``) and rename it
when complete (rename is atomic on one filesystem), so a half-written dump is never read. The
offset is the sorted list of files already processed, so a restart resumes exactly. Dumps of
one partition's consecutive segments should land together (same micro-batch): events at offsets
below what was already applied for a producer are ignored by the state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from streaming.clock_guard import DEFAULT_TOLERANCE_MS
from streaming.events import spark_schema
from streaming.sources.drop_dir import is_ready

# The read (streaming.sources.files: the decoders, pandas) is imported by the reading task only:
# the Python processes Spark starts to plan (the schema, the streaming source runner, the read
# planner) import this module too, and never read (issue 23).

__all__ = ["DumpsDataSource"]


class FilesPartition(InputPartition):
    def __init__(self, files: list[str]) -> None:
        self.files = files


def _options(options: dict[str, str]) -> dict[str, Any]:
    paths = options.get("paths")
    d = options.get("dir")
    if not paths and not d:
        raise ValueError("dumps source: option 'paths' (JSON list of files) or 'dir' (drop directory) is required")
    if d and not os.path.isdir(d):
        raise ValueError(f"dumps source: dir {d!r} is not a directory")
    as_of = options.get("as_of")
    part = options.get("partition")
    n = options.get("txn_state_partitions")
    tol = options.get("clock_skew_tolerance_ms")
    return {
        "log_dirs": json.loads(options["log_dirs"]) if options.get("log_dirs") else [],
        "skew_tolerance_ms": int(tol) if tol not in (None, "", "None") else DEFAULT_TOLERANCE_MS,
        "txn_partitions": int(n) if n not in (None, "", "None") else 50,
        "paths": json.loads(paths) if paths else None,
        "dir": d,
        "cluster": options.get("cluster", "default"),
        "as_of": int(as_of) if as_of not in (None, "", "None") else None,
        "topic": options.get("topic") or None,
        "partition": int(part) if part not in (None, "", "None") else None,
    }


def _available(opts: dict[str, Any]) -> list[str]:
    if opts["paths"] is not None:
        return sorted(os.path.abspath(p) for p in opts["paths"])
    out = []
    for name in os.listdir(opts["dir"]):
        full = os.path.join(opts["dir"], name)
        if is_ready(name) and os.path.isfile(full):
            out.append(os.path.abspath(full))
    return sorted(out)


def _read(p: FilesPartition, opts: dict[str, Any]) -> Iterator[Any]:
    from streaming.events import to_arrow
    from streaming.sources.files import read_files

    df = read_files(p.files, cluster=opts["cluster"], as_of_ms=opts["as_of"], topic=opts["topic"],
                    partition=opts["partition"], txn_partitions=opts["txn_partitions"], log_dirs=opts["log_dirs"],
                    skew_tolerance_ms=opts["skew_tolerance_ms"])
    if len(df):
        yield to_arrow(df)


class DumpsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = _options(options)
        self._target: list[str] | None = None

    def initialOffset(self) -> dict:
        return {"done": []}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = _available(self.opts)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        files = _available(self.opts)
        if self._target is not None:
            files = [f for f in files if f in set(self._target)]
        done = set((start or {}).get("done", []))
        return {"done": sorted(done | set(files))}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        new = sorted(set(end.get("done", [])) - set(start.get("done", [])))
        return [FilesPartition(new)] if new else []

    def read(self, partition: FilesPartition) -> Iterator[Any]:
        return _read(partition, self.opts)

    def commit(self, end: dict) -> None:
        pass


class DumpsBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = _options(options)

    def partitions(self) -> list[InputPartition]:
        files = _available(self.opts)
        return [FilesPartition(files)] if files else []

    def read(self, partition: FilesPartition) -> Iterator[Any]:
        return _read(partition, self.opts)


class DumpsDataSource(DataSource):
    """``spark.readStream.format("dumps").option("dir", DROP_DIR)`` or ``.option("paths", json)``."""

    @classmethod
    def name(cls) -> str:
        return "dumps"

    def schema(self) -> Any:
        return spark_schema()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return DumpsStreamReader(dict(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        return DumpsBatchReader(dict(self.options))
