"""``decayed_count``, ``decayed_sum`` and ``decayed_avg``: exponentially decayed aggregates.

At a query time ``q`` each event of the window weighs ``2^(−(q − ts) / half_life)``:

- ``decayed_count`` is ``Σ w``, over every non-null value (NaN and ±inf included);
- ``decayed_sum`` is ``Σ v · w``, with ``sum``'s rules for specials: NaN if a NaN or both
  infinities occur, else ±inf if one infinity does;
- ``decayed_avg`` is ``decayed_sum / decayed_count`` (``avg``'s rules for specials).

An empty window gives ``decayed_count`` 0.0 and None for the other two.

The state is a value anchored at a time (seed 001: an infinite-memory computation made
tilable by auxiliary state): ``(anchor, weight, total, nan, pos_inf, neg_inf)`` holds, at
``anchor`` (the newest event time folded in), ``weight = Σ 2^(−(anchor − ts)/h)`` and
``total = Σ v · 2^(−(anchor − ts)/h)`` over the finite values, and counts the specials apart
(an infinite value would turn ``inf · 0`` into NaN where its weight underflows). Two states
merge by decaying the older anchor to the newer one, as ClickHouse's
``exponentialTimeDecayedSum`` does. Every weight is at most 1, so nothing overflows however
long the data (ten years at a one-minute half-life only underflow old weights to 0), and the
newest event weighs exactly 1: ``weight >= 1`` for any non-empty state, so ``decayed_avg``
(``total / weight``, the query's factor cancelling) stays the weighted mean even where every
weight at ``q`` underflows a double, and ``decayed_sum`` is then 0.0.

Results depend on the query time, so the engines finalize with :meth:`Aggregator.finalize_at`;
plain :meth:`~Aggregator.finalize` gives the value at the state's anchor. Error: a batch's
sums are correctly rounded (``math.fsum`` of the rounded products), each merge rounds once
more, and each weight is within a few units in the last place (C's ``pow`` of an exponent of
at most 1,075 in magnitude, beyond which it underflows): well within 1e-12 of ``Σ|v · w|``.
A row dated after the query (an entity row's time may be) weighs more than 1, as the formula
says; past the double range its weight is +inf.
Not invertible (a retraction would subtract nearly equal numbers), so the sliding paths use
trees of merges, never prefix differences.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import ClassVar, TypeAlias

import numpy as np

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.aggregators.counting import special_sum
from timetile.core.aggregators.ordering import as_values, canonical_float
from timetile.core.types import ResultType, ValueType

#: ``(anchor, weight, total, nan, pos_inf, neg_inf)``; the anchor is None for no values.
DecayedState: TypeAlias = tuple[int | None, float, float, int, int, int]

_EMPTY: DecayedState = (None, 0.0, 0.0, 0, 0, 0)


def _power_of_two(exponent: float) -> float:
    """Return ``2 ** exponent`` with C's ``pow``, as ``np.power`` computes it; +inf past doubles."""
    try:
        return float(2.0 ** exponent)
    except OverflowError:  # a row far after the query time
        return math.inf


def _sum(terms: np.ndarray) -> float:
    """Return the correctly rounded sum of ``terms`` (``math.fsum``); ±inf past doubles."""
    try:
        return math.fsum(terms.tolist())
    except OverflowError:  # an intermediate sum past the double range: so is the total
        return float(np.sum(terms))


