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
from udfs.model import DecodeError, control_name
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
    typed: bool = True,
) -> pd.DataFrame:
    """Spans and markers of one read of a data partition (DESIGN §4-§5): :func:`data_event_columns`
    as a frame.

    Spans: per producer id, the transactional data batches between two of its control batches
    are collapsed into one row. Batches whose CRC is known bad are left out (the caller emits a
    gap for them). Non-transactional batches (plain or idempotent) never produce a row.

    ``reduce_from``: fold the transactions that open and close within this read, among rows at
    or after this offset, with :func:`reduce_closed_in_read` (None: keep every row).
    ``typed=False``: leave the columns untyped (``event_time`` in ms) for a caller that types the
    whole read once (:func:`streaming.events.to_frame`).
    """
    final = data_event_columns(cols, topic=topic, partition=partition, source=source, cluster=cluster,
                               event_time_ms=event_time_ms, source_position=source_position,
                               position_format=position_format, reduce_from=reduce_from)
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
) -> dict[str, Any] | None:
    """The rows of :func:`data_events` as columns (None: no row): numpy arrays (``source_position``:
    an Arrow string array), and scalars for the values every row has (topic, partition, source,
    cluster, event time in ms), for a caller
    that gathers many reads column by column (:class:`streaming.event_table.EventTable`).
    A column is float (NaN: null) or object (NaN: null) where the spans or the markers lack it."""
    got = data_event_arrays(cols, reduce_from=reduce_from)
    if got is None:
        return None
    out, _ = got
    prefix = source_position or f"{topic}-{partition}"
    final: dict[str, Any] = {k: v for k, v in out.items() if k not in ("first_position", "stretch")}
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
    """The spans and markers of :func:`data_event_columns` as numpy columns (``first_position``:
    the batch position a row's ``source_position`` names), None when there is no row.

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
        spans = _spans(c, is_ctrl, group, key)
        spans["kind"] = np.full(len(spans["producer_id"]), "data", dtype=object)
        spans["route_pid"] = spans["producer_id"]
        parts.append(spans)
    if is_ctrl.any():
        m = {k: v[is_ctrl] for k, v in c.items()}
        markers = {
            "kind": np.full(len(m["producer_id"]), "marker", dtype=object),
            "producer_id": m["producer_id"],
            "route_pid": m["producer_id"],
            "producer_epoch": m["producer_epoch"],
            "first_offset": m["base_offset"],
            "last_offset": m["base_offset"],
            "first_ts": m["max_timestamp"],
            "last_ts": m["max_timestamp"],
            "batch_count": np.ones(len(m["producer_id"]), dtype=np.int64),
            "record_count": m["record_count"],
            "bytes": m["batch_size"],
            "empty_batches": m["empty"].astype(np.int64),
            "marker": _control_names(m["control_type"]),
            "coordinator_epoch": m["coordinator_epoch"],
            "first_position": m["position"],
        }
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
        group_of = None if key is None else _pair_rank(out["read_key"], out["producer_id"])
        out = _reduce_arrays(out, reduce_from, group_of) or out
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


def _spans(c: dict[str, np.ndarray], is_ctrl: np.ndarray, group: np.ndarray,
           key: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """One row per producer id and stretch between two of its control batches (a span), in order
    of each span's first batch: the data batches' first/last offsets, first timestamp, max
    timestamp and epoch, counts and sums. The same columns (and dtypes) as

        df["stretch"] = df.groupby("producer_id")["is_control"].cumsum()
        df[~df["is_control"]].groupby(["producer_id", "stretch"], sort=False).agg(...).reset_index()

    computed with numpy (pandas' groupby machinery cost ~20 ms per read, whatever its size).
    ``group``: the producer's label (its id, or its rank among the (read, id) pairs of several
    reads: :func:`data_event_arrays`); ``key``: each batch's read, carried as ``read_key``.
    """
    pid = group
    n = len(pid)
    # stretch: the number of the producer's control batches before (and at) each batch
    by_pid = np.lexsort((np.arange(n), pid))
    ctrl_sorted = is_ctrl[by_pid].astype(np.int64)
    cum = np.cumsum(ctrl_sorted)
    new_pid = np.ones(n, dtype=bool)
    new_pid[1:] = pid[by_pid][1:] != pid[by_pid][:-1]
    start_of = np.maximum.accumulate(np.where(new_pid, np.arange(n), 0))
    stretch_sorted = cum - (cum[start_of] - ctrl_sorted[start_of])
    stretch = np.empty(n, dtype=np.int64)
    stretch[by_pid] = stretch_sorted
    rows = np.flatnonzero(~is_ctrl)
    sorted_rows = rows[np.lexsort((rows, stretch[rows], pid[rows]))]  # by group, file order within one
    g_pid, g_st = pid[sorted_rows], stretch[sorted_rows]
    first = np.ones(len(sorted_rows), dtype=bool)
    first[1:] = (g_pid[1:] != g_pid[:-1]) | (g_st[1:] != g_st[:-1])
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(sorted_rows)) - 1
    first_row, last_row = sorted_rows[starts], sorted_rows[ends]
    appear = np.argsort(first_row, kind="stable")  # groups in order of their first batch (sort=False)

    def agg(values: np.ndarray, fn: Any) -> np.ndarray:
        # in the column's dtype, as pandas' groupby sum/max (numpy would widen int32 sums)
        return fn.reduceat(values[sorted_rows], starts, dtype=values.dtype)[appear]

    first_row, last_row = first_row[appear], last_row[appear]
    out = {
        "producer_id": c["producer_id"][first_row],
        "stretch": stretch[first_row],
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


def reduce_closed_in_read(rows: pd.DataFrame, from_offset: int = 0) -> pd.DataFrame:
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
    """
    if rows.empty:
        return rows
    plan = _reduce_plan({k: rows[k].to_numpy() for k in (
        "kind", "producer_id", "first_offset", "marker", "coordinator_epoch", "producer_epoch") if k in rows}, from_offset)
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


