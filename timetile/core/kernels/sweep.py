"""Window aggregates by sorted sweep: every query of every key in one pass, compiled by numba.

Events and queries arrive sorted by (key, time), keys contiguous. For each query the window
``[start, end)`` is a contiguous run ``[lo, hi)`` of its key's sorted events (starts and ends
never decrease with the query time), found by binary search. Then

- ``count``: a difference of prefix counts, exact;
- ``sum``, ``avg``: differences of double-double prefix sums of the finite values, with NaN,
  +inf and −inf counted apart so that they combine as Spark's sum does. Each window's error is
  bounded from the prefixes' sizes; a window whose bound is not far below 1e-12 of its sum
  (huge magnitudes, or a prefix that overflowed) is summed again exactly, so results are
  correctly rounded to well within the 1e-9 the oracle tests allow;
- ``min``, ``max``: a monotonic deque per key, O(events + queries), in Spark's order (NaN
  above every number: ``max`` is NaN when a NaN is in the window, ``min`` only when all are);
- ``variance``, ``stddev``: a segment tree of (count, mean, m2) over the finite values,
  merged with Chan's pairwise formula as :mod:`timetile.core.aggregators.moments` merges
  them, each mean a double-double (a difference of prefix sums of squares would cancel
  catastrophically, and so would a mean rounded to one double), and prefix counts of the
  NaN and ±inf values; O(n + q log n).

Total cost O((n + q) log n) for n events and q queries; memory O(n). These are the semantics
of :mod:`timetile.core.aggregators` for these ops, checked against the oracle by the tests.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from timetile.core.aggregators.exact import exact_float_sum, scaled_to_float

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


@numba.njit(cache=True)
def window_runs(event_times: Int64s, event_offsets: Int64s, query_offsets: Int64s,
                starts: Int64s, ends: Int64s) -> tuple[Int64s, Int64s]:
    """For each query, the run ``[lo, hi)`` of its key's events inside ``[start, end)``.

    ``event_offsets``/``query_offsets`` delimit each key's events and queries (length
    keys + 1); indices returned are global. O(q log n).
    """
    lows = np.empty(len(starts), dtype=np.int64)
    highs = np.empty(len(starts), dtype=np.int64)
    for key in range(len(event_offsets) - 1):
        first, last = event_offsets[key], event_offsets[key + 1]
        times = event_times[first:last]
        for query in range(query_offsets[key], query_offsets[key + 1]):
            lows[query] = first + np.searchsorted(times, starts[query])
            highs[query] = first + np.searchsorted(times, ends[query])
    return lows, highs


@numba.njit(cache=True)
def _two_sum(a: float, b: float) -> tuple[float, float]:
    """Return ``a + b`` rounded, and its rounding error, exactly (Knuth's TwoSum)."""
    total = a + b
    z = total - a
    return total, (a - (total - z)) + (b - z)


class FloatPrefixSums(NamedTuple):
    """Prefix sums of a column of doubles, from which :func:`window_sums` reads any run.

    ``high + low`` is the double-double sum of the finite values before each index; ``nans``,
    ``positive`` and ``negative`` count the NaN, +inf and -inf values before it. Each has
    length n + 1.
    """

    high: Floats
    low: Floats
    nans: Int64s
    positive: Int64s
    negative: Int64s


def float_prefix_sums(values: Floats) -> FloatPrefixSums:
    """Return the prefix sums of ``values`` that :func:`window_sums` reads; O(n)."""
    return FloatPrefixSums(*_prefix_double_double(values))


@numba.njit(cache=True)
def _prefix_double_double(values: Floats) -> tuple[Floats, Floats, Int64s, Int64s, Int64s]:
    n = len(values)
    high = np.zeros(n + 1)
    low = np.zeros(n + 1)
    nans = np.zeros(n + 1, dtype=np.int64)
    positive = np.zeros(n + 1, dtype=np.int64)
    negative = np.zeros(n + 1, dtype=np.int64)
    s, c = 0.0, 0.0
    for i in range(n):
        x = values[i]
        nans[i + 1] = nans[i] + (1 if np.isnan(x) else 0)
        positive[i + 1] = positive[i] + (1 if x == np.inf else 0)
        negative[i + 1] = negative[i] + (1 if x == -np.inf else 0)
        if np.isfinite(x):
            s, error = _two_sum(s, x)  # s + x = the new s + error, exactly
            c += error
        high[i + 1] = s
        low[i + 1] = c
    return high, low, nans, positive, negative


#: Relative error above which a window's double-double sum is recomputed exactly.
_SUM_TOLERANCE = 1e-12


def window_sums(values: Floats, lows: Int64s, highs: Int64s,
                prefix: FloatPrefixSums | None = None) -> Floats:
    """Spark's ``sum`` of each run ``values[lo:hi]`` of doubles (0.0 for empty runs).

    ``prefix`` is ``float_prefix_sums(values)``, computed here when not given: a caller with
    several sets of runs over one column (one per window) passes it to each. O(q) with it,
    plus the length of each run summed again exactly (see the module docstring).

    >>> window_sums(np.array([1.0, np.inf, 2.0, np.nan]), np.array([0, 0, 2]), np.array([1, 3, 4]))
    array([ 1., inf, nan])
    >>> huge = np.array([1e308, 1e308, 1.0, 1e30, 1.0, 1e-20])  # overflow, then magnitudes
    >>> window_sums(huge, np.array([2, 5]), np.array([3, 6]))
    array([1.e+00, 1.e-20])
    """
    if prefix is None:
        prefix = float_prefix_sums(values)
    assert len(prefix.high) == len(values) + 1, "prefix sums of other values"
    high, low, nans, positive, negative = prefix
    with np.errstate(invalid="ignore", over="ignore"):
        finite = (high[highs] - high[lows]) + (low[highs] - low[lows])
        # The low words are plain float sums: their rounding, and the high words' (2⁻¹⁰⁴
        # relative), bound each window's error. Recompute where that is not negligible.
        bound = 2.0**-52 * (np.abs(low[highs]) + np.abs(low[lows])) + 2.0**-104 * (
            np.abs(high[highs]) + np.abs(high[lows]))
        unsure = ~np.isfinite(finite) | ~(bound <= _SUM_TOLERANCE * np.abs(finite))
    for query in np.flatnonzero(unsure & (highs > lows)):
        run = values[lows[query]:highs[query]]
        finite[query] = scaled_to_float(exact_float_sum(run[np.isfinite(run)]))
    has_nan = nans[highs] > nans[lows]
    has_pos = positive[highs] > positive[lows]
    has_neg = negative[highs] > negative[lows]
    finite = np.where(highs > lows, finite, 0.0)
    out = np.where(has_pos, math.inf, finite)
    out = np.where(has_neg, -math.inf, out)
    return np.where(has_nan | (has_pos & has_neg), math.nan, out)


def int_prefix_sums(values: Int64s) -> Int64s:
    """Return the exact prefix sums of 64-bit integers (length n + 1), in int64; O(n).

    Raises:
        OverflowError: when a prefix could leave the int64 range (callers fall back to
            Python integers).

    """
    if len(values) and max(-int(values.min()), int(values.max())) * len(values) >= 2**62:
        raise OverflowError("integer prefix sums could overflow int64")
    prefix: Int64s = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return prefix


def window_int_sums(values: Int64s, lows: Int64s, highs: Int64s) -> Int64s:
    """Exact ``sum`` of each run of 64-bit integers; see :func:`int_prefix_sums`.

    Raises:
        OverflowError: when a prefix could leave the int64 range (callers fall back).

    """
    prefix = int_prefix_sums(values)
    sums: Int64s = prefix[highs] - prefix[lows]
    return sums


@numba.njit(cache=True)
def _above(a: float, b: float) -> bool:
    """Tell whether ``a > b`` in Spark's order of doubles: NaN above every number."""
    if np.isnan(a):
        return not np.isnan(b)
    if np.isnan(b):
        return False
    return a > b


@numba.njit(cache=True)
def window_extremes(  # noqa: PLR0917  (numba kernels take positional arrays)
                    values: npt.NDArray[np.generic], event_offsets: Int64s,
                    query_offsets: Int64s, lows: Int64s, highs: Int64s,
                    largest: bool) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.bool_]]:
    """``max`` (``largest``) or ``min`` of each query's run, and whether the run was empty.

    ``values`` are float64 or int64 (the result keeps their type). One monotonic deque per
    key; a key's queries must be sorted by time, so that both ends of their runs never move
    back. O(n + q).
    """
    out = np.zeros(len(lows), dtype=values.dtype)
    empty = np.zeros(len(lows), dtype=np.bool_)
    deque = np.empty(len(values), dtype=np.int64)
    for key in range(len(event_offsets) - 1):
        head, tail = 0, 0  # deque[head:tail] holds event indices, best value first
        pushed = event_offsets[key]
        for query in range(query_offsets[key], query_offsets[key + 1]):
            while pushed < highs[query]:
                value = values[pushed]
                while tail > head:
                    back = values[deque[tail - 1]]
                    better = _above(value, back) if largest else _above(back, value)
                    if better or value == back or (np.isnan(value) and np.isnan(back)):
                        tail -= 1
                    else:
                        break
                deque[tail] = pushed
                tail += 1
                pushed += 1
            while tail > head and deque[head] < lows[query]:
                head += 1
            if tail > head:
                out[query] = values[deque[head]]
            else:
                empty[query] = True
    return out, empty


