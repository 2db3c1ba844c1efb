"""Decoded input → event rows (the "normalize" step of DESIGN §2). No Spark import.

Every source reaches these functions through :mod:`streaming.partition_read`, whatever it read
(Fetch bytes, segment files, dump text), so the same Kafka facts always become the same events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from streaming.events import make_row, to_frame
from udfs.model import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY, DecodeError, control_name
from udfs.stable_order import stable_argsort
from udfs.txn_log import reduce_coordinator_records as reduce_coordinator_records  # lives beside its decoder


def data_events(
    cols: dict[str, np.ndarray],
    *,
    topic: str,
    partition: int,
    source: str,
    cluster: str,
    event_time_ms: int,
    source_position: str | None = None,
    position_format: str = "{prefix}@{pos}",
    reduce_from: int | None = None,
    first_read: bool = False,
    typed: bool = True,
) -> pd.DataFrame:
    """Spans and markers of one read of a data partition (DESIGN §4-§5): :func:`data_event_columns`
    as a frame.

    Spans: per producer id, the transactional data batches between two of its control batches
    are collapsed into one row. Batches whose CRC is known bad are left out (the caller emits a
    gap for them). Non-transactional batches (plain or idempotent) never produce a row.

    ``reduce_from``: fold the transactions that open and close within this read, among rows at
    or after this offset, with :func:`reduce_closed_in_read` (None: keep every row), whose
    ``first_read`` this is.
    ``typed=False``: leave the columns untyped (``event_time`` in ms) for a caller that types the
    whole read once (:func:`streaming.events.to_frame`).
    """
    final = data_event_columns(cols, topic=topic, partition=partition, source=source, cluster=cluster,
                               event_time_ms=event_time_ms, source_position=source_position,
                               position_format=position_format, reduce_from=reduce_from, first_read=first_read)
    if final is None:
        return to_frame([])
    n_out = len(final["kind"])
    for k, v in final.items():
        if k == "source_position" and not isinstance(v, np.ndarray):  # an Arrow array
            final[k] = np.array(v.to_pylist(), dtype=object)
        elif not isinstance(v, np.ndarray):  # one value for every row
            final[k] = np.full(n_out, v, dtype=object if isinstance(v, str) else None)
    frame = pd.DataFrame(final)
    return to_frame(frame) if typed else frame


def data_event_columns(
    cols: dict[str, np.ndarray],
    *,
    topic: str,
    partition: int,
    source: str,
    cluster: str,
    event_time_ms: int,
    source_position: str | None = None,
    position_format: str = "{prefix}@{pos}",
    reduce_from: int | None = None,
    first_read: bool = False,
) -> dict[str, Any] | None:
    """The rows of :func:`data_events` as columns (None: no row): numpy arrays (``source_position``:
    an Arrow string array), and scalars for the values every row has (topic, partition, source,
    cluster, event time in ms), for a caller
    that gathers many reads column by column (:class:`streaming.event_table.EventTable`).
    A column is float (NaN: null) or object (NaN: null) where the spans or the markers lack it.

    The rows are what ``concat([spans, markers])`` sorted by first offset (stable), then
    :func:`reduce_closed_in_read`, gives. The sort and the reduction are decided on the few
    columns they read, and every other column is gathered once, for the rows kept (a read of many
    small batches keeps about one row in ten: building every column for every row, then sorting
    and dropping them, was most of this function's time).
    """
    n = len(cols["base_offset"])
    if n == 0:
        return None
    keep = cols["is_transactional"] & (cols["producer_id"] >= 0) & (cols["crc_valid"] != 0)
    if not keep.any():
        return None
    at = None if keep.all() else np.flatnonzero(keep)
    c = {k: cols[k] if at is None else cols[k][at] for k in (
        "base_offset", "last_offset", "batch_size", "first_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "record_count", "is_control", "control_type", "coordinator_epoch", "position")}
    # Dumps of 0.11-1.1 do not print the record count (-1) nor the size (0): count nothing then.
    c["empty"] = c["record_count"] == 0
    c["record_count"] = c["record_count"].clip(min=0)
    # Columns (and dtypes) as pandas gave them when this was concat([spans, markers]) of two
    # frames: a column missing from one part is float64 (ints) or object, with NaN there.
    is_ctrl = c["is_control"].astype(bool)
    spans = None if is_ctrl.all() else _spans(c, is_ctrl)
    m_at = np.flatnonzero(is_ctrl)
    ns = 0 if spans is None else len(spans["producer_id"])
    nm = len(m_at)
    # rows: the spans (0 .. ns-1), then the markers (ns ..), sorted by first offset (stable)
    first = c["base_offset"][m_at] if spans is None else \
        spans["first_offset"] if not nm else np.concatenate((spans["first_offset"], c["base_offset"][m_at]))
    order = stable_argsort(first)
    sel = order
    folded = None
    if reduce_from is not None and nm >= 3:  # folding needs a marker between the first and the last one
        is_m = order >= ns
        m_ord = order[is_m] - ns  # the markers, in row order
        codes = c["control_type"][m_at][m_ord]
        # the names the frame path compares (udfs.model.CONTROL_NAMES: one code per name)
        commit_abort = np.zeros(len(order), dtype=bool)
        commit_abort[is_m] = (codes == CONTROL_COMMIT) | (codes == CONTROL_ABORT)
        empty = np.zeros(len(order), dtype=bool)
        empty[is_m] = codes == CONTROL_EMPTY
        cep = np.full(len(order), np.nan)
        cep[is_m] = c["coordinator_epoch"][m_at][m_ord]

        def both(span_values: np.ndarray, marker_values: np.ndarray) -> np.ndarray:
            return (marker_values if spans is None else np.concatenate((span_values, marker_values)))[order]

        pid = both(None if spans is None else spans["producer_id"], c["producer_id"][m_at])
        epoch = both(None if spans is None else spans["producer_epoch"], c["producer_epoch"][m_at])
        plan = _fold_plan(is_m, ~is_m, pid, first[order], commit_abort, empty, cep, epoch, reduce_from, first_read)
        if plan is not None:
            kept, carrier, txns, epochs = plan
            sel = order[kept]
            folded = carrier, txns, epochs
    # every column, for the rows kept only: each part's rows taken, concatenated, then put in order
    in_spans = sel < ns
    s_rows, m_rows = sel[in_spans], m_at[sel[~in_spans] - ns]
    parts: list[dict[str, np.ndarray]] = []
    if spans is not None:
        parts.append({k: v[s_rows] for k, v in spans.items()})
        parts[-1]["kind"] = np.full(len(s_rows), "data", dtype=object)
        parts[-1]["route_pid"] = parts[-1]["producer_id"]
    if nm:
        parts.append(_marker_part(c, m_rows))
    out = _concat_parts(parts)
    if spans is not None and nm and not (in_spans[:-1] >= in_spans[1:]).all():
        # the parts' rows are the spans', then the markers': back to the order of ``sel``
        where = np.empty(len(sel), dtype=np.int64)
        where[np.concatenate((np.flatnonzero(in_spans), np.flatnonzero(~in_spans)))] = np.arange(len(sel))
        out = {k: v[where] for k, v in out.items()}
    if folded is not None:
        carrier, txns, epochs = folded
        k = len(sel)
        out["folded_txns"] = np.full(k, pd.NA, dtype=object)
        out["folded_txns"][carrier] = txns
        out["folded_max_epoch"] = np.full(k, pd.NA, dtype=object)
        out["folded_max_epoch"][carrier] = epochs
    prefix = source_position or f"{topic}-{partition}"
    final: dict[str, Any] = {k: v for k, v in out.items() if k != "first_position"}
    final["topic"] = topic
    final["partition"] = partition
    final["source"] = source
    final["cluster"] = cluster
    final["event_time"] = event_time_ms
    if position_format == "{prefix}@{pos}":  # the default: Arrow's cast and join, no str per row
        import pyarrow as pa
        import pyarrow.compute as pc

        final["source_position"] = pc.binary_join_element_wise(
            f"{prefix}@", pc.cast(pa.array(out["first_position"], type=pa.int64()), pa.string()), "")
    else:
        final["source_position"] = np.array([position_format.format(prefix=prefix, pos=p)
                                             for p in out["first_position"].tolist()], dtype=object)
    return final


def data_event_arrays(cols: dict[str, np.ndarray], key: np.ndarray | None = None, *,
                      reduce_from: int | None = None) -> tuple[dict[str, np.ndarray], np.ndarray | None] | None:
    """The spans and markers of :func:`data_event_columns` (not a first read: ``first_read``
    False) as numpy columns (``first_position``: the batch position a row's ``source_position``
    names), None when there is no row.

    ``key`` (one value per batch, ascending): the batches are the reads of several partitions
    one after another, ``key`` telling which read each batch belongs to. Every read's rows are
    then exactly what it alone would give (spans and folds never cross two reads; rows ordered
    by read, then as for one read), one after another; the second value is each row's key.
    The live source's reads of a broker's partitions, a few batches each, so pay numpy's fixed
    cost once per group rather than once per partition (issue 23 item 1)."""
    n = len(cols["base_offset"])
    if n == 0:
        return None
    keep = cols["is_transactional"] & (cols["producer_id"] >= 0) & (cols["crc_valid"] != 0)
    if not keep.any():
        return None
    c = {k: cols[k][keep] for k in (
        "base_offset", "last_offset", "batch_size", "first_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "record_count", "is_control", "control_type", "coordinator_epoch", "position")}
    # the producer's group label: its id, or (read, id) ranked, so no group spans two reads
    if key is None:
        group = c["producer_id"]
    else:
        key = key[keep]
        group = _pair_rank(key, c["producer_id"])
    # Dumps of 0.11-1.1 do not print the record count (-1) nor the size (0): count nothing then.
    c["empty"] = c["record_count"] == 0
    c["record_count"] = c["record_count"].clip(min=0)
    # Columns (and dtypes) as pandas gave them when this was concat([spans, markers]) of two
    # frames: a column missing from one part is float64 (ints) or object, with NaN there.
    is_ctrl = c["is_control"].astype(bool)
    parts: list[dict[str, np.ndarray]] = []
    if not is_ctrl.all():
        spans = _spans(c, is_ctrl, None if key is None else group, key)
        spans["kind"] = np.full(len(spans["producer_id"]), "data", dtype=object)
        spans["route_pid"] = spans["producer_id"]
        parts.append(spans)
    if is_ctrl.any():
        markers = _marker_part(c, is_ctrl)
        if key is not None:
            markers["read_key"] = key[is_ctrl]
        parts.append(markers)
    out = _concat_parts(parts)
    if key is None:
        order = np.argsort(out["first_offset"], kind="stable")
    else:
        order = np.lexsort((out["first_offset"], out["read_key"]))  # stable: by read, then as one read
    out = {k: v[order] for k, v in out.items()}
    if reduce_from is not None:
        group_of = out["producer_id"] if key is None else _pair_rank(out["read_key"], out["producer_id"])
        out = _fold_arrays(out, reduce_from, group_of) or out
    row_key = out.pop("read_key", None)
    return out, row_key


def _pair_rank(key: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """A dense label of each (key, producer id) pair, increasing with the pair (key first)."""
    n = len(pid)
    order = np.lexsort((pid, key))
    k, p = key[order], pid[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (p[1:] != p[:-1])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.cumsum(new) - 1
    return rank


#: The batch columns a marker row is made of (:func:`_marker_part`).
_MARKER_FIELDS = ("producer_id", "producer_epoch", "base_offset", "max_timestamp", "record_count", "batch_size",
                  "empty", "control_type", "coordinator_epoch", "position")


def _marker_part(c: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The event rows of the control batches ``rows`` (indexes or a mask) of the batch columns
    ``c``: one marker row per control batch, its offset and timestamp both first and last."""
    m = {k: c[k][rows] for k in _MARKER_FIELDS}
    n = len(m["producer_id"])
    return {
        "kind": np.full(n, "marker", dtype=object),
        "producer_id": m["producer_id"],
        "route_pid": m["producer_id"],
        "producer_epoch": m["producer_epoch"],
        "first_offset": m["base_offset"],
        "last_offset": m["base_offset"],
        "first_ts": m["max_timestamp"],
        "last_ts": m["max_timestamp"],
        "batch_count": np.ones(n, dtype=np.int64),
        "record_count": m["record_count"],
        "bytes": m["batch_size"],
        "empty_batches": m["empty"].astype(np.int64),
        "marker": _control_names(m["control_type"]),
        "coordinator_epoch": m["coordinator_epoch"],
        "first_position": m["position"],
    }


def _control_names(codes: np.ndarray) -> np.ndarray:
    """``control_name`` of every code, called once per distinct code."""
    uniq, inverse = np.unique(codes, return_inverse=True)
    return np.array([control_name(t) for t in uniq.tolist()] + [None], dtype=object)[:-1][inverse.reshape(-1)]


def _concat_parts(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``pd.concat`` of the frames of ``parts`` (columns in order of first appearance) on arrays."""
    if len(parts) == 1:
        return dict(parts[0])
    names = list(parts[0]) + [k for p in parts[1:] for k in p if k not in parts[0]]
    out = {}
    for k in names:
        arrays = []
        for p in parts:
            if k in p:
                arrays.append(p[k])
            else:
                n = len(next(iter(p.values())))
                other = next(q[k] for q in parts if k in q)
                arrays.append(np.full(n, np.nan) if other.dtype != object else np.full(n, np.nan, dtype=object))
        out[k] = np.concatenate(arrays)
    return out


def _spans(c: dict[str, np.ndarray], is_ctrl: np.ndarray, group: np.ndarray | None = None,
           key: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """One row per producer id and stretch between two of its control batches (a span), in order
    of each span's first batch: the data batches' first/last offsets, first timestamp, max
    timestamp and epoch, counts and sums. The same columns (and dtypes) as

        df["stretch"] = df.groupby("producer_id")["is_control"].cumsum()
        df[~df["is_control"]].groupby(["producer_id", "stretch"], sort=False).agg(...).reset_index()

    (without the ``stretch`` column) computed with numpy (pandas' groupby machinery cost ~20 ms
    per read, whatever its size).

    ``group``: the producer's label when the batches are several reads' (:func:`data_event_arrays`:
    the rank of its (read, id) pair, so no span crosses two reads; None: its id); ``key``: each
    batch's read, carried as ``read_key``.
    """
    pid = c["producer_id"] if group is None else group
    # Batches by producer (label), file order within one (a stable sort). Along one producer's
    # batches the number of its control batches so far only grows, so its data batches in this
    # order are already grouped by (producer, stretch), file order within a group: a group
    # starts where the label changes or a control batch of it came in between.
    by_pid = stable_argsort(pid)
    ctrl_sorted = is_ctrl[by_pid]
    cum = np.cumsum(ctrl_sorted)  # control batches up to each batch (all producers: compared within one)
    data_at = np.flatnonzero(~ctrl_sorted)
    sorted_rows = by_pid[data_at]
    g_pid, g_cum = pid[sorted_rows], cum[data_at]
    first = np.ones(len(sorted_rows), dtype=bool)
    first[1:] = (g_pid[1:] != g_pid[:-1]) | (g_cum[1:] != g_cum[:-1])
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(sorted_rows)) - 1
    first_row, last_row = sorted_rows[starts], sorted_rows[ends]
    appear = stable_argsort(first_row)  # groups in order of their first batch (sort=False)

    def agg(values: np.ndarray, fn: Any) -> np.ndarray:
        # in the column's dtype, as pandas' groupby sum/max (numpy would widen int32 sums)
        return fn.reduceat(values[sorted_rows], starts, dtype=values.dtype)[appear]

    first_row, last_row = first_row[appear], last_row[appear]
    out = {
        "producer_id": c["producer_id"][first_row],
        "first_offset": c["base_offset"][first_row],
        "last_offset": c["last_offset"][last_row],
        "first_ts": c["first_timestamp"][first_row],
        "last_ts": agg(c["max_timestamp"], np.maximum),
        "producer_epoch": agg(c["producer_epoch"], np.maximum),
        "batch_count": (ends - starts + 1)[appear].astype(np.int64),
        "record_count": agg(c["record_count"], np.add),
        "bytes": agg(c["batch_size"], np.add),
        "empty_batches": agg(c["empty"].astype(np.int64), np.add),
        "first_position": c["position"][first_row],
    }
    if key is not None:
        out["read_key"] = key[first_row]
    return out


def _fold_arrays(rows: dict[str, np.ndarray], from_offset: int, group: np.ndarray) -> dict[str, np.ndarray] | None:
    """:func:`reduce_closed_in_read` (``first_read`` False) on columns (None: nothing to drop),
    ``group`` standing for the producer id (:func:`_fold_plan` only compares it): the rank of the
    (read, producer id) pair when the rows are several reads' (:func:`data_event_arrays`)."""
    plan = _reduce_plan(rows, from_offset, group=group)
    if plan is None:
        return None
    keep, carrier, txns, epochs = plan
    out = {k: v[keep] for k, v in rows.items()}
    n = len(out["kind"])
    out["folded_txns"] = np.full(n, pd.NA, dtype=object)
    out["folded_txns"][carrier] = txns
    out["folded_max_epoch"] = np.full(n, pd.NA, dtype=object)
    out["folded_max_epoch"][carrier] = epochs
    return out


def reduce_closed_in_read(rows: pd.DataFrame, from_offset: int = 0, first_read: bool = False) -> pd.DataFrame:
    """Drop the rows of one read that the producer state cannot tell apart from fewer rows.

    ``rows``: spans and markers of one read of one partition in offset order (one span per
    producer between two of its markers). Per producer id, among rows at or after
    ``from_offset`` (a seed snapshot's offset: rows below it are previews under WAVE2 contract A
    and stay as they are), with M markers it keeps

    * the span before the first marker (it may join a transaction open from an earlier read),
    * the first marker (it closes that transaction, with its COMMIT/ABORT),
    * the last marker (the producer's last marker on the partition: offset, epoch, coordinator
      epoch, timestamp; coordinator epochs only grow on a coordinator partition, so it also
      carries the producer's highest) and, when that one teaches no coordinator epoch (EMPTY),
      the last COMMIT/ABORT before it, whose epoch an EMPTY marker inherits (``udfs.pairing``),
    * the span just before the last marker (the data epoch that marker closed: whether it was
      bumped, which write-after-marker needs, detection.md §3.1 revision 3.1),
    * the span after the last marker (open at the end of the read; its preceding marker is the
      last marker, which write-after-marker needs).

    The spans and markers between the first and the last marker are transactions that opened
    and closed within the read: no later event can reopen them, so the state only needs their
    number (``folded_txns``) and highest producer epoch (``folded_max_epoch``, EMPTY markers
    left out as the state leaves them out), both carried by the last marker's row.

    ``first_read``: the rows are the first of the partition the state ever gets (the source's
    first read of it, first piece, no seed snapshot: ``partition_read.ReadContext.first_read``).
    Nothing of any producer is open there before them, so the span before a producer's first
    marker opens a transaction that this marker closes, within the read, like those after it:
    both are folded too (unless one of the rules above keeps them). What the state would learn
    from them is overwritten by the kept rows: the marker after them is ``last_marker``, the
    highest producer epoch is folded, and the highest coordinator epoch is the last
    COMMIT/ABORT's (a partition's markers of one producer never lower it: the broker fences a
    marker whose coordinator epoch is below the one it holds, ``ProducerAppendInfo
    .checkCoordinatorEpoch``); no finding can be open there to be resolved by the first marker.
    """
    if rows.empty:
        return rows
    plan = _reduce_plan({k: rows[k].to_numpy() for k in (
        "kind", "producer_id", "first_offset", "marker", "coordinator_epoch", "producer_epoch") if k in rows}, from_offset,
        first_read)
    if plan is None:
        return rows
    keep, carrier, txns, epochs = plan
    out = rows[keep].copy()
    carriers = out.index[carrier]
    out["folded_txns"] = pd.NA
    out["folded_max_epoch"] = pd.NA
    out.loc[carriers, "folded_txns"] = txns
    out.loc[carriers, "folded_max_epoch"] = epochs
    return out.reset_index(drop=True)


def _reduce_plan(rows: dict[str, np.ndarray], from_offset: int, first_read: bool = False,
                 group: np.ndarray | None = None) -> tuple[np.ndarray, ...] | None:
    """What :func:`reduce_closed_in_read` keeps of rows given as columns with the frame's values
    (``kind`` and ``marker`` names): :func:`_fold_plan`. ``group``: the producer's label when it
    is not its id (:func:`_fold_arrays`)."""
    if "marker" not in rows:
        return None  # no markers
    is_m = rows["kind"] == "marker"
    if is_m.sum() < 3:
        return None  # folding needs a marker between the first and the last one
    marker = rows["marker"]
    return _fold_plan(is_m, rows["kind"] == "data", rows["producer_id"] if group is None else group, rows["first_offset"],
                      is_m & ((marker == "COMMIT") | (marker == "ABORT")), marker == "EMPTY",
                      rows["coordinator_epoch"].astype(np.float64), rows["producer_epoch"], from_offset, first_read)


def _fold_plan(is_m: np.ndarray, is_data: np.ndarray, pid: np.ndarray, first_offset: np.ndarray,
               commit_abort: np.ndarray, empty: np.ndarray, cep: np.ndarray, epoch: np.ndarray,
               from_offset: int, first_read: bool = False) -> tuple[np.ndarray, ...] | None:
    """What :func:`reduce_closed_in_read` keeps: (keep mask, positions among the kept rows of the
    rows carrying the folded counts, folded_txns and folded_max_epoch there); None: keep all.
    Per row: a marker, a span, its producer id and first offset, a COMMIT or ABORT marker, an
    EMPTY one, its coordinator epoch (float, NaN: none) and producer epoch; ``first_read`` as
    :func:`reduce_closed_in_read`'s."""
    eligible = first_offset >= from_offset
    # per (producer id, eligible) group, in row order (numpy: pandas' groupby cost ~2 ms a call);
    # lexsort is stable: row order within a group
    n = len(pid)
    order = stable_argsort(pid) if eligible.all() else np.lexsort((eligible, pid))
    g_pid, g_el = pid[order], eligible[order]
    new_g = np.ones(n, dtype=bool)
    new_g[1:] = (g_pid[1:] != g_pid[:-1]) | (g_el[1:] != g_el[:-1])
    starts = np.flatnonzero(new_g)
    group = np.cumsum(new_g) - 1  # group number of each sorted row

    def per_row(sorted_values: np.ndarray) -> np.ndarray:
        out_ = np.empty(n, dtype=sorted_values.dtype)
        out_[order] = sorted_values
        return out_

    counted = (is_m & eligible)[order].astype(np.int64)
    cum = np.cumsum(counted)
    before = (cum - counted)[starts]  # running count before each group
    ordinal = per_row(cum - before[group])  # markers (eligible) up to and including the row
    last = per_row(np.maximum.reduceat(ordinal[order], starts)[group])
    typed = commit_abort & (np.where(np.isnan(cep), -1, cep) >= 0)
    typed_ord = np.where(typed, ordinal, -1)
    last_typed = per_row(np.maximum.reduceat(typed_ord[order], starts)[group])
    # The span just before the last marker is kept too: the marker closes it, and the data epoch
    # it closed tells a bumped marker from one that was not (write-after-marker, detection.md §3.1
    # revision 3.1); it opens and closes within the read, so it changes nothing else.
    keep = ~eligible | (ordinal == last) | (typed & (ordinal == last_typed)) | (~is_m & (ordinal == last - 1))
    if not first_read:  # the first marker may close what an earlier read left open, with the span before it
        keep |= (ordinal == 0) | (is_m & (ordinal == 1))
    if keep.all():
        return None
    dropped = ~keep
    # per group (the dropped rows are all eligible, and so are the carriers: a group is one
    # producer's), the folded transactions (data rows) and highest producer epoch, where an EMPTY
    # control batch never raises the legacy abort's epoch (contract A): not folded in
    d_sorted = dropped[order]
    folds = np.logical_or.reduceat(d_sorted, starts)
    txns = np.add.reduceat((d_sorted & is_data[order]).astype(np.int64), starts)
    d_epoch = np.where(dropped & ~empty, epoch.astype(np.float64), -np.inf)
    epochs = np.fmax.reduceat(np.where(np.isnan(d_epoch), -np.inf, d_epoch)[order], starts)
    epochs[np.isneginf(epochs)] = np.nan  # only EMPTY markers dropped: no epoch (max of NaNs)
    g = per_row(group)[keep]
    carrier = np.flatnonzero(is_m[keep] & (ordinal[keep] == last[keep]) & eligible[keep] & folds[g])
    return keep, carrier, txns[g[carrier]], epochs[g[carrier]]


def txn_state_events(
    records: Iterable[dict[str, Any]],
    *,
    partition: int,
    source: str,
    cluster: str,
    event_time_ms: int,
    source_position: str | None = None,
    topic: str = "__transaction_state",
) -> pd.DataFrame:
    """One row per ``__transaction_state`` record with ``route_pid`` = its producer id (-1 for
    tombstones). Call :func:`route_coordinator_records` on the result before handing it to the
    state machine: that is what delivers a record to *every* producer id it concerns.
    """
    return to_frame(txn_state_rows(records, partition=partition, source=source, cluster=cluster,
                                   event_time_ms=event_time_ms, source_position=source_position, topic=topic))


def txn_state_rows(records: Iterable[dict[str, Any]], *, partition: int, source: str, cluster: str,
                   event_time_ms: int, source_position: str | None = None,
                   topic: str = "__transaction_state") -> list[dict[str, Any]]:
    """:func:`txn_state_events` as row dicts (untyped, for a caller that types a whole read once)."""
    rows = []
    prefix = source_position or f"{topic}-{partition}"
    for r in records:
        pid = r.get("producer_id")
        rows.append(make_row(
            "txn_state", source=source, cluster=cluster, topic=topic, partition=partition,
            route_pid=pid if pid is not None else -1,
            producer_id=pid, producer_epoch=r.get("producer_epoch"),
            first_offset=r["offset"], last_offset=r["offset"], first_ts=r.get("timestamp"),
            last_ts=r.get("timestamp"), coordinator_epoch=r.get("coordinator_epoch"),
            transactional_id=r.get("transactional_id"), tombstone=bool(r.get("tombstone")),
            txn_state=r.get("txn_state"), txn_partitions=r.get("txn_partitions"),
            txn_timeout_ms=r.get("txn_timeout_ms"), txn_start_ts=r.get("txn_start_ts"),
            txn_last_update_ts=r.get("txn_last_update_ts"), prev_producer_id=r.get("prev_producer_id"),
            next_producer_id=r.get("next_producer_id"), client_txn_version=r.get("client_txn_version"),
            event_time=event_time_ms, source_position=f"{prefix}@{r.get('position')}",
        ))
    return rows


def route_coordinator_records(events: pd.DataFrame, known: dict[str, int]) -> pd.DataFrame:
    """Fan ``txn_state`` rows out to every producer id they concern (DESIGN §6).

    A record for transactional id T goes to its own producer id and, when T was last mapped to
    another id P (``known``, or the v1 ``PreviousProducerId`` tag of 4.3+ coordinators), also to
    P, so P's state learns it was superseded (new InitProducerId after expiry, TV2 rotation). A
    tombstone goes to the id T was last mapped to. ``known`` (transactional id → last producer
    id) must cover T's history before ``events`` (sources re-read the coordinator partition from
    its start when they lack it) and is updated in place. Rows must be in offset order.
    """
    if events.empty:
        return events
    return to_frame(route_coordinator_rows(events.to_dict("records"), known))


def route_coordinator_rows(rows: list[dict[str, Any]], known: dict[str, int]) -> list[dict[str, Any]]:
    """:func:`route_coordinator_records` over row dicts (``txn_state_rows``), returning row dicts."""
    out = []
    for row in rows:
        tid = row["transactional_id"]
        before = known.get(tid)
        targets: list[int] = []
        if not row["tombstone"]:
            pid = int(row["producer_id"])
            targets.append(pid)
            prev = row.get("prev_producer_id")
            for other in (before, None if prev is None or pd.isna(prev) else int(prev)):
                if other is not None and other >= 0 and other not in targets:
                    targets.append(other)
            known[tid] = pid
        else:
            if before is not None:
                targets.append(before)
            known.pop(tid, None)
        if not targets:
            targets = [-1]  # a tombstone for an id never seen: nothing to tell anyone
        for t in targets:
            out.append({**row, "route_pid": t})
    return out


def snapshot_events(
    entries: Iterable[dict[str, Any]],
    *,
    topic: str,
    partition: int,
    snapshot_offset: int,
    source: str,
    cluster: str,
    event_time_ms: int,
    source_position: str | None = None,
    typed: bool = True,
) -> pd.DataFrame:
    """One row per producer snapshot entry (detection.md §1: seeds open transactions).
    ``typed=False``: as :func:`data_events`."""
    rows = snapshot_rows(entries, topic=topic, partition=partition, snapshot_offset=snapshot_offset, source=source,
                         cluster=cluster, event_time_ms=event_time_ms, source_position=source_position)
    return to_frame(rows) if typed else pd.DataFrame.from_records(rows)


def snapshot_rows(entries: Iterable[dict[str, Any]], *, topic: str, partition: int, snapshot_offset: int, source: str,
                  cluster: str, event_time_ms: int, source_position: str | None = None) -> list[dict[str, Any]]:
    """:func:`snapshot_events` as row dicts (``events.make_row``)."""
    rows = []
    for e in entries:
        first = e["current_txn_first_offset"]
        rows.append(make_row(
            "snapshot", source=source, cluster=cluster, topic=topic, partition=partition,
            route_pid=e["producer_id"], producer_id=e["producer_id"], producer_epoch=e["producer_epoch"],
            first_offset=first if first >= 0 else None,
            last_offset=e["last_offset"] if e["last_offset"] >= 0 else None,
            first_ts=e["timestamp"] if first >= 0 else None, last_ts=e["timestamp"],
            coordinator_epoch=e["coordinator_epoch"], snapshot_offset=snapshot_offset,
            event_time=event_time_ms, source_position=source_position,
        ))
    return rows


def progress_event(
    *,
    topic: str,
    partition: int,
    source: str,
    cluster: str,
    event_time_ms: int,
    high_watermark: int | None,
    lso: int | None,
    log_start_offset: int | None,
    source_position: str | None = None,
) -> dict[str, Any]:
    """The one progress row that ends every read of a partition."""
    return make_row("progress", source=source, cluster=cluster, topic=topic, partition=partition,
                    route_pid=-1, high_watermark=high_watermark, lso=lso, log_start_offset=log_start_offset,
                    event_time=event_time_ms, source_position=source_position)


def lso_passed_event(*, topic: str, partition: int, producer_id: int, lso: int, source: str, cluster: str,
                     event_time_ms: int) -> dict[str, Any]:
    """An ``lso_passed`` row (live source, probe mode): ``producer_id``'s probed transaction on the
    partition is closed, the LSO having moved to ``lso`` past it; delivered to that producer."""
    return make_row("lso_passed", source=source, cluster=cluster, topic=topic, partition=partition,
                    route_pid=producer_id, producer_id=producer_id, lso=lso, event_time=event_time_ms,
                    source_position=f"{topic}-{partition}@LSO {lso}")


def gap_event(
    error: DecodeError | str,
    *,
    topic: str | None,
    partition: int | None,
    source: str,
    cluster: str,
    event_time_ms: int,
    first_offset: int | None = None,
    last_offset: int | None = None,
) -> dict[str, Any]:
    """A ``gap`` row: unreadable or missing input, with the reason and where it was."""
    crc = isinstance(error, DecodeError) and error.crc
    if isinstance(error, DecodeError):
        reason = error.reason
        where = f"{error.source or (f'{topic}-{partition}' if topic else '<input>')}"
        where += f"@{error.position}" if error.unit == "byte" else f":{error.position}"
        if first_offset is None:
            first_offset = error.base_offset
    else:
        reason, where = error, None
    return make_row("gap", source=source, cluster=cluster, topic=topic, partition=partition, route_pid=-1,
                    first_offset=first_offset, last_offset=last_offset, reason=reason, source_position=where,
                    event_time=event_time_ms, crc_failed=True if crc else None)
