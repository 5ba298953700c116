"""The law of ``unmerge`` (aggregators/base.py): it undoes ``merge``, for every invertible op."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from aggregator_strategies import ALL_CASES, batches, build, outcome, same
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.types import ValueType

INVERTIBLE_CASES = [
    pytest.param(op, value_type, id=f"{op}-{value_type.value}")
    for op, value_type in ALL_CASES
    if build(op, value_type).invertible
]
OTHER_CASES = [
    pytest.param(op, value_type, id=f"{op}-{value_type.value}")
    for op, value_type in ALL_CASES
    if not build(op, value_type).invertible
]


def test_the_invertible_ops() -> None:
    assert {param.values[0] for param in INVERTIBLE_CASES} == {
        "count",
        "sum",
        "avg",
        "unique_count",
        "histogram",
    }


@pytest.mark.parametrize(("op", "value_type"), INVERTIBLE_CASES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_unmerge_undoes_merge(op: str, value_type: ValueType, data: st.DataObject) -> None:
    agg = build(op, value_type)
    a_part, b_part = data.draw(batches(op, value_type, 2))
    a, b = agg.fold(*a_part), agg.fold(*b_part)
    before = [agg.to_bytes(a), agg.to_bytes(b)]
    whole = agg.merge(a, b)
    whole_bytes = agg.to_bytes(whole)

    # The law: finalize(unmerge(merge(fold(A), fold(B)), fold(B))) == finalize(fold(A)).
    assert same(op, outcome(agg, agg.unmerge(whole, b)), outcome(agg, a))
    # Exactly, whichever side B was merged on: the same bytes.
    assert agg.to_bytes(agg.unmerge(whole, b)) == agg.to_bytes(a)
    assert agg.to_bytes(agg.unmerge(agg.merge(b, a), b)) == agg.to_bytes(a)
    assert agg.to_bytes(agg.unmerge(whole, a)) == agg.to_bytes(b)
    # init() is the identity; a state minus itself is empty.
    assert agg.to_bytes(agg.unmerge(a, agg.init())) == agg.to_bytes(a)
    assert agg.to_bytes(agg.unmerge(a, a)) == agg.to_bytes(agg.init())
    # A prefix difference: (A + B + A) - (A) == B + A.
    prefix = agg.merge(whole, a)
    assert agg.to_bytes(agg.unmerge(prefix, a)) == agg.to_bytes(agg.merge(b, a))
    # Nothing mutated.
    assert [agg.to_bytes(a), agg.to_bytes(b), agg.to_bytes(whole)] == [*before, whole_bytes]


@pytest.mark.parametrize(("op", "value_type"), INVERTIBLE_CASES)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_unmerge_agrees_with_retract(op: str, value_type: ValueType, data: st.DataObject) -> None:
    agg = build(op, value_type)
    a_part, b_part = data.draw(batches(op, value_type, 2))
    grown = agg.update(agg.fold(*a_part), *b_part)
    want = agg.to_bytes(agg.retract(grown, *b_part))
    assert agg.to_bytes(agg.unmerge(grown, agg.fold(*b_part))) == want


@pytest.mark.parametrize(("op", "value_type"), OTHER_CASES)
def test_other_ops_refuse_to_unmerge(op: str, value_type: ValueType) -> None:
    agg = build(op, value_type)
    state: Any = agg.fold(np.array([], dtype=value_type.numpy_dtype), np.array([], np.int64))
    with pytest.raises(TypeError, match="not invertible"):
        agg.unmerge(state, state)
