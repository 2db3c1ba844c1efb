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

import numpy as np

from streaming.verdict import DescribeProducersAnswer, Marker

DEFAULT_LOOKBACK_MAX_BYTES = 1 << 30  # [kafka] lookback_max_bytes
DEFAULT_SPAN_MAX_BYTES = 256 << 20  # [kafka] span_max_bytes


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


@dataclass(frozen=True, slots=True)
class SpanResult:
    """O's batches read forwards from its first offset (probe mode: the state saw only the first).

    ``batches``/``records``/``bytes``: P's transactional data batches from O's first offset on,
    up to P's next control batch or the high watermark; ``last_offset``/``last_ts`` (max
    timestamp) of the last of them; ``max_epoch``: their highest producer epoch. ``complete``:
    the read reached the high watermark or P's marker (else the counts are a lower bound and
    ``reason`` says where it stopped). All None when nothing could be read.
    """

    batches: int | None = None
    records: int | None = None
    bytes: int | None = None
    last_offset: int | None = None
    last_ts: int | None = None
    max_epoch: int | None = None
    complete: bool = False
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

    def span_after(self, topic: str, partition: int, producer_id: int, first_offset: int) -> SpanResult:
        """O's extent read forwards from ``first_offset`` (headers only, bounded read)."""
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

    def span_after(self, topic: str, partition: int, producer_id: int, first_offset: int) -> SpanResult:
        return SpanResult(reason="no broker to read from")


