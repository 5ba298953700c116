"""Reading entity sources: daily snapshots and mutations, as Spark DataFrames (DESIGN §2).

An entity source is a mutable table. Partition ``d`` of its snapshot table holds the table
as of the end of day ``d`` (UTC); its mutation table holds the row images of each change:
``is_before`` true for the image before it (a retraction), false for the image after (an
insertion). Both load lazily into frames with timetile's internal columns:

- snapshots: the row columns, :data:`DAY` (the partition as an epoch day) and
  :data:`~timetile.spark.sources.TIME` (the row's ``time_column`` in epoch ms, or null);
- mutations: the same row columns, :data:`~timetile.spark.sources.TIME`,
  :data:`MUTATION_TIME` and :data:`IS_BEFORE`.

The row columns are the snapshot's columns after ``where`` and ``select``, less the
partition column; the mutations must have them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.errors import DefinitionError, one_of
from timetile.api.sources import EntitySource
from timetile.core.timeutil import DAY_MS
from timetile.spark.sources import (
    TIME,
    check_time_column,
    coarse_type,
    epoch_day,
    project,
    read_table,
    time_millis,
)

#: The snapshot partition of a row, as days since the epoch (null when unparseable).
DAY = "_tt_day"
#: When a mutation happened, in epoch milliseconds.
MUTATION_TIME = "_tt_mutation_time"
#: True for the row image before a change (a retraction).
IS_BEFORE = "_tt_is_before"


@dataclass(frozen=True)
class EntityTables:
    """An entity source, loaded.

    Attributes:
        source: the definition.
        row_columns: the columns of a row image, in order.
        snapshots: the snapshot rows with :data:`DAY` and ``TIME``; the partition column is
            kept too (an entity left side returns it).
        mutations: the mutation rows, or None when the source has no mutation table.
        partitions: the partitions of the snapshot table as :data:`DAY`, before ``where``:
            a day whose rows ``where`` removes is empty, not missing.
        integer_mutation_times: whether the mutation table gives its times as integers
            (epoch milliseconds, or seconds by mistake).

    """

    source: EntitySource
    row_columns: tuple[str, ...]
    snapshots: DataFrame
    mutations: DataFrame | None
    partitions: DataFrame
    integer_mutation_times: bool = False


def partition_day(column: str, data_type: T.DataType) -> Column:
    """Return a ``YYYY-MM-DD`` string, DATE or timestamp partition column as an epoch day.

    A timestamp is an instant: its UTC day, whatever the session time zone (a cast to DATE
    would take the session zone's day).
    """
    if isinstance(data_type, T.TimestampType):
        return epoch_day(F.unix_millis(F.col(column)))
    if coarse_type(data_type) in ("date", "timestamp"):  # a date, or a zone-free timestamp
        return F.unix_date(F.col(column).cast("date"))
    return F.unix_date(F.try_to_date(F.col(column).cast("string"), "yyyy-MM-dd"))


def is_before_flag(flag: Column, data_type: T.DataType) -> Column:
    """Read a mutation's ``is_before`` column as a boolean: null where it holds no flag.

    A number is a flag only as 1 (true) or 0 (false): Spark's cast would read any other
    number, an epoch time for one, as true. Text reads as Spark casts it to a boolean.
    """
    if isinstance(data_type, T.NumericType):
        return F.when(flag == 1, F.lit(True)).when(flag == 0, F.lit(False))
    return flag.try_cast("boolean")


def day_end_ms(day: Column) -> Column:
    """Return the first millisecond after epoch day ``day``: a snapshot's as-of time."""
    return (day.cast("long") + 1) * DAY_MS


def _row_time(frame: DataFrame, source: EntitySource) -> Column:
    column = source.time_column
    if column is None or column not in frame.columns:
        return F.lit(None).cast("long")
    return time_millis(column, frame.schema[column].dataType)


def load_entity(spark: SparkSession, source: EntitySource, field: str) -> EntityTables:
    """Load an entity source lazily; ``field`` names it in errors (``parts[0].source``).

    Raises:
        DefinitionError: the partition column, a mutation column or a row column of the
            snapshots is missing where it must be.

    """
    raw = read_table(spark, source.snapshot_table)
    partition = source.partition_column
    if partition not in raw.columns:
        raise DefinitionError.single(
            "source", f"{field}.partition_column",
            f"{partition!r} is not a column of {source.label}", one_of(partition, raw.columns))
    raw = raw.withColumn(DAY, partition_day(partition, raw.schema[partition].dataType))
    partitions = raw.select(DAY)
    snapshots = project(raw, source, field, keep=(DAY, partition))
    check_time_column(spark, snapshots, source.time_column, f"{field}.time_column")
    row_columns = tuple(c for c in snapshots.columns if c not in (DAY, partition))
    snapshots = snapshots.withColumn(TIME, _row_time(snapshots, source))
    if source.mutation_table is None:
        return EntityTables(source, row_columns, snapshots, None, partitions)
    raw_mutations = read_table(spark, source.mutation_table)
    mutations = mutation_rows(raw_mutations, source, field, row_columns)
    integers = isinstance(raw_mutations.schema[source.mutation_time_column].dataType,
                          T.LongType)
    return EntityTables(source, row_columns, snapshots, mutations, partitions, integers)


def mutation_rows(raw: DataFrame, source: EntitySource, field: str,
                  row_columns: Sequence[str], exempt: str | None = None) -> DataFrame:
    """Return raw mutation rows as :func:`load_entity` loads them. No job runs.

    Applies the source's ``where`` and ``select`` and parses the times: the row columns,
    :data:`~timetile.spark.sources.TIME` (the row's time), :data:`MUTATION_TIME` and
    :data:`IS_BEFORE`. The streaming job reads a CDC stream through it too, so both sides
    see the same mutations. ``field`` names the source in errors (``parts[0].source``). A
    boolean column ``exempt`` is kept, and its true rows pass the ``where`` (see
    :func:`~timetile.spark.sources.project`).

    Raises:
        DefinitionError: a mutation column or a row column is missing, or ``is_before`` is
            of a type that holds no flag.

    """
    where = f"{field}.mutation_table"
    named = {"mutation_time_column": source.mutation_time_column,
             "is_before_column": source.is_before_column, "known_at": source.known_at}
    for name, column in named.items():
        if column is not None and column not in raw.columns:
            raise DefinitionError.single(
                "source", f"{field}.{name}",
                f"{column!r} is not a column of the mutation table {source.mutation_table!r}"
                if isinstance(source.mutation_table, str) else
                f"{column!r} is not a column of the mutation table", one_of(column, raw.columns))
    for name in ("mutation_time_column", "known_at"):
        check_time_column(raw.sparkSession, raw, named[name], f"{field}.{name}")
    flag_type = raw.schema[source.is_before_column].dataType
    if not isinstance(flag_type, (T.BooleanType, T.StringType, T.NumericType)):
        raise DefinitionError.single(
            "source", f"{field}.is_before_column",
            f"{source.is_before_column!r} is {flag_type.simpleString()}, not a flag",
            "give a boolean column, true for the row image before a change (a string "
            "'true'/'false' or a 1/0 number reads too), or compute one in a select")
    raw = raw.withColumns({
        MUTATION_TIME: time_millis(source.mutation_time_column,
                                   raw.schema[source.mutation_time_column].dataType),
        # a value that is no flag (text, a number but 1 or 0) is null: the mutation is left
        IS_BEFORE: is_before_flag(F.col(source.is_before_column), flag_type),  # out, counted
    })
    kept = (MUTATION_TIME, IS_BEFORE, *([exempt] if exempt else []))
    mutations = project(raw, source, where, keep=kept, exempt=exempt)
    missing = [column for column in row_columns if column not in mutations.columns]
    if missing:
        raise DefinitionError.single(
            "source", where, f"lacks the row columns {missing} that the snapshots have",
            "give the mutations the same row columns as the snapshots (or select them)")
    mutations = mutations.select(*row_columns, *kept)
    return mutations.withColumn(TIME, _row_time(mutations, source))
