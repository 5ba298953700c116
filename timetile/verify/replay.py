"""The ``stream`` tiling of ``verify``: the sources replayed through the streaming job (seed 001).

Seed 001 counts a replay in real-time order among the cuts of time that must all give the
same numbers. :func:`replay` makes it with the online side's real parts:

1. **Upload** (:func:`~timetile.offline.upload.upload`) every GroupBy as of the day before
   the range, into an LMDB store of the work folder, its records answering exactly over the
   whole range (``slack_ms``).
2. **Stage** each GroupBy's raw rows of the range (an event source's table, an entity
   source's mutation table: what a stream carries), each with its time (or its
   ``known_at``, where the source declares one) as the replay's order. Approximate
   quantiles of those times cut the range into micro-batches of about ``batch_rows`` rows
   across all sources; one Spark job per GroupBy writes its rows, partitioned by
   micro-batch.
3. **Replay**: one Structured Streaming query per GroupBy
   (:func:`~timetile.streaming.job.stream_group_by`) reads a landing folder of Parquet files.
   Micro-batch ``i`` holds the rows ordered in ``[c(i-1), c(i))``: its files are moved into
   every landing folder, each query processes them, then every sampled left row with a time
   ``q`` in ``(c(i-1), c(i)]`` is fetched at ``q`` (:class:`~timetile.online.fetcher.
   Fetcher`). So a fetch at ``q`` finds every row before ``q`` streamed, and maybe rows of
   ``[q, c(i))`` too, which it must not count, as a service whose stream runs ahead of a
   request; a row known only after ``q`` but within the same micro-batch is seen, so late
   arrival is the leak check's to find (``verify(leaks=True)``), exactly.
4. **Write** each fetched row's features as JSON text (the response log's encoding,
   :func:`~timetile.online.jsonable.dumps`), which the comparison decodes to the offline
   column's type (:func:`~timetile.verify.values.decode_served`). A fetch serves no
   derivation (they are Spark SQL): derived columns are not compared in this tiling.

The streams' lateness covers the range, so no row is held back by a watermark. The work
folder must be local (files are moved into the landing folders, and the store is LMDB), so
this tiling runs on the embedded local Spark, not on a cluster.

Cost: one upload; per GroupBy, one job to stage its rows and one micro-batch per round that
has its rows (a Spark job each, about a second on local Spark); one fetch per distinct
sampled time, on the driver. The driver holds the sampled left rows (at most ``sample``)
and the cut times, never the sources' rows.
"""

from __future__ import annotations

import os
import shutil
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.group_by import GroupBy
from timetile.api.join import Join
from timetile.api.sources import EntitySource, EventSource
from timetile.core.timeutil import DAY_MS, ms_to_iso
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.online.jsonable import dumps
from timetile.spark.sources import project, quote, read_table, time_millis
from timetile.store.kv import open_store
from timetile.streaming.file_source import FileSource
from timetile.streaming.job import stream_group_by
from timetile.verify.tiling_report import TilingRun

__all__ = ["STREAM", "SampledRows", "replay"]

#: The tiling's name.
STREAM = "stream"
#: The most micro-batches one replay makes (each is a Spark job per GroupBy).
MAX_MICRO_BATCHES = 200
#: The staged rows' columns of their own: the raw row, its order, its micro-batch.
_RAW, _ORDER, _BATCH = "_tt_raw", "_tt_order", "_tt_batch"
#: How often an idle query looks for new files, seconds.
_TRIGGER_SECONDS = 0.2


@dataclass(frozen=True)
class SampledRows:
    """The sampled left rows as the replay fetches them.

    Attributes:
        rows: each row's number (the comparison's join key) and its left columns.
        row: the name of the number's column.
        times: each row's time, epoch milliseconds, in the order of ``rows``.

    """

    rows: Sequence[dict[str, Any]]
    row: str
    times: Sequence[int]


