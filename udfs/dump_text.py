"""Parser for ``kafka-dump-log.sh`` (``DumpLogSegments``) text output, Kafka 0.11 → 4.4.

The log-dump fallback: when nobody can read segments or talk to the cluster, people still post
dump text. This module turns that text into exactly what the binary decoders produce (a batch
table with :data:`udfs.model.BATCH_COLUMNS`, ``__transaction_state`` records with
:data:`udfs.model.TXN_RECORD_KEYS`, producer-snapshot entries with
:data:`udfs.model.SNAPSHOT_ENTRY_KEYS`) plus :class:`~udfs.model.DecodeError` entries (``unit="line"``,
``position`` = 1-based line number in the whole text). Format reference:
``spec/kafka-dump-log.md`` (normative); field meanings: ``spec/kafka-formats.md``.

What each Kafka version prints (and so what can be read back):

* 0.11 – 2.1: *either* one batch line per batch (default, "shallow") *or*, with
  ``--deep-iteration``, one line per record and no batch line at all. Shallow lines lack
  ``count`` (< 2.0) and ``isControl`` (< 2.1). Deep lines start with ``offset:``, carry the batch
  position, ``producerId``/``producerEpoch`` (epoch from 1.0; 0.11.0.0 per spec omits it) and
  ``isTransactional`` but no partition leader epoch, batch size or CRC.
* 2.2 – 2.8: batch line always, records prefixed ``| `` with ``--deep-iteration``; codec printed
  as enum name (``NONE``, ``GZIP`` …); ``keysize``/``valuesize`` up to 2.7, ``keySize``/
  ``valueSize`` from 2.8. 2.8.x prints batch fields inside every record line (the "broken"
  layout) — harmless here because everything is parsed as ``name: value`` pairs.
* 3.0 – 3.1: codec lower-case. 3.2+: ``deleteHorizonMs: OptionalLong…`` after ``isControl``.
  3.3+: header ``Log starting offset:`` instead of ``Starting offset:``. 4.3 (Java rewrite):
  same strings.
* ``--transaction-log-decoder``: 0.11–2.4 ``key: transactionalId=ID payload: producerId:P,…,
  partitions=Set(…)``; 2.5–4.0 ``key: transaction_metadata::transactionalId=ID payload: …,
  partitions=[…]`` and ``payload: <DELETE>`` for tombstones; 4.1+ JSON key/value with
  ``"transactionStatus"`` as a number (4.1–4.3) or a state name (4.4+).
* Producer snapshots (``*.snapshot``): 0.11 ``… lastTimestamp: T coordinatorEpoch: C
  currentTxnFirstOffset: None``; 1.1–3.0 no ``lastTimestamp``; 3.1–3.4 ``Some(n)``/``None``;
  3.5+ ``OptionalLong[n]``/``OptionalLong.empty``.

Conventions for fields a dump does not print (each documented where it is filled in):

* ``crc`` 0 and ``crc_valid`` -1 when no CRC is printed (≤2.1 deep lines); ``batch_size`` 0
  when not printed (≤2.1 deep; sizes are only ever summed, so unknown adds nothing);
  ``record_count`` -1 when not printed (0.11–1.1 shallow; 0 would claim an empty batch);
  ``partition_leader_epoch`` and ``producer_epoch`` -1 (Kafka's own "none" value) when not
  printed.
* ``attributes`` are rebuilt from the printed codec, timestamp type, ``isTransactional``,
  ``isControl`` and ``deleteHorizonMs`` — exact, because those are the only attribute bits Kafka
  sets. Before 3.2 the delete-horizon bit is not printed and reads as 0.
* ``base_timestamp``: ``deleteHorizonMs`` when printed; else the first printed record's
  timestamp (CreateTime batches: the builder sets baseTimestamp to the first record's time);
  else (no records printed, LogAppendTime, empty batch) ``max_timestamp``. ``first_timestamp``
  follows the binary scanner's rule (max timestamp for LogAppendTime or delete-horizon batches,
  else ``base_timestamp``), so a shallow dump errs towards a *younger* transaction, never an older
  one (no false "hanging" from a guessed timestamp).
* ``control_type``: ``endTxnMarker: COMMIT|ABORT`` (or ``controlType: NAME(id)``, KRaft JSON
  forms) when the record line was printed; :data:`CONTROL_EMPTY` for a control batch with
  ``count: 0``; otherwise :data:`CONTROL_NOT_PRINTED` (-4): the batch is a control batch but the
  dump does not show its type (shallow dump, ``--skip-record-metadata``, elided record line).
  Consumers must treat it like ``CONTROL_EMPTY``: it closes what is open, type unknown.
* 0.11–2.0 shallow lines do not print ``isControl``: a transactional batch with
  ``baseSequence: -1`` is taken as a control batch (transactional data is always idempotent and
  carries a sequence ≥ 0; markers always carry -1, kafka-formats.md §3.1).
* Text ``__transaction_state`` formats (≤4.0) print neither the value version nor
  ``TransactionStartTimestampMs`` nor the v1 tagged fields: ``txn_start_ts`` is None; the value
  version is inferred from ``valueSize`` (a v0 value's size is fully determined by the printed
  fields); for v0 the tagged fields are their defaults (v0 has none), for v1 they are None.
  Text prints ``[]`` for both a null and an empty partition list; the coordinator writes null
  exactly for state Empty, so Empty → None, anything else → list.

A line it cannot read becomes an error entry; nothing raises. Prose around posted dumps (no
dump-field ``name: value`` structure) is ignored; a line that looks like a dump line but does not
parse is reported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from udfs.model import (
    BATCH_COLUMNS,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_EMPTY,
    CONTROL_NONE,
    CONTROL_NOT_PRINTED,
    SNAPSHOT_ENTRY_KEYS,
    TXN_RECORD_KEYS,
    TXN_STATE_CODES,
    TXN_STATES,
    DecodeError,
)
from udfs.offsets_text import OffsetsTextError, is_offsets_key, json_envelope, parse_offsets_record
from udfs.varint import uvarint_len as _uvarint_len

# CONTROL_NOT_PRINTED (udfs.model): a control batch whose record the dump did not print (shallow
# dump, --skip-record-metadata, elided line): a marker of unknown type, closes like an empty one.

KINDS = ("data", "txn_log", "snapshot", "unknown")
#: keys of one :attr:`DumpFile.offset_commits` entry: record offset (None when not printed), text
#: line, the commit's group/topic/partition, committed offset (None = tombstone), the batch's
#: producer id and transactional flag, and the printing generation (udfs.offsets_text).
OFFSET_COMMIT_KEYS = ("offset", "line", "group", "topic", "partition", "committed_offset", "producer_id",
                      "is_transactional", "style")

_I8 = (-(2**7), 2**7 - 1)
_I16 = (-(2**15), 2**15 - 1)
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_U32 = (0, 2**32 - 1)

_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_TS_LABELS = {"CreateTime": 0, "LogAppendTime": 1, "NoTimestampType": -1}
_KRAFT_CONTROL = {"LEADER_CHANGE": 2, "SNAPSHOT_HEADER": 3, "SNAPSHOT_FOOTER": 4, "KRAFT_VERSION": 5,
                  "KRAFT_VOTERS": 6, "LeaderChange": 2, "SnapshotHeader": 3, "SnapshotFooter": 4,
                  "KRaftVersion": 5, "KRaftVoters": 6}

# `name:` followed by a space or the end of the line, at the start or after whitespace. Values
# never contain spaces except key/payload (handled as an opaque tail) — spec §3, §8.
_TOKEN = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9]*):(?= |$)")
# The same tokens as separators for re.split (see _pairs).
_SPLIT = re.compile(r" ([A-Za-z][A-Za-z0-9]*):(?= )")
# Start of the opaque tail of a record line: key/payload text, or KRaft control JSON (3.3+).
_TAIL = re.compile(r"(?<!\S)(?:key|payload):(?: |$)|(?<!\S)(?:LeaderChange:?|SnapshotHeader|SnapshotFooter"
                   r"|KRaftVersion|KRaftVoters) (?=\{)")
# Field names that only dump lines use; three of them on one line make it "dump-like".
_DUMP_FIELDS = frozenset((
    "baseOffset lastOffset count baseSequence lastSequence producerId producerEpoch partitionLeaderEpoch "
    "isTransactional isControl deleteHorizonMs position CreateTime LogAppendTime size magic compresscodec crc "
    "isvalid isValid offset keysize keySize valuesize valueSize sequence headerKeys endTxnMarker "
    "coordinatorEpoch currentTxnFirstOffset lastTimestamp firstSequence offsetDelta timestamp batchSize "
    "compressType controlType").split())
# Where a dump line may start inside a prefixed line (`$ `, `kafka_1 | `, `> `, indentation).
_START = re.compile(r"(?<![\w])(?:Dumping \S.*\.\w+$|(?:Log s|S)tarting offset: |baseOffset: -?\d|\| (?:offset|key|payload): "
                    r"|producerId: -?\d+ producerEpoch: |offset: -?\d+ (?:position|CreateTime|LogAppendTime"
                    r"|NoTimestampType): |Found \d+ invalid bytes)")
_CONTENT_STARTS = ("Dumping ", "baseOffset:", "|", "offset:", "producerId:", "Starting offset:",
                   "Log starting offset:")
# "Dumping <path>": the rest of the line ends in a file extension (prose mentioning "Dumping …"
# does not).
_DUMPING = re.compile(r"^Dumping \S.*\.\w+$")
_COMMAND = re.compile(r"kafka-dump-log|DumpLogSegments")
# A shell command line (optional prompt, then a command word): prose that merely mentions the tool
# ("use `kafka-dump-log.sh --deep-iteration`") is not one.
_COMMAND_LINE = re.compile(r"^(?:\[[^\]]{0,80}\][$#] |\S{0,80}[$#%>] )?(?:sudo |docker|kubectl |oc |podman "
                           r"|\S*kafka-dump-log|\S*kafka-run-class|\S*DumpLogSegments|bin/|\./|/|java )")
_FILES_ARG = re.compile(r"--files[ =](\S+)")
_PATH = re.compile(r"(?:^|[/\\])([^/\\\s]+)-(\d+)(?:\.[0-9a-f]{32}-(?:delete|future|stray))?[/\\](\d{20})\.(\w+)$")
_FILE_NUMBER = re.compile(r"(?:^|[/\\])(\d{20})\.(\w+)$")
_HEADER = re.compile(r"^(Log starting|Starting) offset: (-?\d+)$")
_KRAFT_HEADER = re.compile(r"^(?:Snapshot end offset: (-?\d+), epoch: (-?\d+)|KRaft bootstrap snapshot)$")
_INVALID_BYTES = re.compile(r"^Found (\d+) invalid bytes at the end of (.*)$")
_ELISION = re.compile(r"^[\[(]?\s*(?:\.{3}|…)")
_INDEX_LINE = re.compile(r"^(?:offset: -?\d+ position: -?\d+|timestamp: -?\d+ offset: -?\d+)$")
_TXNINDEX_LINE = re.compile(r"^version: -?\d+ producerId: -?\d+ firstOffset: ")
# The JVM launcher when kafka-run-class.sh names a DumpLogSegments class this Kafka does not have
# (the tool is kafka.tools.DumpLogSegments in Scala up to 4.2, org.apache.kafka.tools.DumpLogSegments
# in Java from 4.3, spec/kafka-dump-log.md): the command printed nothing for its files.
_NO_MAIN_CLASS = re.compile(r"^Error: Could not find or load main class (\S*DumpLogSegments)\b")
_EXCEPTION = re.compile(r"^(?:Exception in thread|Snapshot is corrupt|java\.\w|org\.apache\.kafka\.\S+Exception)")

_OLD_TXN_VALUE = re.compile(
    r"^producerId:(-?\d+),producerEpoch:(-?\d+),state=(\w+),partitions=(.*),"
    r"txnLastUpdateTimestamp=(-?\d+),txnTimeoutMs=(-?\d+)$")
_SCALA_SET = re.compile(r"^(?:Set|HashSet|ListSet)\((.*)\)$")
_TOPIC_PARTITION = re.compile(r"^(.+)-(\d+)$")
_OPTIONAL = re.compile(r"^(?:None|OptionalLong\.empty|Some\((-?\d+)\)|OptionalLong\[(-?\d+)\]|(-?\d+))$")
_BATCH_METADATA = re.compile(r"BatchMetadata\(([^)]*)\)")


class _LineError(Exception):
    """A field of the current line could not be read; ``str()`` is the DecodeError reason."""


# --- public result --------------------------------------------------------------------------------


@dataclass
class DumpFile:
    """One dumped file (one ``Dumping <path>`` block, or an implicit block when that line is missing).

    ``batches``: batch table (every :data:`udfs.model.BATCH_COLUMNS` name → numpy array, file
    order); ``batch_lines``: 1-based text line of each row (its batch line, or its first record
    line for ≤2.1 deep dumps). ``log_start_offset``: value of the ``Starting offset:`` /
    ``Log starting offset:`` header — note the tool prints the *segment's* base offset parsed from
    the file name there, not the partition's log start offset. ``file_offset``: the 20-digit number
    of the file name (segment base offset, or the snapshot offset). ``path_source``: "dumping"
    (from the ``Dumping`` line), "command" (single ``--files`` argument of a preceding
    ``kafka-dump-log.sh`` command line; the ``Dumping`` line was lost) or None.
    ``records_printed``: record lines were present (deep iteration), so control types and first
    timestamps are exact. ``legacy_entries``: magic 0/1 entries seen (never transactional).
    """

    path: str | None
    topic: str | None
    partition: int | None
    kind: str
    log_start_offset: int | None
    batches: dict[str, np.ndarray]
    txn_records: list[dict[str, Any]] = field(default_factory=list)
    snapshot_entries: list[dict[str, Any]] = field(default_factory=list)
    errors: list[DecodeError] = field(default_factory=list)
    batch_lines: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    first_line: int = 0
    last_line: int = 0
    file_offset: int | None = None
    path_source: str | None = None
    records_printed: bool = False
    legacy_entries: int = 0
    segment_paths: list[str | None] = field(default_factory=list)
    source: str | None = None
    #: ``__consumer_offsets`` dumped with ``--offsets-decoder``: one dict per offset-commit record
    #: (:data:`OFFSET_COMMIT_KEYS`), file order; other coordinator records are not kept.
    offset_commits: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.batches["base_offset"])

    def row(self, i: int) -> dict[str, Any]:
        """One batch as a dict of Python scalars (tests and tools)."""
        return {name: col[i].item() for name, col in self.batches.items()}


def empty_batches() -> dict[str, np.ndarray]:
    """A batch table with zero rows."""
    return {name: np.empty(0, dtype=dtype) for name, dtype in BATCH_COLUMNS.items()}


def path_info(path: str | None) -> tuple[str | None, int | None, int | None, str | None]:
    """(topic, partition, file number, extension) from ``…/<topic>-<partition>/<20 digits>.<ext>``."""
    if not path:
        return None, None, None, None
    p = path.strip().rstrip("/\\")
    m = _PATH.search(p)
    if m:
        return m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
    m = _FILE_NUMBER.search(p)
    if m:
        return None, None, int(m.group(1)), m.group(2)
    ext = p.rsplit(".", 1)[1] if "." in p.rsplit("/", 1)[-1] else None
    return None, None, None, ext


def detect_dump(text: str | bytes) -> bool:
    """Cheap check: does this look like ``kafka-dump-log.sh`` output? (first 256 KiB only)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text[: 1 << 18]).decode("utf-8", "replace")
    head = text[: 1 << 18]
    for line in head.split("\n"):
        s = line.strip()
        if not s:
            continue
        m = _START.search(s[:200])
        if m and (m.start() == 0 or not _has_dump_token(s[: m.start()])):
            return True
    return False


