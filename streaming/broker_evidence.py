"""What the driver may ask a live cluster about one finding (WAVE2 contract B, detection.md §4).

The Enricher (``streaming/alerts.py``) calls a :class:`BrokerEvidence` for every late or hanging
finding. Files and dumps have no broker: they get :class:`NoBrokerEvidence`, whose answers all
mean "unknown". The live path composes the KIP-664 admin answers (``streaming/broker_confirm.py``)
with :class:`KafkaLookback` (P's last marker on tp, read from the partition itself).

Every answer is evidence for :func:`streaming.verdict.judge`, never a decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from streaming.verdict import DescribeProducersAnswer, Marker

DEFAULT_LOOKBACK_MAX_BYTES = 1 << 30  # [kafka] lookback_max_bytes


@dataclass(frozen=True, slots=True)
class LookbackResult:
    """Outcome of reading tp below O's first offset for P's last control batch.

    ``marker``: P's last control batch below O (None: none found in what was read).
    ``complete``: the read covered every offset from tp's log start up to O, so a missing marker
    means P has none on tp since the log start. ``read_from_zero``: complete and the log start is
    0 (nothing ever deleted: detection.md §4 rule 4 applies when no marker was found).
    ``bytes_read``: bytes fetched. ``reason``: why the answer is partial or absent (limit reached,
    fetch error, no broker), for the alert's ``epoch_hint``.
    """

    marker: Marker | None = None
    complete: bool = False
    read_from_zero: bool = False
    bytes_read: int = 0
    reason: str | None = None


class BrokerEvidence(Protocol):
    """Questions about one finding answered by the cluster; None/empty answers mean unknown."""

    def describe_producers(self, topic: str, partition: int) -> dict[int, DescribeProducersAnswer] | None:
        """DescribeProducers (KIP-664, 2.8+) of tp's leader keyed by producer id; None when the API
        is unsupported or unreachable."""
        ...

    def describe_transaction(self, transactional_id: str) -> dict[str, Any] | None:
        """DescribeTransactions (KIP-664, 3.0+) answer for one transactional id; None when unsupported."""
        ...

    def last_marker_before(self, topic: str, partition: int, producer_id: int, first_offset: int) -> LookbackResult:
        """P's last control batch on tp below ``first_offset`` (headers only, bounded read)."""
        ...

    def blocked_groups(self, topic: str, partition: int, first_offset: int) -> list[str] | None:
        """Consumer groups (read_committed) whose position on tp is held at the LSO; None = unknown."""
        ...


class NoBrokerEvidence:
    """The answers of a job without a broker (files, dumps): everything unknown."""

    def describe_producers(self, topic: str, partition: int) -> dict[int, DescribeProducersAnswer] | None:
        return None

    def describe_transaction(self, transactional_id: str) -> dict[str, Any] | None:
        return None

    def last_marker_before(self, topic: str, partition: int, producer_id: int, first_offset: int) -> LookbackResult:
        return LookbackResult(reason="no broker to read from")

    def blocked_groups(self, topic: str, partition: int, first_offset: int) -> list[str] | None:
        return None
