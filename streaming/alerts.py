"""The alert contract (docs/alerts.md, ``streaming/alert.schema.json``) and its enrichment.

The state machine decides status and cause; this module turns its rows into the published JSON:
partition facts from progress rows (LSO, high watermark, log start → ``pins_lso``,
``data_deleted``), the cluster-wide coordinator epoch for ``all-coordinators-max``, and both
ready-to-paste abort commands. It also keeps the small per-partition cache and the set of active
alerts that the streaming sink persists next to the checkpoint (see :class:`Enricher`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from streaming.vocab import ALERT_FIELDS as ALERT_FIELDS  # the contract's field order, re-exported
from streaming.vocab import ALERT_SCHEMA_VERSION, HANGING, RESOLVED

REQUIRED_PERMISSION = "CLUSTER_ACTION on the cluster (brokers 3.0-3.7) or ALTER on the cluster (3.8+)"


@dataclass(frozen=True)
class AlertConfig:
    bootstrap_servers: str | None = None
    tool: str = "kafka-transactions.sh"
    txn_state_partitions: int = 50


def shell_quote(s: str) -> str:
    """Single-quote for POSIX shells, always (topic names may hold characters a shell expands)."""
    return "'" + s.replace("'", "'\"'\"'") + "'"


def abort_commands(
    *, topic: str, partition: int, first_offset: int, producer_id: int, producer_epoch: int,
    coordinator_epoch: int | None, cfg: AlertConfig,
) -> tuple[str, str | None]:
    """(new-broker command, legacy command or None when the coordinator epoch is unknown)."""
    boot = shell_quote(cfg.bootstrap_servers) if cfg.bootstrap_servers else "<bootstrap>"
    base = f"{cfg.tool} --bootstrap-server {boot} abort --topic {shell_quote(topic)} --partition {int(partition)}"
    new = f"{base} --start-offset {int(first_offset)}"
    legacy = None
    if coordinator_epoch is not None and coordinator_epoch >= 0 and producer_epoch is not None and producer_epoch >= 0:
        legacy = (f"{base} --producer-id {int(producer_id)} --producer-epoch {int(producer_epoch)} "
                  f"--coordinator-epoch {int(coordinator_epoch)}")
    return new, legacy


def _verify_hint(row: dict[str, Any], cfg: AlertConfig) -> str | None:
    if row.get("verified", True) or row.get("status") != HANGING:
        return None
    from udfs.partitioning import txn_state_partition

    tid = row.get("transactional_id")
    if tid:
        n = txn_state_partition(tid, cfg.txn_state_partitions)
        return (f"confirm before aborting: dump __transaction_state-{n} with kafka-dump-log.sh "
                f"--transaction-log-decoder (transactional id {tid!r}) or run kafka-transactions.sh describe "
                f"--transactional-id {shell_quote(tid)}")
    return ("confirm before aborting: no coordinator view was read; run kafka-transactions.sh list / describe "
            "for this producer id, or include the __transaction_state partitions (kafka-dump-log.sh "
            "--transaction-log-decoder) in the input")


def finalize(row: dict[str, Any], part: dict[str, Any] | None, coord_max_epoch: int | None,
             cfg: AlertConfig, detected_at_ms: int | None = None,
             coord_epochs: dict[str, int] | None = None) -> dict[str, Any]:
    """State-machine row → the published alert JSON object (fields in contract order).

    ``coord_epochs`` ("__transaction_state-N" → highest partitionLeaderEpoch read there) turns the
    state's ``coordinator-partition`` epoch (highest seen on the producer's own records) into the
    highest seen in that whole partition, as detection.md §4.4 asks; ``coord_max_epoch`` fills
    ``all-coordinators-max``."""
    part = part or {}
    lso, hw, log_start = part.get("lso"), part.get("high_watermark"), part.get("log_start_offset")
    status = row["status"]
    ce, ce_src = row.get("coordinator_epoch"), row.get("coordinator_epoch_source")
    tp = row.get("txn_partition")
    if status == HANGING and ce_src == "coordinator-partition" and coord_epochs and tp is not None:
        seen = coord_epochs.get(f"__transaction_state-{int(tp)}")
        if seen is not None and (ce is None or seen > ce):
            ce = seen
    if status == HANGING and ce_src == "all-coordinators-max" and ce is None:
        if coord_max_epoch is not None and coord_max_epoch >= 0:
            ce = coord_max_epoch
        else:
            ce_src = "unknown"
    if status != HANGING:
        ce, ce_src = (ce, ce_src) if status == RESOLVED and ce is not None else (None, None)
    new = legacy = None
    if status == HANGING:
        new, legacy = abort_commands(topic=row["topic"], partition=row["partition"],
                                     first_offset=row["first_offset"], producer_id=row["producer_id"],
                                     producer_epoch=row["producer_epoch"], coordinator_epoch=ce, cfg=cfg)
    first = row["first_offset"]
    out = {
        "schema_version": ALERT_SCHEMA_VERSION,
        "key": row["key"],
        "status": status,
        "cause": row.get("cause"),
        "verified": bool(row.get("verified")) if status != RESOLVED else True,
        "cluster": row["cluster"],
        "topic": row["topic"],
        "partition": int(row["partition"]),
        "producer_id": int(row["producer_id"]),
        "producer_epoch": _int(row.get("producer_epoch")),
        "first_offset": int(first),
        "last_offset": _int(row.get("last_offset")),
        "first_ts": _int(row.get("first_ts")),
        "last_ts": _int(row.get("last_ts")),
        "open_ms": _int(row.get("open_ms")),
        "idle_ms": _int(row.get("idle_ms")),
        "records": _int(row.get("records")),
        "bytes": _int(row.get("bytes")),
        "batches": _int(row.get("batches")),
        "transactional_id": row.get("transactional_id"),
        "coordinator_state": row.get("coordinator_state"),
        "coordinator_epoch": _int(ce),
        "coordinator_epoch_source": ce_src,
        "lso": _int(lso),
        "high_watermark": _int(hw),
        "pins_lso": (int(lso) == int(first)) if lso is not None else None,
        "data_deleted": (int(log_start) > int(first)) if log_start is not None else False,
        "detected_at": _int(detected_at_ms if detected_at_ms is not None else row.get("now_ms")),
        "abort_command_new": new,
        "abort_command_legacy": legacy,
        "required_permission": REQUIRED_PERMISSION if status == HANGING else None,
        "resolution": row.get("resolution"),
        "threshold_ms": _int(row.get("threshold_ms")),
        "clock_skew": bool(row.get("clock_skew")),
        "input": row.get("source_position") or row.get("source"),
        "verify_hint": None,
    }
    out["verify_hint"] = _verify_hint(out, cfg)
    return out


def _int(v: Any) -> int | None:
    if v is None:
        return None
    try:
        if v != v:  # NaN
            return None
        return int(v)
    except (TypeError, ValueError):
        return None


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _hadoop_fs(path: str):
    """(FileSystem, Path) through the running Spark JVM, for checkpoint URLs (hdfs://, s3a://...)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise RuntimeError(f"no active SparkSession to reach {path}")
    jvm = spark.sparkContext._jvm
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    return jpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), jpath, jvm


