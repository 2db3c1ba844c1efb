"""Scenario writer: broker-shaped Kafka log directories for tests, the demo and benchmarks.

:class:`ClusterLog` simulates what a Kafka cluster would leave on disk for a sequence of client
and coordinator actions, byte for byte (encoders in :mod:`streaming.simulate.encode`):

* data partitions ``<root>/<topic>-<partition>/<20-digit base offset>.log``, rolled after
  ``segment_bytes`` (file name = base offset of its first batch; after :meth:`ClusterLog.compact`
  a cleaned segment keeps its name, as in Kafka), optional ``.snapshot`` files;
* the transaction coordinator's log ``<root>/__transaction_state-<n>/...``: the transactional id
  maps to partition ``abs(hash) % txn_partitions`` (kafka-formats.md §5.2), every persisted state
  change is one single-record batch whose ``partitionLeaderEpoch`` is that partition's leader
  epoch = the coordinator epoch (§5.6), and the markers the coordinator sends carry that epoch;
* producer epochs exactly per kafka-formats.md §8.3: TV0/TV1 keep the epoch across commits and
  client aborts; TV2 bumps it on every EndTxn (markers E+1, next transaction's data E+1) and
  rotates the producer id at epoch 32767; timeout aborts and fencing bump to E+1 in every TV.

The broker's own checks are simulated too (``ScenarioError`` instead of a silently impossible
log): a batch or marker with an epoch lower than the partition's current epoch for that producer
is rejected (INVALID_PRODUCER_EPOCH), a marker from an older coordinator epoch is rejected
(TRANSACTION_COORDINATOR_FENCED), a non-transactional batch from a producer with an open
transaction is rejected, and with ``partition_verification=True`` (KIP-890 part 1, 3.6+) a
transactional write that would start a transaction the coordinator does not know is rejected.

Named scenarios (:data:`SCENARIOS`, :func:`write_scenario`) build on it and state the findings a
detector must report (``Scenario.expected``), derived from ``spec/detection.md`` §3-§4 by the
scenario author, not by running a detector.
"""

from __future__ import annotations

import gzip
import random
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.simulate.encode import (
    ABORT,
    COMMIT,
    encode_batch,
    encode_batch_header,
    encode_empty_batch,
    encode_legacy_message,
    encode_marker,
    encode_record,
    encode_snapshot,
    encode_txn_key,
    encode_txn_log_batch,
    encode_txn_tombstone_batch,
    encode_txn_value_v0,
    encode_txn_value_v1,
)
from udfs.model import CONTROL_EMPTY, CONTROL_NONE
from udfs.partitioning import txn_state_partition

TXN_STATE_TOPIC = "__transaction_state"
EPOCH_MAX = 32767  # Short.MAX_VALUE
EMPTY_CONTROL = CONTROL_EMPTY  # control_type of a count-0 control batch left by the cleaner
DATA = CONTROL_NONE  # control_type of a data batch

DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms default
DEFAULT_PADDING_MS = 300_000
DEFAULT_THRESHOLD_MS = DEFAULT_MAX_TIMEOUT_MS + DEFAULT_PADDING_MS
TXN_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms default
DELETE_RETENTION_MS = 24 * 3600 * 1000  # delete.retention.ms default
# How far past the threshold scenarios move the clock before the final write, so that a
# transaction a detector fails to close shows up as a (false) finding.
AGE_MS = 25 * 60_000

_ATTR_LOG_APPEND_TIME = 0x08


class ScenarioError(RuntimeError):
    """An action a real broker/coordinator would reject (or an invalid use of the writer)."""


def segment_name(base_offset: int, suffix: str = ".log") -> str:
    """Kafka's file name for a segment / snapshot: 20-digit zero-padded offset + suffix."""
    return f"{base_offset:020d}{suffix}"


def _wrap_seq(seq: int, inc: int) -> int:
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
class _ProducerState:
    """Broker-side ProducerStateEntry of one producer id on one partition (§3.4, §6)."""

    epoch: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1
    last_seq: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = -1


def _apply(state: dict[int, _ProducerState], b: BatchInfo) -> None:
    """ProducerStateManager semantics for one appended batch (kafka-formats.md §3.4, §8.4.6)."""
    if b.producer_id < 0 or b.legacy:
        return
    if b.control_type == EMPTY_CONTROL:
        return  # "the entire transaction has been cleaned from the log": nothing to do
    e = state.get(b.producer_id)
    if e is None:
        e = state[b.producer_id] = _ProducerState()
    if b.producer_epoch != e.epoch:
        # maybeUpdateProducerEpoch: an epoch change clears the cached batch metadata
        e.epoch = b.producer_epoch
        e.last_seq, e.last_offset, e.offset_delta = -1, -1, 0
    if b.control_type == DATA:
        if b.record_count > 0 or b.base_sequence >= 0:
            e.last_seq = (
                -1 if b.base_sequence < 0 else _wrap_seq(b.base_sequence, b.last_offset - b.base_offset)
            )
            e.last_offset = b.last_offset
            e.offset_delta = b.last_offset - b.base_offset
        e.timestamp = b.max_timestamp
        if b.is_transactional and e.txn_first_offset < 0:
            e.txn_first_offset = b.base_offset
    else:
        e.coordinator_epoch = b.coordinator_epoch
        e.timestamp = b.max_timestamp
        e.txn_first_offset = -1


# --- partitions ---------------------------------------------------------------------------------


class _Partition:
    __slots__ = (
        "topic",
        "partition",
        "dir",
        "leader_epoch",
        "next_offset",
        "segments",
        "segment_size",
        "pending",
        "batches",
        "state",
        "compacted",
        "log_append_time",
        "is_txn_log",
    )

    def __init__(
        self,
        root: Path,
        topic: str,
        partition: int,
        leader_epoch: int,
        compacted: bool,
        log_append_time: bool,
    ):
        self.topic = topic
        self.partition = partition
        self.dir = root / f"{topic}-{partition}"
        self.leader_epoch = leader_epoch
        self.next_offset = 0
        self.segments: list[int] = []
        self.segment_size: dict[int, int] = {}
        self.pending: dict[int, list[bytes]] = {}
        self.batches: list[BatchInfo] = []
        self.state: dict[int, _ProducerState] = {}
        self.compacted = compacted
        self.log_append_time = log_append_time
        self.is_txn_log = topic == TXN_STATE_TOPIC

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class _TxnMeta:
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


# --- fast record payloads -----------------------------------------------------------------------


class _RecordPool:
    """Pre-encoded record blobs so that big scenarios cost a bytes join per batch, not per record.

    ``blob(n, size)`` = n records with offsetDelta i, timestampDelta i (1 ms apart), null key and
    a pseudo-random printable value of ``size`` bytes; gzip variants are cached as well.
    """

    CACHE_BYTES = 64 << 20

    def __init__(self, seed: int):
        self._rng = random.Random(seed ^ 0x5EED)
        self._records: dict[int, list[bytes]] = {}
        self._blobs: dict[tuple[int, int, bool], bytes] = {}
        self._cached = 0

    def blob(self, n: int, size: int, compressed: bool = False) -> bytes:
        key = (n, size, compressed)
        b = self._blobs.get(key)
        if b is None:
            recs = self._records.setdefault(size, [])
            alphabet = string.ascii_letters + string.digits
            while len(recs) < n:
                i = len(recs)
                value = "".join(self._rng.choices(alphabet, k=size)).encode()
                recs.append(encode_record(i, value, timestamp_delta=i))
            b = b"".join(recs[:n])
            if compressed:
                b = gzip.compress(b, compresslevel=9, mtime=0)
            if self._cached + len(b) <= self.CACHE_BYTES:
                self._blobs[key] = b
                self._cached += len(b)
        return b


# --- the cluster --------------------------------------------------------------------------------


