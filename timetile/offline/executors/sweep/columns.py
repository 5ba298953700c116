"""The sweep's arithmetic on one table of whole keys: each feature's results, as Arrow.

:class:`SweptColumn` holds one value column of the table (its non-null values, in time order
within each group) with the queries' times, and computes once what several features read:
each query's run of values per window, and the column of states each op finalizes from
(:mod:`timetile.core.aggregators.columnar`): sums, moments, extremes, value ranks, the
values in event order. :func:`feature_result` asks the feature's aggregator for its results
(its ``finalize_many``: the op's rules are its class's, not the sweep's) and builds their
Arrow column. No Spark here: :mod:`.executor` feeds it the tables ``mapInArrow`` hands over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.windows import Window
from timetile.core.aggregators import Aggregator
from timetile.core.aggregators.columnar import (
    Counted,
    Finalized,
    Lists,
    Picks,
    RankedRuns,
    RunExtremes,
    RunMoments,
    Runs,
    RunSums,
    Scalars,
)
from timetile.core.aggregators.extremes import ValueExtreme
from timetile.core.aggregators.ordering import canonical_array
from timetile.core.kernels.moment_tree import MomentTree, moment_tree, window_moments
from timetile.core.kernels.sweep import (
    FloatPrefixSums,
    float_prefix_sums,
    int_prefix_sums,
    run_sums,
    window_extremes,
    window_runs,
)
from timetile.core.types import ValueType
from timetile.offline.executors.features import finalizing, op_aggregator
from timetile.offline.plan import Feature, query_bounds

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
        self._sums: dict[Window | None, RunSums] = {}
        self._extremes: dict[tuple[Window | None, bool], RunExtremes] = {}
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

    def run_sums(self, window: Window | None) -> RunSums:
        """Return the sum state of each query's run in ``window`` (``sum`` and ``avg``).

        Once per window, for both, from one set of prefix sums per column (O(n), on first
        use), then O(q) per window. Integers are exact: in int64, or where int64 could
        overflow in Python integers (an object array); doubles correctly rounded.
        """
        if window not in self._sums:
            values, (lows, highs) = self.values, self.runs(window)
            assert values is not None  # a numeric column
            if values.dtype.kind == "f":
                if self._float_prefix is None:
                    self._float_prefix = float_prefix_sums(values)
                self._sums[window] = run_sums(values, lows, highs, self._float_prefix)
            else:
                if self._int_prefix is None:
                    self._int_prefix = int_prefix_sums(values)
                none = np.zeros(len(lows), dtype=np.int64)
                self._sums[window] = RunSums(highs - lows,
                                             self._int_prefix[highs] - self._int_prefix[lows],
                                             none, none, none)
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

    def extremes(self, window: Window | None, largest: bool) -> RunExtremes:
        """Return the greatest (or least) value of each query's run in ``window``; O(n + q)."""
        if (window, largest) not in self._extremes:
            assert self.values is not None  # a numeric column
            lows, highs = self.runs(window)
            self._extremes[window, largest] = RunExtremes(*window_extremes(
                self.values, self.offsets, self.query_offsets, lows, highs, largest))
        return self._extremes[window, largest]

    def ranked_runs(self, window: Window | None) -> RankedRuns:
        """Return each query's run in ``window`` over the values' ranks (:meth:`value_ranks`)."""
        ranks, by_rank = self.value_ranks()
        return RankedRuns(ranks, len(by_rank), self.offsets, self.query_offsets,
                          *self.runs(window))


def _extremes(column: SweptColumn, window: Window | None,
              aggregator: Aggregator[Any]) -> RunExtremes:
    assert isinstance(aggregator, ValueExtreme)
    return column.extremes(window, aggregator.largest)


_NUMBERS = frozenset({ValueType.INT, ValueType.FLOAT})


