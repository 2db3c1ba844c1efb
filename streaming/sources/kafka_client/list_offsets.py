"""ListOffsets (API key 2): log start, high watermark and last stable offset of partitions.

Versions **v2..v11** (:mod:`~streaming.sources.kafka_client.list_offsets_codec` encodes them):
v2 introduced ``isolation_level``; a partition may appear only once per request, so each leader
gets three requests, pipelined on its connection:

* timestamp EARLIEST (-2), READ_UNCOMMITTED: the log start offset;
* timestamp LATEST (-1), READ_UNCOMMITTED: the high watermark;
* timestamp LATEST (-1), READ_COMMITTED: the last stable offset (LSO, KIP-98).

``current_leader_epoch`` (v4+, KIP-320) is the epoch of the last Metadata answer: a leader whose
epoch differs answers FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH and metadata is refreshed.
Leaders are asked at once, each on its own deadline (:mod:`streaming.sources.kafka_parallel`).

Errors per partition (``OffsetFetcherUtils.handleListOffsetResponse``): leader errors, topic
errors and every unexpected code (UNKNOWN_SERVER_ERROR, ...) retry the partition after a
metadata refresh; ``*_AUTHORIZATION_FAILED`` raises
:class:`~streaming.sources.kafka_client.errors.KafkaAuthorizationError`; configuration errors
(:data:`streaming.sources.kafka_errors.CONFIGURATION_ERRORS`) raise with the setting named. A
partition missing from Metadata is deleted only when
:func:`~streaming.sources.kafka_client.metadata.confirmed_gone`.

With ``partial`` (``KafkaWire.offsets_available``) one unreadable partition does not fail the
others: after one metadata refresh and a second round, what still fails is returned as
unavailable with its last error, and a broker that does not answer within
``broker_timeout_ms`` makes its partitions unavailable at once.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from streaming.sources.kafka_client import metadata
from streaming.sources.kafka_client.core import AtOnce, ClientCore
from streaming.sources.kafka_client.errors import (
    LEADER_ERRORS,
    KafkaWireError,
    describe,
    error_name,
    retriable_exception,
)
from streaming.sources.kafka_client.list_offsets_codec import ListOffsetsFor
from streaming.sources.kafka_client.metadata_cache import UNKNOWN_PARTITION
from streaming.sources.kafka_client.results import (
    DELETED,
    DOWN,
    OK,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    OffsetsTable,
)
from streaming.sources.kafka_client.retry import Attempts
from streaming.sources.kafka_client.returned_offsets import remember, went_back
from streaming.sources.kafka_errors import Action, configuration_message
from streaming.sources.kafka_errors import action as error_action
from streaming.sources.kafka_parallel import NodeDeadline, per_node

log = logging.getLogger(__name__)

__all__ = ["offsets", "table"]

TopicPartition = tuple[str, int]

_EARLIEST = -2
_LATEST = -1
# ListOffsets rounds (a metadata refresh between them) before a partition counts as unavailable
# for this call in partial mode; the caller retries it with backoff later.
_PARTIAL_ROUNDS = 2


async def offsets(core: ClientCore, wanted: list[TopicPartition], partial: bool = False) -> Any:
    """``{(topic, partition): PartitionOffsets}`` for ``wanted`` (deleted ones with -1 offsets);
    with ``partial`` the pair ``(offsets, {(topic, partition): last error})`` (module docstring).
    The same as :func:`table`, one object per partition."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for t, p in wanted:
        by_topic[t].append(p)
    got = await table(core, list(by_topic.items()), partial)
    result = got.answered()
    if partial:
        return {tp: result[tp] for tp in wanted if tp in result}, got.down
    return {tp: result[tp] for tp in wanted}


