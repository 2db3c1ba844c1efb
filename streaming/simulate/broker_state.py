"""What the simulated brokers and coordinator remember: per-batch facts, producer state, txn metadata.

Shared by :mod:`streaming.simulate.cluster_log` (the partition leaders and the coordinator) and
:mod:`streaming.simulate.producers` (the clients), which must agree on these records and checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.simulate.encode import COMMIT

TXN_STATE_TOPIC = "__transaction_state"
EPOCH_MAX = 32767  # Short.MAX_VALUE
# BatchInfo.control_type codes besides ControlRecordType's ABORT 0 / COMMIT 1 (the same numbers the
# decoders use, kept here so the simulator imports nothing of the product's rules).
EMPTY_CONTROL = -2  # control batch with no record, left by the cleaner on a compacted topic
DATA = -1  # not a control batch
TXN_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms default
DELETE_RETENTION_MS = 24 * 3600 * 1000  # delete.retention.ms default


class ScenarioError(RuntimeError):
    """An action a real broker/coordinator would reject (or an invalid use of the writer)."""


def segment_name(base_offset: int, suffix: str = ".log") -> str:
    """Kafka's file name for a segment / snapshot: 20-digit zero-padded offset + suffix."""
    return f"{base_offset:020d}{suffix}"


def wrap_seq(seq: int, inc: int) -> int:
    # DefaultRecordBatch.incrementSequence: sequences wrap from Integer.MAX_VALUE to 0
    return (seq + inc) % (1 << 31)


def java_hashmap_order(keys: list[int]) -> list[int]:
    """Iteration order of a ``java.util.HashMap<Long, ...>`` filled with ``keys`` in that order.

    ProducerStateManager keeps producers in a HashMap and writes snapshots in its iteration
    order (§6): bucket = spread(Long.hashCode(k)) & (capacity - 1), buckets ascending, insertion
    order inside a bucket (resizes keep it). Capacity starts at 16 and doubles while the size
    exceeds 0.75 * capacity. Tree bins (8+ collisions) are not modelled.
    """
    cap = 16
    while len(keys) > cap * 0.75:
        cap *= 2

    def bucket(k: int) -> int:
        h = (k ^ (k >> 32)) & 0xFFFFFFFF  # Long.hashCode
        h ^= h >> 16  # HashMap.hash spreads the high bits
        return h & (cap - 1)

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket


# --- per-batch bookkeeping ----------------------------------------------------------------------


@dataclass(slots=True)
class BatchInfo:
    """What the writer remembers about every batch it appended (header facts, file position)."""

    base_offset: int
    last_offset: int
    segment: int
    position: int
    size: int
    leader_epoch: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False
    control_type: int = DATA  # DATA, ABORT, COMMIT or EMPTY_CONTROL
    coordinator_epoch: int = -1
    base_timestamp: int = -1
    max_timestamp: int = -1
    record_count: int = 0
    timestamp_type: int = 0
    legacy: bool = False
    # __transaction_state only: (offset, transactional_id, value or None) per record (compaction)
    txn_records: tuple[tuple[int, str, bytes | None], ...] | None = None

    @property
    def is_control(self) -> bool:
        return self.control_type != DATA


@dataclass(slots=True)
class ProducerStateEntry:
    """Broker-side ProducerStateEntry of one producer id on one partition (§3.4, §6)."""

    epoch: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1
    last_seq: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = -1


def apply_batch(state: dict[int, ProducerStateEntry], b: BatchInfo) -> None:
    """The broker's producer-state update for one appended batch, written from Kafka's source and
    not from txnwatch's pairing rule, so that the scenarios stay an outside truth
    (``ProducerAppendInfo.append`` / ``appendDataBatch`` / ``appendEndTxnMarker`` and
    ``ProducerStateEntry.addBatch`` / ``update``, storage/src/main/java/org/apache/kafka/storage/
    internals/log/, apache/kafka trunk of 2024-10):

    - only batches with a producer id reach it (``RecordBatch.hasProducerId``; legacy messages have
      none);
    - a control batch with no record changes nothing ("the entire transaction has been cleaned
      from the log");
    - a marker sets the entry's epoch (clearing cached batch metadata when it changes), its
      coordinator epoch and last timestamp, and clears ``currentTxnFirstOffset``;
    - a data batch sets the epoch the same way, caches its sequence/offset metadata and timestamp,
      and opens a transaction at its base offset when it is transactional and none is open.
    """
    if b.producer_id < 0 or b.legacy:
        return
    if b.is_control and b.control_type == EMPTY_CONTROL:
        return
    e = state.get(b.producer_id)
    if e is None:
        e = state[b.producer_id] = ProducerStateEntry()
    if b.producer_epoch != e.epoch:
        # ProducerStateEntry.maybeUpdateProducerEpoch: an epoch change clears the batch metadata
        e.epoch = b.producer_epoch
        e.last_seq, e.last_offset, e.offset_delta = -1, -1, 0
    e.timestamp = b.max_timestamp
    if b.is_control:
        e.coordinator_epoch = b.coordinator_epoch
        e.txn_first_offset = -1
        return
    if b.record_count > 0 or b.base_sequence >= 0:
        e.last_seq = -1 if b.base_sequence < 0 else wrap_seq(b.base_sequence, b.last_offset - b.base_offset)
        e.last_offset = b.last_offset
        e.offset_delta = b.last_offset - b.base_offset
    if b.is_transactional and e.txn_first_offset < 0:
        e.txn_first_offset = b.base_offset


@dataclass
class TxnMeta:
    """The coordinator's TransactionMetadata for one transactional id (what it persists)."""

    transactional_id: str
    txn_partition: int
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    tv: int
    state: str = "Empty"
    partitions: dict[str, list[int]] = field(default_factory=dict)
    start_ms: int = -1
    last_update_ms: int = -1
    client_tv: int = 0
    pending_markers: list[tuple[str, int]] = field(default_factory=list)
    pending_result: int = COMMIT
    marker_pid: int = -1
    marker_epoch: int = -1
    next_pid: int = -1  # producer id after a TV2 epoch-overflow rotation, set on Prepare*

    def tps(self) -> list[tuple[str, int]]:
        return [(t, p) for t, ps in self.partitions.items() for p in ps]
