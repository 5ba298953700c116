"""``tt.backfill`` equals the naive oracle for every op and every window kind.

Random Zipf-skewed data with nulls, NaN, ±inf, equal timestamps, duplicate queries, keys
without events, events exactly at ``q − length`` and at ``q``, and empty windows
(:mod:`timetile.testing.generators` promises each). Exact ops must match exactly (floats to
1e-9 relative: the oracle and the engine sum in different orders); approximate ops must lie
within their stated error bounds of the oracle's exact answer.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import timetile as tt
from timetile.core.aggregators.sketches import HLL_RSE, KLL_RANK_ERROR
from timetile.testing import (
    naive_backfill,
    percentile_rank_bounds,
    percentiles_within,
    random_events,
    random_queries,
    same_value,
    to_spark,
)

WINDOWS: list[str | tt.Window] = [
    "1h",
    "1d",
    tt.Window("1d", hop="1h"),
    tt.Window("1d", hop="6h", kind="hopping"),
]
#: Which column each op reads: every value type is covered by some op.
COLUMNS = {
    "count": ["flag", "item"],
    "sum": ["amount", "quantity"],
    "avg": ["amount", "quantity"],
    "min": ["amount", "item", "flag"],
    "max": ["amount", "item"],
    "first": ["amount", "item"],
    "last": ["amount", "quantity", "flag"],
    "first_k": ["amount"],
    "last_k": ["item"],
    "top_k": ["amount"],
    "bottom_k": ["item"],
    "variance": ["amount", "quantity"],
    "stddev": ["amount"],
    "skew": ["amount"],
    "kurtosis": ["quantity"],
    "unique_count": ["amount", "item"],
    "approx_unique_count": ["item", "quantity"],
    "approx_percentile": ["amount"],
    "histogram": ["item", "quantity"],
    # the decayed ops of double and string columns are tested on every executor against
    # direct summation (test_decayed.py); here, an integer column's against the SQL oracle
    "decayed_sum": ["quantity"],
}
PARAMS: dict[str, dict[str, Any]] = {
    "first_k": {"k": 3}, "last_k": {"k": 3}, "top_k": {"k": 2}, "bottom_k": {"k": 4},
    "approx_percentile": {"percentiles": [0.1, 0.5, 0.99]},
    "decayed_sum": {"half_life": "2h"},
}


def aggregations() -> list[tt.Aggregation]:
    made = []
    for op, columns in COLUMNS.items():
        for column in columns:
            made.append(tt.Aggregation(column, op, windows=WINDOWS, **PARAMS.get(op, {})))
            made.append(tt.Aggregation(column, op, **PARAMS.get(op, {})))  # lifetime
    made.append(tt.Aggregation("amount", "decayed_avg", half_life="3h", windows=["1d"],
                               buckets=["item"]))
    return made


@pytest.fixture(scope="module")
def join(spark: Any) -> tt.Join:
    table = random_events(500, 25, seed=11, days=3, zipf_exponent=1.3)
    # KLL is exact below k = 200 values and randomized above: keep every key below it, so
    # the approximate percentiles are checked deterministically (their bound is tested in
    # tests/core on larger data).
    busiest = max(table.column("user_id").value_counts().to_pylist(), key=lambda c: c["counts"])
    assert busiest["counts"] < 200
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 160, seed=12,
                                             window_lengths=("1h", "1d", "6h")))
    source = tt.EventSource(events, time_column="ts")
    user = tt.GroupBy("user", source, ["user_id"], aggregations())
    return tt.Join("parity", tt.EventSource(queries, time_column="ts"), [user])


def by_row(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda row: (repr(row["user_id"]), repr(row["ts"]), repr(row["label"])))


def within_hll_bound(estimate: int, truth: int) -> bool:
    # 3 RSE covers 99.7% of estimates; small windows keep HLL in its list/set modes, where
    # the rounded estimate is exact, and the bound then rounds to 0.
    return abs(estimate - truth) <= 3 * HLL_RSE * truth


@pytest.fixture(scope="module")
def oracle_rows(spark: Any, join: tt.Join) -> list[Any]:
    """The oracle's rows, exact values and percentile rank bounds, computed once."""
    return by_row(percentile_rank_bounds(join, spark, KLL_RANK_ERROR).collect())


