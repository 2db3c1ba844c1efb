"""A fake Kafka cluster over real loopback sockets, for tests only (never shipped).

``FakeKafkaBroker`` is a small threaded TCP server on 127.0.0.1 that speaks the real Kafka wire
protocol. Requests are decoded and responses encoded with kafka-python's own protocol classes
(``kafka.protocol.*``, JSON-schema driven, so every version in the advertised ranges is encoded
exactly like kafka-python/Kafka expect); only ListOffsets answers v1+ are encoded by hand
(:class:`_ListOffsetsAnswer`, checked byte for byte against kafka-python's encoder). The data it serves is a broker-shaped log directory::

    <root>/<topic>-<partition>/<20-digit base offset>.log

and the bytes of ``.log`` segment files are served verbatim in Fetch responses: a Fetch
response's ``records`` field has the same byte layout as a segment file
(spec/kafka-formats.md §1-§2). Files are re-stat'ed on every request, so tests may append to
them (or drop new segment files) while the broker runs; :meth:`refresh` drops all caches.

What is modelled (and how faithfully)
-------------------------------------
* **ApiVersions** v0-4 (v3+: the finalized features set with :meth:`FakeKafkaBroker.finalize_feature`,
  e.g. ``transaction.version``). An unsupported ApiVersions version is answered UNSUPPORTED_VERSION in
  v0 format (Kafka's ``RequestContext.parseRequest``); the list in that answer is empty before
  2.4 and holds only the ApiVersions range from 2.4 on (KIP-511, ``ApiVersionsRequest
  .getErrorResponse`` of 2.3.0 vs 2.4.0). Advertised ranges: :data:`DEFAULT_API_VERSIONS`, or a
  real release's table with ``broker_version=(2, 3)`` (tests/broker_api_versions.py).
* **Metadata** v0-13 (v13: top-level error code): all nodes of the fake cluster, one replica per partition (the leader),
  ``is_internal`` for ``__transaction_state``/``__consumer_offsets``, stable topic ids, auto
  topic creation when the request allows it and ``auto_create_topics`` is on; with
  ``broker_version`` before (2, 8), a named missing internal topic is created whatever the
  request allows (``KafkaApis.getTopicMetadata`` -> ``createInternalTopic`` of 2.0-2.7; moved to
  the controller and gated on AllowAutoTopicCreation by KAFKA-9751 in 2.8), recorded in
  ``internal_topics_created``.
* **ListOffsets** v1-11: EARLIEST (-2) = log start offset, LATEST (-1) = high watermark for
  READ_UNCOMMITTED and last stable offset (LSO) for READ_COMMITTED, MAX_TIMESTAMP (-3) and
  timestamps at batch granularity (``Partition.fetchOffsetForTimestamp``: the last fetchable
  offset is ``lastStableOffset`` or ``highWatermark`` by isolation level; EARLIEST goes to
  ``UnifiedLog.fetchOffsetByTimestamp``).
* **Fetch** v4-12 (by topic name; v13+ address topics by id and are not modelled: neither
  KafkaWire nor kafka-python's consumer sends them), sessionless (``session_id`` 0): served from the segment holding the batch
  that contains the fetch offset (the response starts at that batch, which may begin *before*
  the fetch offset, and never spans two segments - as Kafka's ``LocalLog.read``). Partition max
  bytes are honoured as Kafka does: the slice is exactly ``partition_max_bytes`` long and may end
  in a **partial trailing batch** (``partial_batches=True``, Kafka behaviour), except that the
  first partition of a response always gets at least one whole batch (KIP-74) even if it is
  larger than the limit. The request-level ``max_bytes`` is honoured across partitions.
  READ_COMMITTED reads stop at the LSO and return the aborted-transaction list.
  ``max_wait_ms``/``min_bytes`` are ignored: the fake always answers immediately.
* **High watermark** = log end offset (single replica). **LSO** = first offset of the oldest
  open transaction, computed from the served log with the broker's pairing rules
  (spec/kafka-formats.md §3.4: per producer id, the first transactional data batch opens a
  transaction, a COMMIT/ABORT marker with a record closes whatever is open, an empty control
  batch does nothing), else the high watermark.
* **Produce** v3-9 (record batch magic v2 only; CRC checked): batches get the next offsets and
  the partition leader epoch and are appended to the partition's last segment file on disk.
  ``acks=0`` gets no response. No sequence-number/epoch validation (duplicates are appended).
* **InitProducerId** v0-4, **FindCoordinator** v0-4, **AddPartitionsToTxn** v0-3, **EndTxn**
  v0-3: enough for kafka-python's ``KafkaProducer`` with ``enable_idempotence=True`` (its
  default) and with a ``transactional_id`` (``init_transactions``/``begin_transaction``/
  ``commit_transaction``/``abort_transaction``). EndTxn appends real COMMIT/ABORT control
  batches (78 bytes, spec §3.1) with the producer's current epoch (transaction version 0/1
  semantics) and coordinator epoch ``coordinator_epoch``. Re-initialising a transactional id
  with an open transaction aborts it with ``epoch + 1`` markers and returns ``epoch + 1``
  (simplified: real Kafka goes through PrepareAbort and may bump twice). Transactions never
  time out (that is how tests build hanging transactions), ``__transaction_state`` is *not*
  written, and AddOffsetsToTxn/TxnOffsetCommit (``send_offsets_to_transaction``) are not
  supported.
* **DescribeProducers** v0 (KIP-664, 2.8+): READ on the topic, then per partition the leader's
  producer state replayed from the served log (:func:`producer_states`, following
  ``ProducerAppendInfo.append``), starting from the newest valid producer ``.snapshot`` in the
  partition directory when there is one (:func:`read_producer_snapshot`, as a restarted broker
  rebuilds it, see :meth:`_PartitionLog.facts`; ``KafkaApis.handleDescribeProducersRequest`` ->
  ``ReplicaManager.activeProducerState`` -> ``UnifiedLog.activeProducers``); a non-leader
  answers NOT_LEADER_OR_FOLLOWER (``getPartitionOrError``).
* **DescribeTransactions** v0 / **ListTransactions** v0-2 (KIP-664, 3.0+; v1 duration filter, KIP-994;
  v2 transactional-id pattern, KIP-1152): the coordinator's
  in-memory transaction metadata (``TransactionCoordinator.handleDescribeTransactions`` /
  ``handleListTransactions``): DESCRIBE on the TransactionalId, topics the principal may not
  Describe left out; ids from InitProducerId/AddPartitionsToTxn/EndTxn or
  :meth:`FakeKafkaBroker.set_transaction`, over what the coordinator loads from the staged
  ``__transaction_state`` partitions (``TransactionStateManager.loadTransactionsForTxnTopicPartition``:
  the latest value per transactional id, tombstones remove it). Node 1 is the only coordinator
  (NOT_COORDINATOR elsewhere).
* **WriteTxnMarkers** v0-2 (the admin abort): authorization by release, the leader's
  ``ProducerAppendInfo`` epoch and coordinator-epoch checks (TV2 strict rule on v2 markers), the
  marker appended and the LSO moved; a hook to change state just before it is handled and
  per-API request counts. Kept in ``tests/kafka_fake_txn_markers.py`` with its sources.
* **ListGroups** v0-5 / **OffsetFetch** v1-9 (groups from :meth:`FakeKafkaBroker.commit_offsets`):
  ``KafkaApis.handleListGroupsRequest`` (all groups with DESCRIBE on the cluster, else the
  described ones) and ``handleOffsetFetchRequestFromCoordinator`` (DESCRIBE on the group, topics
  without DESCRIBE answered TOPIC_AUTHORIZATION_FAILED per partition, -1 when nothing is committed).
  KIP-848 group types (``group_type``): ListGroups v5 answers each group's type and applies the
  TypesFilter (``GroupMetadataManager.listGroups``); OffsetFetch of a share group answers
  GROUP_ID_NOT_FOUND (``ShareGroup.validateOffsetFetch``). OffsetFetch v7+ with ``require_stable``
  answers UNSTABLE_OFFSET_COMMIT (``GroupMetadataManager.getOffsets``) for the partitions with a
  transactional offset commit still pending in the served ``__consumer_offsets`` partitions
  (replayed as ``GroupMetadataManager.loadGroupsAndOffsets`` does: :func:`_offsets_log`) or marked
  with :meth:`FakeKafkaBroker.pend_offset_commits`; the offsets a plain or committed record stored
  there are the group's committed offsets too.
  **FindCoordinator** checks DESCRIBE on the group / transactional id (``KafkaApis.getCoordinator``).
  Only the tables of releases that have an API advertise it (``broker_version``).
* **CreateTopics** v2-7: creates ``<topic>-<p>/00000000000000000000.log`` directories. Before v4
  (Kafka 2.4, KIP-464) ``-1`` partitions/replication factor is refused, and a replication
  factor above the number of brokers always is (``AdminUtils.assignReplicasToBrokers``).
* **ACLs**: IDEMPOTENT_WRITE for InitProducerId without a transactional id
  (``idempotent_write_acl``; see :meth:`FakeKafkaBroker._on_init_producer_id`), and the
  per-resource rules of **Authorization** below.
* **TLS** (``ssl_context``: every listener wraps accepted sockets, optionally requiring client
  certificates) and **SASL** (``sasl``: SaslHandshake v0-1 + SaslAuthenticate v0-2 with PLAIN,
  SCRAM-SHA-256/512 and OAUTHBEARER before any other request), following Kafka's
  ``SaslServerAuthenticator``; see ``tests/kafka_fake_security.py`` for the exact flow, error
  codes and sources. After authentication SaslHandshake/SaslAuthenticate answer
  ILLEGAL_SASL_STATE (``KafkaApis.handleSaslHandshakeRequest``/``handleSaslAuthenticateRequest``).
* **Authorization** (:meth:`FakeKafkaBroker.deny`): rules checked per request with the
  connection's principal, answered as ``KafkaApis`` does - Metadata: TOPIC_AUTHORIZATION_FAILED
  per named topic without Describe (name, zero topic id, no partitions) and such topics left out
  of an all-topics answer (``handleTopicMetadataRequest``); ListOffsets: per partition without
  Describe (``handleListOffsetRequestV1AndAbove``); Fetch: per partition without Read
  (``handleFetchRequest``); Produce: per partition without Write (``handleProduceRequest``);
  CreateTopics: without Create on the cluster or the topic (``handleCreateTopicsRequest``).
  Authorization is checked before existence, as in those handlers.

Not modelled: SASL re-authentication, GSSAPI, fetch sessions, long-poll waits, replication/ISR, quota accounting
(throttles are injected: :meth:`throttle`, :meth:`throttle_fetch`), DeleteTopics
(use :meth:`delete_topic`), compaction, leader-epoch checkpoint files, idempotent sequence
checks, magic v0/v1 produce.

Fault injection (all thread-safe, effective from the next request)
------------------------------------------------------------------
* :meth:`inject_partition_error` / :meth:`leader_not_available` / :meth:`not_leader`: the next N
  partition-scoped answers (Fetch, ListOffsets, Produce) for a partition carry an error code.
* :meth:`move_leader`: partition leadership moves to another node (``num_nodes`` > 1); requests
  to the old node get NOT_LEADER_OR_FOLLOWER, Metadata names the new leader. ``node_id=-1``
  makes the leader unavailable (Metadata: LEADER_NOT_AVAILABLE, leader -1).
* :meth:`offline` / :meth:`online`: a partition loses its leader (from the start or mid-run) and
  comes back with the next leader epoch (see below).
* :meth:`fail_partition` / :meth:`heal_partition`: every partition-scoped answer for a partition
  carries an error (``KAFKA_STORAGE_ERROR``, ``REPLICA_NOT_AVAILABLE`` ...) until healed.
* :meth:`stop_node` / :meth:`start_node`: one broker stops answering (listener closed, connections
  reset); Metadata from the others reports its partitions leaderless until it is back.
* :meth:`drop_connection`: the next N matching requests are answered by closing the socket.
* :meth:`stall`: the next N matching requests (per node if given) are read and never answered
  (client timeouts); ``answered_while_other_blocked`` counts answers of other nodes meanwhile.
* :meth:`advance_log_start`: retention/DeleteRecords moved the log start offset; fetches below
  it get OFFSET_OUT_OF_RANGE, ListOffsets EARLIEST returns it.
* :meth:`delete_topic`: the partition directories are renamed ``<dir>.<id>-delete`` (as Kafka
  does) and the topic disappears (UNKNOWN_TOPIC_OR_PARTITION).
* :meth:`stop` / :meth:`start`: the broker goes down (listeners closed, open connections reset)
  and comes back on the same ports.
* :meth:`roll_segment`, :meth:`append_raw`, :meth:`append_batches`: grow the log while running.
* :meth:`lag_high_watermark`: the leader's high watermark trails its log end (a new leader during
  a rolling restart): fetches between the two get no records and no error.
* :meth:`throttle_fetch`: Fetch answered as a broker over quota does (no partitions,
  ``throttle_time_ms`` > 0), then the connection muted for that long (KIP-219).
* :meth:`throttle`: full answers of one API carrying ``throttle_time_ms``, the connection then
  muted for that long (KIP-219, ``KafkaChannel`` muting); per node.
* :meth:`truncate`: unclean leader election; the log is cut and the high watermark goes back.
  :meth:`delete_topic` + :meth:`create_topic` recreate a topic under a new topic id.
* :meth:`stale_metadata`: Metadata answers from a broker whose cache has not seen the topic yet.
* :meth:`metadata_error`: Metadata v13+ answers with a top-level error code.
* :meth:`stale_leader`: Metadata from one node (or all) names an older leader and leader epoch.
* :meth:`set_preferred_read_replica`: the leader redirects Fetch v11+ to a follower (KIP-392).
* ``null_records``: empty reads carry ``records = null`` (allowed by FetchResponse.json).

The root directory is modified by Produce, EndTxn, CreateTopics, :meth:`delete_topic` and the
append helpers: point it at a copy (see :func:`stage_segment`), never at checked-in fixtures.

Usage::

    root = tmp_path / "logs"
    stage_segment(root, "orders", 0, FIXTURE)
    with FakeKafkaBroker(root) as broker:
        wire = KafkaWire(broker.bootstrap_servers, ...)
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import logging
import os
import re
import shutil
import socket
import stat
import struct
import termios
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.admin.groups import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests import kafka_fake_txn_markers as txn_markers
from tests.kafka_fake_security import DenyRule, SaslAuthenticator, SaslConfig, tls_principal

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Kafka error codes used by the fake (org.apache.kafka.common.protocol.Errors)
# --------------------------------------------------------------------------------------------
UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_NOT_AVAILABLE = 78
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
ILLEGAL_SASL_STATE = 34
GROUP_AUTHORIZATION_FAILED = 30
NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TRANSACTIONAL_ID_NOT_FOUND = 105
GROUP_ID_NOT_FOUND = 69
UNSTABLE_OFFSET_COMMIT = 88

ERROR_CODES = {
    "UNKNOWN_SERVER_ERROR": UNKNOWN_SERVER_ERROR,
    "NONE": NONE,
    "OFFSET_OUT_OF_RANGE": OFFSET_OUT_OF_RANGE,
    "CORRUPT_MESSAGE": CORRUPT_MESSAGE,
    "UNKNOWN_TOPIC_OR_PARTITION": UNKNOWN_TOPIC_OR_PARTITION,
    "LEADER_NOT_AVAILABLE": LEADER_NOT_AVAILABLE,
    "NOT_LEADER_OR_FOLLOWER": NOT_LEADER_OR_FOLLOWER,
    "NOT_LEADER_FOR_PARTITION": NOT_LEADER_OR_FOLLOWER,
    "REQUEST_TIMED_OUT": 7,
    "REPLICA_NOT_AVAILABLE": 9,
    "NETWORK_EXCEPTION": 13,
    "TOPIC_AUTHORIZATION_FAILED": TOPIC_AUTHORIZATION_FAILED,
    "CLUSTER_AUTHORIZATION_FAILED": CLUSTER_AUTHORIZATION_FAILED,
    "KAFKA_STORAGE_ERROR": 56,
    "FENCED_LEADER_EPOCH": FENCED_LEADER_EPOCH,
    "UNKNOWN_LEADER_EPOCH": UNKNOWN_LEADER_EPOCH,
    "OFFSET_NOT_AVAILABLE": OFFSET_NOT_AVAILABLE,
}

INTERNAL_TOPICS = frozenset({"__transaction_state", "__consumer_offsets"})

#: api_key -> (min_version, max_version) advertised by default. Every version in these ranges
#: is handled (kafka-python's schema classes encode/decode all of them).
DEFAULT_API_VERSIONS: dict[int, tuple[int, int]] = {
    ProduceRequest.API_KEY: (3, 9),
    FetchRequest.API_KEY: (4, 12),
    ListOffsetsRequest.API_KEY: (1, 7),
    MetadataRequest.API_KEY: (0, 12),
    FindCoordinatorRequest.API_KEY: (0, 4),
    ApiVersionsRequest.API_KEY: (0, 4),
    CreateTopicsRequest.API_KEY: (2, 7),
    InitProducerIdRequest.API_KEY: (0, 4),
    AddPartitionsToTxnRequest.API_KEY: (0, 3),
    EndTxnRequest.API_KEY: (0, 3),
    SaslHandshakeRequest.API_KEY: (0, 1),
    SaslAuthenticateRequest.API_KEY: (0, 2),
    # KIP-664 (DescribeProducers 2.8+, ListTransactions/DescribeTransactions 3.0+) and the
    # consumer-group reads txnwatch's blocked-groups lookup uses
    DescribeProducersRequest.API_KEY: (0, 0),
    DescribeTransactionsRequest.API_KEY: (0, 0),
    ListTransactionsRequest.API_KEY: (0, 2),
    ListGroupsRequest.API_KEY: (0, 5),
    OffsetFetchRequest.API_KEY: (1, 9),
    # the admin abort (tests/kafka_fake_txn_markers.py)
    txn_markers.REQUEST_CLASS.API_KEY: txn_markers.WRITE_TXN_MARKERS_VERSIONS,
}

_REQUEST_CLASSES = {
    cls.API_KEY: cls
    for cls in (
        ProduceRequest,
        FetchRequest,
        ListOffsetsRequest,
        MetadataRequest,
        FindCoordinatorRequest,
        ApiVersionsRequest,
        CreateTopicsRequest,
        InitProducerIdRequest,
        AddPartitionsToTxnRequest,
        EndTxnRequest,
        SaslHandshakeRequest,
        SaslAuthenticateRequest,
        DescribeProducersRequest,
        DescribeTransactionsRequest,
        ListTransactionsRequest,
        ListGroupsRequest,
        OffsetFetchRequest,
        txn_markers.REQUEST_CLASS,
    )
}

_API_NAMES = {
    ProduceRequest.API_KEY: "produce",
    FetchRequest.API_KEY: "fetch",
    ListOffsetsRequest.API_KEY: "list_offsets",
    MetadataRequest.API_KEY: "metadata",
    FindCoordinatorRequest.API_KEY: "find_coordinator",
    ApiVersionsRequest.API_KEY: "api_versions",
    CreateTopicsRequest.API_KEY: "create_topics",
    InitProducerIdRequest.API_KEY: "init_producer_id",
    AddPartitionsToTxnRequest.API_KEY: "add_partitions_to_txn",
    EndTxnRequest.API_KEY: "end_txn",
    SaslHandshakeRequest.API_KEY: "sasl_handshake",
    SaslAuthenticateRequest.API_KEY: "sasl_authenticate",
    DescribeProducersRequest.API_KEY: "describe_producers",
    DescribeTransactionsRequest.API_KEY: "describe_transactions",
    ListTransactionsRequest.API_KEY: "list_transactions",
    ListGroupsRequest.API_KEY: "list_groups",
    OffsetFetchRequest.API_KEY: "offset_fetch",
    txn_markers.REQUEST_CLASS.API_KEY: txn_markers.WRITE_TXN_MARKERS,
}

_PARTITION_APIS = ("fetch", "list_offsets", "produce")
# ACL operation each partition-scoped API needs on its topic (KafkaApis.handleFetchRequest: READ,
# handleListOffsetRequestV1AndAbove: DESCRIBE, handleProduceRequest: WRITE)
_PARTITION_API_OPERATION = {"fetch": "Read", "list_offsets": "Describe", "produce": "Write"}

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_PARTITION_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")

# v2 record batch header (spec/kafka-formats.md §2.1), 61 bytes
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_V2_HEADER_SIZE = 61
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_ATTR_COMPRESSION = 0x07
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20

# a directory listing is reused only when the directory's mtime is this much older than the
# listing (file timestamps use a coarse clock; see _PartitionLog.load)
_LISTING_RACY_NS = 100_000_000

_UUID_NS = uuid.UUID("5d1f6c1e-7c57-4a52-9c6b-2f1b8a7f0a11")


def resolve_error(error: int | str) -> int:
    """Kafka error code from an int or a Kafka error name (``"NOT_LEADER_OR_FOLLOWER"``)."""
    if isinstance(error, int):
        return error
    try:
        return ERROR_CODES[error.upper()]
    except KeyError:
        raise ValueError(f"unknown Kafka error name {error!r}; use an int code") from None


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def stage_segment(root: str | os.PathLike, topic: str, partition: int, src: str | os.PathLike,
                  base_offset: int | None = None) -> Path:
    """Copy a segment file into ``<root>/<topic>-<partition>/<20 digits>.log`` and return its path.

    ``base_offset`` defaults to the 20-digit number at the end of ``src``'s name (e.g.
    ``scenario_orders-0_00000000000000000000.log``), else 0.
    """
    src = Path(src)
    if base_offset is None:
        m = re.search(r"(\d{20})\.log$", src.name)
        base_offset = int(m.group(1)) if m else 0
    pdir = Path(root) / f"{topic}-{partition}"
    pdir.mkdir(parents=True, exist_ok=True)
    dst = pdir / segment_file_name(base_offset)
    shutil.copyfile(src, dst)
    return dst


# --------------------------------------------------------------------------------------------
# Record batch helpers
# --------------------------------------------------------------------------------------------
def _zigzag_varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def build_control_batch(base_offset: int, producer_id: int, producer_epoch: int, *, commit: bool,
                        coordinator_epoch: int, timestamp_ms: int, partition_leader_epoch: int = 0) -> bytes:
    """A COMMIT/ABORT transaction marker batch exactly as the partition leader writes it (spec §3.1-§3.2)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = (b"\x00" + _zigzag_varint(0) + _zigzag_varint(0) + _zigzag_varint(len(key)) + key
            + _zigzag_varint(len(value)) + value + _zigzag_varint(0))
    record = _zigzag_varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", _ATTR_TRANSACTIONAL | _ATTR_CONTROL, 0, timestamp_ms, timestamp_ms,
                            producer_id, producer_epoch, -1, 1) + record
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc) + after_crc


