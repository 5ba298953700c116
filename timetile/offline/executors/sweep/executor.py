"""The sorted-sweep executor: the ops of :data:`SWEEP_OPS` without per-group Python.

Events and queries are shuffled once, by key, and sorted by key (Spark's sort is cheap on
one column; the time order within a key is finished in numpy); each partition streams
through ``mapInArrow`` in tables of whole keys, and :mod:`timetile.core.kernels.sweep`
answers every query of every key with vectorized, numba-compiled kernels. It is the fastest
path for these ops, which are the common case. Its limit is skew: one task holds all the
events of its keys, where the tiled executor holds at most one hop of one key. ``auto``
picks it when every aggregation of a part is one of :data:`SWEEP_OPS` over a type it accepts
(``count``, ``first``, ``last``, ``first_k`` and ``last_k`` of any column; ``sum``, ``avg``,
``min``, ``max``, ``variance``, ``stddev``, ``skew`` and ``kurtosis`` of a number;
``unique_count``, ``histogram``, ``top_k`` and ``bottom_k`` of any column), bucketed or
not (:mod:`.buckets`); ``executor="tiled"`` forces the skew-bounded path.

This module is the Spark side; the arithmetic on each table of whole keys is in
:mod:`.columns` (and :mod:`.buckets` for bucketed features). Columns of the queries beyond
keys and time ride through unchanged, so a backfill can send its left rows, duplicates
included, straight through the sweep: no distinct, no join back.
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

from timetile.api.group_by import IDENTIFIER, RESERVED_PREFIX
from timetile.api.windows import Window
from timetile.core.aggregators import OPS
from timetile.core.kernels.sweep import time_order
from timetile.core.types import ValueType
from timetile.offline.executors.features import feature_fields
from timetile.offline.executors.sweep.buckets import BucketedColumn
from timetile.offline.executors.sweep.columns import (
    SWEPT_STATES,
    SweptColumn,
    feature_result,
    group_offsets,
)
from timetile.offline.hot_keys import CHUNK, with_chunks
from timetile.offline.plan import ExecutorOptions, Feature, PartPlan
from timetile.spark.result_types import arrow_schema
from timetile.spark.sorted_groups import group_starts, sorted_by_groups, whole_groups
from timetile.spark.sources import TIME

#: The ops the sweep computes, and the column types each accepts: those whose aggregator
#: finalizes a column of states the sweep computes (:data:`~.columns.SWEPT_STATES`), read
#: from the two declarations, not listed again. Each reads only the non-null values of its
#: column: the sweep leaves events without values behind and takes a row without values for
#: a query, so an op that counted null rows could not join this list.
SWEEP_OPS: dict[str, frozenset[ValueType]] = {
    name: SWEPT_STATES[columnar].types & frozenset(
        kind for kind in ValueType if kind.numeric or not spec.numeric_only)
    for name, spec in OPS.items()
    if (columnar := spec.factory.columnar) is not None and columnar in SWEPT_STATES
}


def sweeps(feature: Feature) -> bool:
    """Whether the sweep computes ``feature``: one of its ops over a type it accepts.

    Bucketed or not: see :mod:`timetile.offline.executors.sweep.buckets`.
    """
    return feature.input_type in SWEEP_OPS.get(feature.aggregation.op, ())


def sweepable(plan: PartPlan) -> bool:
    """Whether the sweep computes every feature of a part (see :func:`sweeps`)."""
    return all(sweeps(feature) for feature in plan.features)


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
        # The windows of the bucketed features over each (column, bucket).
        self.bucket_windows: dict[tuple[str, str], list[Window | None]] = {}
        for feature in plan.features:
            if feature.bucket is not None:
                self.bucket_windows.setdefault((feature.aggregation.column, feature.bucket),
                                               []).append(feature.window)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield the features of the queries of each table of whole keys."""
        for table in whole_groups(batches, self.group_keys):
            yield from self._table(table).to_batches()

    def _table(self, table: pa.Table) -> pa.Table:
        starts = group_starts(table, self.group_keys)  # contiguous: Spark sorted them
        group_of_row = np.repeat(np.arange(len(starts)), np.diff([*starts, table.num_rows]))
        table = table.take(time_order(table.column(TIME).to_numpy(), group_of_row))
        is_query = np.ones(table.num_rows, dtype=bool)  # a query has no value at all
        for name in self.value_columns:
            is_query &= pc.is_null(table.column(name)).to_numpy(zero_copy_only=False)
        queries = table.filter(pa.array(is_query))
        events = table.filter(pa.array(~is_query))
        query_offsets = group_offsets(group_of_row[is_query], len(starts))
        query_times = queries.column(TIME).to_numpy().astype(np.int64)
        event_times = events.column(TIME).to_numpy().astype(np.int64)
        event_groups = group_of_row[~is_query]
        columns: dict[str, SweptColumn] = {}
        by_bucket: dict[tuple[str, str], BucketedColumn] = {}
        arrays: list[Any] = [queries.column(name) for name in self.carried]
        for feature in self.features:
            name, bucket = feature.aggregation.column, feature.bucket
            if bucket is None:
                if name not in columns:
                    columns[name] = SweptColumn(
                        events.column(value_column(name)), event_times, event_groups,
                        len(starts), feature.input_type, query_times=query_times,
                        query_offsets=query_offsets)
                arrays.append(feature_result(feature, columns[name]))
                continue
            if (name, bucket) not in by_bucket:
                by_bucket[name, bucket] = BucketedColumn(
                    events.column(value_column(name)), events.column(bucket_column(bucket)),
                    times=event_times, groups=event_groups, value_type=feature.input_type,
                    windows=self.bucket_windows[name, bucket], query_times=query_times,
                    query_offsets=query_offsets)
            arrays.append(by_bucket[name, bucket].result(feature))
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


