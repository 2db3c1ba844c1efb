"""The one event schema every source emits (DESIGN §5).

Sources (``kafka``, ``segments``, ``dumps``) all turn what they read into rows of this schema;
the state machine consumes nothing else. The field list is plain Python so that the pure
decoders can build rows without importing Spark; :func:`spark_schema` and :func:`arrow_schema`
derive the Spark and Arrow types from it.

Kinds:

``data``
    A *span*: consecutive transactional data batches of one producer id on one partition within
    one read, up to (not across) that producer's next control batch. ``first_offset`` is the
    ``baseOffset`` of the first batch, ``last_offset`` the last offset of the last batch;
    ``first_ts``/``last_ts`` are the first batch's first timestamp (``baseTimestamp``, or
    ``maxTimestamp`` for LogAppendTime / delete-horizon batches) and the last batch's
    ``maxTimestamp``; ``producer_epoch`` is the highest epoch in the span; ``batch_count``,
    ``record_count`` (header counts) and ``bytes`` (on-disk batch sizes) are sums;
    ``empty_batches`` counts batches with ``recordsCount = 0`` (compacted topics).
    Non-transactional batches never produce events.
``marker``
    One control batch of a data partition: ``marker`` is COMMIT, ABORT, EMPTY (count-0 control
    batch left by the cleaner) or another control type name; ``coordinator_epoch`` is the
    EndTxnMarker's coordinatorEpoch; ``first_offset = last_offset`` = the marker's offset.
``txn_state``
    One ``__transaction_state`` record: ``topic``/``partition`` are the coordinator partition,
    ``first_offset`` the record offset, ``coordinator_epoch`` the batch's partitionLeaderEpoch,
    ``tombstone`` true for a null value. ``route_pid`` is the producer id the row is delivered to
    (a record whose ``prev_producer_id`` differs is emitted twice, once per id).
``snapshot``
    One producer-state snapshot entry (``.snapshot`` file or its dump): ``first_offset`` =
    CurrentTxnFirstOffset (null when no transaction is open), ``last_offset`` = LastOffset,
    ``last_ts`` = Timestamp, epochs from the entry, ``snapshot_offset`` = the snapshot's offset.
``progress``
    One per partition per read: ``high_watermark``, ``lso``, ``log_start_offset`` and the read
    time in ``event_time``. For log directories: ``high_watermark`` = end of the data read, ``lso``
    derived from the transactions open at the end of the read (null when it cannot be known).
    ``read_from_zero``: the partition was read from offset 0 with nothing ever deleted (log start
    0). Progress rows of ``__transaction_state`` partitions carry ``txn_partition_count`` = n, the
    topic's partition count (live: from Metadata; files and dumps: ``[coordinator]
    txn_state_partitions``, default 50): the enrichment needs n to know whether every coordinator
    partition was read (detection.md §3.1).
``folded_txns`` / ``folded_max_epoch`` (marker rows only)
    A read keeps, per producer id and partition, only the rows the producer state needs (the
    span before its first marker, the first and the last marker, the span after the last one):
    the transactions that opened and closed in between are counted here, on the last marker.

A data partition seeded from a producer snapshot stamps ``snapshot_offset`` (the newest readable
snapshot's offset) on every data, marker and progress row of the partition: rows whose
``last_offset`` is below it are already summarised by the snapshot (detection.md §1).
``gap``
    Bytes or lines that could not be read or are missing: ``reason`` and ``source_position``
    say what and where; ``first_offset``/``last_offset`` bound the missing offsets when known.
    ``crc_failed``: the gap is a batch that failed its CRC (``isvalid: false`` in dump text):
    never believed, as the broker never applies one (``LogSegment.recover`` →
    ``RecordBatch.ensureValid``); ``first_offset`` is its base offset. A control batch that fails
    closes nothing; a ``__transaction_state`` partition with one is incomplete from there on.

Proof facts on progress rows (detection.md §0): ``end_proven`` = this read reached the
partition's end — live, the high watermark of the read; a log directory listed by txnwatch, its
newest segment; explicit files or dump text, only when the broker's
``replication-offset-checkpoint`` / ``recovery-point-offset-checkpoint`` among the inputs names
exactly the offset the read ended at. ``last_ts`` on a progress row of files and dumps = the
newest timestamp the read found in the partition (null: no record): the enrichment needs it for
the currency of coordinator copies (an empty or lagging copy) and for the clock's skew guard.

Per-partition read facts on data/marker/progress rows: ``from_log_start`` = this partition's
reading began at its log start offset; ``read_from_zero`` = it began at offset 0 and the log start
is 0 (nothing ever deleted, so P's whole marker history on tp was read: detection.md §4 rule 4
``log-start``); ``snapshot_offset`` on a partition seeded from a producer snapshot = that
snapshot's offset (rows with ``last_offset`` below it are preview-only for the state machine).

``event_time`` is the observation time that drives Spark's watermark: the read time on the live
path, the newest input timestamp (or ``--as-of``) for files. It is never a record CreateTime of
one producer, so one skewed client clock cannot advance every producer's timers.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

# pandas 2.x warns when concatenating frames whose nullable columns are all NA; event frames are
# typed explicitly by to_frame() right after every concat, so the inferred dtype does not matter.
warnings.filterwarnings("ignore", category=FutureWarning, message="The behavior of DataFrame concatenation")

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql.types import StructType

# ``lso_passed`` (live source, probe mode): the partition's LSO moved past the first offset of the
# transaction the probe found for ``producer_id`` (``lso`` = the new LSO), so it is no longer open.
KINDS = ("data", "marker", "txn_state", "snapshot", "progress", "gap", "lso_passed")

# (name, type) with type one of: string, long, int, short, bool, timestamp, array<string>.
EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"),  # one of KINDS
    ("source", "string"),  # kafka | segments | dumps
    ("cluster", "string"),  # cluster name from the configuration
    ("topic", "string"),
    ("partition", "int"),
    ("route_pid", "long"),  # state key: the producer id this row is delivered to (-1: none)
    ("producer_id", "long"),
    ("producer_epoch", "int"),
    ("first_offset", "long"),
    ("last_offset", "long"),
    ("first_ts", "long"),  # epoch ms
    ("last_ts", "long"),  # epoch ms
    ("batch_count", "long"),
    ("record_count", "long"),
    ("bytes", "long"),
    ("empty_batches", "long"),
    ("marker", "string"),  # COMMIT | ABORT | EMPTY | other control type
    ("coordinator_epoch", "int"),
    ("transactional_id", "string"),
    ("tombstone", "bool"),
    ("txn_state", "string"),
    ("txn_partitions", "array<string>"),  # "topic-partition"; null vs empty kept apart
    ("txn_timeout_ms", "long"),
    ("txn_start_ts", "long"),
    ("txn_last_update_ts", "long"),
    ("prev_producer_id", "long"),
    ("next_producer_id", "long"),
    ("client_txn_version", "int"),
    ("snapshot_offset", "long"),
    ("from_log_start", "bool"),  # this partition's reading began at its log start offset
    ("read_from_zero", "bool"),  # reading began at offset 0 and nothing was ever deleted (log start 0)
    ("lagging", "bool"),  # live source: this read stopped short of the high watermark (admission control)
    ("high_watermark", "long"),
    ("lso", "long"),
    ("log_start_offset", "long"),
    ("reason", "string"),  # gap reason
    ("txn_partition_count", "int"),  # progress of __transaction_state: its partition count n
    # progress: this read reached the partition's end (detection.md §0: live, the high watermark;
    # a log directory, its newest segment; explicit files, only as the broker's checkpoint says)
    ("end_proven", "bool"),
    ("crc_failed", "bool"),  # gap: a batch that failed its CRC (first_offset = its base offset)
    ("source_position", "string"),  # file and byte/line, or fetch position
    ("event_time", "timestamp"),
    # Set on a read's last marker of a producer when the read folded the transactions that opened
    # and closed between its first and last marker (normalize.reduce_closed_in_read): how many,
    # and their highest producer epoch. Null on every other row.
    ("folded_txns", "long"),
    ("folded_max_epoch", "int"),
)
FIELD_NAMES: tuple[str, ...] = tuple(n for n, _ in EVENT_FIELDS)
_FIELD_SET = frozenset(FIELD_NAMES)
_EMPTY_ROW: dict[str, Any] = dict.fromkeys(FIELD_NAMES)

_PANDAS_DTYPES = {
    "string": "object",
    "long": "Int64",
    "int": "Int32",
    "short": "Int16",
    "bool": "boolean",
    "timestamp": "datetime64[us, UTC]",
    "array<string>": "object",
}


def spark_schema() -> StructType:
    """The Spark ``StructType`` of the event table."""
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    simple = {
        "string": StringType(),
        "long": LongType(),
        "int": IntegerType(),
        "short": ShortType(),
        "bool": BooleanType(),
        "timestamp": TimestampType(),
        "array<string>": ArrayType(StringType()),
    }
    return StructType([StructField(n, simple[t], True) for n, t in EVENT_FIELDS])


def arrow_schema() -> pa.Schema:
    """Arrow schema matching :func:`spark_schema` (what Python data sources must yield)."""
    import pyarrow as pa

    simple = {
        "string": pa.string(),
        "long": pa.int64(),
        "int": pa.int32(),
        "short": pa.int16(),
        "bool": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "array<string>": pa.list_(pa.string()),
    }
    return pa.schema([(n, simple[t]) for n, t in EVENT_FIELDS])


def make_row(kind: str, **fields: Any) -> dict[str, Any]:
    """A full event row as a dict: every field present, unknown names rejected."""
    if not _FIELD_SET.issuperset(fields):
        raise KeyError(f"unknown event fields: {sorted(set(fields) - _FIELD_SET)}")
    row = _EMPTY_ROW.copy()  # every field None, in FIELD_NAMES order (tens of thousands of rows per trigger)
    row.update(fields)
    row["kind"] = kind
    return row


def to_frame(rows: list[dict[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """Rows (dicts from :func:`make_row`, or a frame with a subset of columns) → typed frame.

    ``event_time`` may be given as epoch milliseconds (int) or a timestamp.
    """
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame.from_records(rows)
    df = df.reset_index(drop=True)
    index = df.index
    # One new frame from typed columns (no per-column inserts into ``df``): the fixed cost per
    # call matters, sources call this a few times per read of every partition.
    cols: dict[str, pd.Series] = {}
    for name, typ in EVENT_FIELDS:
        target = _PANDAS_DTYPES[typ]
        if name not in df.columns:
            empty = None if target == "object" else pd.NaT if typ == "timestamp" else pd.NA
            cols[name] = pd.Series(empty, index=index, dtype=target)
            continue
        cols[name] = _typed_column(df[name], typ)
    return pd.DataFrame(cols, index=index)


def _typed_column(col: pd.Series, typ: str) -> pd.Series:
    """One column of :func:`to_frame`: ``col`` in the pandas dtype of event field type ``typ``."""
    import pandas as pd

    target = _PANDAS_DTYPES[typ]
    if str(col.dtype) == target and target != "object":
        return col
    if typ == "timestamp":
        if len(col) and col.notna().any() and pd.api.types.is_numeric_dtype(col.dropna()):
            return pd.to_datetime(col, unit="ms", utc=True).astype(target)
        return pd.to_datetime(col, utc=True).astype(target)
    if typ in ("string", "array<string>"):
        return col.astype("object").where(col.notna(), None)
    return col.astype(target)


def to_arrow(df: pd.DataFrame) -> pa.RecordBatch:
    """Event frame (typed, or untyped as :func:`to_frame` takes it) → Arrow record batch with
    :func:`arrow_schema` (for data sources): the batch ``RecordBatch.from_pandas(to_frame(df))``
    gives. Numeric, boolean and string columns go to Arrow straight from their numpy values
    (typing every column as a pandas extension array first was most of the cost of a read's
    last step); any other column takes :func:`to_frame`'s conversion."""
    import numpy as np
    import pyarrow as pa

    schema = arrow_schema()
    df = df.reset_index(drop=True)
    n = len(df)
    arrays = []
    for (name, typ), f in zip(EVENT_FIELDS, schema, strict=True):
        if name not in df.columns:
            arrays.append(pa.nulls(n, f.type))
            continue
        col = df[name]
        arr = _arrow_column(col, typ, f.type, np, pa)
        if arr is None:
            arr = pa.Array.from_pandas(_typed_column(col, typ), type=f.type)
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def from_arrow(batch: pa.RecordBatch | pa.Table | None) -> pd.DataFrame:
    """An Arrow batch of :func:`arrow_schema` (None: no row) → the frame :func:`to_frame` gives
    for the same rows: nullable integer and boolean columns, ``datetime64[us, UTC]``, strings and
    string lists as Python objects (None: null)."""
    import pandas as pd
    import pyarrow as pa

    if batch is None:
        return to_frame([])
    mapper = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(), pa.int16(): pd.Int16Dtype(),
              pa.bool_(): pd.BooleanDtype()}
    df = batch.to_pandas(types_mapper=mapper.get)
    for name, typ in EVENT_FIELDS:
        if typ == "array<string>":  # Arrow hands list cells over as numpy arrays
            df[name] = pd.Series(batch.column(name).to_pylist(), index=df.index, dtype=object)
    return df


