"""The floor under the sweep: what moving the events to Python costs, before any kernel runs.

The sweep (timetile's executor for sum, count and max) shuffles events and queries by key,
sorts each partition by key in the JVM and hands it to Python through Arrow. This script
times those steps on the events of a ``backfill.py`` dataset, each alone and stacked, next
to the plain scan, the naive Spark join and timetile's whole backfill, in rounds that
alternate them in one process (so that a noisy minute hurts all alike), and prints each
median with its ratio to the naive join. A plan that must do the first steps cannot be
faster than they are: the speed goals of issue 3 that ask for less than that are below this
machine's floor for any plan that computes in Python.

    python benchmarks/data_path.py --dataset uniform --rounds 5
    python benchmarks/data_path.py --dataset skewed --rounds 9 --only scan,arrow,timetile
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # timetile, when it is not installed

import pyarrow as pa  # noqa: E402
from _contenders import Inputs, contenders, make_inputs  # noqa: E402
from _datasets import SPECS, ensure  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402

from timetile.spark.sorted_groups import sorted_by_groups  # noqa: E402


def _dropped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Receive every batch in Python, and return none."""
    for _ in batches:
        pass
    return iter(())


def _handed(frame: DataFrame) -> DataFrame:
    return frame.mapInArrow(_dropped, "key long")


def _peer(inputs: Inputs, name: str) -> DataFrame:
    """The plan of ``backfill.py``'s Spark contender ``name``."""
    build = {peer.name: peer.build for peer in contenders(["auto"], segtree=False)}[name]
    frame = build(inputs)
    assert isinstance(frame, DataFrame)  # a Spark contender, not a DuckDB query
    return frame


def steps(inputs: Inputs) -> dict[str, Callable[[], DataFrame]]:
    """Each plan by name, from the cheapest to the whole backfill."""
    events = inputs.events.select("key", "ts", "value")
    return {
        "scan": lambda: _peer(inputs, "spark_scan"),
        "arrow": lambda: _handed(events),
        "shuffle": lambda: events.repartition("key"),
        "shuffle+arrow": lambda: _handed(events.repartition("key")),
        "shuffle+sort": lambda: sorted_by_groups(events, ["key"]),
        "shuffle+sort+arrow": lambda: _handed(sorted_by_groups(events, ["key"])),
        "naive Spark join": lambda: _peer(inputs, "spark_join"),
        "timetile": lambda: _peer(inputs, "timetile[auto]"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(SPECS), default="uniform")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of every plan; the first warms up and is not counted "
                             "(default: %(default)s)")
    parser.add_argument("--only", help="comma-separated plans to run (default: all)")
    parser.add_argument("--cache", type=Path, default=HERE / ".data")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: the first round only warms up")
    from timetile.offline.session import local_session
    spark = local_session("timetile-data-path", cores=2, shuffle_partitions=8,
                          driver_memory="5g")
    dataset = ensure(spark, args.dataset, args.scale, args.cache)
    plans = steps(make_inputs(spark, dataset.events_path, dataset.queries_path))
    if args.only:
        unknown = set(args.only.split(",")) - set(plans)
        if unknown:
            parser.error(f"--only: no plan {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(plans)}")
        plans = {name: plan for name, plan in plans.items() if name in args.only.split(",")}
    seconds: dict[str, list[float]] = {name: [] for name in plans}
    for round_ in range(args.rounds):
        for name, plan in plans.items():
            started = time.perf_counter()
            plan().write.format("noop").mode("overwrite").save()
            seconds[name].append(time.perf_counter() - started)
        print(f"round {round_ + 1}/{args.rounds}: "
              + ", ".join(f"{name} {times[-1]:.2f}" for name, times in seconds.items()),
              flush=True)
    medians = {name: statistics.median(times[1:]) for name, times in seconds.items()}
    join = medians.get("naive Spark join")
    print(f"\n{dataset.label}, median of {args.rounds - 1} warm rounds (noop sink):\n")
    print("| plan | seconds |" + (" × naive join |" if join else ""))
    print("|---|---:|" + ("---:|" if join else ""))
    for name, median in medians.items():
        print(f"| {name} | {median:.2f} |" + (f" {median / join:.3f} |" if join else ""))


if __name__ == "__main__":
    main()
