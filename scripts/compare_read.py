"""Refactoring check of the live source's executor side: the Arrow batches ``read_arrow`` yields,
from this checkout and from a reference checkout, compared input partition by input partition.

Not a test (tests keep hand-written expectations from Kafka's behaviour): a check that a change
meant to be behaviour-preserving (issue 23 item 1: the read stage's per-partition overhead) is.
Both readers run in this one process on the very same planned input partitions (the same driver
clock on every row), each with its own copy of every ``streaming``/``udfs`` module and so its own
clients and coordinator memo::

    git -C /path/to/repo archive main streaming udfs | tar -x -C /tmp/ref
    python scripts/compare_read.py --ref /tmp/ref

Cases: every simulator scenario (seed 11; random-mix at 400 kB) served by the socket broker fake
(tests/kafka_fake_broker.py), read in ``full`` and ``probe`` modes and in full mode from the earliest offsets (so that the
corruptions below the LSO are read too) for three triggers, each as
served and with every Fetch answer damaged (a flipped byte in its first batch: a CRC mismatch
or an unreadable control record; the second batch's length below the minimum or its magic
unknown: the chain unreadable from there; the last 7 bytes cut off). Prints the number of input partitions
compared and every one that differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_PACKAGES = ("streaming", "udfs")
ROWS = {"rows": 0, "gap": 0}  # rows compared, of which gap rows (the corrupted variants must make some)


def _ours(name: str) -> bool:
    return name.split(".")[0] in _PACKAGES


def load_reference(tree: str) -> tuple[Callable[[Any, dict[str, Any]], Any], Callable[[], None]]:
    """``read_arrow`` and ``close_wires`` of the checkout at ``tree`` (a directory holding its ``streaming`` and ``udfs``),
    loaded beside this checkout's modules: every module of both packages imported afresh from
    ``tree``, then this checkout's modules put back. The reference's functions keep their own
    module globals, so the two share nothing but third-party modules."""
    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, tree)
    try:
        import streaming.sources.kafka_clients as ref_clients
        import streaming.sources.kafka_reader as ref
        import streaming.sources.kafka_wire as ref_wire
    finally:
        sys.path.remove(tree)
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)

    def read(part: Any, opts: dict[str, Any]) -> Any:
        # the reference's own isinstance(part, KafkaGroup) would not know this checkout's class
        parts = part.parts if hasattr(part, "parts") else [part]
        table = ref._read_table(parts, opts)
        return table.to_arrow() if len(table) else None

    read.wire_class = ref_wire.KafkaWire
    read.module = ref
    return read, ref_clients.close_wires


def _mangle(records: bytes, how: str) -> bytes:
    """The bytes of one Fetch answer, damaged as ``how`` says (the same bytes always give the
    same damage, so both readers see the same answers)."""
    b = bytearray(records)
    second = 12 + int.from_bytes(b[8:12], "big") if len(b) >= 12 else len(b)
    if how == "crc" and len(b) > 70:
        b[70] ^= 0x5A  # inside the first batch's records (a marker's control record when it is one)
    elif how == "length" and second + 12 <= len(b):
        b[second + 8:second + 12] = (3).to_bytes(4, "big")  # below Kafka's minimum entry size
    elif how == "magic" and second + 17 <= len(b):
        b[second + 16] = 7  # an unknown magic: the chain is unreadable from there
    elif how == "truncate" and len(b) > 7:
        del b[-7:]  # the last batch partial (KIP-74 allows one; below a whole first batch it never ends)
    return bytes(b)


def _damage(wire_classes: list[type], how: str | None) -> None:
    """Make every Fetch answer of these KafkaWire classes damaged as ``how`` says (None: undo)."""
    import dataclasses

    for cls in wire_classes:
        plain = cls.__dict__.get("_plain") or (cls.fetch, cls.fetch_many)
        cls._plain = plain
        if how is None:
            cls.fetch, cls.fetch_many = plain
            continue

        def fetch(self, *a, _f=plain[0], **kw):
            res = _f(self, *a, **kw)
            return dataclasses.replace(res, records=_mangle(res.records, how)) if res.records else res

        def fetch_many(self, *a, _f=plain[1], **kw):
            return {k: dataclasses.replace(r, records=_mangle(r.records, how)) if r.records else r
                    for k, r in _f(self, *a, **kw).items()}

        cls.fetch, cls.fetch_many = fetch, fetch_many


READS = {"full": {"read_mode": "full"}, "probe": {"read_mode": "probe"},
         "earliest": {"read_mode": "full", "starting_offsets": "earliest"}}


def _compare_case(root: Path, mode: str, ref: tuple[Callable, Callable], triggers: int, diffs: list[str], label: str) -> int:
    from streaming.sources.kafka import KafkaStreamReader, close_wires, read_arrow
    from tests.kafka_fake_broker import FakeKafkaBroker
    from tests.test_kafka_source import FAST

    ref_read, ref_close = ref
    n = 0
    with FakeKafkaBroker(root) as broker:
        opts = {"bootstrap_servers": broker.bootstrap_servers, "topic_pattern": ".*", "cluster": "live",
                **READS[mode], **FAST}
        reader = KafkaStreamReader(opts)
        start = reader.initialOffset()
        for t in range(triggers):
            end = reader.latestOffset(start)
            for i, p in enumerate(reader.partitions(start, end)):
                new, old = read_arrow(p, reader.opts), ref_read(p, reader.opts)
                n += 1
                if new is not None:
                    kinds = new.column("kind").to_pylist()
                    ROWS["rows"] += len(kinds)
                    ROWS["gap"] += kinds.count("gap")
                    if os.environ.get("SHOW_GAPS"):
                        for r in [r for r in new.to_pylist() if r["kind"] == "gap"]:
                            print(label, mode, r["topic"], r["partition"], r["reason"])
                same = (new is None and old is None) or (new is not None and old is not None and new.equals(old)
                                                        and new.schema.equals(old.schema, check_metadata=True))
                if not same:
                    diffs.append(f"{label} {mode} trigger {t} input {i}: "
                                 f"{None if new is None else new.num_rows} vs {None if old is None else old.num_rows} rows")
            start = end
        close_wires()
        ref_close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="directory holding the reference checkout's streaming and udfs")
    ap.add_argument("--triggers", type=int, default=3)
    ap.add_argument("--only", default=None, help="one scenario name")
    args = ap.parse_args()
    ref = load_reference(os.path.abspath(args.ref))
    from streaming.simulate.scenarios import SCENARIOS
    from tests.test_kafka_source import live_scenario

    diffs: list[str] = []
    total = 0
    t0 = time.monotonic()
    for name in sorted(SCENARIOS):
        if args.only and name != args.only:
            continue
        for how in (None, "crc", "length", "magic", "truncate"):
            from streaming.sources.kafka_wire import KafkaWire

            _damage([KafkaWire, ref[0].wire_class], how)
            with tempfile.TemporaryDirectory() as tmp:
                sc = live_scenario(Path(tmp), name, seed=11) if name != "random-mix" else None
                if sc is None:
                    from streaming.simulate.scenarios import write_scenario

                    probe = write_scenario(name, Path(tmp) / "probe", seed=11, base_time_ms=1_700_000_000_000,
                                           target_bytes=400_000)
                    base = int(time.time() * 1000) - (probe.as_of_ms - 1_700_000_000_000) - 5_000
                    sc = write_scenario(name, Path(tmp) / "logs", seed=11, base_time_ms=base, target_bytes=400_000)
                for mode in READS:
                    n = _compare_case(Path(sc.root), mode, ref, args.triggers, diffs, f"{name} [{how or 'as served'}]")
                    total += n
            _damage([KafkaWire, ref[0].wire_class], None)
        print(f"{name}: {total} input partitions compared so far, {len(diffs)} differ "
              f"({time.monotonic() - t0:.0f} s)", flush=True)
    for d in diffs:
        print("DIFFERS:", d)
    print(f"compare-read: {total - len(diffs)} of {total} input partitions identical "
          f"({ROWS['rows']} rows, {ROWS['gap']} of them gap rows)")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