@pytest.mark.parametrize("executor", ["tiled", "interval_tree", "reference", "auto"])
def test_backfill_equals_the_oracle(spark: Any, join: tt.Join, oracle_rows: list[Any],
                                    executor: str) -> None:
    """``auto`` splits the part: the sweep computes at least half its features (count, sum,
    avg, min, max, variance, stddev, skew, kurtosis, unique_count, first, last, first_k,
    last_k), the interval tree the rest; the columns keep the definition's order."""
    job = tt.BackfillJob(join, spark, executor=executor).plan()
    frame = job.dataframe()
    assert frame.columns[-len(join.output_columns()):] == join.output_columns()
    path = "sweep+interval_tree" if executor == "auto" else executor
    assert job.report.path == f"user: {path}"
    ours = by_row(frame.collect())
    theirs = oracle_rows
    assert len(ours) == len(theirs) == 160
    mismatches = []
    for mine, oracle in zip(ours, theirs, strict=True):
        assert (mine["user_id"], mine["ts"], repr(mine["label"])) == (
            oracle["user_id"], oracle["ts"], repr(oracle["label"]))
        for column in join.output_columns():
            got, want = mine[column], oracle[column]
            if "_approx_percentile" in column:
                ok = percentiles_within(got, want)
            elif "_approx_unique_count" in column:
                ok = (got is None and want is None and mine["ts"] is None) or (
                    got is not None and want is not None and within_hll_bound(got, want))
            else:
                ok = same_value(got, want)
            if not ok:
                mismatches.append((column, mine["user_id"], mine["ts"], got, want))
    assert not mismatches, f"{len(mismatches)} mismatches, e.g.\n" + "\n".join(
        map(repr, mismatches[:15]))


def test_percentiles_skip_nan_as_kll_does(spark: Any) -> None:
    events = spark.createDataFrame(
        [(1, 10, 1.0), (1, 11, math.nan), (1, 12, math.nan), (1, 13, math.nan), (1, 14, 2.0)],
        "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, 15, 0.0), (1, 12, 0.0)],
                                    "user_id long, ts long, label double")
    group_by = tt.GroupBy("p", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "approx_percentile", percentiles=[0.0, 0.5, 0.99])])
    join = tt.Join("nan", tt.EventSource(queries), [group_by])
    ours = {row["ts"]: row["p_amount_approx_percentile"]
            for row in tt.backfill(join, spark).collect()}
    assert ours == {15: [1.0, 1.0, 2.0], 12: [1.0, 1.0, 1.0]}
    bounds = percentile_rank_bounds(join, spark, KLL_RANK_ERROR).collect()
    assert all(percentiles_within(ours[row["ts"]], row["p_amount_approx_percentile"])
               for row in bounds)


def test_prefix_key_mapping_and_several_parts(spark: Any) -> None:
    events = to_spark(spark, random_events(300, 10, seed=3, days=2))
    queries = to_spark(spark, random_queries(random_events(300, 10, seed=3, days=2), 60, seed=4))
    guests = queries.withColumnRenamed("user_id", "guest_id")
    guests = guests.withColumn("host_id", guests["guest_id"] + 1)
    source = tt.EventSource(events, time_column="ts", where="quantity IS NULL OR quantity >= -1000")
    spend = tt.GroupBy("spend", source, ["user_id"], [
        tt.Aggregation("amount", "sum", windows=["1d"]),
        tt.Aggregation("item", "last", windows=[tt.Window("1d", hop="1h")]),
    ])
    seen = tt.GroupBy("seen", source, ["user_id"], [tt.Aggregation("item", "count")])
    join = tt.Join("guests", tt.EventSource(guests, time_column="ts"), [
        tt.JoinPart(spend, prefix="guest", key_mapping={"guest_id": "user_id"}),
        tt.JoinPart(spend, prefix="host", key_mapping={"host_id": "user_id"}),
        tt.JoinPart(seen, key_mapping={"guest_id": "user_id"}),
    ])
    ours = tt.backfill(join, spark, start="2024-01-01", end="2024-01-02")
    theirs = naive_backfill(join, spark, start="2024-01-01", end="2024-01-02")
    assert ours.columns == theirs.columns == [*guests.columns, *join.output_columns()]
    key = ["guest_id", "ts", "label"]
    mine = ours.orderBy(*key).collect()
    oracle = theirs.orderBy(*key).collect()
    assert len(mine) == len(oracle) > 0
    for a, b in zip(mine, oracle, strict=True):
        for column in ours.columns:
            assert same_value(a[column], b[column]), (column, a, b)