# --- helpers --------------------------------------------------------------------------------------


def _has_dump_token(s: str) -> bool:
    return any(m.group(1) in _DUMP_FIELDS for m in _TOKEN.finditer(s))


def _dump_like(s: str) -> bool:
    """Three or more dump-field tokens: a dump line even if its start is mangled."""
    names = {m.group(1) for m in _TOKEN.finditer(s) if m.group(1) in _DUMP_FIELDS}
    return len(names) >= 3


def _pairs(s: str, what: str) -> dict[str, str]:
    """``name: value`` pairs of ``s``. Raises _LineError on junk, duplicates or irregular spacing.

    Kafka prints ``name: value`` separated by single spaces; splitting on `` name:`` (in C, via
    ``re.split``) leaves each value with exactly its leading separator space.
    """
    parts = _SPLIT.split(" " + s + " ")
    if len(parts) == 1:
        raise _LineError(f"{what}: no 'name: value' fields")
    if parts[0].strip():
        raise _LineError(f"{what}: unexpected text {parts[0].strip()[:40]!r} before {parts[1]}")
    out: dict[str, str] = {}
    last = len(parts) - 2
    for i in range(1, len(parts), 2):
        name = parts[i]
        value = parts[i + 1][1:-1] if i == last else parts[i + 1][1:]
        if name in out:
            raise _LineError(f"{what}: field {name} printed twice")
        # Kafka prints exactly one space around values: extra blanks mean a character was lost.
        if value != value.strip():
            raise _LineError(f"{what}: irregular spacing in the value of {name}: {value[:40]!r}")
        out[name] = value
    return out


