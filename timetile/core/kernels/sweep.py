"""Window aggregates by sorted sweep: every query of every key in one pass, compiled by numba.

Events and queries arrive sorted by (key, time), keys contiguous. For each query the window
``[start, end)`` is a contiguous run ``[lo, hi)`` of its key's sorted events (starts and ends
never decrease with the query time), found by binary search. Then

- ``count``: a difference of prefix counts, exact;
- ``sum``, ``avg``: differences of double-double prefix sums of the finite values, with NaN,
  +inf and −inf counted apart so that they combine as Spark's sum does. The prefixes also
  carry a bound of their rounding, so each window's exact sum is known to lie in a small
  interval; where that interval does not round to a single double (a sum near a rounding
  boundary, cancellation against a huge earlier value, a prefix that overflowed) the run is
  summed again exactly. Every result is the exact sum correctly rounded, bit for bit what
  :class:`~timetile.core.aggregators.counting.Sum` gives online;
- ``min``, ``max``: a monotonic deque per key, O(events + queries), in Spark's order (NaN
  above every number: ``max`` is NaN when a NaN is in the window, ``min`` only when all are);
- ``variance``, ``stddev``, ``skew``, ``kurtosis``: a segment tree of central moments,
  O(n + q log n) (:mod:`timetile.core.kernels.moment_tree`);
- ``unique_count``, ``histogram``, ``top_k``, ``bottom_k``: each value's rank among the d
  distinct values, and per key a run that moves from one query to the next, keeping the
  multiset of ranks: O(n + q) per key, times log d for the ordered ops, plus log d per entry
  of their output (:mod:`timetile.core.kernels.multisets`).

Total cost O((n + q) log n) for n events and q queries, plus the outputs of the list and map
ops; memory O(n) besides those outputs. These are the semantics
of :mod:`timetile.core.aggregators` for these ops, checked against the oracle by the tests.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from timetile.core.aggregators.columnar import RunSums
from timetile.core.aggregators.exact import (
    MAX_PARTIALS,
    exact_float_sum,
    rounded_run_sum,
    scaled_to_float,
    two_sum,
)
from timetile.core.aggregators.ordering import value_above

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


def time_order(times: Int64s, group_of_row: Int64s) -> Int64s:
    """Return the row order that sorts rows by (group, time), stably.

    ``group_of_row`` numbers each row's group, non-decreasing: the groups are contiguous and
    in order already (Spark sorted them by key), so only each group's time order is left.
    Where (group, time) packs into one int64, one introsort of the packed keys (numpy's,
    vectorized where the CPU allows), then the rows tied on both put back in row order:
    O(n log n), about a quarter of a stable sort on two columns. Otherwise (times far
    apart, near both ends of int64) a stable sort on the two columns.

    >>> time_order(np.array([5, 3, 3, 9, 1]), np.array([0, 0, 0, 1, 1])).tolist()
    [1, 2, 0, 4, 3]
    """
    if len(times) == 0:
        return np.zeros(0, dtype=np.int64)
    low = int(times.min())
    span = int(times.max()) - low + 1
    if (int(group_of_row[-1]) + 1) * span >= 2**62:
        ordered: Int64s = np.lexsort((times, group_of_row))
        return ordered
    packed = group_of_row * np.int64(span) + (times - np.int64(low))
    order: Int64s = np.argsort(packed)
    keys = packed[order]
    tied = keys[1:] == keys[:-1]
    if tied.any():  # sort the tied rows by (key, row): each run keeps its place
        in_run = np.zeros(len(order), dtype=bool)
        in_run[1:] |= tied
        in_run[:-1] |= tied
        rows = np.flatnonzero(in_run)
        order[rows] = order[rows][np.lexsort((order[rows], keys[rows]))]
    return order


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


class FloatPrefixSums(NamedTuple):
    """Prefix sums of a column of doubles, from which :func:`window_sums` reads any run.

    ``high + low`` is the double-double sum of the finite values before each index, and
    ``slack`` the sum of the magnitudes of the roundings in ``low`` (``high`` is exact: a
    TwoSum chain), so the exact sum of a run ``[lo, hi)`` is within ``slack[hi] - slack[lo]``
    of ``(high[hi] - high[lo]) + (low[hi] - low[lo])``. ``nans``, ``positive`` and
    ``negative`` count the NaN, +inf and -inf values before each index. Each has length n + 1.
    """

    high: Floats
    low: Floats
    slack: Floats
    nans: Int64s
    positive: Int64s
    negative: Int64s


def float_prefix_sums(values: Floats) -> FloatPrefixSums:
    """Return the prefix sums of ``values`` that :func:`window_sums` reads; O(n)."""
    return FloatPrefixSums(*_prefix_double_double(values))


@numba.njit(cache=True)
def _prefix_double_double(values: Floats
                          ) -> tuple[Floats, Floats, Floats, Int64s, Int64s, Int64s]:
    n = len(values)
    high = np.zeros(n + 1)
    low = np.zeros(n + 1)
    slack = np.zeros(n + 1)
    nans = np.zeros(n + 1, dtype=np.int64)
    positive = np.zeros(n + 1, dtype=np.int64)
    negative = np.zeros(n + 1, dtype=np.int64)
    s, c, bound = 0.0, 0.0, 0.0
    for i in range(n):
        x = values[i]
        nans[i + 1] = nans[i] + (1 if np.isnan(x) else 0)
        positive[i + 1] = positive[i] + (1 if x == np.inf else 0)
        negative[i + 1] = negative[i] + (1 if x == -np.inf else 0)
        if np.isfinite(x):
            s, error = two_sum(s, x)  # s + x = the new s + error, exactly
            c, rounding = two_sum(c, error)
            bound += abs(rounding)
        high[i + 1] = s
        low[i + 1] = c
        slack[i + 1] = bound
    return high, low, slack, nans, positive, negative


def window_sums(values: Floats, lows: Int64s, highs: Int64s,
                prefix: FloatPrefixSums | None = None) -> Floats:
    """Return the sum of the finite values of each run ``values[lo:hi]`` (0.0 if none).

    NaN and ±inf are left out: :func:`run_sums` counts them, and ``Sum``'s rules decide
    what they make of the sum. ``prefix`` is ``float_prefix_sums(values)``, computed here
    when not given: a caller with several sets of runs over one column (one per window)
    passes it to each. Each sum is the exact sum correctly rounded. O(q) with ``prefix``,
    plus the length of each run whose sum lies too near a rounding boundary to tell from the
    prefixes, summed again exactly (see the module docstring).

    >>> window_sums(np.array([1.0, np.inf, 2.0, np.nan]), np.array([0, 0, 2]), np.array([1, 3, 4]))
    array([1., 3., 2.])
    >>> huge = np.array([1e308, 1e308, 1.0, 1e30, 1.0, 1e-20])  # overflow, then magnitudes
    >>> window_sums(huge, np.array([2, 5]), np.array([3, 6]))
    array([1.e+00, 1.e-20])
    """
    if prefix is None:
        prefix = float_prefix_sums(values)
    assert len(prefix.high) == len(values) + 1, "prefix sums of other values"
    sums, refused = _window_sums(values, prefix.high, prefix.low, prefix.slack, lows, highs)
    for query in np.flatnonzero(refused):  # beyond the double range on the way: no range
        run = values[lows[query]:highs[query]]
        sums[query] = scaled_to_float(exact_float_sum(run[np.isfinite(run)]))
    return sums


def run_sums(values: Floats, lows: Int64s, highs: Int64s,
             prefix: FloatPrefixSums | None = None) -> RunSums:
    """Return each run's sum state: count, :func:`window_sums`, NaN and ±inf counts.

    What ``Sum`` and ``Avg`` finalize a column of runs from (their ``finalize_many``). O(q)
    with ``prefix``, as :func:`window_sums`.
    """
    if prefix is None:
        prefix = float_prefix_sums(values)
    return RunSums(highs - lows, window_sums(values, lows, highs, prefix),
                   prefix.nans[highs] - prefix.nans[lows],
                   prefix.positive[highs] - prefix.positive[lows],
                   prefix.negative[highs] - prefix.negative[lows])


@numba.njit(cache=True)
def _window_sums(  # noqa: PLR0917  (numba kernels take positional arrays)
        values: Floats, high: Floats, low: Floats, slack: Floats, lows: Int64s, highs: Int64s,
) -> tuple[Floats, Bools]:
    """:func:`window_sums`, compiled: the sums, and the runs it leaves to exact integers.

    A run's exact sum is ``finite + remainder``, give or take ``bound``: the low words'
    roundings over the run (slack; 2⁻²⁰ of the prefix covers slack's own rounding up to 2³³
    values), and those of the two additions into ``rest`` (the 2⁻⁵¹ term). ``finite`` is the
    correctly rounded sum when the exact sum cannot leave the interval of reals that round to
    it: within half the narrower gap to its neighbours; or exactly ``finite`` (the only sure
    case for a sum of 0.0, whose narrower gap is none). Otherwise (a sum at or near a tie, as
    half of all sums of two values with one exponent are, or cancellation against a huge
    earlier value) the run is summed again, exactly and correctly rounded
    (:func:`~timetile.core.aggregators.exact.rounded_run_sum`); a run whose partial sums
    leave the double range is refused, for the caller to sum with Python integers.
    """
    sums = np.zeros(len(lows))
    refused = np.zeros(len(lows), dtype=np.bool_)
    partials = np.empty(MAX_PARTIALS)
    for query in range(len(lows)):
        lo, hi = lows[query], highs[query]
        if hi <= lo:
            continue
        high_run, high_error = two_sum(high[hi], -high[lo])
        low_run, low_error = two_sum(low[hi], -low[lo])
        head, tail = two_sum(high_run, low_run)
        rest = tail + (high_error + low_error)
        finite, remainder = two_sum(head, rest)
        bound = (slack[hi] - slack[lo]) + 2.0**-20 * slack[hi] + 2.0**-51 * (
            abs(tail) + abs(high_error) + abs(low_error))
        magnitude = abs(finite)
        gap = min(np.spacing(magnitude), magnitude - np.nextafter(magnitude, 0.0))
        exact = bound == 0.0 and remainder == 0.0
        if np.isfinite(finite) and (exact or abs(remainder) + bound < gap / 2):
            sums[query] = finite
            continue
        sums[query], summed = rounded_run_sum(values, lo, hi, partials)
        refused[query] = not summed
    return sums, refused


def int_prefix_sums(values: Int64s) -> npt.NDArray[np.int64 | np.object_]:
    """Return the exact prefix sums of 64-bit integers (length n + 1); O(n).

    In int64 where no prefix can leave its range (n times the largest magnitude below
    2^62), else as Python integers in an object array: exact either way.

    >>> int_prefix_sums(np.array([2**62, 2**62])).tolist()
    [0, 4611686018427387904, 9223372036854775808]
    """
    if len(values) and max(-int(values.min()), int(values.max())) * len(values) >= 2**62:
        exact: npt.NDArray[np.object_] = np.concatenate([[0], np.cumsum(values.astype(object))])
        return exact
    prefix: Int64s = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return prefix


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
                    better = value_above(value, back) if largest else value_above(back, value)
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
