"""Metadata (API key 3): partition discovery, leaders, and proof that a partition is gone.

Versions: **v1+** (``is_internal`` needs v1), the newest the broker and kafka-python 3.0 share.
``allow_auto_topic_creation=False`` is sent and honoured from v4, so looking at a topic never
creates it on brokers >= 0.11 (but see :func:`names_create_internal_topics`). Topics are asked by
name; their topic ids (v10+, Kafka 2.8+, KIP-516) and leader epochs (v7+, KIP-320) go to the
:class:`~streaming.sources.kafka_client.metadata_cache.MetadataCache`. v13 (Kafka 4.0, KIP-1102)
adds a top-level ``error_code``: REBOOTSTRAP_REQUIRED and other retriable codes are retried on
another broker, anything else raises.

Any broker can answer: the request goes to the least loaded one (never to one with a request
overdue past ``broker_timeout_ms``, :mod:`streaming.sources.kafka_parallel`). Kafka leaves topics the
principal may not Describe out of an all-topics answer (``KafkaApis.handleTopicMetadataRequest``),
so a pattern silently skips them; asked by name, TOPIC_AUTHORIZATION_FAILED raises
:class:`~streaming.sources.kafka_client.errors.KafkaAuthorizationError`.

One broker whose metadata cache lags answers UNKNOWN_TOPIC_OR_PARTITION for a topic that exists
(every broker applies metadata updates on its own), so a partition is reported deleted only when
``deletion_confirmations`` answers in a row, spaced by the retry backoff, all lack it
(:func:`confirmed_gone`).
"""

from __future__ import annotations

import logging
import random
import re
import time
from typing import Any

import kafka.errors as Errors
from kafka.protocol.metadata import MetadataRequest

from streaming.gc_pause import collector_paused
from streaming.sources.kafka_client.core import ClientCore
from streaming.sources.kafka_client.errors import (
    REBOOTSTRAP_REQUIRED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaWireError,
    describe,
    error_name,
    retriable_exception,
)
from streaming.sources.kafka_client.retry import Attempts
from streaming.sources.kafka_parallel import NodeDeadline, per_node
from streaming.sources.kafka_security import AUTHORIZATION_ERRORS

log = logging.getLogger(__name__)

__all__ = ["METADATA_MIN_VERSION", "confirmed_gone", "names_create_internal_topics", "partitions", "request"]

#: Metadata v1: is_internal flag (v4+: allow_auto_topic_creation honoured).
METADATA_MIN_VERSION = 1


def _node(core: ClientCore) -> Any:
    transport = core._transport
    node = transport.least_loaded_node()
    if node is not None and core._stalled.busy(node) is not None:
        # a broker with an overdue request would hold Metadata up too: any other one will do
        others = [n for n in transport.nodes() if core._stalled.busy(n) is None]
        node = random.choice(others) if others else node
    if node is None:
        node = random.choice(transport.bootstrap_nodes())
    return node


async def request(core: ClientCore, topics: list[str] | None, attempts: Attempts | None) -> Any:
    """One successful Metadata answer for ``topics``, retried; the cache and the transport's
    broker list are updated from it. ``topics`` None asks for all topics and returns None (the
    cache holds the answer: see :mod:`streaming.gc_pause`)."""
    attempts = attempts or Attempts(core, "Metadata request")
    while True:
        node = _node(core)
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
            min_version=METADATA_MIN_VERSION,
        )

        async def ask(node=node, req=req):
            pending = await core._send_nowait(node, req)
            return pending, await core._await_body(pending)

        # any broker can answer Metadata: one that does not within broker_timeout_ms is
        # left for another (per_node remembers it as stalled)
        got = (await per_node(core._transport, core._transport.wait_for, {node: ask},
                              core._config["broker_timeout_ms"], core._stalled))[node]
        # the answer is decoded, taken in and dropped without cyclic collection (gc_pause)
        with collector_paused():
            outcome = _take(core, node, got, topics)
        if isinstance(outcome, _Retry):
            await attempts.failed(outcome.why, node)
            continue
        return outcome


class _Retry:
    """An answer to ask again for (``why``: the exception or reason, for ``Attempts.failed``)."""

    def __init__(self, why: Any) -> None:
        self.why = why


