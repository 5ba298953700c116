"""Merging scans of one hop's events, and the whole tiled algorithm for one key.

The scans answer the raw-event pieces of windows (:mod:`.hops`): heads are prefixes of a hop
(:func:`prefix_states`), tail edges suffixes (:func:`suffix_states`), inner pieces arbitrary
ranges (:func:`range_states`). :func:`tiled_windows` puts every piece together for one key in
memory: it is the single-key specification that the distributed executor follows, and it
equals the brute force :func:`timetile.core.reference.aggregate_windows` (seed 000, "Sawtooth
Windows"; DESIGN §4).

Every function here takes ``times`` sorted ascending with ``values`` aligned (non-null values
only) and returns intermediate states, not results: callers merge and finalize.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.tiling.hops import split_windows
from timetile.core.tiling.segment_tree import range_index
from timetile.core.windows import ARRAYS

S = TypeVar("S")

Int64s = npt.NDArray[np.int64]


def prefix_states(
    aggregator: Aggregator[S], times: Times, values: Values, boundaries: Int64s
) -> list[S]:
    """Return, for each boundary ``b``, the state of the events with ``time < b``.

    Boundaries come in any order (ties allowed); the result follows their order. The events
    are folded once, left to right: boundaries are sorted and the events between two
    consecutive ones go into the running state with a single ``update``; states are
    immutable, so boundaries at the same position share one. O(n + q log q) work for n events
    and q boundaries (plus O(q log n) to place the boundaries), with one ``update`` per
    distinct boundary position.

    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> agg = make_aggregator("count", ValueType.INT)
    >>> t = np.array([1, 2, 2, 5])
    >>> [agg.finalize(s) for s in prefix_states(agg, t, t, np.array([5, 0, 2, 9]))]
    [3, 0, 1, 4]
    """
    bounds = np.asarray(boundaries, dtype=np.int64)
    order = np.argsort(bounds, kind="stable")
    positions = np.searchsorted(times, bounds[order], side="left")
    state = aggregator.init()
    out: list[S] = [state] * len(bounds)
    done = 0
    for query, position in zip(order.tolist(), positions.tolist(), strict=True):
        if position > done:
            state = aggregator.update(state, values[done:position], times[done:position])
            done = position
        out[query] = state
    return out


def suffix_states(
    aggregator: Aggregator[S], times: Times, values: Values, boundaries: Int64s
) -> list[S]:
    """Return, for each boundary ``b``, the state of the events with ``time >= b``.

    The mirror of :func:`prefix_states` (a tail edge's reverse scan): boundaries sorted
    descending, events folded from the last one backwards, one ``update`` per distinct
    boundary position; same cost. Folding later events first is sound: an op's order rules
    read event times, never the order of arrival (the ``merge`` laws of
    :mod:`timetile.core.aggregators.base`).

    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> agg = make_aggregator("count", ValueType.INT)
    >>> t = np.array([1, 2, 2, 5])
    >>> [agg.finalize(s) for s in suffix_states(agg, t, t, np.array([5, 0, 2, 9]))]
    [1, 4, 3, 0]
    """
    bounds = np.asarray(boundaries, dtype=np.int64)
    order = np.argsort(bounds, kind="stable")[::-1]
    positions = np.searchsorted(times, bounds[order], side="left")
    state = aggregator.init()
    out: list[S] = [state] * len(bounds)
    done = len(times)
    for query, position in zip(order.tolist(), positions.tolist(), strict=True):
        if position < done:
            state = aggregator.update(state, values[position:done], times[position:done])
            done = position
        out[query] = state
    return out


def range_states(
    aggregator: Aggregator[S], times: Times, values: Values, starts: Int64s, ends: Int64s
) -> list[S]:
    """Return, for each ``i``, the state of the events with ``starts[i] <= time < ends[i]``.

    For inner pieces, which are neither prefixes nor suffixes of their hop: one state per
    event in a :func:`.range_index` (prefix differences or a segment tree), then one range
    query per window. O(n) folds and merges to build (none when there is no window), then
    O(1) unmerges or O(log n) merges per window.

    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> agg = make_aggregator("max", ValueType.INT)
    >>> t = np.array([1, 2, 2, 5])
    >>> range_states(agg, t, np.array([7, 3, 4, 9]), np.array([2, 0, 3]), np.array([5, 9, 4]))
    [4, 9, None]
    """
    lows = np.searchsorted(times, np.asarray(starts, dtype=np.int64), side="left")
    highs = np.searchsorted(times, np.asarray(ends, dtype=np.int64), side="left")
    if len(lows) == 0:
        return []
    singles = [aggregator.fold(values[i : i + 1], times[i : i + 1]) for i in range(len(times))]
    index = range_index(aggregator, singles)
    return [index.query(lo, hi) for lo, hi in zip(lows.tolist(), highs.tolist(), strict=True)]


def _hop_groups(
    times: Times, hop_ms: int, chosen: Int64s, hop_of: Int64s
) -> Iterator[tuple[Int64s, int, int]]:
    """Yield the windows ``chosen`` grouped by hop, with the slice of ``times`` in that hop.

    Each item is ``(windows, lo, hi)``: the group's window indices and the slice ``[lo, hi)``
    of ``times`` holding the events of their hop ``hop_of``. O(c log c + g log n).
    """
    if len(chosen) == 0:
        return
    order = chosen[np.argsort(hop_of[chosen], kind="stable")]
    hops, firsts = np.unique(hop_of[order], return_index=True)
    lows = np.searchsorted(times, hops, side="left")
    highs = np.searchsorted(times, hops + hop_ms, side="left")
    cuts = [*firsts.tolist(), len(order)]
    for (a, b), lo, hi in zip(itertools.pairwise(cuts), lows.tolist(), highs.tolist(), strict=True):
        yield order[a:b], lo, hi


def tiled_windows(
    aggregator: Aggregator[S],
    times: Times,
    values: Values,
    starts: Int64s,
    ends: Int64s,
    *,
    hop_ms: int,
) -> list[S]:
    """Return the state of each window ``[starts[i], ends[i])`` over one key's events, tiled.

    The tiled algorithm of DESIGN §4 in memory, step by step as the distributed executor
    runs it (:func:`.split_windows` gives the pieces):

    1. hop partials: one ``fold`` per non-empty hop;
    2. tails: a :func:`.range_index` over the partials, one range query per window;
    3. heads: :func:`prefix_states` over each head hop's events at the windows' ends;
    4. tail edges: :func:`suffix_states` over each edge hop's events at the windows' starts;
    5. inner pieces: :func:`range_states` over each such hop's events;
    6. each window's pieces merged in time order, edge, tail, head.

    ``starts[i] = MIN_TIME`` is a lifetime window; an empty window (start >= end) gets
    ``init()``. Finalized, the states equal
    :func:`timetile.core.reference.aggregate_windows` on the same input. Cost for n events,
    q windows and p non-empty hops: O(n) in folds and scans, O(p) merges for the index, then
    per window O(1) merges plus the tail query (O(1) unmerges for invertible ops, O(log p)
    merges for the rest), plus sorting O(q log q).

    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> agg = make_aggregator("sum", ValueType.INT)
    >>> t = np.array([5, 150, 260, 299, 301])
    >>> states = tiled_windows(agg, t, t, np.array([150, 0]), np.array([300, 260]), hop_ms=100)
    >>> [agg.finalize(s) for s in states]
    [709, 155]
    """
    times = np.asarray(times, dtype=np.int64)
    pieces = split_windows(starts, ends, hop_ms)
    window_starts, window_ends = pieces.starts, pieces.ends

    hops, firsts = np.unique(ARRAYS.floor(times, hop_ms), return_index=True)
    cuts = [*firsts.tolist(), len(times)]
    partials = [aggregator.fold(values[a:b], times[a:b]) for a, b in itertools.pairwise(cuts)]
    index = range_index(aggregator, partials)
    tail_lows = np.searchsorted(hops, pieces.tail_lo, side="left").tolist()
    tail_highs = np.searchsorted(hops, pieces.tail_hi, side="left").tolist()

    edges: dict[int, S] = {}
    heads: dict[int, S] = {}
    inners: dict[int, S] = {}
    groups = _hop_groups(times, hop_ms, np.flatnonzero(pieces.edge), pieces.edge_hop)
    for members, lo, hi in groups:
        found = suffix_states(aggregator, times[lo:hi], values[lo:hi], window_starts[members])
        edges.update(zip(members.tolist(), found, strict=True))
    for members, lo, hi in _hop_groups(times, hop_ms, np.flatnonzero(pieces.head), pieces.head_hop):
        found = prefix_states(aggregator, times[lo:hi], values[lo:hi], window_ends[members])
        heads.update(zip(members.tolist(), found, strict=True))
    groups = _hop_groups(times, hop_ms, np.flatnonzero(pieces.inner), pieces.head_hop)
    for members, lo, hi in groups:
        found = range_states(
            aggregator, times[lo:hi], values[lo:hi], window_starts[members], window_ends[members]
        )
        inners.update(zip(members.tolist(), found, strict=True))

    empty = aggregator.init()
    out: list[S] = []
    for i, (tail_lo, tail_hi) in enumerate(zip(tail_lows, tail_highs, strict=True)):
        if i in inners:
            out.append(inners[i])
            continue
        parts = [edges[i]] if i in edges else []
        if tail_lo < tail_hi:
            parts.append(index.query(tail_lo, tail_hi))
        if i in heads:
            parts.append(heads[i])
        out.append(functools.reduce(aggregator.merge, parts) if parts else empty)
    return out
