"""``variance``, ``stddev``, ``skew``, ``kurtosis``: central moments, merged in parallel.

One state, :class:`MomentState` (count, mean and the central moment sums ``m2..m4`` of the
finite values, plus a count of the non-finite ones), merged with the pairwise formulas of
Chan, Golub & LeVeque (1979) extended to higher moments by Pébay, *Formulas for robust,
one-pass parallel computation of covariances and arbitrary-order statistical moments*
(Sandia SAND2008-6212). Each batch is folded in two passes (mean, then powers of the
deviations), which is more accurate than Welford's one value at a time.

The mean is a double-double (a high and a low word). Rounded to one double, the mean of values
near 1e9 is off by about 1e-7; every merge's ``delta`` carries that error, and ``m3`` and
``m4`` feel it at first order, so ``skew`` and ``kurtosis`` of 1e9 ± 1 would depend on how
the values were cut into batches. :func:`merge_moments` is the one merge, compiled, and the
sweep's moment tree (:mod:`timetile.core.kernels.moment_tree`) merges its nodes with it too,
so every executor, the stream and the online store agree far from zero as near it.

Results follow Spark SQL (``var_samp``, ``stddev_samp``, ``skewness``, ``kurtosis``):

- no values: None for all four; one value: None for ``variance``/``stddev``;
- any NaN or ±inf among the values: NaN (after the two None rules above);
- constant data: ``m2`` is exactly 0 (a constant batch keeps its value as the mean and zero
  moments, and merging equal means adds nothing), so ``variance`` is 0.0 and ``skew`` and
  ``kurtosis`` are None, as in Spark.

Finite data whose powers leave the double range (``|x|`` beyond about ``1e154`` for ``m2``,
``1e77`` for ``m4``) overflows as in Spark: the mean stays finite even when the sum would not,
so ``m2`` (a sum of non-negative terms) becomes +inf and ``variance`` inf; ``m3``/``m4`` may
become inf or NaN, and ``skew``/``kurtosis`` then need not match Spark's choice between the two.
``skew`` divides by :func:`skew_spread`, finite where Spark's ``m2**3`` is not (deviations
below about 1e-52 or beyond 1e51), so it holds for deviations between about 1e-103 and 1e102,
where ``m3`` under- or overflows; ``kurtosis`` between about 1e-77 and 1e77 (``m4``). Beyond,
the answer is wrong, then NaN (Spark divides by zero below, or answers 0.0 above).
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple, overload

import numba
import numpy as np
import numpy.typing as npt

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.aggregators.columnar import RunMoments, Scalars
from timetile.core.aggregators.exact import two_sum
from timetile.core.aggregators.ordering import canonical_array, canonical_float
from timetile.core.types import ResultType, ValueType

#: The smallest normal double: below it a product has lost bits.
_TINY = float(np.finfo(np.float64).tiny)
#: The finite part of a state, as :func:`merge_moments` takes it: the count, the mean's high
#: and low words, and ``m2``, ``m3``, ``m4``.
Moments = tuple[int, float, float, float, float, float]


class MomentState(NamedTuple):
    """Moments of the finite values, and how many values were not finite.

    Attributes:
        n: how many finite values.
        mean: their mean rounded to a double (0.0 when ``n`` is 0).
        mean_low: a correction to ``mean``, below half a unit in its last place. Far from
            zero (values within a factor of two of their mean) ``mean + mean_low`` is the
            mean to about 1e-16 of the spread; with a wide spread, to a few units in the
            last place of ``mean``, whose error then weighs on the moments no more than
            the spread's own rounding.
        m2: sum of squared deviations from the mean.
        m3: sum of cubed deviations.
        m4: sum of fourth powers of deviations.
        nonfinite: how many NaN or ±inf values.

    """

    n: int
    mean: float
    mean_low: float
    m2: float
    m3: float
    m4: float
    nonfinite: int


_EMPTY = MomentState(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
_INT64_LIMIT = 1 << 63


def _batch_moments(values: Values) -> MomentState:
    """Two-pass moments of one batch, the mean a double-double. O(n), vectorized."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    nonfinite = len(values) - len(finite)
    if len(finite) == 0:
        return _EMPTY._replace(nonfinite=nonfinite)
    low, high = float(finite.min()), float(finite.max())
    if low == high:  # constant: exact mean, exactly zero moments
        return MomentState(len(finite), low + 0.0, 0.0, 0.0, 0.0, 0.0, nonfinite)
    with np.errstate(over="ignore", invalid="ignore"):  # huge values overflow as in Spark
        mean = float(finite.mean())
        if not math.isfinite(mean):  # the sum overflowed, but the mean itself is in range
            mean = min(max(float((finite / len(finite)).sum()), low), high)
        # The residuals are exact where a value lies within a factor of two of the mean
        # (Sterbenz), so their mean is the low word: far from zero, the part that matters.
        rest = float((finite - mean).sum()) / len(finite)
        mean, mean_low = two_sum(mean, rest) if math.isfinite(rest) else (mean, 0.0)
        deviation = (finite - mean) - mean_low
        square = deviation * deviation
        return MomentState(
            n=len(finite),
            mean=mean,
            mean_low=mean_low,
            m2=float(square.sum()),
            m3=float((square * deviation).sum()),
            m4=float((square * square).sum()),
            nonfinite=nonfinite,
        )


