"""The Redis Streams source: XADD day D+1's events to a real redis-server, stream them until
idle, and every fetch equals the backfill, for both entry layouts; a crash between writing a
batch and committing its offsets is read again after the restart and counted once."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import redis
from stream_helpers import World, mismatches

from timetile.streaming.job import BatchReport, stream_group_by
from timetile.streaming.redis_source import RedisStreamSource
from timetile.streaming.sources import parse_source

pytestmark = pytest.mark.spark

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
