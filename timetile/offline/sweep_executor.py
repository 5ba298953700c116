"""The sorted-sweep executor: the ops of :data:`SWEEP_OPS` without per-group Python.

Events and queries are shuffled once, by key, and sorted by key (Spark's sort is cheap on
one column; the time order within a key is finished in Arrow); each partition streams
through ``mapInArrow`` in tables of whole keys, and :mod:`timetile.core.kernels.sweep`
answers every query of every key with vectorized, numba-compiled kernels. It is the fastest
path for these ops, which are the common case. Its limit is skew: one task holds all the
events of its keys, where the tiled executor holds at most one hop of one key. ``auto``
picks it when every aggregation of a part is one of :data:`SWEEP_OPS` over a type it accepts
(``count``, ``first``, ``last``, ``first_k`` and ``last_k`` of any column; ``sum``, ``avg``,
``min``, ``max``, ``variance``, ``stddev``, ``skew`` and ``kurtosis`` of a number;
``unique_count``, ``histogram``, ``top_k`` and ``bottom_k`` of any column);
``executor="tiled"`` forces the skew-bounded path.

Columns of the queries beyond keys and time ride through unchanged, so a backfill can send
its left rows, duplicates included, straight through the sweep: no distinct, no join back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

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
from timetile.offline.hot_keys import CHUNK, with_chunks
from timetile.offline.plan import ExecutorOptions, Feature, PartPlan, query_bounds
from timetile.offline.reference_executor import feature_fields
from timetile.offline.result_types import arrow_schema
from timetile.spark.sorted_groups import group_starts, sorted_by_groups, whole_groups
from timetile.spark.sources import TIME

#: The ops that read values by event order: equal times are ordered by value.
_EVENT_ORDER_OPS = ("first", "last", "first_k", "last_k")
#: The ops that read each run as a multiset of value ranks (:meth:`_Column.value_ranks`).
_VALUE_RANK_OPS = ("unique_count", "histogram", "top_k", "bottom_k")
_NUMBERS = frozenset({ValueType.INT, ValueType.FLOAT})
#: The ops the sweep computes, and the column types each accepts. Each reads only the non-null
#: values of its column: the sweep leaves events without values behind and takes a row
#: without values for a query, so an op that counted null rows could not join this list.
SWEEP_OPS: dict[str, frozenset[ValueType]] = {
    **dict.fromkeys(("sum", "avg", "min", "max", "variance", "stddev", "skew", "kurtosis"),
                    _NUMBERS),
    **dict.fromkeys(("count", *_EVENT_ORDER_OPS, *_VALUE_RANK_OPS), frozenset(ValueType)),
}
#: The most entries one Arrow list or map array holds: its offsets are int32.
_ARROW_LIST_LIMIT = 2**31 - 1


def sweeps(feature: Feature) -> bool:
    """Whether the sweep computes ``feature``: one of its ops, over a type that op accepts.

    Bucketed features never are: the sweep's kernels keep one running value per window.
    """
    return (feature.bucket is None
            and feature.input_type in SWEEP_OPS.get(feature.aggregation.op, ()))


def sweepable(plan: PartPlan) -> bool:
    """Whether the sweep computes every feature of a part (see :func:`sweeps`)."""
    return all(sweeps(feature) for feature in plan.features)


def _offsets(group_of_row: np.ndarray, groups: int) -> np.ndarray:
    counts = np.bincount(group_of_row, minlength=groups)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


class _Column:
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
        self.offsets = _offsets(self.groups, groups)
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
                encoded = pc.dictionary_encode(self.kept)
                order = pc.array_sort_indices(encoded.dictionary).to_numpy()
                rank_of_entry = np.empty(len(order), dtype=np.int64)
                rank_of_entry[order] = np.arange(len(order))
                indices = encoded.indices.to_numpy(zero_copy_only=False)
                self._value_ranks = (rank_of_entry[indices],
                                     encoded.dictionary.take(pa.array(order)))
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


def _result(feature: Feature, column: _Column) -> pa.Array:
    """One feature's results, as Arrow, from its column's runs in its window."""
    op = feature.aggregation.op
    lows, highs = column.runs(feature.window)
    counts = highs - lows
    if op == "count":
        return pa.array(counts, type=pa.int64())
    if op in _VALUE_RANK_OPS:
        return _by_value_rank(op, feature.aggregation.k, column, lows, highs)
    if op in _EVENT_ORDER_OPS:
        return _ends_of_runs(op, feature.aggregation.k, column.in_event_order(), lows, highs)
    if op in MOMENT_OPS:
        results, null = moment_results(op, column.moments(feature.window))
        return pa.array(results, mask=null, type=pa.float64())
    if op in ("min", "max"):
        assert column.values is not None
        extremes, empty = window_extremes(column.values, column.offsets, column.query_offsets,
                                          lows, highs, op == "max")
        return pa.array(canonical_array(extremes), mask=empty)
    return _summed(op, feature.input_type, column.sums(feature.window), counts)


def _summed(op: str, value_type: ValueType, sums: np.ndarray, counts: np.ndarray) -> pa.Array:
    """``sum`` or ``avg`` of each query's run, from its sum and its count; null if empty."""
    empty = counts == 0
    if op == "sum":
        return pa.array(sums, mask=empty, type=pa.float64() if value_type is ValueType.FLOAT
                        else pa.int64())
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums.astype(np.float64) / np.where(empty, 1, counts)
    return pa.array(canonical_array(means), mask=empty, type=pa.float64())