def _int(f: dict[str, str], name: str, rng: tuple[int, int], what: str) -> int:
    if name not in f:
        raise _LineError(f"{what}: missing {name}")
    return _intval(f[name], name, rng, what)


def _intval(v: str, name: str, rng: tuple[int, int], what: str) -> int:
    # Java prints integers in canonical form (no "+", leading zeros, "_" or non-ASCII digits, all of
    # which int() would accept): anything else is a mangled value.
    try:
        n = int(v) if len(v) <= 21 else None
    except ValueError:
        n = None
    if n is None or str(n) != v:
        raise _LineError(f"{what}: {name}: {v[:40]!r} is not an integer")
    if not rng[0] <= n <= rng[1]:
        raise _LineError(f"{what}: {name}: {n} is out of range")
    return n


def _bool(f: dict[str, str], name: str, what: str) -> bool:
    if name not in f:
        raise _LineError(f"{what}: missing {name}")
    v = f[name]
    if v not in ("true", "false"):
        raise _LineError(f"{what}: {name}: {v[:40]!r} is not true/false")
    return v == "true"


def _timestamp(f: dict[str, str], what: str) -> tuple[int, int]:
    """(timestamp type, value) from the ``CreateTime:``/``LogAppendTime:`` field."""
    labels = [k for k in _TS_LABELS if k in f]
    if len(labels) != 1:
        raise _LineError(f"{what}: missing CreateTime/LogAppendTime timestamp" if not labels
                         else f"{what}: several timestamp fields {labels}")
    label = labels[0]
    return _TS_LABELS[label], _intval(f[label], label, _I64, what)


def _codec(f: dict[str, str], name: str, what: str) -> int:
    if name not in f:
        raise _LineError(f"{what}: missing {name}")
    # ≤2.8 prints the enum name (NONE, GZIP …), 3.0+ the lower-case name: any case is accepted.
    c = _CODECS.get(f[name].lower())
    if c is None:
        raise _LineError(f"{what}: {name}: unknown codec {f[name][:40]!r}")
    return c


def _optional_long(v: str, name: str, what: str) -> int | None:
    """``None``/``Some(n)`` (Scala, ≤3.4), ``OptionalLong.empty``/``OptionalLong[n]`` (3.5+ Java)."""
    m = _OPTIONAL.match(v)
    if not m:
        raise _LineError(f"{what}: {name}: {v[:40]!r} is not an optional long")
    s = m.group(1) or m.group(2) or m.group(3)
    return None if s is None else _intval(s, name, _I64, what)


def _strip_prefix(line: str) -> str:
    """The dump line inside a posted line: drops indentation, ``$ ``/``# `` prompts, ``> `` quoting,
    ``kafka_1 | `` log prefixes — but only when the prefix itself holds no dump field."""
    s = line.strip()
    if not s or _START.match(s):
        return s
    m = _START.search(s[:160])
    if m and not _has_dump_token(s[: m.start()]):
        return s[m.start():]
    return s


# --- per-file builder -----------------------------------------------------------------------------


class _Batch:
    """A batch being assembled from its batch line and following record lines."""

    __slots__ = ("line", "f", "failed", "legacy", "old_deep", "records_seen", "first_ts", "ctype", "cepoch",
                 "recs", "skip_meta")

    def __init__(self, line: int) -> None:
        self.line = line
        self.f: dict[str, Any] = {}
        self.failed = False
        self.legacy = False
        self.old_deep = False
        self.records_seen = 0
        self.first_ts: int | None = None
        self.ctype: int | None = None
        self.cepoch = -1
        self.recs: list[dict[str, Any]] = []  # ≤2.1 deep record fields
        self.skip_meta = False


