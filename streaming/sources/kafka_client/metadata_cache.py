"""What the client remembers of Metadata answers: leaders, leader epochs, topic ids, discovery.

No IO here: :mod:`streaming.sources.kafka_client.metadata` asks the brokers and hands every
answer to :meth:`MetadataCache.apply`.

* **Routing** (always the newest known, whatever the age): partition -> leader node id (-1: none)
  and partition -> leader epoch (Metadata v7+, KIP-320). The epoch is sent as
  ``current_leader_epoch`` in Fetch v9+ and ListOffsets v4+; an answer whose epoch is below the
  one seen is not believed for that partition (Java's ``Metadata.updateLatestMetadata``).
* **Topic ids** (Metadata v10+, Kafka 2.8+, KIP-516): a topic deleted and created again under the
  same name gets a new id; a new id resets the partition's epoch (the new topic starts at 0).
* **Discovery** (``metadata_max_age_ms``, Kafka's ``metadata.max.age.ms``): topic -> (internal,
  partitions, when answered) and when the last all-topics answer came. An entry is *fresh* if it
  is younger than ``metadata_max_age_ms`` and newer than the last failure (:meth:`suspect`): as in
  the Java clients, anything that suggests the cache is out of date makes the next call ask again.
* **Offsets last returned** per partition (log start, high watermark), so that offsets going
  backwards (truncation, a lagging new leader, a recreated topic) trigger a refresh of the
  topic's id before they are returned (:func:`streaming.sources.kafka_client.list_offsets`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from streaming.sources.kafka_client.errors import (
    INVALID_TOPIC_EXCEPTION,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)

log = logging.getLogger(__name__)

__all__ = ["MetadataCache"]

TopicPartition = tuple[str, int]
#: :meth:`MetadataCache.routing_arrays`' leader of a partition the last Metadata answers did not list
UNKNOWN_PARTITION = -2
#: ``last_offsets``' value where no offset was returned
NO_OFFSET = np.iinfo(np.int64).min


class MetadataCache:
    """Leaders, epochs, topic ids and the discovery cache of one client (IO thread only)."""

    def __init__(self, config: dict[str, Any]):
        self._config = config  # read live: metadata_max_age_ms may be changed after construction
        # topic -> {partition: leader node id (-1 = none)}, from our own Metadata requests
        self.leaders: dict[str, dict[int, int]] = {}
        # topic -> topic id (Metadata v10+), for telling a recreated topic from the same one
        self.topic_ids: dict[str, str] = {}
        # topic -> {partition: leader epoch} (Metadata v7+)
        self.epochs: dict[str, dict[int, int]] = {}
        # discovery: topic -> (is_internal, sorted partitions, monotonic time of the answer)
        self.topics: dict[str, tuple[bool, list[int], float]] = {}
        self.all_topics_at: float | None = None
        self.suspect_at = float("-inf")
        # (log start, high watermark) last returned, per topic as two arrays indexed by partition
        # (NO_OFFSET where none was returned): see list_offsets._check_backwards
        self.last_offsets: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # topic -> (its leaders dict, its epochs dict, leader array, epoch array): the routing
        # above as arrays indexed by partition, rebuilt when apply() replaces either dict
        self._arrays: dict[str, tuple[Any, Any, np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------------ reading
    def known(self, tp: TopicPartition) -> bool:
        """Whether the last Metadata answers listed the partition (with or without a leader)."""
        return tp[1] in self.leaders.get(tp[0], {})

    def leader(self, topic: str, partition: int) -> int | None:
        """Leader node id (-1: no leader, None: unknown)."""
        return self.leaders.get(topic, {}).get(partition)

    def epoch(self, topic: str, partition: int) -> int:
        """current_leader_epoch to send (KIP-320): the last seen leader epoch, -1 if unknown."""
        return self.epochs.get(topic, {}).get(partition, -1)

    def routing_arrays(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        """(leaders, epochs) of ``topic`` as int arrays indexed by partition: leader -1 none,
        :data:`UNKNOWN_PARTITION` for a partition the last answers did not list; epoch -1 unknown.
        What ListOffsets needs for 200,000 partitions per trigger without a lookup per partition."""
        leaders, epochs = self.leaders.get(topic), self.epochs.get(topic)
        cached = self._arrays.get(topic)
        if cached is not None and cached[0] is leaders and cached[1] is epochs:
            return cached[2], cached[3]
        size = max(list(leaders or ()) + list(epochs or ()), default=-1) + 1
        la = np.full(size, UNKNOWN_PARTITION, dtype=np.int64)
        ea = np.full(size, -1, dtype=np.int64)
        if leaders:
            la[list(leaders)] = list(leaders.values())
        if epochs:
            ea[list(epochs)] = list(epochs.values())
        self._arrays[topic] = (leaders, epochs, la, ea)
        return la, ea

    def fresh(self, at: float | None, now: float) -> bool:
        """Whether an answer from ``at`` may still be used for discovery."""
        return at is not None and at > self.suspect_at and now - at < self._config["metadata_max_age_ms"] / 1000

    # ------------------------------------------------------------------ updating
    def suspect(self) -> None:
        """Something failed: the next discovery asks the brokers again."""
        self.suspect_at = time.monotonic()

    def apply(self, response: Any, topics: list[str] | None = None) -> None:
        """Take in one Metadata answer to a request for ``topics`` (None: all topics)."""
        now = time.monotonic()
        # Java's MetadataResponse.hasReliableLeaderEpochs: leader epochs of answers before v9 are
        # not believed (KAFKA-9212: pre-2.4 controllers could propagate a stale epoch), and
        # Metadata.updateLatestMetadata then forgets the last seen one, as for an answer without.
        version = getattr(response, "API_VERSION", None)
        reliable = version is None or version >= 9
        if topics is None:  # an all-topics answer replaces the discovery cache
            self.topics = {t.name: self._listing(t, now) for t in response.topics
                           if t.error_code == 0 and t.name is not None}
            self.all_topics_at = now
        for t in response.topics:
            if t.name is None:
                continue
            if topics is not None:
                if t.error_code == 0:
                    self.topics[t.name] = self._listing(t, now)
                else:
                    self.topics.pop(t.name, None)
            if t.error_code == 0:
                topic_id = getattr(t, "topic_id", None)
                new_id = str(topic_id) if topic_id is not None and topic_id.int != 0 else None  # zero: v < 10
                self._latest_leaders(t, new_id, reliable)
                if new_id is not None:
                    self.topic_ids[t.name] = new_id
            elif t.error_code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, INVALID_TOPIC_EXCEPTION):
                self.leaders.pop(t.name, None)
                self.epochs.pop(t.name, None)

    def _listing(self, t: Any, now: float) -> tuple[bool, list[int], float]:
        """Discovery's entry of one topic answer; the partition list of the entry before when it
        is the same, so that callers comparing listings find the same object."""
        parts = sorted(p.partition_index for p in t.partitions)
        old = self.topics.get(t.name)
        if old is not None and old[1] == parts:
            parts = old[1]
        return bool(t.is_internal), parts, now

    def _latest_leaders(self, t: Any, new_id: str | None, reliable: bool = True) -> None:
        """Partition -> leader (``leaders``) and -> leader epoch (``epochs``) from one Metadata
        topic answer, never older than what was seen. When both equal what the cache holds, the
        cache keeps its dicts, so :meth:`routing_arrays` keeps its arrays (no rebuild per refresh).

        Java's ``Metadata.updateLatestMetadata``: a partition whose leader epoch (v7+) is below the
        last seen one keeps the cached leader (the answering broker's metadata cache lags: every
        broker applies updates on its own); a new topic id resets the epoch (a recreated topic
        starts again at 0); no epoch in the answer (v < 7, or -1) forgets the last seen one.
        """
        old_leaders = self.leaders.get(t.name, {})
        old_epochs = self.epochs.get(t.name, {})
        recreated = new_id is not None and self.topic_ids.get(t.name) not in (None, new_id)
        leaders: dict[int, int] = {}
        epochs: dict[int, int] = {}
        for p in t.partitions:
            i = p.partition_index
            epoch = getattr(p, "leader_epoch", -1) if reliable else -1
            epoch = -1 if epoch is None else epoch
            seen = old_epochs.get(i)
            if epoch >= 0 and seen is not None and epoch < seen and not recreated and i in old_leaders:
                log.debug("KafkaWire: %s-%s: metadata with leader epoch %d older than %d seen; keeping leader %s",
                          t.name, i, epoch, seen, old_leaders[i])
                leaders[i], epochs[i] = old_leaders[i], seen
                continue
            leaders[i] = p.leader_id
            if epoch >= 0:
                epochs[i] = epoch
        if leaders != old_leaders or t.name not in self.leaders:
            self.leaders[t.name] = leaders
        if epochs != old_epochs or t.name not in self.epochs:
            self.epochs[t.name] = epochs
