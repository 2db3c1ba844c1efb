"""The Transport seam (streaming/sources/kafka_client/transport.py): the whole client runs over an
in-process transport (tests/inprocess_transport.py: frames go straight to the broker fake's frame
handler, no socket) with version negotiation, codecs, retries and KIP-219 throttling above it.

Expected values are Kafka's: the sample segment's offsets come from its expected-values file
(written from the segment, as tests/test_kafka_wire.py uses them), FetchResponse v4 has no
LogStartOffset (FetchResponse.json, KIP-107 adds it in v5), and a throttled answer keeps the
client from that broker for ``throttle_time_ms`` (KIP-219, ``NetworkClient.maybeThrottle``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming.sources.kafka_wire import FETCH_MAX_VERSION, KafkaWire
from tests.conftest import kafka_watchdog
from tests.inprocess_transport import factory
from tests.kafka_fake_broker import DEFAULT_API_VERSIONS, FakeKafkaBroker, stage_segment

_watchdog = kafka_watchdog(60)

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
ORDERS = SAMPLES / "synthetic" / "scenario_orders-0_00000000000000000000.log"
ORDERS_EXPECTED = json.loads((SAMPLES / "synthetic" / "scenario_orders-0_expected.json").read_text())
ORDERS_HW = ORDERS_EXPECTED["batches"][-1]["lastOffset"] + 1  # 13
ORDERS_LSO = ORDERS_EXPECTED["expected_LSO"]  # 9
FAST = dict(client_id="txnwatch-test", request_timeout_ms=1500, retries=3, retry_backoff_ms=10,
            retry_backoff_max_ms=50)


@pytest.fixture
def log_root(tmp_path: Path) -> Path:
    root = tmp_path / "kafka-logs"
    stage_segment(root, "orders", 0, ORDERS)
    return root


def _wire(broker: FakeKafkaBroker) -> tuple[KafkaWire, object]:
    make = factory(broker)
    # the address is never dialled: the in-process transport routes node ids to the fake's nodes
    return KafkaWire("in-process:9092", transport=make, **FAST), make


def test_the_whole_client_runs_over_an_in_process_transport(log_root):
    broker = FakeKafkaBroker(log_root)  # never started: no listener, no socket
    wire, make = _wire(broker)
    with wire:
        assert wire.partitions() == {"orders": [0]}
        o = wire.offsets([("orders", 0)])[("orders", 0)]
        assert (o.log_start, o.high_watermark, o.lso, o.leader) == (0, ORDERS_HW, ORDERS_LSO, 1)
        r = wire.fetch("orders", 0, 0, 1 << 20)
        assert r.ok and r.records == ORDERS.read_bytes()
        assert r.api_version == FETCH_MAX_VERSION  # negotiated above the seam against the fake's ApiVersions
        many = wire.fetch_many([("orders", 0, 0)], 1 << 20)
        assert many[("orders", 0)].records == ORDERS.read_bytes()
        (transport,) = make.built
    assert all(n._sock is None for n in broker._nodes)  # no listener was ever opened
    # every request the fake answered crossed the seam (ApiVersions handshakes included)
    assert transport.frames_sent == len(broker.requests) > 0
    assert {r.api for r in broker.requests} >= {"api_versions", "metadata", "list_offsets", "fetch"}


def test_version_negotiation_runs_above_the_transport(log_root):
    versions = dict(DEFAULT_API_VERSIONS)
    versions[1] = (4, 4)  # Fetch v4 only (Kafka 0.11.0 before KIP-107)
    broker = FakeKafkaBroker(log_root, api_versions=versions)
    wire, _ = _wire(broker)
    with wire:
        r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.api_version == 4 and r.log_start_offset == -1  # v4 carries no LogStartOffset
    assert (r.high_watermark, r.last_stable_offset) == (ORDERS_HW, ORDERS_LSO)
    assert [q.version for q in broker.requests_for("fetch")] == [4]


def test_retries_run_above_the_transport(log_root):
    broker = FakeKafkaBroker(log_root)
    wire, _ = _wire(broker)
    with wire:
        wire.partitions(["orders"])
        broker.not_leader("orders", 0, count=1)  # a partition error: metadata refresh, retry
        broker.drop_connection(count=1, api="fetch")  # a transport error: retried the same way
        r = wire.fetch("orders", 0, 0, 1 << 20)
    assert r.ok and r.records == ORDERS.read_bytes()
    assert len(broker.requests_for("fetch")) == 3  # NOT_LEADER_OR_FOLLOWER, dropped, answered


def test_a_kip219_throttle_is_honoured_above_the_transport(log_root):
    broker = FakeKafkaBroker(log_root)
    wire, _ = _wire(broker)
    with wire:
        wire.partitions(["orders"])
        broker.throttle("fetch", 300, count=1)  # the answer carries throttle_time_ms=300
        assert wire.fetch("orders", 0, 0, 1 << 20).ok
        assert wire.throttle_waits == 0
        assert wire.fetch("orders", 0, 0, 1 << 20).ok  # waits out the throttle, then is answered
        assert wire.throttle_waits >= 1
    assert len(broker.requests_for("fetch")) == 2  # a throttle is not a failure: nothing re-sent


def test_socket_transport_selector_cancels_timers_without_losing_or_firing_them():
    """The socket transport's IO loop (``socket_transport._Selector``) drops a cancelled timer
    lazily instead of re-heapifying all timers per cancellation (kafka-python's
    ``NetworkSelector._unschedule``): every timer not cancelled still fires, in time order, and no
    cancelled one fires, also once the cancelled ones are the majority and the heap is compacted."""
    import time as _time

    from streaming.sources.kafka_client.socket_transport import _Selector, _selector

    net = _selector("test")
    assert isinstance(net, _Selector)  # kafka-python 3.0's selector has the heap it expects
    fired: list[int] = []
    now = _time.monotonic()
    tasks = {i: net.call_at(now + i / 1000, (lambda i=i: fired.append(i))) for i in range(200)}
    cancelled = {i for i in range(200) if i % 3}  # two thirds: more than half, so the heap is compacted
    for i in sorted(cancelled):
        net.cancel(tasks[i])
    deadline = _time.monotonic() + 10
    while len(fired) < 200 - len(cancelled):
        assert _time.monotonic() < deadline, fired
        net.poll(timeout_ms=50)
    net.poll(timeout_ms=0)
    assert fired == [i for i in range(200) if i not in cancelled]
    net.close()