class _File:
    def __init__(self, parser: _Parser, line: int, path: str | None, path_source: str | None) -> None:
        self.p = parser
        self.first_line = line
        self.last_line = line
        self.path = path
        self.path_source = path_source
        self.topic, self.partition, self.file_offset, self.ext = path_info(path)
        if parser.topic is not None:
            self.topic = parser.topic
        if parser.partition is not None:
            self.partition = parser.partition
        self.log_start: int | None = None
        self.rows: list[tuple] = []
        self.batch_lines: list[int] = []
        self.txn: list[dict[str, Any]] = []
        self.snap: list[dict[str, Any]] = []
        self.offsets: list[dict[str, Any]] = []
        self.errors: list[DecodeError] = []
        self.cur: _Batch | None = None
        self.legacy_positions: set[int] = set()
        self.legacy_count = 0
        self.records_printed = False
        self.skip_meta_seen = False
        self.deferred: list[tuple[int, str]] = []  # errors that count only if this is a txn log
        self.count_checks: list[tuple[int, int, int, int]] = []  # (line, base offset, count, lines seen)
        self.content = False

    # kind from the path, when it says
    def path_kind(self) -> str | None:
        if self.topic == "__transaction_state":
            return "txn_log"
        if self.ext == "snapshot":
            return "snapshot"
        if self.ext in ("index", "timeindex", "txnindex"):
            return "unknown"
        if self.ext in ("log", "checkpoint", "deleted", "cleaned", "swap"):
            return "data"
        if self.topic is not None and not (self.snap and not self.rows and not self.txn):
            # a --topic/--partition override names the partition, not what was dumped: snapshot
            # entries alone are a snapshot dump
            return "data"
        return None

    def may_be_txn(self) -> bool:
        k = self.path_kind()
        return k is None or k == "txn_log"

    def error(self, line: int, reason: str, base_offset: int | None = None, crc: bool = False) -> None:
        self.errors.append(DecodeError(line, reason, self.p.source, unit="line", base_offset=base_offset, crc=crc))

    # --- batches ---

    def close_batch(self) -> None:
        b = self.cur
        self.cur = None
        if b is None or b.failed or b.legacy:
            return
        try:
            row = self._old_deep_row(b) if b.old_deep else self._batch_row(b)
        except _LineError as exc:  # pragma: no cover - fields were validated when read
            self.error(b.line, str(exc))
            return
        self.rows.append(row)
        self.batch_lines.append(b.line)

    def _batch_row(self, b: _Batch) -> tuple:
        f = b.f
        count = f["count"]
        if count >= 0 and not f["is_control_inferred"]:
            self.count_checks.append((b.line, f["base_offset"], count, b.records_seen))
        is_control = f["is_control"]
        ts_type, max_ts, dh = f["ts_type"], f["max_ts"], f["delete_horizon"]
        has_dh = dh is not None
        if has_dh:
            base_ts = dh
        elif b.first_ts is not None and ts_type == 0:
            base_ts = b.first_ts
        else:
            base_ts = max_ts  # not printed: see module docstring
        first_ts = max_ts if ts_type == 1 or has_dh else base_ts
        if not is_control:
            ctype = CONTROL_NONE
        elif count == 0:
            ctype = CONTROL_EMPTY
        elif b.ctype is not None:
            ctype = b.ctype
        else:
            ctype = CONTROL_NOT_PRINTED
        attrs = f["codec"] | (ts_type << 3) | (int(f["is_txn"]) << 4) | (int(is_control) << 5) | (int(has_dh) << 6)
        return (f["position"], f["base_offset"], f["last_offset"], f["size"], f["ple"], 2, f["crc"], f["crc_valid"],
                attrs, f["codec"], ts_type, f["is_txn"], is_control, has_dh, base_ts, first_ts, max_ts,
                f["producer_id"], f["producer_epoch"], f["base_sequence"], count, ctype,
                b.cepoch if ctype in (CONTROL_ABORT, CONTROL_COMMIT) else -1)

    def _old_deep_row(self, b: _Batch) -> tuple:
        # ≤2.1 --deep-iteration: no batch line; the records of one batch share its position.
        recs = b.recs
        r0 = recs[0]
        ts_type = r0["ts_type"]
        max_ts = max(r["ts"] for r in recs)
        base_ts = r0["ts"] if ts_type == 0 else max_ts
        first_ts = base_ts if ts_type == 0 else max_ts
        is_control = b.ctype is not None
        is_txn = r0["is_txn"]
        attrs = r0["codec"] | (ts_type << 3) | (int(is_txn) << 4) | (int(is_control) << 5)
        ctype = b.ctype if is_control else CONTROL_NONE
        # batch_size 0 / crc 0 / crc_valid -1 / partition_leader_epoch -1: not printed by ≤2.1 deep
        # iteration (record-level isvalid of a v2 record is always true, it does not check the CRC).
        return (r0["position"], r0["offset"], recs[-1]["offset"], 0, -1, 2, 0, -1, attrs, r0["codec"], ts_type,
                is_txn, is_control, False, base_ts, first_ts, max_ts, r0["producer_id"], r0["producer_epoch"],
                r0["sequence"], len(recs), ctype, b.cepoch if ctype in (CONTROL_ABORT, CONTROL_COMMIT) else -1)

    def batch_line(self, n: int, body: str) -> None:
        self.close_batch()
        self.content = True
        b = _Batch(n)
        self.cur = b
        what = "batch line"
        try:
            f = _pairs(body, what)
            magic = _int(f, "magic", _I8, what)
            if magic != 2:
                raise _LineError(f"{what}: magic {magic} on a baseOffset line (only v2 batches print baseOffset)")
            base = _int(f, "baseOffset", _I64, what)
            what = f"batch line (offset {base})"
            d: dict[str, Any] = {
                "base_offset": base,
                "last_offset": _int(f, "lastOffset", _I64, what),
                "base_sequence": _int(f, "baseSequence", _I32, what),
                "producer_id": _int(f, "producerId", _I64, what),
                "producer_epoch": _int(f, "producerEpoch", _I16, what),
                "ple": _int(f, "partitionLeaderEpoch", _I32, what),
                "is_txn": _bool(f, "isTransactional", what),
                "position": _int(f, "position", _I64, what),
                "size": _int(f, "size", _I32, what),
                "codec": _codec(f, "compresscodec", what),
                "crc": _int(f, "crc", _U32, what),
                "crc_valid": int(_bool(f, "isvalid", what)),
            }
            d["ts_type"], d["max_ts"] = _timestamp(f, what)
            if d["ts_type"] < 0:
                raise _LineError(f"{what}: NoTimestampType on a v2 batch")
            if "lastSequence" in f:
                _int(f, "lastSequence", _I32, what)  # derived value; validated, not stored
            # count: 2.0+ (`null` only for legacy entries); -1 = not printed (see module docstring).
            d["count"] = -1 if f.get("count", "null") == "null" else _int(f, "count", _I32, what)
            if "isControl" in f:
                d["is_control"] = _bool(f, "isControl", what)
                d["is_control_inferred"] = False
            else:
                # 0.11–2.0 shallow: isControl not printed; markers are the transactional batches
                # without a sequence (module docstring).
                d["is_control"] = d["is_txn"] and d["base_sequence"] == -1
                d["is_control_inferred"] = True
            d["delete_horizon"] = None
            if "deleteHorizonMs" in f:  # 3.2+
                d["delete_horizon"] = _optional_long(f["deleteHorizonMs"], "deleteHorizonMs", what)
        except _LineError as exc:
            b.failed = True
            self.error(n, str(exc))
            return
        b.f = d
        if not d["crc_valid"]:
            self.error(n, f"batch at offset {d['base_offset']}: isvalid: false (the tool found a CRC mismatch)",
                       d["base_offset"], crc=True)

    def offset_line(self, n: int, body: str) -> None:
        """``offset: …`` without ``| ``: a legacy (magic 0/1) batch line, or a ≤2.1 deep record line."""
        self.content = True
        what = "record line"
        try:
            f = _pairs(self._split_tail(body)[0], "offset line")
            magic = _int(f, "magic", _I8, "offset line")
            offset = _int(f, "offset", _I64, "offset line")
            position = _int(f, "position", _I64, "offset line")
        except _LineError as exc:
            self.close_batch()
            self.error(n, str(exc))
            return
        if magic < 2:
            # Legacy message (or one of its inner messages): never transactional; only counted.
            # It stays the current batch so that its 2.2+ `| ` record lines are recognised.
            self.close_batch()
            self.cur = _Batch(n)
            self.cur.legacy = True
            if position not in self.legacy_positions:
                self.legacy_positions.add(position)
                self.legacy_count += 1
            return
        what = f"record line (offset {offset})"
        try:
            if magic != 2:
                raise _LineError(f"{what}: unknown magic {magic}")
            if "keysize" not in f and "keySize" not in f:
                raise _LineError(f"{what}: offset line with magic 2 but no keysize (not a ≤2.1 record line)")
            ts_type, ts = _timestamp(f, what)
            if ts_type < 0:
                raise _LineError(f"{what}: NoTimestampType on a v2 record")
            r = {
                "offset": offset, "position": position, "ts_type": ts_type, "ts": ts,
                "codec": _codec(f, "compresscodec", what),
                "producer_id": _int(f, "producerId", _I64, what),
                # 0.11.0.x may not print producerEpoch (spec §3): -1 = not printed.
                "producer_epoch": _int(f, "producerEpoch", _I16, what) if "producerEpoch" in f else -1,
                "sequence": _int(f, "sequence", _I32, what),
                "is_txn": _bool(f, "isTransactional", what),
            }
            ksize = _int(f, "keysize" if "keysize" in f else "keySize", _I32, what)
            vsize = _int(f, "valuesize" if "valuesize" in f else "valueSize", _I32, what)
            ctl = self._control_fields(f, what)
        except _LineError as exc:
            self.close_batch()
            self.error(n, str(exc))
            return
        self.records_printed = True
        b = self.cur
        if b is not None and b.old_deep and b.recs[0]["position"] == position:
            r0 = b.recs[0]
            for k in ("producer_id", "producer_epoch", "is_txn", "codec", "ts_type"):
                if r[k] != r0[k]:
                    self.error(n, f"{what}: {k} differs from the other records at position {position}", offset)
                    return
        else:
            self.close_batch()
            b = _Batch(n)
            b.old_deep = True
            self.cur = b
        b.recs.append(r)
        b.records_seen += 1
        if ctl is not None:
            b.ctype, b.cepoch = ctl
        self._record_payload(n, body, offset, ts, ksize, vsize, ple=None)

    # --- records (2.2+) ---

    @staticmethod
    def _split_tail(body: str) -> tuple[str, str]:
        m = _TAIL.search(body)
        if not m:
            return body, ""
        # the metadata part loses the single space that separates it from the tail
        return body[: max(m.start() - 1, 0)], body[m.start():]

    @staticmethod
    def _control_fields(f: dict[str, str], what: str) -> tuple[int, int] | None:
        if "endTxnMarker" in f:
            t = f["endTxnMarker"]
            if t not in ("COMMIT", "ABORT"):
                raise _LineError(f"{what}: endTxnMarker: {t[:40]!r} is not COMMIT/ABORT")
            ce = _int(f, "coordinatorEpoch", _I32, what)
            return (CONTROL_COMMIT if t == "COMMIT" else CONTROL_ABORT), ce
        if "controlType" in f:
            m = re.fullmatch(r"(\w+)\((-?\d+)\)", f["controlType"])
            if not m:
                raise _LineError(f"{what}: controlType: {f['controlType'][:40]!r} unreadable")
            return _intval(m.group(2), "controlType", _I16, what), -1
        return None

    def record_line(self, n: int, body: str) -> None:
        """A ``| …`` record line (2.2+), or a ``payload: …`` line of --skip-record-metadata (≤4.2)."""
        self.content = True
        b = self.cur
        rest = body[1:].strip() if body.startswith("|") else body
        if b is None:
            self.error(n, "record line without its batch line (lines elided or out of order?)")
            return
        if b.failed:
            self.error(n, f"record line of an unreadable batch line (line {b.line})")
            return
        if b.legacy:
            return
        if b.old_deep:
            self.error(n, "'| ' record line after ≤2.1 deep-iteration lines (mixed dump formats)")
            return
        b.records_seen += 1
        self.records_printed = True
        if b.f["crc_valid"] == 0 and not b.f["is_control"]:
            # isvalid: false: the batch was reported as a CRC gap; its records (__transaction_state
            # values included) are never believed, as the broker never applies such a batch.
            return
        meta, tail = self._split_tail(rest)
        base = b.f["base_offset"]
        if not meta.strip():
            # --skip-record-metadata (2.8+): `| key: K payload: V`; offsets/timestamps not printed.
            b.skip_meta = self.skip_meta_seen = True
            if not tail:
                return
            count = b.f["count"]
            offset = ts = None
            if count == 1 or (count > 0 and count == b.f["last_offset"] - base + 1):
                offset = base + b.records_seen - 1
            if count == 1:
                ts = b.f["max_ts"]
            self._record_payload(n, rest, offset, ts, None, None, ple=b.f["ple"])
            return
        what = "record line"
        try:
            f = _pairs(meta, what)
            offset = _int(f, "offset", _I64, what)
            what = f"record line (offset {offset})"
            ts_type, ts = _timestamp(f, what)
            if "keySize" in f or "keysize" in f:
                ksize = _int(f, "keySize" if "keySize" in f else "keysize", _I32, what)
            else:
                raise _LineError(f"{what}: missing keySize")
            vsize = _int(f, "valueSize" if "valueSize" in f else "valuesize", _I32, what)
            _int(f, "sequence", _I32, what)
            if "headerKeys" not in f:
                raise _LineError(f"{what}: missing headerKeys")
            if "baseOffset" in f and _int(f, "baseOffset", _I64, what) != base:
                # 2.8.x repeats the batch fields on every record line: they must agree.
                raise _LineError(f"{what}: baseOffset {f['baseOffset']} differs from its batch line ({base})")
            ctl = self._control_fields(f, what)
            if ctl is None and tail and not tail.startswith(("key:", "payload:")):
                name = tail.split(None, 1)[0].rstrip(":")
                ctl = (_KRAFT_CONTROL[name], -1)
        except _LineError as exc:
            self.error(n, str(exc), base)
            return
        if b.records_seen == 1:
            b.first_ts = ts
        if ctl is not None:
            if not b.f["is_control"]:
                self.error(n, f"{what}: control record in a batch printed with isControl: false", base)
                return
            if b.records_seen == 1:
                b.ctype, b.cepoch = ctl
        elif b.f["is_control"]:
            self.error(n, f"{what}: control batch record without endTxnMarker/controlType (line cut?)", base)
            return
        if ctl is None:
            self._record_payload(n, rest, offset, ts, ksize, vsize, ple=b.f["ple"])

    # --- __transaction_state records ---

    def _record_payload(self, n: int, body: str, offset: int | None, ts: int | None, ksize: int | None,
                        vsize: int | None, ple: int | None) -> None:
        if self.topic == "__consumer_offsets":
            self._offsets_payload(n, body, offset)
            return
        if not self.may_be_txn():
            return
        tail = self._split_tail(body)[1]
        if not tail:
            return
        if tail.startswith("key:"):
            key, payload = _split_key_payload(tail[4:].lstrip(" "), ksize)
        elif tail.startswith("payload:"):
            key, payload = None, tail[8:].lstrip(" ")
        else:
            return
        if key is None:
            if self.path_kind() == "txn_log":
                self.error(n, "__transaction_state record line without a key")
            return
        txn_id, key_version, style = self._txn_key(n, key)
        if txn_id is None:
            return
        what = f"__transaction_state record (offset {offset})"
        try:
            if offset is None:
                raise _LineError(f"{what}: record offset not printed and not derivable (--skip-record-metadata)")
            rec: dict[str, Any] = dict.fromkeys(TXN_RECORD_KEYS)
            rec.update(offset=offset, position=n, timestamp=ts, coordinator_epoch=ple, transactional_id=txn_id,
                       key_version=key_version)
            if payload is None and vsize is not None and vsize >= 0:
                raise _LineError(f"{what}: valueSize {vsize} but no payload printed")
            if payload is None or payload == "<DELETE>":
                if vsize is not None and vsize >= 0:
                    raise _LineError(f"{what}: tombstone payload but valueSize {vsize}")
                rec["tombstone"] = True
            else:
                rec["tombstone"] = False
                if style == "json":
                    rec.update(self._json_value(payload, what))
                else:
                    rec.update(self._text_value(payload, vsize, what))
        except _LineError as exc:
            self.error(n, str(exc), offset)
            return
        self.txn.append(rec)

    def _offsets_payload(self, n: int, body: str, offset: int | None) -> None:
        """An ``--offsets-decoder`` record of ``__consumer_offsets`` (udfs.offsets_text); keys that
        are not offsets-decoder output (a plain --print-data-log dump) are left alone."""
        tail = self._split_tail(body)[1]
        if not tail.startswith("key:"):
            return
        key, payload = _split_key_payload(tail[4:].lstrip(" "), None)
        if not is_offsets_key(key):
            return
        what = f"__consumer_offsets record (offset {offset})"
        try:
            rec = parse_offsets_record(key, payload)
        except OffsetsTextError as exc:
            self.error(n, f"{what}: {exc}", offset)
            return
        if rec is None:
            return
        b = self.cur
        pid, txn = -1, False
        if b is not None and b.f:
            pid, txn = b.f.get("producer_id", -1), bool(b.f.get("is_txn", False))
        elif b is not None and b.recs:
            pid, txn = b.recs[-1]["producer_id"], bool(b.recs[-1]["is_txn"])
        self.offsets.append({"offset": offset, "line": n, "group": rec.group, "topic": rec.topic,
                             "partition": rec.partition, "committed_offset": rec.committed_offset,
                             "producer_id": pid, "is_transactional": txn, "style": rec.style})

    def _txn_key(self, n: int, key: str) -> tuple[str | None, int | None, str | None]:
        if key.startswith("transaction_metadata::transactionalId="):  # 2.5 – 4.0
            return key[len("transaction_metadata::transactionalId="):], 0, "text"
        if key.startswith("transactionalId="):  # 0.11 – 2.4
            return key[len("transactionalId="):], 0, "text"
        if key.startswith("{") and '"transactionalId"' in key:  # 4.1+
            try:
                k = json.loads(key)
                tid = k["data"]["transactionalId"]
                kv = int(k["type"])
                if not isinstance(tid, str):
                    raise ValueError("transactionalId is not a string")
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                self.error(n, f"__transaction_state key: unreadable JSON ({exc})")
                return None, None, None
            if kv != 0:
                self.error(n, f"__transaction_state key: unknown record type {kv}")
                return None, None, None
            return tid, kv, "json"
        if key.startswith(("unknown::version=", "Unknown record type ", "Error at offset ")):
            # What the decoders print for keys they cannot read: an error only in a txn log.
            reason = f"__transaction_state record the tool could not decode: {key[:80]!r}"
            if self.path_kind() == "txn_log":
                self.error(n, reason)
            else:
                self.deferred.append((n, reason))
            return None, None, None
        if self.path_kind() == "txn_log":
            self.error(n, f"__transaction_state key {key[:40]!r} is not --transaction-log-decoder output")
        return None, None, None

    @staticmethod
    def _text_value(payload: str, vsize: int | None, what: str) -> dict[str, Any]:
        m = _OLD_TXN_VALUE.match(payload)
        if not m:
            raise _LineError(f"{what}: payload is not a transaction-log-decoder value: {payload[:60]!r}")
        state = _state_name(m.group(3), what)
        raw = m.group(4)
        sm = _SCALA_SET.match(raw)
        if sm:  # 0.11 – 2.4: Scala Set toString
            items = [x.strip() for x in sm.group(1).split(",")] if sm.group(1).strip() else []
        elif raw.startswith("[") and raw.endswith("]"):
            items = [x.strip() for x in raw[1:-1].split(",")] if raw[1:-1].strip() else []
        else:
            raise _LineError(f"{what}: partitions={raw[:40]!r} unreadable")
        for it in items:
            if not _TOPIC_PARTITION.match(it):
                raise _LineError(f"{what}: partition {it[:40]!r} is not topic-partition")
        out: dict[str, Any] = {
            "producer_id": _intval(m.group(1), "producerId", _I64, what),
            "producer_epoch": _intval(m.group(2), "producerEpoch", _I16, what),
            "txn_state": state,
            # The coordinator writes null partitions exactly for Empty; text prints [] for both.
            "txn_partitions": None if state == "Empty" else items,
            "txn_last_update_ts": _intval(m.group(5), "txnLastUpdateTimestamp", _I64, what),
            "txn_timeout_ms": _intval(m.group(6), "txnTimeoutMs", _I32, what),
            "txn_start_ts": None,  # not printed by text formats
        }
        version = _infer_value_version(items, vsize)
        out["value_version"] = version
        if version == 0:  # v0 has no tagged fields: their defaults are the truth
            out.update(prev_producer_id=-1, next_producer_id=-1, client_txn_version=0, next_producer_epoch=-1)
        return out

    @staticmethod
    def _json_value(payload: str, what: str) -> dict[str, Any]:
        try:
            version, d = json_envelope(payload, "version")
        except ValueError as exc:
            raise _LineError(f"{what}: payload is not transaction-log JSON ({exc})") from None
        if version not in (0, 1):
            raise _LineError(f"{what}: unknown value version {version}")

        def num(name: str, rng: tuple[int, int], default: int | None = None) -> int:
            x = d.get(name, default)
            if x is None or isinstance(x, bool) or not isinstance(x, int) or not rng[0] <= x <= rng[1]:
                raise _LineError(f"{what}: {name}: {x!r} unreadable")
            return x

        status = d.get("transactionStatus")
        if isinstance(status, bool) or status is None:
            raise _LineError(f"{what}: transactionStatus: {status!r} unreadable")
        if isinstance(status, int):  # 4.1 – 4.3 print the code
            if status not in TXN_STATES:
                raise _LineError(f"{what}: transactionStatus: unknown code {status}")
            state = TXN_STATES[status]
        else:  # 4.4+ print the name
            state = _state_name(str(status), what)
        parts = d.get("transactionPartitions")
        partitions: list[str] | None
        if parts is None:
            partitions = None
        else:
            try:
                partitions = [f"{p['topic']}-{int(i)}" for p in parts for i in p["partitionIds"]]
            except (KeyError, TypeError, ValueError) as exc:
                raise _LineError(f"{what}: transactionPartitions unreadable ({exc})") from None
        return {
            "value_version": version,
            "producer_id": num("producerId", _I64),
            "producer_epoch": num("producerEpoch", _I16),
            "txn_timeout_ms": num("transactionTimeoutMs", _I32),
            "txn_state": state,
            "txn_partitions": partitions,
            "txn_last_update_ts": num("transactionLastUpdateTimestampMs", _I64),
            "txn_start_ts": num("transactionStartTimestampMs", _I64),
            # Tagged fields are printed only when non-default (generated JSON converter).
            "prev_producer_id": num("previousProducerId", _I64, -1),
            "next_producer_id": num("nextProducerId", _I64, -1),
            "client_txn_version": num("clientTransactionVersion", _I16, 0),
            "next_producer_epoch": num("nextProducerEpoch", _I16, -1),
        }

    # --- snapshots ---

    def snapshot_line(self, n: int, body: str) -> None:
        self.content = True
        what = "snapshot line"
        try:
            f = _pairs(body, what)
            pid = _int(f, "producerId", _I64, what)
            what = f"snapshot line (producerId {pid})"
            e: dict[str, Any] = dict.fromkeys(SNAPSHOT_ENTRY_KEYS)
            e["producer_id"] = pid
            e["producer_epoch"] = _int(f, "producerEpoch", _I16, what)
            e["coordinator_epoch"] = _int(f, "coordinatorEpoch", _I32, what)
            if "currentTxnFirstOffset" not in f:
                raise _LineError(f"{what}: missing currentTxnFirstOffset")
            first = _optional_long(f["currentTxnFirstOffset"], "currentTxnFirstOffset", what)
            e["current_txn_first_offset"] = -1 if first is None else first
            batch_names = ("lastSequence", "lastOffset", "offsetDelta")
            present = [k for k in batch_names if k in f]
            if "cachedMetadata" in f:  # 1.0.x (rendering UNVERIFIED): Queue(BatchMetadata(...), ...)
                metas = _BATCH_METADATA.findall(f["cachedMetadata"])
                if not metas and not re.fullmatch(r"\w*\(\s*\)", f["cachedMetadata"]):
                    raise _LineError(f"{what}: cachedMetadata unreadable")
                if metas:
                    kv = dict(x.strip().split("=", 1) for x in metas[-1].split(",") if "=" in x)
                    last_off = _intval(kv.get("lastOffset", ""), "lastOffset", _I64, what)
                    e["last_sequence"] = _intval(kv.get("lastSeq", ""), "lastSeq", _I32, what)
                    e["last_offset"] = last_off
                    e["offset_delta"] = last_off - _intval(kv.get("firstOffset", ""), "firstOffset", _I64, what)
                    e["timestamp"] = _intval(kv.get("timestamp", ""), "timestamp", _I64, what)
                else:
                    e.update(last_sequence=-1, last_offset=-1, offset_delta=0, timestamp=-1)
            elif present:
                if len(present) != len(batch_names):
                    missing = [k for k in batch_names if k not in f]
                    raise _LineError(f"{what}: batch metadata incomplete, missing {', '.join(missing)}")
                e["last_sequence"] = _int(f, "lastSequence", _I32, what)
                e["last_offset"] = _int(f, "lastOffset", _I64, what)
                e["offset_delta"] = _int(f, "offsetDelta", _I32, what)
                if "firstSequence" in f:
                    _int(f, "firstSequence", _I32, what)
                if "timestamp" in f:
                    _int(f, "timestamp", _I64, what)
            else:
                # No batch metadata printed (LastOffset -1 entries): the snapshot's values then are
                # -1 / -1 / 0 (ProducerStateManager.writeSnapshot).
                e.update(last_sequence=-1, last_offset=-1, offset_delta=0)
            # Entry timestamp: lastTimestamp (0.11, 3.1+); 1.1–3.0 print only the batch timestamp,
            # which is what those versions stored; nothing printed → -1 (NO_TIMESTAMP).
            if "lastTimestamp" in f:
                e["timestamp"] = _int(f, "lastTimestamp", _I64, what)
            elif e["timestamp"] is None:
                e["timestamp"] = _int(f, "timestamp", _I64, what) if "timestamp" in f else -1
        except _LineError as exc:
            self.error(n, str(exc))
            return
        self.snap.append(e)

    # --- finish ---

    def kind(self) -> str:
        k = self.path_kind()
        if k == "data" and self.txn:
            return "txn_log"
        if k is not None:
            return k
        if self.snap and not self.rows and not self.txn:
            return "snapshot"
        if self.txn:
            return "txn_log"
        if self.rows or self.legacy_count:
            return "data"
        if self.snap:
            return "snapshot"
        return "unknown"

    def finish(self) -> DumpFile:
        self.close_batch()
        kind = self.kind()
        if self.records_printed and not self.skip_meta_seen:
            # Deep iteration prints every record of every batch (--skip-record-metadata prints
            # blank lines for control records, so it is exempt): a shortfall means lost lines.
            for line, base, count, seen in self.count_checks:
                if seen != count:
                    self.error(line, f"batch at offset {base}: count {count} but {seen} record lines "
                               "(lines elided or cut?)", base)
        if kind == "txn_log":
            for n, reason in self.deferred:
                self.error(n, reason)
        if self.log_start is not None and self.file_offset is not None and self.ext == "log" \
                and self.log_start != self.file_offset:
            self.error(self.first_line, f"header offset {self.log_start} differs from the file name "
                       f"({self.file_offset:020d}.log)")
        cols = empty_batches()
        if self.rows:
            for i, (name, dtype) in enumerate(BATCH_COLUMNS.items()):
                cols[name] = np.array([r[i] for r in self.rows], dtype=dtype)
        self.errors.sort(key=lambda e: e.position)
        return DumpFile(
            path=self.path, topic=self.topic, partition=self.partition, kind=kind, log_start_offset=self.log_start,
            batches=cols, txn_records=self.txn, snapshot_entries=self.snap, errors=self.errors,
            batch_lines=np.array(self.batch_lines, dtype=np.int64), first_line=self.first_line,
            last_line=self.last_line, file_offset=self.file_offset, path_source=self.path_source,
            records_printed=self.records_printed, legacy_entries=self.legacy_count, segment_paths=[self.path],
            source=self.p.source, offset_commits=self.offsets,
        )


