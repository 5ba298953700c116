"""The sweep's arithmetic on one table of whole keys: each feature's results, as Arrow.

:class:`SweptColumn` holds one value column of the table (its non-null values, in time order
within each group) with the queries' times, and computes once what several features read:
each query's run of values per window, sums, moments, value ranks, the values in event
order. :func:`feature_result` turns them into one feature's column of results, by the
kernels of :mod:`timetile.core.kernels`. No Spark here: :mod:`.sweep_executor` feeds it the
tables ``mapInArrow`` hands over.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.windows import Window
from timetile.core.aggregators.ordering import canonical_array
from timetile.core.kernels.moment_tree import (
    MOMENT_OPS,
    MomentTree,
    RunMoments,
    moment_results,
    moment_tree,
    window_moments,
)
from timetile.core.kernels.multisets import (
    window_distinct_counts,
    window_histograms,
    window_top_k,
)
from timetile.core.kernels.sweep import (
    FloatPrefixSums,
    float_prefix_sums,
    int_prefix_sums,
    window_extremes,
    window_runs,
    window_sums,
)
from timetile.core.types import ValueType
from timetile.offline.plan import Feature, query_bounds

#: The ops that read values by event order: equal times are ordered by value.
EVENT_ORDER_OPS = ("first", "last", "first_k", "last_k")
#: The ops that read each run as a multiset of value ranks (:meth:`SweptColumn.value_ranks`).
VALUE_RANK_OPS = ("unique_count", "histogram", "top_k", "bottom_k")
#: The most entries one Arrow list or map array holds: its offsets are int32.
ARROW_LIST_LIMIT = 2**31 - 1


def group_offsets(group_of_row: np.ndarray, groups: int) -> np.ndarray:
    """Return where each group's rows start (length ``groups + 1``), for rows by group."""
    counts = np.bincount(group_of_row, minlength=groups)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def dictionary_ranks(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Return each value's rank among the distinct ``values``, and those values by rank.

    By Arrow's sort order: strings by their UTF-8 bytes (which orders code points alike),
    ``False`` before ``True``, numbers ascending. ``values`` has no nulls. O(n + d log d) for
    d distinct values: a hash, then a sort of the distinct values alone.
    """
    encoded = pc.dictionary_encode(values)
    order = pc.array_sort_indices(encoded.dictionary).to_numpy()
    rank_of_entry = np.empty(len(order), dtype=np.int64)
    rank_of_entry[order] = np.arange(len(order))
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return rank_of_entry[indices], encoded.dictionary.take(pa.array(order))


class SweptColumn:
    """One value column of a table of whole keys, and what each window makes of it.

    Its non-null values, times and offsets, and once each, the values in event order and
    their ranks in value order; per window, computed once, each query's run, sums and
    moments. The events are in time order within each group, as the table is;
    so are the queries, whose times and per-group offsets every column of the table shares.
    """

    def __init__(self, column: pa.ChunkedArray, times: np.ndarray, group_of_row: np.ndarray,
                 groups: int, value_type: ValueType, *, query_times: np.ndarray,
                 query_offsets: np.ndarray) -> None:
        valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
        self.times = times[valid]
        self.groups = group_of_row[valid]
        self.offsets = group_offsets(self.groups, groups)
        self.query_times = query_times
        self.query_offsets = query_offsets
        self.kept = pc.filter(column, pa.array(valid)).combine_chunks()
        self.values = (self.kept.to_numpy(zero_copy_only=False).astype(value_type.numpy_dtype)
                       if value_type.numeric else None)
        self._in_event_order: pa.Array | None = None
        self._runs: dict[Window | None, tuple[np.ndarray, np.ndarray]] = {}
        self._float_prefix: FloatPrefixSums | None = None
        self._int_prefix: np.ndarray | None = None  # int64, or Python integers
        self._sums: dict[Window | None, np.ndarray] = {}
        self._moment_tree: MomentTree | None = None
        self._moments: dict[Window | None, RunMoments] = {}
        self._value_ranks: tuple[np.ndarray, pa.Array] | None = None

    def runs(self, window: Window | None) -> tuple[np.ndarray, np.ndarray]:
        """Return each query's run ``[lo, hi)`` of values in ``window``; O(q log n)."""
        if window not in self._runs:
            low_times, high_times = query_bounds(window, self.query_times)
            self._runs[window] = window_runs(self.times, self.offsets, self.query_offsets,
                                             low_times.astype(np.int64),
                                             high_times.astype(np.int64))
        return self._runs[window]

    def sums(self, window: Window | None) -> np.ndarray:
        """Return the sum of each query's run in ``window``, 0 for an empty run.

        Once per window, for ``sum`` and ``avg`` both, from one set of prefix sums per
        column (O(n), on first use), then O(q) per window. Integers are exact: in int64, or
        where int64 could overflow in Python integers (an object array).
        """
        if window not in self._sums:
            values, (lows, highs) = self.values, self.runs(window)
            assert values is not None  # a numeric column
            if values.dtype.kind == "f":
                if self._float_prefix is None:
                    self._float_prefix = float_prefix_sums(values)
                self._sums[window] = window_sums(values, lows, highs, self._float_prefix)
            else:
                if self._int_prefix is None:
                    try:
                        self._int_prefix = int_prefix_sums(values)
                    except OverflowError:  # exact Python integers instead
                        self._int_prefix = np.concatenate(
                            [[0], np.cumsum(values.astype(object))])
                self._sums[window] = self._int_prefix[highs] - self._int_prefix[lows]
        return self._sums[window]

    def moments(self, window: Window | None) -> RunMoments:
        """Return the central moments of each query's run in ``window``.

        Once per window, for ``variance``, ``stddev``, ``skew`` and ``kurtosis`` alike, from
        one tree of moments per column (built on first use, O(n)); O(q log n) per window.
        """
        if self._moment_tree is None:
            assert self.values is not None  # a numeric column
            self._moment_tree = moment_tree(self.values.astype(np.float64, copy=False))
        if window not in self._moments:
            self._moments[window] = window_moments(self._moment_tree, *self.runs(window))
        return self._moments[window]

    def value_ranks(self) -> tuple[np.ndarray, pa.Array]:
        """Return each value's rank among the distinct values, and those values by rank.

        Ranks follow the value order of :mod:`timetile.core.aggregators.ordering`, and equal
        values share one, as ``unique_count`` counts them: every NaN is one value, ranked
        last, and ``-0.0`` is ``0.0`` (the values come back normalized); strings go by code
        point (Arrow compares their UTF-8 bytes, which orders code points alike), ``False``
        before ``True``. Floats: O(n log n), a sort; the other types: O(n + d log d), a hash
        and a sort of the d distinct values.
        """
        if self._value_ranks is None:
            if self.values is not None and self.values.dtype.kind == "f":
                uniques, ranks = np.unique(canonical_array(self.values), return_inverse=True)
                self._value_ranks = (ranks.reshape(-1).astype(np.int64, copy=False),
                                     pa.array(uniques))
            else:
                self._value_ranks = dictionary_ranks(self.kept)
        return self._value_ranks

    def in_event_order(self) -> pa.Array:
        """Return the values in the order ``first`` and ``last`` read them, as Arrow.

        By time within each group, and equal times by value (the value order of
        :mod:`timetile.core.aggregators.ordering`: NaN last). Floats are canonical (``-0.0``
        becomes ``0.0``, every NaN the positive one), as every result is. O(n) without ties;
        O(n log n) with them.
        """
        if self._in_event_order is None:
            ordered = self.kept
            if pa.types.is_floating(ordered.type):
                ordered = pa.array(canonical_array(ordered.to_numpy(zero_copy_only=False)),
                                   type=ordered.type)
            tied = (np.diff(self.times) == 0) & (np.diff(self.groups) == 0)
            if tied.any():  # Arrow sorts NaN after every number, and strings by their bytes
                keyed = pa.table({"group": self.groups, "time": self.times, "value": ordered})
                ordered = ordered.take(pc.sort_indices(keyed, sort_keys=[
                    ("group", "ascending"), ("time", "ascending"), ("value", "ascending")]))
            self._in_event_order = ordered
        return self._in_event_order


def feature_result(feature: Feature, column: SweptColumn) -> pa.Array:
    """One feature's results, as Arrow, from its column's runs in its window."""
    op = feature.aggregation.op
    lows, highs = column.runs(feature.window)
    counts = highs - lows
    if op == "count":
        return pa.array(counts, type=pa.int64())
    if op in VALUE_RANK_OPS:
        return _by_value_rank(op, feature.aggregation.k, column, lows, highs)
    if op in EVENT_ORDER_OPS:
        return _ends_of_runs(op, feature.aggregation.k, column.in_event_order(), lows, highs)
    if op in MOMENT_OPS:
        results, null = moment_results(op, column.moments(feature.window))
        return pa.array(results, mask=null, type=pa.float64())
    if op in ("min", "max"):
        assert column.values is not None
        extremes, empty = window_extremes(column.values, column.offsets, column.query_offsets,
                                          lows, highs, op == "max")
        return pa.array(canonical_array(extremes), mask=empty)
    return _summed(feature, column.sums(feature.window), counts)


def _summed(feature: Feature, sums: np.ndarray, counts: np.ndarray) -> pa.Array:
    """``sum`` or ``avg`` of each query's run, from its sum and its count; null if empty.

    Raises:
        OverflowError: an integer ``sum`` past int64, as Spark SQL's raises
            ``ARITHMETIC_OVERFLOW`` under ANSI mode, Spark 4's default (``avg`` is a
            double: exact sums make it right).

    """
    empty = counts == 0
    op = feature.aggregation.op
    if op == "sum":
        if feature.input_type is ValueType.FLOAT:
            return pa.array(sums, mask=empty, type=pa.float64())
        try:
            return pa.array(sums, mask=empty, type=pa.int64())
        except OverflowError:
            raise OverflowError(
                f"{feature.name}: a window's sum of the integer column "
                f"{feature.aggregation.column!r} is past int64, as Spark SQL's sum would be "
                "(ARITHMETIC_OVERFLOW). Fix: cast the column to double in the source's select "
                "(exact to 2^53, rounded past it)") from None
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums.astype(np.float64) / np.where(empty, 1, counts)
    return pa.array(canonical_array(means), mask=empty, type=pa.float64())


def _by_value_rank(op: str, k: int | None, column: SweptColumn, lows: np.ndarray,
                   highs: np.ndarray) -> pa.Array:
    """``op`` of each query's run ``[low, high)`` of ``column``'s values.

    ``op`` is ``unique_count``, ``histogram``, ``top_k`` or ``bottom_k`` (with ``k``); an
    empty run gives null, or 0 for ``unique_count``. See
    :mod:`timetile.core.kernels.multisets` for the costs.
    """
    ranks, by_rank = column.value_ranks()
    runs = (ranks, len(by_rank), column.offsets, column.query_offsets, lows, highs)
    if op == "unique_count":
        return pa.array(window_distinct_counts(*runs), type=pa.int64())
    empty = pa.array(highs == lows)
    if op == "histogram":
        offsets, held, multiplicities = window_histograms(*runs)
        return pa.MapArray.from_arrays(list_offsets(offsets, op), by_rank.take(held),
                                       pa.array(multiplicities), mask=empty)
    assert k is not None
    offsets, chosen = window_top_k(*runs, k, op == "top_k")
    return pa.ListArray.from_arrays(list_offsets(offsets, op), by_rank.take(chosen),
                                    mask=empty)


def list_offsets(offsets: np.ndarray, op: str, *, bucketed: bool = False) -> pa.Array:
    """Return ``offsets`` as the int32 offsets of an Arrow list or map array.

    ``bucketed``: the maps of a bucketed feature, so the error suggests fewer buckets too.

    Raises:
        ValueError: past what int32 offsets address (:data:`ARROW_LIST_LIMIT` entries).

    """
    if offsets[-1] > ARROW_LIST_LIMIT:
        fewer = "fewer buckets, " if bucketed else ""
        raise ValueError(
            f"{op}: the windows of one table of keys hold {offsets[-1]:,} entries in all, more "
            f"than an Arrow list holds ({ARROW_LIST_LIMIT:,}); ask for {fewer}a smaller k or a "
            "shorter window, or lower max_key_events so that hot keys sweep in smaller chunks")
    return pa.array(offsets, type=pa.int32())


def _ends_of_runs(op: str, k: int | None, values: pa.Array, lows: np.ndarray,
                  highs: np.ndarray) -> pa.Array:
    """Return ``op`` over each query's run ``[low, high)`` of ``values``, in event order.

    ``op`` is ``first``, ``last``, ``first_k`` or ``last_k``; an empty run gives null.
    O(queries · k), vectorized.
    """
    empty = highs == lows
    if op in ("first", "last"):
        picked = np.where(empty, 0, lows if op == "first" else highs - 1)
        return values.take(pa.array(picked, mask=empty))
    assert k is not None
    if op == "first_k":  # the k earliest, earliest first
        starts, ends = lows, np.minimum(highs, lows + k)
    else:  # the k most recent, most recent first
        starts, ends = np.maximum(lows, highs - k), highs
    lengths = ends - starts
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
    flat = (np.repeat(starts, lengths) + within if op == "first_k"
            else np.repeat(ends - 1, lengths) - within)
    return pa.ListArray.from_arrays(list_offsets(offsets, op), values.take(pa.array(flat)),
                                    mask=pa.array(empty))
