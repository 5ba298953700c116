"""The demo's last step: upload the checkout model's state, stream the next morning, serve.

After the backfill, ``timetile demo`` uploads the batch records as of the last backfilled
day into an embedded store next to the data, lands the next morning's events of every event
source of the join (and the mutations of every entity source: the listing ratings' change
log) as JSON-lines files (``landing/{group_by}/events-0000.json``, …, in time order),
streams them into the store with the Structured Streaming job
(:func:`~timetile.streaming.job.stream_group_by`, one query per GroupBy, checkpoints under
``checkpoints/{group_by}``), and fetches a few checkouts' features at noon the next day: the
same numbers a backfill gives at that millisecond (DESIGN §5).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from timetile.api.join import Join
from timetile.api.sources import EventSource
from timetile.core.equality import same_value
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.backfill import backfill
from timetile.offline.upload import UploadReport, upload
from timetile.online.fetcher import Fetcher, FetchResult
from timetile.store.kv import open_store
from timetile.streaming.file_source import FileSource, land_json_lines
from timetile.streaming.job import stream_group_by
from timetile.streaming.state import StreamCounts

#: How many JSON-lines files each GroupBy's morning is landed as (the stream reads the files
#: there in one micro-batch; files landed later would go in the next).
LANDED_FILES = 3


@dataclass(frozen=True)
class DemoFetch:
    """What the demo served: the upload, the streamed events and the fetched rows."""

    store_uri: str
    upload: UploadReport
    landing: Path
    """The folder the morning's events were landed in, one subfolder per GroupBy."""
    counts: StreamCounts
    """The streams' totals, all GroupBys together."""
    batches: int
    """Micro-batches run, all GroupBys together."""
    at: int
    rows: list[dict[str, Any]]
    results: list[FetchResult]
    mismatches: list[str]
    """Features whose served value differs from the backfill's at the same time (none)."""

    @property
    def streamed(self) -> int:
        """The events the streams wrote into tiles."""
        return self.counts.written


def serve_demo_fetch(spark: SparkSession, join: Join, data_dir: Path, ds: str,
                     keys: list[dict[str, Any]]) -> DemoFetch:
    """Upload ``join``, stream the next morning from landed files, and fetch ``keys`` at noon.

    The records are as of the end of ``ds``. The events (or, of an entity source, the
    mutations) of the next day's first 12 hours of every source of the join are landed as
    :data:`LANDED_FILES` JSON-lines files per GroupBy, then each GroupBy's Structured
    Streaming job reads its folder until idle. The store, the landing and checkpoint folders
    are next to ``data_dir`` and started afresh on every run, so the demo is repeatable
    (the stream's own record lives in the store).
    """
    root = data_dir.parent
    store_dir, landing, checkpoints = _store_dir(data_dir), root / "landing", root / "checkpoints"
    group_bys = {part.group_by.name: part.group_by for part in join.join_parts}
    _remove_store(data_dir)
    for name in group_bys:
        shutil.rmtree(landing / name, ignore_errors=True)
        shutil.rmtree(checkpoints / name, ignore_errors=True)
    store_uri = f"lmdb://{store_dir.resolve()}"
    uploaded = upload(join, spark, ds, store_uri)
    day_end = date_to_ms(ds) + DAY_MS
    at = day_end + 12 * HOUR_MS
    counts, batches = StreamCounts(), 0
    for name, group_by in group_bys.items():
        source = group_by.source
        table, column = ((source.table, source.time_column) if isinstance(source, EventSource)
                         else (source.mutation_table, source.mutation_time_column))
        assert isinstance(table, str)
        assert column is not None
        folder = landing / name
        land_morning(table, column, day_end, at, folder)
        stream = stream_group_by(group_by, spark, FileSource(str(folder.resolve()), "json"),
                                 store_uri, str((checkpoints / name).resolve()),
                                 until_idle=True)
        stream.await_termination()
        counts += stream.totals
        batches += len(stream.batches)
    with open_store(store_uri) as store:
        results = Fetcher(join, store).fetch(keys, at=at)
    return DemoFetch(store_uri, uploaded, landing, counts, batches, at, keys, results,
                     _check(spark, join, keys[0], at, results[0]))


def land_morning(table: str, time_column: str, start: int, end: int, folder: Path, *,
                 files: int = LANDED_FILES) -> list[Path]:
    """Land the rows of ``table`` in ``[start, end)`` as JSON-lines files, in time order.

    Written and moved in as a producer should (:func:`land_json_lines`), so Spark's file
    source reads them in order.
    """
    events = pq.read_table(table)
    times = pc.fill_null(events.column(time_column), -1)
    morning = events.filter(pc.and_(pc.greater_equal(times, start), pc.less(times, end)))
    rows = sorted(morning.to_pylist(), key=lambda row: row[time_column])
    return land_json_lines(folder, rows, files)


def store_problem(data_dir: Path) -> str | None:
    """Return why the demo may not replace the store next to ``data_dir``, or None.

    The demo starts its store afresh, so a folder there that is not an LMDB store (someone
    else's files) is refused, before any work.
    """
    folder = _store_dir(data_dir)
    if not folder.exists():
        return None
    if not folder.is_dir() or not (folder / "data.mdb").exists() or any(
            entry.name not in ("data.mdb", "lock.mdb") for entry in folder.iterdir()):
        return (f"{folder} is not the demo's LMDB store, which the demo replaces. Fix: move "
                "it, or choose another --data-dir")
    return None


def _store_dir(data_dir: Path) -> Path:
    return data_dir.parent / "store"


def demo_folders(data_dir: Path) -> list[Path]:
    """Return the folders the demo reads or starts afresh: no output may overlap them."""
    root = data_dir.parent
    return [data_dir, _store_dir(data_dir), root / "landing", root / "checkpoints"]


def _remove_store(data_dir: Path) -> None:
    """Remove the demo's previous LMDB store, refusing a folder that is something else."""
    problem = store_problem(data_dir)
    if problem is not None:
        raise FileExistsError(problem)
    if _store_dir(data_dir).exists():
        shutil.rmtree(_store_dir(data_dir))


def _check(spark: SparkSession, join: Join, key: dict[str, Any], at: int,
           served: FetchResult) -> list[str]:
    """Backfill the fetched row at the same millisecond; list the features that differ."""
    columns = list(key)
    left = spark.createDataFrame([(*key.values(), at)], [*columns, "ts"])
    offline = backfill(Join(join.name, EventSource(left, time_column="ts"), join.parts),
                       spark).first()
    assert offline is not None
    return [name for name, value in served.features.items()
            if not same_value(value, offline[name])]