def replay(join: Join, spark: SparkSession, sampled: SampledRows, *, bounds: tuple[int, int],
           batch_rows: int, work: str, path: str,
           stage: Callable[[str], AbstractContextManager[Any]]) -> TilingRun:
    """Replay ``[low, high)`` through the streaming job and fetch each sampled row at its time.

    Writes the fetched features to ``path`` (see the module).

    Raises:
        ValueError: ``work`` is not a local folder.
        DefinitionError: the upload or a stream cannot work (a missing snapshot of the day
            before the range, a GroupBy that does not fit its rows).

    """
    if "://" in work:
        raise ValueError(f"the stream tiling needs a local work folder, not {work!r}: leave "
                         "work_dir out (a temporary folder), or give a local path")
    low, high = bounds
    began = time.perf_counter()
    folder = Path(work) / STREAM
    store = f"lmdb:{(folder / 'store').resolve()}"
    day = ms_to_iso(low - DAY_MS)[:10]
    with stage(f"{STREAM}: upload as of {day}"):
        upload(join, spark, day, store, slack_ms=high - low + DAY_MS)
    group_bys = list({part.group_by.name: part.group_by for part in join.join_parts}.values())
    with stage(f"{STREAM}: stage the rows of the range in micro-batches"):
        staged = [_rows(spark, group_by, f"parts[{index}].group_by", low, high)
                  for index, group_by in enumerate(group_bys)]
        cuts = _cuts(staged, low, high, batch_rows)
        for group_by, rows in zip(group_bys, staged, strict=True):
            _stage(rows, cuts, str(folder / "staged" / group_by.name))
    served: dict[int, dict[str, Any]] = {}
    fetched_batches = 0
    with ExitStack() as stack:
        streams = []
        for group_by in group_bys:
            landing = folder / "landing" / group_by.name
            landing.mkdir(parents=True)
            stream = stream_group_by(group_by, spark, FileSource(str(landing), "parquet"),
                                     store, str(folder / "checkpoints" / group_by.name),
                                     lateness=high - low, trigger_seconds=_TRIGGER_SECONDS)
            stack.callback(stream.stop)
            streams.append((group_by, landing, stream))
        fetcher = Fetcher(join, stack.enter_context(open_store(store)))
        for batch in range(len(cuts) - 1):
            with stage(f"{STREAM}: micro-batch {batch + 1}/{len(cuts) - 1}, to "
                       f"{ms_to_iso(cuts[batch + 1])}"):
                for group_by, landing, stream in streams:
                    _land(folder / "staged" / group_by.name, batch, landing)
                    stream.process_all_available()
                asked = _asked(sampled.times, cuts, batch)
                fetched_batches += bool(asked)
                served |= _fetch(fetcher, sampled, asked)
    shutil.rmtree(folder / "staged", ignore_errors=True)
    _write(served, sampled.row, path)
    return TilingRun(STREAM, len(cuts) - 1, fetched_batches, len(served),
                     time.perf_counter() - began,
                     f"no: the upload of {day}, then {len(cuts) - 1} "
                     f"micro-batch{'es' if len(cuts) > 2 else ''} of at most about "
                     f"{batch_rows:,} rows through the streaming job")


def _rows(spark: SparkSession, group_by: GroupBy, field: str, low: int, high: int
          ) -> DataFrame:
    """Return the raw rows a stream of ``group_by`` carries over ``[low, high)``, ordered.

    The raw columns, and :data:`_ORDER`: the row's time (an entity's mutation time), or its
    ``known_at`` where the source declares one. Rows without one are left out: they change
    no feature, in a stream or a backfill. No job runs.
    """
    source = group_by.source
    if isinstance(source, EntitySource):
        assert source.mutation_table is not None  # else it has no stream to replay
        raw = read_table(spark, source.mutation_table)
        column = source.known_at or source.mutation_time_column
        order = time_millis(column, raw.schema[column].dataType)
        return raw.select(F.struct(*[F.col(quote(name)) for name in raw.columns]).alias(_RAW),
                          order.alias(_ORDER)).where(_within(low, high))
    assert isinstance(source, EventSource)
    raw = read_table(spark, source.table)
    packed = raw.select(F.struct(*[F.col(quote(name)) for name in raw.columns]).alias(_RAW),
                        *[F.col(quote(name)) for name in raw.columns])
    projected = project(packed, source, f"{field}.source", keep=(_RAW,))
    column = source.known_at or source.time_column
    order = time_millis(column, projected.schema[column].dataType)
    return projected.select(_RAW, order.alias(_ORDER)).where(_within(low, high))


