"""``stream_group_by``: a Spark Structured Streaming job that keeps a GroupBy's tiles fresh.

Events arrive from a stream source (:mod:`timetile.streaming.sources`); for a GroupBy of an
entity source, the stream is its change log (CDC): mutation rows shaped like its
mutation table, written as mutation tiles (:mod:`timetile.store.entity_records`) and
counted by their mutation time exactly as events by theirs. Each micro-batch
goes through the source's ``where`` and ``select`` and the time parsing of the batch side
(:mod:`timetile.spark.sources`), so stream and backfill see the same rows; then it is
repartitioned by the GroupBy's keys, so each (key, tile) belongs to one task, and **the
executors** write it with :class:`~timetile.store.tiles.TileWriter` (the aggregators'
own encoding, DESIGN §5-6), under the micro-batch id as the tile member. Only one row of
counts per task comes back to the driver.

Restart safety. Spark's checkpoint journals each micro-batch's source offsets before running
it; after a crash, the restarted query reruns the last unfinished batch with the same id and
the same events. Its entries are keyed (key, tile, batch id), so the rerun rewrites them: the
store ends as if the job had never stopped. The stream's own decisions (the watermark a batch
ran with, the counts) are kept per GroupBy in the store (:mod:`timetile.streaming.state`), so
a rerun decides the same.

Late events. Every event lands in one count of
:class:`~timetile.streaming.state.StreamCounts`, reported per batch (a log line,
:attr:`TileStream.batches`) and in total (:attr:`TileStream.totals`, and the record in the
store), never dropped silently:

- before the upload's day end: ``late``: the batch records (or the next upload) hold them;
- older than the watermark, the greatest event time of the earlier micro-batches minus the
  allowed ``lateness`` (Spark's ``withWatermark`` rule, which the query also declares, so
  Spark's progress reports the same watermark): ``behind_watermark``: the next upload adds
  them. Within the lateness, out-of-order events are written like any other;
- a null or unparseable time, or a null key (or, for a mutation, a null ``is_before``):
  ``unusable``, as offline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from timetile.api.errors import DefinitionError, Problem
from timetile.api.group_by import GroupBy
from timetile.api.interval_join import IntervalJoin
from timetile.api.schema import group_by_problems
from timetile.api.sources import EntitySource, EventSource
from timetile.core.timeutil import ms_to_iso
from timetile.spark.entities import IS_BEFORE, MUTATION_TIME, mutation_rows
from timetile.spark.sorted_groups import sorted_by_groups, whole_groups
from timetile.spark.sources import (
    TIME,
    check_time_column,
    coarse_schema,
    project,
    quote,
    read_table,
    time_millis,
)
from timetile.spark.time_columns import watermark_instant
from timetile.store.entity_records import ROW_TIME, MutationWriter
from timetile.store.kv import KVStore, absolute_uri, open_store, redacted_uri
from timetile.store.layout import GroupByMeta, feature_signature
from timetile.store.tiles import StreamWriter, TileWriter, read_meta
from timetile.streaming.file_source import CORRUPT, MALFORMED, flag_malformed
from timetile.streaming.interval_join import JOINED, KIND, joined_stream, start_stateful
from timetile.streaming.sources import StreamSource, lateness_ms, parse_source
from timetile.streaming.state import (
    StreamCounts,
    StreamOwnershipError,
    StreamState,
    begin,
    read_state,
    write_state,
)

log = logging.getLogger(__name__)

#: The event time as a timestamp, for Spark's watermark.
EVENT_TS = "_tt_event_ts"
_COUNTS = ("written", "late", "behind_watermark", "unusable", "tiles")
_TASK_SCHEMA = ", ".join(f"{name} long" for name in (*_COUNTS, "max_time"))


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did.

    Attributes:
        batch: the micro-batch id (the tile member).
        counts: its events, by what became of them.
        watermark: the watermark it ran with, epoch ms (None before any event).
        day_end: the upload's day end it ran against, epoch ms.
        max_time: the greatest event time seen through it, epoch ms (None if none).
        replay: the store already held this batch: a rerun after a restart.
        seconds: its wall time on the driver.
        rows: what the stream carries: ``"events"``, or an entity source's ``"mutations"``.

    """

    batch: int
    counts: StreamCounts
    watermark: int | None
    day_end: int
    max_time: int | None
    replay: bool
    seconds: float
    rows: str = "events"

    def describe(self, group_by: str) -> str:
        """One line for logs and the command line."""
        counts, rows = self.counts, self.rows
        line = (f"{group_by} batch {self.batch}{' (replay)' if self.replay else ''}: "
                f"{counts.written:,} {rows} written in {counts.tiles:,} tiles")
        if counts.late:
            line += f", {counts.late:,} late (before the upload's day end)"
        if counts.behind_watermark:
            mark = ms_to_iso(self.watermark) if self.watermark is not None else "-"
            line += f", {counts.behind_watermark:,} behind the watermark {mark}"
        if counts.not_written:
            line += " (the next upload adds them)"
        if counts.unusable:
            line += (f", {counts.unusable:,} unusable (null time or key"
                     f"{', or no is_before' if rows == 'mutations' else ''})")
        return line + f" in {self.seconds:.1f} s"


