"""The sweep's moment tree equals the core aggregators on every run, for all four moment ops.

No Spark: hypothesis draws arrays of doubles (NaN, ±inf, ``-0.0``, constants, huge values and
values far from zero with a small spread), and runs ``[lo, hi)`` of them.

- ``variance`` and ``stddev`` must equal, within the oracle tests' 1e-9, what
  :class:`~timetile.core.aggregators.moments.Variance` and ``Stddev`` fold from the same
  values, with the same nulls, NaN and infinities, and exactly 0.0 for a constant run.
- ``skew`` and ``kurtosis`` must have the core's nulls and NaN, and within 1e-9 both the
  core's value and that of exact rational arithmetic. Both keep each mean as a double-double:
  rounded to one double, it shifts every deviation far from zero by about 1e-7, and ``m3``
  and ``m4``, unlike ``m2``, feel that at first order.

A seeded stress test checks the tree's invariants and its accuracy far from zero.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from exact_moments import exact_moments, exact_shape
from hypothesis import example, given, settings
from hypothesis import strategies as st

from timetile.core.aggregators import make_aggregator
from timetile.core.aggregators.columnar import RunMoments
from timetile.core.aggregators.moments import Kurtosis, Skew, Stddev, Variance
from timetile.core.kernels.moment_tree import check_moment_tree, moment_tree, window_moments
from timetile.core.types import ValueType
from timetile.testing import same_value

SPECIAL = st.sampled_from([0.0, -0.0, 1.0, math.nan, math.inf, -math.inf, 1e200, -1e200])
FAR = st.floats(-1.0, 1.0).map(lambda x: 1e9 + x)  # far from zero, a small spread
# No magnitudes below 1e-40: powers of deviations that small underflow (m4 below 1e-77, m3
# below 1e-103), and whether a run of them is constant (m2 exactly 0) then depends on the
# order of the arithmetic.
NEAR = st.floats(-1e6, 1e6).filter(lambda x: x == 0.0 or abs(x) > 1e-40)
VALUES = st.lists(NEAR | SPECIAL | FAR, max_size=60)
RUNS = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=20)
CORE = {"variance": Variance, "stddev": Stddev, "skew": Skew, "kurtosis": Kurtosis}
MOMENT_OPS = frozenset(CORE)


def moment_results(op: str, moments: RunMoments) -> tuple[np.ndarray, np.ndarray]:
    """The sweep's results of ``op``: its aggregator's vectorized finalizer of the runs."""
    results = CORE[op](ValueType.FLOAT).finalize_many(moments)
    return results.values, results.null


def core_result(op: str, values: np.ndarray) -> float | None:
    aggregator = CORE[op](ValueType.FLOAT)
    return aggregator.finalize(aggregator.fold(values, np.zeros(len(values), dtype=np.int64)))


def runs_of(runs: list[tuple[int, int]], length: int) -> tuple[np.ndarray, np.ndarray]:
    lows = np.array([min(a, b, length) for a, b in runs], dtype=np.int64)
    highs = np.array([min(max(a, b), length) for a, b in runs], dtype=np.int64)
    return lows, highs


@settings(max_examples=400, deadline=None)
@given(VALUES, RUNS)
@example([1e9, 1e9 + 0.9, 1e9 - 0.7], [(0, 3)])  # a mean rounded to one double fails this
def test_each_run_equals_the_core_moments(values: list[float],
                                          runs: list[tuple[int, int]]) -> None:
    array = np.array(values, dtype=np.float64)
    lows, highs = runs_of(runs, len(values))
    tree = moment_tree(array)
    check_moment_tree(tree, array)
    moments = window_moments(tree, lows, highs)
    for op in sorted(MOMENT_OPS):
        results, null = moment_results(op, moments)
        for low, high, result, is_null in zip(lows, highs, results, null, strict=True):
            run = array[low:high]
            expected = core_result(op, run)
            ours = None if is_null else float(result)
            assert (ours is None) == (expected is None), (op, run, ours, expected)
            if ours is None or expected is None:
                continue
            if op in ("variance", "stddev") or not math.isfinite(expected):
                assert same_value(ours, expected), (op, run, ours, expected)
            elif np.all(np.abs(run) < 1e100):  # else the powers overflow, as in the core
                exact = exact_shape(op, run)
                assert math.isclose(ours, exact, rel_tol=1e-9, abs_tol=1e-9), (
                    op, run, ours, exact)
                assert math.isclose(ours, expected, rel_tol=1e-9, abs_tol=1e-9), (
                    op, run, ours, expected)
            else:  # finite where the core is, though the overflow may differ in its bits
                assert math.isfinite(ours), (op, run, ours, expected)


def test_far_from_zero_every_moment_is_exact_to_the_last_bits() -> None:
    """Values 0, 1e9, -1e12 and 1e15 plus an exponential spread of mean 3 (skewed): 1,440
    random runs; the variance within 1e-14 of the exact rational one, relative, and skew and
    kurtosis within 1e-12 of theirs, absolute; the tree checks itself after every build."""
    rng = np.random.default_rng(7)
    worst = dict.fromkeys(("variance", "skew", "kurtosis"), 0.0)
    for center in (0.0, 1e9, -1e12, 1e15):
        for _ in range(30):
            values = center + rng.exponential(3.0, int(rng.integers(3, 300)))
            tree = moment_tree(values)
            check_moment_tree(tree, values)
            lows = rng.integers(0, len(values) - 2, 12)
            highs = np.minimum(lows + 3 + rng.integers(0, len(values), 12), len(values))
            moments = window_moments(tree, lows, highs)
            results = {op: moment_results(op, moments) for op in worst}
            for index, (low, high) in enumerate(zip(lows, highs, strict=True)):
                run = values[low:high]
                m2 = float(exact_moments(run)[0])
                assert not any(null[index] for _, null in results.values())
                worst["variance"] = max(worst["variance"], abs(
                    results["variance"][0][index] - m2 / (len(run) - 1)) / m2 * (len(run) - 1))
                for op in ("skew", "kurtosis"):
                    worst[op] = max(worst[op],
                                    abs(results[op][0][index] - exact_shape(op, run)))
    assert worst["variance"] < 1e-14, worst
    assert worst["skew"] < 1e-12, worst
    assert worst["kurtosis"] < 1e-12, worst


def test_constant_single_and_empty_runs_follow_spark() -> None:
    """A constant run: variance exactly 0.0, skew and kurtosis null. One value: all null. One
    NaN: variance null, skew and kurtosis NaN. No values: all null."""
    values = np.concatenate([np.full(1000, 0.1), [-0.0, 0.0, 5.0, math.nan]])
    lows, highs = np.array([0, 1000, 1002, 1003, 1002]), np.array([1000, 1002, 1003, 1004, 1002])
    moments = window_moments(moment_tree(values), lows, highs)
    variance, variance_null = moment_results("variance", moments)
    assert variance[:2].tolist() == [0.0, 0.0]
    assert variance_null.tolist() == [False, False, True, True, True]
    for op in ("skew", "kurtosis"):
        results, null = moment_results(op, moments)
        assert null.tolist() == [True, True, True, False, True], op
        assert math.isnan(results[3]), op


def test_an_unknown_op_is_refused() -> None:
    """An op that declares no column of states has no vectorized finalizer to misuse."""
    moments = window_moments(moment_tree(np.array([1.0, 2.0])), np.array([0]), np.array([2]))
    sketch = make_aggregator("approx_unique_count", ValueType.FLOAT)
    assert sketch.columnar is None
    with pytest.raises(TypeError, match="approx_unique_count has no vectorized finalizer"):
        sketch.finalize_many(moments)


@pytest.mark.parametrize("scale", [1e-60, 1e-100, 1e60, 1e100])
def test_skew_where_the_cube_of_m2_leaves_the_double_range(scale: float) -> None:
    """Spark's ``sqrt(m2 * m2 * m2)`` underflows to zero for values within 1e-52 of their
    mean (Spark then divides by zero) and overflows beyond 1e51: skew read inf, or 0.0.
    Skew is the same at every scale, in the core and in the sweep's tree alike."""
    values = np.array([0.94, -1.4, -0.68, 2.0, 0.31, 0.05])
    expected = exact_shape("skew", values)
    scaled = values * scale
    tree = moment_tree(scaled)
    lows, highs = runs_of([(0, len(values))], len(values))
    swept, null = moment_results("skew", window_moments(tree, lows, highs))
    assert not null[0]
    for found in (core_result("skew", scaled), float(swept[0])):
        assert found == pytest.approx(expected, rel=1e-12)
