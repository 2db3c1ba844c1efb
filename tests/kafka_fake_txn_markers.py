"""WriteTxnMarkers on the fake broker's partition leaders (tests only; mixed into FakeKafkaBroker).

This is the broker side of ``Admin.abortTransaction`` / ``txnwatch abort --execute``
(spec/kafka-transactions-tool.md §4), kept apart from ``tests/kafka_fake_broker.py`` so that the
rest of the fake can change independently. Every rule names the Kafka code it follows:

* **Versions** (``WriteTxnMarkersRequest.json``): v0 (0.11+), v1 = flexible (2.8+, KAFKA-10729),
  v2 adds ``TransactionVersion`` per marker (KIP-1228, 4.2+; default 0). v0 was removed in 4.0.
  The advertised range comes from the release table (``tests/broker_api_versions.py``).
* **Authorization** (``KafkaApis.handleWriteTxnMarkersRequest``): before 3.8,
  ``authHelper.authorizeClusterOperation(request, CLUSTER_ACTION)``; from 3.8 (KIP-1037,
  KAFKA-16513) ``ALTER`` on the cluster is checked first and ``CLUSTER_ACTION`` only when it is
  missing. A refusal throws, and ``WriteTxnMarkersRequest.getErrorResponse`` answers every
  partition of every marker with CLUSTER_AUTHORIZATION_FAILED (31).
* **Per partition** (same handler): a partition this broker does not host ->
  UNKNOWN_TOPIC_OR_PARTITION (``replicaManager.getMagic`` is None). The fake keeps one replica
  per partition on its leader; a request to another node is answered NOT_LEADER_OR_FOLLOWER, as
  ``Partition.appendRecordsToLeader`` answers on a follower. Injected partition faults
  (``inject_partition_error(..., apis=("write_txn_markers",))``) come from the append.
* **Append** (``ReplicaManager.appendRecords`` with ``AppendOrigin.COORDINATOR`` ->
  ``UnifiedLog.analyzeAndValidateProducerState`` -> ``ProducerAppendInfo.appendEndTxnMarker``),
  against the producer's entry as the leader holds it (replayed from the served log by
  :func:`tests.kafka_fake_broker.producer_states`, from its loaded snapshot on; an unknown
  producer has epoch -1 and coordinator epoch -1):

  - ``checkProducerEpoch``: legacy markers (TV 0/1, every request below v2 and a v2 marker with
    ``TransactionVersion`` 0) are rejected when ``markerEpoch < entry.epoch``; TV2 markers
    (``TransactionVersion`` >= 2) when ``markerEpoch <= entry.epoch``, except the idempotent
    retry of KAFKA-19999 (``markerEpoch == entry.epoch`` and no transaction open) -> both
    INVALID_PRODUCER_EPOCH (47) (apache/kafka trunk ``ProducerAppendInfo.checkProducerEpoch``;
    2.7-3.x have only the legacy rule);
  - ``checkCoordinatorEpoch``: ``entry.coordinatorEpoch > marker.coordinatorEpoch`` ->
    TRANSACTION_COORDINATOR_FENCED (52);
  - otherwise the control batch (``MemoryRecords.withEndTransactionMarker``: one control record,
    the marker's producer id/epoch, coordinator epoch, leader clock) is appended at the log end
    with the partition's leader epoch. It closes whatever the producer has open there (no start
    offset is checked), so the served log's LSO moves past it; with nothing open it changes no
    LSO.

Test hooks: :meth:`TxnMarkersMixin.on_next_write_txn_markers` runs a function on the broker just
before the next WriteTxnMarkers is handled (state changing between the re-check and the
execution); :meth:`TxnMarkersMixin.request_counts` counts requests per API (a dry run must send
none).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

WRITE_TXN_MARKERS = "write_txn_markers"
#: the current release's range (4.2+: v1-v2); release tables override it
WRITE_TXN_MARKERS_VERSIONS = (1, 2)
REQUEST_CLASS = WriteTxnMarkersRequest

# org.apache.kafka.common.protocol.Errors
_NONE = 0
_UNKNOWN_TOPIC_OR_PARTITION = 3
_NOT_LEADER_OR_FOLLOWER = 6
_CLUSTER_AUTHORIZATION_FAILED = 31
_INVALID_PRODUCER_EPOCH = 47
_TRANSACTION_COORDINATOR_FENCED = 52
_CLUSTER = ("Cluster", "kafka-cluster")


def marker_check(entry: dict[str, int] | None, *, producer_epoch: int, coordinator_epoch: int,
                 transaction_version: int) -> int:
    """The error code ``ProducerAppendInfo.appendEndTxnMarker`` gives a marker against the
    producer's current ``entry`` (DescribeProducers fields; None = no state), 0 when accepted."""
    current = entry["producer_epoch"] if entry else -1
    open_txn = bool(entry) and entry["current_txn_start_offset"] >= 0
    if transaction_version >= 2:
        invalid = producer_epoch <= current and not (producer_epoch == current and not open_txn)
    else:
        invalid = producer_epoch < current
    if invalid:
        return _INVALID_PRODUCER_EPOCH
    if entry and entry["coordinator_epoch"] > coordinator_epoch:
        return _TRANSACTION_COORDINATOR_FENCED
    return _NONE


