"""The real :class:`~streaming.sources.kafka_client.transport.Transport`: kafka-python 3.0's network layer.

``kafka.net.NetworkSelector`` (one IO thread) + ``kafka.net.KafkaConnectionManager`` (the stack
``KafkaAdminClient`` uses): connections, the ApiVersions handshake of each new connection, SASL
and TLS, reconnect backoff (KIP-144), per-request timeouts, correlation ids. The client above
hands it encoded requests (:class:`WireRequest`); kafka-python frames them and returns the
response body undecoded (:class:`_Framed`), so the codecs are the client's own.

It also holds the parts of connecting that only a real network has: failing at once, and
clearly, when TLS or SASL is refused (:meth:`SocketTransport._check_security`), and saying
why a bootstrap failed (:meth:`SocketTransport._bootstrap_diagnosis`).
"""

from __future__ import annotations

import heapq
import logging
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kafka.errors as Errors
from kafka.cluster import collect_hosts
from kafka.future import Future
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector, TaskState
from kafka.protocol.broker_version_data import BrokerVersionData

from streaming.sources.kafka_client.errors import KafkaUnavailable, KafkaWireError, describe
from streaming.sources.kafka_client.transport import NodeId, WireRequest, read_response_header, request_header

log = logging.getLogger(__name__)

__all__ = ["PASSTHROUGH", "SocketTransport"]

#: kafka-python connection settings a caller may pass through unchanged.
#: (metadata_max_age_ms is the client's own: kafka-python's cluster metadata keeps its default.)
PASSTHROUGH = frozenset(KafkaConnectionManager.DEFAULT_CONFIG) - {"bootstrap_servers", "metrics",
                                                                    "metric_group_prefix", "metadata_max_age_ms"}


class _Correlated:
    """What kafka-python's ``KafkaProtocol._process_response`` reads of a parsed response header."""

    __slots__ = ("correlation_id",)

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


class _BodyOnly:
    """Stands in for kafka-python's response class: parses the response header (so that
    kafka-python checks the correlation id) and returns the body as bytes. Stateless: one per
    response header version (:data:`_BODY_ONLY`)."""

    __slots__ = ("flexible",)

    def __init__(self, flexible: bool):
        self.flexible = flexible

    def parse_header(self, data) -> _Correlated:
        try:
            return _Correlated(read_response_header(data, self.flexible))
        except ValueError as exc:  # a truncated header, as kafka-python's decoder reports it
            raise struct.error(str(exc)) from exc

    @staticmethod
    def decode(data) -> bytes:
        return data.read() if hasattr(data, "read") else bytes(data)


_BODY_ONLY = {False: _BodyOnly(False), True: _BodyOnly(True)}


class _Framed:
    """A :class:`WireRequest` as kafka-python's ``KafkaConnection`` sends requests: it calls
    ``with_header(correlation_id, client_id)`` then ``encode(framed=True, header=True)``, and
    keeps ``header`` (here the request itself: ``correlation_id`` and ``get_response_class``) to
    match the answer. The header is encoded by hand (``transport.request_header``)."""

    __slots__ = ("API_VERSION", "client_id", "correlation_id", "request")

    def __init__(self, request: WireRequest):
        self.request = request
        self.API_VERSION = request.api_version  # set: kafka-python does not negotiate it again
        self.correlation_id = 0
        self.client_id: str | None = None

    def __repr__(self) -> str:
        return f"Request(api_key={self.request.api_key}, v{self.request.api_version}, {len(self.request.body)} bytes)"

    @property
    def header(self) -> _Framed:
        return self

    @property
    def api_key(self) -> int:
        return self.request.api_key

    @property
    def api_version(self) -> int:
        return self.request.api_version

    def get_response_class(self) -> _BodyOnly:
        return _BODY_ONLY[self.request.response_header_flexible]

    def expect_response(self) -> bool:
        return True

    def with_header(self, correlation_id: int = 0, client_id: str | None = "kafka-python") -> None:
        self.correlation_id = correlation_id
        self.client_id = client_id

    def encode(self, framed: bool = False, header: bool = False) -> bytes:
        r = self.request
        payload = (request_header(r.api_key, r.api_version, self.correlation_id, self.client_id,
                                  r.request_header_flexible) + r.body) if header else r.body
        return len(payload).to_bytes(4, "big", signed=True) + payload if framed else payload


