"""Time rules: which events a query at time ``q`` sees, written once (DESIGN §2, contract).

| kind     | interval for a query at q                   |
|----------|---------------------------------------------|
| sliding  | ``[q − length, q)``                         |
| sawtooth | ``[floor(q − length, hop), q)``             |
| hopping  | ``[floor(q − length, hop), floor(q, hop))`` |
| lifetime | ``(−∞, q)``                                 |

An event at exactly ``q`` never counts: that is what stops label leakage. Before its windows
apply, a query's time is rounded down to each of its GroupBy's floors in turn (its *as-of*
time, :func:`as_of`: the day under SNAPSHOT accuracy, a pre-aggregated source's period).

Each rule is one function over a :class:`TimeArithmetic`: the three operations on times it
needs (``minus``, ``floor``, ``ceil``, each saturated at the ends of int64 milliseconds, so a
window that would reach back past the first representable time starts there), plus a
choice and a constant. The same rule then runs on a Python int (:data:`INTS`: the online
fetcher, one query at a time), on int64 arrays (:data:`ARRAYS`: the kernels) and on Spark
columns (``timetile.spark.time_columns.COLUMNS``: the backfill's plans), so offline and
online cannot disagree about a window's bounds. Cutting a window into hop-aligned pieces
(:func:`timetile.core.tiling.hops.window_pieces`) is written the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import Enum
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

#: The start used for lifetime windows: before any representable event time.
MIN_TIME = np.iinfo(np.int64).min
#: The last representable event time (int64 milliseconds).
MAX_TIME = np.iinfo(np.int64).max

T = TypeVar("T")
Int64s = npt.NDArray[np.int64]


class WindowKind(Enum):
    """How a window's interval follows the query time."""

    SLIDING = "sliding"
    SAWTOOTH = "sawtooth"
    HOPPING = "hopping"
    LIFETIME = "lifetime"


class TimeArithmetic(ABC, Generic[T]):
    """The operations the time rules are written in, for one representation of times.

    Times are epoch milliseconds within int64. ``minus`` and ``floor`` never go below
    :data:`MIN_TIME` and ``ceil`` never above :data:`MAX_TIME`: a bound that would leave
    int64 stops at its end. ``where``, ``constant`` and the operators ``<`` and ``==`` are
    the rest; the rules over many times (the hop pieces) also combine the representation's
    booleans with ``&`` and ``~``, which arrays and columns apply elementwise.
    """

    @abstractmethod
    def minus(self, times: T, millis: int) -> T:
        """Return ``times − millis`` (``millis >= 0``), at least :data:`MIN_TIME`."""

    @abstractmethod
    def floor(self, times: T, step: int) -> T:
        """Return the largest multiple of ``step > 0`` at or below each time, at least MIN_TIME.

        Multiples count from the epoch, so times before it floor down, not toward zero.
        """

    @abstractmethod
    def ceil(self, times: T, step: int) -> T:
        """Return the smallest multiple of ``step > 0`` at or above each time, at most MAX_TIME."""

    @abstractmethod
    def where(self, condition: Any, then: T, otherwise: T) -> T:
        """Return ``then`` where ``condition`` holds, else ``otherwise``."""

    @abstractmethod
    def constant(self, millis: int, like: T) -> T:
        """Return ``millis`` for every time of ``like``."""


class IntTimes(TimeArithmetic[int]):
    """:class:`TimeArithmetic` on one Python int: O(1), no arrays (the fetcher's path)."""

    def minus(self, times: int, millis: int) -> int:
        """Return ``times − millis``, at least MIN_TIME."""
        return max(times - millis, _MIN)

    def floor(self, times: int, step: int) -> int:
        """Return ``times`` rounded down to a multiple of ``step``, at least MIN_TIME."""
        return max(times - times % step, _MIN)

    def ceil(self, times: int, step: int) -> int:
        """Return ``times`` rounded up to a multiple of ``step``, at most MAX_TIME."""
        return min(times + (-times) % step, _MAX)

    def where(self, condition: Any, then: int, otherwise: int) -> int:
        """Return ``then`` if ``condition`` else ``otherwise``."""
        return then if condition else otherwise

    def constant(self, millis: int, like: int) -> int:
        """Return ``millis``."""
        del like
        return millis


