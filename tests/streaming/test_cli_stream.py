"""``timetile stream``: in-process with typer's CliRunner, on the session-wide SparkSession."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stream_helpers import DAY_END, write_files
from typer.testing import CliRunner

from timetile.cli.app import app
from timetile.core.timeutil import HOUR_MS
from timetile.store.kv import open_store
from timetile.streaming.job import stream_totals
from timetile.streaming.state import StreamCounts

ENV = {"COLUMNS": "200"}

DEFS = """
import timetile as tt

events = tt.EventSource({table!r}, time_column="ts")
clicks = tt.GroupBy("clicks", events, ["user_id"],
                    [tt.Aggregation("amount", "sum", windows=["1d"])])
model = tt.Join("model", events, [clicks])
"""


def test_help_ends_with_a_worked_example() -> None:
    result = CliRunner().invoke(app, ["stream", "--help"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "Example" in result.stdout
    assert "timetile stream " in result.stdout


@pytest.mark.spark
def test_stream_until_idle(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "events"
    table.mkdir()
    pq.write_table(pa.table({"user_id": [1, 2], "ts": [DAY_END - HOUR_MS, DAY_END - 2 * HOUR_MS],
                             "amount": [1.0, 2.0]}), table / "part-0.parquet")
    defs = tmp_path / "defs.py"
    defs.write_text(DEFS.format(table=str(table)))
    store = f"lmdb:{tmp_path / 'store'}"
    runner = CliRunner()
    uploaded = runner.invoke(app, ["upload", str(defs), "--ds", "2024-01-02", "--store", store],
                             env=ENV)
    assert uploaded.exit_code == 0, uploaded.output
    write_files(tmp_path / "landing", [
        {"user_id": 1, "ts": DAY_END + HOUR_MS, "amount": 4.0},
        {"user_id": 1, "ts": DAY_END - HOUR_MS, "amount": 8.0},  # before the day end: late
        {"user_id": None, "ts": DAY_END + HOUR_MS, "amount": 16.0}], 2)
    args = ["stream", str(defs), "--group-by", "clicks", "--source",
            f"dir:{tmp_path / 'landing'}?format=json&maxFilesPerTrigger=1", "--store", store,
            "--checkpoint", str(tmp_path / "checkpoint"), "--until-idle"]
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    assert "clicks batch 0: 1 events written in 1 tiles, 1 late" in result.stdout
    assert "clicks batch 1: 0 events written in 0 tiles, 1 unusable" in result.stdout
    assert "2 micro-batches in this run; 1 events written, 1 late" in result.stdout
    with open_store(store) as kv:
        assert stream_totals(kv, "clicks") == StreamCounts(written=1, late=1, unusable=1, tiles=1)

    unknown = runner.invoke(app, [*args[:3], "nope", *args[4:]], env=ENV)
    assert unknown.exit_code == 2
    assert "no GroupBy named 'nope'" in unknown.stderr
    assert "clicks" in unknown.stderr
    bad = runner.invoke(app, [*args[:5], "kafka://broker/topic", *args[6:]], env=ENV)
    assert bad.exit_code == 2
    assert "--source: unknown stream source" in bad.stderr
    misread = runner.invoke(app, [*args[:5], "redis://127.0.0.1:6379/events?stream=s",
                                  *args[6:]], env=ENV)  # was named --lateness
    assert misread.exit_code == 2
    assert "--source: Redis URL redis://127.0.0.1:6379/events: '/events' is no database " \
           "number" in " ".join(misread.stderr.split())
    late = runner.invoke(app, [*args, "--lateness", "soon"], env=ENV)
    assert late.exit_code == 2
    assert "--lateness: " in late.stderr
    missing = f"dir:{tmp_path / 'landed'}"  # a typo: not the definitions' fault
    gone = runner.invoke(app, [*args[:5], missing, *args[6:]], env=ENV)
    assert gone.exit_code == 2
    assert (f"--source {missing}: there is no folder {tmp_path / 'landed'} for the events to "
            "land in. Fix: check the path") in " ".join(gone.stderr.split())
    other = runner.invoke(app, [*args[:-2], str(tmp_path / "other-checkpoint"), "--until-idle"],
                          env=ENV)
    assert other.exit_code == 2
    assert "The stream stopped" in other.stderr
    assert "another streaming query" in other.stderr


@pytest.mark.spark
def test_a_parquet_file_of_other_types_stops_the_stream_until_written_again(
        spark: Any, tmp_path: Path) -> None:
    """Spark cannot read an int64 Parquet column as the schema's double: the stream stops
    there, says which file and column and how to go on, and goes on once the file is
    written again in place."""
    table = tmp_path / "events"
    table.mkdir()
    pq.write_table(pa.table({"user_id": [1], "ts": [DAY_END - HOUR_MS], "amount": [1.0]}),
                   table / "part-0.parquet")
    defs = tmp_path / "defs.py"
    defs.write_text(DEFS.format(table=str(table)))
    store = f"lmdb:{tmp_path / 'store'}"
    runner = CliRunner()
    assert runner.invoke(app, ["upload", str(defs), "--ds", "2024-01-02", "--store", store],
                         env=ENV).exit_code == 0
    landing = tmp_path / "landing"
    landing.mkdir()
    wrong = landing / "events-0001.parquet"  # pandas writes whole amounts as int64
    pq.write_table(pa.table({"user_id": [1], "ts": [DAY_END + HOUR_MS], "amount": [4]}), wrong)
    args = ["stream", str(defs), "--group-by", "clicks", "--source",
            f"dir:{landing}?format=parquet", "--store", store, "--checkpoint",
            str(tmp_path / "checkpoint"), "--until-idle"]
    stopped = runner.invoke(app, args, env=ENV)
    assert stopped.exit_code == 2, stopped.output
    message = " ".join(stopped.stderr.split())
    assert "The stream stopped at a file it cannot read" in message
    assert "events-0001.parquet" in message
    assert "Expected Spark type double, actual Parquet type INT64" in message
    assert "Fix: write that file again in place" in message
    assert "Traceback" not in stopped.output

    pq.write_table(pa.table({"user_id": [1], "ts": [DAY_END + HOUR_MS], "amount": [4.0]}), wrong)
    again = runner.invoke(app, args, env=ENV)
    assert again.exit_code == 0, again.output
    with open_store(store) as kv:
        assert stream_totals(kv, "clicks").written == 1