class _BrokersOnly:
    """A Metadata answer as kafka-python's ``ClusterMetadata.update_metadata`` is given it: the
    brokers, controller and cluster id, and no topics (see ``SocketTransport.update_cluster``)."""

    __slots__ = ("API_VERSION", "brokers", "cluster_id", "controller_id", "topics")

    def __init__(self, metadata: Any) -> None:
        self.API_VERSION = metadata.API_VERSION
        self.brokers = metadata.brokers
        self.controller_id = getattr(metadata, "controller_id", None)
        self.cluster_id = getattr(metadata, "cluster_id", None)
        self.topics: list[Any] = []


def _shutdown(net: NetworkSelector, manager: KafkaConnectionManager) -> None:
    try:
        if net._io_thread is not None and threading.current_thread() is not net._io_thread:
            net.run(manager.close)
    except Exception:  # best effort on close
        log.debug("KafkaWire: error closing connections", exc_info=True)
    try:
        net.close()
    except Exception:
        log.debug("KafkaWire: error stopping the IO loop", exc_info=True)


def _live(entry: tuple[float, Any]) -> bool:
    when, task = entry
    return task.state is TaskState.SCHEDULED and task.scheduled_at == when


class _Selector(NetworkSelector):
    """kafka-python's ``NetworkSelector`` with timers cancelled in O(log n) instead of O(n).

    Every request in flight holds a timer (its timeout), and so does every bounded wait; the
    base class removes a cancelled timer from its heap and re-heapifies (``_unschedule``), a
    pass over all timers per cancellation. Asking 1,000 brokers three ListOffsets each keeps
    thousands of timers at once, which made the IO thread's bookkeeping quadratic (seconds per
    trigger, bench/cluster_scale.py). Here a cancelled timer stays in the heap, marked no longer
    scheduled, and is dropped when it reaches the top (or when stale ones are the majority); a
    heap entry is live only while its task is still scheduled at that time."""

    def __init__(self, **configs: Any) -> None:
        super().__init__(**configs)
        self._stale = 0

    def _unschedule(self, task: Any) -> None:
        assert task.state is TaskState.SCHEDULED
        task.scheduled_at = None
        task.state = TaskState.UNSCHEDULED
        self._stale += 1
        if self._stale > 64 and 2 * self._stale > len(self._scheduled):
            self._scheduled = [e for e in self._scheduled if _live(e)]
            heapq.heapify(self._scheduled)
            self._stale = 0

    def _drop_stale_top(self) -> None:
        heap = self._scheduled
        while heap and not _live(heap[0]):
            heapq.heappop(heap)
            self._stale = max(self._stale - 1, 0)

    def _schedule_tasks(self) -> None:
        heap = self._scheduled
        now = time.monotonic()
        while heap and (not _live(heap[0]) or heap[0][0] <= now):
            entry = heapq.heappop(heap)
            if not _live(entry):
                self._stale = max(self._stale - 1, 0)
                continue
            entry[1].scheduled_at = None
            self._add_ready_task(entry[1])

    def _next_scheduled_timeout(self, now: float) -> float | None:
        self._drop_stale_top()
        return super()._next_scheduled_timeout(now)


def _selector(client_id: str) -> NetworkSelector:
    """:class:`_Selector` when this kafka-python's selector has the timer heap it expects
    (kafka-python 3.0), else kafka-python's own."""
    probe = NetworkSelector.__dict__
    if all(name in probe for name in ("_unschedule", "_schedule_tasks", "_next_scheduled_timeout")):
        return _Selector(client_id=client_id)
    return NetworkSelector(client_id=client_id)


