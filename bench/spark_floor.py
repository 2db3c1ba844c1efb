"""Spark fixed and per-row cost against the smallest query of txnwatch's shape (issue 23 items 2-3).

Run: ``.venv/bin/python bench/spark_floor.py [--rounds 3] [--master local[2]] [--rows 51175 --keys 405]``

Item 3 asks ``scan --engine spark`` of a one-batch file to cost at most 1.5x a bare SparkSession
start; item 2 asks the Spark engine's scan of the pipeline dataset to cost at most 3x the header
decode beyond its one-file scan. This script measures, in the same run and alternating round by
round (so that a busy moment stretches all of them alike), each as a child process timed from
spawn to exit (wall, and CPU of the whole process tree: the driver, the JVM and Spark's Python
workers, as ``bench/pipeline.py`` samples them):

* **bare**: a SparkSession started and stopped exactly as txnwatch starts its scan session
  (``streaming.spark_session.session_builder``/``get_or_create``, scan's short-run JVM options,
  one shuffle partition), nothing else (``bench.pipeline.BARE_SESSION``);
* **minimal**: the same session, then the smallest streaming query with the shape the scan
  must have: a Python streaming data source (PySpark's Data Source API, as every txnwatch source
  is) yielding one row, ``groupBy(key).applyInPandasWithState`` emitting one row per key (the
  state operator, per DESIGN.md), ``foreachBatch`` collecting the output, trigger availableNow.
  None of txnwatch's decoders, rules or sinks run;
* **minimal, dataset-sized**: the same query with ``--rows`` rows (two read tasks, as the scan
  reads with ``local[2]``) of a 200-byte string over ``--keys`` keys: the event rows and
  producer ids the pipeline dataset gives the state operator after the in-read reduction
  (51,175 and 405), with no decoding and no state machine;
* **scan**: ``txnwatch scan --engine spark`` of a one-batch segment (the issue's case; the
  dataset's first batch, ``bench.pipeline.one_batch_file``, or a generated one-batch segment
  when the dataset is absent).

It prints the medians and the ratios: minimal/bare and scan/bare (item 3's target applies to the
latter), scan/minimal (how much of the scan's cost is txnwatch's own, over the floor of the
architecture), and the dataset-sized minimal query minus the one-row one (what moving that many
rows through the query costs before any of txnwatch's work), also against the header decode of
the dataset when it is present (item 2's unit). Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pipeline import BARE_SESSION, DATA_DIR, decode_seconds, one_batch_file, run_child  # noqa: E402

MINIMAL_QUERY = '''
import sys, tempfile
from streaming.spark_session import get_or_create, session_builder
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

ROWS, KEYS = int(sys.argv[2]), int(sys.argv[3])
PAYLOAD = "x" * 200  # about the size of one packed event row (streaming.microbatch.PACKED)


class OneRowReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def initialOffset(self):
        return {"o": 0}
    def prepareForTriggerAvailableNow(self):
        pass
    def latestOffset(self, start=None, limit=None):
        return {"o": 1}
    def partitions(self, start, end):
        # one read task per slot of local[2] when there are many rows, as the scan reads
        return [InputPartition(i) for i in range(1 if ROWS == 1 else 2)] if start["o"] < end["o"] else []
    def read(self, partition):
        n = 1 if ROWS == 1 else ROWS // 2
        for i in range(n):
            yield (i % KEYS, 1700000000000, PAYLOAD)
    def commit(self, end):
        pass

class OneRow(DataSource):
    @classmethod
    def name(cls):
        return "onerow"
    def schema(self):
        return "k long, t long, v string"
    def streamReader(self, schema):
        return OneRowReader()

master = sys.argv[1]
s = get_or_create(session_builder("minimal", master, {"spark.sql.shuffle.partitions": "1"}, short_run=True), master)
s.sparkContext.setLogLevel("ERROR")
s.dataSource.register(OneRow)
import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

def one_row_per_key(key, frames, state):
    n = sum(len(f) for f in frames)
    yield pd.DataFrame({"out": [str(n)]})

df = s.readStream.format("onerow").load().select("k", F.timestamp_millis("t").alias("event_time"), "v")
out = df.withWatermark("event_time", "0 seconds").groupBy("k").applyInPandasWithState(
    one_row_per_key, "out string", "doc string", "Update", GroupStateTimeout.EventTimeTimeout)
got = []
q = (out.writeStream.outputMode("update").option("checkpointLocation", tempfile.mkdtemp())
     .foreachBatch(lambda b, i: got.extend(r[0] for r in b.collect())).trigger(availableNow=True).start())
q.awaitTermination()
print("rows", len(got), flush=True)
s.stop()
'''


def _one_batch_segment(tmp: Path) -> Path:
    """The dataset's first batch (as bench/pipeline.py measures), else a generated one."""
    logs = sorted(DATA_DIR.glob("pipeline-random-mix-*/log")) if DATA_DIR.is_dir() else []
    if logs:
        return one_batch_file(logs[0], tmp / "one")
    from streaming.simulate.scenarios import scenario_commit

    sc = scenario_commit(tmp / "gen", seed=1)
    return one_batch_file(Path(sc.root), tmp / "one")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rows", type=int, default=51_175, help="rows of the dataset-sized minimal query")
    ap.add_argument("--keys", type=int, default=405, help="keys (producer ids) of the dataset-sized minimal query")
    args = ap.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="txnwatch-bench-floor-") as d:
        seg = _one_batch_segment(Path(d))
        runs = {
            "bare": [py, "-c", BARE_SESSION, args.master, "short", "1"],
            "minimal": [py, "-c", MINIMAL_QUERY, args.master, "1", "1"],
            "minimal-rows": [py, "-c", MINIMAL_QUERY, args.master, str(args.rows), str(args.keys)],
            "scan": [py, "-m", "streaming.cli", "scan", "--engine", "spark", "--master", args.master, "--json", str(seg)],
        }
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
        for rnd in range(args.rounds):
            for name, cmd in runs.items():
                r = run_child(cmd)
                if r.returncode not in (0, 2):
                    print(f"{name} failed (exit {r.returncode}):\n{r.stderr[-2000:]}", file=sys.stderr)
                    return 1
                got[name].append((r.seconds, r.cpu))
                print(f"round {rnd}: {name:12} {r.seconds:6.2f} s wall, {r.cpu:6.2f} s CPU", flush=True)
        decode = _decode_seconds()

    def med(name: str, i: int) -> float:
        return statistics.median(x[i] for x in got[name])

    for label, i in (("wall", 0), ("CPU", 1)):
        b, m, s = med("bare", i), med("minimal", i), med("scan", i)
        print(f"{label} (medians of {args.rounds}): bare {b:.2f} s, minimal query {m:.2f} s = {m / b:.2f}x bare, "
              f"txnwatch scan {s:.2f} s = {s / b:.2f}x bare (target <= 1.5x) = {s / m:.2f}x the minimal query")
        extra = med("minimal-rows", i) - m
        vs = f" = {extra / decode:.1f}x the dataset's header decode ({decode:.3f} s)" if decode else ""
        print(f"{label}: {args.rows:,} rows over {args.keys} keys through the minimal query cost {extra:.2f} s more "
              f"than one row{vs} (item 2's Spark target: <= 3x decode for the whole pipeline)")
    return 0


def _decode_seconds() -> float | None:
    """The pipeline dataset's header decode, CPU seconds (bench/pipeline.py's floor, its own
    ``decode_seconds``: ``scan_batches`` with the CRC on over every .log file in memory, best of
    3); None without the dataset."""
    logs = sorted(DATA_DIR.glob("pipeline-random-mix-*/log")) if DATA_DIR.is_dir() else []
    if not logs:
        return None
    from bench.decode import load_segments

    return decode_seconds([d for _name, d in load_segments(logs[0])], 3)[1]


if __name__ == "__main__":
    sys.exit(main())
