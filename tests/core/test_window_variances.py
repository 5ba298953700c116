"""The sweep's ``variance`` and ``stddev`` kernel equals the core aggregators on every run.

No Spark: hypothesis draws arrays of doubles (NaN, ±inf, ``-0.0``, constants, huge values and
values far from zero with a small spread), and runs ``[lo, hi)`` of them; the kernel's
variance of each run must equal, within the oracle tests' 1e-9, what
:class:`~timetile.core.aggregators.moments.Variance` folds from the same values, with the
same nulls, NaN and infinities, and exactly 0.0 for a constant run.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.aggregators.moments import Variance
from timetile.core.kernels.sweep import moment_tree, window_variances
from timetile.core.types import ValueType
from timetile.testing import same_value

SPECIAL = st.sampled_from([0.0, -0.0, 1.0, math.nan, math.inf, -math.inf, 1e200, -1e200])
FAR = st.floats(-1.0, 1.0).map(lambda x: 1e9 + x)  # far from zero, a small spread
VALUES = st.lists(st.floats(-1e6, 1e6) | SPECIAL | FAR, max_size=60)


def core_variance(values: np.ndarray) -> float | None:
    aggregator = Variance(ValueType.FLOAT)
    return aggregator.finalize(aggregator.fold(values, np.zeros(len(values), dtype=np.int64)))


@settings(max_examples=400, deadline=None)
@given(VALUES, st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1,
                        max_size=20))
def test_each_run_equals_the_core_variance(values: list[float],
                                           runs: list[tuple[int, int]]) -> None:
    array = np.array(values, dtype=np.float64)
    lows = np.array([min(a, b, len(values)) for a, b in runs], dtype=np.int64)
    highs = np.array([min(max(a, b), len(values)) for a, b in runs], dtype=np.int64)
    variances, null = window_variances(moment_tree(array), lows, highs)
    for low, high, variance, is_null in zip(lows, highs, variances, null, strict=True):
        expected = core_variance(array[low:high])
        ours = None if is_null else float(variance)
        assert (ours is None) == (expected is None), (array[low:high], ours, expected)
        if ours is not None and expected is not None:
            assert same_value(ours, expected), (array[low:high], ours, expected)


def test_a_constant_run_is_exactly_zero_and_far_values_keep_their_spread() -> None:
    constant = np.full(1000, 0.1)
    spread = 1e9 + np.arange(1000) % 2  # mean 1e9 + 0.5, variance about 0.25
    values = np.concatenate([constant, spread, [5.0]])
    lows, highs = np.array([0, 1000, 2000, 1990]), np.array([1000, 2000, 2001, 2001])
    variances, null = window_variances(moment_tree(values), lows, highs)
    assert variances[0] == 0.0
    assert same_value(float(variances[1]), 1000 / 4 / 999)
    assert null.tolist() == [False, False, True, False]
    assert same_value(float(variances[3]), core_variance(values[1990:2001]))
