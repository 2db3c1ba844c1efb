"""What a client's ListOffsets calls returned before, per topic and partition, and the check
that a new answer went below it (``MetadataCache.last_offsets``).

A high watermark or log start offset below what this client last returned for a partition means
a truncation, a new leader that lags behind the old one, or a
topic deleted and created again under the same name: :func:`streaming.sources.kafka_client.list_offsets`
asks the topic's metadata again before it answers. Both functions work on every row of an
:class:`~streaming.sources.kafka_client.results.OffsetsTable` at once (2,000 topics at 200,000
partitions); per topic only the assignments into its arrays are Python work.
"""

from __future__ import annotations

import numpy as np

from streaming.sources.kafka_client.metadata_cache import NO_OFFSET
from streaming.sources.kafka_client.results import DELETED, OK, OffsetsTable

__all__ = ["remember", "went_back"]


def remember(last: dict[str, tuple[np.ndarray, np.ndarray]], t: OffsetsTable) -> None:
    """Record in ``last`` (per topic: log start and high watermark arrays indexed by partition,
    ``NO_OFFSET`` where unknown) the answered rows of ``t``; a deleted partition: none."""
    names, starts, status = t.topics, t.starts, t.status
    done = (status == OK) | (status == DELETED)
    if not done.any():
        return
    deleted = status == DELETED
    vals_ls = np.where(deleted, NO_OFFSET, t.log_start)
    vals_hw = np.where(deleted, NO_OFFSET, t.high_watermark)
    lo_of = starts[:-1]
    rows_of = np.diff(starts)
    nonempty = rows_of > 0
    top = np.full(len(names), -1, dtype=np.int64)  # per topic: its highest answered partition
    done_of = np.zeros(len(names), dtype=np.int64)
    if nonempty.any():
        top[nonempty] = np.maximum.reduceat(np.where(done, t.partition, -1), lo_of[nonempty])
        done_of[nonempty] = np.add.reduceat(done.astype(np.int64), lo_of[nonempty])
    for i in np.flatnonzero(top >= 0).tolist():
        name = names[i]
        lo, hi = int(starts[i]), int(starts[i + 1])
        prev = last.get(name)
        size = int(top[i]) + 1
        if prev is None or len(prev[0]) < size:
            grown = (np.full(size, NO_OFFSET, dtype=np.int64), np.full(size, NO_OFFSET, dtype=np.int64))
            if prev is not None:
                grown[0][:len(prev[0])], grown[1][:len(prev[1])] = prev
            prev = last[name] = grown
        if done_of[i] == hi - lo:
            p = t.partition[lo:hi]
            prev[0][p] = vals_ls[lo:hi]
            prev[1][p] = vals_hw[lo:hi]
        else:
            d = done[lo:hi]
            p = t.partition[lo:hi][d]
            prev[0][p] = vals_ls[lo:hi][d]
            prev[1][p] = vals_hw[lo:hi][d]


def went_back(t: OffsetsTable, prevs: list[tuple[np.ndarray, np.ndarray] | None]) -> list[str]:
    """The topics (in table order) with an answered partition whose high watermark or log start
    is below what this client last returned for it (``prevs``: per topic of ``t``, the arrays of
    ``last_offsets``, or None). Every row compared at once: the arrays of the topics are joined
    and each row reads its partition's entry in them."""
    have = [i for i, prev in enumerate(prevs) if prev is not None]
    if not have:
        return []
    lens = np.zeros(len(prevs), dtype=np.int64)
    lens[have] = [len(prevs[i][0]) for i in have]
    offs = np.zeros(len(prevs), dtype=np.int64)
    offs[have] = np.cumsum(lens[have]) - lens[have]
    was_ls_all = np.concatenate([prevs[i][0] for i in have])
    was_hw_all = np.concatenate([prevs[i][1] for i in have])
    topic_of, p = t.topic_of, t.partition
    inside = (t.status == OK) & (p < lens[topic_of])  # a topic without earlier answers has length 0
    at = offs[topic_of[inside]] + p[inside]
    was_ls, was_hw = was_ls_all[at], was_hw_all[at]
    bad = (was_hw != NO_OFFSET) & ((t.high_watermark[inside] < was_hw) | (t.log_start[inside] < was_ls))
    return [t.topics[i] for i in np.unique(topic_of[inside][bad]).tolist()]