@dataclass(frozen=True)
class BatchInfo:
    """Header facts of one entry of a segment (magic v2 batch, or a legacy v0/v1 message)."""

    base_offset: int
    last_offset: int
    position: int  # byte position in the segment file
    size: int  # bytes on disk (12 + batchLength)
    magic: int
    attributes: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_timestamp: int = -1
    max_timestamp: int = -1
    count: int = 0
    control_type: int | None = None  # 0 ABORT, 1 COMMIT, ... for control batches with a record

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _ATTR_CONTROL)


def scan_batches(data: bytes, base_position: int = 0) -> tuple[list[BatchInfo], int]:
    """Batch headers of a segment (spec §1 framing rules). Returns (batches, valid_end_position)."""
    batches: list[BatchInfo] = []
    pos = 0
    end = len(data)
    while end - pos > 17:
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if length < 14 or pos + _LOG_OVERHEAD + length > end:
            break
        magic = data[pos + 16]
        size = _LOG_OVERHEAD + length
        if magic >= 2 and size >= _V2_HEADER_SIZE:
            (_, _, _, _, _, attrs, last_delta, base_ts, max_ts, pid, epoch, _seq,
             count) = _V2_HEADER.unpack_from(data, pos)
            control_type = None
            if attrs & _ATTR_CONTROL and count > 0 and not attrs & _ATTR_COMPRESSION:
                with contextlib.suppress(IndexError, ValueError, struct.error):
                    p = pos + _V2_HEADER_SIZE
                    _, p = _read_varint(data, p)  # record length
                    p += 1  # attributes
                    _, p = _read_varint(data, p)  # timestamp delta
                    _, p = _read_varint(data, p)  # offset delta
                    key_len, p = _read_varint(data, p)
                    if key_len >= 4:
                        control_type = struct.unpack_from(">h", data, p + 2)[0]
            batches.append(BatchInfo(base_offset, base_offset + last_delta, base_position + pos, size, magic,
                                     attrs & 0xFFFF, pid, epoch, base_ts, max_ts, count, control_type))
        else:
            # legacy message (or a wrapper): the offset field is the (last) offset
            batches.append(BatchInfo(base_offset, base_offset, base_position + pos, size, magic))
        pos += size
    return batches, base_position + pos


@dataclass
class _Segment:
    base_offset: int
    path: Path
    stat_key: tuple[int, int] = (-1, -1)
    data: bytes = b""
    batches: list[BatchInfo] = field(default_factory=list)
    valid_end: int = 0
    spath: str = ""  # str(path): os.stat on a str is much cheaper than Path.stat

    def load(self, entry: os.DirEntry | None = None) -> None:
        if not self.spath:
            self.spath = str(self.path)
        st = entry.stat() if entry is not None else os.stat(self.spath)
        key = (st.st_size, st.st_mtime_ns)
        if key == self.stat_key:
            return
        self.data = self.path.read_bytes()
        self.batches, self.valid_end = scan_batches(self.data)
        self.stat_key = key


# ProducerStateManager.PRODUCER_SNAPSHOT_ENTRY_SCHEMA: producer_id int64, epoch int16,
# last_sequence int32, last_offset int64, offset_delta int32, timestamp int64, coordinator_epoch
# int32, current_txn_first_offset int64 (46 bytes, big-endian like every Kafka Schema type)
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_SNAPSHOT_FIELDS = ("producer_id", "producer_epoch", "last_sequence", "last_offset", "offset_delta", "timestamp",
                    "coordinator_epoch", "current_txn_first_offset")


def read_producer_snapshot(data: bytes) -> list[dict[str, int]] | None:
    """The entries of a producer-state ``.snapshot`` file, or None where Kafka 3.8's
    ``ProducerStateManager.readSnapshot`` throws ``CorruptSnapshotException``: ``PID_SNAPSHOT_MAP_SCHEMA``
    is version int16, crc uint32, then an int32-counted array of entries; a version other than
    ``PRODUCER_SNAPSHOT_VERSION`` (1), a CRC-32C over bytes [``PRODUCER_ENTRIES_OFFSET`` = 6, EOF)
    that does not match, or a schema read that fails (short file, negative count) is corrupt.
    Bytes after the last entry are ignored by ``Schema.read`` but covered by the CRC."""
    if len(data) < 10:
        return None
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    if version != 1 or crc != crc32c.crc32c(data[6:]) or count < 0 or len(data) < 10 + count * _SNAPSHOT_ENTRY.size:
        return None
    return [dict(zip(_SNAPSHOT_FIELDS, _SNAPSHOT_ENTRY.unpack_from(data, 10 + i * _SNAPSHOT_ENTRY.size), strict=True))
            for i in range(count)]


@dataclass(frozen=True)
class ProducerSnapshot:
    """A producer-state snapshot the partition's producer state is rebuilt from: taken at
    ``offset`` (its file name), holding the state after every batch below it."""

    offset: int
    entries: tuple[dict[str, int], ...]

    def open_transactions(self) -> dict[int, int]:
        # ProducerStateManager.loadProducerEntry: an entry with currentTxnFirstOffset present
        # puts TxnMetadata(producerId, offset) into ongoingTxns, which firstUnstableOffset reads
        return {e["producer_id"]: e["current_txn_first_offset"] for e in self.entries
                if e["current_txn_first_offset"] >= 0}


@dataclass
class PartitionState:
    """What the fake broker would report for a partition right now."""

    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    open_transactions: dict[int, int]  # producer id -> first offset of its open transaction
    aborted_transactions: list[tuple[int, int, int]]  # (producer id, first offset, marker offset)
    leader: int
    leader_epoch: int
    segments: list[int]  # base offsets
    log_end_offset: int = -1  # = high_watermark unless the leader's high watermark lags (lag_high_watermark)


