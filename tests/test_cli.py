"""The command line, in-process with typer's CliRunner.

The CLI uses the active session when there is one, so the tests whose command runs a Spark
job ask for the ``spark`` fixture and share its session (never starting or stopping
another); the rest (help, argument and definition errors, serve, fetch) start no Spark, so
they run in the fast lane (``-m "not spark"``), where starting Spark would fail them.
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from timetile import __version__
from timetile.cli.app import app
from timetile.offline.backfill import CHOOSABLE
from timetile.offline.options import EXECUTOR_NAMES
from timetile.spark.sources import literal_path
from timetile.store.kv import open_store

DAY = 86_400_000
HOUR = 3_600_000
JAN_1 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
ENV = {"COLUMNS": "200"}

#: Table name → Parquet path.
Paths = dict[str, str]

DEFS = """
import timetile as tt

views = tt.EventSource({views!r}, time_column="ts")
user_views = tt.GroupBy(
    name="user_views",
    source=views,
    keys=["user_id"],
    aggregations=[
        tt.Aggregation({column!r}, "sum", windows=["1d"]),
        tt.Aggregation("listing_id", "last_k", k=2, windows=["7d"]),
    ],
)
tiny_model = tt.Join(name="tiny_model", left=tt.EventSource({checkouts!r}, time_column="ts"),
                     parts=[user_views])
same_model = tiny_model
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    """Views and checkouts as Parquet: a null-time checkout and a duplicate among them.

    Written with pyarrow as Spark writes a folder (one part file and ``_SUCCESS``), so the
    tests that start no Spark can use them too.
    """
    root = tmp_path_factory.mktemp("cli-data")
    views = [
        (1, 10, JAN_1 + 1 * DAY, 5.0),
        (1, 11, JAN_1 + 1 * DAY + 2 * HOUR, 7.0),
        (1, 12, JAN_1 + 2 * DAY, None),
        (2, 20, JAN_1 + 1 * DAY + HOUR, 3.0),
    ]
    checkouts = [
        (1, JAN_1 + 1 * DAY + 3 * HOUR),
        (1, JAN_1 + 1 * DAY + 3 * HOUR),  # duplicate: comes back twice
        (2, JAN_1 + 2 * DAY),
        (1, JAN_1 + 2 * DAY),  # exactly at a view: that view does not count
        (2, None),  # no time: left out and reported
    ]
    paths = {"views": str(root / "views"), "checkouts": str(root / "checkouts")}
    write_folder(paths["views"], views, ["user_id", "listing_id", "ts", "duration"],
                 [pa.int64(), pa.int64(), pa.int64(), pa.float64()])
    write_folder(paths["checkouts"], checkouts, ["user_id", "ts"], [pa.int64(), pa.int64()])
    return paths


def write_folder(path: str, rows: list[tuple], names: list[str], types: list[pa.DataType]
                 ) -> None:
    """Write ``rows`` as a Parquet folder laid out as Spark writes one."""
    folder = Path(path)
    folder.mkdir()
    columns = [pa.array(list(column), type) for column, type in
               zip(zip(*rows, strict=True), types, strict=True)]
    pq.write_table(pa.table(columns, names=names), folder / "part-00000.parquet")
    (folder / "_SUCCESS").write_bytes(b"")


def write_defs(path: Path, data: Paths, column: str = "duration",
               extra: str = "") -> Path:
    path.write_text(DEFS.format(column=column, **data) + extra)
    return path


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"timetile {__version__}"


@pytest.mark.parametrize("command", [[], ["backfill"], ["demo"], ["upload"], ["serve"],
                                     ["fetch"], ["consistency"], ["verify"],
                                     ["join", "replay"]])