class ClusterLog:
    """A simulated Kafka cluster writing broker-shaped log directories under ``root``.

    ``base_time_ms`` starts the synthetic clock (epoch ms); every append advances it by 1 ms (a
    data batch of n records by n ms), :meth:`advance` moves it further. ``segment_bytes`` rolls a
    partition's active segment when the next batch would not fit (``log.segment.bytes``).
    ``txn_partitions`` = ``transaction.state.log.num.partitions``; ``coordinator_epoch`` is the
    initial leader epoch of every ``__transaction_state`` partition (``coordinator_epochs``
    overrides per partition). Producer ids are allocated from ``first_producer_id`` upwards.
    ``write_producer_id_tags``: v1 values carry PreviousProducerId/NextProducerId as Kafka 4.3+
    coordinators write them (KAFKA-20310); False = 4.0-4.2 behaviour (tags never written).
    ``partition_verification``: KIP-890 part 1 (3.6+) rejects transactional writes the coordinator
    does not know about; the default False models older brokers, where the faults are possible.
    ``snapshot_on_roll``: write the producer snapshot at every roll, as the broker does.
    Nothing reaches the disk before :meth:`flush` (automatic past ``flush_bytes`` pending).
    """

    def __init__(
        self,
        root: str | Path,
        base_time_ms: int = 1_700_000_000_000,
        *,
        segment_bytes: int = 1 << 30,
        txn_partitions: int = 50,
        coordinator_epoch: int = 0,
        coordinator_epochs: dict[int, int] | None = None,
        first_producer_id: int = 1000,
        seed: int = 0,
        write_producer_id_tags: bool = True,
        partition_verification: bool = False,
        snapshot_on_roll: bool = False,
        flush_bytes: int = 32 << 20,
    ):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.now_ms = base_time_ms
        self.segment_bytes = segment_bytes
        self.txn_partitions = txn_partitions
        self.coordinator_epoch_default = coordinator_epoch
        self._coordinator_epochs = dict(coordinator_epochs or {})
        self._next_pid = first_producer_id
        self.rng = random.Random(seed)
        self.pool = _RecordPool(seed)
        self.write_producer_id_tags = write_producer_id_tags
        self.partition_verification = partition_verification
        self.snapshot_on_roll = snapshot_on_roll
        self.flush_bytes = flush_bytes
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._topics: dict[str, dict[str, Any]] = {}
        self._txn: dict[str, _TxnMeta] = {}
        self._pending_bytes = 0
        self.bytes_written = 0
        self.max_timestamp = -1
        self.compacted_partitions: set[tuple[str, int]] = set()  # partitions compact() rewrote

    # -- clock ------------------------------------------------------------------------------------

    def advance(self, ms: int) -> int:
        """Move the synthetic clock forward by ``ms``; returns the new time."""
        if ms < 0:
            raise ValueError("the clock only moves forward")
        self.now_ms += ms
        return self.now_ms

    def _tick(self, ms: int = 1) -> int:
        t = self.now_ms
        self.now_ms += ms
        return t

    # -- topology ---------------------------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        partitions: int = 1,
        *,
        leader_epoch: int = 0,
        compacted: bool = False,
        log_append_time: bool = False,
    ) -> None:
        """Declare a topic: ``compacted`` (``cleanup.policy=compact``, needed by :meth:`compact`),
        ``log_append_time`` (``message.timestamp.type=LogAppendTime``: the leader stamps
        maxTimestamp and sets attribute bit 3), initial data-partition ``leader_epoch``."""
        self._topics[topic] = dict(
            partitions=partitions,
            leader_epoch=leader_epoch,
            compacted=compacted,
            log_append_time=log_append_time,
        )
        for p in range(partitions):
            self._part(topic, p)

    def _part(self, topic: str, partition: int) -> _Partition:
        key = (topic, partition)
        part = self._partitions.get(key)
        if part is None:
            if topic == TXN_STATE_TOPIC:
                epoch = self._coordinator_epochs.get(partition, self.coordinator_epoch_default)
                part = _Partition(self.root, topic, partition, epoch, True, False)
            else:
                cfg = self._topics.get(topic) or {}
                part = _Partition(
                    self.root,
                    topic,
                    partition,
                    cfg.get("leader_epoch", 0),
                    cfg.get("compacted", False),
                    cfg.get("log_append_time", False),
                )
            self._partitions[key] = part
        return part

    def leader_epoch(self, topic: str, partition: int) -> int:
        """Current leader epoch of a partition (for ``__transaction_state``: the coordinator epoch)."""
        return self._part(topic, partition).leader_epoch

    def bump_leader_epoch(self, topic: str, partition: int, to: int | None = None) -> int:
        """Leader election on a data partition: later batches carry the new partitionLeaderEpoch."""
        part = self._part(topic, partition)
        part.leader_epoch = part.leader_epoch + 1 if to is None else to
        return part.leader_epoch

    def coordinator_epoch(self, txn_partition: int) -> int:
        """Coordinator epoch of a ``__transaction_state`` partition = its leader epoch (§5.6)."""
        return self._part(TXN_STATE_TOPIC, txn_partition).leader_epoch

    def failover_coordinator(self, transactional_id_or_partition: str | int, to: int | None = None) -> int:
        """A new broker becomes coordinator of a ``__transaction_state`` partition: its leader
        epoch (and so the coordinator epoch in later records and markers) goes up."""
        n = (
            txn_state_partition(transactional_id_or_partition, self.txn_partitions)
            if isinstance(transactional_id_or_partition, str)
            else transactional_id_or_partition
        )
        return self.bump_leader_epoch(TXN_STATE_TOPIC, n, to)

    def txn_partition(self, transactional_id: str) -> int:
        return txn_state_partition(transactional_id, self.txn_partitions)

    def allocate_producer_id(self) -> int:
        pid = self._next_pid
        self._next_pid += 1
        return pid

    # -- appends ----------------------------------------------------------------------------------

    def _append(self, part: _Partition, raw: bytes, info: BatchInfo) -> BatchInfo:
        size = len(raw)
        if not part.segments or (
            part.segment_size[part.segments[-1]] > 0
            and part.segment_size[part.segments[-1]] + size > self.segment_bytes
        ):
            self._roll(part, info.base_offset)
        seg = part.segments[-1]
        info.segment = seg
        info.position = part.segment_size[seg]
        info.size = size
        part.segment_size[seg] += size
        part.pending.setdefault(seg, []).append(raw)
        part.batches.append(info)
        _apply(part.state, info)
        part.next_offset = info.last_offset + 1
        self._pending_bytes += size
        self.bytes_written += size
        if info.max_timestamp > self.max_timestamp and not info.legacy:
            self.max_timestamp = info.max_timestamp
        if self._pending_bytes >= self.flush_bytes:
            self.flush()
        return info

    def _roll(self, part: _Partition, base_offset: int) -> None:
        if part.segments and self.snapshot_on_roll and not part.is_txn_log:
            self.write_snapshot(part.topic, part.partition, base_offset)
        part.segments.append(base_offset)
        part.segment_size[base_offset] = 0

    def roll(self, topic: str, partition: int) -> None:
        """Force a segment roll: the next batch starts a new segment file."""
        part = self._part(topic, partition)
        if part.segments and part.segment_size[part.segments[-1]] > 0:
            self._roll(part, part.next_offset)

    def _check_producer_append(self, part: _Partition, pid: int, epoch: int, transactional: bool) -> None:
        e = part.state.get(pid)
        if e is None:
            return
        if epoch < e.epoch:
            raise ScenarioError(
                f"{part.name}: INVALID_PRODUCER_EPOCH: producer {pid} epoch {epoch} < current {e.epoch}"
            )
        if not transactional and e.txn_first_offset >= 0:
            raise ScenarioError(
                f"{part.name}: INVALID_TXN_STATE: non-transactional batch from {pid} with open txn"
            )

    def append_data(
        self,
        topic: str,
        partition: int,
        n_records: int,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        compressed: bool = False,
        value_size: int | None = None,
        keys: list[bytes] | None = None,
        clock_skew_ms: int = 0,
    ) -> BatchInfo:
        """Low-level: the partition leader appends one data batch of ``n_records`` records.

        Record timestamps (CreateTime) are the producer's clock (cluster clock + ``clock_skew_ms``),
        1 ms apart; in a LogAppendTime topic the leader sets maxTimestamp to its own clock and
        attribute bit 3. ``keys`` (one per record) are required on compacted topics.
        """
        if n_records <= 0:
            raise ValueError("a data batch has at least one record")
        part = self._part(topic, partition)
        if producer_id >= 0:
            self._check_producer_append(part, producer_id, producer_epoch, transactional)
        if value_size is None:
            value_size = self.rng.choice((16, 64, 200))
        if part.compacted and keys is None:
            keys = [f"key-{part.next_offset + i}".encode() for i in range(n_records)]
        base_ts = self.now_ms + clock_skew_ms
        create_max = base_ts + n_records - 1
        base_offset = part.next_offset
        if keys is None:
            payload = self.pool.blob(n_records, value_size, compressed)
        else:
            if len(keys) != n_records:
                raise ValueError("one key per record")
            value = b"v" * value_size
            plain = b"".join(encode_record(i, value, k, timestamp_delta=i) for i, k in enumerate(keys))
            if compressed:
                plain = gzip.compress(plain, compresslevel=9, mtime=0)
            payload = plain
        self.now_ms += n_records
        attributes = (1 if compressed else 0) | (0x10 if transactional else 0)
        max_ts = create_max
        ts_type = 0
        if part.log_append_time:
            attributes |= _ATTR_LOG_APPEND_TIME
            max_ts = self.now_ms - 1  # broker clock at append
            ts_type = 1
        raw = encode_batch_header(
            base_offset,
            payload,
            record_count=n_records,
            attributes=attributes,
            last_offset_delta=n_records - 1,
            base_timestamp=base_ts,
            max_timestamp=max_ts,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            partition_leader_epoch=part.leader_epoch,
        )
        info = BatchInfo(
            base_offset=base_offset,
            last_offset=base_offset + n_records - 1,
            segment=0,
            position=0,
            size=0,
            leader_epoch=part.leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=transactional,
            base_timestamp=base_ts,
            max_timestamp=max_ts,
            record_count=n_records,
            timestamp_type=ts_type,
        )
        return self._append(part, raw, info)

    def append_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        control_type: int,
        coordinator_epoch: int,
    ) -> BatchInfo:
        """Low-level: the partition leader handles one WriteTxnMarkers entry (§3.1, §3.4 checks)."""
        part = self._part(topic, partition)
        e = part.state.get(producer_id)
        if e is not None:
            if producer_epoch < e.epoch:
                raise ScenarioError(
                    f"{part.name}: marker epoch {producer_epoch} < current {e.epoch} (error 47)"
                )
            if coordinator_epoch < e.coordinator_epoch:
                raise ScenarioError(
                    f"{part.name}: TRANSACTION_COORDINATOR_FENCED: coordinator epoch {coordinator_epoch} < {e.coordinator_epoch}"
                )
        ts = self._tick()
        ts_type = 1 if part.log_append_time else 0
        raw = encode_marker(
            part.next_offset,
            producer_id,
            producer_epoch,
            control_type,
            coordinator_epoch,
            ts,
            part.leader_epoch,
            timestamp_type=ts_type,
        )
        info = BatchInfo(
            base_offset=part.next_offset,
            last_offset=part.next_offset,
            segment=0,
            position=0,
            size=0,
            leader_epoch=part.leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
            control_type=control_type,
            coordinator_epoch=coordinator_epoch,
            base_timestamp=ts,
            max_timestamp=ts,
            record_count=1,
            timestamp_type=ts_type,
        )
        return self._append(part, raw, info)

    def produce(
        self,
        topic: str,
        partition: int,
        n_records: int = 1,
        *,
        compressed: bool = False,
        value_size: int | None = None,
    ) -> int:
        """A plain (non-idempotent) producer's batch: producerId -1, epoch -1, baseSequence -1.
        Returns the base offset."""
        return self.append_data(
            topic, partition, n_records, compressed=compressed, value_size=value_size
        ).base_offset

    def produce_legacy(self, topic: str, partition: int, n_records: int = 1, *, magic: int = 1) -> int:
        """Messages in the pre-0.11 formats (magic 0/1, one entry per message), as left by an
        old broker or ``log.message.format.version`` < 0.11. Never part of a transaction."""
        part = self._part(topic, partition)
        first = part.next_offset
        for _ in range(n_records):
            ts = self._tick()
            off = part.next_offset
            raw = encode_legacy_message(off, f"legacy-{off}".encode(), magic=magic, timestamp=ts)
            info = BatchInfo(
                base_offset=off,
                last_offset=off,
                segment=0,
                position=0,
                size=0,
                leader_epoch=part.leader_epoch,
                base_timestamp=ts,
                max_timestamp=ts,
                record_count=1,
                legacy=True,
            )
            self._append(part, raw, info)
        return first

    # -- producers --------------------------------------------------------------------------------

    def producer(
        self,
        transactional_id: str,
        tv: int = 0,
        *,
        timeout_ms: int = 60_000,
        clock_skew_ms: int = 0,
        initial_epoch: int = 0,
    ) -> TransactionalProducer:
        """A producer instance calls InitProducerId for ``transactional_id`` (§8.3).

        Unknown id: a new producer id with epoch ``initial_epoch`` (0 for a brand-new id; a larger
        value models an id whose earlier history was compacted away) and an Empty record. Known
        id: a *new instance* fences the old one (:meth:`TransactionalProducer.fence`).
        ``tv``: 0 = v0 values, classic epochs; 1 = v1 (flexible) values, classic epochs;
        2 = v1 values with ClientTransactionVersion 2, epoch bump on every commit/abort.
        """
        if tv not in (0, 1, 2):
            raise ValueError("transaction version must be 0, 1 or 2")
        meta = self._txn.get(transactional_id)
        if meta is None:
            meta = _TxnMeta(
                transactional_id=transactional_id,
                txn_partition=self.txn_partition(transactional_id),
                producer_id=self.allocate_producer_id(),
                producer_epoch=initial_epoch,
                timeout_ms=timeout_ms,
                tv=tv,
            )
            self._txn[transactional_id] = meta
            self._write_state(meta, "Empty", prev_pid=meta.producer_id)
        else:
            meta.tv = tv
            meta.timeout_ms = timeout_ms
            self._init_existing(meta)
        return TransactionalProducer(self, meta, clock_skew_ms)

    def idempotent_producer(self) -> IdempotentProducer:
        """A non-transactional idempotent producer (``enable.idempotence``): its own producer id,
        epoch 0, sequences per partition; its batches never open a transaction."""
        return IdempotentProducer(self, self.allocate_producer_id())

    # -- coordinator ------------------------------------------------------------------------------

    def txn_metadata(self, transactional_id: str) -> _TxnMeta | None:
        return self._txn.get(transactional_id)

    def _write_state(
        self,
        meta: _TxnMeta,
        state: str,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        prev_pid: int = -1,
        next_pid: int = -1,
    ) -> BatchInfo:
        """Persist one state transition (§5.4/5.5) and apply it to the in-memory metadata."""
        ts = self._tick()
        pid = meta.producer_id if producer_id is None else producer_id
        epoch = meta.producer_epoch if producer_epoch is None else producer_epoch
        if state == "Empty":
            partitions: dict[str, list[int]] | None = None  # Empty is always written with null
            start = -1
            meta.partitions = {}
        elif state in ("CompleteCommit", "CompleteAbort"):
            partitions = {}  # empty array, not null (verified on real data)
            start = meta.start_ms
        else:
            partitions = meta.partitions
            start = meta.start_ms
        # Ongoing carries the transition time as lastUpdate; other transitions were prepared a
        # moment before the append (the real samples show lastUpdate < record timestamp)
        last_update = ts if state == "Ongoing" else ts - 1
        if meta.tv == 0:
            value = encode_txn_value_v0(pid, epoch, meta.timeout_ms, state, partitions, last_update, start)
        else:
            tags = self.write_producer_id_tags
            value = encode_txn_value_v1(
                pid,
                epoch,
                meta.timeout_ms,
                state,
                partitions,
                last_update,
                start,
                previous_producer_id=prev_pid if tags else -1,
                next_producer_id=next_pid if tags else -1,
                client_transaction_version=meta.client_tv,
            )
        part = self._part(TXN_STATE_TOPIC, meta.txn_partition)
        raw = encode_txn_log_batch(part.next_offset, meta.transactional_id, value, ts, part.leader_epoch)
        info = BatchInfo(
            base_offset=part.next_offset,
            last_offset=part.next_offset,
            segment=0,
            position=0,
            size=0,
            leader_epoch=part.leader_epoch,
            base_timestamp=ts,
            max_timestamp=ts,
            record_count=1,
            txn_records=((part.next_offset, meta.transactional_id, value),),
        )
        meta.state = state
        meta.producer_id, meta.producer_epoch = pid, epoch
        meta.last_update_ms = last_update
        if partitions is not None and not partitions:
            meta.partitions = {}  # Complete*: the transaction's partition set is cleared
        return self._append(part, raw, info)

    def _init_existing(self, meta: _TxnMeta) -> None:
        """InitProducerId for a known id (new instance or re-initialisation after a fence)."""
        if meta.state in ("PrepareCommit", "PrepareAbort"):
            raise ScenarioError(
                f"{meta.transactional_id}: CONCURRENT_TRANSACTIONS until the pending markers are written"
            )
        if meta.state == "Ongoing":
            # abort the open transaction with a bumped epoch first (prepareFenceProducerEpoch)
            self._end(meta, ABORT, fence=True)
        prev = meta.producer_id
        if meta.producer_epoch >= EPOCH_MAX - 1:
            # isProducerEpochExhausted: InitProducerId hands out a new producer id, epoch 0
            self._write_state(
                meta, "Empty", producer_id=self.allocate_producer_id(), producer_epoch=0, prev_pid=prev
            )
        else:
            self._write_state(meta, "Empty", producer_epoch=meta.producer_epoch + 1, prev_pid=prev)

    def _add_partitions(self, meta: _TxnMeta, tps: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn (or, under TV2, the leader's implicit add): one Ongoing record."""
        new = [(t, p) for t, p in tps if p not in meta.partitions.get(t, [])]
        if not new:
            return
        if meta.state in ("PrepareCommit", "PrepareAbort"):
            raise ScenarioError(f"{meta.transactional_id}: CONCURRENT_TRANSACTIONS (markers pending)")
        meta.client_tv = 2 if meta.tv == 2 else 0  # ClientTransactionVersion tag (v1 tag 2)
        if meta.state != "Ongoing":
            meta.start_ms = self.now_ms  # Empty/Complete* -> Ongoing starts the transaction
        for t, p in new:
            meta.partitions.setdefault(t, []).append(p)
        self._write_state(meta, "Ongoing", prev_pid=meta.producer_id)

    def _end(
        self,
        meta: _TxnMeta,
        result: int,
        *,
        fence: bool = False,
        markers: Iterable[tuple[str, int]] | None = None,
    ) -> None:
        """EndTxn (client) or a coordinator-initiated abort (timeout / fencing): Prepare* record,
        markers to every partition of the transaction, Complete* record (§5.5, §8.3)."""
        if meta.state in ("PrepareCommit", "PrepareAbort"):
            raise ScenarioError(f"{meta.transactional_id}: markers of the previous EndTxn are pending")
        pid, epoch = meta.producer_id, meta.producer_epoch
        next_pid = -1
        if fence:
            # prepareFenceProducerEpoch: E+1 in every TV (an exhausted epoch cannot be bumped)
            new_epoch = epoch + 1 if epoch < EPOCH_MAX else epoch
        elif meta.tv == 2:
            meta.client_tv = 2
            new_epoch = epoch + 1
            if not meta.partitions:
                # TV2 abort with nothing added (PrepareAbort from Empty/Complete*): the
                # transaction "starts" now, it never had a start of its own
                meta.start_ms = self.now_ms
            if epoch >= EPOCH_MAX - 1:
                # TV2 epoch overflow: Prepare* keeps pid P with epoch 32767, Complete* moves to P'
                next_pid = self.allocate_producer_id()
        else:
            meta.client_tv = 0
            new_epoch = epoch
        prepare = "PrepareCommit" if result == COMMIT else "PrepareAbort"
        meta.pending_result = result
        meta.pending_markers = meta.tps()
        meta.marker_pid, meta.marker_epoch = pid, new_epoch
        meta.next_pid = next_pid
        self._write_state(meta, prepare, producer_epoch=new_epoch, prev_pid=pid, next_pid=next_pid)
        self.write_markers(meta.transactional_id, markers)

    def write_markers(
        self, transactional_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> None:
        """The coordinator writes the pending markers (all, or only ``partitions``) with its
        *current* coordinator epoch; when none is left it persists Complete*. After a failover the
        new coordinator resends to every partition of the transaction (call with ``partitions``
        None): partitions that already had the marker get a duplicate, which closes nothing."""
        meta = self._txn[transactional_id]
        if meta.state not in ("PrepareCommit", "PrepareAbort"):
            raise ScenarioError(f"{transactional_id}: no markers pending (state {meta.state})")
        coord_epoch = self.coordinator_epoch(meta.txn_partition)
        todo = meta.tps() if partitions is None else list(partitions)
        for t, p in todo:
            if (t, p) not in meta.tps():
                raise ScenarioError(f"{transactional_id}: {t}-{p} is not in the transaction")
            self.append_marker(t, p, meta.marker_pid, meta.marker_epoch, meta.pending_result, coord_epoch)
            if (t, p) in meta.pending_markers:
                meta.pending_markers.remove((t, p))
        if not meta.pending_markers:
            complete = "CompleteCommit" if meta.pending_result == COMMIT else "CompleteAbort"
            if meta.next_pid >= 0:
                old = meta.producer_id
                self._write_state(meta, complete, producer_id=meta.next_pid, producer_epoch=0, prev_pid=old)
                meta.next_pid = -1
            else:
                self._write_state(meta, complete, prev_pid=meta.producer_id)

    def expire(self, *transactional_ids: str, force: bool = False) -> None:
        """The coordinator expires idle transactional ids (``transactional.id.expiration.ms``
        after their last update, only in Empty/Complete*): tombstones, one batch per
        ``__transaction_state`` partition (§5.7)."""
        by_part: dict[int, list[str]] = {}
        for tid in transactional_ids:
            meta = self._txn[tid]
            if meta.state not in ("Empty", "CompleteCommit", "CompleteAbort"):
                raise ScenarioError(f"{tid}: a transaction in flight is never expired (state {meta.state})")
            if not force and self.now_ms - meta.last_update_ms < TXN_ID_EXPIRATION_MS:
                raise ScenarioError(f"{tid}: not idle for transactional.id.expiration.ms yet")
            by_part.setdefault(meta.txn_partition, []).append(tid)
        for n, tids in by_part.items():
            part = self._part(TXN_STATE_TOPIC, n)
            ts = self._tick()
            raw = encode_txn_tombstone_batch(part.next_offset, tids, ts, part.leader_epoch)
            info = BatchInfo(
                base_offset=part.next_offset,
                last_offset=part.next_offset + len(tids) - 1,
                segment=0,
                position=0,
                size=0,
                leader_epoch=part.leader_epoch,
                base_timestamp=ts,
                max_timestamp=ts,
                record_count=len(tids),
                txn_records=tuple((part.next_offset + i, t, None) for i, t in enumerate(tids)),
            )
            self._append(part, raw, info)
            for t in tids:
                del self._txn[t]

    # -- output -----------------------------------------------------------------------------------

    def flush(self) -> None:
        """Append everything produced since the last flush to the segment files (creating
        directories and new segments as needed). Safe to call repeatedly while readers run."""
        for part in self._partitions.values():
            if not part.pending:
                continue
            part.dir.mkdir(parents=True, exist_ok=True)
            for seg in sorted(part.pending):
                with open(part.dir / segment_name(seg), "ab") as f:
                    f.write(b"".join(part.pending[seg]))
            part.pending.clear()
        self._pending_bytes = 0

    def producer_state(
        self, topic: str, partition: int, at_offset: int | None = None
    ) -> dict[int, _ProducerState]:
        """Broker producer state after applying the batches with offsets < ``at_offset``."""
        part = self._part(topic, partition)
        if at_offset is None or at_offset >= part.next_offset:
            # the broker's live state (compaction never rewrites it, a replay after cleaning would)
            return {
                pid: _ProducerState(**{k: getattr(e, k) for k in e.__slots__})
                for pid, e in part.state.items()
            }
        state: dict[int, _ProducerState] = {}
        for b in part.batches:
            if b.last_offset >= at_offset:
                break
            _apply(state, b)
        return state

    def write_snapshot(self, topic: str, partition: int, at_offset: int | None = None) -> Path:
        """Write ``<at_offset>.snapshot`` (ProducerSnapshot v1, §6): the producer state the
        broker holds after applying all batches with offsets < ``at_offset`` (default: the log
        end), entries in Java HashMap order."""
        part = self._part(topic, partition)
        if at_offset is None:
            at_offset = part.next_offset
        state = self.producer_state(topic, partition, at_offset)
        entries = [
            (
                pid,
                e.epoch,
                e.last_seq,
                e.last_offset,
                e.offset_delta,
                e.timestamp,
                e.coordinator_epoch,
                e.txn_first_offset,
            )
            for pid in java_hashmap_order(list(state))
            for e in (state[pid],)
        ]
        part.dir.mkdir(parents=True, exist_ok=True)
        path = part.dir / segment_name(at_offset, ".snapshot")
        path.write_bytes(encode_snapshot(entries))
        return path

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._partitions)

    def batches(self, topic: str, partition: int) -> list[BatchInfo]:
        """Everything appended to a partition, in offset order (after compaction: what is left)."""
        return list(self._part(topic, partition).batches)

    def abort_params(self, topic: str, partition: int, producer_id: int) -> dict[str, Any]:
        """Facts of the written log that detection.md §4 turns into legacy abort parameters,
        assuming the partition is read from its log start: the highest epoch of ``producer_id``
        on the partition (data or marker) and the coordinator epoch of its last marker there
        (``last-marker``) or 0 (``log-start``)."""
        epoch, coord, source = -1, 0, "log-start"
        for b in self._part(topic, partition).batches:
            if b.producer_id != producer_id or b.control_type == EMPTY_CONTROL:
                continue
            epoch = max(epoch, b.producer_epoch)
            if b.control_type in (ABORT, COMMIT):
                coord, source = b.coordinator_epoch, "last-marker"
        return {"producer_epoch": epoch, "coordinator_epoch": coord, "coordinator_epoch_source": source}

    # -- compaction -------------------------------------------------------------------------------

    def compact(
        self, topic: str, partition: int, *, delete_horizon_passed: bool = True, superseded: bool = True
    ) -> None:
        """Simulate the log cleaner on the closed segments (never the active one) of a compacted
        partition. Segment files keep their names (as Kafka does, so a name can be lower than its
        first batch's offset afterwards); empty cleaned segments are deleted.

        Data partitions (batch granularity): data of aborted transactions is removed; data of
        committed transactions too when ``superseded`` (their keys were overwritten later);
        non-transactional batches stay. A marker whose transaction has no data left becomes an
        empty control batch (count 0, §3.3) once ``delete_horizon_passed``, otherwise it is
        re-written with the delete horizon stamped (KIP-534, attributes 0x70).
        ``__transaction_state`` (record granularity): only the newest record per transactional id
        in the cleaned range stays; tombstones are removed when ``delete_horizon_passed``.
        """
        part = self._part(topic, partition)
        if not part.compacted:
            raise ScenarioError(f"{part.name} is not a compacted topic")
        self.flush()
        if len(part.segments) < 2:
            return
        closed = set(part.segments[:-1])
        horizon = self.now_ms + DELETE_RETENTION_MS
        new_raw: dict[int, bytes | None] = {}  # index in part.batches -> replacement (None = drop)
        if part.is_txn_log:
            latest: dict[str, int] = {}
            for b in part.batches:
                if b.segment in closed:
                    for off, tid, _ in b.txn_records or ():
                        latest[tid] = off
            for i, b in enumerate(part.batches):
                if b.segment not in closed or not b.txn_records:
                    continue
                keep = tuple(
                    r
                    for r in b.txn_records
                    if latest[r[1]] == r[0] and not (r[2] is None and delete_horizon_passed)
                )
                if len(keep) == len(b.txn_records) and not any(r[2] is None for r in keep):
                    continue
                if not keep:
                    new_raw[i] = None
                    continue
                tomb = any(r[2] is None for r in keep)
                recs = [
                    encode_record(
                        off - b.base_offset,
                        val,
                        encode_txn_key(tid),
                        timestamp_delta=(b.base_timestamp - horizon) if tomb else 0,
                    )
                    for off, tid, val in keep
                ]
                new_raw[i] = encode_batch(
                    b.base_offset,
                    recs,
                    partition_leader_epoch=b.leader_epoch,
                    base_timestamp=b.base_timestamp,
                    max_timestamp=b.max_timestamp,
                    last_offset_delta=b.last_offset - b.base_offset,
                    delete_horizon_ms=horizon if tomb else None,
                )
                b.txn_records = keep
                b.record_count = len(keep)
        else:
            open_txn: dict[int, list[int]] = {}
            for i, b in enumerate(part.batches):
                if b.segment not in closed or b.producer_id < 0 or b.legacy:
                    continue
                if b.control_type == DATA:
                    if b.is_transactional:
                        open_txn.setdefault(b.producer_id, []).append(i)
                    continue
                if b.control_type == EMPTY_CONTROL:
                    continue
                data = open_txn.pop(b.producer_id, [])
                remove = b.control_type == ABORT or superseded
                if remove:
                    for j in data:
                        new_raw[j] = None
                if remove or not data:
                    if delete_horizon_passed:
                        new_raw[i] = encode_empty_batch(
                            b.base_offset,
                            max_timestamp=b.max_timestamp,
                            producer_id=b.producer_id,
                            producer_epoch=b.producer_epoch,
                            partition_leader_epoch=b.leader_epoch,
                            timestamp_type=b.timestamp_type,
                        )
                        b.control_type = EMPTY_CONTROL
                        b.record_count = 0
                        b.base_timestamp = -1
                    else:
                        new_raw[i] = encode_marker(
                            b.base_offset,
                            b.producer_id,
                            b.producer_epoch,
                            b.control_type,
                            b.coordinator_epoch,
                            b.max_timestamp,
                            b.leader_epoch,
                            timestamp_type=b.timestamp_type,
                            delete_horizon_ms=horizon,
                        )
        if not new_raw:
            return
        self.compacted_partitions.add((topic, partition))
        # rewrite the touched closed segments from the files on disk
        touched = {part.batches[i].segment for i in new_raw}
        kept: list[BatchInfo] = []
        by_seg: dict[int, list[bytes]] = {s: [] for s in touched}
        file_cache = {s: (part.dir / segment_name(s)).read_bytes() for s in touched}
        for i, b in enumerate(part.batches):
            if b.segment not in touched:
                kept.append(b)
                continue
            raw = new_raw[i] if i in new_raw else file_cache[b.segment][b.position : b.position + b.size]
            if raw is None:
                continue
            b.position = sum(len(x) for x in by_seg[b.segment])
            b.size = len(raw)
            by_seg[b.segment].append(raw)
            kept.append(b)
        for s, chunks in by_seg.items():
            path = part.dir / segment_name(s)
            if chunks:
                path.write_bytes(b"".join(chunks))
                part.segment_size[s] = sum(len(c) for c in chunks)
            else:
                path.unlink()
                part.segments.remove(s)
                del part.segment_size[s]
        part.batches = kept


# --- producers ----------------------------------------------------------------------------------


class IdempotentProducer:
    """Idempotent, non-transactional producer: batches with a producer id, epoch 0 and sequences,
    attribute bit 4 clear."""

    def __init__(self, cluster: ClusterLog, producer_id: int):
        self.cluster = cluster
        self.producer_id = producer_id
        self.producer_epoch = 0
        self._seq: dict[tuple[str, int], int] = {}

    def send(self, topic: str, partition: int, n_records: int = 1, *, compressed: bool = False) -> int:
        """Append one batch; returns its base offset."""
        seq = self._seq.get((topic, partition), 0)
        info = self.cluster.append_data(
            topic,
            partition,
            n_records,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
            compressed=compressed,
        )
        self._seq[(topic, partition)] = _wrap_seq(seq, n_records)
        return info.base_offset


class TransactionalProducer:
    """One producer *instance* with a transactional id (create with :meth:`ClusterLog.producer`).

    Client API: :meth:`begin`, :meth:`send`, :meth:`commit`, :meth:`abort`. Coordinator-side
    events: :meth:`timeout_abort`, :meth:`fence` (a new instance), :meth:`expire`. Fault hooks:
    ``send(add_partition=False)`` (pre-KIP-890 broker accepts data for a partition never added),
    :meth:`zombie_send` (a late write that lands after the marker, KAFKA-9144),
    ``commit(markers=[...])`` / ``commit(markers=[])`` (markers pending after Prepare*).
    """

    def __init__(self, cluster: ClusterLog, meta: _TxnMeta, clock_skew_ms: int = 0):
        self.cluster = cluster
        self.meta = meta
        self.transactional_id = meta.transactional_id
        self.tv = meta.tv
        self.clock_skew_ms = clock_skew_ms
        self.producer_id = meta.producer_id
        self.producer_epoch = meta.producer_epoch
        self.fenced = False
        self.in_txn = False
        self._txn_tps: list[tuple[str, int]] = []
        self._seq: dict[tuple[str, int], int] = {}
        self._seq_owner = (self.producer_id, self.producer_epoch)

    # -- helpers ----------------------------------------------------------------------------------

    @property
    def txn_partition(self) -> int:
        return self.meta.txn_partition

    @property
    def coordinator_epoch(self) -> int:
        return self.cluster.coordinator_epoch(self.meta.txn_partition)

    def _usable(self) -> None:
        if self.fenced:
            raise ScenarioError(
                f"{self.transactional_id}: producer {self.producer_id}/{self.producer_epoch} is fenced"
            )
        if self.cluster._txn.get(self.transactional_id) is not self.meta:
            raise ScenarioError(f"{self.transactional_id}: transactional id no longer exists")

    def _sync_from_meta(self) -> None:
        self.producer_id, self.producer_epoch = self.meta.producer_id, self.meta.producer_epoch

    def _next_seq(self, tp: tuple[str, int], n: int) -> int:
        # the Java client restarts sequences at 0 whenever its (producer id, epoch) changes
        if self._seq_owner != (self.producer_id, self.producer_epoch):
            self._seq.clear()
            self._seq_owner = (self.producer_id, self.producer_epoch)
        seq = self._seq.get(tp, 0)
        self._seq[tp] = _wrap_seq(seq, n)
        return seq

    # -- client API -------------------------------------------------------------------------------

    def begin(self) -> None:
        """``beginTransaction()``: purely client-side; the coordinator learns about the
        transaction when the first partition is added."""
        self._usable()
        if self.in_txn:
            raise ScenarioError("transaction already in progress")
        self.in_txn = True
        self._txn_tps = []

    def add_partitions(self, tps: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for several partitions at once (one Ongoing record)."""
        self._usable()
        if not self.in_txn:
            self.begin()
        tps = list(tps)
        self.cluster._add_partitions(self.meta, tps)
        for tp in tps:
            if tp not in self._txn_tps:
                self._txn_tps.append(tp)

    def send(
        self,
        topic: str,
        partition: int,
        n_records: int = 1,
        *,
        compressed: bool = False,
        add_partition: bool = True,
        value_size: int | None = None,
        keys: list[bytes] | None = None,
    ) -> int:
        """Produce one transactional batch; returns its base offset. The partition is added to
        the transaction first (AddPartitionsToTxn; under TV2 implicitly by the leader), unless
        ``add_partition=False``: the pre-KIP-890 fault where a broker accepted data for a
        partition the coordinator does not list (rejected with ``partition_verification``)."""
        self._usable()
        if not self.in_txn:
            self.begin()
        tp = (topic, partition)
        if tp not in self._txn_tps:
            if add_partition or self.tv == 2:
                self.cluster._add_partitions(self.meta, [tp])
            elif self.cluster.partition_verification:
                raise ScenarioError(
                    f"{topic}-{partition}: INVALID_TXN_STATE (partition not added, KIP-890 verification)"
                )
            self._txn_tps.append(tp)
        return self._write(topic, partition, n_records, compressed, value_size, keys)

    def _write(
        self,
        topic: str,
        partition: int,
        n_records: int,
        compressed: bool,
        value_size: int | None,
        keys: list[bytes] | None,
    ) -> int:
        seq = self._next_seq((topic, partition), n_records)
        info = self.cluster.append_data(
            topic,
            partition,
            n_records,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
            transactional=True,
            compressed=compressed,
            value_size=value_size,
            keys=keys,
            clock_skew_ms=self.clock_skew_ms,
        )
        return info.base_offset

    def commit(self, *, markers: Iterable[tuple[str, int]] | None = None) -> None:
        """``commitTransaction()``: EndTxn(commit) → PrepareCommit, COMMIT markers, CompleteCommit.

        ``markers``: write markers only to these partitions (``[]`` = none): the rest stay
        pending and the coordinator remains in PrepareCommit until :meth:`ClusterLog.write_markers`.
        """
        self._end(COMMIT, markers)

    def abort(self, *, markers: Iterable[tuple[str, int]] | None = None, empty: bool = False) -> None:
        """``abortTransaction()``: EndTxn(abort) → PrepareAbort, ABORT markers, CompleteAbort.
        ``empty=True`` (TV2 only) sends EndTxn(abort) although nothing was added: PrepareAbort
        from Empty/Complete* with a bumped epoch and no markers."""
        self._end(ABORT, markers, empty=empty)

    def _end(self, result: int, markers: Iterable[tuple[str, int]] | None, empty: bool = False) -> None:
        self._usable()
        if not self.in_txn and not empty:
            raise ScenarioError("no transaction in progress")
        self.in_txn = False
        if not self.meta.partitions and not (empty and self.tv == 2):
            # nothing was added: the client completes locally, the coordinator writes nothing
            self._txn_tps = []
            return
        self.cluster._end(self.meta, result, markers=markers)
        self._sync_from_meta()
        self._txn_tps = []

    # -- coordinator side -------------------------------------------------------------------------

    def timeout_abort(self, *, force: bool = False) -> None:
        """The coordinator aborts the Ongoing transaction after ``transaction.timeout.ms``
        (``start + timeout < now``; ``force`` skips that check): PrepareAbort/markers/CompleteAbort
        with epoch E+1 (KAFKA-6119, every TV). This instance is fenced afterwards; call
        :meth:`reinit` to continue."""
        meta = self.meta
        if meta.state != "Ongoing":
            raise ScenarioError(
                f"{self.transactional_id}: only Ongoing transactions time out (state {meta.state})"
            )
        if not force and meta.start_ms + meta.timeout_ms >= self.cluster.now_ms:
            raise ScenarioError(f"{self.transactional_id}: transaction has not timed out yet")
        self.cluster._end(meta, ABORT, fence=True)
        self.fenced = True
        self.in_txn = False

    def reinit(self) -> None:
        """The same instance calls InitProducerId again (after a timeout abort or an abortable
        error): the epoch is bumped once more (E+2 after a timeout abort)."""
        if self.cluster._txn.get(self.transactional_id) is not self.meta:
            raise ScenarioError("transactional id no longer exists")
        self.cluster._init_existing(self.meta)
        self.fenced = False
        self.in_txn = False
        self._txn_tps = []
        self._sync_from_meta()

    def fence(self, **kwargs: Any) -> TransactionalProducer:
        """A new instance with the same transactional id calls InitProducerId: an open transaction
        is aborted with E+1 (markers E+1), the new instance gets E+2. Returns the new instance;
        this one is fenced."""
        new = self.cluster.producer(
            self.transactional_id, kwargs.pop("tv", self.tv), timeout_ms=self.meta.timeout_ms, **kwargs
        )
        self.fenced = True
        self.in_txn = False
        return new

    def expire(self, *, force: bool = False) -> None:
        """The coordinator expires this transactional id (tombstone)."""
        self.cluster.expire(self.transactional_id, force=force)

    # -- fault hooks ------------------------------------------------------------------------------

    def zombie_send(self, topic: str, partition: int, n_records: int = 1, *, compressed: bool = False) -> int:
        """A transactional batch from this instance's (producer id, epoch) that reaches the leader
        outside any transaction the coordinator knows: the late write of KAFKA-9144 (lands after
        the marker on a < 3.6 broker) or a zombie after fencing/expiration. No coordinator
        interaction; the broker's epoch check still applies."""
        if self.cluster.partition_verification:
            raise ScenarioError("INVALID_TXN_STATE: rejected by KIP-890 partition verification")
        return self._write(topic, partition, n_records, compressed, None, None)


# --- named scenarios ----------------------------------------------------------------------------


@dataclass
class Scenario:
    """A written scenario: where, the evaluation clock and the findings a detector must report.

    ``expected``: one dict per finding at ``as_of_ms`` with default thresholds
    (``max_timeout_ms`` 900000 + ``padding_ms`` 300000), keys ``status`` (late|hanging),
    ``cause``, ``topic``, ``partition``, ``producer_id``, ``producer_epoch`` (highest epoch of the
    producer on that partition), ``first_offset``, ``coordinator_epoch`` / ``coordinator_epoch_source``
    (detection.md §4 with the whole log dir read from offset 0) and ``verified``.
    """

    name: str
    root: Path
    as_of_ms: int
    expected: list[dict[str, Any]]
    description: str = ""
    cluster: ClusterLog | None = field(default=None, repr=False)
    notes: dict[str, Any] = field(default_factory=dict)


def finding(
    status: str,
    cause: str,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    first_offset: int,
    coordinator_epoch: int,
    coordinator_epoch_source: str,
    verified: bool = True,
) -> dict[str, Any]:
    """One expected finding (see :class:`Scenario`)."""
    return {
        "status": status,
        "cause": cause,
        "topic": topic,
        "partition": partition,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "first_offset": first_offset,
        "coordinator_epoch": coordinator_epoch,
        "coordinator_epoch_source": coordinator_epoch_source,
        "verified": verified,
    }


def _cluster(root: Path, seed: int, base_time_ms: int, **kw: Any) -> ClusterLog:
    kw.setdefault("coordinator_epoch", 3)
    return ClusterLog(root, base_time_ms, seed=seed, **kw)


def _finish(
    c: ClusterLog, name: str, expected: list[dict[str, Any]], description: str, **notes: Any
) -> Scenario:
    """Age everything past the alert threshold, then a last healthy transaction so that the
    newest timestamp (the evaluation clock) is a ``__transaction_state`` record: the coordinator
    view is read up to ``as_of_ms``."""
    c.advance(AGE_MS)
    hb = c.producer("txnwatch-heartbeat", 0)
    hb.begin()
    hb.send("heartbeat", 0, 1)
    hb.commit()
    c.flush()
    return Scenario(name, c.root, c.max_timestamp, expected, description, c, dict(notes))


def _find_ids(prefix: str, txn_partition: int, n: int, partitions: int = 50) -> list[str]:
    """Deterministic transactional ids that share one ``__transaction_state`` partition."""
    out, i = [], 0
    while len(out) < n:
        tid = f"{prefix}-{i}"
        if txn_state_partition(tid, partitions) == txn_partition:
            out.append(tid)
        i += 1
    return out


def scenario_commit(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """TV0 producer commits a transaction over three partitions (one gzip batch), with a plain
    and an idempotent producer on the same partitions. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=5)
    c.create_topic("payments", 1, leader_epoch=2)
    p = c.producer("order-service", 0)
    p.begin()
    p.send("orders", 0, 3)
    p.send("orders", 1, 2, compressed=True)
    p.send("payments", 0, 1)
    c.produce("orders", 0, 2)
    c.idempotent_producer().send("orders", 1, 4)
    p.send("orders", 0, 1)
    p.commit()
    return _finish(c, "commit", [], "TV0 commit across 3 partitions")


def scenario_client_abort(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """Client aborts: TV0 (same-epoch ABORT markers) and TV1 (flexible v1 values) commit then
    abort. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=1)
    p0 = c.producer("abort-v0", 0)
    p0.begin()
    p0.send("orders", 0, 2)
    p0.send("orders", 1, 1)
    p0.abort()
    p0.begin()
    p0.send("orders", 0, 1)
    p0.commit()
    p1 = c.producer("abort-v1", 1)
    p1.begin()
    p1.send("orders", 1, 3, compressed=True)
    p1.commit()
    p1.begin()
    p1.send("orders", 1, 1)
    p1.send("orders", 0, 1)
    p1.abort()
    return _finish(c, "client-abort", [], "client aborts under TV0 and TV1")


def scenario_timeout_abort(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """The coordinator aborts timed-out transactions with epoch E+1 (markers E+1) for a TV0 and a
    TV2 producer; both re-initialise (E+2) and commit again. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("events", 2, leader_epoch=4)
    a = c.producer("slow-v0", 0, timeout_ms=60_000)
    b = c.producer("slow-v2", 2, timeout_ms=30_000)
    a.begin()
    a.send("events", 0, 2)
    a.send("events", 1, 1)
    b.begin()
    b.send("events", 0, 1)
    c.advance(61_000)
    a.timeout_abort()
    b.timeout_abort()
    a.reinit()
    b.reinit()
    a.begin()
    a.send("events", 0, 1)
    a.commit()
    b.begin()
    b.send("events", 0, 2)
    b.commit()
    return _finish(c, "timeout-abort", [], "coordinator timeout aborts with epoch bump, TV0 and TV2")


def scenario_fenced(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """A new instance fences a producer with an open transaction: PrepareAbort E+1, ABORT
    markers E+1, CompleteAbort, Empty E+2; the new instance commits with E+2. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("ledger", 2, leader_epoch=6)
    old = c.producer("ledger-writer", 0)
    old.begin()
    old.send("ledger", 0, 2)
    old.send("ledger", 1, 2)
    new = old.fence()
    new.begin()
    new.send("ledger", 0, 1)
    new.commit()
    # the zombie's late write is rejected on partitions where the E+1 marker landed
    try:
        old.zombie_send("ledger", 1, 1)
    except ScenarioError:
        pass
    else:  # pragma: no cover - the broker check must reject it
        raise ScenarioError("fenced zombie write was accepted")
    return _finish(c, "fenced", [], "new instance fences an open transaction")


def scenario_tv2_epoch_walk(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """TV2: every commit/abort bumps the epoch; markers carry E+1 and the next transaction's data
    uses that same E+1; an abort without data (PrepareAbort from CompleteCommit) bumps too. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=7)
    p = c.producer("tv2-app", 2)
    p.begin()
    p.send("orders", 0, 2)
    p.commit()  # data e0, markers e1
    p.begin()
    p.send("orders", 0, 1)
    p.abort()  # data e1, markers e2
    p.begin()
    p.send("orders", 0, 1)
    p.send("orders", 1, 2)
    p.commit()  # e2 -> e3
    p.begin()
    p.send("orders", 1, 3, compressed=True)
    p.commit()  # e3 -> e4
    p.abort(empty=True)  # e4 -> e5, no markers
    p.begin()
    p.send("orders", 0, 1)
    p.commit()  # e5 -> e6
    return _finish(c, "tv2-epoch-walk", [], "TV2 epoch walk e0..e6")


def scenario_pid_rotation(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """TV2 epoch overflow: data with epoch 32766 is committed with PrepareCommit (pid P, epoch
    32767, NextProducerId P'), markers P/32767, CompleteCommit (P', epoch 0, PreviousProducerId P);
    the next transaction writes P'/0. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=2)
    p = c.producer("rotating-app", 2, initial_epoch=32764)
    for n in (1, 2, 1):
        p.begin()
        p.send("orders", 0, n)
        p.commit()  # 32764 -> 32765 -> 32766 -> rotation
    p.begin()
    p.send("orders", 0, 2)
    p.commit()
    return _finish(c, "pid-rotation", [], "TV2 producer-id rotation at epoch 32767")


def scenario_write_after_marker(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """KAFKA-9144: a TV0 producer commits; a late batch of the same epoch lands right after the
    COMMIT marker on orders-0 (broker < 3.6). The producer keeps working on orders-1 only.
    Expected: hanging / write-after-marker, coordinator epoch of the last marker (3)."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=5)
    p = c.producer("late-writer", 0)
    p.begin()
    p.send("orders", 0, 2)
    p.send("orders", 1, 2)
    p.commit()
    late = p.zombie_send("orders", 0, 1)
    c.produce("orders", 0, 1)
    for _ in range(2):
        p.begin()
        p.send("orders", 1, 1)
        p.commit()
    exp = [
        finding("hanging", "write-after-marker", "orders", 0, p.producer_id, 0, late, 3, "last-marker"),
    ]
    return _finish(c, "write-after-marker", exp, "late write after the COMMIT marker")


def scenario_failover_write_after_marker(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Like write-after-marker, but the coordinator fails over (epoch 3 → 4) after the marker:
    the legacy abort must use the coordinator epoch the broker holds (3, from the last marker)."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=1)
    p = c.producer("failover-late", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    c.failover_coordinator("failover-late")
    late = p.zombie_send("orders", 0, 2)
    p.begin()
    p.send("orders", 1, 1)
    p.commit()  # markers now carry coordinator epoch 4
    exp = [finding("hanging", "write-after-marker", "orders", 0, p.producer_id, 0, late, 3, "last-marker")]
    return _finish(c, "failover-write-after-marker", exp, "late write, coordinator failover 3->4")


def scenario_partition_never_added(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Pre-KIP-890 broker accepts transactional data for payments-0, which the producer never
    added; the commit writes markers only to orders-0. Expected: hanging /
    coordinator-finished-without-partition, log-start coordinator epoch 0."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=3)
    c.create_topic("payments", 1, leader_epoch=8)
    p = c.producer("forgetful-app", 0)
    p.begin()
    p.send("orders", 0, 2)
    first = p.send("payments", 0, 1, add_partition=False)
    p.send("payments", 0, 2, compressed=True, add_partition=False)
    p.commit()
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    exp = [
        finding(
            "hanging",
            "coordinator-finished-without-partition",
            "payments",
            0,
            p.producer_id,
            0,
            first,
            0,
            "log-start",
        )
    ]
    return _finish(c, "partition-never-added", exp, "data for a partition never added to the transaction")


def scenario_txn_id_expired(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """A zombie batch opened a transaction on audit-0, a partition the coordinator never knew;
    a week later the coordinator expires the (CompleteCommit) id together with another idle id
    of the same ``__transaction_state`` partition (one tombstone batch with two records).
    Expected: hanging / coordinator-unaware."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=2)
    c.create_topic("audit", 1, leader_epoch=0)
    tid, other = _find_ids("legacy-app", 17, 2)
    p = c.producer(tid, 0)
    q = c.producer(other, 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    first = p.zombie_send("audit", 0, 2)
    q.begin()
    q.send("orders", 0, 1)
    q.commit()
    c.advance(TXN_ID_EXPIRATION_MS)
    c.expire(tid, other)
    exp = [finding("hanging", "coordinator-unaware", "audit", 0, p.producer_id, 0, first, 0, "log-start")]
    return _finish(c, "txn-id-expired", exp, "transactional id expired while a zombie txn is open")


def scenario_markers_pending(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """PrepareCommit is written but the markers never are (broker/network trouble). Both
    partitions are late / markers-pending (never an abort); orders-0 had an earlier marker."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=4)
    p = c.producer("stuck-markers", 0)
    p.begin()
    p.send("orders", 0, 1)
    p.commit()
    p.begin()
    f0 = p.send("orders", 0, 2)
    f1 = p.send("orders", 1, 1)
    p.send("orders", 0, 1)
    p.commit(markers=[])
    pid = p.producer_id
    exp = [
        finding("late", "markers-pending", "orders", 0, pid, 0, f0, 3, "last-marker"),
        finding("late", "markers-pending", "orders", 1, pid, 0, f1, 0, "log-start"),
    ]
    return _finish(c, "markers-pending", exp, "PrepareCommit without markers")


def scenario_coordinator_stuck(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """An Ongoing transaction (timeout 60 s) that the coordinator never aborts: 25+ minutes later
    ``now - start > timeout + padding``. Expected: late / coordinator-stuck."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 1, leader_epoch=0)
    p = c.producer("never-timed-out", 1)
    p.begin()
    first = p.send("orders", 0, 3)
    exp = [finding("late", "coordinator-stuck", "orders", 0, p.producer_id, 0, first, 0, "log-start")]
    return _finish(c, "coordinator-stuck", exp, "Ongoing transaction the coordinator does not abort")


def scenario_long_transaction(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """A producer with ``transaction.timeout.ms`` = 1 h (broker max raised) whose clock is 10 min
    behind the coordinator's. The threshold is max(900000, 3600000) + 300000 = 3.9 M ms; at the
    evaluation time ``now - first_ts`` ≈ 4.3 M ms (a finding) but ``now - start`` ≈ 3.7 M ms ≤
    timeout + padding (not stuck). Expected: late / long-transaction."""
    timeout, skew = 3_600_000, -600_000
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("reports", 1, leader_epoch=1)
    p = c.producer("nightly-report", 0, timeout_ms=timeout, clock_skew_ms=skew)
    p.begin()
    first = p.send("reports", 0, 5)
    start = c.txn_metadata("nightly-report").start_ms
    c.advance(timeout + DEFAULT_PADDING_MS - 100_000 - AGE_MS)
    exp = [finding("late", "long-transaction", "reports", 0, p.producer_id, 0, first, 0, "log-start")]
    sc = _finish(c, "long-transaction", exp, "long transaction within its (raised) timeout + padding")
    first_ts = c.batches("reports", 0)[0].base_timestamp
    if not sc.as_of_ms - start <= timeout + DEFAULT_PADDING_MS < sc.as_of_ms - first_ts:  # pragma: no cover
        raise ScenarioError("long-transaction timing does not satisfy its own premise")
    return sc


def scenario_coordinator_failover(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """Coordinator failover mid-commit: PrepareCommit under epoch 3, COMMIT reaches orders-0 with
    coordinator epoch 3, then the ``__transaction_state`` leader changes (epoch 4); the new
    coordinator resends markers to both partitions (a duplicate on orders-0) and writes
    CompleteCommit with partitionLeaderEpoch 4. Later transactions use 4. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("orders", 2, leader_epoch=9)
    p = c.producer("failover-app", 0)
    other = c.producer("bystander", 2)
    p.begin()
    p.send("orders", 0, 2)
    p.send("orders", 1, 1)
    other.begin()
    other.send("orders", 1, 1)
    p.commit(markers=[("orders", 0)])
    c.failover_coordinator("failover-app")
    c.write_markers("failover-app")
    other.commit()
    c.bump_leader_epoch("orders", 1)  # a data-partition leader change too
    p.begin()
    p.send("orders", 1, 1)
    p.commit()
    return _finish(c, "coordinator-failover", [], "coordinator epoch bump 3->4 during a commit")


def scenario_compacted_empty_control(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """A compacted changelog: the cleaner removed the data of a committed (superseded) and of an
    aborted transaction and, past the delete horizon, their marker records, leaving count-0
    control batches. A later transaction in the active segment commits normally. No finding."""
    c = _cluster(root, seed, base_time_ms)
    c.create_topic("store-changelog", 1, leader_epoch=2, compacted=True)
    p = c.producer("stream-app", 0)
    q = c.producer("stream-app-2", 1)
    c.produce("store-changelog", 0, 1)
    p.begin()
    p.send("store-changelog", 0, 3)
    q.begin()
    q.send("store-changelog", 0, 2)
    p.send("store-changelog", 0, 1)
    p.commit()
    q.abort()
    c.roll("store-changelog", 0)
    c.produce("store-changelog", 0, 1)
    p.begin()
    p.send("store-changelog", 0, 2)
    p.commit()
    c.roll("store-changelog", 0)
    c.produce("store-changelog", 0, 1)
    c.compact("store-changelog", 0, delete_horizon_passed=True)
    p.begin()
    p.send("store-changelog", 0, 1)
    p.commit()
    return _finish(c, "compacted-empty-control", [], "empty control batches left by the cleaner")


def scenario_txn_state_compacted(
    root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000
) -> Scenario:
    """``__transaction_state`` compacted: older records per transactional id removed, an expired
    id's tombstone removed after the delete horizon. Findings survive compaction: a partition
    never added (hanging / coordinator-finished-without-partition) and a zombie transaction of the
    vanished id (hanging / coordinator-unaware)."""
    c = _cluster(root, seed, base_time_ms, segment_bytes=1 << 20)
    c.create_topic("orders", 2, leader_epoch=3)
    ids = _find_ids("compacted-app", 7, 3)
    busy = c.producer(ids[0], 0)
    forgetful = c.producer(ids[1], 1)
    gone = c.producer(ids[2], 0)
    for _ in range(3):
        busy.begin()
        busy.send("orders", 0, 1)
        busy.commit()
    forgetful.begin()
    forgetful.send("orders", 0, 1)
    nf = forgetful.send("orders", 1, 1, add_partition=False)
    forgetful.commit()
    gone.begin()
    gone.send("orders", 0, 1)
    gone.commit()
    zf = gone.zombie_send("orders", 1, 1)
    c.advance(TXN_ID_EXPIRATION_MS)
    c.expire(ids[2])
    c.roll("__transaction_state", 7)
    busy.begin()
    busy.send("orders", 0, 1)
    busy.commit()
    c.compact("__transaction_state", 7, delete_horizon_passed=True)
    exp = [
        finding(
            "hanging",
            "coordinator-finished-without-partition",
            "orders",
            1,
            forgetful.producer_id,
            0,
            nf,
            0,
            "log-start",
        ),
        finding("hanging", "coordinator-unaware", "orders", 1, gone.producer_id, 0, zf, 0, "log-start"),
    ]
    return _finish(c, "txn-state-compacted", exp, "__transaction_state after compaction")


def scenario_healthy_mix(root: Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000) -> Scenario:
    """Everything that must *not* alert: TV0/TV1/TV2 producers, commits and aborts, a timeout
    abort, fencing, idempotent and plain batches, gzip, a LogAppendTime topic, legacy v1
    messages from an old broker, leader changes, small segments with snapshots at every roll,
    and a few transactions still open but younger than the threshold."""
    c = _cluster(root, seed, base_time_ms, segment_bytes=4096, snapshot_on_roll=True)
    rng = random.Random(seed)
    c.create_topic("orders", 3, leader_epoch=5)
    c.create_topic("clicks", 2, leader_epoch=1, log_append_time=True)
    c.produce_legacy("orders", 2, 3, magic=1)
    producers = [c.producer(f"healthy-{i}", i % 3) for i in range(6)]
    idem = c.idempotent_producer()
    tps = [("orders", 0), ("orders", 1), ("orders", 2), ("clicks", 0), ("clicks", 1)]
    for rnd in range(40):
        p = producers[rng.randrange(len(producers))]
        p.begin()
        for tp in rng.sample(tps, rng.randint(1, 3)):
            p.send(*tp, rng.randint(1, 6), compressed=rng.random() < 0.3)
        if rng.random() < 0.2:
            idem.send(*rng.choice(tps), rng.randint(1, 4))
        if rng.random() < 0.2:
            c.produce(*rng.choice(tps), rng.randint(1, 3), compressed=rng.random() < 0.5)
        if rng.random() < 0.8:
            p.commit()
        else:
            p.abort()
        if rnd == 15:
            c.bump_leader_epoch("orders", 1)
        if rnd == 25:
            i = rng.randrange(len(producers))
            producers[i].begin()
            producers[i].send("orders", 0, 1)
            producers[i] = producers[i].fence()
        if rnd == 30:
            s = producers[0]
            s.begin()
            s.send("clicks", 1, 2)
            c.advance(61_000)
            s.timeout_abort()
            s.reinit()
        c.advance(rng.randint(0, 2_000))
    c.advance(AGE_MS)
    # still open at the end but young: "open", not a finding
    for p in producers[:3]:
        p.begin()
        p.send("orders", 0, 1)
    c.advance(1_000)
    hb = c.producer("txnwatch-heartbeat", 0)
    hb.begin()
    hb.send("heartbeat", 0, 1)
    hb.commit()
    c.flush()
    return Scenario("healthy-mix", c.root, c.max_timestamp, [], "healthy mix, nothing to report", c)


def scenario_random_mix(
    root: Path,
    *,
    seed: int = 0,
    base_time_ms: int = 1_700_000_000_000,
    target_bytes: int = 200 << 20,
    topics: int = 4,
    partitions: int = 4,
    producers: int = 40,
    segment_bytes: int = 4 << 20,
    records_per_batch: tuple[int, ...] = (1, 5, 20, 50, 100, 200),
    value_sizes: tuple[int, ...] = (100, 400),
    faults: int = 1,
) -> Scenario:
    """A large randomized cluster log for benchmarks: ``target_bytes`` of data over
    ``topics`` × ``partitions`` partitions from ``producers`` transactional producers (TV0/1/2),
    idempotent and plain producers, gzip on some batches, occasional timeout aborts and fencing.
    ``faults`` instances of each fault kind are injected at the start (write-after-marker,
    partition-never-added, markers-pending, coordinator-stuck) with dedicated transactional ids
    that are never used again, so their expected findings are known exactly. Batches are built
    from cached record blobs (bytes joins), so writing runs at disk speed."""
    c = _cluster(
        root,
        seed,
        base_time_ms,
        segment_bytes=segment_bytes,
        coordinator_epochs={n: (n * 7 + seed) % 6 for n in range(50)},
    )
    rng = random.Random(seed)
    names = [f"topic-{i}" for i in range(topics)]
    for t in names:
        c.create_topic(
            t, partitions, leader_epoch=rng.randint(0, 9), log_append_time=(t == names[-1] and topics > 1)
        )
    tps = [(t, p) for t in names for p in range(partitions)]
    expected: list[dict[str, Any]] = []

    def fault_tp() -> tuple[str, int]:
        return tps[rng.randrange(len(tps))]

    for k in range(faults):
        # write-after-marker
        p = c.producer(f"fault-late-{k}", 0)
        tp = fault_tp()
        p.begin()
        p.send(*tp, 2)
        p.commit()
        off = p.zombie_send(*tp, 1)
        ap = c.abort_params(*tp, p.producer_id)
        expected.append(
            finding(
                "hanging",
                "write-after-marker",
                *tp,
                p.producer_id,
                ap["producer_epoch"],
                off,
                ap["coordinator_epoch"],
                ap["coordinator_epoch_source"],
            )
        )
        # partition-never-added: make sure the two partitions differ
        p = c.producer(f"fault-unadded-{k}", 1)
        tp1 = fault_tp()
        tp2 = next(x for x in tps[rng.randrange(len(tps)) :] + tps if x != tp1)
        p.begin()
        p.send(*tp1, 1)
        off = p.send(*tp2, 3, add_partition=False)
        p.commit()
        ap = c.abort_params(*tp2, p.producer_id)
        expected.append(
            finding(
                "hanging",
                "coordinator-finished-without-partition",
                *tp2,
                p.producer_id,
                ap["producer_epoch"],
                off,
                ap["coordinator_epoch"],
                ap["coordinator_epoch_source"],
            )
        )
        # markers-pending
        p = c.producer(f"fault-pending-{k}", 0)
        tp = fault_tp()
        p.begin()
        off = p.send(*tp, 2)
        p.commit(markers=[])
        ap = c.abort_params(*tp, p.producer_id)
        expected.append(
            finding(
                "late",
                "markers-pending",
                *tp,
                p.producer_id,
                ap["producer_epoch"],
                off,
                ap["coordinator_epoch"],
                ap["coordinator_epoch_source"],
            )
        )
        # coordinator-stuck
        p = c.producer(f"fault-stuck-{k}", 0)
        tp = fault_tp()
        p.begin()
        off = p.send(*tp, 1)
        ap = c.abort_params(*tp, p.producer_id)
        expected.append(
            finding(
                "late",
                "coordinator-stuck",
                *tp,
                p.producer_id,
                ap["producer_epoch"],
                off,
                ap["coordinator_epoch"],
                ap["coordinator_epoch_source"],
            )
        )

    prods = [
        c.producer(f"app-{i}", rng.choice((0, 0, 1, 2)), initial_epoch=rng.randint(0, 50))
        for i in range(producers)
    ]
    idems = [c.idempotent_producer() for _ in range(max(1, producers // 8))]
    while c.bytes_written < target_bytes:
        r = rng.random()
        if r < 0.1:
            idems[rng.randrange(len(idems))].send(
                *tps[rng.randrange(len(tps))], rng.choice(records_per_batch), compressed=rng.random() < 0.3
            )
            continue
        if r < 0.2:
            c.append_data(
                *tps[rng.randrange(len(tps))],
                rng.choice(records_per_batch),
                value_size=rng.choice(value_sizes),
                compressed=rng.random() < 0.3,
            )
            continue
        i = rng.randrange(len(prods))
        p = prods[i]
        p.begin()
        for tp in rng.sample(tps, rng.randint(1, 3)):
            for _ in range(rng.randint(1, 3)):
                p.send(
                    *tp,
                    rng.choice(records_per_batch),
                    value_size=rng.choice(value_sizes),
                    compressed=rng.random() < 0.25,
                )
        x = rng.random()
        if x < 0.85:
            p.commit()
        elif x < 0.97:
            p.abort()
        elif x < 0.985:
            c.advance(p.meta.timeout_ms + 1)
            p.timeout_abort()
            p.reinit()
        else:
            prods[i] = p.fence()
    return _finish(
        c, "random-mix", expected, f"randomized mix, {c.bytes_written} bytes", bytes_written=c.bytes_written
    )


SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "commit": scenario_commit,
    "client-abort": scenario_client_abort,
    "timeout-abort": scenario_timeout_abort,
    "fenced": scenario_fenced,
    "tv2-epoch-walk": scenario_tv2_epoch_walk,
    "pid-rotation": scenario_pid_rotation,
    "write-after-marker": scenario_write_after_marker,
    "failover-write-after-marker": scenario_failover_write_after_marker,
    "partition-never-added": scenario_partition_never_added,
    "txn-id-expired": scenario_txn_id_expired,
    "markers-pending": scenario_markers_pending,
    "coordinator-stuck": scenario_coordinator_stuck,
    "long-transaction": scenario_long_transaction,
    "coordinator-failover": scenario_coordinator_failover,
    "compacted-empty-control": scenario_compacted_empty_control,
    "txn-state-compacted": scenario_txn_state_compacted,
    "healthy-mix": scenario_healthy_mix,
    "random-mix": scenario_random_mix,
}

# Scenarios whose ``expected`` is non-empty.
POSITIVE_SCENARIOS = frozenset(
    {
        "write-after-marker",
        "failover-write-after-marker",
        "partition-never-added",
        "txn-id-expired",
        "markers-pending",
        "coordinator-stuck",
        "long-transaction",
        "txn-state-compacted",
        "random-mix",
    }
)


def write_scenario(
    name: str, root: str | Path, *, seed: int = 0, base_time_ms: int = 1_700_000_000_000, **params: Any
) -> Scenario:
    """Write the named scenario under ``root`` (must be empty or absent) and return it.
    ``params`` go to the scenario function (e.g. ``target_bytes`` for ``random-mix``)."""
    try:
        fn = SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise ScenarioError(f"{root} is not empty")
    return fn(root, seed=seed, base_time_ms=base_time_ms, **params)
