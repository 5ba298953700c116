"""Where timetile's own backfill spends its time, stage by stage, on a ``backfill.py`` dataset.

``backfill.py`` times a backfill whole: building the job (planning, the count job over every
source, any hot-key search) and the main job that computes and writes the features. This
script splits that time, round after round in one process: each stage the job report names,
then ``dataframe()`` (the driver building the main job's plan) and the main job itself,
written to Spark's ``noop`` sink. The first round pays the JVM's and the Python workers'
warm-up; the medians are of the rounds after it.

    python benchmarks/backfill_stages.py --dataset skewed --rounds 6
    python benchmarks/backfill_stages.py --dataset uniform --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # timetile, when it is not installed

from _contenders import OPS, WINDOWS, Inputs, make_inputs  # noqa: E402
from _datasets import SPECS, ensure  # noqa: E402

import timetile as tt  # noqa: E402
from timetile.spark.session import local_session  # noqa: E402


def one_round(inputs: Inputs) -> dict[str, float]:
    """Build and run the benchmark's backfill once; return seconds per stage, in order."""
    group_by = tt.GroupBy("ev", tt.EventSource(inputs.events, time_column="ts"), ["key"], [
        tt.Aggregation("value", op, windows=list(WINDOWS)) for op in OPS])
    join = tt.Join("bench", left=tt.EventSource(inputs.queries, time_column="ts"),
                   parts=[group_by])
    began = time.perf_counter()
    job = tt.BackfillJob(join, inputs.spark).plan()
    built = time.perf_counter()
    frame = job.dataframe()
    planned = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    done = time.perf_counter()
    stages = dict(job.report.stage_seconds)
    stages["other building"] = (built - began) - sum(stages.values())
    stages["dataframe()"] = planned - built
    stages["main job"] = done - planned
    stages["total"] = done - began
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(SPECS), default="skewed")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=6, help="at least 2: the first is cold")
    parser.add_argument("--data-dir", type=Path, default=HERE / ".data")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: the first round is cold")
    spark = local_session("timetile-stages", cores=2, shuffle_partitions=8, driver_memory="5g")
    dataset = ensure(spark, args.dataset, args.scale, args.data_dir)
    inputs = make_inputs(spark, dataset.events_path, dataset.queries_path)
    rounds = []
    for index in range(args.rounds):
        rounds.append(one_round(inputs))
        print(f"round {index}: " + ", ".join(f"{name} {seconds:.2f} s"
                                             for name, seconds in rounds[-1].items()), flush=True)
    warm = rounds[1:]
    print(f"\n{args.dataset}, scale {args.scale:g}: medians of {len(warm)} warm rounds")
    for name in rounds[-1]:
        values = [stages.get(name, 0.0) for stages in warm]
        print(f"  {name:<18} {statistics.median(values):6.2f} s  "
              f"({min(values):.2f} to {max(values):.2f})")


if __name__ == "__main__":
    main()
