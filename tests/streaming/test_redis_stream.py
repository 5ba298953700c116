"""The Redis Streams source: XADD day D+1's events to a real redis-server, stream them until
idle, and every fetch equals the backfill, for both entry layouts; a crash between writing a
batch and committing its offsets is read again after the restart and counted once."""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from stream_helpers import DS, World, mismatches

from timetile.offline.upload import upload
from timetile.streaming.job import BatchReport, stream_group_by
from timetile.streaming.redis_source import RedisStreamSource
from timetile.streaming.sources import parse_source

PER_BATCH = 60


def text(value: Any) -> str:
    """A value as the ``fields`` layout holds it."""
    return json.dumps(value) if isinstance(value, bool) else str(value)


def entry(row: dict[str, Any], layout: str) -> dict[str, str]:
    if layout == "json":
        return {"json": json.dumps(row, ensure_ascii=False)}
    return {name: text(value) for name, value in row.items() if value is not None}


@pytest.mark.parametrize("layout", ["fields", "json"])
def test_redis_stream_equals_backfill(world: World, spark: Any, redis_url: str, tmp_path: Path,
                                      layout: str) -> None:
    key = f"events-{layout}"
    with redis.Redis.from_url(redis_url) as client:
        client.delete(key)
        pipe = client.pipeline()
        for row in world.rows:
            pipe.xadd(key, entry(row, layout))
        pipe.execute()
    source = parse_source(f"{redis_url}?stream={key}&layout={layout}"
                          f"&maxEntriesPerTrigger={PER_BATCH}")
    assert isinstance(source, RedisStreamSource)
    store = world.store(tmp_path / "store")
    checkpoint = str(tmp_path / "checkpoint")
    if layout == "fields":  # die after writing batch 1, before Spark commits its offsets

        def crash(report: BatchReport) -> None:
            if report.batch == 1:
                raise RuntimeError("simulated crash after writing batch 1")

        first = stream_group_by(world.group_by, spark, source, store, checkpoint,
                                until_idle=True, on_batch=crash)
        with pytest.raises(Exception, match="simulated crash"):
            first.await_termination()
    stream = stream_group_by(world.group_by, spark, source, store, checkpoint, until_idle=True)
    stream.await_termination()
    batches = math.ceil(len(world.rows) / PER_BATCH)
    first_batch = 1 if layout == "fields" else 0  # the crashed batch is read again
    assert [(b.batch, b.replay) for b in stream.batches] == [
        (n, n == 1 and layout == "fields") for n in range(first_batch, batches)]
    assert stream.totals.written == world.usable
    assert stream.totals.unusable == world.unusable
    assert stream.totals.not_written == 0
    bad = mismatches(world, store)
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


@pytest.mark.parametrize(("layout", "where"), [("fields", None), ("json", None),
                                               ("fields", "amount > 0"), ("json", "amount > 0")])
def test_entries_that_cannot_be_read_whole_are_unusable(world: World, spark: Any, *,
                                                         redis_url: str, tmp_path: Path,
                                                         layout: str, where: str | None) -> None:
    """Bytes that are not UTF-8 must not fail the batch (and every restart), and a value of
    the wrong type (a JSON value, or a field's text its column cannot read), or no JSON field
    at all, must not be written as null: each counts as unusable, as the file source counts
    such lines, also past a ``where`` that drops null amounts."""
    normal = next(row for row in world.rows if row["ts"] is not None
                  and row["user_id"] is not None and row["amount"] is not None)
    good = entry({**normal, "amount": abs(normal["amount"]) + 1.0}, layout)
    not_utf8: dict[str, Any] = ({**good, "amount": b"\xe9"} if layout == "fields" else
                                {"json": good["json"].encode()[:-1] + b', "x": "\xe9"}'})
    bad = [not_utf8]
    bad.append(entry({**normal, "amount": "abc"}, layout))
    if layout == "json":
        bad.append({"other": "{}"})
    else:  # text a bigint cannot read; the JSON reader refuses 7.0 for a bigint too
        bad.append({**good, "user_id": f"{normal['user_id']}.0"})
    key = f"unreadable-{layout}"
    with redis.Redis.from_url(redis_url) as client:
        client.delete(key)
        for fields in (good, *bad, good):
            client.xadd(key, fields)
    group_by = world.group_by if where is None else replace(
        world.group_by, source=replace(world.group_by.source, where=where))
    uri = world.store(tmp_path / "store")
    if where is not None:  # the store must hold the definition the stream writes
        upload(group_by, spark, DS, uri)
    stream = stream_group_by(group_by, spark,
                             parse_source(f"{redis_url}?stream={key}&layout={layout}"),
                             uri, str(tmp_path / "checkpoint"), until_idle=True)
    stream.await_termination()
    assert (stream.totals.written, stream.totals.unusable) == (2, len(bad))


