"""``upload``: a Spark job that writes each key's batch record as of the end of a day.

For every GroupBy of a Join (or one GroupBy), the events before the end of day ``ds`` that
any window can still reach are shuffled by key, and each key's record
(:mod:`timetile.core.batch_record`) is built and written **by the executors**, in batches of
``multi_put``: nothing but two counts comes back to the driver. The driver then writes the
GroupBy's metadata, which fetchers read, and expires the streamed tiles from before the
previous upload's day end and the end of the day before ``ds``, whichever is earlier
(:meth:`~timetile.store.kv.KVStore.expire_tiles`): the records hold their events, and a
fetcher one upload behind still finds its tiles. Re-running for the same ``ds`` rewrites the
same records: an upload never double counts. Each upload stamps its records with a
generation above every earlier upload's, so once it is served the records of keys it found
no row of (left by an earlier upload, of this day or another) read as empty. A ``ds`` older
than the stored upload is refused (its records would need expired tiles).

For an entity source the record of a key is its rows in the snapshot partition of ``ds``
(:mod:`timetile.store.entity_records`); the mutations after it come from the stream.

This is the one place the online package runs Spark: it reads sources exactly as the
backfill does (``timetile.spark.sources`` and ``timetile.spark.entities``), so both
sides see the same rows.
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.errors import DefinitionError, Problem, expect_argument
from timetile.api.group_by import GroupBy
from timetile.api.join import Join
from timetile.api.schema import group_by_problems
from timetile.api.sources import EventSource
from timetile.core.aggregators.codec import decode, encode, expect_int
from timetile.core.batch_record import (
    DEFAULT_SLACK_MS,
    OnlineFeature,
    build_record,
)
from timetile.core.timeutil import DAY_MS, date_to_ms, format_duration, ms_to_iso
from timetile.core.windows import MAX_TIME, WindowKind
from timetile.spark.entities import DAY, load_entity
from timetile.spark.session import remote_master
from timetile.spark.sorted_groups import group_bounds, sorted_by_groups, whole_groups
from timetile.spark.sources import TIME, check_session, coarse_schema, load_events
from timetile.store.entity_records import LOOKUP_TYPES, ROW_TYPES, EntityRecord, plain_column
from timetile.store.kv import absolute_uri, open_store
from timetile.store.layout import (
    META_TABLE,
    STREAM_RESET,
    STREAM_TABLE,
    UPLOAD_TABLE,
    GroupByMeta,
    batch_table,
    encode_key,
    feature_signature,
    online_features,
    table_series,
    tile_table,
)

log = logging.getLogger(__name__)
#: The coarse types an online key column may have (see ``layout.encode_key``).
KEY_TYPES = ("int", "string", "bool", "float")
#: The longest GroupBy name online: its tables, ``tt_batch.NAME`` and ``tt_tiles.NAME``, are
#: at most 200 characters (``timetile.store.kv.check_table``).
MAX_NAME = 191
#: Records per ``multi_put`` from an executor.
PUT_BATCH = 500


@dataclass(frozen=True)
class UploadReport:
    """What an upload wrote, per GroupBy: ``{name: (keys, bytes)}``, and its day end.

    ``left_out`` counts, per GroupBy, the source rows no record holds: events whose time or
    a key is null, snapshot rows whose key is null, rows of a key longer than the store's
    keys may be (LMDB: 481 bytes, see ``LmdbStore.fits``).
    """

    ds: str
    day_end: int
    written: dict[str, tuple[int, int]]
    left_out: dict[str, int]


def _group_bys(target: Join | GroupBy) -> list[GroupBy]:
    if isinstance(target, GroupBy):
        return [target]
    return list({part.group_by.name: part.group_by for part in target.join_parts}.values())


class _RecordWriter(ABC):
    """Per partition: build each key's record and write them in batches.

    Picklable: it holds names and features, never the definition (whose source may be a
    DataFrame, which cannot travel to the executors).
    """

    def __init__(self, store_uri: str, group_by: GroupBy, meta: GroupByMeta) -> None:
        self.store_uri = store_uri
        self.keys = list(group_by.keys)
        self.table = batch_table(group_by.name)
        self.meta = meta

    @abstractmethod
    def record(self, group: pa.Table) -> bytes:
        """Return the record of one key's rows."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Write the records of this partition's keys; yield what it wrote and left out.

        Yields (records, bytes) written and the rows of the keys too long for the store
        (``KVStore.fits``), which are not written.
        """
        keys, table = self.keys, self.table
        pending: list[tuple[bytes, bytes]] = []
        written = size = too_long = 0
        with open_store(self.store_uri) as store:
            for whole in whole_groups(batches, keys):
                for begin, end in group_bounds(whole, keys):
                    group = whole.slice(begin, end - begin)
                    key = encode_key([group.column(k)[0].as_py() for k in keys],
                                     self.meta.key_types)
                    if not store.fits(key):
                        too_long += end - begin
                        continue
                    record = self.record(group)
                    pending.append((key, record))
                    written, size = written + 1, size + len(record)
                    if len(pending) >= PUT_BATCH:
                        store.multi_put(table, pending)
                        pending = []
            if pending:
                store.multi_put(table, pending)
        yield pa.RecordBatch.from_pydict({"records": [written], "bytes": [size],
                                          "too_long": [too_long]})


class _EventRecords(_RecordWriter):
    """Batch records (:mod:`timetile.core.batch_record`) of an event source's keys."""

    def __init__(self, store_uri: str, group_by: GroupBy, meta: GroupByMeta) -> None:
        super().__init__(store_uri, group_by, meta)
        self.features = online_features(group_by, meta.value_types)
        self.series = {feature.series: feature.value_type for feature in self.features}

    def record(self, group: pa.Table) -> bytes:
        """Sort the key's events by time and build its record."""
        group = group.take(pc.sort_indices(group, sort_keys=[(TIME, "ascending")]))
        times = group.column(TIME).to_numpy().astype(np.int64)
        return build_record(self.features, table_series(group, times, self.series),
                            self.meta.day_end, self.meta.slack,
                            signature=self.meta.signature, generation=self.meta.generation)


