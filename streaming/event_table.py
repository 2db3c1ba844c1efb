"""Event rows gathered column by column and handed on as one Arrow batch (DESIGN §9: Arrow
batches out of the source, no Python object per record on the hot path). No Spark.

A reader of many partitions (the ``segments`` source's task: a group of partitions, read one by
one) collects every read into one :class:`EventTable` and yields :meth:`EventTable.to_arrow`,
instead of a pandas frame per piece, a ``pd.concat`` per partition and per group, and the typing
of the concatenation. The batch is the one ``events.to_arrow(pd.concat(frames))`` gives for the
untyped frames the pandas path builds from the same rows (same columns, types, values and row
order): a column a part lacks is null there, NaN in a float column and None/NaN/NA in an object
column are null, ``event_time`` is epoch milliseconds.

A part is either a column dict (``add_columns``: numpy or Arrow arrays of one length, or scalars
meaning "this value on every row of the part") or row dicts (``add_rows``: gap, progress, coordinator and
snapshot rows, a few per read). A table made with ``rows_last=True`` keeps the row dicts apart and
types them as one part after every column part: the order the ``kafka`` source's batches always
had (a group's spans and markers, then its gap, progress and coordinator rows), and one typing
pass for the rows of thousands of partitions instead of one per partition.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from streaming.events import EVENT_FIELDS, arrow_schema

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

_NUMERIC = {"long": np.int64, "int": np.int64, "short": np.int64}


class EventTable:
    """Untyped event rows of many reads, in the order added, typed once into Arrow."""

    def __init__(self, rows_last: bool = False) -> None:
        self._parts: list[tuple[int, dict[str, Any]]] = []
        self._rows: list[dict[str, Any]] | None = [] if rows_last else None
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add_columns(self, n: int, cols: dict[str, Any]) -> None:
        """``n`` rows given as columns: arrays of length ``n`` or scalars (one value for all)."""
        if n:
            self._parts.append((n, cols))
            self._n += n

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        """Row dicts (``events.make_row`` or a subset of its fields; a missing field is null)."""
        if not rows:
            return
        if self._rows is not None:
            self._rows += rows
            self._n += len(rows)
            return
        self.add_columns(len(rows), _row_columns(rows))

    def to_arrow(self) -> pa.RecordBatch:
        """Every row as one record batch with ``events.arrow_schema()``."""
        import pyarrow as pa

        schema = arrow_schema()
        parts = self._parts
        if self._rows:
            parts = [*parts, (len(self._rows), _row_columns(self._rows))]
        arrays = []
        for (name, typ), f in zip(EVENT_FIELDS, schema, strict=True):
            values = [(n, cols.get(name)) for n, cols in parts]
            if all(v is None for _, v in values):
                arrays.append(pa.nulls(self._n, f.type))
            elif typ in ("string", "array<string>"):
                arrays.append(_objects(values, f.type, pa))
            else:
                arrays.append(_numbers(values, typ, f.type, pa))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _row_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Row dicts as columns; a field None on every row is left out (null all the same: a row of
    ``events.make_row`` has every field, most of them None). Transposed by C loops (itemgetter,
    zip): the live source's group has thousands of progress rows per trigger."""
    names = list(dict.fromkeys(itertools.chain.from_iterable(rows)))
    if not rows or not names:
        return {}
    try:
        if len(names) == 1:
            cols = {names[0]: [r[names[0]] for r in rows]}
        else:  # every row has every field (make_row's rows): one tuple per row, transposed
            cols = dict(zip(names, map(list, zip(*map(operator.itemgetter(*names), rows), strict=True)),
                            strict=True))
    except KeyError:
        cols = {k: [r.get(k) for r in rows] for k in names}
    return {k: col for k, col in cols.items() if any(map(operator.is_not, col, itertools.repeat(None)))}


def _is_null(v: Any) -> bool:
    """None, NaN and pandas' NA (what ``pd.isna`` calls null for a scalar)."""
    if v is None:
        return True
    if isinstance(v, float):
        return math.isnan(v)
    return type(v).__name__ == "NAType"


def _objects(values: list[tuple[int, Any]], pa_type: Any, pa: Any) -> Any:
    """A string (or list of strings) column from the parts' arrays (numpy or Arrow), lists and
    scalars. None, NaN and NA are null (``from_pandas``); a list cell stays one cell."""
    if all(not isinstance(v, (np.ndarray, list, pa.Array)) for _, v in values) and pa_type == pa.string():
        # one value per part (topic, source, cluster, ...): a dictionary array, decoded once
        uniq: dict[Any, int] = {}
        codes = np.array([-1 if _is_null(v) else uniq.setdefault(v, len(uniq)) for _, v in values], dtype=np.int32)
        idx = np.repeat(codes, [n for n, _ in values])
        dictionary = pa.array(list(uniq), type=pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(idx, mask=idx < 0), dictionary).cast(pa.string())
    # each part typed by Arrow on its own (a scalar repeated by Arrow, not as n Python references)
    parts = [_arrow_part(n, v, pa_type, pa) for n, v in values]
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _object_cells(v: list[Any]) -> np.ndarray:
    """``v`` as a 1-d object array, element by element (a list value must stay one cell)."""
    a = np.empty(len(v), dtype=object)
    for i, x in enumerate(v):
        a[i] = x
    return a


