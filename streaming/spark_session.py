"""The SparkSession txnwatch starts: settings, JVM options, and what its Python processes import.

Kept free of pandas/pyarrow and the detection modules, so that starting a session (and the
benchmark's bare-session floor, ``bench/pipeline.py``) costs exactly what Spark costs.

What a one-shot run on Spark pays besides the JVM (issue 23 item 3, measured in
``docs/benchmarks.md``): about eight Python processes (daemons and their forks for the Python data
source's ``create_data_source`` and ``plan_data_source_read``, the streaming source runner, the UDF
workers) and the JVM's class loading and JIT. Three things here cut that without changing what
runs:

* **Python workers import PySpark from the installed package, not from ``pyspark.zip``.** Spark
  puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's ``PYTHONPATH``
  (``PythonUtils.sparkPythonPath``). For a pip-installed PySpark that zip holds only ``.py``
  sources (no bytecode, and zipimport never writes any), so every worker compiled PySpark's
  modules again: ~0.45 CPU s per process. :func:`_worker_spark_home` gives the JVM a Spark home
  made of links to the package's own directories without ``python/lib``, so the workers (the same
  interpreter, see ``PYSPARK_PYTHON``) import the installed ``pyspark`` and its cached bytecode.
* **No look-up of pip-installed Python data sources.** Spark's ``DataSourceManager`` runs a Python
  process (``pyspark.sql.worker.lookup_data_sources``) on the first Python data source use, to
  find ``pyspark_*`` packages; txnwatch only reads the sources it registers itself.
  :func:`skip_pip_data_source_lookup` records "none found" before the first registration.
* **Short runs** (``scan``: one query, then exit) start the JVM with C1 only and the serial GC
  (:data:`SHORT_RUN_CONF`): the C2 compiler's work never pays back in a run of seconds.
  The always-on job keeps the JVM's defaults.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterable

log = logging.getLogger("txnwatch")

# txnwatch's Spark settings (the config and spark-submit --conf win over them).
SPARK_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}

#: JVM options for a driver that lives for one query (``txnwatch scan``): tiered compilation stops
#: at C1 (no C2 compiles of code that will not run long enough to repay them) and one GC thread.
#: Measured on the one-batch scan: ~35 % less CPU for the scan and for a bare session alike.
SHORT_RUN_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def session_builder(app: str = "txnwatch", master: str | None = None, conf: dict[str, str] | None = None, *,
                    short_run: bool = False):
    """The configured ``SparkSession.Builder`` (nothing started yet): txnwatch's defaults, then
    ``conf``, then (``short_run``) :data:`SHORT_RUN_CONF`; settings given to spark-submit win."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app)
    # Under spark-submit the master (and the cluster's settings) come from the submit command:
    # PYSPARK_GATEWAY_PORT is set because the JVM is already running. Never override them then.
    if master and "PYSPARK_GATEWAY_PORT" not in os.environ:
        b = b.master(master)
    settings = session_settings(conf, short_run=short_run)
    given: set[str] = set()
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # spark-submit --conf (and spark-defaults.conf) win over txnwatch's defaults and config.
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        given = {k for k, _ in SparkConf().getAll()}
    for k, v in settings.items():
        if k not in given:
            b = b.config(k, v)
    return b


def session_settings(conf: dict[str, str] | None = None, *, short_run: bool = False) -> dict[str, str]:
    """The Spark settings a session gets: :data:`SPARK_DEFAULTS`, then (``short_run``)
    :data:`SHORT_RUN_CONF`, then ``conf`` (the config's settings win)."""
    settings = dict(SPARK_DEFAULTS)
    if short_run:
        settings.update(SHORT_RUN_CONF)
    settings.update(conf or {})
    return settings


def get_or_create(builder, master: str | None = None):
    """``builder.getOrCreate()``, launching a new JVM with :func:`_worker_spark_home` as its
    ``SPARK_HOME`` when that applies (the variable is restored afterwards)."""
    home = _worker_spark_home(master)
    if home is None:
        return builder.getOrCreate()
    before = os.environ.get("SPARK_HOME")
    os.environ["SPARK_HOME"] = home
    try:
        return builder.getOrCreate()
    finally:
        if before is None:
            os.environ.pop("SPARK_HOME", None)
        else:
            os.environ["SPARK_HOME"] = before


def spark_session(app: str = "txnwatch", master: str | None = None, conf: dict[str, str] | None = None, *,
                  short_run: bool = False, sources: Iterable[str] | None = None):
    """The SparkSession used by the CLI and tests (Python workers run this interpreter), with
    txnwatch's data sources registered: those named in ``sources`` (:data:`SOURCES`), or all."""
    spark = get_or_create(session_builder(app, master, conf, short_run=short_run), master)
    spark.sparkContext.setLogLevel("ERROR")
    register_sources(spark, sources)
    return spark


#: The format names of txnwatch's Python data sources.
SOURCES = ("segments", "dumps", "kafka-txn")


