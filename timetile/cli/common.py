"""What every ``timetile`` command shares: user errors, reading definitions, Spark.

User errors (:class:`CliError`, a :class:`~timetile.api.errors.DefinitionError`, bad input
under ``--strict``, an input Spark cannot read, a store that cannot be reached) print one
paragraph in red on stderr and exit with :data:`USAGE_ERROR`; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

import typer
from rich.console import Console

from timetile.api.errors import DefinitionError
from timetile.api.group_by import GroupBy
from timetile.api.interval_join import IntervalJoin
from timetile.api.join import Join
from timetile.cli.progress import JobProgress
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.locations import write_problem
from timetile.offline.report import BadInputError
from timetile.store.kv import KVStore, StoreUnavailable, local_store_path, open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The exit code of every user error.
USAGE_ERROR = 2

_err = Console(stderr=True, soft_wrap=True)


def console() -> Console:
    """Stdout: the terminal's width, or 160 columns in a log, where lines need not wrap."""
    console = Console()
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(width=160)


class CliError(Exception):
    """A user error: printed as one paragraph, exit code 2."""


# --- errors ---------------------------------------------------------------------------------


@contextmanager
def user_errors(debug: bool) -> Iterator[None]:
    """Turn user errors into a red paragraph on stderr and exit code 2."""
    try:
        yield
    except Exception as error:
        if not isinstance(error, (CliError, DefinitionError, BadInputError, StoreUnavailable)
                          ) and not _is_unreadable_input(error) and _refused(error) is None:
            raise
        if debug:
            _err.print(traceback.format_exc(), markup=False, highlight=False)
        _err.print(_describe(error), style="red", markup=False, highlight=False)
        raise typer.Exit(USAGE_ERROR) from None


def _describe(error: Exception) -> str:
    if isinstance(error, DefinitionError):
        return f"The definition cannot work. {error}"
    if isinstance(error, BadInputError):
        return f"Bad input (--strict): {error}"
    refused = _refused(error)
    if refused is not None:
        return f"A feature cannot be computed: {refused}"
    if isinstance(error, StoreUnavailable):
        return (f"The store cannot be reached: {error}. Fix: check the --store URI, and that "
                "the store is running (for Redis: redis-cli -u URL ping).")
    if _is_unreadable_input(error):
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return (f"Spark could not read an input: {first.rstrip('.')}. Fix: check the paths and "
                "table names in the definitions (relative paths resolve against the current "
                "directory); for the demo's definitions, run `timetile demo` first.")
    return str(error)


def _refused(error: Exception) -> str | None:
    """Return the message of a result an op refused (an int sum past int64), else None.

    A fetch raises :class:`ResultOverflowError` itself; in a backfill it is raised in a Spark
    task and reaches the driver as the job's failure, its text holding the Python traceback,
    whose last line names the feature, its column and the fix.
    """
    if isinstance(error, ResultOverflowError):
        return str(error)
    marker = f"{ResultOverflowError.__name__}: "
    text = str(error)
    if marker not in text:
        return None
    return text.rsplit(marker, 1)[1].strip().splitlines()[0]


def _is_unreadable_input(error: Exception) -> bool:
    """Whether ``error`` is Spark's ``AnalysisException``: a path or table it cannot read.

    Looked up only if PySpark is loaded, as it must be to raise one: ``serve`` and ``fetch``
    never load it.
    """
    errors = sys.modules.get("pyspark.errors")
    return errors is not None and isinstance(error, errors.AnalysisException)


# --- inputs ---------------------------------------------------------------------------------

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_day(option: str, value: str) -> date:
    """Parse a ``YYYY-MM-DD`` day; raise a :class:`CliError` naming the option if it is not."""
    try:
        if _DATE.match(value):
            return date.fromisoformat(value)
    except ValueError:
        pass
    raise CliError(f"{option} {value!r} is not a date. Fix: write YYYY-MM-DD, e.g. 2024-01-31.")


def check_writable(option: str, location: str) -> None:
    """Raise a :class:`CliError` naming ``option`` if a local ``location`` cannot be written.

    Checked before any job (see :func:`~timetile.core.locations.write_problem`): else the
    job would fail only when it writes, after all its work.
    """
    problem = write_problem(location)
    if problem is not None:
        raise CliError(f"{option} {location}: {problem}")


def load_joins(path: Path) -> dict[str, Join]:
    """Run a definitions file in a fresh namespace; its module-level Joins, by name.

    The file's directory is on ``sys.path`` while it runs, so it can import its neighbours.
    """
    return _by_name(path, run_definitions(path).values(), Join)


