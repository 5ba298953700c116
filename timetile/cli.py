"""The ``timetile`` command line: ``backfill``, ``demo``, and the online commands.

``upload``, ``serve`` and ``fetch`` live in :mod:`timetile.cli_online`; what the commands
share (errors, definitions files, the Spark session) in :mod:`timetile.cli_common`.

Every command has ``--help`` with a worked example. User errors (a definition that cannot
work, bad input under ``--strict``, a missing file, a bad date) print one paragraph in red
on stderr and exit with code 2; ``--debug`` adds the traceback. The job's progress is drawn
live on a terminal and printed as plain lines anywhere else (see :mod:`timetile.progress`).

When a SparkSession is already active (``spark-submit``, a notebook, the test suite) the
commands use it; otherwise they start :func:`timetile.offline.session.local_session` and
stop it when done.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from timetile import __version__, cli_online, examples
from timetile.api.join import Join
from timetile.cli_common import (
    USAGE_ERROR,
    CliError,
    check_writable,
    load_joins,
    parse_day,
    pick_join,
    spark_session,
    user_errors,
)
from timetile.cli_common import console as stdout_console
from timetile.cli_render import print_features, print_report, print_rows, print_summary
from timetile.core.locations import local_path, overlapping
from timetile.core.timeutil import ms_to_iso
from timetile.offline.options import AUTO, DEFAULT_EXECUTOR, DEFAULT_MAX_KEY_EVENTS, EXECUTOR_NAMES
from timetile.offline.report import JobReport
from timetile.progress import JobProgress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from timetile.demo_serving import DemoFetch

__all__ = ["USAGE_ERROR", "CliError", "app", "load_joins", "main", "parse_day", "pick_join",
           "spark_session"]

_BACKFILL_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]    [dim]# writes the demo data to timetile-demo/data[/]
  [cyan]timetile backfill examples/checkout_model.py --start 2024-02-01 --end 2024-02-29 \\
      --output timetile-demo/output/checkout_model --overwrite --show 3[/]

  [dim]# day by day, reusing the hop partials of earlier days:[/]
  [cyan]timetile backfill examples/checkout_model.py --start 2024-02-01 --end 2024-02-01 \\
      --output out/2024-02-01 --partials timetile-demo/partials[/]

  [dim]DEFS.py is a Python file that builds tt.Join objects at module level; relative paths in
  it resolve against the current directory. Under spark-submit, the active session is used.[/]
"""

_DEMO_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]                                  [dim]# 200k views: ~50 s on 2 cores[/]
  [cyan]timetile demo --events 2000000 --data-dir /tmp/tt-demo[/]   [dim]# bigger[/]

  [dim]Then rerun the backfill yourself, or edit the definitions:[/]
  [cyan]timetile backfill examples/checkout_model.py --start 2024-02-01 --end 2024-02-29 \\
      --output timetile-demo/output/checkout_model --overwrite --show 3[/]
"""

app = typer.Typer(
    name="timetile",
    help="Point-in-time-correct windowed aggregations (ML features) on Apache Spark.\n\n"
    "[bold]Example[/]\n\n"
    "  [cyan]timetile demo[/]       [dim]# generate data, backfill a model, show rows[/]\n"
    "  [cyan]timetile backfill examples/checkout_model.py \\\n"
    "      --start 2024-02-01 --end 2024-02-29 --output out/checkout_model[/]\n"
    "  [cyan]timetile upload examples/checkout_model.py --ds 2024-02-29 \\\n"
    "      --store lmdb:timetile-demo/store[/]   [dim]# then: timetile serve / fetch[/]\n\n"
    "Run [cyan]timetile COMMAND --help[/] for each command's options and example.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


class OutputFormat(str, Enum):
    """The output file formats."""

    parquet = "parquet"
    csv = "csv"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"timetile {__version__}")
        raise typer.Exit


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Point-in-time-correct windowed aggregations (ML features) on Apache Spark."""


def _check_output(output: str, overwrite: bool) -> None:
    if not output.strip():
        raise CliError("--output is empty. Fix: give a folder path or URI.")
    path = local_path(output)
    if path is None:
        return
    if path.exists() and not overwrite:
        raise CliError(f"The output {output} already exists. Fix: add --overwrite to replace it, "
                       "or write elsewhere.")
    check_writable("--output", output)


