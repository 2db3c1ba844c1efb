"""What the client returns: offsets of a partition and one partition of a Fetch answer."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "FetchResult", "FetchStatus", "OffsetsTable", "PartitionOffsets"]

#: ``isolation_level`` of Fetch v4+ / ListOffsets v2+ (KIP-98): READ_UNCOMMITTED returns control
#: batches and data of open or aborted transactions; LATEST with READ_COMMITTED is the LSO.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class FetchStatus(enum.StrEnum):
    OK = "ok"
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    DELETED = "deleted"


@dataclass(frozen=True)
class PartitionOffsets:
    """Offsets of one partition. ``deleted`` partitions have -1 offsets and ``leader`` -1.

    ``topic_id``: the topic's id from Metadata v10+ (Kafka 2.8+, KIP-516) as a string, ``None``
    from older brokers. It changes when a topic is deleted and created again under the same name.
    """

    topic: str
    partition: int
    log_start: int
    high_watermark: int
    lso: int
    leader: int
    deleted: bool = False
    topic_id: str | None = None


#: :attr:`OffsetsTable.status` of a row
OK, DOWN, DELETED, PENDING = 0, 1, 2, 3


class TopicRows:
    """Rows of partitions grouped by topic: ``topics[i]`` holds rows ``starts[i]:starts[i + 1]``
    of ``partition`` (:class:`OffsetsTable`, and the planner's ``PlanColumns``). A subclass sets
    ``topics``, ``starts``, ``partition`` and ``_topic_of = None``."""

    __slots__ = ()  # the planner's columns are slotted

    topics: list[str]
    starts: np.ndarray
    partition: np.ndarray
    _topic_of: np.ndarray | None

    def __len__(self) -> int:
        return len(self.partition)

    @property
    def topic_of(self) -> np.ndarray:
        """Per row, the index of its topic in :attr:`topics`."""
        if self._topic_of is None:
            self._topic_of = np.repeat(np.arange(len(self.topics)), np.diff(self.starts))
        return self._topic_of


@dataclass
class OffsetsTable(TopicRows):
    """Offsets of many partitions as arrays (``KafkaWire.offsets_table``): one row per partition
    asked, in the order asked, grouped by topic (rows ``starts[i]:starts[i + 1]`` are topic
    ``topics[i]``). ``status`` per row: :data:`OK` (offsets and leader set), :data:`DOWN` (no
    answer this call: ``down`` holds its last error, as ``offsets_available``'s second dict),
    :data:`DELETED` (confirmed deleted: -1 offsets, leader -1). ``id_of``: index of the row's topic
    id in ``ids`` (-1: none, a broker before 2.8), as :attr:`PartitionOffsets.topic_id` would be.
    """

    topics: list[str]
    starts: np.ndarray
    partition: np.ndarray
    status: np.ndarray = None  # type: ignore[assignment]
    log_start: np.ndarray = None  # type: ignore[assignment]
    high_watermark: np.ndarray = None  # type: ignore[assignment]
    lso: np.ndarray = None  # type: ignore[assignment]
    leader: np.ndarray = None  # type: ignore[assignment]
    id_of: np.ndarray = None  # type: ignore[assignment]
    ids: list[str] = field(default_factory=list)
    down: dict[tuple[str, int], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.partition)
        if self.status is None:
            self.status = np.full(n, PENDING, dtype=np.int8)
            self.log_start = np.full(n, -1, dtype=np.int64)
            self.high_watermark = np.full(n, -1, dtype=np.int64)
            self.lso = np.full(n, -1, dtype=np.int64)
            self.leader = np.full(n, -1, dtype=np.int64)
            self.id_of = np.full(n, -1, dtype=np.int64)
        self._id_index = {v: i for i, v in enumerate(self.ids)}
        self._topic_of: np.ndarray | None = None

    @classmethod
    def asking(cls, asked: list[tuple[str, object]]) -> OffsetsTable:
        """An empty table (every row PENDING) for ``[(topic, partitions)]``, topics distinct."""
        parts = [np.asarray(ps, dtype=np.int64).reshape(-1) for _, ps in asked]
        starts = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=starts[1:])
        return cls([t for t, _ in asked], starts,
                   np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))

    def tp(self, row: int) -> tuple[str, int]:
        return self.topics[int(self.topic_of[row])], int(self.partition[row])

    def id_index(self, topic_id: str | None) -> int:
        """The index of ``topic_id`` in :attr:`ids` (added if new); -1 for None."""
        if topic_id is None:
            return -1
        i = self._id_index.get(topic_id)
        if i is None:
            i = self._id_index[topic_id] = len(self.ids)
            self.ids.append(topic_id)
        return i

    def topic_id(self, row: int) -> str | None:
        i = int(self.id_of[row])
        return self.ids[i] if i >= 0 else None

    def row(self, row: int) -> PartitionOffsets:
        """Row ``row`` (OK or DELETED) as a :class:`PartitionOffsets`."""
        t, p = self.tp(row)
        if self.status[row] == DELETED:
            return PartitionOffsets(t, p, -1, -1, -1, -1, deleted=True)
        return PartitionOffsets(t, p, int(self.log_start[row]), int(self.high_watermark[row]), int(self.lso[row]),
                                int(self.leader[row]), topic_id=self.topic_id(row))

    def rows(self, idx: np.ndarray) -> list[PartitionOffsets]:
        """``[self.row(i) for i in idx]`` (every row OK or DELETED), each column read once for
        all of them: the planner asks for thousands of rows per trigger at scale."""
        idx = np.asarray(idx, dtype=np.int64)
        topics, ids = self.topics, self.ids
        out = []
        for t, p, st, ls, hw, lso, leader, tid in zip(
                self.topic_of[idx].tolist(), self.partition[idx].tolist(), self.status[idx].tolist(),
                self.log_start[idx].tolist(), self.high_watermark[idx].tolist(), self.lso[idx].tolist(),
                self.leader[idx].tolist(), self.id_of[idx].tolist(), strict=True):
            if st == DELETED:
                out.append(PartitionOffsets(topics[t], p, -1, -1, -1, -1, deleted=True))
            else:
                out.append(PartitionOffsets(topics[t], p, ls, hw, lso, leader, topic_id=ids[tid] if tid >= 0 else None))
        return out

    def row_of(self, tp: tuple[str, int]) -> int | None:
        """The row of partition ``tp``, None if it was not asked."""
        try:
            i = self.topics.index(tp[0])
        except ValueError:
            return None
        lo = int(self.starts[i])
        hit = np.flatnonzero(self.partition[lo:int(self.starts[i + 1])] == tp[1])
        return lo + int(hit[0]) if len(hit) else None

    def merge(self, more: dict[tuple[str, int], PartitionOffsets], still: dict[tuple[str, int], str]) -> None:
        """Take in a later ``offsets_available`` answer for some of the rows: ``more`` answered
        (or confirmed deleted), ``still`` unavailable with its error."""
        for tp, o in more.items():
            r = self.row_of(tp)
            if r is None:
                continue
            self.down.pop(tp, None)
            if o.deleted:
                self.status[r] = DELETED
                self.log_start[r] = self.high_watermark[r] = self.lso[r] = self.leader[r] = -1
                self.id_of[r] = -1
                continue
            self.status[r] = OK
            self.log_start[r], self.high_watermark[r], self.lso[r] = o.log_start, o.high_watermark, o.lso
            self.leader[r] = o.leader
            self.id_of[r] = self.id_index(o.topic_id)
        for tp, error in still.items():
            r = self.row_of(tp)
            if r is None:
                continue
            self.status[r] = DOWN
            self.down[tp] = error

    def answered(self) -> dict[tuple[str, int], PartitionOffsets]:
        """Every OK or DELETED row as a :class:`PartitionOffsets` (one object per partition:
        for the callers of ``offsets`` / ``offsets_available``, not for the planner)."""
        return {self.tp(r): self.row(r) for r in np.flatnonzero((self.status == OK) | (self.status == DELETED)).tolist()}


@dataclass(frozen=True)
class FetchResult:
    """One partition of a Fetch response, with the raw ``records`` bytes.

    ``records`` is exactly the broker's byte string (segment layout, possibly ending in a partial
    batch, possibly starting before ``fetch_offset``). ``error_code``/``error`` are the Kafka
    partition error (0/"NONE" on success). For OFFSET_OUT_OF_RANGE, ``log_start_offset``,
    ``high_watermark`` and ``last_stable_offset`` come from a follow-up ListOffsets (-1 if that
    failed). For DELETED all offsets are -1. ``api_version`` is the Fetch version used.
    """

    topic: str
    partition: int
    fetch_offset: int
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    error_code: int
    error: str
    status: FetchStatus
    leader: int
    api_version: int

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.OK

    @property
    def out_of_range(self) -> bool:
        return self.status is FetchStatus.OFFSET_OUT_OF_RANGE

    @property
    def deleted(self) -> bool:
        return self.status is FetchStatus.DELETED