class _PartitionLog:
    def __init__(self, topic: str, partition: int, path: Path):
        self.topic = topic
        self.partition = partition
        self.path = path
        self.dir = str(path)
        # keyed by the segment's path as a string: pathlib objects cost more than the stat itself
        # when a benchmark asks about 10,000 partitions per request (bench/live_scale.py)
        self.segments: dict[str, _Segment] = {}
        self.log_start_override: int | None = None
        self._derived: tuple[tuple, tuple] | None = None  # (segment stat keys, derived facts)
        # (directory stat key, segments sorted by base offset) of the last directory listing, kept
        # only while the directory is unchanged (see load)
        self._listing: tuple[tuple[int, int, int], list[_Segment]] | None = None
        # (request serial, os.stat_result) of the directory, taken by FakeKafkaBroker._plog for
        # the request being answered, so that load() need not stat the directory again
        self.dir_stat: tuple[int, os.stat_result] | None = None
        # producer-state snapshot files of the last listing: offset -> path
        self.snapshot_files: dict[int, str] = {}
        # path -> (stat key, entries or None when corrupt) of snapshot files read
        self._snapshot_cache: dict[str, tuple[tuple[int, int], list[dict[str, int]] | None]] = {}
        # the snapshot the last facts() rebuilt producer state from (None: replayed from the log start)
        self.loaded_snapshot: ProducerSnapshot | None = None

    def forget(self) -> None:
        """Drop cached segment contents and the cached directory listing."""
        self.segments.clear()
        self._listing = None
        self._derived = None
        self.snapshot_files = {}
        self._snapshot_cache.clear()

    def load(self, serial: int | None = None) -> list[_Segment]:
        """The partition's segments, re-stat'ed now (re-read when size or mtime changed).

        The directory is listed again only when its stat (mtime, inode, size) changed since the
        last listing: creating, deleting or renaming a segment file changes the directory's mtime.
        File timestamps come from a coarse clock (one tick can be several ms), so a listing is
        only reused when the directory's mtime is well before the moment it was listed (a change
        in the same tick as the listing would not move the mtime): the "racy git" rule. Every
        segment file is still stat'ed on every call.
        """
        ds = self.dir_stat
        self.dir_stat = None
        st = ds[1] if ds is not None and serial is not None and ds[0] == serial else None
        if st is None:
            try:
                st = os.stat(self.dir)
            except FileNotFoundError:
                st = None
        if st is not None and self._listing is not None and self._listing[0] == (st.st_mtime_ns, st.st_ino,
                                                                                  st.st_size):
            segs = self._listing[1]
            try:
                for seg in segs:
                    seg.load()
                return list(segs)
            except FileNotFoundError:
                pass  # a segment vanished without the directory mtime moving: list again
        return self._list()

    def _list(self) -> list[_Segment]:
        found: dict[str, _Segment] = {}
        listed_ns = time.time_ns()
        try:
            st = os.stat(self.dir)
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            st, entries = None, []
        snapshots: dict[int, str] = {}
        for entry in entries:
            if not entry.name.endswith(".log"):
                m = _SNAPSHOT_RE.match(entry.name) if entry.name.endswith(".snapshot") else None
                if m:
                    snapshots[int(m.group(1))] = entry.path
                continue
            seg = self.segments.get(entry.path)
            if seg is None:
                m = _SEGMENT_RE.match(entry.name)
                if not m or not entry.is_file():
                    continue
                seg = _Segment(int(m.group(1)), Path(entry.path), spath=entry.path)
            try:
                seg.load(entry)
            except FileNotFoundError:
                continue
            found[entry.path] = seg
        self.segments = found
        self.snapshot_files = snapshots
        segs = sorted(found.values(), key=lambda s: s.base_offset)
        if st is not None and st.st_mtime_ns < listed_ns - _LISTING_RACY_NS:
            self._listing = ((st.st_mtime_ns, st.st_ino, st.st_size), segs)
        else:
            self._listing = None
        return list(segs)

    def _snapshot(self, log_start: int, log_end: int) -> tuple[ProducerSnapshot | None, list]:
        """The snapshot a broker (re)loading this log rebuilds producer state from, and the
        stat keys of the snapshot files considered (for the cache stamp).

        Kafka 3.8 ``UnifiedLog.rebuildProducerState`` -> ``ProducerStateManager.truncateAndReload``:
        snapshots above the log end offset or at/below the log start offset are removed, then
        ``loadFromSnapshot`` loads the latest remaining one (``latestSnapshotFile``); a corrupt one
        (``CorruptSnapshotException`` from ``readSnapshot``) is deleted and the next latest tried.
        The fake leaves the files alone and only skips them. Not modelled: ``isProducerExpired``
        (the fake expires no producer, loaded or replayed)."""
        considered = []
        for offset in sorted(self.snapshot_files, reverse=True):
            if offset > log_end or offset <= log_start:
                continue
            path = self.snapshot_files[offset]
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            key = (st.st_size, st.st_mtime_ns)
            considered.append((offset, key))
            cached = self._snapshot_cache.get(path)
            if cached is None or cached[0] != key:
                try:
                    data = Path(path).read_bytes()
                except FileNotFoundError:
                    continue
                cached = (key, read_producer_snapshot(data))
                self._snapshot_cache[path] = cached
            if cached[1] is not None:
                return ProducerSnapshot(offset, tuple(cached[1])), considered
        return None, considered

    def facts(self, serial: int | None = None) -> tuple[int, int, dict[int, int], list[tuple[int, int, int]],
                                                        list[_Segment]]:
        """(log start, log end, open transactions, aborted transactions, segments), derived
        from the segments (and producer snapshot, see :meth:`_snapshot`) as they are now; the dict
        and list are shared: do not modify them. Sets :attr:`loaded_snapshot`."""
        segs = self.load(serial)
        log_start = segs[0].base_offset if segs else 0
        if self.log_start_override is not None:
            log_start = max(log_start, self.log_start_override)
        log_end = log_start
        for seg in segs:
            log_end = max(log_end, seg.base_offset)
            if seg.batches:
                log_end = max(log_end, seg.batches[-1].last_offset + 1)
        snap, considered = self._snapshot(log_start, log_end) if self.snapshot_files else (None, [])
        self.loaded_snapshot = snap
        stamp = (log_start, [(seg.base_offset, seg.stat_key) for seg in segs], considered)
        if self._derived is not None and self._derived[0] == stamp:
            # nothing changed on disk since the last answer: same derived facts
            log_end, open_txns, aborted = self._derived[1]
            return log_start, log_end, open_txns, aborted, segs
        # Producer state (the open transactions, ProducerStateManager.ongoingTxns): loaded from the
        # snapshot, then the batches from its offset on replayed (rebuildProducerState reads each
        # segment from max(segment base, mapEndOffset, logStartOffset): a batch whose last offset
        # reaches the snapshot offset is replayed whole). Without a snapshot the whole served log
        # is replayed. Batches below the snapshot are still read, for the aborted list only (what
        # their segments' transaction indexes hold); at the first batch reaching the snapshot
        # offset the open transactions become the snapshot's.
        open_txns: dict[int, int] = {}
        aborted: list[tuple[int, int, int]] = []
        for seg in segs:
            for b in seg.batches:
                if snap is not None and b.last_offset >= snap.offset:
                    open_txns, snap = snap.open_transactions(), None
                if not b.is_transactional:
                    continue
                if b.is_control:
                    if b.count == 0 or b.control_type not in (0, 1):
                        continue  # empty control batch: "nothing to do" (spec §3.3/§3.4)
                    first = open_txns.pop(b.producer_id, None)
                    if first is not None and b.control_type == 0:
                        aborted.append((b.producer_id, first, b.base_offset))
                elif b.producer_id not in open_txns:
                    open_txns[b.producer_id] = b.base_offset
        if snap is not None:  # a snapshot at the log end: no batch after it
            open_txns = snap.open_transactions()
        self._derived = (stamp, (log_end, open_txns, aborted))
        return log_start, log_end, open_txns, aborted, segs

    def state(self, leader: int, leader_epoch: int, serial: int | None = None) -> tuple[PartitionState,
                                                                                        list[_Segment]]:
        log_start, log_end, open_txns, aborted, segs = self.facts(serial)
        hw = log_end
        lso = min(hw, *open_txns.values()) if open_txns else hw
        # UnifiedLog.maybeIncrementFirstUnstableOffset: max(first unstable offset, logStartOffset).
        # ProducerStateManager keeps a transaction open when retention deletes its first batches
        # (onLogStartOffsetIncremented drops only unreplicated ones), so the LSO is pinned at the
        # log start until its marker arrives.
        lso = max(lso, log_start)
        st = PartitionState(self.topic, self.partition, log_start, hw, lso, dict(open_txns), list(aborted),
                            leader, leader_epoch, [s.base_offset for s in segs], log_end)
        return st, segs

    def active_segment(self, log_end: int) -> Path:
        segs = self.load()
        if segs:
            return segs[-1].path
        self.path.mkdir(parents=True, exist_ok=True)
        p = self.path / segment_file_name(log_end)
        p.touch()
        return p


@dataclass
class RequestRecord:
    node_id: int
    api: str
    api_key: int
    version: int
    client_id: str | None
    request: object


@dataclass
class _TxnState:
    producer_id: int
    producer_epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)
    # what DescribeTransactions/ListTransactions report (TransactionMetadata.state, txnTimeoutMs,
    # txnStartTimestamp); markers are written synchronously, so Prepare* is never observed here
    state: str = "Empty"
    timeout_ms: int = 60000
    start_ms: int = -1


@dataclass
class _ConnFault:
    kind: str  # "drop" | "stall"
    remaining: int
    api: str | None
    node_id: int | None = None  # only requests to this node (None: any)


