"""Window ops over value ranks: ``unique_count``, ``histogram``, ``top_k`` and ``bottom_k``.

Each value is replaced by its rank among the distinct values, in the value order of
:mod:`timetile.core.aggregators.ordering` (equal values share a rank; the caller ranks
them). Events are sorted by (key, time) and each query's window is a run ``[lo, hi)`` of its
key's events, as in :mod:`timetile.core.kernels.sweep`. Per key, one run moves from each
query's run to the next, an event at a time, and keeps the multiset of its ranks: each rank's
multiplicity, how many ranks are present, and for the ordered ops a Fenwick tree of the
multiplicities (Fenwick, *A new data structure for cumulative frequency tables*, Software:
Practice and Experience 24(3), 1994), which finds the rank holding the r-th smallest value
in O(log d).

Every window kind's bounds never decrease with the query time, so moving the run costs
O(n + q) per key (times log d with the tree); bounds that moved back would cost their
movement and stay exact. Memory O(d) for d distinct values, besides the output.

>>> import numpy as np
>>> ranks = np.array([2, 0, 2, 1])  # one key, four events
>>> offsets, lows, highs = np.array([0, 4]), np.array([0, 1]), np.array([3, 4])
>>> window_distinct_counts(ranks, 3, offsets, np.array([0, 2]), lows, highs).tolist()
[2, 3]
>>> entries, held, multiplicities = window_histograms(ranks, 3, offsets, np.array([0, 2]),
...                                                    lows, highs)
>>> entries.tolist(), held.tolist(), multiplicities.tolist()
([0, 2, 5], [0, 2, 0, 1, 2], [1, 2, 1, 1, 1])
>>> entries, chosen = window_top_k(ranks, 3, offsets, np.array([0, 2]), lows, highs, 2, True)
>>> entries.tolist(), chosen.tolist()
([0, 2, 4], [2, 2, 2, 1])
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

Int64s = npt.NDArray[np.int64]

# What the run reports at each query (``_sweep_multisets``'s ``mode``).
_DISTINCT, _HISTOGRAM, _SMALLEST, _LARGEST = 0, 1, 2, 3


@numba.njit(cache=True)
def _fenwick_add(tree: Int64s, rank: int, delta: int) -> None:
    """Add ``delta`` to ``rank``'s multiplicity in a Fenwick tree (1-based). O(log d)."""
    index = rank + 1
    while index < len(tree):
        tree[index] += delta
        index += index & -index


@numba.njit(cache=True)
def _fenwick_find(tree: Int64s, target: int) -> int:
    """Return the rank that holds the ``target``-th smallest value (``target`` ≥ 1). O(log d).

    That is the smallest rank whose cumulative multiplicity reaches ``target``.
    """
    position = 0
    step = 1
    while step * 2 < len(tree):
        step *= 2
    while step > 0:
        if position + step < len(tree) and tree[position + step] < target:
            position += step
            target -= tree[position]
        step //= 2
    return position  # ranks below ``position`` hold fewer than ``target`` values


def check_fenwick(tree: Int64s, multiplicities: Int64s) -> None:
    """Assert that ``tree`` is the Fenwick tree of ``multiplicities``. O(d).

    Node ``i`` (1-based) holds the multiplicities of ranks ``[i − lowbit(i), i)``; node 0 is
    unused. The kernels' ``_check()``, for tests.
    """
    assert len(tree) == len(multiplicities) + 1, (len(tree), len(multiplicities))
    assert tree[0] == 0
    prefix = np.concatenate([[0], np.cumsum(multiplicities)])
    for index in range(1, len(tree)):
        assert tree[index] == prefix[index] - prefix[index - (index & -index)], index


@numba.njit(cache=True)
def _move(ranks: Int64s, index: int, delta: int, multiplicity: Int64s, tree: Int64s) -> int:
    """Add (``delta`` 1) or remove (−1) event ``index``; return the change in distinct ranks.

    ``tree`` is the Fenwick tree of the multiplicities, or empty where none is kept.
    """
    rank = ranks[index]
    before = multiplicity[rank]
    multiplicity[rank] = before + delta
    if len(tree) > 0:
        _fenwick_add(tree, rank, delta)
    return int(multiplicity[rank] != 0) - int(before != 0)


