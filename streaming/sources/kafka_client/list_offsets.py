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

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from streaming.sources.kafka_client import metadata
from streaming.sources.kafka_client.core import ClientCore
from streaming.sources.kafka_client.errors import (
    LEADER_ERRORS,
    KafkaWireError,
    describe,
    error_name,
    retriable_exception,
)
from streaming.sources.kafka_client.list_offsets_codec import ListOffsetsFor
from streaming.sources.kafka_client.results import READ_COMMITTED, READ_UNCOMMITTED, PartitionOffsets
from streaming.sources.kafka_client.retry import Attempts
from streaming.sources.kafka_errors import Action, configuration_message
from streaming.sources.kafka_errors import action as error_action
from streaming.sources.kafka_parallel import NodeDeadline, per_node

log = logging.getLogger(__name__)

__all__ = ["offsets"]

TopicPartition = tuple[str, int]

_EARLIEST = -2
_LATEST = -1
# ListOffsets rounds (a metadata refresh between them) before a partition counts as unavailable
# for this call in partial mode; the caller retries it with backoff later.
_PARTIAL_ROUNDS = 2


async def offsets(core: ClientCore, wanted: list[TopicPartition], partial: bool = False) -> Any:
    """``{(topic, partition): PartitionOffsets}`` for ``wanted`` (deleted ones with -1 offsets);
    with ``partial`` the pair ``(offsets, {(topic, partition): last error})`` (module docstring)."""
    attempts = Attempts(core, f"ListOffsets for {len(wanted)} partition(s)")
    result: dict[TopicPartition, PartitionOffsets] = {}
    unavailable: dict[TopicPartition, str] = {}
    errors: dict[TopicPartition, str] = {}  # latest retriable error per partition
    rounds = 0
    pending = list(wanted)
    if any(not core._cache.known(tp) for tp in pending):
        await metadata.request(core, sorted({t for t, _ in pending}), attempts)
    while pending:
        retry: list[TopicPartition] = []
        last_error: BaseException | str | None = None
        last_node = None
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in pending:
            if not core._cache.known(tp) and await metadata.confirmed_gone(core, tp, attempts):
                result[tp] = PartitionOffsets(tp[0], tp[1], -1, -1, -1, -1, deleted=True)
                continue
            leader = core._cache.leaders[tp[0]][tp[1]]
            if leader < 0:
                retry.append(tp)
                last_error = errors[tp] = f"no leader for {tp[0]}-{tp[1]} (LEADER_NOT_AVAILABLE)"
                continue
            by_leader[leader].append(tp)
        # every leader is asked at once, each on its own deadline (kafka_parallel.per_node)
        deadline = core._config["broker_timeout_ms"] if partial else None
        by_node = await per_node(core._transport, core._transport.wait_for,
                                 {leader: _job(core, leader, tps) for leader, tps in by_leader.items()},
                                 deadline, core._stalled if partial else None)
        for leader, tps in by_leader.items():
            answers = by_node[leader]
            if isinstance(answers, NodeDeadline):
                # a broker that does not answer in time: its partitions are unavailable for
                # this call at once (a second round would only wait on it again)
                left = core._throttled_for(leader)
                why = (f"throttled by the broker (quota, KIP-219) for {left} ms more than broker_timeout_ms"
                       if left else str(answers))
                for tp in tps:
                    unavailable[tp] = errors[tp] = f"leader {core._node_desc(leader)}: {why}"
                continue
            if isinstance(answers, BaseException):
                answers = [answers]
            failure = next((a for a in answers if isinstance(a, BaseException)), None)
            if failure is not None:
                if not retriable_exception(failure):
                    raise KafkaWireError(f"ListOffsets to {core._node_desc(leader)} failed: "
                                         f"{describe(failure)}") from failure
                retry.extend(tps)
                last_error, last_node = failure, leader
                for tp in tps:
                    errors[tp] = f"leader {core._node_desc(leader)} did not answer ({describe(failure)})"
                attempts.leader = leader
                continue
            for tp in tps:
                parts = [a.get(tp) for a in answers]
                if any(p is None for p in parts):
                    raise KafkaWireError(f"ListOffsets response from {core._node_desc(leader)} lacks "
                                         f"{tp[0]}-{tp[1]}")
                codes = [code for code, _ in parts if code]
                if not codes:
                    (_, start), (_, hw), (_, lso) = parts
                    result[tp] = PartitionOffsets(tp[0], tp[1], start, hw, lso, leader,
                                                  topic_id=core._cache.topic_ids.get(tp[0]))
                    continue
                code = codes[0]
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
                retry.append(tp)
                last_error = errors[tp] = f"{error_name(code)} for {tp[0]}-{tp[1]}"
                last_node = leader
        pending = retry
        if pending:
            core._cache.suspect()
        if pending and partial:
            rounds += 1
            if rounds >= _PARTIAL_ROUNDS:
                unavailable.update({tp: errors.get(tp, "retriable error") for tp in pending})
                break
            # one metadata refresh (the leader may have moved), then ask the rest once more
            await core._transport.sleep(core._config["retry_backoff_ms"] / 1000)
            await metadata.request(core, sorted({t for t, _ in pending}), attempts)
        elif pending:
            await attempts.failed(last_error or "retriable error", last_node)
            await metadata.request(core, sorted({t for t, _ in pending}), attempts)
    await _check_backwards(core, result, attempts)
    if partial:
        return {tp: result[tp] for tp in wanted if tp in result}, unavailable
    return {tp: result[tp] for tp in wanted}


