"""One key's events of one column, sorted by time, with the states of long runs kept.

A fetch folds, per feature, the events its batch record did not collapse
(:mod:`timetile.core.batch_record`): a run of the record's edge events that ends where the
feature's body begins, and a run of the events streamed since the upload that begins at the
day end. Each run keeps one end (its *anchor*) from fetch to fetch and moves the other with
the fetch time. Folding the whole run at every fetch made a hot key's fetch cost grow with
its traffic: days of events per feature. :class:`SeriesFolds` keeps, per (op, anchor), the
states of the runs from the anchor to checkpoints about ``block`` events apart, extended as
fetches reach further; a fetch then takes one kept state and folds the events between it and
the run's moving end, fewer than about ``block`` of them.

``block`` is ``max(MIN_BLOCK, 4 * isqrt(n))`` for the ``n`` events beyond the anchor: at
most about ``sqrt(n) / 4`` states per (op, anchor), and at most about ``4 * sqrt(n)`` events
folded per fetch. A block costs a fold call and a merge to build, where a fetch folds its
events in a few vectorized calls: ``sqrt(n)``-event blocks made a hot key's first fetch after
an upload 5 times its old cost, ``4 * sqrt(n)`` about twice, for 0.15 ms more at p99 once
built (benchmarks/RESULTS.md, "Hot keys fetch from kept states"). A checkpoint never splits
the events of one millisecond, so a kept state and the events after it are disjoint in
time, as the tiled executor's hops are.

Only ops whose merges give what one fold gives, wherever the run is cut, and whose states
stay small (:attr:`~timetile.core.aggregators.base.Aggregator.checkpointable`) keep states;
the others, and runs of at most ``4 * MIN_BLOCK`` events, are folded whole, as before.
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any

import numpy as np

from timetile.core.aggregators.base import Aggregator

#: The least number of events between two checkpoints: below it a fold costs less than a
#: merge (an HLL merge is tens of microseconds).
MIN_BLOCK = 64


class _Checkpoints:
    """The states of the runs from ``anchor`` to each checkpoint, one way, grown on demand.

    Checkpoint ``k`` is ``distances[k]`` events from the anchor (after it when ``forward``,
    else before it), about ``k * block``; ``states[k]`` holds the events between the two.
    Checkpoint 0 is the anchor itself, with ``init()``.
    """

    def __init__(self, aggregator: Aggregator[Any], folds: SeriesFolds, anchor: int,
                 forward: bool) -> None:
        self.aggregator = aggregator
        self.folds = folds
        self.anchor = anchor
        self.forward = forward
        extent = len(folds) - anchor if forward else anchor
        self.block = max(MIN_BLOCK, 4 * math.isqrt(extent))
        self.distances = [0]  # |cut - anchor|, increasing
        self.states: list[Any] = [aggregator.init()]

    def _next_cut(self, cut: int) -> int:
        """Return the checkpoint after ``cut``: ``block`` events on, then to a new time."""
        times = self.folds.times
        if self.forward:
            far = cut + self.block
            return len(times) if far >= len(times) else int(
                times.searchsorted(times[far - 1], "right"))
        near = cut - self.block
        return 0 if near <= 0 else int(times.searchsorted(times[near]))

    def reach(self, end: int) -> tuple[int, Any]:
        """Return the kept checkpoint farthest from the anchor not past ``end``, and its state.

        The state holds the events between the anchor and the checkpoint. O(log n) once the
        checkpoints reach ``end``; each one added on the way folds one block and merges once.
        """
        folds, aggregator = self.folds, self.aggregator
        target = abs(end - self.anchor)
        cut = self.anchor + self.distances[-1] if self.forward else self.anchor - self.distances[-1]
        while self.distances[-1] < target:
            after = self._next_cut(cut)
            if abs(after - self.anchor) > target:
                break
            low, high = (cut, after) if self.forward else (after, cut)
            block = aggregator.fold(folds.values[low:high], folds.times[low:high])
            self.states.append(aggregator.merge(self.states[-1], block) if self.forward
                               else aggregator.merge(block, self.states[-1]))
            self.distances.append(abs(after - self.anchor))
            cut = after
        index = bisect.bisect_right(self.distances, target) - 1
        distance = self.distances[index]
        return (self.anchor + distance if self.forward else self.anchor - distance,
                self.states[index])

    def _check(self) -> None:
        """Assert the invariants: checkpoints in order, each at a new millisecond.

        And each state is the one before merged with a fold of the events between them.
        O(distance) events folded.
        """
        aggregator, times, values = self.aggregator, self.folds.times, self.folds.values
        assert len(self.states) == len(self.distances) >= 1
        assert self.distances[0] == 0, "checkpoint 0 is the anchor"
        assert aggregator.to_bytes(self.states[0]) == aggregator.to_bytes(aggregator.init())
        step = 1 if self.forward else -1
        for k in range(1, len(self.distances)):
            near, far = (self.anchor + step * self.distances[k - 1],
                         self.anchor + step * self.distances[k])
            assert self.distances[k] > self.distances[k - 1], "checkpoints move away"
            assert 0 <= far <= len(times)
            if 0 < far < len(times):
                assert times[far - 1] < times[far], f"checkpoint {k} splits a millisecond"
            low, high = min(near, far), max(near, far)
            block = aggregator.fold(values[low:high], times[low:high])
            state = (aggregator.merge(self.states[k - 1], block) if self.forward
                     else aggregator.merge(block, self.states[k - 1]))
            assert aggregator.to_bytes(state) == aggregator.to_bytes(self.states[k]), \
                f"state {k} is not the one before merged with the events between"

    def carried_to(self, folds: SeriesFolds) -> _Checkpoints:
        """Return these checkpoints on ``folds``, which begins with this series' events.

        Every kept state holds events of this series alone, so each still holds; only a
        checkpoint at this series' end goes where ``folds`` goes on within its millisecond.
        """
        carried = _Checkpoints(self.aggregator, folds, self.anchor, self.forward)
        end = len(self.folds)
        keep = len(self.distances)
        if (self.forward and keep > 1 and self.anchor + self.distances[-1] == end
                and end < len(folds) and folds.times[end - 1] == folds.times[end]):
            keep -= 1
        carried.distances = self.distances[:keep]
        carried.states = self.states[:keep]
        return carried


class SeriesFolds:
    """A series (values and times, sorted by time) and the kept states of its anchored runs.

    Thread-safe. Memory: the series, plus for each (op, anchor) a fetch used, at most about
    ``sqrt(n) / 4`` states (about twice that after carrying over from ``after``).

    Args:
        values: the values, in time order.
        times: their times (int64, sorted).
        after: a series whose events are the first ``len(after)`` of these, in the same
            order (the events streamed before the latest tile): its kept states carry
            over, so a fetch after a tile lands folds only the new events, not all of them.
            Left alone unless its times begin ``times``.

    """

    def __init__(self, values: np.ndarray, times: np.ndarray, *,
                 after: SeriesFolds | None = None) -> None:
        self.values = values
        self.times = times
        self._kept: dict[tuple[Aggregator[Any], int, bool], _Checkpoints] = {}
        self._lock = threading.Lock()
        if after is not None and 0 < len(after) <= len(times) and np.array_equal(
                after.times, times[:len(after)]):
            with after._lock:
                self._kept = {key: kept.carried_to(self) for key, kept in after._kept.items()}

    def __len__(self) -> int:
        """Return the number of events."""
        return len(self.times)

    @property
    def kept_states(self) -> int:
        """Return how many states the series keeps, over every (op, anchor)."""
        with self._lock:
            return sum(len(kept.states) - 1 for kept in self._kept.values())

    @property
    def kept_runs(self) -> int:
        """Return how many (op, anchor) pairs keep states.

        A few per op, however many fetches ran, since the anchors stay put.
        """
        with self._lock:
            return len(self._kept)

    def _check(self) -> None:
        """Assert the invariants of every kept run (:meth:`_Checkpoints._check`)."""
        assert len(self.values) == len(self.times)
        assert bool(np.all(self.times[1:] >= self.times[:-1])), "times are sorted"
        with self._lock:
            for (_, anchor, forward), kept in self._kept.items():
                assert (kept.anchor, kept.forward, kept.folds) == (anchor, forward, self)
                kept._check()

    def span(self, low: int, high: int) -> tuple[int, int]:
        """Return the positions ``[lo, hi)`` of the events with ``low <= time < high``.

        O(log n); ``lo == hi`` when there are none.
        """
        lo = int(self.times.searchsorted(low))
        return lo, max(lo, int(self.times.searchsorted(high)))

    def cover(self, aggregator: Aggregator[Any], lo: int, hi: int, anchor: int | None
              ) -> tuple[Any | None, int, int]:
        """Split the run ``[lo, hi)`` into a kept state and the events still to fold.

        ``anchor`` is ``lo`` or ``hi``: the end of the run that is the same at every fetch,
        or None when neither is. Returns ``(state, a, b)``: ``state`` (None when no state is
        kept for this run) holds the events of ``[lo, hi)`` outside ``[a, b)``, and the caller
        folds the events of ``[a, b)``. Without a kept state, ``[a, b)`` is the whole run.

        Raises:
            ValueError: if ``anchor`` is neither end of the run.

        """
        if anchor is not None and anchor not in (lo, hi):
            raise ValueError(f"anchor {anchor} is neither end of the run [{lo}, {hi})")
        if anchor is None or hi - lo <= 4 * MIN_BLOCK or not aggregator.checkpointable:
            return None, lo, hi
        forward = anchor == lo
        with self._lock:
            kept = self._kept.get((aggregator, anchor, forward))
            if kept is None:
                kept = self._kept[aggregator, anchor, forward] = _Checkpoints(
                    aggregator, self, anchor, forward)
            cut, state = kept.reach(hi if forward else lo)
        if cut == anchor:
            return None, lo, hi
        return (state, cut, hi) if forward else (state, lo, cut)
