"""Transactional offset commits in ``__consumer_offsets`` that no marker has finished (issue 25 item 1).

A transactional producer's ``sendOffsetsToTransaction`` makes the group coordinator append the
group's offsets to ``__consumer_offsets`` as transactional data of that producer
(``TxnOffsetCommit`` -> ``GroupMetadataManager.storeOffsets`` / ``OffsetMetadataManager
.commitTransactionalOffset``). Until the COMMIT/ABORT marker lands there, the coordinator keeps
them pending, and an OffsetFetch with ``require_stable`` (KIP-447, 2.5+) answers
UNSTABLE_OFFSET_COMMIT for those partitions (``GroupMetadataManager.getOffsets``:
``requireStable && group.hasPendingOffsetCommitsForTopicPartition(tp)``). A transaction that never
ends therefore holds the group: its consumers cannot fetch their start position.

Pure decoders (no Spark, no ``streaming``):

* :func:`decode_offset_commit_key` / :func:`decode_offset_commit_value`: the record key/value
  bytes (``OffsetCommitKey.json`` versions 0-1: group, topic, partition; ``OffsetCommitValue``:
  offset first, all versions). Key version 2 is group metadata, 3+ are the KIP-848/share records:
  not offset commits.
* :func:`open_offset_commits`: over a segment's (or a Fetch answer's) raw batches, the offset
  commits inside transactions still open at the end of the bytes, paired with
  :func:`udfs.pairing.pair` (the one pairing rule of the product).
* :func:`open_offset_commits_in_dump`: the same over a parsed ``--offsets-decoder`` dump
  (:class:`udfs.dump_text.DumpFile`: its batch table and ``offset_commits``).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from udfs.pairing import Step, pair
from udfs.record_batch import iter_records, scan_batches

#: keys of one open offset commit (both functions)
OPEN_COMMIT_KEYS = ("producer_id", "producer_epoch", "txn_first_offset", "offset", "group", "topic", "partition",
                    "committed_offset", "reason")
_HEADER = 61  # record batch v2 header size; records follow it (kafka-formats.md §2)


def _string(buf: bytes | memoryview, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    if n < 0 or pos + 2 + n > len(buf):
        raise ValueError(f"string length {n} out of bounds")
    return bytes(buf[pos + 2:pos + 2 + n]).decode("utf-8"), pos + 2 + n


def decode_offset_commit_key(key: bytes | memoryview) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset-commit key; None for the coordinator's other records.
    Raises ValueError on a truncated key."""
    if len(key) < 2:
        raise ValueError("key shorter than its version")
    (version,) = struct.unpack_from(">h", key, 0)
    if version not in (0, 1):
        return None
    group, pos = _string(key, 2)
    topic, pos = _string(key, pos)
    if pos + 4 > len(key):
        raise ValueError("key ends before its partition")
    (partition,) = struct.unpack_from(">i", key, pos)
    return group, topic, partition


def decode_offset_commit_value(value: bytes | memoryview | None) -> int | None:
    """The committed offset of an offset-commit value (None for a tombstone)."""
    if value is None:
        return None
    if len(value) < 10:
        raise ValueError("value shorter than version + offset")
    return struct.unpack_from(">q", value, 2)[0]


def open_offset_commits(data: bytes | memoryview, *, source: str | None = None) -> list[dict[str, Any]]:
    """Offset commits of transactions still open at the end of ``data`` (segment layout).

    A batch that cannot be decoded (compressed: the coordinator compresses with
    ``offsets.topic.compression.codec``) still yields one entry per batch with group/topic/partition
    None and ``reason`` saying why, so an open transaction is never dropped silently.
    """
    buf = memoryview(data)
    c = scan_batches(buf, validate_crc=False, source=source, allow_partial_tail=True).columns
    return _still_open(c, range(len(c["base_offset"])), lambda i, first: _batch_commits(buf, c, i, first))


def _still_open(cols: Mapping[str, Any], order: Any, commits_of: Any) -> list[dict[str, Any]]:
    """Walk the batches ``cols`` in ``order`` with the pairing rule (:func:`udfs.pairing.pair`) and
    return, per producer id, the entries ``commits_of(i, first_offset)`` gives for the data batches
    of the transaction still open at the end; a control batch drops what its producer had pending."""
    open_txn: dict[int, int] = {}  # producer id -> first offset of its open transaction
    pending: dict[int, list[dict[str, Any]]] = {}
    for i in order:
        pid = int(cols["producer_id"][i])
        step = pair(pid in open_txn, transactional=bool(cols["is_transactional"][i]),
                    control=bool(cols["is_control"][i]), producer_id=pid)
        if step is Step.IGNORE:
            continue
        if step is Step.CLOSE:
            open_txn.pop(pid, None)
            pending.pop(pid, None)
            continue
        if step is Step.OPEN:
            open_txn[pid] = int(cols["base_offset"][i])
        pending.setdefault(pid, []).extend(commits_of(i, open_txn[pid]))
    return [e for pid in sorted(pending) for e in pending[pid]]


