"""Bucketed features on the sweep equal the core's ``Bucketed`` aggregator, query by query.

No Spark: hypothesis draws a table of whole groups as the sweep sees it (grouped, in time
order), with times from a few seconds so that events fall exactly on window bounds and a
bucket's events often lie a window's length apart (two sessions), buckets from a few strings
with ``''`` and nulls, values of every type with nulls, NaN and ±inf; the queries of each
group in time order, some before every event and some long after. Every query's map must
equal what :class:`~timetile.core.aggregators.Bucketed` folds from the events of its window
by brute force, for ops of every family the sweep has and every window kind; the copies of
the queries must be as few as promised.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import timetile as tt
from timetile.core.aggregators import Bucketed, bucketed_values, make_aggregator
from timetile.core.types import ValueType
from timetile.offline.executors.sweep.buckets import BucketedColumn, bucket_layout
from timetile.offline.hot_keys import windows_reach
from timetile.offline.plan import Feature, query_bounds

SECOND = 1_000
GROUPS = 3
WINDOWS: list[tt.Window | None] = [
    None, tt.Window("3s"), tt.Window("4s", hop="2s"), tt.Window("4s", hop="2s", kind="hopping")]
#: Ops of every column type, then those of numbers alone.
OPS: list[tuple[str, int | None]] = [
    ("count", None), ("last", None), ("first_k", 2), ("unique_count", None),
    ("histogram", None), ("top_k", 2)]
NUMBER_OPS: list[tuple[str, int | None]] = [
    ("sum", None), ("avg", None), ("max", None), ("variance", None)]
VALUES: dict[ValueType, st.SearchStrategy[Any]] = {
    ValueType.INT: st.integers(-3, 3),
    ValueType.FLOAT: st.sampled_from([0.0, -0.0, 1.5, -2.0, math.nan, math.inf, -math.inf]),
    ValueType.STRING: st.sampled_from(["", "x", "é", "🙂"]),
    ValueType.BOOL: st.booleans(),
}
ARROW_TYPES = {ValueType.INT: pa.int64(), ValueType.FLOAT: pa.float64(),
               ValueType.STRING: pa.string(), ValueType.BOOL: pa.bool_()}
BUCKETS = st.none() | st.sampled_from(["", "a", "b", "ä", "🙂"])


@st.composite
def tables(draw: st.DrawFn) -> dict[str, Any]:
    """Events (group, time, bucket, value) grouped and in time order, and queries (group,
    time) likewise, with a value type."""
    value_type = draw(st.sampled_from(list(VALUES)))
    events = sorted(draw(st.lists(
        st.tuples(st.integers(0, GROUPS - 1), st.integers(0, 12), BUCKETS,
                  st.none() | VALUES[value_type]), max_size=40)),
        key=lambda event: (event[0], event[1]))
    queries = sorted(draw(st.lists(st.tuples(st.integers(0, GROUPS - 1), st.integers(-1, 19)),
                                   max_size=15)))
    return {"type": value_type, "events": events, "queries": queries}


def same(one: Any, other: Any) -> bool:
    """Equal, NaN to NaN, floats to 1e-12 (sums and moments may round differently)."""
    if isinstance(one, dict) and isinstance(other, dict):  # keys in order, NaN keys too
        return same(list(one.items()), list(other.items()))
    if isinstance(one, tuple) and isinstance(other, tuple):
        return len(one) == len(other) and all(map(same, one, other))
    if isinstance(one, list) and isinstance(other, list):
        return len(one) == len(other) and all(map(same, one, other))
    if isinstance(one, float) and isinstance(other, float):
        if math.isnan(one) or math.isnan(other):
            return math.isnan(one) and math.isnan(other)
        return math.isclose(one, other, rel_tol=1e-12) and (one != 0 or str(one) == str(other))
    return type(one) is type(other) and one == other


def as_maps(arrow: pa.Array) -> list[Any]:
    """Arrow gives a map as a list of pairs: back to dicts, nested maps too."""
    def back(value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            return {key: back(item) for key, item in value}
        return value
    return [None if row is None else back(row) for row in arrow.to_pylist()]


@settings(max_examples=300, deadline=None)
@given(tables(), st.lists(st.sampled_from(WINDOWS), min_size=1, max_size=3, unique=True))
def test_bucketed_features_equal_the_core(table: dict[str, Any],
                                         windows: list[tt.Window | None]) -> None:
    """Features over one column and bucket share the copies of their widest window."""
    assert_equal_to_the_core(table, windows, SECOND)


def test_events_at_the_ends_of_int64_keep_their_buckets() -> None:
    """Sessions whose events lie at the first or last millisecond: + 1 and gaps saturate."""
    first, last = -(2**63), 2**63 - 1
    events = [(0, first, "a", 1.0), (0, 1_000, "a", 2.0), (0, 2_000, "b", 3.0),
              (0, last, "a", 4.0), (1, first, "b", 5.0), (1, last - 1, "b", 6.0)]
    queries = [(0, first + 1), (0, 5_000), (0, last), (1, 0), (1, last)]
    table = {"type": ValueType.FLOAT, "events": events, "queries": queries}
    assert_equal_to_the_core(table, [None, tt.Window("3s"), tt.Window("4s", hop="2s")], 1)


def assert_equal_to_the_core(table: dict[str, Any], windows: list[tt.Window | None],
                             unit: int) -> None:
    """Each bucketed feature of the sweep equals the core's fold of the events it sees; the
    table's times are in ``unit`` milliseconds."""
    value_type, events, queries = table["type"], table["events"], table["queries"]
    groups = np.array([event[0] for event in events], dtype=np.int64)
    times = np.array([event[1] * unit for event in events], dtype=np.int64)
    buckets = pa.chunked_array([[event[2] for event in events]], type=pa.string())
    values = pa.chunked_array([[event[3] for event in events]], type=ARROW_TYPES[value_type])
    query_times = np.array([query[1] * unit for query in queries], dtype=np.int64)
    query_offsets = np.searchsorted([query[0] for query in queries],
                                    np.arange(GROUPS + 1)).astype(np.int64)
    swept = BucketedColumn(values, buckets, times=times, groups=groups, value_type=value_type,
                           windows=windows, query_times=query_times,
                           query_offsets=query_offsets)
    swept.layout._check(query_offsets)
    ops = OPS + (NUMBER_OPS if value_type.numeric else [])
    for window, (op, k) in ((window, op) for window in windows for op in ops):
        starts, ends = query_bounds(window, query_times)
        feature = Feature("f", tt.Aggregation("v", op, k=k), window, value_type, "b")
        got = as_maps(swept.result(feature))
        aggregator = Bucketed(make_aggregator(op, value_type, k=k))
        for index, (group, _) in enumerate(queries):
            seen = [event for event in events if event[0] == group
                    and event[2] is not None and event[3] is not None
                    and starts[index] <= event[1] * unit < ends[index]]
            folded = aggregator.fold(
                bucketed_values([event[2] for event in seen],
                                np.array([event[3] for event in seen],
                                         dtype=value_type.numpy_dtype), value_type),
                np.array([event[1] * unit for event in seen], dtype=np.int64))
            expected = aggregator.finalize(folded)
            assert same(got[index], expected), (op, window, queries[index], got[index],
                                                 expected)