class _EntityRecords(_RecordWriter):
    """Entity records (:mod:`timetile.store.entity_records`): each key's snapshot rows."""

    def record(self, group: pa.Table) -> bytes:
        """Gather the key's row images and times."""
        columns = self.meta.row_columns
        images = (zip(*(plain_column(group.column(c)) for c in columns), strict=True)
                  if columns else [()] * group.num_rows)
        return EntityRecord(self.meta.day_end, tuple(zip(
            images, group.column(TIME).to_pylist(), strict=True)),
            self.meta.generation, self.meta.signature).to_bytes()


def _horizon(features: Sequence[OnlineFeature], day_end: int) -> int | None:
    """Return the earliest event time any record needs; None when a feature is lifetime."""
    if any(feature.window[0] is WindowKind.LIFETIME for feature in features):
        return None
    return min(feature.interval(day_end)[0] for feature in features)


@dataclass(frozen=True)
class _SourceRows:
    """What an upload reads of a GroupBy's source.

    Attributes:
        frame: every row of the source the upload looks at, with ``TIME``.
        schema: their columns' coarse types.
        row_columns: an entity source's row columns (empty for events).
        placed: which rows a record can hold: keys present (and, for events, a time).

    """

    frame: DataFrame
    schema: dict[str, str]
    row_columns: tuple[str, ...]
    placed: Column


