"""What every executor does with a feature: its aggregator, its values, its output fields.

Shared by the executors of this package (none of them owns it): a feature's aggregator
(:func:`build_aggregator`), the values it folds out of an Arrow table of events
(:func:`feature_values`, :func:`kept_feature_values`), its output column's Spark type
(:func:`feature_fields`, :func:`output_schema`), and the name its results are refused
under (:func:`finalizing`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from timetile.core.aggregators import Aggregator, Bucketed, bucketed_values, make_aggregator
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.aggregators.base import refused as named
from timetile.core.types import ValueType
from timetile.offline.plan import Feature, PartPlan
from timetile.spark.result_types import spark_type
from timetile.spark.sources import TIME


def op_aggregator(feature: Feature) -> Aggregator[Any]:
    """Return the aggregator of a feature's op, without its buckets."""
    aggregation = feature.aggregation
    return make_aggregator(aggregation.op, feature.input_type, **aggregation.params)


def build_aggregator(feature: Feature) -> Aggregator[Any]:
    """Return the aggregator of one feature: :class:`Bucketed` around the op's if bucketed."""
    aggregator = op_aggregator(feature)
    return aggregator if feature.bucket is None else Bucketed(aggregator)


def refused(feature: Feature, error: ResultOverflowError) -> ResultOverflowError:
    """Return ``error`` (a result its op refuses: an int sum past int64) naming ``feature``.

    :func:`timetile.core.aggregators.base.refused`, with the feature's name and column.
    """
    return named(feature.name, feature.aggregation.column, error)


@contextmanager
def finalizing(feature: Feature) -> Iterator[None]:
    """Raise a result ``feature``'s op refuses with the feature's name (:func:`refused`)."""
    try:
        yield
    except ResultOverflowError as error:
        raise refused(feature, error) from None


def _numpy(column: pa.ChunkedArray | pa.Array, value_type: ValueType) -> np.ndarray:
    values: np.ndarray = column.to_numpy(zero_copy_only=False)
    if value_type.numeric or value_type is ValueType.BOOL:
        values = values.astype(value_type.numpy_dtype, copy=False)
    return values


def feature_values(events: pa.Table, feature: Feature,
                   times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the values that a feature's aggregator folds, with their times.

    Rows with a null value are dropped; for a bucketed feature, rows with a null bucket too,
    and the values come paired with their buckets (:func:`bucketed_values`).
    """
    values, kept = kept_feature_values(events, feature)
    return values, times[kept]


def kept_feature_values(events: pa.Table, feature: Feature) -> tuple[np.ndarray, np.ndarray]:
    """Return the values a feature folds (as :func:`feature_values`) and which rows gave them.

    The second array is a boolean mask over ``events``' rows: the rows
    :func:`feature_values` keeps. O(rows), vectorized.
    """
    column = events.column(feature.aggregation.column)
    kept = pc.is_valid(column)
    if feature.bucket is not None:
        buckets = events.column(feature.bucket)
        kept = pc.and_(kept, pc.is_valid(buckets))
    values = _numpy(pc.filter(column, kept), feature.input_type)
    if feature.bucket is not None:
        kept_buckets = pc.filter(buckets, kept).to_numpy(zero_copy_only=False)
        values = bucketed_values(kept_buckets, values, feature.input_type)
    return values, kept.to_numpy(zero_copy_only=False)


def feature_fields(features: Sequence[Feature]) -> list[T.StructField]:
    """Return one nullable output field per feature, in order."""
    return [T.StructField(feature.name, spark_type(build_aggregator(feature).result_type()),
                          nullable=True) for feature in features]


def output_schema(plan: PartPlan, queries: DataFrame) -> T.StructType:
    """Keys and time of the queries, then one column per feature."""
    return T.StructType([*(queries.schema[name] for name in (*plan.keys, TIME)),
                         *feature_fields(plan.features)])
