"""Kept states stand in for the events they hold: a run folds as one batch.

One sorted series (many events per millisecond) answers runs from a few anchors, and runs
with no fixed end, in a random order, as fetches at random times do, with checkpoints and
blocks every few events (:func:`small_blocks`): the kept state plus folds of the rest equal
one fold of the run, for every op. A checkpoint or block never splits the events of one
millisecond, and the rest stays short.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from aggregator_strategies import CASES, batches, build, outcome, same
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core import series_folds
from timetile.core.aggregators import Aggregator, make_aggregator
from timetile.core.series_folds import SeriesFolds
from timetile.core.types import ValueType
from timetile.testing.collector import tracked_objects


def covered(folds: SeriesFolds, aggregator: Aggregator[Any], lo: int, hi: int,
            anchor: int | None) -> Any:
    """The run's state as a fetch makes it: the kept state and folds of the rest, in order."""
    kept, rest = folds.cover(aggregator, lo, hi, anchor)
    assert all(a < b for a, b in rest)
    if kept is None:
        assert rest == (((lo, hi),) if lo < hi else ())
        return aggregator.fold(folds.values[lo:hi], folds.times[lo:hi])
    assert len(rest) <= (2 if anchor is None else 1)
    bounds = [lo, *(end for run in rest for end in run), hi]
    assert bounds == sorted(bounds), "the rest lies in the run, in order"
    gaps = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)
            if bounds[i] < bounds[i + 1]]
    assert len(gaps) == 1, "the kept state holds one stretch of the run"
    (a, b) = gaps[0]
    assert anchor is None or anchor in (a, b), "an anchored run's state begins at the anchor"
    for cut in {a, b} - {lo, hi}:
        assert folds.times[cut - 1] < folds.times[cut], "a checkpoint splits one millisecond"
    parts = sorted([(a, kept), *((first, aggregator.fold(folds.values[first:last],
                                                         folds.times[first:last]))
                                 for first, last in rest)], key=lambda part: part[0])
    state = aggregator.init()
    for _, part in parts:
        state = aggregator.merge(state, part)
    return state


