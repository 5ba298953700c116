"""The floor under the sweep: what moving the events to Python costs, before any kernel runs.

The sweep (timetile's executor for sum, count and max) shuffles events and queries by key,
sorts each partition by key in the JVM and hands it to Python through Arrow. This script
times those steps on the events of a ``backfill.py`` dataset, each alone and stacked, next
to the plain scan, the two fastest Spark SQL plans of ``backfill.py`` (the naive join, the
window frames with the segment tree) and timetile's whole backfill, in rounds that alternate
them in one process (so that a noisy minute hurts all alike), and prints each median with
its ratio to the faster of the two Spark SQL plans. A plan that must take the first steps
cannot be faster than they are: a speed goal of issue 3 that asks for less is below this
machine's floor for any plan that computes in Python.

    # each takes minutes where the other is fast: the window plan on uniform's many
    # partitions, the naive join on skewed's hot key
    python benchmarks/data_path.py --dataset uniform --rounds 6 --skip spark_window_segtree
    python benchmarks/data_path.py --dataset skewed --rounds 10 --skip spark_join
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # timetile, when it is not installed

import pyarrow as pa  # noqa: E402
from _contenders import Inputs, contenders, make_inputs  # noqa: E402
from _datasets import SPECS, ensure  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from timetile.spark.sorted_groups import sorted_by_groups  # noqa: E402


def _dropped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Receive every batch in Python, and return none."""
    for _ in batches:
        pass
    return iter(())


def _handed(frame: DataFrame) -> DataFrame:
    return frame.mapInArrow(_dropped, "key long")


#: The plans against whose fastest the ratios are taken: issue 3's "fastest Spark SQL".
SPARK_SQL = ("spark_join", "spark_window_segtree")


def plans(inputs: Inputs) -> dict[str, tuple[Callable[[], DataFrame], Mapping[str, str]]]:
    """Each plan by name, from the cheapest to the whole backfill, with the Spark conf it
    runs under. ``backfill.py``'s contenders keep their names there."""
    events = inputs.events.select("key", "ts", "value")
    peers = {peer.name: peer for peer in contenders(["auto"], segtree=True)}

    def peer(name: str) -> tuple[Callable[[], DataFrame], Mapping[str, str]]:
        contender = peers[name]

        def build() -> DataFrame:
            frame = contender.build(inputs)
            assert isinstance(frame, DataFrame)  # a Spark contender, not a DuckDB query
            return frame
        return build, contender.conf

    return {
        "spark_scan": peer("spark_scan"),
        "arrow": (lambda: _handed(events), {}),
        "shuffle": (lambda: events.repartition("key"), {}),
        "shuffle+arrow": (lambda: _handed(events.repartition("key")), {}),
        "shuffle+sort": (lambda: sorted_by_groups(events, ["key"]), {}),
        "shuffle+sort+arrow": (lambda: _handed(sorted_by_groups(events, ["key"])), {}),
        "spark_join": peer("spark_join"),
        "spark_window_segtree": peer("spark_window_segtree"),
        "timetile": peer("timetile[auto]"),
    }


def _timed(spark: SparkSession, build: Callable[[], DataFrame], conf: Mapping[str, str]) -> float:
    """Seconds to build the plan and write it to the ``noop`` sink, under ``conf``."""
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        started = time.perf_counter()
        build().write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started
    finally:
        for key in conf:
            spark.conf.unset(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(SPECS), default="uniform")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of every plan; the first warms up and is not counted "
                             "(default: %(default)s)")
    parser.add_argument("--only", help="comma-separated plans to run (default: all)")
    parser.add_argument("--skip", help="comma-separated plans not to run (default: none)")
    parser.add_argument("--cache", type=Path, default=HERE / ".data")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: the first round only warms up")
    from timetile.spark.session import local_session
    spark = local_session("timetile-data-path", cores=2, shuffle_partitions=8,
                          driver_memory="5g")
    dataset = ensure(spark, args.dataset, args.scale, args.cache)
    chosen = plans(make_inputs(spark, dataset.events_path, dataset.queries_path))
    for option, keep in (("only", True), ("skip", False)):
        named = getattr(args, option)
        if named:
            unknown = set(named.split(",")) - set(chosen)
            if unknown:
                parser.error(f"--{option}: no plan {', '.join(sorted(unknown))}; "
                             f"choose from {', '.join(chosen)}")
            chosen = {name: plan for name, plan in chosen.items()
                      if (name in named.split(",")) == keep}
    seconds: dict[str, list[float]] = {name: [] for name in chosen}
    for round_ in range(args.rounds):
        for name, (build, conf) in chosen.items():
            seconds[name].append(_timed(spark, build, conf))
        print(f"round {round_ + 1}/{args.rounds}: "
              + ", ".join(f"{name} {times[-1]:.2f}" for name, times in seconds.items()),
              flush=True)
    medians = {name: statistics.median(times[1:]) for name, times in seconds.items()}
    fastest = min((medians[name] for name in SPARK_SQL if name in medians), default=None)
    print(f"\n{dataset.label}, median of {args.rounds - 1} warm rounds (noop sink):\n")
    print("| plan | seconds |" + (" × fastest Spark SQL |" if fastest else ""))
    print("|---|---:|" + ("---:|" if fastest else ""))
    for name, median in medians.items():
        print(f"| {name} | {median:.2f} |" + (f" {median / fastest:.3f} |" if fastest else ""))


if __name__ == "__main__":
    main()
