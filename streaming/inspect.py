"""``txnwatch inspect``: a kafka-dump-log replacement for the fields that matter to transactions.

Decodes ``.log`` segments (data partitions and ``__transaction_state``, told apart by the
folder name ``__transaction_state-N`` or ``--txn-log``), ``.snapshot`` files and raw batch bytes
given as hex. No Spark. Errors go to stderr with file and byte position.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from udfs.model import COMPRESSION_NAMES, DecodeError, control_name
from udfs.record_batch import BatchScan, scan_batches
from udfs.snapshot import decode_snapshot
from udfs.txn_log import decode_txn_log_segment


def _batch_obj(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "batch",
        "position": row["position"],
        "base_offset": row["base_offset"],
        "last_offset": row["last_offset"],
        "batch_size": row["batch_size"],
        "partition_leader_epoch": row["partition_leader_epoch"],
        "magic": row["magic"],
        "crc": row["crc"],
        "crc_valid": None if row["crc_valid"] < 0 else bool(row["crc_valid"]),
        "attributes": row["attributes"],
        "compression": COMPRESSION_NAMES.get(row["compression"], f"unknown({row['compression']})"),
        "timestamp_type": "LogAppendTime" if row["timestamp_type"] else "CreateTime",
        "is_transactional": row["is_transactional"],
        "is_control": row["is_control"],
        "has_delete_horizon": row["has_delete_horizon"],
        "base_timestamp": row["base_timestamp"],
        "first_timestamp": row["first_timestamp"],
        "max_timestamp": row["max_timestamp"],
        "producer_id": row["producer_id"],
        "producer_epoch": row["producer_epoch"],
        "base_sequence": row["base_sequence"],
        "record_count": row["record_count"],
        "control_type": control_name(row["control_type"]),
        "coordinator_epoch": row["coordinator_epoch"] if row["coordinator_epoch"] >= 0 else None,
    }


def _txn_obj(rec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "txn_record",
        "offset": rec["offset"],
        "position": rec["position"],
        "timestamp": rec["timestamp"],
        "coordinator_epoch": rec["coordinator_epoch"],
        "transactional_id": rec["transactional_id"],
        "tombstone": rec["tombstone"],
        "value_version": rec["value_version"],
        "producer_id": rec["producer_id"],
        "producer_epoch": rec["producer_epoch"],
        "txn_state": rec["txn_state"],
        "txn_partitions": rec["txn_partitions"],
        "txn_timeout_ms": rec["txn_timeout_ms"],
        "txn_start_ts": rec["txn_start_ts"],
        "txn_last_update_ts": rec["txn_last_update_ts"],
        "prev_producer_id": rec["prev_producer_id"],
        "next_producer_id": rec["next_producer_id"],
        "client_txn_version": rec["client_txn_version"],
    }


def is_txn_log_path(path: str) -> bool:
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return parent.startswith("__transaction_state-")


def inspect_bytes(data: bytes, *, source: str, txn_log: bool, snapshot: bool,
                  validate_crc: bool = True) -> tuple[list[dict[str, Any]], list[DecodeError]]:
    """Decode one input into JSON-ready objects (batches, transaction-log records, snapshot entries)."""
    if snapshot:
        snap = decode_snapshot(data, source=source, validate_crc=validate_crc)
        head = {"type": "snapshot", "version": snap.version, "crc": snap.crc, "crc_valid": snap.crc_valid,
                "offset": snap.offset, "entries": len(snap.entries)}
        return [head] + [{"type": "producer", **e} for e in snap.entries], snap.errors
    if txn_log:
        recs, scan = decode_txn_log_segment(data, validate_crc=validate_crc, source=source)
        out: list[dict[str, Any]] = []
        by_pos: dict[int, list[dict[str, Any]]] = {}
        for r in recs:
            by_pos.setdefault(r["position"], []).append(r)
        for i in range(len(scan)):
            row = scan.row(i)
            out.append(_batch_obj(row))
            out.extend(_txn_obj(r) for r in by_pos.get(row["position"], []))
        return out, scan.errors
    scan: BatchScan = scan_batches(data, validate_crc=validate_crc, source=source)
    out = [_batch_obj(scan.row(i)) for i in range(len(scan))]
    if scan.legacy_entries:
        out.append({"type": "legacy", "entries": scan.legacy_entries,
                    "note": "magic 0/1 messages skipped (no producer id: never transactional)"})
    return out, scan.errors


def _expand(paths: Iterable[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, files in os.walk(p):
                for f in sorted(files):
                    if f.endswith((".log", ".snapshot")):
                        out.append(os.path.join(root, f))
        else:
            out.append(p)
    return sorted(out)


def _table(objs: list[dict[str, Any]], out: TextIO) -> None:
    for o in objs:
        t = o["type"]
        if t == "batch":
            kind = f"CONTROL {o['control_type']}" if o["is_control"] else ("TXN" if o["is_transactional"] else "DATA")
            ce = f" coordEpoch {o['coordinator_epoch']}" if o["coordinator_epoch"] is not None else ""
            crc = {True: "ok", False: "BAD", None: "unchecked"}[o["crc_valid"]]
            out.write(f"  offset {o['base_offset']}..{o['last_offset']} @{o['position']} {kind:<16} pid "
                      f"{o['producer_id']} epoch {o['producer_epoch']} count {o['record_count']} leaderEpoch "
                      f"{o['partition_leader_epoch']} {o['compression']} ts {o['max_timestamp']} crc {crc}{ce}\n")
        elif t == "txn_record":
            if o["tombstone"]:
                out.write(f"    offset {o['offset']} txnId {o['transactional_id']!r} TOMBSTONE\n")
            else:
                parts = ",".join(o["txn_partitions"]) if o["txn_partitions"] is not None else "null"
                out.write(f"    offset {o['offset']} txnId {o['transactional_id']!r} pid {o['producer_id']} epoch "
                          f"{o['producer_epoch']} {o['txn_state']} partitions [{parts}] timeout "
                          f"{o['txn_timeout_ms']} start {o['txn_start_ts']} v{o['value_version']}\n")
        elif t == "snapshot":
            out.write(f"  snapshot v{o['version']} offset {o['offset']} entries {o['entries']} crc "
                      f"{'ok' if o['crc_valid'] else 'BAD'}\n")
        elif t == "producer":
            open_ = o["current_txn_first_offset"]
            out.write(f"  pid {o['producer_id']} epoch {o['producer_epoch']} coordEpoch {o['coordinator_epoch']} "
                      f"open txn from {open_ if open_ >= 0 else '-'} lastOffset {o['last_offset']} "
                      f"ts {o['timestamp']}\n")
        elif t == "legacy":
            out.write(f"  {o['entries']} legacy magic 0/1 messages skipped\n")


def run_inspect(paths: list[str], *, as_json: bool, hex_input: bool, txn_log: bool | None,
                validate_crc: bool = True, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """CLI body; returns the exit code (1 when any entry was invalid or unreadable)."""
    out = out or sys.stdout
    err = err or sys.stderr
    bad = False
    items: list[tuple[str, bytes | None]] = []
    if hex_input:
        for h in paths:
            text = open(h).read() if os.path.exists(h) else h
            lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            try:
                items.append((h if os.path.exists(h) else "<hex>", bytes.fromhex("".join(lines))))
            except ValueError as exc:
                err.write(f"{h}: not valid hex: {exc}\n")
                bad = True
    else:
        for p in _expand(paths):
            try:
                with open(p, "rb") as f:
                    items.append((p, f.read()))
            except OSError as exc:
                err.write(f"{p}: cannot read: {exc.strerror}\n")
                bad = True
    for source, data in items:
        snapshot = source.endswith(".snapshot")
        tl = txn_log if txn_log is not None else is_txn_log_path(source)
        objs, errors = inspect_bytes(data, source=source, txn_log=tl, snapshot=snapshot, validate_crc=validate_crc)
        if as_json:
            for o in objs:
                out.write(json.dumps({"file": source, **o}) + "\n")
        else:
            out.write(f"{source}:\n")
            _table(objs, out)
        for e in errors:
            err.write(f"error: {e.describe()}\n")
            bad = True
    return 1 if bad else 0
