"""What the live client does with a partition-level error code of ListOffsets or Fetch.

The Java consumer is the model (apache/kafka 3.8):

* ``OffsetFetcherUtils.handleListOffsetResponse``: NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE,
  KAFKA_STORAGE_ERROR, OFFSET_NOT_AVAILABLE, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH,
  UNKNOWN_LEADER_EPOCH and UNKNOWN_TOPIC_OR_PARTITION go to ``partitionsToRetry`` (after a
  metadata update); TOPIC_AUTHORIZATION_FAILED throws; **every other code** ("unexpected
  exception", UNKNOWN_SERVER_ERROR among them) is logged and retried too.
* ``FetchCollector.handleInitializeErrors``: the leader and topic errors request a metadata
  update and the partition is fetched again; UNKNOWN_LEADER_EPOCH and UNKNOWN_SERVER_ERROR are
  logged and fetched again; TOPIC_AUTHORIZATION_FAILED throws; OFFSET_OUT_OF_RANGE resets the
  position (here: the caller's gap and restart at the log start).

txnwatch is a watchdog that must outlive ordinary broker trouble, so it retries every code a
retry can heal and stops only on what needs an operator: a missing ACL (the message names it,
:func:`streaming.sources.kafka_security.authorization_message`) or a configuration the broker
refuses (:data:`CONFIGURATION_ERRORS`: the message names the setting). Java throws on
CORRUPT_MESSAGE and unknown codes in a fetch; here they are retried and, if they persist, the
partition becomes *unavailable* (a gap row naming the error), which keeps every other partition
watched instead of stopping the job.
"""

from __future__ import annotations

import enum

from streaming.sources.kafka_security import AUTHORIZATION_ERRORS

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100

#: Codes a retry cannot heal because a broker or client setting is wrong, with the setting to
#: look at (apache/kafka ``Errors``: UNSUPPORTED_VERSION 35, INVALID_REQUEST 42,
#: UNSUPPORTED_COMPRESSION_TYPE 76 - a Fetch below v10 of zstd data, ``FetchResponse`` /
#: ``KafkaApis.handleFetchRequest``'s down-conversion check).
CONFIGURATION_ERRORS: dict[int, str] = {
    35: "the broker does not support this request version: check the client's api_version setting (leave it "
        "unset to negotiate) and the broker's inter.broker.protocol.version / metadata.version",
    42: "the broker rejected the request as malformed for its version: check the client's api_version setting "
        "(leave it unset to negotiate)",
    76: "the topic holds zstd-compressed batches and the broker refused to send them to this Fetch version: "
        "leave api_version unset so that Fetch v10+ is negotiated",
}


class Action(enum.Enum):
    OK = "ok"
    RETRY = "retry"  # refresh metadata, retry this partition (bounded), then it is unavailable
    OUT_OF_RANGE = "out_of_range"  # the caller's gap + restart at the log start
    UNKNOWN_TOPIC = "unknown_topic"  # deleted? confirmed with fresh metadata before believing it
    DENIED = "denied"  # stop: name the ACL
    CONFIGURATION = "configuration"  # stop: name the setting


def action(code: int) -> Action:
    """What to do with a partition error code of a ListOffsets or Fetch answer."""
    if code == NONE:
        return Action.OK
    if code == OFFSET_OUT_OF_RANGE:
        return Action.OUT_OF_RANGE
    if code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
        return Action.UNKNOWN_TOPIC
    if code in AUTHORIZATION_ERRORS:
        return Action.DENIED
    if code in CONFIGURATION_ERRORS:
        return Action.CONFIGURATION
    return Action.RETRY


def configuration_message(api: str, code: int, error: str, partition: str, broker: str) -> str:
    """One message for a configuration error that stops the job, naming the setting."""
    return f"{api} for {partition} refused by {broker}: {error}: {CONFIGURATION_ERRORS[code]}"