def small_blocks() -> Any:
    """Checkpoints and blocks every few events, free runs of 3 blocks or more from blocks."""
    return patch.multiple(series_folds, MIN_BLOCK=1, BLOCK_SCALE=1, FREE_RUN_BLOCKS=2)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@settings(max_examples=12, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_a_kept_state_and_the_rest_equal_one_fold(op: str, value_type: ValueType,
                                                  data: st.DataObject, seed: int) -> None:
    aggregator = build(op, value_type)
    [(values, times)] = data.draw(batches(op, value_type, 1, max_size=160))
    order = np.argsort(times, kind="stable")
    folds = SeriesFolds(values[order], times[order])
    n = len(folds)
    rng = np.random.default_rng(seed)
    anchors = sorted({0, n, int(rng.integers(0, n + 1))})
    with small_blocks():
        for _ in range(25):
            anchor = int(rng.choice(anchors))
            other = int(rng.integers(0, n + 1))
            lo, hi = min(anchor, other), max(anchor, other)
            got = outcome(aggregator, covered(folds, aggregator, lo, hi, anchor))
            want = outcome(aggregator, aggregator.fold(folds.values[lo:hi], folds.times[lo:hi]))
            assert same(op, got, want), (lo, hi, anchor, got, want)
            free = outcome(aggregator, covered(folds, aggregator, lo, hi, None))
            assert same(op, free, want)
    folds._check()


def test_a_hot_run_folds_few_events_and_keeps_few_states() -> None:
    """100,000 events, 1,000 per millisecond at the ends: blocks of 4 * sqrt(n) = 1,264."""
    aggregator = make_aggregator("sum", ValueType.INT)
    times = np.sort(np.concatenate([np.zeros(1_000), np.arange(98_000), np.full(1_000, 98_000)])
                    ).astype(np.int64)
    folds = SeriesFolds(np.arange(len(times), dtype=np.int64), times)
    n = len(folds)
    rng = np.random.default_rng(5)
    for _ in range(200):
        start = int(rng.integers(0, n))
        for lo, hi, anchor in ((start, n, n), (0, start, 0)):
            _, rest = folds.cover(aggregator, lo, hi, anchor)
            # At most a block, and the rest of the millisecond where it ends.
            assert sum(b - a for a, b in rest) <= 1_264 + 1_000
            assert outcome(aggregator, covered(folds, aggregator, lo, hi, anchor)) == (
                sum(range(lo, hi)) if lo < hi else None)
    assert 2 <= folds.kept_states <= 2 * (n // 1_264 + 1)
    folds._check()


@pytest.mark.parametrize("op", ["sum", "max"])  # prefix states, and a segment tree
def test_a_hot_run_with_no_fixed_end_folds_two_blocks_at_most(op: str) -> None:
    """Free runs take the blocks they span from an index and fold the parts at their ends."""
    aggregator = make_aggregator(op, ValueType.INT)
    times = np.sort(np.concatenate([np.zeros(1_000), np.arange(98_000), np.full(1_000, 98_000)])
                    ).astype(np.int64)
    values = np.random.default_rng(6).integers(-10**6, 10**6, len(times))
    folds = SeriesFolds(values, times)
    n = len(folds)
    rng = np.random.default_rng(7)
    for _ in range(200):
        lo, hi = sorted(int(end) for end in rng.integers(0, n + 1, 2))
        kept, rest = folds.cover(aggregator, lo, hi, None)
        # Folded whole only if at most 8 blocks long; else the parts of two blocks, each of
        # which may run on to the end of a millisecond.
        assert kept is not None or hi - lo <= 8 * 1_264
        assert kept is None or sum(b - a for a, b in rest) <= 2 * (1_264 + 1_000)
        want = outcome(aggregator, aggregator.fold(values[lo:hi], times[lo:hi]))
        assert outcome(aggregator, covered(folds, aggregator, lo, hi, None)) == want
    assert folds.kept_runs == 1
    assert n // (1_264 + 1_000) <= folds.kept_states <= n // 1_264 + 1  # one per block
    folds._check()


def test_runs_of_ops_that_keep_nothing_and_short_runs_fold_whole() -> None:
    times = np.arange(1_000, dtype=np.int64)
    folds = SeriesFolds(times.astype(np.float64), times)
    percentile = make_aggregator("approx_percentile", ValueType.FLOAT, percentiles=[0.5])
    assert folds.cover(percentile, 0, 1_000, 0) == (None, ((0, 1_000),))  # KLL cuts randomly
    assert folds.cover(percentile, 0, 1_000, None) == (None, ((0, 1_000),))
    total = make_aggregator("sum", ValueType.FLOAT)
    assert folds.cover(total, 10, 50, 10) == (None, ((10, 50),))  # a short run
    assert folds.cover(total, 10, 10, None) == (None, ())
    # A free run of 8 blocks (4 * sqrt(1,000) = 124 events each) costs its fold anyway.
    assert folds.cover(total, 0, 992, None) == (None, ((0, 992),))
    assert folds.kept_states == 0
    with pytest.raises(ValueError, match="anchor 5 is neither end of the run"):
        folds.cover(total, 0, 1_000, 5)


def test_threads_sharing_one_series_agree() -> None:
    aggregator = make_aggregator("max", ValueType.INT)
    times = np.arange(20_000, dtype=np.int64)
    values = np.random.default_rng(9).integers(0, 10**9, len(times))
    folds = SeriesFolds(values, times)
    failures: list[tuple[int, Any, int]] = []

    def fetch(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(300):
            lo = int(rng.integers(0, len(times)))
            got = covered(folds, aggregator, lo, len(times), len(times))
            if got != int(values[lo:].max()):
                failures.append((lo, got, int(values[lo:].max())))

    threads = [threading.Thread(target=fetch, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


@pytest.mark.parametrize("op", ["sum", "max", "last_k", "approx_unique_count"])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_longer_series_carries_the_kept_states_that_still_hold(op: str, seed: int) -> None:
    """As tiles land: each series adds events (some in the last millisecond of the one
    before) and carries the kept states of the one before, used first from both ends."""
    rng = np.random.default_rng(seed)
    aggregator = build(op, ValueType.INT)
    times = np.sort(rng.integers(0, 60, 240)).astype(np.int64)
    values = rng.integers(-5, 5, 240)
    before: SeriesFolds | None = None
    with small_blocks():
        for n in sorted({int(m) for m in rng.integers(1, 241, 5)} | {240}):
            folds = SeriesFolds(values[:n], times[:n], after=before)
            carried = folds.kept_states
            for _ in range(10):
                anchor = [0, n // 2, n, None][int(rng.integers(0, 4))]
                other, end = (int(end) for end in rng.integers(0, n + 1, 2))
                lo, hi = sorted((other, end if anchor is None else anchor))
                got = outcome(aggregator, covered(folds, aggregator, lo, hi, anchor))
                assert same(op, got, outcome(aggregator, aggregator.fold(values[lo:hi],
                                                                         times[lo:hi])))
            assert folds.kept_states >= carried
            folds._check()
            before = folds


def test_a_growing_series_keeps_blocks_in_proportion() -> None:
    """Blocks carry over until the series is long enough for blocks twice as long."""
    aggregator = make_aggregator("max", ValueType.INT)
    times = np.arange(400_000, dtype=np.int64) // 3
    values = np.random.default_rng(8).integers(0, 10**9, len(times))
    before: SeriesFolds | None = None
    for n in range(4_000, len(times) + 1, 4_000):
        folds = SeriesFolds(values[:n], times[:n], after=before)
        lo = n // 3
        assert outcome(aggregator, covered(folds, aggregator, lo, n - 1, None)) == int(
            values[lo:n - 1].max())
        block = series_folds.block_size(n)
        assert n // (2 * block) <= folds.kept_states <= 2 * n // block + 1  # one per block
        before = folds
    folds._check()


def test_a_series_that_does_not_begin_with_the_other_carries_nothing() -> None:
    aggregator = make_aggregator("sum", ValueType.INT)
    times = np.arange(400, dtype=np.int64)
    first = SeriesFolds(times, times)
    covered(first, aggregator, 0, 400, 0)
    assert first.kept_states > 0
    assert SeriesFolds(times + 1, times + 1, after=first).kept_states == 0
    assert SeriesFolds(times[:300], times[:300], after=first).kept_states == 0
    assert SeriesFolds(np.arange(500), np.arange(500), after=first).kept_states > 0


def test_a_series_let_go_of_is_freed_at_once() -> None:
    """No reference cycle: a fetcher's evicted series frees its kept states without waiting
    for the cyclic collector (whose full passes over a server's caches stall its fetches)."""
    aggregator = make_aggregator("max", ValueType.INT)
    times = np.arange(10_000, dtype=np.int64)
    folds = SeriesFolds(times, times)
    covered(folds, aggregator, 0, 5_000, 0)
    covered(folds, aggregator, 100, 9_000, None)
    longer = SeriesFolds(np.arange(12_000), np.arange(12_000), after=folds)
    assert longer.kept_runs == 2
    gone = [weakref.ref(folds), weakref.ref(longer)]
    gc.disable()
    try:
        del folds, longer
        assert [ref() for ref in gone] == [None, None]
    finally:
        gc.enable()


def test_short_series_cost_the_collector_one_object_each() -> None:
    """A fetcher caches thousands of series, most too short to keep states: each is one
    object for the cyclic collector to walk, all of them sharing one lock."""
    times = np.arange(4 * series_folds.MIN_BLOCK, dtype=np.int64)
    short = [SeriesFolds(times, times) for _ in range(100)]
    assert tracked_objects(short) <= 100 + 1  # no instance dict, no lock of its own
