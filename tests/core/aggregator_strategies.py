"""Hypothesis strategies, comparisons and the algebra's laws shared by the aggregator tests.

The laws (:class:`Flavor`) are written once and run by ``test_aggregator_laws`` on the plain
aggregators (:data:`PLAIN`) and by ``test_bucketed_laws`` on :class:`Bucketed` around them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from timetile.core.aggregators import OPS, Aggregator, make_aggregator
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.aggregators.codec import FORMAT_VERSION
from timetile.core.aggregators.sketches import HLL_RSE, KLL_K, KLL_RANK_ERROR, SKETCH_FORMAT
from timetile.core.types import ValueType

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
K = 3
PERCENTILES = (0.0, 0.1, 0.5, 0.9, 1.0)
MOMENT_OPS = {"variance", "stddev", "skew", "kurtosis"}
#: The decayed ops weigh values by irrational powers of two: floating point like the moments,
#: drawn and compared as they are.
DECAYED_OPS = {"decayed_count", "decayed_sum", "decayed_avg"}
#: A half-life of a few milliseconds: the drawn times (mostly 0..3) give weights from 1 down
#: to a few tenths, and far ones (±2**40) underflow.
HALF_LIFE = 3

#: Moments are computed in floating point, and merging reorders the rounding. With the values
#: drawn by :func:`batches` for them (an offset plus small integer steps, times a power of two) the
#: data are never nearly constant relative to their magnitude (|offset| / spread <= ~130), so
#: results of different cuts agree to ~1e-13; 1e-9 leaves a wide margin while still catching
#: any formula mistake (those show up at 1e-3 or worse). Skewness of symmetric data is 0 in
#: one cut and ~1e-16 in another, hence an absolute tolerance as well. The decayed ops too:
#: a merge rounds once more than one fold. Every other op is exact:
#: sum and avg keep exact integer sums, so they are compared with == (and NaN == NaN).
MOMENT_TOLERANCE = 1e-9

SPECIAL_FLOATS = [
    0.0, -0.0, math.nan, math.inf, -math.inf,
    5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
    1e300, -1e300, 1e-300, 0.1, 1.0, 2.0,
]

ALL_CASES = [
    (op, value_type)
    for op, spec in OPS.items()
    for value_type in ValueType
    if value_type.numeric or not spec.numeric_only
]


def build(op: str, value_type: ValueType) -> Aggregator[Any]:
    """The aggregator for ``op`` with the test parameters (k, percentiles, half-life)."""
    return make_aggregator(op, value_type, k=K, percentiles=PERCENTILES, half_life=HALF_LIFE)


#: Every case of :data:`ALL_CASES` as a pytest parameter of ``(op, value_type)``, and the
#: invertible ones alone.
CASES = [
    pytest.param(op, value_type, id=f"{op}-{value_type.value}") for op, value_type in ALL_CASES
]
INVERTIBLE_CASES = [
    pytest.param(op, value_type, id=f"{op}-{value_type.value}")
    for op, value_type in ALL_CASES
    if build(op, value_type).invertible
]


def scalars(value_type: ValueType) -> st.SearchStrategy[Any]:
    """Column values of every awkward kind, with many duplicates."""
    return _SCALARS[value_type]


_SCALARS: dict[ValueType, st.SearchStrategy[Any]] = {
    ValueType.INT: st.one_of(
        st.integers(-3, 3),
        st.sampled_from([INT64_MIN, INT64_MAX, INT64_MAX - 1, 2**53 + 1]),
        st.integers(INT64_MIN, INT64_MAX),
    ),
    ValueType.FLOAT: st.one_of(
        st.sampled_from(SPECIAL_FLOATS),
        st.integers(-3, 3).map(float),
        st.floats(allow_nan=True, allow_infinity=True),
    ),
    ValueType.STRING: st.one_of(
        st.sampled_from(["", "a", "b", "A", "ab", "ä", "日本", "😀", "\x00"]),
        st.text(max_size=4),
    ),
    ValueType.BOOL: st.booleans(),
}

_TIES = st.integers(0, 3)
TIMES = st.one_of(_TIES, _TIES, st.integers(-(2**40), 2**40))

# Moment data: small integer steps (or, rarely, a special value), then an offset and a
# power-of-two scale drawn once per example. Scaling by 2**e is exact, so huge and tiny data
# (2**-120 .. 2**120) are exactly as well conditioned as small integers.
_STEPS = st.one_of(*[st.integers(-30, 30)] * 6, st.sampled_from(["nan", "inf", "-inf", "-0"]))
_SPECIAL_STEPS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-0": -0.0}
_MOMENT_SCALE = st.tuples(st.sampled_from([0, 10, -100]), st.integers(-120, 120))


def _moment_value(value_type: ValueType, step: Any, offset: int, exponent: int) -> Any:
    if value_type is ValueType.INT:
        return (step if isinstance(step, int) else 0) * (1 << (exponent % 21)) + offset
    if isinstance(step, str):
        return _SPECIAL_STEPS[step]
    return math.ldexp(float(step + offset), exponent)


Batch = tuple[np.ndarray, np.ndarray]


@functools.cache
def batches(
    op: str, value_type: ValueType, count: int, max_size: int = 10
) -> st.SearchStrategy[list[Batch]]:
    """``count`` batches of (values, times) of at most ``max_size`` events; many ties in time."""
    moments = op in MOMENT_OPS | DECAYED_OPS
    step = _STEPS if moments else scalars(value_type)
    events = st.lists(st.tuples(step, TIMES), max_size=max_size)
    event_lists = st.lists(events, min_size=count, max_size=count)

    def build_batches(drawn: tuple[tuple[int, int], list[list[tuple[Any, int]]]]) -> list[Batch]:
        (offset, exponent), parts = drawn
        out = []
        for events in parts:
            values = [
                _moment_value(value_type, value, offset, exponent) if moments else value
                for value, _ in events
            ]
            out.append(to_batch(value_type, values, [time for _, time in events]))
        return out

    return st.tuples(_MOMENT_SCALE, event_lists).map(build_batches)


def to_batch(value_type: ValueType, values: list[Any], times: list[int]) -> Batch:
    """Arrays of the column's dtype and int64 times."""
    array = np.empty(len(values), dtype=value_type.numpy_dtype)
    array[:] = values
    return array, np.array(times, dtype=np.int64)


