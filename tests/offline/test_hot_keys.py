"""Hot keys on the sweep: cut into chunks of time, they still give exactly the oracle's results."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS
from timetile.core.windows import WindowKind, window_bounds, window_reach
from timetile.offline.executors.sweep.executor import sweep_features
from timetile.offline.hot_keys import (
    CASE_LIMIT,
    CHUNK,
    WORTH_CUTTING,
    HotKey,
    KeySplit,
    chunk_length,
    chunk_load,
    find_hot_keys,
    part_reach,
    shortest_chunk,
    with_chunks,
    worth_tallying,
)
from timetile.offline.plan import ExecutorOptions, plan_backfill
from timetile.testing import (
    differing_cells,
    naive_backfill,
    random_events,
    random_queries,
    to_spark,
)

BASE = 1_704_067_200_000  # 2024-01-01T00:00:00Z
WINDOWS = ["1h", "1d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="6h", kind="hopping")]


def mismatches(join: tt.Join, ours: Any, spark: Any, order: list[str]) -> list[tuple]:
    """Return the cells where ``ours`` differs from the oracle (see ``differing_cells``)."""
    mine = ours.orderBy(*order).collect()
    theirs = naive_backfill(join, spark).orderBy(*order).collect()
    assert len(mine) == len(theirs)
    return differing_cells(mine, theirs, join.output_columns())


def test_window_reach_is_the_farthest_window_start() -> None:
    times = np.arange(-3000, 3000, dtype=np.int64)
    for kind, hop in ((WindowKind.SLIDING, None), (WindowKind.SAWTOOTH, 300),
                      (WindowKind.HOPPING, 300), (WindowKind.HOPPING, 1000)):
        starts, _ = window_bounds(times, kind, 1000, hop)
        assert int((times - starts).max()) == window_reach(kind, 1000, hop), (kind, hop)
    assert window_reach(WindowKind.LIFETIME, None, None) is None


@pytest.mark.parametrize("case_limit", [CASE_LIMIT, 0])  # 0: the broadcast join instead
def test_every_chunk_that_can_see_an_event_gets_a_copy(spark: Any, case_limit: int) -> None:
    """An event at t goes to exactly the chunks of t and of the queries in (t, t + reach]:
    every chunk that needs it, and no other; a query to the chunk of its time. Negative
    times, a chunk shorter than the reach, a two-column key, a null key (hot by its
    queries: null meets null) and an int split type against bigint rows included."""
    chunk, reach = 7, 10
    hot = [(1, "x"), (None, None)]
    split = KeySplit(tuple(HotKey(key, 0, -50, 50, chunk) for key in hot), reach,
                     (T.IntegerType(), T.StringType()))
    keys = [*hot, (1, "y"), (2, "x"), (None, "x")]
    rows = spark.createDataFrame(
        [(k, s, t, value) for k, s in keys for t in range(-50, 50) for value in (1.0, None)],
        "k long, s string, _tt_time long, v double")
    events: dict[tuple[Any, ...], list[int]] = {}
    queries: dict[tuple[Any, ...], list[int]] = {}
    for row in with_chunks(rows, ["k", "s"], split, F.col("v").isNotNull(),
                           case_limit=case_limit).collect():
        copies = events if row["v"] is not None else queries
        copies.setdefault((row["k"], row["s"], row["_tt_time"]), []).append(row[CHUNK])
    for t in range(-50, 50):
        for k, s in hot:
            assert sorted(events[(k, s, t)]) == sorted({q // chunk
                                                        for q in range(t, t + reach + 1)}), t
            assert queries[(k, s, t)] == [t // chunk]
        for k, s in keys[len(hot):]:  # cold keys: one copy each, chunk 0
            assert events[(k, s, t)] == queries[(k, s, t)] == [0]


def evenly(rows: int, span: int, start: int = 0) -> list[int]:
    """Return ``rows`` times spread evenly over ``[start, start + span)``."""
    return [start + i * span // rows for i in range(rows)]


def test_chunk_lengths_fit_the_sampled_rows_and_bound_the_copies() -> None:
    # events alone, 10,000 in a day: too dense for 1,000 rows a chunk; two reaches
    assert chunk_length(evenly(10_000, DAY_MS), [], HOUR_MS, 1000) == 2 * HOUR_MS
    # 10 events a day: a chunk and its day of reach hold 100 in 10 days
    assert chunk_length(evenly(1000, 100 * DAY_MS), [], DAY_MS, 100) == 215 * HOUR_MS
    # hot by its left rows, 1,000 a day and 1 event: a day a chunk, far under the reach
    assert chunk_length(evenly(100, 100 * DAY_MS), evenly(100_000, 100 * DAY_MS),
                        7 * DAY_MS, 1000) == 23 * HOUR_MS
    # a burst of 100 events in an hour among 500 left rows a day: 900 / 500 a day
    assert chunk_length(evenly(100, HOUR_MS, 10 * DAY_MS), evenly(30_000, 60 * DAY_MS),
                        7 * DAY_MS, 1000) == 43 * HOUR_MS
    # left rows at one instant cannot be cut: the copies' bound, 2 · reach · 500 / 15,500
    assert chunk_length(evenly(500, 60 * DAY_MS), [0] * 15_000, 7 * DAY_MS,
                        1000) == 11 * HOUR_MS
    # half the rows are events: 2 · reach · 0.5
    assert chunk_length(evenly(500, 60 * DAY_MS), [0] * 500, 7 * DAY_MS, 100) == 7 * DAY_MS


def test_a_key_is_worth_cutting_when_its_shortest_chunks_hold_little_of_it() -> None:
    """Judged at the shortest length allowed, not the fitted one: a key 5% over the limit,
    spread over 60 days, fills its fitted chunks but is worth cutting; events alone within
    two reaches are not."""
    def fullest_share(events: list[int], queries: list[int], reach: int) -> float:
        shortest = shortest_chunk(reach, len(events), len(queries))
        held = chunk_load(np.array(events), np.array(queries), reach, shortest)
        return held / (len(events) + len(queries))

    spread = evenly(945, 60 * DAY_MS), evenly(105, 60 * DAY_MS)  # 1,050 sampled rows
    assert fullest_share(*spread, HOUR_MS) <= WORTH_CUTTING
    assert chunk_load(*(np.array(times) for times in spread), HOUR_MS,
                      chunk_length(*spread, HOUR_MS, 1000)) > WORTH_CUTTING * 1050
    assert fullest_share(evenly(1000, 2 * DAY_MS), [], DAY_MS) > WORTH_CUTTING
    assert shortest_chunk(DAY_MS, 1000, 0) == 2 * DAY_MS
    assert shortest_chunk(128 * DAY_MS, 1, 10**9) == DAY_MS  # copies per event: 128 at most


def boundary_frames(spark: Any, chunk: int) -> tuple[Any, Any]:
    """Key 1's queries on and next to its chunk boundaries, with events at their windows'
    edges; key 2 is cold and shares the times."""
    queries = [BASE + k * chunk + offset for k in range(1, 4) for offset in (-1, 0, 1)]
    events = []
    for q in queries:
        for length in (HOUR_MS, DAY_MS, DAY_MS + 6 * HOUR_MS):
            events.extend((key, q - length + delta, float(delta))
                          for key in (1, 2) for delta in (-1, 0, 1))
        events.append((1, q, 100.0))  # exactly at q: never counts for q
    events += [(1, BASE + k * HOUR_MS, 1.5) for k in range(0, 5 * chunk // HOUR_MS, 5)]
    return (spark.createDataFrame(events, "user_id long, ts long, amount double"),
            spark.createDataFrame([(key, q, i) for i, q in enumerate(queries) for key in (1, 2)],
                                  "user_id long, ts long, qid int"))


@pytest.mark.parametrize("chunk", [HOUR_MS, 5 * HOUR_MS + 7, 3 * DAY_MS])
def test_a_chunked_key_sees_the_events_of_its_windows_across_chunk_edges(
        spark: Any, chunk: int) -> None:
    """Any chunk length is correct, shorter than the reach included: an event goes to every
    chunk from its own to that of ``time + reach``."""
    events, queries = boundary_frames(spark, chunk)
    group_by = tt.GroupBy("edge", tt.EventSource(events), ["user_id"], [
        *[tt.Aggregation("amount", op, windows=WINDOWS)
          for op in ("count", "sum", "max", "first", "last", "unique_count")],
        *[tt.Aggregation("amount", op, k=3, windows=WINDOWS)
          for op in ("last_k", "top_k", "bottom_k")]])
    join = tt.Join("edges", tt.EventSource(queries), [group_by])
    part = plan_backfill(join, spark).parts[0]
    reach = part_reach(part)
    assert reach == DAY_MS + 6 * HOUR_MS - 1
    split = KeySplit((HotKey((1,), 0, BASE, BASE + 4 * chunk, chunk),), reach, (T.LongType(),))
    asked = part.queries(plan_backfill(join, spark).left)
    chunked = sweep_features(part, asked, ExecutorOptions(key_split=split))
    whole = sweep_features(part, asked)
    columns = [feature.name for feature in part.features]
    key, time = part.keys[0], "_tt_time"
    assert (sorted(tuple(r) for r in chunked.select(key, time, *columns).collect())
            == sorted(tuple(r) for r in whole.select(key, time, *columns).collect()))


def hot_join(events: Any, queries: Any) -> tt.Join:
    """Many ops, windows and buckets over the events, for the left rows ``queries``."""
    group_by = tt.GroupBy("hot", tt.EventSource(events), ["user_id"], [
        *[tt.Aggregation(column, op, windows=WINDOWS)
          for op in ("count", "sum", "avg", "min", "max", "variance", "stddev")
          for column in ("amount", "quantity")],
        *[tt.Aggregation(column, op, windows=WINDOWS) for op in ("first", "last")
          for column in ("amount", "item")],
        tt.Aggregation("item", "first_k", k=2, windows=WINDOWS),
        *[tt.Aggregation("item", op, windows=WINDOWS) for op in ("unique_count", "histogram")],
        tt.Aggregation("quantity", "top_k", k=3, windows=WINDOWS),
        tt.Aggregation("amount", "bottom_k", k=2, windows=WINDOWS),
        *[tt.Aggregation(column, op, windows=WINDOWS, buckets=["item"])  # a copy per bucket
          for column, op in (("amount", "sum"), ("quantity", "histogram"))]])
    return tt.Join("hot_keys", tt.EventSource(queries), [group_by])


@pytest.fixture(scope="module")
def hot(spark: Any) -> tuple[Any, Any, Any, list[Any]]:
    """3,000 skewed events, 300 left rows, and the oracle's rows, computed once: the left
    key's type changes the key column's type only, never a feature."""
    table = random_events(3000, 20, seed=51, days=7)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 300, seed=52))
    oracle = naive_backfill(hot_join(events, queries), spark)
    return table, events, queries, oracle.orderBy("user_id", "ts", "label").collect()


@pytest.mark.parametrize("left_key", ["bigint", "int"])  # int: the union widens the key
def test_backfill_splits_hot_keys_and_equals_the_oracle(
        spark: Any, hot: tuple[Any, Any, Any, list[Any]], left_key: str) -> None:
    table, events, queries, oracle = hot
    queries = queries.withColumn("user_id", F.col("user_id").cast(left_key))
    join = hot_join(events, queries)
    job = tt.BackfillJob(join, spark, max_key_events=150).plan()
    ours = job.dataframe()
    assert job.report.path == "hot: sweep"
    assert "find hot keys" in job.report.stage_seconds
    assert any("swept in chunks of time" in note for note in job.report.notes)
    mine = ours.orderBy("user_id", "ts", "label").collect()
    assert len(mine) == len(oracle)
    bad = differing_cells(mine, oracle, join.output_columns())
    assert not bad, bad[:10]

    part = job.planned.parts[0]
    split = find_hot_keys(part, [], part_reach(part) or 0, 150)
    counts = table.group_by("user_id").aggregate([("ts", "count")]).to_pylist()
    over = {row["user_id"] for row in counts if row["ts_count"] > 150}
    assert {hot.key[0] for hot in split.hot} <= over  # a sample of all: exact counts
    assert (1,) in {hot.key for hot in split.hot}  # the Zipf head


@pytest.mark.parametrize("edge", [-(2**63) + 10, 2**63 - 11])
def test_a_hot_key_with_times_at_the_ends_of_int64_is_cut(spark: Any, edge: int) -> None:
    """Chunks at the first and last int64 milliseconds: no overflow, the oracle's values."""
    events = [(1, BASE + i * 60_000, float(i)) for i in range(400)] + [(1, edge, 7.0)]
    queries = [(1, BASE + i * 600_000, i) for i in range(40)] + [(1, edge + 10, 40)]
    group_by = tt.GroupBy("edge", tt.EventSource(spark.createDataFrame(
        events, "user_id long, ts long, amount double")), ["user_id"],
        [tt.Aggregation("amount", op, windows=["1h"]) for op in ("sum", "count")])
    join = tt.Join("edges", tt.EventSource(spark.createDataFrame(
        queries, "user_id long, ts long, qid int")), [group_by])
    job = tt.BackfillJob(join, spark, max_key_events=100).plan()
    ours = job.dataframe()
    assert any("swept in chunks of time" in note for note in job.report.notes)
    assert not mismatches(join, ours, spark, ["qid"])


