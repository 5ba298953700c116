"""What every executor does with a feature: its aggregator, its values, its output fields.

Shared by the executors of this package (none of them owns it): a feature's aggregator
(:func:`build_aggregator`), the values it folds out of an Arrow table of events
(:func:`feature_values`), its output column's Spark type (:func:`feature_fields`,
:func:`output_schema`), and the name its results are refused under (:func:`finalizing`).
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


def non_null(column: pa.ChunkedArray | pa.Array, times: np.ndarray,
             value_type: ValueType) -> tuple[np.ndarray, np.ndarray]:
    """Return the non-null values of an Arrow column as numpy, with their times."""
    valid = pc.is_valid(column)
    kept = pc.filter(column, valid)
    values = kept.to_numpy(zero_copy_only=False)
    if value_type.numeric or value_type is ValueType.BOOL:
        values = values.astype(value_type.numpy_dtype, copy=False)
    mask = valid.to_numpy(zero_copy_only=False)
    return values, times[mask]


def feature_values(events: pa.Table, feature: Feature,
                   times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the values that a feature's aggregator folds, with their times.

    Rows with a null value are dropped; for a bucketed feature, rows with a null bucket too,
    and the values come paired with their buckets (:func:`bucketed_values`).
    """
    column = events.column(feature.aggregation.column)
    if feature.bucket is None:
        return non_null(column, times, feature.input_type)
    buckets = events.column(feature.bucket)
    both = pc.and_(pc.is_valid(column), pc.is_valid(buckets))
    values, kept_times = non_null(pc.filter(column, both), times[both.to_numpy(
        zero_copy_only=False)], feature.input_type)
    kept_buckets = pc.filter(buckets, both).to_numpy(zero_copy_only=False)
    return bucketed_values(kept_buckets, values, feature.input_type), kept_times


def feature_fields(features: Sequence[Feature]) -> list[T.StructField]:
    """Return one nullable output field per feature, in order."""
    return [T.StructField(feature.name, spark_type(build_aggregator(feature).result_type()),
                          nullable=True) for feature in features]


def output_schema(plan: PartPlan, queries: DataFrame) -> T.StructType:
    """Keys and time of the queries, then one column per feature."""
    return T.StructType([*(queries.schema[name] for name in (*plan.keys, TIME)),
                         *feature_fields(plan.features)])
