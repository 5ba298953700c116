"""The stream from a directory of files: upload day D, stream D+1, fetch == backfill; restarts.

The contract of DESIGN §5-6: after ``timetile stream`` has folded day D+1's events into
the tiles, every fetch at t (up to the last streamed event) equals ``tt.backfill`` at t,
and a stream killed at any point and restarted from its checkpoint leaves the store exactly
as a run that never stopped.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from stream_helpers import DAY_END, DS, KEYS, World, all_tiles, mismatches, write_files

import timetile as tt
from timetile.core.timeutil import HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.store.kv import open_store
from timetile.store.tiles import read_meta
from timetile.streaming.file_source import FileSource
from timetile.streaming.job import BatchReport, TileStream, events_frame, stream_group_by
from timetile.streaming.state import StreamOwnershipError, read_state
from timetile.testing import SHORT_RUN_JAVA_OPTIONS, same_value


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


@pytest.mark.parametrize("change", ["an aggregation added", "the source's where"])
def test_a_changed_definition_resets_the_stream(
        world: World, spark: Any, tmp_path: Path, change: str) -> None:
    """Uploading a changed GroupBy drops the tiles streamed under the old one, refuses the old
    stream, and a stream from a new checkpoint refills them: fetches equal the backfill.

    A changed ``where`` changes which events the tiles hold, though no feature changed: the
    tiles of the old one would be served as the new one's (they were, before the signature
    held the source's filters)."""
    uri = world.store(tmp_path / "store")
    run(world, spark, uri, tmp_path / "checkpoint").await_termination()
    old = world.group_by
    if change == "an aggregation added":
        new = tt.GroupBy(old.name, old.source, list(old.keys), [
            *(old.aggregations or ()), tt.Aggregation("amount", "max", windows=["3h"])])
    else:
        assert isinstance(old.source, tt.EventSource)
        new = replace(old, source=replace(old.source, where="amount IS NULL OR amount < 0"))
    assert any(all_tiles(uri, old))
    upload(new, spark, DS, uri)
    assert not any(all_tiles(uri, new))
    raw = spark.read.schema(old.source.table.schema).json(str(world.files[-1]))
    with open_store(uri) as store:
        meta = read_meta(store, new)
    stale = TileStream(old, uri, lateness_ms=0)
    stale.query = SimpleNamespace(id="old-query")  # type: ignore[assignment]
    with pytest.raises(StreamOwnershipError, match="uploaded with another definition"):
        stale.write_batch(events_frame(old, spark, raw, meta), 5)

    source = FileSource(str(world.files[0].parent), "json", max_files_per_trigger=1)
    stream = stream_group_by(new, spark, source, uri, str(tmp_path / "new-checkpoint"),
                             until_idle=True)
    stream.await_termination()
    if change == "an aggregation added":
        assert stream.totals.written == world.usable
    else:  # the stream reads only the events the new where keeps
        assert 0 < stream.totals.written < world.usable
    join = tt.Join("online", world.join.left, [new])
    truth = {(row["user_id"], row["ts"]): row for row in tt.backfill(join, spark).collect()}
    with open_store(uri) as store:
        fetcher = Fetcher(join, store)
        for moment in world.times[::4]:
            results = fetcher.fetch([{"user_id": key} for key in KEYS], at=moment)
            for key, result in zip(KEYS, results, strict=True):
                expected = truth[(key, moment)]
                assert all(same_value(value, expected[name])
                           for name, value in result.features.items()), (key, moment)


