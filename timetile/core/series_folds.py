"""One key's events of one column, sorted by time, with the states of long runs kept.

A fetch folds, per feature, the events its batch record did not collapse
(:mod:`timetile.core.batch_record`): runs of the record's edge events and of the events
streamed since the upload. Folding each run whole at every fetch made a hot key's fetch cost
grow with its traffic: days of events per feature. :class:`SeriesFolds` keeps states so a
fetch folds few events, in two ways, by what the run's ends do from fetch to fetch:

- **Anchored runs** keep one end (the *anchor*: where the body begins, the day end) and
  move the other with the fetch time. Per (op, anchor) the series keeps the states of the
  runs from the anchor to checkpoints about ``block`` events apart, extended as fetches
  reach further; a fetch merges one kept state and folds fewer than about ``block`` events.
- **Free runs** move both ends: the recent run of a window shorter than the time since the
  day end (a 1-hour window after the first hour). Per op the series keeps the states of
  consecutive blocks of about ``block`` events, over all of it, and a range index over them
  (:func:`~timetile.core.tiling.segment_tree.range_index`); a fetch takes the blocks its run
  spans whole in one unmerge (invertible ops) or O(log B) merges, and folds the parts of
  the two blocks at its ends, fewer than about ``2 * block`` events. A free run of at most
  :data:`FREE_RUN_BLOCKS` blocks is folded whole: cheaper than keeping blocks up to date.

``block`` is :func:`block_size`, ``max(MIN_BLOCK, 4 * isqrt(n))`` for ``n`` events: at most
about ``sqrt(n) / 4`` states per (op, anchor) or op. A block costs a fold call and a merge
to build, where a fetch folds its events in a few vectorized calls: smaller blocks make the
first fetch after an upload, which builds them, cost more, and larger ones each later fetch
(the figures that chose ``4 * isqrt(n)``: benchmarks/HISTORY.md, "Hot keys fetch from kept
states"; the current ones: benchmarks/RESULTS.md, "hot key fetch"). A checkpoint or block
edge never splits the events of one millisecond, so a kept state and the events beside it
are disjoint in time, as the tiled executor's hops are.

Only ops whose merges give what one fold gives, wherever the run is cut, and whose states
stay small (:attr:`~timetile.core.aggregators.base.Aggregator.checkpointable`) keep states;
the others, runs of at most ``4 * MIN_BLOCK`` events and free runs of at most
:data:`FREE_RUN_BLOCKS` blocks are folded whole, as before.
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any

import numpy as np

from timetile.core.aggregators.base import Aggregator
from timetile.core.tiling.segment_tree import RangeIndex, range_index

#: The least number of events between two checkpoints: below it a fold costs less than a
#: merge (an HLL merge is tens of microseconds).
MIN_BLOCK = 64
#: Checkpoints and blocks are ``BLOCK_SCALE * sqrt(n)`` events apart, for ``n`` events
#: (tests lower it, with :data:`MIN_BLOCK`, to cut short series into many blocks).
BLOCK_SCALE = 4

#: A free run of at most this many blocks is folded whole: one vectorized fold of it costs
#: less than keeping its blocks up to date as tiles land (benchmarks/hot_key_fetch.py).
FREE_RUN_BLOCKS = 8

#: The lock of every series of at most ``4 * MIN_BLOCK`` events, which keep no states.
_SHORT_SERIES_LOCK = threading.Lock()

#: The positions ``[a, b)`` of the events a fetch still folds: non-empty, in time order.
Rest = tuple[tuple[int, int], ...]


def block_size(extent: int) -> int:
    """Return how many events apart the checkpoints of ``extent`` events are."""
    return max(MIN_BLOCK, BLOCK_SCALE * math.isqrt(extent))


def _too_short(extent: int) -> bool:
    """Whether a run of ``extent`` events is folded whole, keeping no state.

    At most ``4 * MIN_BLOCK`` events: so a series no longer than that never keeps one.
    """
    return extent <= 4 * MIN_BLOCK


def _whole(lo: int, hi: int) -> tuple[None, Rest]:
    """Return the cover of a run folded whole: no kept state, every event to fold."""
    return None, ((lo, hi),) if lo < hi else ()


def _next_cut(times: np.ndarray, cut: int, block: int, forward: bool) -> int:
    """Return the position ``block`` events from ``cut``, moved on to a new millisecond.

    Forward: the first position after ``cut + block - 1`` whose time is later (or the
    series' end); backward: the first position of the time at ``cut - block`` (or 0). So a
    cut never falls between two events of one millisecond.
    """
    if forward:
        far = cut + block
        return len(times) if far >= len(times) else int(
            times.searchsorted(times[far - 1], "right"))
    near = cut - block
    return 0 if near <= 0 else int(times.searchsorted(times[near]))


class _Checkpoints:
    """The states of the runs from ``anchor`` to each checkpoint, one way, grown on demand.

    Checkpoint ``k`` is ``distances[k]`` events from the anchor (after it when ``forward``,
    else before it), about ``k * block``; ``states[k]`` holds the events between the two.
    Checkpoint 0 is the anchor itself, with ``init()``. It holds the series' arrays, not
    the :class:`SeriesFolds`: no reference cycle, so a series let go of is freed at once.
    """

    def __init__(self, aggregator: Aggregator[Any], values: np.ndarray, times: np.ndarray,
                 anchor: int, forward: bool) -> None:
        self.aggregator = aggregator
        self.values = values
        self.times = times
        self.anchor = anchor
        self.forward = forward
        self.block = block_size(len(times) - anchor if forward else anchor)
        self.distances = [0]  # |cut - anchor|, increasing
        self.states: list[Any] = [aggregator.init()]

    def reach(self, end: int) -> tuple[int, Any]:
        """Return the kept checkpoint farthest from the anchor not past ``end``, and its state.

        The state holds the events between the anchor and the checkpoint. O(log n) once the
        checkpoints reach ``end``; each one added on the way folds one block and merges once.
        """
        aggregator, times = self.aggregator, self.times
        target = abs(end - self.anchor)
        cut = self.anchor + self.distances[-1] if self.forward else self.anchor - self.distances[-1]
        while self.distances[-1] < target:
            after = _next_cut(times, cut, self.block, self.forward)
            if abs(after - self.anchor) > target:
                break
            low, high = (cut, after) if self.forward else (after, cut)
            block = aggregator.fold(self.values[low:high], times[low:high])
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
        aggregator, times, values = self.aggregator, self.times, self.values
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

    def carried_to(self, values: np.ndarray, times: np.ndarray) -> _Checkpoints:
        """Return these checkpoints on a series that begins with this one's events.

        Every kept state holds events of this series alone, so each still holds; only a
        checkpoint at this series' end goes where the longer one goes on within its
        millisecond.
        """
        carried = _Checkpoints(self.aggregator, values, times, self.anchor, self.forward)
        end = len(self.times)
        keep = len(self.distances)
        if (self.forward and keep > 1 and self.anchor + self.distances[-1] == end
                and end < len(times) and times[end - 1] == times[end]):
            keep -= 1
        carried.distances = self.distances[:keep]
        carried.states = self.states[:keep]
        return carried


class _Blocks:
    """One op's states of consecutive blocks of the series, and a range index over them.

    Block ``k`` holds the events ``[cuts[k], cuts[k + 1])``: ``block`` of them or a few more
    (a cut never splits a millisecond), the last one fewer. Grown to the series' end at each
    cover: one fold per new block, then the index over them (a segment tree, or prefix
    states for an invertible op): B merges to build, O(log B) per block added after.
    ``indexed`` is how many of the first blocks the index holds (fewer than it holds after
    carrying over: the last block is cut again). Like :class:`_Checkpoints`, it holds the
    series' arrays.
    """

    def __init__(self, aggregator: Aggregator[Any], values: np.ndarray, times: np.ndarray,
                 block: int, *, cuts: list[int] | None = None, states: list[Any] | None = None,
                 index: RangeIndex[Any] | None = None, indexed: int = 0) -> None:
        self.aggregator = aggregator
        self.values = values
        self.times = times
        self.block = block
        self.cuts = [0] if cuts is None else cuts
        self.states: list[Any] = [] if states is None else states
        self._index = index
        self._indexed = indexed if index is not None else 0

    def _grown(self) -> RangeIndex[Any]:
        """Cut the events past the last block into blocks; return the index over them all."""
        times, values = self.times, self.values
        while self.cuts[-1] < len(times):
            low = self.cuts[-1]
            high = _next_cut(times, low, self.block, forward=True)
            self.states.append(self.aggregator.fold(values[low:high], times[low:high]))
            self.cuts.append(high)
        if self._index is None:
            self._index = range_index(self.aggregator, self.states)
        elif self._indexed < len(self.states) or len(self._index) != len(self.states):
            self._index = self._index.extended(self._indexed, self.states[self._indexed:])
        self._indexed = len(self.states)
        return self._index

    def cover(self, lo: int, hi: int) -> tuple[Any | None, Rest]:
        """Return the state of the blocks inside ``[lo, hi)`` and the events around them.

        None and the whole run when it spans no block whole. O(log B) merges or one unmerge
        once grown.
        """
        index = self._grown()
        first = bisect.bisect_left(self.cuts, lo)
        last = bisect.bisect_right(self.cuts, hi) - 1
        if last <= first:
            return _whole(lo, hi)
        ends = ((lo, self.cuts[first]), (self.cuts[last], hi))
        return index.query(first, last), tuple((a, b) for a, b in ends if a < b)

    def _check(self) -> None:
        """Assert the invariants: blocks in order, cut at new milliseconds, states folded.

        And the index, once built, is over these states. O(n) events folded.
        """
        aggregator, times, values = self.aggregator, self.times, self.values
        assert self.cuts[0] == 0, "the first block begins the series"
        assert len(self.states) == len(self.cuts) - 1
        assert self.cuts[-1] <= len(times)
        for k, state in enumerate(self.states):
            low, high = self.cuts[k], self.cuts[k + 1]
            assert low < high, f"block {k} is empty"
            if high < len(times):
                assert times[high - 1] < times[high], f"block {k} splits a millisecond"
            fold = aggregator.fold(values[low:high], times[low:high])
            assert aggregator.to_bytes(fold) == aggregator.to_bytes(state), \
                f"state {k} is not the fold of its block"
        if self._index is not None and self._indexed == len(self.states) == len(self._index):
            for k, state in enumerate(self.states):
                assert aggregator.to_bytes(self._index.query(k, k + 1)) == \
                    aggregator.to_bytes(state), f"the index holds another state {k}"
            self._index._check()

    def carried_to(self, values: np.ndarray, times: np.ndarray) -> _Blocks | None:
        """Return these blocks on a series that begins with this one's events.

        Each block still holds, but for one ending at this series' end (the longer series
        may go on within its millisecond, and the block may be short): it is cut again.
        None when the longer series suits blocks twice as long (it is about 4 times this
        one): build those instead, so that a growing series keeps about ``sqrt(n) / 4`` to
        ``sqrt(n) / 2`` blocks, and the next free run folds the whole series once more.
        """
        if block_size(len(times)) >= 2 * self.block:
            return None
        keep = len(self.states) - (self.cuts[-1] == len(self.times))
        return _Blocks(self.aggregator, values, times, self.block, cuts=self.cuts[:keep + 1],
                       states=self.states[:keep], index=self._index,
                       indexed=min(self._indexed, keep))


class SeriesFolds:
    """A series (values and times, sorted by time) and the kept states of its long runs.

    Thread-safe. Memory: the series, plus for each (op, anchor) a fetch used, at most about
    ``sqrt(n) / 4`` states (about twice that after carrying over from ``after``), and for
    each op with a free run, about ``sqrt(n) / 4`` block states (up to twice that after
    carrying over) and as many again to index them.

    Args:
        values: the values, in time order.
        times: their times (int64, sorted).
        after: a series whose events are the first ``len(after)`` of these, in the same
            order (the events streamed before the latest tile): its kept states carry
            over, so a fetch after a tile lands folds only the new events, not all of them.
            Left alone unless its times begin ``times``.

    """

    # No instance dict: a fetcher caches thousands of series, each one object for the
    # garbage collector's passes (docs/online.md, "Pauses").
    __slots__ = ("__weakref__", "_blocks", "_kept", "_lock", "times", "values")

    def __init__(self, values: np.ndarray, times: np.ndarray, *,
                 after: SeriesFolds | None = None) -> None:
        self.values = values
        self.times = times
        self._kept: dict[tuple[Aggregator[Any], int, bool], _Checkpoints] = {}
        self._blocks: dict[Aggregator[Any], _Blocks] = {}
        # A series too short to keep states (most of a fetcher's) never takes its lock in
        # cover(): it shares one, so a cache of them holds no lock object per series.
        self._lock = _SHORT_SERIES_LOCK if _too_short(len(times)) else threading.Lock()
        if after is not None and 0 < len(after) <= len(times) and np.array_equal(
                after.times, times[:len(after)]):
            with after._lock:
                self._kept = {key: kept.carried_to(values, times)
                              for key, kept in after._kept.items()}
                for aggregator, blocks in after._blocks.items():
                    carried = blocks.carried_to(values, times)
                    if carried is not None:
                        self._blocks[aggregator] = carried

    def __len__(self) -> int:
        """Return the number of events."""
        return len(self.times)

    @property
    def kept_states(self) -> int:
        """Return how many states the series keeps: checkpoints and blocks, over every op.

        Not counting the nodes of the blocks' indexes (about as many as the blocks).
        """
        with self._lock:
            return (sum(len(kept.states) - 1 for kept in self._kept.values())
                    + sum(len(blocks.states) for blocks in self._blocks.values()))

    @property
    def kept_runs(self) -> int:
        """Return how many (op, anchor) pairs, and ops for free runs, keep states.

        A few per op, however many fetches ran, since the anchors stay put.
        """
        with self._lock:
            return len(self._kept) + len(self._blocks)

    def _check(self) -> None:
        """Assert the invariants of every kept run and block (``_check`` of each)."""
        assert len(self.values) == len(self.times)
        assert bool(np.all(self.times[1:] >= self.times[:-1])), "times are sorted"
        with self._lock:
            for (_, anchor, forward), kept in self._kept.items():
                assert (kept.anchor, kept.forward) == (anchor, forward)
                assert kept.times is self.times, "checkpoints on another series"
                assert kept.values is self.values, "checkpoints on another series"
                kept._check()
            for aggregator, blocks in self._blocks.items():
                assert blocks.aggregator is aggregator
                assert blocks.times is self.times, "blocks of another series"
                assert blocks.values is self.values, "blocks of another series"
                blocks._check()

    def span(self, low: int, high: int) -> tuple[int, int]:
        """Return the positions ``[lo, hi)`` of the events with ``low <= time < high``.

        O(log n); ``lo == hi`` when there are none.
        """
        lo = int(self.times.searchsorted(low))
        return lo, max(lo, int(self.times.searchsorted(high)))

    def cover(self, aggregator: Aggregator[Any], lo: int, hi: int, anchor: int | None
              ) -> tuple[Any | None, Rest]:
        """Split the run ``[lo, hi)`` into a kept state and the events still to fold.

        ``anchor`` is ``lo`` or ``hi``: the end of the run that is the same at every fetch,
        or None when neither is (a free run). Returns ``(state, rest)``: ``state`` (None
        when no state is kept for this run) holds the events of ``[lo, hi)`` outside the
        ranges of ``rest``, which the caller folds: one range for an anchored run, up to two
        (the run's ends) for a free one, the whole run without a kept state.

        Raises:
            ValueError: if ``anchor`` is neither end of the run.

        """
        if anchor is not None and anchor not in (lo, hi):
            raise ValueError(f"anchor {anchor} is neither end of the run [{lo}, {hi})")
        if _too_short(hi - lo) or not aggregator.checkpointable:
            return _whole(lo, hi)
        if anchor is None:
            return self._cover_free(aggregator, lo, hi)
        forward = anchor == lo
        with self._lock:
            kept = self._kept.get((aggregator, anchor, forward))
            if kept is None:
                kept = self._kept[aggregator, anchor, forward] = _Checkpoints(
                    aggregator, self.values, self.times, anchor, forward)
            cut, state = kept.reach(hi if forward else lo)
        if cut == anchor:
            return _whole(lo, hi)
        low, high = (cut, hi) if forward else (lo, cut)
        return state, ((low, high),) if low < high else ()

    def _cover_free(self, aggregator: Aggregator[Any], lo: int, hi: int
                    ) -> tuple[Any | None, Rest]:
        """Cover a free run from the op's blocks; a run of few blocks folds whole."""
        block = block_size(len(self))
        if hi - lo <= FREE_RUN_BLOCKS * block:
            return _whole(lo, hi)
        with self._lock:
            blocks = self._blocks.get(aggregator)
            if blocks is None:
                blocks = self._blocks[aggregator] = _Blocks(aggregator, self.values,
                                                            self.times, block)
            return blocks.cover(lo, hi)
