"""How the command line shows a job: the report, sample rows and the demo's summary.

Rendering only: these functions take finished results and print rich tables; they run no
Spark job. Values are shown as :class:`rich.text.Text`, never parsed as markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from timetile.api.join import Join
from timetile.core.timeutil import ms_to_iso
from timetile.offline.report import JobReport

#: The widest a list or map value is shown before it is cut.
_VALUE_WIDTH = 48
#: The widest a cell of :func:`print_rows` is drawn.
_CELL_WIDTH = 24


def format_value(value: Any) -> Text:
    """Format a cell: numbers compact, lists and maps cut to a readable width, null dimmed.

    >>> str(format_value(3.14159265)), str(format_value([1, 2])), str(format_value(None))
    ('3.142', '[1, 2]', 'null')
    """
    if value is None:
        return Text("null", style="dim")
    if isinstance(value, float):
        return Text(format_float(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return Text(str(value))
    text = str(value)
    if len(text) > _VALUE_WIDTH:
        text = text[: _VALUE_WIDTH - 1] + "…"
    return Text(text)


def format_float(value: float) -> str:
    """Four significant digits, thousands separated, without exponents for everyday sizes.

    >>> format_float(35812.4), format_float(21.9), format_float(0.000123456), format_float(2e-9)
    ('35,812', '21.9', '0.0001235', '2e-09')
    """
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude < -6 or magnitude >= 15:
        return f"{value:.4g}"
    decimals = max(0, 3 - magnitude)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if decimals else text


def report_table(report: JobReport) -> Table:
    """Tabulate the sources a job read: rows read, rows left out and why."""
    table = Table(title=f"Backfill {report.job} · executor {report.path}", title_justify="left",
                  show_edge=False)
    table.add_column("source")
    table.add_column("table", overflow="fold")
    table.add_column("rows read", justify="right")
    table.add_column("left out", justify="right")
    table.add_column("why")
    for source in report.sources:
        reasons = []
        if source.without_time:
            reasons.append(f"{source.without_time:,} time null or unparseable")
        if source.without_key:
            reasons.append(f"{source.without_key:,} key null")
        table.add_row(source.role, Text(source.label), f"{source.rows:,}",
                      f"{source.left_out:,}", Text("; ".join(reasons) or "-"))
    return table


def stage_table(report: JobReport) -> Table:
    """Tabulate the wall time per stage, in the order the stages ran."""
    table = Table(title="Stages", title_justify="left", show_edge=False)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for name, seconds in report.stage_seconds.items():
        table.add_row(name, f"{seconds:.2f}")
    table.add_row(Text("total", style="bold"), f"{sum(report.stage_seconds.values()):.2f}")
    return table


def print_report(console: Console, report: JobReport, output: str, rows: int) -> None:
    """Print the job report: sources, stages, notes and where the output went."""
    console.print()
    console.print(report_table(report))
    console.print()
    console.print(stage_table(report))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))
    for name, read in report.gauges.items():
        value = read()
        if value is not None:
            console.print(Text(f"{name}: {value}", style="dim"))
    console.print(Text.assemble("wrote ", (f"{rows:,}", "bold"), " rows to ",
                                (output, "bold")))


def print_rows(console: Console, rows: Sequence[Any], title: str) -> None:
    """Print rows of a DataFrame, transposed: one line per column, one column per row.

    Feature tables are wide and short; transposed, every column name stays readable.
    """
    if not rows:
        return
    records = [row.asDict() for row in rows]
    cells = [[format_value(value) for value in record.values()] for record in records]
    room = console.width - max(len(column) for column in records[0]) - 3
    shown: list[list[Text]] = []
    for index, record_cells in enumerate(cells):
        width = min(_CELL_WIDTH, max(len(f"row {index + 1}"), *(c.cell_len for c in record_cells)))
        room -= width + 3
        if room < 0 and shown:
            break
        shown.append(record_cells)
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("column", style="cyan", no_wrap=True)
    for index in range(len(shown)):
        table.add_column(f"row {index + 1}", overflow="ellipsis", no_wrap=True,
                         max_width=_CELL_WIDTH)
    for position, column in enumerate(records[0]):
        table.add_row(column, *[record_cells[position] for record_cells in shown])
    console.print()
    console.print(table)
    if len(shown) < len(records):
        hidden = len(records) - len(shown)
        noun = "row does" if hidden == 1 else "rows do"
        console.print(Text(f"{hidden} more {noun} not fit in {console.width} columns",
                           style="dim"))


def print_summary(console: Console, join: Join, report: JobReport, *, rows: int,
                  seconds: float, definitions: Path, output: Path) -> None:
    """Print the demo's closing panel: rows, features, time taken, rows left out."""
    left_out = ", ".join(f"{source.left_out:,} from {source.role}"
                         for source in report.sources if source.left_out) or "none"
    lines = [
        ("rows", f"{rows:,} (every left row in range once, duplicates included)"),
        ("features", f"{len(join.output_columns())} columns from {len(join.join_parts)} parts"),
        ("time taken", f"{seconds:.1f}s, end to end on local Spark"),
        ("rows left out", left_out),
        ("definitions", str(definitions)),
        ("output", str(output)),
    ]
    if join.derived_columns():  # Join.derivations: say what the output table holds
        written = "with" if join.keeps_features else "instead of"
        lines.insert(2, ("derived", f"{len(join.derived_columns())} columns, written "
                                    f"{written} the features"))
    body = Text()
    for index, (name, value) in enumerate(lines):
        body.append(f"{name:>14}  ", style="bold")
        body.append(value + ("\n" if index < len(lines) - 1 else ""))
    console.print()
    console.print(Panel(body, title=f"timetile demo: {join.name}", expand=False))


