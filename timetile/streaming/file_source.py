"""The embedded default event source of a stream: a directory that files land in.

Spark's file stream source lists the directory each trigger and reads the files it has not
read yet, oldest modification time first; the checkpoint remembers which files it read, so
a restart neither skips nor rereads one. A file must be complete when it appears: write it
elsewhere and move it in (a rename is atomic on one filesystem). Its modification time may
be up to :data:`MAX_FILE_AGE` older than the newest file's.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from timetile.api.errors import DefinitionError
from timetile.spark.sources import UTC_ZONES, quote

#: Landed files' modification times count from here (any fixed past time will do).
_MTIME_BASE = 1_700_000_000
#: How much older than the newest file a landed file may be and still be read: Spark's
#: checkpoint forgets the files older than this, so it bounds its list of files read.
MAX_FILE_AGE = "3650d"
#: The column that holds a JSON line Spark could not read whole (malformed, or a value of the
#: wrong type): the job reads such a line as a row of nulls, counted as unusable.
CORRUPT = "_tt_corrupt"
#: True on the rows of a line the source could not read whole (:func:`flag_malformed`).
MALFORMED = "_tt_malformed"
#: The file formats a directory source reads.
FORMATS = ("json", "parquet")
#: The epoch milliseconds a timestamp (microseconds in an int64) holds, either side of 0.
_TIMESTAMP_MILLIS = (2**63 - 1) // 1_000


def _is_timestamp(data_type: DataType) -> bool:
    return isinstance(data_type, (TimestampType, TimestampNTZType))


def holds_timestamps(data_type: DataType) -> bool:
    """Whether a type is or holds (in a struct, array or map) a timestamp."""
    if _is_timestamp(data_type):
        return True
    if isinstance(data_type, StructType):
        return any(holds_timestamps(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return holds_timestamps(data_type.elementType)
    if isinstance(data_type, MapType):
        return holds_timestamps(data_type.keyType) or holds_timestamps(data_type.valueType)
    return False


def _as_text(data_type: DataType) -> DataType:
    """Return the type with each timestamp in it, at any depth, read as text."""
    if _is_timestamp(data_type):
        return StringType()
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _as_text(f.dataType), f.nullable)
                           for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_as_text(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(_as_text(data_type.keyType), _as_text(data_type.valueType),
                       data_type.valueContainsNull)
    return data_type


def text_schema(spark: SparkSession, schema: StructType, source: str) -> StructType:
    """Return ``schema`` with its timestamps, at any depth, read as text.

    :func:`read_texts` reads them back. Spark's JSON reader reads a number as epoch
    *seconds*, and text without an offset in the session time zone; timetile reads a time as
    the batch side holds it: digits as epoch milliseconds, text without an offset as UTC.
    No job runs.

    Raises:
        DefinitionError: the schema holds a timestamp and the session time zone is not UTC
            (``source`` names the stream source).

    """
    stamps = [f.name for f in schema.fields if holds_timestamps(f.dataType)]
    zone = spark.conf.get("spark.sql.session.timeZone") or ""
    if stamps and zone not in UTC_ZONES:
        raise DefinitionError.single(
            "stream", "source", f"{source} reads the timestamp columns {stamps} from text, "
            f"which Spark reads in the session time zone {zone}, not UTC",
            "set spark.sql.session.timeZone to UTC for the stream")
    return StructType([StructField(f.name, _as_text(f.dataType), f.nullable)
                       for f in schema.fields])


def read_text(text: Column, data_type: DataType) -> Column:
    """Read a field's text as ``data_type``, null where it does not parse.

    A timestamp reads digits as epoch milliseconds (those a timestamp's microseconds hold),
    and other text as Spark casts it to an instant (in a UTC session: :func:`text_schema`),
    its offset or zone honoured: a ``timestamp_ntz`` then holds the instant's UTC wall clock,
    as the batch side reads one, where Spark's own cast would drop the offset.
    """
    if _is_timestamp(data_type):
        millis = text.try_cast("long")
        held = millis.between(-_TIMESTAMP_MILLIS, _TIMESTAMP_MILLIS)
        # the cast to timestamp_ntz refuses a time of day alone (08:30:00), which the cast
        # to timestamp would put on the day the batch runs
        dated = text.try_cast(TimestampNTZType()).isNotNull()
        return F.when(text.rlike("^-?[0-9]+$"), F.when(
            held, F.timestamp_millis(millis).try_cast(data_type))).otherwise(
            F.when(dated, text.try_cast(TimestampType()).try_cast(data_type)))
    return text.try_cast(data_type)


def read_texts(value: Column, data_type: DataType) -> Column:
    """Return a value of :func:`text_schema`'s type as ``data_type``.

    Each timestamp in it, at any depth, is read by :func:`read_text`; the rest is unchanged.
    """
    if not holds_timestamps(data_type):
        return value
    if _is_timestamp(data_type):
        return read_text(value, data_type)
    if isinstance(data_type, StructType):
        rebuilt = F.struct(*[read_texts(value.getField(f.name), f.dataType).alias(f.name)
                             for f in data_type.fields])
        return F.when(value.isNotNull(), rebuilt)
    if isinstance(data_type, ArrayType):
        element = data_type.elementType
        return F.transform(value, lambda item: read_texts(item, element))
    assert isinstance(data_type, MapType)
    keys, values = data_type.keyType, data_type.valueType
    value = F.transform_keys(value, lambda key, _: read_texts(key, keys))
    return F.transform_values(value, lambda _, item: read_texts(item, values))


def read_columns(found: Sequence[Column], schema: StructType,
                 read: Callable[[Column, DataType], Column]) -> tuple[list[Column], Column]:
    """Read each column of ``schema`` from what a source found for it, with ``read``.

    Returns the columns, named, and whether any was given but could not be read (text its
    column's type cannot read: ``abc`` for a double, ``08:30`` for a timestamp), which makes
    the event unusable rather than a null. A timestamp nested in a struct, array or map that
    cannot be read is a null in its place.
    """
    values = [read(column, f.dataType) for column, f in zip(found, schema.fields, strict=True)]
    unread = functools.reduce(operator.or_, [column.isNotNull() & value.isNull()
                                             for column, value in zip(found, values, strict=True)
                                             if value is not column],  # read as it came
                              F.lit(False))
    return [value.alias(f.name) for value, f in zip(values, schema.fields, strict=True)], unread


def flag_malformed(raw: DataFrame) -> DataFrame:
    """Return a stream's rows with :data:`MALFORMED` in place of :data:`CORRUPT`.

    The columns of a line the source could not read whole are all null, and the flag true:
    such a row passes every ``where`` so that it is counted, never filtered away. A stream
    without :data:`CORRUPT` (Parquet, Redis) gets the flag false. No job runs.
    """
    if CORRUPT not in raw.columns:
        return raw.withColumn(MALFORMED, F.lit(False))
    return raw.select(*[F.when(F.col(CORRUPT).isNull(), F.col(quote(column))).alias(column)
                        for column in raw.columns if column != CORRUPT],
                      F.col(CORRUPT).isNotNull().alias(MALFORMED))


@dataclass(frozen=True)
class FileSource:
    """Events as files in a directory: JSON lines or Parquet.

    Each JSON line is one event, an object of the source's raw columns (before its
    ``select``); a malformed line, or one with a value of the wrong type (``"amount": "abc"``
    for a double), reads as a row of nulls, counted as unusable by the job.
    Times are what the batch source holds: epoch ms, or ISO-8601 strings. For a timestamp
    column a JSON number is epoch milliseconds and text without an offset is UTC, as the
    batch side reads them (Spark's own reader would take seconds and the session zone).

    Args:
        path: the directory (any path Spark reads: local, ``s3a://``, ``hdfs://``).
        format: ``json`` (JSON lines) or ``parquet``.
        max_files_per_trigger: read at most this many new files per micro-batch; None: all.

    >>> FileSource("/data/events", "csv")
    Traceback (most recent call last):
    ValueError: file source format 'csv': use json or parquet

    """

    path: str
    format: str = "json"
    max_files_per_trigger: int | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"file source format {self.format!r}: use {' or '.join(FORMATS)}")
        if self.max_files_per_trigger is not None and self.max_files_per_trigger < 1:
            raise ValueError(f"max_files_per_trigger {self.max_files_per_trigger}: use 1 or "
                             "more, or None for every new file")

    def read_stream(self, spark: SparkSession, schema: StructType) -> DataFrame:
        """Return the directory as a streaming DataFrame of ``schema``'s columns. No job runs.

        Raises:
            DefinitionError: JSON lines with timestamp columns, outside a UTC session
                (:func:`text_schema`).

        """
        wanted = schema
        if self.format == "json":  # a line with a value of the wrong type is kept whole
            schema = StructType([*text_schema(spark, schema, self.describe()).fields,
                                 StructField(CORRUPT, StringType())])
        # Spark skips a file more than maxFileAge (7 days by default) older than the newest
        # it has seen: a file landed with an old modification time (copied from an archive,
        # written long before its rename) would be lost without a count.
        reader = (spark.readStream.schema(schema).format(self.format)
                  .option("maxFileAge", MAX_FILE_AGE))
        if self.format == "json":
            reader = reader.option("columnNameOfCorruptRecord", CORRUPT)
        if self.max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", str(self.max_files_per_trigger))
        frame = reader.load(self.path)
        if self.format == "json":
            found = [F.col(quote(f.name)) for f in wanted.fields]
            columns, unread = read_columns(found, wanted, read_texts)
            frame = frame.select(*columns, F.coalesce(F.col(CORRUPT), F.when(
                unread, F.to_json(F.struct(*found)))).alias(CORRUPT))
        return frame

    def describe(self) -> str:
        """Name the source in logs and messages."""
        return f"dir:{self.path} ({self.format})"


def land_json_lines(folder: Path, rows: Sequence[Mapping[str, Any]], files: int, *,
                    first: int = 0, spacing_s: float = 10.0) -> list[Path]:
    """Land ``rows`` in ``folder`` as ``files`` JSON-lines files, in order, as a producer should.

    Each file is written beside the folder and moved in when complete (a rename: readers
    never see half a file); files are named ``events-{n:04d}.json`` from ``first`` on, and
    their modification times are ``spacing_s`` apart, so the file source reads them in this
    order. NaN and infinities are written as ``NaN`` / ``Infinity``, which Spark's JSON
    reader takes. O(rows).
    """
    folder.mkdir(parents=True, exist_ok=True)
    size = max(1, math.ceil(len(rows) / files))
    landed = []
    for index in range(files):
        chunk = rows[index * size:(index + 1) * size]
        path = folder / f"events-{first + index:04d}.json"
        scratch = folder.parent / f".{folder.name}-{path.name}.tmp"
        scratch.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in chunk),
                           encoding="utf-8")
        moment = _MTIME_BASE + spacing_s * (first + index)
        os.utime(scratch, (moment, moment))
        scratch.rename(path)
        landed.append(path)
    return landed