def _source_rows(spark: SparkSession, group_by: GroupBy, ds: str, field: str) -> _SourceRows:
    """Load the events, or an entity source's snapshot partition of ``ds``.

    Raises:
        DefinitionError: the snapshot of ``ds`` is missing.

    """
    placed = F.lit(True)
    for key in group_by.keys:
        placed &= F.col(key).isNotNull()
    source = group_by.source
    if isinstance(source, EventSource):
        frame = load_events(spark, source, f"{field}.source")
        return _SourceRows(frame, coarse_schema(frame.drop(TIME)), (),
                           placed & F.col(TIME).isNotNull())
    tables = load_entity(spark, source, f"{field}.source")
    day = F.lit(date_to_ms(ds) // DAY_MS)
    if tables.partitions.where(F.col(DAY) == day).limit(1).count() == 0:
        raise DefinitionError.single(
            f"GroupBy {group_by.name!r}", f"{field}.source.snapshot_table",
            f"has no partition {ds} of {source.label}, so the rows as of its end are unknown",
            "upload a day whose snapshot has landed")
    frame = tables.snapshots.where(F.col(DAY) == day)
    schema = coarse_schema(frame.select(*tables.row_columns))
    return _SourceRows(frame, schema, tables.row_columns, placed)


def upload_group_by(group_by: GroupBy, spark: SparkSession, ds: str, store_uri: str,
                    *, slack_ms: int = DEFAULT_SLACK_MS, field: str = "group_by"
                    ) -> tuple[int, int, int]:
    """Upload one GroupBy's records as of the end of ``ds``.

    For an event source, each key's batch record; for an entity source, each key's rows in
    the snapshot partition of ``ds`` (:mod:`timetile.store.entity_records`).

    Returns (keys written, bytes written, source rows left out because a key, or an event's
    time, is null: counted with one more scan, and logged).

    Raises:
        DefinitionError: the GroupBy does not fit its source's schema, has keys (or row
            columns) of a type online records cannot hold, ``ds`` has not ended, is older
            than the stored upload, or its snapshot is missing, or an embedded store is given
            to executors that may run on other machines.

    """
    day_end = _check_arguments(spark, ds, store_uri, slack_ms)
    slack_ms = int(slack_ms)  # numpy's ints too
    # the executors' folder may not be the driver's
    store_uri = absolute_uri(os.fspath(store_uri))
    if day_end > time.time() * 1000:
        raise DefinitionError.single(
            f"GroupBy {group_by.name!r}", "ds", f"{ds} has not ended yet (UTC), so its rows "
            "are not all there", "upload a day that has ended; the stream covers today")
    _check_store(spark, store_uri)
    stored = _stored_meta(store_uri, group_by)
    previous = None if stored is None else stored.day_end
    if previous is not None and previous > day_end:
        raise DefinitionError.single(
            f"GroupBy {group_by.name!r}", "ds", f"the store holds it as of {ms_to_iso(previous)}, "
            f"after {ds}: the streamed tiles an older day's records need are expired",
            f"upload {ms_to_iso(previous - DAY_MS)[:10]} or later; rebuild an older day in a "
            "fresh store")
    rows = _source_rows(spark, group_by, ds, field)
    schema = rows.schema
    problems = group_by_problems(group_by, schema, f"{field}.")
    if len(group_by.name) > MAX_NAME:
        problems.append(Problem(f"{field}.name", f"has {len(group_by.name)} characters, and its "
                                f"online tables (tt_batch.NAME) take at most {MAX_NAME}",
                                "give it a shorter name"))
    problems += [Problem(f"{field}.keys", f"key {key!r} is {schema[key]}, which online keys "
                         "cannot be", f"cast it in the source's select to one of "
                         f"{', '.join(KEY_TYPES)}")
                 for key in group_by.keys if schema.get(key, "int") not in KEY_TYPES]
    problems += [Problem(f"{field}.source.select", f"row column {column!r} is "
                         f"{schema[column]}, which online row images cannot hold",
                         f"select it as one of {', '.join(ROW_TYPES)}, or leave it out")
                 for column in rows.row_columns if schema[column] not in ROW_TYPES]
    problems += [Problem(f"{field}.source.select", f"lookup column {column!r} is "
                         f"{schema[column]}, which online rows hold as a number, not as the "
                         "backfill returns it", "select it cast to a string (or as epoch "
                         "milliseconds) for the lookup")
                 for column in group_by.lookup_columns
                 if schema.get(column) in ROW_TYPES and schema[column] not in LOOKUP_TYPES]
    source = group_by.source
    period = source.period_ms if isinstance(source, EventSource) else None
    if period is not None and DAY_MS % period:
        # A feature at q is the one at floor(q, period), before the record's day end for
        # the first fetches after it: the record, built as of the day end, cannot answer.
        problems.append(Problem(f"{field}.source.period", f"{format_duration(period)} does "
                                "not divide a day, so the records, built as of each day's end, "
                                "cannot answer the first periods after it",
                                "serve a source whose period divides a day (1h, 6h, 8h, 1d); "
                                "the backfill takes any period"))
    if problems:
        raise DefinitionError(f"GroupBy {group_by.name!r}", problems)
    columns = sorted({a.column for a in group_by.aggregations or ()}
                     | {b for a in group_by.aggregations or () for b in a.buckets or ()})
    meta = GroupByMeta(day_end, slack_ms, tuple(schema[k] for k in group_by.keys),
                       {column: schema[column] for column in columns},
                       feature_signature(group_by), rows.row_columns,
                       tuple(schema[column] for column in rows.row_columns),
                       _next_generation(store_uri, group_by.name, stored))
    writer: _RecordWriter
    if rows.row_columns:
        writer = _EntityRecords(store_uri, group_by, meta)
        records = rows.frame.where(rows.placed).select(*rows.row_columns, TIME)
    else:
        writer = events = _EventRecords(store_uri, group_by, meta)
        usable = rows.placed & (F.col(TIME) < day_end)
        horizon = _horizon(events.features, day_end)
        if horizon is not None:
            usable &= F.col(TIME) >= horizon
        records = rows.frame.where(usable).select(  # a key may be aggregated too
            *dict.fromkeys([*group_by.keys, TIME, *columns]))
    totals: Any = (sorted_by_groups(records, group_by.keys)
                   .mapInArrow(writer, "records long, bytes long, too_long long")
                   .agg(F.sum("records").alias("records"), F.sum("bytes").alias("bytes"),
                        F.sum("too_long").alias("too_long"))
                   .first())
    if stored is not None and stored.signature != meta.signature:
        _reset_stream(store_uri, group_by.name)
    with open_store(store_uri) as store:  # after the records: a fetcher never sees a new
        store.multi_put(META_TABLE, [(group_by.name.encode(), meta.to_bytes())])  # day early
    # The records hold everything before day_end; a fetcher that has not yet re-read the
    # metadata reads tiles from the previous upload's day end on: keep those.
    _expire_tiles(store_uri, group_by.name,
                  min(day_end - DAY_MS, day_end if previous is None else previous))
    keys, size = int(totals["records"] or 0), int(totals["bytes"] or 0)
    log.info("uploaded %s: %s keys, %s bytes as of %s", group_by.name, f"{keys:,}",
             f"{size:,}", ds)
    return keys, size, _left_out(group_by.name, rows, int(totals["too_long"] or 0))


def _check_arguments(spark: object, ds: object, store_uri: object, slack_ms: object) -> int:
    """Return the end of day ``ds``, after refusing arguments of the wrong type, each named."""
    check_session(spark)
    expect_argument("store_uri", store_uri, (str, os.PathLike), "a store URI",
                    "give a str such as 'lmdb:/data/store' or 'redis://host:6379/0'")
    if isinstance(slack_ms, bool) or not isinstance(slack_ms, Integral) or slack_ms < 1:
        raise ValueError(f"slack_ms is {slack_ms!r}: give a positive int of milliseconds, "
                         f"e.g. the default {DEFAULT_SLACK_MS}")
    try:
        return date_to_ms(ds) + DAY_MS  # type: ignore[arg-type]
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"ds {ds!r} is not a day: write it as YYYY-MM-DD, e.g. "
                         "2024-01-31") from None


