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
        TypeError: a column's type has no Arrow form.
        AssertionError: PySpark's answer for some nested types (a timestamp in a map).

    """
    zone = "UTC" if cogrouped else spark.conf.get("spark.sql.session.timeZone")
    return to_arrow_schema(schema, timezone=zone)