@dataclass(frozen=True)
class SweptState:
    """A column of states the sweep computes, per query window (see :data:`SWEPT_STATES`).

    Attributes:
        types: the column types it is computed for.
        compute: how a :class:`SweptColumn` computes it for a window and an aggregator.
        positions: what the positions of finalized picks, lists and maps over it index
            (None: its results are scalars).

    """

    types: frozenset[ValueType]
    compute: Callable[[SweptColumn, Window | None, Aggregator[Any]], Any]
    positions: Callable[[SweptColumn], pa.Array] | None = None


#: The columns of states the sweep computes (an aggregator's ``columnar``), by kind: an op
#: whose aggregator finalizes one of these, over a type listed, is an op the sweep computes.
#: Each reads only the non-null values of its column. Runs are over the values in event
#: order (ties by value), ranked runs over the distinct values by rank.
SWEPT_STATES: Mapping[type, SweptState] = {
    Runs: SweptState(frozenset(ValueType), lambda column, window, _: Runs(*column.runs(window)),
                     SweptColumn.in_event_order),
    RankedRuns: SweptState(frozenset(ValueType),
                           lambda column, window, _: column.ranked_runs(window),
                           lambda column: column.value_ranks()[1]),
    RunSums: SweptState(_NUMBERS, lambda column, window, _: column.run_sums(window)),
    RunMoments: SweptState(_NUMBERS, lambda column, window, _: column.moments(window)),
    RunExtremes: SweptState(_NUMBERS, _extremes),
}


def feature_result(feature: Feature, column: SweptColumn) -> pa.Array:
    """One feature's results, as Arrow: its aggregator's ``finalize_many`` of its states.

    Raises:
        ResultOverflowError: a result the op refuses (an integer sum past int64), naming
            the feature.

    """
    aggregator = op_aggregator(feature)
    assert aggregator.columnar is not None  # the executor sweeps only ops that declare one
    swept = SWEPT_STATES[aggregator.columnar]
    with finalizing(feature):
        finalized = aggregator.finalize_many(swept.compute(column, feature.window, aggregator))
    positions = swept.positions
    return to_arrow(finalized, lambda: positions(column) if positions else pa.array([]),
                    feature.aggregation.op)


def to_arrow(finalized: Finalized, positions_of: Callable[[], pa.Array], label: str) -> pa.Array:
    """Return finalized results as an Arrow column; ``positions_of()`` gives what they index.

    Scalars as they are; picks, lists and maps of positions as the values at those positions
    (read only for those forms). ``label`` names the op in the error of a list too long.
    """
    return _ARROW[type(finalized)](finalized, positions_of, label)


def _scalars(result: Finalized, positions_of: Callable[[], pa.Array], label: str) -> pa.Array:
    del positions_of, label
    assert isinstance(result, Scalars)
    return pa.array(result.values, mask=result.null)


def _picks(result: Finalized, positions_of: Callable[[], pa.Array], label: str) -> pa.Array:
    del label
    assert isinstance(result, Picks)
    return positions_of().take(pa.array(result.positions, mask=result.null))


def _lists(result: Finalized, positions_of: Callable[[], pa.Array], label: str) -> pa.Array:
    assert isinstance(result, Lists)
    return pa.ListArray.from_arrays(list_offsets(result.offsets, label),
                                    positions_of().take(pa.array(result.positions)),
                                    mask=pa.array(result.null))


def _counted(result: Finalized, positions_of: Callable[[], pa.Array], label: str) -> pa.Array:
    assert isinstance(result, Counted)
    return pa.MapArray.from_arrays(list_offsets(result.offsets, label),
                                   positions_of().take(pa.array(result.positions)),
                                   pa.array(result.counts), mask=pa.array(result.null))


#: How each form of finalized results becomes an Arrow column.
_ARROW: Mapping[type, Callable[[Finalized, Callable[[], pa.Array], str], pa.Array]] = {
    Scalars: _scalars, Picks: _picks, Lists: _lists, Counted: _counted,
}


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