class _Decayed(Aggregator[DecayedState]):
    """Shared state and merge of the decayed ops (see the module's docstring).

    ``update`` is O(len(values)) vectorized (``exp2`` of the batch, then ``fsum``); ``merge``
    and ``finalize_at`` are O(1).

    Args:
        input_type: the column's type.
        half_life: the half-life in milliseconds, positive.

    """

    checkpointable: ClassVar[bool] = True

    def __init__(self, input_type: ValueType, half_life: int) -> None:
        super().__init__(input_type)
        if isinstance(half_life, bool) or not isinstance(half_life, int) or half_life <= 0:
            raise ValueError(f"{self.op}: half_life must be a positive number of milliseconds, "
                             f"not {half_life!r}")
        self.half_life = half_life

    def needs_times(self) -> bool:
        """Return True: a value weighs by its age at the query's time."""
        return True

    def result_type(self) -> ResultType:
        """Return ``FLOAT``, whatever the column type."""
        return ResultType(ValueType.FLOAT)

    def init(self) -> DecayedState:
        """Return the state of no values."""
        return _EMPTY

    def update(self, state: DecayedState, values: Values, times: Times) -> DecayedState:
        """Fold a batch: weights relative to its newest time, sums correctly rounded."""
        if len(values) == 0:
            return state
        times = np.asarray(times, dtype=np.int64)
        anchor = int(times.max())
        # np.power calls the same C pow as _power_of_two: one weight, one rounding
        weights = np.power(2.0, -(anchor - times).astype(np.float64) / self.half_life)
        if self.numeric_only:
            numbers = as_values(values, self.input_type).astype(np.float64)
            finite = np.isfinite(numbers)
            total = _sum(numbers[finite] * weights[finite])
            specials = (int(np.isnan(numbers).sum()), int((numbers == np.inf).sum()),
                        int((numbers == -np.inf).sum()))
        else:
            total, specials = 0.0, (0, 0, 0)
        batch = (anchor, _sum(weights), total, *specials)
        return self.merge(state, batch)

    def merge(self, left: DecayedState, right: DecayedState) -> DecayedState:
        """Decay the older anchor's sums to the newer anchor and add. O(1)."""
        older, newer = (left, right) if (left[0] or 0) <= (right[0] or 0) else (right, left)
        if older[0] is None or newer[0] is None:
            return newer if older[0] is None else older
        factor = _power_of_two(-(newer[0] - older[0]) / self.half_life)
        return (newer[0], older[1] * factor + newer[1], older[2] * factor + newer[2],
                older[3] + newer[3], older[4] + newer[4], older[5] + newer[5])

    def _at(self, state: DecayedState, at_ms: int | None) -> tuple[float, float]:
        """Return the state's weight and total decayed to ``at_ms`` (its anchor when None)."""
        anchor = state[0]
        if anchor is None or at_ms is None:
            return state[1], state[2]
        factor = _power_of_two(-(at_ms - anchor) / self.half_life)
        return state[1] * factor, state[2] * factor

    @abstractmethod
    def finalize_at(self, state: DecayedState, at_ms: int | None) -> float | None:
        """Return the result at ``at_ms``; at the state's anchor for None."""

    def finalize(self, state: DecayedState) -> float | None:
        """Return the result at the state's anchor (its newest event)."""
        return self.finalize_at(state, None)

    def to_bytes(self, state: DecayedState) -> bytes:
        """Encode the six fields with :mod:`.codec` (floats bit for bit)."""
        return codec.encode(state)

    def from_bytes(self, data: bytes) -> DecayedState:
        """Decode and check the shape; ValueError on malformed bytes."""
        anchor, weight, total, *specials = codec.expect_tuple(
            codec.decode(data), f"{self.op} state", 6)
        counts = [codec.expect_int(count, f"{self.op} state count") for count in specials]
        if anchor is not None:
            anchor = codec.expect_int(anchor, f"{self.op} state anchor")
        nan, pos_inf, neg_inf = counts
        return (anchor, codec.expect_float(weight, f"{self.op} state weight"),
                codec.expect_float(total, f"{self.op} state total"), nan, pos_inf, neg_inf)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input_type.value}, half_life={self.half_life})"


class DecayedCount(_Decayed):
    """``Σ 2^(−(q − ts)/half_life)`` over the non-null values; any column type; 0.0 if empty.

    >>> agg = DecayedCount(ValueType.STRING, half_life=10)
    >>> state = agg.fold(np.array(["a", "b"], dtype=object), np.array([0, 10]))
    >>> agg.finalize_at(state, 10), agg.finalize_at(state, 20), agg.finalize_at(agg.init(), 5)
    (1.5, 0.75, 0.0)
    """

    op: ClassVar[str] = "decayed_count"

    def finalize_at(self, state: DecayedState, at_ms: int | None) -> float:
        """Return the decayed count at ``at_ms``: 0.0 for no values."""
        weight, _ = self._at(state, at_ms)
        return canonical_float(weight)


class DecayedSum(_Decayed):
    """``Σ v · 2^(−(q − ts)/half_life)``; numeric columns; None if empty (see the module).

    >>> agg = DecayedSum(ValueType.INT, half_life=10)
    >>> agg.finalize_at(agg.fold(np.array([4, 2]), np.array([0, 10])), 20)
    2.0
    """

    op: ClassVar[str] = "decayed_sum"
    numeric_only: ClassVar[bool] = True

    def finalize_at(self, state: DecayedState, at_ms: int | None) -> float | None:
        """Return the decayed sum at ``at_ms``, or None for no values."""
        if state[0] is None:
            return None
        special = special_sum(state[3], state[4], state[5])  # nan, +inf, -inf
        if special is not None:
            return special
        _, total = self._at(state, at_ms)
        return canonical_float(total)


class DecayedAvg(_Decayed):
    """Decayed sum over decayed count: the weighted mean; None if empty (see the module).

    Independent of the query time, the factor cancelling: computed at the anchor, where the
    newest event weighs 1, so it never underflows.

    >>> agg = DecayedAvg(ValueType.FLOAT, half_life=10)
    >>> agg.finalize_at(agg.fold(np.array([4.0, 1.0]), np.array([0, 10])), 10**9)
    2.0
    """

    op: ClassVar[str] = "decayed_avg"
    numeric_only: ClassVar[bool] = True

    def finalize_at(self, state: DecayedState, at_ms: int | None) -> float | None:
        """Return the weighted mean, or None for no values."""
        del at_ms  # the query's factor cancels
        if state[0] is None:
            return None
        special = special_sum(state[3], state[4], state[5])  # nan, +inf, -inf
        if special is not None:
            return special
        return canonical_float(float(state[2] / state[1]))