class _PartitionWriter:
    """Per task: write this partition's keys' tiles; yield one row of counts.

    Picklable: a store URI, a :class:`~timetile.store.tiles.StreamWriter`, the member and
    the watermark.
    """

    def __init__(self, store_uri: str, writer: StreamWriter, member: str,
                 watermark: int | None) -> None:
        self.store_uri = store_uri
        self.writer = writer
        self.member = member
        self.watermark = watermark

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Write each whole key group of the (key-sorted) partition; O(rows)."""
        totals = dict.fromkeys(_COUNTS, 0)
        latest: int | None = None
        store: KVStore | None = None
        try:
            for table in whole_groups(batches, self.writer.keys):
                store = store or open_store(self.store_uri)
                report = self.writer.write(store, table, self.member, watermark=self.watermark)
                for name in _COUNTS:
                    totals[name] += getattr(report, name)
                top = pc.max(table.column(TIME)).as_py()
                if top is not None and (latest is None or top > latest):
                    latest = int(top)
        finally:
            if store is not None:
                store.close()
        yield pa.RecordBatch.from_pydict({**{k: [v] for k, v in totals.items()},
                                          "max_time": [latest]},
                                         schema=pa.schema([(k, pa.int64()) for k in
                                                           (*_COUNTS, "max_time")]))


class TileStream:
    """A running stream of one GroupBy into a store: the query, and what it has done.

    Attributes:
        group_by: the definition.
        store_uri: where it writes.
        lateness_ms: the allowed lateness.
        query: the Spark query (set once started).
        batches: this run's micro-batches, in order (a replayed batch appears again).
        totals: the counts of every batch of this query so far, across restarts (from the
            stream's record in the store; ``stream_totals`` reads them without a stream).

    """

    def __init__(self, group_by: GroupBy, store_uri: str, lateness_ms: int,
                 on_batch: Callable[[BatchReport], None] | None = None) -> None:
        self.group_by = group_by
        self.store_uri = store_uri
        self.lateness_ms = lateness_ms
        self.on_batch = on_batch
        self.query: StreamingQuery | None = None
        self.batches: list[BatchReport] = []
        self.totals = StreamCounts()

    def write_batch(self, frame: DataFrame, batch_id: int) -> BatchReport:
        """Write one micro-batch's events as tiles; Spark calls it through ``foreachBatch``.

        Promise: calling it again with the same ``batch_id`` and the same events (what a
        restarted query does) leaves the store exactly as the first call left it. Cost: one
        Spark job (a shuffle of the batch by key, then the writes on the executors), two
        store reads and one store write on the driver.

        Raises:
            LookupError: the GroupBy has no upload in the store.
            StreamOwnershipError: another query writes this GroupBy's tiles in the store, the
                store holds no record of this checkpoint's past batches, or the upload is of
                another definition than the stream's.

        """
        began = time.perf_counter()
        spark = frame.sparkSession
        query_id = spark.sparkContext.getLocalProperty("sql.streaming.queryId") or (
            str(self.query.id) if self.query is not None else None)
        if query_id is None:
            raise RuntimeError("write_batch runs inside a started stream: use stream_group_by")
        name = self.group_by.name
        with open_store(self.store_uri) as store:
            meta = read_meta(store, self.group_by)
            previous = read_state(store, name)
        if meta.signature != feature_signature(self.group_by):
            raise StreamOwnershipError(
                f"GroupBy {name!r} was uploaded with another definition than this stream's "
                "(its aggregations, windows, columns, or its source's where, select or time "
                "columns differ), so its tiles would hold series or rows the fetchers do not "
                "read, or lack some they do. Fix: upload these definitions "
                "(which resets the stream), then restart the stream from a new checkpoint")
        watermark, before = begin(previous, name, query_id, batch_id, self.lateness_ms)
        writer = stream_writer(self.group_by, meta)
        keys = list(self.group_by.keys)
        task = _PartitionWriter(self.store_uri, writer, str(batch_id), watermark)
        # one row of counts per task: summed here, which spares Spark an aggregation stage
        tasks = (sorted_by_groups(frame, keys)
                 .mapInArrow(task, _TASK_SCHEMA).collect())
        counts = StreamCounts(*(sum(int(row[c] or 0) for row in tasks) for c in _COUNTS))
        seen = [t for t in (previous.max_time if previous else None,
                            *(row["max_time"] for row in tasks)) if t is not None]
        max_time = max(seen) if seen else None
        with open_store(self.store_uri) as store:
            write_state(store, name, StreamState(query_id, batch_id, watermark, max_time,
                                                 before, counts, self.lateness_ms))
        report = BatchReport(batch_id, counts, watermark, meta.day_end, max_time,
                             previous is not None and previous.batch == batch_id,
                             time.perf_counter() - began,
                             "mutations" if meta.row_columns else "events")
        self.totals = before + counts
        self.batches.append(report)
        (log.warning if counts.not_written else log.info)("%s", report.describe(name))
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    def foreach_batch(self, frame: DataFrame, batch_id: int) -> None:
        """Spark's ``foreachBatch`` callback: :meth:`write_batch`."""
        self.write_batch(frame, batch_id)

    def _started(self) -> StreamingQuery:
        if self.query is None:
            raise RuntimeError("the stream has not started")
        return self.query

    def await_termination(self, timeout: int | None = None) -> bool | None:
        """Wait for the query to end (an ``until_idle`` run ends by itself); re-raise its error.

        Returns None without ``timeout``, else whether it ended within ``timeout`` seconds.
        """
        return self._started().awaitTermination(timeout)

    def process_all_available(self) -> None:
        """Block until every event available now is written (for tests and catch-up)."""
        self._started().processAllAvailable()

    def stop(self) -> None:
        """Stop the query; a restart from the same checkpoint carries on where it stopped."""
        self._started().stop()

    @property
    def is_active(self) -> bool:
        """Whether the query still runs."""
        return self.query is not None and self.query.isActive


def stream_totals(store: KVStore, group_by: str) -> StreamCounts | None:
    """Return the counts of every batch the stream of ``group_by`` wrote to ``store``.

    None when no stream has written one.
    """
    state = read_state(store, group_by)
    return None if state is None else state.totals


def _schema(spark: SparkSession, group_by: GroupBy,
            schema: StructType | str | None) -> StructType:
    """Return the raw rows' schema: given, or the batch source's (read without a job).

    The batch source of an entity GroupBy's stream is its mutation table.
    """
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        try:
            parsed = StructType.fromDDL(schema)
        except AnalysisException as error:  # ParseException is one too
            raise DefinitionError.single(
                f"stream of {group_by.name!r}", "schema", f"{schema!r} is not a schema: "
                f"{str(error).splitlines()[0][:200]}",
                "write Spark DDL of the raw rows, e.g. 'user_id BIGINT, ts BIGINT, amount "
                "DOUBLE'") from None
        assert isinstance(parsed, StructType)
        return parsed
    source = group_by.source
    table = source.table if isinstance(source, EventSource) else source.mutation_table
    return read_table(spark, table).schema


def stream_writer(group_by: GroupBy, meta: GroupByMeta) -> StreamWriter:
    """Return the writer of micro-batches that :func:`events_frame` made."""
    if isinstance(group_by.source, EntitySource):
        return MutationWriter(group_by, meta, mutation_time_column=TIME,
                              is_before_column=IS_BEFORE, row_time_column=ROW_TIME)
    return TileWriter(group_by, meta, time_column=TIME)


#: (stream key type, upload key type) pairs whose every value the store's key encoding reads
#: as the upload's key: the same type, or an int read as a string's digits or as a float.
_KEY_READINGS = frozenset({*((kind, kind) for kind in ("int", "string", "bool", "float")),
                           ("int", "string"), ("int", "float")})


def events_frame(group_by: GroupBy, spark: SparkSession, raw: DataFrame, meta: GroupByMeta,
                 *, lateness_ms: int = 0, field: str = "group_by",
                 watermark: bool = True) -> DataFrame:
    """Return raw source rows as a micro-batch of :meth:`TileStream.write_batch` takes them.

    Applies the source's ``where`` and ``select`` and parses the times as the batch side
    does (:mod:`timetile.spark.sources`), adds :data:`~timetile.spark.sources.TIME` and
    declares Spark's watermark on it (unless ``watermark`` is False: rows of a streaming
    join, whose query has its own); keeps the columns :func:`stream_writer` reads. For an
    entity source the rows are mutations (:func:`timetile.spark.entities.mutation_rows`):
    ``TIME`` is the mutation time, the row's own time is :data:`ROW_TIME`. Works on a
    streaming or a static ``raw`` (on a static one the watermark does nothing). No job runs.

    Raises:
        DefinitionError: the GroupBy does not fit the rows' schema, or string times would be
            read outside UTC.

    """
    source = group_by.source
    exempt = None
    if CORRUPT in raw.columns:  # a line the source could not read whole: all null, unusable
        exempt = MALFORMED  # and past the source's where, so that it is counted
        raw = flag_malformed(raw)
    if isinstance(source, EntitySource):
        rows = _nulled_where_malformed(
            mutation_rows(raw, source, f"{field}.source", meta.row_columns, exempt))
        types = coarse_schema(rows.select(*meta.row_columns))
        problems = group_by_problems(group_by, types, f"{field}.")
        problems += [Problem(f"{field}.source", f"the change stream's column {column!r} is "
                             f"{types[column]}, the snapshot's is {kind}", "cast it in the "
                             "source's select, or send it with the snapshot's type")
                     for column, kind in zip(meta.row_columns, meta.row_types, strict=True)
                     if types[column] != kind]
        frame = rows.select(*meta.row_columns, F.col(TIME).alias(ROW_TIME),
                            F.col(MUTATION_TIME).alias(TIME), IS_BEFORE)
    else:
        frame = _nulled_where_malformed(
            project(raw, source, f"{field}.source", keep=[exempt] if exempt else [],
                    exempt=exempt))
        column = group_by.time_column
        assert column is not None
        check_time_column(spark, frame, column, f"{field}.source.time_column")
        types = coarse_schema(frame)
        problems = group_by_problems(group_by, types, f"{field}.")
        problems += [Problem(f"{field}.source", f"the stream's key column {key!r} is "
                             f"{types[key]}, the upload's is {kind}", "cast it in the source's "
                             "select, or read the stream with the upload's schema (the "
                             "default)")
                     for key, kind in zip(group_by.keys, meta.key_types, strict=True)
                     if (types.get(key, kind), kind) not in _KEY_READINGS]
        frame = frame.withColumn(TIME, time_millis(column, frame.schema[column].dataType))
    if problems:
        raise DefinitionError(f"GroupBy {group_by.name!r}", problems)
    # the watermark's column saturates at Spark's timestamps' ends; the job's own watermark
    # reads TIME
    frame = frame.withColumn(EVENT_TS, watermark_instant(F.col(TIME)))
    if watermark:
        frame = frame.withWatermark(EVENT_TS, f"{lateness_ms} milliseconds")
    return frame.select(*stream_writer(group_by, meta).columns)


def _nulled_where_malformed(frame: DataFrame) -> DataFrame:
    """Null every column of the malformed rows, and drop their flag.

    After the ``select``, which may fill nulls: such a row has no time, so the writer counts
    it unusable.
    """
    if MALFORMED not in frame.columns:
        return frame
    return frame.select(*[F.when(~F.col(MALFORMED), F.col(quote(column))).alias(column)
                          for column in frame.columns if column != MALFORMED])


def stream_group_by(
    group_by: GroupBy,
    spark: SparkSession,
    source: StreamSource | str | Mapping[str, StreamSource | str],
    store_uri: str,
    checkpoint: str,
    *,
    lateness: str | int = "1h",
    trigger_seconds: float = 5.0,
    until_idle: bool = False,
    schema: StructType | str | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    field: str = "group_by",
) -> TileStream:
    """Start a streaming query that writes ``group_by``'s events into the store's tiles.

    Promise: once a micro-batch is done, every fetch sees its events exactly as the backfill
    does (late ones aside, counted); a query stopped or killed at any point and restarted
    from ``checkpoint`` leaves the store as if it had never stopped. Cost per micro-batch:
    one Spark job (a shuffle of the batch by key; the executors write one ``put_tiles`` per
    chunk of whole keys, O(events) Python work), plus two store reads and one store write on
    the driver. Starting reads the upload's metadata and the source's schema; no job runs.

    Args:
        group_by: the definition; it must have been uploaded to ``store_uri`` (the tiles
            extend the upload's batch records: events before its day end are not written).
        spark: the session the query runs in.
        source: a stream source, or its URI (see
            :func:`~timetile.streaming.sources.parse_source`): ``dir:PATH?format=json`` or
            ``redis://host:port/db?stream=KEY``. For a GroupBy of an IntervalJoin, one per
            input: ``{"left": ..., "right": ...}`` (:mod:`timetile.streaming.interval_join`).
        store_uri: the store (see :func:`~timetile.store.kv.open_store`); the executors
            open it too, so on a cluster it must be reachable from them (Redis).
        checkpoint: Spark's checkpoint directory. Restart with the same one to carry on; one
            checkpoint owns a GroupBy's tiles in a store (a second one is refused).
        lateness: the allowed lateness of the watermark: a duration or milliseconds. For a
            GroupBy of an IntervalJoin it is the join inputs' lateness; the tiles' watermark
            trails it by the join's widest time bound, as far as a joined row may. A
            null-padded row comes out once the join's watermark settles it, so a micro-batch
            spanning more event time than the lateness can put one behind the tiles'
            watermark: it is counted there, and the next upload adds it.
        trigger_seconds: the micro-batch interval.
        until_idle: process what the source holds now, in as many micro-batches as its
            limits make, then stop (``Trigger.AvailableNow``): for catch-up runs and tests.
        schema: the raw rows' schema (a ``StructType`` or DDL); by default the batch
            source's table's (an entity source's mutation table's), read without a job.
        on_batch: called on the driver with each batch's report, after its tiles and its
            record are written and before Spark commits it (an exception fails the query
            there: the batch is rerun by the next start).
        field: how errors name the GroupBy.

    Returns:
        The running stream: its ``query``, ``batches`` and ``totals``.

    Raises:
        DefinitionError: the GroupBy does not fit the source's schema (for an entity source,
            the change stream's row columns must have the snapshot's types), or it is of an
            entity source without a ``mutation_table``.
        LookupError: the GroupBy has no upload in the store.

    """
    if isinstance(group_by.source, EntitySource) and group_by.source.mutation_table is None:
        raise DefinitionError.single(
            f"GroupBy {group_by.name!r}", f"{field}.source.mutation_table", "is not set, so "
            "the backfill sees no mutation and a stream of them would serve other values",
            "name the table the change stream lands in as the source's mutation_table")
    join = group_by.source.table if isinstance(group_by.source, EventSource) else None
    if not isinstance(join, IntervalJoin) and isinstance(source, Mapping):
        raise DefinitionError.single(
            f"GroupBy {group_by.name!r}", f"{field}.source", "reads one stream, and several "
            "stream sources were given", "give one stream source (or its URI)")
    allowed = lateness_ms(lateness)
    store_uri = absolute_uri(store_uri)  # the executors' folder may not be the driver's
    with open_store(store_uri) as store:
        meta = read_meta(store, group_by)  # fail before Spark starts anything
    if isinstance(join, IntervalJoin) and schema is not None:
        raise DefinitionError.single(
            f"GroupBy {group_by.name!r}", "schema", f"is given, and the GroupBy reads "
            f"{join.label}, whose inputs are read with their tables' schemas",
            "leave schema out; cast a column in its input source's select")
    if isinstance(join, IntervalJoin):
        raw, described = _joined(spark, group_by, join, source, allowed=allowed, field=field)
    else:
        assert not isinstance(source, Mapping)  # refused above
        stream = parse_source(source) if isinstance(source, str) else source
        raw, described = stream.read_stream(spark, _schema(spark, group_by, schema)), \
            stream.describe()
    try:
        frame = events_frame(group_by, spark, raw, meta, lateness_ms=allowed, field=field,
                             watermark=not isinstance(join, IntervalJoin))
    except DefinitionError as error:
        if schema is None:
            raise
        # the rows come from the stream: a column the source lacks is the schema's
        raise DefinitionError(f"{error.subject}, with the stream's schema {schema!s}",
                              error.problems) from None
    # a join lets a row out up to its widest bound behind its inputs' watermark: the tiles'
    # watermark trails by that much more, so such rows are written, not counted behind it
    trailing = join.parsed.widest_bound() if isinstance(join, IntervalJoin) else 0
    handle = TileStream(group_by, store_uri, allowed + trailing, on_batch)
    writer = (frame.writeStream.queryName(f"timetile_stream_{group_by.name}")
              .option("checkpointLocation", checkpoint).foreachBatch(handle.foreach_batch))
    if until_idle:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{round(trigger_seconds * 1000)} milliseconds")
    handle.query = (start_stateful(spark, writer.start) if isinstance(join, IntervalJoin)
                    else writer.start())
    log.info("streaming %s from %s into %s (lateness %s ms, checkpoint %s)", group_by.name,
             described, redacted_uri(store_uri), allowed, checkpoint)
    return handle


def _joined(spark: SparkSession, group_by: GroupBy, join: IntervalJoin, sources: object, *,
            allowed: int, field: str) -> tuple[DataFrame, str]:
    """Return the rows of the streaming join a GroupBy reads, and their sources described.

    The join's late and malformed rows come as lines the source could not read, so the tile
    writer counts them as unusable, never dropped silently.
    """
    if not isinstance(sources, Mapping):
        raise DefinitionError.single(
            f"GroupBy {group_by.name!r}", f"{field}.source", f"reads {join.label}, which "
            "streams from two sources", "give one per input: {'left': 'dir:landing/left', "
            "'right': 'dir:landing/right'}")
    rows = joined_stream(spark, join, sources, lateness_ms=allowed,
                         field=f"{field}.source.table")
    described = ", ".join(f"{side} {s if isinstance(s, str) else s.describe()}"
                          for side, s in sources.items())
    return unreadable_unless_joined(rows), described


def unreadable_unless_joined(rows: DataFrame) -> DataFrame:
    """Return a join's output with its late and malformed rows as unreadable lines.

    :data:`~timetile.streaming.file_source.CORRUPT` set on them (their kind), so
    :func:`events_frame` passes them through the GroupBy source's ``where`` and ``select``
    with every column null, and the tile writer counts them as unusable. No job runs.
    """
    return rows.select(*[F.col(quote(column)) for column in rows.columns if column != KIND],
                       F.when(F.col(KIND) != JOINED, F.col(KIND)).alias(CORRUPT))
