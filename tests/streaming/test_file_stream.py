"""The stream from a directory of files: upload day D, stream D+1, fetch == backfill; restarts.

The contract of DESIGN §5-6: after ``timetile stream`` has folded day D+1's events into
the tiles, every fetch at t (up to the last streamed event) equals ``tt.backfill`` at t,
and a stream killed at any point and restarted from its checkpoint leaves the store exactly
as a run that never stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from stream_helpers import World, all_tiles, mismatches

from timetile.online.store import open_store
from timetile.online.tiles import read_meta
from timetile.streaming.file_source import FileSource
from timetile.streaming.job import BatchReport, TileStream, events_frame, stream_group_by
from timetile.streaming.state import StreamOwnershipError, read_state

pytestmark = pytest.mark.spark


def run(world: World, spark: Any, store_uri: str, checkpoint: Path, **options: Any) -> TileStream:
    """Stream the landed files one per micro-batch until idle."""
    source = FileSource(str(world.files[0].parent), "json", max_files_per_trigger=1)
    return stream_group_by(world.group_by, spark, source, store_uri, str(checkpoint),
                           until_idle=True, **options)


@pytest.fixture(scope="module")
def reference(world: World, spark: Any, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[str, TileStream]:
    """A run that never stopped."""
    folder = tmp_path_factory.mktemp("reference")
    uri = world.store(folder / "store")
    stream = run(world, spark, uri, folder / "checkpoint")
    stream.await_termination()
    return uri, stream


def test_stream_equals_backfill(world: World, reference: tuple[str, TileStream]) -> None:
    uri, stream = reference
    assert [b.batch for b in stream.batches] == list(range(len(world.files)))
    assert stream.totals.written == world.usable
    assert stream.totals.unusable == world.unusable
    assert (stream.totals.late, stream.totals.behind_watermark) == (0, 0)
    with open_store(uri) as store:
        state = read_state(store, "users")
    assert state is not None
    assert state.totals == stream.totals
    bad = mismatches(world, uri)
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def test_restart_after_a_crash_ends_as_if_never_stopped(
        world: World, reference: tuple[str, TileStream], spark: Any, tmp_path: Path) -> None:
    uri = world.store(tmp_path / "store")
    checkpoint = tmp_path / "checkpoint"

    def crash(report: BatchReport) -> None:  # batch 2's tiles are written, Spark has not
        if report.batch == 2:                # committed it: the worst moment to die
            raise RuntimeError("simulated crash after writing batch 2")

    first = run(world, spark, uri, checkpoint, on_batch=crash)
    with pytest.raises(Exception, match="simulated crash"):
        first.await_termination()
    assert [b.batch for b in first.batches] == [0, 1, 2]

    second = run(world, spark, uri, checkpoint)
    second.await_termination()
    assert [(b.batch, b.replay) for b in second.batches] == [(2, True), (3, False), (4, False)]
    assert second.totals == reference[1].totals  # batch 2 counted once
    assert all_tiles(uri, world.group_by) == all_tiles(reference[0], world.group_by)

    # Replay the last batch by hand, as a restart would: nothing changes.
    raw = spark.read.schema(world.group_by.source.table.schema).json(str(world.files[-1]))
    with open_store(uri) as store:
        meta = read_meta(store, world.group_by)
    again = second.write_batch(events_frame(world.group_by, spark, raw, meta), 4)
    assert again.replay
    assert again.counts == second.batches[-1].counts
    assert all_tiles(uri, world.group_by) == all_tiles(reference[0], world.group_by)
    bad = mismatches(world, uri, world.times[::3])
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"

    # Another checkpoint on the same store would double count: refused.
    third = run(world, spark, uri, tmp_path / "other-checkpoint")
    with pytest.raises(Exception, match=f"{StreamOwnershipError.__name__}.*another streaming"):
        third.await_termination()
    assert third.batches == []


KILLED_DEFS = """
import sys
sys.path.insert(0, {helpers!r})
import timetile as tt
from stream_helpers import aggregations

users = tt.GroupBy("users", tt.EventSource({table!r}), ["user_id"], aggregations())
online = tt.Join("online", tt.EventSource({table!r}), [users])
"""


def test_kill_9_mid_stream_then_restart(world: World, reference: tuple[str, TileStream],
                                        spark: Any, tmp_path: Path) -> None:
    """``timetile stream`` in its own process group, SIGKILLed (JVM, workers and all) once
    it has written a batch; the restarted stream finishes, and the store equals the
    uninterrupted run's, entry for entry."""
    table = tmp_path / "events"
    table.mkdir()
    pq.write_table(world.table, table / "part-0.parquet")
    defs = tmp_path / "defs.py"
    defs.write_text(KILLED_DEFS.format(helpers=str(Path(__file__).parent), table=str(table)))
    uri = world.store(tmp_path / "store")
    checkpoint = tmp_path / "checkpoint"
    landing = world.files[0].parent
    command = [sys.executable, "-c", "from timetile.cli import main; main()", "stream",
               str(defs), "--group-by", "users", "--source",
               f"dir:{landing}?maxFilesPerTrigger=1", "--store", uri, "--checkpoint",
               str(checkpoint), "--trigger-seconds", "0.5"]
    log = (tmp_path / "stream.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            with open_store(uri) as store:
                state = read_state(store, "users")
            if state is not None and state.batch >= 1:
                break
            time.sleep(0.1)
        assert process.poll() is None, (tmp_path / "stream.log").read_text()[-3000:]
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.close()
    assert state is not None
    assert 1 <= state.batch < len(world.files) - 1

    restarted = run(world, spark, uri, checkpoint)
    restarted.await_termination()
    # Batch ids need not match the uninterrupted run's: a processing-time trigger may spend
    # ids on no-data batches that only move the watermark. What must match is the store.
    assert restarted.batches
    assert restarted.batches[-1].batch >= state.batch
    assert restarted.totals == reference[1].totals
    assert all_tiles(uri, world.group_by) == all_tiles(reference[0], world.group_by)
