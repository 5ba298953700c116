"""The core's time rules on Spark columns give what they give on arrays, bit for bit.

The tiled executor's plan computes window bounds, hop pieces and as-of times as Spark column
expressions (:mod:`timetile.spark.time_columns`); the kernels and the fetcher compute them
on arrays and ints. On times near both ends of int64, before and after the epoch, every
window kind and hop, the two agree.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from timetile.core.tiling.hops import split_windows, window_pieces
from timetile.core.windows import (
    ARRAYS,
    MAX_TIME,
    MIN_TIME,
    WindowKind,
    as_of,
    window_bounds,
    window_span,
)
from timetile.spark.time_columns import COLUMNS

MIN, MAX = int(MIN_TIME), int(MAX_TIME)
WINDOWS = [(WindowKind.SLIDING, 7_000, None), (WindowKind.SAWTOOTH, 9_000, 2_500),
           (WindowKind.HOPPING, 3_000, 3_000), (WindowKind.LIFETIME, None, None),
           (WindowKind.SLIDING, MAX // 2, None)]


def _times() -> list[int]:
    rng = random.Random(5)
    near = [MIN, MIN + 1, MIN + 6_999, MIN + 7_001, MAX, MAX - 1, -1, 0, 1, -2_500, 2_500]
    return near + [rng.randint(-10**13, 10**13) for _ in range(60)] + [
        rng.randint(MIN, MIN + 10**5) for _ in range(20)] + [
        rng.randint(MAX - 10**5, MAX) for _ in range(20)]


@pytest.mark.parametrize("hop", [1_000, 700, 86_400_000])
def test_bounds_pieces_and_as_of_on_columns_equal_arrays(spark: SparkSession, hop: int) -> None:
    times = _times()
    frame = spark.createDataFrame([(t,) for t in times], "q bigint")
    q = F.col("q")
    columns = []
    for index, window in enumerate(WINDOWS):
        start, end = window_span(COLUMNS, q, *window)
        cut = window_pieces(COLUMNS, start, end, hop)
        columns += [c.alias(f"{name}{index}") for name, c in (
            ("start", start), ("end", end), ("edge", cut.edge), ("edge_hop", cut.edge_hop),
            ("tail_lo", cut.tail_lo), ("tail_hi", cut.tail_hi), ("head", cut.head),
            ("head_hop", cut.head_hop), ("inner", cut.inner))]
    columns.append(as_of(COLUMNS, q, (86_400_000, hop)).alias("as_of"))
    rows = frame.select(q, *columns).collect()
    got = {row["q"]: row for row in rows}
    array = np.array(times, dtype=np.int64)
    for index, window in enumerate(WINDOWS):
        starts, ends = window_bounds(array, *window)
        cut = split_windows(starts, ends, hop)
        for name, values in (("start", starts), ("end", ends), ("edge", cut.edge),
                             ("edge_hop", cut.edge_hop), ("tail_lo", cut.tail_lo),
                             ("tail_hi", cut.tail_hi), ("head", cut.head),
                             ("head_hop", cut.head_hop), ("inner", cut.inner)):
            assert [got[t][f"{name}{index}"] for t in times] == values.tolist(), (name, window)
    expected = as_of(ARRAYS, array, (86_400_000, hop)).tolist()
    assert [got[t]["as_of"] for t in times] == expected
