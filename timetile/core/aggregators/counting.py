"""``count``, ``sum`` and ``avg``: invertible ops whose state is a handful of exact integers.

``sum`` and ``avg`` keep the sum exactly (:mod:`.exact`) and count NaN, +inf and -inf apart,
so retracting any value, special ones included, restores the previous state bit for bit, and
the result is independent of batching. Spark's double ``sum`` rounds after every addition and
so depends on input order; timetile returns the correctly rounded exact sum, which equals
Spark's whenever Spark's is exact and is never further from the true sum.
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import numpy as np

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import (
    INT64_RANGE,
    Aggregator,
    ResultOverflowError,
    Times,
    Values,
)
from timetile.core.aggregators.columnar import Runs, RunSums, Scalars, never_null
from timetile.core.aggregators.exact import exact_float_sum, exact_int_sum, scaled_to_float
from timetile.core.aggregators.ordering import as_values, canonical_array, canonical_float
from timetile.core.types import ResultType, ValueType

# A float total has at most about 2,150 bits; a larger shift can only come from bad bytes.
_MAX_SHIFT = 4096


def _check_not_negative(op: str, count: int) -> None:
    if count < 0:
        raise ValueError(f"{op}: the state holds more retracted values than folded ones")


class Count(Aggregator[int]):
    """Number of (non-null) values; any column type. Empty input gives 0.

    State: the count. ``update``/``retract`` O(1); everything else O(1).

    >>> agg = Count(ValueType.STRING)
    >>> agg.finalize(agg.fold(np.array(["a", "b"], dtype=object), np.array([1, 2])))
    2
    """

    op: ClassVar[str] = "count"
    invertible: ClassVar[bool] = True
    checkpointable: ClassVar[bool] = True
    columnar: ClassVar[type] = Runs

    def result_type(self) -> ResultType:
        """Return ``INT``, whatever the column type."""
        return ResultType(ValueType.INT)

    def init(self) -> int:
        """Return 0: no values seen."""
        return 0

    def update(self, state: int, values: Values, times: Times) -> int:
        """Add ``len(values)``."""
        del times  # counting ignores event order
        return state + len(values)

    def merge(self, left: int, right: int) -> int:
        """Add the counts."""
        return left + right

    def retract(self, state: int, values: Values, times: Times) -> int:
        """Subtract ``len(values)``; the count may go negative in a partial state."""
        del times
        return state - len(values)

    def unmerge(self, whole: int, part: int) -> int:
        """Subtract the counts. O(1)."""
        return whole - part

    def finalize(self, state: int) -> int:
        """Return the count.

        Raises:
            ValueError: if more values were retracted than folded.

        """
        _check_not_negative(self.op, state)
        return state

    def finalize_many(self, states: Runs) -> Scalars:
        """Return each run's length: 0 for an empty run, never null. O(runs)."""
        return Scalars(states.highs - states.lows, never_null(len(states.lows)))

    def to_bytes(self, state: int) -> bytes:
        """Encode with :mod:`.codec`."""
        return codec.encode(state)

    def from_bytes(self, data: bytes) -> int:
        """Decode with :mod:`.codec`; ValueError on malformed bytes."""
        return codec.expect_int(codec.decode(data), "count")


#: The exact state of ``sum`` and ``avg``: ``(n, total, nan, pos_inf, neg_inf)``, where
#: ``n`` counts the values (specials included), ``total`` is the sum of the finite values,
#: exactly (the integer itself for an INT column, in units of ``2**-FLOAT_SCALE``
#: (:mod:`.exact`) for a FLOAT column), and the last three count NaNs, +inf and -inf. Every
#: field adds under merge. A plain tuple of ints, not a named one: the garbage collector
#: stops tracking such a tuple, and a fetcher caches one per ``sum`` or ``avg`` feature of
#: every record it keeps (docs/online.md, "Pauses").
SumState: TypeAlias = tuple[int, int, int, int, int]