def test_a_key_hot_by_its_left_rows_is_cut_too(spark: Any) -> None:
    """A key with few events but many left rows (and a null key with many) is found, cut by
    its queries' times, and still gives the oracle's results."""
    table = random_events(400, 20, seed=55, days=7)
    events = to_spark(spark, table)
    rng = np.random.default_rng(56)
    times = [int(t) for t in rng.integers(BASE - DAY_MS, BASE + 8 * DAY_MS, 600)]
    placeholder = [(7, t, 0.5) for t in times[:400]] + [(None, t, 1.5) for t in times[400:]]
    queries = to_spark(spark, random_queries(table, 200, seed=57)).unionByName(
        spark.createDataFrame(placeholder, "user_id long, ts long, label double"))
    group_by = tt.GroupBy("placeholder", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", op, windows=WINDOWS) for op in ("count", "sum", "max")])
    join = tt.Join("placeholders", tt.EventSource(queries), [group_by])
    job = tt.BackfillJob(join, spark, max_key_events=150).plan()
    ours = job.dataframe()
    assert any("left rows) swept in chunks of time" in note for note in job.report.notes)
    assert not mismatches(join, ours, spark, ["user_id", "ts", "label"])

    part = job.planned.parts[0]
    split = find_hot_keys(part, [part.query_rows(job.planned.left)], part_reach(part) or 0, 150)
    found = {hot.key: hot for hot in split.hot}
    assert {(7,), (None,)} <= set(found)
    assert found[(7,)].left_rows >= 400 > found[(7,)].events  # the sample is all: exact
    assert found[(None,)].events == 0


def test_a_key_hot_by_its_left_rows_gets_chunks_shorter_than_the_reach(spark: Any) -> None:
    """40 events and 1,200 left rows over 8 days, a 3-day window, a limit of 150: chunks of
    about 21 hours hold about 150 rows each, where chunks of two reaches (the bound for a
    key hot by its events) would hold 900."""
    rng = np.random.default_rng(60)
    events = [(7, BASE + int(t), float(i)) for i, t in enumerate(
        rng.integers(0, 8 * DAY_MS, 40))] + [(8, BASE + DAY_MS, 1.0)]
    left = [(7, BASE + int(t), 0.5) for t in rng.integers(0, 8 * DAY_MS, 1200)]
    group_by = tt.GroupBy("g", tt.EventSource(spark.createDataFrame(
        events, "user_id long, ts long, amount double")), ["user_id"],
        [tt.Aggregation("amount", op, windows=["3d", "1h"]) for op in ("count", "sum", "max")])
    join = tt.Join("j", tt.EventSource(spark.createDataFrame(
        left, "user_id long, ts long, label double")), [group_by])
    job = tt.BackfillJob(join, spark, max_key_events=150).plan()
    part = job.planned.parts[0]
    split = find_hot_keys(part, [part.query_rows(job.planned.left)], 3 * DAY_MS, 150)
    (hot,) = split.hot
    assert hot.key == (7,)
    assert 12 * HOUR_MS < hot.chunk_ms < DAY_MS
    held = rows_per_chunk(hot, [t for key, t, _ in events if key == 7],
                          [t for _, t, _ in left], 3 * DAY_MS)
    assert max(held) <= 1.5 * 150, held  # each chunk and its reach: near the limit
    assert not mismatches(join, job.dataframe(), spark, ["ts", "label"])


def rows_per_chunk(hot: HotKey, events: list[int], queries: list[int], reach: int) -> list[int]:
    """Return, for each chunk of ``hot`` that holds a row, its queries and the events of
    its time and of the reach before it: the rows its sweep task holds."""
    length = hot.chunk_ms
    return [sum(1 for t in queries if t // length == chunk)
            + sum(1 for t in events if chunk * length - reach <= t < (chunk + 1) * length)
            for chunk in {t // length for t in (*queries, *events)}]


def test_a_burst_of_events_sizes_the_chunks_of_its_key(spark: Any) -> None:
    """2,000 events over 30 days and 2,000 more in two of them, a limit of 500: chunks
    sized by the burst hold about 500 rows where the 30 days' mean density would give
    chunks of 3.6 days, and the one holding the burst 2,500 rows."""
    rng = np.random.default_rng(61)
    times = [*rng.integers(0, 30 * DAY_MS, 2000), *rng.integers(10 * DAY_MS, 12 * DAY_MS, 2000)]
    events = [(1, BASE + int(t), 1.0) for t in times]
    left = [(1, BASE + int(t), 0.0) for t in rng.integers(0, 30 * DAY_MS, 100)]
    join = one_key_join(spark, events, left)
    job = tt.BackfillJob(join, spark, max_key_events=500).plan()
    part = job.planned.parts[0]
    split = find_hot_keys(part, [part.query_rows(job.planned.left)], HOUR_MS, 500)
    (hot,) = split.hot
    assert hot.chunk_ms <= 12 * HOUR_MS
    held = rows_per_chunk(hot, [t for _, t, _ in events], [t for _, t, _ in left], HOUR_MS)
    assert max(held) <= 1.5 * 500, held
    assert not mismatches(join, job.dataframe(), spark, ["ts", "label"])


def test_a_hot_key_within_two_reaches_is_swept_whole_and_reported(spark: Any) -> None:
    events = spark.createDataFrame(
        [(1 + (i % 7 == 0), BASE + i * 60_000, float(i)) for i in range(2000)],  # 33 hours
        "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, BASE + k * HOUR_MS) for k in range(0, 40, 3)],
                                    "user_id long, ts long")
    group_by = tt.GroupBy("dense", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1d"])])
    join = tt.Join("dense", tt.EventSource(queries), [group_by])
    job = tt.BackfillJob(join, spark, max_key_events=100).plan()
    ours = job.dataframe()
    whole = [note for note in job.report.notes if "swept whole" in note]
    assert len(whole) == 1
    assert "2 hot key(s)" in whole[0]
    assert "the largest, 1," in whole[0]
    assert not any("in chunks of time" in note for note in job.report.notes)
    assert not mismatches(join, ours, spark, ["user_id", "ts"])


def test_small_parts_and_lifetime_windows_skip_the_search(spark: Any) -> None:
    table = random_events(600, 8, seed=53, days=3)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 60, seed=54))
    lifetime = tt.GroupBy("life", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1d"]),
                           tt.Aggregation("amount", "max")])
    join = tt.Join("life", tt.EventSource(queries), [lifetime])
    for limit in (10, 10_000):  # a lifetime window: never split; a big limit: no key is hot
        job = tt.BackfillJob(join, spark, max_key_events=limit).plan()
        ours = job.dataframe()
        assert "find hot keys" not in job.report.stage_seconds
        assert not mismatches(join, ours, spark, ["user_id", "ts", "label"])


def test_the_fullest_key_bucket_bounds_every_key_and_spares_the_search(spark: Any) -> None:
    """2,000 events and 400 left rows over 100 keys outnumber a limit of 100, but no bucket
    of key hashes holds that many: no search runs, and the buckets bound every key's rows.
    One key with 150 left rows fills its bucket, and the search runs again."""
    rng = np.random.default_rng(61)
    events = [(key, BASE + int(t), 1.0) for key in range(100)
              for t in rng.integers(0, 7 * DAY_MS, 20)]
    left = [(int(key), BASE + int(t), 0.0) for key, t in
            zip(rng.integers(0, 100, 400), rng.integers(0, 7 * DAY_MS, 400), strict=True)]
    join = one_key_join(spark, events, left)
    job = tt.BackfillJob(join, spark, max_key_events=100).plan()
    assert "find hot keys" not in job.report.stage_seconds
    left_counts, event_counts = job.report.sources
    most_asked = max(np.bincount([key for key, _, _ in left]))
    assert most_asked <= left_counts.fullest_bucket[("user_id",)] < 100 - 20
    assert 20 <= event_counts.fullest_bucket[("user_id",)] <= 60  # 4,096 buckets, 100 keys
    assert not mismatches(join, job.dataframe(), spark, ["user_id", "ts", "label"])

    crowded = one_key_join(spark, events, [*left, *[(5, BASE + i, 1.0) for i in range(150)]])
    job = tt.BackfillJob(crowded, spark, max_key_events=100).plan()
    assert "find hot keys" in job.report.stage_seconds
    assert job.report.sources[0].fullest_bucket[("user_id",)] >= 150
    assert any("hot key" in note for note in job.report.notes)


def test_only_parts_that_spark_estimates_as_big_are_tallied(spark: Any, tmp_path: Any) -> None:
    """The tally costs a small part for nothing: a Parquet part of 1,000 rows is tallied for
    a limit of 10 rows, not for one of 100,000; Python rows have no estimate, so they are."""
    path = str(tmp_path / "events")
    spark.range(1000).select(F.col("id").alias("user_id"), (F.col("id") * 1000).alias("ts"),
                             F.rand(1).alias("amount")).write.parquet(path)
    events = spark.read.parquet(path)
    assert worth_tallying([events], 10)
    assert not worth_tallying([events], 100_000)
    assert worth_tallying([spark.createDataFrame([(1,)], "user_id long")], 10**12)
    group_by = tt.GroupBy("g", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1h"])])
    join = tt.Join("j", tt.EventSource(events.select("user_id", "ts")), [group_by])
    for limit, tallied in ((100_000, False), (10, True)):
        sources = tt.BackfillJob(join, spark, max_key_events=limit).plan().report.sources
        assert bool(sources[1].fullest_bucket) is tallied
        assert bool(sources[0].fullest_bucket) is tallied


def test_a_non_positive_limit_is_refused(spark: Any) -> None:
    events = spark.createDataFrame([(1, 1, 1.0)], "user_id long, ts long, amount double")
    group_by = tt.GroupBy("g", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1d"])])
    join = tt.Join("j", tt.EventSource(events.select("user_id", "ts")), [group_by])
    with pytest.raises(ValueError, match="max_key_events"):
        tt.BackfillJob(join, spark, max_key_events=0).plan()


def one_key_join(spark: Any, events: list[tuple], left: list[tuple], *,
                 accuracy: tt.Accuracy = tt.Accuracy.TEMPORAL) -> tt.Join:
    """A join of (user_id, ts, amount) events and (user_id, ts, label) left rows, 1h windows."""
    group_by = tt.GroupBy("g", tt.EventSource(spark.createDataFrame(
        events, "user_id long, ts long, amount double")), ["user_id"],
        [tt.Aggregation("amount", op, windows=["1h"]) for op in ("count", "sum")],
        accuracy=accuracy)
    return tt.Join("j", tt.EventSource(spark.createDataFrame(
        left, "user_id long, ts long, label double")), [group_by])


def test_a_burst_of_events_is_cut_by_its_own_density(spark: Any) -> None:
    """Events in one day and a few left rows over 60 days: the chunks follow the events'
    density, not the whole span's (which would hold every event in one chunk)."""
    rng = np.random.default_rng(58)
    events = [(1, BASE + int(t), 1.0) for t in rng.integers(0, DAY_MS, 3000)]
    left = [(1, BASE + int(t), 0.0) for t in rng.integers(-30 * DAY_MS, 30 * DAY_MS, 40)]
    join = one_key_join(spark, events, left)
    job = tt.BackfillJob(join, spark, max_key_events=500).plan()
    part = job.planned.parts[0]
    split = find_hot_keys(part, [part.query_rows(job.planned.left)], part_reach(part) or 0, 500)
    assert [hot.key for hot in split.hot] == [(1,)]
    assert split.hot[0].chunk_ms <= 4 * HOUR_MS  # 500 rows of 3,000 a day, less the reach
    assert not mismatches(join, job.dataframe(), spark, ["ts", "label"])


@pytest.mark.parametrize("case_limit", [CASE_LIMIT, 0])
def test_timestamp_keys_find_their_chunks_in_any_driver_time_zone(
        spark: Any, monkeypatch: pytest.MonkeyPatch, case_limit: int) -> None:
    """A timestamp key in New York's repeated hour and a timestamp without time zone, found
    and cut while the driver's zone is not the session's: their rows still meet their
    chunk length (a Python datetime would lose the fold, or move the NTZ value)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        repeated = 1_730_615_400_000  # 2024-11-03T06:30Z: the second 01:30 in New York
        rows = spark.createDataFrame(
            [(repeated * 1000, "2024-11-03 01:30:00", BASE + i * 60_000, float(i))
             for i in range(300)], "u long, n string, _tt_time long, v double").select(
            F.timestamp_micros("u").alias("u"), F.col("n").cast("timestamp_ntz").alias("n"),
            "_tt_time", "v")
        rows = rows.unionByName(rows.withColumn("u", F.col("u") + F.expr("INTERVAL 1 HOUR")))
        part = tt.GroupBy("g", tt.EventSource(rows.withColumnRenamed("_tt_time", "ts")),
                          ["u", "n"], [tt.Aggregation("v", "sum", windows=["1h"])])
        plan = plan_backfill(tt.Join("j", tt.EventSource(rows.select(
            "u", "n", F.col("_tt_time").alias("ts"))), [part]), spark).parts[0]
        split = find_hot_keys(plan, [], HOUR_MS, 100)
        assert len(split.hot) == 2
        keyed = rows.select(F.col("u").alias(plan.keys[0]), F.col("n").alias(plan.keys[1]),
                            "_tt_time", "v")
        chunked = with_chunks(keyed, plan.keys, split, F.col("v").isNotNull(),
                              case_limit=case_limit)
        assert chunked.where(F.col(CHUNK) == 0).count() == 0  # BASE is far from 0
        assert "2024-11-03T06:30:00.000Z" in " ".join(split.describe("g"))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_distinct_queries_count_when_the_sweep_gets_distinct_queries(spark: Any) -> None:
    """Under SNAPSHOT the sweep gets each (key, day) query once, so 400 left rows of one key
    on two days are 2 queries, not a hot key."""
    rng = np.random.default_rng(59)
    events = [(7, BASE + int(t), 1.0) for t in rng.integers(0, 4 * DAY_MS, 30)]
    left = [(7, BASE + int(t), 0.5) for t in rng.integers(2 * DAY_MS, 4 * DAY_MS, 400)]
    join = one_key_join(spark, events, left, accuracy=tt.Accuracy.SNAPSHOT)
    job = tt.BackfillJob(join, spark, max_key_events=150).plan()
    assert "find hot keys" in job.report.stage_seconds
    assert not any("hot key" in note for note in job.report.notes)
    assert not mismatches(join, job.dataframe(), spark, ["ts", "label"])


def test_parts_sharing_a_group_by_are_counted_one_sweep_at_a_time(spark: Any) -> None:
    """Two parts ask key 7 of one GroupBy 80 times each: each sweep holds 110 rows of it,
    under a limit of 150, so nothing is cut; at 100 it is, and still equals the oracle."""
    rng = np.random.default_rng(60)
    events = spark.createDataFrame([(7, BASE + int(t), 1.0)
                                    for t in rng.integers(0, 7 * DAY_MS, 30)],
                                   "user_id long, ts long, amount double")
    left = spark.createDataFrame([(7, 7, BASE + int(t), float(i)) for i, t in
                                  enumerate(rng.integers(0, 7 * DAY_MS, 80))],
                                 "guest_id long, host_id long, ts long, label double")
    group_by = tt.GroupBy("g", tt.EventSource(events), ["user_id"],
                          [tt.Aggregation("amount", "sum", windows=["1h"])])
    join = tt.Join("j", tt.EventSource(left), [
        tt.JoinPart(group_by, prefix="guest", key_mapping={"guest_id": "user_id"}),
        tt.JoinPart(group_by, prefix="host", key_mapping={"host_id": "user_id"})])
    for limit, cut in ((150, False), (100, True)):
        job = tt.BackfillJob(join, spark, max_key_events=limit).plan()
        notes = [note for note in job.report.notes if "hot key" in note]
        assert bool(notes) is cut, notes
        if cut:
            assert "30 events and 80 left rows" in notes[0]
        assert not mismatches(join, job.dataframe(), spark, ["ts", "label"])
