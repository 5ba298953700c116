"""Spark and Arrow types of aggregation results, from the core's engine-free descriptions."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from timetile.core.aggregators import Aggregator
from timetile.core.types import ResultType, Shape, ValueType

_SPARK_SCALARS: dict[ValueType, T.DataType] = {
    ValueType.INT: T.LongType(),
    ValueType.FLOAT: T.DoubleType(),
    ValueType.STRING: T.StringType(),
    ValueType.BOOL: T.BooleanType(),
}


def spark_type(result: ResultType) -> T.DataType:
    """Return the Spark type of a result. Integral results are ``bigint``, floating ``double``."""
    element = _SPARK_SCALARS[result.element]
    if result.shape is Shape.ARRAY:
        return T.ArrayType(element, containsNull=False)
    if result.shape is Shape.MAP:
        assert result.key is not None
        return T.MapType(_SPARK_SCALARS[result.key], element, valueContainsNull=False)
    return element


def arrow_column(aggregator: Aggregator[Any], results: list[Any]) -> pa.Array:
    """Return finalized results as an Arrow array of the op's result type."""
    arrow_type = to_arrow_type(spark_type(aggregator.result_type()))
    if aggregator.result_type().shape is Shape.MAP:
        results = [None if value is None else list(value.items()) for value in results]
    return pa.array(results, type=arrow_type)
