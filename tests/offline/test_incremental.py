"""Incremental backfills: day by day with stored hop partials equals one run (seed 001)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.testing import random_events, random_queries, to_spark

DAYS = ["2024-01-02", "2024-01-03", "2024-01-04"]
AGGREGATIONS = [
    tt.Aggregation("amount", "sum", windows=["1d", tt.Window("2d", hop="1h")]),
    tt.Aggregation("item", "last_k", k=2, windows=["1d"]),
    tt.Aggregation("quantity", "max"),
]


def rows(frame: Any) -> list[str]:
    return sorted(repr(tuple(row)) for row in frame.collect())


def test_day_by_day_with_stored_partials_equals_one_run(spark: Any, tmp_path: Path) -> None:
    events_table = random_events(400, 6, seed=21, days=4)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 80, seed=22)))
    store = str(tmp_path / "partials")

    whole = tt.GroupBy("spend", tt.EventSource(events), ["user_id"], AGGREGATIONS)
    one_run = rows(tt.backfill(tt.Join("daily", queries, [whole]), spark, start=DAYS[0],
                               end=DAYS[-1], executor="tiled"))

    by_day: list[str] = []
    notes: list[str] = []
    for day in DAYS:  # each run sees only the events that have landed by the end of its day
        landed = tt.EventSource(events.where(events.ts < date_to_ms(day) + DAY_MS))
        group_by = tt.GroupBy("spend", landed, ["user_id"], AGGREGATIONS)
        job = tt.BackfillJob(tt.Join("daily", queries, [group_by]), spark, start=day, end=day,
                             partials_path=store).plan()
        by_day += rows(job.dataframe())
        notes += job.report.notes

    assert sorted(by_day) == one_run
    computed = [note.split(" reused, ")[1].split(" computed")[0] for note in notes
                if "hop partials" in note]
    assert computed == ["2", "1", "1"]  # days 1 and 2 first, then one new day per run
    assert any(path.name.startswith("epoch_day=") for path in Path(store).rglob("*"))


def test_a_changed_filter_never_reads_stale_partials(spark: Any, tmp_path: Path) -> None:
    events_table = random_events(200, 4, seed=8, days=2)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 40, seed=9)))
    store = str(tmp_path / "partials")
    outputs = []
    for where in (None, "amount > 0"):
        group_by = tt.GroupBy("spend", tt.EventSource(events, where=where), ["user_id"],
                              AGGREGATIONS)
        join = tt.Join("filtered", queries, [group_by])
        outputs.append(rows(tt.backfill(join, spark, partials_path=store)))
        assert outputs[-1] == rows(tt.backfill(join, spark, executor="reference"))
    assert outputs[0] != outputs[1]


def test_a_rerun_reuses_and_never_double_counts(spark: Any, tmp_path: Path) -> None:
    events_table = random_events(200, 4, seed=5, days=2)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 40, seed=6)))
    join = tt.Join("rerun", queries, [tt.GroupBy("spend", tt.EventSource(events), ["user_id"],
                                                 AGGREGATIONS)])
    store = str(tmp_path / "partials")
    first = rows(tt.backfill(join, spark, partials_path=store))
    second = rows(tt.backfill(join, spark, partials_path=store))
    assert first == second == rows(tt.backfill(join, spark, executor="reference"))


def test_a_partials_path_is_read_as_named_not_as_a_pattern(spark: Any,
                                                          tmp_path: Path) -> None:
    """Spark reads a path holding ``[``, ``{``, ``*`` or ``?`` as a glob: the days stored
    under ``p[1]`` were never found (every run recomputed them), and ``p*`` also read the
    partials stored under a sibling ``pX`` (double counting)."""
    events_table = random_events(200, 4, seed=15, days=2)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 40, seed=16)))
    join = tt.Join("globs", queries, [tt.GroupBy("spend", tt.EventSource(events), ["user_id"],
                                                 AGGREGATIONS)])
    expected = rows(tt.backfill(join, spark, executor="reference"))
    # pX's partials are the sibling that p* must not read; the others run twice, the second
    # run reusing what the first stored
    for name, runs in (("pX", ("first",)), ("p*", ("first", "again")),
                       ("p[1]{a,b}?", ("first", "again"))):
        store = str(tmp_path / name)
        for run in runs:
            job = tt.BackfillJob(join, spark, partials_path=store).plan()
            assert rows(job.dataframe()) == expected, (name, run)
        if runs[-1] == "again":
            (note,) = [note for note in job.report.notes if "hop partials" in note]
            assert note.startswith("spend: hop partials of 1 days reused, 0 computed"), note


def test_a_changed_key_never_reads_stale_partials(spark: Any, tmp_path: Path) -> None:
    events = spark.createDataFrame([(1, 2, 10, 100.0), (1, 1, 20, 1.0)],
                                   "u long, v long, ts long, amount double")
    store = str(tmp_path / "partials")
    for key in ("u", "v"):
        queries = spark.createDataFrame([(1, 30)], f"{key} long, ts long")
        group_by = tt.GroupBy("spend", tt.EventSource(events), [key],
                              [tt.Aggregation("amount", "sum", windows=["1d"])])
        join = tt.Join("keyed", tt.EventSource(queries), [group_by])
        assert rows(tt.backfill(join, spark, partials_path=store)) == rows(
            tt.backfill(join, spark, executor="reference"))


def test_partials_of_an_older_state_form_are_never_read(spark: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed state form (moments' version 2, with the mean's low word) changes the
    signature that stored partials live under; ops whose form never changed keep theirs."""
    from timetile.core.aggregators.moments import Variance
    from timetile.offline.executors.tiled_layout import TiledLayout
    from timetile.offline.plan import plan_backfill

    events = spark.createDataFrame([(1, 10, 1.0)], "u long, ts long, amount double")
    queries = tt.EventSource(spark.createDataFrame([(1, 30)], "u long, ts long"))

    def signature(op: str) -> str:
        group_by = tt.GroupBy("spend", tt.EventSource(events), ["u"],
                              [tt.Aggregation("amount", op, windows=["1d"])])
        (part,) = plan_backfill(tt.Join("versions", queries, [group_by]), spark).parts
        return TiledLayout.of(part).signature  # type: ignore[arg-type]

    current = signature("variance")
    monkeypatch.setattr(Variance, "state_version", 1)
    assert signature("variance") != current
    assert signature("sum") == repr((DAY_MS // 24, [("amount", "sum", None, None, "float",
                                                      None)]))


