"""Cluster-wide finalized features the live path reports (issue 25 item 2): ``transaction.version``.

Brokers answer ApiVersions v3+ (Kafka 2.4+, KIP-584) with the cluster's finalized feature levels
(``ApiVersionsResponse.json``: ``FinalizedFeaturesEpoch`` tag 1, ``FinalizedFeatures`` tag 2,
valid only when the epoch is >= 0). ``transaction.version`` (KIP-890 / KIP-1022) is finalized on
4.0+ clusters; a feature that is not finalized is at level 0, exactly as the transaction
coordinator reads it (``TransactionStateManager.transactionVersionLevel``:
``finalizedFeatures().getOrDefault(TransactionVersion.FEATURE_NAME, 0)``).

Shown per cluster (alert field ``transaction_version``, metric
``txnwatch_transaction_version``, status page); the verdict reads it only to know that every
marker is bumped at 2 (no ``write-after-marker`` refinement, detection.md §3.1 revision 3.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRANSACTION_VERSION = "transaction.version"


def transaction_version_of(finalized: Mapping[str, int], epoch: int | None) -> int | None:
    """The finalized ``transaction.version`` level: ``finalized`` = feature name -> finalized max
    version level from an ApiVersions v3+ answer, ``epoch`` its FinalizedFeaturesEpoch. None when
    the epoch is missing or -1 (the list is then not valid); an absent feature is level 0."""
    if epoch is None or epoch < 0:
        return None
    return int(finalized.get(TRANSACTION_VERSION, 0))


def finalized_levels(response: Any) -> tuple[dict[str, int], int | None]:
    """(name -> MaxVersionLevel, FinalizedFeaturesEpoch) of a decoded ApiVersionsResponse."""
    levels = {f.name: int(f.max_version_level) for f in (getattr(response, "finalized_features", None) or [])}
    epoch = getattr(response, "finalized_features_epoch", None)
    return levels, None if epoch is None else int(epoch)
