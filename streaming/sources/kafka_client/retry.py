"""The client's retry policy: bounded retries with exponential backoff, per public operation.

One :class:`Attempts` per call of a public method (a Fetch, an offsets lookup, a discovery):

* a retriable failure (leader errors, no leader, UNKNOWN_TOPIC_OR_PARTITION not yet confirmed,
  connection failures, timeouts; see :mod:`streaming.sources.kafka_errors`) is
  :meth:`Attempts.failed`: the metadata cache is marked suspect (the next discovery asks again),
  and the call sleeps ``retry_backoff_ms * 2**(n-1)`` capped at ``retry_backoff_max_ms`` (the
  Java clients' ``retry.backoff.ms`` / ``retry.backoff.max.ms``, KIP-580), at least the node's
  reconnect backoff, with +-10 % jitter. After ``retries`` failures it raises
  :class:`~streaming.sources.kafka_client.errors.KafkaUnavailable` naming the operation, the
  bootstrap servers, the partition leader, the last broker tried and the last error. With the
  defaults (8 retries, 200 ms doubling to 5 s) a refused cluster fails in about 20 s.
* a broker over quota that answers with nothing but ``throttle_time_ms``
  (``KafkaApis.handleFetchRequest``) is :meth:`Attempts.throttled`: the wait is that long, is not
  a failure, and is bounded separately (``4 x retries`` such answers per operation).
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

from streaming.sources.kafka_client.errors import KafkaUnavailable, describe

if TYPE_CHECKING:
    from streaming.sources.kafka_client.core import ClientCore

log = logging.getLogger(__name__)

__all__ = ["Attempts"]


class Attempts:
    """Bounded retry bookkeeping for one public operation (runs on the IO thread)."""

    def __init__(self, core: ClientCore, what: str):
        self.core = core
        self.what = what
        self.count = 0
        self.throttles = 0
        self.started = time.monotonic()
        self.last_error: BaseException | str | None = None
        self.last_node: Any = None
        self.leader: Any = None  # partition leader involved, if any (for the message)

    async def failed(self, error: BaseException | str, node: Any = None) -> None:
        """Record a retriable failure; back off, or raise KafkaUnavailable when out of retries."""
        self.count += 1
        self.core._cache.suspect()
        await self._backoff(error, node, self.count, self.core._config["retries"])

    async def throttled(self, throttle_time_ms: int, node: Any) -> None:
        """A broker over quota asked us to wait: sleep that long (not a failure, but bounded)."""
        self.throttles += 1
        error = f"throttled by the broker for {throttle_time_ms} ms (quota)"
        await self._backoff(error, node, self.throttles, 4 * max(1, self.core._config["retries"]),
                            floor_s=throttle_time_ms / 1000)

    async def _backoff(self, error: BaseException | str, node: Any, count: int, limit: int,
                       floor_s: float = 0.0) -> None:
        self.last_error = error
        if node is not None:
            self.last_node = node
        cfg = self.core._config
        if count > limit:
            exc = KafkaUnavailable(self.message())
            exc.last_error = describe(error)
            raise exc
        delay = min(cfg["retry_backoff_ms"] * 2 ** (count - 1), cfg["retry_backoff_max_ms"]) / 1000
        transport = self.core._transport
        if node is not None and transport is not None:
            delay = max(delay, min(transport.connection_delay(node), cfg["retry_backoff_max_ms"] / 1000))
        delay = max(delay * random.uniform(0.9, 1.1), floor_s)
        log.warning("KafkaWire: %s: attempt %d failed (%s); retrying in %.0f ms", self.what, count,
                    describe(error), delay * 1000)
        await transport.sleep(delay)

    def message(self) -> str:
        elapsed = time.monotonic() - self.started
        core = self.core
        broker = core._node_desc(self.last_node) if self.last_node is not None else "n/a"
        leader = ""
        if self.leader is not None and self.leader != self.last_node:
            leader = f"partition leader: {core._node_desc(self.leader)}; "
        return (f"Kafka unavailable: {self.what} failed after {self.count + self.throttles} attempts in {elapsed:.1f}s "
                f"(bootstrap servers: {core.bootstrap_servers}; {leader}last broker tried: {broker}; "
                f"last error: {describe(self.last_error)})")
