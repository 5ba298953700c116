"""The sweep's results, by each aggregator's vectorized finalizer, equal its scalar ``finalize``.

No Spark: hypothesis draws a table of whole groups as the sweep sees it (grouped, each group
in time order), with times from a tiny range so that ties are common, and values of every
type with nulls, NaN, ±inf, ``-0.0``, ``''`` and non-ASCII strings. Every query asks for a
window of its group's events; the sweep's answer (the kernels' column of states, finalized by
the op's ``finalize_many``) must equal, value for value (the sign of zero included), what the
core aggregator folds from the same events and finalizes one state at a time (``finalize``):
the online fetcher's answer. Every op the sweep computes is drawn, over every window kind;
the ops by event order and by value rank are also checked on runs found by brute force.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timetile as tt
from timetile.core.aggregators import OPS, make_aggregator
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.aggregators.columnar import RankedRuns, Runs
from timetile.core.aggregators.ordering import canonical, order_key
from timetile.core.equality import same_value
from timetile.core.types import ValueType
from timetile.core.windows import window_bounds
from timetile.offline.executors.sweep import SWEEP_OPS
from timetile.offline.executors.sweep.columns import (
    SweptColumn,
    feature_result,
    list_offsets,
    to_arrow,
)
from timetile.offline.plan import Feature

#: The ops that read values by event order: equal times are ordered by value.
EVENT_ORDER_OPS = ("first", "last", "first_k", "last_k")
#: The ops that read each run as a multiset of value ranks.
VALUE_RANK_OPS = ("unique_count", "histogram", "top_k", "bottom_k")
#: The moment ops, whose tree merges in another order than a fold: equal to the last bits.
MOMENT_OPS = ("variance", "stddev", "skew", "kurtosis")

ARROW_TYPES = {ValueType.INT: pa.int64(), ValueType.FLOAT: pa.float64(),
               ValueType.STRING: pa.string(), ValueType.BOOL: pa.bool_()}
VALUES: dict[ValueType, st.SearchStrategy[Any]] = {
    ValueType.INT: st.integers(-3, 3) | st.sampled_from([-(2**63), 2**63 - 1]),
    ValueType.FLOAT: st.sampled_from([0.0, -0.0, 1.5, -2.0, math.nan, -math.nan, math.inf,
                                      -math.inf]),
    ValueType.STRING: st.sampled_from(["", "a", "b", "ä", "日本", "🙂", "\uffff"]),
    ValueType.BOOL: st.booleans(),
}


@st.composite
def tables(draw: st.DrawFn) -> tuple[ValueType, list[int], list[int], list[Any]]:
    """A value type, then the group and time of each row (grouped, in time order), and values
    with nulls."""
    value_type = draw(st.sampled_from(list(ValueType)))
    rows = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=40))
    rows.sort()
    values = draw(st.lists(st.none() | VALUES[value_type], min_size=len(rows),
                           max_size=len(rows)))
    return value_type, [g for g, _ in rows], [t for _, t in rows], values


def exact(value: Any) -> Any:
    """A form in which NaN equals NaN and ``-0.0`` differs from ``0.0``, as does a NaN with
    its sign bit set from one without, in lists and maps too."""
    if isinstance(value, list):
        return [exact(item) for item in value]
    if isinstance(value, dict):
        return [(exact(key), count) for key, count in value.items()]
    if isinstance(value, float) and math.isnan(value) and math.copysign(1.0, value) < 0:
        return "-nan"
    return repr(value)


@settings(max_examples=300, deadline=None)
@given(tables(), st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 7), st.integers(-1, 7)),
                          min_size=1, max_size=12), st.integers(1, 5))
def test_the_ends_of_each_run_equal_the_core_aggregators(
        table: tuple[ValueType, list[int], list[int], list[Any]],
        queries: list[tuple[int, int, int]], k: int) -> None:
    value_type, groups, times, values = table
    half = len(values) // 2  # two chunks, as a table of whole groups arrives
    column = pa.chunked_array([values[:half], values[half:]], type=ARROW_TYPES[value_type])
    swept = SweptColumn(column, np.array(times, dtype=np.int64),
                        np.array(groups, dtype=np.int64), 4, value_type,
                        query_times=np.zeros(0, dtype=np.int64),
                        query_offsets=np.zeros(5, dtype=np.int64))  # runs come from this test
    lows, highs, expected = [], [], {op: [] for op in EVENT_ORDER_OPS}
    for group, one, other in queries:
        start, end = min(one, other), max(one, other)  # a window: start <= end
        first, last = swept.offsets[group], swept.offsets[group + 1]
        in_group = swept.times[first:last]
        lows.append(first + int(np.sum(in_group < start)))
        highs.append(first + int(np.sum(in_group < end)))
        seen = [(t, v) for g, t, v in zip(groups, times, values, strict=True)
                if g == group and v is not None and start <= t < end]
        for op in EVENT_ORDER_OPS:
            aggregator = make_aggregator(op, value_type, k=k if op.endswith("_k") else None)
            state = aggregator.fold(
                np.array([v for _, v in seen], dtype=value_type.numpy_dtype),
                np.array([t for t, _ in seen], dtype=np.int64))
            expected[op].append(exact(aggregator.finalize(state)))
    runs = Runs(np.array(lows, dtype=np.int64), np.array(highs, dtype=np.int64))
    for op in EVENT_ORDER_OPS:
        aggregator = make_aggregator(op, value_type, k=k if op.endswith("_k") else None)
        got = to_arrow(aggregator.finalize_many(runs), swept.in_event_order, op)
        assert [exact(value) for value in got.to_pylist()] == expected[op], op


@settings(max_examples=300, deadline=None)
@given(tables(), st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 7), st.integers(-1, 7)),
                          min_size=1, max_size=12), st.integers(1, 5))
def test_the_multisets_of_each_run_equal_the_core_aggregators(
        table: tuple[ValueType, list[int], list[int], list[Any]],
        queries: list[tuple[int, int, int]], k: int) -> None:
    """``unique_count``, ``histogram``, ``top_k`` and ``bottom_k`` by value ranks."""
    value_type, groups, times, values = table
    queries.sort(key=lambda query: query[0])  # a key's queries together, bounds in any order
    query_offsets = np.searchsorted([group for group, _, _ in queries], np.arange(5))
    swept = SweptColumn(pa.chunked_array([values], type=ARROW_TYPES[value_type]),
                        np.array(times, dtype=np.int64), np.array(groups, dtype=np.int64), 4,
                        value_type, query_times=np.zeros(len(queries), dtype=np.int64),
                        query_offsets=query_offsets.astype(np.int64))
    lows, highs, expected = [], [], {op: [] for op in VALUE_RANK_OPS}
    for group, one, other in queries:
        start, end = min(one, other), max(one, other)
        first, last = swept.offsets[group], swept.offsets[group + 1]
        in_group = swept.times[first:last]
        lows.append(first + int(np.sum(in_group < start)))
        highs.append(first + int(np.sum(in_group < end)))
        seen = [v for g, t, v in zip(groups, times, values, strict=True)
                if g == group and v is not None and start <= t < end]
        for op in VALUE_RANK_OPS:
            aggregator = make_aggregator(op, value_type, k=k if op.endswith("_k") else None)
            state = aggregator.fold(np.array(seen, dtype=value_type.numpy_dtype),
                                    np.zeros(len(seen), dtype=np.int64))
            expected[op].append(exact(aggregator.finalize(state)))
    ranks, by_rank = swept.value_ranks()
    runs = RankedRuns(ranks, len(by_rank), swept.offsets, query_offsets.astype(np.int64),
                      np.array(lows, dtype=np.int64), np.array(highs, dtype=np.int64))
    for op in VALUE_RANK_OPS:
        aggregator = make_aggregator(op, value_type, k=k if op.endswith("_k") else None)
        got = to_arrow(aggregator.finalize_many(runs), lambda: by_rank, op).to_pylist()
        if op == "histogram":  # Arrow gives a map as a list of pairs
            got = [None if pairs is None else dict(pairs) for pairs in got]
        assert [exact(value) for value in got] == expected[op], op


@settings(max_examples=150, deadline=None)
@given(tables())
def test_value_ranks_follow_the_value_order_of_the_core(
        table: tuple[ValueType, list[int], list[int], list[Any]]) -> None:
    """Two values share a rank exactly when the core ``unique_count`` counts them as one, and
    ranks ascend with the core's value order (NaN last, strings by code point)."""
    value_type, groups, times, values = table
    swept = SweptColumn(pa.chunked_array([values], type=ARROW_TYPES[value_type]),
                        np.array(times, dtype=np.int64), np.array(groups, dtype=np.int64), 4,
                        value_type, query_times=np.zeros(0, dtype=np.int64),
                        query_offsets=np.zeros(5, dtype=np.int64))
    ranks, by_rank = swept.value_ranks()
    kept = [value for value in values if value is not None]
    assert len(ranks) == len(kept)
    assert set(ranks.tolist()) == set(range(len(by_rank)))
    aggregator = make_aggregator("unique_count", value_type)
    for value in by_rank.to_pylist():  # NaN and zero as the core gives them: no sign bit
        if isinstance(value, float) and (math.isnan(value) or value == 0):
            assert math.copysign(1.0, value) == 1.0, value
    for i, one in enumerate(kept):
        assert exact(by_rank[ranks[i]].as_py()) == exact(canonical(one))
        for j, other in enumerate(kept[:i]):
            pair = np.array([one, other], dtype=value_type.numpy_dtype)
            merged = aggregator.finalize(aggregator.fold(pair, np.zeros(2, dtype=np.int64))) == 1
            assert (ranks[i] == ranks[j]) == merged, (one, other)
            if not merged:
                assert (ranks[i] < ranks[j]) == (order_key(one) < order_key(other)), (one, other)