def _by_value_rank(op: str, k: int | None, column: _Column, lows: np.ndarray,
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
        return pa.MapArray.from_arrays(_list_offsets(offsets, op), by_rank.take(held),
                                       pa.array(multiplicities), mask=empty)
    assert k is not None
    offsets, chosen = window_top_k(*runs, k, op == "top_k")
    return pa.ListArray.from_arrays(_list_offsets(offsets, op), by_rank.take(chosen),
                                    mask=empty)


def _list_offsets(offsets: np.ndarray, op: str) -> pa.Array:
    """Return ``offsets`` as the int32 offsets of an Arrow list or map array.

    Raises:
        ValueError: past what int32 offsets address (:data:`_ARROW_LIST_LIMIT` entries).

    """
    if offsets[-1] > _ARROW_LIST_LIMIT:
        raise ValueError(
            f"{op}: the windows of one table of keys hold {offsets[-1]:,} entries in all, more "
            f"than an Arrow list holds ({_ARROW_LIST_LIMIT:,}); ask for a smaller k or a "
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
    return pa.ListArray.from_arrays(_list_offsets(offsets, op), values.take(pa.array(flat)),
                                    mask=pa.array(empty))


class SweepPass:
    """Per partition, sorted by key: every feature of every query, vectorized.

    A group is one key, or one chunk of time of a hot key (``group_keys`` then ends with
    :data:`~timetile.offline.hot_keys.CHUNK`).
    """

    def __init__(self, plan: PartPlan, carried: list[str], schema: pa.Schema,
                 group_keys: list[str]) -> None:
        self.group_keys = group_keys  # the part's keys, and the chunk of a split hot key
        self.features: tuple[Feature, ...] = plan.features
        self.carried = carried
        self.schema = schema
        self.value_columns = [value_column(name) for name in _feature_columns(plan)]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield the features of the queries of each table of whole keys."""
        for table in whole_groups(batches, self.group_keys):
            yield from self._table(table).to_batches()

    def _table(self, table: pa.Table) -> pa.Table:
        order = [(name, "ascending") for name in (*self.group_keys, TIME)]
        table = table.take(pc.sort_indices(table, sort_keys=order))
        starts = group_starts(table, self.group_keys)
        group_of_row = np.repeat(np.arange(len(starts)), np.diff([*starts, table.num_rows]))
        is_query = np.ones(table.num_rows, dtype=bool)  # a query has no value at all
        for name in self.value_columns:
            is_query &= pc.is_null(table.column(name)).to_numpy(zero_copy_only=False)
        queries = table.filter(pa.array(is_query))
        events = table.filter(pa.array(~is_query))
        query_offsets = _offsets(group_of_row[is_query], len(starts))
        query_times = queries.column(TIME).to_numpy().astype(np.int64)
        event_times = events.column(TIME).to_numpy().astype(np.int64)
        event_groups = group_of_row[~is_query]
        columns: dict[str, _Column] = {}
        arrays: list[Any] = [queries.column(name) for name in self.carried]
        for feature in self.features:
            name = feature.aggregation.column
            if name not in columns:
                columns[name] = _Column(events.column(value_column(name)), event_times,
                                        event_groups, len(starts), feature.input_type,
                                        query_times=query_times, query_offsets=query_offsets)
            arrays.append(_result(feature, columns[name]))
        return pa.Table.from_arrays([array if array.type == field.type else array.cast(field.type)
                                     for array, field in zip(arrays, self.schema, strict=True)],
                                    schema=self.schema)


def _feature_columns(plan: PartPlan) -> list[str]:
    """Return the event columns the features read, each once: the values the sweep sends."""
    return sorted({feature.aggregation.column for feature in plan.features})


def _any_present(columns: list[str]) -> Column:
    """Return a column true where any of ``columns`` is not null."""
    present = F.lit(False)
    for column in columns:
        present |= F.col(column).isNotNull()
    return present


def value_column(column: str) -> str:
    """Return the internal name of an event value column in the sweep's union of rows."""
    return f"_tt_value_{column}"


def sweep_features(plan: PartPlan, queries: DataFrame,
                   options: ExecutorOptions | None = None) -> DataFrame:
    """Every feature of ``plan`` at every query, by one sorted sweep per key.

    ``queries`` holds the part's key columns and :data:`TIME`, with no null time; any other
    columns ride through unchanged. The output has the columns of ``queries``, then one
    per feature, and one row per query row (duplicates stay duplicates).

    With ``options.key_split``, each hot key is swept in chunks of time, each in its own
    group (see :mod:`timetile.offline.hot_keys`); the results are the same.

    Raises:
        ValueError: if a feature is not one the sweep computes (see :func:`sweepable`).

    """
    if not sweepable(plan):
        refused = sorted({f"{feature.aggregation.op} of {feature.input_type.value}"
                          for feature in plan.features if not sweeps(feature)})
        raise ValueError(f"the sweep cannot compute {', '.join(refused)} (bucketed, or an op "
                         "or type it lacks; see SWEEP_OPS): use the tiled executor for this "
                         "part")
    keys = plan.keys
    spark = queries.sparkSession
    events_schema = plan.events.schema
    values = _feature_columns(plan)
    carried = queries.columns
    riders = [c for c in carried if c not in (*keys, TIME)]
    # An event without any value adds to no feature (each op reads its column's non-null
    # values), so it stays behind; then a row without values is a query, and the union
    # needs no column to tell them apart.
    events = plan.events.where(_any_present(values)).select(
        *keys, TIME, *[F.col(c).alias(value_column(c)) for c in values],
        *[F.lit(None).cast(queries.schema[c].dataType).alias(c) for c in riders])
    asked = queries.select(
        *keys, TIME,
        *[F.lit(None).cast(events_schema[c].dataType).alias(value_column(c)) for c in values],
        *riders)
    schema = T.StructType([*queries.schema.fields, *feature_fields(plan.features)])
    rows = events.unionByName(asked)
    group_keys = list(keys)
    split = options.key_split if options is not None else None
    if split is not None and split.hot:
        is_event = _any_present([value_column(column) for column in values])
        rows = with_chunks(rows, keys, split, is_event)
        group_keys.append(CHUNK)
    return (sorted_by_groups(rows, group_keys)
            .mapInArrow(SweepPass(plan, carried, arrow_schema(schema, spark), group_keys), schema))