def _txn_id_of(key: str) -> str | None:
    for prefix in ("transaction_metadata::transactionalId=", "transactionalId="):
        if key.startswith(prefix):
            return key[len(prefix):]
    if key.startswith("{"):
        try:
            tid = json.loads(key)["data"]["transactionalId"]
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        return tid if isinstance(tid, str) else None
    return None


def _split_key_payload(kv: str, ksize: int | None) -> tuple[str, str | None]:
    """Split ``K payload: V``. Both are opaque text, so " payload: " may occur inside the key; for a
    transaction-log key the printed keySize (4 + UTF-8 length of the id) tells which split is real,
    otherwise the first split whose value looks like a decoder value wins, else the first."""
    cands = [m.start() for m in re.finditer(" payload: ", kv)]
    if kv.endswith(" payload:"):
        cands.append(len(kv) - len(" payload:"))
    if not cands:
        return kv, None
    if len(cands) > 1:
        if ksize is not None:
            for i in cands:
                tid = _txn_id_of(kv[:i])
                if tid is not None and 4 + len(tid.encode("utf-8", "surrogatepass")) == ksize:
                    return kv[:i], kv[i + len(" payload: "):]
        for i in cands:
            if kv[i + len(" payload: "):].startswith(("producerId:", '{"version"', "<DELETE>")):
                return kv[:i], kv[i + len(" payload: "):]
    i = cands[0]
    return kv[:i], kv[i + len(" payload: "):]


