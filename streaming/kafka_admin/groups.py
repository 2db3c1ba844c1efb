"""ListGroups (API key 16, v0-v5) and OffsetFetch (API key 9, v0-v10): consumer groups' committed offsets.

* ListGroups to every broker (``KafkaApis.handleListGroupsRequest``): ``StatesFilter`` (v4),
  ``TypesFilter`` (v5, Kafka 4.0, KIP-848; matched with ``Group.GroupType.parse`` in
  ``GroupMetadataManager.listGroups``); answer ``Groups[GroupId, ProtocolType, GroupState (v4),
  GroupType (v5)]``. Without Describe on the Cluster it lists only the groups the principal may
  Describe: the answer is then partial, not wrong.
* OffsetFetch to each group's coordinator: ``Topics[Name, PartitionIndexes]`` (null = all),
  ``RequireStable`` (v7, Kafka 2.5+, KIP-447: a partition with a pending transactional commit
  answers UNSTABLE_OFFSET_COMMIT, ``GroupMetadataManager.getOffsets``), several ``Groups`` per
  request (v8, Kafka 3.0+, KIP-709), ``MemberId``/``MemberEpoch`` (v9, KIP-848; the admin sends
  null/-1, which a consumer group accepts from anyone: ``ConsumerGroup.validateOffsetFetch``).
  Answer per partition ``CommittedOffset``, ``CommittedLeaderEpoch``, ``Metadata``, ``ErrorCode``.

:class:`GroupOffsets` caches all groups' offsets for ``groups_refresh_ms`` and turns the lookup off
(logged once) when the principal may not Describe the groups.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import kafka.errors as Errors
from kafka.protocol.admin.groups import ListGroupsRequest
from kafka.protocol.consumer.group import OffsetFetchRequest

from streaming.kafka_admin.session import AdminSession

log = logging.getLogger(__name__)

UNSTABLE_OFFSET_COMMIT = 88  # Errors.UNSTABLE_OFFSET_COMMIT (KIP-447)
#: group types whose committed offsets a read_committed consumer resumes from: classic groups and
#: KIP-848 consumer groups. Share groups keep no offsets (ShareGroup.validateOffsetFetch answers
#: GROUP_ID_NOT_FOUND).
OFFSET_GROUP_TYPES = ("classic", "consumer")
#: a group gone between ListGroups and OffsetFetch (or a share group listed as "consumer")
_GROUP_GONE = (Errors.GroupIdNotFoundError, Errors.UnknownMemberIdError, Errors.StaleMemberEpochError)

Committed = dict[tuple[str, int], dict[str, int]]  # (topic, partition) -> {group id: committed offset}


def offset_groups(session: AdminSession) -> list[dict]:
    """The listed groups that commit consumer offsets. On ListGroups v5+ the coordinator filters by
    type; ``protocol_type`` is "consumer" for both classic consumers and KIP-848 consumer groups
    (ConsumerGroup.protocolType), "" for groups that only commit offsets."""
    admin = session.admin()
    if session.max_version(ListGroupsRequest) >= 5:
        listed = admin.list_groups(types_filter=list(OFFSET_GROUP_TYPES))
    else:
        listed = admin.list_groups()
    return [g for g in listed if g.get("protocol_type") in ("consumer", "")
            and g.get("group_type", "classic").lower() in OFFSET_GROUP_TYPES + ("",)]


def per_group(session: AdminSession, ids: Iterable[str]) -> list[tuple[str, dict]]:
    """(group id, {TopicPartition: OffsetAndMetadata}) for every group: one OffsetFetch per
    coordinator where v8 batches groups, else one per group. A gone group fails the whole batched
    answer in kafka-python: the batch is then asked group by group and such groups are left out."""
    ids = list(ids)
    if not ids:
        return []
    admin = session.admin()
    if session.max_version(OffsetFetchRequest) >= 8:
        try:
            return list(admin.list_group_offsets(ids).items())
        except _GROUP_GONE:
            pass
    out = []
    for gid in ids:
        try:
            out.append((gid, admin.list_group_offsets({gid: None})[gid]))
        except _GROUP_GONE as exc:
            log.info("consumer group %s left out of the group lookup: %s", gid, type(exc).__name__)
    return out


def read_group_offsets(session: AdminSession) -> Committed:
    """Every offset-committing group's committed offsets, by partition."""
    ids = sorted({g["group_id"] for g in offset_groups(session)})
    out: Committed = {}
    for gid, offsets in per_group(session, ids):
        for tp, om in offsets.items():
            out.setdefault((tp.topic, tp.partition), {})[gid] = om.offset
    return out


