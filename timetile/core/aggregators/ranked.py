"""``first_k``, ``last_k``, ``top_k``, ``bottom_k``: the k best entries under an order.

The state is a tuple of at most ``k`` entries already in output order, so ``merge`` is one
linear merge of two sorted runs cut at ``k`` and ``finalize`` is a projection. Orders:

- ``top_k`` / ``bottom_k``: values by the value order of :mod:`.ordering` (NaN greatest),
  largest first / smallest first;
- ``first_k`` / ``last_k``: events by ``(time, value)``, earliest first / most recent first.

Duplicates are kept. Results carry normalized values (``0.0`` for either zero, one NaN). None
of these ops is invertible: a dropped entry cannot come back.
"""

from __future__ import annotations

import heapq
import operator
from abc import abstractmethod
from itertools import islice
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.aggregators.codec import Decoded, Encodable, Scalar
from timetile.core.aggregators.columnar import Lists, RankedRuns, Runs, empty_runs
from timetile.core.aggregators.extremes import TimedValue
from timetile.core.aggregators.ordering import (
    as_values,
    canonical,
    check_aligned,
    normalized,
    order_key,
    sorted_order,
    to_scalars,
)
from timetile.core.kernels.multisets import window_top_k
from timetile.core.types import ResultType, Shape, ValueType

EntryT = TypeVar("EntryT")


class _Ranked(Aggregator[tuple[EntryT, ...]], Generic[EntryT]):
    """Shared machinery: a k-bounded tuple of entries in output order.

    ``merge`` O(k); ``update`` O(n) to select candidates plus O(c log c) to sort the c
    candidates (c is k, or more where many events tie at the cut-off time); state O(k).
    """

    descending: ClassVar[bool]
    checkpointable: ClassVar[bool] = True

    def __init__(self, input_type: ValueType, k: int) -> None:
        super().__init__(input_type)
        if isinstance(k, bool):
            raise TypeError(f"{self.op}: k must be an integer, not a bool")
        k = operator.index(k)
        if k < 1:
            raise ValueError(f"{self.op}: k must be at least 1, got {k}")
        self.k = k

    @abstractmethod
    def _key(self, entry: EntryT) -> Any:
        """Return the entry's sort key (ascending order)."""

    @abstractmethod
    def _select(self, values: Values, times: Times) -> tuple[EntryT, ...]:
        """Select the best ``k`` entries of a non-empty batch, in output order."""

    @abstractmethod
    def _value(self, entry: EntryT) -> Scalar:
        """Return the value an entry contributes to the result."""

    @abstractmethod
    def _encodable(self, entry: EntryT) -> Encodable:
        """Return the entry in :mod:`.codec` terms."""

    @abstractmethod
    def _decoded(self, item: Decoded) -> EntryT:
        """Inverse of :meth:`_encodable`, checking types; ValueError on bad input."""

    def result_type(self) -> ResultType:
        """Return an array of the input type."""
        return ResultType(self.input_type, Shape.ARRAY)

    def init(self) -> tuple[EntryT, ...]:
        """Return no entries."""
        return ()

    def update(self, state: tuple[EntryT, ...], values: Values, times: Times) -> tuple[EntryT, ...]:
        """Merge the batch's best ``k`` entries into ``state``."""
        if len(values) == 0:
            return state
        return self.merge(state, self._select(values, times))

    def merge(self, left: tuple[EntryT, ...], right: tuple[EntryT, ...]) -> tuple[EntryT, ...]:
        """Return the best ``k`` of both, in output order. O(k)."""
        if not left:
            return right
        if not right:
            return left
        merged = heapq.merge(left, right, key=self._key, reverse=self.descending)
        return tuple(islice(merged, self.k))

    def finalize(self, state: tuple[EntryT, ...]) -> list[Scalar] | None:
        """Return the entries' values in output order, or None for no values."""
        if not state:
            return None
        return [self._value(entry) for entry in state]

    def to_bytes(self, state: tuple[EntryT, ...]) -> bytes:
        """Encode the entries with :mod:`.codec`."""
        return codec.encode([self._encodable(entry) for entry in state])

    def from_bytes(self, data: bytes) -> tuple[EntryT, ...]:
        """Decode, check types, and restore order and the ``k`` bound; ValueError if malformed."""
        items = codec.expect_tuple(codec.decode(data), self.op)
        entries = sorted((self._decoded(item) for item in items), key=self._key)
        if self.descending:
            entries.reverse()
        return tuple(entries[: self.k])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input_type.value}, k={self.k})"