def _left_out(name: str, rows: _SourceRows, too_long: int) -> int:
    """Count the source rows no record holds (one more scan), and warn of them."""
    unplaced = int(rows.frame.agg(F.count_if(~rows.placed)).first()[0]  # type: ignore[index]
                   or 0)
    if unplaced:
        log.warning("%s: %s rows left out of the upload (a null key, or an event's null time)",
                    name, f"{unplaced:,}")
    if too_long:
        log.warning("%s: %s rows left out of the upload, of keys longer than the store's keys "
                    "may be (a fetch of such a key finds no record): shorten or hash them in "
                    "the source's select, or serve from Redis", name, f"{too_long:,}")
    return unplaced + too_long


def _stored_meta(store_uri: str, group_by: GroupBy) -> GroupByMeta | None:
    """Return the metadata of the GroupBy's last upload to the store (None if none)."""
    with open_store(store_uri) as store:
        data = store.multi_get(META_TABLE, [group_by.name.encode()])[0]
    try:
        return None if data is None else GroupByMeta.from_bytes(data)
    except ValueError:  # metadata of another version: the upload rewrites it
        return None


def _next_generation(store_uri: str, name: str, stored: GroupByMeta | None) -> int:
    """Take and record the generation of an upload of GroupBy ``name`` that starts now.

    Above the served upload's and every upload started before, finished or not
    (:data:`UPLOAD_TABLE`), so the records of keys this upload does not rewrite, a day
    uploaded again included, read as empty once it is served. Taken atomically
    (:meth:`~timetile.store.kv.KVStore.update`): uploads run side by side never share
    one. O(1).
    """
    served = 0 if stored is None else stored.generation

    def take(data: bytes | None) -> bytes:
        started = 0 if data is None else expect_int(decode(data), "upload generation")
        return encode(max(started, served) + 1)

    with open_store(store_uri) as store:
        return expect_int(decode(store.update(UPLOAD_TABLE, name.encode(), take)),
                          "upload generation")


