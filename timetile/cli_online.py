"""The online commands of ``timetile``: upload, serve, fetch, consistency and stream.

``upload``, ``consistency`` and ``stream`` run on Spark (the active session, or a local one, as
``backfill`` does); ``serve`` and ``fetch`` read the store only and start no Spark.
:func:`register` adds the commands to the ``timetile`` app (DESIGN §5).
"""

from __future__ import annotations

import gc
import re
import socket
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from timetile.api.errors import DefinitionError
from timetile.api.group_by import GroupBy
from timetile.api.join import Join
from timetile.cli_common import (
    CliError,
    check_writable,
    console,
    load_joins,
    parse_day,
    pick_join,
    spark_session,
    user_errors,
)
from timetile.cli_render import format_float, print_features, print_upload
from timetile.core.locations import local_path
from timetile.core.timeutil import SECONDS_LIKE_MS, ms_to_iso
from timetile.core.windows import MAX_TIME, MIN_TIME
from timetile.online.store import KVStore, local_store_path, open_store, redacted_uri
from timetile.progress import JobProgress

if TYPE_CHECKING:
    from timetile.verify.results import ConsistencyReport

_UPLOAD_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]    [dim]# writes the demo data to timetile-demo/data[/]
  [cyan]timetile upload examples/checkout_model.py --ds 2024-02-29 \\
      --store lmdb:timetile-demo/store[/]

  [dim]Writes each key's batch record as of the end of --ds (UTC); run it once a day, after
  the day's data is complete. Re-running a day rewrites the same records. --store takes
  lmdb:PATH (or a bare directory) or redis://host:port/db; on a cluster, the executors
  write to it, so use Redis there.[/]
"""

_SERVE_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile serve examples/checkout_model.py --store lmdb:timetile-demo/store \\
      --port 8000 --log-dir timetile-demo/responses[/]
  [cyan]curl -s localhost:8000/v1/features/checkout_model -H 'Content-Type: application/json' \\
      -d '{"rows": [{"user_id": 1, "seller_id": 3}], "at": 1709294400000}'[/]

  [dim]Serves every Join of the file: POST /v1/features/JOIN, GET /health, docs at /docs.
  A Join not uploaded yet answers 503 until `timetile upload` runs; no restart needed.[/]
"""

_FETCH_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile fetch examples/checkout_model.py --store lmdb:timetile-demo/store \\
      --key user_id=1 --key seller_id=3 --at 2024-03-01T12:00:00Z[/]

  [dim]--at is ISO 8601 (UTC when no offset is given) or epoch milliseconds; now by default.
  Features from an upload older than its slack are flagged stale.[/]
"""

_CONSISTENCY_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile serve examples/checkout_model.py --store lmdb:timetile-demo/store \\
      --log-dir timetile-demo/responses[/]    [dim]# serve some requests, then stop it[/]
  [cyan]timetile consistency examples/checkout_model.py --logs timetile-demo/responses \\
      --output timetile-demo/consistency[/]

  [dim]Recomputes every logged row with backfill at its request time and compares, per
  feature: exact ops must match exactly, approximate ones lie within their error bounds.
  Rows served from a late upload (stale) are counted, not compared. --output gets
  features.parquet, differences.parquet and report.html (open it in a browser).[/]
"""

_STREAM_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile upload examples/checkout_model.py --ds 2024-02-29 \\
      --store lmdb:timetile-demo/store[/]
  [cyan]timetile stream examples/checkout_model.py --group-by user_purchases \\
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
  columns, mutation_ts, is_before), counted by mutation time.[/]
