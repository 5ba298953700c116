"""Central moments of any run of a column: a segment tree for ``variance`` through ``kurtosis``.

The sweep (:mod:`timetile.core.kernels.sweep`) finds each query's window as a run ``[lo, hi)``
of its key's sorted values; this module answers ``variance``, ``stddev``, ``skew`` and
``kurtosis`` of any run. A segment tree holds, per node, the count, mean and central moment
sums ``m2``, ``m3``, ``m4`` of the finite values below it, merged by
:func:`timetile.core.aggregators.moments.merge_moments`, the aggregators' own merge (Chan,
Golub & LeVeque for ``m2``, Pébay's for ``m3`` and ``m4``). Each mean is a double-double, as
the core's: rounded to one double, the mean of values near 1e9 is off by about 1e-7, and
every merge's ``delta`` would carry that error into the moments at first order. Prefix sums of
powers would be O(1) per run, but they cancel catastrophically far from zero. Prefix counts
of NaN and ±inf give Spark's NaN rule.

Building is O(n), each run O(log n). The moments of a run are a column of states
(:class:`~timetile.core.aggregators.columnar.RunMoments`); the results are the moment
aggregators' own (their ``finalize_many``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from timetile.core.aggregators.columnar import RunMoments
from timetile.core.aggregators.moments import Moments, merge_moments
from timetile.core.kernels.sweep import Floats, Int64s

_NO_MOMENTS: Moments = (0, 0.0, 0.0, 0.0, 0.0, 0.0)


class MomentTree(NamedTuple):
    """What :func:`moment_tree` builds, and :func:`window_moments` reads.

    Per node in heap order (leaf ``i`` at ``n + i``, node ``i`` the merge of ``2i`` and
    ``2i + 1``), its count, mean (high and low words) and moment sums; then the prefix counts
    of the values that are not finite (length n + 1). With n not a power of two, some nodes
    merge values that are not neighbours; no run reads those.
    """

    counts: Int64s
    means: Floats
    means_low: Floats
    m2s: Floats
    m3s: Floats
    m4s: Floats
    nonfinite: Int64s


@numba.njit(cache=True)
def _node(tree: tuple[Int64s, Floats, Floats, Floats, Floats, Floats], node: int) -> Moments:
    counts, means, means_low, m2s, m3s, m4s = tree
    return counts[node], means[node], means_low[node], m2s[node], m3s[node], m4s[node]


@numba.njit(cache=True)
def _build(values: Floats) -> tuple[Int64s, Floats, Floats, Floats, Floats, Floats, Int64s]:
    size = max(len(values), 1)  # a leaf per value: any n works, read bottom-up
    counts = np.zeros(2 * size, dtype=np.int64)
    means = np.zeros(2 * size)
    means_low = np.zeros(2 * size)
    m2s, m3s, m4s = np.zeros(2 * size), np.zeros(2 * size), np.zeros(2 * size)
    nonfinite = np.zeros(len(values) + 1, dtype=np.int64)
    for i in range(len(values)):
        value = values[i]
        finite = math.isfinite(value)
        nonfinite[i + 1] = nonfinite[i] + (0 if finite else 1)
        if finite:
            counts[size + i] = 1
            means[size + i] = value + 0.0  # -0.0 as 0.0
    nodes = (counts, means, means_low, m2s, m3s, m4s)
    for node in range(size - 1, 0, -1):
        (counts[node], means[node], means_low[node], m2s[node], m3s[node],
         m4s[node]) = merge_moments(_node(nodes, 2 * node), _node(nodes, 2 * node + 1))
    return counts, means, means_low, m2s, m3s, m4s, nonfinite


def moment_tree(values: Floats) -> MomentTree:
    """Build the tree :func:`window_moments` reads; NaN and ±inf leaves are empty.

    O(n) time; six arrays of 2n and one of n + 1: 104n + 8 bytes.
    """
    return MomentTree(*_build(values))


@numba.njit(cache=True)
def _window_moments(tree: tuple[Int64s, Floats, Floats, Floats, Floats, Floats],
                    nonfinite: Int64s, lows: Int64s,
                    highs: Int64s) -> tuple[Floats, Floats, Floats]:
    size = len(tree[0]) // 2
    m2 = np.zeros(len(lows))
    m3 = np.zeros(len(lows))
    m4 = np.zeros(len(lows))
    for query in range(len(lows)):
        low, high = lows[query], highs[query]
        if high - low < 2 or nonfinite[high] > nonfinite[low]:
            continue  # the counts decide every result
        before, after = _NO_MOMENTS, _NO_MOMENTS  # the nodes left and right of the middle
        left, right = low + size, high + size
        while left < right:
            if left & 1:
                before = merge_moments(before, _node(tree, left))
                left += 1
            if right & 1:
                right -= 1
                after = merge_moments(_node(tree, right), after)
            left //= 2
            right //= 2
        merged = merge_moments(before, after)
        m2[query], m3[query], m4[query] = merged[3], merged[4], merged[5]
    return m2, m3, m4


def window_moments(tree: MomentTree, lows: Int64s, highs: Int64s) -> RunMoments:
    """Return the moments of each run ``[lo, hi)`` of a :func:`moment_tree`'s values.

    Merged in order from the O(log n) nodes that cover the run, bottom-up, with the nodes
    left and right of the middle kept apart (a constant run gives exactly 0.0); O(q log n).

    >>> tree = moment_tree(np.array([1.0, 2.0, 4.0, np.nan]))
    >>> runs = window_moments(tree, np.array([0, 1, 2]), np.array([3, 3, 4]))
    >>> runs.m2.tolist(), runs.nonfinite.tolist()
    ([4.666666666666667, 2.0, 0.0], [0, 0, 1])
    """
    nodes = (tree.counts, tree.means, tree.means_low, tree.m2s, tree.m3s, tree.m4s)
    m2, m3, m4 = _window_moments(nodes, tree.nonfinite, lows, highs)
    return RunMoments(highs - lows, tree.nonfinite[highs] - tree.nonfinite[lows], m2, m3, m4)


def check_moment_tree(tree: MomentTree, values: Floats) -> None:
    """Assert the invariants of a :func:`moment_tree` of ``values`` (the tree's ``_check``).

    Leaves hold the finite values with zero moments, each node counts its children's
    values, its mean lies between theirs, its low word is below half a unit in the last
    place of its high word, and its m2 is at least the sum of theirs; empty nodes hold
    nothing; the prefix counts of NaN and ±inf match ``values``. O(n).
    """
    counts, means, means_low, m2s, m3s, m4s, nonfinite = tree
    size = len(counts) // 2
    assert size == max(len(values), 1), "a leaf per value"
    finite = np.isfinite(values)
    assert np.array_equal(nonfinite, np.concatenate([[0], np.cumsum(~finite)])), "prefixes"
    leaves = slice(size, 2 * size)
    assert np.array_equal(counts[size:size + len(values)], finite.astype(np.int64)), "leaves"
    assert np.array_equal(means[size:size + len(values)][finite], values[finite] + 0.0), (
        "leaf means")
    assert not counts[size + len(values):].any(), "padding leaves are empty"
    for sums in (m2s, m3s, m4s):
        assert not sums[leaves].any(), "a leaf's moment sums are 0"
    nodes = np.arange(1, size)
    first, second = 2 * nodes, 2 * nodes + 1
    assert np.array_equal(counts[nodes], counts[first] + counts[second]), "node counts"
    full = (counts[first] > 0) & (counts[second] > 0)
    lower = np.nextafter(np.minimum(means[first], means[second])[full], -np.inf)
    upper = np.nextafter(np.maximum(means[first], means[second])[full], np.inf)
    mean = means[nodes][full]  # within a unit in the last place: the low words may round it
    assert np.all((lower <= mean) & (mean <= upper)), "a mean between its children's"
    assert np.array_equal(means + means_low, means), "a low word below half an ulp"
    with np.errstate(invalid="ignore", over="ignore"):
        children = m2s[first] + m2s[second]
        ok = (m2s[nodes] >= children) | np.isnan(m2s[nodes]) | np.isnan(children)
    assert np.all(ok[full]), "m2 at least its children's"
    empty = counts == 0
    for held in (means_low, m2s, m3s, m4s):
        assert not held[empty].any(), "empty nodes hold nothing"