class _Node:
    def __init__(self, broker: FakeKafkaBroker, node_id: int, host: str, port: int):
        self.broker = broker
        self.node_id = node_id
        self.host = host
        self.port = port
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        self._conns: set[socket.socket] = set()
        self._conn_threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        if self._running:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(64)
        sock.settimeout(0.05)
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._running = True
        self._thread = threading.Thread(target=self._accept_loop, name=f"fake-kafka-{self.node_id}-accept",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        with self._lock:
            conns = list(self._conns)
            threads = list(self._conn_threads)
        for c in conns:
            _hard_close(c)
        for t in threads:
            t.join(timeout=2)

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while self._running:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(0.05)
            t = threading.Thread(target=self._serve, args=(conn,), name=f"fake-kafka-{self.node_id}-conn",
                                 daemon=True)
            with self._lock:
                self._conns.add(conn)
                self._conn_threads.add(t)
            t.start()

    def _recv_exact(self, conn: socket.socket, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            if not self._running:
                return None
            try:
                chunk = conn.recv(n - len(buf))
            except TimeoutError:
                continue
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _secure(self, conn: socket.socket) -> socket.socket | None:
        """TLS handshake (if the listener has a context); the wrapped socket replaces the raw one."""
        ctx = self.broker.ssl_context
        if ctx is None:
            return conn
        raw = conn
        try:
            raw.settimeout(5)
            conn = ctx.wrap_socket(raw, server_side=True)
        except (OSError, ValueError) as exc:
            log.info("fake broker node %s: TLS handshake failed: %s", self.node_id, exc)
            _hard_close(raw)
            return None
        conn.settimeout(0.05)
        with self._lock:
            self._conns.discard(raw)
            self._conns.add(conn)
        return conn

    def _serve(self, conn: socket.socket) -> None:
        stalled = False
        graceful = False
        raw = conn
        try:
            conn = self._secure(conn)
            if conn is None:
                return
            auth = self.broker._authenticator(self)
            self.broker._conn.principal = tls_principal(conn) if self.broker.ssl_context else "User:ANONYMOUS"
            while self._running:
                head = self._recv_exact(conn, 4)
                if head is None:
                    break
                (size,) = struct.unpack(">i", head)
                if size < 8 or size > 256 * 1024 * 1024:
                    break
                payload = self._recv_exact(conn, size)
                if payload is None:
                    break
                if stalled:
                    continue  # Kafka answers in order: nothing after a stalled request is answered
                if auth is not None and not auth.complete:
                    reply, close = auth.handle(payload)
                    if reply is not None:
                        self._send(conn, reply)
                    if close:
                        # The failure response goes out, the close follows after
                        # connection.failed.authentication.delay.ms (default 100; Selector.
                        # maybeDelayCloseOnAuthenticationFailure), as a FIN, not a reset:
                        # clients read the error before they see the close.
                        graceful = reply is not None
                        if graceful:
                            time.sleep(0.1)
                        break
                    if auth.complete:
                        self.broker._conn.principal = auth.principal
                    continue
                reply = self.broker._handle_frame(self, payload)
                if reply is _CLOSE:
                    break
                if reply is _STALL:
                    stalled = True
                    continue
                if reply is None:
                    continue
                throttle = getattr(self.broker._conn, "throttle", None)
                if throttle is not None and throttle[1] < _CLIENT_THROTTLES.get(throttle[0], 1 << 15):
                    self._sleep(throttle[2])  # a pre-KIP-219 version: the broker delays the answer
                    throttle = None
                self._send(conn, reply)
                if throttle is not None:
                    self._mute(conn, throttle[2])
        except OSError:
            pass
        except Exception:  # a broker bug must not kill the test process silently
            log.exception("fake broker node %s: error while serving a connection", self.node_id)
        finally:
            if stalled:
                with self.broker._lock:
                    self.broker._stalled_conns[self.node_id] -= 1
            if graceful:
                with contextlib.suppress(OSError):
                    conn.close()
            else:
                _hard_close(conn or raw)
            with self._lock:
                self._conns.discard(conn)
                self._conns.discard(raw)
                self._conn_threads.discard(threading.current_thread())

    def _sleep(self, ms: int) -> None:
        end = time.monotonic() + ms / 1000
        while self._running and time.monotonic() < end:
            time.sleep(min(0.01, max(end - time.monotonic(), 0)))

    def _mute(self, conn: socket.socket, ms: int) -> None:
        """KIP-219: read nothing from this connection for ``ms`` (see FakeKafkaBroker.throttle);
        a request the client sent meanwhile is counted in ``sent_while_muted``."""
        broker = self.broker
        with broker._lock:
            broker._muted_until[self.node_id] = max(broker._muted_until.get(self.node_id, 0.0),
                                                    time.monotonic() + ms / 1000)
        before = _unread_bytes(conn)
        end = time.monotonic() + ms / 1000
        seen = False
        while self._running and time.monotonic() < end:
            # bytes seen before the mute's end were sent inside it: the client's own throttle
            # window starts when it receives the answer, after this one, so it ends later
            if not seen and _unread_bytes(conn) > before:
                seen = True
                with broker._lock:
                    broker.sent_while_muted[self.node_id] += 1
            time.sleep(min(0.005, max(end - time.monotonic(), 0)))

    @staticmethod
    def _send(conn: socket.socket, reply: bytes) -> None:
        conn.settimeout(5)
        try:
            conn.sendall(reply)
        finally:
            conn.settimeout(0.05)


_CLOSE = object()
_STALL = object()
# First version of each API whose throttle_time_ms the client honours (shouldClientThrottle of
# FetchResponse, ListOffsetsResponse, MetadataResponse: KIP-219)
_CLIENT_THROTTLES = {"fetch": 8, "list_offsets": 3, "metadata": 6}


def _unread_bytes(conn: socket.socket) -> int:
    """Bytes received on the connection and not read yet (FIONREAD; 0 if unknown)."""
    try:
        return struct.unpack("i", fcntl.ioctl(conn.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except (OSError, ValueError):
        return 0


def _hard_close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        # RST instead of FIN so that clients notice immediately
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        conn.close()


class _ListOffsetsAnswer:
    """A ListOffsets response encoded by hand: kafka-python's generic encoder builds one object per
    partition, which costs more than the lookup itself when a benchmark asks about 10,000
    partitions per trigger (bench/live_scale.py). Layout from apache/kafka
    ``clients/src/main/resources/common/message/ListOffsetsResponse.json`` (v1-v10; kafka-python
    3.0.12's copy adds v11, KIP-1023, with the same fields): ThrottleTimeMs int32 (v2+), Topics
    [Name string, Partitions [PartitionIndex int32, ErrorCode int16, Timestamp int64, Offset
    int64, LeaderEpoch int32 (v4+)]]; v6+ are flexible versions (compact arrays and strings,
    empty tagged-field sections, response header v1). v0 (OldStyleOffsets) goes through
    kafka-python's ``ListOffsetsResponse`` as before. tests/test_kafka_list_offsets_codec.py checks the
    bytes against kafka-python's encoder for every version.
    """

    _PARTITION = {4: struct.Struct(">ihqqi"), 6: struct.Struct(">ihqqib"), 1: struct.Struct(">ihqq")}

    def __init__(self, version: int, topics: list[tuple[str, list[tuple[int, int, int, int, int]]]]):
        self.version = version
        self.topics = topics
        self.correlation_id = 0
        self.throttle_time_ms = 0

    def with_header(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id

    def _kafka_python(self):
        R = ListOffsetsResponse.ListOffsetsTopicResponse
        resp = ListOffsetsResponse(version=self.version, throttle_time_ms=self.throttle_time_ms, topics=[
            R(name=name, partitions=[R.ListOffsetsPartitionResponse(
                partition_index=i, error_code=code, old_style_offsets=[], timestamp=ts, offset=off,
                leader_epoch=epoch) for i, code, ts, off, epoch in parts]) for name, parts in self.topics])
        resp.with_header(correlation_id=self.correlation_id)
        return resp

    def encode(self, header: bool = True, framed: bool = True) -> bytes:
        v = self.version
        if v < 1:
            return self._kafka_python().encode(header=header, framed=framed)
        flexible = v >= 6
        out: list[bytes] = []
        if header:
            out.append(struct.pack(">i", self.correlation_id) + (b"\x00" if flexible else b""))
        if v >= 2:
            out.append(struct.pack(">i", self.throttle_time_ms))
        pack = self._PARTITION[6 if flexible else 4 if v >= 4 else 1].pack
        out.append(_array_len(len(self.topics), flexible))
        for name, parts in self.topics:
            raw = name.encode()
            out.append((_uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))) + raw)
            out.append(_array_len(len(parts), flexible))
            if flexible:
                out.extend([pack(i, code, ts, off, epoch, 0) for i, code, ts, off, epoch in parts])
                out.append(b"\x00")  # topic tagged fields
            elif v >= 4:
                out.extend([pack(i, code, ts, off, epoch) for i, code, ts, off, epoch in parts])
            else:
                out.extend([pack(i, code, ts, off) for i, code, ts, off, _ in parts])
        if flexible:
            out.append(b"\x00")  # top-level tagged fields
        body = b"".join(out)
        return struct.pack(">i", len(body)) + body if framed else body


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _array_len(n: int, compact: bool) -> bytes:
    return _uvarint(n + 1) if compact else struct.pack(">i", n)


class FakeKafkaBroker(txn_markers.TxnMarkersMixin):
    """A fake Kafka cluster (``num_nodes`` brokers in one process) serving a log directory.

    Args:
        root: log directory (``<topic>-<partition>/<20 digits>.log``); created if missing.
        num_nodes: number of brokers (each gets its own listener/port); node ids ``1..num_nodes``.
        host: listen address (loopback only by default).
        ports: fixed ports per node (default: ephemeral, chosen by the OS on first start and
            reused by later :meth:`start` calls).
        auto_create_topics: create unknown topics on Metadata requests that allow it (Kafka's
            ``auto.create.topics.enable``, default true in Kafka).
        default_partitions: partition count for auto-created topics.
        api_versions: override advertised ``{api_key: (min, max)}`` ranges.
        partial_batches: mirror Kafka's byte-exact ``partition_max_bytes`` slicing (the last
            batch of a fetch response may be cut); ``False`` trims responses to whole batches.
        broker_version: emulate a real release, e.g. ``(2, 3)``: its recorded ApiVersions table
            (tests/broker_api_versions.py, unless ``api_versions`` is given) and its
            version-dependent behaviour (ApiVersions error list, IDEMPOTENT_WRITE rules).
            ``None``: a current broker with :data:`DEFAULT_API_VERSIONS`.
        null_records: answer empty reads with ``records = null`` instead of empty bytes.
        idempotent_write_acl: whether the client holds IDEMPOTENT_WRITE on the cluster (InitProducerId
            without a transactional id needs it; from 2.8 on, WRITE on any topic is enough).
        topic_write_acl: whether the client holds WRITE on topics (see ``idempotent_write_acl``).
        coordinator_epoch: coordinator epoch written into transaction markers (EndTxn).
        first_producer_id: first producer id handed out by InitProducerId.
        cluster_id: Metadata cluster id.
        ssl_context: server-side TLS context (``kafka_fake_security.server_ssl_context``): every
            listener speaks TLS (Kafka's SSL / SASL_SSL listeners).
        sasl: mechanisms and credentials (``kafka_fake_security.SaslConfig``): every connection
            must authenticate first (SASL_PLAINTEXT, or SASL_SSL with ``ssl_context``).
    """

    def __init__(self, root: str | os.PathLike, *, num_nodes: int = 1, host: str = "127.0.0.1",
                 ports: list[int] | None = None, auto_create_topics: bool = True, default_partitions: int = 1,
                 api_versions: dict[int, tuple[int, int]] | None = None, partial_batches: bool = True,
                 coordinator_epoch: int = 0, first_producer_id: int = 1000,
                 cluster_id: str = "txnwatch-fake-cluster", broker_version: tuple[int, int] | None = None,
                 null_records: bool = False, idempotent_write_acl: bool = True, topic_write_acl: bool = True,
                 ssl_context: Any = None, sasl: SaslConfig | None = None):
        if num_nodes < 1:
            raise ValueError("num_nodes must be >= 1")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        ports = list(ports) if ports is not None else [0] * num_nodes
        if len(ports) != num_nodes:
            raise ValueError("ports must have num_nodes entries")
        self._nodes = [_Node(self, i + 1, host, ports[i]) for i in range(num_nodes)]
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self.broker_version = broker_version
        if api_versions is None and broker_version is not None:
            from tests.broker_api_versions import BROKER_API_VERSIONS

            api_versions = BROKER_API_VERSIONS[broker_version]
        self.api_versions = dict(DEFAULT_API_VERSIONS if api_versions is None else api_versions)
        self.null_records = null_records
        self.idempotent_write_acl = idempotent_write_acl
        self.topic_write_acl = topic_write_acl
        self.partial_batches = partial_batches
        self.coordinator_epoch = coordinator_epoch
        self.cluster_id = cluster_id
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._deny_rules: list[DenyRule] = []
        self._conn = threading.local()  # per connection thread: .principal
        self._lock = threading.RLock()
        self._partitions: dict[tuple[str, int], _PartitionLog] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._leader_epochs: dict[tuple[str, int], int] = collections.defaultdict(int)
        self._topic_generation: dict[str, int] = collections.defaultdict(int)
        self._partition_faults: dict[tuple[str, int], collections.deque] = collections.defaultdict(
            collections.deque)
        self._conn_faults: list[_ConnFault] = []
        self._next_producer_id = first_producer_id
        self._txns: dict[str, _TxnState] = {}
        self._load_txn_log = True  # the coordinator holds what __transaction_state says (forget_transactions)
        self._loading_txn_ids: set[str] = set()  # ids whose __transaction_state partition is loading
        self._groups: dict[str, dict[str, Any]] = {}  # group id -> protocol_type, state, offsets
        self._delete_counter = 0
        self._hw_lag: dict[tuple[str, int], list[int]] = {}  # (t, p) -> [high watermark, answers left (-1: all)]
        self._remote_empty: dict[tuple[str, int], int] = {}  # (t, p) -> empty Fetch answers left (-1: all)
        self._fetch_throttles: collections.deque[int] = collections.deque()  # throttle_time_ms per Fetch
        self._throttles: list[list[Any]] = []  # [api, node id or None, throttle_time_ms, answers left] (throttle)
        # KIP-219 channel muting, per node: requests that arrived while their connection was muted
        # (a client that honours throttle_time_ms sends none), and requests answered on one node
        # while another node had a muted or stalled connection (a throttle or a stall stays on
        # its own connection: the client keeps using the other brokers meanwhile)
        self.sent_while_muted: collections.Counter[int] = collections.Counter()
        self.answered_while_other_blocked: collections.Counter[int] = collections.Counter()
        self._stalled_conns: collections.Counter[int] = collections.Counter()  # node -> stalled connections open
        self._muted_until: dict[int, float] = {}  # node id -> monotonic end of its latest mute
        self._stale_topics: dict[str, int] = {}  # topic -> Metadata answers still missing it
        # (t, p) -> [leader, leader epoch, answering node or None, answers left (-1: all)]
        self._stale_leaders: dict[tuple[str, int], list[Any]] = {}
        self._metadata_errors: collections.deque[int] = collections.deque()  # top-level codes (v13+)
        self._preferred_replica: dict[tuple[str, int], int] = {}
        self._persistent_faults: dict[tuple[str, int], int] = {}  # (t, p) -> error code until healed
        self._offline_home: dict[tuple[str, int], int] = {}  # offline partition -> node it returns to
        self.requests: list[RequestRecord] = []
        # internal topics created as a side effect of a Metadata request (see _on_metadata)
        self.internal_topics_created: list[str] = []
        # transaction.state.log.num.partitions (Kafka's default 50) and the replication factor
        # createInternalTopic checks against the alive brokers (Kafka's default 3; the fake's
        # partitions have one replica, so 1 here)
        self.internal_topic_partitions = 50
        self.internal_topic_replication_factor = 1
        self._serial = 0  # requests answered so far (see _PartitionLog.dir_stat)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> FakeKafkaBroker:
        """Start (or restart after :meth:`stop`) all listeners on their ports."""
        for node in self._nodes:
            node.start()
        return self

    def stop(self) -> None:
        """Broker down: close listeners and reset every open connection."""
        for node in self._nodes:
            node.stop()

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> FakeKafkaBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return any(n.running for n in self._nodes)

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self._nodes]

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self._nodes]

    @property
    def port(self) -> int:
        return self._nodes[0].port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the first node (the others are discovered through Metadata)."""
        n = self._nodes[0]
        return f"{n.host}:{n.port}"

    def node_address(self, node_id: int) -> str:
        n = self._node(node_id)
        return f"{n.host}:{n.port}"

    def _node(self, node_id: int) -> _Node:
        for n in self._nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id}")

    # ---------------------------------------------------------------- log directory
    def refresh(self) -> None:
        """Forget cached segment contents (files are also re-stat'ed on every request)."""
        with self._lock:
            for plog in self._partitions.values():
                plog.forget()

    def _scan(self) -> dict[str, list[int]]:
        topics: dict[str, list[int]] = collections.defaultdict(list)
        seen = set()
        for entry in os.scandir(self.root):
            if not entry.is_dir():
                continue
            m = _PARTITION_DIR_RE.match(entry.name)
            if not m or entry.name.endswith(("-delete", "-future", "-stray")) or "." in m.group("partition"):
                continue
            topic, partition = m.group("topic"), int(m.group("partition"))
            key = (topic, partition)
            seen.add(key)
            if key not in self._partitions:
                self._partitions[key] = _PartitionLog(topic, partition, Path(entry.path))
            topics[topic].append(partition)
        for key in list(self._partitions):
            if key not in seen:
                del self._partitions[key]
        return {t: sorted(ps) for t, ps in topics.items()}

    def topics(self) -> dict[str, list[int]]:
        with self._lock:
            return self._scan()

    def leader(self, topic: str, partition: int) -> int:
        with self._lock:
            return self._leader(topic, partition)

    def _leader(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        if key not in self._leaders:
            self._leaders[key] = self._nodes[partition % len(self._nodes)].node_id
        return self._leaders[key]

    def _plog(self, topic: str, partition: int) -> _PartitionLog | None:
        key = (topic, partition)
        plog = self._partitions.get(key)
        if plog is not None:
            try:
                st = os.stat(plog.dir)
            except OSError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                plog.dir_stat = (self._serial, st)  # for this request's plog.load (one stat, not two)
                return plog
        self._scan()
        return self._partitions.get(key)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """Log start / high watermark / LSO / open transactions the fake reports for a partition."""
        with self._lock:
            plog = self._plog(topic, partition)
            if plog is None:
                raise KeyError(f"unknown partition {topic}-{partition}")
            st, _ = plog.state(self._leader(topic, partition), self._leader_epochs[(topic, partition)])
            return st

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        with self._lock:
            existing = self._scan().get(topic, [])
            for p in range(partitions):
                if p in existing:
                    continue
                pdir = self.root / f"{topic}-{p}"
                pdir.mkdir(parents=True, exist_ok=True)
                (pdir / segment_file_name(0)).touch()
            self._scan()

    def delete_topic(self, topic: str) -> None:
        """Delete a topic the way Kafka does: partition dirs renamed to ``<dir>.<id>-delete``."""
        with self._lock:
            for p in self._scan().get(topic, []):
                self._delete_counter += 1
                src = self.root / f"{topic}-{p}"
                src.rename(self.root / f"{topic}-{p}.{uuid.uuid4().hex}-delete")
                self._leaders.pop((topic, p), None)
                self._leader_epochs.pop((topic, p), None)
            self._topic_generation[topic] += 1
            self._scan()

    def advance_log_start(self, topic: str, partition: int, offset: int) -> None:
        """Retention/DeleteRecords moved the log start offset to ``offset`` (never moves back)."""
        with self._lock:
            plog = self._require(topic, partition)
            plog.log_start_override = max(offset, plog.log_start_override or 0)

    def roll_segment(self, topic: str, partition: int) -> Path:
        """Start a new (empty) segment file named after the current log end offset."""
        with self._lock:
            plog = self._require(topic, partition)
            st, _ = plog.state(0, 0)
            p = plog.path / segment_file_name(st.high_watermark)
            p.touch()
            return p

    def append_raw(self, topic: str, partition: int, data: bytes) -> None:
        """Append bytes verbatim to the partition's last segment (offsets are NOT reassigned)."""
        with self._lock:
            plog = self._require(topic, partition)
            st, _ = plog.state(0, 0)
            with open(plog.active_segment(st.high_watermark), "ab") as f:
                f.write(data)

    def append_batches(self, topic: str, partition: int, records: bytes) -> int:
        """Append v2 batches as Produce would (offsets and leader epoch assigned). Returns base offset."""
        with self._lock:
            err, base = self._append(topic, partition, records)
            if err:
                raise ValueError(f"append failed with Kafka error {err}")
            return base

    def truncate(self, topic: str, partition: int, offset: int) -> None:
        """Unclean leader election: an out-of-sync replica becomes leader and the log is cut to
        ``offset`` (its log end), so the high watermark goes back.

        Follows Kafka's ``Partition.makeLeader`` (leader epoch bumped) and ``UnifiedLog.truncateTo``
        (whole batches at or above the offset removed; the segments starting above it deleted).
        """
        with self._lock:
            plog = self._require(topic, partition)
            for seg in plog.load():
                if seg.base_offset >= offset and seg.base_offset > 0:
                    seg.path.unlink()
                    continue
                cut = next((b.position for b in seg.batches if b.last_offset >= offset), seg.valid_end)
                with open(seg.path, "r+b") as f:
                    f.truncate(cut)
            plog.forget()
            self._leader_epochs[(topic, partition)] += 1

    def lag_high_watermark(self, topic: str, partition: int, high_watermark: int, requests: int = -1) -> None:
        """The leader's high watermark trails its log end for the next ``requests`` Fetch or
        ListOffsets answers for the partition (-1: until :meth:`clear_faults`).

        Real case: a new leader during a rolling restart learns the high watermark from its
        followers' fetches, so for a moment it is below the old leader's. Kafka's
        ``UnifiedLog.read`` caps consumer reads at the high watermark (``FetchIsolation
        .HIGH_WATERMARK``) and ``LocalLog.read`` answers a start offset at or above that cap with no
        records and no error; only an offset past the log *end* is OFFSET_OUT_OF_RANGE.
        ListOffsets LATEST reports the lagging value too.
        """
        with self._lock:
            self._hw_lag[(topic, partition)] = [high_watermark, requests]

    def remote_fetch_timeout(self, topic: str, partition: int, requests: int = -1) -> None:
        """The next ``requests`` Fetch answers for the partition (-1: until :meth:`clear_faults`)
        hold no records, error NONE, with the true high watermark above the fetch offset.

        Real case: tiered storage (KIP-405). For an offset only in remote storage
        ``ReplicaManager.readFromLog`` gets a local read result with empty records and a
        ``delayedRemoteStorageFetch`` and parks the request in a ``DelayedRemoteFetch``; when
        ``remote.fetch.max.wait.ms`` expires first, ``DelayedRemoteFetch.onComplete`` answers that
        local read result (``result.toFetchPartitionData``): no records, no error, the partition's
        high watermark and log start. The data is there; only this answer is empty.
        """
        with self._lock:
            self._remote_empty[(topic, partition)] = requests

    def throttle_fetch(self, count: int = 1, throttle_time_ms: int = 100) -> None:
        """The next ``count`` Fetch requests are answered as by a broker over its quota.

        Kafka's ``KafkaApis.handleFetchRequest``: when the request or bandwidth quota is
        violated the response is ``fetchContext.getThrottledResponse(throttleTimeMs)``, which for
        a sessionless fetch (``SessionlessFetchContext``) is a response with error NONE, the
        throttle time and *no partitions at all*.
        """
        with self._lock:
            self._fetch_throttles.extend([throttle_time_ms] * count)

    def throttle(self, api: str, throttle_time_ms: int, count: int = 1, node_id: int | None = None) -> None:
        """The next ``count`` answers of ``api`` (``fetch``, ``list_offsets``, ``metadata``) from
        ``node_id`` (any node when None) are full answers carrying ``throttle_time_ms``, and the
        connection is then muted for that long (KIP-219, Kafka 2.0+).

        Kafka's ``KafkaApis.sendResponseMaybeThrottle`` -> ``ClientRequestQuotaManager.throttle``:
        the response goes out at once with its throttle time and the channel is muted
        (``KafkaChannel.ChannelMuteState.MUTED_AND_THROTTLED``, ``SocketServer.Processor``) until the
        throttle ends, so nothing more is read from that connection; other connections are not
        affected. Clients honour it for the versions whose ``shouldClientThrottle`` is true
        (Fetch v8+, ListOffsets v3+, Metadata v6+: ``FetchResponse``, ``ListOffsetsResponse``,
        ``MetadataResponse``); for older versions the broker delays the response by the throttle
        time instead (the client does not know to wait), which the fake does too.
        """
        with self._lock:
            self._throttles.append([api, node_id, throttle_time_ms, count])

    def _take_throttle(self, api: str, node_id: int) -> int:
        for t in self._throttles:
            if t[0] == api and t[1] in (None, node_id) and t[3] != 0:
                if t[3] > 0:
                    t[3] -= 1
                return int(t[2])
        return 0

    def stale_metadata(self, topic: str, count: int = 1) -> None:
        """The next ``count`` Metadata answers do not know ``topic`` (UNKNOWN_TOPIC_OR_PARTITION
        when it is asked for by name, absent from a list of all topics).

        Real case: the answering broker's metadata cache has not applied the update naming the
        topic yet; ``KafkaApis.handleTopicMetadataRequest`` answers from ``metadataCache`` and
        reports topics it does not hold as UNKNOWN_TOPIC_OR_PARTITION.
        """
        with self._lock:
            self._stale_topics[topic] = count

    def stale_leader(self, topic: str, partition: int, leader: int, leader_epoch: int, *,
                     node_id: int | None = None, count: int = -1) -> None:
        """Metadata answered by ``node_id`` (every node when None) reports an older leader and
        leader epoch for the partition, for the next ``count`` answers (-1: until
        :meth:`clear_faults`). Partition-scoped requests are still judged by the real leader.

        Real case: ``KafkaApis.handleTopicMetadataRequest`` answers from the broker's own
        ``metadataCache``, which every broker updates on its own (UpdateMetadata requests before
        KRaft, the metadata log after), so one broker may still report the previous leader and
        epoch after an election. Java clients guard with ``Metadata.updateLatestMetadata``.
        """
        with self._lock:
            self._stale_leaders[(topic, partition)] = [leader, leader_epoch, node_id, count]

    def metadata_error(self, error: int | str, count: int = 1) -> None:
        """The next ``count`` Metadata v13+ answers carry a top-level error code (and no topics).

        Metadata v13 added the top-level ``ErrorCode`` (MetadataResponse.json, KIP-1102: e.g.
        REBOOTSTRAP_REQUIRED, 129). Older versions have no such field and are answered normally.
        """
        code = resolve_error(error)
        with self._lock:
            self._metadata_errors.extend([code] * count)

    def set_preferred_read_replica(self, topic: str, partition: int, node_id: int | None) -> None:
        """The leader answers Fetch v11+ for the partition with no records and
        ``PreferredReadReplica = node_id``; that node then serves the partition's consumer fetches.

        Kafka's ``ReplicaManager.readFromLog`` skips the read when ``findPreferredReadReplica``
        names another replica. A real broker does that only when the client sent a rack id and
        ``replica.selector.class`` is set; the fake does it regardless, to test the client's
        handling. Followers serve v11+ consumer fetches (``FetchParams.fetchOnlyLeader`` is false
        when client metadata is present, set by ``KafkaApis.handleFetchRequest`` from v11).
        ``None`` clears it.
        """
        with self._lock:
            if node_id is None:
                self._preferred_replica.pop((topic, partition), None)
            else:
                self._node(node_id)
                self._preferred_replica[(topic, partition)] = node_id

    def _state(self, plog: _PartitionLog, topic: str, partition: int, *, answer: bool = False) -> tuple[
            PartitionState, list[_Segment]]:
        """Partition state as the leader reports it, with a lagging high watermark applied."""
        st, segs = plog.state(self._leader(topic, partition), self._leader_epochs[(topic, partition)], self._serial)
        lag = self._hw_lag.get((topic, partition))
        if lag is not None:
            hw = min(lag[0], st.high_watermark)
            st.high_watermark = hw
            st.last_stable_offset = min(st.last_stable_offset, hw)
            if answer and lag[1] > 0:
                lag[1] -= 1
                if lag[1] == 0:
                    del self._hw_lag[(topic, partition)]
        return st, segs

    def _require(self, topic: str, partition: int) -> _PartitionLog:
        plog = self._plog(topic, partition)
        if plog is None:
            raise KeyError(f"unknown partition {topic}-{partition}")
        return plog

    # ---------------------------------------------------------------- security
    def deny(self, operation: str, resource_type: str, name: str, principal: str = "*") -> None:
        """Add a DENY ACL: ``deny("Read", "Topic", "__transaction_state", "User:alice")``.

        Operations and resource types are spelled as ``kafka-acls.sh`` prints them. Everything
        not denied is allowed (an authorizer with ``allow.everyone.if.no.acl.found``).
        """
        with self._lock:
            self._deny_rules.append(DenyRule(principal, operation, resource_type, name))

    def clear_acls(self) -> None:
        with self._lock:
            self._deny_rules.clear()

    def _principal(self) -> str:
        return getattr(self._conn, "principal", "User:ANONYMOUS")

    def _authorized(self, operation: str, resource_type: str, name: str) -> bool:
        if not self._deny_rules:
            return True
        principal = self._principal()
        return not any(r.matches(principal, operation, resource_type, name) for r in self._deny_rules)

    def _authenticator(self, node: _Node) -> SaslAuthenticator | None:
        if self.sasl is None:
            return None
        # ApiVersions before authentication is answered like any other (handleApiVersionsRequest)
        return SaslAuthenticator(self.sasl, lambda payload: self._handle_frame(node, payload))

    def _on_sasl_handshake(self, node, request, version):
        return SaslHandshakeResponse(version=version, error_code=ILLEGAL_SASL_STATE,
                                     mechanisms=list(self.sasl.mechanisms) if self.sasl else [])

    def _on_sasl_authenticate(self, node, request, version):
        return SaslAuthenticateResponse(version=version, error_code=ILLEGAL_SASL_STATE,
                                        error_message="SaslAuthenticate request received after successful "
                                                      "authentication", auth_bytes=b"", session_lifetime_ms=0)

    # ---------------------------------------------------------------- fault injection
    def inject_partition_error(self, topic: str, partition: int, error: int | str, count: int = 1,
                               apis: tuple[str, ...] = _PARTITION_APIS) -> None:
        """The next ``count`` partition answers (in ``apis``) for the partition carry ``error``."""
        code = resolve_error(error)
        with self._lock:
            q = self._partition_faults[(topic, partition)]
            for _ in range(count):
                q.append((code, tuple(apis)))

    def leader_not_available(self, topic: str, partition: int, count: int = 1) -> None:
        self.inject_partition_error(topic, partition, LEADER_NOT_AVAILABLE, count)

    def not_leader(self, topic: str, partition: int, count: int = 1) -> None:
        self.inject_partition_error(topic, partition, NOT_LEADER_OR_FOLLOWER, count)

    def clear_faults(self) -> None:
        with self._lock:
            self._partition_faults.clear()
            self._conn_faults.clear()
            self._hw_lag.clear()
            self._remote_empty.clear()
            self._fetch_throttles.clear()
            self._throttles.clear()
            self._stale_topics.clear()
            self._stale_leaders.clear()
            self._metadata_errors.clear()
            self._preferred_replica.clear()
            self._persistent_faults.clear()

    def move_leader(self, topic: str, partition: int, node_id: int) -> None:
        """Move partition leadership (bumps the leader epoch); ``-1`` = no leader available."""
        with self._lock:
            if node_id != -1:
                self._node(node_id)
            self._leaders[(topic, partition)] = node_id
            self._leader_epochs[(topic, partition)] += 1

    def elect_leader(self, topic: str, partition: int, node_id: int, catching_up: int = 1) -> None:
        """Leadership moves to ``node_id`` (next leader epoch) and its next ``catching_up``
        ListOffsets answers for the partition are OFFSET_NOT_AVAILABLE.

        Kafka's ``Partition.fetchOffsetForTimestamp``: a client ListOffsets (isolation level set)
        fails with OFFSET_NOT_AVAILABLE while the new leader's high watermark is below the start
        offset of its leader epoch (``maybeOffsetsError``), i.e. until its followers' fetches
        have moved the high watermark up after the election.
        """
        self.move_leader(topic, partition, node_id)
        self.inject_partition_error(topic, partition, OFFSET_NOT_AVAILABLE, catching_up, apis=("list_offsets",))

    def offline(self, topic: str, partition: int) -> None:
        """The partition has no leader: every replica's broker is down or fenced (ISR empty).

        KRaftMetadataCache.getPartitionMetadata: when the partition's leader has no alive endpoint
        the answer is LEADER_NOT_AVAILABLE with leader id ``MetadataResponse.NO_LEADER_ID`` (-1)
        (modelled in :meth:`_on_metadata`). Requests sent to the broker that led it are answered
        NOT_LEADER_OR_FOLLOWER (ReplicaManager.getPartitionOrError: the metadata cache knows the
        partition, this broker does not host it as leader). Call before :meth:`start` for a
        partition offline from the start.
        """
        with self._lock:
            key = (topic, partition)
            current = self._leader(topic, partition)
            if current != -1:
                self._offline_home[key] = current
            self._leaders[key] = -1
            self._leader_epochs[key] += 1

    def online(self, topic: str, partition: int, node_id: int | None = None) -> None:
        """The partition gets a leader again (its old node unless ``node_id``), with the next
        leader epoch: every leader election bumps it (PartitionRegistration / Partition.makeLeader)."""
        with self._lock:
            key = (topic, partition)
            node = node_id if node_id is not None else self._offline_home.pop(
                key, self._nodes[partition % len(self._nodes)].node_id)
            self._node(node)
            self._leaders[key] = node
            self._leader_epochs[key] += 1

    def fail_partition(self, topic: str, partition: int, error: int | str) -> None:
        """Every Fetch/ListOffsets/Produce answer for the partition carries ``error`` until
        :meth:`heal_partition`.

        KAFKA_STORAGE_ERROR is what ReplicaManager.getPartitionOrError answers for a partition
        whose log directory failed (``HostedPartition.Offline``); any other code (for example
        REPLICA_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER) may be given to model a partition that
        stays unreadable on its leader while Metadata still names it.
        """
        code = resolve_error(error)
        with self._lock:
            self._persistent_faults[(topic, partition)] = code

    def heal_partition(self, topic: str, partition: int) -> None:
        with self._lock:
            self._persistent_faults.pop((topic, partition), None)

    def stop_node(self, node_id: int) -> None:
        """One broker stops answering: its listener closes and open connections are reset.

        While it is down, Metadata answered by the other brokers leaves it out of the broker list
        and reports the partitions it leads as LEADER_NOT_AVAILABLE with leader -1
        (KRaftMetadataCache.getPartitionMetadata: ``getAliveEndpoint`` finds no endpoint for a
        fenced/absent broker). With one replica per partition nothing else can lead them.
        """
        self._node(node_id).stop()

    def start_node(self, node_id: int) -> None:
        """The broker is back; the partitions it leads are led again with the next leader epoch
        (the controller re-elects the returning replica, bumping the epoch as every election does)."""
        node = self._node(node_id)
        with self._lock:
            for key, leader in list(self._leaders.items()):
                if leader == node_id:
                    self._leader_epochs[key] += 1
        node.start()

    def _live_leader(self, topic: str, partition: int) -> int:
        """The leader as Metadata reports it: -1 when the leader's broker is down."""
        leader = self._leader(topic, partition)
        if leader != -1 and not self._node(leader).running:
            return -1
        return leader

    def drop_connection(self, count: int = 1, api: str | None = None) -> None:
        """Close the socket instead of answering the next ``count`` requests (of ``api`` if given)."""
        with self._lock:
            self._conn_faults.append(_ConnFault("drop", count, api))

    def stall(self, count: int = 1, api: str | None = None, node_id: int | None = None) -> None:
        """Never answer the next ``count`` requests (of ``api`` if given, to ``node_id`` if given);
        the client must time out.

        Like a hung broker (a stalled log disk: the request handler thread blocks in the read,
        ``KafkaRequestHandler`` answers nothing on that connection), the connection then answers
        nothing more (responses are in order, ``SocketServer.Processor`` mutes the channel until
        the in-flight request's response is sent). Other brokers are not affected.
        """
        with self._lock:
            self._conn_faults.append(_ConnFault("stall", count, api, node_id))

    def requests_for(self, api: str) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.requests if r.api == api]

    def _take_partition_fault(self, topic: str, partition: int, api: str) -> int:
        q = self._partition_faults.get((topic, partition))
        if not q:
            return NONE
        for i, (code, apis) in enumerate(q):
            if api in apis:
                del q[i]
                return code
        return NONE

    def _take_conn_fault(self, api: str, node_id: int) -> str | None:
        for f in self._conn_faults:
            if f.remaining > 0 and (f.api is None or f.api == api) and f.node_id in (None, node_id):
                f.remaining -= 1
                kind = f.kind
                self._conn_faults = [x for x in self._conn_faults if x.remaining > 0]
                return kind
        return None

    # ---------------------------------------------------------------- request dispatch
    def _handle_frame(self, node: _Node, payload: bytes):
        api_key, api_version, correlation_id = struct.unpack_from(">hhi", payload, 0)
        api = _API_NAMES.get(api_key, f"api_{api_key}")
        with self._lock:
            fault = self._take_conn_fault(api, node.node_id)
        if fault == "drop":
            self._record(node, api, api_key, api_version, None, None)
            return _CLOSE
        cls = _REQUEST_CLASSES.get(api_key)
        rng = self.api_versions.get(api_key)
        if cls is None or rng is None or not rng[0] <= api_version <= rng[1]:
            self._record(node, api, api_key, api_version, None, None)
            if api_key == ApiVersionsRequest.API_KEY:
                # Kafka's RequestContext.parseRequest treats an unsupported ApiVersions version as
                # v0 and answers in v0 format. ApiVersionsRequest.getErrorResponse: before 2.4 the
                # list is empty (the client retries at v0); from 2.4 on (KIP-511) it holds the
                # ApiVersions range only.
                own = [k for k in self._api_version_list() if k.api_key == ApiVersionsRequest.API_KEY]
                kip511 = self.broker_version is None or self.broker_version >= (2, 4)
                resp = ApiVersionsResponse(version=0, error_code=UNSUPPORTED_VERSION,
                                           api_keys=own if kip511 else [])
                resp.with_header(correlation_id=correlation_id)
                return resp.encode(header=True, framed=True)
            log.warning("fake broker: unsupported api %s v%s, closing connection", api_key, api_version)
            return _CLOSE
        request = cls.decode(payload, version=api_version, header=True)
        client_id = request.header.client_id if request.header is not None else None
        self._record(node, api, api_key, api_version, client_id, request)
        if fault == "stall":
            with self._lock:
                self._stalled_conns[node.node_id] += 1
            return _STALL
        handler = getattr(self, f"_on_{api}")
        self._conn.throttle = None
        with self._lock:
            self._serial += 1
            now = time.monotonic()
            if any(n != node.node_id and until > now for n, until in self._muted_until.items()) or any(
                    n != node.node_id and c > 0 for n, c in self._stalled_conns.items()):
                self.answered_while_other_blocked[node.node_id] += 1
            response = handler(node, request, api_version)
            ms = self._take_throttle(api, node.node_id) if response is not None else 0
        if response is None:
            return None
        if ms:
            response.throttle_time_ms = ms
            self._conn.throttle = (api, api_version, ms)
        response.with_header(correlation_id=correlation_id)
        return response.encode(header=True, framed=True)

    def _record(self, node, api, api_key, version, client_id, request) -> None:
        with self._lock:
            self.requests.append(RequestRecord(node.node_id, api, api_key, version, client_id, request))

    def _api_version_list(self):
        return [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.api_versions.items())]

    # ---------------------------------------------------------------- handlers
    def finalize_feature(self, name: str, level: int) -> None:
        """A cluster-wide finalized feature level (KIP-584), e.g. ``transaction.version`` 2 on a
        4.0 cluster; reported in ApiVersions v3+ with a finalized-features epoch that moves on
        every change (the offset of the feature record in the metadata log, always >= 0 once set)."""
        with self._lock:
            features = dict(getattr(self, "_finalized_features", {}))
            features[name] = int(level)
            self._finalized_features = features
            self._features_epoch = getattr(self, "_features_epoch", -1) + 1

    def _on_api_versions(self, node, request, version):
        extra = {}
        if version >= 3:
            # ApiVersionsResponse.json v3+: FinalizedFeaturesEpoch (tag 1, -1 = unknown: the list is
            # not valid) and FinalizedFeatures (tag 2); a level-0 feature is not listed
            # (FinalizedFeatures drop level 0, KIP-1022), which readers take as level 0.
            F = ApiVersionsResponse.FinalizedFeatureKey
            features = getattr(self, "_finalized_features", {})
            extra = dict(finalized_features_epoch=getattr(self, "_features_epoch", -1),
                         finalized_features=[F(name=n, max_version_level=lv, min_version_level=lv)
                                             for n, lv in sorted(features.items()) if lv > 0])
        return ApiVersionsResponse(version=version, error_code=NONE, api_keys=self._api_version_list(),
                                   throttle_time_ms=0, **extra)

    def _topic_id(self, topic: str) -> uuid.UUID:
        return uuid.uuid5(_UUID_NS, f"{topic}/{self._topic_generation[topic]}")

    def _on_metadata(self, node, request, version):
        if version >= 13 and self._metadata_errors:
            # MetadataResponse.json v13+: top-level ErrorCode (KIP-1102), no topics with it
            return MetadataResponse(version=version, throttle_time_ms=0, brokers=[], cluster_id=self.cluster_id,
                                    controller_id=-1, topics=[], error_code=self._metadata_errors.popleft())
        topics = self._scan()
        stale = {t for t, n in self._stale_topics.items() if n > 0}
        for t in stale:
            self._stale_topics[t] -= 1
        if request.topics is None or (version == 0 and not request.topics):
            names = sorted(t for t in topics if t not in stale)
        else:
            names = [t.name for t in request.topics]
        allow_auto = request.allow_auto_topic_creation if version >= 4 else True
        out = []
        all_topics = request.topics is None or (version == 0 and not request.topics)
        for name in names:
            if not self._authorized("Describe", "Topic", name):
                if not all_topics:  # an all-topics answer leaves it out; never disclose existence
                    out.append(MetadataResponse.MetadataResponseTopic(
                        error_code=TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=uuid.UUID(int=0),
                        is_internal=False, partitions=[]))
                continue
            if name in stale:  # KafkaApis.handleTopicMetadataRequest: not in this broker's metadataCache
                out.append(MetadataResponse.MetadataResponseTopic(
                    error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=uuid.UUID(int=0),
                    is_internal=False, partitions=[]))
                continue
            if name not in topics and name in INTERNAL_TOPICS and self._creates_internal_topics_when_named():
                # Kafka <= 2.7, KafkaApis.getTopicMetadata: a named internal topic that does not
                # exist goes to createInternalTopic whatever allowAutoTopicCreation says; the
                # answer is createTopic's LEADER_NOT_AVAILABLE with no partitions.
                self.create_topic(name, self.internal_topic_partitions)
                self.internal_topics_created.append(name)
                out.append(MetadataResponse.MetadataResponseTopic(
                    error_code=LEADER_NOT_AVAILABLE, name=name, topic_id=uuid.UUID(int=0),
                    is_internal=True, partitions=[]))
                continue
            if name not in topics and allow_auto and self.auto_create_topics and name:
                # 2.8+ (KAFKA-9751, AutoTopicCreationManager): internal topics too, only when allowed
                self.create_topic(name, self.internal_topic_partitions if name in INTERNAL_TOPICS
                                  else self.default_partitions)
                if name in INTERNAL_TOPICS:
                    self.internal_topics_created.append(name)
                topics = self._scan()
            if name not in topics:
                out.append(MetadataResponse.MetadataResponseTopic(
                    error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=uuid.UUID(int=0),
                    is_internal=False, partitions=[]))
                continue
            parts = []
            for p in topics[name]:
                leader = self._live_leader(name, p)
                epoch = self._leader_epochs[(name, p)]
                old = self._stale_leaders.get((name, p))
                if old is not None and old[3] != 0 and old[2] in (None, node.node_id):
                    leader, epoch = old[0], old[1]  # this broker's metadata cache lags (stale_leader)
                    if old[3] > 0:
                        old[3] -= 1
                replicas = [leader] if leader != -1 else [self._nodes[p % len(self._nodes)].node_id]
                parts.append(MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=LEADER_NOT_AVAILABLE if leader == -1 else NONE, partition_index=p,
                    leader_id=leader, leader_epoch=epoch, replica_nodes=replicas,
                    isr_nodes=replicas if leader != -1 else [], offline_replicas=[]))
            out.append(MetadataResponse.MetadataResponseTopic(
                error_code=NONE, name=name, topic_id=self._topic_id(name), is_internal=name in INTERNAL_TOPICS,
                partitions=parts))
        # KRaftMetadataCache.getAliveBrokerNodes: a broker that is down (fenced) is not listed
        brokers = [MetadataResponse.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=None)
                   for n in self._nodes if n.running]
        return MetadataResponse(version=version, throttle_time_ms=0, brokers=brokers, cluster_id=self.cluster_id,
                                controller_id=self._nodes[0].node_id, topics=out,
                                error_code=NONE)

    def _creates_internal_topics_when_named(self) -> bool:
        """Kafka before 2.8 creates a missing internal topic named in a Metadata request
        (KafkaApis.getTopicMetadata -> createInternalTopic, 2.0-2.7) when enough brokers are alive
        for its replication factor (``transaction.state.log.replication.factor``; the fake's
        :attr:`internal_topic_replication_factor`); KAFKA-9751 (2.8) moved creation to the
        controller and made it depend on AllowAutoTopicCreation like any other topic."""
        if self.broker_version is None or self.broker_version >= (2, 8):
            return False
        alive = sum(1 for n in self._nodes if n.running)
        return alive >= self.internal_topic_replication_factor

    def _partition_check(self, node, topic: str, partition: int, api: str,
                         current_leader_epoch: int = -1, *, follower_ok: bool = False) -> tuple[
                             int, _PartitionLog | None]:
        """Common partition-scoped checks: ACL, existence, injected faults, leadership, leader epoch.

        ``follower_ok``: a consumer Fetch v11+ that a preferred read replica may serve.
        """
        if not self._authorized(_PARTITION_API_OPERATION[api], "Topic", topic):
            return TOPIC_AUTHORIZATION_FAILED, None
        plog = self._plog(topic, partition)
        if plog is None:
            return UNKNOWN_TOPIC_OR_PARTITION, None
        code = self._take_partition_fault(topic, partition, api) or self._persistent_faults.get((topic, partition), NONE)
        if code:
            return code, plog
        leader = self._leader(topic, partition)
        if leader != node.node_id and not (follower_ok and self._preferred_replica.get((topic, partition))
                                           == node.node_id):
            return NOT_LEADER_OR_FOLLOWER, plog
        epoch = self._leader_epochs[(topic, partition)]
        if current_leader_epoch >= 0 and current_leader_epoch < epoch:
            return FENCED_LEADER_EPOCH, plog
        if current_leader_epoch > epoch:
            return UNKNOWN_LEADER_EPOCH, plog
        return NONE, plog

    def _on_list_offsets(self, node, request, version):
        isolation = request.isolation_level if version >= 2 else 0
        epochs = self._leader_epochs
        lagging = self._hw_lag
        serial = self._serial
        topics_out = []
        for t in request.topics:
            name = t.name
            parts_out = []
            for p in t.partitions:
                index = p.partition_index
                cle = p.current_leader_epoch if version >= 4 else -1
                code, plog = self._partition_check(node, name, index, "list_offsets", cle)
                offset, ts = -1, -1
                if code == NONE:
                    spec = p.timestamp
                    if spec in (-1, -2, -4) and (name, index) not in lagging:
                        # LATEST/EARLIEST(_LOCAL): what _lookup_offset answers from the full
                        # PartitionState (high watermark = log end; LSO = oldest open transaction's
                        # first offset, else the high watermark), without building it
                        log_start, log_end, open_txns, _, _ = plog.facts(serial)
                        if spec != -1:
                            offset = log_start
                        elif isolation == 1 and open_txns:
                            # pinned at the log start (see _PartitionLog.state)
                            offset = max(min(log_end, *open_txns.values()), log_start)
                        else:
                            offset = log_end
                    else:
                        st, segs = self._state(plog, name, index, answer=True)
                        offset, ts = self._lookup_offset(st, segs, spec, isolation)
                parts_out.append((index, code, ts, offset, epochs[(name, index)]))
            topics_out.append((name, parts_out))
        return _ListOffsetsAnswer(version, topics_out)

    @staticmethod
    def _lookup_offset(st: PartitionState, segs: list[_Segment], spec: int, isolation: int) -> tuple[int, int]:
        if spec == -1:  # LATEST
            return (st.last_stable_offset if isolation == 1 else st.high_watermark), -1
        if spec in (-2, -4):  # EARLIEST, EARLIEST_LOCAL
            return st.log_start_offset, -1
        batches = [b for s in segs for b in s.batches if b.last_offset >= st.log_start_offset]
        if spec == -3:  # MAX_TIMESTAMP (batch granularity)
            if not batches:
                return -1, -1
            best = max(batches, key=lambda b: b.max_timestamp)
            return best.last_offset, best.max_timestamp
        if spec < 0:
            return -1, -1
        for b in batches:  # first batch whose max timestamp >= spec (batch granularity)
            if b.max_timestamp >= spec:
                return max(b.base_offset, st.log_start_offset), b.max_timestamp
        return -1, -1

    def _on_fetch(self, node, request, version):
        if version >= 13:  # real tables advertise it (3.1+); answering by name would be wrong
            raise NotImplementedError("fake broker: Fetch v13+ (topics by id, KIP-516) is not modelled")
        if self._fetch_throttles:
            # KafkaApis.handleFetchRequest over quota: getThrottledResponse, no partitions at all,
            # and the channel is muted for the throttle time (KIP-219, see throttle)
            ms = self._fetch_throttles.popleft()
            self._conn.throttle = ("fetch", version, ms)
            return FetchResponse(version=version, throttle_time_ms=ms, error_code=NONE, session_id=0, responses=[])
        isolation = request.isolation_level if version >= 4 else 0
        remaining = request.max_bytes if version >= 3 else 1 << 31
        first = True
        topics_out = []
        for t in request.topics:
            parts_out = []
            name = t.topic
            for p in t.partitions:
                cle = p.current_leader_epoch if version >= 9 else -1
                code, plog = self._partition_check(node, name, p.partition, "fetch", cle, follower_ok=version >= 11)
                hw = lso = log_start = -1
                records = b""
                aborted = None
                preferred = -1
                if code == NONE:
                    st, segs = self._state(plog, name, p.partition, answer=True)
                    redirect = self._preferred_replica.get((name, p.partition), -1)
                    # LocalLog.read: OFFSET_OUT_OF_RANGE only past the log end; at or above the high
                    # watermark (a lagging one included) the answer is empty with no error.
                    if p.fetch_offset < st.log_start_offset or p.fetch_offset > st.log_end_offset:
                        code = OFFSET_OUT_OF_RANGE
                    elif version >= 11 and redirect not in (-1, node.node_id):
                        # ReplicaManager.readFromLog: "If a preferred read-replica is set, skip the read"
                        preferred = redirect
                        hw, lso, log_start = st.high_watermark, st.last_stable_offset, st.log_start_offset
                    else:
                        hw, lso, log_start = st.high_watermark, st.last_stable_offset, st.log_start_offset
                        limit = max(0, min(p.partition_max_bytes, remaining))
                        upper = lso if isolation == 1 else hw
                        records = self._read(segs, p.fetch_offset, upper, limit, min_one=first)
                        if records and self._remote_empty.get((name, p.partition)):
                            records = b""  # DelayedRemoteFetch expired (see remote_fetch_timeout)
                            left = self._remote_empty[(name, p.partition)]
                            if left > 0:
                                self._remote_empty[(name, p.partition)] = left - 1
                        if records:
                            first = False
                            remaining -= len(records)
                        if isolation == 1:
                            last = self._last_offset_in(records, p.fetch_offset)
                            aborted = [FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction(
                                producer_id=pid, first_offset=fo)
                                for pid, fo, marker in st.aborted_transactions
                                if marker >= p.fetch_offset and fo <= last]
                parts_out.append(FetchResponse.FetchableTopicResponse.PartitionData(
                    partition_index=p.partition, error_code=code, high_watermark=hw, last_stable_offset=lso,
                    log_start_offset=log_start, aborted_transactions=aborted, preferred_read_replica=preferred,
                    # FetchResponse.json: Records is nullable in every version
                    records=None if self.null_records and not records else records))
            topics_out.append(FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=parts_out))
        return FetchResponse(version=version, throttle_time_ms=0, error_code=NONE, session_id=0,
                             responses=topics_out)

    @staticmethod
    def _last_offset_in(records: bytes, default: int) -> int:
        batches, _ = scan_batches(records)
        return batches[-1].last_offset if batches else default

    def _read(self, segs: list[_Segment], offset: int, upper: int, max_bytes: int, *, min_one: bool) -> bytes:
        """Kafka's LocalLog.read: one segment, starting at the batch that contains ``offset``."""
        if offset >= upper:
            return b""
        for seg in segs:
            start = None
            for i, b in enumerate(seg.batches):
                if b.last_offset >= offset:
                    start = i
                    break
            if start is None:
                continue
            first = seg.batches[start]
            if first.base_offset >= upper:
                return b""
            end_pos = seg.valid_end
            for b in seg.batches[start:]:
                if b.last_offset >= upper:
                    end_pos = b.position
                    break
            available = end_pos - first.position
            size = min(available, max_bytes)
            if min_one and size < first.size <= available:
                size = first.size
            if not self.partial_batches:
                whole = 0
                for b in seg.batches[start:]:
                    if b.position + b.size - first.position > size:
                        break
                    whole = b.position + b.size - first.position
                size = whole
            return seg.data[first.position:first.position + size]
        return b""

    def _append(self, topic: str, partition: int, records: bytes) -> tuple[int, int]:
        plog = self._plog(topic, partition)
        if plog is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1
        st, _ = plog.state(self._leader(topic, partition), self._leader_epochs[(topic, partition)])
        buf = bytearray(records)
        pos = 0
        next_offset = st.high_watermark
        base = next_offset
        out = bytearray()
        while pos < len(buf):
            if len(buf) - pos < _V2_HEADER_SIZE:
                return CORRUPT_MESSAGE, -1
            _, length, _, magic, crc = struct.unpack_from(">qiibI", buf, pos)
            size = _LOG_OVERHEAD + length
            if magic != 2 or length < _V2_HEADER_SIZE - _LOG_OVERHEAD or pos + size > len(buf):
                return CORRUPT_MESSAGE, -1
            if crc32c.crc32c(bytes(buf[pos + 21:pos + size])) != crc:
                return CORRUPT_MESSAGE, -1
            (last_delta,) = struct.unpack_from(">i", buf, pos + 23)
            struct.pack_into(">q", buf, pos, next_offset)
            struct.pack_into(">i", buf, pos + 12, self._leader_epochs[(topic, partition)])
            out += buf[pos:pos + size]
            next_offset += last_delta + 1
            pos += size
        with open(plog.active_segment(st.high_watermark), "ab") as f:
            f.write(out)
        return NONE, base

    def _on_produce(self, node, request, version):
        topics_out = []
        for t in request.topic_data:
            parts_out = []
            for p in t.partition_data:
                code, plog = self._partition_check(node, t.name, p.index, "produce")
                base, log_start = -1, -1
                if code == NONE:
                    code, base = self._append(t.name, p.index, p.records or b"")
                    log_start = self.partition_state(t.name, p.index).log_start_offset
                parts_out.append(ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
                    index=p.index, error_code=code, base_offset=base, log_append_time_ms=-1,
                    log_start_offset=log_start, record_errors=[], error_message=None))
            topics_out.append(ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=parts_out))
        if request.acks == 0:
            return None
        return ProduceResponse(version=version, responses=topics_out, throttle_time_ms=0)

    def _on_create_topics(self, node, request, version):
        results = []
        existing = self._scan()
        for t in request.topics:
            n = t.num_partitions if t.num_partitions > 0 else self.default_partitions
            # -1 = broker default only from v4 (Kafka 2.4, KIP-464: AdminManager.createTopics resolves
            # NO_NUM_PARTITIONS/NO_REPLICATION_FACTOR); before, AdminUtils.assignReplicasToBrokers
            # refuses it, and always refuses more replicas than brokers.
            rf = t.replication_factor if t.replication_factor > 0 or version < 4 else 1
            if not (self._authorized("Create", "Cluster", "kafka-cluster") or self._authorized("Create", "Topic", t.name)):
                code, msg = TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            elif t.name in existing:
                code, msg = TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
            elif t.num_partitions <= 0 and (version < 4 or t.num_partitions != -1):
                code, msg = INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            elif rf <= 0:
                code, msg = INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            elif rf > len(self._nodes):
                code, msg = INVALID_REPLICATION_FACTOR, (f"Replication factor: {rf} larger than available "
                                                         f"brokers: {len(self._nodes)}.")
            else:
                code, msg = NONE, None
                if not request.validate_only:
                    self.create_topic(t.name, n)
            results.append(CreateTopicsResponse.CreatableTopicResult(
                name=t.name, topic_id=self._topic_id(t.name), error_code=code, error_message=msg,
                num_partitions=n if code == NONE else -1, replication_factor=rf if code == NONE else -1,
                configs=[]))
        return CreateTopicsResponse(version=version, throttle_time_ms=0, topics=results)

    def _coordinator_for(self, key_type: int, key: str) -> tuple[int, Any]:
        """KafkaApis.getCoordinator: Describe on the Group (key type 0) or on the TransactionalId
        (key type 1) first, else GROUP_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED and no node."""
        if key_type == 0 and not self._authorized("Describe", "Group", key):
            return GROUP_AUTHORIZATION_FAILED, None
        if key_type == 1 and not self._authorized("Describe", "TransactionalId", key):
            return TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        return NONE, self._nodes[0]

    def _on_find_coordinator(self, node, request, version):
        key_type = request.key_type if version >= 1 else 0
        if version >= 4:
            coordinators = []
            for k in request.coordinator_keys:
                code, coord = self._coordinator_for(key_type, k)
                coordinators.append(FindCoordinatorResponse.Coordinator(
                    key=k, node_id=coord.node_id if coord else -1, host=coord.host if coord else "",
                    port=coord.port if coord else -1, error_code=code, error_message=None))
            return FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=coordinators)
        code, coord = self._coordinator_for(key_type, request.key)
        return FindCoordinatorResponse(version=version, throttle_time_ms=0, error_code=code, error_message=None,
                                       node_id=coord.node_id if coord else -1, host=coord.host if coord else "",
                                       port=coord.port if coord else -1)

    def _new_producer_id(self) -> int:
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    def _write_markers(self, txn: _TxnState, *, commit: bool, epoch: int) -> None:
        now = int(time.time() * 1000)
        for topic, partition in sorted(txn.partitions):
            plog = self._plog(topic, partition)
            if plog is None:
                continue
            st, _ = plog.state(0, 0)
            batch = build_control_batch(st.high_watermark, txn.producer_id, epoch, commit=commit,
                                        coordinator_epoch=self.coordinator_epoch, timestamp_ms=now,
                                        partition_leader_epoch=self._leader_epochs[(topic, partition)])
            with open(plog.active_segment(st.high_watermark), "ab") as f:
                f.write(batch)
        txn.partitions.clear()

    def _on_init_producer_id(self, node, request, version):
        tid = request.transactional_id
        # KafkaApis.handleInitProducerIdRequest: without a transactional id the client needs
        # IDEMPOTENT_WRITE on the cluster; from 2.8 on (KIP-679) WRITE on any topic also does
        # (authorizeByResourceType). Otherwise CLUSTER_AUTHORIZATION_FAILED.
        if tid is None and not self.idempotent_write_acl and not (
                self.topic_write_acl and (self.broker_version is None or self.broker_version >= (2, 8))):
            return InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                                          producer_id=-1, producer_epoch=-1)
        if tid is None:
            if version >= 3 and request.producer_id >= 0:  # KIP-360 epoch bump of an idempotent producer
                return InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=NONE,
                                              producer_id=request.producer_id,
                                              producer_epoch=request.producer_epoch + 1)
            return InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=NONE,
                                          producer_id=self._new_producer_id(), producer_epoch=0)
        txn = self._txns.get(tid)
        if txn is None:
            txn = self._txns[tid] = _TxnState(self._new_producer_id(), 0)
        else:
            txn.producer_epoch += 1
            if txn.partitions:  # fence the previous incarnation: abort its open transaction
                self._write_markers(txn, commit=False, epoch=txn.producer_epoch)
        txn.state, txn.timeout_ms, txn.start_ms = "Empty", request.transaction_timeout_ms, -1
        return InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=NONE,
                                      producer_id=txn.producer_id, producer_epoch=txn.producer_epoch)

    def _txn_check(self, tid, pid, epoch) -> tuple[int, _TxnState | None]:
        txn = self._txns.get(tid)
        if txn is None or txn.producer_id != pid:
            return INVALID_PRODUCER_ID_MAPPING, None
        if txn.producer_epoch != epoch:
            return INVALID_PRODUCER_EPOCH, None
        return NONE, txn

    def _on_add_partitions_to_txn(self, node, request, version):
        code, txn = self._txn_check(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                    request.v3_and_below_producer_epoch)
        results = []
        for t in request.v3_and_below_topics:
            pres = []
            for p in t.partitions:
                pcode = code
                if pcode == NONE and self._plog(t.name, p) is None:
                    pcode = UNKNOWN_TOPIC_OR_PARTITION
                if pcode == NONE:
                    if not txn.partitions:  # TransactionMetadata.prepareAddPartitions: Ongoing, start time
                        txn.state, txn.start_ms = "Ongoing", int(time.time() * 1000)
                    txn.partitions.add((t.name, p))
                pres.append(AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=pcode))
            results.append(AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(name=t.name,
                                                                                    results_by_partition=pres))
        return AddPartitionsToTxnResponse(version=version, throttle_time_ms=0, results_by_topic_v3_and_below=results)

    def _on_end_txn(self, node, request, version):
        code, txn = self._txn_check(request.transactional_id, request.producer_id, request.producer_epoch)
        if code == NONE:
            self._write_markers(txn, commit=bool(request.committed), epoch=txn.producer_epoch)
            txn.state = "CompleteCommit" if request.committed else "CompleteAbort"
        return EndTxnResponse(version=version, throttle_time_ms=0, error_code=code)

    # ---------------------------------------------------------------- KIP-664 and consumer groups
    # Public state setters for tests. Producer state is never set: DescribeProducers derives it
    # from the served log (as the leader's ProducerStateManager does), so it can disagree with what
    # a client read earlier only because the log changed since.
    def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], *,
                       protocol_type: str = "consumer", state: str = "Stable", group_type: str = "classic") -> None:
        """Committed offsets of a consumer group (what OffsetCommit would have stored).
        ``group_type`` (KIP-848): "classic", "consumer" (new protocol) or "share" (keeps no offsets)."""
        with self._lock:
            g = self._groups.setdefault(group_id, {"protocol_type": protocol_type, "state": state, "offsets": {}})
            g["protocol_type"], g["state"], g["group_type"] = protocol_type, state, group_type
            g["offsets"].update({(str(t), int(p)): int(o) for (t, p), o in offsets.items()})

    def pend_offset_commits(self, group_id: str, partitions: set[tuple[str, int]] | None) -> None:
        """Partitions with a transactional offset commit of ``group_id`` not yet ended by a marker
        (None clears them): what ``GroupMetadataManager.getOffsets`` answers UNSTABLE_OFFSET_COMMIT
        for when asked with ``require_stable``."""
        with self._lock:
            g = self._groups.setdefault(group_id, {"protocol_type": "consumer", "state": "Stable", "offsets": {}})
            g["pending"] = set(partitions or ())

    def set_transaction(self, transactional_id: str, *, producer_id: int, producer_epoch: int, state: str,
                        partitions: set[tuple[str, int]] | None = None, timeout_ms: int = 60000,
                        start_ms: int = -1) -> None:
        """The coordinator's in-memory TransactionMetadata for a transactional id, for logs staged
        from files (whose transactions never went through this fake's coordinator)."""
        with self._lock:
            self._txns[transactional_id] = _TxnState(producer_id, producer_epoch, set(partitions or ()), state,
                                                     timeout_ms, start_ms)

    def coordinator_loading(self, *transactional_ids: str) -> None:
        """The coordinator is still loading the ``__transaction_state`` partition of each of these
        ids (it just became its leader): ``TransactionStateManager.getAndMaybeAddTransactionState``
        answers COORDINATOR_LOAD_IN_PROGRESS while ``loadingPartitions`` holds ``partitionFor(id)``.
        With no ids: loading finished for all."""
        with self._lock:
            if transactional_ids:
                self._loading_txn_ids.update(transactional_ids)
            else:
                self._loading_txn_ids.clear()

    def producer_states(self, topic: str, partition: int) -> dict[int, dict[str, int]]:
        """What DescribeProducers reports for a partition now (see :func:`producer_states`)."""
        with self._lock:
            plog = self._require(topic, partition)
            st, segs = self._state(plog, topic, partition)
            return producer_states(segs, plog.loaded_snapshot)

    def _on_describe_producers(self, node, request, version):
        # KafkaApis.handleDescribeProducersRequest: READ on the topic, then the metadata cache,
        # then per partition ReplicaManager.activeProducerState (getPartitionOrError: a broker
        # not hosting the replica answers NOT_LEADER_OR_FOLLOWER) -> Partition.activeProducerState
        # -> UnifiedLog.activeProducers.
        topics = self._scan()
        Part = DescribeProducersResponse.TopicResponse.PartitionResponse
        out = []
        for t in request.topics:
            topic_error = None
            if not self._authorized("Read", "Topic", t.name):
                topic_error = TOPIC_AUTHORIZATION_FAILED
            elif t.name not in topics:
                topic_error = UNKNOWN_TOPIC_OR_PARTITION
            parts = []
            for p in t.partition_indexes:
                code, producers = topic_error or NONE, []
                if code == NONE:
                    plog = self._plog(t.name, p)
                    if plog is None:
                        code = UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        code = self._take_partition_fault(t.name, p, "describe_producers")
                    if code == NONE and self._leader(t.name, p) != node.node_id:
                        code = NOT_LEADER_OR_FOLLOWER
                    if code == NONE:
                        _, segs = self._state(plog, t.name, p)
                        producers = [Part.ProducerState(producer_id=pid, **entry)
                                     for pid, entry in sorted(producer_states(segs, plog.loaded_snapshot).items())]
                parts.append(Part(partition_index=p, error_code=code, error_message=None, active_producers=producers))
            out.append(DescribeProducersResponse.TopicResponse(name=t.name, partitions=parts))
        return DescribeProducersResponse(version=version, throttle_time_ms=0, topics=out)

    def forget_transactions(self) -> None:
        """The coordinator holds no transaction metadata at all (every id expired, or a coordinator
        that lost its state): DescribeTransactions answers TRANSACTIONAL_ID_NOT_FOUND and
        ListTransactions lists nothing, whatever the staged ``__transaction_state`` says."""
        with self._lock:
            self._txns.clear()
            self._load_txn_log = False

    def _coordinator_txns(self) -> dict[str, _TxnState]:
        """The coordinator's transaction metadata: what it loaded from the staged
        ``__transaction_state`` partitions (:func:`_txn_log_values`, as
        ``TransactionStateManager.loadTransactionsForTxnTopicPartition`` loads them when it becomes
        their leader), overridden by what went through this fake's own coordinator or
        :meth:`set_transaction` (the fake writes no ``__transaction_state`` records itself)."""
        loaded: dict[str, _TxnState | None] = {}
        self._scan()
        for (topic, _p), plog in sorted(self._partitions.items()) if self._load_txn_log else ():
            if topic == "__transaction_state":
                loaded.update(_txn_log_values(plog.load()))
        return {**{t: x for t, x in loaded.items() if x is not None}, **self._txns}

    def _loaded_offsets(self) -> tuple[dict[tuple[str, str, int], int], dict[str, set[tuple[str, int]]]]:
        """What the group coordinator loaded from the served ``__consumer_offsets`` partitions
        (:func:`_offsets_log`): committed offsets and, per group, the partitions with a
        transactional offset commit no marker has ended yet."""
        committed: dict[tuple[str, str, int], int] = {}
        pending: dict[str, set[tuple[str, int]]] = collections.defaultdict(set)
        self._scan()
        for (topic, _p), plog in sorted(self._partitions.items()):
            if topic == "__consumer_offsets":
                c, pend = _offsets_log(plog.load())
                committed.update(c)
                for g, tps in pend.items():
                    pending[g] |= tps
        return committed, dict(pending)

    def _txn_topics(self, txn: _TxnState):
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        for topic, partition in sorted(txn.partitions):
            by_topic[topic].append(partition)
        # KafkaApis.handleDescribeTransactionsRequest keeps only topics the principal may Describe
        return [DescribeTransactionsResponse.TransactionState.TopicData(topic=t, partitions=ps)
                for t, ps in by_topic.items() if self._authorized("Describe", "Topic", t)]

    def _on_describe_transactions(self, node, request, version):
        # KafkaApis.handleDescribeTransactionsRequest (DESCRIBE on the TransactionalId) ->
        # TransactionCoordinator.handleDescribeTransactions: NOT_COORDINATOR off the coordinator
        # (TransactionStateManager.getTransactionState), TRANSACTIONAL_ID_NOT_FOUND when unknown.
        State = DescribeTransactionsResponse.TransactionState
        out = []
        txns = self._coordinator_txns()
        for tid in request.transactional_ids:
            txn = txns.get(tid)
            if not self._authorized("Describe", "TransactionalId", tid):
                code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif node.node_id != self._nodes[0].node_id:
                code = NOT_COORDINATOR
            elif not tid:
                code = INVALID_REQUEST
            elif tid in self._loading_txn_ids:  # getTransactionState -> Left(COORDINATOR_LOAD_IN_PROGRESS)
                code = COORDINATOR_LOAD_IN_PROGRESS
            elif txn is None:
                code = TRANSACTIONAL_ID_NOT_FOUND
            else:
                code = NONE
            if code != NONE:
                out.append(State(error_code=code, transactional_id=tid, transaction_state="",
                                 transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                 producer_epoch=-1, topics=[]))
                continue
            out.append(State(error_code=NONE, transactional_id=tid, transaction_state=txn.state,
                             transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.start_ms,
                             producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                             topics=self._txn_topics(txn)))
        return DescribeTransactionsResponse(version=version, throttle_time_ms=0, transaction_states=out)

    def _on_list_transactions(self, node, request, version):
        # TransactionStateManager.listTransactionStates (filters by producer id, state name and,
        # v1+, duration) + KafkaApis.handleListTransactionsRequest (only ids the principal may
        # Describe). Every transactional id lives on the fake's one coordinator, node 1.
        Item = ListTransactionsResponse.TransactionState
        states = []
        unknown = []
        known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                 "Dead", "PrepareEpochFence"}
        wanted = set()
        for name in request.state_filters:
            (wanted.add if name in known else unknown.append)(name)
        duration = request.duration_filter if version >= 1 else -1
        # v2 (4.1+, KIP-1152, KAFKA-19073): TransactionalIdPattern, a Java regex; null or empty
        # lists every id. TransactionStateManagerTest.testListTransactionsFiltering: ".*special-.*"
        # lists "my-special-0" and "their-special-2", "nothing" lists none. Modelled as a match of
        # the whole id (Python's re reads the escaped, anchored patterns txnwatch sends as Java does).
        pattern = re.compile(request.transactional_id_pattern) \
            if version >= 2 and request.transactional_id_pattern else None
        now = int(time.time() * 1000)
        if node.node_id == self._nodes[0].node_id:
            for tid, txn in sorted(self._coordinator_txns().items()):
                if request.producer_id_filters and txn.producer_id not in request.producer_id_filters:
                    continue
                if request.state_filters and txn.state not in wanted:
                    continue
                if duration >= 0 and now - txn.start_ms <= duration:
                    continue
                if pattern is not None and not pattern.fullmatch(tid):
                    continue
                if self._authorized("Describe", "TransactionalId", tid):
                    states.append(Item(transactional_id=tid, producer_id=txn.producer_id,
                                       transaction_state=txn.state))
        return ListTransactionsResponse(version=version, throttle_time_ms=0, error_code=NONE,
                                        unknown_state_filters=unknown, transaction_states=states)

    def _on_list_groups(self, node, request, version):
        # KafkaApis.handleListGroupsRequest: every group with DESCRIBE on the cluster, else only the
        # groups the principal may Describe. Every group lives on the fake's one coordinator.
        all_groups = self._authorized("Describe", "Cluster", "kafka-cluster")
        out = []
        if node.node_id == self._nodes[0].node_id:
            # v5 TypesFilter (KIP-848): GroupMetadataManager.listGroups matches Group.GroupType.parse
            # (case-insensitive) of each filter against the group's type; empty = every type.
            types = {t.lower() for t in request.types_filter} if version >= 5 and request.types_filter else None
            for gid, g in sorted(self._groups.items()):
                if version >= 4 and request.states_filter and g["state"] not in request.states_filter:
                    continue
                gtype = g.get("group_type", "classic")
                if types is not None and gtype not in types:
                    continue
                if all_groups or self._authorized("Describe", "Group", gid):
                    out.append(ListGroupsResponse.ListedGroup(group_id=gid, protocol_type=g["protocol_type"],
                                                              group_state=g["state"], group_type=gtype))
        return ListGroupsResponse(version=version, throttle_time_ms=0, error_code=NONE, groups=out)

    def _group_partitions(self, group_id: str, topics,
                          require_stable: bool = False) -> tuple[int, list[tuple[str, list[tuple[int, int, int]]]]]:
        """(group error, [(topic, [(partition, committed offset, error)])]) as
        KafkaApis.handleOffsetFetchRequestFromCoordinator answers one group: DESCRIBE on the group,
        then topics without DESCRIBE get TOPIC_AUTHORIZATION_FAILED per partition (offset -1); a
        partition without a committed offset gets -1 and no error. ``topics`` None = all."""
        if not self._authorized("Describe", "Group", group_id):
            return GROUP_AUTHORIZATION_FAILED, []
        if self._groups.get(group_id, {}).get("group_type") == "share":
            return GROUP_ID_NOT_FOUND, []  # ShareGroup.validateOffsetFetch: "is not a consumer group"
        log_committed, log_pending = self._loaded_offsets()
        committed = {**{(t, p): o for (g, t, p), o in log_committed.items() if g == group_id},
                     **self._groups.get(group_id, {}).get("offsets", {})}
        if topics is None:
            by_topic: dict[str, list[int]] = collections.defaultdict(list)
            for t, p in sorted(committed):
                if self._authorized("Describe", "Topic", t):
                    by_topic[t].append(p)
            wanted = list(by_topic.items())
        else:
            wanted = [(t.name, list(t.partition_indexes)) for t in topics]
        pending = (self._groups.get(group_id, {}).get("pending", set()) | log_pending.get(group_id, set())
                   if require_stable else set())
        out = []
        for name, parts in wanted:
            ok = self._authorized("Describe", "Topic", name)
            # GroupMetadataManager.getOffsets (3.8.0): requireStable and a pending transactional
            # commit on the partition -> offset -1 with UNSTABLE_OFFSET_COMMIT
            out.append((name, [(p, -1, UNSTABLE_OFFSET_COMMIT) if ok and (name, p) in pending else
                               (p, committed.get((name, p), -1) if ok else -1,
                                NONE if ok else TOPIC_AUTHORIZATION_FAILED) for p in parts]))
        return NONE, out

    def _on_offset_fetch(self, node, request, version):
        if version >= 10:  # topics by id (KIP-848 era); kafka-python's admin client caps at v8
            raise NotImplementedError("fake broker: OffsetFetch v10+ (topics by id) is not modelled")
        if node.node_id != self._nodes[0].node_id:
            raise NotImplementedError("fake broker: OffsetFetch to a non-coordinator node is not modelled")
        R = OffsetFetchResponse
        if version >= 8:
            groups = []
            for g in request.groups:
                code, topics = self._group_partitions(g.group_id, g.topics, require_stable=bool(request.require_stable))
                G = R.OffsetFetchResponseGroup
                groups.append(G(group_id=g.group_id, error_code=code, topics=[
                    G.OffsetFetchResponseTopics(name=t, partitions=[
                        G.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=o, committed_leader_epoch=-1, metadata="",
                            error_code=e) for p, o, e in parts]) for t, parts in topics]))
            return R(version=version, throttle_time_ms=0, groups=groups)
        code, topics = self._group_partitions(request.group_id, request.topics,
                                              require_stable=version >= 7 and bool(request.require_stable))
        T = R.OffsetFetchResponseTopic
        return R(version=version, throttle_time_ms=0, error_code=code, topics=[
            T(name=t, partitions=[T.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, metadata="", error_code=e)
                for p, o, e in parts]) for t, parts in topics])


