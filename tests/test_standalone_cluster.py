"""``spark-submit`` of txnwatch to a Spark standalone cluster (docs/deployment.md).

A master and one worker (1 core, 1 GiB) are started on loopback from the pyspark installation
(``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), ``txnwatch scan``
is submitted with ``scripts/txnwatch_submit.py``, and its alerts must equal those of the same scan
run in-process on the local session; then the always-on job (``run --once``) is submitted to the same
cluster and must write the scenario's finding. The worker's application directory and the master's list of
completed applications prove that the tasks ran on the cluster's executor, not in local mode.
Master, worker (and its executors) are always killed by process group.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streaming.config import as_config
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.spark]

LAUNCHER = ROOT / "scripts" / "txnwatch_submit.py"
START_TIMEOUT_S = 90
SUBMIT_TIMEOUT_S = 240


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env(conf_dir: Path) -> dict[str, str]:
    """Environment for the daemons and spark-submit: loopback only, no inherited Spark/txnwatch settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_", "TXNWATCH_", "_SPARK"))}
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf_dir),   # empty: no spark-defaults.conf from elsewhere
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "512m",     # master and worker JVMs (not the executor)
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    return env


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(ln for ln in lines[-n:] if not ln.startswith("WARNING: Using incubator"))


def _kill_group(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM the process group (the daemon and every JVM/Python process it started), then SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:  # executors started by the worker are in its group and may outlive it briefly
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def _wait_for(pattern: str, log: Path, proc: subprocess.Popen, what: str, timeout_s: float) -> re.Match:
    deadline = time.monotonic() + timeout_s
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        m = rx.search(log.read_text(errors="replace")) if log.exists() else None
        if m:
            return m
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with code {proc.returncode} before it was ready; "
                                 f"{log}:\n{_tail(log)}")
        time.sleep(0.25)
    raise AssertionError(f"{what} not ready after {timeout_s:.0f} s (waited for /{pattern}/ in {log}):\n{_tail(log)}")


def master_json(ui_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
        return json.load(r)


@dataclass
class Standalone:
    url: str
    ui_port: int
    work_dir: Path
    env: dict[str, str]
    logs: dict[str, Path] = field(default_factory=dict)


@contextmanager
def standalone_cluster(base: Path) -> Iterator[Standalone]:
    """Master + one worker (1 core, 1g) on 127.0.0.1, every port chosen by the OS (``0``)."""
    conf_dir = base / "spark-conf"
    conf_dir.mkdir()
    props = base / "daemon.properties"
    # No REST submission server (it would bind the fixed port 6066).
    props.write_text("spark.master.rest.enabled false\nspark.ui.showConsoleProgress false\n")
    env = cluster_env(conf_dir)
    spark_class = str(spark_home() / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []
    logs = {"master": base / "master.log", "worker": base / "worker.log"}

    def start(cls: str, args: list[str], log: Path) -> subprocess.Popen:
        with open(log, "wb") as out:
            p = subprocess.Popen([spark_class, cls, *args], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, cwd=base, env=env, start_new_session=True)
        procs.append(p)
        return p

    try:
        master = start("org.apache.spark.deploy.master.Master",
                       ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--properties-file", str(props)],
                       logs["master"])
        url = _wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", logs["master"], master,
                        "Spark master", START_TIMEOUT_S).group(1)
        ui_port = int(_wait_for(r"'MasterUI' on port (\d+)", logs["master"], master, "master web UI",
                                START_TIMEOUT_S).group(1))
        _wait_for(r"I have been elected leader", logs["master"], master, "Spark master (leader)", START_TIMEOUT_S)
        work_dir = base / "worker-work"
        worker = start("org.apache.spark.deploy.worker.Worker",
                       ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "1g",
                        "--work-dir", str(work_dir), "--properties-file", str(props), url],
                       logs["worker"])
        deadline = time.monotonic() + START_TIMEOUT_S
        state: dict = {}
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise AssertionError(f"worker exited with code {worker.returncode}:\n{_tail(logs['worker'])}")
            try:
                state = master_json(ui_port)
            except OSError:
                state = {}
            if state.get("aliveworkers") == 1:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"no worker registered with {url} after {START_TIMEOUT_S} s; master said "
                                 f"{state}\nworker log:\n{_tail(logs['worker'])}\nmaster log:\n{_tail(logs['master'])}")
        yield Standalone(url, ui_port, work_dir, env, logs)
    finally:
        for p in reversed(procs):  # worker (and its executors) first, then the master
            _kill_group(p)


def submit_scan(cl: Standalone, base: Path, log_dir: Path, as_of_ms: int) -> tuple[int, str, str]:
    return submit(cl, base, ["scan", str(log_dir), "--json", "--as-of", str(as_of_ms)])


