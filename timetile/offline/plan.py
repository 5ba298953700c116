"""What a backfill computes, resolved against Spark: the input frames and the feature list.

Planning reads schemas but runs no Spark job. Definitions are checked against the real
schemas here, so a bad definition fails before any work starts (DESIGN §2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.aggregation import Aggregation
from timetile.api.errors import DefinitionError
from timetile.api.group_by import Accuracy
from timetile.api.join import Join, JoinPart
from timetile.api.schema import VALUE_TYPES, check_join
from timetile.api.sources import EventSource
from timetile.api.windows import Window
from timetile.core.types import ValueType
from timetile.core.windows import WindowKind, window_bounds
from timetile.offline.sources import TIME, coarse_schema, load_events


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

    """

    partials_path: str | None = None
    notes: list[str] = field(default_factory=list)
    gauges: dict[str, Callable[[], str | None]] = field(default_factory=dict)


def window_spec(window: Window | None) -> tuple[WindowKind, int | None, int | None]:
    """Return a window as the core's (kind, length, hop); None is the lifetime window."""
    if window is None:
        return WindowKind.LIFETIME, None, None
    return window.window_kind, window.length_ms, window.hop_ms


def query_bounds(window: Window | None, query_times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``[start, end)`` of a window (None: lifetime) for each query time."""
    return window_bounds(query_times, *window_spec(window))


@dataclass(frozen=True)
class Feature:
    """One output column: an aggregation over one window (None for lifetime)."""

    name: str
    aggregation: Aggregation
    window: Window | None
    input_type: ValueType

    @property
    def aggregator_key(self) -> tuple[Any, ...]:
        """What identifies its aggregator: features that share it share states."""
        aggregation = self.aggregation
        return (aggregation.column, aggregation.op, aggregation.k, aggregation.percentiles)


@dataclass(frozen=True)
class PartPlan:
    """One join part, ready to run.

    Attributes:
        part: the definition.
        events: the part's events: internal key columns, :data:`TIME` and the value
            columns, with rows that have no time or a null key removed.
        features: the output columns, in the order of ``part.output_columns()``.

    """

    part: JoinPart
    events: DataFrame
    features: tuple[Feature, ...]

    @property
    def keys(self) -> list[str]:
        """The internal key column names."""
        return [key_column(i) for i in range(len(self.part.group_by.keys))]

    def queries(self, left: DataFrame) -> DataFrame:
        """Return the distinct (keys, time) queries that ``left`` asks of this part."""
        columns = [F.col(left_key).alias(key)
                   for left_key, key in zip(self.part.left_keys, self.keys, strict=True)]
        return left.where(F.col(TIME).isNotNull()).select(*columns, TIME).distinct()


@dataclass(frozen=True)
class BackfillPlan:
    """The whole backfill: the left rows (with :data:`TIME`) and one plan per part."""

    join: Join
    left: DataFrame
    left_columns: tuple[str, ...]
    parts: tuple[PartPlan, ...]
    raw_sources: tuple[tuple[str, str, DataFrame, tuple[str, ...]], ...]


def _unsupported(join: Join) -> None:
    subject = f"Join {join.name!r}"
    if not isinstance(join.left, EventSource):
        raise DefinitionError.single(subject, "left", "an entity source as the left side is "
                                     "not supported yet", "use an EventSource of queries")
    for index, part in enumerate(join.join_parts):
        group_by = part.group_by
        if not isinstance(group_by.source, EventSource):
            raise DefinitionError.single(subject, f"parts[{index}].source", "entity sources "
                                         "are not supported by backfill yet",
                                         "aggregate an EventSource")
        if group_by.accuracy is not Accuracy.TEMPORAL:
            raise DefinitionError.single(subject, f"parts[{index}].accuracy", "SNAPSHOT "
                                         "accuracy is not supported yet",
                                         "use Accuracy.TEMPORAL")


def plan_backfill(join: Join, spark: SparkSession) -> BackfillPlan:
    """Load every source lazily, check the definition against the schemas, list features.

    Raises:
        DefinitionError: naming every problem of the definition against the real schemas.

    """
    _unsupported(join)
    assert isinstance(join.left, EventSource)
    left = load_events(spark, join.left, "left")
    left_columns = tuple(column for column in left.columns if column != TIME)
    loaded = {}
    for index, part in enumerate(join.join_parts):
        source = part.group_by.source
        assert isinstance(source, EventSource)
        loaded[part.group_by.name] = load_events(spark, source, f"parts[{index}].source")
    check_join(join, coarse_schema(left.drop(TIME)),
               {name: coarse_schema(frame.drop(TIME)) for name, frame in loaded.items()})
    raw_sources: list[tuple[str, str, DataFrame, tuple[str, ...]]] = [
        ("left", join.left.label, left, ())
    ]
    parts = []
    for part in join.join_parts:
        group_by = part.group_by
        frame = loaded[group_by.name]
        if all(role != group_by.name for role, *_ in raw_sources):  # count a source once
            raw_sources.append((group_by.name, group_by.source.label, frame,
                                tuple(group_by.keys)))
        types = {name: ValueType(kind) for name, kind in coarse_schema(frame).items()
                 if kind in VALUE_TYPES}
        features = tuple(
            Feature(name, aggregation, window, types[aggregation.column])
            for aggregation in group_by.aggregations or ()
            for name, window in zip(aggregation.column_names(group_by.name, part.prefix),
                                    aggregation.window_list, strict=True)
        )
        value_columns = sorted({feature.aggregation.column for feature in features})
        keys = [F.col(key).alias(key_column(i)) for i, key in enumerate(group_by.keys)]
        usable = F.col(TIME).isNotNull()
        for key in group_by.keys:
            usable &= F.col(key).isNotNull()
        events = frame.where(usable).select(*keys, TIME, *value_columns)
        parts.append(PartPlan(part, events, features))
    return BackfillPlan(join, left, left_columns, tuple(parts), tuple(raw_sources))
