"""Reading sources into Spark DataFrames with a normalized time column.

Every source becomes a DataFrame holding its selected, filtered columns plus
:data:`TIME`, the event time as int64 epoch milliseconds (DESIGN §2). Rows whose time is
null or unparseable keep a null :data:`TIME`; callers count them and leave them out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.errors import DefinitionError, expect_argument
from timetile.api.group_by import RESERVED_PREFIX
from timetile.api.interval_join import IntervalJoin
from timetile.api.schema import not_a_time
from timetile.api.sources import EntitySource, EventSource, is_path
from timetile.core.timeutil import DAY_MS

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


def quote(column: str) -> str:
    """Return a column name as a Spark SQL identifier, backquoted.

    ``F.col`` reads a bare ``a.b`` as field ``b`` of a struct ``a``.

    >>> quote("a.b"), quote("x`y")
    ('`a.b`', '`x``y`')
    """
    return "`" + column.replace("`", "``") + "`"


def coarse_type(data_type: T.DataType) -> str:
    """Return the engine-free type name of a Spark type (see :mod:`timetile.api.schema`).

    A string of another collation than Spark's default (byte order) keeps its collation in
    the name (``string collate UTF8_LCASE``): equal strings under it may differ in bytes.
    """
    if isinstance(data_type, T.StringType) and data_type.collation != "UTF8_BINARY":
        return data_type.simpleString()
    return _COARSE.get(type(data_type), data_type.simpleString())


def coarse_schema(frame: DataFrame) -> dict[str, str]:
    """Column name → coarse type name, for :func:`timetile.api.schema.check_join`."""
    return {f.name: coarse_type(f.dataType) for f in frame.schema.fields}


def read_table(spark: SparkSession, table: object) -> DataFrame:
    """Return a table name, Parquet path, DataFrame or IntervalJoin as a DataFrame; no job runs."""
    if isinstance(table, DataFrame):
        return table
    if isinstance(table, IntervalJoin):
        from timetile.spark.interval_join import joined_rows  # noqa: PLC0415  (it imports this)

        return joined_rows(spark, table)
    if not isinstance(table, str):
        raise TypeError(f"cannot read {type(table).__name__} as a table")
    return spark.read.parquet(table) if is_path(table) else spark.table(table)


def table_identity(spark: SparkSession, table: object) -> str | None:
    """Return what names a table's data wherever the job runs from, or None if nothing does.

    A table name becomes ``catalog.namespace.name`` (an unqualified name means another table
    under another current database). A path without a scheme is qualified as Spark reads it:
    the default filesystem's scheme, and a relative path from the driver's working folder (a
    relative path means other files from another folder). A DataFrame, a temporary view (it
    names a DataFrame of one session) or a name the catalog does not know has no identity:
    None. One catalog or filesystem lookup; no job runs.
    """
    if not isinstance(table, str):
        return None
    if is_path(table):
        return table if "://" in table else _qualified_path(spark, table)
    try:
        found = spark.catalog.getTable(table)
    except AnalysisException:
        return None
    if found.isTemporary or found.namespace is None:
        return None
    return ".".join([found.catalog or "", *found.namespace, found.name])


def _hadoop_path(spark: SparkSession, path: str) -> tuple[Any, Any] | None:
    """Return Hadoop's file system of ``path`` and its ``Path``; None without a JVM to ask."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect
        return None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration()), hadoop_path


def _qualified_path(spark: SparkSession, path: str) -> str:
    """Return ``path`` as Hadoop qualifies it: ``file:/work/ev`` for ``ev`` from ``/work``.

    As given where the session has no JVM to ask (Spark Connect).
    """
    found = _hadoop_path(spark, path)
    if found is None:
        return path
    filesystem, hadoop_path = found
    return str(filesystem.makeQualified(hadoop_path).toString())


def subfolders(spark: SparkSession, path: str) -> list[str] | None:
    """Return the names of the folders directly in ``path`` ([] if it is missing).

    None where unknown: where the session has no JVM to ask (Spark Connect). One listing
    call of the session's file system; no Spark job. Asking first also spares a read of a
    missing path, which Spark logs as a warning with a stack trace under a cluster's default
    log level.
    """
    found = _hadoop_path(spark, path)
    if found is None:
        return None
    filesystem, hadoop_path = found
    if not filesystem.exists(hadoop_path):
        return []
    return [str(status.getPath().getName()) for status in filesystem.listStatus(hadoop_path)
            if status.isDirectory()]