@settings(max_examples=300, deadline=None)
@given(tables(), st.sampled_from(WINDOWS))
def test_queries_are_copied_to_the_buckets_they_see_and_few_others(
        table: dict[str, Any], window: tt.Window | None) -> None:
    """Every (query, bucket) whose window holds an event of the bucket has a copy, once.

    A sliding or lifetime window's copies all hold an event (the copies are exactly the
    maps' entries); a hopping or sawtooth window's copy may fall in a gap between two events
    of its bucket, but never one as long as the longest window.
    """
    events = [event for event in table["events"] if event[2] is not None]
    queries = table["queries"]
    query_times = np.array([query[1] * SECOND for query in queries], dtype=np.int64)
    query_offsets = np.searchsorted([query[0] for query in queries], np.arange(GROUPS + 1))
    starts, ends = query_bounds(window, query_times)
    longest = None if window is None else int((ends - starts).max(initial=0))
    layout = bucket_layout(
        pa.array([event[2] for event in events], type=pa.string()),
        np.array([event[0] for event in events], dtype=np.int64),
        np.array([event[1] * SECOND for event in events], dtype=np.int64),
        query_offsets=query_offsets, query_starts=starts, query_ends=ends)
    layout._check(query_offsets)
    buckets = layout.buckets.to_pylist()
    copied = {(int(query), buckets[bucket])
              for query, bucket in zip(layout.copy_queries, layout.copy_buckets, strict=True)}
    tight = window is None or window.hop is None
    for index, (group, _) in enumerate(queries):
        for bucket in buckets:
            seen = [event[1] * SECOND for event in events
                    if event[0] == group and event[2] == bucket]
            holds = any(starts[index] <= time < ends[index] for time in seen)
            if holds or tight:
                assert ((index, bucket) in copied) == holds, (index, bucket)
            elif (index, bucket) in copied:  # within a gap shorter than the longest
                assert longest is not None
                assert any(starts[index] - longest < time < ends[index] + longest
                           for time in seen), (index, bucket)


def test_a_bucket_is_cut_where_its_events_lie_the_longest_window_apart() -> None:
    """Events as far apart as the longest window are two sessions, which no window spans;
    events a millisecond closer are one, which some window holds whole: the cut is tight for
    every window kind (a hopping window is shorter than its reach, a sawtooth one as long)."""
    for window in [*WINDOWS[1:], tt.Window("5s", hop="2s", kind="hopping")]:
        reach = windows_reach([window])
        assert reach is not None
        hop = window.hop_ms or 1
        longest = {"sliding": reach, "sawtooth": reach,  # a hopping window: whole hops
                   "hopping": -(-window.length_ms // hop) * hop}[window.kind]
        for gap, sessions in ((longest, 2), (longest - 1, 1)):
            times = np.array([0, gap], dtype=np.int64)
            query_times = np.arange(-1, gap + reach + 2, dtype=np.int64)
            starts, ends = query_bounds(window, query_times)
            layout = bucket_layout(pa.array(["a", "a"]), np.zeros(2, dtype=np.int64), times,
                                   query_offsets=np.array([0, len(query_times)]),
                                   query_starts=starts, query_ends=ends)
            layout._check(np.array([0, len(query_times)]))
            assert layout.sessions == sessions, (window, gap)
            both = (starts <= 0) & (ends > gap)  # a window holds both events
            assert both.any() == (sessions == 1), (window, gap)
