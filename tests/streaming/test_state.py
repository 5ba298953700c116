"""The stream record's laws, without Spark: replays decide the same, watermarks never move
back, and another query is refused; plus the stream source URIs."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from timetile.store.layout import STREAM_RESET, STREAM_TABLE
from timetile.store.lmdb_store import LmdbStore
from timetile.streaming.file_source import FileSource
from timetile.streaming.redis_source import RedisStreamSource
from timetile.streaming.sources import lateness_ms, parse_source
from timetile.streaming.state import (
    RESET,
    StreamCounts,
    StreamOwnershipError,
    StreamState,
    advance,
    begin,
    read_state,
    write_state,
)

LATENESS = 1_000
batch_times = st.lists(st.lists(st.integers(0, 50_000), max_size=4), min_size=1, max_size=8)


def run(batches: list[list[int]], crash_after: set[int]) -> list[tuple[int | None, StreamCounts]]:
    """Drive ``begin`` as the job does, rerunning each batch in ``crash_after`` once."""
    state: StreamState | None = None
    decided = []
    batch = 0
    crashed: set[int] = set()
    while batch < len(batches):
        watermark, before = begin(state, "g", "q", batch, LATENESS)
        times = batches[batch]
        counts = StreamCounts(written=sum(watermark is None or t >= watermark for t in times),
                              behind_watermark=sum(watermark is not None and t < watermark
                                                   for t in times))
        seen = [t for t in (state.max_time if state else None, max(times, default=None))
                if t is not None]
        state = StreamState("q", batch, watermark, max(seen) if seen else None, before, counts)
        if batch in crash_after and batch not in crashed:
            crashed.add(batch)  # the record is written, Spark did not commit: rerun it
            continue
        decided.append((watermark, before + counts))
        batch += 1
    return decided


@given(batch_times, st.sets(st.integers(0, 7)))
def test_a_rerun_batch_decides_as_the_first_run(batches: list[list[int]],
                                                crashes: set[int]) -> None:
    assert run(batches, crashes) == run(batches, set())


@given(batch_times)
def test_the_watermark_is_sparks_rule_and_never_moves_back(batches: list[list[int]]) -> None:
    decided = run(batches, set())
    marks = [mark for mark, _ in decided]
    assert all(a is None or (b is not None and b >= a) for a, b in pairwise(marks))
    for index, mark in enumerate(marks):
        earlier = [t for times in batches[:index] for t in times]
        assert mark == (max(earlier) - LATENESS if earlier else None)
    assert decided[-1][1].written + decided[-1][1].behind_watermark == sum(map(len, batches))


def test_another_query_or_an_older_checkpoint_is_refused(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "store")
    state = StreamState("q1", 3, 500, 900, StreamCounts(written=4), StreamCounts(written=1))
    write_state(store, "g", state)
    assert read_state(store, "g") == state
    assert read_state(store, "other") is None
    with pytest.raises(StreamOwnershipError, match="another streaming query"):
        begin(state, "g", "q2", 4, LATENESS)
    with pytest.raises(StreamOwnershipError, match="checkpoint is older than the store"):
        begin(state, "g", "q1", 2, LATENESS)
    assert begin(state, "g", "q1", 4, 100) == (800, StreamCounts(written=5))
    assert advance(800, None, 100) == 800
    store.close()


def test_a_changed_lateness_applies_from_the_second_batch_after_a_restart() -> None:
    """The next batch's watermark follows from the lateness the recorded batch ran with, as
    Spark's own does (its commit log): a batch run again after a crash, under a changed
    lateness, got another watermark than its first run, so its counts disagreed with the
    tiles that first run had written."""
    ran = StreamState("q1", 3, 500, 900, StreamCounts(written=4), StreamCounts(written=1),
                      lateness_ms=100)
    assert begin(ran, "g", "q1", 4, 0) == (800, StreamCounts(written=5))  # not 900
    assert begin(ran, "g", "q1", 3, 0) == (500, StreamCounts(written=4))
    after = StreamState("q1", 4, 800, 1_000, StreamCounts(written=5), StreamCounts(),
                        lateness_ms=0)
    assert begin(after, "g", "q1", 5, 0)[0] == 1_000


def test_records_of_the_earlier_build_are_read() -> None:
    """Version 1 records lack the lateness: the next batch takes the current one."""
    from timetile.core.aggregators.codec import encode

    old = encode((1, "q1", 3, 500, 900, (4, 0, 0, 0, 0), (1, 0, 0, 0, 0)))
    state = StreamState.from_bytes(old)
    assert state == StreamState("q1", 3, 500, 900, StreamCounts(written=4),
                                StreamCounts(written=1))
    assert begin(state, "g", "q1", 4, 100)[0] == 800
    assert StreamState.from_bytes(state.to_bytes()) == state
    with pytest.raises(ValueError, match="not a timetile stream record of version 2"):
        StreamState.from_bytes(encode((3, "q1")))


def test_a_store_older_than_the_checkpoint_is_refused() -> None:
    """A store made anew, or restored from a copy, under a checkpoint that streamed on: the
    batches between were committed by Spark and would never be read again (they were lost
    with a warning before)."""
    state = StreamState("q1", 3, 500, 900, StreamCounts(written=4), StreamCounts(written=1))
    with pytest.raises(StreamOwnershipError, match=r"record is of batch 3 of query q1, but the "
                       r"checkpoint asks for batch 5.*Fix: use the store this checkpoint wrote, or "
                       r"stream into a fresh store"):
        begin(state, "g", "q1", 5, LATENESS)
    with pytest.raises(StreamOwnershipError, match=r"no stream record in this store, but this "
                       r"checkpoint has streamed 2 micro-batches.*Fix: restart the stream"):
        begin(None, "g", "q1", 2, LATENESS)
    assert begin(None, "g", "q1", 0, LATENESS) == (None, StreamCounts())


def test_after_a_reset_only_a_new_checkpoint_may_stream(tmp_path: Path) -> None:
    """An upload of a changed definition drops the tiles: an old checkpoint would skip events."""
    store = LmdbStore(tmp_path / "store")
    store.multi_put(STREAM_TABLE, [(b"g", STREAM_RESET)])
    state = read_state(store, "g")
    assert state is RESET
    assert begin(state, "g", "q2", 0, LATENESS) == (None, StreamCounts())
    with pytest.raises(StreamOwnershipError, match=r"changed definition.*has streamed 3 "
                       r"micro-batches already.*Fix: restart the stream from a new checkpoint"):
        begin(state, "g", "q1", 3, LATENESS)
    store.close()


def test_stream_source_uris() -> None:
    assert parse_source("dir:/data/landing") == FileSource("/data/landing", "json")
    redis_source = parse_source("redis://:secret@host:6380/2?stream=ev&layout=json&"
                                "maxEntriesPerTrigger=500&startId=5-0&socket_timeout=3")
    assert redis_source == RedisStreamSource("redis://:secret@host:6380/2?socket_timeout=3", "ev",
                                             "json", "json", 500, "5-0")
    assert "secret" not in redis_source.describe()
    socket_source = parse_source("unix:///run/redis.sock?db=2&stream=ev")  # was unix:/run/...
    assert socket_source.url == "unix:///run/redis.sock?db=2"
    pool = redis.Redis.from_url(socket_source.url).connection_pool
    assert (pool.connection_kwargs["path"], pool.connection_kwargs["db"]) == ("/run/redis.sock", 2)
    for bad, message in [("kafka://b/t", "unknown stream source"),
                         ("dir:", "names no directory"),
                         ("dir:x?format=csv", "use json or parquet"),
                         ("dir:x?maxFilesPerTrigger=0", "not a positive count"),
                         ("dir:x?colour=red", "unknown option 'colour'"),
                         ("redis://h:1/0", "names no stream")]:
        with pytest.raises(ValueError, match=message):
            parse_source(bad)


@pytest.mark.parametrize(("text", "millis"), [("0", 0), ("0s", 0), (" 00m ", 0), ("90m", 5_400_000),
                                              (0, 0), (1_000, 1_000)])
def test_lateness_reads_zero_as_none(text: str | int, millis: int) -> None:
    assert lateness_ms(text) == millis
