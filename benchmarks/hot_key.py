"""One key with 20M events: does a backfill finish with the default driver memory?

Generates (once, with Spark, into benchmarks/.data/hot_key_*) 20M events of a single key over
60 days and 10K queries of that key, then backfills sum, count and max over 1d and 7d with
each executor asked for, under `local_session()`'s default driver memory, and prints the
seconds. Issue 3's goal: "a single key holding 20M events backfills with the default driver
memory".

    python benchmarks/hot_key.py                      # sweep and tiled, 20M events
    python benchmarks/hot_key.py --events 2000000 --executor tiled
    # the sweep with its hot key whole, then cut into chunks of time (the default)
    python benchmarks/hot_key.py --executor sweep --max-key-events 1000000000,2000000
    # a key hot on the left: 1M events and 10M left rows
    python benchmarks/hot_key.py --events 1000000 --queries 10000000 --executor sweep
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import timetile as tt
from timetile.offline.options import DEFAULT_MAX_KEY_EVENTS
from timetile.spark.session import local_session

DAY_MS = 86_400_000
START = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--executor", default="sweep,tiled")
    parser.add_argument("--cache", default="benchmarks/.data")
    parser.add_argument("--max-key-events", default=str(DEFAULT_MAX_KEY_EVENTS),
                        help="the sweep's limit(s) before a key is cut into chunks of time, "
                             "comma-separated; each runs every executor (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time each run N times and keep the best; the first run of the "
                             "process also pays Spark's and numba's warm-up (default: 1)")
    args = parser.parse_args()
    spark = local_session("timetile-hot-key")  # the default driver memory
    queries = "" if args.queries == 10_000 else f"_q{args.queries}"
    root = Path(args.cache) / f"hot_key_{args.events}{queries}"
    if not (root / "queries").exists():
        span = 60 * DAY_MS
        (spark.range(args.events)
         .selectExpr("1L AS key", f"{START}L + CAST(id * {span // args.events} AS BIGINT) AS ts",
                     "rand(7) * 100 AS value")
         .write.mode("overwrite").parquet(str(root / "events")))
        (spark.range(args.queries)
         .selectExpr("1L AS key", f"{START}L + CAST(rand(8) * {span} AS BIGINT) AS ts")
         .write.mode("overwrite").parquet(str(root / "queries")))
    events = tt.EventSource(str(root / "events"))
    group_by = tt.GroupBy("hot", events, ["key"], [
        tt.Aggregation("value", op, windows=["1d", "7d"]) for op in ("sum", "count", "max")])
    join = tt.Join("hot_key", tt.EventSource(str(root / "queries")), [group_by])
    print(f"one key, {args.events:,} events, {args.queries:,} queries, driver memory "
          f"{spark.conf.get('spark.driver.memory')}", file=sys.stderr)
    for limit in (int(value) for value in args.max_key_events.split(",")):
        for executor in args.executor.split(","):
            runs = []
            for _ in range(args.repeat):
                began = time.perf_counter()
                job = tt.BackfillJob(join, spark, executor=executor,
                                     max_key_events=limit).plan()
                job.dataframe().write.format("noop").mode("overwrite").save()
                runs.append(time.perf_counter() - began)
                for line in job.report.lines():
                    print(f"    {line}", file=sys.stderr)
            print(f"| {executor} | max_key_events {limit:,} | {min(runs):.1f} s "
                  f"(runs {', '.join(f'{run:.1f}' for run in runs)}) |", flush=True)


if __name__ == "__main__":
    main()