def _state_name(s: str, what: str) -> str:
    if s in TXN_STATE_CODES:
        return s
    # Tolerate enum-constant spelling (COMPLETE_COMMIT) in case a Java build prints it.
    camel = "".join(w.capitalize() for w in s.lower().split("_"))
    if camel in TXN_STATE_CODES:
        return camel
    raise _LineError(f"{what}: unknown transaction state {s[:40]!r}")


def _infer_value_version(partitions: list[str], vsize: int | None) -> int | None:
    """TransactionLogValue version from the printed ``valueSize`` (text formats omit it).

    A v0 value's size is fixed by the printed fields (37 bytes + per topic 2+len+4+4n, §5.4). A
    v1 value is smaller per topic (compact encodings) plus a tagged-field section of 1 byte + 10
    per int64 tag (0, 1) + 4 per int16 tag (2, 3); the two can only coincide for exotic tag sets.
    Returns None when neither fits (or valueSize was not printed).
    """
    if vsize is None:
        return None
    topics: dict[str, int] = {}
    for p in partitions:
        t = p.rsplit("-", 1)[0]
        topics[t] = topics.get(t, 0) + 1
    v0 = 37 + sum(2 + len(t.encode()) + 4 + 4 * c for t, c in topics.items())
    if vsize == v0:
        return 0
    body = 2 + 8 + 2 + 4 + 1 + _uvarint_len(len(topics) + 1) + 8 + 8 + 1
    body += sum(_uvarint_len(len(t.encode()) + 1) + len(t.encode()) + _uvarint_len(c + 1) + 4 * c + 1
                for t, c in topics.items())
    if vsize - body in {0, 4, 8, 10, 14, 18, 20, 24, 28}:
        return 1
    return None


