"""Spark and Arrow types of aggregation results, from the core's engine-free descriptions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type

from timetile.core.aggregators import Aggregator
from timetile.core.types import ResultType, Shape, ValueType

_SPARK_SCALARS: dict[ValueType, T.DataType] = {
    ValueType.INT: T.LongType(),
    ValueType.FLOAT: T.DoubleType(),
    ValueType.STRING: T.StringType(),
    ValueType.BOOL: T.BooleanType(),
}


def spark_type(result: ResultType) -> T.DataType:
    """Return the Spark type of a result. Integral results are ``bigint``, floating ``double``.

    A bucketed result is ``map<string, T>`` for the op's type ``T``; its values may be null.
    """
    if result.bucketed:
        inner = spark_type(replace(result, bucketed=False))
        return T.MapType(T.StringType(), inner, valueContainsNull=True)
    element = _SPARK_SCALARS[result.element]
    if result.shape is Shape.ARRAY:
        return T.ArrayType(element, containsNull=False)
    if result.shape is Shape.MAP:
        assert result.key is not None
        return T.MapType(_SPARK_SCALARS[result.key], element, valueContainsNull=False)
    return element


def arrow_value(result: Any) -> Any:
    """Return a finalized result as Arrow builds it: maps (nested ones too) as item lists."""
    if isinstance(result, dict):
        return [(key, arrow_value(value)) for key, value in result.items()]
    return result


def arrow_column(aggregator: Aggregator[Any], results: list[Any]) -> pa.Array:
    """Return finalized results as an Arrow array of the op's result type."""
    arrow_type = to_arrow_type(spark_type(aggregator.result_type()))
    return pa.array([arrow_value(value) for value in results], type=arrow_type)


def arrow_schema(schema: T.StructType, spark: SparkSession, *,
                 cogrouped: bool = False) -> pa.Schema:
    """Return the Arrow schema Spark exchanges ``schema``'s rows in.

    With ``mapInArrow``, timestamps carry the session's time zone, as Spark's Arrow batches
    do; with a cogroup's ``applyInArrow`` (``cogrouped``), UTC, whatever the session's zone.

    Raises:
        TypeError: a column's type has no Arrow form (see :func:`arrow_transportable`, which
            says so without trying).

    """
    zone = "UTC" if cogrouped else spark.conf.get("spark.sql.session.timeZone")
    return to_arrow_schema(schema, timezone=zone)


#: The Spark types that cross between the JVM and Python as Arrow, by PySpark's own mapping
#: (``pyspark.sql.pandas.types.to_arrow_type``): atomic types here, and arrays, maps, structs
#: and user-defined types of them. Not among them: ``CalendarIntervalType`` and
#: ``YearMonthIntervalType``, among others; a left row holding one cannot ride through Python.
ARROW_ATOMIC_TYPES: tuple[type[T.DataType], ...] = tuple(
    getattr(T, name) for name in (
        "NullType", "BooleanType", "ByteType", "ShortType", "IntegerType", "LongType",
        "FloatType", "DoubleType", "DecimalType", "StringType", "BinaryType", "DateType",
        "TimestampType", "TimestampNTZType", "DayTimeIntervalType", "TimeType", "VariantType",
        "GeometryType", "GeographyType")
    if hasattr(T, name))  # the newer ones by the PySpark version's own names


def arrow_transportable(data_type: T.DataType) -> bool:
    """Whether a column of ``data_type`` can cross into Python as Arrow (see the table above).

    Declared, not tried: nested types are checked member by member. O(size of the type).
    """
    if isinstance(data_type, T.StructType):
        return all(arrow_transportable(field.dataType) for field in data_type.fields)
    if isinstance(data_type, T.ArrayType):
        return arrow_transportable(data_type.elementType)
    if isinstance(data_type, T.MapType):
        return arrow_transportable(data_type.keyType) and arrow_transportable(
            data_type.valueType)
    if isinstance(data_type, T.UserDefinedType):
        return arrow_transportable(data_type.sqlType())
    return isinstance(data_type, ARROW_ATOMIC_TYPES)
