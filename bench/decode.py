"""Decode benchmark: our header-only scanner against kafka-python's record reader.

Run: ``.venv/bin/python bench/decode.py [--mb 200] [--seed 1] [--reps 3] [--no-cache]``

1. Writes a ``random-mix`` scenario log dir of about ``--mb`` MB (``streaming.simulate.scenarios``), or
   reuses ``bench/data/random-mix-seed<S>-<MB>mb`` when a complete one with the same parameters
   exists (``bench/data/`` is git-ignored).
2. Reads every ``.log`` file into memory (not timed), then, in this one process and over the same
   ``bytes`` objects, decodes them:

   * ours: ``udfs.record_batch.scan_batches(data, validate_crc=True)`` and ``validate_crc=False``
     (the full batch table: every header column plus control type / coordinator epoch);
   * kafka-python: ``MemoryRecords(data)`` + ``next_batch()`` per batch, reading ``base_offset``,
     ``producer_id``, ``producer_epoch``, ``is_transactional``, ``is_control_batch`` (plus
     ``validate_crc()`` for the CRC-on comparison). Records are not iterated on either side.

3. Best of ``--reps`` repetitions per decoder; cross-checks that both saw the same number of
   v2 batches, the same producer-id sum (and the same transactional / control / CRC-valid counts);
   prints batches/s, MB/s, ratios (ours / kafka-python) and whether the targets hold
   (>= 50x kafka-python, >= 1,000,000 batch headers/s on one core).

Exit code 0 unless the cross-check fails (1). Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TARGET_RATIO = 50.0
TARGET_BATCHES_PER_S = 1_000_000
DATA_DIR = Path(__file__).resolve().parent / "data"
PARAMS_FILE = "bench-params.json"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _params(mb: int, seed: int) -> dict[str, object]:
    return {"scenario": "random-mix", "seed": seed, "target_bytes": mb << 20}


def prepare_dir(mb: int, seed: int, use_cache: bool) -> tuple[Path, bool, Path | None]:
    """Return (log dir, reused?, temp dir to delete afterwards or None)."""
    from streaming.simulate.scenarios import write_scenario

    params = _params(mb, seed)
    if not use_cache:
        tmp = Path(tempfile.mkdtemp(prefix="txnwatch-bench-"))
        write_scenario("random-mix", tmp / "log", seed=seed, target_bytes=params["target_bytes"])
        return tmp / "log", False, tmp
    final = DATA_DIR / f"random-mix-seed{seed}-{mb}mb"
    marker = final / PARAMS_FILE
    if marker.exists():
        try:
            if json.loads(marker.read_text()) == params:
                return final / "log", True, None
        except (OSError, ValueError):
            pass
    if final.exists():
        shutil.rmtree(final)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=DATA_DIR))
    staging.chmod(0o755)
    try:
        write_scenario("random-mix", staging / "log", seed=seed, target_bytes=params["target_bytes"])
        (staging / PARAMS_FILE).write_text(json.dumps(params))
        os.replace(staging, final)  # the marker appears together with a complete dir
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final / "log", False, None


def load_segments(root: Path) -> list[tuple[str, bytes]]:
    files = sorted(p for p in root.rglob("*.log") if p.is_file())
    return [(str(p.relative_to(root)), p.read_bytes()) for p in files]


# --- decoders: each returns (batches, producer-id sum, transactional, control, crc-valid) ---------


def ours(datas: list[bytes], validate_crc: bool) -> tuple[int, int, int, int, int]:
    from udfs.record_batch import scan_batches

    n = pid_sum = txn = ctrl = valid = 0
    for d in datas:
        s = scan_batches(d, validate_crc=validate_crc)
        c = s.columns
        n += len(s)
        pid_sum += int(c["producer_id"].sum())
        txn += int(c["is_transactional"].sum())
        ctrl += int(c["is_control"].sum())
        if validate_crc:
            valid += int((c["crc_valid"] == 1).sum())
    return n, pid_sum, txn, ctrl, valid


def kafka_python(datas: list[bytes], validate_crc: bool) -> tuple[int, int, int, int, int]:
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    n = pid_sum = txn = ctrl = valid = 0
    for d in datas:
        recs = MemoryRecords(d)
        next_batch = recs.next_batch
        while True:
            b = next_batch()
            if b is None:
                break
            if type(b) is not DefaultRecordBatch:  # magic 0/1: not counted by our scanner either
                continue
            n += 1
            _ = b.base_offset
            pid_sum += b.producer_id
            _ = b.producer_epoch
            txn += b.is_transactional
            ctrl += b.is_control_batch
            if validate_crc:
                valid += b.validate_crc()
    return n, pid_sum, txn, ctrl, valid


def best_of(fn: Callable[[], tuple], reps: int) -> tuple[float, tuple]:
    best = float("inf")
    result: tuple = ()
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
    return best, result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200, help="scenario size in MiB (default 200)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3, help="repetitions per decoder; the best is kept")
    ap.add_argument("--no-cache", action="store_true", help="always write a fresh scenario into a temp dir")
    args = ap.parse_args(argv)

    from importlib.metadata import version

    import crc32c
    import numpy as np

    from udfs.record_batch import scan_batches

    print("machine")
    print(f"  cpu:        {cpu_model()} ({os.cpu_count()} logical cores; every decoder runs on one thread)")
    print(f"  python:     {sys.version.split()[0]} ({platform.python_implementation()}), numpy {np.__version__}")
    print(f"  crc32c:     crc32c {version('crc32c')} (hardware CRC: {crc32c.hardware_based}); "
          f"kafka-python {version('kafka-python')}")

    t0 = time.perf_counter()
    root, reused, tmp = prepare_dir(args.mb, args.seed, not args.no_cache)
    prep = time.perf_counter() - t0
    try:
        segs = load_segments(root)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    datas = [d for _, d in segs]
    total = sum(len(d) for d in datas)
    mb = total / 1e6
    partitions = len({name.split(os.sep)[0] for name, _ in segs})
    print("input")
    print(f"  random-mix seed {args.seed}, target {args.mb} MiB: {len(segs)} .log files in {partitions} "
          f"partitions, {total:,} bytes ({'reused ' + str(root) if reused else f'written in {prep:.2f} s'})")
    # Warm-up (imports, numpy/kafka-python first-call costs) before any timing.
    scan_batches(datas[0], validate_crc=True)
    kafka_python(datas[:1], True)

    runs: dict[str, tuple[float, tuple]] = {}
    for name, fn in (
        ("ours CRC on", lambda: ours(datas, True)),
        ("ours CRC off", lambda: ours(datas, False)),
        ("kafka-python CRC on", lambda: kafka_python(datas, True)),
        ("kafka-python CRC off", lambda: kafka_python(datas, False)),
    ):
        runs[name] = best_of(fn, args.reps)

    batches = runs["ours CRC on"][1][0]
    print(f"results (best of {args.reps}; {batches:,} v2 batches, {mb:.1f} MB)")
    print(f"  {'decoder':<22}{'seconds':>10}{'batches/s':>14}{'MB/s':>10}")
    for name, (dt, res) in runs.items():
        print(f"  {name:<22}{dt:>10.4f}{res[0] / dt:>14,.0f}{mb / dt:>10,.0f}")

    # Cross-check: both decoders agree on what they read.
    ok = True
    ref_on = runs["kafka-python CRC on"][1]
    ref_off = runs["kafka-python CRC off"][1]
    labels = ("batches", "producer-id sum", "transactional", "control", "crc-valid")
    for name, ref in (("ours CRC on", ref_on), ("ours CRC off", ref_off)):
        got = runs[name][1]
        for i, label in enumerate(labels):
            if label == "crc-valid" and name.endswith("off"):
                continue
            if got[i] != ref[i]:
                print(f"CROSS-CHECK FAILED: {name} {label} = {got[i]}, kafka-python = {ref[i]}")
                ok = False
    if ref_on[4] != ref_on[0]:
        print(f"note: {ref_on[0] - ref_on[4]} batches failed kafka-python's CRC check")
    print(f"cross-check: {'OK' if ok else 'FAILED'} (batches {ref_on[0]:,}, producer-id sum {ref_on[1]:,}, "
          f"transactional {ref_on[2]:,}, control {ref_on[3]:,}, crc-valid {ref_on[4]:,})")

    print("targets")
    for mode in ("CRC on", "CRC off"):
        dt_ours, res = runs[f"ours {mode}"]
        dt_kp = runs[f"kafka-python {mode}"][0]
        ratio = dt_kp / dt_ours
        bps = res[0] / dt_ours
        print(f"  {mode:<8} ours / kafka-python = {ratio:6.1f}x (target >= {TARGET_RATIO:.0f}x: "
              f"{'MET' if ratio >= TARGET_RATIO else 'NOT MET'}); {bps:,.0f} batch headers/s on one core "
              f"(target >= {TARGET_BATCHES_PER_S:,}: {'MET' if bps >= TARGET_BATCHES_PER_S else 'NOT MET'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
