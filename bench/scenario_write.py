"""Scenario-writer benchmark: writing a ``random-mix`` log dir against scanning it back.

Run: ``.venv/bin/python bench/scenario_write.py [--mb 24] [--seed 3] [--reps 3]``

The simulator has to write benchmark-sized logs (``bench/decode.py`` writes 200 MiB) in a time
people wait for, so its speed matters; an absolute MB/s says more about the machine than about the
code, so the writer is compared with a peer measured in this same process over the same bytes:
the header scan ``udfs.record_batch.scan_batches(data, validate_crc=True)`` of the files just
written (the read path of every source, numpy over the same record batches).

1. Warms the writer up with a 1 MiB ``random-mix`` (imports, record pools), not timed.
2. ``--reps`` times: writes ``random-mix`` of ``--mb`` MiB with ``--seed`` into a fresh temporary
   directory (timed: encoding, CRC-32C, file writes), then reads its ``.log`` files into memory
   (not timed) and scans them (timed).
3. Prints the best time of each, MB/s, the ratio scan-time / write-time (the fraction of the scan
   speed the writer reaches) and whether the writer's target holds (>= 20 MB/s on one core, the
   threshold ``tests/test_scenarios.py`` used to assert).

Cross-checks every repetition: the log dir holds at least ``--mb`` MiB, every batch the scan saw has
a valid CRC, and the scenario expects its four injected faults. Exit code 1 if a cross-check fails,
0 otherwise. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import time
from pathlib import Path

TARGET_WRITE_MB_S = 20.0
EXPECTED_FINDINGS = 4  # one per fault kind random-mix injects with faults=1


def scan(datas: list[bytes]) -> tuple[int, int]:
    """(batches, CRC-valid batches) over the in-memory segment files."""
    from udfs.record_batch import scan_batches

    n = valid = 0
    for d in datas:
        s = scan_batches(d, validate_crc=True)
        n += len(s)
        valid += int((s.columns["crc_valid"] == 1).sum())
    return n, valid


def one_rep(mb: int, seed: int) -> tuple[float, float, int, list[str]]:
    """Write, load, scan once; returns (write s, scan s, bytes, failed cross-checks)."""
    from streaming.simulate.scenarios import write_scenario

    tmp = Path(tempfile.mkdtemp(prefix="txnwatch-bench-write-"))
    try:
        gc.collect()
        t0 = time.perf_counter()
        sc = write_scenario("random-mix", tmp / "log", target_bytes=mb << 20, seed=seed)
        t_write = time.perf_counter() - t0
        datas = [p.read_bytes() for p in sorted(sc.root.rglob("*.log"))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    gc.collect()
    t0 = time.perf_counter()
    batches, valid = scan(datas)
    t_scan = time.perf_counter() - t0
    size = sum(len(d) for d in datas)
    failed = []
    if size < mb << 20:
        failed.append(f"wrote {size:,} bytes < {mb << 20:,}")
    if batches == 0 or valid != batches:
        failed.append(f"{batches - valid} of {batches} batches failed the CRC check")
    if len(sc.expected) != EXPECTED_FINDINGS:
        failed.append(f"{len(sc.expected)} expected findings, not {EXPECTED_FINDINGS}")
    return t_write, t_scan, size, failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=24, help="scenario size in MiB (default 24)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="repetitions; the best time of each side is kept")
    args = ap.parse_args(argv)

    from streaming.simulate.scenarios import write_scenario

    warm = Path(tempfile.mkdtemp(prefix="txnwatch-bench-warm-"))
    try:
        write_scenario("random-mix", warm / "log", target_bytes=1 << 20)
    finally:
        shutil.rmtree(warm, ignore_errors=True)

    best_write = best_scan = float("inf")
    size = 0
    problems: list[str] = []
    for _ in range(args.reps):
        t_write, t_scan, size, failed = one_rep(args.mb, args.seed)
        best_write, best_scan = min(best_write, t_write), min(best_scan, t_scan)
        problems += failed
    mb = size / 1e6
    print(f"random-mix seed {args.seed}, {size:,} bytes (best of {args.reps})")
    print(f"  {'step':<24}{'seconds':>10}{'MB/s':>10}")
    print(f"  {'write (simulator)':<24}{best_write:>10.3f}{mb / best_write:>10.1f}")
    print(f"  {'scan (header decode)':<24}{best_scan:>10.3f}{mb / best_scan:>10.1f}")
    print(f"ratio: writing runs at {best_scan / best_write:.3f}x the scan speed of the same bytes")
    speed = mb / best_write
    print(f"target: write >= {TARGET_WRITE_MB_S:.0f} MB/s: {'MET' if speed >= TARGET_WRITE_MB_S else 'NOT MET'}")
    for p in dict.fromkeys(problems):
        print(f"CROSS-CHECK FAILED: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
