"""``min``, ``max``, ``first``, ``last``: one value chosen by an order, for any column type.

``min``/``max`` use the value order of :mod:`.ordering` (NaN greatest, ``-0.0 == 0.0``,
strings by code point). ``first``/``last`` choose the earliest/latest event, ties in time
broken by the same value order: ``first`` is the value of the least ``(time, value)`` pair,
``last`` of the greatest, which is Spark's ``min(struct(ts, v)).v`` / ``max(struct(ts, v)).v``.

Results carry normalized values (``0.0`` for either zero, one NaN), so they do not depend on
batching. None of these ops is invertible: removing the extreme would need every other value.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.aggregators.codec import Scalar
from timetile.core.aggregators.columnar import Picks, RunExtremes, Runs, Scalars, empty_runs
from timetile.core.aggregators.ordering import (
    as_values,
    canonical,
    canonical_array,
    check_aligned,
    extreme,
    order_key,
)
from timetile.core.types import ResultType

#: ``first``/``last`` state: the chosen event's (time, value), or None before any value.
TimedValue = tuple[int, Scalar]


class ValueExtreme(Aggregator[Scalar | None]):
    """The least or greatest value (``largest``). State: that value or None.

    ``update`` O(n) vectorized.
    """

    largest: ClassVar[bool]
    checkpointable: ClassVar[bool] = True
    columnar: ClassVar[type] = RunExtremes

    def result_type(self) -> ResultType:
        """Return the input type."""
        return ResultType(self.input_type)

    def init(self) -> Scalar | None:
        """Return None: no value yet."""
        return None

    def update(self, state: Scalar | None, values: Values, times: Times) -> Scalar | None:
        """Merge the batch's extreme into ``state``."""
        del times  # the value order alone decides
        if len(values) == 0:
            return state
        return self.merge(state, extreme(as_values(values, self.input_type), largest=self.largest))

    def merge(self, left: Scalar | None, right: Scalar | None) -> Scalar | None:
        """Return the more extreme of the two; None is the identity. O(1)."""
        if left is None:
            return right
        if right is None:
            return left
        right_wins = order_key(right) > order_key(left)
        return right if right_wins == self.largest else left

    def finalize(self, state: Scalar | None) -> Scalar | None:
        """Return the value, or None for no values."""
        return state

    def finalize_many(self, states: RunExtremes) -> Scalars:
        """Return each run's extreme, normalized; null for an empty run. O(runs)."""
        return Scalars(canonical_array(states.values), states.empty)

    def to_bytes(self, state: Scalar | None) -> bytes:
        """Encode with :mod:`.codec`."""
        return codec.encode(state)

    def from_bytes(self, data: bytes) -> Scalar | None:
        """Decode and check the type; ValueError on malformed bytes."""
        value = codec.decode(data)
        if value is None:
            return None
        return canonical(codec.expect_scalar(value, self.input_type, self.op))


class Min(ValueExtreme):
    """The least value (NaN only if all values are NaN); None for no values.

    >>> from timetile.core.types import ValueType
    >>> agg = Min(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([1.0, float("nan")]), np.zeros(2, dtype=np.int64)))
    1.0
    """

    op: ClassVar[str] = "min"
    largest: ClassVar[bool] = False


class Max(ValueExtreme):
    """The greatest value (NaN if any value is NaN); None for no values.

    >>> from timetile.core.types import ValueType
    >>> agg = Max(ValueType.STRING)
    >>> agg.finalize(agg.fold(np.array(["b", "ä", "a"], dtype=object), np.zeros(3, dtype=np.int64)))
    'ä'
    """

    op: ClassVar[str] = "max"
    largest: ClassVar[bool] = True


class _TimedExtreme(Aggregator[TimedValue | None]):
    """The value of the least or greatest ``(time, value)`` pair.

    State: that pair or None. ``update`` O(n) vectorized; ``merge`` O(1).
    """

    latest: ClassVar[bool]
    checkpointable: ClassVar[bool] = True
    columnar: ClassVar[type] = Runs

    def result_type(self) -> ResultType:
        """Return the input type."""
        return ResultType(self.input_type)

    def init(self) -> TimedValue | None:
        """Return None: no event yet."""
        return None

    def update(self, state: TimedValue | None, values: Values, times: Times) -> TimedValue | None:
        """Merge the batch's earliest (latest) event, ties broken by value, into ``state``."""
        check_aligned(values, times)
        if len(values) == 0:
            return state
        values = as_values(values, self.input_type)
        times = np.asarray(times, dtype=np.int64)
        time = times.max() if self.latest else times.min()
        value = extreme(values[times == time], largest=self.latest)
        return self.merge(state, (int(time), value))

    def merge(self, left: TimedValue | None, right: TimedValue | None) -> TimedValue | None:
        """Return the earlier (later) of the two events; None is the identity. O(1)."""
        if left is None:
            return right
        if right is None:
            return left
        right_wins = (right[0], order_key(right[1])) > (left[0], order_key(left[1]))
        return right if right_wins == self.latest else left

    def finalize(self, state: TimedValue | None) -> Scalar | None:
        """Return the event's value, or None for no values."""
        return None if state is None else state[1]

    def finalize_many(self, states: Runs) -> Picks:
        """Pick each run's first (or last) value in event order; null for an empty run.

        The run is over the values ordered by ``(time, value)``, so its ends are the least and
        the greatest pair. O(runs).
        """
        empty = empty_runs(states)
        ends = states.highs - 1 if self.latest else states.lows
        return Picks(np.where(empty, 0, ends), empty)

    def to_bytes(self, state: TimedValue | None) -> bytes:
        """Encode ``(time, value)`` or None with :mod:`.codec`."""
        return codec.encode(state)

    def from_bytes(self, data: bytes) -> TimedValue | None:
        """Decode and check the shape and type; ValueError on malformed bytes."""
        decoded = codec.decode(data)
        if decoded is None:
            return None
        time, value = codec.expect_tuple(decoded, self.op, 2)
        return (
            codec.expect_int(time, f"{self.op} time"),
            canonical(codec.expect_scalar(value, self.input_type, self.op)),
        )


class First(_TimedExtreme):
    """The value of the earliest event; equal times go to the least value. None if empty.

    >>> from timetile.core.types import ValueType
    >>> agg = First(ValueType.INT)
    >>> agg.finalize(agg.fold(np.array([5, 3, 9]), np.array([2, 2, 4])))
    3
    """

    op: ClassVar[str] = "first"
    latest: ClassVar[bool] = False


class Last(_TimedExtreme):
    """The value of the latest event; equal times go to the greatest value. None if empty.

    >>> from timetile.core.types import ValueType
    >>> agg = Last(ValueType.FLOAT)
    >>> agg.finalize(agg.fold(np.array([5.0, float("nan"), 9.0]), np.array([4, 4, 2])))
    nan
    """

    op: ClassVar[str] = "last"
    latest: ClassVar[bool] = True
