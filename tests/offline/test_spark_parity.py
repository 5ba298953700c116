"""Every op's finalize equals Spark SQL's own function on the same values, wherever Spark has one.

One Spark query per value type computes the Spark side for a few hundred random groups at
once (nulls, NaN, ±inf, -0.0, ties, duplicates, one-value and constant groups); the same
values go through timetile's aggregators, cut into random batches and merged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.core.aggregators import make_aggregator
from timetile.core.types import ValueType
from timetile.testing import same_value

#: op → Spark SQL over columns t (time) and v (value), by group g.
SPARK_EQUIVALENTS = {
    "count": "count(v)",
    "sum": "sum(v)",
    "avg": "avg(v)",
    "min": "min(v)",
    "max": "max(v)",
    "variance": "var_samp(v)",
    "stddev": "stddev_samp(v)",
    "skew": "skewness(v)",
    "kurtosis": "kurtosis(v)",
    "unique_count": "count(DISTINCT v)",
    "first": "min_by(v, struct(t, v)) FILTER (WHERE v IS NOT NULL)",
    "last": "max_by(v, struct(t, v)) FILTER (WHERE v IS NOT NULL)",
}
NUMERIC_ONLY = {"sum", "avg", "variance", "stddev", "skew", "kurtosis"}

SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308, -1e308, 5e-324]


def random_groups(value_type: ValueType, seed: int, groups: int = 300) -> list[tuple]:
    """Rows (g, t, v) with every edge case the contract names."""
    rng = np.random.default_rng(seed)
    rows: list[tuple] = []
    for group in range(groups):
        size = int(rng.choice([0, 1, 2, 3, 5, 20, 60]))
        times = rng.integers(0, 8, size=size).tolist()  # few distinct times: many ties
        constant = rng.random() < 0.1
        for index, time in enumerate(times):
            rows.append((group, int(time), _value(value_type, rng, constant, index)))
        if size == 0:
            rows.append((group, 0, None))  # a group of nulls only: an empty window
    return rows


def _float(rng: np.random.Generator) -> float:
    if rng.random() < 0.05:
        return SPECIAL_FLOATS[int(rng.integers(len(SPECIAL_FLOATS)))]
    return float(np.round(rng.normal(0, 100), int(rng.integers(0, 4))))


#: value type → (the value of constant groups, a random value).
MAKERS = {
    ValueType.INT: (7, lambda rng: int(rng.integers(-1_000, 1_000))),
    ValueType.FLOAT: (0.1, _float),
    ValueType.STRING: ("x", lambda rng: str(rng.choice(["", "a", "b", "ab", "é", "日本", "Z"]))),
    ValueType.BOOL: (True, lambda rng: bool(rng.random() < 0.5)),
}


def _value(value_type: ValueType, rng: np.random.Generator, constant: bool, index: int) -> Any:
    if rng.random() < 0.15:
        return None
    constant_value, random_value = MAKERS[value_type]
    return constant_value if constant else random_value(rng)


SPARK_TYPES = {
    ValueType.INT: T.LongType(),
    ValueType.FLOAT: T.DoubleType(),
    ValueType.STRING: T.StringType(),
    ValueType.BOOL: T.BooleanType(),
}


def timetile_result(op: str, value_type: ValueType, rows: list[tuple], seed: int) -> Any:
    aggregator = make_aggregator(op, value_type)
    kept = [(t, v) for _, t, v in rows if v is not None]
    times = np.array([t for t, _ in kept], dtype=np.int64)
    values = np.array([v for _, v in kept], dtype=value_type.numpy_dtype)
    cuts = sorted(np.random.default_rng(seed).integers(0, len(kept) + 1, size=2).tolist())
    state = aggregator.init()
    for low, high in zip([0, *cuts], [*cuts, len(kept)], strict=True):
        state = aggregator.merge(state, aggregator.fold(values[low:high], times[low:high]))
    return aggregator.finalize(state)


@pytest.mark.parametrize("value_type", list(ValueType), ids=lambda v: v.value)
def test_finalize_equals_spark(spark: Any, value_type: ValueType) -> None:
    rows = random_groups(value_type, seed=list(ValueType).index(value_type))
    schema = T.StructType([
        T.StructField("g", T.LongType()),
        T.StructField("t", T.LongType()),
        T.StructField("v", SPARK_TYPES[value_type]),
    ])
    ops = {op: sql for op, sql in SPARK_EQUIVALENTS.items()
           if value_type.numeric or op not in NUMERIC_ONLY}
    if value_type is ValueType.BOOL:
        ops.pop("sum", None)
    frame = spark.createDataFrame(rows, schema)
    spark_rows = frame.groupBy("g").agg(
        *[F.expr(sql).alias(op) for op, sql in ops.items()]
    ).collect()
    by_group: dict[int, list[tuple]] = {}
    for row in rows:
        by_group.setdefault(row[0], []).append(row)
    mismatches = []
    for spark_row in spark_rows:
        group_rows = by_group[spark_row["g"]]
        for op in ops:
            ours = timetile_result(op, value_type, group_rows, seed=spark_row["g"])
            if not same_value(ours, spark_row[op]):
                mismatches.append((op, spark_row["g"], ours, spark_row[op],
                                   [v for _, _, v in group_rows][:8]))
    assert len(spark_rows) == len(by_group)
    assert not mismatches, "\n".join(map(repr, mismatches[:20]))