"""

_Debug = Annotated[bool, typer.Option("--debug", help="Show the traceback of errors.")]
_Defs = Annotated[Path, typer.Argument(help="Python file that defines the tt.Join(s).",
                                       show_default=False)]
_Store = Annotated[str, typer.Option(
    help="The store: lmdb:PATH, lmdb:///abs/path, a directory, or redis://host:port/db.",
    show_default=False)]
_DIGITS = re.compile(r"^-?\d+$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_time(option: str, value: str) -> int:
    """Parse epoch milliseconds or an ISO 8601 time (UTC when no offset is given).

    Digits alone are epoch milliseconds from 1973-03-03 (12 digits) to the end of int64;
    fewer digits are refused, as seconds or a basic ISO date would read as 1970.

    >>> parse_time("--at", "2024-03-01T12:00:00Z"), parse_time("--at", "1709294400000")
    (1709294400000, 1709294400000)
    """
    text = value.strip()
    fix = ("Fix: write ISO 8601, e.g. 2024-03-01T12:00:00Z (UTC when no offset is given), or "
           "epoch milliseconds, e.g. 1709294400000.")
    if _DIGITS.match(text):
        millis = int(text)
        if not MIN_TIME <= millis <= MAX_TIME:
            raise CliError(f"{option} {value!r} is beyond int64 milliseconds. {fix}")
        if abs(millis) < SECONDS_LIKE_MS:
            raise CliError(f"{option} {value!r} would be epoch milliseconds in 1970 to 1973: "
                           f"if it is epoch seconds or a date, write it in full. {fix}")
        return millis
    try:
        moment = datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", text))
    except ValueError:
        raise CliError(f"{option} {value!r} is not a time. {fix}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def parse_keys(values: list[str]) -> dict[str, str]:
    """Parse ``--key NAME=VALUE`` options into a row (values stay text: the fetcher casts)."""
    row: dict[str, str] = {}
    for value in values:
        name, equals, text = value.partition("=")
        if not equals or not name.strip():
            raise CliError(f"--key {value!r} is not NAME=VALUE. Fix: write e.g. --key user_id=1.")
        if name.strip() in row:
            raise CliError(f"--key {name.strip()} is given twice ({row[name.strip()]!r} and "
                           f"{text.strip()!r}). Fix: give each key once; fetch one row at a time.")
        row[name.strip()] = text.strip()
    return row


def _open(uri: str, *, existing: bool = True) -> KVStore:
    """Open the store of ``--store``; a URI of no known store is a :class:`CliError`.

    Unless ``existing`` is False (``upload`` creates the store), an embedded store's
    directory must exist: opening would create an empty store at a mistyped path.
    """
    try:
        path = local_store_path(uri)
        if existing and path is not None and not (Path(path) / "data.mdb").is_file():
            raise CliError(f"--store {uri}: there is no store at {path} (no data.mdb). Fix: "
                           "check the path, or run timetile upload first, which creates it.")
        return open_store(uri)
    except ValueError as error:
        raise CliError(f"--store: {error}.") from None


def _group_bys(path: Path, joins: list[Join]) -> list[tuple[str, GroupBy]]:
    """Return each GroupBy of ``joins`` once, with the field that names it."""
    seen: dict[str, tuple[str, GroupBy]] = {}
    for join in joins:
        for index, part in enumerate(join.join_parts):
            first = seen.setdefault(part.group_by.name, (f"parts[{index}].group_by",
                                                         part.group_by))
            if first[1] is not part.group_by:
                raise CliError(f"{path} defines two different GroupBys named "
                               f"{part.group_by.name!r}. Fix: give each GroupBy its own name.")
    return list(seen.values())


def upload(
    *,
    defs: _Defs,
    ds: Annotated[str, typer.Option(help="The day, YYYY-MM-DD (UTC): the records hold the "
                                         "events before its end.", show_default=False)],
    store: _Store,
    join: Annotated[str | None, typer.Option(
        help="Upload only this Join's GroupBys \\[default: every Join of the file].",
        show_default=False)] = None,
    debug: _Debug = False,
) -> None:
    """Write each key's batch record as of the end of a day, for online serving.

    Runs on Spark; the executors build the records and write them to the store. Then prints
    the keys and bytes written per GroupBy.
    """
    out = console()
    with user_errors(debug):
        from timetile.online.upload import upload_group_by  # noqa: PLC0415  (Spark job)

        parse_day("--ds", ds)
        joins = load_joins(defs)
        if join is not None or not joins:
            chosen = [pick_join(defs, joins, join)]  # the one named, or the error of none
        else:
            chosen = list(joins.values())
        _open(store, existing=False).close()  # fail before Spark starts if it cannot be used
        written: dict[str, tuple[int, int]] = {}
        began = time.perf_counter()
        with JobProgress(None, out) as progress, spark_session(progress) as spark:
            for field, group_by in _group_bys(defs, chosen):
                with progress.stage(f"upload {group_by.name}"):
                    keys, size, left_out = upload_group_by(group_by, spark, ds, store,
                                                           field=field)
                    written[group_by.name] = (keys, size)
                    if left_out:
                        out.print(f"[yellow]{group_by.name}: {left_out:,} source rows left "
                                  "out (a null key, an event's null time, or a key too long "
                                  "for the store: see the log)[/yellow]")
        print_upload(out, written, store=redacted_uri(store), ds=ds,
                     seconds=time.perf_counter() - began)


def serve(
    *,
    defs: _Defs,
    store: _Store,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.", min=0, max=65535)] = 8000,
    log_dir: Annotated[Path | None, typer.Option(
        help="Log every response here as Parquet (one folder per Join).",
        show_default=False)] = None,
    debug: _Debug = False,
) -> None:
    """Serve the features of every Join of the file over HTTP (uvicorn), until stopped.

    POST /v1/features/JOIN takes many rows per request; GET /health says whether the store
    answers and each Join is uploaded; /docs documents both with examples.
    """
    out = console()
    with user_errors(debug):
        import uvicorn  # noqa: PLC0415  (only serve needs them)

        from timetile.online.server import create_app  # noqa: PLC0415

        joins = load_joins(defs)
        if not joins:
            pick_join(defs, joins, None)  # raises: the file defines no Join
        if log_dir is not None:
            check_writable("--log-dir", str(log_dir))
        port = _free_port(host, port)
        kv = _open(store)
        try:
            app = create_app(joins, kv, log_dir=str(log_dir) if log_dir is not None else None)
            health = app.state.health()
            for name, state in health.joins.items():
                status = "ready" if state.ready else f"not ready: {state.error}; {state.fix}"
                out.print(f"serving {name} ({status})", markup=False, highlight=False)
            out.print(f"on http://{host}:{port}/v1/features/JOIN, docs at "
                      f"http://{host}:{port}/docs", markup=False, highlight=False)
            _freeze_startup_heap()
            uvicorn.run(app, host=host, port=port, log_level="info")
        finally:
            gc.unfreeze()  # so the interpreter's last collection frees them at exit
            kv.close()


def _freeze_startup_heap() -> None:
    """Leave what the server holds from its start out of every later garbage collection.

    The modules, definitions and fetchers live as long as the process; a full collection
    would walk them all (about 130,000 objects in the serving benchmark's server, every
    request waiting) each time it runs. ``gc.freeze`` moves them to the permanent
    generation, after one collection so that no garbage goes with them. Anything frozen
    stays reachable or is freed by reference counting as before; only a reference cycle
    among frozen objects, and what it holds, would wait for good (a fetcher and its caches
    hold none: tests/online/test_hot_key_fetches.py).
    """
    gc.collect()
    gc.freeze()


def _free_port(host: str, port: int) -> int:
    """Return ``port`` (for 0, a free one) once a probe could listen on it at ``host``.

    So a busy port is refused with a fix before the app starts, and the printed address is
    the one served. The probe's socket is closed before uvicorn binds: another process could
    take the port in between, and uvicorn then fails as it would have.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(  # "" is every interface
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            probe.bind(address)
            probe.listen()
            return int(probe.getsockname()[1])
    except OSError as error:
        reason = error.strerror or str(error)
        raise CliError(f"--host {host} --port {port}: cannot listen there ({reason}). Fix: "
                       "choose another --port (or stop what serves on it), or a --host of "
                       "this machine.") from None


def fetch(
    *,
    defs: _Defs,
    store: _Store,
    key: Annotated[list[str], typer.Option(
        "--key", help="A key column's value, NAME=VALUE; repeat for each key column.",
        show_default=False)],
    join: Annotated[str | None, typer.Option(
        help="The Join's name, when the file defines several.")] = None,
    at: Annotated[str | None, typer.Option(
        help="The fetch time: ISO 8601 (UTC by default) or epoch ms \\[default: now].",
        show_default=False)] = None,
    debug: _Debug = False,
) -> None:
    """Fetch one row's features from the store, as the HTTP service would, and print them."""
    out = console()
    with user_errors(debug):
        from timetile.online.fetcher import Fetcher, NotUploadedError  # noqa: PLC0415

        chosen = pick_join(defs, load_joins(defs), join)
        row = parse_keys(key)
        when = parse_time("--at", at) if at is not None else time.time_ns() // 1_000_000
        with _open(store) as kv:
            try:
                fetcher = Fetcher(chosen, kv)
            except NotUploadedError as error:
                raise CliError(f"{str(error).partition('. Fix:')[0]}. Fix: run timetile upload "
                               f"{defs} --ds YYYY-MM-DD --store {redacted_uri(store)}.") from None
            _check_keys(fetcher.key_columns, row)
            try:
                [result] = fetcher.fetch([row], at=when)
            except DefinitionError as error:
                problem = error.problems[0]
                raise CliError(f"--key: {problem.message}. Fix: {problem.fix}.") from None
        stale = list(dict.fromkeys(result.stale))
        early = {name: fetcher.day_end(name) for name in stale if when < fetcher.day_end(name)}
        columns = {name for part in chosen.join_parts if part.group_by.name in stale
                   for name in part.output_columns()}
        keys = ", ".join(f"{name}={value}" for name, value in row.items())
        print_features(out, result.features, columns,
                       title=f"{chosen.name} at {ms_to_iso(when)} · {keys}", stale=stale,
                       before_upload=early)


def consistency(
    *,
    defs: _Defs,
    logs: Annotated[str, typer.Option(
        help="The response-log directory (serve --log-dir): it holds one folder per Join.",
        show_default=False)],
    join: Annotated[str | None, typer.Option(
        help="The Join's name, when the file defines several.")] = None,
    output: Annotated[Path | None, typer.Option(
        help="Write features.parquet, differences.parquet and report.html here.",
        show_default=False)] = None,
    debug: _Debug = False,
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


def _check_keys(columns: list[str], row: dict[str, str]) -> None:
    wanted = " ".join(f"--key {column}=VALUE" for column in columns)
    missing = [column for column in columns if column not in row]
    unknown = [name for name in row if name not in columns]
    if missing or unknown:
        what = (f"--key {', '.join(missing)} is missing" if missing
                else f"--key {', '.join(unknown)} is no key column")
        raise CliError(f"{what}: the Join's key columns are {', '.join(columns)}. "
                       f"Fix: give {wanted}.")


def stream(
    *,
    defs: _Defs,
    group_by: Annotated[str, typer.Option(
        "--group-by", help="The GroupBy to stream (by name, from any Join of the file).",
        show_default=False)],
    source: Annotated[str, typer.Option(
        help="Where events arrive: dir:PATH[?format=json|parquet] or "
             "redis://host:port/db?stream=KEY.", show_default=False)],
    store: _Store,
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
    debug: _Debug = False,
) -> None:
    """Stream a GroupBy's events (or an entity source's mutations) into the store's tiles.

    Runs a Spark Structured Streaming query until stopped (Ctrl-C) or, with --until-idle,
    until the source is drained; prints one line per micro-batch: events written, and
    the late ones counted and left to the next upload.
    """
    out = console()
    with user_errors(debug):
        from pyspark.errors import StreamingQueryException  # noqa: PLC0415  (Spark job)

        from timetile.streaming.file_source import FileSource  # noqa: PLC0415
        from timetile.streaming.job import lateness_ms, stream_group_by  # noqa: PLC0415
        from timetile.streaming.sources import parse_source  # noqa: PLC0415

        found = {part.name: (field, part) for field, part in
                 _group_bys(defs, list(load_joins(defs).values()))}
        if group_by not in found:
            raise CliError(f"{defs} has no GroupBy named {group_by!r} in its Joins; it has: "
                           f"{', '.join(found) or 'none'}. Fix: pass one of those to --group-by.")
        field, chosen = found[group_by]
        try:
            parsed = parse_source(source)
        except ValueError as error:
            raise CliError(f"--source: {error}.") from None
        try:
            allowed = lateness_ms(lateness)
        except ValueError as error:
            raise CliError(f"--lateness: {error}.") from None
        pattern = parsed.path if isinstance(parsed, FileSource) else ""
        folder = local_path(pattern) if pattern and not any(c in pattern for c in "*?[{") \
            else None
        if folder is not None and not folder.is_dir():
            raise CliError(f"--source {source}: there is no folder {folder} for the events to "
                           "land in. Fix: check the path, or create the folder first.")
        _open(store).close()  # fail before Spark starts when the store cannot be used
        if "://" not in checkpoint:
            check_writable("--checkpoint", checkpoint)
        with JobProgress(None, out) as progress, spark_session(progress) as spark:
            try:
                running = stream_group_by(
                    chosen, spark, parsed, store, checkpoint, lateness=allowed,
                    trigger_seconds=trigger_seconds, until_idle=until_idle, schema=schema,
                    on_batch=lambda report: out.print(report.describe(group_by), markup=False,
                                                      highlight=False),
                    field=field)
            except LookupError as error:
                raise CliError(f"{str(error).partition('. Fix:')[0]}. Fix: run timetile upload "
                               f"{defs} --ds YYYY-MM-DD --store {redacted_uri(store)}.") from None
            out.print(f"streaming {group_by} from {parsed.describe()} into "
                      f"{redacted_uri(store)}",
                      markup=False, highlight=False)
            try:
                running.await_termination()
            except KeyboardInterrupt:
                running.stop()
            except StreamingQueryException as error:
                raise CliError(_stream_failure(error)) from None
        totals = running.totals
        out.print(f"{group_by}: {len(running.batches)} micro-batches in this run; "
                  f"{totals.written:,} events written, {totals.late:,} late, "
                  f"{totals.behind_watermark:,} behind the watermark, {totals.unusable:,} "
                  "unusable (totals of this checkpoint)",
                  markup=False, highlight=False)


_FAILURE = re.compile(r"(StreamOwnershipError|LookupError|DefinitionError): (.+)")


_UNREADABLE_FILE = re.compile(r"\[FAILED_READ_FILE\.?(\w*)\] (.+?)(?: SQLSTATE: \w+)?$",
                              re.MULTILINE)


def _stream_failure(error: Exception) -> str:
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
    """Add ``upload``, ``serve``, ``fetch``, ``consistency`` and ``stream`` to ``app``."""
    app.command(epilog=_UPLOAD_EXAMPLE)(upload)
    app.command(epilog=_SERVE_EXAMPLE)(serve)
    app.command(epilog=_FETCH_EXAMPLE)(fetch)
    app.command(epilog=_CONSISTENCY_EXAMPLE)(consistency)
    app.command(epilog=_STREAM_EXAMPLE)(stream)

