"""The sorted sweep equals the oracle for each of its ops, on every window kind."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pyspark.sql import functions as F

import timetile as tt
from timetile.testing import (
    differing_cells,
    naive_backfill,
    random_events,
    random_queries,
    to_spark,
)

pytestmark = pytest.mark.spark

WINDOWS = ["1h", "1d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="6h", kind="hopping")]


def test_the_sweep_equals_the_oracle(spark: Any) -> None:
    table = random_events(900, 20, seed=31, days=3)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 150, seed=32, window_lengths=("1h", "1d")))
    aggregations = [tt.Aggregation(column, op, windows=windows)
                    for op in ("count", "sum", "avg", "min", "max", "variance", "stddev", "skew",
                               "kurtosis")
                    for column in ("amount", "quantity")
                    for windows in (WINDOWS, None)]
    aggregations.append(tt.Aggregation("item", "count", windows=["1d"]))
    # By value rank, every column type: NaN is one value and the largest, -0.0 is 0.0.
    aggregations += [tt.Aggregation(column, op, windows=windows)
                     for op in ("unique_count", "histogram")
                     for column in ("amount", "quantity", "item", "flag")
                     for windows in (WINDOWS, None)]
    aggregations += [tt.Aggregation(column, op, windows=windows, k=k)
                     for op in ("top_k", "bottom_k")
                     for column, k in (("amount", 3), ("item", 2), ("flag", 4), ("quantity", 1))
                     for windows in (WINDOWS, None)]
    # By event order, equal times by value: every column type, ties with NaN, -0.0 and 0.0
    # among them (random_events promises them at the start of day 2).
    aggregations += [tt.Aggregation(column, op, windows=windows)
                     for op in ("first", "last")
                     for column in ("amount", "quantity", "item", "flag")
                     for windows in (WINDOWS, None)]
    aggregations += [tt.Aggregation(column, op, windows=windows, k=k)
                     for op in ("first_k", "last_k")
                     for column, k in (("amount", 3), ("item", 2), ("flag", 4), ("quantity", 1))
                     for windows in (WINDOWS, None)]
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"], aggregations)
    join = tt.Join("sweep", tt.EventSource(queries), [group_by])
    job = tt.BackfillJob(join, spark).plan()
    ours = job.dataframe().orderBy("user_id", "ts", "label").collect()
    assert job.report.path == "s: sweep"
    theirs = naive_backfill(join, spark).orderBy("user_id", "ts", "label").collect()
    assert len(ours) == len(theirs) == 150
    bad = differing_cells(ours, theirs, join.output_columns())
    assert not bad, bad[:10]


def test_the_sweep_names_what_it_cannot_compute(spark: Any) -> None:
    events = spark.createDataFrame([(1, 1, 2.0)], "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, 2)], "user_id long, ts long")
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "last"),
        tt.Aggregation("amount", "approx_percentile", percentiles=[0.5])])
    join = tt.Join("no_sweep", tt.EventSource(queries), [group_by])
    with pytest.raises(ValueError, match="cannot compute approx_percentile of float"):
        tt.backfill(join, spark, executor="sweep")
    assert tt.BackfillJob(join, spark).plan().report.path == "s: sweep+interval_tree"  # half: split


def test_huge_integers_sum_exactly(spark: Any) -> None:
    big = 2**62
    events = spark.createDataFrame([(1, 1, big), (1, 2, big), (1, 3, -big), (1, 4, 5)],
                                   "user_id long, ts long, quantity long")
    queries = spark.createDataFrame([(1, 4), (1, 5)], "user_id long, ts long")
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("quantity", op) for op in ("sum", "avg", "max", "min")])
    join = tt.Join("big", tt.EventSource(queries), [group_by])
    rows = {row["ts"]: row for row in tt.backfill(join, spark, executor="sweep").collect()}
    assert rows[4]["s_quantity_sum"] == big
    assert rows[5]["s_quantity_sum"] == big + 5
    assert rows[5]["s_quantity_avg"] == float(big + 5) / 4  # from the same Python-int sums
    assert rows[5]["s_quantity_max"] == big
    assert rows[5]["s_quantity_min"] == -big


def test_an_integer_sum_past_int64_is_refused_by_name(spark: Any) -> None:
    """As Spark SQL's ARITHMETIC_OVERFLOW; it was a bare OverflowError from pyarrow."""
    events = spark.createDataFrame([(1, 1, 2**62), (1, 2, 2**62)],
                                   "user_id long, ts long, quantity long")
    queries = spark.createDataFrame([(1, 3)], "user_id long, ts long")
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("quantity", "sum", windows=["1d"])])
    join = tt.Join("big", tt.EventSource(queries), [group_by])
    with pytest.raises(Exception, match=r"s_quantity_sum_1d \(column 'quantity'\): an "
                       r"integer sum is past int64.*Fix: cast the column to double"):
        tt.backfill(join, spark, executor="sweep").collect()