def _arrow_part(n: int, v: Any, pa_type: Any, pa: Any) -> Any:
    """One part's cells of a string column as an Arrow array of ``pa_type``."""
    if isinstance(v, pa.Array):
        return v if v.type == pa_type else v.cast(pa_type)
    if isinstance(v, np.ndarray):
        return pa.array(v, type=pa_type, from_pandas=True)
    if isinstance(v, list):
        # a plain string column straight from the list (the same conversion); a list column's
        # cells are lists themselves and must not become a 2-d array on the way
        cells = v if pa_type == pa.string() else _object_cells(v)
        return pa.array(cells, type=pa_type, from_pandas=True)
    if _is_null(v):
        return pa.nulls(n, pa_type)
    return pa.repeat(pa.scalar(v, type=pa_type), n)


def _numbers(values: list[tuple[int, Any]], typ: str, pa_type: Any, pa: Any) -> Any:
    """An integer, boolean or timestamp column from the parts' arrays (numpy or Arrow), lists and
    scalars."""
    import pandas as pd

    target = np.bool_ if typ == "bool" else np.int64
    if not any(isinstance(v, (np.ndarray, list, pa.Array)) for _, v in values):
        # one value per part (partition, event time, stamps): repeated, nulls masked
        null = np.array([_is_null(v) for _, v in values])
        lengths = [n for n, _ in values]
        vals = np.repeat(np.array([False if m else v for (_, v), m in zip(values, null.tolist(), strict=True)]),
                         lengths)
        return _typed(vals, typ, pa_type, pa, np.repeat(null, lengths) if null.any() else None)
    chunks, masks = [], []
    for n, v in values:
        if isinstance(v, list):
            plain = _plain_list(v, typ)
            if plain is not None:  # ints (bools) and None only: what Arrow's converter gives, without it
                chunks.append(plain[0])
                masks.append(plain[1])
                continue
            v = _list_array(v, typ, pa)
        if isinstance(v, list):
            mask = np.fromiter((_is_null(x) for x in v), bool, n)
            vals = np.array([False if m else x for x, m in zip(v, mask.tolist(), strict=True)], dtype=object)
            chunks.append(_exact(vals, target))
            masks.append(mask)
        elif isinstance(v, pa.Array):  # one value per read taken per row (partition_read.data_reads_events)
            chunks.append(v.fill_null(False if typ == "bool" else 0).to_numpy(zero_copy_only=False))
            masks.append(v.is_null().to_numpy(zero_copy_only=False) if v.null_count else None)
        elif isinstance(v, np.ndarray):
            if v.dtype == object:
                mask = pd.isna(v)
                vals = np.zeros(n, dtype=target)
                if not mask.all():
                    vals[~mask] = _exact(v[~mask], target)
                chunks.append(vals)
                masks.append(mask)
            elif v.dtype.kind == "f":
                mask = np.isnan(v)
                chunks.append(_exact(np.where(mask, 0.0, v), target))
                masks.append(mask)
            else:
                chunks.append(v)
                masks.append(None)
        elif _is_null(v):
            chunks.append(np.zeros(n, dtype=target))
            masks.append(np.ones(n, dtype=bool))
        else:
            chunks.append(np.full(n, v))
            masks.append(None)
    vals = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    mask = None
    if any(m is not None for m in masks):
        mask = np.concatenate([np.zeros(n, dtype=bool) if m is None else m
                               for (n, _), m in zip(values, masks, strict=True)])
    return _typed(vals, typ, pa_type, pa, mask)


def _plain_list(v: list[Any], typ: str) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(values, null mask or None) of a list holding only ``int`` (``bool`` for a bool column) and
    None, as the Arrow path gives them (``_list_array``, then ``fill_null`` and ``to_numpy``);
    None for any other list (left to that path). Why: every read adds a few row dicts (progress,
    coordinator rows), so a table has thousands of one-row list parts, and Arrow's converter plus
    three Arrow calls cost ~25 us each where this costs ~2 us."""
    want = bool if typ == "bool" else int
    classes = set(map(type, v))
    if not classes <= {want, type(None)}:
        return None
    mask = None
    if type(None) in classes:
        mask = np.fromiter(map(operator.is_, v, itertools.repeat(None)), bool, len(v))
        fill = False if want is bool else 0
        v = [fill if x is None else x for x in v]
    try:
        return np.array(v, dtype=np.bool_ if want is bool else np.int64), mask
    except OverflowError:  # beyond int64: the Arrow path raises its own error
        return None


def _list_array(v: list[Any], typ: str, pa: Any) -> Any:
    """A list of Python values (ints, bools, None, NaN, NA) as an int64 or bool Arrow array by
    Arrow's own converter (None, NaN and NA null); the list itself when Arrow refuses a value
    (a bool in an int column, an int in a bool one, a fraction, an overflow), which the element
    by element path then converts, or refuses, as before."""
    try:
        return pa.array(v, type=pa.bool_() if typ == "bool" else pa.int64(), from_pandas=True)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return v


def _typed(vals: np.ndarray, typ: str, pa_type: Any, pa: Any, mask: np.ndarray | None) -> Any:
    if typ == "timestamp":
        vals = vals.astype(np.int64) * 1000  # epoch ms -> us
    elif typ == "bool":
        vals = vals.astype(bool)
    elif vals.dtype.kind not in "iu":
        vals = _exact(vals, np.int64)
    return pa.array(vals, type=pa_type, mask=mask)  # safe cast: an overflow raises


def _exact(v: np.ndarray, target: Any) -> np.ndarray:
    """``v`` as ``target`` values; a fractional number raises as pandas' ``astype("Int64")`` does."""
    if target is np.bool_:
        return v.astype(bool)
    if v.dtype == object:
        v = np.array(v.tolist())
    if v.dtype.kind == "f":
        if not np.array_equal(v, np.trunc(v)):
            raise TypeError("cannot safely cast non-equivalent float64 to int64")
        return v.astype(np.int64)
    return v.astype(np.int64) if v.dtype.kind == "b" else v
