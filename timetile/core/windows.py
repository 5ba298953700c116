"""Window arithmetic: which events a query at time ``q`` sees (DESIGN §2, contract).

| kind     | interval for a query at q              |
|----------|----------------------------------------|
| sliding  | ``[q − length, q)``                    |
| sawtooth | ``[floor(q − length, hop), q)``        |
| hopping  | ``[floor(q − length, hop), floor(q, hop))`` |
| lifetime | ``(−∞, q)``                            |

An event at exactly ``q`` never counts: that is what stops label leakage.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
import numpy.typing as npt

from timetile.core.timeutil import floor_to

#: The start used for lifetime windows: before any representable event time.
MIN_TIME = np.iinfo(np.int64).min
#: The last representable event time (int64 milliseconds).
MAX_TIME = np.iinfo(np.int64).max


class WindowKind(Enum):
    """How a window's interval follows the query time."""

    SLIDING = "sliding"
    SAWTOOTH = "sawtooth"
    HOPPING = "hopping"
    LIFETIME = "lifetime"


def window_interval(at: int, kind: WindowKind, length_ms: int | None,
                    hop_ms: int | None) -> tuple[int, int]:
    """Return the window ``[start, end)`` of one query time, in plain integer arithmetic.

    :func:`window_bounds` for a scalar: the online fetcher calls it per feature.

    >>> window_interval(10_650, WindowKind.HOPPING, 1_000, 300)
    (9600, 10500)
    """
    if kind is WindowKind.LIFETIME:
        return int(MIN_TIME), at
    if length_ms is None:
        raise ValueError(f"a {kind.value} window needs a length")
    if kind is WindowKind.SLIDING:
        return at - length_ms, at
    if hop_ms is None:
        raise ValueError(f"a {kind.value} window needs a hop")
    start = (at - length_ms) - (at - length_ms) % hop_ms
    if kind is WindowKind.SAWTOOTH:
        return start, at
    return start, at - at % hop_ms


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


def window_bounds(
    query_times: npt.NDArray[np.int64],
    kind: WindowKind,
    length_ms: int | None,
    hop_ms: int | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Half-open intervals ``[start, end)`` of the window for each query time.

    Vectorized: O(n) for n query times.

    >>> q = np.array([10_650])
    >>> [b.tolist() for b in window_bounds(q, WindowKind.SLIDING, 1_000, None)]
    [[9650], [10650]]
    >>> [b.tolist() for b in window_bounds(q, WindowKind.SAWTOOTH, 1_000, 300)]
    [[9600], [10650]]
    >>> [b.tolist() for b in window_bounds(q, WindowKind.HOPPING, 1_000, 300)]
    [[9600], [10500]]
    """
    q = np.asarray(query_times, dtype=np.int64)
    if kind is WindowKind.LIFETIME:
        return np.full_like(q, MIN_TIME), q
    if length_ms is None:
        raise ValueError(f"a {kind.value} window needs a length")
    if kind is not WindowKind.SLIDING and hop_ms is None:
        raise ValueError(f"a {kind.value} window needs a hop")
    hop = hop_ms or 0  # a sliding window has none
    if q.size and int(q.min()) < MIN_TIME + length_ms + hop:
        return _from_the_first_time(q, kind, length_ms, hop)
    if kind is WindowKind.SLIDING:
        return q - length_ms, q
    start = floor_to(q - length_ms, hop)
    if kind is WindowKind.SAWTOOTH:
        return start, q
    return start, floor_to(q, hop)


def _from_the_first_time(q: npt.NDArray[np.int64], kind: WindowKind, length_ms: int,
                         hop_ms: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`window_bounds` where some window reaches back past the first int64 time.

    Such a window starts there, and every other bound is the usual one: computed in Python's
    unbounded integers, where ``q - length`` (or its floor to the hop) cannot wrap around.
    O(n) interpreted, for the rare batch that holds such a query. ``hop_ms`` is 0 for a
    sliding window.
    """
    def floored(at: int) -> int:
        return max(int(MIN_TIME), at - at % hop_ms)

    times = q.tolist()
    if kind is WindowKind.SLIDING:
        starts = [max(int(MIN_TIME), at - length_ms) for at in times]
    else:
        starts = [floored(at - length_ms) for at in times]
    ends = [floored(at) for at in times] if kind is WindowKind.HOPPING else times
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)
