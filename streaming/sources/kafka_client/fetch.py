"""Fetch (API key 1): raw record-batch bytes of partitions, exactly as the leader sends them.

Versions **v4..v12**, ``isolation_level=READ_UNCOMMITTED`` so that control batches (transaction
markers) and data of open or aborted transactions are returned. v4 is the first version with
``last_stable_offset`` (KIP-98), v5 adds ``log_start_offset`` (KIP-107; -1 from a v4-only broker).
v12 is the last version that addresses topics by *name*; v13+ need topic ids (KIP-516) and bring
nothing the watchdog needs. Kafka 4.x removed Fetch v0-v3 (KIP-896), so the v4 floor also works
with 4.x brokers. Sessionless full fetches (``session_id=0``, ``session_epoch=-1``), replica id
-1, ``current_leader_epoch`` = the epoch of the last Metadata answer (v9+, KIP-320): a leader
whose epoch differs answers FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH
(``Partition.getLocalLog`` / ``checkCurrentLeaderEpoch``) and metadata is refreshed.

kafka-python decodes the ``Records`` field as plain bytes (schema type ``records``), so the bytes
returned are the broker's: the layout of a ``.log`` segment (spec/kafka-formats.md §1-§3). What
callers must know of them:

* they start at the batch *containing* the fetch offset, which may begin before it;
* they are cut at ``max_bytes`` and may end in a **partial batch** (fetch again from its base
  offset); at least one whole batch is returned even if larger than ``max_bytes`` (KIP-74);
* ``records`` may be null (FetchResponse.json: nullable in every version): returned as ``b""``;
* no records and no error below where the caller expected data means the answering leader's high
  watermark is lower (``UnifiedLog.read`` caps consumer reads at it; a new leader learns it from
  its followers): ``FetchResult.high_watermark`` shows it.

Answers handled here:

* a broker over quota answers with *no partitions* and ``throttle_time_ms`` > 0
  (``KafkaApis.handleFetchRequest``): waited out and retried (:meth:`Attempts.throttled`);
* ``PreferredReadReplica`` (v11+, KIP-392): a leader configured with a replica selector may answer
  with no records and a follower's id. No rack id is sent, so a correct broker never does; if one
  does, the same fetch is sent to that replica once, falling back to the leader with retries;
* OFFSET_OUT_OF_RANGE is *returned* (``FetchStatus.OFFSET_OUT_OF_RANGE``) with the partition's
  log start offset and high watermark from a follow-up ListOffsets (the broker answers -1 for both);
* UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID: ``FetchStatus.DELETED`` only when
  :func:`~streaming.sources.kafka_client.metadata.confirmed_gone`, else retried;
* ``*_AUTHORIZATION_FAILED`` raises, configuration errors raise naming the setting; every other
  code is retried after a metadata refresh (``FetchCollector.handleInitializeErrors`` retries leader
  errors, UNKNOWN_LEADER_EPOCH and UNKNOWN_SERVER_ERROR; txnwatch retries the rest too, bounded).

:func:`fetch_many` sends one multi-partition Fetch per leader, all at once, each awaited up to
``broker_timeout_ms``, and returns only plain successes: everything else is for :func:`fetch`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from streaming.sources.kafka_client import list_offsets, metadata
from streaming.sources.kafka_client.core import AtOnce, ClientCore
from streaming.sources.kafka_client.errors import (
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaWireError,
    describe,
    error_name,
    retriable_exception,
)
from streaming.sources.kafka_client.fetch_codec import FETCH_MAX_VERSION, FETCH_MIN_VERSION, FetchFor
from streaming.sources.kafka_client.results import READ_UNCOMMITTED, FetchResult, FetchStatus
from streaming.sources.kafka_client.retry import Attempts
from streaming.sources.kafka_errors import Action, configuration_message
from streaming.sources.kafka_errors import action as error_action
from streaming.sources.kafka_parallel import per_node

log = logging.getLogger(__name__)

__all__ = ["FETCH_MAX_VERSION", "FETCH_MIN_VERSION", "fetch", "fetch_many"]

TopicPartition = tuple[str, int]

def _request(core: ClientCore, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
             min_bytes: int) -> FetchFor:
    return FetchFor([(topic, [(partition, core._cache.epoch(topic, partition), offset, max_bytes)])],
                    max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                    isolation_level=READ_UNCOMMITTED)


async def fetch(core: ClientCore, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
                min_bytes: int) -> FetchResult:
    """One partition from ``offset`` with retries: OK, OFFSET_OUT_OF_RANGE or DELETED (see the
    module docstring); raises KafkaUnavailable, KafkaAuthorizationError or KafkaWireError."""
    tp = (topic, partition)
    attempts = Attempts(core, f"Fetch {topic}-{partition} at offset {offset}")
    if not core._cache.known(tp):
        await metadata.request(core, [topic], attempts)
    while True:
        if not core._cache.known(tp):
            if await metadata.confirmed_gone(core, tp, attempts):
                return _gone(tp, offset, UNKNOWN_TOPIC_OR_PARTITION)
            continue
        leader = core._cache.leaders[topic][partition]
        attempts.leader = leader
        if leader < 0:
            await attempts.failed(f"no leader for {topic}-{partition} (LEADER_NOT_AVAILABLE)")
            await metadata.request(core, [topic], attempts)
            continue
        request = _request(core, topic, partition, offset, max_bytes, max_wait_ms, min_bytes)
        try:
            response = await core._send(leader, request)
        except Exception as exc:
            if not retriable_exception(exc):
                raise KafkaWireError(f"Fetch {topic}-{partition} from {core._node_desc(leader)} failed: "
                                     f"{describe(exc)}") from exc
            await attempts.failed(exc, leader)
            await metadata.request(core, [topic], attempts)
            continue
        throttle_ms = getattr(response, "throttle_time_ms", 0) or 0
        if not response.responses and not getattr(response, "error_code", 0) and throttle_ms > 0:
            # over quota: KafkaApis.handleFetchRequest sends no partitions, only the wait
            await attempts.throttled(throttle_ms, leader)
            continue
        version = request.API_VERSION
        code, pdata = _partition(core, response, tp, leader)
        if code == 0 and version >= 11 and not pdata.records and pdata.preferred_read_replica not in (
                -1, None, leader):
            code, pdata, served_by = await _from_replica(core, request, tp, pdata, leader)
            if pdata is None:
                await attempts.failed(f"preferred read replica of {topic}-{partition} failed ({code})", leader)
                continue
        else:
            served_by = leader
        if code == 0:
            return FetchResult(topic, partition, offset, bytes(pdata.records or b""), pdata.high_watermark,
                               pdata.last_stable_offset, pdata.log_start_offset if version >= 5 else -1, 0,
                               "NONE", FetchStatus.OK, served_by, version)
        if code == OFFSET_OUT_OF_RANGE:
            start = hw = lso = -1
            try:
                offs = (await list_offsets.offsets(core, [tp]))[tp]
                start, hw, lso = offs.log_start, offs.high_watermark, offs.lso
            except KafkaWireError as exc:
                log.warning("KafkaWire: %s-%s: OFFSET_OUT_OF_RANGE at %d and the follow-up ListOffsets "
                            "failed: %s", topic, partition, offset, exc)
            log.info("KafkaWire: %s-%s: offset %d out of range (log start %d, high watermark %d)", topic,
                     partition, offset, start, hw)
            return FetchResult(topic, partition, offset, b"", hw, lso, start, code, error_name(code),
                               FetchStatus.OFFSET_OUT_OF_RANGE, leader, version)
        if code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
            if await metadata.confirmed_gone(core, tp, attempts):
                return _gone(tp, offset, code, leader, version)
            await attempts.failed(f"{error_name(code)} for {topic}-{partition} although metadata lists it",
                                  leader)
            continue
        act = error_action(code)
        if act is Action.DENIED:
            raise core._denied("Fetch", code, topic, leader)
        if act is Action.CONFIGURATION:
            raise KafkaWireError(configuration_message("Fetch", code, error_name(code), f"{topic}-{partition}",
                                                       core._node_desc(leader)), error_code=code)
        # FetchCollector.handleInitializeErrors: leader errors, UNKNOWN_LEADER_EPOCH and
        # UNKNOWN_SERVER_ERROR are fetched again (txnwatch also retries the rest, bounded;
        # see streaming/sources/kafka_errors.py)
        await attempts.failed(f"{error_name(code)} for {topic}-{partition}", leader)
        await metadata.request(core, [topic], attempts)


def _partition(core: ClientCore, response: Any, tp: TopicPartition, node: Any) -> tuple[int, Any]:
    """(error code, partition data) of ``tp`` in a Fetch response; a top-level error wins."""
    top_error = getattr(response, "error_code", 0) or 0
    if top_error:
        return top_error, None
    pdata = next((p for t in response.responses if t.topic == tp[0]
                  for p in t.partitions if p.partition_index == tp[1]), None)
    if pdata is None:
        raise KafkaWireError(f"Fetch response from {core._node_desc(node)} lacks {tp[0]}-{tp[1]}")
    return pdata.error_code, pdata


async def _from_replica(core: ClientCore, request: FetchFor, tp: TopicPartition, leader_data: Any,
                       leader: int) -> tuple[Any, Any, int]:
    """Send the same Fetch to the preferred read replica the leader named (KIP-392), once.

    Returns (code, partition data, node); partition data is None when the replica failed.
    """
    replica = leader_data.preferred_read_replica
    log.warning("KafkaWire: %s-%s: leader %s redirected the fetch to replica %s although no rack id was "
                "sent (replica.selector.class set on the broker?)", tp[0], tp[1], leader, replica)
    try:
        response = await core._send(replica, request)
        code, pdata = _partition(core, response, tp, replica)
    except Exception as exc:  # any failure: back to the leader with retries
        if not retriable_exception(exc) and not isinstance(exc, KafkaWireError):
            raise KafkaWireError(f"Fetch {tp[0]}-{tp[1]} from preferred read replica "
                                 f"{core._node_desc(replica)} failed: {describe(exc)}") from exc
        return describe(exc), None, replica
    if code != 0:
        return error_name(code), None, replica
    return code, pdata, replica


def _gone(tp: TopicPartition, offset: int, code: int, leader: int = -1, version: int = -1) -> FetchResult:
    log.warning("KafkaWire: %s-%s no longer exists (topic deleted?)", tp[0], tp[1])
    return FetchResult(tp[0], tp[1], offset, b"", -1, -1, -1, code, error_name(code), FetchStatus.DELETED,
                       leader, version)


async def fetch_many(core: ClientCore, wanted: list[tuple[str, int, int]], max_bytes: int,
                     partition_max_bytes: int | None = None) -> dict[TopicPartition, FetchResult]:
    """One Fetch per leader for ``(topic, partition, offset)`` items, all leaders at once; only
    plain successes are returned (no retries here: the rest is for :func:`fetch`)."""
    leaders = core._cache.leaders
    unknown = sorted({t for t, p, _ in wanted if p not in leaders.get(t, ())})  # MetadataCache.known
    if unknown:  # a fresh executor process: one Metadata request for all, not one per partition
        try:
            await metadata.request(core, unknown, None)
        except KafkaWireError:
            pass  # left to the single-partition path and its retries
    by_leader: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    leaders = core._cache.leaders  # the request above may have replaced it
    for item in wanted:
        leader = leaders.get(item[0], {}).get(item[1], -1)
        if leader >= 0:
            by_leader[leader].append(item)
    requests = {leader: _request_many(core, its, max_bytes, partition_max_bytes)
                for leader, its in by_leader.items()}

    def job(leader: int):
        async def send():
            pending = await core._send_nowait(leader, requests[leader])
            return pending, await core._await_body(pending)
        return send

    # every leader at once, each on its own deadline (kafka_parallel.per_node); answers are
    # decoded after the wait, so that decoding never counts against another broker's deadline
    at_once = AtOnce(core, single=True)  # sent at once when the leader can take it (else job's task)
    answers = await per_node(core._transport, core._transport.wait_for, {leader: job(leader) for leader in requests},
                             core._config["broker_timeout_ms"], core._stalled,
                             lambda leader: at_once.start(leader, [requests[leader]]))
    out: dict[TopicPartition, FetchResult] = {}
    for leader, got in answers.items():
        request, its = requests[leader], by_leader[leader]
        if isinstance(got, BaseException):  # left to the single-partition path (KafkaWire.fetch)
            continue
        try:
            response = core._decode(*got)
        except Exception:  # undecodable: left to the single-partition path, which reports it
            continue
        if getattr(response, "error_code", 0):
            continue
        offsets = {(t, p): o for t, p, o in its}
        for topic in response.responses:
            for pd_ in topic.partitions:
                tp = (topic.topic, pd_.partition_index)
                if tp not in offsets or pd_.error_code != 0 or pd_.preferred_read_replica not in (-1, None):
                    continue
                version = request.API_VERSION
                out[tp] = FetchResult(tp[0], tp[1], offsets[tp], bytes(pd_.records or b""), pd_.high_watermark,
                                      pd_.last_stable_offset, pd_.log_start_offset if version >= 5 else -1, 0,
                                      "NONE", FetchStatus.OK, leader, version)
    return out


def _request_many(core: ClientCore, items: list[tuple[str, int, int]], max_bytes: int,
                  partition_max_bytes: int | None = None) -> FetchFor:
    by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for t, p, o in items:
        by_topic[t].append((p, o))
    request_max = max_bytes
    if partition_max_bytes is not None:
        request_max, max_bytes = partition_max_bytes * len(items), partition_max_bytes
    epochs = core._cache.epochs  # MetadataCache.epoch: the last leader epoch seen, -1 unknown
    return FetchFor([(t, [(p, e.get(p, -1), o, max_bytes) for p, o in ps])
                     for t, ps in by_topic.items() for e in (epochs.get(t, {}),)],
                    max_wait_ms=0, min_bytes=1, max_bytes=request_max, isolation_level=READ_UNCOMMITTED)