class ArrayTimes(TimeArithmetic[Int64s]):
    """:class:`TimeArithmetic` on int64 arrays, vectorized: O(n) for n times.

    int64 arithmetic wraps around silently; a result past an end is detected by its having
    moved the wrong way, and replaced by that end.
    """

    def minus(self, times: Int64s, millis: int) -> Int64s:
        """Return ``times − millis``, at least MIN_TIME."""
        moved = times - np.int64(millis)
        return np.where(moved > times, MIN_TIME, moved)

    def floor(self, times: Int64s, step: int) -> Int64s:
        """Return the times rounded down to multiples of ``step``, at least MIN_TIME."""
        floored = times - times % np.int64(step)  # numpy's % of a positive step is >= 0
        return np.where(floored > times, MIN_TIME, floored)

    def ceil(self, times: Int64s, step: int) -> Int64s:
        """Return the times rounded up to multiples of ``step``, at most MAX_TIME."""
        up = (np.int64(step) - times % np.int64(step)) % np.int64(step)
        raised = times + up
        return np.where(raised < times, MAX_TIME, raised)

    def where(self, condition: Any, then: Int64s, otherwise: Int64s) -> Int64s:
        """Return ``np.where(condition, then, otherwise)``."""
        chosen: Int64s = np.where(condition, then, otherwise)
        return chosen

    def constant(self, millis: int, like: Int64s) -> Int64s:
        """Return an array like ``like`` full of ``millis``."""
        return np.full_like(like, millis)


_MIN = int(MIN_TIME)
_MAX = int(MAX_TIME)
#: The time rules on Python ints.
INTS = IntTimes()
#: The time rules on int64 arrays.
ARRAYS = ArrayTimes()


def window_span(times: TimeArithmetic[T], at: T, kind: WindowKind, length_ms: int | None,
                hop_ms: int | None) -> tuple[T, T]:
    """Return the window ``[start, end)`` of queries at ``at``: the rule of the module's table.

    A lifetime window starts at :data:`MIN_TIME`; so does any window that would start before
    it. ``times`` says what ``at`` is (:data:`INTS`, :data:`ARRAYS`, Spark columns).

    >>> window_span(INTS, 10_650, WindowKind.HOPPING, 1_000, 300)
    (9600, 10500)

    Raises:
        ValueError: a window other than lifetime without a length, or a sawtooth or hopping
            one without a hop.

    """
    if kind is WindowKind.LIFETIME:
        return times.constant(_MIN, at), at
    if length_ms is None:
        raise ValueError(f"a {kind.value} window needs a length")
    if kind is WindowKind.SLIDING:
        return times.minus(at, length_ms), at
    if hop_ms is None:
        raise ValueError(f"a {kind.value} window needs a hop")
    start = times.floor(times.minus(at, length_ms), hop_ms)
    return start, (at if kind is WindowKind.SAWTOOTH else times.floor(at, hop_ms))


def window_interval(at: int, kind: WindowKind, length_ms: int | None,
                    hop_ms: int | None) -> tuple[int, int]:
    """Return the window ``[start, end)`` of one query time: :func:`window_span` on an int.

    The online fetcher calls it per feature. O(1).

    >>> window_interval(10_650, WindowKind.SAWTOOTH, 1_000, 300)
    (9600, 10650)
    """
    return window_span(INTS, at, kind, length_ms, hop_ms)


def window_bounds(query_times: npt.ArrayLike, kind: WindowKind, length_ms: int | None,
                  hop_ms: int | None) -> tuple[Int64s, Int64s]:
    """Return the windows ``[start, end)`` of many query times: :func:`window_span` on arrays.

    Vectorized: O(n) for n query times.

    >>> q = np.array([10_650])
    >>> [b.tolist() for b in window_bounds(q, WindowKind.SLIDING, 1_000, None)]
    [[9650], [10650]]
    >>> [b.tolist() for b in window_bounds(q, WindowKind.HOPPING, 1_000, 300)]
    [[9600], [10500]]
    """
    return window_span(ARRAYS, np.asarray(query_times, dtype=np.int64), kind, length_ms, hop_ms)


def as_of(times: TimeArithmetic[T], at: T, floors: Sequence[int]) -> T:
    """Return when the windows of queries at ``at`` end: ``at`` floored to each of ``floors``.

    ``floors`` is a GroupBy's (:attr:`timetile.api.group_by.GroupBy.floors`): the day under
    SNAPSHOT accuracy (the value as of the end of the previous day), then a pre-aggregated
    source's period (the value as of its last landed period); empty, ``at`` itself.

    >>> as_of(INTS, 2 * 86_400_000 + 5, (86_400_000,))
    172800000
    """
    for step in floors:
        at = times.floor(at, step)
    return at


def window_reach(kind: WindowKind, length_ms: int | None, hop_ms: int | None) -> int | None:
    """Return how far before its query a window can start (``q − start``), at most.

    Every event a query at ``q`` sees lies in ``[q − reach, q)``; None for the lifetime
    window, which reaches back forever.

    >>> window_reach(WindowKind.SLIDING, 1_000, None), window_reach(WindowKind.HOPPING, 1_000, 300)
    (1000, 1299)
    """
    if kind is WindowKind.LIFETIME:
        return None
    if length_ms is None:
        raise ValueError(f"a {kind.value} window needs a length")
    if kind is WindowKind.SLIDING:
        return length_ms
    if hop_ms is None:
        raise ValueError(f"a {kind.value} window needs a hop")
    return length_ms + hop_ms - 1  # the start is q − length, floored to a hop
