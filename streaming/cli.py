"""``txnwatch`` command line: run, scan, demo, inspect, ui (and validate when available)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from streaming.config import Config, ConfigError, QualityConfig, engine_config, load_config
from streaming.vocab import HANGING

log = logging.getLogger("txnwatch")


class UsageError(Exception):
    """Bad input named precisely; printed without a traceback, exit code 1."""


def ensure_java() -> None:
    """Spark needs Java 17+: say so plainly instead of a Py4J stack trace."""
    java = shutil.which("java")
    if os.environ.get("JAVA_HOME"):
        cand = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
        java = cand if os.path.exists(cand) else java
    if not java:
        raise UsageError("Java 17 or newer is required by Spark and was not found (install a JDK 17+, "
                         "e.g. apt-get install openjdk-17-jre-headless, or set JAVA_HOME)")
    try:
        outp = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot run {java}: {exc}") from None
    m = re.search(r'version "(\d+)', outp)
    if not m or int(m.group(1)) < 17:
        raise UsageError(f"Java 17 or newer is required by Spark; {java} is: {outp.splitlines()[0] if outp else '?'}")


def parse_time(value: str) -> int:
    """``--as-of``: epoch milliseconds or an ISO-8601 time (UTC unless an offset is given)."""
    if re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    try:
        t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--as-of: expected epoch milliseconds or an ISO-8601 time, got {value!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def _has_txn_state(paths: list[str]) -> bool:
    from streaming.sources.logdir import list_partitions

    for p in paths:
        if os.path.isdir(p) and any(part.is_txn_state for part in list_partitions(p)):
            return True
    return False


_DUMPED_TXN_PARTITION = re.compile(rb"Dumping [^\n]*__transaction_state-(\d+)[/\\]")


def check_txn_partition_count(paths: list[str], n: int, *, topic: str | None = None,
                              partition: int | None = None) -> None:
    """Stop the scan when an input holds ``__transaction_state-k`` with k >= n (detection.md §0):
    the configured partition count is wrong, and a view "complete" over 0..n-1 would prove nothing.
    Looks at log directories' folders, files' parent folders and dump text's ``Dumping`` lines."""
    import mmap

    from streaming.sources.logdir import TXN_TOPIC, list_partitions, parse_partition_dir

    def fail(k: int, where: str) -> None:
        raise UsageError(f"{where}: {TXN_TOPIC}-{k} is outside the configured partition count "
                         f"txn_state_partitions = {n} (partitions 0..{n - 1}); set [coordinator] "
                         f"txn_state_partitions to the brokers' transaction.state.log.num.partitions (at least {k + 1})")

    if topic == TXN_TOPIC and partition is not None and partition >= n:
        fail(partition, "--partition")
    for p in paths:
        if os.path.isdir(p):
            for part in list_partitions(p):
                if part.is_txn_state and part.partition >= n:
                    fail(part.partition, part.path)
            continue
        owner = parse_partition_dir(os.path.dirname(os.path.abspath(p)))
        if owner is not None and owner.topic == TXN_TOPIC and owner.partition >= n and topic is None:
            fail(owner.partition, p)
        try:
            with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                for m in _DUMPED_TXN_PARTITION.finditer(mm):
                    if int(m.group(1)) >= n:
                        fail(int(m.group(1)), p)
        except (OSError, ValueError):
            continue  # empty or unreadable: read_files reports it as a gap