class SocketTransport:
    """Kafka brokers over TCP (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) via kafka-python."""

    def __init__(self, config: dict[str, Any]):
        self._config = config
        cfg = {k: v for k, v in config.items() if k in PASSTHROUGH or k == "bootstrap_servers"}
        self._net = _selector(cfg["client_id"])
        self._manager = KafkaConnectionManager(self._net, **cfg)
        self._ready: dict[NodeId, tuple[Any, Any, Future]] = {}  # node -> (connection, its ApiVersions, resolved Future)

    # ------------------------------------------------------------------ the IO loop
    def start(self) -> None:
        self._net.start()

    def close(self) -> None:
        _shutdown(self._net, self._manager)

    def closer(self) -> Callable[[], None]:
        """A function closing this transport that holds no reference to its client (for
        ``weakref.finalize``)."""
        net, manager = self._net, self._manager
        return lambda: _shutdown(net, manager)

    def run(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return self._net.run(fn, *args)

    def call_soon_with_future(self, fn: Callable[[], Awaitable[Any]]) -> Future:
        return self._net.call_soon_with_future(fn)

    async def sleep(self, seconds: float) -> None:
        await self._net.sleep(seconds)

    async def wait_for(self, future: Future, timeout_ms: float) -> Any:
        return await self._manager.wait_for(future, timeout_ms)

    # ------------------------------------------------------------------ the cluster
    @property
    def bootstrapped(self) -> bool:
        return self._manager.bootstrapped

    @property
    def broker_version_data(self) -> BrokerVersionData | None:
        return self._manager.broker_version_data

    def bootstrap_nodes(self) -> list[NodeId]:
        return [b.node_id for b in self._manager.cluster.bootstrap_brokers()]

    def nodes(self) -> list[NodeId]:
        return [b.node_id for b in self._manager.cluster.brokers()]

    def address(self, node: NodeId) -> tuple[str, int] | None:
        meta = self._manager.cluster.broker_metadata(node)
        return None if meta is None else (meta.host, meta.port)

    def update_cluster(self, metadata: Any) -> None:
        # kafka-python routes node ids with the answer's brokers; nothing of ours reads its
        # per-partition view (MetadataCache keeps leaders and epochs). Handing it the topics too
        # made it build a dict entry and a TopicPartition per partition and keep every decoded
        # partition object alive until the next answer: at 200,000 partitions a large part of a
        # refresh, and about a million long-lived objects for every full GC to walk.
        self._manager.cluster.update_metadata(_BrokersOnly(metadata))

    def least_loaded_node(self) -> NodeId | None:
        return self._manager.least_loaded_node()

    def connection_delay(self, node: NodeId) -> float:
        return self._manager.connection_delay(node)

    # ------------------------------------------------------------------ requests
    def connect(self, node: NodeId) -> Future:
        try:
            conn = self._manager.get_connection(node)
        except Errors.NodeNotReadyError as exc:  # reconnect backoff: as KafkaConnectionManager.send
            return Future().failure(exc)
        init = conn.init_future
        if init.is_done and init.exception is None:
            # the common case, a connection already set up: one resolved Future per connection
            # instead of a new one (and two callbacks) per request
            ready = self._ready.get(node)
            if ready is None or ready[0] is not conn or ready[1] is not conn.broker_version_data:
                ready = self._ready[node] = (conn, conn.broker_version_data, Future().success(conn.broker_version_data))
            return ready[2]
        out = Future()
        conn.init_future.add_callback(lambda _: out.success(conn.broker_version_data))
        conn.init_future.add_errback(out.failure)
        return out

    def send(self, node: NodeId, request: WireRequest, timeout_ms: int) -> Future:
        return self._manager.send(_Framed(request), node_id=node, request_timeout_ms=timeout_ms)

    # ------------------------------------------------------------------ bootstrap
    def bootstrap(self, timeout_ms: int) -> None:
        manager = self._manager
        servers = ",".join(self._config["bootstrap_servers"])
        if str(self._config.get("security_protocol") or "PLAINTEXT").upper() != "PLAINTEXT":
            self._check_security()
        try:
            manager.bootstrap(timeout_ms)
        except (Errors.SaslAuthenticationFailedError, Errors.AuthorizationError) as exc:
            raise KafkaWireError(f"Kafka authentication/authorization failed against "
                                 f"{servers}: {describe(exc)}") from exc
        except Errors.IncompatibleBrokerVersion as exc:
            raise KafkaWireError(f"Kafka broker at {servers} is incompatible: "
                                 f"{describe(exc)}") from exc
        except Exception as exc:  # KafkaTimeoutError and friends
            raise KafkaUnavailable(
                f"Kafka unavailable: could not bootstrap cluster metadata from {servers} "
                f"within {timeout_ms} ms (last error: {self._bootstrap_diagnosis(exc)})") from exc

    def _check_security(self) -> None:
        """Fail at once, and clearly, when TLS or SASL is refused.

        kafka-python's bootstrap retries a refused authentication like a network error until its
        timeout and then reports only the timeout; a wrong password or an untrusted certificate
        never heals by retrying (Kafka's Java clients treat AuthenticationException as fatal too).
        One connection to a bootstrap server is opened first; other failures are left to the
        bootstrap's retries. The connection stays open and is used by the bootstrap.
        """
        manager = self._manager
        broker = manager.cluster.bootstrap_brokers()[0]

        async def probe() -> BaseException | None:
            try:
                conn = manager.get_connection(broker.node_id, timeout_ms=self._config["socket_connection_setup_timeout_ms"],
                                              pop_on_close=False, refresh_metadata_on_err=False,
                                              reset_backoff_on_connect=False)
                await conn
            except Exception as exc:  # classified below
                manager.close(broker.node_id)
                return exc
            return None

        exc = self._net.run(probe)
        if exc is None:
            return
        cfg = self._config
        where = (f"{broker.host}:{broker.port} ({cfg.get('security_protocol')}"
                 f"{', ' + cfg['sasl_mechanism'] if cfg.get('sasl_mechanism') else ''}"
                 f"{', user ' + cfg['sasl_plain_username'] if cfg.get('sasl_plain_username') else ''})")
        cause = exc.__cause__ or (exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None)
        if isinstance(exc, (Errors.SaslAuthenticationFailedError, Errors.UnsupportedSaslMechanismError,
                            Errors.IllegalSaslStateError)):
            detail = re.sub(r"^(\[Error \d+\] )?(\w+: )*", "", str(exc))  # kafka-python repeats the class name
            if isinstance(exc, Errors.UnsupportedSaslMechanismError):
                detail = (f"the broker does not enable {cfg.get('sasl_mechanism')} on this listener "
                          f"(its sasl.enabled.mechanisms)")
            raise KafkaWireError(f"Kafka authentication failed at {where}: {type(exc).__name__}: {detail}") from exc
        # kafka-python wraps TLS failures as KafkaConnectionError("Handshake failed: <ssl error>")
        tls_failed = isinstance(cause, ssl.SSLError) or isinstance(exc, ssl.SSLError) or (
            isinstance(exc, Errors.KafkaConnectionError) and "Handshake failed" in str(exc))
        if tls_failed:
            detail = describe(cause) if isinstance(cause, ssl.SSLError) else str(exc).split("Handshake failed: ")[-1]
            raise KafkaWireError(f"TLS handshake with {where} failed: {detail} (check ssl_cafile, "
                                 f"ssl_check_hostname, ssl_crlfile and the client certificate)") from exc

    def _bootstrap_diagnosis(self, exc: BaseException) -> str:
        manager = self._manager
        for broker in manager.cluster.bootstrap_brokers():
            failure = manager.auth_failure(broker.node_id)
            if failure is not None:
                return f"authentication failed at {broker.host}:{broker.port}: {describe(failure)}"
        problems = []
        for host, port, _ in collect_hosts(self._config["bootstrap_servers"], randomize=False):
            try:
                with socket.create_connection((host, port), timeout=1.0):
                    problems.append(f"{host}:{port} accepts TCP connections but the Kafka handshake/"
                                    f"metadata request failed ({describe(exc)})")
            except OSError as err:
                problems.append(f"{host}:{port} {err.strerror or describe(err)}")
        return "; ".join(problems) or describe(exc)

