"""``txnwatch validate``: the event suite over log directories and dump files, as a report.

Exit 0 when every expectation passes, 2 when some fail, 1 on error. The failing rows go to the
configured quarantine file.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from streaming.config import Config
from streaming.quality.gate import quarantine_sink
from streaming.quality.gx import validate_events
from streaming.quality.result import QualityResult, json_value


def read_inputs(spark: Any, paths: list[str], cluster: str) -> Any:
    """The events of log directories (``segments`` reader) and of dump/segment/snapshot files
    (``dumps`` reader), as one Spark DataFrame."""
    dirs = [p for p in paths if os.path.isdir(p)]
    files = [p for p in paths if not os.path.isdir(p)]
    frames = [spark.read.format("segments").option("path", d).option("cluster", cluster).load() for d in dirs]
    if files:
        import streaming.sources.dumps  # noqa: F401 - registers the "dumps" data source

        frames.append(spark.read.format("dumps").option("paths", json.dumps([os.path.abspath(f) for f in files]))
                      .option("cluster", cluster).load())
    df = frames[0]
    for f in frames[1:]:
        df = df.unionByName(f)
    return df


def format_report(result: QualityResult, out: Any = None) -> None:
    """Readable report: one line per expectation, then examples of failing rows."""
    out = out or sys.stdout
    w = max([len(o.rule) for o in result.outcomes] + [11])
    out.write(f"suite {result.suite}: {'PASSED' if result.success else 'FAILED'} "
              f"({result.rows_validated if result.rows_validated is not None else '?'} rows, "
              f"{len(result.outcomes)} expectations, {len(result.failed)} failed, {result.seconds:.1f} s)\n")
    out.write(f"  {'expectation'.ljust(w)}  result  unexpected  examples\n")
    for o in result.outcomes:
        ex = "" if o.success else ", ".join(json.dumps(json_value(e), default=str) for e in o.examples[:3])
        if o.exception:
            ex = f"error: {o.exception.splitlines()[0] if o.exception else ''}"
        cnt = "" if o.unexpected_count is None else str(o.unexpected_count)
        out.write(f"  {o.rule.ljust(w)}  {'ok  ' if o.success else 'FAIL'}    {cnt.rjust(10)}  {ex}\n")
    if result.failures:
        out.write("failing rows (first 20):\n")
        for fl in result.failures[:20]:
            row = fl["row"]
            where = fl.get("source_position") or f"{row.get('topic')}-{row.get('partition')} ({row.get('kind')})"
            out.write(f"  {where}: {fl['expectation']}: {fl['reason']}\n")
        if len(result.failures) > 20:
            out.write(f"  ... {len(result.failures) - 20} more\n")


def run_validate(paths: list[str], cfg: Config, as_json: bool = False, *, spark: Any = None,
                 out: Any = None, err: Any = None) -> int:
    """``txnwatch validate``: run the event suite over log directories (and dump files when the
    dumps source exists). Exit 0 when every expectation passes, 2 when some fail, 1 on error.
    ``quality.quarantine_path`` in the configuration, when set, receives the failing rows."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if not paths:
            raise ValueError("give at least one log directory")
        for p in paths:
            if not os.path.exists(p):
                raise ValueError(f"{p}: no such file or directory")
        if spark is None:
            from streaming.config import spark_conf
            from streaming.pipeline import spark_session

            spark = spark_session(master=cfg.streaming.master, conf=spark_conf(cfg.streaming))
        df = read_inputs(spark, list(paths), cfg.cluster).persist()
        result = validate_events(df, result_format="SUMMARY")
        gaps = [] if as_json else [r.asDict() for r in df.where("kind = 'gap'").select(
            "topic", "partition", "source_position", "reason").limit(21).collect()]
        df.unpersist()
    except Exception as exc:  # reported, exit code 1
        err.write(f"txnwatch validate: {exc}\n")
        return 1
    qpath = cfg.quality.quarantine_path
    if qpath and result.failures:
        quarantine_sink(qpath)(result)
    if as_json:
        out.write(json.dumps(result.gx_json(), indent=2, default=str) + "\n")
    else:
        format_report(result, out)
        if gaps:  # valid events, but the operator should know what could not be read
            out.write("gap rows (input that could not be read):\n")
            for g in gaps[:20]:
                where = g["source_position"] or (f"{g['topic']}-{g['partition']}" if g["topic"] else None)
                out.write(f"  {where}: {g['reason']}\n" if where else f"  {g['reason']}\n")
            if len(gaps) > 20:
                out.write("  ...\n")
    return 0 if result.success else 2
