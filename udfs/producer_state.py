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

from udfs.model import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY
from udfs.stable_order import stable_argsort


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
    txn_data_epoch: int = -1  # highest producer epoch of the open transaction's data
    # highest data epoch of the transaction the last marker closed (-1: nothing was open, or its
    # data was not replayed); one below the marker's epoch = a bumped marker (detection.md §3.1)
    last_marker_closed_epoch: int = -1


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

    def replayed_lso(self, log_start_offset: int | None) -> int | None:
        """The LSO of a replay read to its end (high watermark = ``next_offset``), never below the
        log start: a snapshot entry whose transaction starts below it (its batches were deleted)
        pins the LSO at the log start (kafka-formats.md §6)."""
        lso = self.lso(self.next_offset)
        if lso is not None and log_start_offset is not None:
            lso = max(lso, log_start_offset)
        return lso

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
                txn_data_epoch=e["producer_epoch"] if e["current_txn_first_offset"] >= 0 else -1,
            )
            self.producers[pe.producer_id] = pe
        self.next_offset = snapshot_offset

    def apply(self, cols: dict[str, np.ndarray], valid: np.ndarray | None = None) -> None:
        """Replay a batch table (file order). Rows where ``valid`` is False are skipped.

        The pairing rule (:func:`udfs.pairing.pair`) depends only on the order of one producer's
        batches, so it is applied per producer id with array reductions instead of a Python step
        per batch: what a producer ends with is decided by its last control batch (CLOSE) and the
        data batches after it (OPEN at the first, JOIN the rest); without a control batch in the
        table, data batches JOIN what the producer had open, else OPEN. An empty control batch
        closes but changes neither epoch nor timestamp (``ProducerAppendInfo`` ignores it); the
        coordinator epoch comes from the last COMMIT/ABORT that carries one."""
        txn = cols["is_transactional"] & (cols["producer_id"] >= 0)
        if valid is not None:
            txn &= valid
        idx = np.flatnonzero(txn)
        if len(cols["last_offset"]):
            self.next_offset = int(cols["last_offset"][-1]) + 1
        if not len(idx):
            return
        n = len(idx)
        # Rows by producer id (file order within one, a stable sort), so that every per-producer
        # reduction below is one reduceat over contiguous groups (ufunc.at is far slower).
        pid = cols["producer_id"][idx]
        order = stable_argsort(pid)
        spid = pid[order]
        new = np.ones(n, dtype=bool)
        new[1:] = spid[1:] != spid[:-1]
        starts = np.flatnonzero(new)
        pids = spid[starts]
        sizes = np.diff(np.append(starts, n))
        pos = order  # each sorted row's position in file order (0..n-1)
        ctrl = cols["is_control"][idx][order]
        ctype = cols["control_type"][idx][order]
        cepoch = cols["coordinator_epoch"][idx]  # indexed by file position below
        data_epoch = cols["producer_epoch"][idx][order].astype(np.int64)

        def last(mask: np.ndarray) -> np.ndarray:
            """Per producer, the file position of its last row in ``mask`` (-1: none)."""
            return np.maximum.reduceat(np.where(mask, pos, -1), starts)

        def per_row(values: np.ndarray) -> np.ndarray:
            return np.repeat(values, sizes)

        last_ctrl = last(ctrl)
        counted = ~(ctrl & (ctype == CONTROL_EMPTY))
        last_counted = last(counted)
        epoch = np.maximum.reduceat(np.where(counted, data_epoch, -1), starts)
        last_typed = last(ctrl & ((ctype == CONTROL_ABORT) | (ctype == CONTROL_COMMIT)) & (cepoch[order] >= 0))
        lc_row = per_row(last_ctrl)
        prev_ctrl = last(ctrl & (pos < lc_row))  # the control batch before the last one

        def max_epoch(mask: np.ndarray) -> np.ndarray:
            return np.maximum.reduceat(np.where(mask, data_epoch, -1), starts)

        # data the last control batch closed: between it and the control batch before it
        closed = max_epoch(~ctrl & (pos < lc_row) & (pos > per_row(prev_ctrl)))
        after = ~ctrl & (pos > lc_row)  # data batches after the producer's last control batch
        after_epoch = max_epoch(after)
        first_after = np.minimum.reduceat(np.where(after, pos, n), starts)
        last_after = last(after)
        base = cols["base_offset"][idx]
        last_off = cols["last_offset"][idx]
        first_ts = cols["first_timestamp"][idx]
        max_ts = cols["max_timestamp"][idx]

        def at(values: np.ndarray, rows: np.ndarray) -> list[int]:
            """values[rows] per producer as Python ints (0 where rows is -1 or n: not used)."""
            ok = (rows >= 0) & (rows < n)
            return np.where(ok, values[np.where(ok, rows, 0)], 0).tolist()

        # Python ints per producer, gathered once: indexing numpy arrays per producer boxed a scalar each time
        lc_, prev_, lt_, fa_, ep_, lcnt_ = (a.tolist() for a in (last_ctrl, prev_ctrl, last_typed, first_after, epoch,
                                                                 last_counted))
        closed_, after_ep_ = closed.tolist(), after_epoch.tolist()
        base_lc, cep_lt, base_fa, ts_fa = at(base, last_ctrl), at(cepoch, last_typed), at(base, first_after), \
            at(first_ts, first_after)
        last_off_la, ts_lcnt = at(last_off, last_after), at(max_ts, last_counted)
        producers = self.producers
        for pid, lc, prev, lt, fa, ep, lcnt, closed_ep, after_ep, b_lc, ce_lt, b_fa, t_fa, lo_la, t_lcnt in zip(
                pids.tolist(), lc_, prev_, lt_, fa_, ep_, lcnt_, closed_, after_ep_, base_lc, cep_lt, base_fa, ts_fa,
                last_off_la, ts_lcnt, strict=True):
            e = producers.get(pid)
            if e is None:
                e = producers[pid] = ProducerEntry(pid)
            if lc >= 0:
                if prev < 0 and e.txn_first_offset >= 0:  # it also closed what was open before
                    closed_ep = max(closed_ep, e.txn_data_epoch)
                e.last_marker_closed_epoch = closed_ep
                e.txn_first_offset = -1
                e.txn_data_epoch = -1
                e.last_marker_offset = b_lc
            if lt >= 0:
                e.coordinator_epoch = ce_lt
            if fa < n:
                if e.txn_first_offset < 0:  # OPEN at the first, the rest JOIN
                    e.txn_first_offset = b_fa
                    e.txn_first_ts = t_fa
                e.txn_data_epoch = max(e.txn_data_epoch, after_ep)
                e.txn_last_offset = lo_la
            if ep >= 0:
                e.producer_epoch = max(e.producer_epoch, ep)
            if lcnt >= 0:
                e.last_timestamp = t_lcnt


def replay_batches(state: PartitionState, cols: dict[str, np.ndarray], snapshot_offset: int | None) -> None:
    """Apply a batch table to a partition replay seeded at ``snapshot_offset`` (None: not seeded):
    only batches at or after the snapshot change the state; a bad CRC skips the batch."""
    if snapshot_offset is not None:
        at_or_after = cols["last_offset"] >= snapshot_offset  # the snapshot summarises what lies below
        cols = {k: v[at_or_after] for k, v in cols.items()}
    state.apply(cols, cols["crc_valid"] != 0)
