"""How txnwatch starts Spark (issue 23 item 3): the Spark home its Python workers get, the skipped
look-up of pip-installed data sources, the short-run JVM options, and ``scan --engine spark`` end
to end through that session in a fresh process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from pyspark import SparkContext

from streaming import spark_session as ss
from tests.conftest import ROOT, SAMPLES

PACKAGE = Path(pyspark.__file__).resolve().parent
HAS_ZIP = (PACKAGE / "python" / "lib" / "pyspark.zip").is_file()


@pytest.fixture
def no_jvm(monkeypatch, tmp_path):
    """As if no JVM ran in this process yet, with a private cache directory."""
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.skipif(not HAS_ZIP, reason="PySpark is not a pip install with python/lib/pyspark.zip")
def test_worker_spark_home_links_the_package_without_python_lib(no_jvm):
    home = ss._worker_spark_home("local[2]")
    assert home is not None and Path(home).parent == no_jvm / "txnwatch"
    # PythonUtils.sparkPythonPath names $SPARK_HOME/python/lib/pyspark.zip first on every worker's
    # PYTHONPATH: it must not exist under this home.
    assert not (Path(home) / "python").exists()
    # what bin/spark-class needs: ${SPARK_HOME}/bin and ${SPARK_HOME}/jars
    assert (Path(home) / "bin").resolve() == PACKAGE / "bin"
    assert (Path(home) / "jars").resolve() == PACKAGE / "jars"
    # the second start reuses it
    assert ss._worker_spark_home("local[2]") == home


@pytest.mark.skipif(not HAS_ZIP, reason="PySpark is not a pip install with python/lib/pyspark.zip")
def test_worker_spark_home_only_where_it_applies(no_jvm, monkeypatch, tmp_path):
    assert ss._worker_spark_home("spark://master:7077") is None  # workers on other machines
    assert ss._worker_spark_home(None) is None
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/some-other-python")  # may not have PySpark installed
    assert ss._worker_spark_home("local[2]") is None
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "a-spark-distribution"))  # the user's own Spark
    assert ss._worker_spark_home("local[2]") is None
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4242")  # spark-submit started the JVM already
    assert ss._worker_spark_home("local[2]") is None
    assert not (no_jvm / "txnwatch").exists()


def test_short_run_options_only_for_short_runs():
    short = ss.session_settings({"spark.sql.shuffle.partitions": "1"}, short_run=True)
    long_ = ss.session_settings({"spark.sql.shuffle.partitions": "1"})
    assert short["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert "spark.driver.extraJavaOptions" not in long_
    assert short["spark.sql.shuffle.partitions"] == long_["spark.sql.shuffle.partitions"] == "1"  # conf wins
    assert short["spark.ui.enabled"] == long_["spark.ui.enabled"] == "false"
    # a config's own JVM options win over the short-run ones
    assert ss.session_settings({"spark.driver.extraJavaOptions": "-Xss4m"}, short_run=True)[
        "spark.driver.extraJavaOptions"] == "-Xss4m"


class _Registry:
    """``spark.dataSource`` of a session: what was registered, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def register(self, cls) -> None:
        self.names.append(cls.name())


class _FakeSession:
    def __init__(self) -> None:
        self.dataSource = _Registry()

    @property
    def _jvm(self):  # no JVM: the pip data source look-up is left to Spark (best effort)
        raise AttributeError("_jvm")


def test_register_sources_only_the_named_ones():
    one = _FakeSession()
    ss.register_sources(one, ["dumps"])
    assert one.dataSource.names == ["dumps"]
    every = _FakeSession()
    ss.register_sources(every)
    assert sorted(every.dataSource.names) == ["dumps", "kafka-txn", "segments"]
    with pytest.raises(ValueError, match="kafka"):
        ss.register_sources(_FakeSession(), ["kafka"])


def test_scan_reads_one_log_dir_with_segments_and_anything_else_with_dumps(tmp_path):
    from streaming.cli import scan_format

    d = tmp_path / "logs"
    (d / "orders-0").mkdir(parents=True)
    f = d / "orders-0" / f"{0:020d}.log"
    f.write_bytes(b"")
    assert scan_format([str(d)]) == "segments"
    assert scan_format([str(f)]) == "dumps"
    assert scan_format([str(d), str(d / "orders-0")]) == "dumps"
    assert scan_format([str(d)], topic="orders", partition=0) == "dumps"


def test_source_planners_import_no_decoder_nor_pandas():
    """Spark's planning processes (create_data_source, the streaming source runner,
    plan_data_source_read) import the source module and never read: it must not pull in
    pandas/pyarrow and the decoders (~0.35 CPU s each, issue 23)."""
    code = ("import sys\n"
            "import streaming.sources.segments, streaming.sources.dumps\n"
            "print(sorted(m for m in ('pandas', 'pyarrow', 'streaming.sources.files', 'streaming.normalize')"
            " if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.spark
def test_shared_session_workers_and_source_lookup(spark):
    # The fixture's session was started by streaming.spark_session.spark_session and read the
    # sources' schemas since: Spark's DataSourceManager holds "no pip data sources" ...
    assert ss.skip_pip_data_source_lookup(spark)
    # ... and the JVM never started pyspark.sql.worker.lookup_data_sources (a daemon Spark keeps
    # running once started: PythonWorkerFactory.startDaemon).
    jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    schema = spark.read.format("segments").option("path", str(SAMPLES)).load().schema  # a data source use
    assert "route_pid" in schema.fieldNames()
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == jvm_pid:
                kids.append(cmd)
    assert not [c for c in kids if "lookup_data_sources" in c], kids
    if HAS_ZIP and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # a Python worker imports PySpark from the installed package (its cached bytecode), not
        # from pyspark.zip's sources
        where = spark.range(1).mapInPandas(_pyspark_file, "f string").collect()[0]["f"]
        assert "pyspark.zip" not in where and Path(where).resolve().parent == PACKAGE


def _pyspark_file(frames):
    import pandas as pd
    import pyspark as worker_pyspark

    for _ in frames:
        yield pd.DataFrame({"f": [worker_pyspark.__file__]})


@pytest.mark.spark
def test_scan_engine_spark_in_a_fresh_process(tmp_path):
    """``txnwatch scan --engine spark`` as a user runs it: its own short-run session (one shuffle
    partition, C1 JVM, linked Spark home), the same finding as test_pipeline_samples'
    hanging write-after-marker."""
    syn = SAMPLES / "synthetic"
    root = tmp_path / "logs"
    (root / "orders-0").mkdir(parents=True)
    shutil.copy(syn / "scenario_orders-0_00000000000000000000.log", root / "orders-0" / f"{0:020d}.log")
    (root / "__transaction_state-40").mkdir()
    shutil.copy(syn / "tv2_txn_state-40_00000000000000000000.log", root / "__transaction_state-40" / f"{0:020d}.log")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    env.pop("PYSPARK_GATEWAY_PORT", None)
    out = subprocess.run([sys.executable, "-m", "streaming.cli", "scan", "--engine", "spark", "--json",
                          "--cluster", "test", "--as-of", "1700003600000", str(root)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 2, out.stderr[-3000:]  # 2: a hanging finding
    findings = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    # producer 4002's transaction from offset 9 (UnifiedLog's LSO stays there), coordinator view
    # incomplete (one of 50 __transaction_state partitions): hanging, exceeds-max-timeout, unverified
    assert [(f["producer_id"], f["first_offset"], f["status"], f["cause"], f["verified"]) for f in findings] == [
        (4002, 9, "hanging", "exceeds-max-timeout", False)]