def test_outputs_past_arrow_list_offsets_are_refused_by_name() -> None:
    """Arrow lists and maps address 2^31 − 1 entries: more is a clear error, not a wrap."""
    assert list_offsets(np.array([0, 3, 2**31 - 1]), "top_k").to_pylist()[-1] == 2**31 - 1
    with pytest.raises(ValueError, match=r"histogram: .* 2,147,483,648 entries .* smaller k"):
        list_offsets(np.array([0, 2**31]), "histogram")


def _swept(op: str, values: list[float]) -> Any:
    """``op`` of ``values`` (floats, one key, times 0, 1, …) over a lifetime, by the sweep."""
    swept = SweptColumn(pa.chunked_array([values], type=pa.float64()),
                        np.arange(len(values)), np.zeros(len(values), dtype=np.int64), 1,
                        ValueType.FLOAT, query_times=np.array([len(values) + 5]),
                        query_offsets=np.array([0, 1]))
    feature = Feature("f", tt.Aggregation("v", op, k=2 if op.endswith("_k") else None), None,
                      ValueType.FLOAT)
    return feature_result(feature, swept).to_pylist()[0]


@pytest.mark.parametrize("values", [[-math.nan, -0.0], [-0.0, -math.nan]])
@pytest.mark.parametrize("op", ["min", "max", "first", "last", "first_k", "last_k", "top_k",
                                "bottom_k", "histogram"])
