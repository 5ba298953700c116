"""Backfill benchmark: timetile against the hand-written plans, on the same data, in one run.

Every contender computes sum, count and max of ``value`` over the sliding windows
``[q − 1d, q)`` and ``[q − 7d, q)`` for every query, and materializes the result; only that is
timed. The table gives seconds and, per timetile executor, its speedup over each peer (the
peer's seconds / timetile's); the issue's goals are checked; the section of RESULTS.md for the
dataset and scale is rewritten, its seconds written as JSON under ``results/`` and its plot
redrawn under ``plots/``. ``--scales`` times timetile and the naive Spark join at several
scales instead, for the plot of seconds against events. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # timetile, when it is not installed

from _contenders import (  # noqa: E402
    OPS,
    SEGTREE,
    Contender,
    Inputs,
    contenders,
    make_inputs,
    result_columns,
)
from _datasets import SPECS, Dataset, ensure  # noqa: E402
from _publish import Measured, log, report, report_scaling  # noqa: E402
from _report import command_line, software, this_run  # noqa: E402
from _runner import Outcome, Runner, compare  # noqa: E402

EXAMPLES = """\
examples:
  # everything, at full scale (the numbers for RESULTS.md)
  python benchmarks/backfill.py
  # a quick end-to-end run on a tenth of the data, with a shorter limit
  python benchmarks/backfill.py --scale 0.1 --timeout 300
  # the skewed dataset only, timetile (every registered executor) against DuckDB
  python benchmarks/backfill.py --dataset skewed --only timetile,duckdb_window --executor all
  # generate (or find) the full-scale data and time that, running no contender
  python benchmarks/backfill.py --generate-only
  # other ops: timetile's executors against each other (the SQL plans compute only the default)
  python benchmarks/backfill.py --dataset skewed --ops first,last,last_k --executor sweep,tiled
  # bucketed features: each op broken down by a string column of 10 values
  python benchmarks/backfill.py --dataset skewed --buckets 10 --executor auto,interval_tree
  # timetile and the naive Spark join at 1M, 3M and 10M events (uniform): the scaling plot
  python benchmarks/backfill.py --scales 0.1,0.3,1 --repeat 3 --timeout 600

contenders (--only): spark_join, spark_window_segtree, spark_window, duckdb_join,
  duckdb_window, spark_scan, timetile
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/backfill.py", description=__doc__.split("\n\n")[0],
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", choices=[*SPECS, "all"], default="all",
                        help="which dataset (default: all)")
    parser.add_argument("--scale", type=float, default=None,
                        help="multiply events, queries and keys (default: 1)")
    parser.add_argument("--scales", default="",
                        help="comma-separated scales: time the contenders at each (default: "
                             "timetile and spark_join) on one dataset (default: uniform) and "
                             "write the section '<dataset>, scaling' and its plot, in place "
                             "of the per-scale sections")
    parser.add_argument("--only", default="",
                        help="comma-separated contenders to run (default: all; see below)")
    parser.add_argument("--executor", default=None,
                        help="timetile executor(s), comma-separated, or 'all' for every "
                             "executor timetile.offline.backfill.CHOOSABLE names (default: the "
                             "library's default, DEFAULT_EXECUTOR)")
    parser.add_argument("--ops", default=",".join(OPS),
                        help="the ops of value over 1d and 7d, comma-separated (default: "
                             "%(default)s); other ops run timetile's executors alone, k=5 for "
                             "the _k ops, and their section of RESULTS.md is their own")
    parser.add_argument("--buckets", type=int, default=0,
                        help="break timetile's features down by a string column of N values "
                             "(value's integer part mod N); like other --ops, timetile's "
                             "executors alone, in a section of their own (default: none)")
    parser.add_argument("--max-key-events", type=int, default=None,
                        help="timetile's max_key_events: above it the sweep searches for hot "
                             "keys (default: the library's default; a huge value turns the "
                             "search off)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds before a contender is abandoned (default: 600)")
    parser.add_argument("--cache", type=Path, default=HERE / ".data",
                        help="where the generated Parquet lives (default: benchmarks/.data)")
    parser.add_argument("--results", type=Path, default=HERE / "RESULTS.md",
                        help="the Markdown file to update (default: benchmarks/RESULTS.md); "
                             "the seconds go to results/*.json and the plots to plots/*.png "
                             "beside it")
    parser.add_argument("--no-results", action="store_true",
                        help="do not update RESULTS.md, its JSON or its plots")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the correctness spot-check")
    parser.add_argument("--check-after", action="store_true",
                        help="run the check after the timed runs, on the contenders that "
                             "finished (the timed runs are then cold: first plan "
                             "compilation, Python workers, JIT); by default it runs first")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time each contender N times and keep the best (default: 1)")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N] (default: 2)")
    parser.add_argument("--duckdb-threads", type=int, default=2, help="(default: 2)")
    parser.add_argument("--shuffle-partitions", type=int, default=8,
                        help="spark.sql.shuffle.partitions (default: 8)")
    parser.add_argument("--driver-memory", default="5g", help="Spark driver heap (default: 5g)")
    parser.add_argument("--generate-only", action="store_true",
                        help="generate or find the datasets, then stop")
    args = parser.parse_args(argv)
    if args.buckets < 0:
        parser.error(f"--buckets {args.buckets}: give a positive number of buckets, or 0 "
                     "for none")
    try:
        args.scales = [float(text) for text in args.scales.split(",") if text.strip()]
    except ValueError:
        parser.error(f"--scales {args.scales}: give numbers, e.g. 0.1,0.3,1")
    if args.scales:
        if args.scale is not None:
            parser.error("give --scale or --scales, not both")
        if args.ops != ",".join(OPS) or args.buckets:
            parser.error("--scales times the default ops: leave --ops and --buckets out")
        if args.dataset == "all":
            args.dataset = "uniform"
        if not args.only:
            args.only = "spark_join,timetile"
    if args.scale is None:
        args.scale = 1.0
    return args


