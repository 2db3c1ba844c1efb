"""Alerts-topic sink: each alert produced with kafka-python, key = alert key, value = alert JSON.

Why ``foreachBatch`` and not a Python stream writer: the alerts of a micro-batch are already on
the driver (they are few, and enrichment needs them there), so one long-lived producer on the
driver flushes once per micro-batch; a failed flush raises, which fails the micro-batch so Spark
retries it (at-least-once; consumers dedupe on the key). ``acks=all``; idempotence is enabled when
the broker supports it (InitProducerId), bounded retries either way.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming.config import KafkaConfig, SinksConfig

log = logging.getLogger("txnwatch")


class AlertSinkError(RuntimeError):
    """Producing alerts failed; the micro-batch fails and is retried by Spark."""


class KafkaAlertSink:
    def __init__(self, bootstrap_servers: str, topic: str, *, create_topic: bool = True, client_id: str = "txnwatch",
                 security: dict[str, Any] | None = None, request_timeout_ms: int = 30000,
                 idempotence: bool | None = None) -> None:
        self.bootstrap = bootstrap_servers
        self.topic = topic
        self.create_topic = create_topic
        self.client_id = client_id
        self.security = security or {}
        self.timeout_ms = request_timeout_ms
        self.idempotence = idempotence
        self._producer = None

    @classmethod
    def from_config(cls, kafka: KafkaConfig, sinks: SinksConfig) -> KafkaAlertSink:
        """The ``[sinks]`` alerts topic on the ``[kafka]`` cluster, with its client settings."""
        return cls(kafka.bootstrap_servers, sinks.kafka_topic, create_topic=sinks.kafka_create_topic,
                   client_id=f"{kafka.client_id}-alerts", security=kafka.security(),
                   request_timeout_ms=kafka.request_timeout_ms)

    def _ensure_topic(self) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id=self.client_id,
                                 request_timeout_ms=self.timeout_ms, **self.security)
        try:
            if self.topic not in admin.list_topics():
                try:
                    admin.create_topics([NewTopic(self.topic, num_partitions=1, replication_factor=-1)])
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()

    def _make_producer(self):
        from kafka import KafkaProducer

        # max_block_ms bounds the wait for metadata (default 60 s) by the request timeout, so a
        # dead cluster fails the micro-batch in seconds, not minutes.
        base = dict(bootstrap_servers=self.bootstrap, client_id=self.client_id, acks="all", retries=5,
                    retry_backoff_ms=200, request_timeout_ms=self.timeout_ms, max_block_ms=self.timeout_ms,
                    bootstrap_timeout_ms=self.timeout_ms,
                    max_in_flight_requests_per_connection=1, **self.security)
        if self.idempotence is not False:
            try:
                return KafkaProducer(enable_idempotence=True, **base)
            except Exception as exc:  # noqa: BLE001 - older brokers: fall back, say so
                if "bootstrap" in str(exc).lower():
                    raise  # unreachable cluster, not an old broker: a second attempt would only wait again
                if self.idempotence:
                    raise AlertSinkError(f"idempotent producer to {self.bootstrap} failed: {exc}") from exc
                log.warning("idempotent producer unavailable (%s); using acks=all with retries", exc)
        return KafkaProducer(**base)

    def __call__(self, alerts: list[dict[str, Any]]) -> None:
        if not alerts:
            return
        try:
            if self._producer is None:
                if self.create_topic:
                    self._ensure_topic()
                self._producer = self._make_producer()
            futures = [self._producer.send(self.topic, key=a["key"].encode(),
                                           value=json.dumps(a, separators=(",", ":")).encode()) for a in alerts]
            self._producer.flush(timeout=self.timeout_ms / 1000)
            for f in futures:
                f.get(timeout=self.timeout_ms / 1000)
        except AlertSinkError:
            raise
        except Exception as exc:  # noqa: BLE001 - any client error fails the micro-batch
            self.close()
            raise AlertSinkError(f"could not produce {len(alerts)} alert(s) to topic {self.topic!r} on "
                                 f"{self.bootstrap}: {exc}") from exc

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=5)
            finally:
                self._producer = None