def test_a_file_landed_with_an_old_modification_time_is_read(
        world: World, spark: Any, tmp_path: Path) -> None:
    """Spark skips files a week older than the newest it saw, unless told otherwise."""
    uri = world.store(tmp_path / "store")
    rows = [row for row in world.rows if row["ts"] is not None][:40]
    landing = tmp_path / "landing"
    newest = time.time()
    for index, (chunk, age_days) in enumerate([(rows[:20], 0), (rows[20:], 30)]):
        path = write_files(tmp_path / "scratch", chunk, 1, start=index)[0]
        os.utime(path, (newest - age_days * 86_400,) * 2)
        landing.mkdir(exist_ok=True)
        path.rename(landing / path.name)
        stream = stream_group_by(world.group_by, spark, FileSource(str(landing)), uri,
                                 str(tmp_path / "checkpoint"), lateness="1d",
                                 until_idle=True)
        stream.await_termination()
    with open_store(uri) as store:
        state = read_state(store, world.group_by.name)
    assert state is not None
    counted = state.totals
    assert counted.written + counted.late + counted.behind_watermark + counted.unusable == 40


def test_times_beyond_sparks_timestamps_stream_like_any_other(
        world: World, spark: Any, tmp_path: Path) -> None:
    """An event at any int64 millisecond is counted; none fails its micro-batch."""
    uri = world.store(tmp_path / "store")
    normal = next(row for row in world.rows if row["ts"] is not None
                  and row["user_id"] is not None)
    rows = [normal, {**normal, "ts": 10**17}, {**normal, "ts": -(10**17)}]
    files = write_files(tmp_path / "landing", rows, 1)
    stream = stream_group_by(world.group_by, spark, FileSource(str(files[0].parent)), uri,
                             str(tmp_path / "checkpoint"), until_idle=True)
    stream.await_termination()
    assert (stream.totals.written, stream.totals.late) == (2, 1)


@pytest.mark.parametrize("where", [None, "amount > 0"])
def test_a_line_with_a_value_of_the_wrong_type_is_unusable(
        world: World, spark: Any, tmp_path: Path, where: str | None) -> None:
    """Spark would read such a value as null and the event as written without it. A source's
    ``where`` drops rows of a null amount, but a line it could not read is counted, never
    filtered away."""
    uri = world.store(tmp_path / "store")
    normal = next(row for row in world.rows if row["ts"] is not None
                  and row["user_id"] is not None and row["amount"] is not None)
    normal = {**normal, "amount": abs(normal["amount"]) + 1.0}
    rows = [normal, {**normal, "amount": "abc"}, {**normal, "amount": "200"},
            {**normal, "amount": None}]
    files = write_files(tmp_path / "landing", rows, 1)
    with files[0].open("a") as lines:
        lines.write('{"user_id": 1, "amount": 2.0, "ts": 17\n')  # cut short
    group_by = world.group_by if where is None else replace(
        world.group_by, source=replace(world.group_by.source, where=where))
    if where is not None:  # the store must hold the definition the stream writes
        upload(group_by, spark, DS, uri)
    stream = stream_group_by(group_by, spark, FileSource(str(files[0].parent)), uri,
                             str(tmp_path / "checkpoint"), until_idle=True)
    stream.await_termination()
    filtered = 1 if where else 0  # the null amount, as the backfill filters it
    assert (stream.totals.written, stream.totals.unusable) == (2 - filtered, 3)