class _RankedValues(_Ranked[Scalar]):
    """Entries are values, ranked by the value order."""

    columnar: ClassVar[type] = RankedRuns

    def finalize_many(self, states: RankedRuns) -> Lists:
        """Return each run's ``k`` largest (smallest) values' ranks, in output order.

        Repeats kept, null for an empty run; by the compiled multiset sweep of
        :func:`~timetile.core.kernels.multisets.window_top_k`: O((n + q·k) log d).
        """
        offsets, chosen = window_top_k(*states, self.k, self.descending)
        return Lists(offsets, chosen, empty_runs(states))

    def _key(self, entry: Scalar) -> Any:
        return order_key(entry)

    def _select(self, values: Values, times: Times) -> tuple[Scalar, ...]:
        del times  # the value order alone decides
        values = as_values(values, self.input_type)
        if values.dtype.kind == "O":  # strings: Python compares by code point
            items: list[Any] = values.tolist()
            pick = heapq.nlargest if self.descending else heapq.nsmallest
            return tuple(pick(self.k, items))
        keys = normalized(values)
        n, k = len(keys), self.k
        if n > k:  # numpy partitions and sorts NaN last, as the value order wants
            if self.descending:
                keys = np.partition(keys, n - k)[n - k :]
            else:
                keys = np.partition(keys, k - 1)[:k]
        ordered = np.sort(keys)
        return tuple(to_scalars(ordered[::-1] if self.descending else ordered))

    def _value(self, entry: Scalar) -> Scalar:
        return entry

    def _encodable(self, entry: Scalar) -> Encodable:
        return entry

    def _decoded(self, item: Decoded) -> Scalar:
        return canonical(codec.expect_scalar(item, self.input_type, self.op))


class _RankedEvents(_Ranked[TimedValue]):
    """Entries are ``(time, value)`` events, ranked by time, then by value."""

    columnar: ClassVar[type] = Runs

    def finalize_many(self, states: Runs) -> Lists:
        """Return the positions of each run's ``k`` earliest (most recent) values, in order.

        The run is over the values ordered by ``(time, value)``: the earliest first, or the
        most recent first. Null for an empty run. O(runs · k), vectorized.
        """
        lows, highs = states
        if self.descending:  # the k most recent, most recent first
            starts, ends = np.maximum(lows, highs - self.k), highs
        else:  # the k earliest, earliest first
            starts, ends = lows, np.minimum(highs, lows + self.k)
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
        positions = (np.repeat(ends - 1, lengths) - within if self.descending
                     else np.repeat(starts, lengths) + within)
        return Lists(offsets, positions.astype(np.int64), empty_runs(states))

    def _key(self, entry: TimedValue) -> Any:
        return (entry[0], order_key(entry[1]))

    def _select(self, values: Values, times: Times) -> tuple[TimedValue, ...]:
        check_aligned(values, times)
        values = as_values(values, self.input_type)
        times = np.asarray(times, dtype=np.int64)
        n, k = len(times), self.k
        if n > k:  # only events no later (earlier) than the k-th earliest (latest) time
            if self.descending:
                keep = times >= np.partition(times, n - k)[n - k]
            else:
                keep = times <= np.partition(times, k - 1)[k - 1]
            values, times = values[keep], times[keep]
        order = sorted_order(values, times)
        order = order[::-1][:k] if self.descending else order[:k]
        return tuple(zip(times[order].tolist(), to_scalars(values[order]), strict=True))

    def _value(self, entry: TimedValue) -> Scalar:
        return entry[1]

    def _encodable(self, entry: TimedValue) -> Encodable:
        return entry

    def _decoded(self, item: Decoded) -> TimedValue:
        time, value = codec.expect_tuple(item, f"{self.op} event", 2)
        return (
            codec.expect_int(time, f"{self.op} time"),
            canonical(codec.expect_scalar(value, self.input_type, self.op)),
        )


class FirstK(_RankedEvents):
    """The values of the ``k`` earliest events, earliest first (ties in time by value).

    >>> from timetile.core.types import ValueType
    >>> agg = FirstK(ValueType.INT, k=2)
    >>> agg.finalize(agg.fold(np.array([5, 3, 9]), np.array([2, 2, 1])))
    [9, 3]
    """

    op: ClassVar[str] = "first_k"
    descending: ClassVar[bool] = False


class LastK(_RankedEvents):
    """The values of the ``k`` most recent events, most recent first (ties in time by value).

    >>> from timetile.core.types import ValueType
    >>> agg = LastK(ValueType.INT, k=2)
    >>> agg.finalize(agg.fold(np.array([5, 3, 9]), np.array([2, 2, 1])))
    [5, 3]
    """

    op: ClassVar[str] = "last_k"
    descending: ClassVar[bool] = True


class TopK(_RankedValues):
    """The ``k`` largest values, largest first (NaN is the largest value).

    >>> from timetile.core.types import ValueType
    >>> agg = TopK(ValueType.FLOAT, k=2)
    >>> agg.finalize(agg.fold(np.array([1.0, float("nan"), 3.0]), np.zeros(3, dtype=np.int64)))
    [nan, 3.0]
    """

    op: ClassVar[str] = "top_k"
    descending: ClassVar[bool] = True


class BottomK(_RankedValues):
    """The ``k`` smallest values, smallest first.

    >>> from timetile.core.types import ValueType
    >>> agg = BottomK(ValueType.STRING, k=2)
    >>> agg.finalize(agg.fold(np.array(["b", "", "a"], dtype=object), np.zeros(3, dtype=np.int64)))
    ['', 'a']
    """

    op: ClassVar[str] = "bottom_k"
    descending: ClassVar[bool] = False
