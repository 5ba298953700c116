"""What a backfill computes, resolved against Spark: the input frames and the feature list.

Planning reads schemas but runs no Spark job. Definitions are checked against the real
schemas here, so a bad definition fails before any work starts (DESIGN §2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.aggregation import Aggregation
from timetile.api.errors import DefinitionError
from timetile.api.group_by import Accuracy, GroupBy
from timetile.api.join import Join, JoinPart
from timetile.api.schema import VALUE_TYPES, check_join
from timetile.api.sources import EntitySource, EventSource, describe_table
from timetile.api.windows import Window, window_spec
from timetile.core.timeutil import DAY_MS
from timetile.core.types import ValueType
from timetile.core.windows import as_of, window_bounds
from timetile.spark.entities import (
    DAY,
    IS_BEFORE,
    MUTATION_TIME,
    EntityTables,
    day_end_ms,
    load_entity,
)
from timetile.spark.sources import TIME, coarse_schema, load_events
from timetile.spark.time_columns import COLUMNS

if TYPE_CHECKING:
    from timetile.offline.hot_keys import KeySplit


def key_column(index: int) -> str:
    """Return the internal name of a part's ``index``-th key, the same on queries and events."""
    return f"_tt_key_{index}"


@dataclass(frozen=True)
class ExecutorOptions:
    """What a backfill tells its executors beyond the plan.

    Attributes:
        partials_path: where the tiled executor stores and reuses hop partials, or None.
        notes: lines the executor adds to the job report.
        gauges: figures the executor reports once Spark has run (see ``JobReport.gauges``).
        key_split: the part's hot keys, which the sweep cuts into chunks of time (see
            :mod:`timetile.offline.hot_keys`); None splits no key.
        landed_before: the time before which every event has landed (a backfill's end): the
            tiled executor stores the partials of the days that end by it, and only computes
            the others. None: the start of the latest event's day, which may still be landing.
        cached: the DataFrames an executor persisted for this job (the tiled pass's first
            stage), which ``BackfillJob.release`` unpersists once the output is written.
        asked_rows: how many left rows the backfill returns, as its plan counted them (an
            upper bound on any part's queries); None when not counted.

    """

    partials_path: str | None = None
    notes: list[str] = field(default_factory=list)
    gauges: dict[str, Callable[[], str | None]] = field(default_factory=dict)
    key_split: KeySplit | None = None
    landed_before: int | None = None
    cached: list[DataFrame] = field(default_factory=list)
    asked_rows: int | None = None


