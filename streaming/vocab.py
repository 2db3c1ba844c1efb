"""The words of the alert contract, defined once (``docs/alerts.md``, ``streaming/alert.schema.json``).

Statuses, causes, resolutions, coordinator-epoch sources, coordinator states and the alert's
field names. Every module that names one of them imports it from here, and
``tests/test_vocab.py`` checks that the JSON Schema's enums and properties are exactly these, so
adding a cause is one edit here plus the schema, and a missed schema edit fails a test.

Coordinator states are the ``TransactionState`` names the coordinator persists in
``__transaction_state`` (status byte of the value, Kafka 0.11+; ``PrepareEpochFence`` 2.5+,
KIP-360). Their code → name table is the decoders' (:data:`udfs.model.TXN_STATES`); it is only
re-exported here in code order.
"""

from __future__ import annotations

from udfs.model import OPEN_TXN_STATES, TXN_STATES

# -- statuses -----------------------------------------------------------------------------------
# ``open`` is a verdict only (not old enough to be a finding) and is never published.
OPEN = "open"
LATE = "late"  # the coordinator still owns the transaction: never an abort command
HANGING = "hanging"  # nothing will ever finish it: abort commands are published
RESOLVED = "resolved"  # a previously published finding closed
# partition availability records of the live source (streaming/availability.py), key cluster/topic/partition
UNAVAILABLE = "unavailable"
AVAILABLE = "available"
AVAILABILITY_STATUSES = (UNAVAILABLE, AVAILABLE)
STATUSES = (LATE, HANGING, RESOLVED, UNAVAILABLE, AVAILABLE)  # statuses of published records
FINDING_STATUSES = (LATE, HANGING)  # statuses of open findings
VERDICT_STATUSES = (OPEN, LATE, HANGING)  # what streaming.verdict.judge returns

# -- causes ---------------------------------------------------------------------------------------
COORDINATOR_UNAWARE = "coordinator-unaware"
COORDINATOR_FINISHED_WITHOUT_PARTITION = "coordinator-finished-without-partition"
WRITE_AFTER_MARKER = "write-after-marker"
EXCEEDS_MAX_TIMEOUT = "exceeds-max-timeout"  # no coordinator view: hanging but unverified
# the LSO stayed at the log start longer than the threshold, held by a transaction whose first
# batches retention deleted (streaming/pinned_lso.py): hanging, unverified
OPEN_BEFORE_LOG_START = "open-before-log-start"
HANGING_CAUSES = (COORDINATOR_UNAWARE, COORDINATOR_FINISHED_WITHOUT_PARTITION, WRITE_AFTER_MARKER,
                  EXCEEDS_MAX_TIMEOUT, OPEN_BEFORE_LOG_START)

MARKERS_PENDING = "markers-pending"
COORDINATOR_STUCK = "coordinator-stuck"
LONG_TRANSACTION = "long-transaction"
LSO_PINNED_AT_LOG_START = "lso-pinned-at-log-start"  # the same, pinned for less than the threshold yet
# KIP-939 two-phase commit (TransactionTimeoutMs = Integer.MAX_VALUE): an external transaction
# manager owns the decision and the coordinator never times it out; never hanging, never aborted.
PREPARED_2PC = "prepared-2pc"
LATE_CAUSES = (MARKERS_PENDING, COORDINATOR_STUCK, LONG_TRANSACTION, LSO_PINNED_AT_LOG_START, PREPARED_2PC)

CAUSES = HANGING_CAUSES + LATE_CAUSES

# -- finding kinds (issue 25 item 1) -----------------------------------------------------------------
# What an open transaction holds. Every transactional batch of ``__consumer_offsets`` is a
# TxnOffsetCommit of a transactional producer's ``sendOffsetsToTransaction``
# (GroupMetadataManager.storeOffsets / OffsetMetadataManager.commitTransactionalOffset write it with
# the producer's id): until its marker lands, the group coordinator keeps those offsets pending and
# OffsetFetch(require_stable) answers UNSTABLE_OFFSET_COMMIT for them, so the consumer group cannot
# start. Status and cause follow the same verdict as on any partition; the kind says what it blocks.
OFFSETS_TOPIC = "__consumer_offsets"
KIND_TRANSACTION = "transaction"  # an open transaction on a data partition
KIND_GROUP_OFFSETS_HELD = "group-offsets-held"  # an open transactional offset commit on __consumer_offsets
FINDING_KINDS = (KIND_TRANSACTION, KIND_GROUP_OFFSETS_HELD)


def finding_kind(topic: str) -> str:
    """The kind of a finding on ``topic`` (see :data:`FINDING_KINDS`)."""
    return KIND_GROUP_OFFSETS_HELD if topic == OFFSETS_TOPIC else KIND_TRANSACTION


