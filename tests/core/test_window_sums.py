"""The sweep's ``sum`` kernels equal the core ``Sum`` on every run, with or without shared prefixes.

No Spark: hypothesis draws doubles (NaN, ±inf, ``-0.0``, huge and tiny magnitudes) and
several sets of runs ``[lo, hi)`` over them, as the sweep has one set per window. Prefix sums
computed once and passed to each set give the same sums as computing them per call, and
``Sum``'s vectorized finalizer of them equals, bit for bit, what
:class:`~timetile.core.aggregators.counting.Sum` folds and finalizes from the run (null for an
empty run): the online fetcher's answer. Integers too, exact past int64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from timetile.core.aggregators.counting import Sum
from timetile.core.aggregators.exact import (
    MAX_PARTIALS,
    exact_float_sum,
    rounded_run_sum,
    scaled_to_float,
)
from timetile.core.equality import same_value
from timetile.core.kernels.sweep import (
    float_prefix_sums,
    int_prefix_sums,
    run_sums,
    window_sums,
)
from timetile.core.types import ValueType

SPECIAL = st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1e300, -1e300, 1e-300])
VALUES = st.lists(st.floats(-1e6, 1e6) | SPECIAL, max_size=50)
#: Small values after huge ones: the prefixes' low words then carry every small value, and
#: a run of small values ends up near a rounding boundary (a huge earlier event, 0.1 + 0.2).
CANCELLING = st.lists(st.sampled_from([1e16, -1e16, 1e17, 3.0, 1.0, 0.1, 0.2, 0.3, 1e-15,
                                       -0.1, 2.0**-60, 5e-324])
                      | st.floats(-1.0, 1.0), max_size=60)


def core_sum(values: np.ndarray, value_type: ValueType) -> object:
    aggregator = Sum(value_type)
    return aggregator.finalize(aggregator.fold(values, np.zeros(len(values), dtype=np.int64)))


def runs_of(data: st.DataObject, size: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = data.draw(st.lists(st.tuples(st.integers(0, size), st.integers(0, size)),
                               min_size=1, max_size=8))
    lows = np.array([min(pair) for pair in pairs], dtype=np.int64)
    highs = np.array([max(pair) for pair in pairs], dtype=np.int64)
    return lows, highs


@given(VALUES | CANCELLING, st.data())
def test_shared_float_prefix_sums_equal_the_core_sum(values: list[float],
                                                      data: st.DataObject) -> None:
    array = np.array(values, dtype=np.float64)
    prefix = float_prefix_sums(array)
    finalizer = Sum(ValueType.FLOAT)
    for _ in range(3):  # one set of runs per window, all reading the one prefix
        lows, highs = runs_of(data, len(array))
        shared = finalizer.finalize_many(run_sums(array, lows, highs, prefix))
        alone = finalizer.finalize_many(run_sums(array, lows, highs))
        assert shared.null.tolist() == alone.null.tolist() == (highs == lows).tolist()
        for low, high, ours, again, null in zip(lows, highs, shared.values, alone.values,
                                                shared.null, strict=True):
            assert same_value(float(ours), float(again), rel_tol=0.0)
            run = array[low:high]
            expected = core_sum(run, ValueType.FLOAT)
            assert (expected is None) == null
            if expected is not None:
                assert same_value(float(ours), expected, rel_tol=0.0), (run, ours, expected)
                assert math.copysign(1.0, float(ours)) == math.copysign(1.0, expected)


def test_small_sums_after_a_huge_value_are_correctly_rounded() -> None:
    """The low words carry them; a bound of 1e-12 once let ~74 ulps through."""
    values = np.array([1e17, 0.1, 0.2, 1e16, 1.0, *[1e-15] * 150])
    sums = window_sums(values, np.array([2, 1, 4]), np.array([3, 3, 155]))
    assert sums.tolist() == [0.2, 0.30000000000000004, 1.00000000000015]


def test_ties_deep_in_a_column_are_rounded_as_the_exact_sum() -> None:
    """Half of all sums of two values with one exponent are ties, and the prefixes' slack
    cannot tell which way such a sum rounds: the runs are summed again. A tie rounds to
    even, unless a third, tiny value tips it: left-to-right addition gets those wrong."""
    rng = np.random.default_rng(5)
    triples = [(64.0 + odd * 2.0**-46, 64.0, tip) for odd in range(1, 400, 2)
               for tip in (0.0, 2.0**-100, -(2.0**-100))]
    values = np.concatenate([rng.random(5_000) * 100, np.array(triples).ravel()])
    lows = np.arange(5_000, len(values), 3)
    sums = window_sums(values, lows, lows + 3)
    expected = [math.fsum(triple) for triple in triples]
    assert sums.tolist() == expected
    naive = [(a + b) + c for a, b, c in triples]
    assert sum(ours != left for ours, left in zip(expected, naive, strict=True)) > 100


def test_a_run_whose_partial_sums_overflow_is_summed_with_integers() -> None:
    values = np.array([1.0, 1e308, 1e308, -1e308, 0.5, -1e308, -1e308])
    sums = window_sums(values, np.array([1, 0, 1]), np.array([4, 5, 7]))
    assert sums.tolist() == [1e308, 1e308 + 1.5, -1e308]


FINITE = st.floats(allow_nan=False, allow_infinity=False)


@given(st.lists(FINITE | st.sampled_from([math.nan, math.inf, -0.0, 5e-324]), max_size=40))
def test_the_compiled_rounded_sum_equals_the_integer_one(values: list[float]) -> None:
    array = np.array(values, dtype=np.float64)
    total, summed = rounded_run_sum(array, 0, len(array), np.empty(MAX_PARTIALS))
    exact = scaled_to_float(exact_float_sum(array[np.isfinite(array)]))
    if summed:
        assert same_value(total, exact, rel_tol=0.0)
        assert math.copysign(1.0, total) == math.copysign(1.0, exact)  # 0.0, never -0.0
    else:  # it gives up only where a partial sum leaves the double range
        assert any(abs(value) > 1e307 for value in values if math.isfinite(value))


def test_prefix_sums_of_other_values_are_refused() -> None:
    prefix = float_prefix_sums(np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match="other values"):
        window_sums(np.array([1.0, 2.0, 3.0]), np.array([0]), np.array([3]), prefix)


@given(st.lists(st.integers(-(2**40), 2**40), max_size=50), st.data())
def test_integer_prefix_sums_equal_the_core_sum(values: list[int],
                                                 data: st.DataObject) -> None:
    array = np.array(values, dtype=np.int64)
    prefix = int_prefix_sums(array)
    lows, highs = runs_of(data, len(array))
    sums = prefix[highs] - prefix[lows]
    for low, high, ours in zip(lows, highs, sums, strict=True):
        run = array[low:high]
        assert int(ours) == (core_sum(run, ValueType.INT) if len(run) else 0)
