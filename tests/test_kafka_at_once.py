"""Per-node jobs sent at once (streaming/sources/kafka_client/core.py ``AtOnce``) keep the error paths
of the per-node task they replace (``list_offsets._job`` / ``fetch.fetch_many``'s job): an answer
gives ``(pending, body)``, a failed request its exception, a request nobody answers a
``KafkaTimeoutError`` once the client's safety net (``request_timeout_ms`` +
``socket_connection_setup_timeout_ms`` + 1 s) has passed, and a node under a KIP-219 throttle
(``NetworkClient.maybeThrottle``: nothing is sent to it until the throttle time has passed) or
without a connection yet is left to the task, which waits for those.

The transport is a stub on kafka-python's ``NetworkSelector`` (the client's IO loop) that answers,
fails or never answers as each test says.
"""

from __future__ import annotations

import time

import kafka.errors as Errors
from kafka.future import Future
from kafka.net.selector import NetworkSelector
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.metadata import MetadataRequest

from streaming.sources.kafka_client.core import AtOnce, ClientCore, Pending


class _Stub:
    """Connected nodes answer per ``plan[node]``: "answer" (body b"ok"), "fail", "never"."""

    def __init__(self, plan: dict[int, str], connected: bool = True) -> None:
        self.plan = plan
        self.connected = connected
        self.net = NetworkSelector(client_id="t")
        self.sent: list[int] = []

    def call_soon_with_future(self, fn):
        return self.net.call_soon_with_future(fn)

    async def wait_for(self, future, timeout_ms):
        wrapper = Future()
        future.add_callback(lambda v: wrapper.is_done or wrapper.success(v))
        future.add_errback(lambda e: wrapper.is_done or wrapper.failure(e))
        timer = self.net.call_later(timeout_ms / 1000, lambda: wrapper.is_done or wrapper.failure(
            Errors.KafkaTimeoutError(f"Timed out after {timeout_ms} ms")))
        try:
            return await wrapper
        finally:
            self.net.cancel(timer)

    def connect(self, node):
        if not self.connected:
            return Future()  # still setting up
        return Future().success(BrokerVersionData(api_versions={3: (0, 12)}))

    def send(self, node, wire, timeout_ms):
        self.sent.append(node)
        how = self.plan[node]
        if how == "answer":
            return Future().success(b"ok")
        if how == "fail":
            return Future().failure(Errors.KafkaConnectionError("reset"))
        return Future()  # never answered


def _core(stub: _Stub) -> ClientCore:
    core = ClientCore({"request_timeout_ms": 200, "socket_connection_setup_timeout_ms": 100, "client_id": "t"})
    core._transport = stub
    return core


def _request() -> MetadataRequest:
    return MetadataRequest(topics=[], min_version=1, max_version=1)


def _run(stub: _Stub, coro):
    stub.net.start()
    try:
        return stub.net.run(coro)
    finally:
        stub.net.close()


def test_answers_failures_and_silence_resolve_as_the_task_would():
    stub = _Stub({1: "answer", 2: "fail", 3: "never"})
    core = _core(stub)
    safety_s = core._safety_ms() / 1000  # 1.3 s here

    async def go():
        at_once = AtOnce(core)
        futures = {n: at_once.start(n, [_request()]) for n in (1, 2, 3)}
        done_at_once = {n: f.is_done for n, f in futures.items()}
        started = time.monotonic()
        deadline = started + 10 * safety_s
        while not futures[3].is_done and time.monotonic() < deadline:  # the safety net resolves it
            await stub.net.sleep(0.05)
        return futures, done_at_once, time.monotonic() - started

    futures, done_at_once, waited = _run(stub, go)
    assert done_at_once == {1: True, 2: True, 3: False}
    ((pending, body),) = futures[1].value
    assert isinstance(pending, Pending) and body == b"ok"
    (failed,) = futures[2].value
    assert isinstance(failed, Errors.KafkaConnectionError)
    (silent,) = futures[3].value
    assert isinstance(silent, Errors.KafkaTimeoutError)
    assert stub.sent == [1, 2, 3]


def test_single_job_fails_with_the_requests_exception():
    stub = _Stub({1: "answer", 2: "fail"})
    core = _core(stub)

    async def go():
        at_once = AtOnce(core, single=True)
        return at_once.start(1, [_request()]), at_once.start(2, [_request()])

    ok, failed = _run(stub, go)
    pending, body = ok.value
    assert body == b"ok" and isinstance(failed.exception, Errors.KafkaConnectionError)


def test_throttled_or_unconnected_nodes_are_left_to_the_task():
    stub = _Stub({1: "answer"})
    core = _core(stub)
    core._throttle_until[1] = time.monotonic() + 60  # KIP-219: muted for a minute

    async def throttled():
        return AtOnce(core).start(1, [_request()])

    assert _run(stub, throttled) is None
    stub2 = _Stub({1: "answer"}, connected=False)
    core2 = _core(stub2)

    async def unconnected():
        return AtOnce(core2).start(1, [_request()])

    assert _run(stub2, unconnected) is None
    assert stub.sent == [] and stub2.sent == []  # nothing was sent: the task sends after waiting
