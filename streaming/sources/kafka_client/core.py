"""The client core: one :class:`Transport`, version negotiation, request codecs, KIP-219 throttling.

Every Kafka API of the client (:mod:`~streaming.sources.kafka_client.metadata`,
:mod:`~streaming.sources.kafka_client.list_offsets`, :mod:`~streaming.sources.kafka_client.fetch`)
sends its requests through :meth:`ClientCore._send` / :meth:`ClientCore._send_nowait`:

1. **Throttle** (KIP-219, brokers 2.0+): an answer with ``throttle_time_ms`` > 0 means the broker
   mutes that connection for that long. The next request to that node waits until the throttle
   has passed (the Java client's ``NetworkClient.maybeThrottle`` +
   ``ClusterConnectionStates.throttle``), other nodes are asked as usual, and a throttle is never a
   failure. As in kafka-python's ``KafkaConnection._maybe_throttle``, only brokers whose
   ApiVersions tell 2.0 or newer are obeyed (older ones delay the answer themselves).
2. **Connection and version**: the transport's connection to the node reports the broker's
   ApiVersions ranges; the request gets the newest version both sides support within the
   request's own ``min_version``/``max_version`` (kafka-python's ``BrokerVersionData.api_version``,
   which raises ``IncompatibleBrokerVersion`` when there is none). A request object that already
   has a version keeps it (a Fetch re-sent to a preferred read replica).
3. **Codec**: the request body is encoded by the request object (kafka-python's schema classes,
   or the client's own :mod:`~streaming.sources.kafka_client.list_offsets_codec` and
   :mod:`~streaming.sources.kafka_client.fetch_codec`, whose requests name their decoder with
   ``response_decoder()``) and the answer body decoded by the response class its header names;
   a body that does not decode is ``KafkaProtocolError``,
   as kafka-python's ``KafkaProtocol`` raises it (not retriable: the call fails with
   ``KafkaWireError``; the connection stays open, its framing is intact).

The core also owns the client's configuration, its lifecycle (lazy start, pickling: only the
configuration travels), the :class:`MetadataCache` and the messages naming brokers and ACLs.
It imports no API module.

**Sending at once** (:class:`AtOnce`): the per-leader jobs of one ListOffsets or Fetch call are
put on their connections directly, without a task, a wait and a timer per leader (at 1,000
brokers those were a large part of the IO thread's work); a leader that is throttled or not yet
connected runs its job as a task, as before.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import kafka.errors as Errors
from kafka.future import Future
from kafka.protocol.broker_version_data import BrokerVersionData

from streaming.sources.kafka_client.errors import KafkaAuthorizationError, KafkaWireError, describe
from streaming.sources.kafka_client.metadata_cache import MetadataCache
from streaming.sources.kafka_client.transport import NodeId, Transport, TransportFactory, WireRequest
from streaming.sources.kafka_parallel import StalledNodes, all_of
from streaming.sources.kafka_security import authorization_message, principal_of

log = logging.getLogger(__name__)

__all__ = ["AtOnce", "ClientCore"]

_API_VERSIONS_KEY = 18  # ApiVersions answers always use response header v0 (KIP-511)


def _socket_transport(config: dict[str, Any]) -> Transport:
    from streaming.sources.kafka_client.socket_transport import SocketTransport  # the default, real network
    return SocketTransport(config)


@dataclass(slots=True)
class Pending:
    """A request on its way: the transport's Future of the answer body and how to decode it."""

    node: NodeId
    future: Future
    decoder: Any
    versions: BrokerVersionData | None


