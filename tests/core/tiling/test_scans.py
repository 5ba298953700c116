"""Merging scans, and the tiled algorithm for one key against the brute-force reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from aggregator_strategies import ALL_CASES, agree, batches, build, outcome
from hypothesis import given, settings
from hypothesis import strategies as st
from tiling_helpers import STRESS_OPS, aggregator

from timetile.core.tiling import (
    choose_hop,
    prefix_states,
    range_states,
    suffix_states,
    tiled_windows,
)
from timetile.core.types import ValueType
from timetile.core.windows import MIN_TIME, WindowKind, window_bounds

CASES = [
    pytest.param(op, value_type, id=f"{op}-{value_type.value}") for op, value_type in ALL_CASES
]


def _sorted_events(values: np.ndarray, times: list[int]) -> tuple[np.ndarray, np.ndarray]:
    stamps = np.array(times, dtype=np.int64)
    order = np.argsort(stamps, kind="stable")
    return values[order], stamps[order]


def reference_outcomes(agg: Any, times: np.ndarray, values: np.ndarray, starts: np.ndarray,
                       ends: np.ndarray) -> list[Any]:
    """Each window folded from scratch (the reference), its result or its refusal."""
    lows, highs = np.searchsorted(times, starts), np.searchsorted(times, ends)
    return [outcome(agg, agg.fold(values[low:high], times[low:high]))
            for low, high in zip(lows.tolist(), highs.tolist(), strict=True)]


def _agree_all(
    agg: Any,
    got: list[Any],
    events: tuple[np.ndarray, np.ndarray],
    starts: np.ndarray,
    ends: np.ndarray,
    *,
    want: list[Any] | None = None,
) -> None:
    times, values = events
    if want is None:
        want = reference_outcomes(agg, times, values, starts, ends)
    assert len(got) == len(want)
    for state, expected, s, e in zip(got, want, starts.tolist(), ends.tolist(), strict=True):
        inside = values[(times >= s) & (times < e)]
        agree(agg, outcome(agg, state), expected, inside)


_SMALL_TIMES = st.integers(-40, 40)


@pytest.mark.parametrize("op", STRESS_OPS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_scans_match_brute_force(op: str, data: st.DataObject) -> None:
    agg = aggregator(op)
    size = data.draw(st.integers(0, 12))
    values = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=size, max_size=size)))
    values, times = _sorted_events(
        values.astype(np.int64), data.draw(st.lists(_SMALL_TIMES, min_size=size, max_size=size))
    )
    bounds = data.draw(st.lists(st.one_of(_SMALL_TIMES, st.sampled_from([-41, 41])), max_size=8))
    if size:
        bounds += data.draw(st.lists(st.sampled_from(times.tolist()), max_size=3))
    b = np.array(bounds, dtype=np.int64)
    far = np.full_like(b, 10**6)
    _agree_all(agg, prefix_states(agg, times, values, b), (times, values), -far, b)
    _agree_all(agg, suffix_states(agg, times, values, b), (times, values), b, far)
    ends = b + np.array(data.draw(st.lists(st.integers(-3, 30), min_size=len(b), max_size=len(b))))
    _agree_all(agg, range_states(agg, times, values, b, ends), (times, values), b, ends)


def test_scans_fold_each_event_once() -> None:
    agg = aggregator("concat")
    times = np.arange(10, dtype=np.int64)
    got = prefix_states(agg, times, times, np.array([7, 3, 3, 0, 12]))
    assert got == [tuple(range(7)), (0, 1, 2), (0, 1, 2), (), tuple(range(10))]
    assert got[1] is got[2]  # equal boundaries share one state
    got = suffix_states(agg, times, times, np.array([7, 3, 12]))
    assert [sorted(state) for state in got] == [[7, 8, 9], list(range(3, 10)), []]
    assert prefix_states(agg, times, times, np.array([], np.int64)) == []
    assert suffix_states(agg, times[:0], times[:0], np.array([5])) == [()]


@st.composite
def _windows(draw: st.DrawFn, event_times: list[int]) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """Windows of every kind at query times on and off the events."""
    starts, ends, specs = [], [], []
    queries = st.one_of(st.integers(-70, 70), st.sampled_from(event_times or [0]))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(list(WindowKind)))
        length = draw(st.one_of(st.integers(1, 8), st.integers(1, 60)))
        hop = draw(st.integers(1, 25))
        q = np.array([draw(queries)], dtype=np.int64)
        s, e = window_bounds(q, kind, length, hop)
        starts.append(int(s[0]))
        ends.append(int(e[0]))
        specs.append((kind, length, hop))
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), specs


@pytest.mark.parametrize(("op", "value_type"), CASES)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_tiled_windows_equal_the_reference(
    op: str, value_type: ValueType, data: st.DataObject
) -> None:
    agg = build(op, value_type)
    ((raw_values, _),) = data.draw(batches(op, value_type, 1, max_size=14))
    event_times = data.draw(
        st.lists(st.integers(-60, 60), min_size=len(raw_values), max_size=len(raw_values))
    )
    values, times = _sorted_events(raw_values, event_times)
    starts, ends, specs = data.draw(_windows(times.tolist()))
    hop = data.draw(st.one_of(st.integers(1, 12), st.integers(1, 150), st.just(choose_hop(specs))))
    states = tiled_windows(agg, times, values, starts, ends, hop_ms=hop)
    _agree_all(agg, states, (times, values), starts, ends)


@pytest.mark.parametrize("op", ["sum", "last_k", "unique_count", "approx_percentile", "skew"])
def test_tiled_windows_on_a_hot_key(op: str) -> None:
    rng = np.random.default_rng(len(op))
    agg = build(op, ValueType.FLOAT)
    times = np.sort(rng.integers(0, 100_000, size=1500)).astype(np.int64)
    values = rng.integers(-1000, 1000, size=1500).astype(np.float64) / 8
    queries = np.sort(rng.integers(0, 110_000, size=150)).astype(np.int64)
    pieces = [
        window_bounds(queries, WindowKind.SLIDING, 20_000, None),
        window_bounds(queries, WindowKind.SAWTOOTH, 30_000, 5_000),
        window_bounds(queries, WindowKind.HOPPING, 30_000, 5_000),
        window_bounds(queries, WindowKind.LIFETIME, None, None),
    ]
    starts = np.concatenate([s for s, _ in pieces])
    ends = np.concatenate([e for _, e in pieces])
    assert starts.min() == MIN_TIME
    specs = [(WindowKind.SLIDING, 20_000, None), (WindowKind.SAWTOOTH, 30_000, 5_000)]
    assert choose_hop(specs) == 1_000
    want = reference_outcomes(agg, times, values, starts, ends)
    for hop in (1_000, 5_000, 7_000):  # the ladder's choice, the windows' hop, neither
        states = tiled_windows(agg, times, values, starts, ends, hop_ms=hop)
        _agree_all(agg, states, (times, values), starts, ends, want=want)


def test_tiled_windows_with_no_events_or_windows() -> None:
    agg = aggregator("count")
    none = np.array([], dtype=np.int64)
    assert [
        outcome(agg, s)
        for s in tiled_windows(
            agg, none, none, np.array([MIN_TIME, 5, 9]), np.array([10, 20, 9]), hop_ms=7
        )
    ] == [0, 0, 0]
    assert tiled_windows(agg, np.array([1, 2]), np.array([1, 2]), none, none, hop_ms=7) == []