def _read_text(path: str) -> str | None:
    if not _is_url(path):
        path = path[len("file://"):] if path.startswith("file://") else path
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()
    fs, jpath, jvm = _hadoop_fs(path)
    if not fs.exists(jpath):
        return None
    stream = fs.open(jpath)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def _write_text(path: str, text: str) -> None:
    """Replace the file atomically: write a temporary sibling, then rename over the target."""
    if not _is_url(path):
        path = path[len("file://"):] if path.startswith("file://") else path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".enricher")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        return
    fs, jpath, jvm = _hadoop_fs(path)
    tmp = jvm.org.apache.hadoop.fs.Path(path + ".tmp")
    out = fs.create(tmp, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()
    fs.delete(jpath, False)
    fs.rename(tmp, jpath)


class Enricher:
    """Driver-side memory of the alert stream: latest progress per partition, the highest
    coordinator epoch per ``__transaction_state`` partition, and the alerts currently open.

    Persisted as one JSON file (atomically replaced; through Hadoop's FileSystem for checkpoint
    URLs) beside the checkpoint, with the last
    micro-batch id written, so a micro-batch that Spark replays after a failure is not published
    twice and a restart keeps enriching alerts fired by timers before any new progress arrives.
    """

    def __init__(self, cfg: AlertConfig, path: str | None = None) -> None:
        self.cfg = cfg
        self.path = path
        self.partitions: dict[str, dict[str, Any]] = {}
        self.coord_epochs: dict[str, int] = {}
        self.active: dict[str, dict[str, Any]] = {}
        self.open_txns: dict[str, list[dict[str, Any]]] = {}
        self.clock: int | None = None  # the job's event-time clock as last seen in its output
        self.last_batch_id = -1
        text = _read_text(path) if path else None
        if text:
            doc = json.loads(text)
            self.partitions = doc.get("partitions", {})
            self.coord_epochs = doc.get("coord_epochs", {})
            self.active = doc.get("active", {})
            self.open_txns = doc.get("open_txns", {})
            self.clock = doc.get("clock")
            self.last_batch_id = doc.get("last_batch_id", -1)

    def save(self) -> None:
        if not self.path:
            return
        doc = {"partitions": self.partitions, "coord_epochs": self.coord_epochs, "active": self.active,
               "open_txns": self.open_txns, "clock": self.clock, "last_batch_id": self.last_batch_id}
        _write_text(self.path, json.dumps(doc))

    def observe_open_sets(self, rows: list[dict[str, Any]]) -> None:
        """Replace each reporting producer's open-transaction set (state ``open_set`` rows)."""
        by_pid: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            lst = by_pid.setdefault(str(int(r["producer_id"])), [])
            if r.get("topic") is not None:
                lst.append({"topic": r["topic"], "partition": int(r["partition"]),
                            "first_offset": _int(r["first_offset"]), "first_ts": _int(r["first_ts"])})
        for pid, lst in by_pid.items():
            if lst:
                self.open_txns[pid] = lst
            else:
                self.open_txns.pop(pid, None)

    def open_transactions(self) -> list[dict[str, Any]]:
        """Every open transaction the state knows of (for metrics)."""
        return [t for lst in self.open_txns.values() for t in lst]

    @property
    def coord_max_epoch(self) -> int | None:
        return max(self.coord_epochs.values()) if self.coord_epochs else None

    def observe_progress(self, row: dict[str, Any]) -> None:
        key = f"{row['topic']}-{int(row['partition'])}"
        cur = self.partitions.setdefault(key, {})
        for f in ("high_watermark", "lso", "log_start_offset"):
            v = _int(row.get(f))
            if v is not None:
                cur[f] = v
            elif f == "lso":
                cur.pop(f, None)  # unknown now: never publish a stale LSO
        if row["topic"] == "__transaction_state" and _int(row.get("coordinator_epoch")) is not None:
            self.coord_epochs[key] = max(self.coord_epochs.get(key, -1), _int(row["coordinator_epoch"]))

    def process(self, raw_alerts: list[dict[str, Any]], progress: list[dict[str, Any]],
                now_ms: int | None = None) -> list[dict[str, Any]]:
        """One micro-batch: progress first (same-batch enrichment), then the state's alert rows,
        then resolutions by LSO movement. Returns the alert objects to publish, in order."""
        for p in progress:
            self.observe_progress(p)
        for r in list(progress) + list(raw_alerts):
            t = _int(r.get("now_ms"))
            if t is not None and (self.clock is None or t > self.clock):
                self.clock = t
        out: list[dict[str, Any]] = []
        for raw in raw_alerts:
            part = self.partitions.get(f"{raw['topic']}-{int(raw['partition'])}")
            alert = finalize(raw, part, self.coord_max_epoch, self.cfg, coord_epochs=self.coord_epochs)
            key = alert["key"]
            if alert["status"] == RESOLVED:
                if key not in self.active:
                    continue  # already resolved (e.g. by LSO movement)
                self.active.pop(key)
            else:
                prev = self.active.get(key)
                if prev is not None and prev["status"] == alert["status"]:
                    continue
                self.active[key] = {"status": alert["status"], "alert": alert}
            out.append(alert)
        # The broker's LSO moved past a finding's first offset without a marker we saw (snapshot
        # purge + restart, topic recreated): the partition is no longer pinned by it.
        for key, entry in list(self.active.items()):
            a = entry["alert"]
            part = self.partitions.get(f"{a['topic']}-{a['partition']}") or {}
            lso = part.get("lso")
            if lso is not None and lso > a["first_offset"] and a["topic"] != "__transaction_state":
                if any(p["topic"] == a["topic"] and int(p["partition"]) == a["partition"] for p in progress):
                    resolved = dict(a, status=RESOLVED, resolution="lso-advanced", cause=None,
                                    abort_command_new=None, abort_command_legacy=None, required_permission=None,
                                    detected_at=now_ms if now_ms is not None else int(time.time() * 1000),
                                    lso=lso, pins_lso=False, verify_hint=None)
                    self.active.pop(key)
                    out.append(resolved)
        return out
