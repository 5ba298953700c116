"""``variance``, ``stddev``, ``skew``, ``kurtosis``: central moments, merged in parallel.

One state, :class:`MomentState` (count, mean and the central moment sums ``m2..m4`` of the
finite values, plus a count of the non-finite ones), merged with the pairwise formulas of
Chan, Golub & LeVeque (1979) extended to higher moments by Pébay, *Formulas for robust,
one-pass parallel computation of covariances and arbitrary-order statistical moments*
(Sandia SAND2008-6212). Each batch is folded in two passes (mean, then powers of the
deviations), which is more accurate than Welford's one value at a time.

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
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.aggregators.ordering import canonical_float
from timetile.core.types import ResultType, ValueType


class MomentState(NamedTuple):
    """Moments of the finite values, and how many values were not finite.

    Attributes:
        n: how many finite values.
        mean: their mean (0.0 when ``n`` is 0).
        m2: sum of squared deviations from the mean.
        m3: sum of cubed deviations.
        m4: sum of fourth powers of deviations.
        nonfinite: how many NaN or ±inf values.

    """

    n: int
    mean: float
    m2: float
    m3: float
    m4: float
    nonfinite: int


_EMPTY = MomentState(0, 0.0, 0.0, 0.0, 0.0, 0)


def _batch_moments(values: Values) -> MomentState:
    """Two-pass moments of one batch. O(n), vectorized."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    nonfinite = len(values) - len(finite)
    if len(finite) == 0:
        return _EMPTY._replace(nonfinite=nonfinite)
    low, high = float(finite.min()), float(finite.max())
    if low == high:  # constant: exact mean, exactly zero moments
        return MomentState(len(finite), low + 0.0, 0.0, 0.0, 0.0, nonfinite)
    with np.errstate(over="ignore", invalid="ignore"):  # huge values overflow as in Spark
        mean = float(finite.mean())
        if not math.isfinite(mean):  # the sum overflowed, but the mean itself is in range
            mean = min(max(float((finite / len(finite)).sum()), low), high)
        deviation = finite - mean
        square = deviation * deviation
        return MomentState(
            n=len(finite),
            mean=mean,
            m2=float(square.sum()),
            m3=float((square * deviation).sum()),
            m4=float((square * square).sum()),
            nonfinite=nonfinite,
        )


def _combine(a: MomentState, b: MomentState) -> MomentState:
    """Pébay's pairwise update (SAND2008-6212, eqs. 1.1, 2.1 for p = 2, 3, 4). O(1)."""
    nonfinite = a.nonfinite + b.nonfinite
    if b.n == 0:
        return a._replace(nonfinite=nonfinite)
    if a.n == 0:
        return b._replace(nonfinite=nonfinite)
    na, nb = float(a.n), float(b.n)
    n = na + nb
    delta = b.mean - a.mean
    delta_n = delta / n
    mean = a.mean + delta_n * nb
    if not math.isfinite(mean):  # delta overflowed (means near both ends of the double range)
        mean = a.mean * (na / n) + b.mean * (nb / n)
    m2 = a.m2 + b.m2 + delta * delta_n * na * nb
    m3 = (
        a.m3
        + b.m3
        + delta * delta_n * delta_n * na * nb * (na - nb)
        + 3.0 * delta_n * (na * b.m2 - nb * a.m2)
    )
    m4 = (
        a.m4
        + b.m4
        + delta * delta_n * delta_n * delta_n * na * nb * (na * na - na * nb + nb * nb)
        + 6.0 * delta_n * delta_n * (na * na * b.m2 + nb * nb * a.m2)
        + 4.0 * delta_n * (na * b.m3 - nb * a.m3)
    )
    return MomentState(a.n + b.n, mean, m2, m3, m4, nonfinite)


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
        """Encode the six fields with :mod:`.codec`."""
        return codec.encode(tuple(state))

    def from_bytes(self, data: bytes) -> MomentState:
        """Decode and check the shape; ValueError on malformed bytes."""
        n, mean, m2, m3, m4, nonfinite = codec.expect_tuple(codec.decode(data), "moments", 6)
        state = MomentState(
            codec.expect_int(n, "moments n"),
            codec.expect_float(mean, "moments mean"),
            codec.expect_float(m2, "moments m2"),
            codec.expect_float(m3, "moments m3"),
            codec.expect_float(m4, "moments m4"),
            codec.expect_int(nonfinite, "moments nonfinite"),
        )
        if state.n < 0 or state.nonfinite < 0:
            raise ValueError("state bytes: negative count in moments")
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

    def _shape(self, state: MomentState) -> float:
        raise NotImplementedError


class Skew(_StandardizedMoment):
    """Skewness ``sqrt(n) * m3 / sqrt(m2**3)``, Spark's ``skewness``; None for constant data.

    >>> agg = Skew(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([1.0, 2.0]), np.zeros(2, dtype=np.int64)))
    0.0
    """

    op: ClassVar[str] = "skew"

    def _shape(self, state: MomentState) -> float:
        m2 = state.m2
        return _ieee_divide(math.sqrt(state.n) * state.m3, math.sqrt(m2 * m2 * m2))


class Kurtosis(_StandardizedMoment):
    """Excess kurtosis ``n * m4 / m2**2 - 3``, Spark's ``kurtosis``; None for constant data.

    >>> agg = Kurtosis(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([1.0, 2.0]), np.zeros(2, dtype=np.int64)))
    -2.0
    """

    op: ClassVar[str] = "kurtosis"

    def _shape(self, state: MomentState) -> float:
        return _ieee_divide(state.n * state.m4, state.m2 * state.m2) - 3.0
