"""The ``stream`` tiling of ``verify``: the sources replayed through the streaming job (seed 001).

Seed 001 counts a replay in real-time order among the cuts of time that must all give the
same numbers. :func:`replay` makes it with the online side's real parts:

1. **Upload** (:func:`~timetile.offline.upload.upload`) every GroupBy as of the day before
   the range, into an LMDB store of the work folder, its records answering exactly over the
   whole range (``slack_ms``).
2. **Stage** each GroupBy's raw rows whose time lies in the range (an event source's
   table, an entity source's mutation table: what a stream carries; what the upload lacks).
   A row's place in the replay is its time, or, where the source declares ``known_at``,
   when it became known, kept within ``[its time, high)``: a row that arrived late is
   streamed late, and one never known in the range comes last. Approximate quantiles of
   those places cut the range into micro-batches of about ``batch_rows`` rows across all
   sources (at most :data:`MAX_MICRO_BATCHES`); one Spark job per GroupBy writes its rows,
   partitioned by micro-batch.
3. **Replay**: one Structured Streaming query per GroupBy
   (:func:`~timetile.streaming.job.stream_group_by`) reads a landing folder of Parquet files.
   Micro-batch ``i`` holds the rows placed in ``[c(i-1), c(i))``: its files are moved into
   every landing folder, each query processes them, then every sampled left row with a time
   ``q`` in ``(c(i-1), c(i)]`` is fetched at ``q`` (:class:`~timetile.online.fetcher.
   Fetcher`). So a fetch at ``q`` finds every row before ``q`` streamed, and maybe rows of
   ``[q, c(i))`` too, which it must not count, as a service whose stream runs ahead of a
   request. A row known after ``q`` is missed by the fetch when a cut falls between its
   time and its arrival, as online; within one micro-batch it is seen, so late arrival is
   the leak check's to find exactly (``verify(leaks=True)``).
4. **Write** each fetched row's features as JSON text (the response log's encoding,
   :func:`~timetile.online.jsonable.dumps`), which the comparison decodes to the offline
   column's type (:func:`~timetile.verify.values.decode_served`). A fetch serves no
   derivation (they are Spark SQL): derived columns are not compared in this tiling.

The streams' lateness covers the range, so no row is held back by a watermark; the rows a
stream did not write (unusable ones: a null key) and the fetches flagged stale are counted
in the run's note. The work folder must be local (files are moved into the landing folders,
and the store is LMDB), so this tiling runs on the embedded local Spark, not on a cluster.

Cost: one upload; one job to count the staged rows and one to find the cuts; per GroupBy,
one job to stage its rows and one Spark job per micro-batch that holds its rows; one fetch
per distinct sampled time, on the driver. The driver holds the sampled left rows (at most
``sample``) and the cut times, never the sources' rows.
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
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.errors import DefinitionError
from timetile.api.group_by import GroupBy
from timetile.api.join import Join
from timetile.api.sources import EntitySource, EventSource
from timetile.core.locations import local_path
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
#: The staged rows' columns of their own: the raw row, its place, its micro-batch.
_RAW, _ORDER, _BATCH = "_tt_raw", "_tt_order", "_tt_batch"
#: How often an idle query looks for new files, seconds.
_TRIGGER_SECONDS = 0.2


@dataclass(frozen=True)
class SampledRows:
    """The sampled left rows as the replay fetches them.

    Attributes:
        rows: each row's number (the comparison's join key) and its left columns.
        number_column: the name of the number's column.
        times: each row's time, epoch milliseconds, ascending, in the order of ``rows``.

    """

    rows: Sequence[dict[str, Any]]
    number_column: str
    times: Sequence[int]


def replay(join: Join, spark: SparkSession, sampled: SampledRows, *, bounds: tuple[int, int],
           batch_rows: int, work: str, path: str,
           stage: Callable[[str], AbstractContextManager[Any]]) -> TilingRun:
    """Replay ``[low, high)`` through the streaming job and fetch each sampled row at its time.

    Promise: every sampled row is fetched once, at its time, after every row placed before
    it has been streamed (see the module); its features go to ``path`` as JSON text.

    Args:
        join: the verified Join (its left rows are ``sampled``).
        spark: the session, local.
        sampled: the sampled left rows, ascending by time.
        bounds: the range ``[low, high)``, epoch milliseconds; ``low`` a UTC midnight.
        batch_rows: rows per micro-batch, across all sources.
        work: the run's local work folder (the store, the staged and landed files, the
            checkpoints go in its ``stream`` folder).
        path: the folder the fetched features are written to.
        stage: shows each step as a stage of the progress.

    Raises:
        ValueError: ``work`` is not a local folder, or the upload as of the day before the
            range cannot work (a missing snapshot of that day, say).
        RuntimeError: a stream failed, named with its micro-batch.

    """
    local = local_path(work)
    if local is None:
        raise ValueError(f"the stream tiling needs a local work folder, not {work!r}: leave "
                         "work_dir out (a temporary folder), or give a local path")
    low, high = bounds
    began = time.perf_counter()
    folder = local / STREAM
    store = f"lmdb:{folder / 'store'}"
    day = ms_to_iso(low - DAY_MS)[:10]
    with stage(f"{STREAM}: upload as of {day}"):
        try:
            upload(join, spark, day, store, slack_ms=high - low + DAY_MS)
        except DefinitionError as error:
            raise ValueError(f"the stream tiling uploads as of {day}, the day before the "
                             f"range, and that cannot work: {error}") from error
    fields: dict[str, tuple[GroupBy, str]] = {}  # each GroupBy once, named by its first part
    for index, part in enumerate(join.join_parts):
        fields.setdefault(part.group_by.name, (part.group_by, f"parts[{index}].group_by"))
    with stage(f"{STREAM}: stage the rows of the range in micro-batches"):
        staged = [_rows(spark, group_by, field, low, high)
                  for group_by, field in fields.values()]
        cuts = _cuts(staged, low, high, batch_rows)
        for name, rows in zip(fields, staged, strict=True):
            _stage(rows, cuts, str(folder / "staged" / name))
    served: dict[int, dict[str, Any]] = {}
    fetched_batches = stale = 0
    with ExitStack() as stack:
        streams = []
        for group_by, field in fields.values():
            landing = folder / "landing" / group_by.name
            landing.mkdir(parents=True)
            stream = stream_group_by(group_by, spark, FileSource(str(landing), "parquet"),
                                     store, str(folder / "checkpoints" / group_by.name),
                                     lateness=high - low, trigger_seconds=_TRIGGER_SECONDS,
                                     field=field)
            stack.callback(stream.stop)
            streams.append((group_by.name, landing, stream))
        fetcher = Fetcher(join, stack.enter_context(open_store(store)))
        for batch in range(len(cuts) - 1):
            with stage(f"{STREAM}: micro-batch {batch + 1}/{len(cuts) - 1}, to "
                       f"{ms_to_iso(cuts[batch + 1])}"):
                for name, landing, stream in streams:
                    _land(folder / "staged" / name, batch, landing)
                    try:
                        stream.process_all_available()
                    except Exception as error:
                        first = str(error).strip().splitlines()[:1] or [type(error).__name__]
                        raise RuntimeError(f"the stream tiling's stream of {name} failed in "
                                           f"micro-batch {batch + 1}: {first[0]}") from error
                asked = _asked(sampled.times, cuts, batch)
                fetched_batches += bool(asked)
                fetched, stale_now = _fetch(fetcher, sampled, asked)
                served |= fetched
                stale += stale_now
        unwritten = sum(stream.totals.unusable + stream.totals.not_written
                        for _, _, stream in streams)
    shutil.rmtree(folder / "staged", ignore_errors=True)
    _write(served, sampled.number_column, path)
    notes = [f"{count:,} {what}" for count, what in (
        (unwritten, "rows the streams did not write (unusable, as a null key; or late)"),
        (stale, "fetches flagged stale")) if count]
    return TilingRun(STREAM, len(cuts) - 1, fetched_batches, len(served),
                     time.perf_counter() - began,
                     f"no: the upload of {day}, then {len(cuts) - 1} "
                     f"micro-batch{'es' if len(cuts) > 2 else ''} of about "
                     f"{batch_rows:,} rows through the streaming job"
                     + "".join(f"; {note}" for note in notes))


def _rows(spark: SparkSession, group_by: GroupBy, field: str, low: int, high: int
          ) -> DataFrame:
    """Return the raw rows of ``[low, high)`` a stream of ``group_by`` carries, placed.

    The raw columns (:data:`_RAW`), and :data:`_ORDER`, the row's place in the replay (see
    the module). A row's time is an event's time, or an entity's mutation time; rows without
    one are left out: they change no feature, in a stream or a backfill. No job runs.
    """
    source = group_by.source
    if isinstance(source, EntitySource):  # the change stream: raw mutations, their time
        assert source.mutation_table is not None  # else it has no stream to replay
        table, at = source.mutation_table, source.mutation_time_column
    else:
        table, at = source.table, source.time_column
    raw = read_table(spark, table)
    columns = [F.col(quote(name)) for name in raw.columns]
    rows = raw.select(F.struct(*columns).alias(_RAW), *columns)  # the raw row, kept whole
    if isinstance(source, EventSource):  # its time is a column of its select
        rows = project(rows, source, f"{field}.source", keep=(_RAW,))
    happened = time_millis(at, rows.schema[at].dataType)
    known = happened if source.known_at is None else F.coalesce(
        time_millis(source.known_at, rows.schema[source.known_at].dataType), happened)
    return rows.where((happened >= low) & (happened < high)).select(
        _RAW, F.greatest(happened, F.least(known, F.lit(high - 1))).alias(_ORDER))


def _cuts(staged: Sequence[DataFrame], low: int, high: int, batch_rows: int) -> list[int]:
    """Return ``low < c1 < … < high``: micro-batches of about ``batch_rows`` rows in all.

    One job counts the rows, one finds approximate quantiles of their places, to a quarter
    of a micro-batch's share of rank: at most :data:`MAX_MICRO_BATCHES` micro-batches, fewer
    where times repeat. A source that several GroupBys read counts once per GroupBy, as each
    stream carries its rows.
    """
    orders = staged[0].select(_ORDER)
    for frame in staged[1:]:
        orders = orders.unionByName(frame.select(_ORDER))
    total = orders.count()
    batches = min(MAX_MICRO_BATCHES, max(1, -(-total // batch_rows)))
    inner: list[float] = []
    if batches > 1:
        inner = orders.approxQuantile(_ORDER, [i / batches for i in range(1, batches)],
                                      min(0.01, 1 / (4 * batches)))
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


def _fetch(fetcher: Fetcher, sampled: SampledRows, asked: range
           ) -> tuple[dict[int, dict[str, Any]], int]:
    """Fetch each asked row at its own time.

    Returns its features by row number, and how many results came back flagged stale.
    """
    by_time: dict[int, list[dict[str, Any]]] = {}
    for position in asked:
        by_time.setdefault(sampled.times[position], []).append(sampled.rows[position])
    served, stale = {}, 0
    for at, rows in by_time.items():
        for row, result in zip(rows, fetcher.fetch(rows, at=at), strict=True):
            served[row[sampled.number_column]] = result.features
            stale += bool(result.stale)
    return served, stale


def _write(served: dict[int, dict[str, Any]], row: str, path: str) -> None:
    """Write one row per fetched left row: its number and each feature as JSON text."""
    names = sorted({name for features in served.values() for name in features})
    numbers = sorted(served)
    columns = {row: pa.array(numbers, pa.int64())} | {
        name: pa.array([dumps(served[number].get(name)) for number in numbers], pa.string())
        for name in names}
    Path(path).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), str(Path(path) / "part-00000.parquet"))