def test_float_results_carry_no_sign_on_nan_or_zero(op: str, values: list[float]) -> None:
    """A NaN with its sign bit set, and ``-0.0``, come out as the core gives them."""
    got = _swept(op, values)
    if op == "histogram":  # Arrow gives a map as a list of pairs
        got = [value for value, _ in got]
    floats = got if isinstance(got, list) else [got]
    assert floats
    assert all(math.copysign(1.0, value) == 1.0 for value in floats), floats


@pytest.mark.parametrize(("op", "values"), [
    ("skew", [0.0, 1e-110]),  # m2 is not 0, but m3 and m2**1.5 underflow: 0 / 0
    ("kurtosis", [0.0, 1e-90]),  # m2**2 and m4 underflow: 0 / 0
    ("skew", [0.0, 0.0, -1e200]),  # m2 overflows: inf / inf
    ("avg", [-5e-324, 0.0, 0.0]),  # the mean underflows to -0.0
])
def test_moments_and_means_rounded_to_nan_or_zero_are_canonical(
        op: str, values: list[float]) -> None:
    """Arithmetic gives NaN with its sign bit set, and ``-0.0``: both engines give neither."""
    aggregator = make_aggregator(op, ValueType.FLOAT)
    core = aggregator.finalize(aggregator.fold(np.array(values), np.arange(len(values))))
    got = _swept(op, values)
    assert exact(got) == exact(core)
    assert math.copysign(1.0, got) == 1.0, got


