"""Reading sources into Spark DataFrames with a normalized time column.

Every source becomes a DataFrame holding its selected, filtered columns plus
:data:`TIME`, the event time as int64 epoch milliseconds (DESIGN §2). Rows whose time is
null or unparseable keep a null :data:`TIME`; callers count them and leave them out.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.sources import EntitySource, EventSource, is_path

#: The normalized event-time column every loaded source carries.
TIME = "_tt_time"

_COARSE: dict[type[T.DataType], str] = {
    T.ByteType: "int",
    T.ShortType: "int",
    T.IntegerType: "int",
    T.LongType: "int",
    T.FloatType: "float",
    T.DoubleType: "float",
    T.StringType: "string",
    T.BooleanType: "bool",
    T.TimestampType: "timestamp",
    T.TimestampNTZType: "timestamp",
    T.DateType: "date",
}


def coarse_type(data_type: T.DataType) -> str:
    """Return the engine-free type name of a Spark type (see :mod:`timetile.api.schema`)."""
    return _COARSE.get(type(data_type), data_type.simpleString())


def coarse_schema(frame: DataFrame) -> dict[str, str]:
    """Column name → coarse type name, for :func:`timetile.api.schema.check_join`."""
    return {f.name: coarse_type(f.dataType) for f in frame.schema.fields}


def read_table(spark: SparkSession, table: object) -> DataFrame:
    """Return a table name, a Parquet path or a DataFrame, as a DataFrame. No job runs."""
    if isinstance(table, DataFrame):
        return table
    if not isinstance(table, str):
        raise TypeError(f"cannot read {type(table).__name__} as a table")
    return spark.read.parquet(table) if is_path(table) else spark.table(table)


def project(frame: DataFrame, source: EventSource | EntitySource) -> DataFrame:
    """Apply a source's ``where`` filters, then its ``select``. No job runs."""
    for clause in source.filters:
        frame = frame.where(F.expr(clause))
    if source.projection:
        frame = frame.select(*[F.expr(expr).alias(name) for name, expr in source.projection])
    return frame


def time_millis(column: str, data_type: T.DataType) -> Column:
    """Return an expression for a time column as epoch milliseconds (null when unparseable)."""
    kind = coarse_type(data_type)
    if kind == "timestamp":
        return F.unix_millis(F.col(column).cast("timestamp"))
    if kind == "string":
        return F.unix_millis(F.try_to_timestamp(F.col(column)))
    return F.col(column).cast("long")


def load(spark: SparkSession, source: EventSource | EntitySource, table: object) -> DataFrame:
    """``table`` of ``source``, projected, with :data:`TIME` added (null without a time)."""
    frame = project(read_table(spark, table), source)
    column = source.time_column
    if column is None or column not in frame.columns:
        return frame.withColumn(TIME, F.lit(None).cast("long"))
    return frame.withColumn(TIME, time_millis(column, frame.schema[column].dataType))


def load_events(spark: SparkSession, source: EventSource) -> DataFrame:
    """Return an event source as a DataFrame with :data:`TIME`."""
    return load(spark, source, source.table)
