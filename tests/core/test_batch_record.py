"""The batch record plus the events since equals brute force, for every op and window kind.

A record built at ``day_end`` must answer a fetch at any millisecond of the slack exactly as
folding every event in the window would: bodies, edges and recent events never overlap and
never miss an event, at hop boundaries, at exactly ``start(t)`` and at exactly ``t``. Fewer
than 200 values in all keep the sketches exact (KLL below k, HLL in its list modes), so
approximate ops are compared exactly too. Each case runs twice: as fetches fold these short
runs, and with checkpoints every few events, so that kept states stand in for most of each
run (:mod:`timetile.core.series_folds`). Fetches more than a window after the day end take
the blocks of a longer run of streamed events, whose ends both move.
"""

from __future__ import annotations

import gc
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from aggregator_strategies import ALL_CASES, build
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core import series_folds
from timetile.core.aggregators import Bucketed, bucketed_values, make_aggregator
from timetile.core.batch_record import OnlineFeature, build_record, read_record, series_name
from timetile.core.equality import same_value
from timetile.core.reference import aggregate_windows
from timetile.core.series_folds import SeriesFolds
from timetile.core.timeutil import DAY_MS, HOUR_MS
from timetile.core.types import ValueType
from timetile.core.windows import WindowKind
from timetile.testing.collector import tracked_objects

DAY_END = 20 * DAY_MS
WINDOWS = [
    (WindowKind.SLIDING, HOUR_MS, None),
    (WindowKind.SLIDING, 3 * DAY_MS, None),
    (WindowKind.SAWTOOTH, 2 * DAY_MS, HOUR_MS),
    (WindowKind.HOPPING, DAY_MS, 6 * HOUR_MS),
    (WindowKind.HOPPING, DAY_MS, 7 * HOUR_MS),  # a hop that does not divide the day
    (WindowKind.LIFETIME, None, None),
]
RNG_VALUES = {
    ValueType.INT: lambda rng, n: rng.integers(-50, 50, n).astype(np.int64),
    ValueType.FLOAT: lambda rng, n: np.where(rng.random(n) < 0.05, np.nan,
                                             rng.integers(-40, 40, n) * 0.25),
    ValueType.STRING: lambda rng, n: np.array([f"s{v}" for v in rng.integers(0, 6, n)],
                                              dtype=object),
    ValueType.BOOL: lambda rng, n: rng.random(n) < 0.5,
}


