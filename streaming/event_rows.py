"""Events as the state function reads them: one tuple per event (an *event row*), in
:data:`ROW_FIELDS` order, with every integer field a Python ``int`` or None.

``ProducerState.apply`` reads an event's fields by position from such a row. Two ways produce
rows, with the same values:

* :func:`as_row` of an event mapping (a dict of ``state_machine.event_records``, or a test's
  hand-written dict): integer fields through the same int-or-None conversion the state machine
  applied to every read before (NaN and None are null), everything else as it is, except
  ``txn_partitions``, which becomes a list (pandas hands an ``array<string>`` cell over as a numpy
  array, whose truth value is an error);
* :func:`table_rows` of an Arrow table of the event schema (the in-process engine, straight from
  the source's Arrow batches, with no pandas frame and no dict per event): the rows grouped by
  ``route_pid``, column by column (``to_pylist`` builds each column's Python values in C).

A row holds only the fields the state function reads; passthrough rows (progress and gap,
``route_pid`` < 0) stay mappings with every field, as :func:`state_machine.event_records` makes them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from streaming.events import EVENT_FIELDS

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: The fields of an event row, in order (``event_time`` as ``event_time_ms``, epoch ms); the last,
#: ``coordinator``, is a tuple of :data:`COORDINATOR_FIELDS` on a ``txn_state`` row and None on
#: any other (only coordinator records read them: the rows of the other kinds stay short).
ROW_FIELDS: tuple[str, ...] = (
    "kind", "topic", "partition", "first_offset", "last_offset", "lso", "event_time_ms",
    "producer_epoch", "snapshot_offset", "read_from_zero", "first_ts", "last_ts",
    "batch_count", "record_count", "bytes", "marker", "coordinator_epoch", "folded_max_epoch",
    "source", "source_position", "coordinator",
)
(KIND, TOPIC, PARTITION, FIRST_OFFSET, LAST_OFFSET, LSO, EVENT_TIME_MS, PRODUCER_EPOCH, SNAPSHOT_OFFSET,
 READ_FROM_ZERO, FIRST_TS, LAST_TS, BATCH_COUNT, RECORD_COUNT, BYTES, MARKER, COORDINATOR_EPOCH,
 FOLDED_MAX_EPOCH, SOURCE, SOURCE_POSITION, COORDINATOR) = range(len(ROW_FIELDS))
COORDINATOR_FIELDS: tuple[str, ...] = (
    "producer_id", "transactional_id", "tombstone", "txn_state", "txn_start_ts", "txn_last_update_ts",
    "txn_partitions", "txn_timeout_ms", "client_txn_version",
)
TXN_PARTITIONS_AT = COORDINATOR_FIELDS.index("txn_partitions")

_TYPES = {**dict(EVENT_FIELDS), "event_time_ms": "long"}
#: per field of a row (then of its coordinator tuple): True when it is read as int-or-None
_IS_INT = tuple(_TYPES[n] in ("long", "int", "short") for n in ROW_FIELDS[:COORDINATOR])
_COORD_IS_INT = tuple(_TYPES[n] in ("long", "int", "short") for n in COORDINATOR_FIELDS)


class EventRecord(dict):
    """An event as :func:`state_machine.event_records` gives it: a dict whose absent fields read as None (null),
    so that a field null in every row of a kind need not be stored in each of its dicts."""

    def __missing__(self, key: str) -> None:
        return None


def to_int(v: Any) -> int | None:
    """Int or None from an event cell (NA/NaN → None): what the state machine reads an integer
    field as, whatever frame or dict it came from."""
    if v.__class__ is int:  # the common case: event_records gives Python ints
        return v
    if v is None:
        return None
    try:
        if isinstance(v, float) and math.isnan(v):
            return None
        return int(v)
    except (TypeError, ValueError):
        return None


def as_row(ev: Mapping[str, Any]) -> tuple:
    """The event row of an event mapping (absent fields are null; ``kind`` is required)."""
    get = ev.get
    kind = ev["kind"]
    row: list[Any] = [kind]
    for name, is_int in zip(ROW_FIELDS[1:COORDINATOR], _IS_INT[1:], strict=True):
        v = get(name)
        row.append(to_int(v) if is_int else v)
    coord = None
    if kind == "txn_state":
        vals = [to_int(get(n)) if is_int else get(n) for n, is_int in zip(COORDINATOR_FIELDS, _COORD_IS_INT, strict=True)]
        tp = vals[TXN_PARTITIONS_AT]
        if tp is not None and tp.__class__ is not list:
            vals[TXN_PARTITIONS_AT] = list(tp)
        coord = tuple(vals)
    row.append(coord)
    return tuple(row)


def as_rows(events: Iterable[tuple | Mapping[str, Any]]) -> list[tuple]:
    """``events`` as event rows: rows kept as they are, mappings through :func:`as_row`."""
    events = events if isinstance(events, list) else list(events)
    if set(map(type, events)) <= {tuple}:  # all rows already (one C pass, no Python per event)
        return events
    return [e if type(e) is tuple else as_row(e) for e in events]


#: the event time of an event row
event_time_of = itemgetter(EVENT_TIME_MS)


def _ms(raw: Any, unit: str) -> Any:
    """Epoch ms of timestamps counted in ``unit`` (ints or a numpy array), floored, as the frame
    path's ``datetime64[ms]`` cast of a later time does."""
    if unit == "s":
        return raw * 1000
    return raw // {"ms": 1, "us": 1000, "ns": 1_000_000}[unit]