def _sort_findings(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(alerts, key=lambda a: (a["topic"], a["partition"], a["first_offset"], a["producer_id"]))


def cmd_scan(args: argparse.Namespace) -> int:
    from streaming.sinks.console import format_table

    cfg = load_config(args.config, overrides={"thresholds.max_timeout_ms": args.max_timeout_ms,
                                              "thresholds.padding_ms": args.padding_ms,
                                              "kafka.bootstrap_servers": args.bootstrap_server,
                                              "cluster": args.cluster})
    for p in args.paths:
        if not os.path.exists(p):
            raise UsageError(f"{p}: no such file or directory")
    as_of = parse_time(args.as_of) if args.as_of else None
    if (args.topic is None) != (args.partition is None):
        raise UsageError("--topic and --partition go together (they name the partition of dumps that lost their "
                         "'Dumping <path>' line)")
    quality = args.quality or cfg.quality.scan
    engine = args.engine
    if engine == "auto":
        # Under spark-submit (the JVM is already up: PYSPARK_GATEWAY_PORT) the user asked for the
        # cluster: run on Spark whatever the input size.
        on_cluster = "PYSPARK_GATEWAY_PORT" in os.environ
        small = _input_bytes(args.paths) <= cfg.streaming.local_scan_max_bytes
        engine = "local" if small and not quality and not on_cluster else "spark"
    spark = None
    if engine == "spark":
        ensure_java()
        # the quality check reads the inputs again, with either source
        sources = None if quality else [scan_format(args.paths, topic=args.topic, partition=args.partition)]
        spark = scan_session(cfg, args.paths, master=args.master, sources=sources)
    findings, gaps = scan_paths(args.paths, cfg, as_of_ms=as_of, spark=spark, topic=args.topic,
                                partition=args.partition, engine=engine,
                                end_offsets=broker_end_offsets(cfg) if args.bootstrap_server else None)
    for g in gaps:
        sys.stderr.write(f"gap: {g.get('source_position') or g.get('topic')}: {g.get('reason')}\n")
    if quality:
        scan_quality(spark, args.paths, cfg.cluster, cfg.quality, findings)
    if args.json:
        for a in findings:
            sys.stdout.write(json.dumps(a) + "\n")
    else:
        sys.stdout.write(format_table(findings))
    return 2 if any(a["status"] == HANGING for a in findings) else 0


#: ``scan --engine spark`` of inputs up to this size uses one shuffle partition: the state of a
#: scan lives in a temporary checkpoint, so its partitioning need not suit a later restart, and a
#: second partition only starts a second Python worker for the state operator (~1 CPU s on the
#: one-batch scan, issue 23) without anything to run in parallel on it.
SCAN_ONE_PARTITION_BYTES = 32 << 20


def scan_format(paths: list[str], *, topic: str | None = None, partition: int | None = None) -> str:
    """The data source :func:`scan_paths` reads ``paths`` with: ``segments`` for one log dir,
    ``dumps`` for files, several dirs or mixed inputs (and for ``--topic``/``--partition``)."""
    if len(paths) == 1 and os.path.isdir(paths[0]) and topic is None and partition is None:
        return "segments"
    return "dumps"


def local_cores(master: str | None) -> int | None:
    """The task slots of a local master (``local`` = 1, ``local[N]``/``local[N,F]`` = N,
    ``local[*]`` = the CPU count); None for any other master, or under spark-submit (whose
    master and settings win)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ or not master:
        return None
    if master.strip() == "local":
        return 1
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master.strip())
    if m is None:
        return None
    return (os.cpu_count() or 1) if m.group(1) == "*" else max(1, int(m.group(1)))


def scan_session(cfg: Config, paths: list[str], *, master: str | None = None, sources: list[str] | None = None):
    """The SparkSession of a one-shot scan: the config's Spark settings, the JVM options for a
    short run (``streaming.spark_session.SHORT_RUN_CONF``), one shuffle partition for small
    inputs (:data:`SCAN_ONE_PARTITION_BYTES`) and at most one per core of a local master for
    larger ones, and the data sources named in ``sources`` (all when None).

    The state of a scan lives in a temporary checkpoint, so its partition count need not suit a
    later restart: with more state partitions than cores, the state stage (and the no-data
    micro-batch that fires the timers) runs in two waves, each task paying the Python round trip
    and a state store load and commit (issue 23: 4 partitions on 2 cores, 0.93 s then 0.54 s)."""
    from streaming.config import spark_conf
    from streaming.spark_session import spark_session

    conf = spark_conf(cfg.streaming)
    master = master or cfg.streaming.master
    try:
        small = _input_bytes(paths) <= SCAN_ONE_PARTITION_BYTES
    except OSError:  # a path that vanished: the read reports it (a gap); keep the config's partitions
        small = False
    cores = local_cores(master)
    if small:
        conf["spark.sql.shuffle.partitions"] = "1"
    elif cores is not None:
        conf["spark.sql.shuffle.partitions"] = str(min(int(conf["spark.sql.shuffle.partitions"]), cores))
    return spark_session(master=master, conf=conf, short_run=True, sources=sources)


def scan_quality(spark, paths: list[str], cluster: str, quality: QualityConfig,
                 findings: list[dict[str, Any]]) -> None:
    """Data-quality check of a scan: the input events and the findings against their suites.
    Failing event rows go to the quarantine file; a summary goes to stderr (never to stdout,
    which carries the findings)."""
    from streaming.quality import quarantine_sink, read_inputs, validate_alerts, validate_events

    events = validate_events(read_inputs(spark, paths, cluster), engine=quality.engine)
    if not events.success:
        rules = ", ".join(sorted(events.failed_rule_names()))
        sys.stderr.write(f"quality: {events.suite}: {len(events.failures)} row(s) failed: {rules}\n")
        if events.failures:
            n = quarantine_sink(quality.quarantine_path)(events)
            sys.stderr.write(f"quality: {n} row(s) quarantined to {quality.quarantine_path}\n")
    for f in validate_alerts(findings).failures:
        sys.stderr.write(f"quality: {f['reason']}\n")  # names the alert key and the field


def _input_bytes(paths: list[str]) -> int:
    total = 0
    for p in paths:
        if os.path.isdir(p):
            for root, _sub, names in os.walk(p):
                total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
        else:
            total += os.path.getsize(p)
    return total


def broker_end_offsets(cfg: Config):
    """``scan --bootstrap-server``: a ListOffsets lookup of partitions' end offsets (high
    watermarks, ``KafkaWire.offsets_available``), for the enrichment: where a file or dump read
    ended exactly there, its end is proven, and coordinator copies that all end there are current
    (detection.md §0). Connects on first use; an unreachable broker proves nothing (logged)."""
    from streaming.sources.kafka_security import kafka_python_kwargs
    from streaming.sources.kafka_wire import KafkaWire

    k = cfg.kafka
    state: dict[str, Any] = {}

    def ask(tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if "wire" not in state:
            state["wire"] = KafkaWire(k.bootstrap_servers, client_id=k.client_id, retries=1,
                                      request_timeout_ms=min(k.request_timeout_ms, 10000),
                                      **kafka_python_kwargs(k.security()))
        try:
            offs, unavailable = state["wire"].offsets_available(tps)
        except Exception as exc:
            log.warning("scan: ListOffsets from %s failed (%s): ends of files stay unproven", k.bootstrap_servers, exc)
            raise
        for tp, why in unavailable.items():
            log.warning("scan: no end offset for %s-%s from %s: %s", tp[0], tp[1], k.bootstrap_servers, why)
        return {tp: o.high_watermark for tp, o in offs.items() if not o.deleted and o.high_watermark >= 0}

    return ask


def scan_paths(paths: list[str], cfg: Config, *, as_of_ms: int | None = None,
               master: str | None = None, spark=None, topic: str | None = None, partition: int | None = None,
               engine: str = "spark", end_offsets: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The one-shot scan: the streaming job run with an available-now trigger over the inputs.

    Returns (findings = active late/hanging alerts sorted by topic, partition, first offset;
    gap rows). Directories are log dirs (``segments`` source); files go to the ``dumps`` source,
    which detects dump text, segments and snapshots by content. ``cfg``: the :class:`Config`
    (:func:`streaming.config.load_config`). ``engine="local"`` runs the same reads,
    state function and writer in this process without Spark (:mod:`streaming.local_engine`).
    ``end_offsets``: the broker's ListOffsets lookup (:func:`broker_end_offsets`), or None.
    """
    from streaming.microbatch import SinkSet
    from streaming.runner import alert_config, file_source_options

    if engine not in ("spark", "local"):
        raise UsageError(f"scan engine: expected spark or local, got {engine!r}")
    fmt = scan_format(paths, topic=topic, partition=partition)
    if engine == "spark" and spark is None:
        ensure_java()
        spark = scan_session(cfg, paths, master=master, sources=[fmt])
    check_txn_partition_count(paths, cfg.coordinator.txn_state_partitions, topic=topic, partition=partition)
    dirs = [p for p in paths if os.path.isdir(p)]
    files = [p for p in paths if not os.path.isdir(p)]
    alert_cfg = alert_config(cfg, live=False)
    gaps: list[dict[str, Any]] = []
    findings: dict[str, dict[str, Any]] = {}
    jobs: list[tuple[str, dict[str, str], bool]] = []
    if fmt == "segments":
        opts = file_source_options(cfg, path=dirs[0])
        if engine == "spark":
            # One read task per task slot: the whole read in one wave. With the source's default
            # (3 x the CPU count) the tasks after the first wave each paid a Python round trip
            # and a typing pass for a sixth of the rows (issue 23).
            opts["input_partitions"] = str(max(1, spark.sparkContext.defaultParallelism))
        jobs.append(("segments", opts, _has_txn_state(dirs)))
    else:
        from streaming.sources.files import inputs_have_coordinator

        # Mixed inputs: every file of the given log dirs joins the loose files, so that one
        # engine run sees the coordinator records and the data together.
        from udfs.checkpoint import CHECKPOINT_FILE, END_CHECKPOINT_FILES

        for d in dirs:
            for root, _sub, names in os.walk(d):
                files += [os.path.join(root, n) for n in sorted(names)
                          if n.endswith((".log", ".snapshot")) or n in (CHECKPOINT_FILE, *END_CHECKPOINT_FILES)]
        # log_dirs: listed here, so their partitions' newest segments are among the files (§0)
        opts = file_source_options(cfg, paths=json.dumps([os.path.abspath(f) for f in files]),
                                   log_dirs=json.dumps([os.path.abspath(d) for d in dirs]))
        if topic is not None:
            opts["topic"] = topic
        if partition is not None:
            opts["partition"] = str(partition)
        jobs.append(("dumps", opts, inputs_have_coordinator(files)))
    for fmt, opts, coord in jobs:
        if as_of_ms is not None:
            opts["as_of"] = str(as_of_ms)
        ecfg = engine_config(cfg, coordinator_available=coord)
        ck = tempfile.mkdtemp(prefix="txnwatch-scan-")
        try:
            sinks = SinkSet(on_batch=[lambda _b, s: gaps.extend(s["gaps"])])
            sink_file = os.path.join(ck, "txnwatch-sink.json")
            if engine == "local":
                _scan_local(fmt, opts, ecfg, alert_cfg, sinks, sink_file, end_offsets)
            else:
                from streaming.pipeline import start_query

                q = start_query(spark, fmt, opts, ecfg, alert_cfg, sinks, ck, trigger={"availableNow": True},
                                end_offsets=end_offsets)
                q.awaitTermination()
                _log_state(q)
            from streaming.alerts import Enricher

            enr = Enricher(alert_cfg, sink_file)
            for key, entry in enr.active.items():
                findings[key] = entry["alert"]
        finally:
            shutil.rmtree(ck, ignore_errors=True)
    from streaming.offline_offsets import add_pending_offset_commits

    add_pending_offset_commits(list(findings.values()), paths)
    return _sort_findings(list(findings.values())), gaps


