"""State bytes: the codec round-trips every value it accepts and refuses hostile input cleanly."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import pytest
from aggregator_strategies import ALL_CASES, build, to_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.aggregators import codec
from timetile.core.types import ValueType

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**2100), 2**2100),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(max_size=8),
)
encodables = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4), max_leaves=20)


def as_tuples(value: Any) -> Any:
    return tuple(as_tuples(item) for item in value) if isinstance(value, list) else value


@given(encodables)
@settings(max_examples=150, deadline=None)
def test_round_trip(value: Any) -> None:
    encoded = codec.encode(value)
    assert encoded[0] == codec.FORMAT_VERSION
    assert codec.decode(encoded) == as_tuples(value)
    assert codec.encode(codec.decode(encoded)) == encoded


def test_floats_keep_their_bits() -> None:
    for x in (-0.0, math.inf, -math.inf, 5e-324):
        decoded = codec.decode(codec.encode(x))
        assert isinstance(decoded, float)
        assert math.copysign(1.0, decoded) == math.copysign(1.0, x)
    assert math.isnan(codec.expect_float(codec.decode(codec.encode(math.nan)), "x"))
    assert codec.decode(codec.encode(True)) is True


@given(encodables)
@settings(max_examples=60, deadline=None)
def test_every_truncation_is_refused(value: Any) -> None:
    encoded = codec.encode(value)
    for end in range(len(encoded)):
        with pytest.raises(ValueError, match="state bytes"):
            codec.decode(encoded[:end])
    with pytest.raises(ValueError, match="trailing"):
        codec.decode(encoded + b"\x00")


@given(st.binary(max_size=64))
@settings(max_examples=500, deadline=None)
def test_random_bytes_decode_or_raise_value_error(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        codec.decode(data)


def test_hostile_inputs() -> None:
    with pytest.raises(ValueError, match="version"):
        codec.decode(b"\x02\x00")
    with pytest.raises(ValueError, match="version"):
        codec.decode(b"")
    with pytest.raises(ValueError, match="too large"):
        codec.decode(b"\x01\x03" + bytes([0x80, 0x80, 0x01]) + bytes(2**14))
    with pytest.raises(ValueError, match="truncated"):
        codec.decode(b"\x01\x07" + bytes([0xFF, 0xFF, 0xFF, 0x0F]))  # a billion items, no bytes
    deep = b"\x01" + b"\x07\x01" * (codec.MAX_DEPTH + 1) + b"\x00"
    with pytest.raises(ValueError, match="deeply"):
        codec.decode(deep)
    with pytest.raises(ValueError, match="unknown tag"):
        codec.decode(b"\x01\x09")
    with pytest.raises(ValueError, match="length too long"):
        codec.decode(b"\x01\x05" + b"\xff" * 12)
    with pytest.raises(TypeError):
        codec.encode(np.int64(1))  # type: ignore[arg-type]


CODEC_CASES = [
    pytest.param(op, value_type, id=f"{op}-{value_type.value}")
    for op, value_type in ALL_CASES
    if not build(op, value_type).approximate
]


@pytest.mark.parametrize(("op", "value_type"), CODEC_CASES)
@given(data=st.binary(max_size=40))
@settings(max_examples=25, deadline=None)
def test_aggregators_refuse_garbage_with_value_error(
    op: str, value_type: ValueType, data: bytes
) -> None:
    agg = build(op, value_type)
    try:
        state = agg.from_bytes(data)
    except ValueError:
        return
    agg.to_bytes(state)  # whatever decodes is a usable state


@pytest.mark.parametrize(("op", "value_type"), [(op, vt) for op, vt in ALL_CASES], ids=str)
def test_aggregators_refuse_wrong_shapes(op: str, value_type: ValueType) -> None:
    agg = build(op, value_type)
    sample = {
        ValueType.INT: [1, 2],
        ValueType.FLOAT: [1.0, 2.0],
        ValueType.STRING: ["a", "b"],
        ValueType.BOOL: [True, False],
    }[value_type]
    encoded = agg.to_bytes(agg.fold(*to_batch(value_type, sample, [1, 2])))
    for bad in (encoded[:-1], b"\x07" + encoded[1:], codec.encode([("x",), 1.5, None, b"b"]), b""):
        with pytest.raises(ValueError, match="state bytes"):
            agg.from_bytes(bad)


def test_wrong_value_types_are_refused() -> None:
    agg = build("max", ValueType.INT)
    for bad in (1.5, "1", True, 2**63):
        with pytest.raises(ValueError, match="state bytes"):
            agg.from_bytes(codec.encode(bad))
    histogram = build("histogram", ValueType.STRING)
    with pytest.raises(ValueError, match="repeats"):
        histogram.from_bytes(codec.encode((["a", "a"], [1, 2])))
    top = build("top_k", ValueType.INT)  # k = 3: longer, unordered states are repaired
    assert top.finalize(top.from_bytes(codec.encode([1, 5, 3, 9, 2]))) == [9, 5, 3]