def _arrow_column(col: pd.Series, typ: str, pa_type: Any, np: Any, pa: Any) -> Any:
    """``col`` as :func:`to_frame` then Arrow would type it, or None to leave it to them."""
    dt = col.dtype
    kind = getattr(dt, "kind", "O") if isinstance(dt, np.dtype) else None
    if typ in ("long", "int", "short"):
        if kind in ("i", "u"):
            return pa.array(col.to_numpy(), type=pa_type)  # safe cast: overflow raises
        if kind == "f":
            v = col.to_numpy()
            mask = np.isnan(v)
            whole = np.where(mask, 0.0, v)
            if not np.array_equal(whole, np.trunc(whole)):
                return None  # to_frame's astype raises on a fractional value: let it
            return pa.array(whole, type=pa_type, mask=mask)
        return None
    if typ == "bool" and kind == "b":
        return pa.array(col.to_numpy(), type=pa_type)
    if typ == "timestamp" and kind in ("i", "u") and len(col):
        return pa.array(col.to_numpy().astype(np.int64) * 1000, type=pa_type)  # epoch ms -> us
    if typ == "string" and kind == "O":
        mask = col.isna().to_numpy()
        v = col.to_numpy(dtype=object)
        if mask.any():
            v = v.copy()
            v[mask] = None
        try:
            return pa.array(v, type=pa_type)  # str cells only: anything else raises
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
    return None
