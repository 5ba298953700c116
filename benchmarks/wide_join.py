"""What a wide Join costs: P GroupBys of F features each, built, planned and run.

Production Joins hold many GroupBys. Each part's sweep takes the left rows with the features
of the parts before it, so what a part costs to plan and to run can grow with the parts
before it. This script times, per P, round after round in one process (the first round
pays the JVM's and the Python workers' warm-up): ``tt.BackfillJob(...).plan()`` (planning
and the count job), ``dataframe()`` (the driver building the main job's plan) and the main job,
written to Spark's ``noop`` sink. Every GroupBy reads the same events: ``--events`` over 30
days and 2,000 keys, ten value columns; ``--queries`` left rows. Each has two columns × sum
and max × ``F / 4`` windows.

    python benchmarks/wide_join.py --parts 1,5,10,20 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent))  # timetile, when it is not installed

import timetile as tt  # noqa: E402
from timetile.core.timeutil import DAY_MS, date_to_ms  # noqa: E402
from timetile.spark.session import local_session  # noqa: E402

WINDOWS = ["1h", "6h", "1d", "7d", "30d"]
START = date_to_ms("2024-01-01")
DAYS = 30
KEYS = 2_000


def inputs(spark: SparkSession, events: int, queries: int) -> list[DataFrame]:
    """Events with ten value columns, and left rows in the last ten days; cached."""
    rng = np.random.default_rng(1)
    columns: dict[str, np.ndarray] = {"user_id": rng.integers(1, KEYS + 1, events),
               "ts": START + rng.integers(0, DAYS * DAY_MS, events)}
    for index in range(10):
        columns[f"c{index}"] = rng.integers(-100, 1000, events) / 4
    left: dict[str, np.ndarray] = {"user_id": rng.integers(1, KEYS + 1, queries),
            "ts": START + (DAYS - 10) * DAY_MS + rng.integers(0, 10 * DAY_MS, queries)}
    frames = [spark.createDataFrame(pa.table(table)).cache()
              for table in (columns, left)]
    for frame in frames:
        frame.count()
    return frames


def wide_join(events: DataFrame, queries: DataFrame, parts: int, features: int) -> tt.Join:
    """P GroupBys of ``features`` features each, all over ``events``."""
    source = tt.EventSource(events, time_column="ts")
    windows = WINDOWS[:max(1, features // 4)]
    group_bys = [tt.GroupBy(f"g{part:02d}", source, ["user_id"], [
        tt.Aggregation(f"c{(2 * part + column) % 10}", op, windows=windows)
        for column in (0, 1) for op in ("sum", "max")]) for part in range(parts)]
    return tt.Join("wide", tt.EventSource(queries, time_column="ts"), group_bys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="1,5,10,20", help="comma-separated P values")
    parser.add_argument("--features", type=int, default=20, help="per GroupBy, 4 to 20")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3, help="at least 2: the first is cold")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: the first round is cold")
    spark = local_session("timetile-wide-join", cores=2, shuffle_partitions=4,
                          driver_memory="4g")
    events, queries = inputs(spark, args.events, args.queries)
    for parts in [int(text) for text in args.parts.split(",")]:
        join = wide_join(events, queries, parts, args.features)
        rounds = []
        for _ in range(args.rounds):
            began = time.perf_counter()
            job = tt.BackfillJob(join, spark).plan()
            built = time.perf_counter()
            frame = job.dataframe()
            planned = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            rounds.append((built - began, planned - built, time.perf_counter() - planned))
            job.release()
        warm = rounds[1:]
        medians = [statistics.median(step[i] for step in warm) for i in range(3)]
        print(f"P={parts} ({len(join.output_columns())} features): plan() "
              f"{medians[0]:.2f} s, dataframe() {medians[1]:.2f} s, main job "
              f"{medians[2]:.2f} s (medians of {len(warm)} warm rounds)", flush=True)


if __name__ == "__main__":
    main()