def test_every_help_shows_an_example(runner: CliRunner, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "Example" in result.stdout
    assert "timetile " in result.stdout


def test_backfill_writes_the_output_and_reports(
    runner: CliRunner, spark: SparkSession, data: Paths, tmp_path: Path
) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    output = tmp_path / "out"
    result = runner.invoke(app, ["backfill", str(defs), "--start", "2024-01-01", "--end",
                                 "2024-01-31", "--output", str(output), "--show", "2"], env=ENV)
    assert result.exit_code == 0, result.output
    frame = spark.read.parquet(str(output))
    assert frame.count() == 4  # every left row with a time, the duplicate twice
    assert frame.columns == ["user_id", "ts", "user_views_duration_sum_1d",
                             "user_views_listing_id_last_k_7d"]
    at_2d = {row["user_id"]: row for row in frame.where(f"ts = {JAN_1 + 2 * DAY}").collect()}
    assert at_2d[1]["user_views_duration_sum_1d"] == 12.0  # [q - 1d, q): 5.0 is at q - 1d
    assert at_2d[1]["user_views_listing_id_last_k_7d"] == [11, 10]  # 12 is at q: not seen
    out = result.stdout
    assert "rows read" in out
    assert "1 time null or unparseable" in out  # the null-time checkout, and why
    for stage in ("plan", "count input", "compute+write"):
        assert stage in out
    assert f"wrote 4 rows to {output}" in out
    assert "row 2" in out  # --show 2
    assert "Traceback" not in result.output


def test_backfill_csv_writes_lists_as_json(
    runner: CliRunner, spark: SparkSession, data: Paths, tmp_path: Path
) -> None:
    """Also where the output's name holds glob characters: the rows written are counted by
    reading the output back, as named (it read as a pattern that matched nothing)."""
    defs = write_defs(tmp_path / "defs.py", data)
    output = tmp_path / "out[1]{a}.csv"
    result = runner.invoke(app, ["backfill", str(defs), "--start", "2024-01-02", "--end",
                                 "2024-01-02", "--output", str(output), "--format", "csv"],
                           env=ENV)
    assert result.exit_code == 0, result.output
    assert f"wrote 2 rows to {output}" in " ".join(result.stdout.split())
    rows = spark.read.option("header", True).csv(literal_path(str(output))).collect()
    assert [row["user_views_listing_id_last_k_7d"] for row in rows] == ["[11,10]", "[11,10]"]


def error_of(runner: CliRunner, args: list[str]) -> str:
    """Run, expect exit code 2 and no traceback; the message, on one line."""
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.stderr.split())


@pytest.mark.parametrize(("start", "end", "message"), [
    ("2024-13-01", "2024-01-31", "--start '2024-13-01' is not a date"),
    ("2024-01-01", "31/01/2024", "--end '31/01/2024' is not a date"),
    ("2024-02-01", "2024-01-01", "--start 2024-02-01 is after --end 2024-01-01"),
])
def test_bad_dates(
    runner: CliRunner, data: Paths, tmp_path: Path, *, start: str, end: str, message: str
) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    stderr = error_of(runner, ["backfill", str(defs), "--start", start, "--end", end,
                               "--output", str(tmp_path / "out")])
    assert message in stderr
    assert "YYYY-MM-DD" in stderr or "start <= end" in stderr


