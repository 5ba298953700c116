"""The demo's last step: upload the checkout model's state and serve a fetch from it.

After the backfill, ``timetile demo`` uploads the batch records as of the last backfilled
day into an embedded store next to the data, streams the next morning's purchases into it
as tiles, and fetches a few checkouts' features at noon the next day, the same numbers a
backfill would give at that millisecond (DESIGN §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from timetile.api.join import Join
from timetile.api.sources import EventSource
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.backfill import backfill
from timetile.online.fetcher import Fetcher, FetchResult
from timetile.online.store import open_store
from timetile.online.tiles import put_events
from timetile.online.upload import UploadReport, upload
from timetile.testing.compare import same_value


@dataclass(frozen=True)
class DemoFetch:
    """What the demo served: the upload, the streamed events and the fetched rows."""

    store_uri: str
    upload: UploadReport
    streamed: int
    at: int
    rows: list[dict[str, Any]]
    results: list[FetchResult]
    mismatches: list[str]
    """Features whose served value differs from the backfill's at the same time (none)."""


def serve_demo_fetch(spark: SparkSession, join: Join, data_dir: Path, ds: str,
                     keys: list[dict[str, Any]]) -> DemoFetch:
    """Upload ``join``, stream the next morning, and fetch ``keys`` at noon.

    The records are as of the end of ``ds``; the events of the next day's first 12 hours
    of every event source of the join are written as streaming tiles, read from Parquet in
    the driver: fine for the demo's size, where a deployment streams them
    (``put_events`` per micro-batch). The store is embedded, next to ``data_dir``.
    """
    store_uri = f"lmdb://{(data_dir.parent / 'store').resolve()}"
    uploaded = upload(join, spark, ds, store_uri)
    day_end = date_to_ms(ds) + DAY_MS
    at = day_end + 12 * HOUR_MS
    streamed = 0
    group_bys = {part.group_by.name: part.group_by for part in join.join_parts}
    with open_store(store_uri) as store:
        for group_by in group_bys.values():
            source = group_by.source
            assert isinstance(source, EventSource)
            assert isinstance(source.table, str)
            events = pq.read_table(source.table)
            times = pc.fill_null(events.column(source.time_column), -1)
            morning = events.filter(pc.and_(pc.greater_equal(times, day_end),
                                            pc.less(times, at)))
            streamed += put_events(store, group_by, morning, f"demo-{ds}").written
        results = Fetcher(join, store).fetch(keys, at=at)
    return DemoFetch(store_uri, uploaded, streamed, at, keys, results,
                     _check(spark, join, keys[0], at, results[0]))


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
