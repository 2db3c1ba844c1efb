"""The one list of alert fields the status page knows, and the operator texts tied to them.

Aligning the page with a new alert schema means editing this module only: the templates
iterate over these tuples and mappings. A field listed here but absent from an alert is simply
not shown (no value is ever made up); a field present in an alert but listed nowhere here is
still shown, in the finding page's "other fields" table, so nothing the job publishes is hidden
— except keys that look like credentials (:data:`SECRET_MARKERS`), which are never rendered.
"""

from __future__ import annotations

# Statuses of finding records (key cluster/topic/partition/producer_id/first_offset).
OPEN_STATUSES = ("late", "hanging")
RESOLVED_STATUS = "resolved"
# Statuses of partition-availability records (key cluster/topic/partition, degraded clusters).
PARTITION_STATUSES = ("unavailable", "available")

# Overview groups, in display order. An open finding with ``verified: false`` goes to
# "unverified" whatever its status: it must be confirmed before anyone acts on it.
GROUPS = (
    ("hanging", "Hanging", "No coordinator will finish these: abort after reading the evidence."),
    ("late", "Late", "Open past the threshold but still owned by the coordinator: no abort command."),
    ("unverified", "Unverified", "The input did not prove every fact the finding rests on (see its unverified "
                                 "reasons): supply the missing proof or confirm before acting."),
)

# Plain words for each cause (spec detection.md §3).
CAUSE_TEXT = {
    "coordinator-unaware": "The transaction coordinator has no open transaction for this producer: "
                           "nothing will ever write its commit/abort marker.",
    "coordinator-finished-without-partition": "The coordinator completed the transaction but this "
                                              "partition was never part of it, so no marker will come.",
    "write-after-marker": "A late write of the same producer epoch landed after its transaction's "
                          "marker (KAFKA-9144) and opened a transaction nobody owns.",
    "exceeds-max-timeout": "Open longer than any transaction timeout allows; no coordinator view "
                           "could confirm who owns it.",
    "markers-pending": "The coordinator decided the outcome but its markers have not landed yet.",
    "coordinator-stuck": "The coordinator still shows the transaction Ongoing past its own timeout.",
    "long-transaction": "A producer with a long transaction timeout: still inside what the "
                        "coordinator allows.",
    "prepared-2pc": "A two-phase-commit transaction (KIP-939): its external transaction manager owns "
                    "the decision and the coordinator never times it out. Never aborted by txnwatch; "
                    "the remedy of last resort (forceTerminateTransaction) breaks that manager's atomicity.",
    "open-before-log-start": "The LSO has stayed at the log start longer than any transaction timeout "
                             "allows: a transaction whose first batches retention deleted is still open.",
    "lso-pinned-at-log-start": "The LSO sits at the log start, held by a transaction whose first batches "
                               "retention deleted; no read shows its producer.",
}

# What each finding kind holds (streaming.vocab.FINDING_KINDS, docs/alerts.md). Only the kind that
# is not a plain data transaction gets a badge on the overview.
KIND_TEXT = {
    "group-offsets-held": "A transactional offset commit (sendOffsetsToTransaction) on __consumer_offsets that "
                          "nothing has ended: its consumer groups get UNSTABLE_OFFSET_COMMIT on every offset fetch "
                          "and cannot start. Ending the transaction (abort, or its coordinator's marker) releases "
                          "them; recreating the group under a new name is not needed.",
}

# What each unverified reason means and what would supply the missing proof (docs/alerts.md,
# streaming.vocab.UNVERIFIED_REASONS).
REASON_TEXT = {
    "newest-segment-not-proven": "The read may end before the partition's end: give its whole log directory, "
                                 "the broker's offset checkpoint files, or --bootstrap-server.",
    "coordinator-view-incomplete": "A __transaction_state partition that could own this producer was not read: "
                                   "give it, or run kafka-transactions.sh describe.",
    "coordinator-copy-behind": "A coordinator copy holds nothing newer than the transaction's first write and may "
                               "lag: give the leader's copy or --bootstrap-server.",
    "coordinator-copy-empty": "An empty coordinator copy cannot show it is current: give the leader's copy or "
                              "--bootstrap-server.",
    "crc-gap": "A batch failed its CRC check and was not believed: copy the segment again.",
    "clock-skew": "A timestamp lies ahead of the clock: check producer and broker clocks, or give --as-of.",
    "no-coordinator-input": "No __transaction_state partition was read: include them, or run "
                            "kafka-transactions.sh describe.",
    "start-offset-not-proven": "Retention deleted the transaction's start: give the newest .snapshot or ask "
                               "DescribeProducers (brokers 2.8+).",
}

