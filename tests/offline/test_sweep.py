"""The sorted sweep equals the oracle for count, sum, avg, min and max, on every window kind."""

from __future__ import annotations

from typing import Any

import pytest

import timetile as tt
from timetile.testing import (
    naive_backfill,
    random_events,
    random_queries,
    same_value,
    to_spark,
)

pytestmark = pytest.mark.spark

WINDOWS = ["1h", "1d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="6h", kind="hopping")]


def test_the_sweep_equals_the_oracle(spark: Any) -> None:
    table = random_events(900, 20, seed=31, days=3)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 150, seed=32, window_lengths=("1h", "1d")))
    aggregations = [tt.Aggregation(column, op, windows=windows)
                    for op in ("count", "sum", "avg", "min", "max")
                    for column in ("amount", "quantity")
                    for windows in (WINDOWS, None)]
    aggregations.append(tt.Aggregation("item", "count", windows=["1d"]))
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"], aggregations)
    join = tt.Join("sweep", tt.EventSource(queries), [group_by])
    job = tt.BackfillJob(join, spark)
    ours = job.dataframe().orderBy("user_id", "ts", "label").collect()
    assert job.report.path == "s: sweep"
    theirs = naive_backfill(join, spark).orderBy("user_id", "ts", "label").collect()
    assert len(ours) == len(theirs) == 150
    bad = [(column, mine["user_id"], mine["ts"], mine[column], oracle[column])
           for mine, oracle in zip(ours, theirs, strict=True)
           for column in join.output_columns() if not same_value(mine[column], oracle[column])]
    assert not bad, bad[:10]


def test_huge_integers_sum_exactly(spark: Any) -> None:
    big = 2**62
    events = spark.createDataFrame([(1, 1, big), (1, 2, big), (1, 3, -big), (1, 4, 5)],
                                   "user_id long, ts long, quantity long")
    queries = spark.createDataFrame([(1, 4), (1, 5)], "user_id long, ts long")
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("quantity", op) for op in ("sum", "max", "min")])
    join = tt.Join("big", tt.EventSource(queries), [group_by])
    rows = {row["ts"]: row for row in tt.backfill(join, spark, executor="sweep").collect()}
    assert rows[4]["s_quantity_sum"] == big
    assert rows[5]["s_quantity_sum"] == big + 5
    assert rows[5]["s_quantity_max"] == big
    assert rows[5]["s_quantity_min"] == -big
