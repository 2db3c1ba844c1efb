"""Errors of the Kafka client and the Kafka error-code names they carry.

The client raises three kinds of error (all :class:`KafkaWireError`):

* :class:`KafkaWireError` - retrying will not fix it (unsupported version, corrupt answer,
  authentication failure, a configuration error the broker names);
* :class:`KafkaAuthorizationError` - a ``*_AUTHORIZATION_FAILED`` code; the message names the ACL
  to add (:mod:`streaming.sources.kafka_security`);
* :class:`KafkaUnavailable` - the cluster or a partition leader stayed unavailable through all
  bounded retries (:mod:`streaming.sources.kafka_client.retry`).

Which partition error codes are retried and which stop at once is decided in
:mod:`streaming.sources.kafka_errors`; which *exceptions* of the transport are retriable is
:func:`retriable_exception` here.
"""

from __future__ import annotations

import kafka.errors as Errors

__all__ = ["KafkaAuthorizationError", "KafkaUnavailable", "KafkaWireError", "describe", "error_name",
           "retriable_exception"]

# Error codes the client branches on (apache/kafka clients/.../common/protocol/Errors.java).
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
UNKNOWN_TOPIC_ID = 100
#: Metadata v13 top-level error (KIP-1102); not known to kafka-python 3.0.
REBOOTSTRAP_REQUIRED = 129

#: Partition-level errors after which the leader may have moved: refresh metadata and retry.
LEADER_ERRORS = frozenset({
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    9,  # REPLICA_NOT_AVAILABLE
    13,  # NETWORK_EXCEPTION
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE (ListOffsets during leader change)
})


def error_name(code: int) -> str:
    """Kafka error name for an error code (``6`` -> ``"NOT_LEADER_OR_FOLLOWER"``)."""
    if code == 0:
        return "NONE"
    if code == 6:  # kafka-python still uses the pre-2.6 name NOT_LEADER_FOR_PARTITION
        return "NOT_LEADER_OR_FOLLOWER"
    if code == REBOOTSTRAP_REQUIRED:
        return "REBOOTSTRAP_REQUIRED"
    if code == -1:  # kafka-python calls it UNKNOWN; Kafka's Errors name is UNKNOWN_SERVER_ERROR
        return "UNKNOWN_SERVER_ERROR"
    if code in Errors.kafka_errors:
        return Errors.kafka_errors[code].message
    return f"UNKNOWN_ERROR_{code}"


class KafkaWireError(Exception):
    """A Kafka request failed in a way retrying will not fix (or the response was unusable)."""

    def __init__(self, message: str, *, error_code: int | None = None):
        super().__init__(message)
        self.error_code = error_code
        self.error = error_name(error_code) if error_code is not None else None


class KafkaAuthorizationError(KafkaWireError):
    """The broker refused an operation for lack of an ACL; the message names the ACL to add."""


class KafkaUnavailable(KafkaWireError):
    """The cluster (or a partition leader) stayed unavailable through all bounded retries.

    ``last_error``: the last retriable error (``"NOT_LEADER_OR_FOLLOWER for t-0"``), when known.
    """

    last_error: str | None = None


def retriable_exception(exc: BaseException) -> bool:
    """Whether a failure of the transport (connection refused, request timed out, node not
    ready, ...) may heal by retrying; authentication, authorization and version mismatches never
    do."""
    if isinstance(exc, (Errors.UnknownBrokerIdError, OSError)):
        return True
    if isinstance(exc, (Errors.SaslAuthenticationFailedError, Errors.AuthorizationError,
                        Errors.IncompatibleBrokerVersion, Errors.UnsupportedVersionError)):
        return False
    return isinstance(exc, Errors.RetriableError)


def describe(exc: BaseException | str | None) -> str:
    """``"ClassName: message"`` of an exception (or the string itself) for error messages."""
    if exc is None:
        return "none"
    if isinstance(exc, str):
        return exc
    text = str(exc)
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name