def test_left_rows_ride_through_two_sweeps_unchanged(spark: Any) -> None:
    """Left rows pass through the sweep itself: duplicates, null times and null keys stay,
    a left column named like an event column keeps its own values, and two sweep parts
    with key mappings chain without a join back."""
    table = random_events(400, 12, seed=41, days=2)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 80, seed=42))
    left = (queries.withColumnRenamed("user_id", "guest_id")
            .withColumn("host_id", F.col("guest_id") + 1)
            .withColumn("amount", F.lit("left's own")))  # an event column's name
    spend = tt.GroupBy("spend", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", op, windows=["1h", "1d"]) for op in ("sum", "count", "max")])
    join = tt.Join("ride", tt.EventSource(left), [
        tt.JoinPart(spend, prefix="guest", key_mapping={"guest_id": "user_id"}),
        tt.JoinPart(spend, prefix="host", key_mapping={"host_id": "user_id"}),
    ])
    job = tt.BackfillJob(join, spark).plan()
    ours = job.dataframe()
    assert job.report.path == "guest_spend: sweep, host_spend: sweep"
    theirs = naive_backfill(join, spark)
    assert ours.columns == theirs.columns == [*left.columns, *join.output_columns()]
    assert ours.schema == theirs.schema  # the shared key and time come back as they were
    order = ["guest_id", "ts", "label"]
    mine, oracle = ours.orderBy(*order).collect(), theirs.orderBy(*order).collect()
    assert len(mine) == len(oracle) == 80
    assert any(row["ts"] is None for row in mine)
    assert any(row["guest_id"] is None for row in mine)
    assert {row["amount"] for row in mine} == {"left's own"}
    bad = differing_cells(mine, oracle, ours.columns)
    assert not bad, bad[:5]


def test_left_columns_of_other_types_ride_through_unchanged(spark: Any) -> None:
    """The sweep sends a left key of the events' key type and a millisecond time column
    once, as its own key and time; a key of another type and a timestamp time are copied
    instead. Either way every left column comes back with its type and values."""
    table = random_events(300, 8, seed=51, days=2)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 60, seed=52))
    left = (queries.withColumn("guest_id", F.col("user_id").cast("int"))
            .withColumn("ts", F.timestamp_millis("ts")))
    spend = tt.GroupBy("spend", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", op, windows=["1d"]) for op in ("sum", "max")])
    join = tt.Join("types", tt.EventSource(left), [
        tt.JoinPart(spend, prefix="guest", key_mapping={"guest_id": "user_id"}),
        tt.JoinPart(spend, prefix="user")])
    job = tt.BackfillJob(join, spark).plan()
    ours = job.dataframe()
    assert job.report.path == "guest_spend: sweep, user_spend: sweep"
    theirs = naive_backfill(join, spark)
    assert ours.schema == theirs.schema
    assert ours.schema["guest_id"].dataType == left.schema["guest_id"].dataType
    order = ["user_id", "ts", "label"]
    mine, oracle = ours.orderBy(*order).collect(), theirs.orderBy(*order).collect()
    assert len(mine) == len(oracle) == 60
    assert any(row["ts"] is None for row in mine)
    bad = differing_cells(mine, oracle, ours.columns)
    assert not bad, bad[:5]


def test_events_without_values_add_nothing_and_are_no_queries(spark: Any) -> None:
    """The sweep tells queries from events by their values: an event whose every read
    column is null must neither count nor come back as a row, wherever it sits."""
    events = spark.createDataFrame(
        [(1, 10, None, None), (1, 20, 2.0, None), (1, 30, None, "a"), (1, 40, None, None),
         (2, 10, None, None), (2, 25, None, None), (3, 5, float("nan"), None)],
        "user_id long, ts long, amount double, item string")
    queries = spark.createDataFrame(
        [(1, 10), (1, 20), (1, 40), (1, 41), (2, 25), (2, 26), (3, 6), (4, 1)],
        "user_id long, ts long")
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", op, windows=["1d"]) for op in ("count", "sum", "max")]
        + [tt.Aggregation("item", "count")])
    join = tt.Join("nulls", tt.EventSource(queries), [group_by])
    job = tt.BackfillJob(join, spark).plan()
    ours = job.dataframe().orderBy("user_id", "ts").collect()
    assert job.report.path == "s: sweep"
    theirs = naive_backfill(join, spark).orderBy("user_id", "ts").collect()
    assert len(ours) == len(theirs) == 8
    bad = differing_cells(ours, theirs, join.output_columns())
    assert not bad, bad
    counts = {(row["user_id"], row["ts"]): row["s_amount_count_1d"] for row in ours}
    assert (counts[(1, 41)], counts[(2, 26)], counts[(3, 6)]) == (1, 0, 1)


