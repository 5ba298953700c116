"""The batch interval join on Spark, against the processor and a plain Spark SQL join.

Every transcript of single-time inputs goes through the batch join: its rows that were not
late must give what the processor gives once final watermarks flush its buffers. A GroupBy
over an IntervalJoin of random, Zipf-skewed orders and deliveries (nulls, equal times,
duplicates, rows no delivery reaches) backfills to what the naive oracle computes over a
plain Spark SQL join on the condition. Bad definitions fail before any job, naming the field.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import timetile as tt
from timetile.core.interval_join import Joined
from timetile.core.interval_join.processor import joined_at
from timetile.core.interval_join.transcript import read_transcript, settled
from timetile.core.timeutil import HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.spark.interval_join import joined_rows
from timetile.store.kv import open_store
from timetile.streaming.file_source import land_json_lines
from timetile.streaming.job import stream_group_by
from timetile.testing import naive_backfill, random_events, random_queries, same_value, to_spark
from timetile.testing.interval_joins import joined_sides, transcript_join

pytestmark = pytest.mark.spark

TRANSCRIPTS = sorted((Path(__file__).parents[1] / "core" / "interval_join" / "transcripts")
                     .glob("*.txt"))


def _single_time(path: Path) -> bool:
    return all(len(fields) == 1 for fields in read_transcript(path).spec.time_fields.values())


def _canonical(left: dict[str, Any] | None, right: dict[str, Any] | None) -> str:
    return repr((left and sorted(left.items()), right and sorted(right.items())))


@pytest.mark.parametrize("path", [p for p in TRANSCRIPTS if _single_time(p)],
                         ids=lambda path: path.stem)
def test_a_transcript_through_the_batch_join(spark: SparkSession, path: Path) -> None:
    transcript = read_transcript(path)
    kept, outputs = settled(transcript, 10**12)
    streamed = Counter(_canonical(o.left, o.right) for o in outputs)
    join = transcript_join(spark, transcript, kept)
    batch: Counter[str] = Counter()
    for row in joined_rows(spark, join).collect():
        sides = joined_sides(join, row)
        batch[_canonical(*sides)] += 1
        assert row["joined_at"] == joined_at(transcript.spec, Joined(*sides)), (path.stem, row)
    assert batch == streamed, path.stem


@pytest.fixture(scope="module")
def orders_and_deliveries(spark: SparkSession) -> tuple[Any, Any, pa.Table]:
    events = random_events(300, 20, seed=71, days=2)
    orders = events.rename_columns(["order_id", "order_time", "amount", "quantity", "item",
                                    "flag"])
    later = random_events(300, 20, seed=72, days=2)
    deliveries = later.rename_columns(["order_id", "delivery_time", "fee", "quantity", "item",
                                       "flag"]).select(["order_id", "delivery_time", "fee"])
    queries = random_queries(events, 60, seed=73).rename_columns(["order_id", "ts", "label"])
    return to_spark(spark, orders), to_spark(spark, deliveries), queries


@pytest.mark.parametrize("how", ["inner", "left", "full"])
def test_a_group_by_over_an_interval_join_equals_the_naive_oracle(
        spark: SparkSession, orders_and_deliveries: tuple[Any, Any, pa.Table], how: str) -> None:
    orders, deliveries, queries = orders_and_deliveries
    condition = ("r.delivery_time BETWEEN l.order_time - INTERVAL 30 MINUTES "
                 "AND l.order_time + INTERVAL 3 HOURS")
    join = tt.IntervalJoin("delivered", tt.EventSource(orders, time_column="order_time"),
                           tt.EventSource(deliveries, time_column="delivery_time"),
                           on=["order_id"], condition=condition, how=how)
    orders.createOrReplaceTempView("o")
    deliveries.createOrReplaceTempView("d")
    kind = {"inner": "JOIN", "left": "LEFT JOIN", "full": "FULL JOIN"}[how]
    plain = spark.sql(
        "SELECT o.order_id l_order_id, o.order_time l_order_time, o.amount l_amount, "
        "o.quantity l_quantity, o.item l_item, o.flag l_flag, d.order_id r_order_id, "
        "d.delivery_time r_delivery_time, d.fee r_fee, "
        # certain when both rows exist; an order alone 3 h after it, a delivery alone 30 min
        "CASE WHEN o.order_id IS NOT NULL OR o.order_time IS NOT NULL THEN CASE WHEN "
        "d.delivery_time IS NOT NULL OR d.order_id IS NOT NULL THEN greatest(o.order_time, "
        "d.delivery_time) ELSE o.order_time + 10800000 END ELSE d.delivery_time + 1800000 END "
        f"joined_at FROM o {kind} d ON o.order_id = "
        "d.order_id AND d.delivery_time BETWEEN o.order_time - 1800000 AND o.order_time "
        "+ 10800000")
    key = "r_order_id" if how == "full" else "l_order_id"
    aggregations = [tt.Aggregation("r_fee", "sum", windows=["1h", "1d"]),
                    tt.Aggregation("r_fee", "count", windows=["1d"]),
                    tt.Aggregation("l_amount", "max", windows=["1d"]),
                    tt.Aggregation("r_delivery_time", "last")]
    left = tt.EventSource(to_spark(spark, queries.rename_columns(
        [key, "ts", "label"])), time_column="ts")

    def backfilled(source: Any) -> list[Any]:
        group_by = tt.GroupBy("delivered", source, [key], aggregations)
        return tt.backfill(tt.Join("j", left, [group_by]), spark).collect()

    def expected() -> list[Any]:
        group_by = tt.GroupBy("delivered", tt.EventSource(plain, time_column="joined_at"),
                              [key], aggregations)
        return sorted(map(repr, naive_backfill(tt.Join("j", left, [group_by]), spark)
                          .collect()))

    found = backfilled(join)
    assert sorted(map(repr, found)) == expected()
    assert sum(row["delivered_r_fee_count_1d"] or 0 for row in found) > 10  # joins counted


def test_the_left_outer_rows_keep_their_columns(spark: SparkSession) -> None:
    orders = spark.createDataFrame([(1, 0, 5.0), (2, 0, 6.0), (None, 0, 7.0)],
                                   "id bigint, t bigint, amount double")
    deliveries = spark.createDataFrame([(1, HOUR_MS), (1, 10 * HOUR_MS), (3, 0)],
                                       "id bigint, t bigint")
    join = tt.IntervalJoin("j", tt.EventSource(orders, time_column="t"),
                           tt.EventSource(deliveries, time_column="t"), on=["id"],
                           condition="r.t BETWEEN l.t AND l.t + INTERVAL 2 HOURS", how="full",
                           prefixes=("o_", "d_"))
    rows = sorted(map(tuple, joined_rows(spark, join).collect()), key=repr)
    settled = 2 * HOUR_MS  # an order alone is certain 2 h after it, a delivery alone at once
    assert rows == sorted([(1, 0, 5.0, 1, HOUR_MS, HOUR_MS), (2, 0, 6.0, None, None, settled),
                           (None, 0, 7.0, None, None, settled),
                           (None, None, None, 1, 10 * HOUR_MS, 10 * HOUR_MS),
                           (None, None, None, 3, 0, 0)], key=repr)


@pytest.mark.parametrize(("change", "message"), [
    ({"condition": "l.t = r.t AND l.missing > 1"}, r"source.condition: .*l has no column "
                                                   r"'missing'.*Fix: use one of"),
    ({"on": ["name"]}, r"source.on: keys 'name' \(bigint\) and 'name' \(string\) differ.*"
                       r"CAST\(name AS BIGINT\)"),
    ({"on": ["nowhere"]}, r"source.on: left input has no column 'nowhere'"),
])
def test_definitions_that_do_not_fit_the_inputs_fail_before_any_job(
        spark: SparkSession, change: dict[str, Any], message: str) -> None:
    left = spark.createDataFrame([(1, 0, 2)], "id bigint, t bigint, name bigint")
    right = spark.createDataFrame([(1, 0, "a")], "id bigint, t bigint, name string")
    arguments = {"on": ["id"], "condition": "l.t = r.t", **change}
    join = tt.IntervalJoin("j", tt.EventSource(left, time_column="t"),
                           tt.EventSource(right, time_column="t"), **arguments)
    with pytest.raises(tt.DefinitionError, match=message):
        joined_rows(spark, join)


def test_a_chain_of_three_streams(spark: SparkSession) -> None:
    """Seed 004's chain: (orders ⋈ deliveries) ⋈ returns, its middle input with two times."""
    orders = spark.createDataFrame([(1, 100), (2, 200)], "id bigint, t bigint")
    deliveries = spark.createDataFrame([(1, 101), (2, 205)], "id bigint, t bigint")
    returns = spark.createDataFrame([(1, 103), (2, 300)], "id bigint, t bigint")
    first = tt.IntervalJoin("od", tt.EventSource(orders, time_column="t"),
                            tt.EventSource(deliveries, time_column="t"), on=["id"],
                            condition="r.t BETWEEN l.t - 1 AND l.t + 3", how="left",
                            prefixes=("o_", "d_"))
    chain = tt.IntervalJoin("odr", first, tt.EventSource(returns, time_column="t"),
                            on=[("o_id", "id")], condition="r.t BETWEEN l.d_t - 1 AND l.d_t + 4",
                            how="left", prefixes=("", "r_"))
    assert chain.input_time_fields == {"l": ("o_t", "d_t"), "r": ("t",)}
    with pytest.raises(tt.DefinitionError, match=r"source.prefixes: \('', 'r_'\) name an "
                                                 "output column 'joined_at'"):
        joined_rows(spark, chain)
    chain = dataclasses.replace(chain, prefixes=("od_", "r_"))
    rows = sorted(map(tuple, joined_rows(spark, chain).collect()), key=repr)
    # order 2 has no delivery in its bound: padded in the first join, certain at 203 when
    # none can come; padded again in the second, its delivery time null, so no time says
    # when it settles: null, and a GroupBy over the chain leaves it out, counted
    assert rows == sorted([(1, 100, 1, 101, 101, 1, 103, 103),
                           (2, 200, None, None, 203, None, None, None)], key=repr)