def test_a_bad_schema_is_named(world: World, spark: Any, tmp_path: Path) -> None:
    uri = world.store(tmp_path / "store")
    source = FileSource(str(world.files[0].parent))
    with pytest.raises(tt.DefinitionError, match=r"schema: 'user_id lon, ts long' is not a "
                       r"schema.*Fix: write Spark DDL of the raw rows"):
        stream_group_by(world.group_by, spark, source, uri, str(tmp_path / "checkpoint"),
                        schema="user_id lon, ts long")
    with pytest.raises(tt.DefinitionError, match=r"with the stream's schema ts bigint, amount "
                       r"double:\n.*'user_id' is not a column"):
        stream_group_by(world.group_by, spark, source, uri, str(tmp_path / "checkpoint"),
                        schema="ts bigint, amount double")
    # a key of another type would stop the stream at its first key that is not an int
    with pytest.raises(tt.DefinitionError, match=r"the stream's key column 'user_id' is "
                       r"string, the upload's is int.*Fix: cast it in the source's select"):
        stream_group_by(world.group_by, spark, source, uri, str(tmp_path / "checkpoint"),
                        schema="user_id string, ts bigint, amount double")
    # ints read as a string key's digits, or as a float key: those streams are taken
    raw = world.group_by.source.table.limit(1)  # user_id is a bigint
    with open_store(uri) as store:
        meta = read_meta(store, world.group_by)
    for upload_type in ("string", "float"):
        events_frame(world.group_by, spark, raw, replace(meta, key_types=(upload_type,)))


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
    command = [sys.executable, "-c", "from timetile.cli.app import main; main()", "stream",
               str(defs), "--group-by", "users", "--source",
               f"dir:{landing}?maxFilesPerTrigger=1", "--store", uri, "--checkpoint",
               str(checkpoint), "--trigger-seconds", "0.5"]
    log = (tmp_path / "stream.log").open("w")
    submit_args = f"--driver-java-options {shlex.quote(SHORT_RUN_JAVA_OPTIONS)} pyspark-shell"
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True,
                               env={**os.environ, "PYSPARK_SUBMIT_ARGS": submit_args})
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
    assert not mismatches(world, uri)
    if max(source_entries_per_batch(checkpoint)) > 1:
        # killed after Spark logged a batch's files but before it journaled its offsets:
        # the restart took in the next file too (docs/online.md, Restarts), so the tile
        # entries of those files share one batch id
        assert replace(restarted.totals, tiles=0) == replace(reference[1].totals, tiles=0)
        return
    assert restarted.totals == reference[1].totals
    assert all_tiles(uri, world.group_by) == all_tiles(reference[0], world.group_by)


def source_entries_per_batch(checkpoint: Path) -> list[int]:
    """How many of the file source's log entries (one file each, at one file per trigger)
    each micro-batch read: the steps of the ``logOffset`` its offsets end at."""
    batches = sorted(int(path.name) for path in (checkpoint / "offsets").iterdir()
                     if path.name.isdigit())
    ends = [json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])
            ["logOffset"] for batch in batches]
    return [end - start for start, end in zip([-1, *ends], ends, strict=False)]


def test_json_times_of_a_timestamp_column_read_as_the_batch_side_reads_them(
        spark: Any, tmp_path: Path) -> None:
    """Spark's JSON reader takes a number as epoch seconds (a stream wrote events 54,000
    years ahead) and text without an offset in the session time zone (5 h off in New York);
    the batch side reads epoch milliseconds and UTC."""
    at = DAY_END + HOUR_MS
    batch = spark.createDataFrame([(1, DAY_END - HOUR_MS, 1.0)],
                                  "user_id long, ms long, amount double").select(
        "user_id", F.timestamp_millis("ms").alias("ts"), "amount")
    sums = tt.GroupBy("sums", tt.EventSource(batch), ["user_id"],
                      [tt.Aggregation("amount", "sum", windows=["1h"])])
    uri = f"lmdb://{tmp_path / 'store'}"
    upload(sums, spark, DS, uri)
    lines = [at, "2024-01-03T01:00:00", "2024-01-03T01:00:00Z", "2024-01-03 01:00:00.000999"]
    assert at == date_to_ms("2024-01-03") + HOUR_MS  # 01:00 UTC; .000999 floors to it
    rows = [{"user_id": 1, "ts": ts, "amount": 2.0 ** i} for i, ts in enumerate(lines)]
    files = write_files(tmp_path / "landing", rows, 1)
    source = FileSource(str(files[0].parent))
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        with pytest.raises(tt.DefinitionError, match=r"reads the timestamp columns \['ts'\] "
                           r"from text.*America/New_York.*Fix: set spark.sql.session.timeZone"):
            stream_group_by(sums, spark, source, uri, str(tmp_path / "checkpoint"))
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    stream = stream_group_by(sums, spark, source, uri, str(tmp_path / "checkpoint"),
                             until_idle=True)
    stream.await_termination()
    assert stream.totals.written == 4
    join = tt.Join("j", tt.EventSource(batch), [sums])
    with open_store(uri) as store:
        fetcher = Fetcher(join, store)
        fetched = [fetcher.fetch([{"user_id": 1}], at=when)[0] for when in (at, at + 1)]
    assert [r.features["sums_amount_sum_1h"] for r in fetched] == [None, 15.0]