def test_a_day_that_may_still_be_landing_is_never_stored(spark: Any, tmp_path: Path) -> None:
    """A run stores only the days it knows are whole: up to its end, else before the latest
    event's day. An entity left row of day D asks at D's end and needs no event of D + 1,
    which may be half landed when D is backfilled."""
    day = date_to_ms("2024-01-01")
    every_2h = spark.createDataFrame([(1, day + hour * 7_200_000, 1.0) for hour in range(36)],
                                     "user_id long, ts long, amount double")
    aggregations = [tt.Aggregation("amount", "sum", windows=["2d"])]

    def landed(until_ms: int) -> tt.GroupBy:
        return tt.GroupBy("spend", tt.EventSource(every_2h.where(every_2h.ts < until_ms)),
                          ["user_id"], aggregations)

    snapshots = tt.EntitySource(spark.createDataFrame([("2024-01-01", 1), ("2024-01-02", 1)],
                                                      "ds string, user_id long"))
    queries = tt.EventSource(spark.createDataFrame(
        [(1, day + 43_200_000), (1, day + DAY_MS + 82_800_000)], "user_id long, ts long"))
    store = str(tmp_path / "partials")
    for left, first_end, second_end in ((snapshots, "2024-01-01", "2024-01-02"),
                                        (queries, None, "2024-01-02")):
        for index, (end, until) in enumerate(((first_end, day + 1.5 * DAY_MS),
                                              (second_end, day + 2.5 * DAY_MS))):
            join = tt.Join(f"landing_{index}", left, [landed(int(until))])
            start = end or "2024-01-01"
            ours = rows(tt.backfill(join, spark, start=start, end=end,
                                    partials_path=f"{store}/{first_end}"))
            assert ours == rows(tt.backfill(join, spark, start=start, end=end,
                                            executor="reference"))
    assert rows(tt.backfill(join, spark, start="2024-01-02", end="2024-01-02",
                            partials_path=f"{store}/None")) == ["(1, 1704236400000, 24.0)"]