def test_event_order_ops_break_ties_by_value(spark: Any) -> None:
    """``first``/``last`` and their ``_k`` forms: by time, equal times by value (NaN largest),
    ``-0.0`` read as ``0.0``, an empty window null."""
    nan = float("nan")
    events = spark.createDataFrame(
        [(1, 10, 2.0, "b"), (1, 10, nan, "a"), (1, 10, -1.0, "c"), (1, 20, -0.0, "z"),
         (2, 5, 1.0, None)],
        "user_id long, ts long, amount double, item string")
    queries = spark.createDataFrame([(1, 11), (1, 21), (1, 10), (2, 6)], "user_id long, ts long")
    group_by = tt.GroupBy("s", tt.EventSource(events), ["user_id"], [
        *[tt.Aggregation(column, op) for op in ("first", "last")
          for column in ("amount", "item")],
        *[tt.Aggregation(column, op, k=2) for op in ("first_k", "last_k")
          for column in ("amount", "item")]])
    join = tt.Join("ties", tt.EventSource(queries), [group_by])
    rows = {(row["user_id"], row["ts"]): row.asDict()
            for row in tt.backfill(join, spark, executor="sweep").collect()}
    at_11 = rows[(1, 11)]  # the three events at 10, in value order: -1.0, 2.0, NaN
    assert (at_11["s_amount_first"], at_11["s_item_first"]) == (-1.0, "a")
    assert math.isnan(at_11["s_amount_last"])
    assert at_11["s_item_last"] == "c"
    assert at_11["s_amount_first_k"] == [-1.0, 2.0]
    assert at_11["s_item_last_k"] == ["c", "b"]
    at_21 = rows[(1, 21)]
    assert at_21["s_amount_last"] == 0.0
    assert math.copysign(1.0, at_21["s_amount_last"]) == 1.0
    assert at_21["s_amount_last_k"][0] == 0.0
    assert math.isnan(at_21["s_amount_last_k"][1])
    assert at_21["s_item_first_k"] == ["a", "b"]
    empty = rows[(1, 10)]  # no event before 10
    assert all(empty[f"s_{c}_{op}"] is None for c in ("amount", "item")
               for op in ("first", "last", "first_k", "last_k"))
    assert rows[(2, 6)]["s_item_last"] is None
    assert rows[(2, 6)]["s_amount_last_k"] == [1.0]
    ours = tt.backfill(join, spark, executor="sweep").orderBy("user_id", "ts").collect()
    theirs = naive_backfill(join, spark).orderBy("user_id", "ts").collect()
    assert not differing_cells(ours, theirs, join.output_columns())  # -0.0 equals 0.0 there


def test_left_rows_arrow_cannot_carry_are_swept_as_queries_and_joined_back(spark: Any) -> None:
    """A left column of a type Arrow lacks (an interval) cannot ride through Python: the
    part's distinct queries are swept instead and the features joined back; the column,
    duplicates and all, comes back unchanged, and every feature is the ridden one's."""
    table = random_events(300, 8, seed=61, days=2)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 50, seed=62))
    left = queries.unionAll(queries.limit(5)).withColumn(
        "wait", F.expr("make_interval(0, 0, 0, 1, 2, 0, 0)"))
    spend = tt.GroupBy("spend", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", op, windows=["1d"]) for op in ("sum", "last")])
    job = tt.BackfillJob(tt.Join("waits", tt.EventSource(left), [spend]), spark).plan()
    assert job.report.path == "spend: sweep"
    ours = job.dataframe().withColumn("wait", F.col("wait").cast("string"))
    ridden = tt.backfill(tt.Join("waits", tt.EventSource(left.drop("wait")), [spend]), spark)
    assert ours.count() == ridden.count() == 55
    assert {row["wait"] for row in ours.select("wait").collect()} == {"1 days 2 hours"}
    assert ours.drop("wait").exceptAll(ridden).count() == 0
    assert ridden.exceptAll(ours.drop("wait")).count() == 0