def _control_coordinator_epoch(data: bytes, b: BatchInfo) -> int:
    """CoordinatorEpoch of a marker's value (EndTransactionMarker: version int16, epoch int32)."""
    p = b.position + _V2_HEADER_SIZE
    _, p = _read_varint(data, p)  # record length
    p += 1  # attributes
    _, p = _read_varint(data, p)  # timestamp delta
    _, p = _read_varint(data, p)  # offset delta
    key_len, p = _read_varint(data, p)
    p += max(key_len, 0)
    value_len, p = _read_varint(data, p)
    return struct.unpack_from(">i", data, p + 2)[0] if value_len >= 6 else -1


_TXN_STATUS = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
               "PrepareEpochFence")  # TransactionState.id order (TransactionLog.readTxnRecordValue)


def _batch_records(data: bytes, b: Any) -> Iterator[tuple[bytes, bytes | None]]:
    """(key, value) of each record of an uncompressed v2 batch (``DefaultRecord.readFrom``:
    length, attributes, timestampDelta, offsetDelta, key, value as zigzag varints and bytes;
    headers are skipped with the rest of the record)."""
    p = b.position + _V2_HEADER_SIZE
    for _ in range(b.count):
        length, p = _read_varint(data, p)
        end = p + length
        p += 1  # attributes
        _, p = _read_varint(data, p)  # timestamp delta
        _, p = _read_varint(data, p)  # offset delta
        key_len, p = _read_varint(data, p)
        key = data[p:p + key_len]
        p += max(key_len, 0)
        value_len, p = _read_varint(data, p)
        yield key, (data[p:p + value_len] if value_len >= 0 else None)
        p = end


