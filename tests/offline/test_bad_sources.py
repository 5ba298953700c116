"""Bad source expressions, reserved names and time zones fail before any job, naming the fix."""

from __future__ import annotations

from typing import Any

import pytest

import timetile as tt

pytestmark = pytest.mark.spark


def join_over(spark: Any, events: Any, **source: Any) -> tt.Join:
    queries = spark.createDataFrame([(1, 10)], "user_id long, ts long")
    group_by = tt.GroupBy("g", tt.EventSource(events, **source), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1d"])])
    return tt.Join("m", tt.EventSource(queries), [group_by])


@pytest.fixture(scope="module")
def events(spark: Any) -> Any:
    return spark.createDataFrame([(1, 5, 1.0)], "user_id long, ts long, amount double")


def test_an_unresolvable_where_names_the_clause(spark: Any, events: Any) -> None:
    join = join_over(spark, events, where=["amount > 0", "price > 0"])
    with pytest.raises(tt.DefinitionError, match=r"parts\[0\]\.source\.where\[1\]: Spark cannot "
                       r"use 'price > 0'.*Fix: write a Spark SQL expression over the columns"):
        tt.backfill(join, spark)


def test_an_unparseable_select_names_the_column(spark: Any, events: Any) -> None:
    join = join_over(spark, events, select={"user_id": "user_id", "ts": "ts",
                                            "amount": "amount *"})
    with pytest.raises(tt.DefinitionError, match=r"parts\[0\]\.source\.select\.amount"):
        tt.backfill(join, spark)


def test_reserved_column_names_are_refused(spark: Any, events: Any) -> None:
    join = join_over(spark, events.withColumn("_tt_time", events.ts))
    with pytest.raises(tt.DefinitionError, match=r"parts\[0\]\.source: has columns "
                       r"\['_tt_time'\].*Fix: rename them in the source's select"):
        tt.backfill(join, spark)


def test_string_times_need_a_utc_session(spark: Any) -> None:
    events = spark.createDataFrame([(1, "2024-01-01 00:00:00", 1.0)],
                                   "user_id long, ts string, amount double")
    join = join_over(spark, events)
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        with pytest.raises(tt.DefinitionError, match=r"time_column: 'ts' is string, which Spark "
                           r"reads in the session time zone America/Los_Angeles, not UTC"):
            tt.backfill(join, spark)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    queries = spark.createDataFrame([(1, 1_704_070_800_000)], "user_id long, ts long")  # 01:00Z
    group_by = join.join_parts[0].group_by
    row = tt.backfill(tt.Join("m", tt.EventSource(queries), [group_by]), spark).first()
    assert row is not None
    assert row["g_amount_sum_1d"] == 1.0


def test_every_source_is_counted_apart(spark: Any) -> None:
    """One job counts all sources: each row of the report must still be its own source's."""
    left = spark.createDataFrame([(1, 10), (2, None), (None, 30)], "user_id long, ts long")
    views = spark.createDataFrame([(1, 5, 1.0), (1, None, 2.0), (None, 7, 3.0), (2, 8, 4.0)],
                                  "user_id long, ts long, amount double")
    clicks = spark.createDataFrame([(1, None, 1.0), (1, None, 1.0), (None, None, 1.0)],
                                   "user_id long, ts long, amount double")
    parts = [tt.GroupBy(name, tt.EventSource(frame), ["user_id"],
                        [tt.Aggregation("amount", "sum", windows=["1d"])])
             for name, frame in (("views", views), ("clicks", clicks))]
    job = tt.BackfillJob(tt.Join("counted", tt.EventSource(left), parts), spark)
    counts = {source.role: (source.rows, source.without_time, source.without_key)
              for source in job.report.sources}
    assert counts == {"left": (3, 1, 0), "views": (4, 1, 1), "clicks": (3, 3, 0)}
