"""ApiVersions (API key 18, v3+; Kafka 2.4+, KIP-584): the cluster's finalized ``transaction.version``.

From v3 the response carries the tagged fields ``SupportedFeatures``, ``FinalizedFeaturesEpoch``
and ``FinalizedFeatures[Name, MaxVersionLevel, MinVersionLevel]`` (``ApiVersionsResponse.json``);
``streaming.cluster_features`` reads ``transaction.version`` from them (KIP-890 / KIP-1228).
Brokers answering below v3 report no features: the version is then unknown (None), said once.
"""

from __future__ import annotations

import logging

import kafka.errors as Errors
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from streaming.cluster_features import finalized_levels, transaction_version_of
from streaming.kafka_admin.session import AdminSession

log = logging.getLogger(__name__)

#: how long a read of the finalized features is reused (they change only on an operator upgrade)
FEATURES_REFRESH_S = 60.0


def read_transaction_version(session: AdminSession) -> int | None:
    """One ApiVersions v3+ request; the finalized ``transaction.version``, None when unknown."""
    try:
        top = session.max_version(ApiVersionsRequest)
    except (Errors.KafkaError, OSError) as exc:
        log.warning("ApiVersions: cannot reach %s, transaction version unknown: %s", session.bootstrap_servers, exc)
        return None
    if top < 3:
        session.once("features", logging.INFO, "the brokers at %s answer ApiVersions < v3 (no finalized "
                     "features, KIP-584): transaction version unknown", session.bootstrap_servers)
        return None
    req = ApiVersionsRequest(client_software_name="txnwatch", client_software_version="1", min_version=3)
    res = session.call("ApiVersions", lambda: session.send(req))
    if res is None:
        return None
    return transaction_version_of(*finalized_levels(res))
