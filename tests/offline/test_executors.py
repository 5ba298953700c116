"""The fast executors agree with each other and with the reference, at hop and window edges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

import timetile as tt
from timetile.core.tiling import choose_hop
from timetile.core.timeutil import DAY_MS, HOUR_MS
from timetile.core.windows import WindowKind
from timetile.testing import naive_backfill

BASE = 1_704_067_200_000  # 2024-01-01T00:00:00Z
WINDOWS = ["1h", "1d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="6h", kind="hopping")]


def boundary_frames(spark: Any) -> tuple[Any, Any, int]:
    """Events and queries exactly on hop, window and day boundaries."""
    hop = choose_hop([(WindowKind.SLIDING, HOUR_MS, None), (WindowKind.SLIDING, DAY_MS, None),
                      (WindowKind.SAWTOOTH, DAY_MS, HOUR_MS),
                      (WindowKind.HOPPING, DAY_MS, 6 * HOUR_MS)])
    queries = [BASE + DAY_MS + offset for offset in
               (0, 1, -1, hop, hop - 1, hop + 1, HOUR_MS, 6 * HOUR_MS, DAY_MS, DAY_MS + 7)]
    events = []
    for q in queries:
        events.extend((1, q - length + delta, float(delta))  # at q − length ± 1
                      for length in (HOUR_MS, DAY_MS) for delta in (-1, 0, 1))
        events.append((1, q, 100.0))  # exactly at q: never counts for q
        events.append((1, q - hop, 7.0))  # a hop before q
    events += [(1, BASE + k * hop, 1.5) for k in range(0, 2 * DAY_MS // hop + 2, 3)]
    event_frame = spark.createDataFrame(events, "user_id long, ts long, amount double")
    query_frame = spark.createDataFrame([(1, q, i) for i, q in enumerate(queries)],
                                        "user_id long, ts long, qid int")
    return event_frame, query_frame, hop


def join_of(events: Any, queries: Any, *, sweepable: bool = False) -> tt.Join:
    """The boundary join; unless ``sweepable``, with an op the sweep does not compute."""
    aggregations = [tt.Aggregation("amount", op, windows=WINDOWS)
                    for op in ("count", "sum", "max", "first", "last")]
    aggregations.append(tt.Aggregation("amount", "last_k", k=3, windows=WINDOWS))
    aggregations.append(tt.Aggregation("amount", "sum"))
    aggregations.append(tt.Aggregation("amount", "top_k", k=2, windows=WINDOWS))
    if not sweepable:  # a sketch: merges exactly, so every path gives the same result
        aggregations.append(tt.Aggregation("amount", "approx_unique_count", windows=WINDOWS))
    group_by = tt.GroupBy("edge", tt.EventSource(events), ["user_id"], aggregations)
    return tt.Join("edges", tt.EventSource(queries), [group_by])


def rows(frame: Any) -> list[tuple]:
    return sorted(tuple(row) for row in frame.orderBy("qid").collect())


def test_boundary_events_agree_on_every_path(spark: Any) -> None:
    """Every executor equals the oracle; the two fast paths are identical, ``auto`` sweeps
    the 8 features the sweep computes and broadcasts the sketch (10 queries), and the
    reports name the path and the largest (key, hop) group."""
    events, queries, hop = boundary_frames(spark)
    assert hop < HOUR_MS  # the data puts events on both sides of hop boundaries
    join = join_of(events, queries)
    expected = rows(naive_backfill(join, spark))
    jobs = {executor: tt.BackfillJob(join, spark, executor=executor).plan()
            for executor in ("tiled", "interval_tree", "reference", "auto")}
    for executor, job in jobs.items():
        assert rows(job.dataframe()) == expected, executor
    assert jobs["tiled"].report.path == "edge: tiled"
    assert jobs["interval_tree"].report.path == "edge: interval_tree"
    assert jobs["auto"].report.path == "edge: sweep+interval_tree"
    auto = jobs["auto"].dataframe()
    assert auto.columns[-len(join.output_columns()):] == join.output_columns()
    line = next(line for line in jobs["tiled"].report.lines()
                if "largest (key, hop) group" in line)
    busiest = max(events.groupBy((events.ts - events.ts % hop).alias("h")).count()
                  .select("count").collect())[0]
    assert f"{busiest:,} events at key (1,)" in line
    join = join_of(events, queries, sweepable=True)
    expected = rows(naive_backfill(join, spark))
    for executor in ("sweep", "tiled"):
        assert rows(tt.backfill(join, spark, executor=executor)) == expected, executor


@pytest.mark.parametrize(("limit", "counted", "chosen"), [
    (20, False, "interval_tree"),  # 11 timed left rows: at most 11 queries, no job to count
    (10, True, "interval_tree"),  # 11 timed rows, 10 distinct queries: counted, and they fit
    (9, True, "tiled"),  # counted, and they do not fit
])
def test_auto_counts_the_queries_only_when_the_left_rows_do_not_bound_them(
        spark: Any, monkeypatch: pytest.MonkeyPatch, limit: int, counted: bool,
        chosen: str) -> None:
    events, queries, _ = boundary_frames(spark)
    repeated = queries.unionByName(queries.limit(1))  # 11 rows, 10 distinct queries
    untimed = queries.limit(1).withColumn("ts", F.lit(None).cast("long"))
    monkeypatch.setattr("timetile.offline.backfill.BROADCAST_QUERY_LIMIT", limit)
    job = tt.BackfillJob(join_of(events, repeated.unionByName(untimed)), spark).plan()
    assert job.report.path == f"edge: sweep+{chosen}"
    assert ("count queries" in job.report.stage_seconds) == counted


@pytest.mark.parametrize(("key_type", "odd"), [
    ("string", ["a", "b", None]),
    # one key for both zeros, as Spark groups them
    ("double", [1.5, float("nan"), None, 0.0, -0.0]),
])
def test_odd_keys_agree_on_every_path(spark: Any, key_type: str, odd: list[Any]) -> None:
    """String and float keys, two key columns, null, NaN and signed zero keys on both sides."""
    events = spark.createDataFrame(
        [(k, c, BASE + t * HOUR_MS, float(t)) for t in range(12) for k in odd for c in (1, 2)],
        f"k {key_type}, c long, ts long, amount double")
    queries = spark.createDataFrame(
        [(k, c, BASE + t * HOUR_MS + 1, t) for t in (0, 5, 11, 13) for k in odd for c in (1, 3)],
        f"k {key_type}, c long, ts long, `q.id` int")  # a left column's name may hold a dot
    group_by = tt.GroupBy("odd", tt.EventSource(events), ["k", "c"], [
        tt.Aggregation("amount", "sum", windows=["6h", tt.Window("1d", hop="1h")]),
        tt.Aggregation("amount", "max")])
    join = tt.Join("odd", tt.EventSource(queries), [group_by])
    expected = sorted(repr(tuple(r)) for r in naive_backfill(join, spark).collect())
    for executor in ("sweep", "tiled", "interval_tree", "reference"):
        got = sorted(repr(tuple(r)) for r in tt.backfill(join, spark, executor=executor).collect())
        assert got == expected, executor


def test_a_float_left_key_meets_its_double_keys_on_every_path(spark: Any) -> None:
    """Spark compares them widened; the reference's cogroup hashed each side's raw type."""
    events = spark.createDataFrame([(0.5, BASE, 1.0), (2.0, BASE, 2.0)],
                                   "k double, ts long, amount double")
    queries = spark.createDataFrame([(0.5, BASE + 1), (2.0, BASE + 1), (3.0, BASE + 1)],
                                    "k float, ts long")
    join = tt.Join("widened", tt.EventSource(queries), [tt.GroupBy(
        "g", tt.EventSource(events), ["k"], [tt.Aggregation("amount", "sum", windows=["1d"])])])
    expected = sorted(tuple(r) for r in naive_backfill(join, spark).collect())
    assert expected == [(0.5, BASE + 1, 1.0), (2.0, BASE + 1, 2.0), (3.0, BASE + 1, None)]
    for executor in ("sweep", "tiled", "interval_tree", "reference"):
        frame = tt.backfill(join, spark, executor=executor)
        assert frame.schema["k"].dataType.simpleString() == "float", executor
        assert sorted(tuple(r) for r in frame.collect()) == expected, executor


def test_a_one_millisecond_window_has_no_hop_yet_is_computed(
        spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval tree needs no hop; auto takes the reference where the tiled pass would
    be chosen; the tiled executor refuses it and names the executors that take it."""
    events = spark.createDataFrame([(1, BASE, 1.0), (1, BASE + 1, 2.0), (1, BASE + 1, 4.0)],
                                   "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, BASE + 1), (1, BASE + 2), (1, BASE + 5)],
                                    "user_id long, ts long")
    join = tt.Join("tiny", tt.EventSource(queries), [tt.GroupBy(
        "g", tt.EventSource(events), ["user_id"],
        [tt.Aggregation("amount", "approx_unique_count", windows=[1])])])
    expected = sorted(tuple(r) for r in naive_backfill(join, spark).collect())
    assert expected == [(1, BASE + 1, 1), (1, BASE + 2, 2), (1, BASE + 5, 0)]
    for executor in ("auto", "interval_tree", "reference"):
        assert sorted(tuple(r) for r in tt.backfill(join, spark, executor=executor).collect()
                      ) == expected, executor
    monkeypatch.setattr("timetile.offline.backfill.BROADCAST_QUERY_LIMIT", 1)
    job = tt.BackfillJob(join, spark).plan()
    assert job.report.path == "g: reference"
    assert sorted(tuple(r) for r in job.dataframe().collect()) == expected
    with pytest.raises(ValueError, match=r"sliding windows of \[1\] ms without whole hops: "
                                         "use executor 'auto' or 'interval_tree'"):
        tt.backfill(join, spark, executor="tiled").collect()