def concat(parts: list[Batch]) -> Batch:
    """One batch holding all of ``parts``, in order."""
    values = np.concatenate([values for values, _ in parts]) if parts else np.array([])
    times = np.concatenate([times for _, times in parts]) if parts else np.array([], np.int64)
    return values, times.astype(np.int64)


def same(op: str, got: Any, want: Any) -> bool:
    """Results agree: NaN equals NaN, moments within :data:`MOMENT_TOLERANCE`, maps in order."""
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(
            same(op, a, b) for a, b in zip(got, want, strict=True)
        )
    if isinstance(got, float) and isinstance(want, float):
        if math.isnan(got) or math.isnan(want):
            return math.isnan(got) and math.isnan(want)
        if op in MOMENT_OPS | DECAYED_OPS:
            return math.isclose(got, want, rel_tol=MOMENT_TOLERANCE, abs_tol=MOMENT_TOLERANCE)
        return got == want
    if isinstance(got, dict) and list(got) != list(want):  # NaN keys are one shared object
        return False
    return type(got) is type(want) and got == want


def true_distinct(value_type: ValueType, values: np.ndarray) -> int:
    """What ``approx_unique_count`` estimates: distinct values, '' not counted (DataSketches)."""
    items = values.tolist()
    if value_type is ValueType.FLOAT:
        items = ["nan" if math.isnan(x) else x + 0.0 for x in items]
    return len({x for x in items if x != ""})


#: What :func:`outcome` gives of a state whose result its op refuses (an INT sum past int64).
REFUSED = "refused: past int64"


def outcome(agg: Aggregator[Any], state: Any) -> Any:
    """Return ``agg.finalize(state)``, or :data:`REFUSED` where the op refuses the result.

    The laws hold of states; two states of the same values are refused alike.
    """
    try:
        return agg.finalize(state)
    except ResultOverflowError:
        return REFUSED


def check_within_bound(agg: Aggregator[Any], result: Any, values: np.ndarray) -> None:
    """Assert an approximate result honours the op's stated bound on ``values``."""
    if agg.op == "approx_unique_count":
        truth = true_distinct(agg.input_type, values)
        assert abs(result - truth) <= 3 * HLL_RSE * truth + 1, (result, truth)
        return
    data = np.sort(np.asarray(values, dtype=np.float64))
    data = data[~np.isnan(data)]
    if len(data) == 0:
        assert result is None
        return
    for rank, quantile in zip(agg.percentiles, result, strict=True):  # type: ignore[attr-defined]
        below = np.searchsorted(data, quantile, side="left") / len(data)
        at_or_below = np.searchsorted(data, quantile, side="right") / len(data)
        assert quantile in set(data.tolist()), quantile
        assert below - KLL_RANK_ERROR <= rank <= at_or_below + KLL_RANK_ERROR, (rank, quantile)