class KafkaLookback(NoBrokerEvidence):
    """``last_marker_before`` against a live cluster (detection.md §4 rule 2, live path).

    The live source starts reading at the LSO, after P's last marker on tp, so the state never
    saw it. This reads tp *backwards* from O's first offset in windows (each window read forwards
    with Fetch, READ_UNCOMMITTED, decoding batch headers only: ``udfs.record_batch.scan_batches``),
    growing the window 4× each time, until a window holds a control batch of P, tp's log start is
    reached, or ``max_bytes`` were fetched. Only a window read to its end counts: the last marker
    of P in the window nearest to O is P's last marker below O. The other questions of
    :class:`BrokerEvidence` stay unknown here (``streaming/broker_confirm.py`` answers them).

    ``wire``: a :class:`streaming.sources.kafka_wire.KafkaWire` (or a callable returning one, so
    the connection is only opened when a finding needs it).
    """

    def __init__(self, wire: Any, *, max_bytes: int = DEFAULT_LOOKBACK_MAX_BYTES, fetch_bytes: int = 1 << 20,
                 first_window: int = 1000, span_max_bytes: int = DEFAULT_SPAN_MAX_BYTES) -> None:
        self._wire = wire
        self.max_bytes = max_bytes
        self.span_max_bytes = span_max_bytes
        self.fetch_bytes = fetch_bytes
        self.first_window = first_window

    def wire(self) -> Any:
        if callable(self._wire) and not hasattr(self._wire, "fetch"):
            self._wire = self._wire()
        return self._wire

    def last_marker_before(self, topic: str, partition: int, producer_id: int, first_offset: int) -> LookbackResult:
        from streaming.sources.kafka_wire import KafkaWireError

        if self.max_bytes <= 0:
            return LookbackResult(reason="the look-back for the producer's last marker is off "
                                         "([kafka] lookback_max_bytes = 0)")
        try:
            return self._look_back(topic, partition, producer_id, first_offset)
        except (KafkaWireError, OSError, ValueError) as exc:
            return LookbackResult(reason=f"the look-back for the producer's last marker on {topic}-{partition} "
                                         f"failed: {exc}")

    def _look_back(self, topic: str, partition: int, producer_id: int, first_offset: int) -> LookbackResult:
        wire = self.wire()
        offs = wire.offsets([(topic, partition)])[(topic, partition)]
        if offs.deleted:
            return LookbackResult(reason=f"{topic}-{partition} no longer exists")
        log_start = max(offs.log_start, 0)
        hi, window, spent = first_offset, self.first_window, 0
        while hi > log_start:
            lo = max(log_start, hi - window)
            marker, spent, done = self._scan_window(wire, topic, partition, producer_id, lo, hi, spent)
            if not done:
                return LookbackResult(bytes_read=spent, reason=(
                    f"the look-back for the producer's last marker stopped after {spent} bytes "
                    f"([kafka] lookback_max_bytes = {self.max_bytes}) at offset {lo} of {topic}-{partition} "
                    f"(log start {log_start}, finding at {first_offset})"))
            if marker is not None:
                return LookbackResult(marker=marker, bytes_read=spent)
            hi, window = lo, window * 4
        return LookbackResult(complete=True, read_from_zero=log_start == 0, bytes_read=spent,
                              reason=None if log_start == 0 else (
                                  f"no marker of the producer on {topic}-{partition} since its log start "
                                  f"{log_start} (an earlier one may have been deleted by retention)"))

    def _scan_window(self, wire: Any, topic: str, partition: int, producer_id: int, lo: int, hi: int,
                     spent: int) -> tuple[Marker | None, int, bool]:
        """P's last control batch in [lo, hi), bytes spent so far, and whether [lo, hi) was read."""
        from udfs.model import CONTROL_ABORT, CONTROL_COMMIT

        found: Marker | None = None
        # highest epoch of P's transactional data since its previous control batch in the window:
        # the data the next marker closes (a bumped marker is one above it, detection.md §3.1)
        data_epoch = -1
        pos = lo
        while pos < hi:
            res, c, fetched = self._headers_at(wire, topic, partition, pos, self.max_bytes - spent)
            spent += fetched
            if c is None:
                return None, spent, False
            if not res.records:
                raise ValueError(f"Fetch {topic}-{partition} at offset {pos} returned nothing below the "
                                 f"high watermark {res.high_watermark}")
            for i in range(len(c["base_offset"])):
                base, last = int(c["base_offset"][i]), int(c["last_offset"][i])
                if last < pos or base >= hi:
                    continue
                if int(c["producer_id"][i]) != producer_id or not bool(c["is_transactional"][i]):
                    continue
                if bool(c["is_control"][i]):
                    ctype = int(c["control_type"][i])
                    typed = ctype in (CONTROL_ABORT, CONTROL_COMMIT)
                    ce = int(c["coordinator_epoch"][i])
                    found = Marker(offset=base, producer_epoch=int(c["producer_epoch"][i]),
                                   coordinator_epoch=ce if typed and ce >= 0 else None,
                                   kind=("COMMIT" if ctype == CONTROL_COMMIT else "ABORT") if typed else None,
                                   timestamp=int(c["max_timestamp"][i]),
                                   closed_epoch=data_epoch if data_epoch >= 0 else None)
                    data_epoch = -1
                else:
                    data_epoch = max(data_epoch, int(c["producer_epoch"][i]))
            pos = max(pos, int(c["last_offset"][-1]) + 1)
        return found, spent, True

    def _headers_at(self, wire: Any, topic: str, partition: int, pos: int,
                    budget: int) -> tuple[Any, dict[str, np.ndarray] | None, int]:
        """Fetch at ``pos`` (at most ``budget`` bytes) and decode the batch headers. A first batch
        larger than the fetch is asked for again with twice the room (KIP-74 brokers always return
        one whole batch; older ones need a larger limit). Returns (the answer, its header columns,
        bytes fetched); the columns are None when the budget ran out before a whole batch came."""
        from udfs.record_batch import scan_batches

        fetched = 0
        while fetched < budget:
            res = wire.fetch(topic, partition, pos, min(self.fetch_bytes, budget - fetched))
            if not res.ok:
                raise ValueError(f"Fetch {topic}-{partition} at offset {pos}: {res.error}")
            fetched += len(res.records)
            c = scan_batches(res.records, validate_crc=False, source=f"{topic}-{partition}",
                             allow_partial_tail=True).columns
            if len(c["base_offset"]) or not res.records:
                return res, c, fetched
            self.fetch_bytes *= 2
        return None, None, fetched

    def span_after(self, topic: str, partition: int, producer_id: int, first_offset: int) -> SpanResult:
        """Probe mode (issue 12): the data-loss preview of O, read forwards from its first offset
        to the high watermark or P's next control batch, at most ``span_max_bytes``. Pairing
        (detection.md §1): every transactional data batch of P after O's first joins O until P's
        control batch closes it, whatever its epoch."""
        from streaming.sources.kafka_wire import KafkaWireError

        if self.span_max_bytes <= 0:
            return SpanResult(reason="the span read is off ([kafka] span_max_bytes = 0)")
        try:
            return self._span(topic, partition, producer_id, first_offset)
        except (KafkaWireError, OSError, ValueError) as exc:
            return SpanResult(reason=f"reading the span of the transaction on {topic}-{partition} failed: {exc}")

    def _span(self, topic: str, partition: int, producer_id: int, first_offset: int) -> SpanResult:
        wire = self.wire()
        pos, spent = first_offset, 0
        batches = records = size = 0
        last_offset = last_ts = max_epoch = None
        while True:
            res, c, fetched = self._headers_at(wire, topic, partition, pos, self.span_max_bytes - spent)
            spent += fetched
            if c is None:
                reason = (f"the span read stopped after {spent} bytes ([kafka] span_max_bytes = "
                          f"{self.span_max_bytes}) at offset {pos}: records, bytes and batches are a lower bound")
                break
            if not res.records:
                reason = None if pos >= res.high_watermark else (
                    f"nothing returned at offset {pos} below the high watermark {res.high_watermark}")
                break
            mine = (c["producer_id"] == producer_id) & (c["last_offset"] >= pos)
            ctrl = np.flatnonzero(mine & c["is_control"])
            stop = int(ctrl[0]) if len(ctrl) else len(mine)
            data = np.flatnonzero(mine[:stop] & c["is_transactional"][:stop] & ~c["is_control"][:stop])
            if len(data):
                batches += len(data)
                records += int(c["record_count"][data].sum())
                size += int(c["batch_size"][data].sum())
                last_offset = max(last_offset or -1, int(c["last_offset"][data].max()))
                last_ts = max(last_ts or -1, int(c["max_timestamp"][data].max()))
                max_epoch = max(max_epoch if max_epoch is not None else -1, int(c["producer_epoch"][data].max()))
            if len(ctrl):
                reason = None  # P's marker: O ends before it (the LSO moved on since the finding)
                break
            pos = max(pos, int(c["last_offset"][-1]) + 1)
        return SpanResult(batches=batches, records=records, bytes=size, last_offset=last_offset, last_ts=last_ts,
                          max_epoch=max_epoch, complete=reason is None, reason=reason)