def _reset_stream(store_uri: str, name: str) -> None:
    """Drop a GroupBy's streamed tiles, written under its old definition, and its stream.

    Tiles hold the series the old definition read: a fetcher of the new one would miss the
    events of any series they lack, silently. So they go, and the stream record becomes
    :data:`STREAM_RESET`: only a stream from a new checkpoint, which replays the landed
    events, may write the GroupBy again (:func:`timetile.streaming.state.begin`). Until it
    has, fetches after the day end see only the records. Runs before the new metadata is
    written, so the old stream is refused from then on.
    """
    with open_store(store_uri) as store:
        store.multi_put(STREAM_TABLE, [(name.encode(), STREAM_RESET)])
        dropped = store.expire_tiles(tile_table(name), MAX_TIME)
    log.warning("%s: the definition changed since the last upload: dropped its %s streamed "
                "tile entries and reset its stream; restart the stream from a new checkpoint",
                name, f"{dropped:,}")


def _expire_tiles(store_uri: str, name: str, before: int) -> None:
    """Delete the GroupBy's tiles from before ``before``; housekeeping, so a failure warns."""
    try:
        with open_store(store_uri) as store:
            expired = store.expire_tiles(tile_table(name), before)
    except Exception as error:  # any: the upload itself is done
        log.warning("%s: the tiles before %s were not expired (%s); the next upload retries",
                    name, ms_to_iso(before), error)
        return
    if expired:
        log.info("%s: expired %s tile entries from before %s", name, f"{expired:,}",
                 ms_to_iso(before))


def _check_store(spark: SparkSession, store_uri: str) -> None:
    """Refuse an embedded store for executors on other machines: each would write its own."""
    master = remote_master(spark)
    embedded = not store_uri.startswith(("redis://", "rediss://", "unix://"))
    if master is not None and embedded:
        raise DefinitionError.single(
            "upload", "store", f"{store_uri} is an embedded (LMDB) store, and the executors of "
            f"{master} may run on other machines, each writing its own copy",
            "upload to a store every executor reaches: redis://host:port/db")


def upload(target: Join | GroupBy, spark: SparkSession, ds: str, store_uri: str,
           *, slack_ms: int = DEFAULT_SLACK_MS) -> UploadReport:
    """Write the batch records of every GroupBy of ``target`` as of the end of day ``ds``.

    Args:
        target: a Join (each of its GroupBys once) or one GroupBy.
        spark: the session; the records are built and written by its executors.
        ds: the day, ``YYYY-MM-DD`` (UTC): records hold the events before its end.
        store_uri: where to write (see :func:`timetile.store.kv.open_store`); the
            executors open it too, so on a cluster it must be reachable from them (Redis).
        slack_ms: how long after the end of ``ds`` the records answer exactly.

    """
    expect_argument("target", target, (Join, GroupBy), "a tt.Join or tt.GroupBy",
                    "upload a Join's GroupBys, or one GroupBy")
    written, left_out = {}, {}
    for index, group_by in enumerate(_group_bys(target)):
        field = "group_by" if isinstance(target, GroupBy) else f"parts[{index}].group_by"
        keys, size, missed = upload_group_by(group_by, spark, ds, store_uri,
                                             slack_ms=slack_ms, field=field)
        written[group_by.name], left_out[group_by.name] = (keys, size), missed
    return UploadReport(ds, date_to_ms(ds) + DAY_MS, written, left_out)
