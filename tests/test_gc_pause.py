"""The driver's collector settings (streaming/gc_pause.py).

CPython's collector (Modules/gcmodule.c, 3.11) runs a young collection every ``threshold0`` net
container allocations and promotes what survives; a full collection follows once enough was
promoted. The planner process holds an entry per partition of the cluster, so the wider young
generation is set where that process starts: the kafka source's stream reader.
"""

from __future__ import annotations

import gc

import pytest

from streaming.gc_pause import MIDDLE_THRESHOLD, YOUNG_THRESHOLD, collector_paused, widen_young_generation
from streaming.sources.kafka_source import KafkaStreamReader


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_the_stream_reader_widens_the_young_generation(thresholds):
    gc.set_threshold(700, 10, 10)  # CPython's defaults (gcmodule.c, _PyGC_InitState)
    KafkaStreamReader({"bootstrap_servers": "127.0.0.1:1", "topic_pattern": ".*"})
    assert gc.get_threshold() == (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, 10)


def test_a_higher_setting_is_kept(thresholds):
    gc.set_threshold(YOUNG_THRESHOLD * 3, 5, 7)
    widen_young_generation()
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 3, MIDDLE_THRESHOLD, 7)


def test_a_paused_collector_is_enabled_again_only_if_it_was():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