def _delivered(orders: Any, deliveries: Any, windows: list[str]) -> tt.GroupBy:
    """A GroupBy over each order with its deliveries in the 6 hours after it (a left join)."""
    return tt.GroupBy(
        "delivered", tt.IntervalJoin(
            "delivered", tt.EventSource(orders, time_column="order_time"),
            tt.EventSource(deliveries, time_column="delivery_time"), on=["order_id"],
            condition="r.delivery_time BETWEEN l.order_time AND l.order_time + INTERVAL 6 HOURS",
            how="left"), ["l_order_id"],
        [tt.Aggregation("r_fee", "sum", windows=windows), tt.Aggregation("r_fee", "count"),
         tt.Aggregation("l_amount", "last_k", k=3)])


def test_an_upload_of_a_join_serves_what_the_backfill_computes(
        spark: SparkSession, orders_and_deliveries: tuple[Any, Any, pa.Table],
        tmp_path: Path) -> None:
    orders, deliveries, _ = orders_and_deliveries
    delivered = _delivered(orders, deliveries, ["1d"])
    at = date_to_ms("2024-01-02")
    keys = list(range(1, 21))
    queries = spark.createDataFrame([(key, at) for key in keys], "l_order_id bigint, ts bigint")
    join = tt.Join("served", tt.EventSource(queries), [delivered])
    expected = {row["l_order_id"]: row.asDict() for row in tt.backfill(join, spark).collect()}
    store_uri = f"lmdb://{tmp_path / 'store'}"
    upload(delivered, spark, "2024-01-01", store_uri)
    with open_store(store_uri) as store:
        results = Fetcher(join, store).fetch([{"l_order_id": key} for key in keys], at=at)
    for key, result in zip(keys, results, strict=True):
        for name, value in result.features.items():
            assert same_value(value, expected[key][name]), (key, name, value)
    assert sum(expected[key]["delivered_r_fee_count"] for key in keys) > 10