def kll_is_exact(values: np.ndarray) -> bool:
    """Whether a KLL sketch (k = 200) of ``values`` keeps every value: results are then exact."""
    data = np.asarray(values, dtype=np.float64)
    return int(np.count_nonzero(~np.isnan(data))) <= KLL_K


def agree(agg: Aggregator[Any], got: Any, want: Any, values: np.ndarray) -> None:
    """Assert two results of the same input agree.

    Exact ops: equal (moments within :data:`MOMENT_TOLERANCE`). ``approx_unique_count``: equal
    exactly, since its estimate is a function of the registers only, and within the bound.
    ``approx_percentile``: equal exactly while KLL keeps every value (at most k), else both
    within the bound (KLL compacts at random beyond k).
    """
    if agg.approximate:
        check_within_bound(agg, got, values)
        check_within_bound(agg, want, values)
        if agg.op == "approx_unique_count" or kll_is_exact(values):
            assert same(agg.op, got, want), (got, want)
    else:
        assert same(agg.op, got, want), (got, want)


def empty_result(op: str) -> Any:
    """The contract's result for an empty window."""
    if op == "decayed_count":
        return 0.0
    return 0 if op in {"count", "unique_count", "approx_unique_count"} else None


# --- the algebra's laws, for plain and bucketed aggregators ---------------------------------


@dataclass(frozen=True)
class Flavor:
    """One family of aggregators, as the laws build, feed and compare it.

    Each law method builds the aggregator for ``(op, value_type)``, draws its batches from
    ``data`` and asserts; the test modules give it their parametrization and hypothesis settings.
    """

    #: The aggregator for ``(op, value_type)``.
    build: Callable[[str, ValueType], Aggregator[Any]]
    #: ``count`` batches of (values, times) for ``(op, value_type)``.
    batches: Callable[[str, ValueType, int], st.SearchStrategy[list[Batch]]]
    #: One batch holding all of the parts, in order (the value type types an empty one).
    concat: Callable[[list[Batch], ValueType], Batch]
    #: Assert two results of the same values (the last argument) agree.
    agree: Callable[[Any, Any, Any, np.ndarray], None]
    #: The result of an empty state for ``op``: equal, and of the same type.
    empty_result: Callable[[str], Any]
    #: The first byte of the aggregator's state bytes.
    format_version: Callable[[Aggregator[Any]], int]

    def init_is_the_identity(self, op: str, value_type: ValueType, data: st.DataObject) -> None:
        agg = self.build(op, value_type)
        (part,) = data.draw(self.batches(op, value_type, 1))
        state = agg.fold(*part)
        expected = agg.to_bytes(state)
        assert agg.to_bytes(agg.merge(agg.init(), state)) == expected
        assert agg.to_bytes(agg.merge(state, agg.init())) == expected
        assert agg.to_bytes(agg.update(state, *self.concat([], value_type))) == expected
        result = outcome(agg, agg.init())
        assert result == self.empty_result(op)
        assert type(result) is type(self.empty_result(op))

    def merge_is_the_fold_of_the_union(
        self, op: str, value_type: ValueType, data: st.DataObject
    ) -> None:
        agg = self.build(op, value_type)
        left, right = data.draw(self.batches(op, value_type, 2))
        whole = self.concat([left, right], value_type)
        want = outcome(agg, agg.fold(*whole))
        self.agree(agg, outcome(agg, agg.merge(agg.fold(*left), agg.fold(*right))), want, whole[0])
        self.agree(agg, outcome(agg, agg.merge(agg.fold(*right), agg.fold(*left))), want, whole[0])

    def merge_is_associative(self, op: str, value_type: ValueType, data: st.DataObject) -> None:
        agg = self.build(op, value_type)
        parts = data.draw(self.batches(op, value_type, 3))
        a, b, c = (agg.fold(*part) for part in parts)
        left_first = outcome(agg, agg.merge(agg.merge(a, b), c))
        right_first = outcome(agg, agg.merge(a, agg.merge(b, c)))
        self.agree(agg, left_first, right_first, self.concat(parts, value_type)[0])

    def bytes_round_trip(self, op: str, value_type: ValueType, data: st.DataObject) -> None:
        agg = self.build(op, value_type)
        first, second = data.draw(self.batches(op, value_type, 2))
        state = agg.merge(agg.fold(*first), agg.fold(*second))
        values = self.concat([first, second], value_type)[0]
        for candidate, its_values in ((agg.init(), values[:0]), (state, values)):
            encoded = agg.to_bytes(candidate)
            assert encoded[0] == self.format_version(agg)
            decoded = agg.from_bytes(encoded)
            if not agg.approximate:  # a sketch may lay out the same content differently
                assert agg.to_bytes(decoded) == encoded
            self.agree(agg, outcome(agg, decoded), outcome(agg, candidate), its_values)
            assert repr(outcome(agg, decoded)) == repr(outcome(agg, candidate))
        # A decoded state merges and updates like the original.
        more = agg.fold(*first)
        self.agree(
            agg,
            outcome(agg, agg.merge(agg.from_bytes(agg.to_bytes(state)), more)),
            outcome(agg, agg.merge(state, more)),
            self.concat([first, second, first], value_type)[0],
        )

    def retract_undoes_update(
        self, op: str, value_type: ValueType, data: st.DataObject
    ) -> tuple[Aggregator[Any], Batch]:
        """The laws of ``retract`` and ``unmerge``; returns the aggregator and retracted batch."""
        agg = self.build(op, value_type)
        assert agg.invertible
        kept, removed = data.draw(self.batches(op, value_type, 2))
        state = agg.fold(*kept)
        grown = agg.update(state, *removed)
        # Exactly: the same bytes, not only the same result.
        assert agg.to_bytes(agg.retract(grown, *removed)) == agg.to_bytes(state)
        both = agg.fold(*self.concat([removed, kept], value_type))
        assert agg.to_bytes(agg.retract(both, *removed)) == agg.to_bytes(state)
        # Retracted in pieces, in another order.
        cut = data.draw(st.integers(0, len(removed[0])))
        piecewise = agg.retract(grown, removed[0][cut:], removed[1][cut:])
        piecewise = agg.retract(piecewise, removed[0][:cut], removed[1][:cut])
        assert agg.to_bytes(piecewise) == agg.to_bytes(state)
        # States form a group: a retraction folded first cancels a later insertion; and unmerge
        # undoes merge.
        negative = agg.retract(agg.init(), *removed)
        assert agg.to_bytes(agg.merge(negative, agg.fold(*removed))) == agg.to_bytes(agg.init())
        assert agg.to_bytes(agg.merge(grown, negative)) == agg.to_bytes(state)
        assert agg.to_bytes(agg.unmerge(grown, agg.fold(*removed))) == agg.to_bytes(state)
        assert agg.to_bytes(agg.unmerge(grown, grown)) == agg.to_bytes(agg.init())
        return agg, removed

    def no_method_mutates_its_arguments(
        self, op: str, value_type: ValueType, data: st.DataObject
    ) -> None:
        agg = self.build(op, value_type)
        first, second = data.draw(self.batches(op, value_type, 2))
        left, right = agg.fold(*first), agg.fold(*second)
        snapshot = [_fingerprint(agg, x) for x in (left, right, *first, *second)]

        agg.update(left, *second)
        agg.merge(left, right)
        agg.merge(right, left)
        outcome(agg, left)
        agg.to_bytes(right)
        if agg.invertible:
            agg.retract(left, *second)
            agg.unmerge(left, right)

        assert [_fingerprint(agg, x) for x in (left, right, *first, *second)] == snapshot


