"""Entity sources, lookups, entity left sides, SNAPSHOT and periodic sources, against the oracle.

The data of :func:`random_entities` holds updates, deletes and re-inserts of one key,
several mutations in one millisecond, mutations at exactly midnight and at the last
millisecond of a day, and keys absent from the first snapshot; the queries of
:func:`random_entity_queries` sit at exactly midnight and exactly at mutation times too.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import timetile as tt
from timetile.offline.report import BadInputError
from timetile.testing import (
    differing_cells,
    naive_backfill,
    random_entities,
    random_events,
    to_spark,
)
from timetile.testing.generators import random_entity_queries, random_queries

OPS = ("count", "sum", "avg", "min", "max", "last", "first_k", "variance")


def equal_frames(ours: DataFrame, theirs: DataFrame, order: list[str]) -> None:
    """Assert two outputs hold the same columns and rows (floats to 1e-9 relative)."""
    assert ours.columns == theirs.columns
    mine, oracle = ours.orderBy(*order).collect(), theirs.orderBy(*order).collect()
    assert len(mine) == len(oracle) > 0
    bad = differing_cells(mine, oracle, ours.columns)
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:3]}"


@pytest.fixture(scope="module")
def entities(spark: Any) -> tuple[DataFrame, DataFrame, DataFrame]:
    tables = random_entities(9, seed=21, days=3, mutations_per_day=14)
    queries = random_entity_queries(tables, 120, seed=22)
    return (to_spark(spark, tables.snapshots), to_spark(spark, tables.mutations),
            to_spark(spark, queries))


def aggregations() -> list[tt.Aggregation]:
    made = [tt.Aggregation("balance", op, k=2 if op.endswith("_k") else None) for op in OPS]
    made += [tt.Aggregation("tier", op) for op in ("unique_count", "histogram", "last")]
    made.append(tt.Aggregation("balance", "sum", windows=["6h", "1d", tt.Window("1d", hop="1h")]))
    made.append(tt.Aggregation("tier", "count", windows=["2d"]))
    made.append(tt.Aggregation("balance", "sum", buckets=["tier"]))
    made.append(tt.Aggregation("balance", "max", windows=["1d"], buckets=["tier"]))
    made += [tt.Aggregation("balance", op, half_life="12h", windows=[tt.Window("1d", hop="1h")])
             for op in ("decayed_sum", "decayed_avg")]
    made.append(tt.Aggregation("tier", "decayed_count", half_life="6h"))
    made.append(tt.Aggregation("balance", "decayed_sum", half_life="1d", buckets=["tier"]))
    return made


@pytest.mark.parametrize("accuracy", [tt.Accuracy.TEMPORAL, tt.Accuracy.SNAPSHOT])
def test_entity_aggregations_equal_the_oracle(spark: Any, entities: Any,
                                              accuracy: tt.Accuracy) -> None:
    snapshots, mutations, queries = entities
    source = tt.EntitySource(snapshots, mutation_table=mutations, time_column="since")
    users = tt.GroupBy("users", source, ["user_id"], aggregations(), accuracy=accuracy)
    join = tt.Join("accounts", tt.EventSource(queries), [users])
    job = tt.BackfillJob(join, spark).plan()
    equal_frames(job.dataframe(), naive_backfill(join, spark), ["user_id", "ts", "label"])
    assert job.report.path == "users: entity"


def test_lookups_equal_the_oracle(spark: Any, entities: Any) -> None:
    snapshots, mutations, queries = entities
    source = tt.EntitySource(snapshots, mutation_table=mutations, time_column="since",
                             select=["user_id", "tier", "balance", "since"])
    temporal = tt.GroupBy("now", source, ["user_id"])
    daily = tt.GroupBy("daily", source, ["user_id"], accuracy=tt.Accuracy.SNAPSHOT)
    join = tt.Join("lookups", tt.EventSource(queries), [temporal, daily])
    ours = tt.backfill(join, spark)
    assert ours.columns[-6:] == ["now_tier", "now_balance", "now_since", "daily_tier",
                                 "daily_balance", "daily_since"]
    equal_frames(ours, naive_backfill(join, spark), ["user_id", "ts", "label"])


def test_an_entity_left_side_equals_the_oracle(spark: Any, entities: Any) -> None:
    snapshots, mutations, _ = entities
    events = to_spark(spark, random_events(400, 9, seed=23, days=3))
    spend = tt.GroupBy("spend", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "sum", windows=["1d"]), tt.Aggregation("item", "last_k", k=2)])
    balance = tt.GroupBy("bal", tt.EntitySource(snapshots, mutation_table=mutations),
                         ["user_id"], [tt.Aggregation("balance", "max")])
    join = tt.Join("daily", tt.EntitySource(snapshots), [spend, balance])
    ours = tt.backfill(join, spark, start="2024-01-01", end="2024-01-02")
    theirs = naive_backfill(join, spark, start="2024-01-01", end="2024-01-02")
    assert ours.columns[:5] == snapshots.columns
    assert {row["ds"] for row in ours.select("ds").collect()} == {"2024-01-01", "2024-01-02"}
    equal_frames(ours, theirs, ["ds", "user_id", "balance", "tier"])


def test_snapshot_and_periodic_event_sources_equal_the_oracle(spark: Any) -> None:
    table = random_events(500, 12, seed=24, days=3)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 90, seed=25))
    aggregations = [tt.Aggregation("amount", "sum", windows=["1d", "2d"]),
                    tt.Aggregation("quantity", "max", windows=["2h"]),
                    tt.Aggregation("item", "last")]
    daily = tt.GroupBy("daily", tt.EventSource(events), ["user_id"], aggregations,
                       accuracy=tt.Accuracy.SNAPSHOT)
    hourly = tt.GroupBy("hourly", tt.EventSource(events, period="1h"), ["user_id"],
                        [tt.Aggregation("quantity", "sum", windows=["2h", "1d"]),
                         tt.Aggregation("quantity", "max")])
    join = tt.Join("periodic", tt.EventSource(queries), [daily, hourly])
    equal_frames(tt.backfill(join, spark), naive_backfill(join, spark),
                 ["user_id", "ts", "label"])


def test_a_missing_snapshot_gives_null_features_and_is_reported(spark: Any) -> None:
    tables = random_entities(5, seed=26, days=3, missing_day="2024-01-01")
    snapshots, mutations = to_spark(spark, tables.snapshots), to_spark(spark, tables.mutations)
    queries = to_spark(spark, random_entity_queries(tables, 40, seed=27))
    source = tt.EntitySource(snapshots, mutation_table=mutations)
    users = tt.GroupBy("users", source, ["user_id"], [tt.Aggregation("balance", "count")])
    join = tt.Join("gap", tt.EventSource(queries), [users])
    job = tt.BackfillJob(join, spark).plan()
    # 2023-12-30: the queries on the first day before the first snapshot have none either
    assert any("no snapshot partition for 2 day(s) (2023-12-30, 2024-01-01)" in note
               for note in job.report.notes)
    ours = job.dataframe()
    on_gap = ours.where("ts >= 1704153600000 AND ts < 1704240000000").collect()  # 2024-01-02
    assert on_gap
    assert all(row["users_balance_count"] is None for row in on_gap)
    equal_frames(ours, naive_backfill(join, spark), ["user_id", "ts", "label"])
    timed = tt.Join("gap", tt.EventSource(queries.where("ts IS NOT NULL")), [users])
    with pytest.raises(BadInputError, match="land those partitions"):
        tt.BackfillJob(timed, spark, strict=True).plan()


def test_a_retraction_of_an_absent_row_is_counted_and_ignored(spark: Any) -> None:
    snapshots = spark.createDataFrame([("2023-12-31", 1, 10.0), ("2023-12-31", 2, 5.0)],
                                      "ds string, user_id long, balance double")
    mutations = spark.createDataFrame(
        [(1, 99.0, 1704070800000, True),  # 01:00: retracts a row that is not there
         (1, 10.0, 1704074400000, True), (1, 12.0, 1704074400000, False)],  # 02:00 update
        "user_id long, balance double, mutation_ts long, is_before boolean")
    queries = spark.createDataFrame([(1, 1704072600000), (1, 1704078000000)],
                                    "user_id long, ts long")
    source = tt.EntitySource(snapshots, mutation_table=mutations)
    users = tt.GroupBy("users", source, ["user_id"], [tt.Aggregation("balance", op)
                                                      for op in ("sum", "max")])
    job = tt.BackfillJob(tt.Join("bad", tt.EventSource(queries), [users]), spark).plan()
    rows = {row["ts"]: row for row in job.dataframe().collect()}
    assert (rows[1704072600000]["users_balance_sum"], rows[1704078000000]["users_balance_max"]
            ) == (10.0, 12.0)
    assert any("retracting a row that is not there" in line and line.endswith(": 1")
               for line in job.report.lines())


def test_temporal_accuracy_without_mutations_is_a_definition_error(spark: Any) -> None:
    snapshots = spark.createDataFrame([("2024-01-01", 1, 1.0)],
                                      "ds string, user_id long, balance double")
    users = tt.GroupBy("users", tt.EntitySource(snapshots), ["user_id"],
                       [tt.Aggregation("balance", "sum")])
    queries = spark.createDataFrame([(1, 1704153600000)], "user_id long, ts long")
    with pytest.raises(tt.DefinitionError, match="needs its mutations"):
        tt.backfill(tt.Join("none", tt.EventSource(queries), [users]), spark)


def test_the_worked_timeline_of_docs_entities(spark: Any) -> None:
    """The TEMPORAL/SNAPSHOT table of docs/entities.md, computed."""
    day = 1704153600000  # 2024-01-02 00:00 UTC
    hour = 3_600_000
    snapshots = spark.createDataFrame([("2024-01-01", 7, 4.0), ("2024-01-01", 7, 5.0),
                                       ("2024-01-02", 7, 3.0), ("2024-01-02", 7, 1.0)],
                                      "ds string, listing_id long, rating double")
    mutations = spark.createDataFrame([
        (7, 3.0, day + 9 * hour, False),
        (7, 5.0, day + 12 * hour, True), (7, 1.0, day + 12 * hour, False),
        (7, 4.0, day + 18 * hour, True),
    ], "listing_id long, rating double, mutation_ts long, is_before boolean")
    times = [day, day + 9 * hour, day + 10 * hour + hour // 2, day + 12 * hour + 1,
             day + 23 * hour + 59 * 60_000, day + 32 * hour]
    checkouts = spark.createDataFrame([(7, t) for t in times], "listing_id long, ts long")
    ratings = tt.EntitySource(snapshots, mutation_table=mutations)
    parts = [tt.GroupBy(name, ratings, ["listing_id"], [tt.Aggregation("rating", "avg")],
                        accuracy=accuracy)
             for name, accuracy in (("now", tt.Accuracy.TEMPORAL),
                                    ("daily", tt.Accuracy.SNAPSHOT))]
    rows = tt.backfill(tt.Join("timeline", tt.EventSource(checkouts), parts), spark).collect()
    got = {row["ts"]: (round(row["now_rating_avg"], 2), row["daily_rating_avg"])
           for row in rows}
    assert [got[t] for t in times] == [(4.5, 4.5), (4.5, 4.5), (4.0, 4.5), (2.67, 4.5),
                                       (2.0, 4.5), (2.0, 2.0)]


def test_wide_rows_with_nested_columns(spark: Any) -> None:
    """Columns a part does not read never enter its row images; nested ones it reads work."""
    snapshots = spark.createDataFrame(
        [("2024-01-01", 1, 5.0, ["a", "b"], {"k": 1}), ("2024-01-01", 2, 7.0, ["c"], {})],
        "ds string, user_id long, balance double, tags array<string>, extra map<string,int>")
    mutations = spark.createDataFrame(
        [(1, 5.0, ["a", "b"], {"k": 1}, 1704157200000, True),
         (1, 6.0, ["a"], {"k": 2}, 1704157200000, False)],
        "user_id long, balance double, tags array<string>, extra map<string,int>, "
        "mutation_ts long, is_before boolean")
    source = tt.EntitySource(snapshots, mutation_table=mutations)
    totals = tt.GroupBy("totals", source, ["user_id"], [tt.Aggregation("balance", "sum")])
    tags = tt.GroupBy("tags", tt.EntitySource(snapshots, mutation_table=mutations,
                                              select=["user_id", "tags"]), ["user_id"])
    queries = spark.createDataFrame([(1, 1704160800000), (2, 1704160800000)],
                                    "user_id long, ts long")
    rows = {row["user_id"]: row for row in tt.backfill(
        tt.Join("wide", tt.EventSource(queries), [totals, tags]), spark).collect()}
    assert (rows[1]["totals_balance_sum"], rows[1]["tags_tags"]) == (6.0, ["a"])
    assert (rows[2]["totals_balance_sum"], rows[2]["tags_tags"]) == (7.0, ["c"])


@pytest.mark.parametrize(("kind", "values"), [
    ("struct<a:int,b:string>", [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 2, "b": None}]),
    ("array<double>", [[1.0, None], [1.0, 2.0], [1.0], None]),
    ("array<double>", [[float("nan")], [3.0], [3.0, float("nan")]]),
])
def test_a_lookup_of_tied_rows_takes_sparks_last_of_nested_values(
        spark: Any, kind: str, values: list[Any]) -> None:
    """Rows of one key with no time column: the lookup takes the one Spark sorts last, nulls
    first and NaN above every number at every depth (a crash, or a wrong row, before)."""
    for rows in (values, values[::-1]):
        snapshots = spark.createDataFrame([("2024-01-01", 1, value) for value in rows],
                                          f"ds string, user_id long, v {kind}").coalesce(1)
        mutations = spark.createDataFrame([], f"user_id long, v {kind}, mutation_ts long, "
                                              "is_before boolean")
        queries = spark.createDataFrame([(1, 1704160800000)], "user_id long, ts long")
        source = tt.EntitySource(snapshots, mutation_table=mutations, select=["user_id", "v"])
        join = tt.Join("tied", tt.EventSource(queries), [tt.GroupBy("g", source, ["user_id"])])
        equal_frames(tt.backfill(join, spark), naive_backfill(join, spark), ["user_id"])


def test_an_is_before_that_is_no_flag(spark: Any) -> None:
    """Text that is no flag leaves its mutation out, counted; a type that holds no flag is
    refused before any job, naming the field."""
    snapshots = spark.createDataFrame([("2024-01-01", 1, 10.0)],
                                      "ds string, user_id long, balance double")
    mutations = spark.createDataFrame(
        [(1, 10.0, 1704157200000, "true"), (1, 12.0, 1704157200000, "false"),
         (1, 99.0, 1704160800000, "unknown")],
        "user_id long, balance double, mutation_ts long, is_before string")
    queries = spark.createDataFrame([(1, 1704164400000)], "user_id long, ts long")

    def join(flags: DataFrame) -> tt.Join:
        source = tt.EntitySource(snapshots, mutation_table=flags)
        return tt.Join("flags", tt.EventSource(queries), [tt.GroupBy(
            "g", source, ["user_id"], [tt.Aggregation("balance", "sum")])])

    job = tt.BackfillJob(join(mutations), spark).plan()
    assert [row["g_balance_sum"] for row in job.dataframe().collect()] == [12.0]
    assert [row["g_balance_sum"] for row in naive_backfill(join(mutations), spark).collect()
            ] == [12.0]
    (counted,) = [source for source in job.report.sources if source.role == "g mutations"]
    assert counted.without_time == 1
    dated = mutations.withColumn("is_before", F.current_date())
    with pytest.raises(tt.DefinitionError, match=r"parts\[0\]\.source\.is_before_column: "
                                                 r"'is_before' is date, not a flag"):
        tt.BackfillJob(join(dated), spark).plan()


def test_lookups_of_timestamp_and_date_columns(spark: Any) -> None:
    """They cross Arrow in the session's time zone (a timestamp needs one)."""
    snapshots = spark.createDataFrame(
        [("2024-01-01", 1, dt.datetime(2024, 1, 1, 5), dt.date(2024, 1, 1))],
        "ds string, user_id long, at timestamp, day date")
    mutations = spark.createDataFrame(
        [(1, dt.datetime(2024, 1, 1, 5), dt.date(2024, 1, 1), 1704200000000, True),
         (1, dt.datetime(2024, 1, 2, 5), dt.date(2024, 1, 2), 1704200000000, False)],
        "user_id long, at timestamp, day date, mutation_ts long, is_before boolean")
    source = tt.EntitySource(snapshots, mutation_table=mutations,
                             select=["user_id", "at", "day"])
    queries = spark.createDataFrame([(1, 1704200000000), (1, 1704200000001)],
                                    "user_id long, ts long")
    rows = tt.backfill(tt.Join("when", tt.EventSource(queries),
                               [tt.GroupBy("g", source, ["user_id"])]), spark).collect()
    assert sorted((row["ts"], row["g_at"], row["g_day"]) for row in rows) == [
        (1704200000000, dt.datetime(2024, 1, 1, 5), dt.date(2024, 1, 1)),
        (1704200000001, dt.datetime(2024, 1, 2, 5), dt.date(2024, 1, 2))]