def events(rng: np.random.Generator, value_type: ValueType, low: int, high: int,
           n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` events in ``[low, high)``, many on hop boundaries and at shared times."""
    times = rng.integers(low, high, n)
    aligned = rng.random(n) < 0.3
    times[aligned] = times[aligned] // HOUR_MS * HOUR_MS
    times = np.sort(times).astype(np.int64)
    return RNG_VALUES[value_type](rng, n), times


@pytest.mark.parametrize("min_block", [series_folds.MIN_BLOCK, 1])
@pytest.mark.parametrize(("op", "value_type"), ALL_CASES)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), bucketed=st.booleans())
def test_a_record_plus_recent_events_equals_brute_force(op: str, value_type: ValueType,
                                                        min_block: int, seed: int,
                                                        bucketed: bool) -> None:
    """With ``min_block`` 1, runs of more than 4 events come mostly as kept states."""
    with patch.multiple(series_folds, MIN_BLOCK=min_block,
                        BLOCK_SCALE=1 if min_block == 1 else series_folds.BLOCK_SCALE):
        _check_a_record(op, value_type, seed, bucketed)


def _check_a_record(op: str, value_type: ValueType, seed: int, bucketed: bool) -> None:
    rng = np.random.default_rng(seed)
    aggregator = build(op, value_type)
    if bucketed:
        aggregator = Bucketed(aggregator)
    series = series_name("x", "b" if bucketed else None)
    features = [OnlineFeature(f"f{i}", series, aggregator, window, value_type)
                for i, window in enumerate(WINDOWS)]
    old_values, old_times = events(rng, value_type, DAY_END - 5 * DAY_MS, DAY_END, 120)
    new_values, new_times = events(rng, value_type, DAY_END, DAY_END + DAY_MS, 60)
    if bucketed:
        old_values = bucketed_values(rng.choice(["a", "b", ""], len(old_values)), old_values,
                                     value_type)
        new_values = bucketed_values(rng.choice(["a", "c"], len(new_values)), new_values,
                                     value_type)
    record = read_record(build_record(features, {series: (old_values, old_times)}, DAY_END),
                         features, {series: old_values.dtype})
    all_values = np.concatenate([old_values, new_values])
    all_times = np.concatenate([old_times, new_times])
    fetch_times = [DAY_END, DAY_END + DAY_MS - 1, DAY_END + 7 * HOUR_MS,
                   *(int(t) for t in new_times[:5]), *rng.integers(DAY_END, DAY_END + DAY_MS, 6)]
    for at in fetch_times:
        assert record.covers(at)
        for feature in features:
            ours = aggregator.finalize_at(record.state(feature, at, (new_values, new_times)), at)
            low, high = feature.interval(at)
            truth: Any = aggregate_windows(aggregator, all_times, all_values,
                                           np.array([low]), np.array([high]), at=np.array([at]))[0]
            assert same_value(ours, truth), (feature.window, at, ours, truth)


@pytest.mark.parametrize(("op", "value_type"),  # KLL is randomized past 200 values
                         [case for case in ALL_CASES if case[0] != "approx_percentile"])
def test_windows_shorter_than_the_time_since_the_day_end_take_blocks(
        op: str, value_type: ValueType) -> None:
    """A day or more after the day end, a 1-day window's recent run moves both its ends.

    It comes from the blocks of the streamed events (for ops that keep states), and stays
    exact. Blocks of about 63 events (``MIN_BLOCK`` and ``BLOCK_SCALE`` 1), so that a run
    of a day (about 2,000 events) spans many.
    """
    rng = np.random.default_rng(17)
    aggregator = build(op, value_type)
    windows = [(WindowKind.SLIDING, HOUR_MS, None), (WindowKind.SLIDING, DAY_MS, None),
               (WindowKind.SAWTOOTH, DAY_MS, HOUR_MS)]
    features = [OnlineFeature(f"f{i}", "x", aggregator, window, value_type)
                for i, window in enumerate(windows)]
    old_values, old_times = events(rng, value_type, DAY_END - 2 * DAY_MS, DAY_END, 100)
    new_values, new_times = events(rng, value_type, DAY_END, DAY_END + 2 * DAY_MS, 4_000)
    record = read_record(build_record(features, {"x": (old_values, old_times)}, DAY_END),
                         features, {"x": old_values.dtype})
    recent = SeriesFolds(new_values, new_times)
    all_values = np.concatenate([old_values, new_values])
    all_times = np.concatenate([old_times, new_times])
    with patch.multiple(series_folds, MIN_BLOCK=1, BLOCK_SCALE=1):
        for at in (int(t) for t in rng.integers(DAY_END + DAY_MS, DAY_END + 2 * DAY_MS, 12)):
            states = record.states(features, at, {"x": recent})
            for feature, state in zip(features, states, strict=True):
                low, high = feature.interval(at)
                truth: Any = aggregate_windows(aggregator, all_times, all_values, np.array([low]),
                                               np.array([high]), at=np.array([at]))[0]
                assert same_value(aggregator.finalize_at(state, at), truth), (feature.window, at)
    assert (recent.kept_runs > 0) == aggregator.checkpointable
    recent._check()


def test_a_decoded_record_costs_the_collector_few_objects() -> None:
    """A fetcher caches thousands of decoded records, and a full pass of the cyclic garbage
    collector walks their tracked objects with every thread stopped. A record is itself,
    its map of edges and one series per column with edge events (none for a column without);
    a body is its state, not a tuple around it, and a sum's state is a tuple of numbers,
    which the collector stops tracking."""
    rng = np.random.default_rng(5)
    aggregator = make_aggregator("sum", ValueType.INT)
    features = [OnlineFeature(f"{series}{i}", series, aggregator, window, ValueType.INT)
                for series in ("x", "old") for i, window in enumerate(WINDOWS)]
    records = []
    for _ in range(20):
        x = events(rng, ValueType.INT, DAY_END - 5 * DAY_MS, DAY_END, 50)
        old = events(rng, ValueType.INT, DAY_END - 20 * DAY_MS, DAY_END - 10 * DAY_MS, 50)
        records.append(read_record(build_record(features, {"x": x, "old": old}, DAY_END),
                                   features, {"x": x[0].dtype, "old": old[0].dtype}))
    assert all(set(record.edges) == {"x"} for record in records)  # "old" has no edge events
    assert sum(len(record.bodies) for record in records) > 0
    gc.collect()  # which stops tracking tuples of numbers: a sum's state is one
    assert not any(gc.is_tracked(state) for record in records for state in record.bodies.values())
    # Each record, its map of edges and the series "x"; its map of bodies is not tracked
    # (it holds untracked states only); and the lock the short series share.
    assert tracked_objects(records) <= len(records) * (1 + 1 + 1) + 1
    columns = {"x": x, "old": old}  # the last record's events: it answers as brute force
    for at in (DAY_END, DAY_END + 7 * HOUR_MS, DAY_END + 3 * DAY_MS // 2):
        for feature in features:
            times, values = columns[feature.series][1], columns[feature.series][0]
            low, high = feature.interval(at)
            truth = aggregate_windows(aggregator, times, values, np.array([low]),
                                      np.array([high]))[0]
            ours = aggregator.finalize(records[-1].state(feature, at, None))
            assert same_value(ours, truth), (feature.name, at)