def _bucket_columns(plan: PartPlan) -> list[str]:
    """Return the bucket columns of the part's bucketed features, each once."""
    return sorted({feature.bucket for feature in plan.features if feature.bucket is not None})


def value_column(column: str) -> str:
    """Return the internal name of an event value column in the sweep's union of rows."""
    return f"_tt_value_{column}"


def bucket_column(column: str) -> str:
    """Return the internal name of an event bucket column in the sweep's union of rows."""
    return f"_tt_bucket_{column}"


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
        raise ValueError(f"the sweep cannot compute {', '.join(refused)} (an op or a type it "
                         "lacks; see SWEEP_OPS): use the tiled executor for this part")
    keys = plan.keys
    spark = queries.sparkSession
    values = _feature_columns(plan)
    buckets = _bucket_columns(plan)
    # mapInArrow reads a dotted name as a struct's field: such riders travel under plain
    # names, and so do names that could be the sweep's own. The others keep theirs, and no
    # step names them one by one: with the features of a Join's earlier parts riding along,
    # each Python-to-JVM call per column cost planning time that grew with the square of
    # the parts (benchmarks/RESULTS.md, "wide join").
    renamed = {rider: f"_tt_rider_{index}" for index, rider in enumerate(queries.columns)
               if rider not in (*keys, TIME) and (not IDENTIFIER.match(rider)
                                                  or rider.casefold().startswith(RESERVED_PREFIX))}
    carried = [renamed.get(column, column) for column in queries.columns]
    # An event without any value adds to no feature (each op reads its column's non-null
    # values), so it stays behind; then a row without values is a query, and the union
    # needs no column to tell them apart: each side gets the other's columns as nulls.
    events = plan.events.where(_any_present(values)).select(
        *keys, TIME, *[F.col(c).alias(value_column(c)) for c in values],
        *[F.col(c).alias(bucket_column(c)) for c in buckets])
    schema = T.StructType([*queries.schema.fields, *feature_fields(plan.features)])
    rows = events.unionByName(queries.withColumnsRenamed(renamed), allowMissingColumns=True)
    group_keys = list(keys)
    split = options.key_split if options is not None else None
    if split is not None and split.hot:
        is_event = _any_present([value_column(column) for column in values])
        rows = with_chunks(rows, keys, split, is_event)
        group_keys.append(CHUNK)
    return (sorted_by_groups(rows, group_keys)
            .mapInArrow(SweepPass(plan, carried, arrow_schema(schema, spark), group_keys), schema))
