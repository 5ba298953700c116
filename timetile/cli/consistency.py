"""``timetile consistency``: recompute logged responses offline and compare (seed 000)."""

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
    pick_join,
    spark_session,
    user_errors,
)
from timetile.cli.progress import JobProgress
from timetile.cli.render import format_float

if TYPE_CHECKING:
    from timetile.verify.results import ConsistencyReport


_CONSISTENCY_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile serve timetile/demo/checkout_model.py --store lmdb:timetile-demo/store \\
      --log-dir timetile-demo/responses[/]    [dim]# serve some requests, then stop it[/]
  [cyan]timetile consistency timetile/demo/checkout_model.py --logs timetile-demo/responses \\
      --output timetile-demo/consistency[/]

  [dim]Recomputes every logged row with backfill at its request time and compares, per
  feature: exact ops must match exactly, approximate ones lie within their error bounds.
  Rows served from a late upload (stale) are counted, not compared. --output gets
  features.parquet, differences.parquet and report.html (open it in a browser).[/]
"""


def consistency(
    *,
    defs: Defs,
    logs: Annotated[str, typer.Option(
        help="The response-log directory (serve --log-dir): it holds one folder per Join.",
        show_default=False)],
    join: Annotated[str | None, typer.Option(
        help="The Join's name, when the file defines several.")] = None,
    output: Annotated[Path | None, typer.Option(
        help="Write features.parquet, differences.parquet and report.html here.",
        show_default=False)] = None,
    debug: Debug = False,
) -> None:
    """Recompute the logged responses offline and report how each feature matches.

    Runs on Spark. Prints, per feature, the rows compared, the mismatch rate, missing and
    extra values, SMAPE for numbers and the edit distance for lists; exits 0 whether or not
    features mismatch.
    """
    out = console()
    with user_errors(debug):
        from timetile.verify.consistency import consistency as check  # noqa: PLC0415
        from timetile.verify.logs import ConsistencyError, logs_path  # noqa: PLC0415

        chosen = pick_join(defs, load_joins(defs), join)
        try:
            logs_path(logs, chosen.name)  # fail before Spark starts
            if output is not None:
                check_writable("--output", str(output))
            with JobProgress(None, out) as progress, spark_session(progress) as spark:
                report = check(chosen, spark, logs, output=output, progress=progress)
        except ConsistencyError as error:
            raise CliError(f"{error}.") from None
        print_consistency(out, report)


def print_consistency(out: Console, report: ConsistencyReport) -> None:
    """Print the per-feature table of a consistency report, then its summary line."""
    table = Table(title=f"Consistency of {report.join} · {report.rows:,} logged rows",
                  title_justify="left", show_edge=False)
    for name in ("feature", "check", "rows", "stale", "matches", "mismatch", "missing",
                 "extra", "SMAPE mean", "SMAPE max", "edit dist"):
        table.add_column(name, justify="left" if name in ("feature", "check") else "right")

    def number(value: float | None) -> Text:
        return Text("-", style="dim") if value is None else Text(format_float(value))

    for entry in report.features:
        style = "red" if entry.mismatches else ""
        table.add_row(Text(entry.feature, style=style), entry.check, f"{entry.rows:,}",
                      f"{entry.stale:,}", f"{entry.matches:,}",
                      Text(f"{entry.mismatch_rate:.2%}", style=style), f"{entry.missing:,}",
                      f"{entry.extra:,}", number(entry.smape_mean), number(entry.smape_max),
                      number(entry.edit_distance_mean))
    out.print()
    out.print(table)
    good = len(report.matching) == len(report.features)
    out.print(Text(report.summary(), style="bold green" if good else "bold yellow"))
    if report.output is not None:
        out.print(Text(f"wrote features.parquet, differences.parquet and report.html to "
                       f"{report.output}"))


def register(app: typer.Typer) -> None:
    """Add ``consistency`` to ``app``."""
    app.command(epilog=_CONSISTENCY_EXAMPLE)(consistency)