class AtOnce:
    """Per-node jobs of one call sent at once, without a task, a wait and a timer per node.

    :meth:`start` sends a node's requests right away (:meth:`ClientCore._send_at_once`) and
    returns a Future of what the job would have returned: the list of
    :meth:`ClientCore._await_bodies` (``single``: its one ``(pending, body)`` pair, or its exception
    as the Future's failure, as ``_send_nowait`` + ``_await_body`` give it). Each Future resolves
    by callbacks once its requests are answered or failed; one safety timer for all of them (the
    one each job's wait had, :meth:`ClientCore._safety_ms`) resolves what is still open with
    timeouts. ``start`` returns None when the node must wait first (throttle, connection setup):
    the caller runs the job as a task then."""

    def __init__(self, core: ClientCore, single: bool = False) -> None:
        self.core = core
        self.single = single
        self.jobs: list[tuple[Future, list[Any]]] = []
        self._safety: Future | None = None

    def start(self, node_id: NodeId, requests: list[Any]) -> Future | None:
        pendings = self.core._send_at_once(node_id, requests)
        if pendings is None:
            return None
        job = (Future(), pendings)
        self.jobs.append(job)
        all_of([p.future for p in pendings if isinstance(p, Pending)]).add_both(lambda _: self._finish(job))
        if self._safety is None and not job[0].is_done:
            self._safety = self.core._transport.call_soon_with_future(self._safety_net)
        return job[0]

    def _finish(self, job: tuple[Future, list[Any]]) -> None:
        out, pendings = job
        if out.is_done:
            return
        got = self.core._collect(pendings)
        if not self.single:
            out.success(got)
        elif isinstance(got[0], BaseException):
            out.failure(got[0])
        else:
            out.success(got[0])

    async def _safety_net(self) -> None:
        deadline = time.monotonic() + self.core._safety_ms() / 1000
        while True:  # jobs started after this began are waited on too, within the same time
            waiting = [out for out, _ in self.jobs if not out.is_done]
            left = (deadline - time.monotonic()) * 1000
            if not waiting or left <= 0:
                break
            try:
                await self.core._transport.wait_for(all_of(waiting), left)
            except Exception:  # the safety net passed: what is not answered times out below
                break
        for job in list(self.jobs):
            self._finish(job)


