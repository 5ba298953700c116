"""A compact, versioned byte encoding of aggregator states, with no pickle.

State bytes travel through stores that timetile does not control (an online KV store, files on
shared disks), so decoding must be safe on hostile input: it never runs code, checks every
length against the bytes that remain, bounds nesting and integer sizes, and turns anything
malformed into :class:`ValueError`.

Format: one version byte (:data:`FORMAT_VERSION`), then one value, where a value is a tag byte
followed by its payload:

========  =====================================================================
tag       payload
========  =====================================================================
``0x00``  ``None``
``0x01``  ``False``
``0x02``  ``True``
``0x03``  int: LEB128 byte count, then two's complement little-endian bytes
``0x04``  float: 8 bytes, IEEE 754 binary64 little-endian (keeps -0.0 and NaN)
``0x05``  str: LEB128 byte count, then UTF-8
``0x06``  bytes: LEB128 byte count, then the bytes
``0x07``  sequence: LEB128 item count, then the items
========  =====================================================================

Sequences decode as tuples, so decoded states are immutable.

>>> decode(encode((3, -1.5, "é", None, (True,))))
(3, -1.5, 'é', None, (True,))
>>> encode(5).hex()
'01030105'
"""

from __future__ import annotations

import struct
from typing import Any, TypeAlias

from timetile.core.types import ValueType

#: The first byte of every encoding; bump it when the format changes.
FORMAT_VERSION = 1

#: A column value as aggregators hand it out: a Python scalar of the column's type.
Scalar: TypeAlias = bool | int | float | str

#: What :func:`encode` accepts.
Encodable: TypeAlias = (
    "bool | int | float | str | bytes | tuple[Encodable, ...] | list[Encodable] | None"
)

#: What :func:`decode` returns.
Decoded: TypeAlias = "bool | int | float | str | bytes | tuple[Decoded, ...] | None"

_NONE, _FALSE, _TRUE, _INT, _FLOAT, _STR, _BYTES, _SEQ = range(8)
_FLOAT64 = struct.Struct("<d")
_CONSTANTS: dict[int, Decoded] = {_NONE: None, _FALSE: False, _TRUE: True}

#: Integers longer than this many bytes are rejected (the largest state integer, an exact
#: float sum, needs about 270).
MAX_INT_BYTES = 1024
#: Deeper nesting is rejected (states nest two or three levels).
MAX_DEPTH = 16

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def encode(value: Encodable) -> bytes:
    """Encode ``value`` (None, bool, int, float, str, bytes, or tuples/lists of them).

    O(size of the value).

    Raises:
        TypeError: for any other type, including numpy scalars (convert with ``.item()``).

    """
    out = bytearray([FORMAT_VERSION])
    _encode_into(out, value)
    return bytes(out)


def decode(data: bytes) -> Decoded:
    """Decode bytes written by :func:`encode`. Sequences come back as tuples.

    O(len(data)).

    Raises:
        ValueError: for an unknown version, a malformed or truncated input, or trailing bytes.

    """
    view = memoryview(data)
    if len(view) == 0 or view[0] != FORMAT_VERSION:
        found = view[0] if len(view) > 0 else "nothing"
        raise ValueError(f"state bytes: expected format version {FORMAT_VERSION}, got {found}")
    value, end = _decode_at(view, 1, 0)
    if end != len(view):
        raise ValueError(f"state bytes: {len(view) - end} trailing bytes")
    return value


def decode_versioned(data: bytes, version: int, fields: int, what: str,
                     fix: str) -> tuple[Any, ...]:
    """Decode bytes that :func:`encode` wrote as ``(version, field, ...)``; return the fields.

    O(len(data)).

    >>> decode_versioned(encode((2, "a", 7)), 2, 2, "a pair", "write it again")
    ('a', 7)

    Raises:
        ValueError: "not {what} of version {version}. Fix: {fix}" when the bytes decode to
            anything but ``fields`` fields led by ``version``; :func:`decode`'s own message
            ("state bytes: ...") when they do not decode at all.

    """
    decoded = decode(data)
    if (not isinstance(decoded, tuple) or len(decoded) != fields + 1
            or decoded[0] != version or isinstance(decoded[0], bool)):
        raise ValueError(f"not {what} of version {version}. Fix: {fix}")
    return decoded[1:]


def older_version(data: bytes, version: int) -> bool:
    """Whether bytes :func:`encode` wrote as ``(v, ...)`` have a ``v`` below ``version``.

    Such bytes were written by an earlier build. O(len(data)).

    >>> older_version(encode((1, "a")), 2), older_version(encode((2, "a")), 2)
    (True, False)
    """
    try:
        decoded = decode(data)
    except ValueError:
        return False
    return (isinstance(decoded, tuple) and bool(decoded) and isinstance(decoded[0], int)
            and not isinstance(decoded[0], bool) and decoded[0] < version)


