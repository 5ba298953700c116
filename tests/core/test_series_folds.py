"""Kept states stand in for the events they hold: an anchored run folds as one batch.

One sorted series (many events per millisecond) answers runs from a few anchors in a random
order, as fetches at random times do, with checkpoints every few events (``MIN_BLOCK`` 1):
the kept state plus a fold of the rest equals one fold of the run, for every op. A
checkpoint never splits the events of one millisecond, and the rest stays short.
"""

from __future__ import annotations

import threading
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from aggregator_strategies import CASES, batches, build, same
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core import series_folds
from timetile.core.aggregators import Aggregator, make_aggregator
from timetile.core.series_folds import SeriesFolds
from timetile.core.types import ValueType


def covered(folds: SeriesFolds, aggregator: Aggregator[Any], lo: int, hi: int,
            anchor: int | None) -> Any:
    """The run's state as a fetch makes it: the kept state merged with a fold of the rest."""
    kept, a, b = folds.cover(aggregator, lo, hi, anchor)
    rest = aggregator.fold(folds.values[a:b], folds.times[a:b])
    if kept is None:
        assert (a, b) == (lo, hi)
        return rest
    assert lo <= a <= b <= hi
    assert a == lo or b == hi
    cut = a if a > lo else b  # where the kept state ends (or begins)
    if 0 < cut < len(folds):
        assert folds.times[cut - 1] < folds.times[cut], "a checkpoint splits one millisecond"
    return aggregator.merge(kept, rest) if a > lo else aggregator.merge(rest, kept)


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
    with patch.object(series_folds, "MIN_BLOCK", 1):
        for _ in range(25):
            anchor = int(rng.choice(anchors))
            other = int(rng.integers(0, n + 1))
            lo, hi = min(anchor, other), max(anchor, other)
            got = aggregator.finalize(covered(folds, aggregator, lo, hi, anchor))
            want = aggregator.finalize(aggregator.fold(folds.values[lo:hi], folds.times[lo:hi]))
            assert same(op, got, want), (lo, hi, anchor, got, want)
            free = aggregator.finalize(covered(folds, aggregator, lo, hi, None))
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
            _, a, b = folds.cover(aggregator, lo, hi, anchor)
            assert b - a <= 1_264 + 1_000  # a block, and the rest of one millisecond
            assert aggregator.finalize(covered(folds, aggregator, lo, hi, anchor)) == (
                sum(range(lo, hi)) if lo < hi else None)
    assert 2 <= folds.kept_states <= 2 * (n // 1_264 + 1)
    folds._check()


def test_runs_of_ops_that_keep_nothing_and_short_runs_fold_whole() -> None:
    times = np.arange(1_000, dtype=np.int64)
    folds = SeriesFolds(times.astype(np.float64), times)
    percentile = make_aggregator("approx_percentile", ValueType.FLOAT, percentiles=[0.5])
    assert folds.cover(percentile, 0, 1_000, 0) == (None, 0, 1_000)  # KLL cuts randomly
    total = make_aggregator("sum", ValueType.FLOAT)
    assert folds.cover(total, 10, 50, 10) == (None, 10, 50)  # a short run
    assert folds.cover(total, 0, 1_000, None) == (None, 0, 1_000)  # no end stays put
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
    with patch.object(series_folds, "MIN_BLOCK", 1):
        for n in sorted({int(m) for m in rng.integers(1, 241, 5)} | {240}):
            folds = SeriesFolds(values[:n], times[:n], after=before)
            carried = folds.kept_states
            for _ in range(10):
                anchor = int(rng.choice([0, n // 2, n]))
                other = int(rng.integers(0, n + 1))
                lo, hi = min(anchor, other), max(anchor, other)
                got = aggregator.finalize(covered(folds, aggregator, lo, hi, anchor))
                assert same(op, got, aggregator.finalize(aggregator.fold(values[lo:hi],
                                                                         times[lo:hi])))
            assert folds.kept_states >= carried
            folds._check()
            before = folds


def test_a_series_that_does_not_begin_with_the_other_carries_nothing() -> None:
    aggregator = make_aggregator("sum", ValueType.INT)
    times = np.arange(400, dtype=np.int64)
    first = SeriesFolds(times, times)
    covered(first, aggregator, 0, 400, 0)
    assert first.kept_states > 0
    assert SeriesFolds(times + 1, times + 1, after=first).kept_states == 0
    assert SeriesFolds(times[:300], times[:300], after=first).kept_states == 0
    assert SeriesFolds(np.arange(500), np.arange(500), after=first).kept_states > 0
