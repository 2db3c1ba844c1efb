"""Alerts-topic sink: each alert produced with kafka-python, key = alert key, value = alert JSON.

Why ``foreachBatch`` and not a Python stream writer: the alerts of a micro-batch are already on
the driver (they are few, and enrichment needs them there), so one long-lived producer on the
driver flushes once per micro-batch; a failed flush raises, which fails the micro-batch so Spark
retries it (at-least-once; consumers dedupe on the key). ``acks=all`` and bounded retries always.

Old and locked-down clusters:

* The topic is created (when missing and ``create_topic``) with an explicit partition count and
  replication factor: CreateTopics accepts ``-1`` ("broker default") only from v4 (Kafka 2.4,
  KIP-464), and kafka-python refuses to send it to older brokers. The replication factor
  defaults to ``min(3, number of brokers)``.
* Idempotence (``idempotence``): ``"auto"`` (default) enables it and, if the broker answers
  InitProducerId with CLUSTER_AUTHORIZATION_FAILED (the principal lacks the IDEMPOTENT_WRITE
  cluster ACL, which brokers < 2.8 require; 2.8+ also accept WRITE on any topic, KIP-679), falls
  back to ``acks=all`` without idempotence and logs that once. ``"true"`` fails instead;
  ``"false"`` never asks for a producer id.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming.config import KafkaConfig, SinksConfig

from streaming.sources.kafka_security import (
    CLUSTER_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    authorization_message,
    kafka_python_kwargs,
    principal_of,
)

log = logging.getLogger("txnwatch")

IDEMPOTENCE_MODES = ("auto", "true", "false")


class AlertSinkError(RuntimeError):
    """Producing alerts failed. ``retriable`` is False when retrying cannot help (a missing ACL,
    idempotence required and refused)."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