def _within(low: int, high: int) -> Column:
    return (F.col(_ORDER) >= low) & (F.col(_ORDER) < high)


def _cuts(staged: Sequence[DataFrame], low: int, high: int, batch_rows: int) -> list[int]:
    """Return ``low < c1 < … < high``: micro-batches of about ``batch_rows`` rows in all.

    One job counts the rows, one finds approximate quantiles of their order (1% rank error):
    at most :data:`MAX_MICRO_BATCHES` micro-batches, fewer where times repeat.
    """
    orders = staged[0].select(_ORDER)
    for frame in staged[1:]:
        orders = orders.unionByName(frame.select(_ORDER))
    total = orders.count()
    batches = min(MAX_MICRO_BATCHES, max(1, -(-total // batch_rows)))
    inner: list[float] = []
    if batches > 1:
        inner = orders.approxQuantile(_ORDER, [i / batches for i in range(1, batches)], 0.01)
    return sorted({low, high, *(int(cut) for cut in inner if low < cut < high)})


def _stage(rows: DataFrame, cuts: Sequence[int], folder: str) -> None:
    """Write ``rows``'s raw columns as Parquet, one folder per micro-batch: one job."""
    batch = F.lit(0)
    for cut in cuts[1:-1]:
        batch = batch + (F.col(_ORDER) >= cut).cast("int")
    rows.select(f"{_RAW}.*", batch.alias(_BATCH)).write.partitionBy(_BATCH).parquet(folder)


def _land(staged: Path, batch: int, landing: Path) -> None:
    """Move micro-batch ``batch``'s files into the landing folder (a rename: whole at once)."""
    for part in sorted((staged / f"{_BATCH}={batch}").glob("*.parquet")):
        os.replace(part, landing / f"{batch:05d}-{part.name}")


def _asked(times: Sequence[int], cuts: Sequence[int], batch: int) -> range:
    """Return the positions (in ascending ``times``) of the rows fetched after ``batch``.

    Those of times in ``(c(batch), c(batch + 1)]``, the range's first instant with the first.
    """
    low = bisect_left(times, cuts[0]) if batch == 0 else bisect_right(times, cuts[batch])
    return range(low, bisect_right(times, cuts[batch + 1]))


def _fetch(fetcher: Fetcher, sampled: SampledRows, asked: range) -> dict[int, dict[str, Any]]:
    """Fetch each asked row at its own time; return its features by row number."""
    by_time: dict[int, list[dict[str, Any]]] = {}
    for position in asked:
        by_time.setdefault(sampled.times[position], []).append(sampled.rows[position])
    served = {}
    for at, rows in by_time.items():
        for row, result in zip(rows, fetcher.fetch(rows, at=at), strict=True):
            served[row[sampled.row]] = result.features
    return served


def _write(served: dict[int, dict[str, Any]], row: str, path: str) -> None:
    """Write one row per fetched left row: its number and each feature as JSON text."""
    names = sorted({name for features in served.values() for name in features})
    numbers = sorted(served)
    columns = {row: pa.array(numbers, pa.int64())} | {
        name: pa.array([dumps(served[number].get(name)) for number in numbers], pa.string())
        for name in names}
    Path(path).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), str(Path(path) / "part-00000.parquet"))
