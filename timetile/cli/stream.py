"""``timetile stream``: the Structured Streaming job that keeps a GroupBy's tiles fresh.

DESIGN §6.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from timetile.api.interval_join import IntervalJoin
from timetile.cli.common import (
    CliError,
    Debug,
    Defs,
    Store,
    check_writable,
    console,
    group_bys_of,
    load_joins,
    open_store_option,
    spark_session,
    user_errors,
)
from timetile.cli.progress import JobProgress
from timetile.core.locations import local_path
from timetile.store.kv import redacted_uri

_STREAM_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile upload timetile/demo/checkout_model.py --ds 2024-02-29 \\
      --store lmdb:timetile-demo/store[/]
  [cyan]timetile stream timetile/demo/checkout_model.py --group-by user_purchases \\
      --source 'dir:timetile-demo/landing/user_purchases?format=json' \\
      --store lmdb:timetile-demo/store --checkpoint timetile-demo/checkpoints/user_purchases[/]

  [dim]Folds each micro-batch of the GroupBy's events into the store's tiles, after the
  upload's day end; fetches then see them. Files (JSON lines of the source's raw columns)
  must be moved into the directory complete. For Redis Streams use --source
  'redis://host:6379/0?stream=events' (one field per column, or &layout=json). Stop it
  (Ctrl-C) and restart it with the same --checkpoint at any time: the store ends as if it
  never stopped. --until-idle processes what is there and exits (catch-up runs, tests).
  Events older than the watermark (the newest event time minus --lateness) or before the
  upload's day end are counted, not written: the next upload adds them. For a GroupBy of
  an entity source the stream is its change log: rows like its mutation table (row
  columns, mutation_ts, is_before), counted by mutation time. For a GroupBy of an
  IntervalJoin give one source per input: --source left=URI --source right=URI.[/]
"""


def stream(
    *,
    defs: Defs,
    group_by: Annotated[str, typer.Option(
        "--group-by", help="The GroupBy to stream (by name, from any Join of the file).",
        show_default=False)],
    source: Annotated[list[str], typer.Option(
        help="Where events arrive: dir:PATH[?format=json|parquet] or "
             "redis://host:port/db?stream=KEY; for a GroupBy of an IntervalJoin, one per "
             "input: --source left=URI --source right=URI.", show_default=False)],
    store: Store,
    checkpoint: Annotated[str, typer.Option(
        help="Spark's checkpoint directory: restart with the same one to carry on.",
        show_default=False)],
    lateness: Annotated[str, typer.Option(
        help="The watermark's allowed lateness, e.g. 90m or 1h.")] = "1h",
    trigger_seconds: Annotated[float, typer.Option(
        help="Seconds between micro-batches.", min=0.1)] = 5.0,
    until_idle: Annotated[bool, typer.Option(
        "--until-idle", help="Process what the source holds now, then exit.")] = False,
    schema: Annotated[str | None, typer.Option(
        help="The raw events' schema as Spark DDL \\[default: the batch source's].",
        show_default=False)] = None,
    debug: Debug = False,
) -> None:
    """Stream a GroupBy's events (or an entity source's mutations) into the store's tiles.

    Runs a Spark Structured Streaming query until stopped (Ctrl-C) or, with --until-idle,
    until the source is drained; prints one line per micro-batch: events written, and
    the late ones counted and left to the next upload.
    """
    out = console()
    with user_errors(debug):
        from timetile.streaming.job import stream_group_by  # noqa: PLC0415
        from timetile.streaming.sources import lateness_ms  # noqa: PLC0415

        found = {part.name: (field, part) for field, part in
                 group_bys_of(defs, list(load_joins(defs).values()))}
        if group_by not in found:
            raise CliError(f"{defs} has no GroupBy named {group_by!r} in its Joins; it has: "
                           f"{', '.join(found) or 'none'}. Fix: pass one of those to --group-by.")
        field, chosen = found[group_by]
        join = getattr(chosen.source, "table", None)
        if isinstance(join, IntervalJoin):
            sides = dict(uri.partition("=")[::2] for uri in source)
            if len(source) != 2 or set(sides) != {"left", "right"}:
                raise CliError(f"--source: {group_by} reads {join.label}, which streams from "
                               "two sources. Fix: give one per input: --source left=URI "
                               "--source right=URI.")
            sources: dict[str, Any] = {side: parsed_source(uri, f"--source {side}=")
                                       for side, uri in sides.items()}
            parsed = None
        elif len(source) != 1:
            raise CliError(f"--source: {group_by} reads one stream, and {len(source)} sources "
                           "were given. Fix: give one --source.")
        else:
            parsed = parsed_source(source[0], "--source")
            sources, sides = {}, {}
        try:
            allowed = lateness_ms(lateness)
        except ValueError as error:
            raise CliError(f"--lateness: {error}.") from None
        named = [(f"--source {source[0]}", parsed)] if parsed is not None else [
            (f"--source {side}={sides[side]}", stream_source)
            for side, stream_source in sources.items()]
        for option, stream_source in named:
            check_landing_folder(option, stream_source)
        open_store_option(store).close()  # fail before Spark starts when the store cannot be used
        if "://" not in checkpoint:
            check_writable("--checkpoint", checkpoint)
        with JobProgress(None, out) as progress, spark_session(progress) as spark:
            try:
                running = stream_group_by(
                    chosen, spark, parsed or sources, store, checkpoint, lateness=allowed,
                    trigger_seconds=trigger_seconds, until_idle=until_idle, schema=schema,
                    on_batch=lambda report: out.print(report.describe(group_by), markup=False,
                                                      highlight=False),
                    field=field)
            except LookupError as error:
                raise CliError(f"{str(error).partition('. Fix:')[0]}. Fix: run timetile upload "
                               f"{defs} --ds YYYY-MM-DD --store {redacted_uri(store)}.") from None
            described = parsed.describe() if parsed is not None else " and ".join(
                f"{side} {stream_source.describe()}"
                for side, stream_source in sources.items())
            out.print(f"streaming {group_by} from {described} into "
                      f"{redacted_uri(store)}",
                      markup=False, highlight=False)
            await_stream(running)
        totals = running.totals
        out.print(f"{group_by}: {len(running.batches)} micro-batches in this run; "
                  f"{totals.written:,} events written, {totals.late:,} late, "
                  f"{totals.behind_watermark:,} behind the watermark, {totals.unusable:,} "
                  "unusable (totals of this checkpoint)",
                  markup=False, highlight=False)