@pytest.fixture(scope="module")
def time_key_joins(spark: Any) -> list[tuple[tuple[str, ...], tt.Join, list[tuple]]]:
    """Joins on a timestamp and a date key, the sweep's ops and not, and the oracle's rows
    (computed once, in UTC, for every session time zone of the test below)."""
    instants = [1_730_611_800_000, 1_730_615_400_000, 1_600_000_000_123]  # one DST-repeated hour
    events = (spark.createDataFrame(
        [(k, BASE + i * HOUR_MS, float(i)) for k in instants for i in range(60)],
        "at long, ts long, amount double")
        .withColumn("day", F.to_date(F.timestamp_millis("ts"))).withColumn(
            "at", F.timestamp_millis("at")))
    queries = (spark.createDataFrame(
        [(k, BASE + i * 7 * HOUR_MS + 1, i) for k in instants for i in range(8)],
        "at long, ts long, qid int")
        .withColumn("day", F.to_date(F.timestamp_millis("ts"))).withColumn(
            "at", F.timestamp_millis("at"))
        .withColumn("seen", F.timestamp_millis(F.col("ts") - 5)))  # rides through the sweep
    made = []
    for ops in (("count", "sum", "max"), ("count", "variance")):  # the sweep's, and not
        group_by = tt.GroupBy("at", tt.EventSource(events), ["at", "day"], [
            tt.Aggregation("amount", op, windows=["1h", "1d"]) for op in ops])
        join = tt.Join("at", tt.EventSource(queries), [group_by])
        made.append((ops, join, rows(naive_backfill(join, spark))))
    return made


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_timestamp_and_date_keys_work_on_every_executor(
        spark: Any, time_key_joins: list[tuple[tuple[str, ...], tt.Join, list[tuple]]],
        zone: str) -> None:
    """Arrow needs the session's time zone for a timestamp key: every executor passes it
    (a cogroup's, the reference executor's, wants UTC: it failed in New York)."""
    for ops, join, expected in time_key_joins:
        executors = ["tiled", "interval_tree", "reference", "auto"]
        spark.conf.set("spark.sql.session.timeZone", zone)
        try:
            for executor in executors + (["sweep"] if "variance" not in ops else []):
                job = tt.BackfillJob(join, spark, executor=executor, max_key_events=20).plan()
                assert rows(job.dataframe()) == expected, (ops, executor)
        finally:
            spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_a_range_open_on_one_side_keeps_the_first_and_last_milliseconds(spark: Any) -> None:
    """``start`` alone keeps a left row at the last int64 millisecond, ``end`` at the first."""
    first, last = -(2**63), 2**63 - 1
    events = spark.createDataFrame([(1, BASE, 1.0), (1, BASE + HOUR_MS, 2.0)],
                                   "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, t, i) for i, t in enumerate((first, BASE + 1, last))],
                                    "user_id long, ts long, qid int")
    group_by = tt.GroupBy("edge", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "count"), tt.Aggregation("amount", "sum", windows=["1d"])])
    join = tt.Join("edges", tt.EventSource(queries), [group_by])
    for executor in ("auto", "reference"):
        after = rows(tt.backfill(join, spark, start="2024-01-01", executor=executor))
        assert after == [(1, BASE + 1, 1, 1, 1.0), (1, last, 2, 2, None)], executor
        before = rows(tt.backfill(join, spark, end="2024-01-01", executor=executor))
        assert before == [(1, first, 0, 0, None), (1, BASE + 1, 1, 1, 1.0)], executor