def test_the_report_of_stored_partials(spark: Any, tmp_path: Path) -> None:
    """What ran, what was stored, the largest (key, hop) group, and the DataFrame caveat;
    each named by the part (its prefix too), and said once however often it is built."""
    day = date_to_ms("2024-01-01")
    events = spark.createDataFrame([(2, day + 3_600_000 + i, 1.0) for i in range(50)]
                                   + [(1, day + DAY_MS + 60_000, 1.0)],
                                   "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, day + 2 * DAY_MS)], "user_id long, ts long")
    group_by = tt.GroupBy("big", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["2d"])])
    job = tt.BackfillJob(tt.Join("report", tt.EventSource(queries),
                                 [tt.JoinPart(group_by, prefix="p")]), spark,
                         partials_path=str(tmp_path / "partials")).plan()
    job.dataframe().collect()
    lines = job.report.lines()
    assert any("largest (key, hop) group of p_big: 50 events at key (2,)" in line
               for line in lines)
    (stored,) = [note for note in job.report.notes if "hop partials" in note]
    assert stored.startswith("p_big: hop partials of 0 days reused, 1 computed and stored")
    assert stored.endswith("; 1 days computed but not stored, as they may still be landing "
                           "(from 2024-01-02)")
    assert any(note.startswith("big reads a DataFrame, so its stored partials are known by "
                               "the GroupBy's name and definition alone")
               for note in job.report.notes)
    job.dataframe()  # built again: the day stored by the first build is reused
    (stored,) = [note for note in job.report.notes if "hop partials" in note]
    assert stored.startswith("p_big: hop partials of 1 days reused, 0 computed and stored")


@pytest.mark.parametrize(("location", "match"), [
    ("", r"partials_path is '': give a folder path or URI"),
    (5, r"partials_path is 5: give a folder path or URI"),
    ("FILE/partials", r"partials_path .*FILE/partials: .*FILE is a file, not a folder"),
    ("HELD", r"partials_path .*HELD: .*HELD/spend is a file, not a folder"),
])
def test_a_partials_path_that_cannot_work_is_refused(spark: Any, tmp_path: Path,
                                                     location: object, match: str) -> None:
    (tmp_path / "FILE").write_text("")
    (tmp_path / "HELD").mkdir()
    (tmp_path / "HELD" / "spend").write_text("")  # where GroupBy spend's partials would go
    if isinstance(location, str) and location:
        location = str(tmp_path / location)
    events = spark.createDataFrame([(1, 10, 1.0)], "user_id long, ts long, amount double")
    group_by = tt.GroupBy("spend", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1d"])])
    join = tt.Join("bad", tt.EventSource(events.drop("amount")), [group_by])
    with pytest.raises(ValueError, match=match):
        tt.BackfillJob(join, spark, partials_path=location).plan()  # type: ignore[arg-type]


def test_partials_that_cannot_be_stored_are_refused_before_any_job(spark: Any,
                                                                   tmp_path: Path) -> None:
    """Inside a table the Join reads (it broke that table for every later read), or for
    windows with no hop or one that does not divide a day (refused late, with a fix that
    could not work: 'use executor auto or interval_tree')."""
    events = spark.createDataFrame([(1, 10, 1.0)], "user_id long, ts long, amount double")
    events.write.parquet(str(tmp_path / "events"))
    left = tt.EventSource(events.drop("amount"))

    def job(windows: list[Any], path: Path) -> tt.BackfillJob:
        group_by = tt.GroupBy("spend", tt.EventSource(str(tmp_path / "events")), ["user_id"],
                              [tt.Aggregation("amount", "sum", windows=windows)])
        return tt.BackfillJob(tt.Join("bad", left, [group_by]), spark,
                              partials_path=str(path)).plan()

    with pytest.raises(ValueError, match=r"partials_path .*events/partials: the Join 'bad' "
                       r"reads .*events, which .*Fix: keep the partials in a folder of their"):
        job(["1d"], tmp_path / "events" / "partials")
    assert not (tmp_path / "events" / "partials").exists()
    events.write.parquet(str(tmp_path / "lake" / "spend"))  # where spend's partials go
    in_lake = tt.GroupBy("spend", tt.EventSource(str(tmp_path / "lake" / "spend")),
                         ["user_id"], [tt.Aggregation("amount", "sum", windows=["1d"])])
    with pytest.raises(ValueError, match=r"the Join 'bad' reads .*spend, which"):
        tt.BackfillJob(tt.Join("bad", left, [in_lake]), spark,
                       partials_path=str(tmp_path / "lake")).plan()
    job(["1d"], tmp_path)  # a folder that holds a table, beside the GroupBy's folder
    for window, why in [(tt.Window(1000, hop=700), "hop is 700 ms, which does not divide"),
                        (tt.Window(1), "leaves sliding windows of \\[1\\] ms without whole")]:
        with pytest.raises(ValueError, match=f"partials_path cannot serve Join 'bad': GroupBy "
                           f"'spend': .*{why}.*Fix: backfill without partials_path"):
            job([window], tmp_path / "partials")


def test_stored_days_are_found_without_partition_type_inference(spark: Any,
                                                                tmp_path: Path) -> None:
    """The day column then reads back as text: no day was ever found, every run recomputed
    and overwrote them all."""
    events_table = random_events(100, 3, seed=8, days=3)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 20, seed=9)))
    join = tt.Join("texts", queries, [tt.GroupBy("spend", tt.EventSource(events), ["user_id"],
                                                 AGGREGATIONS)])
    setting = "spark.sql.sources.partitionColumnTypeInference.enabled"
    spark.conf.set(setting, "false")
    try:
        store = str(tmp_path / "partials")
        first = tt.BackfillJob(join, spark, partials_path=store).plan()
        first_rows = rows(first.dataframe())
        second = tt.BackfillJob(join, spark, partials_path=store).plan()
        assert rows(second.dataframe()) == first_rows
    finally:
        spark.conf.unset(setting)
    (note,) = [note for note in second.report.notes if "hop partials" in note]
    assert note.startswith("spend: hop partials of 2 days reused, 0 computed"), note


