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
    """Spans and markers of one read of a data partition (DESIGN §4-§5).

    Spans: per producer id, the transactional data batches between two of its control batches
    are collapsed into one row. Batches whose CRC is known bad are left out (the caller emits a
    gap for them). Non-transactional batches (plain or idempotent) never produce a row.

    ``reduce_from``: fold the transactions that open and close within this read, among rows at
    or after this offset, with :func:`reduce_closed_in_read` (None: keep every row).
    ``typed=False``: leave the columns untyped (``event_time`` in ms) for a caller that types the
    whole read once (:func:`streaming.events.to_frame`).
    """
    n = len(cols["base_offset"])
    if n == 0:
        return to_frame([])
    keep = cols["is_transactional"] & (cols["producer_id"] >= 0) & (cols["crc_valid"] != 0)
    if not keep.any():
        return to_frame([])
    df = pd.DataFrame({k: cols[k][keep] for k in (
        "base_offset", "last_offset", "batch_size", "first_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "record_count", "is_control", "control_type", "coordinator_epoch", "position")})
    # Dumps of 0.11-1.1 do not print the record count (-1) nor the size (0): count nothing then.
    df["empty"] = df["record_count"] == 0
    df["record_count"] = df["record_count"].clip(lower=0)
    # A span ends at the producer's next control batch: number the stretches between markers.
    df["stretch"] = df.groupby("producer_id")["is_control"].cumsum()
    data = df[~df["is_control"]]
    frames = []
    if len(data):
        g = data.groupby(["producer_id", "stretch"], sort=False)
        spans = g.agg(
            first_offset=("base_offset", "first"),
            last_offset=("last_offset", "last"),
            first_ts=("first_timestamp", "first"),
            last_ts=("max_timestamp", "max"),
            producer_epoch=("producer_epoch", "max"),
            batch_count=("base_offset", "size"),
            record_count=("record_count", "sum"),
            bytes=("batch_size", "sum"),
            empty_batches=("empty", "sum"),
            first_position=("position", "first"),
        ).reset_index()
        spans["kind"] = "data"
        spans["route_pid"] = spans["producer_id"]
        frames.append(spans)
    markers = df[df["is_control"]]
    if len(markers):
        m = pd.DataFrame({
            "kind": "marker",
            "producer_id": markers["producer_id"].to_numpy(),
            "route_pid": markers["producer_id"].to_numpy(),
            "producer_epoch": markers["producer_epoch"].to_numpy(),
            "first_offset": markers["base_offset"].to_numpy(),
            "last_offset": markers["base_offset"].to_numpy(),
            "first_ts": markers["max_timestamp"].to_numpy(),
            "last_ts": markers["max_timestamp"].to_numpy(),
            "batch_count": 1,
            "record_count": markers["record_count"].to_numpy(),
            "bytes": markers["batch_size"].to_numpy(),
            "empty_batches": markers["empty"].astype(int).to_numpy(),
            "marker": [control_name(c) for c in markers["control_type"].tolist()],
            "coordinator_epoch": markers["coordinator_epoch"].to_numpy(),
            "first_position": markers["position"].to_numpy(),
        })
        frames.append(m)
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values(["first_offset"], kind="stable").reset_index(drop=True)
    if reduce_from is not None:
        out = reduce_closed_in_read(out, reduce_from)
    out["topic"] = topic
    out["partition"] = partition
    out["source"] = source
    out["cluster"] = cluster
    out["event_time"] = event_time_ms
    prefix = source_position or f"{topic}-{partition}"
    out["source_position"] = [position_format.format(prefix=prefix, pos=p) for p in out["first_position"].tolist()]
    out = out.drop(columns=["first_position", "stretch"], errors="ignore")
    return to_frame(out) if typed else out


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
    * the span after the last marker (open at the end of the read; its preceding marker is the
      last marker, which write-after-marker needs).

    The spans and markers between the first and the last marker are transactions that opened
    and closed within the read: no later event can reopen them, so the state only needs their
    number (``folded_txns``) and highest producer epoch (``folded_max_epoch``, EMPTY markers
    left out as the state leaves them out), both carried by the last marker's row.
    """
    if rows.empty:
        return rows
    is_m = (rows["kind"] == "marker").to_numpy()
    if is_m.sum() < 3:
        return rows  # folding needs a marker between the first and the last one
    pid = rows["producer_id"].to_numpy()
    eligible = (rows["first_offset"] >= from_offset).to_numpy()
    ordinal = pd.Series(is_m & eligible).groupby([pid, eligible]).cumsum().to_numpy()
    last = pd.Series(ordinal).groupby([pid, eligible]).transform("max").to_numpy()
    typed = is_m & rows["marker"].isin(["COMMIT", "ABORT"]).to_numpy() & \
        (rows["coordinator_epoch"].fillna(-1).to_numpy() >= 0)
    typed_ord = np.where(typed, ordinal, -1)
    last_typed = pd.Series(typed_ord).groupby([pid, eligible]).transform("max").to_numpy()
    keep = ~eligible | (ordinal == 0) | (ordinal == last) | (is_m & (ordinal == 1)) | \
        (typed & (ordinal == last_typed))
    if keep.all():
        return rows
    dropped = rows[~keep]
    # an EMPTY control batch never raises the legacy abort's epoch (contract A): not folded in
    epochs = dropped["producer_epoch"].where(dropped["marker"] != "EMPTY")
    folded = pd.DataFrame({"producer_id": dropped["producer_id"], "data": dropped["kind"] == "data",
                           "epoch": epochs}).groupby("producer_id").agg(
        folded_txns=("data", "sum"), folded_max_epoch=("epoch", "max"))
    out = rows[keep].copy()
    carrier = is_m[keep] & (ordinal[keep] == last[keep]) & eligible[keep] & out["producer_id"].isin(folded.index).to_numpy()
    carriers = out.index[carrier]
    by_pid = folded.reindex(out.loc[carriers, "producer_id"].to_numpy())
    out["folded_txns"] = pd.NA
    out["folded_max_epoch"] = pd.NA
    out.loc[carriers, "folded_txns"] = by_pid["folded_txns"].to_numpy()
    out.loc[carriers, "folded_max_epoch"] = by_pid["folded_max_epoch"].to_numpy()
    return out.reset_index(drop=True)


def reduce_coordinator_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``__transaction_state`` records of one read that the state needs, in offset order.

    A record only replaces what the state knows of its transactional id, so within a run of
    records of one id with the same producer id and ``prev_producer_id`` (no tombstone between)
    the last one says it all, and the first one is the routing event (a new producer id: the old
    one learns it was superseded, ``route_coordinator_records``). Kept: every tombstone, the
    first and last record of every run, and, for records without TransactionStartTimestampMs
    (text dumps before 4.1), each record that moved its id to Ongoing: the state infers the
    transaction's start from it. ``partitionLeaderEpoch`` only grows along a partition, so the
    last record of a run also carries the run's highest coordinator epoch.
    """
    n = len(records)
    keep = [False] * n
    prev_key: dict[Any, Any] = {}
    prev_state: dict[Any, Any] = {}
    run_keys = []
    for i, r in enumerate(records):
        tid = r["transactional_id"]
        key = None if r["tombstone"] else (r.get("producer_id"), r.get("prev_producer_id"))
        run_keys.append(key)
        state = None if r["tombstone"] else r.get("txn_state")
        if key is None or prev_key.get(tid, ()) != key:
            keep[i] = True
        elif state == "Ongoing" and r.get("txn_start_ts") is None and prev_state.get(tid) != "Ongoing":
            keep[i] = True
        prev_key[tid] = key
        prev_state[tid] = state
    next_key: dict[Any, Any] = {}
    for i in range(n - 1, -1, -1):
        tid = records[i]["transactional_id"]
        if next_key.get(tid, ()) != run_keys[i]:
            keep[i] = True
        next_key[tid] = run_keys[i]
    return [r for r, k in zip(records, keep, strict=True) if k]


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
    return to_frame(rows) if typed else pd.DataFrame.from_records(rows)


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
                    event_time=event_time_ms)
