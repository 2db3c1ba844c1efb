"""The alert contract (docs/alerts.md, ``streaming/alert.schema.json``) and its enrichment.

The state machine emits, for every finding that changed, its evidence as far as one producer's
state knows it. The driver-side :class:`Enricher` adds the cluster-wide facts — which
``__transaction_state`` partitions were read up to the finding's ``now`` and how many there are
(from their progress rows), the highest leader epoch over them, and what a live broker answers
(:mod:`streaming.broker_evidence`) — and calls :func:`streaming.verdict.judge` again: that verdict
is what is published. It decides nothing itself. :func:`finalize` then turns the verdict into the
published JSON: partition facts from progress rows (LSO, high watermark, log start →
``pins_lso``, ``data_deleted``) and both ready-to-paste abort commands.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any

from streaming.broker_evidence import BrokerEvidence, LookbackResult
from streaming.clock_guard import DEFAULT_TOLERANCE_MS, is_outlier, wall_clock_ms
from streaming.gc_pause import collector_paused
from streaming.verdict import (
    DescribedTransaction,
    DescribeProducersAnswer,
    EpochEvidence,
    Marker,
    OpenTxn,
    PartitionProof,
    Thresholds,
    Verdict,
    described_from_answer,
    evidence_from_dict,
    judge,
    txn_from_dict,
    view_from_dict,
)
from streaming.vocab import ALERT_FIELDS as ALERT_FIELDS  # the contract's field order, re-exported
from streaming.vocab import (
    ALERT_SCHEMA_VERSION,
    CLOCK_SKEW,
    COORDINATOR_COPY_BEHIND,
    COORDINATOR_COPY_EMPTY,
    COORDINATOR_VIEW_INCOMPLETE,
    CRC_GAP,
    FINDING_STATUSES,
    HANGING,
    NEWEST_SEGMENT_NOT_PROVEN,
    NO_COORDINATOR_INPUT,
    PREPARED_2PC,
    RESOLVED,
    START_OFFSET_NOT_PROVEN,
    finding_kind,
)

REQUIRED_PERMISSION = "CLUSTER_ACTION on the cluster (brokers 3.0-3.7) or ALTER on the cluster (3.8+)"
TXN_TOPIC = "__transaction_state"
FILE_SOURCES = ("segments", "dumps")  # event ``source`` values of file inputs
READ_TO_THE_END = 1 << 62  # read time of a file input's coordinator partition: up to any clock


@dataclass(frozen=True)
class AlertConfig:
    """``txn_state_partitions``: n of ``__transaction_state`` when its progress rows do not say
    (config ``[coordinator] txn_state_partitions`` for files and dumps; None on the live path, where
    only the cluster's metadata may say: a guessed n could call an incomplete view complete)."""

    bootstrap_servers: str | None = None
    tool: str = "kafka-transactions.sh"
    txn_state_partitions: int | None = None
    # the skew guard of file and dump clocks (detection.md §2; [thresholds] clock_skew_tolerance_ms)
    clock_skew_tolerance_ms: int = DEFAULT_TOLERANCE_MS


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


def _verify_hint(alert: dict[str, Any], n: int | None) -> str | None:
    """What to check before acting on a finding: for each of its ``unverified_reasons`` the input
    that would supply the missing proof (docs/alerts.md), for a two-phase-commit transaction its
    remedy, then the epoch hint (``producer-last-marker``/``unknown``, a look-back that gave up)."""
    status = alert.get("status")
    if status not in FINDING_STATUSES:
        return None
    parts = [reason_hint(r, alert, n) for r in alert.get("unverified_reasons") or ()]
    if status == HANGING and not alert.get("verified", True) and not parts:
        parts.append(_unverified_text(alert, n))
    if alert.get("cause") == PREPARED_2PC:
        parts.append(two_pc_remedy(alert))
    if status == HANGING and alert.get("epoch_hint"):
        parts.append(alert["epoch_hint"])
    return ". ".join(parts) if parts else None


def two_pc_remedy(alert: dict[str, Any], tool: str = "kafka-transactions.sh") -> str:
    """The remedy of last resort for a KIP-939 two-phase-commit transaction (detection.md §3.1):
    ``TransactionsCommand``'s ``forceTerminateTransaction`` subcommand (Kafka 4.1+, KAFKA-19003,
    apache/kafka PR 19276) sends InitProducerId with keepPreparedTxn=false for the transactional id
    (``Admin.forceTerminateTransaction`` → ``fenceProducers``): the coordinator aborts it."""
    tid = alert.get("transactional_id")
    target = shell_quote(tid) if tid else "<transactional-id>"
    return (f"two-phase-commit transaction (KIP-939, TransactionTimeoutMs 2147483647): the coordinator never "
            f"times it out and its external transaction manager owns the commit/abort decision; resolve it in that "
            f"manager. Remedy of last resort, which breaks the external manager's atomicity: {tool} "
            f"--bootstrap-server <bootstrap> forceTerminateTransaction --transactionalId {target} (Kafka 4.1+)")


def reason_hint(reason: str, alert: dict[str, Any], n: int | None) -> str:
    """What would supply the proof ``reason`` names (one sentence per reason, docs/alerts.md)."""
    tp = f"{alert.get('topic')}-{alert.get('partition')}"
    if reason == NEWEST_SEGMENT_NOT_PROVEN:
        return (f"{reason}: the input does not prove the read of {tp} reached the partition's end; give {tp}'s "
                f"whole log directory (its newest segment), or the broker's replication-offset-checkpoint / "
                f"recovery-point-offset-checkpoint from that log directory among the input paths, or add "
                f"--bootstrap-server so ListOffsets confirms the end offset")
    if reason in (COORDINATOR_VIEW_INCOMPLETE, NO_COORDINATOR_INPUT):
        return f"{reason}: {_unverified_text(alert, n)}"
    if reason == COORDINATOR_COPY_BEHIND:
        return (f"{reason}: {_coordinator_copy(alert, n)} read holds nothing newer than this transaction's first "
                f"write and may be a lagging replica; give the copy from the partition's current leader, or add "
                f"--bootstrap-server so ListOffsets proves the copies' end offsets")
    if reason == COORDINATOR_COPY_EMPTY:
        return (f"{reason}: {_coordinator_copy(alert, n)} read is empty, which an unused partition and a replica "
                f"that fetched nothing look alike; give the leader's copy, or add --bootstrap-server so ListOffsets "
                f"proves its end offset (or run kafka-transactions.sh describe / list)")
    if reason == CRC_GAP:
        return (f"{reason}: a batch this finding rests on failed its CRC check and was not believed (the gap record "
                f"names file and offset); copy that segment again from the broker or another replica")
    if reason == CLOCK_SKEW:
        return (f"{reason}: a timestamp of this transaction lies ahead of the clock (producer or broker clock "
                f"skew); check the clocks, or give --as-of with the time the input was taken")
    if reason == START_OFFSET_NOT_PROVEN:
        return (f"{reason}: retention deleted the start of this transaction and the input does not say where it "
                f"began; give {tp}'s newest .snapshot file, or on brokers 2.8+ run kafka-transactions.sh "
                f"describe-producers --topic {alert.get('topic')} --partition {alert.get('partition')} "
                f"(DescribeProducers: CurrentTransactionStartOffset) before using --start-offset")
    return reason


def _unverified_text(alert: dict[str, Any], n: int | None) -> str:
    from udfs.partitioning import txn_state_partition

    missing = alert.get("missing_txn_partitions")
    tid = alert.get("transactional_id")
    if tid and n:
        k = txn_state_partition(tid, n)
        return (f"confirm before aborting: the coordinator of transactional id {tid!r} (__transaction_state-{k}) "
                f"was not read up to now; dump __transaction_state-{k} with kafka-dump-log.sh "
                f"--transaction-log-decoder or run kafka-transactions.sh describe --transactional-id "
                f"{shell_quote(tid)}")
    if missing:
        shown = ", ".join(str(p) for p in missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
        return (f"confirm before aborting: __transaction_state partitions {shown} were not read up to now, and "
                f"one of them may hold this producer's transactional id with markers pending; provide them "
                f"(kafka-dump-log.sh --transaction-log-decoder) or run kafka-transactions.sh list / describe")
    return ("confirm before aborting: no coordinator view was read; run kafka-transactions.sh list / describe "
            "for this producer id, or include the __transaction_state partitions (kafka-dump-log.sh "
            "--transaction-log-decoder) in the input")


def _coordinator_copy(alert: dict[str, Any], n: int | None) -> str:
    from udfs.partitioning import txn_state_partition

    tid = alert.get("transactional_id")
    if tid and n:
        return f"the copy of __transaction_state-{txn_state_partition(tid, n)} (transactional id {tid!r})"
    return "a __transaction_state copy that could hold this producer's transactional id"


def evidence_object(txn: OpenTxn | None, view_record: Any, ev: EpochEvidence | None,
                    txn_partition: int | None = None) -> dict[str, Any] | None:
    """The alert's ``evidence``: the facts the verdict was computed from (docs/alerts.md)."""
    if txn is None:
        return None
    rec = asdict(view_record) if view_record is not None else None
    if rec is not None:
        rec["partitions"] = list(rec["partitions"]) if rec["partitions"] is not None else None
        rec["txn_partition"] = txn_partition
    return {
        "first_batch": {"offset": txn.first_offset, "timestamp": txn.first_ts, "producer_epoch": txn.first_epoch},
        "last_batch": {"offset": txn.last_offset, "timestamp": txn.last_ts},
        "last_marker": asdict(ev.last_marker) if ev is not None and ev.last_marker is not None else None,
        "coordinator_record": rec,
        "snapshot_entry": asdict(ev.snapshot) if ev is not None and ev.snapshot is not None else None,
        "describe_producers": (asdict(ev.describe_producers)
                               if ev is not None and ev.describe_producers is not None else None),
        "describe_transactions": None,
    }


@dataclass(frozen=True)
class Judged:
    """The driver's verdict for one state row and the evidence it used."""

    verdict: Verdict
    txn: OpenTxn
    evidence: EpochEvidence
    record: Any
    txn_partition: int | None
    epoch_note: str | None = None  # why the live look-back did not find P's last marker
    span: dict[str, Any] | None = None  # probe mode: O's extent read from the broker (SpanResult)


def finalize(row: dict[str, Any], part: dict[str, Any] | None, cfg: AlertConfig, *,
             judged: Judged | None = None, detected_at_ms: int | None = None,
             txn_partitions: int | None = None) -> dict[str, Any]:
    """State-machine row (and the driver's verdict for it) → the published alert (contract order).

    Without ``judged`` (resolutions) the row's own fields are published. Late findings keep the
    coordinator epoch and its source (informational); only hanging ones get commands."""
    part = part or {}
    lso, hw, log_start = part.get("lso"), part.get("high_watermark"), part.get("log_start_offset")
    status = row["status"]
    v = judged.verdict if judged is not None else None
    cause = v.cause if v is not None else row.get("cause")
    verified = v.verified if v is not None else row.get("verified")
    e = v.producer_epoch if v is not None else row.get("producer_epoch")
    ce = v.coordinator_epoch if v is not None else row.get("coordinator_epoch")
    ce_src = v.coordinator_epoch_source if v is not None else row.get("coordinator_epoch_source")
    hint = v.epoch_hint if v is not None else None
    if judged is not None and judged.epoch_note:
        hint = f"{hint} ({judged.epoch_note})" if hint else judged.epoch_note
    new = legacy = None
    if status == HANGING:
        new, legacy = abort_commands(topic=row["topic"], partition=row["partition"],
                                     first_offset=row["first_offset"], producer_id=row["producer_id"],
                                     producer_epoch=e, coordinator_epoch=ce, cfg=cfg)
    first = row["first_offset"]
    out = {
        "schema_version": ALERT_SCHEMA_VERSION,
        "key": row["key"],
        "status": status,
        "cause": cause if status != RESOLVED else None,
        "verified": bool(verified) if status != RESOLVED else True,
        "cluster": row["cluster"],
        "topic": row["topic"],
        "partition": int(row["partition"]),
        "producer_id": int(row["producer_id"]),
        "producer_epoch": _int(e),
        "first_offset": int(first),
        "last_offset": _int(row.get("last_offset")),
        "first_ts": _int(row.get("first_ts")),
        "last_ts": _int(row.get("last_ts")),
        "open_ms": _int(v.open_ms if v is not None else row.get("open_ms")),
        "idle_ms": _int(v.idle_ms if v is not None else row.get("idle_ms")),
        "records": _int(row.get("records")),
        "bytes": _int(row.get("bytes")),
        "batches": _int(row.get("batches")),
        "transactional_id": row.get("transactional_id"),
        "coordinator_state": row.get("coordinator_state"),
        "coordinator_epoch": _int(ce),
        "coordinator_epoch_source": ce_src,
        "lso": _int(lso),
        "high_watermark": _int(hw),
        "pins_lso": (int(lso) == _pinned_at(first, log_start)) if lso is not None else None,
        "data_deleted": (int(log_start) > int(first)) if log_start is not None else False,
        "detected_at": _int(detected_at_ms if detected_at_ms is not None else row.get("now_ms")),
        "abort_command_new": new,
        "abort_command_legacy": legacy,
        "required_permission": REQUIRED_PERMISSION if status == HANGING else None,
        "resolution": row.get("resolution"),
        "threshold_ms": _int(v.threshold_ms if v is not None else row.get("threshold_ms")),
        "clock_skew": bool(v.clock_skew if v is not None else row.get("clock_skew")),
        "input": row.get("source_position") or row.get("source"),
        "verify_hint": None,
        "missing_txn_partitions": (list(v.missing_txn_partitions) if v is not None and status == HANGING
                                   and v.missing_txn_partitions is not None else None),
        "epoch_hint": hint if status != RESOLVED else None,
        "evidence": (evidence_object(judged.txn, judged.record, judged.evidence, judged.txn_partition)
                     if judged is not None else None),
        # filled on the live path by streaming.broker_confirm.annotate
        "confirmed_by": None,
        "blocked_groups": None,
        "lagging_groups": None,
        "transaction_version": None,
        "pending_offset_commits": None,
        "stale": None,  # set on re-publication while the partition is unreadable (streaming/availability.py)
        "last_read_ms": None,
        "log_start_offset": _int(log_start),  # issue 20: the log start at detection
        "pinned_since_ms": None,  # only findings of streaming/pinned_lso.py
        # detection.md §0: each missing proof; empty iff verified (resolutions: empty)
        "unverified_reasons": ([] if status == RESOLVED else list(v.unverified_reasons) if v is not None
                               else list(row.get("unverified_reasons") or [])),
        # issue 25: an open transaction on __consumer_offsets holds consumer-group offset commits
        "kind": finding_kind(row["topic"]),
    }
    out["verify_hint"] = _verify_hint(out, txn_partitions)
    return out


def _pinned_at(first_offset: int, log_start: int | None) -> int:
    """Where O holds the LSO: its first offset, or the log start when retention deleted that
    (the LSO never lies below the log start: ``UnifiedLog.updateFirstUnstableOffset`` takes
    max(first unstable offset, logStartOffset)); an LSO above this proves O no longer pins it."""
    return max(int(first_offset), int(log_start)) if log_start is not None else int(first_offset)


_ABSENT = object()  # a key a dict does not hold


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


def _sig(alert: dict[str, Any]) -> list[Any]:
    """What makes a published finding different: each change is published once."""
    return [alert["status"], alert["cause"], alert["verified"], alert["coordinator_epoch"],
            alert["coordinator_epoch_source"], list(alert.get("unverified_reasons") or [])]


def _json_text(v: Any) -> str:
    """``json.dumps(v)`` (default arguments), the same text, without building an encoder for the
    values the state files hold per partition (a str, int, bool or None, or a flat dict of them
    with str keys): ``json.dumps`` makes a new encoder per call, which was most of the cost of a
    save at 200,000 partitions (tens of thousands of changed entries per trigger). Inlined: it
    runs for every changed entry."""
    t = type(v)
    if t is str:
        return _json_str(v)
    if t is int:
        return int.__repr__(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is dict:
        parts = []
        for k, x in v.items():
            tx = type(x)
            if tx is int:
                s = int.__repr__(x)
            elif x is None:
                s = "null"
            elif tx is str:
                s = _json_str(x)
            elif tx is bool:
                s = "true" if x else "false"
            else:
                return json.dumps(v)
            if type(k) is not str:
                return json.dumps(v)
            parts.append(f"{_json_str(k)}: {s}")
        return "{" + ", ".join(parts) + "}"
    return json.dumps(v)


class _EntriesText:
    """The JSON text of one dict whose entries change a few at a time (the enricher's
    per-partition maps: one entry per partition of the cluster, a few thousand changed per
    trigger; its open transactions per producer and its published findings): each entry's text
    is kept and only the entries marked changed are encoded again, so a save costs the changes
    and a join instead of encoding every entry every trigger (and a map without changes costs
    nothing: its text is kept whole). The text is what ``json.dumps`` gives for the dict. A dict
    replaced, or grown or shrunk by other code than the marking one, is encoded again whole."""

    def __init__(self) -> None:
        self.src: dict[str, Any] | None = None
        self.parts: dict[str, str] = {}
        self.changed: set[str] = set()
        self.joined: str | None = None

    def text(self, d: dict[str, Any]) -> str:
        if d is self.src and not self.changed and len(d) == len(self.parts) and self.joined is not None:
            return self.joined
        if d is self.src:
            for k in self.changed:
                if k in d:
                    self.parts[k] = f"{_json_text(k)}: {_json_text(d[k])}"
                else:
                    self.parts.pop(k, None)
        if d is not self.src or len(d) != len(self.parts):
            self.src = d
            self.parts = {k: f"{_json_text(k)}: {_json_text(v)}" for k, v in d.items()}
        self.changed.clear()
        self.joined = "{" + ", ".join(self.parts.values()) + "}"
        return self.joined


class Enricher:
    """Driver-side memory of the alert stream: latest progress per partition (and, for
    ``__transaction_state`` partitions, the latest read time, highest leader epoch and the
    partition count), the findings currently published with the state row they came from, and
    findings held back (a blocked verdict, or a partition on :meth:`hold`).

    Persisted as one JSON file (atomically replaced; through Hadoop's FileSystem for checkpoint
    URLs) beside the checkpoint, with the last micro-batch id written, so a micro-batch that Spark
    replays after a failure is not published twice and a restart keeps enriching alerts fired by
    timers before any new progress arrives. ``partitions``, ``end_proven`` and ``sources`` (an
    entry per partition) change only in :meth:`observe_progress`, which marks the entries that
    :meth:`save` encodes again (the others keep their text from the save before).

    ``broker``: the live cluster's answers (:class:`streaming.broker_evidence.BrokerEvidence`);
    None for files and dumps. Its answers are cached per finding key (``answers``).

    What the input proves (detection.md §0), kept per partition from progress and gap rows and
    handed to every :func:`judge` call as a :class:`PartitionProof` and the coordinator view's
    currency fields: ``end_proven`` (the latest read reached the partition's end), ``newest_ts``
    (files and dumps: the newest timestamp read, for empty/lagging coordinator copies and the
    clock's skew guard), ``crc_gaps`` (offsets of batches that failed their CRC; a
    ``__transaction_state`` partition with one is incomplete from there on) and ``end_offsets``
    (``scan --bootstrap-server``: the broker's ListOffsets answer, which proves a file's end and
    the currency of coordinator copies when it equals where the read ended).
    """

    def __init__(self, cfg: AlertConfig, path: str | None = None, broker: BrokerEvidence | None = None,
                 end_offsets: Any = None) -> None:
        self.cfg = cfg
        self.path = path
        self.broker = broker
        self.partitions: dict[str, dict[str, Any]] = {}
        self.coord_epochs: dict[str, int] = {}
        self.txn_read_ms: dict[str, int] = {}  # "__transaction_state-k" → latest progress event time
        self.txn_partition_count: int | None = None
        self.active: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, dict[str, Any]] = {}  # key → state row not published yet (blocked/held)
        self.answers: dict[str, dict[str, Any]] = {}  # key → cached broker answers
        self.held: set[str] = set()  # "topic-partition" not read through now (per-partition clock)
        self.open_txns: dict[str, list[dict[str, Any]]] = {}
        self.clock: int | None = None  # the job's event-time clock as last seen in its output
        self.last_batch_id = -1
        self.end_proven: dict[str, bool] = {}  # "topic-partition" → its latest read reached its end
        self.read_end: dict[str, int] = {}  # files and dumps: where the latest read of it ended
        self.sources: dict[str, str] = {}  # "topic-partition" → source of its latest progress row
        self.newest_ts: dict[str, int] = {}  # files and dumps: newest timestamp read per partition
        self.crc_gaps: dict[str, list[int]] = {}  # offsets of batches that failed their CRC
        # ``scan --bootstrap-server``: callable [(topic, partition)] -> {(topic, partition): end
        # offset} (ListOffsets latest), asked once per partition; None: no broker to ask.
        self.end_offsets = end_offsets
        self.broker_ends: dict[str, int | None] = {}
        # save()'s text of the maps that hold an entry per partition, producer or finding, kept per
        # entry: changed only by observe_progress (partitions, end_proven, sources),
        # observe_open_sets (open_txns) and process/_publish (active), which mark what they change
        self._entries = {"active": _EntriesText(), "open_txns": _EntriesText(), "partitions": _EntriesText(),
                         "end_proven": _EntriesText(), "sources": _EntriesText()}
        # key -> (evidence text, its parsed (txn, view, evidence, thresholds, probe)): a finding's
        # state row is judged again every trigger while it is open, with the same evidence
        self._parsed: dict[str, tuple[str, Any]] = {}
        # process(): the view facts per clock (_view_facts), valid while it judges; None outside
        self._facts_cache: dict[int, dict[str, Any]] | None = None
        text = _read_text(path) if path else None
        if text:
            doc = json.loads(text)
            self.partitions = doc.get("partitions", {})
            self.coord_epochs = doc.get("coord_epochs", {})
            self.txn_read_ms = doc.get("txn_read_ms", {})
            self.txn_partition_count = doc.get("txn_partition_count")
            self.active = doc.get("active", {})
            self.pending = doc.get("pending", {})
            self.answers = doc.get("answers", {})
            self.open_txns = doc.get("open_txns", {})
            self.clock = doc.get("clock")
            self.last_batch_id = doc.get("last_batch_id", -1)
            self.end_proven = doc.get("end_proven", {})
            self.read_end = doc.get("read_end", {})
            self.sources = doc.get("sources", {})
            self.newest_ts = doc.get("newest_ts", {})
            self.crc_gaps = doc.get("crc_gaps", {})
            self.broker_ends = doc.get("broker_ends", {})

    def save(self) -> None:
        if not self.path:
            return
        # the document's fields in their order; the maps of _entries encode only their changed entries
        fields = (("coord_epochs", self.coord_epochs), ("txn_read_ms", self.txn_read_ms),
                  ("txn_partition_count", self.txn_partition_count), ("active", self.active),
                  ("pending", self.pending), ("answers", self.answers), ("open_txns", self.open_txns),
                  ("clock", self.clock), ("last_batch_id", self.last_batch_id), ("read_end", self.read_end),
                  ("newest_ts", self.newest_ts), ("crc_gaps", self.crc_gaps), ("broker_ends", self.broker_ends),
                  ("partitions", self.partitions), ("end_proven", self.end_proven), ("sources", self.sources))
        entries = self._entries
        with collector_paused():  # the encoder's item tuples would start full collections (gc_pause)
            text = "{" + ", ".join(f"{json.dumps(name)}: "
                                   f"{entries[name].text(value) if name in entries else json.dumps(value)}"
                                   for name, value in fields) + "}"
        _write_text(self.path, text)

    def observe_open_sets(self, rows: list[dict[str, Any]]) -> None:
        """Replace each reporting producer's open-transaction set (state ``open_set`` rows)."""
        by_pid: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            lst = by_pid.setdefault(str(int(r["producer_id"])), [])
            if r.get("topic") is not None:
                lst.append({"topic": r["topic"], "partition": int(r["partition"]),
                            "first_offset": _int(r["first_offset"]), "first_ts": _int(r["first_ts"])})
        changed = self._entries["open_txns"].changed
        for pid, lst in by_pid.items():
            if lst:
                if self.open_txns.get(pid) != lst:
                    self.open_txns[pid] = lst
                    changed.add(pid)
            elif self.open_txns.pop(pid, None) is not None:
                changed.add(pid)

    def open_transactions(self) -> list[dict[str, Any]]:
        """Every open transaction the state knows of (for metrics)."""
        return [t for lst in self.open_txns.values() for t in lst]

    def iter_open_transactions(self) -> Iterator[dict[str, Any]]:
        """:meth:`open_transactions` one by one, for a caller that may not need them all."""
        for lst in self.open_txns.values():
            yield from lst

    def hold(self, partition: str) -> None:
        """Publish no new verdict for findings on ``partition`` ("topic-partition") until
        :meth:`release`: it was not read through now (per-partition clock, WAVE2 contract C)."""
        self.held.add(partition)

    def release(self, partition: str) -> None:
        self.held.discard(partition)

    def observe_progress(self, row: dict[str, Any]) -> None:
        key = f"{row['topic']}-{int(row['partition'])}"
        entries = self._entries
        cur = self.partitions.get(key)
        changed = cur is None
        if changed:
            cur = self.partitions[key] = {}
        for f in ("high_watermark", "lso", "log_start_offset"):
            v = _int(row.get(f))
            if v is not None:
                if cur.get(f, _ABSENT) != v:
                    cur[f] = v
                    changed = True
            elif f == "lso" and cur.pop(f, _ABSENT) is not _ABSENT:  # unknown now: never publish a stale LSO
                changed = True
        if changed:  # what save() encodes again: only entries whose facts changed
            entries["partitions"].changed.add(key)
        # the proof facts (detection.md §0): the latest read decides whether tp's end was reached
        proven, source = row.get("end_proven") is True, row.get("source") or ""
        if self.end_proven.get(key) is not proven:
            self.end_proven[key] = proven
            entries["end_proven"].changed.add(key)
        if self.sources.get(key) != source:
            self.sources[key] = source
            entries["sources"].changed.add(key)
        if row.get("source") in FILE_SOURCES:
            # where the read ended: the offset after its last batch (an empty read: its log start)
            hw = _int(row.get("high_watermark"))
            hw = hw if hw is not None else _int(row.get("log_start_offset"))
            if hw is not None:
                self.read_end[key] = hw
            ts = _int(row.get("last_ts"))
            if ts is not None:
                self.newest_ts[key] = max(self.newest_ts.get(key, ts), ts)
        if row["topic"] != TXN_TOPIC:
            return
        t = _int(row.get("now_ms"))
        if row.get("source") in FILE_SOURCES:
            # Files and dumps are a picture of the log up to where they end, and the file sources
            # read __transaction_state whole (never throttled) in one go: once read, a coordinator
            # partition is read up to any later clock of the same input (only the live path lags).
            t = READ_TO_THE_END
        if t is not None:
            self.txn_read_ms[key] = max(self.txn_read_ms.get(key, t), t)
        if _int(row.get("coordinator_epoch")) is not None:
            self.coord_epochs[key] = max(self.coord_epochs.get(key, -1), _int(row["coordinator_epoch"]))
        n = _int(row.get("txn_partition_count"))
        if n is not None and n > 0:
            self.txn_partition_count = n

    def observe_gaps(self, rows: list[dict[str, Any]]) -> None:
        """Gap rows: remember where a batch failed its CRC (never believed; detection.md §0)."""
        for g in rows:
            if g.get("crc_failed") is not True or g.get("topic") is None or _int(g.get("partition")) is None:
                continue
            key = f"{g['topic']}-{int(g['partition'])}"
            off = _int(g.get("first_offset"))
            lst = self.crc_gaps.setdefault(key, [])
            off = off if off is not None else -1
            if off not in lst:
                lst.append(off)

    # --- the driver's verdict ------------------------------------------------------------------

    def _broker_end(self, key: str) -> int | None:
        """``scan --bootstrap-server``: the broker's end offset of partition ``key`` (ListOffsets),
        asked once; None when there is no broker to ask or it did not answer."""
        if self.end_offsets is None:
            return None
        if key not in self.broker_ends:
            # one ListOffsets round for every partition read and not asked yet
            keys = [k for k in [key, *self.partitions] if k not in self.broker_ends]
            tps = [(k.rsplit("-", 1)[0], int(k.rsplit("-", 1)[1])) for k in dict.fromkeys(keys)]
            try:
                ans = self.end_offsets(tps) or {}
            except Exception:  # an unreachable broker proves nothing; never fails the scan
                ans = {}
            for t, p in tps:
                self.broker_ends[f"{t}-{p}"] = ans.get((t, p))
        return self.broker_ends[key]

    def _end_proven(self, key: str) -> bool:
        """The latest read of ``key`` reached its end: the source says so (live high watermark,
        listed log directory, the broker's checkpoint), or the broker's ListOffsets end equals
        where a file read ended."""
        if self.end_proven.get(key):
            return True
        end = self.read_end.get(key)
        return end is not None and self.sources.get(key) in FILE_SOURCES and self._broker_end(key) == end

    def _copies_current(self, read: frozenset[int]) -> bool:
        """Every coordinator copy read is proven current: read live to its high watermark, or its
        end equals the broker's ListOffsets answer (detection.md §0, revision 3.1). The end of a
        copied file alone never is: a lagging replica's log directory is complete but behind."""
        if not read:
            return False
        for k in read:
            key = f"{TXN_TOPIC}-{k}"
            src = self.sources.get(key)
            if src == "kafka":
                if not self.end_proven.get(key):
                    return False
            elif src in FILE_SOURCES:
                end = self.read_end.get(key)
                if end is None or self._broker_end(key) != end:
                    return False
            else:
                return False
        return True

    def proof_for(self, row: dict[str, Any], txn: OpenTxn, ev: EpochEvidence) -> PartitionProof:
        """What the input proves of O's partition (detection.md §0), from progress and gap rows."""
        key = f"{txn.topic}-{txn.partition}"
        lower = txn.prev_marker.offset if txn.prev_marker is not None else None
        gaps = tuple(sorted(g for g in self.crc_gaps.get(key, ()) if lower is None or g > lower or g < 0))
        files = (row.get("source") or self.sources.get(key)) in FILE_SOURCES
        # O's first offset is its real one when P's history on tp before it was read: a marker of P
        # just before it, a snapshot at or below it (or O's own snapshot entry), or tp read from 0.
        # The live source reads from the LSO, which no open transaction lies below. Otherwise
        # retention (or an input starting at a later segment) may have taken O's first batches.
        snap = ev.snapshot
        start_proven = (not files or bool(row.get("from_snapshot")) or txn.prev_marker is not None
                        or ev.read_from_zero or (snap is not None and snap.offset <= txn.first_offset))
        skew = False
        if files and self.newest_ts:
            wall = wall_clock_ms()
            skew = any(is_outlier(ts, key, self.newest_ts, wall_ms=wall,
                                  tolerance_ms=self.cfg.clock_skew_tolerance_ms)
                       for ts in (txn.first_ts, txn.last_ts))
        return PartitionProof(end_proven=self._end_proven(key), crc_gaps=gaps, start_proven=start_proven,
                              clock_skew=skew)

    def read_txn_partitions(self, now_ms: int) -> frozenset[int]:
        """``__transaction_state`` partitions whose latest progress is at or after ``now_ms``."""
        return frozenset(int(k.rsplit("-", 1)[1]) for k, t in self.txn_read_ms.items() if t >= now_ms)

    def judge_row(self, row: dict[str, Any], now_ms: int) -> Judged:
        """The state's evidence for one finding plus the global facts, judged at ``now_ms``."""
        txn, view, ev, thresholds, probe = self._evidence(row)
        view = replace(view, **self._view_facts(now_ms))
        note = span = None
        if self.broker is not None:
            txn, ev, note = self._broker_evidence(row["key"], txn, ev)
            if probe:
                txn, span = self._span(row["key"], txn)
            # the coordinator's own word (DescribeTransactions) and the cluster's finalized
            # transaction.version (2: every marker is bumped, detection.md §3.1 revision 3.1)
            tv = getattr(self.broker, "transaction_version", None)
            view = replace(view, described=self._described(row["key"], row.get("transactional_id"), now_ms),
                           txn_version=tv() if callable(tv) else None)
        v = judge(txn, view, ev, now_ms=now_ms, thresholds=thresholds,
                  proof=self.proof_for(row, txn, ev))
        return Judged(v, txn, ev, view.record if view.mapping_current else None, view.txn_partition, note, span)

    def _view_facts(self, now_ms: int) -> dict[str, Any]:
        """The coordinator view's fields that the cluster-wide facts give at ``now_ms`` (the same
        for every finding judged at that clock). Within :meth:`process` they are computed once per
        clock: the facts they come from change only in its observe_* calls, made before any
        judging (``_broker_end`` only remembers the broker's first answer)."""
        cache = self._facts_cache
        if cache is not None and now_ms in cache:
            return cache[now_ms]
        read = self.read_txn_partitions(now_ms)
        # A coordinator partition with a CRC gap is incomplete from the gap on (detection.md §0).
        gapped = frozenset(int(k.rsplit("-", 1)[1]) for k, offs in self.crc_gaps.items()
                           if offs and k.rsplit("-", 1)[0] == TXN_TOPIC)
        current = bool(read)
        read = read - gapped
        amax = [self.coord_epochs[f"{TXN_TOPIC}-{k}"] for k in read if f"{TXN_TOPIC}-{k}" in self.coord_epochs]
        n = self.txn_partition_count if self.txn_partition_count is not None else self.cfg.txn_state_partitions
        files = {k for k in read if self.sources.get(f"{TXN_TOPIC}-{k}") in FILE_SOURCES}
        # "current": a __transaction_state source was read up to now (detection.md §3.1) — known
        # here from its progress rows, whatever the job's configuration expected.
        facts = dict(current=current, partition_count=n, read_partitions=read,
                     all_coordinators_max=max(amax) if amax else None,
                     copies_current=self._copies_current(read), gap_partitions=gapped,
                     empty_partitions=frozenset(k for k in files if f"{TXN_TOPIC}-{k}" not in self.newest_ts),
                     newest_ts=tuple(sorted((k, self.newest_ts[f"{TXN_TOPIC}-{k}"]) for k in files
                                            if f"{TXN_TOPIC}-{k}" in self.newest_ts)))
        if cache is not None:
            cache[now_ms] = facts
        return facts

    def _evidence(self, row: dict[str, Any]) -> tuple[OpenTxn, Any, EpochEvidence, Thresholds, bool]:
        """The state's evidence of a finding row, parsed: (txn, coordinator view, epoch evidence,
        thresholds, probe mode). Parsed once per evidence text and finding (an open finding is
        judged again every trigger with the same text); the parsed objects are immutable."""
        text = row["evidence"]
        hit = self._parsed.get(row["key"])
        if hit is not None and (hit[0] is text or hit[0] == text):
            return hit[1]
        doc = json.loads(text)
        parsed = (txn_from_dict(doc["txn"]), view_from_dict(doc["view"]), evidence_from_dict(doc["ev"]),
                  Thresholds(**doc["thresholds"]), bool(doc.get("probe")))
        self._parsed[row["key"]] = (text, parsed)
        return parsed

    def _described(self, key: str, transactional_id: str | None, now_ms: int) -> DescribedTransaction | None:
        """The coordinator's current state and partition set for P's transactional id
        (DescribeTransactions, 3.0+): it decides ownership instead of the log's record (detection.md
        §3.1: the withdrawn "marker landed" rule's replacement). Asked once per finding and clock."""
        if not transactional_id:
            return None
        cache = self.answers.setdefault(key, {})
        if cache.get("dt_at") != now_ms:
            cache["dt"], cache["dt_at"] = self.broker.describe_transaction(transactional_id), now_ms
        return described_from_answer(cache["dt"])

    def _ask_coordinators(self, raw_alerts: list[dict[str, Any]]) -> None:
        """DescribeTransactions for every finding :meth:`process` is about to judge, asked in one
        go (one request per coordinator) instead of one round trip per finding; each answer goes
        into the cache :meth:`_described` reads, for the same finding and clock it would have asked
        at. The findings and clocks are those of :meth:`process`: the state's rows at their own
        ``now_ms`` (a resolution is not judged), every other open or held finding at the clock."""
        many = getattr(self.broker, "describe_transactions", None)
        if many is None:
            return
        fresh = {raw["key"] for raw in raw_alerts}
        wanted = [(raw["key"], raw.get("transactional_id"), _int(raw.get("now_ms")) or self.clock or 0)
                  for raw in raw_alerts if raw["status"] != RESOLVED]
        if self.clock is not None:
            wanted += [(key, row.get("transactional_id"), self.clock)
                       for key, row in [(k, e["row"]) for k, e in self.active.items() if e.get("row")]
                       + list(self.pending.items()) if key not in fresh]
        todo = [(key, tid, now) for key, tid, now in wanted
                if tid and self.answers.get(key, {}).get("dt_at") != now]
        if len(todo) < 2:
            return  # one question: _described asks it as before
        answers = many([tid for _, tid, _ in todo])
        for key, tid, now in todo:
            cache = self.answers.setdefault(key, {})
            cache["dt"], cache["dt_at"] = answers.get(tid), now

    def _span(self, key: str, txn: OpenTxn) -> tuple[OpenTxn, dict[str, Any] | None]:
        """Probe mode: the state knows O's first batch only; its extent (data-loss preview, last
        write, highest epoch = the legacy abort's E) is read once per finding, forwards from O."""
        cache = self.answers.setdefault(key, {})
        if "span" not in cache:
            cache["span"] = asdict(self.broker.span_after(txn.topic, txn.partition, txn.producer_id,
                                                          txn.first_offset))
        span = cache["span"]
        if span.get("last_offset") is None:
            return txn, span
        return replace(txn, last_offset=max(txn.last_offset, span["last_offset"]),
                       last_ts=max(txn.last_ts, span["last_ts"]),
                       max_epoch=max(txn.max_epoch, span["max_epoch"])), span

    def _broker_evidence(self, key: str, txn: OpenTxn, ev: EpochEvidence) -> tuple[OpenTxn, EpochEvidence,
                                                                                    str | None]:
        """DescribeProducers (rule 1) and, when tp was read from the LSO only, the look-back for P's
        last marker (rule 2). Answers bound to O stay true while O is open: cached per key."""
        cache = self.answers.setdefault(key, {})
        if "dp" not in cache:
            answers = self.broker.describe_producers(txn.topic, txn.partition)
            if answers is None:
                cache["dp"] = None  # unsupported or unreachable: not asked again for this finding
            else:
                dp = answers.get(txn.producer_id) or DescribeProducersAnswer(found=False)
                if dp.found and dp.current_txn_start_offset == txn.first_offset:
                    cache["dp"] = asdict(dp)
                else:
                    ev = replace(ev, describe_producers=dp)  # blocks this verdict; asked again next time
        if cache.get("dp"):
            # rule 1 gives the epoch; the look-back still gives O's previous marker, which tells
            # write-after-marker from coordinator-finished-without-partition (same verdict as < 2.8)
            ev = replace(ev, describe_producers=DescribeProducersAnswer(**cache["dp"]))
            if txn.prev_marker is not None or ev.last_marker is not None:
                return txn, ev, None
        elif ev.describe_producers is not None or ev.last_marker is not None or ev.snapshot is not None \
                or ev.read_from_zero:
            return txn, ev, None
        if "lookback" not in cache:
            res = self.broker.last_marker_before(txn.topic, txn.partition, txn.producer_id, txn.first_offset)
            cache["lookback"] = {**asdict(res), "marker": asdict(res.marker) if res.marker else None}
        lb = cache["lookback"]
        res = LookbackResult(**{**lb, "marker": Marker(**lb["marker"]) if lb["marker"] else None})
        if res.marker is not None:
            # Nothing of P lies between its last marker and O (pairing): it is also O's previous event.
            return replace(txn, prev_marker=txn.prev_marker or res.marker), replace(ev, last_marker=res.marker), None
        if res.complete and res.read_from_zero:
            return txn, replace(ev, read_from_zero=True), None
        return txn, ev, None if ev.describe_producers is not None else res.reason

    def _publish(self, row: dict[str, Any], now_ms: int, out: list[dict[str, Any]]) -> None:
        """Judge one finding; publish it when its verdict changed, hold it when it may not be."""
        key = row["key"]
        tp = f"{row['topic']}-{int(row['partition'])}"
        judged = self.judge_row(row, now_ms)
        v = judged.verdict
        if v.blocked or v.status not in FINDING_STATUSES or tp in self.held:
            if key in self.active:
                if self.active[key].get("row") is not row:
                    self.active[key]["row"] = row  # keep what was published; newest evidence for later
                    self._entries["active"].changed.add(key)
            else:
                self.pending[key] = row
            if v.blocked:
                self.answers.get(key, {}).pop("dp", None)
            return
        self.pending.pop(key, None)
        published = dict(row, status=v.status)
        if judged.span is not None and judged.span.get("last_offset") is not None:
            sp = judged.span
            published.update(last_offset=judged.txn.last_offset, last_ts=judged.txn.last_ts,
                             **{f: max(_int(row.get(f)) or 0, sp[f]) for f in ("records", "bytes", "batches")})
        alert = finalize(published, self.partitions.get(tp), self.cfg, judged=judged,
                         detected_at_ms=now_ms, txn_partitions=self.txn_partition_count or self.cfg.txn_state_partitions)
        prev = self.active.get(key)
        new = prev is None or _sig(prev["alert"]) != _sig(alert)
        kept = alert if new else prev["alert"]
        if new or prev != {"status": v.status, "alert": kept, "row": row} or prev["row"] is not row:
            self.active[key] = {"status": v.status, "alert": kept, "row": row}
            self._entries["active"].changed.add(key)  # else the same entry: its saved text stays
        if new:
            out.append(alert)

    def process(self, raw_alerts: list[dict[str, Any]], progress: list[dict[str, Any]],
                now_ms: int | None = None, gaps: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """One micro-batch: gaps and progress first (same-batch enrichment), then the state's alert
        rows, then every other open finding re-judged with the newest global facts, then
        resolutions by LSO movement. Returns the alert objects to publish, in order."""
        self.observe_gaps(gaps or [])
        for p in progress:
            self.observe_progress(p)
        self._facts_cache = {}  # nothing observed from here on: the view facts hold per clock
        try:
            return self._judge_all(raw_alerts, progress, now_ms)
        finally:
            self._facts_cache = None

    def _judge_all(self, raw_alerts: list[dict[str, Any]], progress: list[dict[str, Any]],
                   now_ms: int | None) -> list[dict[str, Any]]:
        """:meth:`process` after its observations."""
        for r in list(progress) + list(raw_alerts):
            t = _int(r.get("now_ms"))
            if t is not None and (self.clock is None or t > self.clock):
                self.clock = t
        out: list[dict[str, Any]] = []
        fresh: set[str] = set()
        self._ask_coordinators(raw_alerts)
        for raw in raw_alerts:
            key = raw["key"]
            fresh.add(key)
            if raw["status"] == RESOLVED:
                self.pending.pop(key, None)
                self.answers.pop(key, None)
                entry = self.active.pop(key, None)
                self._entries["active"].changed.add(key)
                if entry is not None:  # else already resolved (e.g. by LSO movement), or never published
                    out.append(finalize(raw, self.partitions.get(f"{raw['topic']}-{int(raw['partition'])}"),
                                        self.cfg))
                continue
            self._publish(raw, _int(raw.get("now_ms")) or self.clock or 0, out)
        # Global facts may have changed (a coordinator partition read, the view now complete):
        # every other open finding is judged again at the current clock.
        if self.clock is not None:
            for key, row in [(k, e["row"]) for k, e in self.active.items() if e.get("row")] + list(
                    self.pending.items()):
                if key not in fresh:
                    self._publish(row, self.clock, out)
        # The broker's LSO moved past a finding's first offset without a marker we saw (snapshot
        # purge + restart, topic recreated): the partition is no longer pinned by it.
        for key, entry in list(self.active.items()):
            a = entry["alert"]
            part = self.partitions.get(f"{a['topic']}-{a['partition']}") or {}
            lso = part.get("lso")
            if lso is not None and lso > _pinned_at(a["first_offset"], part.get("log_start_offset")) \
                    and a["topic"] != TXN_TOPIC:
                if any(p["topic"] == a["topic"] and int(p["partition"]) == a["partition"] for p in progress):
                    resolved = dict(a, status=RESOLVED, resolution="lso-advanced", cause=None,
                                    abort_command_new=None, abort_command_legacy=None, required_permission=None,
                                    detected_at=now_ms if now_ms is not None else int(time.time() * 1000),
                                    lso=lso, pins_lso=False, verify_hint=None, epoch_hint=None,
                                    missing_txn_partitions=None, verified=True, unverified_reasons=[])
                    self.active.pop(key)
                    self._entries["active"].changed.add(key)
                    self.answers.pop(key, None)
                    out.append(resolved)
        for key in [k for k in self._parsed if k not in self.active and k not in self.pending]:
            del self._parsed[key]  # parsed evidence of findings no longer open
        return out
