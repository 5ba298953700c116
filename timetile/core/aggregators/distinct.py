"""``unique_count`` and ``histogram``: exact, invertible counts of distinct values.

Both keep one state, a value → multiplicity map (a multiset), and differ only in
``finalize``. Values are identified as Spark's ``count(DISTINCT …)`` does: all NaNs are one
value and ``-0.0`` equals ``0.0`` (keys are normalized by :func:`.ordering.canonical`).

Retraction subtracts multiplicities and drops those that reach zero. A partial state may hold
negative multiplicities (a retraction folded before its insertion, e.g. in another tile);
merging it with the insertion cancels them, so invertible ops form a group. Finalizing a state
with a negative multiplicity is a caller's error.

Memory is O(distinct values); states are never mutated, so ``update`` copies the map.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.aggregators.codec import Scalar
from timetile.core.aggregators.columnar import Counted, RankedRuns, Scalars, empty_runs, never_null
from timetile.core.aggregators.ordering import (
    as_values,
    canonical,
    normalized,
    order_key,
    to_scalars,
)
from timetile.core.kernels.multisets import window_distinct_counts, window_histograms
from timetile.core.types import ResultType, Shape, ValueType

#: The state: normalized value → multiplicity (never zero).
Multiset = Mapping[Scalar, int]


def _batch_counts(values: Values) -> dict[Scalar, int]:
    """Multiplicities of one batch's normalized values. O(n log n), vectorized but for strings."""
    if values.dtype.kind == "O":
        items: list[Any] = values.tolist()
        return dict(Counter(items))
    keys, counts = np.unique(normalized(values), return_counts=True)  # NaNs count as one
    return dict(zip(to_scalars(keys), counts.tolist(), strict=True))


def _add(left: Multiset, right: Multiset, sign: int) -> Multiset:
    """``left + sign * right``, dropping zero multiplicities. O(len(left) + len(right))."""
    if not right:
        return left
    if not left and sign > 0:
        return right
    out = dict(left)
    for key, count in right.items():
        total = out.get(key, 0) + sign * count
        if total:
            out[key] = total
        else:
            del out[key]
    return out


class _DistinctCounts(Aggregator[Multiset]):
    """Shared machinery: an exact, invertible multiset of normalized values.

    ``update``/``retract`` O(n log n + distinct(state)); ``merge`` O(distinct values).
    """

    invertible: ClassVar[bool] = True
    columnar: ClassVar[type] = RankedRuns

    def init(self) -> Multiset:
        """Return the empty multiset."""
        return {}

    def update(self, state: Multiset, values: Values, times: Times) -> Multiset:
        """Add the batch's multiplicities."""
        del times  # multiplicities ignore event order
        if len(values) == 0:
            return state
        return _add(state, _batch_counts(as_values(values, self.input_type)), 1)

    def merge(self, left: Multiset, right: Multiset) -> Multiset:
        """Add multiplicities."""
        return _add(left, right, 1)

    def retract(self, state: Multiset, values: Values, times: Times) -> Multiset:
        """Subtract the batch's multiplicities; exactly undoes :meth:`update`."""
        del times
        if len(values) == 0:
            return state
        return _add(state, _batch_counts(as_values(values, self.input_type)), -1)

    def unmerge(self, whole: Multiset, part: Multiset) -> Multiset:
        """Subtract multiplicities: exactly undoes :meth:`merge`. O(distinct values)."""
        return _add(whole, part, -1)

    def _check_not_negative(self, state: Multiset) -> None:
        if any(count < 0 for count in state.values()):
            raise ValueError(f"{self.op}: the state holds more retracted values than folded ones")

    def to_bytes(self, state: Multiset) -> bytes:
        """Encode ``(values, counts)`` in the value order, so equal states give equal bytes."""
        items = sorted(state.items(), key=lambda item: order_key(item[0]))
        return codec.encode(([key for key, _ in items], [count for _, count in items]))

    def from_bytes(self, data: bytes) -> Multiset:
        """Decode and check types and uniqueness; ValueError on malformed bytes."""
        keys, counts = codec.expect_tuple(codec.decode(data), self.op, 2)
        keys = codec.expect_tuple(keys, f"{self.op} values")
        counts = codec.expect_tuple(counts, f"{self.op} counts", len(keys))
        state: dict[Scalar, int] = {}
        for key, count in zip(keys, counts, strict=True):
            value = canonical(codec.expect_scalar(key, self.input_type, self.op))
            multiplicity = codec.expect_int(count, f"{self.op} count")
            if value in state or multiplicity == 0:
                raise ValueError(f"state bytes: {self.op} repeats a value or holds a zero count")
            state[value] = multiplicity
        return state


class UniqueCount(_DistinctCounts):
    """Exact number of distinct values, Spark's ``count(DISTINCT …)``; 0 for no values.

    >>> from timetile.core.types import ValueType
    >>> agg = UniqueCount(ValueType.FLOAT)
    >>> values = np.array([0.0, -0.0, float("nan"), float("nan"), 1.0])
    >>> agg.finalize(agg.fold(values, np.zeros(5, dtype=np.int64)))
    3
    """

    op: ClassVar[str] = "unique_count"

    def result_type(self) -> ResultType:
        """Return ``INT``, whatever the column type."""
        return ResultType(ValueType.INT)

    def finalize(self, state: Multiset) -> int:
        """Return the number of distinct values.

        Raises:
            ValueError: if more was retracted than folded.

        """
        self._check_not_negative(state)
        return len(state)

    def finalize_many(self, states: RankedRuns) -> Scalars:
        """Return how many distinct values each run holds: 0 for an empty run, never null.

        By the compiled multiset sweep of
        :func:`~timetile.core.kernels.multisets.window_distinct_counts`: O(n + q) per key.
        """
        return Scalars(window_distinct_counts(*states), never_null(len(states.lows)))


class Histogram(_DistinctCounts):
    """Map from each distinct value to how many times it occurs; None for no values.

    The map's keys come in the value order (NaN last).

    >>> from timetile.core.types import ValueType
    >>> agg = Histogram(ValueType.STRING)
    >>> agg.finalize(agg.fold(np.array(["b", "a", "b"], dtype=object), np.zeros(3, dtype=np.int64)))
    {'a': 1, 'b': 2}
    """

    op: ClassVar[str] = "histogram"

    def result_type(self) -> ResultType:
        """Return a map from the input type to ``INT``."""
        return ResultType(ValueType.INT, Shape.MAP, key=self.input_type)

    def finalize(self, state: Multiset) -> dict[Scalar, int] | None:
        """Return the counts, or None for no values.

        Raises:
            ValueError: if more was retracted than folded.

        """
        self._check_not_negative(state)
        if not state:
            return None
        return dict(sorted(state.items(), key=lambda item: order_key(item[0])))

    def finalize_many(self, states: RankedRuns) -> Counted:
        """Return each run's distinct values (their ranks, in the value order) with counts.

        Null for an empty run. By the compiled multiset sweep of
        :func:`~timetile.core.kernels.multisets.window_histograms`: O((n + q + e) log d) per
        key for e entries.
        """
        offsets, ranks, multiplicities = window_histograms(*states)
        return Counted(offsets, ranks, multiplicities, empty_runs(states))