def _check_not_an_input(output: str, join: Join) -> None:
    """Refuse an output that is, holds or lies in a path the Join reads.

    With --overwrite, Spark would replace the input with the features computed from it.
    """
    read = overlapping(output, list(join.paths_read))
    if read is not None:
        raise CliError(f"--output {output}: the Join {join.name!r} reads {read}, which writing "
                       "there would replace. Fix: write the output to another folder.")


# --- running --------------------------------------------------------------------------------


def writable(frame: DataFrame, output_format: OutputFormat) -> DataFrame:
    """Shape ``frame`` so the format can hold it: CSV gets arrays and maps as JSON strings."""
    if output_format is not OutputFormat.csv:
        return frame
    from pyspark.sql import functions as sf  # noqa: PLC0415  (Spark loads with the job)
    from pyspark.sql.types import ArrayType, MapType, StructType  # noqa: PLC0415

    nested = (ArrayType, MapType, StructType)
    return frame.select(*[
        sf.to_json(field.name).alias(field.name) if isinstance(field.dataType, nested)
        else sf.col(field.name)
        for field in frame.schema.fields
    ])


@dataclass
class BackfillResult:
    """What a backfill run produced: the report, the output read back, and its wall time."""

    report: JobReport
    output: DataFrame
    rows: int
    seconds: float


def run_backfill(spark: SparkSession, join: Join, progress: JobProgress, *, start: str,
                 end: str, output: str, output_format: OutputFormat, strict: bool,
                 overwrite: bool, executor: str = DEFAULT_EXECUTOR,
                 partials: str | None = None,
                 max_key_events: int = DEFAULT_MAX_KEY_EVENTS) -> BackfillResult:
    """Plan, count and write a backfill; Spark's executors write the output."""
    from timetile.offline.backfill import BackfillJob  # noqa: PLC0415  (loads the engine)
    from timetile.spark.sources import literal_path  # noqa: PLC0415

    began = time.perf_counter()
    with progress.stage("plan, count input"):
        job = BackfillJob(join, spark, start, end, strict=strict, executor=executor,
                          partials_path=partials, max_key_events=max_key_events)
    with progress.stage("compute+write"), job.report.stage("compute+write"):
        writer = writable(job.dataframe(), output_format).write
        writer = writer.mode("overwrite" if overwrite else "errorifexists")
        writer.format(output_format.value).option("header", "true").save(output)
    job.release()
    seconds = time.perf_counter() - began
    written = (spark.read.format(output_format.value).option("header", "true")
               .load(literal_path(output)))
    return BackfillResult(job.report, written, written.count(), seconds)


# --- commands -------------------------------------------------------------------------------

_Debug = Annotated[bool, typer.Option("--debug", help="Show the traceback of errors.")]


