"""Brute-force window evaluation over one key's events: the reference executor's kernel.

For each query, fold the events of its window from scratch. O(q · w) for q queries and w
events per window, so it is for small keys and for checking faster paths, never for hot keys
(DESIGN §4). The tiled engine replaces it as the default.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from timetile.core.aggregators import Aggregator


def aggregate_windows(
    aggregator: Aggregator[Any],
    times: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    *,
    at: npt.NDArray[np.int64] | None = None,
) -> list[Any]:
    """Return the finalized aggregate of the events in ``[starts[i], ends[i])`` for each i.

    Args:
        aggregator: the op.
        times: event times, sorted ascending.
        values: the events' non-null values, aligned with ``times``.
        starts: window starts (inclusive), one per query.
        ends: window ends (exclusive), one per query.
        at: each query's time, which the results are finalized at
            (:meth:`~timetile.core.aggregators.base.Aggregator.finalize_at`); by default,
            its window's end.

    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> count = make_aggregator("count", ValueType.INT)
    >>> t = np.array([1, 2, 2, 5])
    >>> aggregate_windows(count, t, t, np.array([0, 2, 6]), np.array([2, 5, 9]))
    [1, 2, 0]

    """
    lows = np.searchsorted(times, starts, side="left")
    highs = np.searchsorted(times, ends, side="left")
    results = []
    query_times = ends if at is None else at
    for low, high, when in zip(lows.tolist(), highs.tolist(), query_times.tolist(), strict=True):
        state = aggregator.fold(values[low:high], times[low:high])
        results.append(aggregator.finalize_at(state, when))
    return results