_FAILURE = re.compile(r"(StreamOwnershipError|LookupError|DefinitionError): (.+)")

_UNREADABLE_FILE = re.compile(r"\[FAILED_READ_FILE\.?(\w*)\] (.+?)(?: SQLSTATE: \w+)?$",
                              re.MULTILINE)


def await_stream(running: Any) -> None:
    """Wait for a running stream (a TileStream or a JoinStream) to end; Ctrl-C stops it.

    Raises:
        CliError: the query failed, with its reason (:func:`stream_failure`).

    """
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415  (loads PySpark)

    try:
        running.await_termination()
    except KeyboardInterrupt:
        running.stop()
    except StreamingQueryException as error:
        raise CliError(stream_failure(error)) from None


def check_landing_folder(option: str, source: Any) -> None:
    """Refuse a file source whose folder does not exist (a mistyped path would wait forever)."""
    from timetile.streaming.file_source import FileSource  # noqa: PLC0415  (loads PySpark)

    pattern = source.path if isinstance(source, FileSource) else ""
    folder = local_path(pattern) if pattern and not any(c in pattern for c in "*?[{") else None
    if folder is not None and not folder.is_dir():
        raise CliError(f"{option}: there is no folder {folder} for the events to land in. "
                       "Fix: check the path, or create the folder first.")


def parsed_source(uri: str, option: str) -> Any:
    """Return the stream source of a URI; a bad one is a :class:`CliError` naming ``option``."""
    from timetile.streaming.sources import parse_source  # noqa: PLC0415  (loads PySpark)

    try:
        return parse_source(uri)
    except ValueError as error:
        raise CliError(f"{option}: {error}.") from None


def stream_failure(error: Exception) -> str:
    """Return the user-facing reason of a failed streaming query, or its first line."""
    match = _FAILURE.search(str(error))
    if match is not None:
        return f"The stream stopped: {match.group(2).strip()}."
    unreadable = _UNREADABLE_FILE.search(str(error))
    if unreadable is not None:
        kind, reason = unreadable.groups()
        if kind == "FILE_NOT_EXIST":
            fix = "put that file back under the same name (it was removed after being listed)"
        elif "TYPE" in kind or "SCHEMA" in kind:  # e.g. an int64 column the schema reads as double
            fix = ("write that file again in place, under the same name, with the source's "
                   "types (the batch source's, or --schema)")
        else:
            fix = "write that file again in place, under the same name, whole"
        return (f"The stream stopped at a file it cannot read: {reason.strip()} No later file "
                f"was read and nothing is lost. Fix: {fix}, then run the same command again: "
                "the stream goes on from it.")
    return f"The stream failed: {str(error).strip().splitlines()[0]}"


def register(app: typer.Typer) -> None:
    """Add ``stream`` to ``app``."""
    app.command(epilog=_STREAM_EXAMPLE)(stream)