# -- resolutions ----------------------------------------------------------------------------------
RESOLUTIONS = ("committed", "aborted", "closed", "lso-advanced")

# -- where the legacy abort's coordinator epoch came from (spec/detection.md §4, in rule order) --
# "coordinator-partition" (the leader epoch of P's __transaction_state partition) is withdrawn: a
# reassignment that keeps the leader raises that epoch without re-electing the coordinator.
EPOCH_SOURCES = ("describe-producers", "last-marker", "snapshot", "log-start", "producer-last-marker",
                 "all-coordinators-max", "unknown")

# -- why a finding is not verified (detection.md §0, revision 3) ----------------------------------
# Stable strings: alerts carry them in ``unverified_reasons`` (empty when verified) and
# docs/alerts.md says, for each, which input would supply the missing proof.
NEWEST_SEGMENT_NOT_PROVEN = "newest-segment-not-proven"  # tp's read may end before tp's end
COORDINATOR_VIEW_INCOMPLETE = "coordinator-view-incomplete"  # a __transaction_state partition was not read
COORDINATOR_COPY_BEHIND = "coordinator-copy-behind"  # a coordinator copy's newest record predates O
COORDINATOR_COPY_EMPTY = "coordinator-copy-empty"  # an empty coordinator copy cannot show it is current
CRC_GAP = "crc-gap"  # a batch O's verdict rests on failed its CRC and was not believed
CLOCK_SKEW = "clock-skew"  # a timestamp of O lies ahead of the clock (§2)
NO_COORDINATOR_INPUT = "no-coordinator-input"  # no __transaction_state partition in the input
START_OFFSET_NOT_PROVEN = "start-offset-not-proven"  # retention deleted O's start and nothing says where it was
UNVERIFIED_REASONS = (NEWEST_SEGMENT_NOT_PROVEN, COORDINATOR_VIEW_INCOMPLETE, COORDINATOR_COPY_BEHIND,
                      COORDINATOR_COPY_EMPTY, CRC_GAP, CLOCK_SKEW, NO_COORDINATOR_INPUT, START_OFFSET_NOT_PROVEN)

# -- coordinator TransactionState names -------------------------------------------------------------
COORDINATOR_STATES = tuple(TXN_STATES[code] for code in sorted(TXN_STATES))
OPEN_COORDINATOR_STATES = OPEN_TXN_STATES  # the coordinator still owns the transaction

# -- the published alert ----------------------------------------------------------------------------
ALERT_SCHEMA_VERSION = 1
ALERT_FIELDS = (
    "schema_version", "key", "status", "cause", "verified", "cluster", "topic", "partition", "producer_id",
    "producer_epoch", "first_offset", "last_offset", "first_ts", "last_ts", "open_ms", "idle_ms", "records",
    "bytes", "batches", "transactional_id", "coordinator_state", "coordinator_epoch",
    "coordinator_epoch_source", "lso", "high_watermark", "pins_lso", "data_deleted", "detected_at",
    "abort_command_new", "abort_command_legacy", "required_permission", "resolution",
    # additions beyond the minimum contract (documented in docs/alerts.md)
    "threshold_ms", "clock_skew", "input", "verify_hint",
    # rules v2 (issue 10): what an unverified finding lacks, how exact its epoch is, its evidence
    "missing_txn_partitions", "epoch_hint", "evidence",
    # the live cluster's confirmation (streaming/broker_confirm.py; null without a broker)
    "confirmed_by", "blocked_groups",
    # groups behind the finding that still have records to read (issue 25: blocked = held now)
    "lagging_groups",
    # the cluster's finalized transaction.version (issue 25; informational, live path only)
    "transaction_version",
    # a finding on __consumer_offsets: the group offset commits its transaction holds (issue 25)
    "pending_offset_commits",
    # a finding re-published while its partition is unreadable (issue 14)
    "stale", "last_read_ms",
    # the partition's log start at detection, and since when an unseen transaction pins the LSO
    # there (issue 20, streaming/pinned_lso.py; null for other findings)
    "log_start_offset", "pinned_since_ms",
    # what a finding's verification lacks (issue 19, detection.md §0): UNVERIFIED_REASONS, empty iff verified
    "unverified_reasons",
    # what the finding holds (issue 25 item 1): FINDING_KINDS; group-offsets-held only on __consumer_offsets
    "kind",
)
# Fields of a partition availability record (the schema's other properties are the findings').
AVAILABILITY_FIELDS = ("schema_version", "key", "status", "cluster", "topic", "partition", "reason", "since_ms",
                       "unavailable_ms", "last_read_ms", "detected_at")
