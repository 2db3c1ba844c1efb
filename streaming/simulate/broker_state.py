"""What the simulated brokers and coordinator remember: per-batch facts, producer state, txn metadata.

Shared by :mod:`streaming.simulate.cluster_log` (the partition leaders and the coordinator) and
:mod:`streaming.simulate.producers` (the clients), which must agree on these records and checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.simulate.encode import COMMIT
from udfs.model import CONTROL_EMPTY, CONTROL_NONE
from udfs.pairing import Step, pair

TXN_STATE_TOPIC = "__transaction_state"
EPOCH_MAX = 32767  # Short.MAX_VALUE
EMPTY_CONTROL = CONTROL_EMPTY  # control_type of a count-0 control batch left by the cleaner
DATA = CONTROL_NONE  # control_type of a data batch
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
    """The broker's ProducerStateEntry update for one appended batch (``ProducerAppendInfo.append``,
    kafka-formats.md §3.4, §8.4.6). Which batch opens, joins or closes a transaction is the
    product's rule (:func:`udfs.pairing.pair`); the epoch, sequence and timestamp bookkeeping that
    the snapshot files need is the broker's."""
    if b.producer_id < 0 or b.legacy:
        return
    e = state.get(b.producer_id)
    step = pair(
        e is not None and e.txn_first_offset >= 0,
        transactional=b.is_transactional,
        control=b.is_control,
        producer_id=b.producer_id,
    )
    if b.control_type == EMPTY_CONTROL:
        # ProducerAppendInfo.append ignores an empty control batch entirely, udfs.pairing closes
        # on it; here they agree: the cleaner empties a marker only once no batch of its
        # transaction is left (see udfs.pairing), so nothing of this producer is open.
        if e is not None and step is Step.CLOSE:
            e.txn_first_offset = -1
        return
    if e is None:
        e = state[b.producer_id] = ProducerStateEntry()
    if b.producer_epoch != e.epoch:
        # maybeUpdateProducerEpoch: an epoch change clears the cached batch metadata
        e.epoch = b.producer_epoch
        e.last_seq, e.last_offset, e.offset_delta = -1, -1, 0
    if b.control_type == DATA:
        if b.record_count > 0 or b.base_sequence >= 0:
            e.last_seq = (
                -1 if b.base_sequence < 0 else wrap_seq(b.base_sequence, b.last_offset - b.base_offset)
            )
            e.last_offset = b.last_offset
            e.offset_delta = b.last_offset - b.base_offset
    else:
        e.coordinator_epoch = b.coordinator_epoch
    e.timestamp = b.max_timestamp
    if step is Step.OPEN:
        e.txn_first_offset = b.base_offset
    elif step is Step.CLOSE:
        e.txn_first_offset = -1



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
