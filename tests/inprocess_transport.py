"""An in-process :class:`~streaming.sources.kafka_client.transport.Transport` over the broker fake.

No socket is opened: each request frame goes straight to ``FakeKafkaBroker._handle_frame`` (the
same handler the fake's listeners call for every frame they read) and its answer frame comes
back, so the whole client above the seam - version negotiation, codecs, KIP-219 throttling,
retries, the metadata cache, every API module - runs unchanged. It shows what a transport must
do (the contract is in streaming/sources/kafka_client/transport.py) and is what a benchmark of
the client at cluster scale can start from.

What a socket would add and this does not model: connection setup failures and reconnect
backoff (``connection_delay`` is always 0), TLS/SASL, and KIP-219 channel muting on the broker
side (the client's own wait is what is exercised).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable
from typing import Any

import kafka.errors as Errors
from kafka.future import Future
from kafka.net.selector import NetworkSelector
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from streaming.sources.kafka_client.transport import NodeId, WireRequest, decode_frame, encode_frame
from tests import kafka_fake_broker as fake


class InProcessTransport:
    """Frames in, frames out, on one IO loop (kafka-python's ``NetworkSelector``, no sockets)."""

    def __init__(self, broker: fake.FakeKafkaBroker, config: dict[str, Any]):
        self.broker = broker
        self.client_id = config["client_id"]
        self._net = NetworkSelector(client_id=self.client_id)
        self._nodes = {n.node_id: n for n in broker._nodes}
        for node in broker._nodes:
            # the fake lists a broker in Metadata while its node runs; in-process a node runs
            # without a listener (FakeKafkaBroker.stop_node still takes it down)
            node._running = True
        self._known: dict[NodeId, tuple[str, int]] = {}  # from the client's Metadata answers
        self._versions: dict[NodeId, BrokerVersionData] = {}  # ApiVersions per node, asked on connect
        self._correlation = itertools.count(1)
        self._bootstrapped = False
        self.frames_sent = 0  # every request that crossed this seam, the ApiVersions handshakes included

    # ------------------------------------------------------------------ the IO loop
    def start(self) -> None:
        self._net.start()

    def close(self) -> None:
        self._net.close()
        for node in self._nodes.values():
            node._running = False

    def run(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return self._net.run(fn, *args)

    def call_soon_with_future(self, fn: Callable[[], Awaitable[Any]]) -> Future:
        return self._net.call_soon_with_future(fn)

    async def sleep(self, seconds: float) -> None:
        await self._net.sleep(seconds)

    async def wait_for(self, future: Future, timeout_ms: float) -> Any:
        # as KafkaConnectionManager.wait_for: the future keeps running after a timeout
        wrapper = Future()
        future.add_callback(lambda v: wrapper.is_done or wrapper.success(v))
        future.add_errback(lambda e: wrapper.is_done or wrapper.failure(e))
        timer = self._net.call_later(timeout_ms / 1000, lambda: wrapper.is_done or wrapper.failure(
            Errors.KafkaTimeoutError(f"Timed out after {timeout_ms} ms")))
        try:
            return await wrapper
        finally:
            self._net.cancel(timer)

    # ------------------------------------------------------------------ the cluster
    @property
    def bootstrapped(self) -> bool:
        return self._bootstrapped

    def bootstrap(self, timeout_ms: int) -> None:
        self._bootstrapped = True  # the client's own first Metadata request learns the brokers

    @property
    def broker_version_data(self) -> BrokerVersionData | None:
        return self._versions.get("bootstrap-0") or next(iter(self._versions.values()), None)

    def bootstrap_nodes(self) -> list[NodeId]:
        return ["bootstrap-0"]

    def nodes(self) -> list[NodeId]:
        return list(self._known)

    def address(self, node: NodeId) -> tuple[str, int] | None:
        if node == "bootstrap-0":
            return ("in-process", 0)
        return self._known.get(node)

    def update_cluster(self, metadata: Any) -> None:
        self._known = {b.node_id: (b.host, b.port) for b in metadata.brokers}

    def least_loaded_node(self) -> NodeId | None:
        return random.choice(list(self._known)) if self._known else None

    def connection_delay(self, node: NodeId) -> float:
        return 0.0

    # ------------------------------------------------------------------ requests
    def _fake_node(self, node: NodeId) -> Any:
        node_id = next(iter(self._nodes)) if node == "bootstrap-0" else node
        if node_id not in self._nodes:
            raise Errors.UnknownBrokerIdError(node)
        return self._nodes[node_id]

    def _roundtrip(self, node: NodeId, request: WireRequest) -> bytes:
        """One frame to the fake's handler and its answer body; the errors a socket would give."""
        target = self._fake_node(node)
        if not target.running:
            raise Errors.KafkaConnectionError(f"node {node}: connection refused (broker down)")
        correlation_id = next(self._correlation)
        self.broker._conn.principal = "User:ANONYMOUS"  # the fake's per-connection state
        self.frames_sent += 1
        reply = self.broker._handle_frame(target, encode_frame(request, correlation_id, self.client_id)[4:])
        if reply is fake._STALL:
            raise Errors.RequestTimedOutError("the broker did not answer (stalled)")
        if reply is fake._CLOSE or reply is None:
            raise Errors.KafkaConnectionError(f"node {node} closed the connection")
        answered, body = decode_frame(reply[4:], request)
        if answered != correlation_id:
            raise Errors.KafkaConnectionError("Received unrecognized correlation id")
        return body

    def connect(self, node: NodeId) -> Future:
        # the ApiVersions handshake a new connection makes (v0: every broker answers it)
        out = Future()
        if node in self._versions:
            return out.success(self._versions[node])
        try:
            request = ApiVersionsRequest()
            request.API_VERSION = 0
            body = self._roundtrip(node, WireRequest(ApiVersionsRequest.API_KEY, 0, bytes(request.encode()),
                                                     False, False))
            answer = ApiVersionsResponse[0].decode(body)
            versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
            self._versions[node] = BrokerVersionData(api_versions=versions)
        except Exception as exc:
            return out.failure(exc)
        return out.success(self._versions[node])

    def send(self, node: NodeId, request: WireRequest, timeout_ms: int) -> Future:
        out = Future()
        try:
            return out.success(self._roundtrip(node, request))
        except Errors.RequestTimedOutError as exc:
            self._net.call_later(timeout_ms / 1000, lambda e=exc: out.failure(e))  # as a request timer would
            return out
        except Exception as exc:
            return out.failure(exc)


def factory(broker: fake.FakeKafkaBroker) -> Callable[[dict[str, Any]], InProcessTransport]:
    """A transport factory for ``KafkaWire(..., transport=...)`` that keeps the transport it built."""
    built: list[InProcessTransport] = []

    def make(config: dict[str, Any]) -> InProcessTransport:
        transport = InProcessTransport(broker, config)
        built.append(transport)
        return transport

    make.built = built  # type: ignore[attr-defined]
    return make

