"""Offline (``txnwatch scan``): a finding on ``__consumer_offsets`` names the offset commits it holds.

The live path reads them from the broker (``streaming.broker_confirm.held_offset_commits``); a
scan has the same bytes on disk: the ``__consumer_offsets-N`` segments of a log dir, or
``kafka-dump-log.sh --offsets-decoder`` text of that partition. This module reads the input
again for just those partitions and fills the alert fields ``pending_offset_commits``
(``unstable`` is None: no coordinator to ask) and ``blocked_groups`` (the groups whose commits are
pending) of these ``group-offsets-held`` findings. Findings on other topics are left untouched.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from udfs.dump_text import detect_dump, merge_segments, parse_dump, path_info
from udfs.offset_commit import (
    held_groups,
    open_offset_commits,
    open_offset_commits_in_dump,
    pending_by_partition,
)

log = logging.getLogger("txnwatch")

OFFSETS_TOPIC = "__consumer_offsets"


def _input_files(paths: Iterable[str]) -> list[Path]:
    out = []
    for p in paths:
        out += sorted(Path(r) / n for r, _d, names in os.walk(p) for n in names) if os.path.isdir(p) else [Path(p)]
    return out


def pending_commits_offline(paths: Iterable[str], partition: int, producer_id: int,
                            first_offset: int) -> list[dict[str, Any]] | None:
    """P's open offset commits from ``first_offset`` on ``__consumer_offsets-<partition>`` in the
    inputs: its segment files (named ``__consumer_offsets-<partition>/<20 digits>.log``) and any
    dump text whose ``Dumping`` line names that partition. None when the inputs hold nothing of it."""
    segments: list[tuple[int, bytes]] = []
    dumps = []
    for f in _input_files(paths):
        topic, part, base, ext = path_info(str(f))
        if ext == "log" and base is not None:
            if topic == OFFSETS_TOPIC and part == partition:
                segments.append((base, f.read_bytes()))
            continue
        if ext in ("snapshot", "index", "timeindex", "txnindex", "checkpoint"):
            continue
        head = f.read_bytes()[: 1 << 16]
        if not detect_dump(head):
            continue
        dumps += [d for d in parse_dump(f.read_text("utf-8", "replace"), source=f.name)
                  if d.topic == OFFSETS_TOPIC and d.partition == partition]
    if not segments and not dumps:
        return None
    found = open_offset_commits(b"".join(b for _o, b in sorted(segments)),
                                source=f"{OFFSETS_TOPIC}-{partition}") if segments else []
    for d in merge_segments(dumps):
        found += open_offset_commits_in_dump(d)
    return [e for e in found if e["producer_id"] == int(producer_id) and e["offset"] >= int(first_offset)]


def add_pending_offset_commits(findings: list[dict[str, Any]], paths: list[str]) -> None:
    """Fill ``pending_offset_commits`` of the late/hanging findings on ``__consumer_offsets``."""
    for a in findings:
        if a.get("topic") != OFFSETS_TOPIC or a.get("status") not in ("late", "hanging"):
            continue
        try:
            pending = pending_commits_offline(paths, int(a["partition"]), int(a["producer_id"]),
                                              int(a["first_offset"]))
        except OSError as exc:
            log.warning("reading the offset commits of %s failed: %s", a.get("key"), exc)
            continue
        if pending is None:
            continue
        a["pending_offset_commits"] = [
            {"group": e["group"], "topic": e["topic"], "partition": e["partition"],
             "committed_offset": e["committed_offset"], "record_offset": e["offset"], "unstable": None,
             "reason": e["reason"]} for e in pending_by_partition(pending)]
        # kind group-offsets-held: the groups whose offset commits it keeps pending
        a["blocked_groups"] = held_groups(a["pending_offset_commits"])