async def _check_backwards(core: ClientCore, result: dict[TopicPartition, PartitionOffsets], attempts: Attempts) -> None:
    """With the discovery cache on, topic ids may be up to ``metadata_max_age_ms`` old. A high
    watermark or log start below what this client last returned means a truncation, a
    lagging new leader, or a topic deleted and created again: the topic's metadata is asked
    again before answering, so that the caller compares fresh topic ids."""
    last = core._cache.last_offsets
    if core._config["metadata_max_age_ms"] > 0:
        back = sorted({tp[0] for tp, o in result.items() if not o.deleted and tp in last
                       and (o.high_watermark < last[tp][1] or o.log_start < last[tp][0])})
        if back:
            core._cache.suspect()
            try:
                await metadata.request(core, back, attempts)
            except KafkaWireError as exc:  # offsets are still right; ids stay as they were
                log.warning("KafkaWire: metadata refresh after offsets went backwards failed: %s", exc)
            for tp, o in list(result.items()):
                if tp[0] in back and not o.deleted:
                    result[tp] = dataclasses.replace(o, topic_id=core._cache.topic_ids.get(tp[0]))
    for tp, o in result.items():
        if o.deleted:
            last.pop(tp, None)
        else:
            last[tp] = (o.log_start, o.high_watermark)


def _job(core: ClientCore, leader: int, tps: list[TopicPartition]) -> Callable[[], Awaitable[list[Any]]]:
    """The three ListOffsets requests of one leader (log start, high watermark, LSO), pipelined
    on its connection once any KIP-219 throttle has passed: a list of three
    ``{(topic, partition): (error code, offset)}`` answers, or exceptions in their places."""

    async def job() -> list[Any]:
        await core._unthrottled(leader)
        futures: list[Any] = []
        for ts, isolation in ((_EARLIEST, READ_UNCOMMITTED), (_LATEST, READ_UNCOMMITTED),
                              (_LATEST, READ_COMMITTED)):
            try:
                futures.append(await core._send_nowait(leader, _request(core, tps, ts, isolation)))
            except Exception as exc:
                futures.append(exc)
        answers: list[Any] = []
        for fut in futures:
            if isinstance(fut, BaseException):
                answers.append(fut)
                continue
            try:
                answers.append((await core._await(fut)).offsets)
            except Exception as exc:
                answers.append(exc)
        return answers

    return job


def _request(core: ClientCore, tps: list[TopicPartition], timestamp: int, isolation: int) -> ListOffsetsFor:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for t, p in tps:
        by_topic[t].append(p)
    return ListOffsetsFor(list(by_topic.items()), timestamp, isolation, core._config["request_timeout_ms"],
                        core._cache.epochs)