#: What the scalar ``finalize`` gives where the op refuses the result (an int sum past int64).
REFUSED = object()

#: Windows over the tiny times of :func:`tables`: every kind, short enough to be empty often.
WINDOWS = [tt.Window(2), tt.Window(3, hop=2), tt.Window(4, hop=2, kind="hopping"), None]


@settings(max_examples=300, deadline=None)
@given(tables(), st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 8)), max_size=12),
       st.integers(1, 4), st.data())
def test_every_swept_op_finalizes_as_its_aggregator(
        table: tuple[ValueType, list[int], list[int], list[Any]],
        asked: list[tuple[int, int]], k: int, data: st.DataObject) -> None:
    """The whole sweep path for every op of ``SWEEP_OPS`` against ``fold`` and ``finalize``.

    Queries sit anywhere, also where no event is (empty windows), at the events' own times
    (an event at ``q`` is outside) and in groups without events.
    """
    value_type, groups, times, values = table
    asked.sort()
    query_groups = np.array([group for group, _ in asked], dtype=np.int64)
    query_times = np.array([time for _, time in asked], dtype=np.int64)
    query_offsets = np.searchsorted(query_groups, np.arange(5)).astype(np.int64)
    swept = SweptColumn(pa.chunked_array([values], type=ARROW_TYPES[value_type]),
                        np.array(times, dtype=np.int64), np.array(groups, dtype=np.int64), 4,
                        value_type, query_times=query_times, query_offsets=query_offsets)
    ops = [op for op, types in SWEEP_OPS.items() if value_type in types]
    assert set(SWEEP_OPS) <= set(OPS)
    for op in data.draw(st.lists(st.sampled_from(ops), min_size=1, max_size=6, unique=True)):
        window = data.draw(st.sampled_from(WINDOWS))
        params = {"k": k} if op.endswith("_k") else {}
        feature = Feature("f", tt.Aggregation("v", op, **params), window, value_type)
        aggregator = make_aggregator(op, value_type, **params)
        spec = (None, None, None) if window is None else (
            window.window_kind, window.length_ms, window.hop_ms)
        expected_rows = []
        for group, at in asked:
            starts, ends = window_bounds(np.array([at]), *spec) if window else (
                np.array([np.iinfo(np.int64).min]), np.array([at]))
            seen = [(t, v) for g, t, v in zip(groups, times, values, strict=True)
                    if g == group and v is not None and starts[0] <= t < ends[0]]
            state = aggregator.fold(np.array([v for _, v in seen], dtype=value_type.numpy_dtype),
                                    np.array([t for t, _ in seen], dtype=np.int64))
            try:
                expected_rows.append((seen, aggregator.finalize(state)))
            except ResultOverflowError:
                expected_rows.append((seen, REFUSED))
        if any(expected is REFUSED for _, expected in expected_rows):
            # an int sum past int64 in any window refuses the whole column, naming it
            with pytest.raises(ResultOverflowError, match=r"^f \(column 'v'\): "):
                feature_result(feature, swept)
            continue
        got = feature_result(feature, swept).to_pylist()
        for index, (seen, expected) in enumerate(expected_rows):
            ours = got[index]
            if op == "histogram" and ours is not None:  # Arrow gives a map as pairs
                ours = dict(ours)
            if op in MOMENT_OPS and ours is not None and expected is not None:
                assert same_value(ours, expected, rel_tol=1e-9), (op, window, seen)
            else:
                assert exact(ours) == exact(expected), (op, window, seen, ours, expected)
