"""One request job per broker, all at once, each with its own deadline (KafkaWire's IO loop).

Why: the live source asks every partition leader for offsets every trigger and probes the
open ones with Fetch. Asked one broker after the other, one broker whose disk stalls (its
requests are read and never answered) holds up every broker after it for a whole request
timeout, per round. Java's ``NetworkClient`` has no such coupling: requests to different nodes
are in flight together and each has its own timeout (``InFlightRequests``), and the consumer's
``OffsetFetcher``/``Fetcher`` send one request per node (``groupListOffsetRequests``,
``prepareFetchRequests``).

:func:`per_node` starts one coroutine per node on the KafkaWire IO loop (its transport's, see
streaming/sources/kafka_client/transport.py) and collects each result by a common deadline. A job that has not finished
by then is reported as :class:`NodeDeadline` and keeps running in the background (its request
is still in flight; kafka-python closes the connection at ``request_timeout_ms``); its node is
remembered as *stalled* until that job ends, so later calls do not wait on it again
(:meth:`StalledNodes.busy`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any


class NodeDeadline(Exception):
    """A node's job did not finish by the deadline (its request is still in flight)."""

    def __init__(self, node: Any, waited_ms: int, since: float | None = None):
        self.node = node
        self.waited_ms = waited_ms
        self.since = since
        what = (f"did not answer within {waited_ms} ms" if since is None else
                f"has not answered a request sent {time.monotonic() - since:.1f} s ago")
        super().__init__(f"broker {node} {what} (broker_timeout_ms)")


class StalledNodes:
    """Nodes with a job still running past its deadline: node -> (job future, monotonic start)."""

    def __init__(self) -> None:
        self._jobs: dict[Any, tuple[Any, float]] = {}

    def busy(self, node: Any) -> float | None:
        """When the node's overdue job started, if it is still running; else None."""
        job = self._jobs.get(node)
        if job is None:
            return None
        if job[0].is_done:
            del self._jobs[node]
            return None
        return job[1]

    def add(self, node: Any, future: Any, started: float) -> None:
        self._jobs[node] = (future, started)


async def per_node(net: Any, wait_for: Callable[[Any, float], Awaitable[Any]],
                   jobs: dict[Any, Callable[[], Awaitable[Any]]], deadline_ms: int | None,
                   stalled: StalledNodes | None = None,
                   now: Callable[[Any], Any] | None = None) -> dict[Any, Any]:
    """Run ``jobs`` (node -> coroutine function) concurrently; node -> result or exception.

    ``net`` is the client's transport (``call_soon_with_future``) and ``wait_for(future,
    timeout_ms)`` its ``Transport.wait_for`` (kafka-python's ``KafkaConnectionManager.wait_for``). With
    ``deadline_ms`` None every job is awaited to its end (each request still has its own
    timeout). A node in ``stalled`` whose earlier job is still running is not asked again: its
    result is a :class:`NodeDeadline` at once.

    ``now(node)``, when given, may start a node's job without a task of its own and return the
    Future of its result (``kafka_client.core.AtOnce.start``: the requests sent at once), or None
    to have ``jobs[node]`` run as a task; it is asked only for nodes that are not stalled.
    """
    started = time.monotonic()
    futures: dict[Any, Any] = {}
    out: dict[Any, Any] = {}
    for node, job in jobs.items():
        since = stalled.busy(node) if stalled is not None else None
        if since is not None:
            out[node] = NodeDeadline(node, deadline_ms or 0, since)
            continue
        fut = now(node) if now is not None else None
        futures[node] = fut if fut is not None else net.call_soon_with_future(job)
    if deadline_ms is not None and futures:
        # one timer for all nodes, not one per node: each timer the IO loop cancels costs a pass
        # over all of its timers (kafka.net.selector ``_unschedule`` re-heapifies), which at
        # 1,000 brokers made the waits themselves quadratic
        try:
            await wait_for(all_of(list(futures.values())), max(deadline_ms - (time.monotonic() - started) * 1000, 1))
        except Exception:  # the deadline passed: each node's own state is looked at below
            pass
    for node, fut in futures.items():
        if deadline_ms is not None and not fut.is_done:
            if stalled is not None:
                stalled.add(node, fut, started)
            out[node] = NodeDeadline(node, deadline_ms)
            continue
        try:
            out[node] = await fut
        except Exception as exc:
            out[node] = exc
    return out


def all_of(futures: list[Any]) -> Any:
    """A ``kafka.future.Future`` that succeeds once every one of ``futures`` is done (whatever
    their outcome)."""
    from kafka.future import Future

    done = Future()
    left = [len(futures)]

    def one(_: Any) -> None:
        left[0] -= 1
        if left[0] == 0 and not done.is_done:
            done.success(None)

    if not futures:
        return done.success(None)
    for f in futures:
        f.add_callback(one)
        f.add_errback(one)
    return done
