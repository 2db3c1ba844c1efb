"""Shared vocabulary of the decoders: column names, control types, transaction states.

Everything a decoder produces is expressed with the names below, whether it read binary segments
(``udfs.record_batch``), ``kafka-dump-log.sh`` text (``udfs.dump_text``) or snapshot files
(``udfs.snapshot``). That is what lets the binary path and the dump path yield identical events.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- record-batch header table -------------------------------------------------------------
# A decoded segment (or Fetch response records field) is a "batch table": a dict mapping each
# name below to a 1-D numpy array, one element per magic-2 batch, in file order.
BATCH_COLUMNS: dict[str, str] = {
    "position": "int64",  # byte position of the batch in the scanned buffer (+ base_position)
    "base_offset": "int64",  # baseOffset, offset of the first record
    "last_offset": "int64",  # baseOffset + lastOffsetDelta
    "batch_size": "int32",  # 12 + batchLength: bytes the batch occupies on disk
    "partition_leader_epoch": "int32",  # leader epoch of *this* partition at append time
    "magic": "int8",  # always 2 in the table (legacy entries are only counted)
    "crc": "uint32",  # stored CRC-32C
    "crc_valid": "int8",  # 1 valid, 0 invalid, -1 not checked
    "attributes": "int16",
    "compression": "int8",  # attributes bits 0-2: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
    "timestamp_type": "int8",  # attributes bit 3: 0 CreateTime, 1 LogAppendTime
    "is_transactional": "bool",  # attributes bit 4
    "is_control": "bool",  # attributes bit 5
    "has_delete_horizon": "bool",  # attributes bit 6 (KIP-534, 3.1+)
    "base_timestamp": "int64",  # raw baseTimestamp (= deleteHorizonMs when bit 6 is set)
    "first_timestamp": "int64",  # timestamp of the first record as far as the header tells
    "max_timestamp": "int64",
    "producer_id": "int64",
    "producer_epoch": "int16",
    "base_sequence": "int32",
    "record_count": "int32",
    "control_type": "int16",  # CONTROL_* below; -1 for data batches
    "coordinator_epoch": "int32",  # from the EndTxnMarker value of ABORT/COMMIT, else -1
}

CONTROL_NONE = -1  # not a control batch
CONTROL_EMPTY = -2  # control batch with record_count 0 (compacted topic): type unknown
CONTROL_UNREADABLE = -3  # control record present but malformed (an error entry says why)
CONTROL_NOT_PRINTED = -4  # a dump printed the control batch but not its record: type unknown
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
# 2..6 are KRaft control types (LEADER_CHANGE, SNAPSHOT_HEADER, ...); other values are UNKNOWN.
CONTROL_NAMES = {
    CONTROL_EMPTY: "EMPTY",
    CONTROL_UNREADABLE: "UNREADABLE",
    CONTROL_NOT_PRINTED: "NOT_PRINTED",
    CONTROL_ABORT: "ABORT",
    CONTROL_COMMIT: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def control_name(code: int) -> str | None:
    """Name of a control type code; None for data batches, ``UNKNOWN`` for undefined codes."""
    if code == CONTROL_NONE:
        return None
    return CONTROL_NAMES.get(int(code), "UNKNOWN")


# --- __transaction_state ----------------------------------------------------------------------
# TransactionStatus codes persisted by the coordinator (kafka-formats.md §5.5).
TXN_STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}
TXN_STATE_CODES = {v: k for k, v in TXN_STATES.items()}
OPEN_TXN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


@dataclass(frozen=True, slots=True)
class DecodeError:
    """Something a decoder could not read. Never raised: returned next to what *was* read.

    ``position`` is a byte position for binary inputs and a 1-based line number for text inputs
    (``unit`` says which); ``source`` names the file when known.
    """

    position: int
    reason: str
    source: str | None = None
    unit: str = "byte"
    base_offset: int | None = None
    # The batch failed its CRC: Kafka never applies it (``LogSegment.recover`` ->
    # ``RecordBatch.ensureValid``), so it is a gap at ``base_offset``, not a missing line.
    crc: bool = False

    def describe(self) -> str:
        where = f"{self.source or '<input>'} {self.unit} {self.position}"
        if self.base_offset is not None:
            where += f" (offset {self.base_offset})"
        return f"{where}: {self.reason}"


# Keys of one decoded __transaction_state record (``udfs.txn_log.decode_txn_log_segment``) and of
# the dump parser's equivalent. Absent values are None; ``txn_partitions`` keeps null (None, state
# Empty) and empty (``[]``, Complete*) apart and lists "topic-partition" strings.
TXN_RECORD_KEYS = (
    "offset",  # Kafka offset of the record in the __transaction_state partition
    "position",  # byte position of its batch (binary) or line number (dump)
    "timestamp",  # record timestamp (coordinator wall clock at append)
    "coordinator_epoch",  # the batch's partitionLeaderEpoch (kafka-formats.md §5.6)
    "transactional_id",
    "tombstone",  # null value: the coordinator expired the transactional id
    "key_version",
    "value_version",  # 0 or 1 (flexible); None for tombstones
    "producer_id",
    "producer_epoch",
    "txn_timeout_ms",
    "txn_state",  # name, e.g. "Ongoing"
    "txn_partitions",  # list of "topic-partition" or None
    "txn_last_update_ts",
    "txn_start_ts",
    "prev_producer_id",  # v1 tag 0 (-1 default)
    "next_producer_id",  # v1 tag 1 (-1 default)
    "client_txn_version",  # v1 tag 2 (0 default)
    "next_producer_epoch",  # v1 tag 3 (-1 default)
)

# Keys of one producer-state snapshot entry (``udfs.snapshot``; kafka-formats.md §6).
SNAPSHOT_ENTRY_KEYS = (
    "producer_id",
    "producer_epoch",
    "last_sequence",
    "last_offset",
    "offset_delta",
    "timestamp",
    "coordinator_epoch",
    "current_txn_first_offset",  # -1 when no transaction is open
)