def submit(cl: Standalone, base: Path, txnwatch_args: list[str]) -> tuple[int, str, str]:
    """spark-submit ``scripts/txnwatch_submit.py`` with these txnwatch arguments to the cluster."""
    py = sys.executable
    cmd = [str(spark_home() / "bin" / "spark-submit"),
           "--master", cl.url,
           "--conf", f"spark.pyspark.python={py}",
           "--conf", f"spark.pyspark.driver.python={py}",
           "--conf", "spark.executor.cores=1",
           "--conf", "spark.cores.max=1",
           "--conf", "spark.executor.memory=1g",
           "--conf", "spark.driver.memory=1g",
           "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.ui.enabled=false",
           str(LAUNCHER), *txnwatch_args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                         cwd=base, env=cl.env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=SUBMIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(p, grace_s=5)
        out, err = p.communicate()
        raise AssertionError(f"spark-submit did not finish within {SUBMIT_TIMEOUT_S} s; stderr tail:\n"
                             + "\n".join(err.splitlines()[-40:])) from None
    finally:
        if p.poll() is None:  # pragma: no cover - only on an unexpected exception
            _kill_group(p, grace_s=5)
    return p.returncode, out, err


def test_spark_submit_to_standalone_cluster(tmp_path, spark):
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java")
    from streaming.cli import scan_paths
    from streaming.config import load
    from streaming.simulate.scenarios import write_scenario

    t0 = time.monotonic()
    sc = write_scenario("write-after-marker", tmp_path / "log", seed=5)

    with standalone_cluster(tmp_path) as cl:
        t_up = time.monotonic()
        rc, out, err = submit_scan(cl, tmp_path, sc.root, sc.as_of_ms)
        t_submit = time.monotonic()
        assert rc == 2, f"spark-submit exit code {rc} (2 = hanging findings expected); stderr tail:\n" + \
            "\n".join(err.splitlines()[-60:])
        # spark-submit merges the Python driver's stderr into its stdout (PythonRunner): keep the JSON lines.
        remote = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]

        # The work ran on the cluster: the worker launched an executor for the application, and
        # that executor ran the (Python) tasks; the master lists the application as finished.
        app_dirs = sorted(cl.work_dir.glob("app-*"))
        assert len(app_dirs) == 1, f"expected one application directory under {cl.work_dir}, got {app_dirs}"
        app_id = app_dirs[0].name
        stderr_files = sorted(app_dirs[0].glob("*/stderr"))
        assert stderr_files, f"no executor stderr under {app_dirs[0]}"
        deadline = time.monotonic() + 15
        while True:
            exec_log = "\n".join(f.read_text(errors="replace") for f in stderr_files)
            apps = {a["id"]: a for a in master_json(cl.ui_port).get("completedapps", [])}
            ok = "Running task" in exec_log and "Starting Python task" in exec_log and \
                apps.get(app_id, {}).get("state") == "FINISHED"
            if ok or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert "Running task" in exec_log and "Starting Python task" in exec_log, \
            f"executor {stderr_files} ran no (Python) tasks:\n{exec_log[-3000:]}"
        assert app_id in apps, f"master does not list {app_id} as completed: {sorted(apps)}"
        assert apps[app_id]["state"] == "FINISHED"
        assert apps[app_id]["name"].startswith("txnwatch")
        assert f"Connected to Spark cluster with app ID {app_id}" in err

        # The always-on job itself (run --once over the log dir), submitted to the same cluster:
        # its streaming query runs on the cluster's executor and writes the scenario's finding.
        conf = tmp_path / "run.toml"
        conf.write_text(f'cluster = "default"\n[sinks]\nenabled = ["jsonl"]\njsonl_path = "{tmp_path / "run.jsonl"}"\n'
                        f'[streaming]\ncheckpoint = "{tmp_path / "run-ck"}"\nshuffle_partitions = 2\n')
        rc, _out, err = submit(cl, tmp_path, ["run", "--source", "segments", "--path", str(sc.root), "--once",
                                              "--config", str(conf)])
        tail = "\n".join(err.splitlines()[-60:])
        assert rc == 0, f"run --once exit code {rc}; stderr tail:\n{tail}"
        run_apps = sorted(set(cl.work_dir.glob("app-*")) - set(app_dirs))
        assert len(run_apps) == 1 and sorted(run_apps[0].glob("*/stderr")), run_apps
        run_exec_log = "\n".join(f.read_text(errors="replace") for f in sorted(run_apps[0].glob("*/stderr")))
        assert "Running task" in run_exec_log, run_exec_log[-3000:]
        from streaming.sinks.jsonl import read_jsonl

        run_alerts = read_jsonl(str(tmp_path / "run.jsonl"))
    t_down = time.monotonic()

    # The same scan in-process (local session): identical alerts, every field.
    cfg = load(None, env={})
    assert cfg["cluster"] == "default"
    local, _gaps = scan_paths([str(sc.root)], as_config(cfg), as_of_ms=sc.as_of_ms, spark=spark)
    local = [json.loads(json.dumps(a)) for a in local]
    assert remote == local
    # ... and they are the scenario's expected findings.
    assert len(remote) == len(sc.expected) == 1
    for got, want in zip(remote, sc.expected, strict=True):
        assert {k: got[k] for k in want} == want
    # the job's stream gives the same finding (its clock is the newest timestamp of the log)
    assert len(run_alerts) == len(sc.expected)
    for got, want in zip(run_alerts, sc.expected, strict=True):
        assert {k: got[k] for k in want if k not in ("open_ms", "idle_ms")} == \
            {k: v for k, v in want.items() if k not in ("open_ms", "idle_ms")}

    print(f"\nstandalone: cluster up {t_up - t0:.1f}s, spark-submit {t_submit - t_up:.1f}s, "
          f"teardown {t_down - t_submit:.1f}s, local scan {time.monotonic() - t_down:.1f}s")