def register_sources(spark, sources: Iterable[str] | None = None) -> None:
    """Register the named data sources (default: all of :data:`SOURCES`). A one-shot job names
    the one it reads: each source is imported in this process to be registered (the Kafka
    source's client modules cost ~0.16 CPU s) and pickled to the JVM."""
    names = set(SOURCES if sources is None else sources)
    if names - set(SOURCES):
        raise ValueError(f"unknown data source(s) {sorted(names - set(SOURCES))}: expected some of {SOURCES}")
    skip_pip_data_source_lookup(spark)
    if "segments" in names:
        from streaming.sources.segments import SegmentsDataSource

        spark.dataSource.register(SegmentsDataSource)
    if "dumps" in names:
        from streaming.sources.dumps import DumpsDataSource

        spark.dataSource.register(DumpsDataSource)
    if "kafka-txn" in names:
        from streaming.sources.kafka import KafkaDataSource

        spark.dataSource.register(KafkaDataSource)


def skip_pip_data_source_lookup(spark) -> bool:
    """Before the first Python data source use: tell Spark no pip-installed ones exist, so it
    does not start a Python process to look for them.

    ``DataSourceManager.initialStaticDataSourceBuilders`` (Spark 4) runs
    ``UserDefinedPythonDataSource.lookupAllDataSourcesInPython()`` once per JVM unless the
    companion object's ``dataSourceBuilders`` already holds a result; it is set here to an empty
    one. No Spark setting skips the look-up. Best effort: if the field is not there (another Spark
    version, Spark Connect) the look-up runs as before. Returns whether it was skipped."""
    try:
        jvm = spark._jvm
        pkg = jvm.org.apache.spark.sql.execution.datasources
        manager = getattr(getattr(pkg, "DataSourceManager$"), "MODULE$")
        if manager.dataSourceBuilders().isEmpty():
            empty = getattr(getattr(jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()
            getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(empty))
        return True
    except Exception as exc:  # an optimisation only: Spark looks the sources up itself otherwise
        log.debug("pip data source look-up not skipped: %s", exc)
        return False


def _worker_spark_home(master: str | None) -> str | None:
    """A ``SPARK_HOME`` for a local JVM whose Python workers import the installed PySpark with its
    bytecode instead of ``python/lib/pyspark.zip``'s sources: the pip package's directories
    (``bin``, ``jars``...) linked, ``python`` left out (``PythonUtils.sparkPythonPath`` then names
    zips that do not exist, which Python skips). None when it does not apply: a JVM already
    running (spark-submit, or a session in this process), a non-local master, a ``SPARK_HOME``
    that is not the pip package, workers on another interpreter, no zip to avoid, or no
    writable cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ or not (master or "").startswith("local"):
        return None
    import pyspark
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return None
    package = os.path.dirname(os.path.abspath(pyspark.__file__))
    if os.environ.get("SPARK_HOME") and os.path.realpath(os.environ["SPARK_HOME"]) != os.path.realpath(package):
        return None
    worker_python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    if os.path.realpath(worker_python) != os.path.realpath(sys.executable):
        return None
    if not os.path.isfile(os.path.join(package, "python", "lib", "pyspark.zip")):
        return None
    key = hashlib.sha256(f"{package}\0{pyspark.__version__}".encode()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(cache):  # no home directory to expand "~" to
        return None
    # Only under the user's own cache directory: the JVM runs what this home's bin/ links to, so a
    # directory others can write to (a shared /tmp) is never used.
    base = os.path.join(cache, "txnwatch")
    home = os.path.join(base, f"spark-home-{key}")
    try:
        if _linked_home_ok(home, package) or _link_home(home, package, base):
            return home
    except OSError as exc:
        log.debug("cannot prepare %s: %s", home, exc)
    return None


def _home_entries(package: str) -> list[str]:
    return sorted(n for n in os.listdir(package)
                  if n not in ("python", "__pycache__") and os.path.isdir(os.path.join(package, n)))


def _linked_home_ok(home: str, package: str) -> bool:
    if not os.path.isdir(home):
        return False
    return all(os.path.realpath(os.path.join(home, n)) == os.path.realpath(os.path.join(package, n))
               for n in _home_entries(package)) and not os.path.exists(os.path.join(home, "python"))


def _link_home(home: str, package: str, base: str) -> bool:
    """Build the linked home in a fresh directory and rename it into place (concurrent runs
    each build their own; the first rename wins, the others use it)."""
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".spark-home-", dir=base)
    try:
        for n in _home_entries(package):
            os.symlink(os.path.join(package, n), os.path.join(tmp, n))
        try:
            os.rename(tmp, home)
        except OSError:
            if not _linked_home_ok(home, package):
                raise
    finally:
        if os.path.isdir(tmp):
            for n in os.listdir(tmp):
                os.unlink(os.path.join(tmp, n))
            os.rmdir(tmp)
    return _linked_home_ok(home, package)
