"""The entity executor: features of mutable tables, per (key, day), on the Spark executors.

A query at as-of time ``a`` on day ``d`` sees the snapshot of day ``d − 1`` plus the
mutations of day ``d`` before ``a`` (DESIGN §2). The snapshot rows of ``d − 1`` (tagged
``d``), the mutations of ``d`` and the queries of ``d`` are shuffled together by
(key, day), sorted by key, and streamed through ``mapInArrow``; each (key, day) group is
replayed by :class:`timetile.core.entity_state.EntityReplay`. Only the days that hold a
query are read. Under SNAPSHOT accuracy queries sit at the start of their day, so no
mutation applies and none is read.

Cost: O(rows + mutations + queries · windowed features · rows) per (key, day); a lifetime
feature under an invertible op costs O(1) per mutation. A task holds one key's rows for one
day. Retractions of rows that are not there are counted and reported
(:data:`UNMATCHED_GAUGE`), never silently applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.windows import window_spec
from timetile.core.entity_state import EntityFeature, EntityReplay
from timetile.offline.executors.features import build_aggregator, feature_fields
from timetile.offline.plan import EntityPartPlan, ExecutorOptions
from timetile.spark.entities import DAY, IS_BEFORE, MUTATION_TIME
from timetile.spark.result_types import arrow_column, arrow_schema
from timetile.spark.sorted_groups import group_bounds, sorted_by_groups, whole_groups
from timetile.spark.sources import TIME, epoch_day

KIND = "_tt_kind"
AT = "_tt_at"  # a query's as-of time; a mutation's time
# Within a (key, day) group rows sort by (AT, KIND): a query at the moment of a mutation
# comes first, since the mutation does not count for it (mutation_ts < a).
SNAPSHOT_ROW, QUERY, AFTER, BEFORE = 0, 1, 2, 3
#: The report line that counts retractions of rows that were not there.
UNMATCHED_GAUGE = "mutations retracting a row that is not there (ignored)"


def entity_output_fields(plan: EntityPartPlan) -> list[T.StructField]:
    """Return an entity part's output fields: its features, or its lookup's columns."""
    if not plan.lookup:
        return feature_fields(plan.features)
    snapshot = plan.tables.snapshots.schema
    return [T.StructField(name, snapshot[column].dataType, nullable=True)
            for name, column in zip(plan.part.output_columns(), plan.lookup, strict=True)]


class EntityPass:
    """Per partition: replay each (key, day) group that holds a query. Picklable."""

    def __init__(self, plan: EntityPartPlan, schema: pa.Schema,
                 unmatched: Accumulator[int] | None) -> None:
        self.keys = plan.keys
        self.row_columns = plan.tables.row_columns
        self.features = plan.features
        self.lookup = [plan.tables.row_columns.index(c) for c in plan.lookup]
        self.order = list(self.lookup)
        self.missing_days = plan.missing_days
        self.schema = schema
        self.unmatched = unmatched

    def _replay(self) -> EntityReplay:
        features = []
        for feature in self.features:
            aggregator = build_aggregator(feature)
            features.append(EntityFeature(
                self.row_columns.index(feature.aggregation.column), aggregator,
                feature.input_type.numpy_dtype, window_spec(feature.window),
                name=feature.name, source_column=feature.aggregation.column,
                bucket=(None if feature.bucket is None
                        else self.row_columns.index(feature.bucket))))
        return EntityReplay(features, self.lookup, self.order)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield the features of every query, one table per run of whole groups."""
        unmatched = 0
        for table in whole_groups(batches, [*self.keys, DAY]):
            answers: list[list[Any]] = []
            asked: list[pa.Table] = []
            for begin, end in group_bounds(table, [*self.keys, DAY]):
                group = table.slice(begin, end - begin)
                queries, rows = self._group(group, answers)
                asked.append(queries)
                unmatched += rows
            if answers:
                yield from self._output(pa.concat_tables(asked), answers).to_batches()
        if self.unmatched is not None and unmatched:
            self.unmatched.add(unmatched)

    def _group(self, group: pa.Table, answers: list[list[Any]]) -> tuple[pa.Table, int]:
        """Answer one (key, day) group's queries into ``answers``.

        Returns the group's queries and its number of unmatched retractions.
        """
        group = group.take(pc.sort_indices(group, sort_keys=[(AT, "ascending"),
                                                             (KIND, "ascending")]))
        kinds = group.column(KIND).to_numpy()
        queries = group.filter(pa.array(kinds == QUERY))
        if queries.num_rows == 0:
            return queries, 0
        day = int(group.column(DAY)[0].as_py())
        if day in self.missing_days:
            width = len(self.features) + len(self.lookup)
            answers.extend([None] * width for _ in range(queries.num_rows))
            return queries, 0
        images = list(zip(*(group.column(c).to_pylist() for c in self.row_columns),
                          strict=True)) if self.row_columns else [()] * group.num_rows
        times = group.column(TIME).to_pylist()
        ats = group.column(AT).to_pylist()
        replay = self._replay()
        replay.insert([(images[i], times[i]) for i in np.flatnonzero(kinds == SNAPSHOT_ROW)])
        index, rows = 0, group.num_rows
        while index < rows:
            kind = int(kinds[index])
            if kind == QUERY:
                answers.append(replay.answer(ats[index]))
                index += 1
                continue
            if kind == SNAPSHOT_ROW:
                index += 1
                continue
            moment, end = ats[index], index
            while end < rows and kinds[end] in (AFTER, BEFORE) and ats[end] == moment:
                end += 1
            batch = range(index, end)
            replay.apply([(images[i], times[i]) for i in batch if kinds[i] == AFTER],
                         [(images[i], times[i]) for i in batch if kinds[i] == BEFORE])
            index = end
        return queries, replay.unmatched

    def _output(self, queries: pa.Table, answers: list[list[Any]]) -> pa.Table:
        arrays: list[Any] = [queries.column(name) for name in self.keys]
        arrays.append(queries.column(AT))
        for index, feature in enumerate(self.features):
            arrays.append(arrow_column(build_aggregator(feature),
                                       [answer[index] for answer in answers]))
        offset = len(self.features)
        for index in range(len(self.lookup)):
            field = self.schema.field(len(self.keys) + 1 + offset + index)
            arrays.append(pa.array([answer[offset + index] for answer in answers],
                                   type=field.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)


def entity_features(plan: EntityPartPlan, queries: DataFrame,
                    options: ExecutorOptions | None = None) -> DataFrame:
    """Every feature of an entity part at every distinct (keys, as-of time) query.

    ``queries`` holds the part's key columns and :data:`TIME`, the as-of time (already the
    start of the day under SNAPSHOT accuracy). The output has them, then the features.
    """
    tables, keys = plan.tables, plan.keys
    group_keys = tuple(plan.part.group_by.keys)
    spark = queries.sparkSession
    snapshot_schema = tables.snapshots.schema
    nulls = [F.lit(None).cast(snapshot_schema[c].dataType).alias(c) for c in tables.row_columns]
    asked = queries.select(
        *keys, epoch_day(F.col(TIME)).alias(DAY), F.lit(QUERY).cast("byte").alias(KIND),
        F.col(TIME).alias(AT), F.lit(None).cast("long").alias(TIME), *nulls)
    days = sorted(plan.query_days or (row[0] for row in asked.select(DAY).distinct().collect()))
    usable = F.lit(True)
    for key in group_keys:
        usable &= F.col(key).isNotNull()
    key_columns = [F.col(key).alias(internal) for key, internal in zip(group_keys, keys,
                                                                        strict=True)]
    snapshots = (tables.snapshots.where(usable & F.col(DAY).isin([d - 1 for d in days]))
                 .select(*key_columns, (F.col(DAY) + 1).alias(DAY),
                         F.lit(SNAPSHOT_ROW).cast("byte").alias(KIND),
                         F.lit(0).cast("long").alias(AT), TIME, *tables.row_columns))
    union = snapshots.unionByName(asked)
    if tables.mutations is not None and not plan.snapshot_only:
        day = epoch_day(F.col(MUTATION_TIME))
        mutations = (tables.mutations
                     .where(usable & F.col(MUTATION_TIME).isNotNull()
                            & F.col(IS_BEFORE).isNotNull() & day.isin(days))
                     .select(*key_columns, day.alias(DAY),
                             F.when(F.col(IS_BEFORE), BEFORE).otherwise(AFTER).cast("byte")
                             .alias(KIND), F.col(MUTATION_TIME).alias(AT), TIME,
                             *tables.row_columns))
        union = union.unionByName(mutations)
    schema = T.StructType([*(queries.schema[name] for name in (*keys, TIME)),
                           *entity_output_fields(plan)])
    unmatched = None
    if options is not None:
        unmatched = spark.sparkContext.accumulator(0)
        label = f"{plan.part.group_by.name} ({tables.source.label})"
        options.gauges[f"{label}: {UNMATCHED_GAUGE}"] = lambda: (
            f"{unmatched.value:,}" if unmatched is not None and unmatched.value else None)
    return (sorted_by_groups(union, [*keys, DAY])
            .mapInArrow(EntityPass(plan, arrow_schema(schema, spark), unmatched), schema))