# How exact each coordinator-epoch source is and what to do when a legacy abort
# (--coordinator-epoch) is rejected. Sources follow spec detection.md §4 (rules v2) plus the
# withdrawn "coordinator-partition" rule that alerts of schema version 1 may still carry.
EPOCH_SOURCE_TEXT: dict[str, tuple[str, str]] = {
    "describe-producers": (
        "Exact: the partition leader's own producer entry (DescribeProducers).",
        "A rejection means the producer state changed since it was read: wait for the next "
        "micro-batch and use the command of the updated alert."),
    "last-marker": (
        "Exact: the coordinator epoch of this producer's last marker on the partition.",
        "COORDINATOR_FENCED (error 52) should not happen; if it does, the partition holds newer "
        "markers than were read: re-read the partition from its log start or use the "
        "--start-offset command on brokers 3.0+."),
    "snapshot": (
        "Exact: the producer's entry in the partition's newest .snapshot (0 when absent from it).",
        "If rejected with COORDINATOR_FENCED, a newer snapshot or marker exists than the one read: "
        "dump the partition's newest .snapshot (kafka-dump-log.sh) and re-scan."),
    "log-start": (
        "Exact: the partition was read from offset 0 and the producer never had a marker there (0).",
        "If rejected, the log start moved (retention) since it was read: re-scan including the "
        "partition's newest .snapshot."),
    "producer-last-marker": (
        "Lower bound: the highest coordinator epoch of this producer's markers on any partition read.",
        "If rejected with COORDINATOR_FENCED (error 52), the partition holds a higher epoch: take it "
        "from this partition's last marker (read it from its log start) or its newest .snapshot, "
        "never by guessing a higher number."),
    "all-coordinators-max": (
        "Harmless upper reading: no coordinator maps this producer; the highest leader epoch over "
        "all __transaction_state partitions.",
        "If rejected with COORDINATOR_FENCED, a coordinator partition had no append since its last "
        "election: re-run after the next __transaction_state write, or use --start-offset on 3.0+."),
    "coordinator-partition": (
        "Withdrawn rule (schema 1): the highest leader epoch of the producer's __transaction_state "
        "partition; it can exceed the coordinator's epoch.",
        "Prefer the --start-offset command (brokers 3.0+). Before the legacy command, confirm the "
        "epoch from the partition's last marker or newest .snapshot: a too-high value fences the "
        "real coordinator silently."),
    "unknown": (
        "Unknown: nothing read proves the coordinator epoch, so no legacy command is printed.",
        "Use --start-offset (brokers 3.0+), or provide the partition's newest .snapshot or read it "
        "from its log start so the epoch can be proved."),
}

# Overview row: (field, label). Derived values (age, LSO lag) are computed by the store.
OVERVIEW_FIELDS = (
    ("cause", "Cause"),
    ("topic", "Topic"),
    ("partition", "Partition"),
    ("producer_id", "Producer id"),
    ("producer_epoch", "Epoch"),
    ("transactional_id", "Transactional id"),
    ("verified", "Verified"),
    ("unverified_reasons", "Not verified because"),
    ("confirmed_by", "Confirmed by"),
    ("blocked_groups", "Blocked groups"),
    ("missing_txn_partitions", "Missing __transaction_state partitions"),
    ("stale", "Stale"),
)

