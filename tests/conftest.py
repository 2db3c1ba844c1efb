"""Shared fixtures: sample paths and the one session-scoped SparkSession (local[2])."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "fixtures" / "samples"
sys.path.insert(0, str(ROOT))
# Spark's Python workers must import this checkout's code too (not whatever an editable install
# points at): they inherit the driver's environment.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


# kafka-python's background threads (clients of brokers a test already stopped) may log after
# pytest closed its capture streams; that must not print "--- Logging error ---" tracebacks.
logging.raiseExceptions = False


def read_hex(path: Path) -> bytes:
    """A samples ``.hex`` file: '#' lines are provenance, the last line is the payload."""
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return bytes.fromhex(lines[-1])


@pytest.fixture(scope="session")
def samples() -> Path:
    return SAMPLES


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from streaming.pipeline import spark_session

    session = spark_session(app="txnwatch-tests", master="local[2]",
                            conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


def pytest_sessionfinish(session, exitstatus):
    from streaming.sources.kafka import close_wires

    close_wires()


def kafka_watchdog(seconds: int):
    """An autouse fixture for tests that talk to the broker fake over sockets: a hung socket dumps
    every thread's stack and ends the run after ``seconds`` instead of stalling CI, and each test
    closes the cached Kafka clients it opened. Assign it in the module: ``_watchdog = kafka_watchdog(60)``."""
    import faulthandler

    @pytest.fixture(autouse=True)
    def _watchdog():
        faulthandler.dump_traceback_later(seconds, exit=True)
        yield
        faulthandler.cancel_dump_traceback_later()
        from streaming.sources.kafka import close_wires

        close_wires()

    return _watchdog


# KafkaWire settings for tests against the broker fake: short timeouts and backoffs, so a fault
# test ends in seconds.
WIRE = dict(client_id="txnwatch-test", request_timeout_ms=1500, retries=3, retry_backoff_ms=10,
            retry_backoff_max_ms=50, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
            bootstrap_timeout_ms=2000)


@pytest.fixture
def wires():
    """``make(broker, **overrides) -> KafkaWire`` on the fake; every wire made is closed afterwards."""
    from streaming.sources.kafka_wire import KafkaWire

    made: list = []

    def make(broker, **kw):
        w = KafkaWire(broker.bootstrap_servers, **{**WIRE, **kw})
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
