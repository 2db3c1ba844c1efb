"""The ``--offsets-decoder`` key/payload text of ``kafka-dump-log.sh`` on ``__consumer_offsets``.

Pure decoder (no Spark, no ``streaming``): one record's printed key and payload -> the offset
commit it holds, or None for the group coordinator's other records (group metadata, the KIP-848
and share-group records). Three generations, each read from the DumpLogSegments source of its
release tag:

* 0.11 - 2.4 (``kafka.tools.DumpLogSegments.OffsetsMessageParser.parseOffsets`` at 0.11.0.0 and
  2.4.0): key ``offset::<group>:<topic>:<partition>``, payload ``<offset>`` or
  ``<offset>:<metadata>``. A tombstone is not printable (``readOffsetMessageValue`` gives null and
  the parser dereferences it), so there is no tombstone form.
* 2.5 - 3.7 (``GroupMetadataManager.formatRecordKeyAndValue`` -> ``parseOffsets`` at 2.5.0,
  3.0.0 and 3.7.0): key ``offset_commit::group=<group>,partition=<topic>-<partition>``
  (``TopicPartition.toString``), payload ``offset=<n>`` or ``offset=<n>,metadata=<m>``, tombstone
  ``<DELETE>``; group metadata ``group_metadata::group=<g>``; an unreadable key
  ``unknown::version=<n>`` without payload.
* 3.8 onward, KAFKA-16470 (``OffsetsMessageParser.prepareKey``/``prepareValue`` at 3.8.0, Scala
  up to 4.2; ``CoordinatorRecordMessageParser`` of the Java ``org.apache.kafka.tools
  .DumpLogSegments`` from 4.3): key ``{"type":"<t>","data":{"group":…,"topic":…,"partition":…}}``,
  payload ``{"version":"<v>","data":{"offset":…,"leaderEpoch":…,"metadata":…,"commitTimestamp":…}}``
  or ``<DELETE>``. ``type`` is the key *version* in the Scala parser (0 and 1 are offset commits,
  2 group metadata; ``OffsetCommitKey.json`` "validVersions": "0-1") and the record's ``apiKey`` in
  the Java one (``LegacyOffsetCommitKey`` 0, ``OffsetCommitKey`` 1, ``GroupMetadataKey`` 2), so
  both print 0 or 1 for an offset commit. Undecodable records print ``Unknown record type N at
  offset O, skipping.`` or ``Error at offset O, skipping. <msg>`` as the key, no payload.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_OLD_KEY = re.compile(r"^offset::(.*):([^:]+):(-?\d+)$")  # group may hold ':'; topics cannot
_OLD_VALUE = re.compile(r"^(-?\d+)(?::.*)?$")
_TEXT_KEY = re.compile(r"^offset_commit::group=(.*),partition=(.+)-(\d+)$")
_TEXT_VALUE = re.compile(r"^offset=(-?\d+)(?:,metadata=.*)?$")
_I64 = (-(2**63), 2**63 - 1)
_I32 = (-(2**31), 2**31 - 1)
#: keys the tools print for records they could not decode (no payload follows)
UNDECODED_PREFIXES = ("unknown::version=", "Unknown record type ", "Error at offset ")
#: JSON key types that are offset commits (see the module docstring)
_OFFSET_COMMIT_TYPES = frozenset({0, 1})


class OffsetsTextError(ValueError):
    """A printed offsets-decoder record that cannot be read; ``str()`` names the field."""


@dataclass(frozen=True)
class OffsetCommitText:
    """One offset-commit record as printed: ``committed_offset`` is None for a tombstone
    (``<DELETE>``: the commit was deleted or expired). ``style`` names the generation
    (``"0.11"``, ``"2.5"``, ``"json"``)."""

    group: str
    topic: str
    partition: int
    committed_offset: int | None
    style: str


def _bounded(text: str, rng: tuple[int, int], what: str) -> int:
    n = int(text)
    if not rng[0] <= n <= rng[1]:
        raise OffsetsTextError(f"{what} {text[:30]} out of range")
    return n


def is_offsets_key(key: str) -> bool:
    """Whether a printed key is ``--offsets-decoder`` output (any generation)."""
    return key.startswith(("offset::", "offset_commit::", "group_metadata::", '{"type":')) or \
        key.startswith(UNDECODED_PREFIXES)


def parse_offsets_record(key: str, payload: str | None) -> OffsetCommitText | None:
    """The offset commit a printed record holds; None for other coordinator records.

    Raises :class:`OffsetsTextError` for a key that claims to be an offset commit but does not
    read, or a payload that does not belong to it, and for keys the tool itself could not decode.
    """
    if key.startswith(UNDECODED_PREFIXES):
        raise OffsetsTextError(f"record the tool could not decode: {key[:80]!r}")
    if key.startswith("group_metadata::"):
        return None
    m = _TEXT_KEY.match(key)
    if m:
        group, topic = m.group(1), m.group(2)
        partition = _bounded(m.group(3), _I32, "partition")
        if payload is None or payload == "<DELETE>":
            return OffsetCommitText(group, topic, partition, None, "2.5")
        v = _TEXT_VALUE.match(payload)
        if not v:
            raise OffsetsTextError(f"offset commit payload {payload[:60]!r} is not offset=N[,metadata=M]")
        return OffsetCommitText(group, topic, partition, _bounded(v.group(1), _I64, "offset"), "2.5")
    m = _OLD_KEY.match(key)
    if m:
        group, topic = m.group(1), m.group(2)
        partition = _bounded(m.group(3), _I32, "partition")
        v = _OLD_VALUE.match(payload or "")
        if not v:
            raise OffsetsTextError(f"offset commit payload {str(payload)[:60]!r} is not N[:metadata]")
        return OffsetCommitText(group, topic, partition, _bounded(v.group(1), _I64, "offset"), "0.11")
    if key.startswith("{"):
        return _json_record(key, payload)
    if key.startswith("offset::") or key.startswith("offset_commit::"):
        raise OffsetsTextError(f"offset commit key {key[:80]!r} unreadable")
    return None


def json_envelope(text: str, tag: str) -> tuple[int, dict[str, Any]]:
    """``{"<tag>": N, "data": {...}}``, the JSON envelope Kafka's dump tools print for coordinator
    keys and values (``--offsets-decoder``, ``--transaction-log-decoder``) → (N, data). Raises
    ValueError saying what is wrong (shared by this module and ``udfs.dump_text``)."""
    try:
        v = json.loads(text)
        n = int(v[tag])
        data = v["data"]
        if not isinstance(data, dict):
            raise TypeError("data is not an object")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ValueError(str(exc)) from None
    return n, data


def _json_record(key: str, payload: str | None) -> OffsetCommitText | None:
    try:
        rtype, data = json_envelope(key, "type")
    except ValueError as exc:
        raise OffsetsTextError(f"offsets key: unreadable JSON ({exc})") from None
    if rtype not in _OFFSET_COMMIT_TYPES:
        return None  # group metadata (2) and the KIP-848/share-group records (3+)
    group, topic, partition = data.get("group"), data.get("topic"), data.get("partition")
    if not isinstance(group, str) or not isinstance(topic, str) or isinstance(partition, bool) \
            or not isinstance(partition, int) or not _I32[0] <= partition <= _I32[1]:
        raise OffsetsTextError(f"offset commit key {key[:80]!r}: group/topic/partition unreadable")
    if payload is None or payload == "<DELETE>":
        return OffsetCommitText(group, topic, partition, None, "json")
    try:
        v = json.loads(payload)
        offset = v["data"]["offset"]
        int(v["version"])
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise OffsetsTextError(f"offset commit payload: unreadable JSON ({exc})") from None
    if isinstance(offset, bool) or not isinstance(offset, int) or not _I64[0] <= offset <= _I64[1]:
        raise OffsetsTextError(f"offset commit payload: offset {offset!r} unreadable")
    return OffsetCommitText(group, topic, partition, offset, "json")
