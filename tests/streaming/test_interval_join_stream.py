"""The streaming interval join on Spark, against the join processor and the batch join.

Every transcript of single-time inputs goes through the streaming join: its rows that were
not late, landed as files, must come out as what the processor gives once final watermarks
flush its buffers, null-padded rows included. Late rows are written aside and counted, and
a stream stopped between files and restarted from its checkpoint writes each row once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import timetile as tt
from timetile.core.interval_join import Joined
from timetile.core.interval_join.processor import joined_at
from timetile.core.interval_join.transcript import read_transcript, settled
from timetile.spark.sources import TIME
from timetile.store.layout import GroupByMeta
from timetile.streaming.file_source import land_json_lines
from timetile.streaming.interval_join import stream_join
from timetile.streaming.job import events_frame, unreadable_unless_joined
from timetile.testing.interval_joins import MARK, joined_sides, transcript_join

pytestmark = pytest.mark.spark

TRANSCRIPTS = sorted((Path(__file__).parents[1] / "core" / "interval_join" / "transcripts")
                     .glob("*.txt"))
FAR = 10**12  # a time past every transcript's: its rows raise the watermark, joining nothing


def _single_time(path: Path) -> bool:
    return all(len(fields) == 1 for fields in read_transcript(path).spec.time_fields.values())


def _canonical(left: dict[str, Any] | None, right: dict[str, Any] | None) -> str:
    return repr((left and sorted(left.items()), right and sorted(right.items())))


def _land(folder: Path, files: dict[str, list[list[dict[str, Any]]]]) -> dict[str, str]:
    """Land each input's files; return the stream sources that read one file per micro-batch."""
    for side, chunks in files.items():
        for index, chunk in enumerate(chunks):
            land_json_lines(folder / side, chunk, 1, first=index)
    return {side: f"dir:{folder / side}?maxFilesPerTrigger=1" for side in files}


def _transcript_join(spark: SparkSession, path: Path) -> tuple[Any, tt.IntervalJoin, Any]:
    """Return the transcript, its join over empty tables, its files and what it must write.

    What it must write: the processor's joined and null-padded rows once watermarks past
    every time flush its buffers, with the rows it dropped as late left out of the input.
    """
    transcript = read_transcript(path)
    spec = transcript.spec
    kept, outputs = settled(transcript, FAR)
    expected = Counter(_canonical(o.left, o.right) for o in outputs)
    join = transcript_join(spark, transcript, kept, filled=False)
    # the transcript's rows in one file per input, then a row far ahead on each: the
    # watermark passes every bound, so the buffers flush as the processor's did
    files = {side: [[{**row, MARK: 1} for row in kept[alias]],
                    [{spec.time_fields[alias][0]: FAR, MARK: 2}]]
             for side, alias in (("left", "l"), ("right", "r"))}
    return transcript, join, (files, expected)


@pytest.fixture(scope="module")
def streamed_transcripts(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory,
                         ) -> dict[str, tuple[Any, tt.IntervalJoin, Counter[str], list[Any]]]:
    """Every single-time transcript through its own streaming join, the queries at once."""
    runs = {}
    for path in TRANSCRIPTS:
        if not _single_time(path):
            continue
        folder = tmp_path_factory.mktemp(path.stem)
        transcript, join, (files, expected) = _transcript_join(spark, path)
        stream = stream_join(join, spark, _land(folder, files), str(folder / "out"),
                             str(folder / "checkpoint"), lateness=0, until_idle=True)
        runs[path.stem] = (transcript, join, expected, stream, folder)
    results = {}
    for name, (transcript, join, expected, stream, _) in runs.items():
        stream.await_termination()
        rows = stream.read().where("l__k = 1 OR r__k = 1")
        results[name] = (transcript, join, expected, rows.collect())
    return results


@pytest.mark.parametrize("path", [p for p in TRANSCRIPTS if _single_time(p)],
                         ids=lambda path: path.stem)
