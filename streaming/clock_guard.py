"""The clock of files and dumps, with its skew guard (detection.md §2, revision 3). Pure.

Segments and dumps have no read time: their clock ``now`` is the newest timestamp in the input.
Brokers and producers do not share a clock, so one timestamp far ahead (a producer with a wrong
clock, a broker whose NTP failed) would age every transaction of the input at once. A timestamp
is an **outlier** when it lies more than the tolerance ahead of the wall clock at scan time, or
more than the tolerance ahead of the newest timestamp of every *other* partition of the input;
an outlier is flagged ``clock_skew`` and never becomes ``now``. Outliers only take proof away:
a transaction whose own timestamps are outliers is reported unverified (``clock-skew``).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping

DEFAULT_TOLERANCE_MS = 3600 * 1000  # [thresholds] clock_skew_tolerance_ms


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def is_outlier(ts: int, key: Hashable, newest: Mapping[Hashable, int], *, wall_ms: int, tolerance_ms: int) -> bool:
    """Is timestamp ``ts`` of partition ``key`` an outlier, given every partition's newest
    timestamp (``newest``, -1 or absent: the partition has none)?"""
    if ts > wall_ms + tolerance_ms:
        return True
    others = [v for k, v in newest.items() if k != key and v is not None and v >= 0]
    return bool(others) and ts > max(others) + tolerance_ms


def guarded_clock(newest: Mapping[Hashable, int], *, wall_ms: int | None = None,
                  tolerance_ms: int = DEFAULT_TOLERANCE_MS) -> tuple[int, set[Hashable]]:
    """(the input's clock = newest timestamp that is not an outlier, -1 when none; the
    partitions whose newest timestamp is an outlier)."""
    wall = wall_clock_ms() if wall_ms is None else wall_ms
    outliers = {k for k, ts in newest.items()
                if ts is not None and ts >= 0 and is_outlier(ts, k, newest, wall_ms=wall, tolerance_ms=tolerance_ms)}
    kept = [ts for k, ts in newest.items() if k not in outliers and ts is not None and ts >= 0]
    return (max(kept) if kept else -1), outliers
