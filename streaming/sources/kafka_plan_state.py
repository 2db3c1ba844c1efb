"""The driver-side planner's state, as typed objects, and its form in Spark's offset log.

Spark's contract for a ``DataSourceStreamReader`` (PySpark ``datasource.py``): the dict that
``latestOffset`` returns is written to the checkpoint's offset log *before* the micro-batch runs,
is handed back as ``start`` to the next ``latestOffset``, and ``partitions(start, end)`` is asked
again with both dicts read back from the log when a restarted query replays the last micro-batch
it had planned but not committed. So whatever the next plan needs, and whatever
``partitions(start, end)`` needs to plan the same reads again, must be in that dict; anything else
the driver knows is lost on restart. :class:`PlanState` is that dict as typed fields;
:meth:`PlanState.to_json` / :meth:`PlanState.from_json` are the only places that know its JSON
form (the keys are unchanged from the checkpoints written before this module existed, so running
queries resume across the upgrade). One key was added since: ``cols``, the bulk of ``parts`` and
``seen`` as columns (:class:`PlanColumns`), written by plans that have them (probe mode);
``parts`` / ``seen`` then hold only what the columns do not, and an entry without ``cols`` reads
as before. In such entries ``cols`` and ``probe`` are packed tables (kafka_offset_pack.py: one
zlib+base64 string per column; at 200,000 partitions ~1 MB instead of ~9 MB of JSON lists and
objects); the per-topic JSON lists that ``cols`` held before, and ``probe`` as one object per
partition, still read. Every entry is complete on its own (Spark restarts from the last one alone).

Fields carried from plan to plan (they survive a restart because the next plan needs them):

* ``parts``: per partition the next offset to read and whether reading began at its log start:
  where the query resumes.
* ``clock``: the driver's clock of the plan (detection.md §2); it never goes back, also across
  a restart.
* ``ids``: topic ids (Metadata v10+): a recreated topic is told from the same one after a restart.
* ``gone``: topics dropped as deleted, with their id: one created again under the name is new.
* ``unavail``: per-partition availability (error, since, tries, retry time): the backoff and the
  outage's start are not reset by a restart.
* ``seen``: the ListOffsets facts as planned (high watermark, LSO, log start, leader): the input
  partitions' progress rows, and in probe mode whether a partition's offsets changed (no row
  when they did not).
* ``behind`` / ``unread_seen``: unread ranges carried to the next plan (kafka_unread.py) and how
  far the unread ledger was consumed: a range that stopped short before a restart is read again.
* ``probe`` (probe mode only): per partition the probe memo (:class:`ProbeMemo`): without it
  a restarted query would fetch every open partition's LSO again and lose ``follow``.

Fields of this plan only (they survive a restart because Spark may replay this micro-batch and
``partitions`` must plan the same reads): ``planned``, ``resets``, ``dropped``, ``starts``,
``rereads``, ``lagging``, ``txn_n``, and in probe mode ``reads``, ``closes``, ``emit``.

Driver memory only (:class:`ClusterAvailability`): since when no broker answered at all. While
no broker answers, ``latestOffset`` returns its ``start`` unchanged (Spark then runs no
micro-batch), so nothing new can reach the offset log; after a restart the
``unavailable_timeout_ms`` count starts again from the first plan that finds no broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from streaming.sources.kafka_client.results import TopicRows
from streaming.sources.kafka_offset_pack import PackedOffsetsError, is_packed, pack_table, unpack_table
from streaming.sources.kafka_options import split_key


@dataclass(slots=True)
class Position:
    """Where reading a partition goes on: JSON ``[next offset, read from log start]``."""

    next: int
    from_log_start: bool


class Seen(NamedTuple):
    """A partition's ListOffsets answer as planned: JSON ``[hw, lso, log start, leader]``
    (``None`` for an LSO or log start the broker did not give). Immutable, and a tuple rather
    than a frozen dataclass: a plan builds and compares one per changed partition (thousands per
    trigger at scale, every partition after a restart), which a tuple does about 3x faster."""

    high_watermark: int
    lso: int | None
    log_start: int | None
    leader: int


@dataclass(slots=True)
class PartitionDown:
    """A partition that could not be planned: the error, the first plan that found it down
    (wall ms), how many plans in a row did, and when it is asked again (doubling backoff)."""

    error: str
    since: int
    tries: int
    retry_at: int

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "since": self.since, "tries": self.tries, "retry_at": self.retry_at}

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> PartitionDown:
        return cls(v["error"], v["since"], v["tries"], v["retry_at"])


@dataclass(slots=True)
class Reset:
    """A partition whose log went backwards (or a topic created again): read again from
    ``restart``; ``first``/``last`` are the offsets its gap row names (see ``plan_reset``)."""

    restart: int
    from_log_start: bool | None  # None: keep the partition's flag (a truncation)
    first: int | None
    last: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"restart": self.restart, "from_log_start": self.from_log_start, "first": self.first,
                "last": self.last, "reason": self.reason}

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> Reset:
        return cls(v["restart"], v["from_log_start"], v["first"], v["last"], v["reason"])


@dataclass(slots=True)
class ProbeMemo:
    """Probe mode, one data partition: the LSO last probed, the end of the window read there,
    the producer id, first offset and first timestamp of the transaction found at it (``pid``
    None once the LSO passed it, or when the probe found none), and ``follow``: the next offset
    while the partition is read in full from its LSO (None: probed, not followed)."""

    lso: int
    end: int | None
    pid: int | None
    first: int | None
    first_ts: int | None
    follow: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"lso": self.lso, "end": self.end, "pid": self.pid, "first": self.first, "first_ts": self.first_ts}
        if self.follow is not None:
            out["follow"] = self.follow
        return out

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> ProbeMemo:
        return cls(v["lso"], v.get("end"), v.get("pid"), v.get("first"), v.get("first_ts"), v.get("follow"))


@dataclass(slots=True)
class ProbeRead:
    """Probe mode: a range to read now, ``[start, end)``; ``window``: it starts at the LSO (a
    window, not a continuation of earlier reads); ``note``: why the window holds no transaction.
    JSON ``[start, end, window]`` or ``[start, end, window, note]``."""

    start: int
    end: int
    window: bool
    note: str | None = None

    def to_json(self) -> list:
        return [self.start, self.end, self.window] + ([self.note] if self.note else [])

    @classmethod
    def from_json(cls, v: list) -> ProbeRead:
        return cls(v[0], v[1], v[2], v[3] if len(v) > 3 else None)


#: Offsets of the compact ``cols`` form (see :class:`PlanColumns`), per topic.
_COL_NAMES = ("p", "next", "fls", "hw", "lso", "ls", "leader")


class PlanColumns(TopicRows):
    """``parts`` and ``seen`` of a plan as arrays, one row per partition of ``keys`` (the
    partitions the plan's discovery listed, grouped by topic: ``topics[i]`` holds rows
    ``starts[i]:starts[i + 1]``).

    Why: at 200,000 partitions a plan that touches the few partitions whose offsets changed
    must not build, compare or serialise an object per partition (bench/cluster_scale.py). The
    planner compares the new ListOffsets arrays with these, runs its per-partition logic only on
    the rows that differ (kafka_planner.py), and writes the offset log's bulk from them.

    The dicts stay the plan's truth: a row mirrors ``parts[k]`` (``next``, ``fls``; ``has_part``)
    and ``seen[k]`` (``hw``, ``lso``, ``ls``, ``leader``, -1 for an LSO or log start the broker did
    not give; ``has_seen``). The planner builds them together and nothing changes a
    :class:`PlanState` after it is planned; :meth:`PlanState.to_json` checks the counts."""

    __slots__ = ("keys", "topics", "starts", "partition", "next", "fls", "has_part", "hw", "lso", "ls", "leader",
                 "has_seen", "_index", "_key_set", "_topic_of")

    def __init__(self, topics: list[str], starts: np.ndarray, partition: np.ndarray, keys: list[str] | None = None
                 ) -> None:
        n = len(partition)
        self.topics, self.starts, self.partition = topics, starts, partition
        self.keys = keys if keys is not None else [
            f"{t}\t{p}" for t, ps in zip(topics, np.split(partition, starts[1:-1]) if topics else [], strict=True)
            for p in ps.tolist()]
        self.next = np.full(n, -1, dtype=np.int64)
        self.fls = np.zeros(n, dtype=bool)
        self.has_part = np.zeros(n, dtype=bool)
        self.hw = np.full(n, -1, dtype=np.int64)
        self.lso = np.full(n, -1, dtype=np.int64)
        self.ls = np.full(n, -1, dtype=np.int64)
        self.leader = np.full(n, -1, dtype=np.int64)
        self.has_seen = np.zeros(n, dtype=bool)
        self._index: dict[str, int] | None = None
        self._key_set: set[str] | None = None
        self._topic_of: np.ndarray | None = None

    def asked(self, rows: np.ndarray | None = None) -> list[tuple[str, np.ndarray]]:
        """``[(topic, partitions)]`` of all rows, or of ``rows`` (ascending)."""
        if rows is None:
            return [(t, self.partition[int(self.starts[i]):int(self.starts[i + 1])]) for i, t in enumerate(self.topics)]
        topic_of = self.topic_of[rows]
        cuts = np.flatnonzero(np.diff(topic_of)) + 1
        return [(self.topics[int(topic_of[seg[0]])], self.partition[rows[seg]])
                for seg in np.split(np.arange(len(rows)), cuts) if len(seg)]

    def tps(self) -> list[tuple[str, int]]:
        return [(t, p) for t, ps in self.asked() for p in ps.tolist()]

    def count(self, topic: str) -> int:
        """How many rows ``topic`` has."""
        if topic not in self.topics:
            return 0
        i = self.topics.index(topic)
        return int(self.starts[i + 1] - self.starts[i])

    @classmethod
    def of_keys(cls, found: list[tuple[str, list[int]]]) -> PlanColumns:
        """Empty columns for ``[(topic, sorted partitions)]``."""
        parts = [np.asarray(ps, dtype=np.int64) for _, ps in found]
        starts = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=starts[1:])
        return cls([t for t, _ in found], starts, np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))

    def same_rows(self, other: PlanColumns) -> bool:
        """Whether both have the same partitions in the same order."""
        return self.keys is other.keys or (self.topics == other.topics and np.array_equal(self.starts, other.starts)
                                           and np.array_equal(self.partition, other.partition))

    def like(self) -> PlanColumns:
        """Empty columns over the same rows (sharing the key list)."""
        out = PlanColumns(self.topics, self.starts, self.partition, self.keys)
        out._index, out._key_set, out._topic_of = self.index, self.key_set, self.topic_of
        return out

    def copy_values(self, other: PlanColumns) -> None:
        for f in ("next", "fls", "has_part", "hw", "lso", "ls", "leader", "has_seen"):
            setattr(self, f, getattr(other, f).copy())

    @property
    def index(self) -> dict[str, int]:
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self.keys)}
        return self._index

    @property
    def key_set(self) -> set[str]:
        if self._key_set is None:
            self._key_set = set(self.keys)
        return self._key_set

    def fill(self, rows: Any, parts: dict[str, Position], seen: dict[str, Seen]) -> None:
        """Rows ``rows`` set from the dicts (the rows whose entries the plan may have changed):
        gathered in lists, then set in one assignment per column."""
        keys = self.keys
        rows = list(rows)
        pos = [parts.get(keys[r]) for r in rows]
        facts = [seen.get(keys[r]) for r in rows]
        self.has_part[rows] = [p is not None for p in pos]
        self.has_seen[rows] = [f is not None for f in facts]
        at = [r for r, p in zip(rows, pos, strict=True) if p is not None]
        pos = [p for p in pos if p is not None]
        self.next[at] = [p.next for p in pos]
        self.fls[at] = [bool(p.from_log_start) for p in pos]
        at = [r for r, f in zip(rows, facts, strict=True) if f is not None]
        facts = [f for f in facts if f is not None]
        self.hw[at] = [f.high_watermark for f in facts]
        self.leader[at] = [f.leader for f in facts]
        self.lso[at] = [-1 if f.lso is None else f.lso for f in facts]
        self.ls[at] = [-1 if f.log_start is None else f.log_start for f in facts]

    def to_json(self) -> tuple[dict[str, Any], int]:
        """The packed form of the rows with both a position and facts, and how many rows that is:
        a table (kafka_offset_pack.py) with, per row, ``hw``, ``hw-next`` (high watermark minus
        the next offset: 0 for most partitions, so it packs into a narrow dtype and compresses
        to almost nothing), ``fls`` (from log start, 0/1), ``hw-lso`` (high watermark minus the
        LSO; an LSO not given is -1, i.e. ``hw + 1``), ``ls`` (log start, -1: not given) and
        ``leader``. Topics without such a row are left out. Both differences are exact: int64
        subtraction wraps around, and reading subtracts again."""
        both = self.has_part & self.has_seen
        n = int(both.sum())
        everything = n == len(both)
        pick = (lambda c: c) if everything else (lambda c: c[both])
        # per topic how many rows it keeps; topics without one are left out (indexes renumbered)
        kept = np.concatenate(([0], np.cumsum(both, dtype=np.int64)))
        has_rows = (kept[self.starts[1:]] - kept[self.starts[:-1]]) > 0
        renumber = np.cumsum(has_rows) - 1
        hw = pick(self.hw)
        table = pack_table([t for t, keep in zip(self.topics, has_rows.tolist(), strict=True) if keep],
                           renumber[pick(self.topic_of)], pick(self.partition),
                           {"hw": hw, "hw-next": hw - pick(self.next), "fls": pick(self.fls).astype(np.int8),
                            "hw-lso": hw - pick(self.lso), "ls": pick(self.ls), "leader": pick(self.leader)})
        return table, n

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> tuple[PlanColumns, dict[str, Position], dict[str, Seen]]:
        """Columns, parts and seen of a ``cols`` entry: the packed form (:meth:`to_json`), or the
        per-topic JSON lists ``{topic: [partitions, next, from log start (0/1), hw, lso, log
        start, leader]}`` that earlier versions wrote."""
        if is_packed(d):
            return cls._from_packed(d)
        if not isinstance(d, dict) or not all(isinstance(v, list) for v in d.values()):
            raise ValueError("offsets: cols is neither the packed form nor per-topic lists")
        found = [(t, v[0]) for t, v in d.items()]
        cols = cls.of_keys(found)
        r = 0
        for t, v in d.items():
            if len(v) != len(_COL_NAMES) or len({len(c) for c in v}) != 1:
                raise ValueError(f"offsets: cols of topic {t!r} are not {len(_COL_NAMES)} arrays of one length")
            lo = r
            r += len(v[0])
            cols.next[lo:r], cols.fls[lo:r] = v[1], v[2]
            cols.hw[lo:r], cols.lso[lo:r], cols.ls[lo:r], cols.leader[lo:r] = v[3], v[4], v[5], v[6]
        return cols, *cols._dicts()

    @classmethod
    def _from_packed(cls, d: dict[str, Any]) -> tuple[PlanColumns, dict[str, Position], dict[str, Seen]]:
        topics, topic, partition, f = unpack_table(d, _PACKED_FIELDS, "cols", grouped=True)
        fls = f["fls"]
        if len(fls) and (int(fls.min()) < 0 or int(fls.max()) > 1):
            i = int(np.flatnonzero((fls < 0) | (fls > 1))[0])
            raise PackedOffsetsError(f"offsets: cols field 'fls' of topic {topics[int(topic[i])]!r} has {int(fls[i])} "
                                     f"for partition {int(partition[i])}, not 0 or 1")
        # every listed topic holds rows (to_json leaves the others out): the rows' own grouping
        counts = np.bincount(topic, minlength=len(topics))
        if len(topics) and int(counts.min()) == 0:
            raise PackedOffsetsError(f"offsets: cols field 'topics' names topic {topics[int(np.argmin(counts))]!r} "
                                     f"without a row")
        starts = np.zeros(len(topics) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        cols = cls(list(topics), starts, partition)
        hw = f["hw"]
        cols.hw, cols.next, cols.fls = hw, hw - f["hw-next"], fls.astype(bool)
        cols.lso, cols.ls, cols.leader = hw - f["hw-lso"], f["ls"], f["leader"]
        return cols, *cols._dicts()

    def _dicts(self) -> tuple[dict[str, Position], dict[str, Seen]]:
        """``parts`` and ``seen`` of every row (read back from the offset log: all rows have both)."""
        self.has_part[:] = True
        self.has_seen[:] = True
        keys = self.keys
        nxt, fls = self.next.tolist(), self.fls.tolist()
        parts = {k: Position(a, b) for k, a, b in zip(keys, nxt, fls, strict=True)}
        seen = {k: Seen(hw, None if lso < 0 else lso, None if ls < 0 else ls, leader) for k, hw, lso, ls, leader
                in zip(keys, self.hw.tolist(), self.lso.tolist(), self.ls.tolist(), self.leader.tolist(), strict=True)}
        return parts, seen


_PACKED_FIELDS = ("hw", "hw-next", "fls", "hw-lso", "ls", "leader")
# ProbeMemo's fields in the packed ``probe`` table; those that may be None have a bit in "null"
_PROBE_FIELDS = ("lso", "end", "pid", "first", "first_ts", "follow", "null")
_PROBE_NULLABLE = ("end", "pid", "first", "first_ts", "follow")
#: the fields of :class:`MemoArrays`' columns
MEMO_FIELDS = ("lso",) + _PROBE_NULLABLE
_MEMO_GET = attrgetter(*MEMO_FIELDS)


class MemoArrays:
    """A plan's probe memos as arrays, in the dict's order: ``rows`` (each memo's row in the
    plan's :class:`PlanColumns`, -1 for a partition they do not list), ``values`` (one column per
    field of :data:`MEMO_FIELDS`, 0 where None) and ``none`` (where a field is None).

    Built once per plan (:meth:`PlanState.memo_arrays`): its offset log entry packs them, and
    the next plan's ``KafkaPlanner._quiet`` reads them instead of looking at every memo again."""

    __slots__ = ("keys", "rows", "values", "none")

    def __init__(self, probe: dict[str, ProbeMemo], cols: PlanColumns) -> None:
        n = len(probe)
        self.keys = probe.keys()
        index = cols.index
        try:
            self.rows = np.fromiter(map(index.__getitem__, probe), dtype=np.int64, count=n)
        except KeyError:  # some partition the columns do not list
            self.rows = np.fromiter((index.get(k, -1) for k in probe), dtype=np.int64, count=n)
        # one object array of every memo's fields, Nones found in one comparison (the cheapest
        # way found to get tens of thousands of optional ints into arrays)
        values = np.array(list(map(_MEMO_GET, probe.values())), dtype=object).reshape(n, len(MEMO_FIELDS))
        self.none = np.equal(values, None)
        values[self.none] = 0
        self.values = values.astype(np.int64)
        if self.none[:, 0].any():
            raise ValueError("a probe memo without an LSO")

    def column(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(values, none)`` of one field."""
        j = MEMO_FIELDS.index(name)
        return self.values[:, j], self.none[:, j]


def _probe_to_json(memos: MemoArrays, cols: PlanColumns) -> dict[str, Any]:
    """The probe memos as a packed table in the dict's order: ``lso`` and, 0 where None with the
    field's bit set in ``null`` (1 end, 2 pid, 4 first, 8 first_ts, 16 follow), the others."""
    n = len(memos.rows)
    if n and int(memos.rows.min()) < 0:  # a memo of a partition not among the columns' rows: from its key
        tps = [split_key(k) for k in memos.keys]
        topics = list(dict.fromkeys(t for t, _ in tps))
        at = {t: i for i, t in enumerate(topics)}
        topic = np.fromiter((at[t] for t, _ in tps), dtype=np.int64, count=n)
        partition = np.fromiter((p for _, p in tps), dtype=np.int64, count=n)
    else:
        topics, topic, partition = cols.topics, cols.topic_of[memos.rows], cols.partition[memos.rows]
    fields = {name: memos.values[:, j] for j, name in enumerate(MEMO_FIELDS)}
    fields["null"] = memos.none[:, 1:].astype(np.int64) @ (1 << np.arange(len(_PROBE_NULLABLE), dtype=np.int64))
    return pack_table(topics, topic, partition, fields)


def _probe_from_json(d: dict[str, Any]) -> dict[str, ProbeMemo]:
    if not is_packed(d):
        return _map(d, ProbeMemo.from_json)
    topics, topic, partition, f = unpack_table(d, _PROBE_FIELDS, "probe")
    null = f["null"]
    bad = np.flatnonzero((null < 0) | (null >= 1 << len(_PROBE_NULLABLE)))
    if len(bad):
        i = int(bad[0])
        raise PackedOffsetsError(f"offsets: probe field 'null' of topic {topics[int(topic[i])]!r} has {int(null[i])} "
                                 f"for partition {int(partition[i])}, not a set of the bits of {_PROBE_NULLABLE}")
    cols = [f["lso"].tolist()] + [[None if gone else v for v, gone in
                                   zip(f[name].tolist(), ((null >> bit) & 1).astype(bool).tolist(), strict=True)]
                                  for bit, name in enumerate(_PROBE_NULLABLE)]
    return {f"{topics[t]}\t{p}": ProbeMemo(*m) for t, p, *m in zip(topic.tolist(), partition.tolist(), *cols,
                                                                     strict=True)}


def _map(d: dict | None, f: Any) -> dict:
    return {k: f(v) for k, v in (d or {}).items()}


def _out(d: dict) -> dict:
    return {k: v.to_json() for k, v in d.items()}


@dataclass(slots=True)
class PlanState:
    """One plan of the kafka source (see the module docstring for what each field is and why it
    survives a restart). ``planned`` is None for the initial offsets (``initialOffset``), whose
    JSON holds only ``parts``, ``clock`` and ``unavail``."""

    parts: dict[str, Position] = field(default_factory=dict)
    clock: int = -1
    unavail: dict[str, PartitionDown] = field(default_factory=dict)
    # carried from plan to plan
    ids: dict[str, str] = field(default_factory=dict)
    gone: dict[str, str | None] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)
    behind: dict[str, int] = field(default_factory=dict)
    unread_seen: int = -1
    probe: dict[str, ProbeMemo] | None = None  # None: full read mode
    # this plan only
    planned: int | None = None
    resets: dict[str, Reset] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    rereads: dict[str, int] = field(default_factory=dict)
    lagging: list[str] = field(default_factory=list)
    txn_n: int | None = None
    reads: dict[str, ProbeRead] = field(default_factory=dict)
    closes: dict[str, list[list[int]]] = field(default_factory=dict)
    emit: list[str] = field(default_factory=list)
    # driver memory: parts and seen as arrays (PlanColumns), when the planner built them
    cols: PlanColumns | None = field(default=None, compare=False, repr=False)
    # driver memory: the probe memos as arrays (memo_arrays), once asked for
    memos: MemoArrays | None = field(default=None, compare=False, repr=False)

    @property
    def initial(self) -> bool:
        return self.planned is None

    def memo_arrays(self) -> MemoArrays | None:
        """The probe memos as arrays over :attr:`cols`' rows (None without memos or columns),
        built on the first call: only for a finished plan, whose ``probe`` no longer changes."""
        if self.memos is None and self.probe is not None and self.cols is not None:
            self.memos = MemoArrays(self.probe, self.cols)
        return self.memos

    def to_json(self) -> dict[str, Any]:
        """The offsets dict Spark writes to its offset log."""
        parts, seen = self.parts, self.seen
        compact = None
        if self.cols is not None and not self.initial:
            # The bulk packed into a few strings ("cols", kafka_offset_pack.py), whole in every
            # entry: Spark restarts from the last offset log entry alone. Entries the columns do
            # not hold (a partition with a position and no facts, or one no longer listed) stay
            # in "parts"/"seen".
            compact, n = self.cols.to_json()
            if n != len(parts) or n != len(seen):
                index, both = self.cols.index, (self.cols.has_part & self.cols.has_seen).tolist()
                parts = {k: v for k, v in parts.items() if (r := index.get(k)) is None or not both[r]}
                seen = {k: v for k, v in seen.items() if (r := index.get(k)) is None or not both[r]}
            else:
                parts, seen = {}, {}
        out: dict[str, Any] = {"parts": {k: [v.next, v.from_log_start] for k, v in parts.items()},
                               "clock": self.clock}
        if compact is not None:
            out["cols"] = compact
        if self.initial:
            out["unavail"] = _out(self.unavail)
            return out
        out.update({"planned": self.planned, "ids": dict(self.ids), "resets": _out(self.resets),
                    "unavail": _out(self.unavail), "dropped": dict(self.dropped), "gone": dict(self.gone),
                    "starts": dict(self.starts),
                    "seen": {k: [v.high_watermark, v.lso, v.log_start, v.leader] for k, v in seen.items()},
                    "behind": dict(self.behind),
                    "rereads": dict(self.rereads), "unread_seen": self.unread_seen, "lagging": list(self.lagging),
                    "txn_n": self.txn_n})
        if self.probe is not None:
            # with the columns (the planner's plans), the memos are packed too: one per open
            # partition, tens of thousands at scale
            probe = _probe_to_json(self.memo_arrays(), self.cols) if compact is not None else _out(self.probe)
            out.update({"probe": probe, "reads": _out(self.reads),
                        "closes": {k: [list(c) for c in v] for k, v in self.closes.items()}, "emit": list(self.emit)})
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PlanState:
        """Read an offsets dict back (from Spark, or from a checkpoint written by an earlier
        version: a missing key is an empty field)."""
        parts = {k: Position(v[0], v[1]) for k, v in (d.get("parts") or {}).items()}
        seen = {k: Seen(*v) for k, v in (d.get("seen") or {}).items()}
        cols = None
        if d.get("cols"):  # the compact bulk (to_json); "parts"/"seen" hold the rest
            cols, more_parts, more_seen = PlanColumns.from_json(d["cols"])
            if (more_parts.keys() & parts.keys()) or (more_seen.keys() & seen.keys()):
                raise ValueError("offsets: a partition is both in cols and in parts/seen")
            parts.update(more_parts)
            seen.update(more_seen)
        return cls(
            # parts and seen hold one entry per partition: built inline (hundreds of thousands)
            parts=parts, clock=d.get("clock", -1), cols=cols,
            unavail=_map(d.get("unavail"), PartitionDown.from_json), ids=dict(d.get("ids") or {}),
            gone=dict(d.get("gone") or {}), seen=seen,
            behind=dict(d.get("behind") or {}), unread_seen=d.get("unread_seen", -1),
            probe=_probe_from_json(d["probe"]) if "probe" in d else None,
            planned=d.get("planned"), resets=_map(d.get("resets"), Reset.from_json),
            dropped=dict(d.get("dropped") or {}), starts=dict(d.get("starts") or {}),
            rereads=dict(d.get("rereads") or {}), lagging=list(d.get("lagging") or []), txn_n=d.get("txn_n"),
            reads=_map(d.get("reads"), ProbeRead.from_json),
            closes={k: [list(c) for c in v] for k, v in (d.get("closes") or {}).items()},
            emit=list(d.get("emit") or []))


@dataclass(slots=True)
class ClusterAvailability:
    """Whether any broker answers, as this driver has seen it (memory only: see the module).
    ``down_since`` is the wall ms of the first plan in a row that no broker answered (None: the
    last plan was answered); ``last_error`` what the last such plan met."""

    down_since: int | None = None
    last_error: str | None = None

    def down(self, now: int, error: str) -> int:
        """Record a plan no broker answered; returns how long (ms) the cluster has been down."""
        if self.down_since is None:
            self.down_since = now
        self.last_error = error
        return now - self.down_since

    def up(self) -> None:
        self.down_since = None
        self.last_error = None