def test_a_transcript_through_the_streaming_join(
        streamed_transcripts: dict[str, Any], path: Path) -> None:
    transcript, join, expected, rows = streamed_transcripts[path.stem]
    streamed: Counter[str] = Counter()
    for row in rows:
        sides = joined_sides(join, row)
        streamed[_canonical(*sides)] += 1
        assert row["joined_at"] == joined_at(transcript.spec, Joined(*sides)), (path.stem, row)
    assert streamed == expected, path.stem


def test_a_stream_restarted_after_each_file_writes_each_row_once_and_late_ones_aside(
        spark: SparkSession, tmp_path: Path) -> None:
    orders = spark.createDataFrame([], "order_id bigint, order_time bigint, amount double")
    deliveries = spark.createDataFrame([], "order_id bigint, delivery_time bigint")
    join = tt.IntervalJoin("delivered", tt.EventSource(orders, time_column="order_time"),
                           tt.EventSource(deliveries, time_column="delivery_time"),
                           on=["order_id"], how="left",
                           condition="r.delivery_time BETWEEN l.order_time AND l.order_time + 10")
    left = [[{"order_id": 1, "order_time": 0, "amount": 1.0},
             {"order_id": 2, "order_time": 5, "amount": 2.0}],
            [{"order_id": 3, "order_time": 50, "amount": 3.0}],
            [{"order_id": 4, "order_time": 1, "amount": 4.0},  # late: below the watermark
             {"order_id": 5, "order_time": 100, "amount": 5.0}]]
    right = [[{"order_id": 1, "delivery_time": 8}],
             [{"order_id": 2, "delivery_time": 60}],  # beyond order 2's bound
             [{"order_id": 3, "delivery_time": 55}, {"order_id": 9, "delivery_time": 100}]]
    for index, files in enumerate(zip(left, right, strict=True)):  # a restart per file
        for side, rows in zip(("left", "right"), files, strict=True):
            land_json_lines(tmp_path / side, rows, 1, first=index)
        stream = stream_join(join, spark, {side: f"dir:{tmp_path / side}" for side in
                                           ("left", "right")}, str(tmp_path / "out"),
                             str(tmp_path / "checkpoint"), lateness=0, until_idle=True)
        stream.await_termination()
    rows = sorted((r.l_order_id, r.r_delivery_time, r.joined_at) for r in stream.read().collect())
    # order 5 waits for deliveries up to 110: the watermark (100) has not settled it
    assert rows == [(1, 8, 8), (2, None, 15), (3, 55, 55)]
    late = stream.read("late").collect()
    assert [(r.l_order_id, r.r_delivery_time) for r in late] == [(4, None)]


def test_a_group_bys_where_never_drops_a_late_join_row_uncounted(spark: SparkSession) -> None:
    """A late (or malformed) row of the join reaches the tile writer with no time, whatever
    the GroupBy source's ``where`` says, so it is counted as unusable, never dropped."""
    orders = spark.createDataFrame([], "order_id bigint, order_time bigint, amount double")
    deliveries = spark.createDataFrame([], "order_id bigint, delivery_time bigint")
    join = tt.IntervalJoin("delivered", tt.EventSource(orders, time_column="order_time"),
                           tt.EventSource(deliveries, time_column="delivery_time"),
                           on=["order_id"], condition="l.order_time = r.delivery_time")
    group_by = tt.GroupBy("big", tt.EventSource(join, time_column="joined_at",
                                                where=["l_amount > 100"]),
                          ["l_order_id"], [tt.Aggregation("l_amount", "sum")])
    rows = spark.createDataFrame(
        [(1, 5, 500.0, 1, 5, 5, "joined"), (2, 6, 1.0, 2, 6, 6, "joined"),
         (3, 1, 1.0, None, None, None, "late")],
        "l_order_id bigint, l_order_time bigint, l_amount double, r_order_id bigint, "
        "r_delivery_time bigint, joined_at bigint, _tt_kind string")
    meta = GroupByMeta(day_end=0, slack=0, key_types=("int",), value_types={"l_amount": "float"})
    frame = events_frame(group_by, spark, unreadable_unless_joined(rows), meta, watermark=False)
    kept = sorted(((r[TIME], r["l_order_id"]) for r in frame.collect()), key=repr)
    # the order of 1.0 is filtered by the where; the late row passes it, with no time or key
    assert kept == [(5, 1), (None, None)]