def _routing(core: ClientCore, t: OffsetsTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cached leader (-1: none, UNKNOWN_PARTITION: not in the last Metadata) and leader
    epoch (-1: unknown) of each row."""
    leaders = np.full(len(rows), UNKNOWN_PARTITION, dtype=np.int64)
    epochs = np.full(len(rows), -1, dtype=np.int64)
    if not len(rows):
        return leaders, epochs
    memo = None
    if len(rows) == len(t):  # every row (rows are ascending and distinct): the same as last time?
        arrays = [core._cache.routing_arrays(name) for name in t.topics]
        memo = getattr(core, "_routing_memo", None)
        if (memo is not None and memo[0] == t.topics and np.array_equal(memo[1], t.partition)
                and all(a[0] is b[0] and a[1] is b[1] for a, b in zip(memo[2], arrays, strict=True))):
            # the same partitions asked and no topic's routing replaced (MetadataCache.routing_arrays
            # keeps its arrays while a topic's leaders and epochs stay the same): the same answer
            return memo[3].copy(), memo[4].copy()
        memo = arrays
    topic_of = t.topic_of[rows]
    cuts = np.flatnonzero(np.diff(topic_of)) + 1
    for seg in np.split(np.arange(len(rows)), cuts):
        la, ea = core._cache.routing_arrays(t.topics[int(topic_of[seg[0]])])
        p = t.partition[rows[seg]]
        inside = (p >= 0) & (p < len(la))
        leaders[seg[inside]] = la[p[inside]]
        epochs[seg[inside]] = ea[p[inside]]
    if memo is not None:
        core._routing_memo = (list(t.topics), t.partition.copy(), memo, leaders.copy(), epochs.copy())
    return leaders, epochs


def _leaders(core: ClientCore, t: OffsetsTable, rows: np.ndarray) -> np.ndarray:
    return _routing(core, t, rows)[0]


class _Reuse:
    """The last call's requests, per leader, for every partition it asked: sent again as they
    are (bodies and answer layouts already built) while the partitions asked and their leaders
    and leader epochs are the same (the common case: every trigger asks the same)."""

    def __init__(self, t: OffsetsTable, leaders: np.ndarray, epochs: np.ndarray,
                 by_leader: dict[int, np.ndarray], requests: dict[int, list[ListOffsetsFor]]) -> None:
        self.topics, self.partition = t.topics, t.partition
        self.leaders, self.epochs = leaders, epochs
        self.by_leader, self.requests = by_leader, requests

    def fits(self, t: OffsetsTable, leaders: np.ndarray, epochs: np.ndarray) -> bool:
        return (self.topics == t.topics and np.array_equal(self.partition, t.partition)
                and np.array_equal(self.leaders, leaders) and np.array_equal(self.epochs, epochs))


def _asked(t: OffsetsTable, rows: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``rows`` (ascending, so grouped by topic) as ``[(topic, partitions)]``, as a request asks."""
    topic_of = t.topic_of[rows]
    cuts = np.flatnonzero(np.diff(topic_of)) + 1
    return [(t.topics[int(t.topic_of[seg[0]])], t.partition[seg]) for seg in np.split(rows, cuts) if len(seg)]


def _columns(answer: Any, asked: list[tuple[str, np.ndarray]], leader_desc: str) -> tuple[np.ndarray, np.ndarray]:
    """(error codes, offsets) of one answer in the order of ``asked``. Brokers answer in the
    request's order (``KafkaApis.handleListOffsetRequest`` maps over the request's topics and
    partitions), checked here topic by topic with numpy; any other order is matched partition
    by partition, and a partition the answer lacks fails the call, as before."""
    if answer.flat is not None and answer.request is not None and answer.request.wanted is asked:
        return answer.flat  # checked against the request's own layout (list_offsets_codec._AnswerLayout)
    got = answer.topics
    if len(got) == len(asked) and all(g[0] == a[0] and np.array_equal(g[1], a[1]) for g, a in zip(got, asked, strict=True)):
        if not got:
            return np.zeros(0, np.int16), np.zeros(0, np.int64)
        return np.concatenate([g[2] for g in got]), np.concatenate([g[3] for g in got])
    lookup = answer.offsets
    codes, offs = [], []
    for name, parts in asked:
        for p in parts.tolist():
            hit = lookup.get((name, p))
            if hit is None:
                raise KafkaWireError(f"ListOffsets response from {leader_desc} lacks {name}-{p}")
            codes.append(hit[0])
            offs.append(hit[1])
    return np.asarray(codes, dtype=np.int16), np.asarray(offs, dtype=np.int64)


async def table(core: ClientCore, asked: list[tuple[str, Any]], partial: bool = True) -> OffsetsTable:
    """Offsets of ``asked`` (``[(topic, partitions)]``, topics distinct) as an
    :class:`OffsetsTable`; without ``partial`` a partition that cannot be read fails the call as
    :func:`offsets` does (module docstring). Partitions that answer without an error are handled
    as arrays; only the others are looked at one by one, as before."""
    t = OffsetsTable.asking(asked)
    n = len(t)
    attempts = Attempts(core, f"ListOffsets for {n} partition(s)")
    unavailable: dict[int, str] = {}
    errors: dict[int, str] = {}  # latest retriable error per row
    rounds = 0
    pending = np.arange(n)
    unknown = np.flatnonzero(_leaders(core, t, pending) == UNKNOWN_PARTITION)
    if len(unknown):
        await metadata.request(core, sorted({t.topics[i] for i in t.topic_of[unknown].tolist()}), attempts)
    while len(pending):
        retry: list[int] = []
        last_error: BaseException | str | None = None
        last_node = None
        leaders, epochs = _routing(core, t, pending)
        if (leaders == UNKNOWN_PARTITION).any():
            for r in pending[leaders == UNKNOWN_PARTITION].tolist():
                if await metadata.confirmed_gone(core, t.tp(r), attempts):
                    t.status[r] = DELETED
            pending = pending[t.status[pending] != DELETED]
            leaders, epochs = _routing(core, t, pending)
        for r in pending[leaders < 0].tolist():  # no leader (or still not listed)
            tp = t.tp(r)
            retry.append(r)
            last_error = errors[r] = f"no leader for {tp[0]}-{tp[1]} (LEADER_NOT_AVAILABLE)"
        everything = rounds == 0 and len(pending) == n
        reuse = getattr(core, "_list_offsets_reuse", None)
        if everything and reuse is not None and reuse.fits(t, leaders, epochs):
            by_leader, requests = reuse.by_leader, reuse.requests
        else:
            led = pending[leaders >= 0]
            led_by = leaders[leaders >= 0]
            order = np.argsort(led_by, kind="stable")
            led, led_by = led[order], led_by[order]
            cuts = np.flatnonzero(np.diff(led_by)) + 1
            by_leader = {int(led_by[seg[0]]): np.sort(led[seg]) for seg in np.split(np.arange(len(led)), cuts)
                         if len(seg)}
            requests = {leader: _requests(core, _asked(t, rows)) for leader, rows in by_leader.items()}
            if everything:
                core._list_offsets_reuse = _Reuse(t, leaders, epochs, by_leader, requests)
        # every leader is asked at once, each on its own deadline (kafka_parallel.per_node); the
        # answers are decoded after the wait, so decoding never counts against a deadline
        deadline = core._config["broker_timeout_ms"] if partial else None
        by_node = await per_node(core._transport, core._transport.wait_for,
                                 {leader: _job(core, leader, requests[leader]) for leader in by_leader},
                                 deadline, core._stalled if partial else None, _at_once(core, requests))
        ids_now = np.asarray([t.id_index(core._cache.topic_ids.get(name)) for name in t.topics] or [-1],
                             dtype=np.int64)
        for leader, rows in by_leader.items():
            answers = by_node[leader]
            if isinstance(answers, NodeDeadline):
                # a broker that does not answer in time: its partitions are unavailable for
                # this call at once (a second round would only wait on it again)
                left = core._throttled_for(leader)
                why = (f"throttled by the broker (quota, KIP-219) for {left} ms more than broker_timeout_ms"
                       if left else str(answers))
                for r in rows.tolist():
                    unavailable[r] = errors[r] = f"leader {core._node_desc(leader)}: {why}"
                continue
            answers = [answers] if isinstance(answers, BaseException) else [_decoded(core, a) for a in answers]
            failure = next((a for a in answers if isinstance(a, BaseException)), None)
            if failure is not None:
                if not retriable_exception(failure):
                    raise KafkaWireError(f"ListOffsets to {core._node_desc(leader)} failed: "
                                         f"{describe(failure)}") from failure
                retry.extend(rows.tolist())
                last_error, last_node = failure, leader
                for r in rows.tolist():
                    errors[r] = f"leader {core._node_desc(leader)} did not answer ({describe(failure)})"
                attempts.leader = leader
                continue
            (c0, start), (c1, hw), (c2, lso) = (_columns(a, requests[leader][0].wanted, core._node_desc(leader))
                                                for a in answers)
            bad = (c0 != 0) | (c1 != 0) | (c2 != 0)
            good = rows[~bad]
            t.status[good] = OK
            t.log_start[good], t.high_watermark[good], t.lso[good] = start[~bad], hw[~bad], lso[~bad]
            t.leader[good] = leader
            t.id_of[good] = ids_now[t.topic_of[good]]  # the topic id known when the answer came
            for j in np.flatnonzero(bad).tolist():
                r = int(rows[j])
                tp = t.tp(r)
                code = next(int(c[j]) for c in (c0, c1, c2) if c[j])
                act = error_action(code)
                if act is Action.DENIED:
                    raise core._denied("ListOffsets", code, tp[0], leader)
                if act is Action.CONFIGURATION:
                    raise KafkaWireError(configuration_message("ListOffsets", code, error_name(code),
                                                               f"{tp[0]}-{tp[1]}", core._node_desc(leader)),
                                         error_code=code)
                # OffsetFetcherUtils.handleListOffsetResponse: leader/topic errors and every
                # unexpected code (UNKNOWN_SERVER_ERROR, ...) retry the partition
                if code not in LEADER_ERRORS and act is not Action.UNKNOWN_TOPIC:
                    log.warning("KafkaWire: ListOffsets for %s-%s failed at %s with %s; retrying", tp[0], tp[1],
                                core._node_desc(leader), error_name(code))
                retry.append(r)
                last_error = errors[r] = f"{error_name(code)} for {tp[0]}-{tp[1]}"
                last_node = leader
        pending = np.asarray(sorted(set(retry)), dtype=np.int64)
        if len(pending):
            core._cache.suspect()
        if len(pending) and partial:
            rounds += 1
            if rounds >= _PARTIAL_ROUNDS:
                unavailable.update({r: errors.get(r, "retriable error") for r in pending.tolist()})
                break
            # one metadata refresh (the leader may have moved), then ask the rest once more
            await core._transport.sleep(core._config["retry_backoff_ms"] / 1000)
            await metadata.request(core, sorted({t.topics[i] for i in t.topic_of[pending].tolist()}), attempts)
        elif len(pending):
            await attempts.failed(last_error or "retriable error", last_node)
            await metadata.request(core, sorted({t.topics[i] for i in t.topic_of[pending].tolist()}), attempts)
    for r, error in unavailable.items():
        t.status[r] = DOWN
        t.down[t.tp(r)] = error
    await _check_backwards(core, t, attempts)
    return t


def _decoded(core: ClientCore, item: Any) -> Any:
    """One of :func:`_job`'s answers decoded (or the exception in its place)."""
    if isinstance(item, BaseException):
        return item
    pending, body = item
    try:
        return core._decode(pending, body)
    except Exception as exc:
        return exc


async def _check_backwards(core: ClientCore, t: OffsetsTable, attempts: Attempts) -> None:
    """With the discovery cache on, topic ids may be up to ``metadata_max_age_ms`` old. A high
    watermark or log start below what this client last returned means a truncation, a
    lagging new leader, or a topic deleted and created again: the topic's metadata is asked
    again before answering, so that the caller compares fresh topic ids."""
    last = core._cache.last_offsets
    names, starts, status = t.topics, t.starts, t.status
    if core._config["metadata_max_age_ms"] > 0:
        back = went_back(t, [last.get(name) for name in names])
        if back:
            core._cache.suspect()
            try:
                await metadata.request(core, back, attempts)
            except KafkaWireError as exc:  # offsets are still right; ids stay as they were
                log.warning("KafkaWire: metadata refresh after offsets went backwards failed: %s", exc)
            for i, name in enumerate(names):
                if name in back:
                    sl = slice(int(starts[i]), int(starts[i + 1]))
                    rows = np.arange(sl.start, sl.stop)[status[sl] == OK]
                    t.id_of[rows] = t.id_index(core._cache.topic_ids.get(name))
    remember(last, t)


def _job(core: ClientCore, leader: int, requests: list[ListOffsetsFor]) -> Callable[[], Awaitable[list[Any]]]:
    """The three ListOffsets requests of one leader (log start, high watermark, LSO), pipelined
    on its connection once any KIP-219 throttle has passed: a list of three ``(Pending, answer
    body)`` pairs, or exceptions in their places (decoded by the caller after its wait)."""

    async def job() -> list[Any]:
        await core._unthrottled(leader)
        futures: list[Any] = []
        for request in requests:
            request._version = None  # negotiated again on this connection (a request may be reused)
            try:
                futures.append(await core._send_nowait(leader, request))
            except Exception as exc:
                futures.append(exc)
        return await core._await_bodies(futures)

    return job


def _at_once(core: ClientCore, requests: dict[int, list[ListOffsetsFor]]) -> Callable[[int], Any]:
    """``per_node``'s ``now``: a leader's three requests sent at once when it can take them
    (:class:`~streaming.sources.kafka_client.core.AtOnce`), else None and :func:`_job` runs as a task."""
    at_once = AtOnce(core)

    def now(leader: int) -> Any:
        for request in requests[leader]:
            request._version = None  # negotiated again on this connection (a request may be reused)
        return at_once.start(leader, requests[leader])

    return now


def _requests(core: ClientCore, asked: list[tuple[str, np.ndarray]]) -> list[ListOffsetsFor]:
    """One leader's three requests: EARLIEST (log start), LATEST READ_UNCOMMITTED (high
    watermark), LATEST READ_COMMITTED (LSO); all name the same partitions in the same order."""
    epochs = {name: core._cache.routing_arrays(name)[1] for name, _ in asked}
    return [ListOffsetsFor(asked, ts, isolation, core._config["request_timeout_ms"], epochs)
            for ts, isolation in ((_EARLIEST, READ_UNCOMMITTED), (_LATEST, READ_UNCOMMITTED),
                                  (_LATEST, READ_COMMITTED))]