def _take(core: ClientCore, node: Any, got: Any, topics: list[str] | None) -> Any:
    """One broker's Metadata answer (``(pending, body)`` or the exception of its request) into
    the cache and the transport's broker list: the decoded answer (None for an all-topics
    request: the cache holds what it said, and dropping it here frees it while the collector is
    paused), or a :class:`_Retry`; raises on an error asking again cannot cure."""
    if not isinstance(got, BaseException):
        pending, body = got
        try:
            got = core._decode(pending, body)
        except Exception as exc:  # undecodable: KafkaProtocolError, asked again as before
            got = exc
    response = got
    if isinstance(response, BaseException):
        if not isinstance(response, NodeDeadline) and not retriable_exception(response):
            raise KafkaWireError(f"Metadata request to {core._node_desc(node)} failed: "
                                 f"{describe(response)}") from response
        return _Retry(response)
    top_error = getattr(response, "error_code", 0) or 0  # Metadata v13+ (KIP-1102)
    if top_error:
        if top_error != REBOOTSTRAP_REQUIRED and not Errors.for_code(top_error).retriable:
            raise KafkaWireError(f"Metadata request to {core._node_desc(node)} failed: "
                                 f"{error_name(top_error)}", error_code=top_error)
        return _Retry(f"Metadata top-level error {error_name(top_error)}")
    if not response.brokers:
        return _Retry("Metadata response without brokers")
    core._transport.update_cluster(response)
    core._cache.apply(response, topics)
    return None if topics is None else response


async def partitions(core: ClientCore, topics: list[str] | None, pattern: str | None,
                     include_internal: bool) -> dict[str, list[int]]:
    """Topic -> sorted partitions, from the cache while fresh, else from a new answer (see
    ``KafkaWire.partitions``)."""
    cache = core._cache
    attempts = Attempts(core, "partition discovery (Metadata)")
    regex = re.compile(pattern) if pattern is not None else None
    result: dict[str, list[int]] = {}
    now = time.monotonic()
    if regex is not None or topics is None:
        if not cache.fresh(cache.all_topics_at, now):
            await request(core, None, attempts)  # replaces cache.topics
        for name, (internal, parts, _) in cache.topics.items():
            if internal and not include_internal:
                continue
            if regex is not None and not regex.fullmatch(name):
                continue
            result[name] = list(parts)
    if topics:
        names = list(dict.fromkeys(topics))
        wanted = set(names)
        cached = [cache.topics.get(n) for n in names]
        if all(c is not None and cache.fresh(c[2], now) for c in cached):
            result.update({n: list(c[1]) for n, c in zip(names, cached, strict=True)})
            return dict(sorted(result.items()))
        while True:
            response = await request(core, names, attempts)
            errors = {t.name: t.error_code for t in response.topics if t.name in wanted and t.error_code}
            retriable = {n: c for n, c in errors.items()
                         if c not in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID) and Errors.for_code(c).retriable}
            fatal = {n: c for n, c in errors.items()
                     if c not in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID) and n not in retriable}
            if fatal:
                name, code = next(iter(fatal.items()))
                if code in AUTHORIZATION_ERRORS:
                    raise core._denied("Metadata", code, name, None)
                raise KafkaWireError(f"Metadata for topic {name!r} failed: {error_name(code)}", error_code=code)
            if retriable:
                await attempts.failed("topic errors " + ", ".join(f"{n}={error_name(c)}" for n, c in retriable.items()))
                continue
            break
        for t in response.topics:
            if t.error_code == 0 and t.name is not None:
                result[t.name] = sorted(p.partition_index for p in t.partitions)
        missing = [n for n in names if n not in result]
        if missing:
            log.warning("KafkaWire: topics not found in cluster metadata: %s", missing)
    return dict(sorted(result.items()))


async def confirmed_gone(core: ClientCore, tp: tuple[str, int], attempts: Attempts) -> bool:
    """Whether ``deletion_confirmations`` Metadata answers in a row lack the partition.

    A single broker whose metadata cache lags answers UNKNOWN_TOPIC_OR_PARTITION for a topic
    that exists (the cache is updated asynchronously on every broker), so one answer is not
    proof. Refreshes are spaced by the retry backoff and go to the least loaded broker.
    """
    cfg = core._config
    core._cache.suspect()
    for i in range(cfg["deletion_confirmations"]):
        if i:
            delay = min(cfg["retry_backoff_ms"] * 2 ** (i - 1), cfg["retry_backoff_max_ms"]) / 1000
            await core._transport.sleep(delay)
        await request(core, [tp[0]], attempts)
        if core._cache.known(tp):
            return False
    return True


def names_create_internal_topics(core: ClientCore) -> bool:
    """Whether a Metadata request naming a missing internal topic may create it on these
    brokers: before 2.8, ``KafkaApis.getTopicMetadata`` sends it to ``createInternalTopic``
    whatever AllowAutoTopicCreation says; from 2.8 (KAFKA-9751) only when it is allowed, which
    this client never does. 2.8 is told by Metadata v10 (topic ids, new in 2.8) in the
    negotiated ApiVersions; unknown counts as "may create"."""
    transport = core._ensure_started()
    bvd = transport.broker_version_data
    rng = (getattr(bvd, "api_versions", None) or {}).get(MetadataRequest.API_KEY)
    return rng is None or rng[1] < 10
