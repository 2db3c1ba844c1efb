"""Pausing Python's cyclic garbage collector around one allocation burst of the driver.

The driver holds millions of long-lived objects at 200,000 partitions (plan, state, caches). A
burst that builds many short-lived container objects and keeps them alive for a while (a decoded
all-topics Metadata answer; ``json.dumps`` of a state document, whose encoder lists every dict's
items as tuples while it walks it) has its objects found alive by the collector's young
collections and promoted; enough promotions start a full collection, which walks every object of
the process (measured: 0.2-1 s at 20,000 partitions, several seconds at 200,000). When nothing in
the burst forms a reference cycle, reference counting frees all of it when the burst ends, so
pausing the collector for its length costs nothing and saves those full collections.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block (re-enabled after it only if it was enabled)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
