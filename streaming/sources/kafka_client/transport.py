"""The lowest layer of the Kafka client: a :class:`Transport` carries encoded requests to brokers.

Everything above it - version negotiation, the request and response codecs, KIP-219 throttling,
retries, the metadata cache and every Kafka API - is the client's own code
(:mod:`streaming.sources.kafka_client.core` and up) and runs unchanged over any transport. The
real one, :class:`~streaming.sources.kafka_client.socket_transport.SocketTransport`, is
kafka-python 3.0's ``NetworkSelector`` + ``KafkaConnectionManager`` (sockets, TLS, SASL,
reconnect backoff, per-request timeouts). A benchmark or test may pass another one to
``KafkaWire(..., transport=factory)`` to simulate a cluster in-process, below the client.

The contract, in the terms of the Kafka protocol guide ("Requests and Responses"):

* A request is sent as :class:`WireRequest`: api key, api version (already chosen by the client
  from the broker's ApiVersions ranges, which :meth:`Transport.connect` reports), whether the
  request header is v2 (flexible versions) or v1, whether the response header is v1 or v0, and
  the encoded request *body*. The transport owns the connection, so it assigns the correlation
  id, writes ``size + header + body`` (:func:`encode_frame`), matches the answer by correlation id
  and returns the response *body* after its header (:func:`decode_frame`).
* Failures are exceptions of ``kafka.errors`` as kafka-python raises them, because the retry
  policy (:func:`streaming.sources.kafka_client.errors.retriable_exception`) classifies them:
  ``NodeNotReadyError`` (node in reconnect backoff), ``KafkaConnectionError`` (refused, reset,
  closed), ``RequestTimedOutError`` (no answer within the request timeout: the connection is
  closed), ``UnknownBrokerIdError`` (node id not in the cluster metadata), and for connection
  setup ``SaslAuthenticationFailedError`` / ``IncompatibleBrokerVersion``.
* Futures are ``kafka.future.Future``; coroutines run on the transport's single IO loop
  (:meth:`Transport.run` from any thread, :meth:`Transport.call_soon_with_future` and
  :meth:`Transport.sleep` on it).
* Node ids are the broker ids of the cluster's Metadata answers, or ``"bootstrap-N"`` for the
  configured bootstrap servers before the first answer (kafka-python's naming).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kafka.future import Future
from kafka.protocol.broker_version_data import BrokerVersionData

__all__ = ["NodeId", "Transport", "TransportFactory", "WireRequest", "decode_frame", "encode_frame", "read_response_header",
           "request_header"]

#: A broker id from Metadata, or ``"bootstrap-N"`` for a bootstrap server.
NodeId = int | str
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One encoded request, ready for a connection to frame it.

    ``request_header_flexible``: request header v2 (client id then tagged fields) for flexible
    versions of the API, else v1. ``response_header_flexible``: response header v1 (correlation
    id then tagged fields), else v0; ApiVersions answers always use v0 (KIP-511). ``body``: the
    request body exactly as it follows the header on the wire.
    """

    api_key: int
    api_version: int
    body: bytes
    request_header_flexible: bool
    response_header_flexible: bool


_REQUEST_HEADER = struct.Struct(">hhi")
_NULL_STRING = b"\xff\xff"  # a null STRING: INT16 length -1


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   flexible: bool) -> bytes:
    """The request header, encoded as apache/kafka's
    clients/src/main/resources/common/message/RequestHeader.json lays it out: RequestApiKey
    int16, RequestApiVersion int16, CorrelationId int32, ClientId nullable string (v1+; always
    the INT16 length form, ``"flexibleVersions": "none"``: older brokers must read the header of
    any ApiVersions request), and in v2 (``"flexibleVersions": "2+"``) an empty tagged-field
    section. Written by hand: kafka-python's schema-driven header encoder was the largest single
    cost of sending a request (about 4,800 requests per trigger at 1,000 brokers)."""
    if client_id is None:
        cid = _NULL_STRING
    else:
        raw = client_id.encode()
        cid = len(raw).to_bytes(2, "big") + raw
    head = _REQUEST_HEADER.pack(api_key, api_version, correlation_id) + cid
    return head + b"\x00" if flexible else head


