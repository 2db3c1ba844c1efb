"""Status-page benchmark: render 1,000 open findings (overview HTML and the JSON endpoint).

Run: ``.venv/bin/python bench/ui_render.py [--findings 1000] [--reps 5]``

Feeds a :class:`streaming.ui.store.FindingStore` with ``--findings`` open findings (the
synthetic alerts of the browser tests: hanging, late and unverified, with ``confirmed_by``,
``blocked_groups`` and partition facts) through its ``on_batch`` callback, then measures, best
of ``--reps``:

* ``snapshot``: ``store.snapshot()`` (grouping, ages, LSO lag, lagging partitions);
* ``overview HTML``: snapshot + ``render.overview_page`` (what ``GET /`` returns);
* ``JSON endpoint``: snapshot + ``render.overview_json`` (what ``GET /api/state`` returns: the
  data and the HTML fragment the page swaps in);
* ``GET /`` and ``GET /api/state`` over HTTP on loopback (server, rendering, transfer);
* the peer, measured in the same run: ``json.dumps`` of the same 1,000 alert dicts (the least
  any server of this data does).

Prints seconds, the ratio to the peer and whether a full page is under one second. Timings are
reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from streaming.config import UiConfig
from streaming.ui import render
from streaming.ui.server import UIServer
from streaming.ui.store import FindingStore
from tests.ui_samples import batch_stats, busy_findings, positions, with_facts

NOW = 1_763_600_000_000


def best(fn, reps: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--findings", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)

    findings = busy_findings(args.findings, NOW)
    store = FindingStore(mode="job", source="bench", wall=lambda: NOW / 1000)
    store.observe_batch(1, batch_stats(NOW, findings, with_facts(positions(50), findings)))
    assert sum(store.snapshot()["counts"][g] for g in ("hanging", "late", "unverified")) == args.findings

    rows = []
    t_peer, peer = best(lambda: json.dumps(findings), args.reps)
    rows.append(("peer: json.dumps of the alerts", t_peer, len(peer)))
    t, snap = best(store.snapshot, args.reps)
    rows.append(("snapshot", t, None))
    t, html = best(lambda: render.overview_page(store.snapshot()), args.reps)
    rows.append(("overview HTML (snapshot + render)", t, len(html)))
    t, js = best(lambda: render.overview_json(store.snapshot()), args.reps)
    rows.append(("JSON endpoint (snapshot + data + fragment)", t, len(js)))
    with UIServer(store, UiConfig(port=0)) as srv:
        fetch(srv.url)  # warm-up: first template compile is not what an operator waits for twice
        t, body = best(lambda: fetch(srv.url), args.reps)
        rows.append(("GET / over HTTP", t, len(body)))
        t, body = best(lambda: fetch(srv.url + "api/state"), args.reps)
        rows.append(("GET /api/state over HTTP", t, len(body)))

    print(f"txnwatch status page, {args.findings} open findings, best of {args.reps}")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpu(s)")
    print(f"{'what':<46} {'seconds':>9} {'x peer':>8} {'bytes':>11}")
    for name, secs, size in rows:
        print(f"{name:<46} {secs:>9.4f} {secs / t_peer:>8.1f} {size if size is not None else '':>11}")
    worst = max(secs for name, secs, _ in rows if name.startswith(("GET", "overview", "JSON")))
    print(f"slowest full answer: {worst:.3f} s ({'under' if worst < 1.0 else 'OVER'} the 1 s target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
