"""The algebra's laws (aggregators/base.py), for every op in OPS and every column type it takes.

Values include NaN, ±inf, -0.0, subnormals, the largest doubles and int64 extremes, '' and
non-ASCII strings; times have many ties. Results are compared with NaN == NaN, exactly for
every op but the moments (see ``MOMENT_TOLERANCE``). Approximate ops are also checked against
the truth within their stated bound; ``approx_unique_count`` is compared exactly under every
cut and merge order (its estimate is a function of the sketch's registers), and so is
``approx_percentile`` while KLL keeps every value (at most k = 200, always the case here).
The laws shared with ``test_bucketed_laws`` are written once, in
``aggregator_strategies.Flavor``; they run here on the plain aggregators (``PLAIN``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from aggregator_strategies import (
    ALL_CASES,
    CASES,
    INVERTIBLE_CASES,
    PLAIN,
    agree,
    batches,
    build,
    check_within_bound,
    concat,
    outcome,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.aggregators import OPS
from timetile.core.types import ValueType

LAW_SETTINGS = settings(max_examples=15, deadline=None)


def test_every_op_is_covered() -> None:
    covered = {op for op, _ in ALL_CASES}
    assert covered == set(OPS)
    for op, spec in OPS.items():
        assert spec.factory.op == op


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_init_is_the_identity(op: str, value_type: ValueType, data: st.DataObject) -> None:
    PLAIN.init_is_the_identity(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_merge_of_parts_equals_the_whole(
    op: str, value_type: ValueType, data: st.DataObject
) -> None:
    PLAIN.merge_is_the_fold_of_the_union(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_merge_is_associative(op: str, value_type: ValueType, data: st.DataObject) -> None:
    PLAIN.merge_is_associative(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_bytes_round_trip(op: str, value_type: ValueType, data: st.DataObject) -> None:
    PLAIN.bytes_round_trip(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_cut_does_not_matter(op: str, value_type: ValueType, data: st.DataObject) -> None:
    agg = build(op, value_type)
    parts = data.draw(batches(op, value_type, data.draw(st.integers(1, 5)), max_size=8))
    values, times = concat(parts)
    want = outcome(agg, agg.fold(values, times))
    # One update per part, into a running state.
    running = agg.init()
    for part in parts:
        running = agg.update(running, *part)
    agree(agg, outcome(agg, running), want, values)
    # Folded parts merged as a balanced tree (as a segment tree would).
    states = [agg.fold(*part) for part in parts]
    while len(states) > 1:
        paired = [agg.merge(a, b) for a, b in zip(states[::2], states[1::2], strict=False)]
        states = paired + ([states[-1]] if len(states) % 2 else [])
    agree(agg, outcome(agg, states[0]), want, values)
    # Cut at other places, folded from the right.
    cuts = sorted(data.draw(st.lists(st.integers(0, len(values)), max_size=4)))
    bounds = [0, *cuts, len(values)]
    state = agg.init()
    for low, high in reversed(list(itertools.pairwise(bounds))):
        state = agg.merge(agg.fold(values[low:high], times[low:high]), state)
    agree(agg, outcome(agg, state), want, values)


@pytest.mark.parametrize(("op", "value_type"), INVERTIBLE_CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_retract_undoes_update(op: str, value_type: ValueType, data: st.DataObject) -> None:
    PLAIN.retract_undoes_update(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_no_method_mutates_its_arguments(
    op: str, value_type: ValueType, data: st.DataObject
) -> None:
    PLAIN.no_method_mutates_its_arguments(op, value_type, data)


@pytest.mark.parametrize(
    "value_type", [ValueType.INT, ValueType.FLOAT, ValueType.STRING], ids=lambda v: v.value
)
@LAW_SETTINGS
@given(data=st.data())
def test_approx_unique_count_cut_does_not_matter_past_the_exact_modes(
    value_type: ValueType, data: st.DataObject
) -> None:
    # The batches above stay in the sketch's exact LIST/SET modes; these reach its HLL array,
    # where a single batch's own estimator (HIP) would depend on the cut and the order.
    agg = build("approx_unique_count", value_type)
    size = data.draw(st.integers(300, 4_000))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    raw = rng.integers(0, size, size)  # about 63% distinct: duplicates across the cuts
    values = {
        ValueType.INT: raw,
        ValueType.FLOAT: raw / 3.0,
        ValueType.STRING: np.array([f"é{x}" for x in raw.tolist()], dtype=object),
    }[value_type]
    times = np.zeros(size, np.int64)
    want = outcome(agg, agg.fold(values, times))
    cuts = sorted(data.draw(st.lists(st.integers(0, size), max_size=12)))
    bounds = list(itertools.pairwise([0, *cuts, size]))
    parts = [agg.fold(values[low:high], times[low:high]) for low, high in bounds]
    running = agg.init()  # day by day
    for low, high in bounds:
        running = agg.update(running, values[low:high], times[low:high])
    right_first = agg.init()
    for state in reversed(parts):
        right_first = agg.merge(state, right_first)
    shuffled = rng.permutation(size)
    results = {
        "running": outcome(agg, running),
        "right_first": outcome(agg, right_first),
        "shuffled": outcome(agg, agg.fold(values[shuffled], times)),
        "round_trip": outcome(agg, agg.from_bytes(agg.to_bytes(right_first))),
    }
    assert set(results.values()) == {want}, (want, results)
    check_within_bound(agg, want, values)