def test_a_json_time_inside_a_struct_reads_as_the_batch_side_reads_it(
        spark: Any, tmp_path: Path) -> None:
    """A timestamp nested in a struct (selected as the source's time) was still read by
    Spark's JSON reader: epoch ms as seconds, the event 54,000 years ahead."""
    at = DAY_END + HOUR_MS
    batch = spark.createDataFrame([(1, DAY_END - HOUR_MS, 1.0)],
                                  "user_id long, ms long, amount double").select(
        "user_id", F.struct(F.timestamp_millis("ms").alias("ts"), "amount").alias("payload"))
    source = tt.EventSource(batch, select={"user_id": "user_id", "ts": "payload.ts",
                                           "amount": "payload.amount"})
    sums = tt.GroupBy("nested", source, ["user_id"],
                      [tt.Aggregation("amount", "sum", windows=["1h"])])
    left = tt.EventSource(batch.select("user_id", F.col("payload.ts").alias("ts")))
    totals, features = streamed_then_fetched(spark, tmp_path, sums, left, [
        {"user_id": 1, "payload": {"ts": at - 10, "amount": 2.0}},
        {"user_id": 1, "payload": {"ts": "2024-01-03T00:59:59", "amount": 4.0}},
        {"user_id": 1, "payload": None}], at=at)
    assert (totals.written, totals.unusable) == (2, 1)
    assert features == {"nested_amount_sum_1h": 6.0}


def test_a_raw_column_named_with_a_dot_streams_as_it_backfills(spark: Any,
                                                                tmp_path: Path) -> None:
    """``amount.usd`` is one column, not field ``usd`` of a struct ``amount``: the stream
    failed to start (UNRESOLVED_COLUMN) where the backfill and the upload read it."""
    at = DAY_END + HOUR_MS
    batch = spark.createDataFrame([(1, DAY_END - HOUR_MS, 1.0)],
                                  "user_id long, ts long, `amount.usd` double")
    source = tt.EventSource(batch, select={"user_id": "user_id", "ts": "ts",
                                           "amount": "`amount.usd`"})
    sums = tt.GroupBy("dotted", source, ["user_id"],
                      [tt.Aggregation("amount", "sum", windows=["1d"])])
    totals, features = streamed_then_fetched(
        spark, tmp_path, sums, tt.EventSource(batch.select("user_id", "ts")), [
            {"user_id": 1, "ts": at - 10, "amount.usd": 2.0},
            {"user_id": 1, "ts": at - 5, "amount.usd": "not a number"}], at=at)
    assert (totals.written, totals.unusable) == (1, 1)
    assert features == {"dotted_amount_sum_1d": 3.0}


def streamed_then_fetched(spark: Any, tmp_path: Path, group_by: tt.GroupBy,
                          left: tt.EventSource, rows: list[dict[str, Any]], *, at: int
                          ) -> tuple[Any, dict[str, Any]]:
    """Upload day DS, stream ``rows`` landed as one file until idle, and fetch user 1 at
    ``at``: the stream's totals and the fetched features."""
    uri = f"lmdb://{tmp_path / 'store'}"
    upload(group_by, spark, DS, uri)
    files = write_files(tmp_path / "landing", rows, 1)
    stream = stream_group_by(group_by, spark, FileSource(str(files[0].parent)), uri,
                             str(tmp_path / "checkpoint"), until_idle=True)
    stream.await_termination()
    with open_store(uri) as store:
        fetched = Fetcher(tt.Join("j", left, [group_by]), store).fetch([{"user_id": 1}], at=at)
    return stream.totals, fetched[0].features
