"""Late events, as a transcript replayed through every stream source (STYLE 7).

The transcript lists micro-batches: the events that arrive in each (user, hours after the
upload's day end, amount), the watermark the batch must run with and what must become of
its events. Events older than the watermark or before the day end are counted and reported,
never silently dropped; within the lateness, out-of-order events are written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from stream_helpers import DAY_END, write_files

import timetile as tt
from timetile.core.timeutil import HOUR_MS
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.store.kv import open_store
from timetile.streaming.file_source import FileSource
from timetile.streaming.job import stream_group_by, stream_totals
from timetile.streaming.redis_source import RedisStreamSource
from timetile.streaming.sources import StreamSource
from timetile.streaming.state import StreamCounts

Event = tuple[int | None, float | None, float]  # user, hours after DAY_END (None: no time), amount

TRANSCRIPT: dict[str, Any] = {
    "lateness": "1h",
    "uploaded": [(1, -12.0, 1.0)],
    "batches": [
        {"events": [(1, 10.0, 1.0), (2, 11.0, 2.0)],
         "watermark": None, "counts": {"written": 2, "tiles": 2}},
        {"events": [(1, 8.5, 4.0),      # behind the watermark (11h - 1h)
                    (1, 10.5, 8.0),     # out of order but within the lateness: written
                    (2, -1.0, 16.0),    # before the upload's day end: late
                    (2, None, 32.0),    # no time: unusable
                    (None, 10.25, 64.0)],  # no key: unusable
         "watermark": 10.0,
         "counts": {"written": 1, "behind_watermark": 1, "late": 1, "unusable": 2, "tiles": 1}},
        {"events": [(2, 9.5, 128.0), (1, 12.0, 256.0)],
         "watermark": 10.0, "counts": {"written": 1, "behind_watermark": 1, "tiles": 1}},
    ],
    "fetch_at": 13.0,  # what a fetch sees: the written events (the next upload adds the rest)
    "fetched": {1: {"count": 4, "sum": 266.0}, 2: {"count": 1, "sum": 2.0}},
}


def millis(hours: float | None) -> int | None:
    return None if hours is None else DAY_END + round(hours * HOUR_MS)


def rows(events: list[Event]) -> list[dict[str, Any]]:
    return [{"user_id": user, "ts": millis(hours), "amount": amount}
            for user, hours, amount in events]


def file_source(folder: Path, _: str) -> tuple[StreamSource, Callable[[int, list[Event]], None]]:
    def land(index: int, events: list[Event]) -> None:
        write_files(folder, rows(events), 1, start=index)

    folder.mkdir()
    return FileSource(str(folder), "json"), land


def redis_source(_: Path, url: str) -> tuple[StreamSource, Callable[[int, list[Event]], None]]:
    key = f"late-{datetime.now().timestamp()}"

    def land(_: int, events: list[Event]) -> None:
        with redis.Redis.from_url(url) as client:
            pipe = client.pipeline(transaction=True)  # one batch arrives at once
            for row in rows(events):
                pipe.xadd(key, {k: str(v) for k, v in row.items() if v is not None})
            pipe.execute()

    return RedisStreamSource(url, key), land


@pytest.mark.parametrize("make_source", [file_source, redis_source], ids=["files", "redis"])
def test_late_events_are_counted_and_reported(spark: Any, tmp_path: Path, redis_url: str,
                                              make_source: Any) -> None:
    events = spark.createDataFrame(rows(TRANSCRIPT["uploaded"]),
                                   "user_id long, ts long, amount double")
    late = tt.GroupBy("late", tt.EventSource(events), ["user_id"],
                      [tt.Aggregation("amount", "count"), tt.Aggregation("amount", "sum")])
    store = f"lmdb://{tmp_path / 'store'}"
    upload(late, spark, "2024-01-02", store)
    source, land = make_source(tmp_path / "landing", redis_url)
    stream = stream_group_by(late, spark, source, store, str(tmp_path / "checkpoint"),
                             lateness=TRANSCRIPT["lateness"], trigger_seconds=0.2)
    try:
        expected_total = StreamCounts()
        for index, batch in enumerate(TRANSCRIPT["batches"]):
            land(index, batch["events"])
            stream.process_all_available()
            report = stream.batches[-1]
            assert (report.batch, report.watermark) == (index, millis(batch["watermark"]))
            assert report.counts == StreamCounts(**batch["counts"])
            expected_total += report.counts
        assert len(stream.batches) == len(TRANSCRIPT["batches"])
        assert stream.totals == expected_total
    finally:
        stream.stop()
    # Spark's own watermark (declared with withWatermark) is the one the batches ran with.
    assert stream.query is not None
    checked = 0
    for progress in stream.query.recentProgress:
        if progress["numInputRows"] and progress["batchId"] > 0:
            checked += 1
            spark_mark = datetime.fromisoformat(progress["eventTime"]["watermark"]
                                                .replace("Z", "+00:00"))
            ours = stream.batches[progress["batchId"]].watermark
            assert round(spark_mark.timestamp() * 1000) == ours
    assert checked == len(TRANSCRIPT["batches"]) - 1
    with open_store(store) as kv:
        assert stream_totals(kv, "late") == expected_total
        query = spark.createDataFrame([(1, 0)], "user_id long, ts long")
        fetcher = Fetcher(tt.Join("j", tt.EventSource(query), [late]), kv)
        at = millis(TRANSCRIPT["fetch_at"])
        for user, wanted in TRANSCRIPT["fetched"].items():
            [result] = fetcher.fetch([{"user_id": user}], at=at)
            assert result.features == {f"late_amount_{op}": value
                                       for op, value in wanted.items()}
