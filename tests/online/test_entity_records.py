"""Entity records and mutation tiles: their bytes round-trip, and other bytes are refused."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timetile.core.aggregators.codec import encode
from timetile.store.entity_records import (
    EntityRecord,
    Mutation,
    decode_mutations,
    encode_mutations,
)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
images = st.lists(scalars, min_size=0, max_size=5).map(tuple)
times = st.one_of(st.none(), st.integers(-(2**62), 2**62))


def same(left: Any, right: Any) -> bool:
    """Equal, NaN equal to NaN, and the same type (True is not 1)."""
    if isinstance(left, tuple) and isinstance(right, tuple):
        return len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    return type(left) is type(right) and left == right


@given(st.integers(0, 2**50), st.lists(st.tuples(images, times), max_size=6))
def test_records_round_trip(day_end: int, rows: list[tuple[Any, Any]]) -> None:
    record = EntityRecord(day_end, tuple(rows))
    back = EntityRecord.from_bytes(record.to_bytes())
    assert back.day_end == day_end
    assert same(back.rows, record.rows)


@given(st.lists(st.builds(Mutation, st.integers(0, 2**50), st.booleans(), images, times),
                max_size=6))
def test_mutations_round_trip(mutations: list[Mutation]) -> None:
    back = decode_mutations(encode_mutations(mutations))
    assert len(back) == len(mutations)
    for ours, theirs in zip(back, mutations, strict=True):
        assert (ours.at, ours.before) == (theirs.at, theirs.before)
        assert same(ours.image, theirs.image)
        assert same(ours.time, theirs.time)


@pytest.mark.parametrize("data", [encode((9, 0, ())), encode("x"), encode((1, 0)), b"\x01\x03"])
def test_other_bytes_are_refused_with_a_fix(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"entity record.*Fix: re-run upload|state bytes"):
        EntityRecord.from_bytes(data)
    with pytest.raises(ValueError, match=r"mutations.*Fix: restart|state bytes"):
        decode_mutations(data)
