"""A hot key's fetches merge kept states (``timetile.core.series_folds``) and stay exact.

One key holds most of the events, so its runs of edge and streamed events are long enough
for the fetcher to keep their states. Its fetches, at times in any order, as the stream's
batches land and after ``refresh``, equal the backfill; and a refresh keeps the states kept
(their ops are the same), where it used to build them again beside the old ones. Without
Spark, a record built by hand and tiles that are replayed with other values, written under
a batch id that sorts first and expired give the fetcher every change its kept tiles can
see, and its answers equal brute force over the events the store holds.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import timetile as tt
from timetile.core.reference import aggregate_windows
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.store.kv import open_store
from timetile.store.layout import online_features, tile_table
from timetile.store.tiles import put_events
from timetile.testing import random_events, same_value, to_spark
from timetile.testing.hand_upload import upload_key

DS = "2024-01-03"
DAY_END = date_to_ms(DS) + DAY_MS
WINDOWS: list[str | tt.Window] = [
    "1h", "1d", "3d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="7h", kind="hopping")]


@pytest.mark.spark
def test_a_hot_keys_fetches_equal_the_backfill_as_batches_land(spark: Any,
                                                                store_uri: str) -> None:
    table = random_events(6_000, 6, seed=71, start="2024-01-01", days=4)
    events = to_spark(spark, table)
    aggregations = [tt.Aggregation("amount", op, windows=WINDOWS)
                    for op in ("count", "sum", "max", "variance")]
    aggregations += [tt.Aggregation("item", "last_k", k=3, windows=WINDOWS),
                     tt.Aggregation("item", "approx_unique_count", windows=WINDOWS),
                     tt.Aggregation("amount", "sum")]
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"], aggregations)
    upload(users, spark, DS, store_uri)
    times = pc.fill_null(table.column("ts"), -1)
    batches = [table.filter(pc.and_(pc.greater_equal(times, DAY_END + begin * HOUR_MS),
                                    pc.less(times, DAY_END + end * HOUR_MS)))
               for begin, end in ((0, 9), (9, 15), (15, 24))]
    rng = np.random.default_rng(72)
    moments = [sorted(int(t) for t in rng.integers(DAY_END, DAY_END + end * HOUR_MS, 12))
               for end in (9, 15, 24)]
    at = sorted({t for chunk in moments for t in chunk})
    keys = [1, 2]  # 1 holds about 40% of the events: runs of hundreds
    queries = spark.createDataFrame([(k, t) for k in keys for t in at], "user_id long, ts long")
    join = tt.Join("hot", tt.EventSource(queries), [users])
    truth = {(row["user_id"], row["ts"]): row for row in tt.backfill(join, spark).collect()}
    bad = []
    with open_store(store_uri) as store:
        fetcher = Fetcher(join, store)
        for index, (batch, chunk) in enumerate(zip(batches, moments, strict=True)):
            put_events(store, users, batch, f"b{index}")
            for moment in rng.permutation(chunk):  # later times first, then earlier
                for key in keys:
                    [result] = fetcher.fetch([{"user_id": key}], at=int(moment))
                    expected = truth[(key, int(moment))]
                    bad += [(name, key, int(moment), value, expected[name])
                            for name, value in result.features.items()
                            if not same_value(value, expected[name])]
            kept = fetcher.kept_states
            assert kept > 0, "the hot key's runs keep states"
            fetcher.refresh()
            for moment in chunk:
                fetcher.fetch([{"user_id": key} for key in keys], at=moment)
            assert fetcher.kept_states == kept, "a refresh keeps the states kept"
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def test_replayed_reordered_and_expired_tiles_reach_the_kept_streamed_events(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(81)
    aggregations = [tt.Aggregation("x", op, windows=WINDOWS)
                    for op in ("count", "sum", "max", "approx_unique_count")]
    aggregations += [tt.Aggregation("x", "last_k", k=3, windows=WINDOWS),
                     tt.Aggregation("x", "sum")]
    group_by = tt.GroupBy("g", tt.EventSource("t.parquet", time_column="ts"), ["k"],
                          aggregations)
    join = tt.Join("j", tt.EventSource("t.parquet", time_column="ts"), [group_by])
    day_end = 100 * DAY_MS
    features = online_features(group_by, {"x": "int"})
    old_times = np.sort(rng.integers(day_end - 4 * DAY_MS, day_end, 4_000) // 10_000 * 10_000)
    old_values = rng.integers(0, 60, len(old_times))

    def batch(begin: int, end: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        times = rng.integers(day_end + begin * HOUR_MS, day_end + end * HOUR_MS, count)
        return rng.integers(0, 60, count), times // 1_000 * 1_000

    held: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # batch id → what the store holds
    with open_store(f"lmdb://{tmp_path / 'store'}") as store:
        upload_key(store, group_by, day_end, {"x": (old_values, old_times.astype(np.int64))},
                   value_types={"x": "int"})
        fetcher = Fetcher(join, store)

        def land(batch_id: str, values: np.ndarray, times: np.ndarray) -> None:
            put_events(store, group_by, pa.table({"k": np.ones(len(times), np.int64),
                                                  "ts": times, "x": values}), batch_id)
            held[batch_id] = (values, times)

        def check(until: int, since: int = day_end) -> None:
            values = np.concatenate([old_values, *(v for v, _ in held.values())])
            times = np.concatenate([old_times, *(t for _, t in held.values())])
            keep = (times < day_end) | (times >= since)
            order = np.argsort(times[keep], kind="stable")
            values, times = values[keep][order], times[keep][order].astype(np.int64)
            for at in rng.integers(day_end, day_end + until * HOUR_MS, 12):
                [result] = fetcher.fetch([{"k": 1}], at=int(at))
                for feature in features:
                    low, high = feature.interval(int(at))
                    [truth] = aggregate_windows(feature.aggregator, times, values,
                                                np.array([low]), np.array([high]))
                    assert same_value(result.features[feature.name], truth), (
                        feature.name, int(at), result.features[feature.name], truth)

        land("b1", *batch(0, 6, 900))
        check(6)
        land("b2", *batch(6, 12, 900))
        check(12)
        replayed = held["b1"][1]
        land("b1", rng.integers(60, 90, len(replayed)), replayed)  # a replay, other values
        check(12)
        land("a0", *batch(2, 12, 600))  # sorts before every earlier batch, in their hours
        check(12)
        store.expire_tiles(tile_table("g"), day_end + 3 * HOUR_MS)
        check(12, since=day_end + 3 * HOUR_MS)
        land("b3", *batch(12, 36, 6_000))  # a 1-day window's run moves both its ends
        check(36, since=day_end + 3 * HOUR_MS)
        # Kept per op and anchor, not per fetch: the streamed run's anchor is the day end, and
        # the edge's where a window's body begins or a hop's ends, or the day end; and per op
        # the blocks of the streamed events, for the runs of the 1-day windows after 24 h.
        assert fetcher.kept_states > 0
        [kept] = fetcher._streamed.values()
        assert 0 < kept.series["x"].kept_runs <= 5 + 5
        assert len(kept.series["x"]._blocks) == 5  # count, sum, max, the HLL and last_k
        [record] = fetcher._records.values()
        assert 0 < record.edges["x"].kept_runs <= 5 * 3


def test_a_fetcher_let_go_of_is_freed_at_once(tmp_path: Path) -> None:
    """No reference cycle: a fetcher let go of (a server's, replaced, or frozen out of the
    collector's passes at its start) frees its caches and kept states at once, without the
    cyclic garbage collector."""
    rng = np.random.default_rng(3)
    group_by = tt.GroupBy("g", tt.EventSource("t.parquet", time_column="ts"), ["k"], [
        tt.Aggregation("x", op, windows=WINDOWS) for op in ("sum", "max")])
    join = tt.Join("j", tt.EventSource("t.parquet", time_column="ts"), [group_by])
    day_end = 100 * DAY_MS
    old_times = np.sort(rng.integers(day_end - 4 * DAY_MS, day_end, 4_000)).astype(np.int64)
    with open_store(f"lmdb://{tmp_path / 'store'}") as store:
        upload_key(store, group_by, day_end, {"x": (rng.integers(0, 60, 4_000), old_times)},
                   value_types={"x": "int"})
        times = rng.integers(day_end, day_end + 36 * HOUR_MS, 6_000)
        put_events(store, group_by, pa.table({"k": np.ones(len(times), np.int64), "ts": times,
                                              "x": rng.integers(0, 60, len(times))}), "b1")
        fetcher = Fetcher(join, store)
        for at in range(day_end + 26 * HOUR_MS, day_end + 36 * HOUR_MS, HOUR_MS):
            fetcher.fetch([{"k": 1}], at=at)
        assert fetcher.kept_states > 0  # checkpoints and blocks
        series = [*(folds for record in fetcher._records.values()
                    for folds in record.edges.values()),
                  *(folds for streamed in fetcher._streamed.values()
                    for folds in streamed.series.values())]
        assert len(series) == 2  # the record's edge and the streamed events
        gone = [weakref.ref(fetcher), *map(weakref.ref, series)]
        del series
        gc.disable()
        try:
            del fetcher
            assert [ref() for ref in gone] == [None] * len(gone)
        finally:
            gc.enable()