@numba.njit(cache=True)
def merge_moments(a: Moments, b: Moments) -> Moments:
    """Merge two partials with Pébay's pairwise update (SAND2008-6212, eqs. 1.1, 2.1). O(1).

    ``m2`` by Chan et al.'s formula, ``m3`` and ``m4`` by Pébay's for p = 3, 4. The means are
    double-doubles, so ``delta`` is exact to about 1e-16 of itself however far from zero the
    values lie. When ``delta`` overflows (means near both ends of the double range), the
    mean falls back to a weighted average in one double. Compiled: the aggregators call it
    (a compiled call costs less than the same code interpreted) and the sweep's moment tree
    (:mod:`timetile.core.kernels.moment_tree`) inlines it, so both run the same arithmetic.
    Counts are int64 and the rest float64, as every state's are.

    numba's on-disk cache does not see edits to a function that another file's kernel
    inlines: after editing this one (or :func:`~timetile.core.aggregators.exact.two_sum`),
    the moment tree's cached kernels are stale. ``./dev.sh test`` clears timetile's numba
    caches first.

    >>> merge_moments((1, 1.0, 0.0, 0.0, 0.0, 0.0), (1, 3.0, 0.0, 0.0, 0.0, 0.0))
    (2, 2.0, 0.0, 2.0, 0.0, 2.0)
    """
    count_a, high_a, low_a, m2_a, m3_a, m4_a = a
    count_b, high_b, low_b, m2_b, m3_b, m4_b = b
    if count_b == 0:
        return a
    if count_a == 0:
        return b
    na, nb = float(count_a), float(count_b)
    n = na + nb
    difference, error = two_sum(high_b, -high_a)
    delta = difference + (error + (low_b - low_a))
    delta_n = delta / n
    high, low = two_sum(high_a, delta_n * nb)
    high, low = two_sum(high, low + low_a)
    if not math.isfinite(high):  # delta overflowed (means near both ends of the double range)
        high, low = high_a * (na / n) + high_b * (nb / n), 0.0
    m2 = m2_a + m2_b + delta * delta_n * na * nb
    m3 = (m3_a + m3_b + delta * delta_n * delta_n * na * nb * (na - nb)
          + 3.0 * delta_n * (na * m2_b - nb * m2_a))
    m4 = (m4_a + m4_b
          + delta * delta_n * delta_n * delta_n * na * nb * (na * na - na * nb + nb * nb)
          + 6.0 * delta_n * delta_n * (na * na * m2_b + nb * nb * m2_a)
          + 4.0 * delta_n * (na * m3_b - nb * m3_a))
    return count_a + count_b, high, low, m2, m3, m4


def _combine(a: MomentState, b: MomentState) -> MomentState:
    """Merge the finite parts with :func:`merge_moments`, and add the non-finite counts."""
    finite_a: Moments = (a.n, a.mean, a.mean_low, a.m2, a.m3, a.m4)
    finite_b: Moments = (b.n, b.mean, b.mean_low, b.m2, b.m3, b.m4)
    return MomentState(*merge_moments(finite_a, finite_b), a.nonfinite + b.nonfinite)


