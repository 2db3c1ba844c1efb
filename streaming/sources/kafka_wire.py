"""Raw Kafka protocol client of the txnwatch ``kafka`` source (DESIGN §4): the :class:`KafkaWire` facade.

:class:`KafkaWire` is what the ``kafka`` streaming source uses on the Spark driver (partition
discovery, offsets for admission control and planning) and on the executors (raw fetches). Each
of its methods is one call into the client's layers, under :mod:`streaming.sources.kafka_client`:

* :mod:`~streaming.sources.kafka_client.transport` - the seam below the client (connections, bytes
  in and out); :mod:`~streaming.sources.kafka_client.socket_transport` is the real one, on
  kafka-python 3.0's ``NetworkSelector`` + ``KafkaConnectionManager`` (SASL/SSL, reconnect backoff);
* :mod:`~streaming.sources.kafka_client.core` - configuration, lifecycle, version negotiation,
  request codecs, KIP-219 throttling; :mod:`~streaming.sources.kafka_client.metadata_cache` -
  leaders, epochs, topic ids, discovery; :mod:`~streaming.sources.kafka_client.retry` - bounded
  retries with backoff; :mod:`~streaming.sources.kafka_client.errors` and
  :mod:`~streaming.sources.kafka_client.results` - what callers get;
* one module per Kafka API: :mod:`~streaming.sources.kafka_client.metadata` (Metadata v1+),
  :mod:`~streaming.sources.kafka_client.list_offsets` (ListOffsets v2-v11, codec in
  :mod:`~streaming.sources.kafka_client.list_offsets_codec`), :mod:`~streaming.sources.kafka_client.fetch`
  (Fetch v4-v12). Their docstrings state the Kafka semantics each relies on.

``KafkaConsumer`` cannot be used because it hides control batches, never returns aborted data
in READ_COMMITTED and does not expose producer ids/epochs per batch or partial batches; the bytes
:meth:`KafkaWire.fetch` returns are exactly what the broker sent (the ``.log`` segment layout,
control batches and open or aborted transactional data included). Nothing is decompressed here.

Fault handling, in short (details in the API modules): leader moves, missing leaders, storage
and network errors and connection failures refresh metadata, back off and retry, at most
``retries`` times, then raise :class:`KafkaUnavailable` naming the operation, the bootstrap
servers, the partition leader, the last broker tried and the last error (about 20 s with the
defaults when connections are refused). OFFSET_OUT_OF_RANGE is returned with the current log
start; a partition is reported deleted only after ``deletion_confirmations`` Metadata answers in a
row lack it; ``*_AUTHORIZATION_FAILED`` raises :class:`KafkaAuthorizationError` naming the ACL;
anything else that retrying cannot fix raises :class:`KafkaWireError`. Nothing is ever skipped
silently. Requests to different brokers go out at once, each awaited up to ``broker_timeout_ms``
(:mod:`streaming.sources.kafka_parallel`).

Threading and Spark: a :class:`KafkaWire` may be shared by threads (every call runs as a
coroutine on its own IO thread; the calling thread blocks until it completes) and is picklable
(only the configuration travels; connections are opened lazily on first use in the process that
uses it). Call :meth:`KafkaWire.close` (or use it as a context manager) when done.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka.cluster import collect_hosts

from streaming.sources.kafka_client import fetch as fetch_api
from streaming.sources.kafka_client import list_offsets as list_offsets_api
from streaming.sources.kafka_client import metadata as metadata_api
from streaming.sources.kafka_client.core import ClientCore
from streaming.sources.kafka_client.errors import (
    KafkaAuthorizationError,
    KafkaUnavailable,
    KafkaWireError,
    error_name,
)
from streaming.sources.kafka_client.fetch import FETCH_MAX_VERSION, FETCH_MIN_VERSION
from streaming.sources.kafka_client.list_offsets_codec import (
    LIST_OFFSETS_MAX_VERSION,
    LIST_OFFSETS_MIN_VERSION,
)
from streaming.sources.kafka_client.metadata import METADATA_MIN_VERSION
from streaming.sources.kafka_client.results import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchResult,
    FetchStatus,
    OffsetsTable,
    PartitionOffsets,
)
from streaming.sources.kafka_client.socket_transport import PASSTHROUGH
from streaming.sources.kafka_client.transport import TransportFactory

__all__ = [
    "FETCH_MAX_VERSION",
    "FETCH_MIN_VERSION",
    "LIST_OFFSETS_MAX_VERSION",
    "LIST_OFFSETS_MIN_VERSION",
    "METADATA_MAX_AGE_MS",
    "METADATA_MIN_VERSION",
    "FetchResult",
    "FetchStatus",
    "KafkaAuthorizationError",
    "KafkaUnavailable",
    "KafkaWire",
    "KafkaWireError",
    "PartitionOffsets",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "error_name",
]

#: The ``metadata_max_age_ms`` the streaming source uses by default (see :class:`KafkaWire`).
METADATA_MAX_AGE_MS = 30_000


class KafkaWire(ClientCore):
    """Raw-protocol Kafka client: metadata, offsets (HW + LSO + log start) and raw fetches.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list of ``host:port``.
        client_id: Kafka client id (shows up in broker request logs/quotas).
        security_protocol, sasl_*, ssl_*: passed to kafka-python unchanged (PLAINTEXT, SSL,
            SASL_PLAINTEXT, SASL_SSL; PLAIN, SCRAM-SHA-256/512, GSSAPI, OAUTHBEARER).
        request_timeout_ms: per-request timeout (a timed-out request closes its connection).
        retries: retries per operation for retriable conditions (leader moves, broker down).
        retry_backoff_ms / retry_backoff_max_ms: exponential backoff between retries.
        reconnect_backoff_ms / reconnect_backoff_max_ms: kafka-python's per-node reconnect backoff.
        socket_connection_setup_timeout_ms: TCP+TLS+ApiVersions+SASL setup timeout per attempt
            (default ``min(request_timeout_ms, 10000)``).
        bootstrap_timeout_ms: how long the first metadata bootstrap may take (default
            ``request_timeout_ms``) before :class:`KafkaUnavailable`.
        receive_message_max_bytes: largest accepted response frame (default 100 MB).
        deletion_confirmations: consecutive Metadata answers that must all lack a topic or
            partition before it is reported deleted (default 3; one stale broker cache is not enough).
        metadata_max_age_ms: how long :meth:`partitions` may answer from the last Metadata
            response instead of asking again. The constructor's default, 0, asks every time
            (fresh topic ids on every call: what callers that compare topic ids per call, and
            the tests written for that, expect); the streaming source's option of the same name
            defaults to :data:`METADATA_MAX_AGE_MS`, 30 s. This is the Kafka clients'
            ``metadata.max.age.ms`` ("The period of time in milliseconds after which we force a
            refresh of metadata even if we haven't seen any partition leadership changes to
            proactively discover any new brokers or partitions", apache/kafka
            ``CommonClientConfigs.METADATA_MAX_AGE_DOC``; a ``KafkaConsumer`` with a pattern
            subscription re-evaluates the pattern on each such refresh). Kafka's default is 5
            minutes (``ConsumerConfig``/``AdminClientConfig``: ``5 * 60 * 1000``); 30 s is
            recommended for the watchdog because it should notice a new topic or partition
            (which may already hold a hanging transaction) within a small fraction of its alert
            threshold (``[thresholds] max_timeout_ms``, 15 minutes by default), while a Metadata
            answer for 10,000 partitions is then asked at most once per 30 s instead of on every
            trigger. As in the Java clients, the cache is refreshed early, on
            the next call, after anything that suggests it is out of date: any retriable
            failure (leader errors, no leader, UNKNOWN_TOPIC_OR_PARTITION, connection failures),
            every deletion confirmation (which always asks the brokers), and an offset answer
            whose high watermark or log start went backwards (the topic may have been deleted and
            created again: its topic id is then refreshed before the offsets are returned).
            Partition leaders used for routing are always the newest known, whatever the age.
            What the cache costs: a topic deleted and created again under the same name, whose
            offsets did not go backwards, is told apart by its new topic id only at the next
            refresh (at most ``metadata_max_age_ms`` later) - as a Java consumer would.
        broker_timeout_ms: how long :meth:`offsets_available` and :meth:`fetch_many` wait for one
            broker (default ``request_timeout_ms``). All brokers are asked at once; the
            partitions of a broker that has not answered by then are unavailable for that call
            (its request stays in flight, and later calls do not wait on that broker again
            until it has answered or timed out): one stalled broker costs the others at most
            this long, once (streaming/sources/kafka_parallel.py).
        transport: a :data:`~streaming.sources.kafka_client.transport.TransportFactory` building the
            lowest layer from the configuration dict (default: the real network,
            :class:`~streaming.sources.kafka_client.socket_transport.SocketTransport`). A benchmark
            or test passes an in-process one to run this whole client over a simulated cluster.
            It travels with the object when pickled, so it must be picklable (a module-level
            class or function).
        **kafka_configs: any other ``kafka.net.KafkaConnectionManager`` setting
            (``ssl_context``, ``ssl_check_hostname``, ``sasl_oauth_token_provider``,
            ``proxy_url``, ``client_dns_lookup``, ``api_version``, ...).
    """

    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str = "txnwatch",
                 security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
                 sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                 ssl_cafile: str | None = None, ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                 ssl_password: str | None = None, request_timeout_ms: int = 30000, retries: int = 8,
                 retry_backoff_ms: int = 200, retry_backoff_max_ms: int = 5000, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000, socket_connection_setup_timeout_ms: int | None = None,
                 bootstrap_timeout_ms: int | None = None, receive_message_max_bytes: int = 100_000_000,
                 deletion_confirmations: int = 3, metadata_max_age_ms: int = 0,
                 broker_timeout_ms: int | None = None, transport: TransportFactory | None = None,
                 **kafka_configs: Any):
        unknown = set(kafka_configs) - PASSTHROUGH
        if unknown:
            raise ValueError(f"unknown kafka-python connection settings: {sorted(unknown)}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        if deletion_confirmations < 1:
            raise ValueError("deletion_confirmations must be >= 1")
        if metadata_max_age_ms < 0:
            raise ValueError("metadata_max_age_ms must be >= 0")
        setup_ms = socket_connection_setup_timeout_ms or min(request_timeout_ms, 10000)
        if isinstance(bootstrap_servers, str):
            bootstrap_servers = [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
        if not bootstrap_servers:
            raise ValueError("bootstrap_servers is empty")
        collect_hosts(bootstrap_servers)  # validates host:port syntax early
        config: dict[str, Any] = {
            "bootstrap_servers": list(bootstrap_servers),
            "client_id": client_id,
            "security_protocol": security_protocol,
            "sasl_mechanism": sasl_mechanism,
            "sasl_plain_username": sasl_plain_username,
            "sasl_plain_password": sasl_plain_password,
            "ssl_cafile": ssl_cafile,
            "ssl_certfile": ssl_certfile,
            "ssl_keyfile": ssl_keyfile,
            "ssl_password": ssl_password,
            "request_timeout_ms": request_timeout_ms,
            "reconnect_backoff_ms": reconnect_backoff_ms,
            "reconnect_backoff_max_ms": reconnect_backoff_max_ms,
            "socket_connection_setup_timeout_ms": setup_ms,
            "socket_connection_setup_timeout_max_ms": setup_ms,
            "receive_message_max_bytes": receive_message_max_bytes,
            **kafka_configs,
            # txnwatch-level settings (not passed to kafka-python)
            "retries": retries,
            "retry_backoff_ms": retry_backoff_ms,
            "retry_backoff_max_ms": retry_backoff_max_ms,
            "bootstrap_timeout_ms": bootstrap_timeout_ms or request_timeout_ms,
            "deletion_confirmations": deletion_confirmations,
            "metadata_max_age_ms": int(metadata_max_age_ms),
            "broker_timeout_ms": int(broker_timeout_ms or request_timeout_ms),
        }
        super().__init__(config, transport)

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaWire({self.bootstrap_servers!r}, client_id={self._config['client_id']!r})"

    # ------------------------------------------------------------------ public API
    def partitions(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                   include_internal: bool = False) -> dict[str, list[int]]:
        """Topic -> sorted partition ids, from a Metadata answer at most ``metadata_max_age_ms``
        old and newer than the last failure (see the constructor), else from a new request.

        ``topics`` are always included when they exist, internal or not (so the caller can
        always ask for ``__transaction_state``). ``pattern`` is matched against the whole topic
        name (``re.fullmatch``, like Java's ``Pattern.matches``); internal topics match it only
        with ``include_internal``. With neither, all topics are listed (internal ones only with
        ``include_internal``). Topics that do not exist are absent from the result (and logged).
        Partitions without a leader are listed (they exist); fetching them is retried.
        """
        return self._run(metadata_api.partitions, self, list(topics) if topics is not None else None, pattern,
                         include_internal)

    def offsets(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionOffsets]:
        """Log start, high watermark and LSO of partitions, asked from their leaders.

        Keys are ``(topic, partition)`` tuples (``TopicPartition`` inputs are accepted). Deleted
        or unknown partitions are returned with ``deleted=True`` and -1 offsets.
        """
        wanted = list(dict.fromkeys((str(t), int(p)) for t, p in tps))
        if not wanted:
            return {}
        return self._run(list_offsets_api.offsets, self, wanted)

    def offsets_available(self, tps: Iterable[tuple[str, int]]) -> tuple[
            dict[tuple[str, int], PartitionOffsets], dict[tuple[str, int], str]]:
        """Like :meth:`offsets`, but one unreadable partition does not fail the others.

        Returns ``(offsets, unavailable)``: ``unavailable`` maps each partition that still had no
        leader (Metadata leader -1 / LEADER_NOT_AVAILABLE), answered a leader error
        (NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED/UNKNOWN_LEADER_EPOCH,
        ...) or whose leader did not answer, after one metadata refresh and a second round, to
        the last error seen. Only when no broker answers Metadata does it raise
        :class:`KafkaUnavailable` (after the usual bounded retries).
        """
        wanted = list(dict.fromkeys((str(t), int(p)) for t, p in tps))
        if not wanted:
            return {}, {}
        return self._run(list_offsets_api.offsets, self, wanted, True)

    def offsets_table(self, asked: list[tuple[str, Any]]) -> OffsetsTable:
        """:meth:`offsets_available` for ``[(topic, partitions)]`` (topics distinct), as arrays:
        an :class:`~streaming.sources.kafka_client.results.OffsetsTable` with one row per
        partition in the order asked (``down`` holds the unavailable ones and their errors).
        What the planner uses: no object per partition."""
        return self._run(list_offsets_api.table, self, [(str(t), ps) for t, ps in asked], True)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, *, max_wait_ms: int = 0,
              min_bytes: int = 1) -> FetchResult:
        """Fetch raw record-batch bytes of one partition from ``offset`` (READ_UNCOMMITTED).

        ``max_bytes`` is both the partition and the request limit. ``max_wait_ms=0`` makes the
        broker answer immediately even when there is nothing new.
        """
        if max_bytes <= 0:
            raise ValueError("max_bytes must be > 0")
        if offset < 0:
            raise ValueError("offset must be >= 0")
        return self._run(fetch_api.fetch, self, topic, int(partition), int(offset), int(max_bytes), int(max_wait_ms),
                         int(min_bytes))

    def fetch_many(self, items: Iterable[tuple[str, int, int]], max_bytes: int, *,
                   partition_max_bytes: int | None = None) -> dict[tuple[str, int], FetchResult]:
        """One multi-partition Fetch per leader for ``(topic, partition, offset)`` items, sent to
        all leaders at once, each awaited up to ``broker_timeout_ms``.

        ``max_bytes`` is both the request and the per-partition limit (KIP-74: the first
        partition of a response gets at least one whole batch); with ``partition_max_bytes``,
        that bounds each partition and a request for n partitions may carry n times as much. Only
        plain successes are returned: a partition missing from the result (no known leader, a
        partition error, a throttled or failed request, a preferred read replica) is for the
        caller to fetch alone with :meth:`fetch`, which handles each of those cases, unless its
        leader is :meth:`stalled` (it did not answer in time: fetching alone would wait again).
        """
        wanted = [(str(t), int(p), int(o)) for t, p, o in items]
        if not wanted:
            return {}
        return self._run(fetch_api.fetch_many, self, wanted, int(max_bytes), partition_max_bytes)

    def stalled(self, topic: str, partition: int) -> bool:
        """Whether the partition's leader has a request overdue past ``broker_timeout_ms``."""
        leader = self._cache.leader(topic, partition)
        return leader is not None and self._stalled.busy(leader) is not None

    def names_create_internal_topics(self) -> bool:
        """Whether a Metadata request naming a missing internal topic may create it on these
        brokers: before 2.8, ``KafkaApis.getTopicMetadata`` sends it to ``createInternalTopic``
        whatever AllowAutoTopicCreation says; from 2.8 (KAFKA-9751) only when it is allowed,
        which KafkaWire never does. 2.8 is told by Metadata v10 (topic ids, new in 2.8) in the
        negotiated ApiVersions; unknown counts as "may create"."""
        return metadata_api.names_create_internal_topics(self)

    def leader(self, topic: str, partition: int) -> int | None:
        """Cached leader node id (-1: no leader, None: unknown/not yet looked up)."""
        return self._cache.leader(topic, partition)

    def broker_count(self) -> int:
        """Number of brokers in the cluster, from a fresh Metadata request (any broker version;
        DescribeCluster needs 2.8+)."""
        return len(self._run(metadata_api.request, self, [], None).brokers)

    def refresh_metadata(self, topics: Iterable[str] | None = None) -> None:
        """Refresh the cached partition leaders and the discovery cache (all topics when
        ``topics`` is None) now, whatever their age."""
        self._run(metadata_api.request, self, list(topics) if topics is not None else None, None)