def query_bounds(window: Window | None, query_times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``[start, end)`` of a window (None: lifetime) for each query time."""
    return window_bounds(query_times, *window_spec(window))


@dataclass(frozen=True)
class Feature:
    """One output column: an aggregation over one window (None for lifetime).

    ``bucket`` is the string column a bucketed aggregation breaks its result down by (a map
    from bucket value to result), None for a plain feature.
    """

    name: str
    aggregation: Aggregation
    window: Window | None
    input_type: ValueType
    bucket: str | None = None

    @property
    def aggregator_key(self) -> tuple[Any, ...]:
        """What identifies its aggregator: features that share it share states."""
        aggregation = self.aggregation
        return (*aggregation.op_key, self.bucket)


class Source(Enum):
    """What a part reads: raw events, or an entity's snapshots and mutations."""

    EVENTS = "events"
    ENTITY = "entity"


@dataclass(frozen=True)
class PartPlan:
    """One join part over events, ready to run.

    Attributes:
        part: the definition.
        events: the part's events: internal key columns, :data:`TIME` and the value
            columns, with rows that have no time or a null key removed.
        features: the output columns, in the order of ``part.output_columns()``.
        floors: the query's time is rounded down to a multiple of each in turn before
            its windows apply (:func:`~timetile.core.windows.as_of`); empty for TEMPORAL
            accuracy.

    """

    part: JoinPart
    events: DataFrame
    features: tuple[Feature, ...]
    floors: tuple[int, ...] = ()
    source: ClassVar[Source] = Source.EVENTS

    @property
    def keys(self) -> list[str]:
        """The internal key column names."""
        return part_keys(self.part)

    def as_of(self, time: Column) -> Column:
        """Return when the windows of a query at ``time`` end (the core's :func:`as_of`)."""
        return as_of(COLUMNS, time, self.floors)

    def queries(self, left: DataFrame) -> DataFrame:
        """Return the distinct (keys, as-of time) queries that ``left`` asks of this part."""
        return part_queries(self, left)

    def query_rows(self, left: DataFrame) -> DataFrame:
        """Return the (keys, as-of time) of each timed row of ``left``, duplicates kept."""
        return part_query_rows(self, left)


@dataclass(frozen=True)
class EntityPartPlan:
    """One join part over an entity source, ready to run (see :mod:`.executors.entity`).

    Attributes:
        part: the definition.
        tables: the loaded snapshots and mutations.
        features: the aggregations' output columns, in order (empty for a lookup).
        lookup: for a lookup, the returned row columns, in order (else empty).
        floors: as in :class:`PartPlan`; ``(DAY_MS,)`` under SNAPSHOT accuracy.
        query_days: the epoch days of the as-of times of the queries, once known.
        missing_days: query days whose previous day has no snapshot partition: their
            features are null (counts included).

    """

    part: JoinPart
    tables: EntityTables
    features: tuple[Feature, ...]
    lookup: tuple[str, ...] = ()
    floors: tuple[int, ...] = ()
    query_days: frozenset[int] = frozenset()
    missing_days: frozenset[int] = frozenset()
    source: ClassVar[Source] = Source.ENTITY

    @property
    def keys(self) -> list[str]:
        """The internal key column names."""
        return part_keys(self.part)

    @property
    def snapshot_only(self) -> bool:
        """Whether queries sit at the start of their day, so no mutation applies."""
        return DAY_MS in self.floors

    def as_of(self, time: Column) -> Column:
        """Return when the windows of a query at ``time`` end (the core's :func:`as_of`)."""
        return as_of(COLUMNS, time, self.floors)

    def queries(self, left: DataFrame) -> DataFrame:
        """Return the distinct (keys, as-of time) queries that ``left`` asks of this part."""
        return part_queries(self, left)


AnyPartPlan = PartPlan | EntityPartPlan


def part_keys(part: JoinPart) -> list[str]:
    """Return the internal key column names of a part."""
    return [key_column(i) for i in range(len(part.group_by.keys))]


def part_queries(plan: AnyPartPlan, left: DataFrame) -> DataFrame:
    """Return the distinct (keys, as-of time) queries that ``left`` asks of a part."""
    return part_query_rows(plan, left).distinct()


def part_query_rows(plan: AnyPartPlan, left: DataFrame) -> DataFrame:
    """Return the (keys, as-of time) of each row of ``left`` with a time, duplicates kept."""
    columns = [F.col(left_key).alias(key)
               for left_key, key in zip(plan.part.left_keys, plan.keys, strict=True)]
    return left.where(F.col(TIME).isNotNull()).select(*columns,
                                                      plan.as_of(F.col(TIME)).alias(TIME))


@dataclass(frozen=True)
class CountedSource:
    """A table whose unusable rows a backfill counts before it starts.

    Attributes:
        role: ``left``, the GroupBy's name, or ``{name} mutations``.
        label: the table as the user named it.
        frame: the loaded rows.
        keys: the key columns: a row with a null one is left out.
        placed: true for rows that can be placed in time.
        time: what ``placed`` checks, for the report (``time``, ``partition``…).
        integer_time: the time in epoch milliseconds when the source gives it as integers,
            which could be seconds by mistake: the count job finds its latest value.
        buckets: the bucket columns of the GroupBy's aggregations: the count job counts the
            usable rows whose bucket is null, which no bucketed feature holds.

    """

    role: str
    label: str
    frame: DataFrame
    keys: tuple[str, ...]
    placed: Column
    time: str = "time"
    integer_time: Column | None = None
    buckets: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackfillPlan:
    """The whole backfill: the left rows (with :data:`TIME`) and one plan per part."""

    join: Join
    left: DataFrame
    left_columns: tuple[str, ...]
    parts: tuple[AnyPartPlan, ...]
    counted: tuple[CountedSource, ...]

    @property
    def entity_left(self) -> bool:
        """Whether the left rows are the snapshot rows of an entity source."""
        return isinstance(self.join.left, EntitySource)


def _load_left(join: Join, spark: SparkSession) -> tuple[DataFrame, CountedSource]:
    """Return the left rows with :data:`TIME`: an event's time, or the end of its day."""
    if isinstance(join.left, EventSource):
        left = load_events(spark, join.left, "left")
        return left, CountedSource("left", join.left.label, left, (), F.col(TIME).isNotNull(),
                                   integer_time=_integer_time(left, join.left.time_column))
    tables = load_entity(spark, join.left, "left")
    left = tables.snapshots.withColumn(TIME, day_end_ms(F.col(DAY))).drop(DAY)
    return left, CountedSource("left", join.left.label, left, (), F.col(TIME).isNotNull(),
                               "partition")


def _entity_problems(join: Join) -> None:
    for index, part in enumerate(join.join_parts):
        group_by = part.group_by
        source = group_by.source
        if (isinstance(source, EntitySource) and source.mutation_table is None
                and group_by.accuracy is Accuracy.TEMPORAL):
            raise DefinitionError.single(
                f"Join {join.name!r}", f"parts[{index}].accuracy", "TEMPORAL accuracy on an "
                f"entity source needs its mutations, and {source.label} has no mutation_table",
                "give the EntitySource a mutation_table, or use Accuracy.SNAPSHOT")


def _schema(loaded: DataFrame | EntityTables) -> dict[str, str]:
    if isinstance(loaded, EntityTables):
        return {name: kind for name, kind in coarse_schema(loaded.snapshots).items()
                if name in loaded.row_columns}
    return coarse_schema(loaded.drop(TIME))


def plan_backfill(join: Join, spark: SparkSession) -> BackfillPlan:
    """Load every source lazily, check the definition against the schemas, list features.

    Raises:
        DefinitionError: naming every problem of the definition against the real schemas.

    """
    _entity_problems(join)
    left, left_counted = _load_left(join, spark)
    left_columns = tuple(column for column in left.columns if column != TIME)
    loaded: dict[str, DataFrame | EntityTables] = {}
    for index, part in enumerate(join.join_parts):
        source, field = part.group_by.source, f"parts[{index}].source"
        loaded[part.group_by.name] = (load_events(spark, source, field)
                                      if isinstance(source, EventSource)
                                      else load_entity(spark, source, field))
    check_join(join, coarse_schema(left.drop(TIME)),
               {name: _schema(frame) for name, frame in loaded.items()})
    counted = [left_counted]
    parts: list[AnyPartPlan] = []
    for part in join.join_parts:
        group_by = part.group_by
        frame = loaded[group_by.name]
        if all(source.role != group_by.name for source in counted):  # count a source once
            counted.extend(_counted(group_by, frame))
        types = {name: ValueType(kind) for name, kind in _schema(frame).items()
                 if kind in VALUE_TYPES}
        features = tuple(
            Feature(name, aggregation, window, types[aggregation.column], bucket)
            for aggregation in group_by.aggregations or ()
            for name, window, bucket in aggregation.outputs(group_by.name, part.prefix)
        )
        if isinstance(frame, EntityTables):
            parts.append(EntityPartPlan(part, _read_columns(frame, group_by), features,
                                        group_by.lookup_columns, group_by.floors))
            continue
        value_columns = sorted({feature.aggregation.column for feature in features}
                               | {f.bucket for f in features if f.bucket is not None})
        keys = [F.col(key).alias(key_column(i)) for i, key in enumerate(group_by.keys)]
        usable = F.col(TIME).isNotNull()
        for key in group_by.keys:
            usable &= F.col(key).isNotNull()
        events = frame.where(usable).select(*keys, TIME, *value_columns)
        parts.append(PartPlan(part, events, features, group_by.floors))
    return BackfillPlan(join, left, left_columns, tuple(parts), tuple(counted))


def _read_columns(tables: EntityTables, group_by: GroupBy) -> EntityTables:
    """Narrow an entity's row images to the columns this GroupBy reads.

    Keys, aggregated and bucket columns, the time column and a lookup's columns: the rest of
    a wide table never travels. Projecting images keeps every result the same, because a
    multiset's projection commutes with inserting and retracting (for retractions that match
    a row, which are the ones applied).
    """
    used = {*group_by.keys, *group_by.lookup_columns}
    if group_by.time_column is not None:
        used.add(group_by.time_column)
    for aggregation in group_by.aggregations or ():
        used.update([aggregation.column, *(aggregation.buckets or ())])
    return replace(tables, row_columns=tuple(c for c in tables.row_columns if c in used))


def _counted(group_by: GroupBy, frame: DataFrame | EntityTables) -> list[CountedSource]:
    keys, name, label = tuple(group_by.keys), group_by.name, group_by.source.label
    buckets = tuple(dict.fromkeys(bucket for aggregation in group_by.aggregations or ()
                                  for bucket in aggregation.buckets or ()))
    if not isinstance(frame, EntityTables):
        return [CountedSource(name, label, frame, keys, F.col(TIME).isNotNull(),
                              integer_time=_integer_time(frame, group_by.time_column),
                              buckets=buckets)]
    counted = [CountedSource(name, label, frame.snapshots, keys, F.col(DAY).isNotNull(),
                             "partition", _integer_time(frame.snapshots, group_by.time_column),
                             buckets)]
    if frame.mutations is not None:
        counted.append(CountedSource(
            f"{name} mutations", describe_table(frame.source.mutation_table), frame.mutations,
            keys,
            F.col(MUTATION_TIME).isNotNull() & F.col(IS_BEFORE).isNotNull(),
            "mutation time or is_before",
            F.col(MUTATION_TIME) if frame.integer_mutation_times else None, buckets))
    return counted


def _integer_time(frame: DataFrame, column: str | None) -> Column | None:
    """Return :data:`TIME` if ``column`` holds integers (epoch milliseconds), else None."""
    if column is None or column not in frame.columns:
        return None
    return F.col(TIME) if isinstance(frame.schema[column].dataType, T.LongType) else None