def copy_folder(spark: SparkSession, source: str, target: str) -> bool:
    """Copy the folder ``source`` (and all it holds) to ``target``, on the session's file systems.

    Returns False where the session has no JVM to ask (Spark Connect), having copied
    nothing. No Spark job: the driver copies the files, so keep this to small folders.
    """
    found, into = _hadoop_path(spark, source), _hadoop_path(spark, target)
    if found is None or into is None:
        return False
    jvm = spark._jvm
    assert jvm is not None
    jvm.org.apache.hadoop.fs.FileUtil.copy(found[0], found[1], into[0], into[1], False,
                                           spark._jsc.hadoopConfiguration())
    return True


#: A URI's ``scheme://authority``, if any, then its path.
_AUTHORITY = re.compile(r"((?:[A-Za-z][\w+.-]*://[^/]*)?)(.*)", re.DOTALL)


def literal_path(path: str) -> str:
    r"""Return ``path`` with Hadoop's glob characters escaped, so Spark reads it as named.

    ``spark.read`` expands ``[``, ``{``, ``*``, ``?`` and ``\`` as a pattern: a folder
    named ``p[1]`` reads as missing, and ``p*`` also reads its siblings. Writes take paths
    as named, so a path timetile writes and reads back goes through this first. A URI's
    ``scheme://authority`` is kept (Hadoop globs the path only; ``[::1]`` is an address).

    >>> literal_path("s3a://bucket/p[1]"), literal_path("hdfs://[::1]:8020/a*")
    ('s3a://bucket/p\\[1\\]', 'hdfs://[::1]:8020/a\\*')
    """
    authority, path = _AUTHORITY.match(path).groups()  # type: ignore[union-attr]
    return authority + re.sub(r"([\\\[\]{}*?])", r"\\\1", path)


#: Session time zones in which offset-less strings and TIMESTAMP_NTZ values read as UTC.
UTC_ZONES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "Zulu"})


def project(frame: DataFrame, source: EventSource | EntitySource, field: str,
            keep: Sequence[str] = (), exempt: str | None = None) -> DataFrame:
    """Apply a source's ``where`` filters, then its ``select``. No job runs.

    The columns in ``keep`` (timetile's own, or a partition column) survive the ``select``.
    The rows where the boolean column ``exempt`` (one of ``keep``) is true pass every
    ``where``: a stream's malformed lines, which are counted, never filtered away.

    Raises:
        DefinitionError: naming ``{field}.where[i]`` or ``{field}.select.{name}`` when Spark
            cannot parse or resolve an expression.

    """
    for index, clause in enumerate(source.filters):
        frame = _analyzed(frame, "where", clause, f"{field}.where[{index}]", exempt)
    if source.projection:
        for name, expression in source.projection:
            _analyzed(frame, "select", expression, f"{field}.select.{name}")
        selected = [name for name, _ in source.projection]
        frame = frame.select(*[F.expr(expr).alias(name) for name, expr in source.projection],
                             *[column for column in keep if column not in selected])
    # Spark resolves names without regard to case: `_TT_TIME` is `_tt_time` to withColumn.
    reserved = [c for c in frame.columns
                if c.casefold().startswith(RESERVED_PREFIX) and c not in keep]
    if reserved:
        raise DefinitionError.single(
            "source", field, f"has columns {reserved}, and names starting with "
            f"{RESERVED_PREFIX!r}, in any case, are timetile's own",
            "rename them in the source's select")
    return frame


def _analyzed(frame: DataFrame, step: str, expression: str, field: str,
              exempt: str | None = None) -> DataFrame:
    """Return ``frame.where(expression or exempt)`` or ``frame.select(expression)``, analyzed."""
    try:
        if step == "select":
            return frame.select(F.expr(expression))
        kept = F.expr(expression)
        return frame.where(kept if exempt is None else kept | F.col(exempt))
    except AnalysisException as error:  # ParseException is one too
        reason = str(error).split("\n")[0][:300]
        raise DefinitionError.single(
            "source", field, f"Spark cannot use {expression!r}: {reason}",
            f"write a Spark SQL expression over the columns {', '.join(frame.columns)}",
        ) from None


#: Spark types a time column may have: epoch milliseconds, an instant, or ISO-8601 text.
_TIME_TYPES = (T.LongType, T.TimestampType, T.TimestampNTZType, T.StringType)


