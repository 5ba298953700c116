"""The online contract for entity sources: upload the snapshot of day D, stream the mutations
of D+1 (CDC), and every fetch equals ``tt.backfill`` at that (key, time), on both stores.

The data of :func:`random_entities` updates, deletes and re-inserts keys, mutates two keys
in one millisecond and one key twice in one millisecond, at exactly midnight and at the last
millisecond of a day; fetches sit at exactly midnight and at exact mutation times, where the
mutation does not count yet (``mutation_ts < a``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.store.entity_records import put_mutations
from timetile.store.kv import open_store
from timetile.store.tiles import put_events
from timetile.testing import random_entities, same_value, to_spark

DS = "2024-01-01"
DAY_END = date_to_ms(DS) + DAY_MS
KEYS = [1, 2, 3, 4, 9, 10, 99]  # 10 is inserted on the first day; 99 never exists


def aggregations() -> list[tt.Aggregation]:
    made = [tt.Aggregation("balance", op, k=2 if op.endswith("_k") else None)
            for op in ("count", "sum", "avg", "min", "max", "last", "first_k", "variance")]
    made += [tt.Aggregation("tier", op) for op in ("unique_count", "histogram", "last")]
    made.append(tt.Aggregation("balance", "sum", windows=["6h", "1d", tt.Window("1d", hop="1h")]))
    made.append(tt.Aggregation("tier", "count", windows=["2d"]))
    made.append(tt.Aggregation("balance", "max", windows=["1d"], buckets=["tier"]))
    return made


def between(table: pa.Table, start: int, end: int) -> pa.Table:
    times = table.column("mutation_ts")
    return table.filter(pc.and_(pc.greater_equal(times, start), pc.less(times, end)))


def test_fetch_equals_backfill_through_a_day_of_mutations(spark: Any, store_uri: str) -> None:
    tables = random_entities(9, seed=61, start=DS, days=3, mutations_per_day=30)
    snapshots, mutations = to_spark(spark, tables.snapshots), to_spark(spark, tables.mutations)
    source = tt.EntitySource(snapshots, mutation_table=mutations, time_column="since")
    lookup_source = tt.EntitySource(snapshots, mutation_table=mutations,
                                    select=["user_id", "tier", "balance"])
    users = tt.GroupBy("users", source, ["user_id"], aggregations())
    daily = tt.GroupBy("daily", source, ["user_id"], [tt.Aggregation("balance", "sum")],
                       accuracy=tt.Accuracy.SNAPSHOT)
    now = tt.GroupBy("now", lookup_source, ["user_id"])
    parts = [users, daily, now]
    report = upload(tt.Join("j", tt.EventSource(snapshots), parts), spark, DS, store_uri)
    assert report.written["users"][0] == 9  # key 10 is not in the snapshot of DS yet
    next_day = between(tables.mutations, DAY_END, DAY_END + DAY_MS)
    day_after = between(tables.mutations, DAY_END + DAY_MS, DAY_END + 2 * DAY_MS)
    late = between(tables.mutations, DAY_END - DAY_MS, DAY_END).slice(0, 3)
    with open_store(store_uri) as store:
        half = next_day.num_rows // 2
        for group_by in parts:
            first = put_mutations(store, group_by, pa.concat_tables([next_day.slice(0, half),
                                                                     late]), "b1")
            assert (first.written, first.late) == (half, late.num_rows)
            put_mutations(store, group_by, next_day.slice(half), "b2")
            put_mutations(store, group_by, next_day.slice(half), "b2")  # a replay
            put_mutations(store, group_by, day_after, "b3")
        stamps = next_day.column("mutation_ts").to_pylist()
        rng = np.random.default_rng(62)
        at = sorted({DAY_END, DAY_END + DAY_MS - 1, *stamps[::3],
                     *(int(t) for t in rng.integers(DAY_END, DAY_END + DAY_MS, 6))})
        # the next day, with no new upload: the record and two days of mutations (within the
        # slack) equal the backfill's next snapshot and its day's mutations
        later = [DAY_END + DAY_MS + 5 * HOUR_MS, DAY_END + 2 * DAY_MS - 1]
        queries = spark.createDataFrame([(k, t) for k in KEYS for t in [*at, *later]],
                                        "user_id long, ts long")
        join = tt.Join("online", tt.EventSource(queries), parts)
        truth = {(row["user_id"], row["ts"]): row for row in tt.backfill(join, spark).collect()}
        fetcher = Fetcher(join, store)
        bad, compared = [], 0
        for moment in [*at, *later]:
            results = fetcher.fetch([{"user_id": k} for k in KEYS], at=moment)
            for key, result in zip(KEYS, results, strict=True):
                assert result.stale == [], (key, moment)
                expected = truth[(key, moment)]
                assert set(result.features) == set(expected.asDict()) - {"user_id", "ts"}
                for name, value in result.features.items():
                    compared += 1
                    if not same_value(value, expected[name]):
                        bad.append((name, key, moment, value, expected[name]))
        assert not bad, f"{len(bad)} of {compared} differ, e.g. {bad[:5]}"
        changed = [key for key in KEYS if truth[(key, at[-1])]["now_tier"] != truth[
            (key, DAY_END)]["now_tier"] or truth[(key, at[-1])]["users_balance_sum"] != truth[
            (key, DAY_END)]["users_balance_sum"]]
        assert len(changed) >= 3, "the streamed mutations must change what a fetch sees"


def test_mutation_writes_refuse_and_count_bad_rows(spark: Any, store_uri: str) -> None:
    tables = random_entities(3, seed=63, start=DS, days=2, mutations_per_day=2)
    snapshots, mutations = to_spark(spark, tables.snapshots), to_spark(spark, tables.mutations)
    source = tt.EntitySource(snapshots, mutation_table=mutations)
    users = tt.GroupBy("users", source, ["user_id"], [tt.Aggregation("balance", "count")])
    with pytest.raises(tt.DefinitionError, match=r"snapshot_table: has no partition 2023-12-01"):
        upload(users, spark, "2023-12-01", store_uri)
    upload(users, spark, DS, store_uri)
    rows = between(tables.mutations, DAY_END, DAY_END + DAY_MS).slice(0, 2)
    flags = pa.array([None, True], type=pa.bool_())
    broken = rows.set_column(rows.schema.get_field_index("is_before"), "is_before", flags)
    with open_store(store_uri) as store:
        report = put_mutations(store, users, broken, "b1")
        assert (report.written, report.unusable) == (1, 1)
        with pytest.raises(ValueError, match="lack the columns"):
            put_mutations(store, users, rows.drop_columns(["tier"]), "b2")
        with pytest.raises(tt.DefinitionError, match="put_mutations"):
            put_events(store, users, rows, "b3")


def test_fetches_before_the_day_end_stray_retractions_and_mismatched_types(
        spark: Any, store_uri: str) -> None:
    snapshots = spark.createDataFrame(
        [(DS, 1, 4.0, dt.datetime(2024, 1, 1, 5, 0, 0, 500), dt.date(2024, 1, 1))],
        "ds string, user_id long, stars double, at timestamp, day date")
    mutations = spark.createDataFrame(
        [], "user_id long, stars double, at timestamp, day date, mutation_ts long, "
        "is_before boolean")
    source = tt.EntitySource(snapshots, mutation_table=mutations)
    users = tt.GroupBy("users", source, ["user_id"], [tt.Aggregation("stars", "count")])
    days = tt.GroupBy("days", tt.EntitySource(snapshots, mutation_table=mutations,
                                              select=["user_id", "day"]), ["user_id"])
    with pytest.raises(tt.DefinitionError, match=r"lookup column 'day' is date"):
        upload(days, spark, DS, store_uri)
    upload(users, spark, DS, store_uri)
    at = pa.array([dt.datetime(2024, 1, 1, 5, 0, 0, 500, tzinfo=dt.timezone.utc)] * 2,
                  type=pa.timestamp("us", tz="UTC"))
    edit = pa.table({"user_id": [1, 1], "stars": [4.0, 5.0], "at": at,
                     "day": pa.array([dt.date(2024, 1, 1)] * 2),
                     "mutation_ts": [DAY_END + HOUR_MS] * 2, "is_before": [True, False]})
    stray = pa.table({"user_id": [7], "stars": [1.0], "at": at.slice(0, 1),
                      "day": pa.array([dt.date(2024, 1, 1)]),
                      "mutation_ts": [DAY_END + HOUR_MS], "is_before": [True]})
    join = tt.Join("j", tt.EventSource(spark.createDataFrame([(1, 0)], "user_id long, ts long")),
                   [users])
    with open_store(store_uri) as store:
        put_mutations(store, users, edit, "b1")  # µs timestamps retract the uploaded row
        put_mutations(store, users, stray, "b2")
        with pytest.raises(ValueError, match=r"'stars' is string, the snapshot's is float"):
            put_mutations(store, users, edit.set_column(1, "stars", pa.array(["4", "5"])), "b3")
        fetcher = Fetcher(join, store)
        after, stray_key = fetcher.fetch([{"user_id": 1}, {"user_id": 7}],
                                         at=DAY_END + 2 * HOUR_MS)
        assert after.features == {"users_stars_count": 1}
        assert after.stale == []
        assert stray_key.features == {"users_stars_count": 0}
        assert fetcher.unmatched == {"users": 1}
        early = fetcher.fetch([{"user_id": 1}], at=DAY_END - HOUR_MS)[0]  # never the future
        assert early.features == {"users_stars_count": 0}
        assert early.stale == ["users"]
