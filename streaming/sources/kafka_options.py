"""Options of the ``kafka-txn`` source (streaming/sources/kafka.py documents each), parsed once
into the plain dict that the driver's planner and the executors' reader share (it is pickled
with every input partition, so it holds only picklable values)."""

from __future__ import annotations

import json
from typing import Any

from streaming.sources.kafka_security import check_source_options
from streaming.sources.kafka_unread import LEDGER_OPTION

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
#: Default ``max_input_partitions``: a micro-batch is at most this many Spark tasks. A cluster of
#: up to 16 brokers keeps one input partition per broker; on a 1,000-broker cluster one task per
#: broker would cost Spark's per-task overhead a thousand times per trigger while most tasks hold
#: a handful of partitions (bench/cluster_scale.py).
MAX_INPUT_PARTITIONS = 16


def parse_options(options: dict[str, str]) -> dict[str, Any]:
    """The source's Spark options (strings) as typed values with their defaults; a clear
    ``ValueError`` naming the option for a missing or malformed one."""
    boot = options.get("bootstrap_servers")
    if not boot:
        raise ValueError("kafka source: option 'bootstrap_servers' is required")
    topics = json.loads(options.get("topics") or "[]")
    pattern = options.get("topic_pattern") or None
    if not topics and not pattern:
        raise ValueError("kafka source: give 'topics' (JSON list) or 'topic_pattern' (regex)")
    start = options.get("starting_offsets", "lso")
    if start not in ("lso", "earliest", "latest"):
        try:
            json.loads(start)
        except json.JSONDecodeError:
            raise ValueError(f"kafka source: starting_offsets must be lso, earliest, latest or JSON, got {start!r}") from None
    mopt = options.get("max_offsets_per_trigger")
    return {
        "bootstrap": boot,
        "topics": topics,
        "pattern": pattern,
        "include_internal": options.get("include_internal", "false").lower() == "true",
        # __consumer_offsets is watched unless turned off (issue 25: groups held by open offset commits)
        "watch_consumer_offsets": options.get("watch_consumer_offsets", "true").lower() != "false",
        "starting": start,
        "max_offsets": int(mopt) if mopt not in (None, "", "0", "None") else None,
        "fetch_max_bytes": int(options.get("fetch_max_bytes", str(4 << 20))),
        "validate_crc": options.get("validate_crc", "true").lower() != "false",
        "cluster": options.get("cluster", "default"),
        "client_id": options.get("client_id", "txnwatch"),
        "request_timeout_ms": int(options.get("request_timeout_ms", "30000")),
        "retries": int(options.get("retries", "8")),
        "retry_backoff_ms": int(options.get("retry_backoff_ms", "200")),
        "empty_fetch_retries": int(options.get("empty_fetch_retries", "4")),
        "deletion_confirmations": int(options.get("deletion_confirmations", "3")),
        "metadata_max_age_ms": int(options.get("metadata_max_age_ms", "0")),
        "unavailable_timeout_ms": int(options.get("unavailable_timeout_ms", "600000")),
        "unavailable_backoff_max_ms": int(options.get("unavailable_backoff_max_ms", "60000")),
        "ride_through_ms": int(options.get("ride_through_ms", "0")),
        "unread_ledger": options.get(LEDGER_OPTION) or None,
        # how long one broker may take to answer (all are asked at once): its partitions are
        # unavailable after that, the others keep their cadence (kafka_parallel.py)
        "broker_timeout_ms": int(options.get("broker_timeout_ms") or min(int(options.get("request_timeout_ms",
                                                                                         "30000")), 10000)),
        "groups_per_broker": max(1, int(options.get("groups_per_broker", "1"))),
        # at most this many Spark input partitions per micro-batch: beyond it, brokers' groups
        # share one (kafka_partitions.input_partitions); 0 = one per broker however many
        "max_input_partitions": max(0, int(options.get("max_input_partitions", str(MAX_INPUT_PARTITIONS)))),
        "read_mode": read_mode(options.get("read_mode", "full"), start),
        "probe_bytes": int(options.get("probe_bytes", str(16 << 10))),
        "probe_follow_after_ms": int(options.get("probe_follow_after_ms", "900000")),
        # unresolved (references, dotted paths): picklable, resolved by _wire in each process
        "security": check_source_options(options),
    }


def read_mode(mode: str, start: str) -> str:
    if mode not in ("probe", "full"):
        raise ValueError(f"kafka source: read_mode must be probe or full, got {mode!r}")
    if mode == "probe" and start != "lso":
        raise ValueError(f"kafka source: read_mode = probe always starts at the LSO (it reads only what is open); "
                         f"starting_offsets = {start!r} needs read_mode = full")
    return mode


def tp_key(topic: str, partition: int) -> str:
    """A partition's key in the offsets JSON (Spark writes offsets as JSON: keys are strings)."""
    return f"{topic}\t{partition}"


def split_key(key: str) -> tuple[str, int]:
    """The ``(topic, partition)`` of a :func:`tp_key`."""
    t, p = key.split("\t")
    return t, int(p)
