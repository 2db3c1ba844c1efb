"""What the client returns: offsets of a partition and one partition of a Fetch answer."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "FetchResult", "FetchStatus", "PartitionOffsets"]

#: ``isolation_level`` of Fetch v4+ / ListOffsets v2+ (KIP-98): READ_UNCOMMITTED returns control
#: batches and data of open or aborted transactions; LATEST with READ_COMMITTED is the LSO.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class FetchStatus(enum.StrEnum):
    OK = "ok"
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    DELETED = "deleted"


@dataclass(frozen=True)
class PartitionOffsets:
    """Offsets of one partition. ``deleted`` partitions have -1 offsets and ``leader`` -1.

    ``topic_id``: the topic's id from Metadata v10+ (Kafka 2.8+, KIP-516) as a string, ``None``
    from older brokers. It changes when a topic is deleted and created again under the same name.
    """

    topic: str
    partition: int
    log_start: int
    high_watermark: int
    lso: int
    leader: int
    deleted: bool = False
    topic_id: str | None = None


@dataclass(frozen=True)
class FetchResult:
    """One partition of a Fetch response, with the raw ``records`` bytes.

    ``records`` is exactly the broker's byte string (segment layout, possibly ending in a partial
    batch, possibly starting before ``fetch_offset``). ``error_code``/``error`` are the Kafka
    partition error (0/"NONE" on success). For OFFSET_OUT_OF_RANGE, ``log_start_offset``,
    ``high_watermark`` and ``last_stable_offset`` come from a follow-up ListOffsets (-1 if that
    failed). For DELETED all offsets are -1. ``api_version`` is the Fetch version used.
    """

    topic: str
    partition: int
    fetch_offset: int
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    error_code: int
    error: str
    status: FetchStatus
    leader: int
    api_version: int

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.OK

    @property
    def out_of_range(self) -> bool:
        return self.status is FetchStatus.OFFSET_OUT_OF_RANGE

    @property
    def deleted(self) -> bool:
        return self.status is FetchStatus.DELETED
