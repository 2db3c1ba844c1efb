"""Per-partition integer columns packed into one JSON string each: the bulk of the kafka source's
offset log entries (kafka_plan_state.py).

Why: Spark json-dumps the dict ``latestOffset`` returns into its offset log every trigger and
hands back dicts parsed from that JSON (pyspark ``python_streaming_source_runner``:
``json.dumps(offset)`` / ``json.loads``). At 200,000 partitions, per-partition JSON lists of
ints cost about 0.9 s of CPU per trigger (``tolist``, dumps, loads, and the reader's comparison
of the dict it gets back with the one it gave, bench/cluster_scale.py); one string per column
costs a few milliseconds in each of those steps.

A column is ``"<dtype>:<rows>:<data>"``: ``dtype`` one of ``i1 i2 i4 i8`` (little-endian signed,
the narrowest that holds every value), ``rows`` how many values, ``data`` the base64 of the
zlib-compressed bytes. A table (:func:`pack_table`) is ``{"format": FORMAT, "rows": n,
"topics": [names], "topic": column of indexes into topics, "p": column of partitions, <field>:
column, ...}``, one row per partition.

Reading refuses anything damaged with one :class:`PackedOffsetsError` naming the table, the field
and, where the damage is in one topic's rows, the topic: a string not in that form, an unknown
dtype code, a row count other than the table's, bytes that are not base64 or not zlib (zlib
checks an Adler-32 of the bytes, so a changed byte is refused rather than read as another
offset), or fewer or more bytes than the rows need. A wrong position read from a damaged entry
could skip data; an error stops the query with the reason instead.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import Any

import numpy as np

#: The table format this version writes and reads.
FORMAT = "int-columns/zlib-base64/1"

_CODES = {"i1": np.dtype("<i1"), "i2": np.dtype("<i2"), "i4": np.dtype("<i4"), "i8": np.dtype("<i8")}
_BOUNDS = [(code, int(np.iinfo(dt).min), int(np.iinfo(dt).max)) for code, dt in _CODES.items()]
# zlib level 1: about 4x faster than the default 6 on these columns for a third more bytes
_LEVEL = 1


class PackedOffsetsError(ValueError):
    """A packed offset log entry that cannot be read as written."""


def pack_column(values: np.ndarray) -> str:
    """``values`` (integers) as one string, in the narrowest dtype that holds them."""
    a = np.asarray(values)
    lo, hi = (int(a.min()), int(a.max())) if len(a) else (0, 0)
    code = next(c for c, mn, mx in _BOUNDS if mn <= lo and hi <= mx)
    data = a.astype(_CODES[code], copy=False).tobytes()
    return f"{code}:{len(a)}:{base64.b64encode(zlib.compress(data, _LEVEL)).decode('ascii')}"


def unpack_column(text: Any, rows: int, where: str) -> np.ndarray:
    """The int64 values of a column :func:`pack_column` wrote, which must hold ``rows`` values;
    ``where`` names it in errors (e.g. ``"offsets: cols field 'hw'"``)."""
    if not isinstance(text, str):
        raise PackedOffsetsError(f"{where} is a {type(text).__name__}, not a packed column string")
    head = text.split(":", 2)
    if len(head) != 3:
        raise PackedOffsetsError(f"{where} is not '<dtype>:<rows>:<base64>' ({text[:40]!r})")
    code, n, data = head
    dtype = _CODES.get(code)
    if dtype is None:
        raise PackedOffsetsError(f"{where} has dtype code {code[:10]!r}, not one of {', '.join(_CODES)}")
    if not (n.isascii() and n.isdigit()) or int(n) != rows:
        raise PackedOffsetsError(f"{where} says it holds {n[:20]!r} rows, the table has {rows}")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PackedOffsetsError(f"{where} is not base64 ({exc})") from None
    need = rows * dtype.itemsize
    z = zlib.decompressobj()
    try:
        # at most one byte more than the rows need: a damaged length cannot make it inflate more
        out = z.decompress(raw, need + 1)
    except zlib.error as exc:
        raise PackedOffsetsError(f"{where} is not intact zlib data ({exc})") from None
    if len(out) > need:
        raise PackedOffsetsError(f"{where} holds more than the {need} bytes {rows} rows of {code} need")
    if len(out) < need or not z.eof:
        raise PackedOffsetsError(f"{where} holds {len(out)} bytes{'' if z.eof else ' (its zlib stream cut short)'} "
                                 f"where {rows} rows of {code} need {need}")
    if z.unused_data:
        raise PackedOffsetsError(f"{where} has {len(z.unused_data)} bytes after its zlib stream")
    return np.frombuffer(out, dtype=dtype).astype(np.int64)


def pack_table(topics: list[str], topic: np.ndarray, partition: np.ndarray, fields: dict[str, np.ndarray]
               ) -> dict[str, Any]:
    """One row per partition: ``topic`` (indexes into ``topics``), ``partition`` and ``fields``."""
    out: dict[str, Any] = {"format": FORMAT, "rows": len(partition), "topics": list(topics),
                           "topic": pack_column(topic), "p": pack_column(partition)}
    for name, values in fields.items():
        out[name] = pack_column(values)
    return out


def is_packed(doc: Any) -> bool:
    """Whether ``doc`` is a packed table (older forms are dicts of per-partition JSON values,
    none of which is a string under the key ``format``)."""
    return isinstance(doc, dict) and isinstance(doc.get("format"), str)


def unpack_table(doc: dict[str, Any], names: tuple[str, ...], what: str, grouped: bool = False
                 ) -> tuple[list[str], np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``(topics, topic, partition, fields)`` of a table :func:`pack_table` wrote with the fields
    ``names``; ``what`` names the table in errors (``"cols"``, ``"probe"``). Every partition
    number must be a Kafka partition (0 .. 2^31 - 1) and no partition may be in it twice;
    ``grouped``: the rows must also be grouped by topic in the order of ``topics``, partitions
    ascending in each (as :class:`~streaming.sources.kafka_plan_state.PlanColumns` holds them)."""
    where = f"offsets: {what}"
    if doc.get("format") != FORMAT:
        raise PackedOffsetsError(f"{where} has format {str(doc.get('format'))[:60]!r}; this version reads "
                                 f"{FORMAT!r}")
    expected = {"format", "rows", "topics", "topic", "p", *names}
    if set(doc) != expected:
        missing, extra = sorted(expected - set(doc)), sorted(set(doc) - expected)
        raise PackedOffsetsError(f"{where} fields differ from this version's: missing {missing}, unknown {extra}")
    rows, topics = doc["rows"], doc["topics"]
    if type(rows) is not int or rows < 0:
        raise PackedOffsetsError(f"{where} field 'rows' is {rows!r}, not a row count")
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics) or len(set(topics)) != len(topics):
        raise PackedOffsetsError(f"{where} field 'topics' is not a list of distinct topic names")
    topic = unpack_column(doc["topic"], rows, f"{where} field 'topic'")
    if rows and (int(topic.min()) < 0 or int(topic.max()) >= len(topics)):
        raise PackedOffsetsError(f"{where} field 'topic' has an index outside its {len(topics)} topics")
    partition = unpack_column(doc["p"], rows, f"{where} field 'p'")
    bad = np.flatnonzero((partition < 0) | (partition > 2 ** 31 - 1))
    if len(bad):
        raise PackedOffsetsError(f"{where} field 'p' of topic {topics[int(topic[bad[0]])]!r} has partition "
                                 f"{int(partition[bad[0]])}, not a Kafka partition number")
    if grouped:
        # rows grouped by topic in the order of ``topics``, partitions ascending in each
        wrong = np.flatnonzero((np.diff(topic) < 0) | ((np.diff(topic) == 0) & (np.diff(partition) <= 0)))
        if len(wrong):
            i = int(wrong[0]) + 1
            raise PackedOffsetsError(f"{where} rows of topic {topics[int(topic[i])]!r} are not grouped by topic "
                                     f"with partitions ascending (partition {int(partition[i])} at row {i})")
    else:
        order = np.lexsort((partition, topic))
        same = (np.diff(topic[order]) == 0) & (np.diff(partition[order]) == 0)
        if same.any():
            i = int(order[int(np.flatnonzero(same)[0])])
            raise PackedOffsetsError(f"{where} holds partition {int(partition[i])} of topic "
                                     f"{topics[int(topic[i])]!r} twice")
    fields = {name: unpack_column(doc[name], rows, f"{where} field {name!r}") for name in names}
    return topics, topic, partition, fields