#: A partial of ``variance``: the count of some finite values, their mean as a double-double
#: (high and low words), and m2, the sum of their squared deviations from it.
Moments = tuple[int, float, float, float]
_NO_MOMENTS: Moments = (0, 0.0, 0.0, 0.0)
#: What :func:`moment_tree` builds: per node its count, mean (high, low) and m2, then the
#: prefix counts of NaN and ±inf.
MomentTree = tuple[Int64s, Floats, Floats, Floats, Int64s]


@numba.njit(cache=True)
def _chan_merge(a: Moments, b: Moments) -> Moments:
    """Merge two partials with Chan, Golub & LeVeque's pairwise update.

    The formula of ``timetile.core.aggregators.moments._combine`` for m2, with the same
    fallback for a mean whose difference overflowed. The mean is kept as a double-double:
    rounded to one double, the mean of values near 1e9 is off by about 1e-7, and the
    update's ``delta`` carries that error into m2 at first order (a relative error of 1e-7
    for a spread of 1); with the low word, ``delta`` is exact to about 1e-16 of itself.
    """
    count_a, high_a, low_a, m2_a = a
    count_b, high_b, low_b, m2_b = b
    if count_b == 0:
        return a
    if count_a == 0:
        return b
    na, nb = float(count_a), float(count_b)
    n = na + nb
    difference, error = _two_sum(high_b, -high_a)
    delta = difference + (error + (low_b - low_a))
    delta_n = delta / n
    high, low = _two_sum(high_a, delta_n * nb)
    high, low = _two_sum(high, low + low_a)
    if not math.isfinite(high):  # delta overflowed (means near both ends of the double range)
        high, low = high_a * (na / n) + high_b * (nb / n), 0.0
    return count_a + count_b, high, low, m2_a + m2_b + delta * delta_n * na * nb


