"""The reference executor: every key's queries and events in one group, windows by brute force.

Events and queries are cogrouped by key; inside each group the core's aggregators fold each
query's window from scratch (:func:`timetile.core.reference.aggregate_windows`). It runs the
same aggregator code as every other path, in the executors, with no data on the driver. Its
cost is O(q · w) per key and it holds a whole key in one task, so hot keys hurt: the tiled
engine (DESIGN §4) is the fast path, this is the simple one it is checked against.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.core.reference import aggregate_windows
from timetile.offline.executors.features import (
    build_aggregator,
    feature_values,
    finalizing,
    output_schema,
)
from timetile.offline.plan import ExecutorOptions, PartPlan, query_bounds
from timetile.spark.result_types import arrow_column, arrow_schema
from timetile.spark.sources import TIME


class KeyGroupEvaluator:
    """Computes every feature of one part for one key's queries. Picklable."""

    def __init__(self, plan: PartPlan, output_schema: pa.Schema) -> None:
        self.keys = plan.keys
        self.features = plan.features
        self.output_schema = output_schema

    def __call__(self, queries: pa.Table, events: pa.Table) -> pa.Table:
        """Features for the queries of one key group (empty when it has no queries)."""
        if queries.num_rows == 0:
            return self.output_schema.empty_table()
        query_times = queries.column(TIME).to_numpy()
        order = pc.sort_indices(events, sort_keys=[(TIME, "ascending")])
        events = events.take(order)
        event_times = events.column(TIME).to_numpy().astype(np.int64)
        columns: dict[tuple[str, str | None], tuple[np.ndarray, np.ndarray]] = {}
        bounds: dict[object, tuple[np.ndarray, np.ndarray]] = {}
        arrays = [queries.column(name) for name in (*self.keys, TIME)]
        for feature in self.features:
            column = (feature.aggregation.column, feature.bucket)
            if column not in columns:
                columns[column] = feature_values(events, feature, event_times)
            if feature.window not in bounds:
                bounds[feature.window] = query_bounds(feature.window, query_times)
            aggregator = build_aggregator(feature)
            values, times = columns[column]
            starts, ends = bounds[feature.window]
            with finalizing(feature):
                results = aggregate_windows(aggregator, times, values, starts, ends,
                                            at=query_times)
            arrays.append(arrow_column(aggregator, results))
        return pa.Table.from_arrays(arrays, schema=self.output_schema)


def reference_features(plan: PartPlan, queries: DataFrame,
                       options: ExecutorOptions | None = None) -> DataFrame:
    """Every feature of ``plan`` at every query, one row per distinct (keys, time) query."""
    del options  # nothing to configure
    widened = _widened_keys(queries, plan.events, plan.keys)
    queries_typed = queries.withColumns({key: F.col(key).cast(kind)
                                         for key, kind in widened.items()})
    events = plan.events.withColumns({key: F.col(key).cast(kind)
                                      for key, kind in widened.items()})
    schema = output_schema(plan, queries_typed)
    evaluator = KeyGroupEvaluator(plan, arrow_schema(schema, queries.sparkSession,
                                                    cogrouped=True))

    def evaluate(key_queries: pa.Table, key_events: pa.Table) -> pa.Table:
        # A plain function: PySpark reads the arity and would count a callable's ``self``.
        return evaluator(key_queries, key_events)

    grouped = (_signed_zeros_as_one(queries_typed, plan.keys).groupBy(*plan.keys)
               .cogroup(_signed_zeros_as_one(events, plan.keys).groupBy(*plan.keys)))
    return grouped.applyInArrow(evaluate, schema).withColumns(
        {key: F.col(key).cast(queries.schema[key].dataType) for key in widened})


def _widened_keys(queries: DataFrame, events: DataFrame,
                  keys: Sequence[str]) -> dict[str, T.DataType]:
    """Return the numeric keys whose two sides differ in type, each with the type both take.

    A cogroup hashes raw values, so a float key would never meet its double (nor an int its
    bigint), which Spark's joins compare widened: both sides take ``double`` (``bigint``).
    """
    widened: dict[str, T.DataType] = {}
    for key in keys:
        mine, theirs = queries.schema[key].dataType, events.schema[key].dataType
        if mine == theirs:
            continue
        if all(isinstance(kind, T.IntegralType) for kind in (mine, theirs)):
            widened[key] = T.LongType()
        elif all(isinstance(kind, (T.IntegralType, T.FloatType, T.DoubleType))
                 for kind in (mine, theirs)):
            widened[key] = T.DoubleType()
    return widened


def _signed_zeros_as_one(frame: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Return ``frame`` with ``-0.0`` as ``0.0`` in its float keys.

    Spark's joins and aggregates treat them as one key, but a cogroup hashes and groups the
    raw values, so without this a key's ``-0.0`` rows and ``0.0`` rows would part.
    """
    floats = {key: frame.schema[key].dataType for key in keys
              if isinstance(frame.schema[key].dataType, (T.FloatType, T.DoubleType))}
    return frame.withColumns({key: F.when(F.col(key) == 0, F.lit(0.0).cast(kind))
                              .otherwise(F.col(key)) for key, kind in floats.items()})