def executors(choice: str | None) -> list[str]:
    options = importlib.import_module("timetile.offline.options")
    known = list(options.EXECUTOR_NAMES)
    if choice is None:
        return [options.DEFAULT_EXECUTOR]
    if choice == "all":
        return known
    names = [name.strip() for name in choice.split(",") if name.strip()]
    allowed = [*known, *([options.AUTO] if options.AUTO not in known else [])]
    unknown = [name for name in names if name not in allowed]
    if unknown:
        sys.exit(f"unknown executor {', '.join(unknown)}: timetile has {', '.join(allowed)}")
    return names


def select(everything: list[Contender], only: str) -> list[Contender]:
    if not only:
        return everything
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    known = {c.name for c in everything} | {"timetile"}
    if wanted - known:
        sys.exit(f"unknown contender {', '.join(sorted(wanted - known))}: "
                 f"use {', '.join(sorted(known))}")
    return [c for c in everything
            if c.name in wanted or (c.family == "timetile" and "timetile" in wanted)]


def sample_of(dataset: Dataset) -> tuple[int, int]:
    """The check's sample of keys ``(m, r)``: those with ``key % m == r``, about 20 of them."""
    modulus = max(1, dataset.spec.keys // 20)
    return modulus, 7 % modulus


def check(runner: Runner, chosen: list[Contender], dataset: Dataset,
          timeout: float, ops: tuple[str, ...]) -> list[str]:
    """Run the contenders on a sample of keys (all their queries and events) and compare."""
    sample = sample_of(dataset)
    inputs = make_inputs(runner.spark, dataset.events_path, dataset.queries_path, sample)
    results, failed = {}, []
    for contender in chosen:
        if not contender.checked:
            continue
        log(f"[{dataset.spec.name}] check: {contender.title} on the sample ...")
        outcome, rows = runner.rows(contender, inputs, timeout)
        if not outcome.ok or rows is None:
            failed.append(f"WARNING: check: {contender.title} did not finish on the sample: "
                          f"{outcome.status} {outcome.detail}".rstrip())
            log(failed[-1])
            continue
        results[contender.name] = rows
    counts = {len(rows) for rows in results.values()}
    lines = compare(results, result_columns(ops))
    if len(results) < 2:
        lines = [f"check: skipped ({len(results)} contender(s) finished on the sample)"]
    elif not lines:
        lines = [f"check: {len(results)} contenders agree (rel 1e-9) on "
                 f"{'/'.join(str(n) for n in sorted(counts))} sampled queries "
                 f"(keys ≡ {sample[1]} mod {sample[0]})"]
    return lines + failed


def warm_up(runner: Runner, contender: Contender, sample: Inputs, inputs: Inputs,
            timeout: float) -> Outcome | None:
    """Run a contender untimed right before its clock; return the outcome if it failed.

    On the sample, since Spark stops Python workers idle for a minute (behind a slow peer);
    timetile also on the whole data, since Spark coalesces the sample's few rows into one
    partition, which wakes one Python worker, not one per core.
    """
    runner.rows(contender, sample, timeout)
    if contender.family == "timetile":
        outcome = runner.timed(contender, inputs, timeout)
        if not outcome.ok:
            return outcome
    return None


def measure(args: argparse.Namespace, runner: Runner, chosen: list[Contender],
            dataset: Dataset) -> Measured:
    """Check, warm up and time every contender on ``dataset``."""
    name = dataset.spec.name
    spark = runner.spark
    load_before = os.getloadavg()[0]
    # Untimed warm-up: the JVM's code and the OS page cache see the files once before any clock.
    for path in (dataset.events_path, dataset.queries_path):
        spark.read.parquet(str(path)).write.format("noop").mode("overwrite").save()
    inputs = make_inputs(spark, dataset.events_path, dataset.queries_path)
    checked: list[str] = []
    if not args.no_check and not args.check_after:
        # First, so that it warms up too: every plan is compiled, every Python worker and
        # kernel loaded once, before any clock starts.
        checked = check(runner, chosen, dataset, args.timeout, args.ops)
    outcomes: dict[str, Outcome] = {}
    warm = not args.no_check and not args.check_after
    sample = make_inputs(spark, dataset.events_path, dataset.queries_path, sample_of(dataset))
    failed = {line for line in checked if line.startswith("WARNING: check:")}
    for contender in chosen:
        if warm and not any(contender.title in line for line in failed):
            refused = warm_up(runner, contender, sample, inputs, args.timeout)
            if refused is not None:  # a timeout or failure is not repeated
                log(f"[{name}] {contender.title}: warm-up {refused.status}, not timed")
                outcomes[contender.name] = refused
                continue
        for attempt in range(args.repeat):
            count = f" ({attempt + 1}/{args.repeat})" if args.repeat > 1 else ""
            log(f"[{name}] {contender.title}{count} ...")
            outcome = runner.timed(contender, inputs, args.timeout)
            shown = {"ok": f"{outcome.seconds:.2f} s", "timeout": f"timed out after "
                     f"{outcome.seconds:.0f} s"}.get(outcome.status,
                                                    f"failed: {outcome.detail}")
            log(f"[{name}] {contender.title}: {shown}")
            best = outcomes.get(contender.name)
            if best is None or (outcome.ok and outcome.seconds < best.seconds):
                outcomes[contender.name] = outcome
            if not outcome.ok:  # a timeout or failure is not repeated
                break
    if not args.no_check and args.check_after:
        checked = check(runner, [c for c in chosen if outcomes[c.name].ok], dataset,
                        args.timeout, args.ops)
    for line in checked:
        if line.startswith("WARNING"):
            print(line, file=sys.stderr)
    return Measured(dataset, outcomes, checked, (load_before, os.getloadavg()[0]))


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    args.ops = tuple(op.strip() for op in args.ops.split(",") if op.strip())
    run = this_run(command_line("backfill.py", argv))
    from timetile.spark.session import local_session

    names = executors(args.executor)
    log(f"starting Spark local[{args.cores}] ...")
    spark = local_session("timetile-benchmark", cores=args.cores,
                          shuffle_partitions=args.shuffle_partitions,
                          driver_memory=args.driver_memory)
    try:
        segtree_default: str | None = spark.conf.get(SEGTREE)
    except Exception:  # an older Spark, without the segment-tree frame
        segtree_default = None
        log(f"{SEGTREE} does not exist in Spark {spark.version}: the window plan runs once")
    conf = {"master": f"local[{args.cores}]", "driver memory": args.driver_memory,
            "shuffle partitions": str(args.shuffle_partitions),
            "AQE": spark.conf.get("spark.sql.adaptive.enabled") or "?",
            "segtree default": str(segtree_default)}
    setup = software(conf)
    for line in (*run.lines(), f"- software: {setup}"):
        log(line)
    datasets = list(SPECS) if args.dataset == "all" else [args.dataset]
    args.cache.mkdir(parents=True, exist_ok=True)
    found = [ensure(spark, name, scale, args.cache, log)
             for name in datasets for scale in (args.scales or [args.scale])]
    if args.generate_only:
        return
    everyone = contenders(names, segtree=segtree_default is not None,
                          max_key_events=args.max_key_events)
    chosen = select(everyone, args.only)
    if args.ops != OPS or args.buckets:
        if args.only and any(contender.family != "timetile" for contender in chosen):
            sys.exit(f"--ops {','.join(args.ops)}{' --buckets' if args.buckets else ''}: "
                     "only timetile computes these features; leave --only out, or give "
                     "--only timetile")
        chosen = contenders(names, segtree=False, max_key_events=args.max_key_events,
                            ops=args.ops, buckets=args.buckets)
    tmp = args.cache / "duckdb_tmp"
    tmp.mkdir(exist_ok=True)
    runner = Runner(spark, duck_threads=args.duckdb_threads, duck_tmp=tmp,
                    segtree_default=segtree_default)
    if args.scales:
        report_scaling(args, chosen, [measure(args, runner, chosen, dataset)
                                      for dataset in found], run, setup)
    else:
        for dataset in found:
            report(args, chosen, measure(args, runner, chosen, dataset), run, setup)
    spark.stop()


if __name__ == "__main__":
    main()
