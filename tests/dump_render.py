"""Test helper: render ``kafka-dump-log.sh`` text exactly as each Kafka generation prints it.

Written from ``spec/kafka-dump-log.md`` (format strings per release), independently of
``udfs.dump_text``, so that a generation-matrix test can render the same batches / transaction
records / snapshot entries in every generation and check the parser reads them back.

``generation`` is a Kafka version string ("0.11", "1.0", … "4.4"); every version in between is
accepted and mapped to the format of its family:

* ≤ 2.1: shallow (batch lines only) or ``deep`` (record lines only, no ``| ``, no batch line);
  ``count`` from 2.0, ``isControl`` from 2.1, ``producerEpoch`` on record lines from 1.0.
* 2.2 – 2.7: batch lines always, ``| `` records with ``keysize``/``valuesize``, codec ``NONE``.
* 2.8: the broken record layout (batch fields repeated on every record line).
* 3.0 – 3.1: codec lower case, ``keySize``. 3.2: ``deleteHorizonMs``. 3.3+: ``Log starting offset``.
* ``--transaction-log-decoder``: < 2.5 ``transactionalId=`` + ``Set(…)`` (tombstones crash the
  tool: rendered as the NullPointerException line, output stops), 2.5 – 4.0
  ``transaction_metadata::`` + ``[…]`` + ``<DELETE>``, 4.1 – 4.3 JSON with numeric status, 4.4 JSON
  with state names.
* snapshots: 0.11, 1.0 (``cachedMetadata: Queue(…)``, UNVERIFIED), 1.1 – 3.0, 3.1 – 3.4
  (``Some``/``None``), 3.5 – 4.2 (``OptionalLong``, trailing space without batch part), 4.3+.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from udfs.model import BATCH_COLUMNS, CONTROL_ABORT, CONTROL_COMMIT, CONTROL_NAMES, TXN_STATE_CODES

GENERATIONS = ("0.11", "1.0", "1.1", "2.0", "2.1", "2.2", "2.4", "2.5", "2.7", "2.8", "3.0", "3.1", "3.2", "3.3",
               "3.4", "3.5", "3.9", "4.0", "4.1", "4.2", "4.3", "4.4")
_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


def version(generation: str) -> tuple[int, int]:
    """"3.9" → (3, 9); "0.11.0.3" → (0, 11)."""
    parts = generation.split(".")
    return int(parts[0]), int(parts[1])


def _rows(batches: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(batches, Mapping):
        n = len(batches["base_offset"])
        return [{k: np.asarray(batches[k])[i].item() for k in BATCH_COLUMNS} for i in range(n)]
    return [dict(r) for r in batches]


def _bool(b: Any) -> str:
    return "true" if b else "false"


def _optional(v: int | None, gen: tuple[int, int]) -> str:
    """Scala Option (≤3.4) or Java OptionalLong (3.5+) as printed."""
    if gen >= (3, 5):
        return "OptionalLong.empty" if v is None or v < 0 else f"OptionalLong[{v}]"
    return "None" if v is None or v < 0 else f"Some({v})"


def _last_sequence(base_seq: int, delta: int) -> int:
    if base_seq < 0:
        return -1
    return (base_seq + delta) % (2**31)


class _Record:
    __slots__ = ("offset", "ts", "key", "payload", "key_size", "value_size", "sequence", "control")

    def __init__(self, offset: int, ts: int, sequence: int, key: str | None, payload: str | None,
                 key_size: int, value_size: int, control: str | None = None) -> None:
        self.offset, self.ts, self.sequence = offset, ts, sequence
        self.key, self.payload, self.key_size, self.value_size = key, payload, key_size, value_size
        self.control = control


def _data_records(r: dict[str, Any]) -> list[_Record]:
    """Records consistent with a batch header: first at baseOffset, last at lastOffset."""
    count = r["record_count"]
    if count <= 0:
        return []
    base, last = r["base_offset"], r["last_offset"]
    offsets = [base + i for i in range(count - 1)] + [last] if count > 1 else [base]
    out = []
    for i, o in enumerate(offsets):
        if i == 0 and r["timestamp_type"] == 0 and not r["has_delete_horizon"]:
            ts = r["base_timestamp"]
        else:
            ts = r["max_timestamp"]
        seq = -1 if r["base_sequence"] < 0 else _last_sequence(r["base_sequence"], o - base)
        if r["is_control"]:
            ct = r["control_type"]
            if ct in (CONTROL_ABORT, CONTROL_COMMIT):
                control = (f"endTxnMarker: {'COMMIT' if ct == CONTROL_COMMIT else 'ABORT'} "
                           f"coordinatorEpoch: {r['coordinator_epoch']}")
            elif ct in CONTROL_NAMES and ct >= 2:
                control = f"controlType: {CONTROL_NAMES[ct]}({ct})"
            else:
                raise ValueError(f"cannot render control type {ct} with a record")
            out.append(_Record(o, ts, -1, None, None, 4, 6, control))
            continue
        # Opaque payload text that contains what a naive parser would take for fields.
        key = None if o % 2 == 0 else f"k{o}"
        payload = f"v{o} payload: x key: y offset: 9"
        out.append(_Record(o, ts, seq, key, payload, -1 if key is None else len(key), len(payload)))
    return out


def _batch_line(r: dict[str, Any], gen: tuple[int, int]) -> str:
    codec = _CODEC_NAMES[r["compression"]]
    codec = codec.upper() if gen < (3, 0) else codec
    ts_label = "LogAppendTime" if r["timestamp_type"] == 1 else "CreateTime"
    delta = r["last_offset"] - r["base_offset"]
    s = f"baseOffset: {r['base_offset']} lastOffset: {r['last_offset']}"
    if gen >= (2, 0):
        s += f" count: {r['record_count']}"
    s += (f" baseSequence: {r['base_sequence']} lastSequence: {_last_sequence(r['base_sequence'], delta)}"
          f" producerId: {r['producer_id']} producerEpoch: {r['producer_epoch']}"
          f" partitionLeaderEpoch: {r['partition_leader_epoch']} isTransactional: {_bool(r['is_transactional'])}")
    if gen >= (2, 1):
        s += f" isControl: {_bool(r['is_control'])}"
    if gen >= (3, 2):
        dh = f"OptionalLong[{r['base_timestamp']}]" if r["has_delete_horizon"] else "OptionalLong.empty"
        s += f" deleteHorizonMs: {dh}"
    valid = _bool(r["crc_valid"] != 0)
    if gen >= (2, 2):
        s += (f" position: {r['position']} {ts_label}: {r['max_timestamp']} size: {r['batch_size']} magic: 2"
              f" compresscodec: {codec} crc: {r['crc']} isvalid: {valid}")
    else:
        s += (f" position: {r['position']} {ts_label}: {r['max_timestamp']} isvalid: {valid} size: {r['batch_size']}"
              f" magic: 2 compresscodec: {codec} crc: {r['crc']}")
    return s


def _record_line(rec: _Record, r: dict[str, Any], gen: tuple[int, int], print_data: bool,
                 skip_record_metadata: bool = False) -> str:
    ts_label = "LogAppendTime" if r["timestamp_type"] == 1 else "CreateTime"
    codec = _CODEC_NAMES[r["compression"]]
    if skip_record_metadata:
        # 2.8+: the metadata block (and with it the control-record text) is skipped; "| " is
        # printed in front of the key, a null key leaves " payload: V" (≤4.2 Scala).
        if rec.control is not None or not print_data:
            return ""
        if rec.key is not None:
            return f"| key: {rec.key}" + (f" payload: {rec.payload}" if rec.payload is not None else "")
        return f" payload: {rec.payload}" if rec.payload is not None else ""
    if gen < (2, 2):
        s = (f"offset: {rec.offset} position: {r['position']} {ts_label}: {rec.ts} isvalid: true"
             f" keysize: {rec.key_size} valuesize: {rec.value_size} magic: 2 compresscodec: {codec.upper()}"
             f" producerId: {r['producer_id']}")
        if gen >= (1, 0):
            s += f" producerEpoch: {r['producer_epoch']}"
        s += f" sequence: {rec.sequence} isTransactional: {_bool(r['is_transactional'])} headerKeys: []"
    elif gen < (2, 8):
        s = (f"| offset: {rec.offset} {ts_label}: {rec.ts} keysize: {rec.key_size} valuesize: {rec.value_size}"
             f" sequence: {rec.sequence} headerKeys: []")
    elif gen < (3, 0):
        delta = r["last_offset"] - r["base_offset"]
        s = (f"| offset: {rec.offset} isValid: true crc: null keySize: {rec.key_size} valueSize: {rec.value_size}"
             f" {ts_label}: {rec.ts} baseOffset: {r['base_offset']} lastOffset: {r['last_offset']}"
             f" baseSequence: {r['base_sequence']} lastSequence: {_last_sequence(r['base_sequence'], delta)}"
             f" producerEpoch: {r['producer_epoch']} partitionLeaderEpoch: {r['partition_leader_epoch']}"
             f" batchSize: {r['batch_size']} magic: 2 compressType: {codec.upper()} position: {r['position']}"
             f" sequence: {rec.sequence} headerKeys: []")
    else:
        s = (f"| offset: {rec.offset} {ts_label}: {rec.ts} keySize: {rec.key_size} valueSize: {rec.value_size}"
             f" sequence: {rec.sequence} headerKeys: []")
    if rec.control is not None:
        return f"{s} {rec.control}"
    if print_data:
        # Before 2.4 a null value suppressed the key too; since 2.4 a null value prints no payload.
        if rec.payload is None and gen < (2, 4):
            return s
        if rec.key is not None:
            s += f" key: {rec.key}"
        if rec.payload is not None:
            s += f" payload: {rec.payload}"
    return s


def _header(path: str, gen: tuple[int, int]) -> list[str]:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    start = int(name.split(".")[0]) if name.split(".")[0].isdigit() else 0
    return [f"Dumping {path}", f"{'Log starting' if gen >= (3, 3) else 'Starting'} offset: {start}"]


def _log(rows: list[dict[str, Any]], records: list[list[_Record]], gen: tuple[int, int], *, deep: bool,
         print_data: bool, path: str, trailing_bytes: int, skip_record_metadata: bool = False) -> str:
    out = _header(path, gen)
    # 0.11 and 1.0 need --deep-iteration next to --print-data-log; 1.1+ imply it.
    for r, recs in zip(rows, records, strict=True):
        if gen >= (2, 2) or not deep:
            out.append(_batch_line(r, gen))
        if deep:
            for rec in recs:
                if rec.control == "NPE":
                    out.append('Exception in thread "main" java.lang.NullPointerException')
                    return "\n".join(out) + "\n"
                out.append(_record_line(rec, r, gen, print_data, skip_record_metadata))
    if trailing_bytes:
        out.append(f"Found {trailing_bytes} invalid bytes at the end of {path.rsplit('/', 1)[-1]}")
    return "\n".join(out) + "\n"


# --- __transaction_state ------------------------------------------------------------------------


def _group_partitions(parts: list[str]) -> list[tuple[str, list[int]]]:
    groups: dict[str, list[int]] = {}
    for p in parts:
        t, n = p.rsplit("-", 1)
        groups.setdefault(t, []).append(int(n))
    return list(groups.items())


def _uvarint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def txn_value_size(rec: Mapping[str, Any]) -> int:
    """Serialized TransactionLogValue size (kafka-formats.md §5.4), -1 for a tombstone."""
    if rec["tombstone"]:
        return -1
    groups = _group_partitions(rec["txn_partitions"] or [])
    if rec["value_version"] == 0:
        return 37 + sum(2 + len(t.encode()) + 4 + 4 * len(ps) for t, ps in groups)
    size = 2 + 8 + 2 + 4 + 1 + _uvarint_len(len(groups) + 1) + 8 + 8 + 1
    size += sum(_uvarint_len(len(t.encode()) + 1) + len(t.encode()) + _uvarint_len(len(ps) + 1) + 4 * len(ps) + 1
                for t, ps in groups)
    for name, default, width in (("prev_producer_id", -1, 10), ("next_producer_id", -1, 10),
                                 ("client_txn_version", 0, 4), ("next_producer_epoch", -1, 4)):
        if rec.get(name) not in (None, default):
            size += width
    return size


def _txn_key_value(rec: Mapping[str, Any], gen: tuple[int, int]) -> tuple[str, str | None]:
    tid = rec["transactional_id"]
    if gen >= (4, 1):
        key = json.dumps({"type": "0", "data": {"transactionalId": tid}}, separators=(",", ":"), ensure_ascii=False)
        if rec["tombstone"]:
            return key, "<DELETE>"
        parts = rec["txn_partitions"]
        data: dict[str, Any] = {"producerId": rec["producer_id"]}
        v1 = rec["value_version"] == 1
        # Schema order; tagged fields only in v1 values and only when non-default.
        if v1 and rec["prev_producer_id"] not in (None, -1):
            data["previousProducerId"] = rec["prev_producer_id"]
        if v1 and rec["next_producer_id"] not in (None, -1):
            data["nextProducerId"] = rec["next_producer_id"]
        data["producerEpoch"] = rec["producer_epoch"]
        if v1 and rec["next_producer_epoch"] not in (None, -1):
            data["nextProducerEpoch"] = rec["next_producer_epoch"]
        data["transactionTimeoutMs"] = rec["txn_timeout_ms"]
        data["transactionStatus"] = rec["txn_state"] if gen >= (4, 4) else TXN_STATE_CODES[rec["txn_state"]]
        data["transactionPartitions"] = None if parts is None else [
            {"topic": t, "partitionIds": ps} for t, ps in _group_partitions(parts)]
        data["transactionLastUpdateTimestampMs"] = rec["txn_last_update_ts"]
        data["transactionStartTimestampMs"] = rec["txn_start_ts"]
        if v1 and rec["client_txn_version"] not in (None, 0):
            data["clientTransactionVersion"] = rec["client_txn_version"]
        return key, json.dumps({"version": str(rec["value_version"]), "data": data}, separators=(",", ":"), ensure_ascii=False)
    key = f"transaction_metadata::transactionalId={tid}" if gen >= (2, 5) else f"transactionalId={tid}"
    if rec["tombstone"]:
        return key, "<DELETE>"
    parts = rec["txn_partitions"] or []
    plist = f"[{','.join(parts)}]" if gen >= (2, 5) else f"Set({', '.join(parts)})"
    return key, (f"producerId:{rec['producer_id']},producerEpoch:{rec['producer_epoch']},state={rec['txn_state']},"
                 f"partitions={plist},txnLastUpdateTimestamp={rec['txn_last_update_ts']},"
                 f"txnTimeoutMs={rec['txn_timeout_ms']}")


def _txn_log(records: Sequence[Mapping[str, Any]], gen: tuple[int, int], path: str,
             invalid_offsets: frozenset[int] = frozenset()) -> str:
    rows: list[dict[str, Any]] = []
    recs: list[list[_Record]] = []
    position = 0
    for rec in records:
        key_size = 4 + len(rec["transactional_id"].encode())
        value_size = txn_value_size(rec)
        if rec["tombstone"] and gen < (2, 5):
            control = "NPE"  # KAFKA-9293: the old decoder crashes on a tombstone
            key = payload = None
        else:
            control = None
            key, payload = _txn_key_value(rec, gen)
        size = 61 + 7 + key_size + max(value_size, 0)
        row = dict.fromkeys(BATCH_COLUMNS, 0)
        row.update(position=position, base_offset=rec["offset"], last_offset=rec["offset"], batch_size=size,
                   partition_leader_epoch=rec["coordinator_epoch"] if rec["coordinator_epoch"] is not None else 0,
                   crc=0, crc_valid=0 if rec["offset"] in invalid_offsets else 1, compression=0, timestamp_type=0,
                   is_transactional=False, is_control=False,
                   has_delete_horizon=False, base_timestamp=rec["timestamp"], max_timestamp=rec["timestamp"],
                   producer_id=-1, producer_epoch=-1, base_sequence=-1, record_count=1)
        rows.append(row)
        recs.append([_Record(rec["offset"], rec["timestamp"], -1, key, payload, key_size, value_size, control)])
        position += size
    return _log(rows, recs, gen, deep=True, print_data=True, path=path, trailing_bytes=0)


# --- producer snapshots --------------------------------------------------------------------------


def _snapshot_line(e: Mapping[str, Any], gen: tuple[int, int]) -> str:
    first = e["current_txn_first_offset"]
    has_batch = e["last_offset"] >= 0
    first_seq = -1 if e["last_sequence"] < 0 else (e["last_sequence"] - e["offset_delta"]) % (2**31)
    if gen < (1, 0):
        return (f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} lastSequence: "
                f"{e['last_sequence']} lastOffset: {e['last_offset']} offsetDelta: {e['offset_delta']} "
                f"lastTimestamp: {e['timestamp']} coordinatorEpoch: {e['coordinator_epoch']} "
                f"currentTxnFirstOffset: {_optional(first, gen)}")
    s = (f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} coordinatorEpoch: "
         f"{e['coordinator_epoch']} currentTxnFirstOffset: {_optional(first, gen)}")
    if gen < (1, 1):  # UNVERIFIED Queue rendering (spec §6)
        meta = (f"BatchMetadata(firstSeq={first_seq}, lastSeq={e['last_sequence']}, firstOffset="
                f"{e['last_offset'] - e['offset_delta']}, lastOffset={e['last_offset']}, timestamp={e['timestamp']})"
                if has_batch else "")
        return f"{s} cachedMetadata: Queue({meta})"
    batch = (f"firstSequence: {first_seq} lastSequence: {e['last_sequence']} lastOffset: {e['last_offset']} "
             f"offsetDelta: {e['offset_delta']} timestamp: {e['timestamp']}")
    if gen < (3, 1):
        return f"{s} {batch}" if has_batch else s
    s += f" lastTimestamp: {e['timestamp']} "
    if has_batch:
        return s + batch
    return s if gen < (4, 3) else s.rstrip(" ")  # Scala keeps the trailing space, 4.3+ Java does not


# --- entry point ---------------------------------------------------------------------------------


def render(kind: str, items: Any, generation: str, *, deep: bool = True, print_data: bool = True,
           path: str | None = None, trailing_bytes: int = 0, skip_record_metadata: bool = False,
           invalid_offsets: frozenset[int] = frozenset()) -> str:
    """Dump text for ``kind`` "data" (``items`` = batch table or list of batch-row dicts; control
    batches with records need ``control_type`` ABORT/COMMIT or a KRaft type), "txn_log" (``items`` =
    transaction records with ``udfs.model.TXN_RECORD_KEYS``; one single-record batch per record)
    or "snapshot" (``items`` = snapshot entries), as ``generation`` prints it. ``invalid_offsets``
    ("txn_log"): records whose batch failed its CRC; the tool prints their batch line with
    ``isvalid: false`` (``DumpLogSegments`` prints ``batch.isValid``) and the records after it."""
    gen = version(generation)
    if kind == "data":
        rows = _rows(items)
        if path is None:
            start = rows[0]["base_offset"] if rows else 0
            path = f"/var/lib/kafka/data/orders-0/{start:020d}.log"
        if skip_record_metadata and gen < (2, 8):
            raise ValueError("--skip-record-metadata exists since 2.8")
        return _log(rows, [_data_records(r) for r in rows], gen, deep=deep, print_data=print_data, path=path,
                    trailing_bytes=trailing_bytes, skip_record_metadata=skip_record_metadata)
    if kind == "txn_log":
        if path is None:
            start = items[0]["offset"] if items else 0
            path = f"/var/lib/kafka/data/__transaction_state-30/{start:020d}.log"
        return _txn_log(items, gen, path, invalid_offsets)
    if kind == "snapshot":
        path = path or "/var/lib/kafka/data/orders-0/00000000000000000008.snapshot"
        return "\n".join([f"Dumping {path}"] + [_snapshot_line(e, gen) for e in items]) + "\n"
    raise ValueError(f"unknown kind {kind!r}")


# --- a whole log directory -----------------------------------------------------------------------


def render_log_dir(root: Any, out_dir: Any, generation: str, *, snapshots: bool = True,
                   only: Mapping[str, Sequence[int]] | None = None) -> list[str]:
    """``kafka-dump-log.sh`` output of a log dir, one text file per partition: every segment
    (``Dumping`` + ``Starting offset`` header as the tool prints them) and, with ``snapshots``,
    every producer snapshot file. ``only`` ({partition dir name: segment base offsets}) dumps just
    those segments of those partitions (an incident's "one segment plus the newest snapshot");
    other partitions are dumped whole. Returns the text files' paths."""
    from pathlib import Path

    from streaming.sources.logdir import list_partitions, segments
    from streaming.sources.logdir import snapshots as snapshot_files
    from udfs.record_batch import scan_batches
    from udfs.snapshot import decode_snapshot
    from udfs.txn_log import decode_txn_log_segment

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for part in list_partitions(str(root)):
        texts = []
        for base, path in segments(part):
            if only is not None and part.name in only and base not in only[part.name]:
                continue
            data = open(path, "rb").read()
            shown = f"/var/lib/kafka/data/{part.name}/{base:020d}.log"
            if part.is_txn_state:
                # every record, also those of a batch that fails its CRC: the tool prints them
                # after that batch's "isvalid: false" line
                recs, _ = decode_txn_log_segment(data, validate_crc=False)
                cols = scan_batches(data).columns
                bad = frozenset(r["offset"] for r in recs for i in range(len(cols["base_offset"]))
                                if not cols["crc_valid"][i] and cols["base_offset"][i] <= r["offset"]
                                <= cols["last_offset"][i])
                texts.append(render("txn_log", recs, generation, path=shown, invalid_offsets=bad))
            else:
                texts.append(render("data", scan_batches(data).columns, generation, path=shown))
        if snapshots and not part.is_txn_state:
            for off, path in snapshot_files(part):
                entries = decode_snapshot(open(path, "rb").read()).entries
                shown = f"/var/lib/kafka/data/{part.name}/{off:020d}.snapshot"
                texts.append(render("snapshot", entries, generation, path=shown))
        (out_dir / f"{part.name}.txt").write_text("".join(texts))
    return sorted(str(p) for p in out_dir.iterdir())
