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


# Young collections every YOUNG_THRESHOLD net container allocations instead of CPython's 700. A
# trigger at 200,000 partitions allocates millions of short-lived containers (decoded answers,
# offsets JSON, event columns) that stay alive across many 700-allocation windows; each young
# collection then promotes them, and the promotions start a full collection of the whole heap
# (~1.6 M tracked objects, ~0.75 s) in every trigger (bench/cluster_scale.py, measured with
# gc.callbacks: 0.95 s of a 4.4 s trigger). With a wider young generation most of them are freed
# by reference counting before a collection sees them. Cycles are still collected, only later:
# a young collection costs a few tens of milliseconds at this size.
YOUNG_THRESHOLD = 100_000
MIDDLE_THRESHOLD = 50


def widen_young_generation() -> None:
    """Raise the collector's first two thresholds to at least (YOUNG_THRESHOLD, MIDDLE_THRESHOLD)
    for this process (the driver, or the Python process that plans a streaming source); the
    full-collection threshold is kept. Idempotent, never lowers a threshold set higher."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), max(middle, MIDDLE_THRESHOLD), old)