def read_response_header(data: Any, flexible: bool) -> int:
    """Read the response header from the stream ``data`` (positioned at the header) and return
    its correlation id. apache/kafka's ResponseHeader.json: CorrelationId int32, and in v1
    (``"flexibleVersions": "1+"``) a tagged-field section (an unsigned varint count, then per
    field an unsigned varint tag, an unsigned varint size and that many bytes), skipped here:
    it defines no tagged field."""
    raw = data.read(4)
    if len(raw) < 4:
        raise ValueError("response ends inside its header")
    correlation_id = int.from_bytes(raw, "big", signed=True)
    if flexible:
        for _ in range(_read_uvarint(data)):
            _read_uvarint(data)  # tag
            size = _read_uvarint(data)
            if len(data.read(size)) < size:
                raise ValueError("response ends inside a tagged field of its header")
    return correlation_id


def _read_uvarint(data: Any) -> int:
    """An unsigned varint (protobuf encoding, as Kafka's ``ByteUtils.readUnsignedVarint``) from a stream."""
    value = shift = 0
    while True:
        b = data.read(1)
        if not b:
            raise ValueError("response ends inside a varint")
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def encode_frame(request: WireRequest, correlation_id: int, client_id: str | None) -> bytes:
    """``int32 size`` + request header + body: what goes on the socket for ``request``."""
    payload = request_header(request.api_key, request.api_version, correlation_id, client_id,
                             request.request_header_flexible) + request.body
    return struct.pack(">i", len(payload)) + payload


def decode_frame(payload: bytes, request: WireRequest) -> tuple[int, bytes]:
    """(correlation id, response body) of one response frame *without* its ``int32`` size."""
    buf = io.BytesIO(payload)
    correlation_id = read_response_header(buf, request.response_header_flexible)
    return correlation_id, payload[buf.tell():]


class Transport(Protocol):
    """What the client needs below it (see the module docstring for the contract).

    One instance serves one client object in one process; it is created by a
    :data:`TransportFactory` from the client's configuration on first use.
    """

    # -- the IO loop
    def start(self) -> None:
        """Start the IO loop (a thread) so that :meth:`run` can be called."""

    def close(self) -> None:
        """Close every connection and stop the IO loop; idempotent, safe from any thread."""

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` on the IO loop; block the calling thread until it returns or raises."""

    def call_soon_with_future(self, fn: Callable[[], Awaitable[Any]]) -> Future:
        """Start ``fn()`` on the IO loop as a task of its own; its Future resolves with the result."""

    async def sleep(self, seconds: float) -> None:
        """Let the IO loop run other tasks for ``seconds``."""

    async def wait_for(self, future: Future, timeout_ms: float) -> Any:
        """Await ``future`` at most ``timeout_ms`` (``KafkaTimeoutError``); the future keeps running."""

    # -- the cluster's brokers
    @property
    def bootstrapped(self) -> bool:
        """Whether :meth:`bootstrap` has succeeded."""

    def bootstrap(self, timeout_ms: int) -> None:
        """Find the cluster from the bootstrap servers (blocking, caller thread). Raises
        ``KafkaWireError`` when retrying cannot help (authentication, TLS, incompatible broker),
        else ``KafkaUnavailable`` naming what failed after ``timeout_ms``."""

    def bootstrap_nodes(self) -> list[NodeId]:
        """The configured bootstrap servers as nodes."""

    def nodes(self) -> list[NodeId]:
        """The brokers of the last Metadata answer given to :meth:`update_cluster`."""

    def address(self, node: NodeId) -> tuple[str, int] | None:
        """``(host, port)`` of a node, None when unknown."""

    def update_cluster(self, metadata: Any) -> None:
        """A decoded Metadata answer (``brokers``: node_id, host, port, rack) that the client got:
        node ids route to those brokers from now on."""

    def least_loaded_node(self) -> NodeId | None:
        """A connected node without requests in flight if any, else one not in reconnect backoff."""

    def connection_delay(self, node: NodeId) -> float:
        """Seconds the node stays in reconnect backoff (KIP-144), 0 if it may be connected now."""

    @property
    def broker_version_data(self) -> BrokerVersionData | None:
        """ApiVersions of the bootstrap broker first connected (None before :meth:`bootstrap`)."""

    # -- requests
    def connect(self, node: NodeId) -> Future:
        """A Future of the node's connection: it resolves with the broker's ApiVersions ranges
        (``BrokerVersionData``, negotiated when the connection was set up) once the node can take
        requests, or fails with the connection's error."""

    def send(self, node: NodeId, request: WireRequest, timeout_ms: int) -> Future:
        """Send ``request`` on the node's connection; the Future resolves with the response body
        (bytes after the response header), or fails with ``RequestTimedOutError`` after
        ``timeout_ms``, or with the connection's error."""


#: Builds the transport of a client from its configuration dict (``bootstrap_servers``,
#: ``client_id``, ``request_timeout_ms``, security and kafka-python connection settings).
TransportFactory = Callable[[dict[str, Any]], Transport]
