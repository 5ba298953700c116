"""``timetile join replay``: an interval join transcript, step by step (seed 004).

For users debugging a join: each input line, then what the processor let out, checked
against the transcript's ``>`` lines. No Spark runs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from timetile.cli.common import CliError, Debug, console, user_errors

MISMATCH_EXIT = 1

_REPLAY_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile join replay tests/core/interval_join/transcripts/worked_example.txt[/]
  [cyan]timetile join replay my_join.txt --restart-before 3 --restart-before 7[/]

  [dim]Prints each step and the rows and watermarks it lets out; a step whose outputs
  differ from the file's '>' lines is marked and the command exits 1. The file format is in
  docs/interval_joins.md.[/]
"""

join_app = typer.Typer(help="Interval joins (seed 004): replay a transcript.",
                       no_args_is_help=True, rich_markup_mode="rich")


@join_app.command(epilog=_REPLAY_EXAMPLE)
def replay(
    transcript: Annotated[Path, typer.Argument(help="A transcript file.", show_default=False)],
    restart_before: Annotated[list[int] | None, typer.Option(
        help="Also snapshot and restore the processor before this step (1 is the first "
             "input line); repeat it for several.")] = None,
    debug: Debug = False,
) -> None:
    """Replay an interval join transcript through the join processor, step by step."""
    from timetile.core.interval_join.transcript import (  # noqa: PLC0415  (no Spark anyway)
        TranscriptError,
        describe,
        read_transcript,
    )
    from timetile.core.interval_join.transcript import replay as run  # noqa: PLC0415

    out = console()
    with user_errors(debug):
        if not transcript.is_file():
            raise CliError(f"transcript {str(transcript)!r} is no file. Fix: give the path "
                           "of a transcript (format: docs/interval_joins.md)")
        try:
            parsed = read_transcript(transcript)
        except TranscriptError as error:
            raise CliError(str(error)) from None
        steps = len(parsed.steps)
        wrong = [n for n in restart_before or () if not 1 <= n <= steps]
        if wrong:
            raise CliError(f"--restart-before {wrong[0]} is no step: the transcript has "
                           f"{steps} steps, numbered from 1")
        try:
            produced = run(parsed, restarts=[n - 1 for n in restart_before or ()])
        except TranscriptError as error:  # a step the processor refuses
            raise CliError(str(error)) from None
        except AssertionError as error:  # a '= counts' line that does not hold
            out.print(Text(str(error), style="bold red"))
            raise typer.Exit(MISMATCH_EXIT) from None
    differing = 0
    for index, (step, outputs) in enumerate(zip(parsed.steps, produced, strict=True), 1):
        out.print(Text(f"{index:>3}  {step.text}", style="bold"))
        got = sorted(map(describe, outputs))
        expected = sorted(map(describe, step.expected))
        for line in got:
            out.print(Text(f"       > {line}"))
        if step.kind in ("row", "watermark") and Counter(got) != Counter(expected):
            differing += 1
            out.print(Text(f"       expected {expected or 'nothing'}", style="red"))
    if differing:
        out.print(Text(f"{differing} step(s) differ from the transcript", style="bold red"))
        raise typer.Exit(MISMATCH_EXIT)
    out.print(Text(f"all {steps} steps as the transcript says", style="bold green"))


def register(app: typer.Typer) -> None:
    """Add ``join`` (with ``replay``) to ``app``."""
    app.add_typer(join_app, name="join")
