"""Carrying a partition's unread range from one micro-batch's plan to the next (issue 20 item 1).

Spark commits a micro-batch's end offsets whatever its reads found: a range planned for
``[start, end)`` whose read stopped at ``s`` (leader lost after planning, a tiered-storage fetch
that answered empty, a new leader whose high watermark is still behind) cannot be planned again
by Spark. The executor reports such a remainder as a gap row whose reason starts with
``unavailable: `` and whose ``first_offset`` is ``s`` (and no progress row, so nothing downstream
treats the partition as read up to now). Data goes down the page, never back up, so the only way
the driver's planner learns where the read stopped is through the driver's own ``foreachBatch``,
which sees every gap row: it records ``{partition: s}`` under the micro-batch id in this ledger
**before** the micro-batch is recorded as published, and the next plan starts that partition at
``s`` again (the plan's offsets keep it under ``behind`` until a plan actually reads from there,
so it survives restarts and plans in which the partition is still unavailable).

Only the broker's word makes a range gone: OFFSET_OUT_OF_RANGE with a log start above it (a gap
row naming both offsets, not reported here because its reason is not ``unavailable: ``).

Where it lives: beside the checkpoint when the checkpoint is a local path; for a checkpoint URL
(HDFS, S3) in the local temporary directory, named after the URL: the planner runs in Spark's
Python source process on the driver host, which has no Hadoop client.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

from streaming.availability import UNAVAILABLE_PREFIX

LEDGER_OPTION = "unread_ledger"
KEEP_BATCHES = 4  # the next plan reads a batch's entries; a few more are kept for a replayed batch


def ledger_path(checkpoint: str) -> str:
    """Where the ledger of the query checkpointed at ``checkpoint`` lives (see the module)."""
    local = checkpoint[len("file://"):] if checkpoint.startswith("file://") else checkpoint
    if "://" not in local:
        return os.path.join(local.rstrip("/"), "txnwatch-unread.json")
    digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"txnwatch-unread-{digest}.json")


def _load(path: str) -> dict[str, dict[str, int]]:
    try:
        with open(path) as f:
            return json.load(f).get("batches", {})
    except FileNotFoundError:
        return {}


def record_unread(path: str, batch_id: int, gaps: list[dict[str, Any]]) -> None:
    """``foreachBatch`` side: remember where each partition of micro-batch ``batch_id`` stopped
    reading (its ``unavailable:`` gap rows with a ``first_offset``). Written atomically."""
    found: dict[str, int] = {}
    for g in gaps:
        if not (g.get("reason") or "").startswith(UNAVAILABLE_PREFIX):
            continue
        if g.get("topic") is None or g.get("partition") is None or g.get("first_offset") is None:
            continue
        k = f"{g['topic']}\t{int(g['partition'])}"
        found[k] = min(int(g["first_offset"]), found.get(k, int(g["first_offset"])))
    batches = _load(path)
    if not found and str(batch_id) not in batches:
        return
    batches[str(batch_id)] = found  # a replayed batch replaces what it found the first time
    keep = sorted(batches, key=int)[-KEEP_BATCHES:]
    doc = {"batches": {b: batches[b] for b in keep}}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".unread")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def unread_since(path: str | None, seen: int) -> tuple[dict[str, int], int]:
    """Planner side: ``({partition key: first unread offset}, newest batch id)`` of the entries
    recorded after batch ``seen`` (the newest one an earlier plan took)."""
    if not path:
        return {}, seen
    out: dict[str, int] = {}
    newest = seen
    for b, found in _load(path).items():
        if int(b) <= seen:
            continue
        newest = max(newest, int(b))
        for k, off in found.items():
            out[k] = min(int(off), out.get(k, int(off)))
    return out, newest