def load_interval_joins(path: Path) -> dict[str, IntervalJoin]:
    """Run a definitions file; its IntervalJoins, by name: module-level, or read by a GroupBy."""
    values = list(run_definitions(path).values())
    for join in _by_name(path, values, Join).values():
        values += [getattr(part.group_by.source, "table", None) for part in join.join_parts]
    found = _by_name(path, values, IntervalJoin)
    inputs = [side for join in found.values() for side in (join.left, join.right)]
    while inputs:  # a chain's inner joins
        inner = _by_name(path, inputs, IntervalJoin)
        inputs = [side for join in inner.values() if join.name not in found
                  for side in (join.left, join.right)]
        found = _by_name(path, [*found.values(), *inner.values()], IntervalJoin)
    return found


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


def _by_name(path: Path, values: Iterable[object], kind: type[_N]) -> dict[str, _N]:
    """Return the ``kind`` values by name; two different ones of a name are refused."""
    found: dict[str, _N] = {}
    for value in values:
        if isinstance(value, kind) and found.get(value.name) is not value:
            if value.name in found:
                raise CliError(f"{path} defines two different {kind.__name__}s named "
                               f"{value.name!r}. Fix: give each {kind.__name__} its own name.")
            found[value.name] = value
    return found


def run_definitions(path: Path) -> dict[str, Any]:
    """Run a definitions file in a fresh namespace and return it.

    The file's directory is on ``sys.path`` while it runs, so it can import its neighbours.
    """
    if not path.is_file():
        raise CliError(f"{path} does not exist or is not a file. Fix: give the path of a Python "
                       "file that defines a tt.Join.")
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        namespace = runpy.run_path(str(path), run_name="__timetile_defs__")
    except DefinitionError:
        raise
    except SystemExit as error:  # sys.exit() in the file would end the command silently
        raise CliError(f"{path} called sys.exit({error.code!r}) while it ran. Fix: build the "
                       "tt.Join objects at module level without exiting (guard a script's "
                       "main code with if __name__ == '__main__').") from None
    except Exception as error:
        raise CliError(f"{path} failed to run: {type(error).__name__}: {error}. Fix: run it "
                       "with python to see the whole traceback, or add --debug.") from error
    finally:
        sys.path.remove(folder)
    return namespace


def pick_join(path: Path, joins: dict[str, Join], name: str | None) -> Join:
    """Pick the Join to run: the one named ``name``, or the only one."""
    names = ", ".join(joins) or "none"
    if name is not None:
        if name not in joins:
            raise CliError(f"{path} has no Join named {name!r}; it defines: {names}. "
                           "Fix: pass one of those to --join.")
        return joins[name]
    if not joins:
        raise CliError(f"{path} defines no tt.Join at module level. Fix: build one, e.g. "
                       "checkout_model = tt.Join(name='checkout_model', left=..., parts=[...]).")
    if len(joins) > 1:
        raise CliError(f"{path} defines several Joins: {names}. Fix: pick one with --join NAME.")
    return next(iter(joins.values()))


# --- running --------------------------------------------------------------------------------------


@contextmanager
def spark_session(progress: JobProgress) -> Iterator[SparkSession]:
    """Use the active session (spark-submit, notebook, tests), or a local one stopped at the end."""
    from pyspark.sql import SparkSession  # noqa: PLC0415  (only the Spark commands load it)

    from timetile.spark.session import local_session  # noqa: PLC0415

    active = SparkSession.getActiveSession()
    if active is not None:
        progress.attach(active)
        yield active
        return
    with progress.stage("start Spark"):
        # Under spark-submit the JVM is already up with the cluster's configuration: take it
        # rather than forcing the embedded local master.
        submitted = "PYSPARK_GATEWAY_PORT" in os.environ
        spark = SparkSession.builder.getOrCreate() if submitted else local_session()
    progress.attach(spark)
    try:
        yield spark
    finally:
        progress.detach()
        spark.stop()


#: The ``--debug`` option every command takes.
Debug = Annotated[bool, typer.Option("--debug", help="Show the traceback of errors.")]

#: The definitions file argument.
Defs = Annotated[Path, typer.Argument(help="Python file that defines the tt.Join(s).",
                                      show_default=False)]

#: The ``--store`` option.
Store = Annotated[str, typer.Option(
    help="The store: lmdb:PATH, lmdb:///abs/path, a directory, or redis://host:port/db.",
    show_default=False)]


def open_store_option(uri: str, *, existing: bool = True) -> KVStore:
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


def group_bys_of(path: Path, joins: list[Join]) -> list[tuple[str, GroupBy]]:
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

