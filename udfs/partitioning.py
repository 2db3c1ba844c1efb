"""Which ``__transaction_state`` partition owns a transactional id (kafka-formats.md §5.2)."""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, 32-bit signed."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that Integer.MIN_VALUE maps to 0, not to itself."""
    return 0 if n == -(1 << 31) else abs(n)


def txn_state_partition(transactional_id: str, partition_count: int = 50) -> int:
    """Partition of ``__transaction_state`` holding ``transactional_id``.

    ``partition_count`` is ``transaction.state.log.num.partitions`` (default 50); the broker reads
    it once and it must never change, so the mapping is stable for a cluster's lifetime.
    """
    if partition_count <= 0:
        raise ValueError(f"partition_count must be positive, got {partition_count}")
    return kafka_abs(java_string_hash(transactional_id)) % partition_count
