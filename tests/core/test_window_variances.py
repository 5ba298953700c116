"""The sweep's ``variance`` and ``stddev`` kernel equals the core aggregators on every run.

No Spark: hypothesis draws arrays of doubles (NaN, ±inf, ``-0.0``, constants, huge values and
values far from zero with a small spread), and runs ``[lo, hi)`` of them; the kernel's
variance of each run must equal, within the oracle tests' 1e-9, what
:class:`~timetile.core.aggregators.moments.Variance` folds from the same values, with the
same nulls, NaN and infinities, and exactly 0.0 for a constant run. A seeded stress test
checks the tree's invariants and its accuracy against exact rational arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from timetile.core.aggregators.moments import Variance
from timetile.core.kernels.sweep import check_moment_tree, moment_tree, window_variances
from timetile.core.types import ValueType
from timetile.testing import same_value

SPECIAL = st.sampled_from([0.0, -0.0, 1.0, math.nan, math.inf, -math.inf, 1e200, -1e200])
FAR = st.floats(-1.0, 1.0).map(lambda x: 1e9 + x)  # far from zero, a small spread
VALUES = st.lists(st.floats(-1e6, 1e6) | SPECIAL | FAR, max_size=60)


def core_variance(values: np.ndarray) -> float | None:
    aggregator = Variance(ValueType.FLOAT)
    return aggregator.finalize(aggregator.fold(values, np.zeros(len(values), dtype=np.int64)))


def exact_variance(values: np.ndarray) -> float:
    exact = [Fraction(value) for value in values]
    mean = sum(exact, Fraction(0)) / len(exact)
    return float(sum(((value - mean) ** 2 for value in exact), Fraction(0)) / (len(exact) - 1))


@settings(max_examples=400, deadline=None)
@given(VALUES, st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1,
                        max_size=20))
@example([1e9, 1e9 + 0.9, 1e9 - 0.7], [(0, 3)])  # a mean rounded to one double fails this
def test_each_run_equals_the_core_variance(values: list[float],
                                           runs: list[tuple[int, int]]) -> None:
    array = np.array(values, dtype=np.float64)
    lows = np.array([min(a, b, len(values)) for a, b in runs], dtype=np.int64)
    highs = np.array([min(max(a, b), len(values)) for a, b in runs], dtype=np.int64)
    tree = moment_tree(array)
    check_moment_tree(tree, array)
    variances, null = window_variances(tree, lows, highs)
    for low, high, variance, is_null in zip(lows, highs, variances, null, strict=True):
        expected = core_variance(array[low:high])
        ours = None if is_null else float(variance)
        assert (ours is None) == (expected is None), (array[low:high], ours, expected)
        if ours is not None and expected is not None:
            assert same_value(ours, expected), (array[low:high], ours, expected)


def test_far_from_zero_the_variance_is_exact_to_the_last_bits() -> None:
    """Values around ±1e15 spread by 10, and around 0: 1,500 random runs, each within 1e-14
    of the exact rational variance; the tree checks itself after every build."""
    rng = np.random.default_rng(7)
    worst = 0.0
    for center in (0.0, 1e9, -1e12, 1e15):
        for _ in range(30):
            values = center + rng.uniform(-10, 10, int(rng.integers(2, 300)))
            tree = moment_tree(values)
            check_moment_tree(tree, values)
            lows = rng.integers(0, len(values) - 1, 12)
            highs = np.minimum(lows + 2 + rng.integers(0, len(values), 12), len(values))
            variances, null = window_variances(tree, lows, highs)
            assert not null.any()
            for low, high, variance in zip(lows, highs, variances, strict=True):
                exact = exact_variance(values[low:high])
                worst = max(worst, abs(variance - exact) / exact)
    assert worst < 1e-14, worst


def test_a_constant_run_is_exactly_zero_and_fewer_than_two_values_are_null() -> None:
    values = np.concatenate([np.full(1000, 0.1), [-0.0, 0.0, 5.0]])
    lows, highs = np.array([0, 1000, 1002, 1002]), np.array([1000, 1002, 1003, 1002])
    variances, null = window_variances(moment_tree(values), lows, highs)
    assert variances[:2].tolist() == [0.0, 0.0]
    assert null.tolist() == [False, False, True, True]
