"""Step 1 of a log-dir read, *list*: which partitions, segment and snapshot files a broker-shaped
log directory holds, and which byte ranges lie between two positions. Reads directory listings and
file sizes only, never file contents, and imports nothing of the project (the later steps,
:mod:`streaming.sources.logdir` to read and decode and :mod:`streaming.partition_read` to build
events, import it, never the other way round).

A log dir holds one folder per partition, ``<topic>-<partition>``, with segment files
``<20-digit base offset>.log`` and producer snapshots ``<20-digit offset>.snapshot`` (index files
and ``-delete``/``-future`` folders are ignored). A position in a partition is (segment base
offset, byte position in that segment).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

TXN_TOPIC = "__transaction_state"
_PART_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT = re.compile(r"^(\d{20})\.snapshot$")


@dataclass(frozen=True)
class PartitionDir:
    """A partition folder. ``name`` and ``is_txn_state`` are plain attributes, set once here, so
    that the later steps read them without calling back into this module."""

    path: str
    topic: str
    partition: int
    name: str = field(init=False)
    is_txn_state: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.topic}-{self.partition}")
        object.__setattr__(self, "is_txn_state", self.topic == TXN_TOPIC)


def parse_partition_dir(path: str) -> PartitionDir | None:
    """``.../<topic>-<partition>`` → PartitionDir; None for anything else (e.g. ``-delete`` dirs)."""
    m = _PART_DIR.match(os.path.basename(os.path.normpath(path)))
    if not m:
        return None
    return PartitionDir(os.path.abspath(path), m.group("topic"), int(m.group("partition")))


def list_partitions(root: str) -> list[PartitionDir]:
    """Partition folders of a log dir (or the folder itself if it is one), sorted by name."""
    root = os.path.abspath(root)
    own = parse_partition_dir(root)
    if own is not None and any(_SEGMENT.match(f) or _SNAPSHOT.match(f) for f in os.listdir(root)):
        return [own]
    out = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if os.path.isdir(full):
            pd_ = parse_partition_dir(full)
            if pd_ is not None:
                out.append(pd_)
    return out


def segments(part: PartitionDir) -> list[tuple[int, str]]:
    """(base offset, path) of the partition's ``.log`` files in offset order."""
    return _numbered(part, _SEGMENT)


def snapshots(part: PartitionDir) -> list[tuple[int, str]]:
    """(offset, path) of the partition's ``.snapshot`` files in offset order."""
    return _numbered(part, _SNAPSHOT)


def _numbered(part: PartitionDir, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    matches = ((pattern.match(name), name) for name in os.listdir(part.path))
    return sorted((int(m.group(1)), os.path.join(part.path, name)) for m, name in matches if m)


@dataclass(frozen=True)
class Chunk:
    """Bytes [start, end) of one segment file."""

    segment: int
    path: str
    start: int
    end: int


def chunks_between(part: PartitionDir, start: tuple[int, int] | None, end: tuple[int, int]) -> list[Chunk]:
    """The byte ranges from position ``start`` (None: the beginning) to ``end``, segment by segment."""
    out = []
    for base, path in segments(part):
        if start is not None and base < start[0]:
            continue
        if base > end[0]:
            break
        lo = start[1] if start is not None and base == start[0] else 0
        hi = end[1] if base == end[0] else os.path.getsize(path)
        if hi > lo:
            out.append(Chunk(base, path, lo, hi))
    return out


@dataclass(frozen=True)
class PartitionFiles:
    """What a read of one partition needs to know of its files, listed once before reading:
    segments (base offset, path) in offset order with their sizes, snapshots (offset, path), and
    the byte ranges before the read's start (``prefix``: a reader replays them when it has no
    memo of that prefix)."""

    part: PartitionDir
    segments: list[tuple[int, str]]
    sizes: dict[str, int]
    snapshots: list[tuple[int, str]]
    prefix: list[Chunk]


def list_files(part: PartitionDir, start: tuple[int, int] | None = None) -> PartitionFiles:
    """The partition's files as :class:`PartitionFiles`, with the ranges from its beginning to
    ``start`` (none when ``start`` is None)."""
    segs = segments(part)
    sizes = {path: os.path.getsize(path) for _, path in segs}
    prefix = []
    for base, path in segs if start is not None else ():
        if base > start[0]:
            break
        end = start[1] if base == start[0] else sizes[path]
        if end > 0:
            prefix.append(Chunk(base, path, 0, end))
    return PartitionFiles(part, segs, sizes, snapshots(part), prefix)