@overload
def skew_spread(m2: float) -> float: ...
@overload
def skew_spread(m2: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...
def skew_spread(m2: float | npt.NDArray[np.float64]) -> float | npt.NDArray[np.float64]:
    """Return the denominator of ``skew``, ``m2 ** 1.5``: of one ``m2``, or elementwise.

    Spark's ``sqrt(m2 * m2 * m2)`` (its last bits) while ``m2 ** 3`` is a normal double, and
    ``m2 * sqrt(m2)`` beyond, where Spark's form underflows to zero (values within about
    1e-52 of their mean) or overflows (beyond about 1e51) and Spark divides by zero (an
    error) or by inf (0.0). O(1) per value; a float stays a float (a fetch finalizes one
    state at a time).

    >>> skew_spread(4.0), skew_spread(1e-120) / 1e-180, skew_spread(np.array([4.0])).tolist()
    (8.0, 1.0, [8.0])
    """
    if isinstance(m2, float):
        cubed = m2 * m2 * m2
        return math.sqrt(cubed) if _TINY <= cubed < math.inf else m2 * math.sqrt(m2)
    with np.errstate(all="ignore"):
        cubed_array = m2 * m2 * m2
        normal = (cubed_array >= _TINY) & (cubed_array < np.inf)
        spread: npt.NDArray[np.float64] = np.where(normal, np.sqrt(cubed_array),
                                                   m2 * np.sqrt(m2))
    return spread


def _ieee_divide(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` with IEEE 754 results (±inf, NaN) instead of an exception."""
    if denominator == 0.0:
        if numerator == 0.0 or math.isnan(numerator):
            return math.nan
        return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)
    return numerator / denominator


class _Moments(Aggregator[MomentState]):
    """Shared machinery: :class:`MomentState` folding, merging and serialization.

    ``update`` O(len(values)) vectorized; ``merge`` O(1). Not invertible: removing values from
    higher moments cancels catastrophically.
    """

    numeric_only: ClassVar[bool] = True
    checkpointable: ClassVar[bool] = True
    state_version: ClassVar[int] = 2  # 2: the mean's low word
    columnar: ClassVar[type] = RunMoments

    def result_type(self) -> ResultType:
        """Return ``FLOAT``, whatever the column type."""
        return ResultType(ValueType.FLOAT)

    def init(self) -> MomentState:
        """Return the state of no values."""
        return _EMPTY

    def update(self, state: MomentState, values: Values, times: Times) -> MomentState:
        """Fold the batch's two-pass moments into ``state``."""
        del times  # moments ignore event order
        return _combine(state, _batch_moments(values))

    def merge(self, left: MomentState, right: MomentState) -> MomentState:
        """Combine with Pébay's pairwise formulas."""
        return _combine(left, right)

    def to_bytes(self, state: MomentState) -> bytes:
        """Encode the seven fields with :mod:`.codec`."""
        return codec.encode(tuple(state))

    def from_bytes(self, data: bytes) -> MomentState:
        """Decode and check the shape; ValueError on malformed bytes.

        Six fields are a state written before the mean had a low word (state version 1):
        it reads as 0.0. Counts must fit in int64, and the low word must be below half a
        unit in the last place of the mean.
        """
        fields = codec.expect_tuple(codec.decode(data), "moments")
        if len(fields) == 6:
            fields = (*fields[:2], 0.0, *fields[2:])
        if len(fields) != 7:
            raise ValueError(f"state bytes: moments must have 7 items, got {len(fields)}")
        n, mean, mean_low, m2, m3, m4, nonfinite = fields
        state = MomentState(
            codec.expect_int(n, "moments n"),
            codec.expect_float(mean, "moments mean"),
            codec.expect_float(mean_low, "moments mean_low"),
            codec.expect_float(m2, "moments m2"),
            codec.expect_float(m3, "moments m3"),
            codec.expect_float(m4, "moments m4"),
            codec.expect_int(nonfinite, "moments nonfinite"),
        )
        if not (0 <= state.n < _INT64_LIMIT and 0 <= state.nonfinite < _INT64_LIMIT):
            raise ValueError("state bytes: a count in moments is negative or beyond int64")
        if not math.isfinite(state.mean_low) or state.mean + state.mean_low != state.mean:
            raise ValueError("state bytes: moments mean_low is not below half an ulp of mean")
        return state


class Variance(_Moments):
    """Sample variance ``m2 / (n - 1)``, Spark's ``var_samp``; None below two values.

    >>> agg = Variance(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([1.0, 2.0]), np.zeros(2, dtype=np.int64)))
    0.5
    """

    op: ClassVar[str] = "variance"

    def finalize(self, state: MomentState) -> float | None:
        """Return the sample variance (see the module's rules for None and NaN)."""
        n = state.n + state.nonfinite
        if n < 2:
            return None
        if state.nonfinite:
            return math.nan
        if math.isnan(state.m2):  # finite data whose squares overflowed
            return math.inf
        return canonical_float(state.m2 / (n - 1))

    def finalize_many(self, states: RunMoments) -> Scalars:
        """Return each run's sample variance by :meth:`finalize`'s rules; O(runs)."""
        return Scalars(canonical_array(self._variances(states)), states.sizes < 2)

    @staticmethod
    def _variances(states: RunMoments) -> npt.NDArray[np.float64]:
        finite = (states.sizes - states.nonfinite).astype(np.float64)
        with np.errstate(all="ignore"):
            variances = np.where(np.isnan(states.m2), np.inf,
                                 states.m2 / np.maximum(finite - 1, 1))
        return np.where(states.nonfinite > 0, np.nan, variances)


class Stddev(Variance):
    """Sample standard deviation, Spark's ``stddev_samp``: the square root of :class:`Variance`.

    >>> agg = Stddev(ValueType.INT)
    >>> agg.finalize(agg.fold(np.array([2, 4, 4, 4, 5, 5, 7, 9]), np.zeros(8, dtype=np.int64)))
    2.138089935299395
    """

    op: ClassVar[str] = "stddev"

    def finalize(self, state: MomentState) -> float | None:
        """Return the sample standard deviation (see the module's rules for None and NaN)."""
        variance = super().finalize(state)
        return None if variance is None else math.sqrt(variance)

    def finalize_many(self, states: RunMoments) -> Scalars:
        """Return each run's sample standard deviation by :meth:`finalize`'s rules."""
        with np.errstate(invalid="ignore"):
            return Scalars(canonical_array(np.sqrt(self._variances(states))), states.sizes < 2)


class _StandardizedMoment(_Moments):
    """The shared rules of ``skew`` and ``kurtosis``, around their :meth:`_shape`.

    None without values or for constant data, NaN with any non-finite value; otherwise the
    op's own formula over the finite moments.
    """

    def finalize(self, state: MomentState) -> float | None:
        """Return the moment (see the module's rules for None and NaN)."""
        if state.n + state.nonfinite == 0:
            return None
        if state.nonfinite:
            return math.nan
        if state.m2 == 0.0:
            return None
        return canonical_float(self._shape(state))  # an overflow's NaN may carry a sign bit

    def finalize_many(self, states: RunMoments) -> Scalars:
        """Return each run's moment by :meth:`finalize`'s rules, vectorized; O(runs)."""
        null = (states.sizes == 0) | ((states.nonfinite == 0) & (states.m2 == 0.0))
        with np.errstate(all="ignore"):  # IEEE division, as _ieee_divide
            shapes = self._shapes(states, (states.sizes - states.nonfinite).astype(np.float64))
        return Scalars(canonical_array(np.where(states.nonfinite > 0, np.nan, shapes)), null)

    def _shape(self, state: MomentState) -> float:
        raise NotImplementedError

    def _shapes(self, states: RunMoments, n: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        raise NotImplementedError


class Skew(_StandardizedMoment):
    """Skewness ``sqrt(n) * m3 / m2**1.5``, Spark's ``skewness``; None for constant data.

    The denominator is :func:`skew_spread`'s: Spark's bits, and a finite answer where
    Spark's ``m2**3`` leaves the double range.

    >>> agg = Skew(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([1.0, 2.0]), np.zeros(2, dtype=np.int64)))
    0.0
    """

    op: ClassVar[str] = "skew"

    def _shape(self, state: MomentState) -> float:
        return _ieee_divide(math.sqrt(state.n) * state.m3, skew_spread(float(state.m2)))

    def _shapes(self, states: RunMoments, n: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        shapes: npt.NDArray[np.float64] = np.sqrt(n) * states.m3 / skew_spread(states.m2)
        return shapes


class Kurtosis(_StandardizedMoment):
    """Excess kurtosis ``n * m4 / m2**2 - 3``, Spark's ``kurtosis``; None for constant data.

    >>> agg = Kurtosis(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([1.0, 2.0]), np.zeros(2, dtype=np.int64)))
    -2.0
    """

    op: ClassVar[str] = "kurtosis"

    def _shape(self, state: MomentState) -> float:
        return _ieee_divide(state.n * state.m4, state.m2 * state.m2) - 3.0

    def _shapes(self, states: RunMoments, n: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        shapes: npt.NDArray[np.float64] = n * states.m4 / (states.m2 * states.m2) - 3.0
        return shapes
