"""The live look-back for P's last marker below a finding (detection.md §4 rule 2), against the fake
broker: real Fetch/ListOffsets over loopback, header-only decoding, the byte bound."""

from __future__ import annotations

import pytest

from streaming.broker_evidence import KafkaLookback
from streaming.simulate.encode import encode_batch
from streaming.sources.kafka_wire import KafkaWire
from streaming.verdict import Marker
from tests.kafka_fake_broker import FakeKafkaBroker, build_control_batch

T0 = 1_700_000_000_000
FILLER = 50  # other producers' batches between P's marker and O, 2 KB each


@pytest.fixture
def cluster(tmp_path):
    with FakeKafkaBroker(tmp_path / "logs") as b:
        b.create_topic("t", 1)
        b.append_batches("t", 0, encode_batch(0, 1, producer_id=7, producer_epoch=2, base_sequence=0,
                                              is_transactional=True, base_timestamp=T0))  # offset 0
        b.append_batches("t", 0, build_control_batch(0, 7, 2, commit=True, coordinator_epoch=4,
                                                     timestamp_ms=T0 + 5))  # offset 1
        # an empty control batch of producer 8 (compacted): type and coordinator epoch unknown
        b.append_batches("t", 0, encode_batch(0, 0, producer_id=8, producer_epoch=1, is_transactional=True,
                                              is_control=True, base_timestamp=T0 + 6))  # offset 2
        for i in range(FILLER):  # offsets 3..52
            b.append_batches("t", 0, encode_batch(0, 1, value=b"x" * 2000, base_timestamp=T0 + 10 + i))
        b.append_batches("t", 0, encode_batch(0, 1, producer_id=7, producer_epoch=2, base_sequence=1,
                                              is_transactional=True, base_timestamp=T0 + 100))  # offset 53: O
        with KafkaWire(b.bootstrap_servers, client_id="lookback-test", request_timeout_ms=2000, retries=1,
                       retry_backoff_ms=20) as wire:
            yield b, wire


def test_finds_the_producers_last_marker_reading_backwards(cluster):
    _b, wire = cluster
    lb = KafkaLookback(wire, max_bytes=1 << 20, fetch_bytes=4096, first_window=8)
    res = lb.last_marker_before("t", 0, 7, 53)
    # closed_epoch: the COMMIT at 1 closed P's data of epoch 2 at offset 0 (same epoch: not bumped,
    # detection.md §3.1 revision 3.1)
    assert res.marker == Marker(offset=1, producer_epoch=2, coordinator_epoch=4, kind="COMMIT", timestamp=T0 + 5,
                                closed_epoch=2)
    assert res.reason is None and res.bytes_read > FILLER * 2000
    # an empty control batch is found too, but teaches neither kind nor coordinator epoch (and no data of
    # producer 8 was read before it: what it closed is unknown)
    res = lb.last_marker_before("t", 0, 8, 53)
    assert res.marker == Marker(offset=2, producer_epoch=1, coordinator_epoch=None, kind=None, timestamp=T0 + 6)


def test_stops_at_the_byte_limit_and_says_so(cluster):
    _b, wire = cluster
    res = KafkaLookback(wire, max_bytes=20_000, fetch_bytes=4096, first_window=8).last_marker_before("t", 0, 7, 53)
    assert res.marker is None and not res.complete
    assert res.reason.startswith("the look-back for the producer's last marker stopped after ")
    assert "[kafka] lookback_max_bytes = 20000" in res.reason
    off = KafkaLookback(wire, max_bytes=0).last_marker_before("t", 0, 7, 53)
    assert off.marker is None and "lookback_max_bytes = 0" in off.reason


def test_no_marker_since_the_log_start(cluster):
    b, wire = cluster
    # producer 9 never wrote a marker on t-0, which still starts at 0: P's entry never saw one
    res = KafkaLookback(wire, fetch_bytes=4096, first_window=8).last_marker_before("t", 0, 9, 53)
    assert (res.marker, res.complete, res.read_from_zero, res.reason) == (None, True, True, None)
    # retention moved the log start past producer 7's marker: nothing found, and not from zero
    b.advance_log_start("t", 0, 10)
    res = KafkaLookback(wire, fetch_bytes=4096, first_window=8).last_marker_before("t", 0, 7, 53)
    assert (res.marker, res.complete, res.read_from_zero) == (None, True, False)
    assert "since its log start 10" in res.reason
