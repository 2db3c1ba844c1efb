"""A stable argsort of integer keys that is cheaper than numpy's ``kind="stable"`` on int64.

numpy's stable sort of 64-bit integers is a merge sort (timsort), several times slower than its
radix sort of 16-bit ones or its (vectorised) sort of 64-bit values. Producer ids and offsets of
one read span a small range, which lets the same order come from one of the cheaper sorts:

* keys within 65,536 of each other: their differences as ``uint16``, radix-sorted (stable);
* keys whose range and the row index fit together in 63 bits: one int64 per row, the key's
  difference shifted above the row index, sorted (all values distinct: any sort gives the one
  order, the stable one);
* otherwise numpy's stable sort itself.
"""

from __future__ import annotations

import numpy as np


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of a 1-d integer array (the same indices, as int64)."""
    n = len(keys)
    if keys.dtype.kind not in "iu" or keys.dtype == np.uint64:  # uint64 may not fit in int64
        return np.argsort(keys, kind="stable")
    if n < 2:
        return np.arange(n, dtype=np.int64)
    lo, hi = int(keys.min()), int(keys.max())
    span = hi - lo
    if span < 1 << 16:
        return np.argsort((keys - lo).astype(np.uint16), kind="stable").astype(np.int64, copy=False)
    shift = (n - 1).bit_length()
    if span.bit_length() + shift <= 63:
        packed = ((keys.astype(np.int64) - lo) << shift) | np.arange(n, dtype=np.int64)
        packed.sort()
        return packed & ((1 << shift) - 1)
    return np.argsort(keys, kind="stable")