def _cluster_auth_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause chain) is CLUSTER_AUTHORIZATION_FAILED (error 31).

    kafka-python 3.0 reports it from InitProducerId as a plain ``KafkaError("Unexpected error in
    InitProducerIdResponse: [Error 31] ClusterAuthorizationFailedError")``, hence the name check.
    """
    from kafka.errors import ClusterAuthorizationFailedError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ClusterAuthorizationFailedError) or ClusterAuthorizationFailedError.__name__ in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class KafkaAlertSink:
    """Produces alerts to ``topic``.

    Args:
        partitions: partition count when the sink creates the topic.
        replication_factor: replication factor when the sink creates the topic; ``0`` = ``min(3,
            brokers in the cluster)``.
        idempotence: ``"auto"``, ``"true"`` or ``"false"`` (see the module docstring); booleans
            are accepted for ``"true"``/``"false"``.
    """

    def __init__(self, bootstrap_servers: str, topic: str, *, create_topic: bool = True, client_id: str = "txnwatch",
                 security: dict[str, Any] | None = None, request_timeout_ms: int = 30000,
                 idempotence: str | bool = "auto", partitions: int = 1, replication_factor: int = 0) -> None:
        if isinstance(idempotence, bool):
            idempotence = "true" if idempotence else "false"
        if idempotence not in IDEMPOTENCE_MODES:
            raise ValueError(f"sinks.kafka_idempotence must be one of {', '.join(IDEMPOTENCE_MODES)}, "
                             f"got {idempotence!r}")
        if partitions < 1:
            raise ValueError(f"sinks.kafka_topic_partitions must be >= 1, got {partitions}")
        if replication_factor < 0:
            raise ValueError(f"sinks.kafka_topic_replication_factor must be >= 0 (0 = min(3, brokers)), "
                             f"got {replication_factor}")
        self.bootstrap = bootstrap_servers
        self.topic = topic
        self.create_topic = create_topic
        self.client_id = client_id
        self.security = security or {}
        self.timeout_ms = request_timeout_ms
        self.idempotence = idempotence
        self.partitions = partitions
        self.replication_factor = replication_factor
        self._producer = None
        self._idempotent = False  # whether the current producer is idempotent
        self._idempotence_refused = False  # the broker refused InitProducerId (ACL): do not ask again

    @classmethod
    def from_config(cls, kafka: KafkaConfig, sinks: SinksConfig) -> KafkaAlertSink:
        """The ``[sinks]`` alerts topic on the ``[kafka]`` cluster, with its client settings: the
        only place that reads them."""
        return cls(kafka.bootstrap_servers, sinks.kafka_topic, create_topic=sinks.kafka_create_topic,
                   client_id=f"{kafka.client_id}-alerts", security=kafka_python_kwargs(kafka.security()),
                   request_timeout_ms=kafka.request_timeout_ms, idempotence=sinks.kafka_idempotence,
                   partitions=sinks.kafka_topic_partitions, replication_factor=sinks.kafka_topic_replication_factor)

    def _ensure_topic(self) -> None:
        from kafka.admin import KafkaAdminClient
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id=self.client_id,
                                 request_timeout_ms=self.timeout_ms, **self.security)
        try:
            if self.topic not in admin.list_topics():
                replication = self.replication_factor or min(3, self._broker_count())
                try:
                    admin.create_topics({self.topic: {"num_partitions": self.partitions,
                                                      "replication_factor": replication}})
                except TopicAlreadyExistsError:
                    pass
                log.info("created alerts topic %r (%d partition(s), replication factor %d)", self.topic,
                         self.partitions, replication)
        finally:
            admin.close()

    def _broker_count(self) -> int:
        from streaming.sources.kafka_wire import KafkaWire

        with KafkaWire(self.bootstrap, client_id=self.client_id, request_timeout_ms=self.timeout_ms,
                       retries=2, **self.security) as wire:
            return wire.broker_count()

    def _make_producer(self):
        from kafka import KafkaProducer

        # max_block_ms bounds the wait for metadata (default 60 s) by the request timeout, so a
        # dead cluster fails the micro-batch in seconds, not minutes.
        base = dict(bootstrap_servers=self.bootstrap, client_id=self.client_id, acks="all", retries=5,
                    retry_backoff_ms=200, request_timeout_ms=self.timeout_ms, max_block_ms=self.timeout_ms,
                    bootstrap_timeout_ms=self.timeout_ms,
                    max_in_flight_requests_per_connection=1, **self.security)
        if self.idempotence == "false" or self._idempotence_refused:
            self._idempotent = False
            return KafkaProducer(enable_idempotence=False, **base)
        try:
            producer = KafkaProducer(enable_idempotence=True, **base)
        except Exception as exc:  # any client error fails the micro-batch
            if "bootstrap" in str(exc).lower():
                raise  # unreachable cluster, not an old broker: a second attempt would only wait again
            if self.idempotence == "true":
                raise AlertSinkError(f"idempotent producer to {self.bootstrap} failed: {exc}") from exc
            log.warning("idempotent producer unavailable (%s); using acks=all with retries", exc)
            self._idempotent = False
            return KafkaProducer(enable_idempotence=False, **base)
        self._idempotent = True
        return producer

    def _send(self, alerts: list[dict[str, Any]]) -> None:
        if self._producer is None:
            if self.create_topic:
                self._ensure_topic()
            self._producer = self._make_producer()
        futures = [self._producer.send(self.topic, key=a["key"].encode(),
                                       value=json.dumps(a, separators=(",", ":")).encode()) for a in alerts]
        self._producer.flush(timeout=self.timeout_ms / 1000)
        for f in futures:
            f.get(timeout=self.timeout_ms / 1000)

    def __call__(self, alerts: list[dict[str, Any]]) -> None:
        if not alerts:
            return
        try:
            try:
                self._send(alerts)
            except Exception as exc:
                if not (self._idempotent and _cluster_auth_failure(exc)):
                    raise
                # InitProducerId refused: nothing of this batch was written (no producer id, no
                # Produce), so sending it again without idempotence duplicates nothing.
                self.close()
                if self.idempotence == "true":
                    raise AlertSinkError(
                        f"idempotent producing to {self.bootstrap} refused: CLUSTER_AUTHORIZATION_FAILED on "
                        f"InitProducerId (grant IDEMPOTENT_WRITE on the cluster, or WRITE on the topic with "
                        f"Kafka 2.8+, or set sinks.kafka_idempotence = \"auto\"/\"false\")", retriable=False) from exc
                self._idempotence_refused = True
                log.warning("alerts sink: the broker refused InitProducerId (CLUSTER_AUTHORIZATION_FAILED: no "
                            "IDEMPOTENT_WRITE ACL on the cluster); producing to %r with acks=all without "
                            "idempotence (retries may duplicate an alert; consumers dedupe on the key)", self.topic)
                self._send(alerts)
        except AlertSinkError:
            raise
        except Exception as exc:
            self.close()
            denied = self._denied(exc)
            if denied:
                raise AlertSinkError(f"could not produce {len(alerts)} alert(s): {denied}",
                                     retriable=False) from exc
            raise AlertSinkError(f"could not produce {len(alerts)} alert(s) to topic {self.topic!r} on "
                                 f"{self.bootstrap}: {exc}") from exc

    def _denied(self, exc: BaseException) -> str | None:
        """The missing-ACL message for an authorization error of kafka-python, else None."""
        from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

        if isinstance(exc, TopicAuthorizationFailedError):
            api, code, resource = "Produce", TOPIC_AUTHORIZATION_FAILED, self.topic
        elif isinstance(exc, ClusterAuthorizationFailedError):
            api, code, resource = "InitProducerId", CLUSTER_AUTHORIZATION_FAILED, "kafka-cluster"
        else:
            return None
        return authorization_message(api, code, resource, principal=principal_of(self.security),
                                     bootstrap=self.bootstrap)

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=5)
            finally:
                self._producer = None


class BufferedAlertSink:
    """The alerts-topic sink behind an in-order buffer and one sender thread.

    A call returns only once the broker acknowledged (``acks=all``) every alert it was given, so
    when ``foreachBatch`` goes on to record the micro-batch as published, its alerts are on the
    topic: a ``kill -9`` at any point loses nothing (before the acknowledgement the micro-batch
    is not recorded as published, and Spark replays it on restart). Alerts go out in the order
    they were given, from the head of the buffer; a chunk leaves the buffer only after every
    alert in it was acknowledged. When the alerts topic's partition is offline or its leader
    moves, the chunk is sent again after a doubling backoff (``backoff_ms`` up to
    ``backoff_max_ms``) and the call keeps waiting (one warning per retry), so nothing is lost;
    ``ack_timeout_s`` (None: as long as it takes) bounds that wait, then the call raises and the
    micro-batch fails. An alert acknowledged before a failure in the same chunk may be written
    twice, and the latest record per key is still the latest alert (consumers dedupe on ``(key,
    status)``, as for any at-least-once sink). More than ``max_buffered`` unsent alerts, or an
    error retrying cannot fix (a missing ACL), fails the call: the micro-batch fails loudly
    instead of dropping.
    """

    def __init__(self, sink: KafkaAlertSink, *, max_buffered: int = 100_000, chunk: int = 500,
                 backoff_ms: int = 500, backoff_max_ms: int = 30_000, ack_timeout_s: float | None = None) -> None:
        self.sink = sink
        self.ack_timeout_s = ack_timeout_s
        self._given = 0  # alerts given so far (a running count: which of them a call waits for)
        self._acked = 0  # alerts acknowledged so far, in the order given
        self.max_buffered = max_buffered
        self.chunk = chunk
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self._buf: deque[dict[str, Any]] = deque()
        self._cv = threading.Condition()
        self._stop = False
        self._busy = False
        self._fatal: AlertSinkError | None = None
        self._thread = threading.Thread(target=self._run, name="txnwatch-alerts-topic", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Alerts given and not yet acknowledged."""
        with self._cv:
            return len(self._buf)

    def __call__(self, alerts: list[dict[str, Any]]) -> None:
        """Give ``alerts`` and wait until the broker acknowledged each of them (see the class)."""
        with self._cv:
            if self._fatal is not None:
                raise self._fatal
            if len(self._buf) + len(alerts) > self.max_buffered:
                raise AlertSinkError(f"alerts topic {self.sink.topic!r} on {self.sink.bootstrap}: {len(self._buf)} "
                                     f"alert(s) still unsent, buffer limit {self.max_buffered} reached")
            self._buf.extend(alerts)
            self._given += len(alerts)
            target = self._given
            self._cv.notify_all()
            deadline = None if self.ack_timeout_s is None else time.monotonic() + self.ack_timeout_s
            while self._acked < target:
                if self._fatal is not None:
                    raise self._fatal
                if self._stop:
                    raise AlertSinkError(f"alerts topic {self.sink.topic!r}: sink closed with "
                                         f"{target - self._acked} alert(s) not acknowledged")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise AlertSinkError(f"alerts topic {self.sink.topic!r} on {self.sink.bootstrap}: "
                                         f"{target - self._acked} alert(s) not acknowledged within "
                                         f"{self.ack_timeout_s:.0f} s; the micro-batch is not recorded as "
                                         f"published and will be replayed")
                self._cv.wait(left)

    def _next_chunk(self) -> list[dict[str, Any]] | None:
        with self._cv:
            while not self._buf and not self._stop:
                self._cv.wait()
            if not self._buf:
                return None
            self._busy = True
            return [self._buf[i] for i in range(min(self.chunk, len(self._buf)))]

    def _run(self) -> None:
        delay = self.backoff_ms / 1000
        while (batch := self._next_chunk()) is not None:
            try:
                self.sink(batch)
            except AlertSinkError as exc:
                with self._cv:
                    self._busy = False
                    if not exc.retriable:
                        self._fatal = exc
                        self._cv.notify_all()
                        log.error("alerts sink: %s", exc)
                        return
                    log.warning("alerts sink: %s; %d alert(s) kept in order, retrying in %.1f s", exc,
                                len(self._buf), delay)
                    if not self._stop:
                        self._cv.wait(delay)
                    if self._stop:
                        return
                delay = min(delay * 2, self.backoff_max_ms / 1000)
                continue
            delay = self.backoff_ms / 1000
            with self._cv:
                for _ in batch:
                    self._buf.popleft()
                self._acked += len(batch)
                self._busy = False
                self._cv.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything given was acknowledged; False on timeout or a fatal error."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._buf and self._fatal is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return not self._buf

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush (bounded), stop the sender, close the producer; unsent alerts are logged."""
        if not self.flush(timeout_s):
            log.error("alerts sink: %d alert(s) could not be produced to %r before shutdown (the JSONL/console "
                      "sinks have them)", self.pending, self.sink.topic)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(5)
        self.sink.close()