@numba.njit(cache=True)
def moment_tree(values: Floats) -> MomentTree:
    """Build the tree :func:`window_variances` reads.

    A segment tree over the finite values in heap order (the root at 1, leaf ``i`` at
    ``size + i``, a NaN or ±inf leaf empty), each node the :func:`_chan_merge` of its
    children, and the prefix counts of the values that are not finite. O(n) time; four
    arrays of 2·size (size < 2n) and one of n + 1: at most 64n + 8 bytes.
    """
    size = 1
    while size < len(values):
        size *= 2
    counts = np.zeros(2 * size, dtype=np.int64)
    highs = np.zeros(2 * size)
    lows = np.zeros(2 * size)
    m2s = np.zeros(2 * size)
    nonfinite = np.zeros(len(values) + 1, dtype=np.int64)
    for i in range(len(values)):
        value = values[i]
        finite = math.isfinite(value)
        nonfinite[i + 1] = nonfinite[i] + (0 if finite else 1)
        if finite:
            counts[size + i] = 1
            highs[size + i] = value + 0.0  # -0.0 as 0.0
    for node in range(size - 1, 0, -1):
        first, second = 2 * node, 2 * node + 1
        counts[node], highs[node], lows[node], m2s[node] = _chan_merge(
            (counts[first], highs[first], lows[first], m2s[first]),
            (counts[second], highs[second], lows[second], m2s[second]))
    return counts, highs, lows, m2s, nonfinite


