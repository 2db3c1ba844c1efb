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
    """Producing alerts failed; the micro-batch fails and is retried by Spark."""


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
                        f"Kafka 2.8+, or set sinks.kafka_idempotence = \"auto\"/\"false\")") from exc
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
                raise AlertSinkError(f"could not produce {len(alerts)} alert(s): {denied}") from exc
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
