"""``timetile backfill``: compute a Join's features for a range of days and write them.

:func:`run_backfill` is the step the ``demo`` command shares.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from timetile.api.join import Join
from timetile.cli.common import (
    CliError,
    Debug,
    check_writable,
    load_joins,
    parse_day,
    pick_join,
    spark_session,
    user_errors,
)
from timetile.cli.common import console as stdout_console
from timetile.cli.progress import JobProgress
from timetile.cli.render import print_report, print_rows
from timetile.core.locations import local_path, overlapping
from timetile.offline.options import AUTO, DEFAULT_EXECUTOR, DEFAULT_MAX_KEY_EVENTS, EXECUTOR_NAMES
from timetile.offline.report import JobReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


_BACKFILL_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]    [dim]# writes the demo data to timetile-demo/data[/]
  [cyan]timetile backfill timetile/demo/checkout_model.py --start 2024-02-01 --end 2024-02-29 \\
      --output timetile-demo/output/checkout_model --overwrite --show 3[/]

  [dim]# day by day, reusing the hop partials of earlier days:[/]
  [cyan]timetile backfill timetile/demo/checkout_model.py --start 2024-02-01 --end 2024-02-01 \\
      --output out/2024-02-01 --partials timetile-demo/partials[/]

  [dim]DEFS.py is a Python file that builds tt.Join objects at module level; relative paths in
  it resolve against the current directory. Under spark-submit, the active session is used.[/]
"""


class OutputFormat(str, Enum):
    """The output file formats."""

    parquet = "parquet"
    csv = "csv"


def check_output(output: str, overwrite: bool) -> None:
    """Refuse an empty ``--output``, or one that exists without ``--overwrite``."""
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
                          partials_path=partials, max_key_events=max_key_events).plan()
    with progress.stage("compute+write"), job.report.stage("compute+write"):
        writer = writable(job.dataframe(), output_format).write
        writer = writer.mode("overwrite" if overwrite else "errorifexists")
        writer.format(output_format.value).option("header", "true").save(output)
    job.release()
    seconds = time.perf_counter() - began
    written = (spark.read.format(output_format.value).option("header", "true")
               .load(literal_path(output)))
    return BackfillResult(job.report, written, written.count(), seconds)


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
    debug: Debug = False,
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
        check_output(output, overwrite)
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


def register(app: typer.Typer) -> None:
    """Add ``backfill`` to ``app``."""
    app.command(epilog=_BACKFILL_EXAMPLE)(backfill)