def _plus(left: SumState, right: SumState) -> SumState:
    """Add field by field: the state of both inputs."""
    return (left[0] + right[0], left[1] + right[1], left[2] + right[2], left[3] + right[3],
            left[4] + right[4])


def _minus(whole: SumState, part: SumState) -> SumState:
    """Subtract field by field: ``whole`` with ``part``'s input taken out."""
    return (whole[0] - part[0], whole[1] - part[1], whole[2] - part[2], whole[3] - part[3],
            whole[4] - part[4])


def special_sum(nan: int, pos_inf: int, neg_inf: int) -> float | None:
    """Return a float sum's result when special values occur (Spark's rules), else None.

    NaN if a NaN or both infinities occur, else the one infinity that does.

    >>> special_sum(0, 2, 0), special_sum(0, 1, 1), special_sum(0, 0, 0)
    (inf, nan, None)
    """
    if nan or (pos_inf and neg_inf):
        return float("nan")
    if pos_inf:
        return float("inf")
    if neg_inf:
        return float("-inf")
    return None


class _ExactSum(Aggregator[SumState]):
    """Shared machinery of ``sum`` and ``avg``: an exact, invertible :data:`SumState`.

    ``update`` and ``retract`` are O(len(values)) vectorized; ``merge`` is O(1) big-integer
    additions.
    """

    invertible: ClassVar[bool] = True
    numeric_only: ClassVar[bool] = True
    checkpointable: ClassVar[bool] = True
    columnar: ClassVar[type] = RunSums

    def init(self) -> SumState:
        """Return the state of no values."""
        return (0, 0, 0, 0, 0)

    def _fold_batch(self, values: Values) -> SumState:
        values = as_values(values, self.input_type)
        if self.input_type is ValueType.INT:
            return (len(values), exact_int_sum(values), 0, 0, 0)
        finite = np.isfinite(values)
        nan = np.isnan(values)
        return (len(values), exact_float_sum(values[finite]), int(nan.sum()),
                int((values == np.inf).sum()), int((values == -np.inf).sum()))

    def update(self, state: SumState, values: Values, times: Times) -> SumState:
        """Add the batch's exact sum and special-value counts."""
        del times  # sums ignore event order
        return _plus(state, self._fold_batch(values))

    def merge(self, left: SumState, right: SumState) -> SumState:
        """Add field by field."""
        return _plus(left, right)

    def retract(self, state: SumState, values: Values, times: Times) -> SumState:
        """Subtract the batch field by field: exactly undoes :meth:`update` of the same values."""
        del times
        return _minus(state, self._fold_batch(values))

    def unmerge(self, whole: SumState, part: SumState) -> SumState:
        """Subtract field by field: exactly undoes :meth:`merge`. O(1) big-integer subtractions."""
        return _minus(whole, part)

    def _sum(self, state: SumState) -> int | float | None:
        """Compute the sum (Spark's rules for NaN and ±inf), or None for no values."""
        n, total, nan, pos_inf, neg_inf = state
        for count in (n, nan, pos_inf, neg_inf):
            _check_not_negative(self.op, count)
        if n == 0:
            return None
        if self.input_type is ValueType.INT:
            return total
        special = special_sum(nan, pos_inf, neg_inf)
        return scaled_to_float(total) if special is None else special

    def _sums_many(self, states: RunSums) -> tuple[Values, np.ndarray]:
        """:meth:`_sum` of each run of a column, and where it is null; vectorized, O(runs).

        An INT column's sums are the exact integers of ``states.finite``; a FLOAT column's
        are its rounded finite sums, or NaN where a NaN or both infinities occur, else ±inf
        where one infinity does (Spark's rules, as :meth:`_sum`).
        """
        null = states.counts == 0
        if self.input_type is ValueType.INT:
            return states.finite, null
        positive, negative = states.positive > 0, states.negative > 0
        sums = np.where(positive, np.inf, np.where(negative, -np.inf, states.finite))
        return np.where((states.nan > 0) | (positive & negative), np.nan, sums), null

    def to_bytes(self, state: SumState) -> bytes:
        """Encode the five integers; the float total is stored with trailing zero bits cut."""
        n, total, *specials = state
        shift = (total & -total).bit_length() - 1 if total else 0
        return codec.encode((n, total >> shift, shift, *specials))

    def from_bytes(self, data: bytes) -> SumState:
        """Decode and check the shape; ValueError on malformed bytes."""
        fields = codec.expect_tuple(codec.decode(data), "sum state", 6)
        n, mantissa, shift, nan, pos_inf, neg_inf = (
            codec.expect_int(field, "sum state field") for field in fields
        )
        if not 0 <= shift <= _MAX_SHIFT:
            raise ValueError(f"state bytes: sum shift {shift} out of range")
        return (n, mantissa << shift, nan, pos_inf, neg_inf)


