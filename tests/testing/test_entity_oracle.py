"""The entity oracle on hand-computed cases, and its state against a plain-Python replay.

The table ``accounts`` (user_id, balance, tier, since), days 0, 1, 2 from the epoch
(``D`` = one day in ms). Partition 1970-01-01 (day 0, the table at the end of day 0)::

    1: 10.0 a since 100        2: 20.0 b since 200        3: 30.0 c since null
    4: 5.0 d since 400, twice (a duplicate row)
    7: 1.0 z 500 | 2.0 a 500 | null zz 500 | null q null | 0.5 late 900
    8: 1.0 z 500 | 2.0 a 500 | null zz 500 | null q null

Mutations of day 1: key 1 updated at exactly D (10 -> 11); key 2 deleted at D+1000 and
re-inserted at D+2000 (22.0); key 1 updated twice at D+3000 (11 -> 12 -> 13, one
millisecond); key 5 inserted at D+5000 (50.0). Partition 1970-01-02 is the result. Day 2:
key 3 updated at 2D+100 (30 -> 33, its before image has a null since); partition
1970-01-03 is missing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import timetile as tt
from timetile.api.errors import DefinitionError
from timetile.core.timeutil import date_to_ms
from timetile.testing import naive_backfill, random_entities, to_spark
from timetile.testing.entity_oracle import entity_state
from timetile.testing.generators import random_entity_queries

D = 86_400_000
Image = tuple[Any, ...]

DAY0: list[Image] = [
    (1, 10.0, "a", 100), (2, 20.0, "b", 200), (3, 30.0, "c", None),
    (4, 5.0, "d", 400), (4, 5.0, "d", 400),
    (7, 1.0, "z", 500), (7, 2.0, "a", 500), (7, None, "zz", 500), (7, None, "q", None),
    (7, 0.5, "late", 900),
    (8, 1.0, "z", 500), (8, 2.0, "a", 500), (8, None, "zz", 500), (8, None, "q", None),
]
MUTATIONS = [  # image, mutation_ts, is_before
    ((1, 10.0, "a", 100), D, True), ((1, 11.0, "a", D), D, False),
    ((2, 20.0, "b", 200), D + 1000, True),
    ((2, 22.0, "b", D + 2000), D + 2000, False),
    ((1, 12.0, "a", D + 3000), D + 3000, True),  # listed before its own insertion
    ((1, 11.0, "a", D), D + 3000, True), ((1, 12.0, "a", D + 3000), D + 3000, False),
    ((1, 13.0, "a", D + 3000), D + 3000, False),
    ((5, 50.0, "e", D + 5000), D + 5000, False),
    ((3, 30.0, "c", None), 2 * D + 100, True), ((3, 33.0, "c", 2 * D + 100), 2 * D + 100, False),
]
DAY1: list[Image] = [
    (1, 13.0, "a", D + 3000), (2, 22.0, "b", D + 2000), (3, 30.0, "c", None),
    (4, 5.0, "d", 400), (4, 5.0, "d", 400), (5, 50.0, "e", D + 5000),
    *(row for row in DAY0 if row[0] in (7, 8)),
]
ROW = "user_id bigint, balance double, tier string, since bigint"


@pytest.fixture(scope="module")
def tables(spark: Any) -> tuple[Any, Any]:
    snapshots = spark.createDataFrame(
        [("1970-01-01", *row) for row in DAY0] + [("1970-01-02", *row) for row in DAY1],
        f"ds string, {ROW}")
    mutations = spark.createDataFrame([(*image, ts, before) for image, ts, before in MUTATIONS],
                                      f"{ROW}, mutation_ts bigint, is_before boolean")
    return snapshots, mutations


def accounts(tables: tuple[Any, Any], **options: Any) -> tt.EntitySource:
    snapshots, mutations = tables
    return tt.EntitySource(snapshots, mutation_table=mutations, **options)


def backfill(spark: Any, queries: list[tuple[Any, Any]], *parts: Any) -> dict[str, dict]:
    """Features by label ``"{key}@{time}"`` for queries of (user_id, ts)."""
    left = spark.createDataFrame([(k, t, f"{k}@{t}") for k, t in queries],
                                 "user_id bigint, ts bigint, label string")
    join = tt.Join("j", tt.EventSource(left, time_column="ts"), list(parts))
    rows = naive_backfill(join, spark).collect()
    assert len(rows) == len(queries)
    return {row["label"]: row.asDict(recursive=True) for row in rows}


W10S = tt.Window(10_000)
AGGREGATIONS = [
    tt.Aggregation("balance", "count"), tt.Aggregation("balance", "sum"),
    tt.Aggregation("balance", "count", windows=[W10S]),
    tt.Aggregation("balance", "sum", windows=[W10S]),
]

# query -> (count, sum, count over [a - 10 s, a) by since, sum over it); TEMPORAL.
EXPECTED = {
    (1, D): (1, 10.0, 0, None),  # midnight, at the update at D: it does not count yet
    (1, D + 1): (1, 11.0, 1, 11.0),
    (1, D + 3000): (1, 11.0, 1, 11.0),  # at the two updates of one ms: neither counts
    (1, D + 3001): (1, 13.0, 1, 13.0),  # both count; 12 came and went in that ms
    (2, D + 1500): (0, None, 0, None),  # deleted
    (2, D + 2000): (0, None, 0, None),  # at the re-insert
    (2, D + 2001): (1, 22.0, 1, 22.0),
    (5, D + 4000): (0, None, 0, None),  # not inserted yet, absent from the snapshot
    (5, D + 6000): (1, 50.0, 1, 50.0),
    (3, D + 10): (1, 30.0, 0, None),  # lifetime reads the row with a null since
    (4, D + 10): (2, 10.0, 0, None),  # a duplicate row counts twice
    (6, D + 10): (0, None, 0, None),  # never present
    (None, D + 10): (0, None, 0, None),  # a null key meets no row
    (1, 2 * D): (1, 13.0, 0, None),  # midnight: partition 1 alone
    (3, 2 * D + 200): (1, 33.0, 1, 33.0),  # the before image with a null since retracts
    (1, 3 * D + 5): (None, None, None, None),  # partition 2 is missing
    (1, 5): (None, None, None, None),  # day 0: no partition -1
    (1, None): (None, None, None, None),  # no time
}
# SNAPSHOT: the partition of the day before, windows end at the day's start.
EXPECTED_SNAPSHOT = {
    (1, D + 1): (1, 10.0, 0, None), (1, D + 3001): (1, 10.0, 0, None),
    (2, D + 2001): (1, 20.0, 0, None), (5, D + 6000): (0, None, 0, None),
    (3, 2 * D + 200): (1, 30.0, 0, None), (1, 2 * D + 5): (1, 13.0, 0, None),
    (1, 3 * D + 5): (None, None, None, None), (1, D - 1): (None, None, None, None),
}


def _features(row: dict, name: str) -> tuple[Any, ...]:
    return tuple(row[column] for column in tt.GroupBy(
        name, tt.EntitySource("t", time_column="since"), ["user_id"],
        AGGREGATIONS).output_columns())


@pytest.mark.parametrize("typed", [False, True], ids=["strings-and-ms", "dates-and-timestamps"])
def test_entity_aggregations_pin_the_rules(spark: Any, tables: tuple[Any, Any],
                                           typed: bool) -> None:
    snapshots, mutations = tables
    if typed:  # a DATE partition and timestamp mutation times read the same
        snapshots = snapshots.withColumn("ds", snapshots["ds"].cast("date"))
        mutations = mutations.withColumn(
            "mutation_ts", (mutations["mutation_ts"] / 1000).cast("timestamp"))
    source = tt.EntitySource(snapshots, mutation_table=mutations, time_column="since")
    temporal = tt.GroupBy("acct", source, ["user_id"], AGGREGATIONS)
    snapshot = tt.GroupBy("snap", source, ["user_id"], AGGREGATIONS,
                          accuracy=tt.Accuracy.SNAPSHOT)
    rows = backfill(spark, [*EXPECTED, *EXPECTED_SNAPSHOT], temporal, snapshot)
    for (key, ts), expected in EXPECTED.items():
        assert _features(rows[f"{key}@{ts}"], "acct") == expected, (key, ts)
    for (key, ts), expected in EXPECTED_SNAPSHOT.items():
        assert _features(rows[f"{key}@{ts}"], "snap") == expected, (key, ts)


def test_lookup_takes_the_last_row_nulls_first(spark: Any, tables: tuple[Any, Any]) -> None:
    select = ["user_id", "balance", "tier", "since"]
    timed = tt.GroupBy("by_time", accounts(tables, select=select, time_column="since"),
                       ["user_id"])
    untimed = tt.GroupBy("by_value", accounts(tables, select=select), ["user_id"])
    queries = [(7, D + 10), (8, D + 10), (1, D + 3000), (1, D + 3001), (2, D + 1500),
               (6, D + 10), (1, 3 * D + 5)]
    rows = backfill(spark, queries, timed, tt.JoinPart(untimed, prefix="p"))
    assert list(rows["7@86400010"])[3:] == [
        "by_time_balance", "by_time_tier", "by_time_since",
        "p_by_value_balance", "p_by_value_tier", "p_by_value_since"]

    def values(label: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        row = list(rows[label].values())[3:]
        return tuple(row[:3]), tuple(row[3:])

    # 7: since 900 is last by time (null time first); by value, 2.0 beats the nulls.
    assert values("7@86400010") == ((0.5, "late", 900), (2.0, "a", 500))
    # 8: at since 500, balance 2.0 sorts after null (nulls first).
    assert values("8@86400010") == ((2.0, "a", 500), (2.0, "a", 500))
    assert values(f"1@{D + 3000}") == ((11.0, "a", D), (11.0, "a", D))
    assert values(f"1@{D + 3001}") == ((13.0, "a", D + 3000), (13.0, "a", D + 3000))
    nothing = ((None, None, None), (None, None, None))
    assert values(f"2@{D + 1500}") == nothing  # deleted
    assert values(f"6@{D + 10}") == nothing  # never present
    assert values(f"1@{3 * D + 5}") == nothing  # missing partition


def test_entity_left_queries_each_snapshot_row_at_its_day_end(
        spark: Any, tables: tuple[Any, Any]) -> None:
    events = spark.createDataFrame([(1, D - 5), (1, D), (1, 2 * D - 1), (4, 0)],
                                   "user_id bigint, ts bigint")
    views = tt.GroupBy("views", tt.EventSource(events, time_column="ts"), ["user_id"],
                       [tt.Aggregation("ts", "count")])
    acct = tt.GroupBy("acct", accounts(tables), ["user_id"], [tt.Aggregation("balance", "sum")])
    join = tt.Join("left", accounts(tables), [views, acct])  # its own mutations are ignored
    frame = naive_backfill(join, spark)
    assert frame.columns == ["ds", "user_id", "balance", "tier", "since",
                             "views_ts_count", "acct_balance_sum"]
    rows = Counter(tuple(row) for row in frame.collect())
    views_count = {"1970-01-01": {1: 1, 4: 1}, "1970-01-02": {1: 3, 4: 1}}  # before D, 2D
    expected: Counter[tuple[Any, ...]] = Counter()
    for ds, day_rows in (("1970-01-01", DAY0), ("1970-01-02", DAY1)):
        for image in day_rows:  # duplicates stay
            key = image[0]
            # At the end of day d the state is partition d itself.
            balances = [row[1] for row in day_rows if row[0] == key and row[1] is not None]
            expected[(ds, *image, views_count[ds].get(key, 0),
                      sum(balances) if balances else None)] += 1
    assert rows == expected
    later = naive_backfill(join, spark, start="1970-01-02", end="1970-01-02").collect()
    assert Counter(row["ds"] for row in later) == {"1970-01-02": len(DAY1)}


def test_period_source_answers_as_of_the_period_start(spark: Any) -> None:
    hour = 3_600_000
    rows = [(1, 0, 1.0), (1, hour, 2.0), (1, 2 * hour, 4.0), (1, 20 * hour, 8.0),
            (1, 22 * hour, 16.0)]
    hourly = tt.EventSource(spark.createDataFrame(rows, "user_id bigint, ts bigint, x double"),
                            time_column="ts", period="1h")
    seven = tt.EventSource(hourly.table, time_column="ts", period="7h")
    parts = [
        tt.GroupBy("h", hourly, ["user_id"], [tt.Aggregation("x", "sum"),
                                              tt.Aggregation("x", "sum", windows=["1h"])]),
        tt.GroupBy("s", seven, ["user_id"], [tt.Aggregation("x", "sum")],
                   accuracy=tt.Accuracy.SNAPSHOT),
    ]
    got = backfill(spark, [(1, 90 * 60_000), (1, 2 * hour), (1, 2 * hour + 1),
                           (1, 150 * 60_000), (1, D + hour)], *parts)

    def sums(label: str) -> tuple[Any, ...]:
        row = got[label]
        return row["h_x_sum"], row["h_x_sum_1h"], row["s_x_sum"]

    assert sums(f"1@{90 * 60_000}") == (1.0, 1.0, None)  # as of 1h: only the row at 0
    assert sums(f"1@{2 * hour}") == (3.0, 2.0, None)
    assert sums(f"1@{2 * hour + 1}") == (3.0, 2.0, None)
    assert sums(f"1@{150 * 60_000}") == (3.0, 2.0, None)
    # SNAPSHOT then the 7h period: as of floor(24h, 7h) = 21h, so 20h counts and 22h not.
    assert sums(f"1@{D + hour}") == (31.0, None, 15.0)


def test_definitions_of_periods_and_lookups() -> None:
    assert tt.EventSource("t", period="90m").period_ms == 90 * 60_000
    assert tt.EventSource("t").period_ms is None
    for bad in ("0h", "1x", 5):
        with pytest.raises(DefinitionError, match="period"):
            tt.EventSource("t", period=bad)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match=r"source\.select: a lookup"):
        tt.GroupBy("l", tt.EntitySource("t"), ["user_id"])
    with pytest.raises(DefinitionError, match=r"source\.select: selects only keys"):
        tt.GroupBy("l", tt.EntitySource("t", select=["user_id"]), ["user_id"])
    lookup = tt.GroupBy("l", tt.EntitySource("t", select=["tier", "user_id", "x"]), ["user_id"])
    assert lookup.is_lookup
    assert lookup.lookup_columns == ("tier", "x")
    assert tt.JoinPart(lookup, prefix="p").output_columns() == ["p_l_tier", "p_l_x"]


def _replay(snapshots: list[dict], mutations: list[dict], key: int,
            at: int) -> Counter[Image] | None:
    """The state of ``key`` at ``at``: the previous partition, then each ms applied at once."""
    day = at // D
    if not any(row["day"] == day - 1 for row in snapshots):
        return None
    rows = [row for row in snapshots if row["day"] == day - 1 and row["user_id"] == key]
    state = Counter((r["user_id"], r["balance"], r["tier"], r["since"]) for r in rows)
    by_ms: dict[int, list[dict]] = {}
    for row in mutations:
        if row["user_id"] == key and day * D <= row["mutation_ts"] < at:
            by_ms.setdefault(row["mutation_ts"], []).append(row)
    for ms in sorted(by_ms):
        for row in by_ms[ms]:
            state[(row["user_id"], row["balance"], row["tier"], row["since"])] += (
                -1 if row["is_before"] else 1)
        assert all(count >= 0 for count in state.values())
    return +state


@pytest.mark.parametrize("seed", [3, 11])
def test_state_and_features_match_a_python_replay(spark: Any, seed: int) -> None:
    generated = random_entities(6, seed=seed, days=3, mutations_per_day=12,
                                missing_day="2024-01-02")
    queries = random_entity_queries(generated, 80, seed=seed).to_pylist()
    snapshots = [{**row, "day": date_to_ms(row["ds"]) // D}
                 for row in generated.snapshots.to_pylist()]
    mutations = generated.mutations.to_pylist()
    source = tt.EntitySource(to_spark(spark, generated.snapshots), time_column="since",
                             mutation_table=to_spark(spark, generated.mutations))

    targets = [(q["user_id"], q["ts"]) for q in queries
               if q["user_id"] is not None and q["ts"] is not None]
    frame = spark.createDataFrame(targets, "user_id bigint, at bigint")
    state: dict[tuple[int, int], Counter[Image]] = {}
    for row in entity_state(spark, source, ["user_id"], frame).collect():
        image = (row["user_id"], row["balance"], row["tier"], row["since"])
        state.setdefault((row["user_id"], row["at"]), Counter())[image] += 1

    group_by = tt.GroupBy("e", source, ["user_id"], [
        tt.Aggregation("balance", "count"), tt.Aggregation("since", "max", windows=["1d"])])
    features = backfill(spark, [(q["user_id"], q["ts"]) for q in queries], group_by)
    checked = 0
    for key, at in targets:
        expected = _replay(snapshots, mutations, key, at)
        row = features[f"{key}@{at}"]
        if expected is None:  # the partition before day(at) is missing
            assert (row["e_balance_count"], row["e_since_max_1d"]) == (None, None)
            assert (key, at) not in state
            continue
        checked += 1
        assert state.get((key, at), Counter()) == expected, (key, at)
        assert row["e_balance_count"] == sum(n for image, n in expected.items()
                                             if image[1] is not None)
        recent = [image[3] for image in expected if image[3] is not None
                  and at - D <= image[3] < at]
        assert row["e_since_max_1d"] == (max(recent) if recent else None)
    assert checked > 50

