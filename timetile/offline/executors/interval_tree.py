"""The broadcast path: seed 000's interval-tree tiling, for query sets that fit in memory.

The distinct queries are broadcast to every task, sorted by key and time. Events stream
through ``mapInArrow`` in whatever order they come: for each window, the queries an event
counts for form one contiguous run ``[lo, hi)`` of its key's sorted queries (window starts
and ends never decrease with the query time), so the event updates the O(log n) tiles of
that run (:class:`timetile.core.tiling.QueryTiling`). Events that share a run are folded
first, so the work per key is bounded by its queries, not its events. Each task ships its
tilings, shuffled by key and merged; pushing the tiles down to the leaves gives each
query's state. Events are never shuffled, and no task ever holds a key's events.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.core.aggregators import Aggregator
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.tiling import QueryTiling
from timetile.offline.executors.features import feature_values, output_schema, refused
from timetile.offline.executors.tiled_layout import TiledLayout
from timetile.offline.plan import ExecutorOptions, PartPlan, query_bounds
from timetile.spark.result_types import arrow_schema, arrow_value
from timetile.spark.sorted_groups import Rows, group_bounds, map_groups, sorted_by_groups
from timetile.spark.sources import TIME

KEY_ID = "_tt_key_id"
SLOT = "_tt_slot"  # aggregator index × windows + window index; -1 marks a key's anchor row
TILING = "_tt_tiling"


class QueryIndex:
    """The broadcast queries: per dense key id, its sorted query times and window bounds."""

    def __init__(self, key_ids: np.ndarray, times: np.ndarray, layout: TiledLayout) -> None:
        order = np.lexsort((times, key_ids))
        self.key_ids = key_ids[order]
        self.times = times[order]
        self.offsets = np.searchsorted(self.key_ids, np.arange(int(key_ids.max(initial=-1)) + 2))
        self.bounds = [query_bounds(window, self.times) for window in layout.windows]

    def span(self, key_id: int) -> tuple[int, int]:
        """Return the rows of one key's queries."""
        return int(self.offsets[key_id]), int(self.offsets[key_id + 1])


class EventTiling:
    """Per partition of events: one tiling per (key, aggregator, window), shipped as bytes."""

    def __init__(self, layout: TiledLayout, index: Any, schema: pa.Schema) -> None:
        self.layout = layout
        self.index = index  # a Spark broadcast of QueryIndex
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Fold every event batch into tilings; yield them when the partition ends."""
        index: QueryIndex = self.index.value
        aggregators = self.layout.aggregators()
        tilings: dict[tuple[int, int], QueryTiling[Any]] = {}
        for batch in batches:
            table = pa.Table.from_batches([batch]).sort_by(
                [(KEY_ID, "ascending"), (TIME, "ascending")])
            key_ids = table.column(KEY_ID).to_numpy()
            for begin, end in group_bounds(table, [KEY_ID]):
                key_id = int(key_ids[begin])
                self._key(key_id, table.slice(begin, end - begin), index, aggregators, tilings)
        rows: dict[str, list[Any]] = {KEY_ID: [], SLOT: [], TILING: []}
        for (key_id, slot), tiling in tilings.items():
            rows[KEY_ID].append(key_id)
            rows[SLOT].append(slot)
            rows[TILING].append(tiling.to_bytes())
        yield from pa.Table.from_pydict(rows, schema=self.schema).to_batches()

    def _key(self, key_id: int, events: pa.Table, index: QueryIndex,
             aggregators: list[Aggregator[Any]],
             tilings: dict[tuple[int, int], QueryTiling[Any]]) -> None:
        first, last = index.span(key_id)
        count = last - first
        times = events.column(TIME).to_numpy().astype(np.int64)
        windows = len(self.layout.windows)
        for a, (aggregator, feature) in enumerate(
                zip(aggregators, self.layout.aggregations, strict=True)):
            values, value_times = feature_values(events, feature, times)
            if len(values) == 0:
                continue
            for w in range(windows):
                starts, ends = (b[first:last] for b in index.bounds[w])
                lows = np.searchsorted(ends, value_times, side="right")
                highs = np.searchsorted(starts, value_times, side="right")
                runs = lows * (count + 1) + highs
                order = np.argsort(runs, kind="stable")
                runs_sorted = runs[order]
                cuts = np.flatnonzero(np.diff(runs_sorted)) + 1
                tiling = tilings.get((key_id, a * windows + w))
                if tiling is None:
                    tiling = QueryTiling(aggregator, count)
                    tilings[(key_id, a * windows + w)] = tiling
                for chunk in np.split(order, cuts):
                    low, high = int(lows[chunk[0]]), int(highs[chunk[0]])
                    if low < high:
                        tiling.add(low, high, aggregator.fold(values[chunk], value_times[chunk]))


class TilingMerge:
    """Per key: merge the tasks' tilings, push them to the leaves, finalize every query."""

    def __init__(self, layout: TiledLayout, index: Any, key_values: Any,
                 schema: pa.Schema) -> None:
        self.layout = layout
        self.index = index
        self.key_values = key_values  # broadcast: list of key tuples by key id
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield the finished rows of every key of the partition."""
        index: QueryIndex = self.index.value
        key_values: list[tuple[Any, ...]] = self.key_values.value
        aggregators = self.layout.aggregators()
        return map_groups(batches, [KEY_ID], self.schema,
                          lambda group, rows: self._key(group, index, key_values,
                                                        aggregators, rows))

    def _key(self, group: pa.Table, index: QueryIndex, key_values: list[tuple[Any, ...]],
             aggregators: list[Aggregator[Any]], rows: Rows) -> None:
        windows = len(self.layout.windows)
        key_id = int(group.column(KEY_ID)[0].as_py())
        first, last = index.span(key_id)
        merged: dict[int, QueryTiling[Any]] = {}
        for slot, data in zip(group.column(SLOT).to_pylist(), group.column(TILING).to_pylist(),
                              strict=True):
            if slot < 0:  # the key's anchor row
                continue
            tiling = QueryTiling.from_bytes(aggregators[slot // windows], last - first, data)
            merged[slot] = tiling if slot not in merged else merged[slot].merge(tiling)
        leaves = {slot: tiling.results() for slot, tiling in merged.items()}
        for position in range(last - first):
            for name, value in zip(self.layout.keys, key_values[key_id], strict=True):
                rows[name].append(value)
            at = int(index.times[first + position])
            rows[TIME].append(at)
            try:
                for f, feature in enumerate(self.layout.features):
                    a = self.layout.feature_aggregator[f]
                    slot = a * windows + self.layout.feature_window[f]
                    aggregator = aggregators[a]
                    state = leaves[slot][position] if slot in leaves else aggregator.init()
                    rows[feature.name].append(arrow_value(aggregator.finalize_at(state, at)))
            except ResultOverflowError as error:
                raise refused(feature, error) from None


_NAN_KEY = ("timetile", "NaN")  # stands for a NaN key part: NaN != NaN would defeat lookups


def _hashable(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Return the key with NaN parts replaced, so that they compare equal as Spark groups them."""
    return tuple(_NAN_KEY if isinstance(v, float) and math.isnan(v) else v for v in key)


