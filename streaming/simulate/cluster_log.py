"""The simulated cluster: broker-shaped Kafka log directories for tests, the demo and benchmarks.

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

Clients are in :mod:`streaming.simulate.producers`; named scenarios that build on this writer are
in :mod:`streaming.simulate.scenarios`.
"""

from __future__ import annotations

import gzip
import random
import string
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from streaming.simulate.broker_state import (
    DATA,
    DELETE_RETENTION_MS,
    EMPTY_CONTROL,
    EPOCH_MAX,
    TXN_ID_EXPIRATION_MS,
    TXN_STATE_TOPIC,
    BatchInfo,
    ProducerStateEntry,
    ScenarioError,
    TxnMeta,
    apply_batch,
    java_hashmap_order,
    segment_name,
)
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
    txn_state_partition,
)
from streaming.simulate.producers import IdempotentProducer, TransactionalProducer

_ATTR_LOG_APPEND_TIME = 0x08
# A log dir's end-offset checkpoints (ReplicaManager.HighWatermarkFilename,
# LogManager.RecoveryPointCheckpointFile); named here so the simulator imports nothing of the product.
END_CHECKPOINT_FILES = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint")

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
        "log_start",
        "leader_clock_skew_ms",
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
        self.state: dict[int, ProducerStateEntry] = {}
        self.compacted = compacted
        self.log_append_time = log_append_time
        self.is_txn_log = topic == TXN_STATE_TOPIC
        self.log_start = 0
        self.leader_clock_skew_ms = 0  # the leader broker's clock minus the cluster's

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

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
        self._txn_dirs_trimmed = False  # keep_only_txn_partitions ran: never recreate the others
        self.coordinator_epoch_default = coordinator_epoch
        self._coordinator_epochs = dict(coordinator_epochs or {})
        # __transaction_state partitions whose leader epoch moved without a coordinator change:
        # partition -> the epoch the (unchanged) coordinator keeps using
        self._kept_coordinator_epoch: dict[int, int] = {}
        self._next_pid = first_producer_id
        self.rng = random.Random(seed)
        self.pool = _RecordPool(seed)
        self.write_producer_id_tags = write_producer_id_tags
        self.partition_verification = partition_verification
        self.snapshot_on_roll = snapshot_on_roll
        self.flush_bytes = flush_bytes
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._topics: dict[str, dict[str, Any]] = {}
        self._txn: dict[str, TxnMeta] = {}
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
        leader_clock_skew_ms: int = 0,
    ) -> None:
        """Declare a topic: ``compacted`` (``cleanup.policy=compact``, needed by :meth:`compact`),
        ``log_append_time`` (``message.timestamp.type=LogAppendTime``: the leader stamps
        maxTimestamp and sets attribute bit 3), initial data-partition ``leader_epoch``,
        ``leader_clock_skew_ms``: how far its leaders' clocks run ahead of the cluster clock (brokers
        do not share a clock); the leader stamps the markers it writes with its own clock
        (``MemoryRecords.withEndTransactionMarker`` uses ``System.currentTimeMillis()``)."""
        self._topics[topic] = dict(
            partitions=partitions,
            leader_epoch=leader_epoch,
            compacted=compacted,
            log_append_time=log_append_time,
        )
        for p in range(partitions):
            self._part(topic, p).leader_clock_skew_ms = leader_clock_skew_ms

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
        """Coordinator epoch of a ``__transaction_state`` partition = its leader epoch (§5.6),
        unless :meth:`bump_txn_leader_epoch_only` moved the leader epoch under a coordinator that
        kept running with its old epoch."""
        kept = self._kept_coordinator_epoch.get(txn_partition)
        return kept if kept is not None else self._part(TXN_STATE_TOPIC, txn_partition).leader_epoch

    def bump_txn_leader_epoch_only(self, transactional_id_or_partition: str | int) -> int:
        """A ``__transaction_state`` partition's leader epoch goes up while its coordinator stays
        (ZooKeeper clusters, 2.x: a reassignment that keeps the leader makes ``KafkaController``
        send a LeaderAndIsr with a bumped epoch, ``Partition.makeLeader`` applies it, and the
        transaction coordinator, still loaded, keeps its coordinator epoch; detection.md §4 on
        the withdrawn "coordinator-partition" rule). Later ``__transaction_state`` batches carry
        the higher partitionLeaderEpoch; the markers keep the old coordinator epoch."""
        n = (
            txn_state_partition(transactional_id_or_partition, self.txn_partitions)
            if isinstance(transactional_id_or_partition, str)
            else transactional_id_or_partition
        )
        self._kept_coordinator_epoch.setdefault(n, self.coordinator_epoch(n))
        return self.bump_leader_epoch(TXN_STATE_TOPIC, n)

    def failover_coordinator(self, transactional_id_or_partition: str | int, to: int | None = None) -> int:
        """A new broker becomes coordinator of a ``__transaction_state`` partition: its leader
        epoch (and so the coordinator epoch in later records and markers) goes up."""
        n = (
            txn_state_partition(transactional_id_or_partition, self.txn_partitions)
            if isinstance(transactional_id_or_partition, str)
            else transactional_id_or_partition
        )
        self._kept_coordinator_epoch.pop(n, None)  # a real election: the new coordinator uses the new epoch
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
        apply_batch(part.state, info)
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
        ts = self._tick() + part.leader_clock_skew_ms
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
            meta = TxnMeta(
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

    def txn_metadata(self, transactional_id: str) -> TxnMeta | None:
        return self._txn.get(transactional_id)

    def _write_state(
        self,
        meta: TxnMeta,
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

    def _init_existing(self, meta: TxnMeta) -> None:
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

    def _add_partitions(self, meta: TxnMeta, tps: Iterable[tuple[str, int]]) -> None:
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
        meta: TxnMeta,
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
        directories and new segments as needed). Safe to call repeatedly while readers run.

        Once the cluster has a ``__transaction_state`` partition, all ``txn_partitions`` of them
        exist on disk, empty ones with an empty active segment: the broker creates the whole topic
        on the first FindCoordinator (``TransactionCoordinator``/``AutoTopicCreationManager``), and
        a broker's log dir holds every partition it replicates, written to or not. A reader can
        then tell a complete coordinator view (detection.md §3.1) from one broker's partial set
        (:meth:`keep_only_txn_partitions`)."""
        if not self._txn_dirs_trimmed and any(t == TXN_STATE_TOPIC for t, _ in self._partitions):
            for n in range(self.txn_partitions):
                d = self.root / f"{TXN_STATE_TOPIC}-{n}"
                if not d.exists():
                    d.mkdir(parents=True)
                    (d / segment_name(0)).touch()
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
    ) -> dict[int, ProducerStateEntry]:
        """Broker producer state after applying the batches with offsets < ``at_offset``."""
        part = self._part(topic, partition)
        if at_offset is None or at_offset >= part.next_offset:
            # the broker's live state (compaction never rewrites it, a replay after cleaning would)
            return {
                pid: ProducerStateEntry(**{k: getattr(e, k) for k in e.__slots__})
                for pid, e in part.state.items()
            }
        state: dict[int, ProducerStateEntry] = {}
        for b in part.batches:
            if b.last_offset >= at_offset:
                break
            apply_batch(state, b)
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

    # -- retention, broker restart, one broker's share ---------------------------------------------

    def delete_segments_below(self, topic: str, partition: int, offset: int) -> int:
        """Retention on a data partition: delete every segment that lies wholly below ``offset``
        (its successor's base offset ≤ ``offset``; the active segment always stays), and the
        producer snapshot named for each deleted segment. Kafka: ``UnifiedLog.deleteSegments``
        raises the log start to the next segment's base offset (``incrementStartOffset``) and
        ``deleteProducerSnapshots`` removes ``<segment base>.snapshot`` of each deleted segment
        (``ProducerStateManager.removeAndMarkSnapshotForDeletion``). The broker's in-memory
        producer state is untouched (``onLogStartOffsetIncremented`` keeps open transactions).
        Returns the new log start."""
        part = self._part(topic, partition)
        self.flush()
        while len(part.segments) > 1 and part.segments[1] <= offset:
            base = part.segments.pop(0)
            del part.segment_size[base]
            (part.dir / segment_name(base)).unlink()
            (part.dir / segment_name(base, ".snapshot")).unlink(missing_ok=True)
        part.log_start = max(part.log_start, part.segments[0])
        return part.log_start

    def delete_records(self, topic: str, partition: int, offset: int) -> None:
        """DeleteRecords (``kafka-delete-records.sh``): the log start moves to ``offset``, inside a
        segment (``UnifiedLog.maybeIncrementLogStartOffset``); no file changes until retention,
        but the log dir's ``log-start-offset-checkpoint`` records it (:meth:`restart`)."""
        part = self._part(topic, partition)
        if not part.log_start <= offset <= part.next_offset:
            raise ScenarioError(f"{part.name}: log start {offset} outside [{part.log_start}, {part.next_offset}]")
        part.log_start = offset

    def restart(self) -> None:
        """A clean broker restart, as it leaves the log dir (Kafka 2.8+ ``LogLoader``/``UnifiedLog``):

        * clean shutdown: ``UnifiedLog.close`` takes a producer snapshot at every data
          partition's log end offset;
        * ``LogManager.checkpointLogStartOffsetsInDir`` writes ``log-start-offset-checkpoint``
          (version 0, count, ``topic partition offset`` lines) for the partitions whose log start
          lies above their first segment's base offset;
        * at load, ``ProducerStateManager.removeStraySnapshots`` deletes every snapshot not named
          for a segment except the newest stray one above the last segment's base, and
          ``truncateAndReload`` deletes the snapshots at or below the log start
          (``max(checkpoint, first segment base)``, ``LogLoader.load``) and above the log end.
        """
        self.flush()
        checkpoint: list[str] = []
        for part in self._partitions.values():
            if not part.segments:
                continue
            if not part.is_txn_log:
                self.write_snapshot(part.topic, part.partition, part.next_offset)
            if part.log_start > part.segments[0]:
                checkpoint.append(f"{part.topic} {part.partition} {part.log_start}")
            bases = set(part.segments)
            snaps = sorted(int(f.name[:20]) for f in part.dir.glob("*.snapshot"))
            strays = [o for o in snaps if o not in bases]
            keep_stray = strays[-1] if strays and strays[-1] > part.segments[-1] else None
            for o in snaps:
                stray = o not in bases and o != keep_stray
                if stray or o <= part.log_start or o > part.next_offset:
                    (part.dir / segment_name(o, ".snapshot")).unlink()
        (self.root / "log-start-offset-checkpoint").write_text(
            "\n".join(["0", str(len(checkpoint)), *sorted(checkpoint)]) + "\n")

    def keep_only_txn_partitions(self, keep: Iterable[int]) -> list[int]:
        """One broker's log dir: only the ``__transaction_state`` partitions it replicates stay on
        disk (the others' folders are removed). Call after the last write. Returns the removed
        partition numbers."""
        self.flush()
        self._txn_dirs_trimmed = True
        keep = set(keep)
        removed = []
        for n in range(self.txn_partitions):
            d = self.root / f"{TXN_STATE_TOPIC}-{n}"
            if n not in keep and d.exists():
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()
                removed.append(n)
        if (self.root / END_CHECKPOINT_FILES[0]).exists():
            self.write_end_checkpoints()  # the broker checkpoints only the partitions it hosts
        return sorted(removed)

    def write_end_checkpoints(self) -> None:
        """The log dir's end-offset checkpoints, as a cleanly stopped broker leaves them: the high
        watermark of every partition it hosts in ``replication-offset-checkpoint``
        (``ReplicaManager.checkpointHighWatermarks``; a single-replica log's high watermark is its
        log end offset) and the recovery points in ``recovery-point-offset-checkpoint``
        (``LogManager.checkpointRecoveryOffsetsInDir``; after a clean shutdown the log end offset).
        Format of ``OffsetCheckpointFile``: version 0, count, ``topic partition offset`` lines.
        They prove to a reader of copied files where each log ended (detection.md §0)."""
        self.flush()
        ends: dict[tuple[str, int], int] = {}
        for d in self.root.iterdir():
            if d.is_dir() and d.name.startswith(f"{TXN_STATE_TOPIC}-"):
                ends[(TXN_STATE_TOPIC, int(d.name.rsplit("-", 1)[1]))] = 0  # hosted, never written
        for part in self._partitions.values():
            if part.dir.exists():
                ends[(part.topic, part.partition)] = part.next_offset
        lines = [f"{t} {p} {o}" for (t, p), o in sorted(ends.items())]
        for name in END_CHECKPOINT_FILES:
            (self.root / name).write_text("\n".join(["0", str(len(lines)), *lines]) + "\n")

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