#: String fields with a few distinct values: each distinct value becomes one shared, interned
#: ``str`` (a comparison with a literal is then an identity test and its hash is computed once),
#: through a dictionary encoding instead of one new ``str`` per row.
_SHARED = frozenset({"kind", "topic", "marker", "source", "txn_state"})


def _pylist(col: pa.ChunkedArray, shared: bool = False) -> list[Any] | None:
    """A column's Python values (None for null); None when every value is null. Timestamps become
    epoch ms; ``shared``: see :data:`_SHARED`."""
    import numpy as np
    import pyarrow as pa

    if col.null_count == len(col):
        return None
    if pa.types.is_timestamp(col.type):
        raw = col.cast(pa.int64())
        ms = _ms(raw.fill_null(0).to_numpy(), col.type.unit)
        if not raw.null_count and ms.min() == ms.max():
            return [int(ms[0])] * len(ms)  # one clock for the whole read (files: --as-of)
        out = ms.astype(object)
        if raw.null_count:
            out[raw.is_null().to_numpy(zero_copy_only=False)] = None
        return out.tolist()
    if shared and pa.types.is_string(col.type):
        enc = col.combine_chunks().dictionary_encode()
        values = np.array([sys.intern(v) for v in enc.dictionary.to_pylist()] + [None], dtype=object)
        return values[enc.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)].tolist()
    return col.to_pylist()


def _coordinator_column(table: pa.Table, n: int) -> list[tuple | None]:
    """The ``coordinator`` field of every row: a tuple on the ``txn_state`` rows, None elsewhere.
    Only those rows' cells are converted (to_pylist gives each array<string> cell as a list)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    out: list[tuple | None] = [None] * n
    at = np.flatnonzero(pc.equal(table.column("kind"), "txn_state").fill_null(False).to_numpy(zero_copy_only=False))
    if not len(at):
        return out
    sub = table.select([c for c in COORDINATOR_FIELDS if c in table.column_names]).take(pa.array(at))
    cols = [_pylist(sub.column(c), c in _SHARED) or [None] * len(at) if c in sub.column_names else [None] * len(at)
            for c in COORDINATOR_FIELDS]
    for i, coord in zip(at.tolist(), zip(*cols, strict=True), strict=True):
        out[i] = coord
    return out


def table_rows(table: pa.Table) -> tuple[dict[int, list[Any]], int | None]:
    """An Arrow table of the event schema → (the events per ``route_pid``, in table order: event
    rows for a producer id >= 0, mappings with every field (``event_time`` as ``event_time_ms``,
    as :func:`state_machine.event_records` gives them) for the passthrough keys < 0; the newest
    ``event_time`` in epoch ms, or None). Rows with a null ``route_pid`` are dropped, as a groupby
    drops null keys."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    if n == 0:
        return {}, None
    newest = None
    if "event_time" in table.column_names:
        et = table.column("event_time")
        top = pc.max(et.cast(pa.int64()))
        if top.is_valid:
            newest = int(_ms(top.as_py(), et.type.unit))
    route = table.column("route_pid")
    pids = route.fill_null(0).to_numpy()
    valid = route.is_valid().to_numpy(zero_copy_only=False) if route.null_count else np.ones(n, dtype=bool)
    by_pid: dict[int, list[Any]] = {}
    for sel, as_rows in ((valid & (pids < 0), False), (valid & (pids >= 0), True)):
        idx = np.flatnonzero(sel)
        if not len(idx):
            continue
        if as_rows:
            # every row's tuple (the few passthrough and null-key rows too: cheaper than taking
            # the rest out of each column first), then the keyed ones picked by index below
            none = [None] * n  # a field null in every row is not converted
            cols: list[Any] = []
            for name in ROW_FIELDS[:COORDINATOR]:
                src = "event_time" if name == "event_time_ms" else name
                c = _pylist(table.column(src), src in _SHARED) if src in table.column_names else None
                cols.append(none if c is None else c)
            cols.append(_coordinator_column(table, n))
            recs: list[Any] = list(zip(*cols, strict=True))
        else:
            sub = table.take(pa.array(idx))
            names = ["event_time_ms" if c == "event_time" else c for c in sub.column_names]
            cols = [_pylist(sub.column(c)) for c in sub.column_names]
            keep = [i for i, c in enumerate(cols) if c is not None]
            knames = [names[i] for i in keep]
            recs = [EventRecord(zip(knames, r, strict=True)) for r in zip(*(cols[i] for i in keep), strict=True)]
            idx = np.arange(len(idx))
        # one stable sort by producer id (numpy), then one slice per producer
        keys = pids[np.flatnonzero(sel)]
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        picked = idx[order].tolist()
        recs = list(itemgetter(*picked)(recs)) if len(picked) > 1 else [recs[picked[0]]]
        cuts = (np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist()
        starts, ends = [0, *cuts], [*cuts, len(recs)]
        for pid, s, e in zip(keys[starts].tolist(), starts, ends, strict=True):
            by_pid[pid] = recs[s:e]
    return by_pid, newest
