"""WriteTxnMarkers (API key 27, v0-v2) to a partition's leader: one ABORT marker, as Kafka's
``Admin.abortTransaction`` sends it (``AbortTransactionHandler.buildBatchedRequest``, 3.0 -> trunk).

Request: ``Markers[ProducerId, ProducerEpoch, TransactionResult, Topics[Name, PartitionIndexes],
CoordinatorEpoch, TransactionVersion (v2)]``; here one marker, ``TransactionResult = false``
(ABORT), one topic with one partition. The version is the highest both sides support (v0 before
2.8, v1 flexible from 2.8, v2 from 4.2 with KIP-1228's per-marker ``TransactionVersion``). On v2
the field is sent as 0, its default, exactly like the admin client, which never sets it: the
leader then applies the legacy epoch rule ``markerEpoch < entry.producerEpoch`` ->
INVALID_PRODUCER_EPOCH (``ProducerAppendInfo.checkProducerEpoch``). Marking it 2 would demand an
epoch strictly above the producer's (the coordinator's TV2 bump, KIP-890) and raise the
producer's epoch at the leader, fencing a producer that is still alive.

Response: ``Markers[ProducerId, Topics[Name, Partitions[PartitionIndex, ErrorCode]]]``.
``AbortTransactionHandler.handleResponse`` accepts exactly one marker result for the producer id,
one topic, one partition (:func:`partition_error`). Nothing is retried here: a leader that moved
means the caller's re-check is redone from the start.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from streaming.sources.kafka_client.core import ClientCore

WRITE_TXN_MARKERS_MAX_VERSION = 2


def abort_marker_request(producer_id: int, producer_epoch: int, coordinator_epoch: int, topic: str,
                         partition: int) -> WriteTxnMarkersRequest:
    """One ABORT marker for ``producer_id`` on ``topic``-``partition`` (version chosen on send)."""
    Marker = WriteTxnMarkersRequest.WritableTxnMarker
    Topic = Marker.WritableTxnMarkerTopic
    marker = Marker(producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
                    topics=[Topic(name=topic, partition_indexes=[partition])],
                    coordinator_epoch=coordinator_epoch, transaction_version=0)
    return WriteTxnMarkersRequest(markers=[marker], max_version=WRITE_TXN_MARKERS_MAX_VERSION)


def write_markers(core: ClientCore, leader: int, request: WriteTxnMarkersRequest) -> Any:
    """Send ``request`` to broker ``leader`` and return the decoded answer; ``request.API_VERSION``
    then holds the version sent. Raises ``KafkaWireError`` on connection failures."""

    async def go():
        return await core._send(leader, request)

    return core._run(go)


def partition_error(response: Any, producer_id: int, topic: str, partition: int) -> int | None:
    """The answer's error code for the one marker sent, or None when the answer does not hold
    exactly one entry for ``producer_id`` on ``topic``-``partition`` (the admin client rejects it)."""
    markers = list(response.markers)
    if len(markers) != 1 or markers[0].producer_id != producer_id or len(markers[0].topics) != 1 \
            or markers[0].topics[0].name != topic or len(markers[0].topics[0].partitions) != 1 \
            or markers[0].topics[0].partitions[0].partition_index != partition:
        return None
    return markers[0].topics[0].partitions[0].error_code