def backfill_args(defs: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["backfill", str(defs), "--start", "2024-01-01", "--end", "2024-01-31",
            "--output", str(tmp_path / "out"), *extra]


def test_max_key_events_must_be_positive(runner: CliRunner, data: Paths,
                                        tmp_path: Path) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    stderr = error_of(runner, backfill_args(defs, tmp_path, "--max-key-events", "0"))
    assert "--max-key-events" in stderr
    assert "greater than or equal to 1" in stderr


def test_executor_names(runner: CliRunner, data: Paths, tmp_path: Path) -> None:
    """``--executor`` is checked against names kept apart from the engine, so they must agree."""
    assert CHOOSABLE == EXECUTOR_NAMES
    defs = write_defs(tmp_path / "defs.py", data)
    stderr = error_of(runner, backfill_args(defs, tmp_path, "--executor", "fastest"))
    assert "--executor 'fastest' is unknown" in stderr
    assert f"one of {', '.join(CHOOSABLE)}" in stderr


def test_missing_file(runner: CliRunner, tmp_path: Path) -> None:
    stderr = error_of(runner, backfill_args(tmp_path / "nope.py", tmp_path))
    assert "nope.py does not exist" in stderr


def test_file_without_a_join(runner: CliRunner, tmp_path: Path) -> None:
    defs = tmp_path / "empty.py"
    defs.write_text("import timetile as tt\nviews = tt.EventSource('events.views')\n")
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "empty.py defines no tt.Join at module level" in stderr


def test_several_joins_need_join(runner: CliRunner, data: Paths, tmp_path: Path) -> None:
    second = ("\nother_model = tt.Join(name='other_model', left=tiny_model.left, "
              "parts=[user_views])\n")
    defs = write_defs(tmp_path / "defs.py", data, extra=second)
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "defines several Joins: tiny_model, other_model" in stderr
    assert "--join NAME" in stderr
    stderr = error_of(runner, backfill_args(defs, tmp_path, "--join", "nope"))
    assert "no Join named 'nope'" in stderr


def test_unknown_column_is_a_definition_error(
    runner: CliRunner, spark: SparkSession, data: Paths, tmp_path: Path
) -> None:
    defs = write_defs(tmp_path / "defs.py", data, column="durration")
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "The definition cannot work" in stderr
    assert "parts[0].aggregations[0].column: 'durration' is not a column" in stderr
    assert "did you mean 'duration'?" in stderr


def test_definition_error_while_loading(runner: CliRunner, tmp_path: Path) -> None:
    defs = tmp_path / "defs.py"
    defs.write_text("import timetile as tt\ntt.Aggregation('duration', 'summ', windows=['1d'])\n")
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "'summ' is not an op" in stderr


def test_file_that_fails_to_run(runner: CliRunner, tmp_path: Path) -> None:
    defs = tmp_path / "defs.py"
    defs.write_text("import timetile as tt\nundefined_name\n")
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "failed to run: NameError" in stderr


def test_file_that_exits(runner: CliRunner, tmp_path: Path) -> None:
    defs = tmp_path / "defs.py"
    defs.write_text("import sys\nsys.exit(3)\n")
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "defs.py called sys.exit(3) while it ran" in stderr


def test_partials_need_the_tiled_executor(runner: CliRunner, data: Paths,
                                          tmp_path: Path) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    stderr = error_of(runner, backfill_args(defs, tmp_path, "--partials",
                                            str(tmp_path / "partials"), "--executor", "sweep"))
    assert "--partials works with the tiled executor, not sweep. Fix: use --executor tiled" \
        in stderr


def test_outputs_that_cannot_be_written_fail_before_the_job(
    runner: CliRunner, data: Paths, tmp_path: Path
) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    (tmp_path / "a-file").write_text("")
    args = backfill_args(defs, tmp_path)
    at = args.index("--output") + 1
    args[at] = str(tmp_path / "a-file" / "out")
    stderr = error_of(runner, args)
    assert f"--output {args[at]}: {tmp_path / 'a-file'} is a file, not a folder" in stderr
    stderr = error_of(runner, [*backfill_args(defs, tmp_path), "--partials",
                               str(tmp_path / "a-file" / "p")])
    assert "--partials" in stderr
    assert "is a file, not a folder" in stderr
    stderr = error_of(runner, [*backfill_args(defs, tmp_path), "--partials", " "])
    assert "--partials is empty. Fix: give a folder path or URI" in stderr
    stderr = " ".join(error_of(runner, [*backfill_args(defs, tmp_path), "--partials",
                                        str(tmp_path / "out" / "partials")]).split())
    assert "and --output" in stderr
    assert "overlap, and writing the output replaces what is stored there" in stderr


def test_strict_fails_on_rows_without_time(runner: CliRunner, spark: SparkSession, data: Paths,
                                           tmp_path: Path) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    stderr = error_of(runner, backfill_args(defs, tmp_path, "--strict"))
    assert "Bad input (--strict)" in stderr
    assert "1 of 5 rows have a null or unparseable time" in stderr


def test_existing_output_needs_overwrite(runner: CliRunner, data: Paths, tmp_path: Path) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    (tmp_path / "out").mkdir()
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "already exists" in stderr
    assert "--overwrite" in stderr


def test_existing_output_is_caught_in_every_local_form(runner: CliRunner, data: Paths,
                                                        tmp_path: Path) -> None:
    """A ``file:`` URI is local too: caught before the job, naming --overwrite."""
    defs = write_defs(tmp_path / "defs.py", data)
    (tmp_path / "out").mkdir()
    args = backfill_args(defs, tmp_path)
    at = args.index("--output") + 1
    for form in (f"file://{tmp_path / 'out'}", f"file:{tmp_path / 'out'}"):
        args[at] = form
        stderr = error_of(runner, args)
        assert f"The output {form} already exists. Fix: add --overwrite" in stderr
    args[at] = " "
    assert "--output is empty. Fix: give a folder path or URI" in error_of(
        runner, [*args, "--overwrite"])


@pytest.mark.parametrize("output", ["views", "views/part", ".", "views/../checkouts"])
def test_an_output_that_is_an_input_is_refused(runner: CliRunner, data: Paths,
                                               tmp_path: Path, output: str) -> None:
    """--overwrite on an input would replace it with the features computed from it."""
    defs = write_defs(tmp_path / "defs.py", data)
    args = backfill_args(defs, tmp_path, "--overwrite")
    folder = Path(data["views"]).parent
    args[args.index("--output") + 1] = str(folder / output)
    stderr = error_of(runner, args)
    assert f"--output {folder / output}: the Join 'tiny_model' reads" in stderr
    assert "Fix: write the output to another folder" in stderr
    assert Path(data["views"], "_SUCCESS").exists()  # untouched


def test_missing_input_path(runner: CliRunner, spark: SparkSession, tmp_path: Path) -> None:
    data = {"views": str(tmp_path / "no-views"), "checkouts": str(tmp_path / "no-checkouts")}
    defs = write_defs(tmp_path / "defs.py", data)
    stderr = error_of(runner, backfill_args(defs, tmp_path))
    assert "Spark could not read an input" in stderr
    assert "no-" in stderr


def test_debug_shows_the_traceback(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, backfill_args(tmp_path / "nope.py", tmp_path, "--debug"),
                           env=ENV)
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert "does not exist" in result.stderr


def test_demo_runs_end_to_end(runner: CliRunner, spark: SparkSession, tmp_path: Path) -> None:
    output = tmp_path / "features"
    result = runner.invoke(app, ["demo", "--data-dir", str(tmp_path / "data"), "--events",
                                 "3000", "--output", str(output), "--show", "2"], env=ENV)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for line in ("generate data (3,000 views)", "compute+write done", "timetile demo:",
                 "features  22 columns from 3 parts", "rows left out  2 from left",
                 "user_views_listing_id_last_k_30d", "seller_user_purchases_amount_count"):
        assert line in out
    frame = spark.read.parquet(str(output))
    assert "user_purchases_amount_sum_30d_hop1d" in frame.columns
    assert f"rows  {frame.count():,} " in out


def test_demo_refuses_bad_folders_before_any_work(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    stderr = error_of(runner, ["demo", "--data-dir", str(tmp_path / "a-file" / "data")])
    assert f"--data-dir {tmp_path / 'a-file' / 'data'}: {tmp_path / 'a-file'} is a file" in stderr
    stderr = error_of(runner, ["demo", "--data-dir", str(tmp_path / "data"), "--output",
                               str(tmp_path / "a-file" / "out")])
    assert f"--output {tmp_path / 'a-file' / 'out'}: " in stderr
    (tmp_path / "store").mkdir()  # someone's folder where the demo keeps its store
    (tmp_path / "store" / "notes.txt").write_text("mine")
    stderr = " ".join(error_of(runner, ["demo", "--data-dir", str(tmp_path / "data")]).split())
    assert (f"--data-dir {tmp_path / 'data'}: {tmp_path / 'store'} is not the demo's LMDB "
            "store, which the demo replaces. Fix: move it") in stderr
    assert not (tmp_path / "data").exists()  # refused before generating anything
    (tmp_path / "store" / "notes.txt").unlink()
    (tmp_path / "store").rmdir()
    for folder in ("data", "store", "landing/x"):  # inputs, or folders it starts afresh
        stderr = " ".join(error_of(runner, ["demo", "--data-dir", str(tmp_path / "data"),
                                            "--output", str(tmp_path / folder)]).split())
        assert f"--output {tmp_path / folder}: the demo reads or replaces" in stderr


# --- online: upload, fetch, serve -------------------------------------------------------------


def test_upload_then_fetch(runner: CliRunner, spark: SparkSession, data: Paths,
                           tmp_path: Path) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    store = f"lmdb:{tmp_path / 'store'}"
    result = runner.invoke(app, ["upload", str(defs), "--ds", "2024-01-02", "--store", store],
                           env=ENV)
    assert result.exit_code == 0, result.output
    assert "upload user_views" in result.stdout  # the progress stage
    assert "uploaded 1 GroupBy to lmdb:" in result.stdout
    assert "as of the end of 2024-01-02" in result.stdout
    assert "user_views │    2 │" in result.stdout  # keys 1 and 2

    at = "2024-01-03T00:00:00Z"  # [q − 1d, q): 5.0 + 7.0; the view at q does not count
    for when in (at, str(JAN_1 + 2 * DAY)):
        result = runner.invoke(app, ["fetch", str(defs), "--store", store, "--key",
                                     "user_id=1", "--at", when], env=ENV)
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert "tiny_model at 2024-01-03T00:00:00.000Z · user_id=1" in out
        assert "user_views_duration_sum_1d 12 " in " ".join(out.replace("│", " ").split())
        assert "[11, 10]" in out
        assert "stale" not in out

    result = runner.invoke(app, ["fetch", str(defs), "--store", store, "--key", "user_id=1",
                                 "--at", "2024-01-06"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "stale" in result.stdout  # three days after the upload: flagged
    assert "stale: user_views: the last upload no longer covers" in " ".join(
        result.stdout.split())
    result = runner.invoke(app, ["fetch", str(defs), "--store", store, "--key", "user_id=1",
                                 "--at", "2024-01-02T12:00:00Z"], env=ENV)
    assert result.exit_code == 0, result.output
    assert ("stale: user_views: this time is before its upload's day end "  # another fix
            "2024-01-03T00:00:00.000Z") in " ".join(result.stdout.split())

    # On its own, as a user runs it: the same answer, and PySpark never loads.
    script = ("import sys\n"
              "from timetile.cli.app import main\n"
              "try:\n"
              "    main(sys.argv[1:])\n"
              "except SystemExit as done:\n"
              "    assert not done.code, done.code\n"
              "print('pyspark loaded:', 'pyspark' in sys.modules)\n")
    fetched = subprocess.run([sys.executable, "-c", script, "fetch", str(defs), "--store", store,
                              "--key", "user_id=1", "--at", at], capture_output=True, text=True,
                             env={**os.environ, **ENV}, check=False, cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stderr
    assert "user_views_duration_sum_1d 12 " in " ".join(fetched.stdout.replace("│", " ").split())
    assert "pyspark loaded: False" in fetched.stdout


def test_fetch_errors(runner: CliRunner, spark: SparkSession, data: Paths, tmp_path: Path
                      ) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    store = f"lmdb:{tmp_path / 'store'}"
    fetch = ["fetch", str(defs), "--store", store]
    stderr = error_of(runner, [*fetch, "--key", "user_id=1"])  # a mistyped path, say
    assert f"--store {store}: there is no store at {tmp_path / 'store'}" in stderr
    assert not (tmp_path / "store").exists()
    (tmp_path / "store").mkdir()  # a folder, of a Parquet table say: not made a store
    (tmp_path / "store" / "part-0.parquet").write_bytes(b"")
    stderr = error_of(runner, [*fetch, "--key", "user_id=1"])
    assert f"there is no store at {tmp_path / 'store'} (no data.mdb)" in stderr
    assert [path.name for path in (tmp_path / "store").iterdir()] == ["part-0.parquet"]
    open_store(store).close()  # an empty store
    stderr = error_of(runner, [*fetch, "--key", "user_id=1"])
    assert "user_views of Join 'tiny_model' has no upload in this store" in stderr
    assert f"Fix: run timetile upload {defs} --ds YYYY-MM-DD --store {store}" in stderr
    result = runner.invoke(app, ["upload", str(defs), "--ds", "2024-01-02", "--store", store,
                                 "--join", "tiny_model"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "--key user_id is missing" in error_of(runner, [*fetch, "--key", "seller_id=1"])
    assert "Fix: give --key user_id=VALUE" in error_of(runner, [*fetch, "--key", "uid=1"])
    assert "'x' cannot be read as int" in error_of(runner, [*fetch, "--key", "user_id=x"])
    assert "is not NAME=VALUE" in error_of(runner, [*fetch, "--key", "user_id"])
    stderr = error_of(runner, [*fetch, "--key", "user_id=1", "--at", "yesterday"])
    assert "--at 'yesterday' is not a time" in stderr
    for seconds_or_date in ("1704240000", "20240301"):  # would read as 1970
        stderr = error_of(runner, [*fetch, "--key", "user_id=1", "--at", seconds_or_date])
        assert f"--at '{seconds_or_date}' would be epoch milliseconds in 1970 to 1973" in stderr
    stderr = error_of(runner, [*fetch, "--key", "user_id=1", "--at", "9" * 20])
    assert "is beyond int64 milliseconds" in stderr
    stderr = error_of(runner, [*fetch, "--key", "user_id=1", "--key", "user_id=2"])
    assert "--key user_id is given twice ('1' and '2')" in stderr
    stderr = error_of(runner, ["fetch", str(defs), "--store", "s3://bucket", "--key", "user_id=1"])
    assert "--store: unknown store URI 's3://bucket'" in stderr


def test_upload_errors(runner: CliRunner, data: Paths, tmp_path: Path) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    upload = ["upload", str(defs), "--store", f"lmdb:{tmp_path / 'store'}"]
    assert "--ds '2024-1-2' is not a date" in error_of(runner, [*upload, "--ds", "2024-1-2"])
    stderr = error_of(runner, [*upload, "--ds", "2024-01-02", "--join", "nope"])
    assert "no Join named 'nope'" in stderr
    stderr = error_of(runner, ["upload", str(defs), "--ds", "2024-01-02", "--store",
                               "redis://127.0.0.1:1/0"])
    assert "The store cannot be reached" in stderr


def test_serve_errors(runner: CliRunner, data: Paths, tmp_path: Path) -> None:
    defs = write_defs(tmp_path / "defs.py", data)
    stderr = error_of(runner, ["serve", str(defs), "--store", "lmdb://host/path"])
    assert "--store: unknown store URI 'lmdb://host/path'" in stderr
    empty = tmp_path / "empty.py"
    empty.write_text("import timetile as tt\n")
    stderr = error_of(runner, ["serve", str(empty), "--store", f"lmdb:{tmp_path / 'store'}"])
    assert "defines no tt.Join at module level" in stderr
    with socket.socket() as taken:  # a busy port: refused with a fix, before the app starts
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stderr = " ".join(error_of(runner, ["serve", str(defs), "--store", "lmdb://host/path",
                                            "--port", str(port)]).split())
    assert f"--host 127.0.0.1 --port {port}: cannot listen there (" in stderr
    assert "Fix: choose another --port" in stderr


def test_serve_prints_the_port_it_serves() -> None:
    from timetile.cli.online import _free_port

    chosen = _free_port("127.0.0.1", 0)  # --port 0: the port the OS picked, not 0
    assert chosen > 0
    assert _free_port("127.0.0.1", chosen) == chosen


def test_serve_keeps_its_startup_objects_out_of_full_collections(
        runner: CliRunner, data: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While uvicorn serves, what the server holds from its start is frozen out of the
    garbage collector's full passes (each of which would stop every request to walk it), and
    handed back once it stops."""
    import uvicorn
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    served: dict[str, int] = {}

    def run(asgi: FastAPI, **_: object) -> None:
        served["frozen"] = gc.get_freeze_count()
        with TestClient(asgi) as client:
            served["health"] = client.get("/health").status_code

    monkeypatch.setattr(uvicorn, "run", run)
    defs = write_defs(tmp_path / "defs.py", data)
    store = f"lmdb:{tmp_path / 'store'}"
    open_store(store).close()  # an empty store: the Join is served, not yet ready
    result = runner.invoke(app, ["serve", str(defs), "--store", store, "--port", "0"], env=ENV)
    assert result.exit_code == 0, result.output
    assert served["health"] == 200
    assert served["frozen"] > 10_000  # the modules alone
    assert gc.get_freeze_count() == 0


def test_consistency_of_logged_fetches(runner: CliRunner, spark: SparkSession, data: Paths,
                                       tmp_path: Path) -> None:
    from timetile.cli.common import load_joins
    from timetile.online.fetcher import Fetcher
    from timetile.online.response_log import ResponseLog
    from timetile.store.kv import open_store

    defs = write_defs(tmp_path / "defs.py", data)
    store = f"lmdb:{tmp_path / 'store'}"
    result = runner.invoke(app, ["upload", str(defs), "--ds", "2024-01-02", "--store", store],
                           env=ENV)
    assert result.exit_code == 0, result.output
    join = load_joins(defs)["tiny_model"]
    logs = tmp_path / "logs"
    with open_store(store) as kv, ResponseLog(logs) as log:
        fetcher = Fetcher(join, kv)
        # The view at JAN_1 + 2 days is after the upload and never streamed: the fetch at
        # 05:00 misses it, the backfill does not. One row of one feature mismatches.
        for index, at in enumerate((JAN_1 + 2 * DAY, JAN_1 + 2 * DAY + 5 * HOUR)):
            rows = [{"user_id": 1}, {"user_id": 2}, {"user_id": 3}]
            log.log(f"r{index}", join.name, at, rows, fetcher.fetch(rows, at=at))

    output = tmp_path / "consistency"
    result = runner.invoke(app, ["consistency", str(defs), "--logs", str(logs), "--join",
                                 "tiny_model", "--output", str(output)], env=ENV)
    assert result.exit_code == 0, result.output  # mismatches are a finding, not an error
    out = " ".join(result.stdout.split())
    assert "recompute and compare" in out  # a progress stage
    assert "Consistency of tiny_model · 6 logged rows" in out
    assert "user_views_duration_sum_1d │ exact │ 6 │ 0 │ 6 │ 0.00% │ 0 │ 0 │ 0 │ 0 │ -" in out
    # served [11, 10], offline [12, 11]: edit distance 2 on one of the 4 rows with lists
    assert ("user_views_listing_id_last_k_7d │ exact │ 6 │ 0 │ 5 │ 16.67% │ 0 │ 0 │ - │ - │ "
            "0.5") in out
    assert "1 of 2 features match exactly on all 6 rows" in out
    assert {path.name for path in output.iterdir()} == {
        "features.parquet", "differences.parquet", "report.html"}

    stderr = error_of(runner, ["consistency", str(defs), "--logs", str(tmp_path / "none")])
    assert "No response logs of Join 'tiny_model' under" in stderr
    assert "Fix: serve with --log-dir" in stderr
    (tmp_path / "taken").write_text("")  # refused before Spark starts, not after the job
    stderr = error_of(runner, ["consistency", str(defs), "--logs", str(logs),
                               "--output", str(tmp_path / "taken")])
    assert "--output" in stderr
    assert "is a file, not a folder" in stderr
