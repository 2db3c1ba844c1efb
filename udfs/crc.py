"""CRC-32C (Castagnoli) used by record batches v2 and producer snapshots.

Implementation: the ``crc32c`` package from PyPI (C, uses SSE4.2/ARMv8 CRC instructions when the
CPU has them), a required dependency (``pyproject.toml``). ``crc32c`` below is the C function
itself, so checking a batch costs no Python frame.
"""

from __future__ import annotations

try:
    from crc32c import crc32c
except ImportError as exc:  # pragma: no cover - the package is a declared dependency
    raise ImportError(
        "txnwatch needs the 'crc32c' package to check record batch v2 and producer snapshot CRCs; "
        "install it with: pip install 'crc32c>=2.4,<3'"
    ) from exc

__all__ = ["crc32c"]