def test_a_stream_of_a_join_serves_what_the_backfill_computes(
        spark: SparkSession, orders_and_deliveries: tuple[Any, Any, pa.Table],
        tmp_path: Path) -> None:
    orders, deliveries, _ = orders_and_deliveries
    delivered = _delivered(orders, deliveries, ["1h", "1d"])
    # day 1 uploaded; both inputs streamed whole, in time order, twelve files each: the
    # stream writes the joined rows after the upload's day end, settled ones by the watermark
    store_uri = f"lmdb://{tmp_path / 'store'}"
    upload(delivered, spark, "2024-01-01", store_uri)
    sources = {}
    for side, frame, column in (("left", orders, "order_time"),
                                ("right", deliveries, "delivery_time")):
        rows = sorted((row.asDict() for row in frame.collect()),
                      key=lambda row, c=column: (row[c] is None, row[c] or 0))
        land_json_lines(tmp_path / side, rows, 12)
        sources[side] = f"dir:{tmp_path / side}?maxFilesPerTrigger=1"
    stream = stream_group_by(delivered, spark, sources, store_uri, str(tmp_path / "checkpoint"),
                             lateness="4h", until_idle=True)
    stream.await_termination()
    assert stream.totals.written > 50
    assert stream.totals.behind_watermark == 0, stream.totals
    at = date_to_ms("2024-01-02") + 14 * HOUR_MS  # well behind the last watermark
    keys = list(range(1, 21))
    queries = spark.createDataFrame([(key, at) for key in keys], "l_order_id bigint, ts bigint")
    join = tt.Join("served", tt.EventSource(queries), [delivered])
    expected = {row["l_order_id"]: row.asDict() for row in tt.backfill(join, spark).collect()}
    with open_store(store_uri) as store:
        results = Fetcher(join, store).fetch([{"l_order_id": key} for key in keys], at=at)
    for key, result in zip(keys, results, strict=True):
        for name, value in result.features.items():
            assert same_value(value, expected[key][name]), (key, name, value)


def test_stored_partials_of_a_join_are_refused_before_any_job(
        spark: SparkSession, orders_and_deliveries: tuple[Any, Any, pa.Table],
        tmp_path: Path) -> None:
    orders, deliveries, _ = orders_and_deliveries
    join = tt.IntervalJoin("delivered", tt.EventSource(orders, time_column="order_time"),
                           tt.EventSource(deliveries, time_column="delivery_time"),
                           on=["order_id"], condition="l.order_time = r.delivery_time")
    group_by = tt.GroupBy("delivered", join, ["l_order_id"],
                          [tt.Aggregation("r_fee", "sum", windows=["1d"])])
    queries = spark.createDataFrame([(1, 0)], "l_order_id bigint, ts bigint")
    with pytest.raises(ValueError, match="reads an interval join, whose rows of a day depend "
                                         "on the other input's later rows"):
        tt.backfill(tt.Join("j", tt.EventSource(queries), [group_by]), spark,
                    executor="tiled", partials_path=str(tmp_path / "partials"))