def check_session(spark: object) -> None:
    """Refuse a ``spark`` that is no SparkSession (a Spark Connect session is one)."""
    kind = type(spark)
    if kind.__name__ == "SparkSession" and kind.__module__.startswith("pyspark.sql"):
        return
    expect_argument("spark", spark, SparkSession, "a SparkSession",
                    "pass your session, or timetile.spark.session.local_session()")


def check_time_column(spark: SparkSession, frame: DataFrame, column: str | None,
                      field: str) -> None:
    """Refuse a time column timetile cannot read exactly, naming ``field`` and the fix.

    Integers narrower than a bigint cannot hold epoch milliseconds past January 1970 (an
    ``int`` of seconds would read as that month), and a date has no time of day; both are
    refused before any job, as every type that is not a time is. String and TIMESTAMP_NTZ
    times are refused unless the session reads them as UTC: Spark reads a time without an
    offset in ``spark.sql.session.timeZone``, and DESIGN §2 says event time is UTC, so a
    session elsewhere would silently shift every such time. A missing column is left to the
    schema checks, which suggest the closest name.
    """
    if column is None or column not in frame.columns:
        return
    data_type = frame.schema[column].dataType
    kind = data_type.simpleString()
    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType)):
        raise DefinitionError.single(
            "source", field, f"{column!r} is {kind}: epoch milliseconds need a bigint, and "
            f"a {kind} of epoch seconds would read as January 1970",
            f"convert it in the source's select: {{{column!r}: 'CAST({column} AS BIGINT)'}} "
            f"if it holds milliseconds, {{{column!r}: 'timestamp_seconds({column})'}} if "
            "seconds")
    if not isinstance(data_type, _TIME_TYPES):
        raise DefinitionError("source", [not_a_time(field, column, kind)])
    zone = spark.conf.get("spark.sql.session.timeZone") or ""
    if isinstance(data_type, (T.StringType, T.TimestampNTZType)) and zone not in UTC_ZONES:
        raise DefinitionError.single(
            "source", field, f"{column!r} is {kind}, which Spark reads in the session time "
            f"zone {zone}, not UTC",
            "set spark.sql.session.timeZone=UTC, or give the time as epoch milliseconds or a "
            "timestamp",
        )


def epoch_day(millis: Column) -> Column:
    """Return the UTC day of an epoch-millisecond column, as days since the epoch.

    A true floor, exact over all of int64: integer division truncates toward zero, and a
    negative time inside a day steps back one. (Subtracting the remainder first would leave
    int64 in the first day of all, which starts before its first millisecond.)
    """
    day = F.lit(DAY_MS)
    return (F.call_function("div", millis, day)
            - F.when(millis % day < 0, F.lit(1)).otherwise(F.lit(0)))


def time_millis(column: str, data_type: T.DataType) -> Column:
    """Return an expression for a time column as epoch milliseconds (null when unparseable)."""
    kind = coarse_type(data_type)
    if kind == "timestamp":
        return F.unix_millis(F.col(column).cast("timestamp"))
    if kind == "string":
        return F.unix_millis(F.try_to_timestamp(F.col(column)))
    return F.col(column).cast("long")


def load(spark: SparkSession, source: EventSource | EntitySource, table: object,
         field: str = "source") -> DataFrame:
    """``table`` of ``source``, projected, with :data:`TIME` added (null without a time).

    ``field`` names the source in errors (``left``, ``parts[1].source``).
    """
    return with_time(spark, project(read_table(spark, table), source, field), source, field)


def with_time(spark: SparkSession, frame: DataFrame, source: EventSource | EntitySource,
              field: str = "source") -> DataFrame:
    """Return a projected ``frame`` of ``source`` (batch or streaming) with :data:`TIME`.

    Raises:
        DefinitionError: naming ``{field}.time_column`` (or ``known_at``) when it is no
            time timetile reads exactly (:func:`check_time_column`).

    """
    column = source.time_column
    check_time_column(spark, frame, column, f"{field}.time_column")
    if isinstance(source, EventSource):
        check_time_column(spark, frame, source.known_at, f"{field}.known_at")
    if column is None or column not in frame.columns:
        return frame.withColumn(TIME, F.lit(None).cast("long"))
    return frame.withColumn(TIME, time_millis(column, frame.schema[column].dataType))


def load_events(spark: SparkSession, source: EventSource, field: str = "source") -> DataFrame:
    """Return an event source as a DataFrame with :data:`TIME`; ``field`` names it in errors."""
    return load(spark, source, source.table, field)
