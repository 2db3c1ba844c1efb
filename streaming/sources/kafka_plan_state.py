"""The driver-side planner's state, as typed objects, and its form in Spark's offset log.

Spark's contract for a ``DataSourceStreamReader`` (PySpark ``datasource.py``): the dict that
``latestOffset`` returns is written to the checkpoint's offset log *before* the micro-batch runs,
is handed back as ``start`` to the next ``latestOffset``, and ``partitions(start, end)`` is asked
again with both dicts read back from the log when a restarted query replays the last micro-batch
it had planned but not committed. So whatever the next plan needs, and whatever
``partitions(start, end)`` needs to plan the same reads again, must be in that dict; anything else
the driver knows is lost on restart. :class:`PlanState` is that dict as typed fields;
:meth:`PlanState.to_json` / :meth:`PlanState.from_json` are the only places that know its JSON
form (the keys are unchanged from the checkpoints written before this module existed, so running
queries resume across the upgrade).

Fields carried from plan to plan (they survive a restart because the next plan needs them):

* ``parts``: per partition the next offset to read and whether reading began at its log start:
  where the query resumes.
* ``clock``: the driver's clock of the plan (detection.md §2); it never goes back, also across
  a restart.
* ``ids``: topic ids (Metadata v10+): a recreated topic is told from the same one after a restart.
* ``gone``: topics dropped as deleted, with their id: one created again under the name is new.
* ``unavail``: per-partition availability (error, since, tries, retry time): the backoff and the
  outage's start are not reset by a restart.
* ``seen``: the ListOffsets facts as planned (high watermark, LSO, log start, leader): the input
  partitions' progress rows, and in probe mode whether a partition's offsets changed (no row
  when they did not).
* ``behind`` / ``unread_seen``: unread ranges carried to the next plan (kafka_unread.py) and how
  far the unread ledger was consumed: a range that stopped short before a restart is read again.
* ``probe`` (probe mode only): per partition the probe memo (:class:`ProbeMemo`): without it
  a restarted query would fetch every open partition's LSO again and lose ``follow``.

Fields of this plan only (they survive a restart because Spark may replay this micro-batch and
``partitions`` must plan the same reads): ``planned``, ``resets``, ``dropped``, ``starts``,
``rereads``, ``lagging``, ``txn_n``, and in probe mode ``reads``, ``closes``, ``emit``.

Driver memory only (:class:`ClusterAvailability`): since when no broker answered at all. While
no broker answers, ``latestOffset`` returns its ``start`` unchanged (Spark then runs no
micro-batch), so nothing new can reach the offset log; after a restart the
``unavailable_timeout_ms`` count starts again from the first plan that finds no broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Position:
    """Where reading a partition goes on: JSON ``[next offset, read from log start]``."""

    next: int
    from_log_start: bool


@dataclass(frozen=True, slots=True)
class Seen:
    """A partition's ListOffsets answer as planned: JSON ``[hw, lso, log start, leader]``
    (``None`` for an LSO or log start the broker did not give)."""

    high_watermark: int
    lso: int | None
    log_start: int | None
    leader: int


@dataclass(slots=True)
class PartitionDown:
    """A partition that could not be planned: the error, the first plan that found it down
    (wall ms), how many plans in a row did, and when it is asked again (doubling backoff)."""

    error: str
    since: int
    tries: int
    retry_at: int

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "since": self.since, "tries": self.tries, "retry_at": self.retry_at}

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> PartitionDown:
        return cls(v["error"], v["since"], v["tries"], v["retry_at"])


@dataclass(slots=True)
class Reset:
    """A partition whose log went backwards (or a topic created again): read again from
    ``restart``; ``first``/``last`` are the offsets its gap row names (see ``plan_reset``)."""

    restart: int
    from_log_start: bool | None  # None: keep the partition's flag (a truncation)
    first: int | None
    last: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"restart": self.restart, "from_log_start": self.from_log_start, "first": self.first,
                "last": self.last, "reason": self.reason}

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> Reset:
        return cls(v["restart"], v["from_log_start"], v["first"], v["last"], v["reason"])


@dataclass(slots=True)
class ProbeMemo:
    """Probe mode, one data partition: the LSO last probed, the end of the window read there,
    the producer id, first offset and first timestamp of the transaction found at it (``pid``
    None once the LSO passed it, or when the probe found none), and ``follow``: the next offset
    while the partition is read in full from its LSO (None: probed, not followed)."""

    lso: int
    end: int | None
    pid: int | None
    first: int | None
    first_ts: int | None
    follow: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"lso": self.lso, "end": self.end, "pid": self.pid, "first": self.first, "first_ts": self.first_ts}
        if self.follow is not None:
            out["follow"] = self.follow
        return out

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> ProbeMemo:
        return cls(v["lso"], v.get("end"), v.get("pid"), v.get("first"), v.get("first_ts"), v.get("follow"))


@dataclass(slots=True)
class ProbeRead:
    """Probe mode: a range to read now, ``[start, end)``; ``window``: it starts at the LSO (a
    window, not a continuation of earlier reads); ``note``: why the window holds no transaction.
    JSON ``[start, end, window]`` or ``[start, end, window, note]``."""

    start: int
    end: int
    window: bool
    note: str | None = None

    def to_json(self) -> list:
        return [self.start, self.end, self.window] + ([self.note] if self.note else [])

    @classmethod
    def from_json(cls, v: list) -> ProbeRead:
        return cls(v[0], v[1], v[2], v[3] if len(v) > 3 else None)


def _map(d: dict | None, f: Any) -> dict:
    return {k: f(v) for k, v in (d or {}).items()}


def _out(d: dict) -> dict:
    return {k: v.to_json() for k, v in d.items()}


@dataclass(slots=True)
class PlanState:
    """One plan of the kafka source (see the module docstring for what each field is and why it
    survives a restart). ``planned`` is None for the initial offsets (``initialOffset``), whose
    JSON holds only ``parts``, ``clock`` and ``unavail``."""

    parts: dict[str, Position] = field(default_factory=dict)
    clock: int = -1
    unavail: dict[str, PartitionDown] = field(default_factory=dict)
    # carried from plan to plan
    ids: dict[str, str] = field(default_factory=dict)
    gone: dict[str, str | None] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)
    behind: dict[str, int] = field(default_factory=dict)
    unread_seen: int = -1
    probe: dict[str, ProbeMemo] | None = None  # None: full read mode
    # this plan only
    planned: int | None = None
    resets: dict[str, Reset] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    rereads: dict[str, int] = field(default_factory=dict)
    lagging: list[str] = field(default_factory=list)
    txn_n: int | None = None
    reads: dict[str, ProbeRead] = field(default_factory=dict)
    closes: dict[str, list[list[int]]] = field(default_factory=dict)
    emit: list[str] = field(default_factory=list)

    @property
    def initial(self) -> bool:
        return self.planned is None

    def to_json(self) -> dict[str, Any]:
        """The offsets dict Spark writes to its offset log."""
        out: dict[str, Any] = {"parts": {k: [v.next, v.from_log_start] for k, v in self.parts.items()},
                               "clock": self.clock}
        if self.initial:
            out["unavail"] = _out(self.unavail)
            return out
        out.update({"planned": self.planned, "ids": dict(self.ids), "resets": _out(self.resets),
                    "unavail": _out(self.unavail), "dropped": dict(self.dropped), "gone": dict(self.gone),
                    "starts": dict(self.starts),
                    "seen": {k: [v.high_watermark, v.lso, v.log_start, v.leader] for k, v in self.seen.items()}, "behind": dict(self.behind),
                    "rereads": dict(self.rereads), "unread_seen": self.unread_seen, "lagging": list(self.lagging),
                    "txn_n": self.txn_n})
        if self.probe is not None:
            out.update({"probe": _out(self.probe), "reads": _out(self.reads),
                        "closes": {k: [list(c) for c in v] for k, v in self.closes.items()}, "emit": list(self.emit)})
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PlanState:
        """Read an offsets dict back (from Spark, or from a checkpoint written by an earlier
        version: a missing key is an empty field)."""
        return cls(
            # parts and seen hold one entry per partition: built inline (hundreds of thousands)
            parts={k: Position(v[0], v[1]) for k, v in (d.get("parts") or {}).items()}, clock=d.get("clock", -1),
            unavail=_map(d.get("unavail"), PartitionDown.from_json), ids=dict(d.get("ids") or {}),
            gone=dict(d.get("gone") or {}), seen={k: Seen(*v) for k, v in (d.get("seen") or {}).items()},
            behind=dict(d.get("behind") or {}), unread_seen=d.get("unread_seen", -1),
            probe=_map(d["probe"], ProbeMemo.from_json) if "probe" in d else None,
            planned=d.get("planned"), resets=_map(d.get("resets"), Reset.from_json),
            dropped=dict(d.get("dropped") or {}), starts=dict(d.get("starts") or {}),
            rereads=dict(d.get("rereads") or {}), lagging=list(d.get("lagging") or []), txn_n=d.get("txn_n"),
            reads=_map(d.get("reads"), ProbeRead.from_json),
            closes={k: [list(c) for c in v] for k, v in (d.get("closes") or {}).items()},
            emit=list(d.get("emit") or []))


@dataclass(slots=True)
class ClusterAvailability:
    """Whether any broker answers, as this driver has seen it (memory only: see the module).
    ``down_since`` is the wall ms of the first plan in a row that no broker answered (None: the
    last plan was answered); ``last_error`` what the last such plan met."""

    down_since: int | None = None
    last_error: str | None = None

    def down(self, now: int, error: str) -> int:
        """Record a plan no broker answered; returns how long (ms) the cluster has been down."""
        if self.down_since is None:
            self.down_since = now
        self.last_error = error
        return now - self.down_since

    def up(self) -> None:
        self.down_since = None
        self.last_error = None
