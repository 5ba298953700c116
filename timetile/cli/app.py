"""The ``timetile`` command: its Typer app, its ``--version`` and :func:`main`.

Each command lives in a module of its own and registers itself here: ``backfill``
(:mod:`.backfill`), ``demo`` (:mod:`.demo`), ``upload``, ``serve`` and ``fetch``
(:mod:`.online`), ``consistency`` (:mod:`.consistency`), ``stream`` (:mod:`.stream`),
``verify`` (:mod:`.verify`) and ``join replay`` (:mod:`.join`);
what they share (errors, definitions files, the Spark session) is in :mod:`.common`.

Every command has ``--help`` with a worked example. User errors (a definition that cannot
work, bad input under ``--strict``, a missing file, a bad date) print one paragraph in red
on stderr and exit with code 2; ``--debug`` adds the traceback. The job's progress is drawn
live on a terminal and printed as plain lines anywhere else (see :mod:`.progress`).

When a SparkSession is already active (``spark-submit``, a notebook, the test suite) the
commands use it; otherwise they start :func:`timetile.spark.session.local_session` and
stop it when done. No command loads Spark before it needs it: ``--help``, ``serve`` and
``fetch`` never do.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

from timetile import __version__
from timetile.cli import backfill, consistency, demo, join, online, stream, verify

app = typer.Typer(
    name="timetile",
    help="Point-in-time-correct windowed aggregations (ML features) on Apache Spark.\n\n"
    "[bold]Example[/]\n\n"
    "  [cyan]timetile demo[/]       [dim]# generate data, backfill a model, show rows[/]\n"
    "  [cyan]timetile backfill timetile/demo/checkout_model.py \\\n"
    "      --start 2024-02-01 --end 2024-02-29 --output out/checkout_model[/]\n"
    "  [cyan]timetile upload timetile/demo/checkout_model.py --ds 2024-02-29 \\\n"
    "      --store lmdb:timetile-demo/store[/]   [dim]# then: timetile serve / fetch[/]\n\n"
    "Run [cyan]timetile COMMAND --help[/] for each command's options and example.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


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


for _commands in (backfill, demo, online, consistency, stream, verify, join):
    _commands.register(app)


def main(argv: list[str] | None = None) -> Any:
    """Run the command line: the console script's entry point."""
    # The job report shows what the library logs as warnings (rows left out): don't print
    # them twice through logging's last-resort handler.
    logging.getLogger("timetile").addHandler(logging.NullHandler())
    return app(args=argv, prog_name="timetile")