# --- the parser -----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, source: str | None, topic: str | None, partition: int | None) -> None:
        self.source = source
        self.topic = topic
        self.partition = partition
        self.files: list[_File] = []
        self.cur: _File | None = None
        self.pending_path: str | None = None  # single --files argument of the last dump command
        self.in_command = False

    def new_file(self, n: int, path: str | None = None, source: str | None = None) -> _File:
        if self.cur is not None:
            self.cur.close_batch()
        if path is None and self.pending_path is not None:
            path, source = self.pending_path, "command"
        self.pending_path = None
        f = _File(self, n, path, source if path else None)
        self.files.append(f)
        self.cur = f
        return f

    def _content(self, n: int, kind: str, line: Callable[[_File, int, str], None], body: str) -> None:
        """A content line of a ``kind`` file: parsed by ``line`` into the file it belongs to."""
        f = self.file_for(n, kind)
        line(f, n, body)
        f.last_line = n

    def file_for(self, n: int, kind: str) -> _File:
        """The file a content line belongs to; starts an implicit one when the Dumping line is lost
        or when log lines and snapshot lines meet (two dumps pasted without their headers)."""
        f = self.cur
        if f is None:
            return self.new_file(n)
        if kind == "snapshot" and (f.rows or f.cur is not None or f.txn):
            return self.new_file(n)
        if kind == "log" and f.snap:
            return self.new_file(n)
        return f

    def command(self, body: str) -> None:
        # A new dump command ends the previous output; remember its single --files argument in
        # case the post lost the "Dumping" line.
        if self.cur is not None:
            self.cur.close_batch()
        self.cur = None
        m = _FILES_ARG.search(body)
        if m:
            files = m.group(1).split(",")
            p = files[0]
            self.pending_path = p if len(files) == 1 and "$" not in p and path_info(p)[2] is not None else None
        self.in_command = body.endswith("\\")

    def line(self, n: int, raw: str) -> None:
        body = _strip_prefix(raw)
        if not body:
            return
        if self.in_command and (_START.match(body) or body.startswith(_CONTENT_STARTS) or _dump_like(body)):
            self.in_command = False  # output after a command pasted without its continuation
        if self.in_command:
            # continuation of a multi-line shell command (`\` at the end of the previous line)
            self.in_command = body.endswith("\\")
            m = _FILES_ARG.search(body)
            if m:
                files = m.group(1).split(",")
                p = files[0]
                self.pending_path = p if len(files) == 1 and "$" not in p and path_info(p)[2] is not None else None
            return
        c0 = body[0]
        if c0 == "D" and body.startswith("Dumping ") and _DUMPING.match(body):
            path = body[8:].strip()
            f = self.new_file(n, path, "dumping")
            f.last_line = n
            return
        if c0 in "LS" and (m := _HEADER.match(body)):
            f = self.cur
            if f is None or f.content or f.log_start is not None:
                f = self.new_file(n)
            f.log_start = int(m.group(2))
            f.last_line = n
            return
        if c0 in "SK" and _KRAFT_HEADER.match(body):
            f = self.cur if self.cur is not None and not self.cur.content else self.new_file(n)
            f.last_line = n
            return
        if c0 == "b" and body.startswith("baseOffset:"):
            return self._content(n, "log", _File.batch_line, body)
        if c0 == "|" and (len(body) == 1 or body[1] == " "):
            return self._content(n, "log", _File.record_line, body)
        if c0 == "o" and body.startswith("offset:"):
            if _INDEX_LINE.match(body):
                return  # .index dump line
            return self._content(n, "log", _File.offset_line, body)
        if c0 == "p" and body.startswith("producerId:"):
            return self._content(n, "snapshot", _File.snapshot_line, body)
        if c0 == "p" and raw.startswith(" payload: ") and self.cur is not None and self.cur.cur is not None:
            # --skip-record-metadata with a null key prints " payload: V" (≤4.2 Scala; exactly one
            # leading space, which tells it from an indented prose line)
            self.cur.record_line(n, body)
            self.cur.last_line = n
            return
        if (c0 == "v" and _TXNINDEX_LINE.match(body)) or (c0 == "t" and _INDEX_LINE.match(body)):
            return  # .txnindex / .timeindex dump lines: not used
        if c0 == "F" and (m := _INVALID_BYTES.match(body)):
            f = self.cur if self.cur is not None else self.new_file(n)
            f.error(n, f"truncated tail: {m.group(1)} invalid bytes at the end of {m.group(2)} "
                    "(the tool stopped reading there)")
            f.last_line = n
            return
        if _COMMAND.search(body) and _COMMAND_LINE.match(body) and ("--" in body or body.endswith("\\")):
            self.command(body)
            return
        if c0 == "E" and (m := _NO_MAIN_CLASS.match(body)):
            f = self.cur if self.cur is not None and not self.cur.content else self.new_file(n)
            f.error(n, f"the dump did not run: the JVM has no class {m.group(1)} (the tool is "
                    "kafka.tools.DumpLogSegments up to Kafka 4.2 and org.apache.kafka.tools.DumpLogSegments "
                    "from 4.3; bin/kafka-dump-log.sh runs the right one): nothing was dumped for "
                    f"{f.path or 'its files'}")
            f.last_line = n
            return
        if _EXCEPTION.match(body):
            f = self.cur if self.cur is not None else self.new_file(n)
            f.error(n, f"the tool failed here: {body[:120]!r} (output after this point is missing)")
            f.last_line = n
            return
        if _ELISION.match(body):
            if self.cur is not None and (self.cur.content or self.cur.log_start is not None):
                self.cur.error(n, "elision: lines omitted here by whoever posted the dump")
            return
        if _dump_like(body):
            f = self.cur if self.cur is not None else self.new_file(n)
            f.error(n, f"unrecognised dump line: {body[:60]!r}")
            f.last_line = n
            return
        if body.startswith("$ "):
            # another shell command: whatever follows is not the previous dump's output
            if self.cur is not None:
                self.cur.close_batch()
            self.cur = None
            self.pending_path = None
        # anything else is prose around the dump