class Sum(_ExactSum):
    """Sum of the values, exact before one final rounding; empty input gives None.

    INT column: the exact sum, an int64; outside int64 :class:`ResultOverflowError`, as Spark
    SQL raises ``ARITHMETIC_OVERFLOW`` (the state stays exact, so a window that comes back
    into range sums right again). FLOAT column: NaN if any NaN or both infinities occur, else
    ±inf if one infinity occurs, else the exact sum of the values rounded once to a double
    (±inf past the double range).

    >>> agg = Sum(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([0.1, 0.2, 0.3]), np.zeros(3, dtype=np.int64)))
    0.6
    >>> agg.finalize(agg.fold(np.array([1.0, float("inf")]), np.zeros(2, dtype=np.int64)))
    inf
    """

    op: ClassVar[str] = "sum"

    def result_type(self) -> ResultType:
        """Return the input type: INT or FLOAT."""
        return ResultType(self.input_type)

    def finalize(self, state: SumState) -> int | float | None:
        """Return the sum, or None for no values.

        Raises:
            ResultOverflowError: an INT column's sum outside int64.

        """
        total = self._sum(state)
        if isinstance(total, int) and total not in INT64_RANGE:
            raise _overflow()
        return total

    def finalize_many(self, states: RunSums) -> Scalars:
        """Return each run's sum, null where the run is empty; O(runs).

        Raises:
            ResultOverflowError: an INT column's sum outside int64, as :meth:`finalize`.

        """
        sums, null = self._sums_many(states)
        if self.input_type is not ValueType.INT:
            return Scalars(canonical_array(sums), null)
        if sums.dtype == object:  # Python integers: some may lie outside int64
            if any(total not in INT64_RANGE for total in sums[~null].tolist()):
                raise _overflow()
            sums = np.where(null, 0, sums).astype(np.int64)
        return Scalars(sums, null)


class Avg(_ExactSum):
    """Mean of the values as a double; empty input gives None.

    ``sum / n`` like Spark's ``avg``, with ``sum`` as in :class:`Sum` rounded to a double
    first, so NaN and ±inf propagate the same way and a sum past the double range gives ±inf.

    >>> agg = Avg(ValueType.INT)
    >>> agg.finalize(agg.fold(np.array([1, 2]), np.zeros(2, dtype=np.int64)))
    1.5
    """

    op: ClassVar[str] = "avg"

    def result_type(self) -> ResultType:
        """Return ``FLOAT``, whatever the column type."""
        return ResultType(ValueType.FLOAT)

    def finalize(self, state: SumState) -> float | None:
        """Return the mean, or None for no values."""
        total = self._sum(state)
        if total is None:
            return None
        return canonical_float(float(total) / state[0])  # an underflow to -0.0 gives 0.0

    def finalize_many(self, states: RunSums) -> Scalars:
        """Return each run's mean (its sum rounded to a double first), null where empty."""
        sums, null = self._sums_many(states)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            means = sums.astype(np.float64) / np.where(null, 1, states.counts)
        return Scalars(canonical_array(means), null)


def _overflow() -> ResultOverflowError:
    return ResultOverflowError(
        "an integer sum is past int64, as Spark SQL's sum would be (ARITHMETIC_OVERFLOW). "
        "Fix: cast the column to double in the source's select (exact to 2^53, rounded "
        "past it)")