def _txn_log_values(segs: list[_Segment]) -> dict[str, _TxnState | None]:
    """The latest ``__transaction_state`` value per transactional id (None: tombstone), replayed as
    ``TransactionStateManager.loadTransactionsForTxnTopicPartition`` does when its coordinator
    loads the partition: records in offset order, the last one per key wins, a null value removes
    the id. Key: TransactionLogKey (version int16, TransactionalId string). Value: TransactionLogValue
    v0 (fixed width) or v1 (flexible: compact arrays/strings, tagged fields): ProducerId int64,
    ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8,
    TransactionPartitions [{Topic, PartitionIds}], TransactionLastUpdateTimestampMs int64,
    TransactionStartTimestampMs int64. Uncompressed batches only (the coordinator writes them so)."""
    out: dict[str, _TxnState | None] = {}
    for seg in segs:
        data = seg.data
        for b in seg.batches:
            if b.magic < 2 or b.is_control or b.attributes & _ATTR_COMPRESSION:
                continue
            for key, value in _batch_records(data, b):
                (n,) = struct.unpack_from(">h", key, 2)
                tid = key[4:4 + n].decode()
                out[tid] = None if value is None else _txn_value(value)
    return out


def _offsets_log(segs: list[_Segment]) -> tuple[dict[tuple[str, str, int], int], dict[str, set[tuple[str, int]]]]:
    """(committed offsets, pending transactional offset commits per group) of one staged
    ``__consumer_offsets`` partition, replayed as ``GroupMetadataManager.loadGroupsAndOffsets``
    (3.8.0) does when the group coordinator loads it: per batch in offset order, an offset-commit
    record (OffsetCommitKey versions 0-1: version int16, group/topic strings, partition int32) of a
    *transactional* batch goes to ``pendingOffsets(producerId)`` (a tombstone removes it there), of
    a plain batch to the loaded offsets (a tombstone removes it); a control batch ends the producer's
    pending commits: COMMIT moves them to the loaded offsets, ABORT drops them. What is left pending
    is what ``GroupMetadata.hasPendingOffsetCommitsForTopicPartition`` sees, so OffsetFetch with
    ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for it (``GroupMetadataManager.getOffsets``;
    4.x: ``OffsetMetadataManager.fetchOffsets`` / ``hasPendingTransactionalOffsets``). Value: the
    offset is the int64 after the int16 version in every OffsetCommitValue version. Uncompressed
    batches only; group metadata (key version 2) and newer record types are skipped."""
    committed: dict[tuple[str, str, int], int] = {}
    pending: dict[int, dict[tuple[str, str, int], int]] = {}
    for seg in segs:
        data = seg.data
        for b in seg.batches:
            if b.magic < 2 or b.attributes & _ATTR_COMPRESSION:
                continue
            if b.is_control:
                done = pending.pop(b.producer_id, {})
                if b.control_type == 1:  # ControlRecordType.COMMIT
                    committed.update(done)
                continue
            for key, value in _batch_records(data, b):
                (kv,) = struct.unpack_from(">h", key, 0)
                if kv not in (0, 1):
                    continue
                (gl,) = struct.unpack_from(">h", key, 2)
                group = key[4:4 + gl].decode()
                (tl,) = struct.unpack_from(">h", key, 4 + gl)
                topic = key[6 + gl:6 + gl + tl].decode()
                (part,) = struct.unpack_from(">i", key, 6 + gl + tl)
                target = pending.setdefault(b.producer_id, {}) if b.is_transactional else committed
                if value is None:
                    target.pop((group, topic, part), None)
                else:
                    target[(group, topic, part)] = struct.unpack_from(">q", value, 2)[0]
    by_group: dict[str, set[tuple[str, int]]] = collections.defaultdict(set)
    for commits in pending.values():
        for group, topic, part in commits:
            by_group[group].add((topic, part))
    return committed, dict(by_group)