@app.command(epilog=_BACKFILL_EXAMPLE)
def backfill(
    *,
    defs: Annotated[Path, typer.Argument(help="Python file that defines the tt.Join(s).",
                                         show_default=False)],
    start: Annotated[str, typer.Option(help="First day of left rows, YYYY-MM-DD (UTC).",
                                       show_default=False)],
    end: Annotated[str, typer.Option(help="Last day of left rows, inclusive, YYYY-MM-DD.",
                                     show_default=False)],
    output: Annotated[str, typer.Option(help="Where Spark writes the output (a directory).",
                                        show_default=False)],
    join: Annotated[str | None, typer.Option(
        help="The Join's name, when the file defines several.")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Fail on rows without a usable time instead of leaving them out.")
    ] = False,
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", help="Output format; CSV writes arrays and maps as JSON.")
    ] = OutputFormat.parquet,
    overwrite: Annotated[bool, typer.Option("--overwrite",
                                            help="Replace the output if it exists.")] = False,
    show: Annotated[int, typer.Option(help="Print the first N output rows.", min=0)] = 0,
    executor: Annotated[str, typer.Option(
        help="auto (per part: sweep when it computes every aggregation, as it does count, "
             "sum, avg, min, max, variance, stddev, skew, kurtosis, unique_count, histogram, "
             "top_k, bottom_k, first, last, first_k and last_k, bucketed or not; else "
             "interval_tree for small query sets, else tiled; a part mostly of sweep ops "
             "splits between the two), "
             "sweep, tiled, interval_tree or reference. See docs/engine.md.")
    ] = DEFAULT_EXECUTOR,
    partials: Annotated[str | None, typer.Option(
        help="Store hop partials here and reuse them in later runs (incremental backfills). "
             "Runs every event part on the tiled executor (entity parts on their own).")
    ] = None,
    max_key_events: Annotated[int, typer.Option(
        help="The sweep cuts a key with more rows than this (its events and left rows) into "
             "chunks of time, each in its own task.", min=1)] = DEFAULT_MAX_KEY_EVENTS,
    debug: _Debug = False,
) -> None:
    """Compute point-in-time-correct features for a Join and write them.

    Every left row between --start and --end comes back once, with one column per
    (part, aggregation, window). Then the job report: rows read per source, rows left
    out and why, and the time of each stage.
    """
    console = stdout_console()
    with user_errors(debug):
        first, last = parse_day("--start", start), parse_day("--end", end)
        if first > last:
            raise CliError(f"--start {start} is after --end {end}. Fix: give start <= end.")
        if executor not in (AUTO, *EXECUTOR_NAMES):
            raise CliError(f"--executor {executor!r} is unknown. Fix: use {AUTO} or one of "
                           f"{', '.join(EXECUTOR_NAMES)}.")
        if partials is not None and executor not in (AUTO, "tiled"):
            raise CliError(f"--partials works with the tiled executor, not {executor}. Fix: "
                           "use --executor tiled (or auto, which then picks it), or leave out "
                           "--partials.")
        _check_output(output, overwrite)
        if partials is not None and not partials.strip():
            raise CliError("--partials is empty. Fix: give a folder path or URI, or leave out "
                           "--partials.")
        if partials is not None:
            check_writable("--partials", partials)
            if overlapping(partials, [output]) is not None:
                raise CliError(f"--partials {partials} and --output {output} overlap, and "
                               "writing the output replaces what is stored there. Fix: keep "
                               "the stored partials in a folder of their own.")
        chosen = pick_join(defs, load_joins(defs), join)
        _check_not_an_input(output, chosen)
        with JobProgress(None, console) as progress, spark_session(progress) as spark:
            result = run_backfill(spark, chosen, progress, start=start, end=end, output=output,
                                  output_format=output_format, strict=strict,
                                  overwrite=overwrite, executor=executor, partials=partials,
                                  max_key_events=max_key_events)
            rows = result.output.limit(show).collect() if show else []
        print_report(console, result.report, output, result.rows)
        if rows:
            print_rows(console, rows, f"first {len(rows)} rows of {output}")


