"""Bad source expressions, reserved names and time zones fail before any job, naming the fix."""

from __future__ import annotations

from typing import Any

import pytest

import timetile as tt


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


@pytest.mark.parametrize("name", ["_tt_time", "_TT_TIME", "_Tt_key_0"])
def test_reserved_column_names_are_refused(spark: Any, events: Any, name: str) -> None:
    """In any case: Spark resolves `_TT_TIME` as `_tt_time`, so the engine's own column
    replaced a left column of that name, which vanished from the output."""
    join = join_over(spark, events.withColumn(name, events.ts))
    with pytest.raises(tt.DefinitionError, match=r"parts\[0\]\.source: has columns "
                       rf"\['{name}'\].*Fix: rename them in the source's select"):
        tt.backfill(join, spark)
    left = tt.EventSource(events.withColumn(name, events.ts), time_column="ts")
    with pytest.raises(tt.DefinitionError, match=rf"left: has columns \['{name}'\]"):
        tt.backfill(tt.Join("j", left, join.join_parts), spark)


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


def test_times_without_a_zone_read_as_utc(spark: Any) -> None:
    """With ``timestampType`` TIMESTAMP_NTZ, strings and ``timestamp_ntz`` columns are UTC."""
    events = spark.createDataFrame([(1, "2024-01-01 10:00:00", 1.0), (1, "2024-01-01 12:00:00",
                                                                       2.0)],
                                   "user_id long, ts string, amount double")
    queries = spark.createDataFrame([(1, "2024-01-01 11:00:00"), (1, "2024-01-01 13:00:00")],
                                    "user_id long, ts string")
    spark.conf.set("spark.sql.timestampType", "TIMESTAMP_NTZ")
    try:
        for frame in (events, events.withColumn("ts", events.ts.cast("timestamp_ntz"))):
            group_by = tt.GroupBy("g", tt.EventSource(frame), ["user_id"],
                                  [tt.Aggregation("amount", "sum", windows=["1h"])])
            rows = tt.backfill(tt.Join("m", tt.EventSource(queries), [group_by]), spark)
            assert sorted(row["g_amount_sum_1h"] for row in rows.collect()) == [1.0, 2.0]
    finally:
        spark.conf.unset("spark.sql.timestampType")


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
    job = tt.BackfillJob(tt.Join("counted", tt.EventSource(left), parts), spark).plan()
    counts = {source.role: (source.rows, source.without_time, source.without_key)
              for source in job.report.sources}
    assert counts == {"left": (3, 1, 0), "views": (4, 1, 1), "clicks": (3, 3, 0)}
    latest = {source.role: source.latest_integer_time for source in job.report.sources}
    assert latest == {"left": 30, "views": 8, "clicks": None}


def test_left_rows_outside_the_range_are_counted(spark: Any) -> None:
    """Rows not asked for are not left out, but the report says how many there were."""
    day = 1_704_067_200_000  # 2024-01-01
    left = spark.createDataFrame([(1, day + offset * 86_400_000) for offset in (0, 1, 1, 2)]
                                 + [(1, None)], "user_id long, ts long")
    events = spark.createDataFrame([(1, day, 1.0)], "user_id long, ts long, amount double")
    group_by = tt.GroupBy("g", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["7d"])])
    job = tt.BackfillJob(tt.Join("ranged", tt.EventSource(left), [group_by]), spark,
                         start="2024-01-02", end="2024-01-02").plan()
    assert job.dataframe().count() == 2
    (counted, _) = job.report.sources
    assert (counted.rows, counted.without_time, counted.outside_range) == (5, 1, 2)
    assert counted.left_out == 1  # not asked for is not left out
    assert "left (a DataFrame): 5 rows read, 1 left out: time null or unparseable, 2 outside " \
        "[start, end]: not returned" in job.report.lines()[1]
    assert "2 left rows outside [start, end] and 1 without time are not returned" in \
        job.report.notes