def test_a_table_is_known_by_what_it_names_not_how_it_is_written(spark: Any,
                                                                   tmp_path: Path) -> None:
    """An unqualified table name under another current database names other data: its
    partials are never shared. The same table named two ways shares them."""
    day = date_to_ms("2024-01-01")
    store = str(tmp_path / "partials")
    amounts = {"first": 1.0, "second": 100.0}
    for database, amount in amounts.items():
        folder = tmp_path / database / "ev"
        spark.createDataFrame([(1, day + 60_000, amount)], "user_id long, ts long, amount double"
                              ).write.parquet(str(folder))
        spark.sql(f"CREATE DATABASE {database}_db LOCATION '{tmp_path / database}/db'")
        spark.sql(f"CREATE TABLE {database}_db.ev USING parquet LOCATION '{folder}'")
    queries = tt.EventSource(spark.createDataFrame([(1, day + DAY_MS + 3_600_000)],
                                                   "user_id long, ts long"))

    def backfilled(table: str) -> tuple[list[str], list[str]]:
        group_by = tt.GroupBy("spend", tt.EventSource(table), ["user_id"],
                              [tt.Aggregation("amount", "sum", windows=["7d"])])
        job = tt.BackfillJob(tt.Join("named", queries, [group_by]), spark,
                             end="2024-01-02", partials_path=store).plan()
        return rows(job.dataframe()), job.report.notes

    try:
        for database, amount in amounts.items():
            spark.catalog.setCurrentDatabase(f"{database}_db")
            assert backfilled("ev")[0] == [f"(1, {day + DAY_MS + 3_600_000}, {amount})"]
        reused = backfilled("spark_catalog.first_db.ev")  # the first table, fully qualified
        assert reused[0] == [f"(1, {day + DAY_MS + 3_600_000}, 1.0)"]
        assert any("1 days reused, 0 computed" in note for note in reused[1])
    finally:
        spark.catalog.setCurrentDatabase("default")
        for database in amounts:
            spark.sql(f"DROP DATABASE {database}_db CASCADE")


def test_table_identity(spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A relative path is qualified from the driver JVM's folder, which a chdir in Python
    does not move; a temporary view and a DataFrame have no identity."""
    from timetile.spark.sources import table_identity

    folder = spark.sparkContext._jvm.System.getProperty("user.dir")
    monkeypatch.chdir(tmp_path)
    assert table_identity(spark, "data/ev") == f"file:{folder}/data/ev"
    assert table_identity(spark, "s3://bucket/ev") == "s3://bucket/ev"
    frame = spark.createDataFrame([(1,)], "a long")
    frame.createOrReplaceTempView("tt_identity_view")
    assert table_identity(spark, "tt_identity_view") is None
    assert table_identity(spark, "tt_no_such_table") is None
    assert table_identity(spark, frame) is None


def test_a_store_is_listed_not_read(spark: Any, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored days come from a listing of the store's folders: no Spark job, and no read
    of a missing path (which Spark logs as a warning with a stack trace under a cluster's log
    level)."""
    from pyspark.sql import SparkSession

    from timetile.offline.executors.partial_store import PartialStore
    from timetile.spark.sources import subfolders

    written = PartialStore(str(tmp_path / "written"))
    spark.range(3).selectExpr("id - 1 AS epoch_day", "id AS value").write.partitionBy(
        "epoch_day").parquet(written.location)

    def no_reads(session: SparkSession) -> None:
        raise AssertionError("the store was read")

    monkeypatch.setattr(SparkSession, "read", property(no_reads))
    assert written.stored_days(spark) == {-1, 0, 1}
    missing = PartialStore(str(tmp_path / "partials" / "spend" / "0123"))
    assert subfolders(spark, missing.location) == []
    assert missing.stored_days(spark) == set()
