"""Issue 6's end to end: upload day D, stream D+1 through the file source in time order,
fetch at many times while streaming with response logging on, then run the consistency job:
every exact feature matches on every logged row, and the approximate ones lie within their
bounds. Run twice: once straight through, once with the stream crashed and restarted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from stream_helpers import DAY_END, KEYS, World, make_world

from timetile.online.fetcher import Fetcher
from timetile.online.response_log import ResponseLog
from timetile.store.kv import open_store
from timetile.streaming.file_source import FileSource
from timetile.streaming.job import BatchReport, stream_group_by
from timetile.verify.consistency import consistency


class CrashError(RuntimeError):
    """Stands for the process dying after a batch's tiles are written, before its commit."""


@pytest.fixture(scope="module")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(spark, tmp_path_factory.mktemp("e2e"))


def serve_while_streaming(world: World, spark: Any, folder: Path, *, crash_after: int | None
                          ) -> tuple[Path, int]:
    """Stream the landed files one per batch; after each, fetch every key at the query times
    already fully streamed, logging the responses. Return the log folder and rows logged."""
    uri = world.store(folder / "store")
    logs = folder / "logs"
    source = FileSource(str(world.files[0].parent), "json", max_files_per_trigger=1)
    logged = 0
    with open_store(uri) as store, ResponseLog(logs) as log:
        fetcher = Fetcher(world.join, store)
        rows = [{"user_id": key} for key in KEYS]

        def on_batch(report: BatchReport) -> None:
            nonlocal logged
            if report.max_time is not None:  # files are in time order: all before is there
                for at in [t for t in world.times if DAY_END <= t <= report.max_time][-4:]:
                    log.log(f"b{report.batch}-{at}", world.join.name, at, rows,
                            fetcher.fetch(rows, at=at))
                    logged += len(rows)
            if crash_after is not None and report.batch == crash_after and not report.replay:
                raise CrashError(f"crashed after batch {report.batch}")

        checkpoint = str(folder / "checkpoint")
        stream = stream_group_by(world.group_by, spark, source, uri, checkpoint,
                                 until_idle=True, on_batch=on_batch)
        if crash_after is not None:
            with pytest.raises(Exception, match="crashed after batch"):
                stream.await_termination()
            stream = stream_group_by(world.group_by, spark, source, uri, checkpoint,
                                     until_idle=True, on_batch=on_batch)
        stream.await_termination()
    return logs, logged


@pytest.mark.parametrize("crash_after", [None, 1], ids=["straight", "crash-and-restart"])
def test_served_values_are_consistent_with_the_backfill(world: World, spark: Any,
                                                        tmp_path: Path,
                                                        crash_after: int | None) -> None:
    logs, logged = serve_while_streaming(world, spark, tmp_path, crash_after=crash_after)
    assert logged >= 4 * len(KEYS)
    report = consistency(world.join, spark, str(logs))
    assert report.rows == logged
    bad = [entry for entry in report.features if entry.matches != entry.rows or entry.stale]
    assert not bad, bad[:3]
    assert report.summary().startswith(f"{len(report.features)} of {len(report.features)}")