@app.command(epilog=_DEMO_EXAMPLE)
def demo(
    *,
    data_dir: Annotated[Path, typer.Option(
        help="Where to write the demo data.", envvar=examples.DATA_ENV)
    ] = Path(examples.DEFAULT_DATA_DIR),
    events: Annotated[int, typer.Option(help="How many views; other tables scale with it.",
                                        min=100)] = 200_000,
    seed: Annotated[int, typer.Option(help="Random seed of the data.")] = 7,
    output: Annotated[Path | None, typer.Option(
        help="Where to write the features \\[default: DATA_DIR/../output/checkout_model].",
        show_default=False)] = None,
    show: Annotated[int, typer.Option(help="How many sample rows to print.", min=0)] = 5,
    debug: _Debug = False,
) -> None:
    """Generate a marketplace dataset, backfill a checkout model on it, show the result.

    Writes users, listings, views, purchases, checkouts (with a few duplicate rows and
    rows without a time) and listing ratings as Parquet, computed by Spark from spark.range
    so it scales; backfills the features of examples/checkout_model.py for February 2024 on
    local Spark; then uploads the state as of 2024-02-28 to an embedded store, lands the
    next morning's events and rating changes as JSON-lines files (DATA_DIR/../landing),
    streams them into the store with the Structured Streaming job and fetches one row's
    features (the checkout model's, and the listing's rating) at noon, online.
    """
    from timetile import demo as demo_data  # noqa: PLC0415  (Spark and the engine)
    from timetile.demo_serving import (  # noqa: PLC0415
        demo_folders,
        serve_demo_fetch,
        store_problem,
    )

    console = stdout_console()
    with user_errors(debug):
        try:
            definitions = examples.example_path()
        except FileNotFoundError as error:
            raise CliError(str(error)) from error
        target = output or data_dir.parent / "output" / "checkout_model"
        check_writable("--data-dir", str(data_dir))
        check_writable("--output", str(target))
        problem = store_problem(data_dir)
        if problem is not None:
            raise CliError(f"--data-dir {data_dir}: {problem}.")
        used = overlapping(str(target), [str(folder) for folder in demo_folders(data_dir)])
        if used is not None:
            raise CliError(f"--output {target}: the demo reads or replaces {used}, which "
                           "writing there would destroy. Fix: write the output elsewhere.")
        began = time.perf_counter()
        with JobProgress(None, console) as progress, spark_session(progress) as spark:
            with progress.stage(f"generate data ({events:,} views) in {data_dir}"):
                demo_data.generate(spark, data_dir, events=events, seed=seed)
            with _environment(examples.DATA_ENV, str(data_dir)):
                chosen = pick_join(definitions, load_joins(definitions), "checkout_model")
                ratings_file = examples.example_path("listing_ratings")
                ratings = pick_join(ratings_file, load_joins(ratings_file), "listing_ratings")
            # online: the checkout model plus the listing's rating, streamed from its change log
            online = Join(chosen.name, chosen.left, [*chosen.parts, ratings.parts[0]])
            result = run_backfill(spark, chosen, progress, start=demo_data.BACKFILL_START,
                                  end=demo_data.BACKFILL_END, output=str(target),
                                  output_format=OutputFormat.parquet, strict=False,
                                  overwrite=True)
            sample = result.output.limit(show).collect() if show else []
            asked = [{key: row[key] for key in ("user_id", "seller_id", "listing_id")}
                     for row in sample[:1]]
            with progress.stage(f"upload the state as of {demo_data.SERVE_DS}, stream the "
                                "next morning's landed files, fetch online"):
                served = serve_demo_fetch(spark, online, data_dir, demo_data.SERVE_DS, asked or [
                    {"user_id": 0, "seller_id": 0, "listing_id": 0}])
        seconds = time.perf_counter() - began
        print_report(console, result.report, str(target), result.rows)
        if sample:
            print_rows(console, sample, f"{len(sample)} sample rows of {chosen.name}")
        fetched = served.results[0]
        agreement = (f"equal to a backfill at that millisecond for all {len(fetched.features)} "
                     "features" if not served.mismatches else
                     f"DIFFERENT from the backfill for {', '.join(served.mismatches)}")
        print_features(console, fetched.features, set(), stale=fetched.stale, title=(
            f"served online from {served.store_uri} at {ms_to_iso(served.at)} for "
            f"{served.rows[0]}: the upload as of {demo_data.SERVE_DS} plus "
            f"{served.streamed:,} events and rating changes streamed by Structured Streaming from "
            f"{served.landing} in {served.batches} micro-batches{_not_written(served)}, "
            f"{agreement}"))
        print_summary(console, chosen, result.report, rows=result.rows, seconds=seconds,
                      definitions=definitions, output=target)


def _not_written(served: DemoFetch) -> str:
    """Name the demo's events the streams did not write (late or unusable), if any."""
    counts = served.counts
    left = counts.late + counts.behind_watermark + counts.unusable
    return f" ({left:,} late or unusable, not written)" if left else ""


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


cli_online.register(app)


def main(argv: list[str] | None = None) -> Any:
    """Run the command line: the console script's entry point."""
    # The job report shows what the library logs as warnings (rows left out): don't print
    # them twice through logging's last-resort handler.
    logging.getLogger("timetile").addHandler(logging.NullHandler())
    return app(args=argv, prog_name="timetile")


if __name__ == "__main__":
    main()
