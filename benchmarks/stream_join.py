"""Interval joins: timetile's against Spark's own, streaming and offline, on the same rows.

One command runs everything and writes the section ``stream join`` of RESULTS.md:

    .venv/bin/python benchmarks/stream_join.py                    # 1,000,000 rows per input
    .venv/bin/python benchmarks/stream_join.py --rows 100000 --no-results

The data: orders and deliveries of skewed users (a power law, exponent 0.8, over 200,000
users: the top user has about 9% of the rows; a Zipf law of exponent 1.2 gave a top user
whose pairs within the hour, growing with the square of its rows, made tens of millions of
output rows), a delivery 0-2 h after 80% of the orders, over 30 days, both inputs out of
order by up to 10 minutes; the condition ``r.delivery_time BETWEEN l.order_time AND
l.order_time + INTERVAL 1 HOUR`` on ``user_id``, a left join, 15 minutes of lateness.

- **Streaming**: the rows land as JSON-lines files (``--files`` per input), then each
  contender drains them (``availableNow``, ``--files-per-batch`` files per input per
  micro-batch) into Parquet: Spark's native stream-stream join (``withWatermark`` on each
  input, a left outer join with the time bound) and timetile's (``stream_join``). Reported:
  input rows per second (from the query's start to its end, the session up before), the
  output rows (the inner ones must be the same rows; the null-padded ones are those whose
  bound the last watermark passed), the largest state any micro-batch reported (Spark's
  state rows: the native join keeps a row per buffered row, timetile one per group of keys
  holding all its buffered rows), the least and the largest over the later half of the
  micro-batches (flat when the buffers do not grow with time), and the micro-batches run.
- **Offline**: the same rows as Parquet tables: a hand-written Spark SQL range join (the
  condition as the join's ON clause) against timetile's batch join (``joined_rows``, time
  buckets), each written to Spark's ``noop`` sink, with a checksum of the rows.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).parent))

from _report import run_lines, verdict, write_section

import timetile as tt
from timetile.spark.interval_join import joined_rows
from timetile.spark.session import local_session
from timetile.streaming.file_source import land_json_lines
from timetile.streaming.interval_join import read_join_output, stream_join

HOUR_MS = 3_600_000
START = 1_704_067_200_000  # 2024-01-01
CONDITION = "r.delivery_time BETWEEN l.order_time AND l.order_time + INTERVAL 1 HOUR"
LATENESS = "15 minutes"


def inputs(rows: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """Orders and deliveries, in time order but for up to 10 minutes' disorder."""
    rng = np.random.default_rng(seed)
    # P(user k) ~ k^-0.8 over 200,000 users (the demo's power law): the CDF is ~ k^0.2
    users = np.ceil(200_000 * rng.random(rows) ** 5).astype(np.int64)
    order_time = np.sort(rng.integers(START, START + 30 * 24 * HOUR_MS, len(users)))
    delivered = rng.random(len(users)) < 0.8
    delivery_time = np.sort(order_time[delivered] + rng.integers(0, 2 * HOUR_MS,
                                                                 int(delivered.sum())))
    jitter = 5 * 60_000
    return (pa.table({"user_id": users,
                      "order_time": order_time + rng.integers(-jitter, jitter, len(users)),
                      "amount": np.round(rng.exponential(30.0, len(users)), 2)}),
            pa.table({"user_id": rng.permutation(users[delivered]),
                      "delivery_time": delivery_time + rng.integers(-jitter, jitter,
                                                                    len(delivery_time))}))


def _checksum(frame: DataFrame, columns: list[str]) -> tuple[int, int]:
    row = frame.select(F.count(F.lit(1)).alias("n"),
                       F.sum(F.xxhash64(*columns) % 1_000_003).alias("h")).first()
    assert row is not None
    return int(row["n"]), int(row["h"] or 0)


def offline(spark: SparkSession, data: Path, join: tt.IntervalJoin) -> dict[str, Any]:
    """Time the hand-written range join and timetile's batch join; checksum both."""
    orders = spark.read.parquet(str(data / "orders"))
    deliveries = spark.read.parquet(str(data / "deliveries"))
    hand = orders.alias("l").join(
        deliveries.alias("r"), F.expr("l.user_id = r.user_id AND r.delivery_time BETWEEN "
                                      "l.order_time AND l.order_time + 3600000"), "left"
    ).select(F.col("l.user_id").alias("l_user_id"), F.col("l.order_time").alias("l_order_time"),
             F.col("r.delivery_time").alias("r_delivery_time"))
    ours = joined_rows(spark, join).select("l_user_id", "l_order_time", "r_delivery_time")
    columns = ["l_user_id", "l_order_time", "r_delivery_time"]
    results: dict[str, Any] = {}
    for name, frame in (("Spark SQL range join", hand), ("timetile batch join", ours)):
        began = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        seconds = time.perf_counter() - began
        results[name] = (seconds, _checksum(frame, columns))
        print(f"offline {name}: {seconds:.1f} s, rows and checksum {results[name][1]}",
              flush=True)
    return results


