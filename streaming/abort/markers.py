"""WriteTxnMarkers (ABORT) to the partition leader, as Kafka's ``Admin.abortTransaction`` sends it.

The request, its version and the shape check of the answer are the Kafka client's
(:mod:`streaming.sources.kafka_client.write_txn_markers`: API key 27, v0-v2, fields and
``TransactionVersion = 0`` explained there). Here: the answer in words with the next step
(``AbortTransactionHandler.handleError``); NOT_LEADER_OR_FOLLOWER and friends are not retried
(the admin client re-finds the leader and retries): the leader moved, so the re-check is redone
from the start by running the command again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from streaming.abort.plan import AbortSpec
from streaming.sources.kafka_client.write_txn_markers import (
    abort_marker_request,
    partition_error,
    write_markers,
)
from streaming.sources.kafka_wire import error_name

# org.apache.kafka.common.protocol.Errors
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
BROKER_NOT_AVAILABLE = 8
REPLICA_NOT_AVAILABLE = 9
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_PRODUCER_EPOCH = 47
TRANSACTION_COORDINATOR_FENCED = 52
_LEADER_MOVED = (NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, BROKER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION)


@dataclass(frozen=True)
class MarkerAnswer:
    version: int
    error_code: int
    error: str
    explanation: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == NONE

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "error_code": self.error_code, "error": self.error,
                "explanation": self.explanation}


def abort_request(spec: AbortSpec) -> WriteTxnMarkersRequest:
    """The ABORT marker the re-checked ``spec`` calls for."""
    return abort_marker_request(spec.producer_id, spec.producer_epoch, spec.coordinator_epoch, spec.topic,
                                spec.partition)


def required_acl(broker_version: tuple[int, ...] | None) -> str:
    """The ACL WriteTxnMarkers needs (``KafkaApis.handleWriteTxnMarkersRequest``): CLUSTER_ACTION on
    the cluster before 3.8; from 3.8 (KIP-1037) ALTER on the cluster, CLUSTER_ACTION still accepted."""
    if broker_version is not None and tuple(broker_version[:2]) >= (3, 8):
        return "ALTER on the cluster (Kafka 3.8+, KIP-1037; CLUSTER_ACTION is also accepted)"
    if broker_version is not None:
        return "CLUSTER_ACTION on the cluster (brokers before 3.8)"
    return "CLUSTER_ACTION on the cluster (or ALTER on the cluster on Kafka 3.8+, KIP-1037)"


def explain(code: int, spec: AbortSpec, *, broker_version: tuple[int, ...] | None, bootstrap: str,
            principal: str | None) -> str:
    """The broker's answer in words, with the next step."""
    tp = f"{spec.topic}-{spec.partition}"
    if code == CLUSTER_AUTHORIZATION_FAILED:
        acl = required_acl(broker_version)
        op = "Alter" if acl.startswith("ALTER") else "ClusterAction"
        return (f"CLUSTER_AUTHORIZATION_FAILED: the broker refused the marker; the principal "
                f"{principal or '(this client)'} needs {acl}. Grant it with: kafka-acls.sh --bootstrap-server "
                f"{bootstrap} --add --allow-principal {principal or '<principal>'} --operation {op} --cluster")
    if code == INVALID_PRODUCER_EPOCH:
        return (f"INVALID_PRODUCER_EPOCH: the leader of {tp} holds a higher epoch for producer {spec.producer_id} "
                f"than {spec.producer_epoch}: the producer was re-initialised after the re-check. Nothing was "
                f"written. Run the command again without --execute to re-read the partition.")
    if code == TRANSACTION_COORDINATOR_FENCED:
        return (f"TRANSACTION_COORDINATOR_FENCED: the leader of {tp} holds a coordinator epoch for producer "
                f"{spec.producer_id} above {spec.coordinator_epoch}: a coordinator wrote a marker for it after "
                f"the re-check. Nothing was written. Run the command again without --execute to re-read; never "
                f"raise the epoch by hand.")
    if code in _LEADER_MOVED:
        return (f"{error_name(code)}: the broker that was {tp}'s leader at the re-check is not its leader now "
                f"(election or reassignment). Nothing was written. Run the command again: the re-check and the "
                f"marker then go to the new leader.")
    return f"{error_name(code)}: the broker refused the marker for {tp}. Nothing was written."


def send_abort(wire: Any, leader: int, spec: AbortSpec, *, principal: str | None) -> MarkerAnswer:
    """Send the marker to ``leader`` and check the answer's shape as ``AbortTransactionHandler``
    does. Raises ``KafkaWireError`` on connection failures (the caller reports them)."""
    request = abort_request(spec)
    response = write_markers(wire, leader, request)
    version = request.API_VERSION
    code = partition_error(response, spec.producer_id, spec.topic, spec.partition)
    if code is None:
        return MarkerAnswer(version, -1, "UNEXPECTED_RESPONSE",
                            f"the WriteTxnMarkers answer does not hold exactly one entry for producer "
                            f"{spec.producer_id} on {spec.topic}-{spec.partition}: {response}")
    if code == NONE:
        return MarkerAnswer(version, NONE, "NONE")
    return MarkerAnswer(version, code, error_name(code), explain(
        code, spec, broker_version=wire.broker_version, bootstrap=wire.bootstrap_servers, principal=principal))
