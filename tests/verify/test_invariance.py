"""``timetile verify``: every tiling agrees on random skewed data; a planted fault is caught.

The data holds nulls, NaN, ±inf, equal timestamps, duplicates, empty windows and a Zipf-hot
key (:func:`~timetile.testing.random_events`), and an entity source whose mutations update,
delete and re-insert keys, several in one millisecond and at midnight
(:func:`~timetile.testing.random_entities`). The Join holds every op, decayed ones included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import Column
from pyspark.sql import functions as F
from typer.testing import CliRunner

import timetile as tt
from timetile.cli.app import app
from timetile.cli.verify import MISMATCH_EXIT
from timetile.offline.executors import tiled, tiled_layout
from timetile.testing import random_entities, random_events, random_queries, to_spark
from timetile.verify import replay
from timetile.verify.tilings import KNOWN_BEFORE

pytestmark = pytest.mark.spark

START, END = "2024-01-01", "2024-01-02"
WINDOWS: list[tt.Window | str] = ["1h", "1d", tt.Window("1d", hop="1h"),
                                  tt.Window("1d", hop="6h", kind="hopping")]
#: Every op once, over a column of a type it takes.
COLUMNS = {
    "count": "flag", "sum": "amount", "avg": "quantity", "min": "item", "max": "amount",
    "first": "item", "last": "flag", "first_k": "amount", "last_k": "item", "top_k": "amount",
    "bottom_k": "item", "variance": "amount", "stddev": "quantity", "skew": "amount",
    "kurtosis": "quantity", "unique_count": "item", "approx_unique_count": "item",
    "approx_percentile": "amount", "histogram": "item", "decayed_count": "item",
    "decayed_sum": "amount", "decayed_avg": "quantity",
}
PARAMS: dict[str, dict[str, Any]] = {
    "first_k": {"k": 2}, "last_k": {"k": 3}, "top_k": {"k": 2}, "bottom_k": {"k": 2},
    "approx_percentile": {"percentiles": [0.5, 0.9]}, "decayed_count": {"half_life": "1h"},
    "decayed_sum": {"half_life": "3h"}, "decayed_avg": {"half_life": "1d"},
}


def every_op() -> list[tt.Aggregation]:
    """Each op once, the windows taken in turn (lifetime among them): every op is checked,
    every window kind too, and the Join stays small enough to backfill seven times quickly."""
    windows: list[list[tt.Window | str] | None] = [[window] for window in WINDOWS] + [None]
    made = [tt.Aggregation(column, op, windows=windows[index % len(windows)],
                           **PARAMS.get(op, {}))
            for index, (op, column) in enumerate(COLUMNS.items())]
    made.append(tt.Aggregation("amount", "decayed_avg", half_life="2h", buckets=["item"]))
    return made


@pytest.fixture(scope="module")
def join(spark: Any) -> tt.Join:
    table = random_events(600, 20, seed=31, days=3)
    events = tt.EventSource(to_spark(spark, table))
    queries = tt.EventSource(to_spark(spark, random_queries(table, 160, seed=32)))
    entities = random_entities(9, seed=33, days=3, mutations_per_day=12)
    accounts = tt.EntitySource(to_spark(spark, entities.snapshots),
                               mutation_table=to_spark(spark, entities.mutations),
                               time_column="since")
    account = tt.GroupBy("account", accounts, ["user_id"], [
        tt.Aggregation("balance", "sum"), tt.Aggregation("tier", "last"),
        tt.Aggregation("balance", "avg", windows=["1d"]),
        tt.Aggregation("balance", "decayed_sum", half_life="6h")])
    user = tt.GroupBy("user", events, ["user_id"], every_op())
    return tt.Join("verified", queries, [user, account])


def test_every_tiling_gives_every_feature_the_same_value(
        spark: Any, join: tt.Join, tmp_path: Path) -> None:
    """The stream tiling too: the events and the entity's mutations replayed through the
    streaming job after an upload of the day before, each row fetched at its time. And no
    leak: every row is known at its time, so each row's own cut of the sources
    (:mod:`timetile.verify.leaks`) gives it the same features as the whole sources."""
    report = tt.verify(join, spark, START, END, tilings="one,daily,random:1,stream", seed=5,
                       output=tmp_path, leaks=True, stream_batch=150)
    assert report.passed, report.markdown()
    assert report.rows > 60  # the queries of the range (the others lie outside it)
    assert [(run.tiling, run.rows) for run in report.runs] == [
        ("one", report.rows), ("daily", report.rows), ("random:1", report.rows),
        ("stream", report.rows), (KNOWN_BEFORE, report.rows)]
    assert [run.segments for run in report.runs][:3] == [1, 2, 2]
    assert report.runs[3].segments > 2  # micro-batches of about 150 of its 400-odd rows
    assert [run.partials for run in report.runs][:3] == ["no: one batch", "yes", "yes"]
    features = {entry.feature for entry in report.features}
    assert len(features) == len(join.output_columns())
    for entry in report.features:  # every value judged: against "one", or the oracle's bound
        expected = 0 if entry.tiling == "one" and entry.check == "exact" else report.rows
        assert entry.compared == expected, entry
    assert {entry.op for entry in report.features if entry.check == "bound"} == {
        "approx_unique_count", "approx_percentile"}
    assert "Every feature agrees under every tiling" in (tmp_path / "report.md").read_text()
    assert "<table>" in (tmp_path / "report.html").read_text()
    assert pq.read_table(tmp_path / "mismatches.parquet").num_rows == 0


def test_a_window_end_made_inclusive_on_one_path_is_caught_and_named(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted engine faults: the tiled executor counts the events at the query's time,
    and so does the online fetch (asked a millisecond late).

    ``one`` runs on the sweep; ``daily`` stores partials, so the tiled executor; ``stream``
    fetches online: those two are wrong, and the report, the CLI's table and its exit
    status say so.
    """
    table = random_events(300, 6, seed=41, days=2)
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(table, data / "events.parquet")
    pq.write_table(random_queries(table, 80, seed=42), data / "queries.parquet")
    defs = tmp_path / "defs.py"
    defs.write_text(
        "import timetile as tt\n"
        f"events = tt.EventSource({str(data / 'events.parquet')!r})\n"
        "spend = tt.GroupBy('spend', events, ['user_id'], [\n"
        "    tt.Aggregation('amount', 'sum', windows=['1h', '1d']),\n"
        "    tt.Aggregation('item', 'count')])\n"
        f"model = tt.Join('model', tt.EventSource({str(data / 'queries.parquet')!r}), "
        "[spend])\n")
    real = tiled._bounds

    def inclusive(layout: Any) -> dict[str, Column]:
        return {name: column + F.lit(1) if name.startswith(tiled_layout.END) else column
                for name, column in real(layout).items()}

    class LateFetcher(replay.Fetcher):
        def fetch(self, rows: Any, at: int | None = None) -> Any:
            assert at is not None
            return super().fetch(rows, at=at + 1)

    monkeypatch.setattr(tiled, "_bounds", inclusive)
    monkeypatch.setattr(replay, "Fetcher", LateFetcher)
    result = CliRunner().invoke(app, [
        "verify", str(defs), "--start", "2024-01-02", "--end", "2024-01-02",
        "--tilings", "one,daily,stream", "--stream-batch", "100",
        "--output", str(tmp_path / "report")], env={"COLUMNS": "200"})
    assert result.exit_code == MISMATCH_EXIT, result.output
    assert "MISMATCH" in result.output
    report = (tmp_path / "report" / "report.md").read_text()
    wrong = {line.split(" | ")[0].strip("| ") for line in report.splitlines()
             if line.startswith("| spend_") and not line.endswith("| ref | 0 |")}
    assert wrong == {"spend_amount_sum_1h", "spend_amount_sum_1d", "spend_item_count"}
    mismatches = pq.read_table(tmp_path / "report" / "mismatches.parquet").to_pylist()
    assert mismatches
    assert {row["tiling"] for row in mismatches} == {"daily", "stream"}
    for tiling in ("daily", "stream"):
        assert {row["feature"] for row in mismatches if row["tiling"] == tiling} == wrong


