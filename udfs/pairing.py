"""The one rule that pairs transaction markers with transactional data (detection.md §1).

Per partition, per producer id, in offset order - never by (producer id, epoch):

* a transactional data batch OPENs a transaction at its base offset if the producer has none open
  on the partition, otherwise it JOINs the open one whatever its epoch (TV2 and coordinator aborts
  move the epoch between data and marker, kafka-formats.md §8.3);
* a control batch CLOSEs whatever the producer has open (a marker with nothing open is normal: it
  only becomes the producer's last marker). A COMMIT/ABORT marker teaches the coordinator epoch it
  carries; an EMPTY control batch (recordsCount 0, left by the log cleaner on a compacted topic),
  and a control batch whose record could not be read or was not printed, close too but their type
  and coordinator epoch are unknown, so they teach none;
* non-transactional batches (plain or idempotent), legacy messages and producer id -1 are IGNOREd.

Where this differs from the broker, on purpose: ``ProducerAppendInfo.append``
(storage/src/main/java/org/apache/kafka/storage/internals/log/ProducerAppendInfo.java, apache/kafka
at 4e846038a6) hands a control batch to ``appendEndTxnMarker`` only when ``batch.iterator()`` has a
record; an empty control batch returns ``Optional.empty()`` with no state change at all ("the
entire transaction has been cleaned from the log"), so it neither closes nor updates the epoch or
coordinator epoch. The broker can afford that because the cleaner discards a marker's record only
once no batch of its transaction is left (``CleanedTransactionMetadata.onControlBatchRead`` in
core/src/main/scala/kafka/log/LogCleaner.scala): replaying the cleaned log, nothing of that
producer is open when the empty batch comes. A detector reads a log that changes under it: it may
have read the transaction's data before the cleaner ran and reach the marker only after it was
emptied. The broker closed that transaction when the marker was first appended, so the detector
closes it too. On any log the cleaner can leave, the two rules give the same open transactions.

Every consumer of the rule (``udfs.producer_state.PartitionState`` for partition replays,
``streaming.state_machine.ProducerState`` for the streaming state, the simulator's broker model
``streaming.simulate.broker_state.apply_batch``) asks :func:`pair` and
:func:`marker_coordinator_epoch` and keeps only its own bookkeeping; ``tests/test_pairing.py``
replays every simulator scenario through all of them and the test broker's independent copy.
"""

from __future__ import annotations

from enum import Enum

from udfs.model import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_NAMES

# control types (udfs.model CONTROL_*) whose record names the outcome and carries the epoch
_TYPED_MARKERS = frozenset({CONTROL_ABORT, CONTROL_COMMIT})
_CONTROL_CODES = {name: code for code, name in CONTROL_NAMES.items()}


class Step(Enum):
    """What one batch does to its producer's transaction on its partition."""

    IGNORE = "ignore"  # not part of any transaction
    OPEN = "open"  # starts a transaction at the batch's base offset
    JOIN = "join"  # extends the open transaction
    CLOSE = "close"  # ends what is open (if anything) and becomes the last marker


def pair(has_open: bool, *, transactional: bool, control: bool, producer_id: int = 0) -> Step:
    """The step a batch takes, given whether its producer has a transaction open on the partition.

    ``transactional``/``control``: attribute bits 4 and 5 of a magic-v2 batch (a control batch
    always has bit 4 set; pass False for legacy messages). ``producer_id`` -1 is never paired.
    """
    if producer_id < 0 or not transactional:
        return Step.IGNORE
    if control:
        return Step.CLOSE
    return Step.JOIN if has_open else Step.OPEN


def marker_coordinator_epoch(control_type: int | str | None, coordinator_epoch: int | None) -> int | None:
    """The coordinator epoch a control batch teaches, or None when it teaches none.

    ``control_type`` is a ``udfs.model`` CONTROL_* code or its name ("COMMIT", "ABORT", "EMPTY",
    ...). Only a readable COMMIT/ABORT record with a coordinator epoch >= 0 teaches one; an empty
    control batch has no record to carry it.
    """
    code = _CONTROL_CODES.get(control_type) if isinstance(control_type, str) else control_type
    if code not in _TYPED_MARKERS or coordinator_epoch is None or coordinator_epoch < 0:
        return None
    return int(coordinator_epoch)