def print_upload(console: Console, written: dict[str, tuple[int, int]], *, store: str, ds: str,
                 seconds: float) -> None:
    """Print what ``upload`` wrote: keys and bytes per GroupBy."""
    table = Table(show_edge=False)
    table.add_column("group_by")
    table.add_column("keys", justify="right")
    table.add_column("bytes", justify="right")
    for name, (keys, size) in written.items():
        table.add_row(name, f"{keys:,}", f"{size:,}")
    console.print()
    console.print(table)
    noun = "GroupBy" if len(written) == 1 else "GroupBys"
    console.print(Text.assemble("uploaded ", (f"{len(written)}", "bold"), f" {noun} to ",
                                (store, "bold"), f" as of the end of {ds} in {seconds:.1f}s"))


def print_features(console: Console, features: dict[str, Any], stale_columns: set[str], *,
                   title: str, stale: Sequence[str],
                   before_upload: Mapping[str, int] | None = None) -> None:
    """Print one row's features, one line each; the columns of stale GroupBys flagged.

    ``before_upload`` names the stale GroupBys fetched before their upload's day end (epoch
    ms), which need another fix than those whose upload is late.
    """
    early = dict(before_upload or {})
    late = [name for name in stale if name not in early]
    table = Table(show_edge=False)
    table.add_column("feature", style="cyan", no_wrap=True)
    table.add_column("value", overflow="fold")
    if stale:
        table.add_column("")
    for name, value in features.items():
        flag = [Text("stale", style="yellow")] if name in stale_columns else []
        table.add_row(name, format_value(value), *flag)
    console.print()
    console.print(Text(title, style="bold"))
    console.print(table)
    if late:
        console.print(Text(
            f"stale: {', '.join(late)}: the last upload no longer covers this time, so these "
            "values miss what the next upload adds. Fix: run timetile upload with a later "
            "--ds.", style="yellow"))
    for name, day_end in early.items():
        console.print(Text(
            f"stale: {name}: this time is before its upload's day end {ms_to_iso(day_end)}, "
            "and the store holds no state from before it, so these are an empty window's "
            "values. Fix: fetch at or after the day end, or upload an earlier --ds into a "
            "fresh store.", style="yellow"))
