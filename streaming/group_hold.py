"""Which consumer groups an open transaction holds *now*, and which are only behind it (issue 25 item 7).

A ``read_committed`` consumer never gets offsets at or above the partition's last stable offset:
``Partition.fetchOffsetSnapshot`` picks the LSO as the upper bound of a READ_COMMITTED fetch and
``LocalLog.read`` stops there (``maxOffsetMetadata``). The transaction with the smallest first
offset pins the LSO at that first offset F. A group whose committed offset O on the partition is

* **held** when O <= LSO = F and no record the consumer would be given lies in [O, F): it has read
  everything it can and waits for the transaction (O = F is the plain case; O < F when only
  control batches, aborted transactional data or emptied batches lie in between);
* **lagging** when O <= F but committed records lie in [O, F) (it still has data to read and will
  be held when it gets to F), or when the finding does not pin the LSO now (LSO < F: another,
  older transaction holds the partition first). Groups the check could not decide within its
  byte budget are also reported as lagging, never as held.

"A record the consumer would be given" follows the consumer's own filter
(``CompletedFetch.nextFetchedRecord``): control batches are skipped, transactional batches of an
aborted transaction are skipped, everything else is delivered. Below the LSO every transaction is
finished, so each transactional data batch's fate is its producer's next COMMIT or ABORT marker;
an empty control batch (compaction removed its record) decides nothing
(``ProducerStateManager``/spec kafka-formats.md §3.4). The scan reads batch headers only
(``udfs.record_batch.scan_batches``), READ_UNCOMMITTED, forwards from O, past F when a producer's
marker lies beyond it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from udfs.model import CONTROL_ABORT, CONTROL_COMMIT

#: bytes one group-hold check may fetch per finding before it stops undecided
DEFAULT_HOLD_MAX_BYTES = 64 << 20


class CommittedRecordScan:
    """Feeds batch-header columns (``udfs.record_batch.scan_batches`` layout) of one partition in
    offset order; answers whether a record a read_committed consumer would be given lies in
    ``[lo, hi)``. :attr:`decided` is True/False once known, None while more batches are needed."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.pending: set[int] = set()  # producers with transactional records in [lo, hi), fate unknown
        self.next_offset = lo
        self.decided: bool | None = None if lo < hi else False

    def feed(self, c: Mapping[str, np.ndarray]) -> bool | None:
        for i in range(len(c["base_offset"])):
            if self.decided is not None:
                break
            base, last = int(c["base_offset"][i]), int(c["last_offset"][i])
            if last < self.next_offset:
                continue  # a batch the fetch returned again (a fetch starts at the batch holding its offset)
            self.next_offset = last + 1
            pid = int(c["producer_id"][i])
            if bool(c["is_control"][i]):
                ctype = int(c["control_type"][i])
                if pid in self.pending and ctype == CONTROL_COMMIT:
                    self.decided = True
                elif ctype == CONTROL_ABORT:
                    self.pending.discard(pid)
                continue
            in_range = last >= self.lo and base < self.hi and int(c["record_count"][i]) > 0
            if not in_range:
                continue
            if not bool(c["is_transactional"][i]):
                self.decided = True
            else:
                self.pending.add(pid)
        if self.decided is None and self.next_offset >= self.hi and not self.pending:
            self.decided = False
        return self.decided


def classify_groups(committed: Mapping[str, int], first_offset: int, lso: int | None,
                    committed_between: Callable[[int, int], bool | None]) -> tuple[list[str], list[str]] | None:
    """(held, lagging) group names for the transaction starting at ``first_offset`` on one partition.

    ``committed``: group -> committed offset on the partition (-1 = none). ``lso``: the partition's
    LSO now (None = unknown -> None). ``committed_between(lo, hi)``: whether a delivered record lies
    in [lo, hi) (None = undecided). Groups above ``first_offset`` are neither (a read_committed
    consumer cannot get there while the transaction is open; such a group reads uncommitted).
    """
    if lso is None:
        return None
    behind = {g: o for g, o in committed.items() if 0 <= o <= first_offset}
    if lso > first_offset:
        return [], []  # the LSO passed the transaction: it holds nobody now
    if lso < first_offset:
        return [], sorted(behind)  # an older transaction pins the LSO first
    held: list[str] = []
    bound = first_offset  # [bound, first_offset) is known to hold no delivered record
    levels = sorted(set(behind.values()), reverse=True)
    for o in levels:
        free = True if o == first_offset else committed_between(o, bound) is False
        if not free:
            lagging = sorted(g for g, x in behind.items() if x <= o)
            return sorted(held), lagging
        held += [g for g, x in behind.items() if x == o]
        bound = o
    return sorted(held), []


def committed_between_reader(fetch: Callable[[int, int], Any], scan: Callable[[bytes], Any],
                             max_bytes: int = DEFAULT_HOLD_MAX_BYTES,
                             fetch_bytes: int = 1 << 20) -> Callable[[int, int], bool | None]:
    """``committed_between(lo, hi)`` over a partition: ``fetch(offset, max_bytes)`` returns a
    :class:`~streaming.sources.kafka_wire.FetchResult`, ``scan(records)`` its header columns. None
    when the answer needs more than ``max_bytes`` or the partition cannot be read."""

    def committed_between(lo: int, hi: int) -> bool | None:
        s = CommittedRecordScan(lo, hi)
        spent, size = 0, fetch_bytes
        while s.decided is None and spent < max_bytes:
            res = fetch(s.next_offset, min(size, max_bytes - spent))
            if not res.ok:
                return None
            spent += len(res.records)
            c = scan(res.records)
            if not len(c["base_offset"]):
                if not res.records or s.next_offset >= res.high_watermark:
                    return None  # nothing more to read and a producer's fate still open: unknown
                size *= 2  # a batch larger than the fetch (pre-KIP-74 brokers): ask for more room
                continue
            s.feed(c)
        return s.decided

    return committed_between
