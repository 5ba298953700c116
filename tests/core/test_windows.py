"""Window arithmetic, including the worked example of docs/semantics.md."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import timetile as tt
from timetile.core.timeutil import HOUR_MS, MINUTE_MS
from timetile.core.windows import (
    ARRAYS,
    INTS,
    MAX_TIME,
    MIN_TIME,
    WindowKind,
    as_of,
    window_bounds,
    window_interval,
)

MIN = int(MIN_TIME)
EVENTS = {"10:00": 10 * HOUR_MS, "10:30": 10 * HOUR_MS + 30 * MINUTE_MS, "11:00": 11 * HOUR_MS}


def seen(window: tt.Window, query: int) -> list[str]:
    start, end = (bound[0] for bound in window.bounds(np.array([query])))
    return [name for name, ts in EVENTS.items() if start <= ts < end]


@pytest.mark.parametrize(
    ("query", "sliding", "sawtooth", "hopping"),
    [
        (11 * HOUR_MS, ["10:00", "10:30"], ["10:00", "10:30"], ["10:00", "10:30"]),
        (11 * HOUR_MS + 10 * MINUTE_MS, ["10:30", "11:00"], ["10:00", "10:30", "11:00"],
         ["10:00", "10:30"]),
        (11 * HOUR_MS + 40 * MINUTE_MS, ["11:00"], ["10:30", "11:00"], ["10:30", "11:00"]),
    ],
)
def test_the_documented_example(query: int, sliding: list, sawtooth: list, hopping: list) -> None:
    assert seen(tt.Window("1h"), query) == sliding
    assert seen(tt.Window("1h", hop="30m"), query) == sawtooth
    assert seen(tt.Window("1h", hop="30m", kind="hopping"), query) == hopping


def test_an_event_at_q_never_counts_and_one_at_q_minus_length_does() -> None:
    start, end = tt.Window("1h").bounds(np.array([5 * HOUR_MS]))
    assert start[0] == 4 * HOUR_MS  # inclusive
    assert end[0] == 5 * HOUR_MS  # exclusive


def test_floor_is_a_true_floor_before_the_epoch() -> None:
    assert ARRAYS.floor(np.array([-1, -HOUR_MS, -HOUR_MS - 1]), HOUR_MS).tolist() == [
        -HOUR_MS, -HOUR_MS, -2 * HOUR_MS]


@given(st.integers(MIN, MIN + 10**6), st.integers(1, 10**5), st.integers(1, 10**4))
@example(MIN + 3, 1, 3).via("a floor above MIN, though MIN + length + hop > q")
@example(MIN + 2, 1, 3).via("a hopping end above MIN, though q < MIN + hop")
@example(MIN + 1_000, 10, 1_000).via("MIN is not a multiple of the hop")
def test_windows_reaching_past_the_first_time_start_there(query: int, length: int,
                                                          hop: int) -> None:
    # q - length (and its floor to the hop) below int64 would wrap around to a huge start
    def floored(at: int) -> int:
        return max(MIN, at - at % hop)  # Python ints: no wrap

    expected = {
        WindowKind.SLIDING: (max(MIN, query - length), query),
        WindowKind.SAWTOOTH: (floored(query - length), query),
        WindowKind.HOPPING: (floored(query - length), floored(query)),
    }
    for kind, bounds in expected.items():
        got = window_bounds(np.array([query]), kind, length, None if kind is
                            WindowKind.SLIDING else hop)
        assert (int(got[0][0]), int(got[1][0])) == bounds, kind


_ANY_TIME = st.one_of(st.integers(MIN, MIN + 10**7), st.integers(-(10**12), 10**12),
                      st.integers(int(MAX_TIME) - 10**7, int(MAX_TIME)))
_KINDS = st.sampled_from(list(WindowKind))


@given(st.lists(_ANY_TIME, min_size=1, max_size=20), _KINDS, st.integers(1, 10**6),
       st.integers(1, 10**5), st.lists(st.integers(1, 10**6), max_size=3))
def test_one_rule_on_ints_and_arrays(times: list[int], kind: WindowKind, length: int,
                                     hop: int, floors: list[int]) -> None:
    """The fetcher's scalar bounds and as-of times are the kernels' vectorized ones."""
    hop = min(hop, length)
    length_ms = None if kind is WindowKind.LIFETIME else length
    hop_ms = hop if kind in (WindowKind.SAWTOOTH, WindowKind.HOPPING) else None
    starts, ends = window_bounds(np.array(times), kind, length_ms, hop_ms)
    assert [window_interval(at, kind, length_ms, hop_ms) for at in times] == list(
        zip(starts.tolist(), ends.tolist(), strict=True))
    assert [as_of(INTS, at, floors) for at in times] == as_of(
        ARRAYS, np.array(times), floors).tolist()
    for at in times:  # saturated, never wrapped
        assert MIN <= INTS.floor(at, hop) <= at <= INTS.ceil(at, hop) <= MAX_TIME