def _fingerprint(agg: Aggregator[Any], item: Any) -> Any:
    """A state's bytes, or an array's (its values' repr where they hold Python objects)."""
    if isinstance(item, np.ndarray):
        return repr(item.tolist()) if item.dtype.hasobject else item.tobytes()
    return agg.to_bytes(item)


#: The plain aggregators of :func:`build`, fed :func:`batches`.
PLAIN = Flavor(
    build=build,
    batches=batches,
    concat=lambda parts, value_type: concat(parts),
    agree=agree,
    empty_result=empty_result,
    format_version=lambda agg: SKETCH_FORMAT if agg.approximate else FORMAT_VERSION,
)


# --- helpers of the semantics tests ---------------------------------------------------------


def column(value_type: ValueType, values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=value_type.numpy_dtype)
    array[:] = values
    return array


def run(
    op: str,
    values: list[Any],
    times: list[int] | None = None,
    value_type: ValueType = ValueType.FLOAT,
    **params: Any,
) -> Any:
    """Finalize ``op`` over ``values`` (all at time 0 unless ``times`` is given)."""
    agg = make_aggregator(op, value_type, **params)
    stamps = np.array(times if times is not None else [0] * len(values), dtype=np.int64)
    return agg.finalize(agg.fold(column(value_type, values), stamps))


def fold_parts(
    agg: Aggregator[Any], parts: list[list[Any]], times: list[list[int]] | None = None
) -> Any:
    state = agg.init()
    for index, part in enumerate(parts):
        stamps = times[index] if times else [0] * len(part)
        state = agg.merge(state, agg.fold(column(agg.input_type, part), np.array(stamps, np.int64)))
    return state


def is_nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)
