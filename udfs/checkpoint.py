"""The broker's ``log-start-offset-checkpoint`` file (one per log directory). Pure, no Spark.

Kafka (``LogManager.LogStartOffsetCheckpointFile``, written by ``LogManager.
checkpointLogStartOffsetsInDir`` through ``OffsetCheckpointFile`` / ``CheckpointFile``): text,
a version line (``0``, ``OffsetCheckpointFile.CURRENT_VERSION``), a line with the number of
entries, then one ``<topic> <partition> <offset>`` line per entry (fields split on whitespace).
``CheckpointReadBuffer.read`` rejects the whole file on an unknown version, a malformed line or an
entry count that does not match; so does this reader.

Only partitions whose log start offset lies *above* their first segment's base offset get an
entry (DeleteRecords, or remote storage); for the others the log start is the first segment's
base offset. ``LogLoader.load`` takes ``max(checkpoint, first segment base)``.
"""

from __future__ import annotations

import re

CHECKPOINT_FILE = "log-start-offset-checkpoint"
# The same format (``OffsetCheckpointFile``), naming where each partition's log ends as the broker
# saw it: ``ReplicaManager.HighWatermarkFilename`` (the high watermarks, written by
# ``ReplicaManager.checkpointHighWatermarks``) and ``LogManager.RecoveryPointCheckpointFile`` (the
# recovery points, ``LogManager.checkpointRecoveryOffsetsInDir``; equal to the log end offset
# after a clean shutdown). An explicit file or dump proves it reached tp's end only when one of
# them names exactly the offset the read ended at (detection.md §0).
END_CHECKPOINT_FILES = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint")
VERSION = 0
_WS = re.compile(r"\s+")


def parse_log_start_checkpoint(text: str, source: str = CHECKPOINT_FILE) -> tuple[dict[tuple[str, int], int], str | None]:
    """(topic, partition) → log start offset, or ({}, reason) when the file is unreadable."""
    lines = text.splitlines()
    if not lines:
        return {}, None  # CheckpointReadBuffer.read: an empty file has no entries
    try:
        version = int(lines[0])
    except ValueError:
        return {}, f"{source} line 1: version {lines[0]!r} is not an integer"
    if version != VERSION:
        return {}, f"{source} line 1: unknown checkpoint version {version} (expected {VERSION})"
    if len(lines) < 2:
        return {}, None
    try:
        expected = int(lines[1])
    except ValueError:
        return {}, f"{source} line 2: entry count {lines[1]!r} is not an integer"
    out: dict[tuple[str, int], int] = {}
    for n, line in enumerate(lines[2:], 3):
        parts = _WS.split(line.strip())
        if len(parts) != 3 or not parts[1].lstrip("-").isdigit() or not parts[2].lstrip("-").isdigit():
            return {}, f"{source} line {n}: expected '<topic> <partition> <offset>', got {line!r}"
        out[(parts[0], int(parts[1]))] = int(parts[2])
    if len(lines) - 2 != expected:
        return {}, f"{source}: line 2 announces {expected} entries, the file holds {len(lines) - 2}"
    return out, None


def read_log_start_checkpoint(path: str) -> tuple[dict[tuple[str, int], int], str | None]:
    """The checkpoint at ``path``: ({}, None) when there is none, ({}, reason) when unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot read {path}: {exc.strerror}"
    return parse_log_start_checkpoint(text, path)