def test_bad_arguments_are_named_before_any_job(spark: Any, join: tt.Join) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tilings": "one,weekly"}, "tilings: 'weekly' is not a tiling"),
        ({"sample": 0}, "sample is 0"),
        ({"end": "2023-12-31"}, "start 2024-01-01 is after end 2023-12-31"),
        ({"start": "Jan 1"}, "start 'Jan 1' is not a day"),
        ({"seed": "1"}, "seed is '1'"),
        ({"tilings": "stream,one"}, "names 'stream' first"),
        ({"stream_batch": 0}, "stream_batch is 0: give how many rows each micro-batch"),
        ({"tilings": "one,stream", "work_dir": "s3a://bucket/verify"},
         "work_dir s3a://bucket/verify: the stream tiling moves files"),
    ]
    for change, said in cases:
        arguments = {"start": START, "end": END, **change}
        with pytest.raises(ValueError, match=re.escape(said)):
            tt.verify(join, spark, **arguments)
    with pytest.raises(ValueError, match="has no row with a time from 2030-01-01 to 2030-01-02"):
        tt.verify(join, spark, "2030-01-01", "2030-01-02")  # one small job: the sample
    accounts = join.join_parts[1].group_by.source
    daily = tt.GroupBy("daily", tt.EntitySource(accounts.snapshot_table, time_column="since"),
                       ["user_id"], [tt.Aggregation("balance", "sum")],
                       accuracy=tt.Accuracy.SNAPSHOT)
    with pytest.raises(ValueError, match=r"parts\[1\] \('daily'\) reads an entity source "
                       "without a mutation_table"):
        tt.verify(tt.Join("j", join.left, [join.join_parts[0].group_by, daily]), spark, START,
                  END, tilings="one,stream")
    snapshots = accounts
    with pytest.raises(ValueError, match=r"give the Join a left tt\.EventSource"):
        tt.verify(tt.Join("entity_left", snapshots, [join.join_parts[1]]), spark, START, END)
