"""``timetile verify``: a Join's features under several cuts of time, compared (seed 001)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from timetile.cli.common import (
    CliError,
    Debug,
    Defs,
    check_writable,
    console,
    load_joins,
    parse_day,
    pick_join,
    spark_session,
    user_errors,
)
from timetile.cli.progress import JobProgress
from timetile.core.timeutil import ms_to_iso
from timetile.verify.tiling_report import AGREEING, UNSERVED_NOTE
from timetile.verify.tilings import DEFAULT_STREAM_BATCH, DEFAULT_TILINGS, KINDS, parse_tilings

if TYPE_CHECKING:
    from timetile.verify.tiling_report import VerifyReport

#: The exit status when a feature differs between tilings (2 is a user error).
MISMATCH_EXIT = 1

_VERIFY_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]    [dim]# writes the demo data to timetile-demo/data[/]
  [cyan]timetile verify timetile/demo/checkout_model.py --start 2024-02-20 --end 2024-02-29 \\
      --tilings one,daily,random:3 --output timetile-demo/verify[/]

  [dim]Backfills a sample of the left rows once per tiling, each segment over the sources as
  they stood at its end, the incremental tilings on stored hop partials, then compares every
  feature of every sampled row: exact ops exactly, approximate ones within their error
  bounds. Exits 1 when a feature differs, 2 on bad input. --output gets report.md,
  report.html and mismatches.parquet.[/]

  [cyan]timetile verify defs.py --start 2024-02-20 --end 2024-02-29 --tilings one --leaks[/]

  [dim]Also recomputes each sampled row over only the rows known before its time (a
  source's known_at, e.g. tt.EventSource(..., known_at="ingested_at")) and exits 1 when a
  feature changes: its training values saw rows that had not arrived yet.[/]

  [cyan]timetile verify timetile/demo/checkout_model.py --start 2024-02-20 --end 2024-02-29 \
      --tilings one,stream --stream-batch 1000[/]

  [dim]Uploads as of 2024-02-19, replays every source's rows of the range in time order
  through the streaming job, 1,000 rows per micro-batch, and fetches each sampled row at its
  time as the online service would: the online path against one batch backfill.[/]
"""


def verify(
    *,
    defs: Defs,
    start: Annotated[str, typer.Option(help="First day of left rows checked, YYYY-MM-DD.",
                                       show_default=False)],
    end: Annotated[str, typer.Option(help="Last day of left rows checked, inclusive.",
                                     show_default=False)],
    join: Annotated[str | None, typer.Option(
        help="The Join's name, when the file defines several.")] = None,
    tilings: Annotated[str, typer.Option(
        help="Comma-separated cuts of the range, the first the reference: "
             + "; ".join(f"{name}: {meaning}" for name, meaning in KINDS.items()) + ".")
    ] = DEFAULT_TILINGS,
    sample: Annotated[int, typer.Option(help="Check at most this many left rows.", min=1)
                      ] = 2_000,
    seed: Annotated[int, typer.Option(help="Seeds the sample and the random cuts.")] = 0,
    output: Annotated[Path | None, typer.Option(
        help="Write report.md, report.html and mismatches.parquet here.",
        show_default=False)] = None,
    work_dir: Annotated[str | None, typer.Option(
        help="Keep the work files (sampled rows, each tiling's output, stored partials) "
             "here; on a cluster, a folder every executor reaches. Default: a temporary "
             "local folder, removed at the end.", show_default=False)] = None,
    stream_batch: Annotated[int, typer.Option(
        help="The stream tiling's rows per micro-batch, across all sources.", min=1)
    ] = DEFAULT_STREAM_BATCH,
    leaks: Annotated[bool, typer.Option(
        "--leaks", help="Also recompute each sampled row over only the rows known before its "
        "time (cut by each source's known_at, if it declares one), and report the features "
        "that change: rows that arrived late, or a read past the row's time.")] = False,
    debug: Debug = False,
) -> None:
    """Compute a Join's features under several cuts of time and compare them, value by value.

    A correct computation does not depend on how its input is cut along time: one batch,
    day by day on stored partials, random cuts and a replay through the streaming job must
    give every left row the same features; and with --leaks, nor on rows that arrived after
    the left row's time.
    Prints the mismatches per feature and tiling, then the first mismatching rows.
    """
    out = console()
    with user_errors(debug):
        first, last = parse_day("--start", start), parse_day("--end", end)
        if first > last:
            raise CliError(f"--start {start} is after --end {end}. Fix: give start <= end.")
        try:
            parse_tilings(tilings, alone=leaks)
        except ValueError as error:
            raise CliError(f"--{error}.") from None
        for option, folder in (("--output", output), ("--work-dir", work_dir)):
            if folder is not None:
                check_writable(option, str(folder))
        chosen = pick_join(defs, load_joins(defs), join)
        from timetile.verify.invariance import verify as check  # noqa: PLC0415  (loads Spark)

        with JobProgress(None, out) as progress, spark_session(progress) as spark:
            report = check(chosen, spark, start, end, tilings=tilings, sample=sample,
                           seed=seed, output=output, work_dir=work_dir, progress=progress,
                           leaks=leaks, stream_batch=stream_batch)
    print_verify(out, report)
    if not report.passed:
        raise typer.Exit(MISMATCH_EXIT)


def print_verify(out: Console, report: VerifyReport) -> None:
    """Print the runs, the per-feature table, the first mismatching rows and the summary."""
    runs = Table(title=f"Tilings of {report.join} · {report.rows:,} sampled left rows, "
                       f"{report.start} to {report.end}", title_justify="left", show_edge=False)
    for name in ("tiling", "segments", "runs", "rows", "seconds", "stored partials"):
        runs.add_column(name, justify="left" if name in ("tiling", "stored partials")
                        else "right")
    for run in report.runs:
        bad = run.rows != report.rows
        runs.add_row(run.tiling, f"{run.segments:,}", f"{run.runs:,}",
                     Text(f"{run.rows:,}", style="red" if bad else ""), f"{run.seconds:.1f}",
                     run.partials)
    out.print()
    out.print(runs)
    grid = Table(title=f"Mismatching rows per feature (ref: {report.reference})",
                 title_justify="left", show_edge=False)
    grid.add_column("feature")
    grid.add_column("op")
    for run in report.runs:
        grid.add_column(run.tiling, justify="right")
    for feature, op, cells in report.grid():
        style = "red" if any(cell not in AGREEING for cell in cells) else ""
        grid.add_row(Text(feature, style=style), op, *cells)
    out.print()
    out.print(grid)
    if any("-" in cells for _, _, cells in report.grid()):
        out.print(f"[dim]-: {UNSERVED_NOTE}.[/]")
    if report.examples:
        shown = Table(title="First mismatching rows", title_justify="left", show_edge=False)
        for name in ("feature", "tiling", "time", "left row", "reference", "value"):
            shown.add_column(name, overflow="fold")
        for example in report.examples:
            shown.add_row(example.feature, example.tiling, ms_to_iso(example.time),
                          example.left, example.reference, example.value)
        out.print()
        out.print(shown)
    out.print(Text(report.summary(), style="bold green" if report.passed else "bold red"))
    if report.output is not None:
        out.print(Text(f"wrote report.md, report.html and mismatches.parquet to "
                       f"{report.output}"))


def register(app: typer.Typer) -> None:
    """Add ``verify`` to ``app``."""
    app.command(epilog=_VERIFY_EXAMPLE)(verify)