def _batch_commits(buf: memoryview, c: Mapping[str, np.ndarray], i: int, first: int) -> list[dict[str, Any]]:
    pos, size = int(c["position"][i]), int(c["batch_size"][i])
    base = int(c["base_offset"][i])
    common = {"producer_id": int(c["producer_id"][i]), "producer_epoch": int(c["producer_epoch"][i]),
              "txn_first_offset": first}
    if int(c["compression"][i]) != 0:
        return [dict(common, offset=base, group=None, topic=None, partition=None, committed_offset=None,
                     reason=f"batch at offset {base} is compressed (codec {int(c['compression'][i])}): "
                            "its offset-commit keys were not decoded")]
    out = []
    try:
        for off_delta, _ts, key, value in iter_records(buf, pos + _HEADER, pos + size, int(c["record_count"][i])):
            k = decode_offset_commit_key(key) if key is not None else None
            if k is None:
                continue
            out.append(dict(common, offset=base + off_delta, group=k[0], topic=k[1], partition=k[2],
                            committed_offset=decode_offset_commit_value(value), reason=None))
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        out.append(dict(common, offset=base, group=None, topic=None, partition=None, committed_offset=None,
                        reason=f"batch at offset {base}: offset-commit record unreadable ({exc})"))
    return out


def open_offset_commits_in_dump(f: Any) -> list[dict[str, Any]]:
    """:func:`open_offset_commits` over a parsed ``--offsets-decoder`` dump (``udfs.dump_text.DumpFile``).
    Records are placed in their batch by offset; a transactional batch whose record lines were not
    printed (shallow dump) yields one entry with ``reason`` instead of its keys."""
    b = f.batches
    by_offset = {r["offset"]: r for r in f.offset_commits if r["offset"] is not None}
    offsets = sorted(by_offset)

    def commits_of(i: int, first: int) -> list[dict[str, Any]]:
        base, last = int(b["base_offset"][i]), int(b["last_offset"][i])
        common = {"producer_id": int(b["producer_id"][i]), "producer_epoch": int(b["producer_epoch"][i]),
                  "txn_first_offset": first}
        lo, hi = bisect.bisect_left(offsets, base), bisect.bisect_right(offsets, last)
        recs = [by_offset[o] for o in offsets[lo:hi]]
        if not recs and not f.records_printed:
            return [dict(common, offset=base, group=None, topic=None, partition=None, committed_offset=None,
                         reason=f"batch at offset {base}: record lines not printed (dump without "
                                "--offsets-decoder or --deep-iteration)")]
        return [dict(common, offset=r["offset"], group=r["group"], topic=r["topic"], partition=r["partition"],
                     committed_offset=r["committed_offset"], reason=None) for r in recs]

    return _still_open(b, np.argsort(b["base_offset"], kind="stable"), commits_of)


def pending_by_partition(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One producer's open offset commits as the group coordinator holds them pending: per (group,
    topic, partition) the latest record of the transaction wins and a tombstone removes the entry
    (``GroupMetadataManager.loadGroupsAndOffsets``: ``pendingOffsets(producerId).put`` /
    ``.remove`` for a record without value; 4.x ``OffsetMetadataManager.replay`` likewise). Entries
    without a decoded key (``reason`` set) are kept, each on its own. Order: first appearance."""
    out: dict[tuple, dict[str, Any]] = {}
    for n, e in enumerate(entries):
        if e["group"] is None:
            out[(None, None, n)] = e
            continue
        k = (e["group"], e["topic"], e["partition"])
        if e["committed_offset"] is None:
            out.pop(k, None)
        elif k in out:
            out[k] = e  # the later commit of the same partition is the pending one; keeps its place
        else:
            out[k] = e
    return list(out.values())


def held_groups(commits: list[dict[str, Any]] | None) -> list[str] | None:
    """The consumer groups a transaction's pending offset commits hold (sorted): every group with a
    pending commit that the coordinator did not answer as stable (``unstable`` False: its
    OffsetFetch(require_stable) gave an offset, so nothing is pending there any more)."""
    if commits is None:
        return None
    return sorted({c["group"] for c in commits if c.get("group") is not None and c.get("unstable") is not False})