@numba.njit(cache=True)
def window_variances(tree: MomentTree, lows: Int64s, highs: Int64s) -> tuple[Floats, Bools]:
    """Spark's ``var_samp`` of each run ``[lo, hi)`` of a :func:`moment_tree`'s values.

    Returns the variances and whether each is null. Null below two values; NaN when a NaN
    or ±inf is in the run; otherwise m2 / (n − 1), with m2 merged in order from the
    O(log n) nodes that cover the run (a constant run gives exactly 0.0), and inf when the
    squares of finite values overflow. O(q log n).
    """
    counts, means, means_low, m2s, nonfinite = tree
    size = len(counts) // 2
    out = np.zeros(len(lows))
    null = np.zeros(len(lows), dtype=np.bool_)
    for query in range(len(lows)):
        low, high = lows[query], highs[query]
        if high - low < 2:
            null[query] = True
            continue
        if nonfinite[high] > nonfinite[low]:
            out[query] = math.nan
            continue
        before, after = _NO_MOMENTS, _NO_MOMENTS  # the nodes left and right of the middle
        left, right = low + size, high + size
        while left < right:
            if left & 1:
                before = _chan_merge(before, (counts[left], means[left], means_low[left],
                                              m2s[left]))
                left += 1
            if right & 1:
                right -= 1
                after = _chan_merge((counts[right], means[right], means_low[right],
                                     m2s[right]), after)
            left //= 2
            right //= 2
        m2 = _chan_merge(before, after)[3]
        out[query] = math.inf if math.isnan(m2) else m2 / (high - low - 1)
    return out, null


def check_moment_tree(tree: MomentTree, values: Floats) -> None:
    """Assert the invariants of a :func:`moment_tree` of ``values`` (the tree's ``_check``).

    Leaves hold the finite values, each node counts its children's values, its mean lies
    between theirs and its m2 is at least the sum of theirs; the prefix counts of NaN and
    ±inf match ``values``. O(n).
    """
    counts, means, means_low, m2s, nonfinite = tree
    size = len(counts) // 2
    assert size >= len(values), "a leaf per value"
    assert size & (size - 1) == 0, "size: a power of two"
    finite = np.isfinite(values)
    assert np.array_equal(nonfinite, np.concatenate([[0], np.cumsum(~finite)])), "prefixes"
    leaves = slice(size, size + len(values))
    assert np.array_equal(counts[leaves], finite.astype(np.int64)), "leaf counts"
    assert np.array_equal(means[leaves][finite], values[finite] + 0.0), "leaf means"
    assert not counts[size + len(values):].any(), "padding leaves are empty"
    nodes = np.arange(1, size)
    first, second = 2 * nodes, 2 * nodes + 1
    assert np.array_equal(counts[nodes], counts[first] + counts[second]), "node counts"
    full = (counts[first] > 0) & (counts[second] > 0)
    lower = np.nextafter(np.minimum(means[first], means[second])[full], -np.inf)
    upper = np.nextafter(np.maximum(means[first], means[second])[full], np.inf)
    mean = means[nodes][full]  # within a unit in the last place: the low words may round it
    assert np.all((lower <= mean) & (mean <= upper)), "a mean between its children's"
    with np.errstate(invalid="ignore", over="ignore"):
        children = m2s[first] + m2s[second]
        ok = (m2s[nodes] >= children) | np.isnan(m2s[nodes]) | np.isnan(children)
    assert np.all(ok[full]), "m2 at least its children's"
    assert np.all(means_low[counts == 0] == 0.0), "empty nodes hold nothing"
