"""DescribeProducers (API key 61, v0; Kafka 2.8+, KIP-664) to a partition's leader.

Request: ``Topics[Name, PartitionIndexes]``; here one topic with one partition. The leader answers
from its own producer state (``KafkaApis.handleDescribeProducersRequest`` ->
``UnifiedLog.activeProducers``), per partition ``ErrorCode``, ``ErrorMessage`` and
``ActiveProducers[ProducerId, ProducerEpoch, LastSequence, LastTimestamp, CoordinatorEpoch,
CurrentTxnStartOffset]``: ``CoordinatorEpoch`` is that of the producer's last marker on the
partition (-1 if none), ``CurrentTxnStartOffset`` -1 when it has no open transaction.
It needs Read on the topic, which the job needs for Fetch anyway: a refusal raises
:class:`~streaming.sources.kafka_client.errors.KafkaAuthorizationError` instead of an unknown answer.
"""

from __future__ import annotations

import kafka.errors as Errors
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.structs import TopicPartition

from streaming.broker_rules import DESCRIBE_PRODUCERS
from streaming.kafka_admin.session import AdminSession
from streaming.sources.kafka_client.errors import KafkaAuthorizationError
from streaming.verdict import DescribeProducersAnswer


def describe_producers(session: AdminSession, topic: str,
                       partition: int) -> dict[int, DescribeProducersAnswer] | None:
    """The leader's producers of ``topic``-``partition`` by producer id; None when unknown."""
    if not session.available(DESCRIBE_PRODUCERS, DescribeProducersRequest):  # Kafka 2.8+
        return None
    tp = TopicPartition(topic, int(partition))
    try:
        result = session.call(DESCRIBE_PRODUCERS, lambda: session.admin().describe_producers([tp]))
    except Errors.AuthorizationError as exc:
        raise KafkaAuthorizationError(session.denied(DESCRIBE_PRODUCERS, exc, topic),
                                      error_code=exc.errno) from exc
    if result is None or tp not in result:
        return None
    return {p.producer_id: DescribeProducersAnswer(found=True, producer_epoch=p.producer_epoch,
                                                   coordinator_epoch=p.coordinator_epoch,
                                                   current_txn_start_offset=p.current_transaction_start_offset)
            for p in result[tp].active_producers}