def _scan_local(fmt: str, opts: dict[str, str], ecfg, alert_cfg, sinks, sink_file: str,
                end_offsets: Any = None) -> None:
    from streaming.alerts import Enricher
    from streaming.local_engine import read_source, run_scan

    if fmt == "segments":
        from streaming.sources.segments import SegmentsBatchReader as Reader
    else:
        from streaming.sources.dumps import DumpsBatchReader as Reader
    from streaming.gc_pause import collector_paused

    # One allocation burst from the first read to the last sink, without reference cycles: the
    # reads and micro-batches already pause the collector, and between them a young collection
    # would walk (and promote) every event row and column just built (streaming.gc_pause).
    with collector_paused():
        run_scan(read_source(Reader(opts)), ecfg, Enricher(alert_cfg, sink_file, end_offsets=end_offsets), sinks)


def _log_state(query) -> None:
    """Log the state operator's size after a scan (``-v``): state rows = producer ids kept."""
    for op in (query.lastProgress or {}).get("stateOperators", []):
        log.info("state: %s rows, %s bytes in memory (%s)", op.get("numRowsTotal"), op.get("memoryUsedBytes"),
                 op.get("operatorName"))


def cmd_inspect(args: argparse.Namespace) -> int:
    from streaming.inspect import run_inspect

    txn = True if args.txn_log else None
    return run_inspect(args.paths, as_json=args.json, hex_input=args.hex, txn_log=txn,
                       validate_crc=not args.no_crc)