def test_collated_string_keys_are_refused_with_a_fix_that_works(spark: Any) -> None:
    """Keys equal under a collation but not in bytes would part in the executors and online."""
    lcase = "CAST(k AS STRING COLLATE UTF8_LCASE)"
    events = spark.createDataFrame([("A", BASE, 1.0), ("a", BASE + 1, 2.0)],
                                   "k string, ts long, amount double").selectExpr(
        f"{lcase} AS k", "ts", "amount")
    queries = spark.createDataFrame([("a", BASE + 5)], "k string, ts long").selectExpr(
        f"{lcase} AS k", "ts")
    count = [tt.Aggregation("amount", "count")]
    join = tt.Join("c", tt.EventSource(queries), [tt.GroupBy("g", tt.EventSource(events), ["k"],
                                                             count)])
    with pytest.raises(tt.DefinitionError, match=r"keys: 'k' is string collate UTF8_LCASE.*Fix: "
                       r"select it as bytes that are equal when the strings are: \{'k': "
                       r"'CAST\(lower\(k\) AS STRING COLLATE UTF8_BINARY\)'\}"):
        tt.backfill(join, spark)
    as_bytes = {"k": "CAST(lower(k) AS STRING COLLATE UTF8_BINARY)", "ts": "ts"}
    fixed = tt.Join("c", tt.EventSource(queries, select=as_bytes), [tt.GroupBy(
        "g", tt.EventSource(events, select={**as_bytes, "amount": "amount"}), ["k"], count)])
    for executor in ("auto", "tiled", "reference"):
        assert [tuple(row) for row in tt.backfill(fixed, spark, executor=executor).collect()] \
            == [("a", BASE + 5, 2)], executor