class TxnMarkersMixin:
    """WriteTxnMarkers handling and the abort-test hooks of :class:`FakeKafkaBroker`."""

    _marker_hooks: collections.deque

    def on_next_write_txn_markers(self, fn: Callable[[Any], None]) -> None:
        """Run ``fn(broker)`` right before the next WriteTxnMarkers request is handled."""
        with self._lock:
            if not hasattr(self, "_marker_hooks"):
                self._marker_hooks = collections.deque()
            self._marker_hooks.append(fn)

    def request_counts(self) -> collections.Counter:
        """Requests received so far per API name (``"write_txn_markers"``, ``"fetch"``, ...)."""
        with self._lock:
            return collections.Counter(r.api for r in self.requests)

    def _write_txn_markers_allowed(self) -> bool:
        # KafkaApis.handleWriteTxnMarkersRequest: 3.8.0+ ALTER on the cluster, else CLUSTER_ACTION;
        # 0.11-3.7 CLUSTER_ACTION only.
        if self.broker_version is None or self.broker_version >= (3, 8):
            if self._authorized("Alter", *_CLUSTER):
                return True
        return self._authorized("ClusterAction", *_CLUSTER)

    def _on_write_txn_markers(self, node, request, version):
        from tests.kafka_fake_broker import build_control_batch, producer_states

        hooks = getattr(self, "_marker_hooks", None)
        while hooks:
            hooks.popleft()(self)
        allowed = self._write_txn_markers_allowed()
        Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
        TopicResult = Result.WritableTxnMarkerTopicResult
        PartResult = TopicResult.WritableTxnMarkerPartitionResult
        out = []
        for marker in request.markers:
            tv = marker.transaction_version if version >= 2 else 0
            topics_out = []
            for t in marker.topics:
                parts_out = []
                for p in t.partition_indexes:
                    code = _CLUSTER_AUTHORIZATION_FAILED if not allowed else self._append_marker(
                        node, t.name, p, marker, tv, build_control_batch, producer_states)
                    parts_out.append(PartResult(partition_index=p, error_code=code))
                topics_out.append(TopicResult(name=t.name, partitions=parts_out))
            out.append(Result(producer_id=marker.producer_id, topics=topics_out))
        return WriteTxnMarkersResponse(version=version, markers=out)

    def _append_marker(self, node, topic: str, partition: int, marker, tv: int, build_control_batch,
                       producer_states) -> int:
        plog = self._plog(topic, partition)
        if plog is None:
            return _UNKNOWN_TOPIC_OR_PARTITION
        code = self._take_partition_fault(topic, partition, WRITE_TXN_MARKERS) or \
            self._persistent_faults.get((topic, partition), _NONE)
        if code:
            return code
        if self._leader(topic, partition) != node.node_id:
            return _NOT_LEADER_OR_FOLLOWER
        _, segs = self._state(plog, topic, partition)
        entry = producer_states(segs, plog.loaded_snapshot).get(marker.producer_id)
        code = marker_check(entry, producer_epoch=marker.producer_epoch, coordinator_epoch=marker.coordinator_epoch,
                            transaction_version=tv)
        if code:
            return code
        st, _ = plog.state(0, 0)
        batch = build_control_batch(st.high_watermark, marker.producer_id, marker.producer_epoch,
                                    commit=bool(marker.transaction_result), coordinator_epoch=marker.coordinator_epoch,
                                    timestamp_ms=int(time.time() * 1000),
                                    partition_leader_epoch=self._leader_epochs[(topic, partition)])
        with open(plog.active_segment(st.high_watermark), "ab") as f:
            f.write(batch)
        return _NONE