@pytest.mark.parametrize(("side", "kind", "match"), [
    ("events", "int", r"parts\[0\]\.source\.time_column: 'ts' is int: epoch milliseconds need a "
     r"bigint.*Fix: .*\{'ts': 'timestamp_seconds\(ts\)'\} if seconds"),
    ("left", "smallint", r"left\.time_column: 'ts' is smallint"),
    ("left", "date", r"left\.time_column: 'ts' is date, not a time\. Fix: use epoch milliseconds "
     r".*\{'ts': 'CAST\(ts AS TIMESTAMP\)'\}"),
    ("events", "boolean", r"parts\[0\]\.source\.time_column: 'ts' is boolean, not a time"),
])
def test_a_time_column_that_cannot_hold_milliseconds_is_refused(
        spark: Any, side: str, kind: str, match: str) -> None:
    """Narrow integers and dates would read as January 1970 or fail in Spark's cast."""
    rows = spark.createDataFrame([(1, 5, 1.0)], "user_id long, ts long, amount double")
    odd = rows.withColumn("ts", rows.ts.cast(kind) if kind != "date" else rows.ts.cast(
        "timestamp").cast("date"))
    queries = spark.createDataFrame([(1, 10)], "user_id long, ts long")
    group_by = tt.GroupBy("g", tt.EventSource(odd if side == "events" else rows), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1d"])])
    left = odd.drop("amount") if side == "left" else queries
    with pytest.raises(tt.DefinitionError, match=match):
        tt.BackfillJob(tt.Join("m", tt.EventSource(left), [group_by]), spark).plan()


def test_integer_times_that_look_like_seconds_are_reported(spark: Any) -> None:
    """Epoch seconds read as milliseconds land in January 1970: the report says so."""
    day = 1_704_067_200  # 2024-01-01 in seconds
    events = spark.createDataFrame([(1, day - 60, 1.0), (1, day - 7_200, 2.0)],
                                   "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, day * 1000)], "user_id long, ts long")
    group_by = tt.GroupBy("g", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1d"])])
    job = tt.BackfillJob(tt.Join("m", tt.EventSource(queries), [group_by]), spark).plan()
    seconds = [note for note in job.report.notes if "epoch milliseconds" in note]
    assert seconds == ["g (a DataFrame): every time is before 1973-03-03 (the latest is "
                       "1,704,067,140), and integer times are epoch milliseconds: if they are "
                       "seconds, convert them in the source's select with timestamp_seconds(...)"]


def test_bad_arguments_name_themselves(spark: Any, events: Any) -> None:
    join = join_over(spark, events)
    with pytest.raises(ValueError, match=r"start '2024-13-01' is not a day: write it as "
                       r"YYYY-MM-DD"):
        tt.BackfillJob(join, spark, start="2024-13-01").plan()
    with pytest.raises(ValueError, match=r"end 20240101 is not a day"):
        tt.BackfillJob(join, spark, end=20240101).plan()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"max_key_events is '5': give a positive int"):
        tt.BackfillJob(join, spark, max_key_events="5").plan()  # type: ignore[arg-type]


def test_a_dotted_column_is_refused_with_a_select_that_works(spark: Any) -> None:
    """Spark reads ``a.b`` as a field of a struct ``a``: the fix renames it in the select."""
    events = spark.createDataFrame([(1, 5, 1.0)], "user_id long, ts long, `a.b` double")
    queries = spark.createDataFrame([(1, 10)], "user_id long, ts long")
    dotted = tt.GroupBy("g", tt.EventSource(events), ["user_id"], [tt.Aggregation("a.b", "sum")])
    with pytest.raises(tt.DefinitionError, match=r"parts\[0\]\.aggregations\[0\]\.column: 'a\.b' "
                       r"holds a dot.*Fix: rename it in the source's select, e.g. "
                       r"\{'a_b': '`a\.b`'\}"):
        tt.backfill(tt.Join("m", tt.EventSource(queries), [dotted]), spark)
    renamed = tt.EventSource(events, select={"user_id": "user_id", "ts": "ts", "a_b": "`a.b`"})
    group_by = tt.GroupBy("g", renamed, ["user_id"], [tt.Aggregation("a_b", "sum")])
    row = tt.backfill(tt.Join("m", tt.EventSource(queries), [group_by]), spark).first()
    assert row is not None
    assert row["g_a_b_sum"] == 1.0


def test_a_dotted_lookup_column_is_refused(spark: Any) -> None:
    """A select of ```a.b``` names the looked-up column with its backticks: renamed, it works."""
    snapshots = spark.createDataFrame([("2024-01-01", 1, 5.0)],
                                      "ds string, user_id long, `a.b` double")
    queries = spark.createDataFrame([(1, 1_704_153_600_000)], "user_id long, ts long")
    for select, match in ((["user_id", "`a.b`"], r"parts\[0\]\.source\.select: '`a\.b`' holds "
                           r"a dot or a backtick"),
                          ({"user_id": "user_id", "a_b": "`a.b`"}, None)):
        lookup = tt.GroupBy("now", tt.EntitySource(snapshots, select=select), ["user_id"],
                            accuracy=tt.Accuracy.SNAPSHOT)
        join = tt.Join("m", tt.EventSource(queries), [lookup])
        if match is not None:
            with pytest.raises(tt.DefinitionError, match=match):
                tt.backfill(join, spark)
        else:
            assert tt.backfill(join, spark).first()["now_a_b"] == 5.0  # type: ignore[index]


def test_entity_times_that_look_like_seconds_are_reported(spark: Any) -> None:
    """Mutation times and row times are integers too: each gets the same warning."""
    day = 1_704_067_200  # 2024-01-01 in seconds
    snapshots = spark.createDataFrame([(1, 5.0, day - 60, "2023-12-31")],
                                      "user_id long, balance double, since long, ds string")
    mutations = spark.createDataFrame(
        [(1, 5.0, day - 60, day + 30, True), (1, 7.0, day + 30, day + 30, False)],
        "user_id long, balance double, since long, mutation_ts long, is_before boolean")
    queries = spark.createDataFrame([(1, (day + 3_600) * 1000)], "user_id long, ts long")
    source = tt.EntitySource(snapshots, mutation_table=mutations, time_column="since")
    group_by = tt.GroupBy("users", source, ["user_id"], [tt.Aggregation("balance", "last")])
    job = tt.BackfillJob(tt.Join("m", tt.EventSource(queries), [group_by]), spark).plan()
    latest = {source.role: source.latest_integer_time for source in job.report.sources}
    assert latest == {"left": (day + 3_600) * 1000, "users": day - 60,
                      "users mutations": day + 30}
    seconds = sorted(note.split(":")[0] for note in job.report.notes
                     if "timestamp_seconds" in note)
    assert seconds == ["users (a DataFrame)", "users mutations (a DataFrame)"]