@numba.njit(cache=True)
def _sweep_multisets(  # noqa: PLR0917  (numba kernels take positional arrays)
        ranks: Int64s, distinct: int, event_offsets: Int64s, query_offsets: Int64s,
        lows: Int64s, highs: Int64s, mode: int, entries: Int64s
) -> tuple[Int64s, Int64s, Int64s]:
    """Move one run per key through its queries' runs; report each query's multiset.

    ``mode`` says what: ``_DISTINCT`` fills the first array with each query's number of
    distinct ranks; ``_HISTOGRAM`` writes each query's distinct ranks in ascending order, with
    their multiplicities, at ``entries[query]``; ``_SMALLEST`` / ``_LARGEST`` write the
    ranks of its ``entries[query + 1] - entries[query]`` smallest / largest values, repeats
    included, in that order. Returns (distinct counts, ranks, multiplicities); the arrays a
    mode does not fill are empty.
    """
    ordered = mode != _DISTINCT
    multiplicity = np.zeros(distinct, dtype=np.int64)
    tree = np.zeros(distinct + 1 if ordered else 0, dtype=np.int64)
    counts = np.zeros(len(lows) if mode == _DISTINCT else 0, dtype=np.int64)
    listed = entries[-1] if ordered else 0
    out_ranks = np.zeros(listed, dtype=np.int64)
    out_multiplicities = np.zeros(listed if mode == _HISTOGRAM else 0, dtype=np.int64)
    for key in range(len(event_offsets) - 1):
        low = high = event_offsets[key]
        present = 0
        for query in range(query_offsets[key], query_offsets[key + 1]):
            while high < highs[query]:  # grow first, then shrink: both runs stay covered
                present += _move(ranks, high, 1, multiplicity, tree)
                high += 1
            while low > lows[query]:
                low -= 1
                present += _move(ranks, low, 1, multiplicity, tree)
            while high > highs[query]:
                high -= 1
                present += _move(ranks, high, -1, multiplicity, tree)
            while low < lows[query]:
                present += _move(ranks, low, -1, multiplicity, tree)
                low += 1
            if mode == _DISTINCT:
                counts[query] = present
                continue
            at, end, held = entries[query], entries[query + 1], high - low
            passed = 0  # values already reported, counted from the reporting end
            while at < end:
                rank = _fenwick_find(tree, held - passed if mode == _LARGEST else passed + 1)
                repeats = multiplicity[rank]
                if mode == _HISTOGRAM:
                    out_ranks[at], out_multiplicities[at] = rank, repeats
                    at += 1
                else:
                    for _ in range(min(repeats, end - at)):
                        out_ranks[at] = rank
                        at += 1
                passed += repeats
        for index in range(low, high):  # empty the run for the next key
            _move(ranks, index, -1, multiplicity, tree)
    return counts, out_ranks, out_multiplicities


def window_distinct_counts(  # noqa: PLR0917  (the kernels' positional arrays)
        ranks: Int64s, distinct: int, event_offsets: Int64s, query_offsets: Int64s,
        lows: Int64s, highs: Int64s) -> Int64s:
    """For each query, how many distinct ranks its run ``[lo, hi)`` of ``ranks`` holds.

    ``ranks`` are in ``[0, distinct)``, equal for equal values; any ids will do here, in any
    order. O(n + q) per key; memory O(distinct).
    """
    counts, _, _ = _sweep_multisets(ranks, distinct, event_offsets, query_offsets, lows, highs,
                                    _DISTINCT, np.zeros(1, dtype=np.int64))
    return counts


def window_histograms(  # noqa: PLR0917  (the kernels' positional arrays)
        ranks: Int64s, distinct: int, event_offsets: Int64s, query_offsets: Int64s,
        lows: Int64s, highs: Int64s) -> tuple[Int64s, Int64s, Int64s]:
    """Each query's run as (rank, multiplicity) pairs, ranks ascending.

    Returns ``(entries, ranks, multiplicities)``: query ``i``'s pairs are at
    ``entries[i]:entries[i + 1]`` (none for an empty run). Two moves of the run: one counts
    each query's distinct ranks, one lists them. O((n + q + e) log d) per key for e pairs
    listed; memory O(d + e).
    """
    sizes = window_distinct_counts(ranks, distinct, event_offsets, query_offsets, lows, highs)
    entries = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    _, listed, multiplicities = _sweep_multisets(ranks, distinct, event_offsets, query_offsets,
                                                 lows, highs, _HISTOGRAM, entries)
    return entries, listed, multiplicities


def window_top_k(  # noqa: PLR0917  (the kernels' positional arrays)
        ranks: Int64s, distinct: int, event_offsets: Int64s, query_offsets: Int64s,
        lows: Int64s, highs: Int64s, k: int, largest: bool) -> tuple[Int64s, Int64s]:
    """Return the ranks of each query's ``k`` largest (or smallest) values, repeats kept.

    Returns ``(entries, chosen)``: query ``i``'s ranks are ``chosen[entries[i]:entries[i + 1]]``,
    largest first (or smallest first), ``min(k, run length)`` of them. O((n + q·k) log d) per
    key; memory O(d + q·k).
    """
    sizes = np.minimum(highs - lows, k)
    entries = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    _, chosen, _ = _sweep_multisets(ranks, distinct, event_offsets, query_offsets, lows, highs,
                                    _LARGEST if largest else _SMALLEST, entries)
    return entries, chosen
