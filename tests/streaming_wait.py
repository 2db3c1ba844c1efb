"""Bounded waits on a running streaming query for tests that check that nothing (more) happened.

Such a check only means something once the query has provably done its work since the input
changed: a number of further micro-batches ran (``BatchLog``), or Spark found nothing left to
do (``wait_caught_up``). Sleeping a few seconds instead passes on a slow machine without the
query having looked at anything. Every wait fails loudly (``AssertionError``) on timeout.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any


class BatchLog:
    """Ids and input row counts of the micro-batches whose sinks ran, in order.

    Pass it as a ``SinkSet.on_batch`` callback (called at the end of ``foreachBatch``, in this
    driver process), or feed it from the job's progress log with :class:`ProgressLogBatches`.
    """

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.rows: list[int] = []
        self._cond = threading.Condition()

    def __call__(self, batch_id: int, stats: dict[str, Any]) -> None:
        with self._cond:
            self.ids.append(batch_id)
            self.rows.append(stats["rows"])
            self._cond.notify_all()

    def wait_for(self, done: Callable[[], bool], what: str, *, timeout_s: float = 120.0,
                 check: Callable[[], None] | None = None) -> None:
        """Block until ``done()`` holds; ``check()`` may raise when the job died meanwhile."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not done():
                if check is not None:
                    check()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; "
                                         f"micro-batches seen: {self.ids}")
                self._cond.wait(min(left, 0.5))

    def wait_for_batch(self, batch_id: int, **kw: Any) -> None:
        """Block until micro-batch ``batch_id`` (or a later one) has run."""
        self.wait_for(lambda: bool(self.ids) and self.ids[-1] >= batch_id, f"micro-batch {batch_id}", **kw)

    def wait_for_more(self, n: int, **kw: Any) -> list[int]:
        """Block until ``n`` more micro-batches have run; returns their ids."""
        start = len(self.ids)
        self.wait_for(lambda: len(self.ids) >= start + n, f"{n} more micro-batches after {self.ids}", **kw)
        return self.ids[start:start + n]


_PROGRESS_LINE = re.compile(r"^batch (\d+): (\d+) rows")


class ProgressLogBatches(logging.Handler):
    """Feeds a :class:`BatchLog` from ``txnwatch run``'s one-line-per-micro-batch progress log
    (``streaming.runner.ProgressLogger``), for jobs whose sinks a test cannot reach."""

    def __init__(self, batches: BatchLog) -> None:
        super().__init__()
        self.batches = batches

    def emit(self, record: logging.LogRecord) -> None:
        m = _PROGRESS_LINE.match(record.getMessage())
        if m:
            self.batches(int(m.group(1)), {"rows": int(m.group(2))})


def wait_caught_up(query: Any, *, timeout_s: float = 120.0) -> None:
    """Block until a trigger that started after this call found no new input and no micro-batch
    owed (timer or state clean-up batches included): Spark's ``processAllAvailable``, bounded.

    Only for sources whose offsets stop moving when no input arrives (files, dumps): a source that
    has new offsets at every trigger never catches up; count its batches with :class:`BatchLog`.
    """
    errors: list[BaseException] = []

    def run() -> None:
        try:
            query.processAllAvailable()
        except BaseException as exc:  # re-raised in the test thread below
            errors.append(exc)

    th = threading.Thread(target=run, name="wait-caught-up", daemon=True)
    th.start()
    th.join(timeout_s)
    # On timeout the thread stays blocked until the caller stops the query (which releases it).
    if th.is_alive():
        raise AssertionError(f"query {query.name or query.id} did not catch up within {timeout_s:.0f} s; "
                             f"status {query.status}, last progress {query.lastProgress}")
    if errors:
        raise errors[0]
    assert query.isActive, f"query stopped while catching up: {query.exception()}"


def wait_until(done: Callable[[], bool], what: str, *, timeout_s: float = 120.0,
               check: Callable[[], None] | None = None, poll_s: float = 0.2) -> None:
    """Block until ``done()`` holds, asking every ``poll_s`` (for conditions nothing notifies: a
    file a subprocess writes, an HTTP endpoint, a query's alerts list); ``check()`` may raise
    when the job died meanwhile. Fails loudly (``AssertionError``) at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if check is not None:
            check()
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)