def _reduce_arrays(rows: dict[str, np.ndarray], from_offset: int,
                   group: np.ndarray | None = None) -> dict[str, np.ndarray] | None:
    """:func:`reduce_closed_in_read` on columns (None: nothing to drop); ``group``: the
    producer's label when the rows are several reads' (:func:`data_event_arrays`)."""
    plan = _reduce_plan(rows, from_offset, group)
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


def _reduce_plan(rows: dict[str, np.ndarray], from_offset: int,
                 group: np.ndarray | None = None) -> tuple[np.ndarray, ...] | None:
    """What :func:`reduce_closed_in_read` keeps: (keep mask, positions among the kept rows of the
    rows carrying the folded counts, folded_txns and folded_max_epoch there); None: keep all.
    ``group`` stands for the producer id where one id may appear in several reads (its values
    are only compared, never reported)."""
    if "marker" not in rows:
        return None  # no markers
    is_m = rows["kind"] == "marker"
    if is_m.sum() < 3:
        return None  # folding needs a marker between the first and the last one
    pid = rows["producer_id"] if group is None else group
    eligible = rows["first_offset"] >= from_offset
    # per (producer id, eligible) group, in row order (numpy: pandas' groupby cost ~2 ms a call)
    n = len(pid)
    order = np.lexsort((np.arange(n), eligible, pid))
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
    marker = rows["marker"]
    cep = rows["coordinator_epoch"].astype(np.float64)
    typed = is_m & ((marker == "COMMIT") | (marker == "ABORT")) & (np.where(np.isnan(cep), -1, cep) >= 0)
    typed_ord = np.where(typed, ordinal, -1)
    last_typed = per_row(np.maximum.reduceat(typed_ord[order], starts)[group])
    # The span just before the last marker is kept too: the marker closes it, and the data epoch
    # it closed tells a bumped marker from one that was not (write-after-marker, detection.md §3.1
    # revision 3.1); it opens and closes within the read, so it changes nothing else.
    keep = ~eligible | (ordinal == 0) | (ordinal == last) | (is_m & (ordinal == 1)) | \
        (typed & (ordinal == last_typed)) | (~is_m & (ordinal == last - 1))
    if keep.all():
        return None
    dropped = ~keep
    # an EMPTY control batch never raises the legacy abort's epoch (contract A): not folded in
    d_pid = pid[dropped]
    d_data = (rows["kind"] == "data")[dropped]
    d_epoch = np.where((marker != "EMPTY")[dropped], rows["producer_epoch"][dropped].astype(np.float64), np.nan)
    f_pid, f_at = np.unique(d_pid, return_inverse=True)
    f_txns = np.bincount(f_at, weights=d_data, minlength=len(f_pid)).astype(np.int64)
    f_epoch = np.full(len(f_pid), -np.inf)
    np.fmax.at(f_epoch, f_at, np.where(np.isnan(d_epoch), -np.inf, d_epoch))
    f_epoch[np.isneginf(f_epoch)] = np.nan  # only EMPTY markers dropped: no epoch (max of NaNs)
    k_pid = pid[keep]
    carrier = np.flatnonzero(is_m[keep] & (ordinal[keep] == last[keep]) & eligible[keep] & np.isin(k_pid, f_pid))
    at = np.searchsorted(f_pid, k_pid[carrier])
    return keep, carrier, f_txns[at], f_epoch[at]


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