def _native(spark: SparkSession, landing: Path, schemas: dict[str, Any], *, per_batch: int,
            output: Path, checkpoint: Path) -> Any:
    def read(name: str, column: str) -> DataFrame:
        return (spark.readStream.schema(schemas[name]).option("maxFilesPerTrigger", per_batch)
                .json(str(landing / name))
                .withColumn(f"{column}_ts", F.timestamp_millis(column))
                .withWatermark(f"{column}_ts", LATENESS))
    orders = read("orders", "order_time").alias("l")
    deliveries = read("deliveries", "delivery_time").alias("r")
    joined = orders.join(deliveries, F.expr(
        "l.user_id = r.user_id AND r.delivery_time_ts BETWEEN l.order_time_ts AND "
        "l.order_time_ts + INTERVAL 1 HOUR"), "leftOuter").select(
        F.col("l.user_id").alias("l_user_id"), F.col("l.order_time").alias("l_order_time"),
        F.col("r.delivery_time").alias("r_delivery_time"))
    return (joined.writeStream.format("parquet").option("path", str(output))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def streaming(spark: SparkSession, work: Path, join: tt.IntervalJoin, per_batch: int,
              rows: int) -> dict[str, Any]:
    """Drain the landed files through each streaming join; report speed, state, output.

    ``rows``: the input rows of both inputs together.
    """
    landing = work / "landing"
    schemas = {name: spark.read.parquet(str(work / "data" / name)).schema
               for name in ("orders", "deliveries")}
    results: dict[str, dict[str, Any]] = {}
    for name in ("Spark stream-stream join", "timetile streaming join"):
        output, checkpoint = work / f"out-{len(results)}", work / f"checkpoint-{len(results)}"
        began = time.perf_counter()
        if name.startswith("Spark"):
            query = _native(spark, landing, schemas, per_batch=per_batch, output=output,
                            checkpoint=checkpoint)
        else:
            query = stream_join(join, spark, {
                side: f"dir:{landing / name}?maxFilesPerTrigger={per_batch}"
                for side, name in (("left", "orders"), ("right", "deliveries"))},
                str(output), str(checkpoint), lateness="15m", until_idle=True).query
        query.awaitTermination()
        seconds = time.perf_counter() - began
        states = [sum(op.get("numRowsTotal", 0) for op in progress["stateOperators"])
                  for progress in query.recentProgress]
        half = states[len(states) // 2:] or [0]
        written = (read_join_output(spark, str(output)) if name.startswith("timetile")
                   else spark.read.parquet(str(output)))
        columns = ["l_user_id", "l_order_time", "r_delivery_time"]
        inner = _checksum(written.where(F.col("r_delivery_time").isNotNull()), columns)
        padded = written.where(F.col("r_delivery_time").isNull()).count()
        results[name] = {"seconds": seconds, "rows_per_s": rows / seconds,
                         "state": max(states, default=0),
                         "state_later": (min(half), max(half)), "inner": inner,
                         "padded": padded,
                         "batches": len(query.recentProgress)}
        print(f"streaming {name}: {seconds:.1f} s, {results[name]}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run both halves; print and record the figures and the goals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--files-per-batch", type=int, default=5)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="timetile-stream-join-"))
    orders, deliveries = inputs(args.rows, args.seed)
    for name, table in (("orders", orders), ("deliveries", deliveries)):
        (work / "data" / name).mkdir(parents=True)
        pq.write_table(table, work / "data" / name / "part-0.parquet")
        land_json_lines(work / "landing" / name, table.to_pylist(), args.files)
    spark = local_session("stream-join-benchmark")
    join = tt.IntervalJoin(
        "delivered", tt.EventSource(str(work / "data" / "orders"), time_column="order_time"),
        tt.EventSource(str(work / "data" / "deliveries"), time_column="delivery_time"),
        on=["user_id"], condition=CONDITION, how="left")
    batch = offline(spark, work / "data", join)
    stream = streaming(spark, work, join, args.files_per_batch, len(orders) + len(deliveries))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    native, ours = stream["Spark stream-stream join"], stream["timetile streaming join"]
    hand, mine = batch["Spark SQL range join"], batch["timetile batch join"]
    lines = [
        f"{args.rows:,} orders, {len(deliveries):,} deliveries; {args.files} files per input, "
        f"{args.files_per_batch} per micro-batch", "",
        "| contender | seconds | input rows/s | largest state (state rows) | state over the "
        "later half of the batches | inner rows | null-padded rows | micro-batches |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| {name} | {r['seconds']:.1f} | {r['rows_per_s']:,.0f} | {r['state']:,} | "
          f"{r['state_later'][0]:,}–{r['state_later'][1]:,} | {r['inner'][0]:,} | "
          f"{r['padded']:,} | {r['batches']} |" for name, r in stream.items()),
        "",
        "| offline contender | seconds | rows | checksum |", "|---|---|---|---|",
        *(f"| {name} | {seconds:.1f} | {check[0]:,} | {check[1]} |"
          for name, (seconds, check) in batch.items()),
        "",
        verdict("the same inner rows as Spark's native join", native["inner"] == ours["inner"],
                f"{ours['inner'][0]:,} rows, checksums {ours['inner'][1]} and "
                f"{native['inner'][1]}"),
        verdict("at least the native join's throughput",
                ours["rows_per_s"] >= native["rows_per_s"],
                f"{ours['rows_per_s']:,.0f} against {native['rows_per_s']:,.0f} rows/s"),
        verdict("the batch join ahead of the hand-written range join", mine[0] < hand[0],
                f"{mine[0]:.1f} s against {hand[0]:.1f} s; same rows: {mine[1] == hand[1]}"),
    ]
    print("\n".join(lines))
    if not args.no_results:
        write_section(Path(__file__).parent / "RESULTS.md", "stream join",
                      [*run_lines("stream_join.py", argv), "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
