"""Producer-state snapshot files ``NNNNNNNNNNNNNNNNNNNN.snapshot`` (kafka-formats.md §6).

Format ``ProducerSnapshot`` version 1, the only version since 0.11 (same layout in the 0.11–3.4
Scala code and the 3.5+ generated Java code): int16 version, uint32 CRC-32C over bytes [6, EOF),
int32 entry count, then 46-byte entries. The file name's number N means "state after applying
every record with offset < N".
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from udfs.model import DecodeError
from udfs.varint import crc32c

_ENTRY = struct.Struct(">qhiqiqiq")  # 8+2+4+8+4+8+4+8 = 46
_HEADER_SIZE = 10
_NAME = re.compile(r"(\d{20})\.snapshot$")


@dataclass
class SnapshotFile:
    """Decoded snapshot: entries (dicts with ``udfs.model.SNAPSHOT_ENTRY_KEYS``) and errors."""

    version: int | None
    crc: int | None
    crc_valid: bool | None
    entries: list[dict[str, Any]] = field(default_factory=list)
    errors: list[DecodeError] = field(default_factory=list)
    offset: int | None = None  # from the file name, when known


def snapshot_offset_from_name(name: str) -> int | None:
    """The offset N of ``.../<20 digits>.snapshot``, or None."""
    m = _NAME.search(name)
    return int(m.group(1)) if m else None


def decode_snapshot(data: bytes | memoryview, *, source: str | None = None, validate_crc: bool = True) -> SnapshotFile:
    """Decode a producer snapshot. Never raises: problems become ``errors`` (byte positions)."""
    buf = memoryview(data).cast("B")
    out = SnapshotFile(version=None, crc=None, crc_valid=None)
    if source:
        out.offset = snapshot_offset_from_name(source)
    if len(buf) < _HEADER_SIZE:
        out.errors.append(DecodeError(0, f"file is {len(buf)} bytes, a snapshot header needs {_HEADER_SIZE}", source))
        return out
    version, crc, count = struct.unpack_from(">hIi", buf, 0)
    out.version, out.crc = version, crc
    if version != 1:
        out.errors.append(DecodeError(0, f"unknown snapshot version {version} (only 1 exists)", source))
        return out
    if validate_crc:
        out.crc_valid = crc32c(buf[6:]) == crc
        if not out.crc_valid:
            out.errors.append(DecodeError(2, f"CRC-32C mismatch: stored {crc}, computed {crc32c(buf[6:])}", source))
    if count < 0:
        out.errors.append(DecodeError(6, f"negative entry count {count}", source))
        return out
    avail = (len(buf) - _HEADER_SIZE) // _ENTRY.size
    if avail < count:
        out.errors.append(DecodeError(_HEADER_SIZE + avail * _ENTRY.size,
                                      f"truncated: header says {count} entries, file holds {avail}", source))
    elif len(buf) - _HEADER_SIZE > count * _ENTRY.size:
        out.errors.append(DecodeError(_HEADER_SIZE + count * _ENTRY.size,
                                      f"{len(buf) - _HEADER_SIZE - count * _ENTRY.size} trailing bytes after "
                                      f"{count} entries", source))
    for i in range(min(count, avail)):
        pid, epoch, last_seq, last_off, off_delta, ts, coord, txn_first = _ENTRY.unpack_from(
            buf, _HEADER_SIZE + i * _ENTRY.size)
        out.entries.append({
            "producer_id": pid,
            "producer_epoch": epoch,
            "last_sequence": last_seq,
            "last_offset": last_off,
            "offset_delta": off_delta,
            "timestamp": ts,
            "coordinator_epoch": coord,
            "current_txn_first_offset": txn_first,
        })
    return out


@dataclass(frozen=True)
class SnapshotSeed:
    """The producer snapshot a read of a data partition starts from (detection.md §1)."""

    entries: list[dict[str, Any]]
    offset: int
    source_position: str


@dataclass(frozen=True)
class SnapshotCandidate:
    """A producer snapshot a source found: its offset, where it is, and how to read it.

    ``load`` returns (entries, problems); any problem makes the snapshot unusable, as the broker's
    ``ProducerStateManager.readSnapshot`` throws ``CorruptSnapshotException`` for a bad CRC, an
    unknown version or a schema failure (short or long file) and never loads part of it. Seeding
    from a partial entry list would make the missing producers look absent (epoch 0, "exact").
    """

    offset: int
    source_position: str
    load: Callable[[], tuple[list[dict[str, Any]], list[str]]]


def newest_readable_snapshot(
    candidates: Sequence[SnapshotCandidate],
) -> tuple[SnapshotSeed | None, list[tuple[str, str]]]:
    """The newest readable snapshot (``ProducerStateManager.loadFromSnapshot``: latest first, a
    corrupt one skipped for the next newest), and (source position, reason) of each one skipped."""
    skipped: list[tuple[str, str]] = []
    for c in sorted(candidates, key=lambda c: c.offset, reverse=True):
        entries, problems = c.load()
        if not problems:
            return SnapshotSeed(entries, c.offset, c.source_position), skipped
        skipped.append((c.source_position, f"producer snapshot at offset {c.offset} unreadable, not used "
                        f"(the broker skips it too and loads the next newest): {'; '.join(problems)}"))
    return None, skipped


def read_snapshot_file(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A ``.snapshot`` file's entries and the problems that make it unusable (a
    :class:`SnapshotCandidate`'s ``load`` for a file on disk)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return [], [f"cannot read {path}: {exc.strerror}"]
    snap = decode_snapshot(data, source=path)
    return snap.entries, [f"{e.reason} (byte {e.position})" for e in snap.errors]