def _txn_value(v: bytes) -> _TxnState:
    (version,) = struct.unpack_from(">h", v, 0)
    pid, epoch, timeout, status = struct.unpack_from(">qhib", v, 2)
    q = 17
    parts: set[tuple[str, int]] = set()
    if version == 0:
        (count,) = struct.unpack_from(">i", v, q)
        q += 4
        for _ in range(max(count, 0)):
            (tl,) = struct.unpack_from(">h", v, q)
            topic = v[q + 2:q + 2 + tl].decode()
            q += 2 + tl
            (np_,) = struct.unpack_from(">i", v, q)
            q += 4
            for _ in range(np_):
                parts.add((topic, struct.unpack_from(">i", v, q)[0]))
                q += 4
    else:
        count, q = _read_uvarint(v, q)
        for _ in range(max(count - 1, 0)):
            tl, q = _read_uvarint(v, q)
            topic = v[q:q + tl - 1].decode()
            q += tl - 1
            np_, q = _read_uvarint(v, q)
            for _ in range(np_ - 1):
                parts.add((topic, struct.unpack_from(">i", v, q)[0]))
                q += 4
            tags, q = _read_uvarint(v, q)
            for _ in range(tags):
                _, q = _read_uvarint(v, q)
                size, q = _read_uvarint(v, q)
                q += size
    _last_update, start = struct.unpack_from(">qq", v, q)
    return _TxnState(pid, epoch, parts, _TXN_STATUS[status], timeout, start)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def producer_states(segs: list[_Segment], snapshot: ProducerSnapshot | None = None) -> dict[int, dict[str, int]]:
    """Producer id -> DescribeProducers ``ProducerState`` fields, replayed from the log as the
    leader's ProducerStateManager holds them (ProducerAppendInfo.append):

    * a data batch (appendDataBatch): epoch, ``LastSequence`` = its last sequence, ``LastTimestamp``
      = its max timestamp; a transactional batch with no transaction open sets
      ``CurrentTxnStartOffset`` to its base offset;
    * a COMMIT/ABORT marker (appendEndTxnMarker): epoch, ``CoordinatorEpoch`` = the marker's,
      ``LastTimestamp``, and ``CurrentTxnStartOffset`` back to -1;
    * an empty control batch (left by the cleaner) changes nothing.

    With ``snapshot`` (the one :meth:`_PartitionLog.facts` loaded, as ``UnifiedLog.rebuildProducerState``
    does after a restart) the state starts as the snapshot's entries (``loadProducerEntry``; the
    DescribeProducers fields as ``UnifiedLog.activeProducers`` maps them: epoch, last sequence,
    timestamp, coordinator epoch, current txn first offset) and only batches whose last offset
    reaches the snapshot offset are replayed on top.

    Not modelled: producer expiry (``producer.id.expiration.ms``; a producer with an open
    transaction never expires).
    """
    out: dict[int, dict[str, int]] = {}
    if snapshot is not None:
        for e in snapshot.entries:
            out[e["producer_id"]] = {"producer_epoch": e["producer_epoch"], "last_sequence": e["last_sequence"],
                                     "last_timestamp": e["timestamp"], "coordinator_epoch": e["coordinator_epoch"],
                                     "current_txn_start_offset": e["current_txn_first_offset"]}
    for seg in segs:
        for b in seg.batches:
            if b.magic < 2 or b.producer_id < 0:
                continue
            if snapshot is not None and b.last_offset < snapshot.offset:
                continue  # in the snapshot already
            entry = out.setdefault(b.producer_id, {"producer_epoch": b.producer_epoch, "last_sequence": -1,
                                                   "last_timestamp": -1, "coordinator_epoch": -1,
                                                   "current_txn_start_offset": -1})
            entry["producer_epoch"] = max(entry["producer_epoch"], b.producer_epoch)
            if b.is_control:
                if b.count == 0 or b.control_type not in (0, 1):
                    continue
                entry["coordinator_epoch"] = _control_coordinator_epoch(seg.data, b)
                entry["last_timestamp"] = b.max_timestamp
                entry["current_txn_start_offset"] = -1
                continue
            (base_seq,) = struct.unpack_from(">i", seg.data, b.position + 53)
            entry["last_sequence"] = base_seq + b.count - 1 if base_seq >= 0 else -1
            entry["last_timestamp"] = b.max_timestamp
            if b.is_transactional and entry["current_txn_start_offset"] < 0:
                entry["current_txn_start_offset"] = b.base_offset
    return out