def expect_int(value: Decoded, what: str) -> int:
    """Return ``value`` as an int (not a bool), or raise ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"state bytes: {what} must be an integer, got {type(value).__name__}")
    return value


def expect_float(value: Decoded, what: str) -> float:
    """Return ``value`` as a float, or raise ValueError naming ``what``."""
    if not isinstance(value, float):
        raise ValueError(f"state bytes: {what} must be a float, got {type(value).__name__}")
    return value


def expect_tuple(value: Decoded, what: str, length: int | None = None) -> tuple[Decoded, ...]:
    """Return ``value`` as a tuple (of ``length`` items if given), or raise ValueError."""
    if not isinstance(value, tuple):
        raise ValueError(f"state bytes: {what} must be a sequence, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise ValueError(f"state bytes: {what} must have {length} items, got {len(value)}")
    return value


def expect_scalar(value: Decoded, value_type: ValueType, what: str) -> Scalar:
    """Return ``value`` as a scalar of ``value_type`` (INT within int64), or raise ValueError."""
    if value_type is ValueType.BOOL:
        if isinstance(value, bool):
            return value
    elif value_type is ValueType.INT:
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise ValueError(f"state bytes: {what} is outside int64")
            return value
    elif value_type is ValueType.FLOAT:
        if isinstance(value, float):
            return value
    elif isinstance(value, str):
        return value
    found = type(value).__name__
    raise ValueError(f"state bytes: {what} must be a {value_type.value}, got {found}")


def _encode_into(out: bytearray, value: Encodable) -> None:
    # bool before int: bool is a subclass of int.
    if value is None:
        out.append(_NONE)
    elif isinstance(value, bool):
        out.append(_TRUE if value else _FALSE)
    elif isinstance(value, int):
        size = (value.bit_length() + 8) // 8 if value else 0  # room for the sign bit
        out.append(_INT)
        _put_varint(out, size)
        out += value.to_bytes(size, "little", signed=True)
    elif isinstance(value, float):
        out.append(_FLOAT)
        out += _FLOAT64.pack(value)
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        out.append(_STR)
        _put_varint(out, len(raw))
        out += raw
    elif isinstance(value, bytes):
        out.append(_BYTES)
        _put_varint(out, len(value))
        out += value
    elif isinstance(value, tuple | list):
        out.append(_SEQ)
        _put_varint(out, len(value))
        for item in value:
            _encode_into(out, item)
    else:
        raise TypeError(f"cannot encode a {type(value).__name__} in a state")


def _put_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _get_varint(view: memoryview, pos: int) -> tuple[int, int]:
    n = 0
    for shift in range(0, 64, 7):
        if pos >= len(view):
            raise ValueError("state bytes: truncated length")
        byte = view[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return n, pos
    raise ValueError("state bytes: length too long")


def _take(view: memoryview, pos: int, size: int) -> tuple[memoryview, int]:
    end = pos + size
    if end > len(view):
        raise ValueError(f"state bytes: truncated, needed {size} bytes at offset {pos}")
    return view[pos:end], end


def _decode_at(view: memoryview, pos: int, depth: int) -> tuple[Decoded, int]:
    if pos >= len(view):
        raise ValueError("state bytes: truncated, expected a value")
    tag = view[pos]
    pos += 1
    if tag in _CONSTANTS:
        return _CONSTANTS[tag], pos
    if tag == _FLOAT:
        raw, pos = _take(view, pos, 8)
        (number,) = _FLOAT64.unpack(raw)
        return float(number), pos
    if tag in (_INT, _STR, _BYTES):
        return _decode_sized(view, pos, tag)
    if tag == _SEQ:
        return _decode_sequence(view, pos, depth)
    raise ValueError(f"state bytes: unknown tag {tag:#04x} at offset {pos - 1}")


def _decode_sized(view: memoryview, pos: int, tag: int) -> tuple[Decoded, int]:
    size, pos = _get_varint(view, pos)
    if tag == _INT and size > MAX_INT_BYTES:
        raise ValueError(f"state bytes: integer of {size} bytes is too large")
    raw, pos = _take(view, pos, size)
    if tag == _INT:
        return int.from_bytes(raw, "little", signed=True), pos
    if tag == _STR:
        return str(raw, "utf-8", "surrogatepass"), pos
    return bytes(raw), pos


def _decode_sequence(view: memoryview, pos: int, depth: int) -> tuple[Decoded, int]:
    if depth >= MAX_DEPTH:
        raise ValueError("state bytes: nested too deeply")
    count, pos = _get_varint(view, pos)
    if count > len(view) - pos:  # every item takes at least one byte
        raise ValueError("state bytes: truncated sequence")
    items = []
    for _ in range(count):
        item, pos = _decode_at(view, pos, depth + 1)
        items.append(item)
    return tuple(items), pos
