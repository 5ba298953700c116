"""What each op returns (DESIGN §2): hand-written cases, Spark's edge cases, error bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aggregator_strategies import ALL_CASES, build, column, empty_result, fold_parts, is_nan, run
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.aggregators import OPS, make_aggregator
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.aggregators.exact import exact_float_sum, exact_int_sum, scaled_to_float
from timetile.core.types import ResultType, Shape, ValueType

NAN, INF = math.nan, math.inf
MAX = 1.7976931348623157e308
PYTHON_TYPES = {
    ValueType.INT: int,
    ValueType.FLOAT: float,
    ValueType.STRING: str,
    ValueType.BOOL: bool,
}


# --- empty windows, result types -----------------------------------------------------------


@pytest.mark.parametrize(("op", "value_type"), ALL_CASES, ids=lambda x: getattr(x, "value", x))
def test_empty_input_and_result_type(op: str, value_type: ValueType) -> None:
    agg = build(op, value_type)
    expected_empty = empty_result(op)
    assert agg.finalize(agg.init()) == expected_empty
    assert agg.finalize(agg.fold(column(value_type, []), np.array([], np.int64))) == expected_empty

    sample = {
        ValueType.INT: [3, -1, 3],
        ValueType.FLOAT: [2.5, -1.0, 2.5],
        ValueType.STRING: ["b", "a", "b"],
        ValueType.BOOL: [True, False, True],
    }[value_type]
    result = agg.finalize(agg.fold(column(value_type, sample), np.array([1, 2, 2])))
    kind: ResultType = agg.result_type()
    if kind.shape is Shape.SCALAR:
        assert type(result) is PYTHON_TYPES[kind.element]
    elif kind.shape is Shape.ARRAY:
        assert all(type(item) is PYTHON_TYPES[kind.element] for item in result)
    else:
        assert kind.key is value_type
        assert all(type(key) is PYTHON_TYPES[value_type] for key in result)
        assert all(type(count) is int for count in result.values())


def test_registry_declares_capabilities() -> None:
    invertible = {op for op, spec in OPS.items() if spec.invertible}
    assert invertible == {"count", "sum", "avg", "unique_count", "histogram"}
    numeric = {op for op, spec in OPS.items() if spec.numeric_only}
    assert numeric == {
        "sum", "avg", "variance", "stddev", "skew", "kurtosis", "approx_percentile",
        "decayed_sum", "decayed_avg",
    }
    approximate = {op for op, spec in OPS.items() if spec.factory.approximate}
    assert approximate == {"approx_unique_count", "approx_percentile"}
    for op in approximate:
        assert OPS[op].factory.error_bound


# --- constructor validation ----------------------------------------------------------------


@pytest.mark.parametrize("op", [op for op, spec in OPS.items() if spec.numeric_only])
@pytest.mark.parametrize("value_type", [ValueType.STRING, ValueType.BOOL])
def test_numeric_ops_reject_non_numeric_columns(op: str, value_type: ValueType) -> None:
    with pytest.raises(TypeError, match="numeric"):
        build(op, value_type)


@pytest.mark.parametrize("op", ["first_k", "last_k", "top_k", "bottom_k"])
def test_k_must_be_a_positive_integer(op: str) -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="at least 1"):
            make_aggregator(op, ValueType.INT, k=bad)
    for wrong in (1.5, True):
        with pytest.raises(TypeError):
            make_aggregator(op, ValueType.INT, k=wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs k"):
        make_aggregator(op, ValueType.INT)
    assert make_aggregator(op, ValueType.INT, k=np.int64(2)).k == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [[1.5], [-0.1], [0.5, NAN], []])
def test_percentiles_must_lie_in_the_unit_interval(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="percentile"):
        make_aggregator("approx_percentile", ValueType.FLOAT, percentiles=bad)


def test_unknown_op() -> None:
    with pytest.raises(KeyError):
        make_aggregator("median", ValueType.FLOAT)


def test_repr_names_the_parameters() -> None:
    assert repr(make_aggregator("top_k", ValueType.INT, k=3)) == "TopK(int, k=3)"
    agg = make_aggregator("approx_percentile", ValueType.FLOAT, percentiles=[0.5, 1])
    assert repr(agg) == "ApproxPercentile(float, percentiles=[0.5, 1.0])"
    assert repr(make_aggregator("sum", ValueType.FLOAT)) == "Sum(float)"


def test_non_invertible_ops_refuse_to_retract() -> None:
    agg = make_aggregator("max", ValueType.INT)
    with pytest.raises(TypeError, match="not invertible"):
        agg.retract(agg.init(), np.array([1]), np.array([0]))


def test_misaligned_times_are_rejected() -> None:
    agg = make_aggregator("last", ValueType.INT)
    with pytest.raises(ValueError, match="times"):
        agg.fold(np.array([1, 2]), np.array([0]))


# --- count, sum, avg -----------------------------------------------------------------------


def test_count() -> None:
    assert run("count", [NAN, 1.0, NAN]) == 3
    assert run("count", ["", "a"], value_type=ValueType.STRING) == 2
    agg = make_aggregator("count", ValueType.INT)
    zero = np.zeros(3, np.int64)
    state = agg.retract(agg.fold(np.array([1, 2, 3]), zero), np.array([2]), zero[:1])
    assert agg.finalize(state) == 2
    with pytest.raises(ValueError, match="retracted"):
        agg.finalize(agg.retract(agg.init(), np.array([1]), np.zeros(1, np.int64)))


def test_sum_of_ints_is_exact_to_int64_and_refused_beyond() -> None:
    """The state is exact past int64; the result is refused there, as Spark SQL refuses it."""
    big = 2**63 - 1
    assert run("sum", [big, big, 1, -big, -big], value_type=ValueType.INT) == 1
    low = -(2**63)
    assert run("sum", [low, 2**62, 2**62, -(2**62)], value_type=ValueType.INT) == low + 2**62
    assert run("sum", [0], value_type=ValueType.INT) == 0
    with pytest.raises(ResultOverflowError, match=r"past int64.*Fix: cast the column to double"):
        run("sum", [big, big, 1], value_type=ValueType.INT)
    with pytest.raises(ResultOverflowError):
        run("sum", [-(2**63)] * 3, value_type=ValueType.INT)
    assert run("avg", [big, big, 1], value_type=ValueType.INT) == float(2 * big + 1) / 3


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.1, 0.2, 0.3], 0.6),  # rounded once: a running double sum gives 0.6000000000000001
        ([1e100, 1.0, -1e100], 1.0),
        ([-0.0], 0.0),
        ([5e-324, 5e-324], 1e-323),
        ([1.0, NAN], NAN),
        ([INF, 1.0], INF),
        ([-INF, 1.0], -INF),
        ([INF, -INF], NAN),
        ([INF, INF, NAN], NAN),
        ([MAX, MAX], INF),  # the exact sum leaves the double range
        ([MAX, MAX, -MAX], MAX),  # exact; Spark's running sum gives inf or MAX by input order
    ],
)
def test_sum_of_floats(values: list[float], expected: float) -> None:
    got = run("sum", values)
    assert (is_nan(got) and is_nan(expected)) or got == expected


def test_sum_retracts_specials_exactly() -> None:
    agg = make_aggregator("sum", ValueType.FLOAT)
    zero = np.zeros(4, np.int64)
    state = agg.fold(np.array([INF, -INF, 0.1, NAN]), zero)
    assert is_nan(agg.finalize(state))
    state = agg.retract(state, np.array([NAN]), zero[:1])
    assert is_nan(agg.finalize(state))  # +inf and -inf remain
    state = agg.retract(state, np.array([-INF]), zero[:1])
    assert agg.finalize(state) == INF
    state = agg.retract(state, np.array([INF]), zero[:1])
    assert agg.finalize(state) == 0.1
    assert agg.finalize(agg.retract(state, np.array([0.1]), zero[:1])) is None


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=30))
@settings(max_examples=200, deadline=None)
def test_exact_float_sum_matches_fsum(values: list[float]) -> None:
    try:
        expected = math.fsum(values)
    except OverflowError:
        return  # fsum gives up where the exact sum leaves the double range
    assert scaled_to_float(exact_float_sum(np.array(values, dtype=np.float64))) == expected


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30))
@settings(max_examples=100, deadline=None)
def test_exact_int_sum(values: list[int]) -> None:
    assert exact_int_sum(np.array(values, dtype=np.int64)) == sum(values)


def test_avg() -> None:
    assert run("avg", [1, 2], value_type=ValueType.INT) == 1.5
    big = 2**63 - 1
    assert run("avg", [big, big], value_type=ValueType.INT) == 9.223372036854776e18  # as Spark
    assert run("avg", [0.1, 0.2, 0.3]) == 0.6 / 3
    assert is_nan(run("avg", [INF, -INF]))
    assert run("avg", [INF, 1.0]) == INF
    assert run("avg", [MAX, MAX]) == INF  # sum / n, and the sum overflows, as in Spark
    assert run("avg", [], value_type=ValueType.INT) is None


# --- min, max, first, last -----------------------------------------------------------------


def test_min_max_follow_spark_order() -> None:
    assert is_nan(run("max", [1.0, NAN]))
    assert run("min", [1.0, NAN]) == 1.0
    assert is_nan(run("min", [NAN, NAN]))
    assert is_nan(run("max", [INF, NAN]))
    assert run("min", [-INF, NAN, INF]) == -INF
    assert math.copysign(1.0, run("min", [-0.0, 0.0])) == 1.0  # one zero, reported as 0.0
    assert math.copysign(1.0, run("max", [-0.0])) == 1.0
    strings = ["a", "B", "ä", "😀", "z", ""]
    assert run("min", strings, value_type=ValueType.STRING) == ""
    assert run("max", strings, value_type=ValueType.STRING) == "😀"  # by code point
    assert run("min", [True, False], value_type=ValueType.BOOL) is False
    assert run("max", [True, False], value_type=ValueType.BOOL) is True
    assert run("max", [2**63 - 1, -(2**63)], value_type=ValueType.INT) == 2**63 - 1


def test_min_max_across_batches() -> None:
    agg = make_aggregator("max", ValueType.FLOAT)
    assert is_nan(agg.finalize(fold_parts(agg, [[1.0], [NAN], [2.0]])))
    agg = make_aggregator("min", ValueType.STRING)
    assert agg.finalize(fold_parts(agg, [["b"], [], ["a", "c"]])) == "a"


def test_first_last_break_time_ties_by_value() -> None:
    assert run("first", [5, 3, 9], [2, 2, 4], ValueType.INT) == 3
    assert run("last", [5, 3, 9], [2, 2, 4], ValueType.INT) == 9
    assert run("last", [5, 3, 1], [2, 2, 1], ValueType.INT) == 5
    assert is_nan(run("last", [1.0, NAN, 7.0], [3, 3, 1]))  # NaN is the greatest value
    assert run("first", [NAN, 1.0], [3, 3]) == 1.0
    assert run("first", ["b", "a", "c"], [1, 1, 0], ValueType.STRING) == "c"
    assert run("first", ["b", "a"], [1, 1], ValueType.STRING) == "a"
    assert run("last", [False, True], [1, 1], ValueType.BOOL) is True


def test_first_last_across_batches() -> None:
    agg = make_aggregator("first", ValueType.INT)
    state = fold_parts(agg, [[1, 2], [3], [4]], [[5, 6], [1], [1]])
    assert agg.finalize(state) == 3  # times tie at 1: the lesser value
    agg = make_aggregator("last", ValueType.INT)
    assert agg.finalize(fold_parts(agg, [[1, 2], [3]], [[5, 9], [9]])) == 3


# --- first_k, last_k, top_k, bottom_k ------------------------------------------------------


def test_top_and_bottom_k() -> None:
    values = [3.0, NAN, 1.0, INF, 3.0, -0.0, -INF]
    top = run("top_k", values, k=4)
    assert is_nan(top[0])
    assert top[1:] == [INF, 3.0, 3.0]  # duplicates kept
    assert run("bottom_k", values, k=3) == [-INF, 0.0, 1.0]
    assert is_nan(run("bottom_k", [NAN, NAN], k=3)[1])
    assert run("top_k", [2, 1], value_type=ValueType.INT, k=5) == [2, 1]  # fewer than k
    assert run("bottom_k", ["b", "", "ä", "a"], value_type=ValueType.STRING, k=2) == ["", "a"]
    assert run("top_k", ["b", "", "ä", "a"], value_type=ValueType.STRING, k=2) == ["ä", "b"]
    assert run("top_k", [False, True, True], value_type=ValueType.BOOL, k=2) == [True, True]


def test_first_and_last_k() -> None:
    values, times = [5, 3, 9, 7, 3], [2, 2, 1, 4, 2]
    assert run("first_k", values, times, ValueType.INT, k=3) == [9, 3, 3]
    assert run("last_k", values, times, ValueType.INT, k=3) == [7, 5, 3]
    assert run("last_k", values, times, ValueType.INT, k=10) == [7, 5, 3, 3, 9]
    assert run("first_k", [1.0, NAN, 0.5], [0, 0, 0], k=2) == [0.5, 1.0]
    last = run("last_k", [1.0, NAN, 0.5], [0, 0, 0], k=2)
    assert is_nan(last[0])
    assert last[1] == 1.0


def test_ranked_ops_across_batches_and_bounded_state() -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 50, 5_000)
    times = rng.integers(0, 100, 5_000)
    for op, key in [
        ("top_k", lambda i: -values[i]),
        ("bottom_k", lambda i: values[i]),
        ("first_k", lambda i: (times[i], values[i])),
        ("last_k", lambda i: (-times[i], -values[i])),
    ]:
        agg = make_aggregator(op, ValueType.INT, k=7)
        state = agg.init()
        for chunk in np.array_split(np.arange(5_000), 13):
            state = agg.update(state, values[chunk], times[chunk])
            assert len(state) <= 7
        expected = [int(values[i]) for i in sorted(range(5_000), key=key)[:7]]
        assert agg.finalize(state) == expected, op


# --- moments -------------------------------------------------------------------------------


MOMENT_OPS = ("variance", "stddev", "skew", "kurtosis")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], [None, None, None, None]),
        ([5.0], [None, None, None, None]),
        ([1.0, 2.0], [0.5, math.sqrt(0.5), 0.0, -2.0]),
        ([0.1, 0.1, 0.1], [0.0, 0.0, None, None]),
        ([INF], [None, None, NAN, NAN]),
        ([INF, INF], [NAN, NAN, NAN, NAN]),
        ([1.0, NAN], [NAN, NAN, NAN, NAN]),
        ([-INF, 1.0, 2.0], [NAN, NAN, NAN, NAN]),
    ],
)
def test_moments_follow_spark(values: list[float], expected: list[float | None]) -> None:
    for op, want in zip(MOMENT_OPS, expected, strict=True):
        got = run(op, values)
        assert (is_nan(got) and is_nan(want)) or got == want, (op, got, want)


def test_constant_data_stays_exactly_constant_across_merges() -> None:
    for op in MOMENT_OPS:
        agg = make_aggregator(op, ValueType.FLOAT)
        state = fold_parts(agg, [[0.1], [0.1, 0.1], [], [0.1, 0.1, 0.1]])
        assert agg.finalize(state) == {"variance": 0.0, "stddev": 0.0}.get(op)


def test_moments_match_direct_formulas() -> None:
    rng = np.random.default_rng(11)
    values = rng.gamma(2.0, 3.0, 20_000) + 1_000.0
    deviation = values - values.mean()
    n = len(values)
    m2, m3, m4 = (float((deviation**p).sum()) for p in (2, 3, 4))
    expected = {
        "variance": m2 / (n - 1),
        "stddev": math.sqrt(m2 / (n - 1)),
        "skew": math.sqrt(n) * m3 / m2**1.5,
        "kurtosis": n * m4 / m2**2 - 3.0,
    }
    parts = np.array_split(values, 17)
    for op, want in expected.items():
        agg = make_aggregator(op, ValueType.FLOAT)
        state = agg.init()
        for part in parts:
            state = agg.merge(state, agg.fold(part, np.zeros(len(part), np.int64)))
        assert math.isclose(agg.finalize(state), want, rel_tol=1e-10), op


def test_moments_overflow_to_inf_as_spark_does() -> None:
    # The sum of the two -1e308 overflows, their mean does not; Spark's var_samp gives inf.
    values = [124.8, -1e308, 66.7, -14.9, -1e308, 13.0]
    for cut in range(len(values) + 1):
        agg = make_aggregator("variance", ValueType.FLOAT)
        assert agg.finalize(fold_parts(agg, [values[:cut], values[cut:]])) == INF


def test_moments_of_ints() -> None:
    assert run("variance", [1, 2, 3, 4], value_type=ValueType.INT) == pytest.approx(5 / 3)
    assert run("skew", [7, 7], value_type=ValueType.INT) is None


# --- unique_count, histogram ---------------------------------------------------------------


def test_unique_count_identifies_nans_and_zeros() -> None:
    other_nan = np.frombuffer(np.array([0x7FF8000000000001], np.uint64).tobytes(), np.float64)[0]
    values = [0.0, -0.0, NAN, float(other_nan), 1.0, 1.0]
    assert run("unique_count", values) == 3
    assert run("unique_count", ["", "a", "", "A"], value_type=ValueType.STRING) == 3
    assert run("unique_count", [True, True], value_type=ValueType.BOOL) == 1


def test_histogram() -> None:
    result = run("histogram", [2.0, NAN, -0.0, 0.0, 2.0, NAN, -INF])
    assert list(result.values()) == [1, 2, 2, 2]
    keys = list(result)
    assert keys[:3] == [-INF, 0.0, 2.0]
    assert is_nan(keys[3])
    assert run("histogram", ["b", "a", "b"], value_type=ValueType.STRING) == {"a": 1, "b": 2}


def test_distinct_retraction_drops_zeros_and_guards_negatives() -> None:
    agg = make_aggregator("histogram", ValueType.INT)
    zero = np.zeros(3, np.int64)
    state = agg.retract(agg.fold(np.array([1, 1, 2]), zero), np.array([1, 1]), zero[:2])
    assert agg.finalize(state) == {2: 1}
    assert agg.finalize(agg.retract(state, np.array([2]), zero[:1])) is None
    negative = agg.retract(state, np.array([5]), zero[:1])
    with pytest.raises(ValueError, match="retracted"):
        agg.finalize(negative)
    unique = make_aggregator("unique_count", ValueType.INT)
    assert unique.finalize(unique.merge(negative, unique.fold(np.array([5]), zero[:1]))) == 1