class ClientCore:
    """Configuration, transport, request path and metadata cache shared by every Kafka API.

    The underscore attributes (``_config``, ``_transport``, ``_cache``, ``_stalled``, ``_send``,
    ...) are the package's own: the API modules of :mod:`streaming.sources.kafka_client` use them,
    callers of :class:`~streaming.sources.kafka_wire.KafkaWire` use its public methods.
    """

    def __init__(self, config: dict[str, Any], transport: TransportFactory | None = None):
        self._config = config
        self._transport_factory = transport
        self._init_runtime()

    # ------------------------------------------------------------------ lifecycle
    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._transport: Transport | None = None
        self._finalizer: Any = None
        self._closed = False
        self._cache = MetadataCache(self._config)
        self._throttle_until: dict[NodeId, float] = {}  # node -> monotonic end of its KIP-219 throttle
        self.throttle_waits = 0  # requests held back by a KIP-219 throttle (see _unthrottled)
        self._stalled = StalledNodes()  # brokers with a request overdue past broker_timeout_ms
        # id(ApiVersions answer) -> (that answer, {(request class, min, max): negotiated version})
        self._negotiated: dict[int, tuple[BrokerVersionData, dict[tuple[Any, ...], int]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"_config": dict(self._config), "_transport_factory": self._transport_factory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._config = state["_config"]
        self._transport_factory = state.get("_transport_factory")
        self._init_runtime()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self._config["bootstrap_servers"])

    @property
    def broker_version(self) -> tuple[int, ...] | None:
        """Broker version inferred from ApiVersions (None before connecting)."""
        bvd = self._transport.broker_version_data if self._transport is not None else None
        return bvd.broker_version if bvd is not None else None

    def close(self) -> None:
        """Close connections and stop the IO thread. Idempotent; the object cannot be reused."""
        with self._lock:
            self._closed = True
            if self._finalizer is not None:
                self._finalizer()
                self._finalizer = None
            self._transport = None

    def connect(self) -> None:
        """Start the IO thread and bootstrap cluster metadata (otherwise done on first use)."""
        self._ensure_started()

    def _ensure_started(self) -> Transport:
        with self._lock:
            if self._closed:
                raise KafkaWireError("KafkaWire is closed")
            if self._transport is None:
                transport = (self._transport_factory or _socket_transport)(self._config)
                transport.start()
                self._transport = transport
                closer = getattr(transport, "closer", None)  # must not hold the client alive
                self._finalizer = weakref.finalize(self, closer() if closer is not None else transport.close)
            transport = self._transport
        if not transport.bootstrapped:
            transport.bootstrap(self._config["bootstrap_timeout_ms"])
        return transport

    def _run(self, coro, *args):
        """Run ``coro(*args)`` on the IO loop (starting it first) and return its result."""
        self._ensure_started()
        transport = self._transport
        if transport is None:
            raise KafkaWireError("KafkaWire is closed")
        try:
            return transport.run(coro, *args)
        except KafkaWireError:
            raise
        except Errors.KafkaError as exc:
            raise KafkaWireError(f"Kafka request failed against {self.bootstrap_servers}: "
                                 f"{describe(exc)}") from exc

    # ------------------------------------------------------------------ requests (IO thread)
    def _safety_ms(self) -> int:
        # safety net on top of the transport's own per-request and connection-setup timers
        return self._config["request_timeout_ms"] + self._config["socket_connection_setup_timeout_ms"] + 1000

    async def _send_nowait(self, node_id: NodeId, request: Any) -> Pending:
        """Put a request on the node's connection (once any throttle has passed and the
        connection is up) without waiting for the answer: pipelined requests use this."""
        await self._unthrottled(node_id)
        transport = self._transport
        connected = transport.connect(node_id)
        versions = connected.value if connected.succeeded() else await transport.wait_for(connected, self._safety_ms())
        return self._put(node_id, request, versions)

    def _put(self, node_id: NodeId, request: Any, versions: BrokerVersionData | None) -> Pending:
        """Negotiate, encode and hand one request to the transport (the connection is up)."""
        if request.API_VERSION is None:
            if versions is None:
                raise Errors.IncompatibleBrokerVersion(f"no ApiVersions from {self._node_desc(node_id)}")
            request.API_VERSION = self._negotiate(versions, request)
        version = request.API_VERSION
        response_decoder = getattr(request, "response_decoder", None)  # the client's own codecs
        if response_decoder is not None:
            decoder = response_decoder()
        else:
            request.with_header(correlation_id=0, client_id=self._config["client_id"])  # names the response class
            decoder = request.header.get_response_class()
        flexible = bool(request.flexible_version_q(version))
        wire = WireRequest(request.API_KEY, version, bytes(request.encode()), flexible,
                           flexible and request.API_KEY != _API_VERSIONS_KEY)
        future = self._transport.send(node_id, wire, self._config["request_timeout_ms"])
        return Pending(node_id, future, decoder, versions)

    def _send_at_once(self, node_id: NodeId, requests: list[Any]) -> list[Any] | None:
        """What one job of :meth:`_send_nowait` calls puts on the node's connection, sent right
        now instead of from a task of its own: None when the node is throttled (KIP-219) or its
        connection is not set up yet (the caller then runs the job as a task, which waits for
        those); else a :class:`Pending` or the exception per request, in order."""
        if self._throttle_until and self._throttle_until.get(node_id, 0.0) > time.monotonic():
            return None
        connected = self._transport.connect(node_id)
        if not connected.succeeded():
            return None
        out: list[Any] = []
        for request in requests:
            try:
                out.append(self._put(node_id, request, connected.value))
            except Exception as exc:
                out.append(exc)
        return out

    def _negotiate(self, versions: BrokerVersionData, request: Any) -> int:
        """``versions.api_version(request)``, remembered per connection's ApiVersions answer and
        request class and bounds (the same request kinds go to the same brokers every trigger);
        an incompatible broker raises every time, as kafka-python's ``api_version`` does."""
        entry = self._negotiated.get(id(versions))
        if entry is None or entry[0] is not versions:  # an id reused by a newer connection's answer
            if len(self._negotiated) > 10_000:  # reconnects leave answers behind: start over
                self._negotiated.clear()
            entry = self._negotiated[id(versions)] = (versions, {})
        key = (type(request), getattr(request, "_min_version", None), getattr(request, "_max_version", None))
        version = entry[1].get(key)
        if version is None:
            version = entry[1][key] = versions.api_version(request)
        return version

    async def _await(self, pending: Pending) -> Any:
        """The decoded answer of a :meth:`_send_nowait` request."""
        return self._decode(pending, await self._await_body(pending))

    async def _await_body(self, pending: Pending) -> bytes:
        """The undecoded answer body of a :meth:`_send_nowait` request: a caller waiting on many
        brokers under one deadline decodes after the wait (:meth:`_decode`), so that the time
        its own decoding takes on the IO thread never counts against a broker's deadline."""
        return await self._transport.wait_for(pending.future, self._safety_ms())

    async def _await_bodies(self, pendings: list[Any]) -> list[Any]:
        """:meth:`_await_body` of several requests (exceptions in ``pendings`` stay in their
        places) under one safety timer instead of one per request (every timer costs the IO loop
        a pass over all of its timers when it is cancelled): ``(pending, body)`` per request, or
        its exception."""
        futures = [p.future for p in pendings if isinstance(p, Pending)]
        if futures:
            try:
                await self._transport.wait_for(all_of(futures), self._safety_ms())
            except Exception:  # the safety net passed: the requests not done time out below
                pass
        return self._collect(pendings)

    def _collect(self, pendings: list[Any]) -> list[Any]:
        """``(pending, body)`` per request of ``pendings`` whose answer came, its exception if it
        failed, a ``KafkaTimeoutError`` if it is still not answered (the safety net passed)."""
        out: list[Any] = []
        for p in pendings:
            if not isinstance(p, Pending):
                out.append(p)
            elif not p.future.is_done:
                out.append(Errors.KafkaTimeoutError(f"Timed out after {self._safety_ms()} ms"))
            elif p.future.exception is not None:
                out.append(p.future.exception)
            else:
                out.append((p, p.future.value))
        return out

    def _decode(self, pending: Pending, body: bytes) -> Any:
        """Decode ``body``, the answer of ``pending`` (and note its KIP-219 throttle)."""
        try:
            response = pending.decoder.decode(body)
        except (ValueError, struct.error) as exc:
            log.error("KafkaWire: undecodable %d-byte answer from %s: %s", len(body), self._node_desc(pending.node),
                      exc)
            raise Errors.KafkaProtocolError("Unable to decode response") from exc
        self._note_throttle(pending.node, response, pending.versions)
        return response

    async def _send(self, node_id: NodeId, request: Any) -> Any:
        """Send one request to a node and return its decoded answer."""
        return await self._await(await self._send_nowait(node_id, request))

    # ------------------------------------------------------------------ KIP-219 throttling
    def _note_throttle(self, node_id: NodeId, response: Any, versions: BrokerVersionData | None) -> None:
        throttle_ms = getattr(response, "throttle_time_ms", 0) or 0
        if throttle_ms <= 0:
            return
        log.warning("KafkaWire: %s: %s throttled by broker (%d ms)", self._node_desc(node_id),
                    type(response).__name__, throttle_ms)
        broker = versions.broker_version if versions is not None else None
        if broker is not None and broker >= (2, 0):  # older brokers delay the answer themselves
            until = time.monotonic() + throttle_ms / 1000
            if until > self._throttle_until.get(node_id, 0.0):
                self._throttle_until[node_id] = until

    def _throttled_for(self, node_id: NodeId) -> int:
        """Milliseconds the node stays throttled (KIP-219), 0 if it is not."""
        left = self._throttle_until.get(node_id, 0.0) - time.monotonic()
        return max(int(left * 1000), 1) if left > 0 else 0

    async def _unthrottled(self, node_id: NodeId) -> None:
        """Wait until the node is no longer throttled; other nodes are not held up."""
        while (left := self._throttle_until.get(node_id, 0.0) - time.monotonic()) > 0:
            self.throttle_waits += 1
            await self._transport.sleep(max(left, 0.005))

    # ------------------------------------------------------------------ messages
    def _node_desc(self, node_id: Any) -> str:
        if node_id == -1:
            return "none (no leader)"
        transport = self._transport
        address = transport.address(node_id) if transport is not None else None
        if address is None:
            return f"node {node_id}"
        if isinstance(node_id, str) and node_id.startswith("bootstrap-"):
            return f"bootstrap server {address[0]}:{address[1]}"
        return f"node {node_id} at {address[0]}:{address[1]}"

    def _denied(self, api: str, code: int, resource: str, node: Any) -> KafkaAuthorizationError:
        msg = authorization_message(api, code, resource, principal=principal_of(self._config),
                                    bootstrap=self.bootstrap_servers,
                                    broker=self._node_desc(node) if node is not None else None)
        return KafkaAuthorizationError(msg, error_code=code)
