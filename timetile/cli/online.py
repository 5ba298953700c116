"""The online commands of ``timetile``: ``upload``, ``serve`` and ``fetch`` (DESIGN §5).

``upload`` runs on Spark (the active session, or a local one, as ``backfill`` does); ``serve``
and ``fetch`` read the store only and start no Spark.
"""

from __future__ import annotations

import gc
import re
import socket
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated

import typer

from timetile.api.errors import DefinitionError
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
    parse_day,
    pick_join,
    spark_session,
    user_errors,
)
from timetile.cli.progress import JobProgress
from timetile.cli.render import print_features, print_upload
from timetile.core.timeutil import SECONDS_LIKE_MS, ms_to_iso
from timetile.core.windows import MAX_TIME, MIN_TIME
from timetile.store.kv import redacted_uri

_UPLOAD_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]    [dim]# writes the demo data to timetile-demo/data[/]
  [cyan]timetile upload timetile/demo/checkout_model.py --ds 2024-02-29 \\
      --store lmdb:timetile-demo/store[/]

  [dim]Writes each key's batch record as of the end of --ds (UTC); run it once a day, after
  the day's data is complete. Re-running a day rewrites the same records. --store takes
  lmdb:PATH (or a bare directory) or redis://host:port/db; on a cluster, the executors
  write to it, so use Redis there.[/]
"""

_SERVE_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile serve timetile/demo/checkout_model.py --store lmdb:timetile-demo/store \\
      --port 8000 --log-dir timetile-demo/responses[/]
  [cyan]curl -s localhost:8000/v1/features/checkout_model -H 'Content-Type: application/json' \\
      -d '{"rows": [{"user_id": 1, "seller_id": 3}], "at": 1709294400000}'[/]

  [dim]Serves every Join of the file: POST /v1/features/JOIN, GET /health, docs at /docs.
  A Join not uploaded yet answers 503 until `timetile upload` runs; no restart needed.[/]
"""

_FETCH_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile fetch timetile/demo/checkout_model.py --store lmdb:timetile-demo/store \\
      --key user_id=1 --key seller_id=3 --at 2024-03-01T12:00:00Z[/]

  [dim]--at is ISO 8601 (UTC when no offset is given) or epoch milliseconds; now by default.
  Features from an upload older than its slack are flagged stale.[/]
"""

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


def upload(
    *,
    defs: Defs,
    ds: Annotated[str, typer.Option(help="The day, YYYY-MM-DD (UTC): the records hold the "
                                         "events before its end.", show_default=False)],
    store: Store,
    join: Annotated[str | None, typer.Option(
        help="Upload only this Join's GroupBys \\[default: every Join of the file].",
        show_default=False)] = None,
    debug: Debug = False,
) -> None:
    """Write each key's batch record as of the end of a day, for online serving.

    Runs on Spark; the executors build the records and write them to the store. Then prints
    the keys and bytes written per GroupBy.
    """
    out = console()
    with user_errors(debug):
        from timetile.offline.upload import upload_group_by  # noqa: PLC0415  (Spark job)

        parse_day("--ds", ds)
        joins = load_joins(defs)
        if join is not None or not joins:
            chosen = [pick_join(defs, joins, join)]  # the one named, or the error of none
        else:
            chosen = list(joins.values())
        # fail before Spark starts if the store cannot be used
        open_store_option(store, existing=False).close()
        written: dict[str, tuple[int, int]] = {}
        began = time.perf_counter()
        with JobProgress(None, out) as progress, spark_session(progress) as spark:
            for field, group_by in group_bys_of(defs, chosen):
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
    defs: Defs,
    store: Store,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.", min=0, max=65535)] = 8000,
    log_dir: Annotated[Path | None, typer.Option(
        help="Log every response here as Parquet (one folder per Join).",
        show_default=False)] = None,
    debug: Debug = False,
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
        kv = open_store_option(store)
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
    would walk them all (the serving benchmark's server: benchmarks/RESULTS.md, every
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
    defs: Defs,
    store: Store,
    key: Annotated[list[str], typer.Option(
        "--key", help="A key column's value, NAME=VALUE; repeat for each key column.",
        show_default=False)],
    join: Annotated[str | None, typer.Option(
        help="The Join's name, when the file defines several.")] = None,
    at: Annotated[str | None, typer.Option(
        help="The fetch time: ISO 8601 (UTC by default) or epoch ms \\[default: now].",
        show_default=False)] = None,
    debug: Debug = False,
) -> None:
    """Fetch one row's features from the store, as the HTTP service would, and print them."""
    out = console()
    with user_errors(debug):
        from timetile.online.fetcher import Fetcher, NotUploadedError  # noqa: PLC0415

        chosen = pick_join(defs, load_joins(defs), join)
        row = parse_keys(key)
        when = parse_time("--at", at) if at is not None else time.time_ns() // 1_000_000
        with open_store_option(store) as kv:
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


def _check_keys(columns: list[str], row: dict[str, str]) -> None:
    wanted = " ".join(f"--key {column}=VALUE" for column in columns)
    missing = [column for column in columns if column not in row]
    unknown = [name for name in row if name not in columns]
    if missing or unknown:
        what = (f"--key {', '.join(missing)} is missing" if missing
                else f"--key {', '.join(unknown)} is no key column")
        raise CliError(f"{what}: the Join's key columns are {', '.join(columns)}. "
                       f"Fix: give {wanted}.")


def register(app: typer.Typer) -> None:
    """Add ``upload``, ``serve`` and ``fetch`` to ``app``."""
    app.command(epilog=_UPLOAD_EXAMPLE)(upload)
    app.command(epilog=_SERVE_EXAMPLE)(serve)
    app.command(epilog=_FETCH_EXAMPLE)(fetch)
