"""Per-partition producer state, replayed the way the broker's ``ProducerStateManager`` does it.

Used where a reader needs the *partition's* view without Spark: the LSO of a log directory at
the end of a read (progress rows), ``txnwatch inspect``, and tests' ground truth. Semantics
(kafka-formats.md §3.4, detection.md §1) are :mod:`udfs.pairing`'s; this module keeps the
per-producer bookkeeping around it (first/last offsets, timestamps, highest epoch, last marker).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from udfs.model import CONTROL_EMPTY
from udfs.pairing import Step, marker_coordinator_epoch, pair


@dataclass
class ProducerEntry:
    """What the broker keeps per producer id on one partition (plus what txnwatch reports)."""

    producer_id: int
    producer_epoch: int = -1
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int = -1  # -1: no open transaction
    txn_first_ts: int = -1
    txn_last_offset: int = -1
    last_marker_offset: int = -1


@dataclass
class PartitionState:
    """Producer entries of one partition and the offset up to which they were replayed."""

    producers: dict[int, ProducerEntry] = field(default_factory=dict)
    next_offset: int | None = None

    def open_transactions(self) -> dict[int, int]:
        """producer id → first offset of its open transaction."""
        return {p: e.txn_first_offset for p, e in self.producers.items() if e.txn_first_offset >= 0}

    def lso(self, high_watermark: int | None) -> int | None:
        """Last stable offset: the smallest open first offset, else the high watermark."""
        opens = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        if opens:
            return min(opens)
        return high_watermark

    def load_snapshot(self, entries: list[dict[str, Any]], snapshot_offset: int) -> None:
        """Seed from a producer snapshot taken at ``snapshot_offset`` (state of offsets < it)."""
        self.producers.clear()
        for e in entries:
            pe = ProducerEntry(
                producer_id=e["producer_id"],
                producer_epoch=e["producer_epoch"],
                coordinator_epoch=e["coordinator_epoch"],
                last_timestamp=e["timestamp"],
                txn_first_offset=e["current_txn_first_offset"],
                txn_first_ts=e["timestamp"] if e["current_txn_first_offset"] >= 0 else -1,
                txn_last_offset=e["last_offset"] if e["current_txn_first_offset"] >= 0 else -1,
            )
            self.producers[pe.producer_id] = pe
        self.next_offset = snapshot_offset

    def apply(self, cols: dict[str, np.ndarray], valid: np.ndarray | None = None) -> None:
        """Replay a batch table (file order). Rows where ``valid`` is False are skipped."""
        txn = cols["is_transactional"] & (cols["producer_id"] >= 0)
        if valid is not None:
            txn &= valid
        idx = np.flatnonzero(txn)
        pids = cols["producer_id"][idx].tolist()
        epochs = cols["producer_epoch"][idx].tolist()
        ctrl = cols["is_control"][idx].tolist()
        base = cols["base_offset"][idx].tolist()
        last = cols["last_offset"][idx].tolist()
        first_ts = cols["first_timestamp"][idx].tolist()
        max_ts = cols["max_timestamp"][idx].tolist()
        ctype = cols["control_type"][idx].tolist()
        cepoch = cols["coordinator_epoch"][idx].tolist()
        producers = self.producers
        for j in range(len(idx)):
            pid = pids[j]
            e = producers.get(pid)
            if e is None:
                e = producers[pid] = ProducerEntry(pid)
            step = pair(e.txn_first_offset >= 0, transactional=True, control=ctrl[j], producer_id=pid)
            if step is Step.CLOSE:
                e.txn_first_offset = -1
                e.last_marker_offset = base[j]
                ce = marker_coordinator_epoch(ctype[j], cepoch[j])
                if ce is not None:
                    e.coordinator_epoch = ce
                if ctype[j] == CONTROL_EMPTY:
                    # the cleaner kept the header, not the marker's timestamp nor (ProducerAppendInfo
                    # ignores the batch) an epoch the broker would apply on replay
                    continue
            elif step is Step.OPEN:
                e.txn_first_offset = base[j]
                e.txn_first_ts = first_ts[j]
                e.txn_last_offset = last[j]
            elif step is Step.JOIN:
                e.txn_last_offset = last[j]
            e.producer_epoch = max(e.producer_epoch, epochs[j])
            e.last_timestamp = max_ts[j]
        if len(cols["last_offset"]):
            self.next_offset = int(cols["last_offset"][-1]) + 1
