"""``timetile join``: interval joins (seed 004) in batch, as a stream, and replayed.

``run`` writes a join's rows to Parquet with the batch join; ``stream`` keeps writing them
from two stream sources with the streaming join; ``replay`` prints a transcript step by
step, for users debugging a join (each input line, then what the processor let out,
checked against the transcript's ``>`` lines; no Spark runs).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from timetile.api.interval_join import IntervalJoin
from timetile.cli.backfill import check_output
from timetile.cli.common import (
    CliError,
    Debug,
    Defs,
    check_writable,
    console,
    load_interval_joins,
    spark_session,
    user_errors,
)
from timetile.cli.progress import JobProgress
from timetile.cli.render import print_rows
from timetile.cli.stream import await_stream, check_landing_folder, parsed_source

MISMATCH_EXIT = 1

_REPLAY_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile join replay tests/core/interval_join/transcripts/worked_example.txt[/]
  [cyan]timetile join replay my_join.txt --restart-before 3 --restart-before 7[/]

  [dim]Prints each step and the rows and watermarks it lets out; a step whose outputs
  differ from the file's '>' lines is marked and the command exits 1. The file format is in
  docs/interval_joins.md.[/]
"""

_RUN_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]
  [cyan]timetile join run timetile/demo/viewed_then_bought.py --name viewed_then_bought \\
      --output timetile-demo/output/viewed_then_bought_rows --show 5[/]

  [dim]Writes every joined row (and, for an outer join, every unmatched row of the outer
  side, null-padded) with the inputs' columns prefixed and joined_at, when each row is
  certain; the streaming join writes the same rows when none is late.[/]
"""

_STREAM_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile join stream timetile/demo/viewed_then_bought.py --name viewed_then_bought \\
      --left dir:landing/views --right dir:landing/purchases \\
      --output out/viewed_then_bought --checkpoint checkpoints/viewed_then_bought[/]

  [dim]Joins the rows landing in the two folders (JSON lines of the sources' raw columns;
  Parquet with ?format=parquet; Redis Streams with redis://host:6379/0?stream=KEY) and
  writes Parquet partitioned by _tt_kind: joined (joined and null-padded rows), late (an
  input row below the watermark, set aside and counted) and malformed. Stop it (Ctrl-C) and
  restart it with the same --checkpoint at any time: the output is an uninterrupted run's.
  A GroupBy over the join streams into the store's tiles with timetile stream --source
  left=URI --source right=URI.[/]
"""

join_app = typer.Typer(help="Interval joins (seed 004): run, stream or replay one.",
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


_Name = Annotated[str | None, typer.Option(
    "--name", help="The IntervalJoin to run, by name (needed when the file has several).",
    show_default=False)]


def _pick(defs: Path, name: str | None) -> IntervalJoin:
    joins = load_interval_joins(defs)
    names = ", ".join(joins) or "none"
    if name is None and len(joins) == 1:
        return next(iter(joins.values()))
    if name is None or name not in joins:
        which = f"no IntervalJoin named {name!r}" if name else "no single IntervalJoin"
        raise CliError(f"{defs} has {which}; it defines: {names}. Fix: pass one of those to "
                       "--name.")
    return joins[name]


@join_app.command(epilog=_RUN_EXAMPLE)
def run(
    *,
    defs: Defs,
    output: Annotated[str, typer.Option(help="The Parquet folder to write.",
                                        show_default=False)],
    name: _Name = None,
    overwrite: Annotated[bool, typer.Option("--overwrite",
                                            help="Replace the output if it exists.")] = False,
    show: Annotated[int, typer.Option(help="Print this many rows of the output.", min=0)] = 0,
    debug: Debug = False,
) -> None:
    """Write an IntervalJoin's rows with the batch join (skew-safe, bucketed by time)."""
    out = console()
    with user_errors(debug):
        from timetile.spark.interval_join import joined_rows  # noqa: PLC0415  (Spark job)
        from timetile.spark.sources import literal_path  # noqa: PLC0415

        join = _pick(defs, name)
        check_output(output, overwrite)
        with JobProgress(None, out) as progress, spark_session(progress) as spark:
            with progress.stage("join+write"):
                (joined_rows(spark, join).write.mode("overwrite" if overwrite else
                                                     "errorifexists").parquet(output))
            written = spark.read.parquet(literal_path(output))
            rows = written.count()
            out.print(f"{join.label}: {rows:,} rows written to {output}", markup=False,
                      highlight=False)
            if show:
                print_rows(out, written.limit(show).collect(), f"first {show} rows")


@join_app.command(epilog=_STREAM_EXAMPLE)
def stream(
    *,
    defs: Defs,
    left: Annotated[str, typer.Option(help="The left input's stream source URI.",
                                      show_default=False)],
    right: Annotated[str, typer.Option(help="The right input's stream source URI.",
                                       show_default=False)],
    output: Annotated[str, typer.Option(help="The Parquet folder the stream writes.",
                                        show_default=False)],
    checkpoint: Annotated[str, typer.Option(
        help="Spark's checkpoint directory: restart with the same one to carry on.",
        show_default=False)],
    name: _Name = None,
    lateness: Annotated[str, typer.Option(
        help="How far behind its input's newest time a row may come, e.g. 90m.")] = "1h",
    trigger_seconds: Annotated[float, typer.Option(
        help="Seconds between micro-batches.", min=0.1)] = 5.0,
    until_idle: Annotated[bool, typer.Option(
        "--until-idle", help="Process what the sources hold now, then exit.")] = False,
    debug: Debug = False,
) -> None:
    """Stream an IntervalJoin's rows to Parquet with the streaming join (restartable)."""
    out = console()
    with user_errors(debug):
        from timetile.streaming.interval_join import (  # noqa: PLC0415
            JOINED,
            LATE,
            MALFORMED,
            stream_join,
        )
        from timetile.streaming.sources import lateness_ms  # noqa: PLC0415

        join = _pick(defs, name)
        sources = {"left": parsed_source(left, "--left"),
                   "right": parsed_source(right, "--right")}
        try:
            allowed = lateness_ms(lateness)
        except ValueError as error:
            raise CliError(f"--lateness: {error}.") from None
        for option, location in (("--output", output), ("--checkpoint", checkpoint)):
            if "://" not in location:
                check_writable(option, location)
        for side, uri in (("left", left), ("right", right)):
            check_landing_folder(f"--{side} {uri}", sources[side])
        with JobProgress(None, out) as progress, spark_session(progress) as spark:
            running = stream_join(join, spark, sources, output, checkpoint, lateness=allowed,
                                  trigger_seconds=trigger_seconds, until_idle=until_idle)
            out.print(f"streaming {join.label} from {left} and {right} into {output}",
                      markup=False, highlight=False)
            await_stream(running)
            joined, late, malformed = (running.read(kind).count()
                                       for kind in (JOINED, LATE, MALFORMED))
        out.print(f"{join.label}: {joined:,} rows written, {late:,} late rows and "
                  f"{malformed:,} malformed lines set aside (totals of this output)",
                  markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``join`` (``run``, ``stream``, ``replay``) to ``app``."""
    app.add_typer(join_app, name="join")