def test_an_event_at_the_last_int64_millisecond_on_every_path(spark: Any) -> None:
    """A "far future" placeholder time: no window holds it, and no path fails on it (the
    tiled report's label of its hop once did)."""
    last = 2**63 - 1
    events = spark.createDataFrame([(1, BASE, 1.0, "a"), (1, last, 9.0, "a"),
                                    (1, BASE + HOUR_MS, 2.0, "b")],
                                   "k long, ts long, v double, b string")
    queries = spark.createDataFrame([(1, BASE + 2 * HOUR_MS, 0), (1, last, 1)],
                                    "k long, ts long, qid int")
    group_by = tt.GroupBy("far", tt.EventSource(events), ["k"], [
        tt.Aggregation("v", "histogram", windows=["1d"]),
        tt.Aggregation("v", "sum", buckets=["b"])])
    join = tt.Join("far", tt.EventSource(queries), [group_by])
    expected = rows(naive_backfill(join, spark))
    for executor in ("sweep", "tiled", "interval_tree", "reference"):
        assert rows(tt.backfill(join, spark, executor=executor)) == expected, executor


def test_windows_that_reach_past_the_first_int64_millisecond_on_every_path(
        spark: Any, tmp_path: Path) -> None:
    """Such a window starts at the first millisecond; the tiled pass's first hop is short
    (its floor is no int64), and a window may start inside it (an edge scan there). Stored
    partials file that hop under the first day of all, which starts before int64 does."""
    first = -(2**63)
    times = [first, first + 1, first + 5, first + 3 * HOUR_MS, first + DAY_MS, first + 3 * DAY_MS]
    events = spark.createDataFrame([(1, t, float(i + 1)) for i, t in enumerate(times)],
                                   "k long, ts long, v double")
    asked = [first, first + 2, first + HOUR_MS, first + DAY_MS + 3, first + 2 * DAY_MS + 4,
             first + 4 * DAY_MS, BASE]
    queries = spark.createDataFrame([(1, t, i) for i, t in enumerate(asked)],
                                    "k long, ts long, qid int")
    windows = ["1h", "1d", tt.Window("1d", hop="1h"), tt.Window("2d", hop="6h", kind="hopping")]
    group_by = tt.GroupBy("early", tt.EventSource(events), ["k"], [
        tt.Aggregation("v", op, windows=windows) for op in ("sum", "max", "last")])
    join = tt.Join("early", tt.EventSource(queries), [group_by])
    expected = rows(naive_backfill(join, spark))
    assert any(value is not None for row in expected for value in row[3:])
    for executor in ("sweep", "tiled", "interval_tree", "reference"):
        assert rows(tt.backfill(join, spark, executor=executor)) == expected, executor
    store = str(tmp_path / "partials")
    for run in ("stores", "reuses"):
        job = tt.BackfillJob(join, spark, executor="tiled", partials_path=store).plan()
        assert rows(job.dataframe()) == expected, run
    (note,) = [note for note in job.report.notes if "hop partials" in note]
    last_day = (first + 3 * DAY_MS) // DAY_MS
    assert note.startswith("early: hop partials of 2 days reused, 0 computed and stored"), note
    assert note.endswith(f"1 days computed but not stored, as they may still be landing "
                         f"(from epoch day {last_day})"), note


def test_release_unpersists_what_the_tiled_pass_cached(spark: Any) -> None:
    """Each tiled backfill persists its first stage; a long session must be able to free it."""
    events = spark.createDataFrame([(1, BASE, 1.0), (1, BASE + HOUR_MS, 2.0)],
                                   "k long, ts long, v double")
    queries = spark.createDataFrame([(1, BASE + 2 * HOUR_MS, 0)], "k long, ts long, qid int")
    join = tt.Join("kept", tt.EventSource(queries), [tt.GroupBy(
        "kept", tt.EventSource(events), ["k"], [tt.Aggregation("v", "sum", windows=["1d"])])])
    job = tt.BackfillJob(join, spark, executor="tiled").plan()
    assert rows(job.dataframe()) == [(1, BASE + 2 * HOUR_MS, 0, 3.0)]
    [stage1] = job.options.cached
    assert stage1.is_cached
    job.release()
    assert not stage1.is_cached
    assert job.options.cached == []
    assert rows(job.dataframe()) == [(1, BASE + 2 * HOUR_MS, 0, 3.0)]  # recomputed, cached again
