"""``normalize.data_events`` / ``reduce_closed_in_read`` (numpy) against the pandas versions they
replaced (kept below as the reference, plus the one keep rule detection.md revision 3.1 added): the same frame, columns, dtypes and values, for
every scenario's data segments and the hand-built cases, with and without the in-read reduction,
typed and untyped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streaming.events import to_frame
from streaming.normalize import data_events, reduce_closed_in_read
from streaming.simulate.scenarios import SCENARIOS, write_scenario
from udfs.model import control_name
from udfs.record_batch import scan_batches

# --- the reference: streaming/normalize.py before the numpy rewrite ------------------------------

def ref_data_events(
    cols: dict[str, np.ndarray],
    *,
    topic: str,
    partition: int,
    source: str,
    cluster: str,
    event_time_ms: int,
    source_position: str | None = None,
    position_format: str = "{prefix}@{pos}",
    reduce_from: int | None = None,
    typed: bool = True,
) -> pd.DataFrame:
    """``normalize.data_events`` as it was before the numpy rewrite (pandas group-bys)."""
    n = len(cols["base_offset"])
    if n == 0:
        return to_frame([])
    keep = cols["is_transactional"] & (cols["producer_id"] >= 0) & (cols["crc_valid"] != 0)
    if not keep.any():
        return to_frame([])
    df = pd.DataFrame({k: cols[k][keep] for k in (
        "base_offset", "last_offset", "batch_size", "first_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "record_count", "is_control", "control_type", "coordinator_epoch", "position")})
    # Dumps of 0.11-1.1 do not print the record count (-1) nor the size (0): count nothing then.
    df["empty"] = df["record_count"] == 0
    df["record_count"] = df["record_count"].clip(lower=0)
    # A span ends at the producer's next control batch: number the stretches between markers.
    df["stretch"] = df.groupby("producer_id")["is_control"].cumsum()
    data = df[~df["is_control"]]
    frames = []
    if len(data):
        g = data.groupby(["producer_id", "stretch"], sort=False)
        spans = g.agg(
            first_offset=("base_offset", "first"),
            last_offset=("last_offset", "last"),
            first_ts=("first_timestamp", "first"),
            last_ts=("max_timestamp", "max"),
            producer_epoch=("producer_epoch", "max"),
            batch_count=("base_offset", "size"),
            record_count=("record_count", "sum"),
            bytes=("batch_size", "sum"),
            empty_batches=("empty", "sum"),
            first_position=("position", "first"),
        ).reset_index()
        spans["kind"] = "data"
        spans["route_pid"] = spans["producer_id"]
        frames.append(spans)
    markers = df[df["is_control"]]
    if len(markers):
        m = pd.DataFrame({
            "kind": "marker",
            "producer_id": markers["producer_id"].to_numpy(),
            "route_pid": markers["producer_id"].to_numpy(),
            "producer_epoch": markers["producer_epoch"].to_numpy(),
            "first_offset": markers["base_offset"].to_numpy(),
            "last_offset": markers["base_offset"].to_numpy(),
            "first_ts": markers["max_timestamp"].to_numpy(),
            "last_ts": markers["max_timestamp"].to_numpy(),
            "batch_count": 1,
            "record_count": markers["record_count"].to_numpy(),
            "bytes": markers["batch_size"].to_numpy(),
            "empty_batches": markers["empty"].astype(int).to_numpy(),
            "marker": [control_name(c) for c in markers["control_type"].tolist()],
            "coordinator_epoch": markers["coordinator_epoch"].to_numpy(),
            "first_position": markers["position"].to_numpy(),
        })
        frames.append(m)
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values(["first_offset"], kind="stable").reset_index(drop=True)
    if reduce_from is not None:
        out = ref_reduce_closed_in_read(out, reduce_from)
    out["topic"] = topic
    out["partition"] = partition
    out["source"] = source
    out["cluster"] = cluster
    out["event_time"] = event_time_ms
    prefix = source_position or f"{topic}-{partition}"
    out["source_position"] = [position_format.format(prefix=prefix, pos=p) for p in out["first_position"].tolist()]
    out = out.drop(columns=["first_position", "stretch"], errors="ignore")
    return to_frame(out) if typed else out


def ref_reduce_closed_in_read(rows: pd.DataFrame, from_offset: int = 0) -> pd.DataFrame:
    """``normalize.reduce_closed_in_read`` as it was before the numpy rewrite."""
    if rows.empty:
        return rows
    is_m = (rows["kind"] == "marker").to_numpy()
    if is_m.sum() < 3:
        return rows  # folding needs a marker between the first and the last one
    pid = rows["producer_id"].to_numpy()
    eligible = (rows["first_offset"] >= from_offset).to_numpy()
    ordinal = pd.Series(is_m & eligible).groupby([pid, eligible]).cumsum().to_numpy()
    last = pd.Series(ordinal).groupby([pid, eligible]).transform("max").to_numpy()
    typed = is_m & rows["marker"].isin(["COMMIT", "ABORT"]).to_numpy() & \
        (rows["coordinator_epoch"].fillna(-1).to_numpy() >= 0)
    typed_ord = np.where(typed, ordinal, -1)
    last_typed = pd.Series(typed_ord).groupby([pid, eligible]).transform("max").to_numpy()
    # Revision 3.1 of detection.md (bumped markers) also keeps the data just before the last marker:
    # the epoch it closed tells a bumped marker from one that was not.
    keep = ~eligible | (ordinal == 0) | (ordinal == last) | (is_m & (ordinal == 1)) | \
        (typed & (ordinal == last_typed)) | (~is_m & (ordinal == last - 1))
    if keep.all():
        return rows
    dropped = rows[~keep]
    # an EMPTY control batch never raises the legacy abort's epoch (contract A): not folded in
    epochs = dropped["producer_epoch"].where(dropped["marker"] != "EMPTY")
    folded = pd.DataFrame({"producer_id": dropped["producer_id"], "data": dropped["kind"] == "data",
                           "epoch": epochs}).groupby("producer_id").agg(
        folded_txns=("data", "sum"), folded_max_epoch=("epoch", "max"))
    out = rows[keep].copy()
    carrier = is_m[keep] & (ordinal[keep] == last[keep]) & eligible[keep] & out["producer_id"].isin(folded.index).to_numpy()
    carriers = out.index[carrier]
    by_pid = folded.reindex(out.loc[carriers, "producer_id"].to_numpy())
    out["folded_txns"] = pd.NA
    out["folded_max_epoch"] = pd.NA
    out.loc[carriers, "folded_txns"] = by_pid["folded_txns"].to_numpy()
    out.loc[carriers, "folded_max_epoch"] = by_pid["folded_max_epoch"].to_numpy()
    return out.reset_index(drop=True)


# --- the comparisons ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> list[dict[str, np.ndarray]]:
    out = []
    root = tmp_path_factory.mktemp("scen")
    for name in sorted(SCENARIOS):
        params = {"target_bytes": 1_000_000} if name == "random-mix" else {}
        sc = write_scenario(name, root / name, seed=3, **params)
        for f in sorted(Path(sc.root).glob("*/*.log")):
            if not f.parent.name.startswith("__"):
                cols = scan_batches(f.read_bytes()).columns
                out.append(cols)
                if len(cols["base_offset"]) > 4:  # a bad CRC and a cut read too
                    bad = dict(cols)
                    bad["crc_valid"] = cols["crc_valid"].copy()
                    bad["crc_valid"][1] = 0
                    out.append({k: v[: len(v) // 2] for k, v in bad.items()})
    return out


def test_data_events_equal_the_pandas_version(tables):
    assert tables
    for cols in tables:
        for reduce_from in (None, 0, 3):
            for typed in (False, True):
                kw = dict(topic="t", partition=1, source="segments", cluster="c", event_time_ms=5,
                          reduce_from=reduce_from, typed=typed, source_position="t-1/0.log")
                pd.testing.assert_frame_equal(data_events(cols, **kw), ref_data_events(cols, **kw), check_exact=True)


def test_reduce_closed_in_read_equals_the_pandas_version(tables):
    for cols in tables:
        rows = ref_data_events(cols, topic="t", partition=1, source="s", cluster="c", event_time_ms=5)
        for from_offset in (0, 2, 10):
            pd.testing.assert_frame_equal(reduce_closed_in_read(rows, from_offset),
                                          ref_reduce_closed_in_read(rows, from_offset), check_exact=True)