def parse_dump(text: str, *, source: str | None = None, topic: str | None = None,
               partition: int | None = None) -> list[DumpFile]:
    """Parse ``kafka-dump-log.sh`` output (any version 0.11 → 4.4; several files may be concatenated).

    ``source`` names the input in error entries. ``topic``/``partition`` override what the
    ``Dumping`` paths say (needed when the path was lost). Never raises for bad text: unreadable
    lines become :class:`~udfs.model.DecodeError` entries (``unit="line"``, 1-based line numbers
    in the whole ``text``) of the file they occur in.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    p = _Parser(source, topic, partition)
    # Split on \n only (str.splitlines also splits on \x0b, \x1c, \u2028 … which a payload may
    # contain, and would shift every line number after it); \r\n and lone \r are handled too.
    sep = "\n" if "\n" in text or "\r" not in text else "\r"
    for n, raw in enumerate(text.split(sep), 1):
        if raw.endswith("\r"):
            raw = raw[:-1]
        try:
            p.line(n, raw)
        except Exception as exc:  # pragma: no cover - defensive: a parser bug must not lose the rest
            f = p.cur if p.cur is not None else p.new_file(n)
            f.error(n, f"internal parser error on this line: {type(exc).__name__}: {exc}")
    return [f.finish() for f in p.files]


# --- merging segments -----------------------------------------------------------------------------


def merge_segments(files: Iterable[DumpFile]) -> list[DumpFile]:
    """Merge dumps of consecutive segments of one partition into one :class:`DumpFile` each.

    Groups data and txn-log dumps by (kind, topic, partition) — files whose partition is unknown,
    snapshot dumps and unknown files pass through unchanged — and orders each group by the
    segments' base offsets (file name number, else first batch offset, else the header offset;
    never by timestamp). Batches (and txn records) at offsets already covered by an earlier
    segment are dropped with an error entry ("segments overlap"): replaying them twice would
    reopen transactions. Gaps between segments are not errors (compaction and retention make
    them normal).
    """
    groups: dict[tuple, list[DumpFile]] = {}
    order: list[tuple] = []
    for f in files:
        if f.kind in ("data", "txn_log") and f.topic is not None and f.partition is not None:
            key: tuple = (f.kind, f.topic, f.partition)
        else:
            key = ("single", id(f))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(f)
    out: list[DumpFile] = []
    for key in order:
        g = groups[key]
        if key[0] == "single":
            out.extend(g)
            continue
        out.append(_merge_group(g))
    return out


def _segment_start(f: DumpFile) -> float:
    if f.file_offset is not None:
        return f.file_offset
    if len(f):
        return int(f.batches["base_offset"][0])
    if f.txn_records:
        return f.txn_records[0]["offset"]
    if f.log_start_offset is not None:
        return f.log_start_offset
    return float("inf")


def _merge_group(g: list[DumpFile]) -> DumpFile:
    g = sorted(g, key=_segment_start)  # stable: equal starts keep text order
    first = g[0]
    cols_parts: list[dict[str, np.ndarray]] = []
    lines_parts: list[np.ndarray] = []
    txn: list[dict[str, Any]] = []
    errors: list[DecodeError] = []
    high = None  # highest offset read so far
    txn_high = None
    for f in g:
        errors.extend(f.errors)
        keep = np.ones(len(f), dtype=bool)
        if high is not None and len(f):
            keep = f.batches["base_offset"] > high
            for i in np.flatnonzero(~keep):
                errors.append(DecodeError(
                    int(f.batch_lines[i]) if len(f.batch_lines) > i else f.first_line,
                    f"segments overlap: batch at offset {int(f.batches['base_offset'][i])} of {f.path} is at or "
                    f"below offset {high} already read from an earlier segment; dropped",
                    f.source, unit="line",
                    base_offset=int(f.batches["base_offset"][i])))
        cols_parts.append({k: v[keep] for k, v in f.batches.items()})
        lines_parts.append(f.batch_lines[keep])
        if len(f) and keep.any():
            high = max(high if high is not None else -1, int(f.batches["last_offset"][keep].max()))
        for r in f.txn_records:
            if txn_high is not None and r["offset"] is not None and r["offset"] <= txn_high:
                errors.append(DecodeError(r["position"], f"segments overlap: __transaction_state record at offset "
                                          f"{r['offset']} of {f.path} already read; dropped", f.source, unit="line",
                                          base_offset=r["offset"]))
                continue
            txn.append(r)
        offs = [r["offset"] for r in txn if r["offset"] is not None]
        if offs:
            txn_high = max(offs)
    cols = {k: np.concatenate([c[k] for c in cols_parts]) for k in BATCH_COLUMNS}
    return DumpFile(
        path=first.path, topic=first.topic, partition=first.partition, kind=first.kind,
        log_start_offset=first.log_start_offset, batches=cols, txn_records=txn,
        snapshot_entries=[e for f in g for e in f.snapshot_entries], errors=errors,
        batch_lines=np.concatenate(lines_parts) if lines_parts else np.empty(0, dtype=np.int64),
        first_line=min(f.first_line for f in g), last_line=max(f.last_line for f in g),
        file_offset=first.file_offset, path_source=first.path_source,
        records_printed=all(f.records_printed for f in g), legacy_entries=sum(f.legacy_entries for f in g),
        segment_paths=[p for f in g for p in f.segment_paths], source=first.source,
        offset_commits=_merged_commits(g),
    )


def _merged_commits(g: list[DumpFile]) -> list[dict[str, Any]]:
    """Offset commits of segments already in offset order; a record offset seen in an earlier
    segment (overlapping dumps of the same data) is kept once."""
    seen: set[int] = set()
    out = []
    for f in g:
        for r in f.offset_commits:
            if r["offset"] is not None:
                if r["offset"] in seen:
                    continue
                seen.add(r["offset"])
            out.append(r)
    return out