class GroupOffsets:
    """All groups' committed offsets, read at most once per ``refresh_ms`` (0: never asked)."""

    def __init__(self, session: AdminSession, clock: Callable[[], float], refresh_ms: int):
        self._session = session
        self._clock = clock
        self.refresh_ms = refresh_ms
        self._groups: Committed | None = None
        self._at: float | None = None
        self._off: str | None = None if refresh_ms > 0 else "[kafka] groups_refresh_ms = 0"

    def committed(self) -> Committed | None:
        """The cached offsets, refreshed when older than ``refresh_ms``; None when unknown."""
        if self._off is not None:
            return None
        now = self._clock()
        if self._groups is not None and self._at is not None and (now - self._at) * 1000 < self.refresh_ms:
            return self._groups
        s = self._session
        if not (s.available("ListGroups", ListGroupsRequest) and s.available("OffsetFetch", OffsetFetchRequest)):
            return self._groups
        try:
            fresh = s.call("ListGroups/OffsetFetch", lambda: read_group_offsets(s))
        except Errors.AuthorizationError as exc:
            self._off = f"{type(exc).__name__}"
            log.warning("consumer-group lookup turned off (blocked_groups stays null): %s. Grant Describe on the "
                        "Cluster and on the consumer groups (docs/deployment.md) to name the groups a hanging "
                        "transaction blocks", s.denied("OffsetFetch", exc, "<group>"))
            return None
        if fresh is not None:
            self._groups, self._at = fresh, now
        return self._groups if fresh is not None else None


def unstable_offsets(session: AdminSession,
                     wanted: dict[str, list[tuple[str, int]]]) -> dict[tuple[str, str, int], bool] | None:
    """Per (group, topic, partition): whether OffsetFetch v7 with ``RequireStable`` answers
    UNSTABLE_OFFSET_COMMIT. None when the brokers lack v7 or the groups cannot be asked."""
    if not wanted:
        return {}
    try:
        if session.max_version(OffsetFetchRequest) < 7:
            session.once("require-stable", logging.INFO, "OffsetFetch v7 (require_stable, KIP-447) not "
                         "supported by %s: pending offset commits not confirmed", session.bootstrap_servers)
            return None
        coordinators = session.group_coordinators(sorted(wanted))
    except Errors.AuthorizationError as exc:
        session.once("unstable-acl", logging.WARNING, "%s", session.denied("OffsetFetch", exc, "<group>"))
        return None
    except (Errors.KafkaError, OSError) as exc:
        log.warning("OffsetFetch require_stable: %s", exc)
        return None
    out: dict[tuple[str, str, int], bool] = {}
    Topic = OffsetFetchRequest.OffsetFetchRequestTopic
    for gid, tps in sorted(wanted.items()):
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(int(p))
        req = OffsetFetchRequest(group_id=gid, topics=[Topic(name=t, partition_indexes=sorted(ps))
                                                       for t, ps in sorted(by_topic.items())],
                                 require_stable=True, min_version=7, max_version=7)
        res = session.call("OffsetFetch", lambda req=req, gid=gid: session.send(req, coordinators[gid]))
        if res is None or res.error_code:
            continue
        for t in res.topics:
            for part in t.partitions:
                out[(gid, t.name, part.partition_index)] = part.error_code == UNSTABLE_OFFSET_COMMIT
    return out
