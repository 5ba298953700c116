"""Window arithmetic, including the worked example of docs/semantics.md."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import timetile as tt
from timetile.core.timeutil import HOUR_MS, MINUTE_MS, floor_to
from timetile.core.windows import MIN_TIME, WindowKind, window_bounds

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
    assert floor_to(np.array([-1, -HOUR_MS, -HOUR_MS - 1]), HOUR_MS).tolist() == [
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
