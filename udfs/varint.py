"""The byte primitives every Kafka format here is built from: CRC-32C and base-128 varints.

Kafka uses two varint flavours (``org.apache.kafka.common.utils.ByteUtils``):

* unsigned varints (``readUnsignedVarint``): compact lengths and tagged fields of flexible
  protocol versions (KIP-482), and the ``__transaction_state`` value's tagged fields;
* signed zigzag varints/varlongs (``readVarint`` / ``readVarlong``): the fields of a record inside
  a v2 record batch (length, timestampDelta, offsetDelta, key and value sizes, header counts).

CRC-32C (Castagnoli) guards record batches v2 (``DefaultRecordBatch.isValid``) and producer state
snapshots (``ProducerStateManager.readSnapshot``). ``crc32c`` is the C function of the ``crc32c``
package (SSE4.2/ARMv8 instructions where the CPU has them), a required dependency.

Readers raise ``ValueError`` when a varint runs past ``end``; callers turn that into a decode
error naming the file and offset.
"""

from __future__ import annotations

try:
    from crc32c import crc32c
except ImportError as exc:  # pragma: no cover - the package is a declared dependency
    raise ImportError(
        "txnwatch needs the 'crc32c' package to check record batch v2 and producer snapshot CRCs; "
        "install it with: pip install 'crc32c>=2.4,<3'"
    ) from exc

__all__ = ["crc32c", "read_uvarint", "read_varint", "encode_uvarint", "uvarint_len"]


def _read_groups(buf: bytes | memoryview, pos: int, limit: int, max_shift: int, what: str) -> tuple[int, int]:
    """The base-128 groups of one varint, least significant first, as they stand in the bytes."""
    value = shift = 0
    while True:
        if pos >= limit or shift > max_shift:
            raise ValueError(f"{what} runs past its end")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def read_uvarint(buf: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """Unsigned varint at ``pos`` (at most 5 bytes for an int32, as ``ByteUtils.readUnsignedVarint``);
    returns (value, next position)."""
    return _read_groups(buf, pos, len(buf) if end is None else end, 28, "unsigned varint")


def read_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint or varlong at ``pos`` (at most 10 bytes, ``ByteUtils.readVarlong``); returns
    (value, next position)."""
    if pos < end and buf[pos] < 0x80:  # one byte: most lengths and deltas, spare the loop
        raw = buf[pos]
        return (raw >> 1) ^ -(raw & 1), pos + 1
    raw, pos = _read_groups(buf, pos, end, 63, "varint")
    return (raw >> 1) ^ -(raw & 1), pos


def encode_uvarint(n: int) -> bytes:
    """Unsigned varint of ``n`` >= 0 (``ByteUtils.writeUnsignedVarint``)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def uvarint_len(n: int) -> int:
    """Bytes the unsigned varint of ``n`` takes (``ByteUtils.sizeOfUnsignedVarint``)."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size