def cmd_demo(args: argparse.Namespace) -> int:
    from streaming.demo import run_demo

    ensure_java()
    return run_demo(workdir=args.workdir, duration_s=args.duration, master=args.master,
                    metrics_port=args.metrics_port, ui_port=args.ui_port)


def cmd_run(args: argparse.Namespace) -> int:
    from streaming.runner import run_job

    ensure_java()
    cfg = load_config(args.config, overrides={"kafka.bootstrap_servers": args.bootstrap_server,
                                              "cluster": args.cluster, "streaming.checkpoint": args.checkpoint})
    return run_job(cfg, source=args.source, path=args.path, once=args.once)


def cmd_ui(args: argparse.Namespace) -> int:
    from streaming.ui.app import run_ui

    cfg = load_config(args.config, overrides={"ui.port": args.port, "ui.bind": args.bind})
    if args.alerts is None and not cfg.kafka.bootstrap_servers:
        raise UsageError("give --alerts FILE, or --config with kafka.bootstrap_servers to read the alerts topic")
    return run_ui(cfg, alerts_path=args.alerts)


def cmd_validate(args: argparse.Namespace) -> int:
    from streaming.quality import run_validate

    ensure_java()
    cfg = load_config(args.config)
    return run_validate(args.paths, cfg, as_json=args.json)