def test_numeric_flags_are_one_or_zero_and_the_flag_is_not_the_time(spark: Any) -> None:
    """Spark's cast reads any nonzero number as true: a flag column of 2s, or the mutation
    time named as the flag, made every mutation a retraction, silently."""
    snapshots = spark.createDataFrame([("2024-01-01", 1, 10.0)],
                                      "ds string, user_id long, balance double")
    mutations = spark.createDataFrame(
        [(1, 10.0, 1704157200000, 1), (1, 12.0, 1704157200000, 0),
         (1, 99.0, 1704160800000, 2)],
        "user_id long, balance double, mutation_ts long, is_before int")
    queries = spark.createDataFrame([(1, 1704164400000)], "user_id long, ts long")
    source = tt.EntitySource(snapshots, mutation_table=mutations)
    join = tt.Join("flags", tt.EventSource(queries), [tt.GroupBy(
        "g", source, ["user_id"], [tt.Aggregation("balance", "sum")])])
    job = tt.BackfillJob(join, spark).plan()
    assert [row["g_balance_sum"] for row in job.dataframe().collect()] == [12.0]
    assert [row["g_balance_sum"] for row in naive_backfill(join, spark).collect()] == [12.0]
    (counted,) = [source for source in job.report.sources if source.role == "g mutations"]
    assert counted.without_time == 1
    with pytest.raises(tt.DefinitionError, match=r"is_before_column: 'mutation_ts' is the "
                       r"mutation_time_column too"):
        tt.EntitySource(snapshots, mutation_table=mutations, is_before_column="mutation_ts")


