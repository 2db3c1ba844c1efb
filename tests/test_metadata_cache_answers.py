"""MetadataCache taking in Metadata answers, without IO: leader epochs by answer version, and an
unchanged answer keeping the routing arrays (no rebuild per refresh at 200,000 partitions)."""

from __future__ import annotations

import gc
import uuid

from kafka.protocol.metadata import MetadataResponse

from streaming.gc_pause import collector_paused
from streaming.sources.kafka_client.metadata_cache import MetadataCache

T = MetadataResponse.MetadataResponseTopic
P = T.MetadataResponsePartition
B = MetadataResponse.MetadataResponseBroker


def answer(version: int, leaders: dict[int, tuple[int, int]], topic_id: int = 7) -> MetadataResponse:
    """An all-topics answer of topic ``orders``: partition -> (leader, leader epoch)."""
    parts = [P(error_code=0, partition_index=i, leader_id=b, leader_epoch=e, replica_nodes=[b], isr_nodes=[b],
               offline_replicas=[]) for i, (b, e) in sorted(leaders.items())]
    tid = uuid.UUID(int=topic_id) if version >= 10 else None
    return MetadataResponse(version=version, throttle_time_ms=0, brokers=[B(node_id=n, host="h", port=9092 + n,
                                                                            rack=None) for n in (1, 2)],
                            cluster_id="c", controller_id=1,
                            topics=[T(error_code=0, name="orders", topic_id=tid, is_internal=False, partitions=parts)])


def cache() -> MetadataCache:
    return MetadataCache({"metadata_max_age_ms": 30_000})


def test_leader_epochs_of_answers_before_v9_are_not_believed():
    # Java MetadataResponse.hasReliableLeaderEpochs: version >= 9 (KAFKA-9212: pre-2.4 controllers
    # could propagate a stale epoch); Metadata.updateLatestMetadata otherwise keeps no epoch, so
    # current_leader_epoch -1 is sent. kafka-python's ClusterMetadata.update_metadata did this by
    # rewriting the decoded answer; the cache no longer relies on that (fails before this change).
    c = cache()
    c.apply(answer(8, {0: (1, 5)}), None)
    assert c.leader("orders", 0) == 1 and c.epoch("orders", 0) == -1
    c.apply(answer(9, {0: (2, 6)}), None)
    assert c.leader("orders", 0) == 2 and c.epoch("orders", 0) == 6
    c.apply(answer(8, {0: (1, 7)}), None)  # an unreliable answer forgets the last seen epoch
    assert c.leader("orders", 0) == 1 and c.epoch("orders", 0) == -1


def test_an_unchanged_answer_keeps_the_routing_arrays_and_a_change_rebuilds_them():
    c = cache()
    c.apply(answer(12, {0: (1, 3), 1: (2, 4)}), None)
    la, ea = c.routing_arrays("orders")
    assert la.tolist() == [1, 2] and ea.tolist() == [3, 4]
    parts = c.topics["orders"][1]
    c.apply(answer(12, {0: (1, 3), 1: (2, 4)}), None)  # the next refresh: same leaders and epochs
    la2, ea2 = c.routing_arrays("orders")
    assert la2 is la and ea2 is ea  # not rebuilt (fails before this change: new dicts every answer)
    assert c.topics["orders"][1] is parts
    c.apply(answer(12, {0: (2, 4), 1: (2, 4)}), None)  # partition 0 moved to broker 2 (epoch 4)
    la3, ea3 = c.routing_arrays("orders")
    assert la3.tolist() == [2, 2] and ea3.tolist() == [4, 4]
    assert la.tolist() == [1, 2]  # the arrays handed out before are not changed under their holder


def test_collector_paused_restores_the_collector_even_on_an_error():
    assert gc.isenabled()
    try:
        with collector_paused():
            assert not gc.isenabled()
            raise ValueError("undecodable")
    except ValueError:
        pass
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