def test_a_timestamp_field_reads_epoch_milliseconds_and_iso_text(spark: Any) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from timetile.streaming.file_source import read_text

    texts = ["1704240000010", "2024-01-03T00:00:00.010Z", "-5", "abc", "99999999999999999999",
             "9223372036854775807", None, "08:30:00"]  # a time of day alone: no day to be on
    frame = spark.createDataFrame([(text,) for text in texts], "t string")
    read = frame.select(F.unix_millis(read_text(F.col("t"), T.TimestampType()))).collect()
    assert [row[0] for row in read] == [1704240000010, 1704240000010, -5] + [None] * 5


def test_a_timestamp_ntz_field_holds_the_utc_wall_clock_of_text_with_an_offset(
        spark: Any) -> None:
    """Spark's cast to ``timestamp_ntz`` drops an offset: 08:30+05:30 (03:00 UTC) was
    written at 08:30, five and a half hours from where the batch side holds it."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from timetile.streaming.file_source import read_text

    texts = ["2024-01-03T08:30:00+05:30", "2024-01-03T03:00:00", "2024-01-03T03:00:00Z",
             "2024-01-02T22:00:00-05:00", "1704250800000", "abc", "08:30:00"]
    frame = spark.createDataFrame([(text,) for text in texts], "t string")
    wall = read_text(F.col("t"), T.TimestampNTZType())
    read = frame.select(wall.cast("string")).collect()
    assert [row[0] for row in read] == ["2024-01-03 03:00:00"] * 5 + [None, None]


def test_text_its_column_cannot_read_marks_the_event_unusable(spark: Any) -> None:
    """As a wrong-typed JSON value does, in both ways a source hands its columns over: every
    column as text (Redis ``fields``), or typed but for the times (JSON)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from timetile.streaming.file_source import read_columns, read_text, read_texts

    schema = T.StructType([T.StructField("seen", T.TimestampType()),
                           T.StructField("amount", T.DoubleType())])
    rows = [("2024-01-03T03:00:00Z", "1.5"), ("08:30:00", "1.5"), ("abc", None),
            (None, "x"), (None, None)]
    as_text = spark.createDataFrame(rows, "seen string, amount string")
    columns, unread = read_columns([F.col("seen"), F.col("amount")], schema, read_text)
    read = as_text.select(*columns, unread.alias("unread")).collect()
    assert [row["unread"] for row in read] == [False, True, True, True, False]
    assert read[0]["amount"] == 1.5
    typed = as_text.select("seen", F.col("amount").try_cast("double").alias("amount"))
    columns, unread = read_columns([F.col("seen"), F.col("amount")], schema, read_texts)
    assert [row[0] for row in typed.select(unread).collect()] == [False, True, True, False,
                                                                  False]


@pytest.mark.parametrize("start", ["$", "0-x", "-1", ""])
def test_a_start_id_that_is_no_entry_id_is_refused(redis_url: str, start: str) -> None:
    with pytest.raises(ValueError, match=rf"startId {re.escape(repr(start))} is not an entry "
                                         "id. Fix: give 0-0"):
        parse_source(f"{redis_url}?stream=s&startId={urllib.parse.quote(start)}")