def test_a_timestamp_partition_is_its_utc_day_in_any_session_zone(spark: Any) -> None:
    """A cast to DATE takes the session zone's day: in New York the partition of
    2024-01-01T00:00Z read as 2023-12-31, and every feature of 2024-01-02 was null."""
    day = 1704153600000  # 2024-01-02T00:00Z
    snapshots = spark.createDataFrame([(1, 10.0, 1704067200000)],
                                      "user_id long, balance double, ms long").select(
        "user_id", "balance", F.timestamp_millis("ms").alias("ds"))
    mutations = spark.createDataFrame(
        [(1, 10.0, day + 3 * 3_600_000, True), (1, 20.0, day + 3 * 3_600_000, False)],
        "user_id long, balance double, mutation_ts long, is_before boolean")
    queries = spark.createDataFrame([(0, 1, day + 2 * 3_600_000), (1, 1, day + 4 * 3_600_000)],
                                    "qid int, user_id long, ts long")
    source = tt.EntitySource(snapshots, mutation_table=mutations)
    join = tt.Join("zones", tt.EventSource(queries), [tt.GroupBy(
        "g", source, ["user_id"], [tt.Aggregation("balance", "last")])])
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        for executor in ("auto", "reference"):
            rows = tt.backfill(join, spark, executor=executor).orderBy("qid").collect()
            assert [row["g_balance_last"] for row in rows] == [10.0, 20.0], executor
        oracle = naive_backfill(join, spark).orderBy("qid").collect()
        assert [row["g_balance_last"] for row in oracle] == [10.0, 20.0]
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
