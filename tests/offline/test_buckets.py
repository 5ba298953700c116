"""Bucketed aggregations: every executor equals the naive oracle, and the contract by hand.

Random data (:mod:`timetile.testing.generators`): ``item`` is the bucket, with ``''``, nulls,
accented, CJK and emoji strings; ``parity`` (``quantity % 3`` as a string, null where the
quantity is) is a second bucket column. Windows: sliding, sawtooth, hopping and lifetime.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

import timetile as tt
from timetile.testing import (
    differing_cells,
    naive_backfill,
    random_events,
    random_queries,
    to_spark,
)

WINDOWS: list[str | tt.Window] = ["1h", "1d", tt.Window("1d", hop="1h")]
HOPPING = tt.Window("1d", hop="6h", kind="hopping")
BUCKETED = [
    ("amount", "count", {}),
    ("quantity", "sum", {}),
    ("amount", "avg", {}),
    ("amount", "max", {}),
    ("quantity", "last_k", {"k": 2}),
    ("amount", "unique_count", {}),
    ("quantity", "histogram", {}),
    ("amount", "variance", {}),  # one value gives a null entry
]


def aggregations() -> list[tt.Aggregation]:
    made = []
    for column, op, params in BUCKETED:
        made.append(tt.Aggregation(column, op, windows=WINDOWS, buckets=["item"], **params))
        made.append(tt.Aggregation(column, op, buckets=["item", "parity"], **params))
    made.append(tt.Aggregation("amount", "sum", windows=["1d"]))  # a plain one beside them
    # Without a lifetime window beside them: the sweep cuts a bucket's events a reach apart.
    made.append(tt.Aggregation("flag", "count", windows=["1h", HOPPING], buckets=["item"]))
    made.append(tt.Aggregation("flag", "histogram", windows=["1h"], buckets=["parity"]))
    return made


@pytest.fixture(scope="module")
def join(spark: Any) -> tt.Join:
    table = random_events(300, 12, seed=21, days=3, zipf_exponent=1.3)
    events = to_spark(spark, table).withColumn(
        "parity", F.expr("CAST(pmod(quantity, 3) AS STRING)"))
    queries = to_spark(spark, random_queries(table, 100, seed=22, window_lengths=("1h", "1d")))
    user = tt.GroupBy("user", tt.EventSource(events, time_column="ts"), ["user_id"],
                      aggregations())
    return tt.Join("buckets", tt.EventSource(queries, time_column="ts"), [user])


def by_row(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda row: (repr(row["user_id"]), repr(row["ts"]), repr(row["label"])))


@pytest.fixture(scope="module")
def oracle_rows(spark: Any, join: tt.Join) -> list[Any]:
    return by_row(naive_backfill(join, spark).collect())


@pytest.mark.parametrize("executor", ["sweep", "tiled", "interval_tree", "reference", "auto"])
def test_backfill_equals_the_oracle(spark: Any, join: tt.Join, oracle_rows: list[Any],
                                    executor: str) -> None:
    job = tt.BackfillJob(join, spark, executor=executor).plan()
    frame = job.dataframe()
    if executor == "auto":
        assert job.report.path == "user: sweep"
    assert frame.columns[-len(join.output_columns()):] == join.output_columns()
    ours = by_row(frame.collect())
    assert len(ours) == len(oracle_rows) == 100
    for mine, oracle in zip(ours, oracle_rows, strict=True):
        assert (mine["user_id"], mine["ts"]) == (oracle["user_id"], oracle["ts"])
    entries = sum(len(row[column]) for row in oracle_rows for column in join.output_columns()
                  if isinstance(row[column], dict))
    assert entries > 1000  # the maps are not all empty
    mismatches = differing_cells(ours, oracle_rows, join.output_columns())
    assert not mismatches, f"{len(mismatches)} mismatches, e.g.\n" + "\n".join(
        map(repr, mismatches[:10]))


def test_the_report_counts_rows_in_no_bucket(spark: Any, join: tt.Join) -> None:
    events = join.parts[0].group_by.source.table
    usable = events.where(F.col("ts").isNotNull() & F.col("user_id").isNotNull())
    expected = {bucket: usable.where(F.col(bucket).isNull()).count()
                for bucket in ("item", "parity")}
    assert all(expected.values())  # the generator writes null buckets
    job = tt.BackfillJob(join, spark).plan()
    (counts,) = [source for source in job.report.sources if source.role == "user"]
    assert dict(counts.null_buckets) == expected
    assert counts.usable == usable.count()  # still used by the unbucketed features
    assert f"{expected['item']:,} with item null: in no bucket of it" in str(job.report)
    (left,) = [source for source in job.report.sources if source.role == "left"]
    assert dict(left.null_buckets) == {}


def test_names_and_types(spark: Any, join: tt.Join) -> None:
    names = join.output_columns()
    assert names[:6] == [
        "user_amount_count_1h_by_item", "user_amount_count_1d_by_item",
        "user_amount_count_1d_hop1h_by_item", "user_amount_count_by_item",
        "user_amount_count_by_parity", "user_quantity_sum_1h_by_item",
    ]
    schema = tt.backfill(join, spark, executor="reference").schema
    string = T.StringType()
    assert schema["user_amount_count_1h_by_item"].dataType == T.MapType(string, T.LongType())
    assert schema["user_quantity_histogram_by_item"].dataType == T.MapType(
        string, T.MapType(T.LongType(), T.LongType(), valueContainsNull=False))
    assert schema["user_quantity_last_k_by_parity"].dataType == T.MapType(
        string, T.ArrayType(T.LongType(), containsNull=False))


@pytest.mark.parametrize("executor", ["sweep", "tiled", "interval_tree", "reference", "auto"])
def test_the_contract_by_hand(spark: Any, executor: str) -> None:
    hour = 3_600_000
    events = spark.createDataFrame([
        (1, 0, 1.0, "a"), (1, 1, 2.0, "a"), (1, 2, 5.0, ""), (1, 3, None, "b"),
        (1, 4, 7.0, None), (1, hour, 4.0, "b"), (2, 0, None, "a"),
    ], "user_id long, ts long, amount double, kind string")
    queries = spark.createDataFrame(
        [(1, 5, 0.0), (1, hour + 1, 0.0), (1, 3 * hour, 0.0), (2, 10, 0.0), (3, 10, 0.0)],
        "user_id long, ts long, label double")
    group_by = tt.GroupBy("u", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "count", windows=["1h"], buckets=["kind"]),
        tt.Aggregation("amount", "variance", buckets=["kind"]),
    ])
    join = tt.Join("by_hand", tt.EventSource(queries), [group_by])
    rows = tt.backfill(join, spark, executor=executor).collect()
    got = {(row["user_id"], row["ts"]): (row["u_amount_count_1h_by_kind"],
                                         row["u_amount_variance_by_kind"]) for row in rows}
    assert got[(1, 5)] == ({"a": 2, "": 1}, {"a": 0.5, "": None})
    assert got[(1, hour + 1)] == ({"a": 1, "": 1, "b": 1}, {"a": 0.5, "": None, "b": None})
    assert got[(1, 3 * hour)] == (None, {"a": 0.5, "": None, "b": None})  # an empty window
    assert got[(2, 10)] == (None, None)  # only a null value
    assert got[(3, 10)] == (None, None)  # no events at all
    assert not math.isnan(got[(1, 5)][1]["a"])
