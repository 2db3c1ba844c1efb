"""One KafkaWire per configuration per process: the driver's planner and every executor Python
worker reuse their client across micro-batches (connections, metadata cache, API versions)."""

from __future__ import annotations

import threading
from typing import Any

from streaming.sources.kafka_security import kafka_python_kwargs
from streaming.sources.kafka_wire import KafkaWire

_WIRES: dict[tuple, KafkaWire] = {}
_WIRES_LOCK = threading.Lock()


def client_for(opts: dict[str, Any]) -> KafkaWire:
    """One client per configuration per process (driver, or executor Python worker)."""
    key = (opts["bootstrap"], opts["client_id"], opts["request_timeout_ms"], opts["retries"],
           opts["retry_backoff_ms"], opts["deletion_confirmations"], opts["metadata_max_age_ms"],
           opts["broker_timeout_ms"], tuple(sorted(opts["security"].items())))
    with _WIRES_LOCK:
        w = _WIRES.get(key)
        if w is None:
            w = _WIRES[key] = KafkaWire(opts["bootstrap"], client_id=opts["client_id"],
                                        request_timeout_ms=opts["request_timeout_ms"], retries=opts["retries"],
                                        retry_backoff_ms=opts["retry_backoff_ms"],
                                        deletion_confirmations=opts["deletion_confirmations"],
                                        metadata_max_age_ms=opts["metadata_max_age_ms"],
                                        broker_timeout_ms=opts["broker_timeout_ms"],
                                        **kafka_python_kwargs(opts["security"]))
        return w


def close_wires() -> None:
    """Close every cached client of this process (query stop, tests)."""
    with _WIRES_LOCK:
        wires = list(_WIRES.values())
        _WIRES.clear()
    for w in wires:
        try:
            w.close()
        except Exception:  # closing is best effort
            pass