def cmd_abort(args: argparse.Namespace) -> int:
    from streaming.abort.command import AbortUsageError, run_abort

    cfg = load_config(args.config, overrides={"cluster": args.cluster, "abort.audit_path": args.audit_log})
    try:
        return run_abort(args.key, cfg, bootstrap=args.bootstrap_server, alerts_path=args.alerts,
                         execute=args.execute, yes=args.yes)
    except AbortUsageError as exc:
        raise UsageError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="txnwatch", description="Find hanging Kafka transactions and print the "
                                "exact abort commands.")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("scan", help="one-shot scan of a log directory or dump/segment/snapshot files")
    s.add_argument("paths", nargs="+")
    s.add_argument("--as-of", help="evaluation time (epoch ms or ISO-8601); default: newest timestamp in the input")
    s.add_argument("--max-timeout-ms", type=int)
    s.add_argument("--padding-ms", type=int)
    s.add_argument("--bootstrap-server", help="bootstrap servers written into the abort commands, and asked "
                   "for the partitions' end offsets (ListOffsets): a dump or file read that ends there is proven "
                   "complete, and coordinator copies that do are proven current")
    s.add_argument("--cluster")
    s.add_argument("--topic", help="topic of dump text that lost its 'Dumping <path>' line (with --partition)")
    s.add_argument("--partition", type=int, help="partition of such dump text (with --topic)")
    s.add_argument("--config")
    s.add_argument("--master", help="Spark master (default from config: local[2])")
    s.add_argument("--json", action="store_true", help="one alert object per line (findings only)")
    s.add_argument("--engine", choices=["auto", "spark", "local"], default="auto",
                   help="spark: the streaming job; local: the same job in this process without Spark; auto "
                   "(default): local when the inputs total at most streaming.local_scan_max_bytes, unless run under "
                   "spark-submit")
    s.add_argument("--quality", action="store_true", help="also run the data-quality suites over the inputs "
                   "and findings (needs Spark and Great Expectations; [quality] scan = true does the same)")
    s.set_defaults(func=cmd_scan)

    i = sub.add_parser("inspect", help="decode .log/.snapshot files or hex batches (kafka-dump-log replacement)")
    i.add_argument("paths", nargs="+")
    i.add_argument("--json", action="store_true")
    i.add_argument("--hex", action="store_true", help="inputs are hex strings or .hex files")
    i.add_argument("--txn-log", action="store_true", help="decode as __transaction_state")
    i.add_argument("--no-crc", action="store_true", help="skip CRC-32C validation")
    i.set_defaults(func=cmd_inspect)

    d = sub.add_parser("demo", help="run the streaming job on a generated cluster log with hanging transactions")
    d.add_argument("--workdir", help="keep the generated log, checkpoint and alerts here (default: a temp dir)")
    d.add_argument("--duration", type=int, default=120, help="stop after this many seconds at most")
    d.add_argument("--master", default="local[2]")
    d.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port (0 = off)")
    d.add_argument("--ui-port", type=int, default=0, help="serve the status page on 127.0.0.1:PORT (0 = off)")
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="the always-on job")
    r.add_argument("--source", choices=["kafka", "segments", "dumps"], default="kafka")
    r.add_argument("--path", help="log dir (segments) or drop directory (dumps)")
    r.add_argument("--config")
    r.add_argument("--bootstrap-server")
    r.add_argument("--cluster")
    r.add_argument("--checkpoint")
    r.add_argument("--once", action="store_true", help="process what is available, then stop")
    r.set_defaults(func=cmd_run)

    u = sub.add_parser("ui", help="the status page for a job running elsewhere (alerts file or topic)")
    u.add_argument("--alerts", help="follow this JSONL alerts file (sinks.jsonl_path of the job)")
    u.add_argument("--config", help="[ui] settings; without --alerts, read the alerts topic (sinks.kafka_topic)")
    u.add_argument("--port", type=int, help="default: ui.port (9465)")
    u.add_argument("--bind", help="default: ui.bind (127.0.0.1)")
    u.set_defaults(func=cmd_ui)

    a = sub.add_parser("abort", help="re-check one hanging finding against the broker and (with --execute) "
                       "abort it; exit 0 = done/would abort, 4 = refused (nothing sent), 1 = error")
    a.add_argument("key", help="the alert key cluster/topic/partition/producer_id/first_offset")
    a.add_argument("--config", help="[kafka] connection and security, [abort] audit log, [sinks] alerts")
    a.add_argument("--bootstrap-server", help="default: kafka.bootstrap_servers")
    a.add_argument("--cluster", help="the cluster name the key must carry (default: the config's cluster)")
    a.add_argument("--alerts", help="JSONL alerts file holding the finding (default: sinks.jsonl_path)")
    a.add_argument("--audit-log", help="append the audit line here (default: abort.audit_path)")
    a.add_argument("--execute", action="store_true", help="send the ABORT marker (default: dry run)")
    a.add_argument("--yes", action="store_true", help="with --execute: do not ask for confirmation")
    a.set_defaults(func=cmd_abort)

    v = sub.add_parser("validate", help="run the data-quality suites over inputs")
    v.add_argument("paths", nargs="+")
    v.add_argument("--config")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s txnwatch %(levelname)s %(message)s")
    try:
        return args.func(args)
    except (UsageError, ConfigError) as exc:
        sys.stderr.write(f"txnwatch {args.cmd}: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