def interval_tree_features(plan: PartPlan, queries: DataFrame,
                           options: ExecutorOptions | None = None) -> DataFrame:
    """Every feature of ``plan`` at every query, by broadcasting the queries.

    Collects the distinct (keys, time) queries to the driver: use it only for query sets
    that fit in memory (``executor="auto"`` does so up to
    :data:`~timetile.offline.options.BROADCAST_QUERY_LIMIT`).
    """
    del options  # nothing to configure
    layout = TiledLayout.of(plan)
    keys = list(layout.keys)
    spark = queries.sparkSession
    local = queries.toArrow()
    key_table = local.select(keys).group_by(keys).aggregate([])
    key_values = [tuple(row[k] for k in keys) for row in key_table.to_pylist()]
    ids = {_hashable(value): position for position, value in enumerate(key_values)}
    query_ids = np.array([ids[_hashable(row)] for row in zip(
        *(local.column(k).to_pylist() for k in keys), strict=True)], dtype=np.int64)
    index = QueryIndex(query_ids, local.column(TIME).to_numpy().astype(np.int64), layout)
    broadcast_index = spark.sparkContext.broadcast(index)
    broadcast_keys = spark.sparkContext.broadcast(key_values)

    id_schema = T.StructType([*(queries.schema[k] for k in keys),
                              T.StructField(KEY_ID, T.LongType())])
    id_frame = spark.createDataFrame(
        [(*value, position) for position, value in enumerate(key_values)], id_schema)
    events = plan.events.join(F.broadcast(id_frame), on=keys, how="inner").drop(*keys)
    tiling_schema = T.StructType([T.StructField(KEY_ID, T.LongType()),
                                  T.StructField(SLOT, T.IntegerType()),
                                  T.StructField(TILING, T.BinaryType())])
    tilings = events.mapInArrow(
        EventTiling(layout, broadcast_index, arrow_schema(tiling_schema, spark)), tiling_schema)
    anchors = id_frame.select(KEY_ID, F.lit(-1).alias(SLOT),
                              F.lit(None).cast("binary").alias(TILING))
    schema = output_schema(plan, queries)
    return (sorted_by_groups(tilings.unionByName(anchors), [KEY_ID], SLOT)
            .mapInArrow(TilingMerge(layout, broadcast_index, broadcast_keys,
                                    arrow_schema(schema, spark)), schema))