# Finding page sections: (field, label). Rendered in this order when present.
IDENTITY_FIELDS = (
    ("key", "Key"),
    ("status", "Status"),
    ("cause", "Cause"),
    ("kind", "Finding kind"),
    ("verified", "Verified"),
    ("unverified_reasons", "Not verified because"),
    ("confirmed_by", "Confirmed by"),
    ("missing_txn_partitions", "Missing __transaction_state partitions"),
    ("verify_hint", "How to verify"),
    ("cluster", "Cluster"),
    ("topic", "Topic"),
    ("partition", "Partition"),
    ("producer_id", "Producer id"),
    ("producer_epoch", "Producer epoch"),
    ("transactional_id", "Transactional id"),
    ("coordinator_state", "Coordinator state"),
    ("blocked_groups", "Blocked consumer groups"),
    ("lagging_groups", "Consumer groups behind it (not held yet)"),
    ("transaction_version", "Cluster transaction version"),
    ("pending_offset_commits", "Consumer-group offset commits it holds"),
    ("stale", "Stale (partition unreadable)"),
    ("last_read_ms", "Last read of the partition"),
    ("detected_at", "Detected at"),
    ("resolution", "Resolution"),
)
EVIDENCE_FIELDS = (
    ("first_offset", "First offset (first batch)"),
    ("last_offset", "Last offset (last batch)"),
    ("first_ts", "First write"),
    ("last_ts", "Last write"),
    ("open_ms", "Open at detection"),
    ("idle_ms", "Idle at detection"),
    ("lso", "Last stable offset"),
    ("high_watermark", "High watermark"),
    ("pins_lso", "Pins the LSO"),
    ("threshold_ms", "Threshold"),
    ("clock_skew", "Clock skew"),
    ("input", "Read from"),
)
# Sub-keys of the ``evidence`` object, in display order; unknown sub-keys follow them.
EVIDENCE_PARTS = (
    ("first_batch", "First batch of the transaction"),
    ("last_batch", "Last batch of the transaction"),
    ("last_marker", "The producer's last marker on the partition"),
    ("coordinator_record", "Coordinator record (__transaction_state)"),
    ("snapshot_entry", "Producer snapshot entry"),
    ("describe_producers", "DescribeProducers said"),
    ("describe_transactions", "DescribeTransactions said"),
    ("broker", "Broker answers"),
)
DATA_LOSS_FIELDS = (
    ("records", "Records"),
    ("bytes", "Bytes"),
    ("batches", "Batches"),
    ("first_offset", "From offset"),
    ("last_offset", "To offset"),
    ("data_deleted", "First offset already deleted by retention"),
)
COMMAND_FIELDS = (
    ("abort_command_new", "Brokers 3.0+ (the tool looks up producer and coordinator epochs itself)"),
    ("abort_command_legacy", "Brokers before 3.0 (explicit epochs)"),
)
EPOCH_FIELDS = (("coordinator_epoch", "Coordinator epoch"), ("coordinator_epoch_source", "Source"),
                ("epoch_hint", "About this epoch"))
PERMISSION_FIELD = ("required_permission", "Required permission")
# Fields shown as times (epoch ms) and as durations (ms).
TIME_FIELDS = frozenset({"first_ts", "last_ts", "detected_at", "last_read_ms", "since_ms"})
DURATION_FIELDS = frozenset({"open_ms", "idle_ms", "threshold_ms", "unavailable_ms"})
# Fields of a partition-availability record shown on the overview.
PARTITION_FIELDS = (
    ("cluster", "Cluster"),
    ("topic", "Topic"),
    ("partition", "Partition"),
    ("reason", "Reason"),
    ("since_ms", "Unavailable since"),
    ("last_read_ms", "Last read"),
    ("unavailable_ms", "Unavailable for"),
)

# Never rendered, whatever record carries them (a key containing any of these, lower case).
SECRET_MARKERS = ("password", "secret", "token", "credential", "sasl_", "ssl_key", "keytab")


def is_secret_key(name: str) -> bool:
    low = name.lower()
    return any(m in low for m in SECRET_MARKERS)


def listed_fields() -> frozenset[str]:
    """Every alert field some section of the finding page renders by name."""
    names = {f for group in (IDENTITY_FIELDS, EVIDENCE_FIELDS, DATA_LOSS_FIELDS, COMMAND_FIELDS, EPOCH_FIELDS)
             for f, _ in group}
    return frozenset(names | {PERMISSION_FIELD[0], "evidence", "schema_version"})
