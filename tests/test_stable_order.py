"""``udfs.stable_order.stable_argsort`` is numpy's stable argsort, whatever the keys' range."""

from __future__ import annotations

import numpy as np
import pytest

from udfs.stable_order import stable_argsort


@pytest.mark.parametrize("span", [0, 1, 400, 65_535, 65_536, 1 << 40, 1 << 62])
@pytest.mark.parametrize("n", [0, 1, 2, 17, 5_000])
def test_same_order_as_numpy_stable(span: int, n: int) -> None:
    rng = np.random.default_rng(n * 7 + span % 1000)
    # few distinct values (many ties: the stable order matters) around an arbitrary base
    base = -(1 << 62) if span == 1 << 62 else 12_345
    distinct = base + rng.integers(0, span + 1, size=max(n // 10, 1), dtype=np.int64)
    keys = rng.choice(distinct, size=n) if n else np.empty(0, dtype=np.int64)
    got = stable_argsort(keys)
    assert got.dtype == np.int64
    assert got.tolist() == np.argsort(keys, kind="stable").tolist()


def test_full_int64_range() -> None:
    keys = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max, -1, 0])
    assert stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()


def test_other_integer_dtypes() -> None:
    for dtype in (np.int16, np.int32, np.uint8):
        keys = np.array([3, 1, 2, 1, 3, 0], dtype=dtype)
        assert stable_argsort(keys).tolist() == [5, 1, 3, 2, 0, 4]
