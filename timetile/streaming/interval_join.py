"""The streaming interval join on Spark Structured Streaming: an IntervalJoin's rows as they come.

Both inputs are read as streams (:mod:`timetile.streaming.sources`), go through their
source's ``where``, ``select`` and time parsing as the batch join's do, and are united into
one stream partitioned by the join's equi-keys: each key lies in one of :data:`KEY_GROUPS`
groups (by a hash of its value). Spark's ``transformWithState`` runs
:class:`~timetile.core.interval_join.IntervalJoinProcessor`, the one join processor, per
group (:class:`KeyJoin`): its buffers (each row with its used flag) live in Spark's state
store, versioned with each micro-batch in the checkpoint, so a query killed at any point
and restarted reruns its last batch from the state before it, and Spark's file sink commits
each batch's files once: the output is exactly an uninterrupted run's. A group, not a key,
holds a state value: each state call is a round trip to Spark's state server, and a
micro-batch makes a few per group it touches instead of per key.

Why ``transformWithState``: the join needs one value and one event-time timer per group,
and must see every late row to count it. ``applyInPandasWithState`` gives the first, but
with an event-time timeout Spark drops rows at or below the watermark before the function
sees them (measured: such a row vanished with no count); ``transformWithState`` runs on a
column stripped of the watermark, so every row reaches the processor. It needs the RocksDB
state store (set for the query when it starts, :func:`start_stateful`) and starts a Python
process on the driver to plan each query, seconds per query start (docs/interval_joins.md).

Watermarks. Spark keeps one watermark per query: each input declares its own (the least of
its time fields, less the allowed lateness) and the query's is the least of the two. Every
time field of both inputs is given that watermark at the start of each micro-batch, so it
is sound for each field; the processor keeps its per-field rules (``wm_state``, postpone
times), and an event-time timer per group fires when a buffered row can leave, so an outer
row comes out in the first micro-batch whose watermark settles it, even for a key that
receives nothing more. A group whose buffers are empty keeps no state. Spark drops no late
row before the processor sees it: the processor counts it.

Output rows are the batch join's columns (:func:`timetile.spark.interval_join.joined_rows`)
and :data:`KIND`: ``joined`` (joined and null-padded rows), ``late`` (an input row below the
watermark on arrival, kept with its input's columns, never silently dropped) and
``malformed`` (a line the file source could not read). Parquet output is partitioned by it;
:func:`read_join_output` reads the joined rows back.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from timetile.api.errors import DefinitionError
from timetile.api.interval_join import JOINED_AT, IntervalJoin
from timetile.api.sources import EventSource
from timetile.core.interval_join import IntervalJoinProcessor, Joined, JoinSpec, parse_condition
from timetile.core.interval_join.condition import LEFT, RIGHT
from timetile.core.interval_join.processor import joined_at
from timetile.spark.interval_join import check_inputs, output_names, timed_input
from timetile.spark.sources import coarse_type, project, quote, read_table, with_time
from timetile.spark.time_columns import watermark_instant
from timetile.streaming.file_source import MALFORMED as MALFORMED_FLAG
from timetile.streaming.file_source import flag_malformed
from timetile.streaming.sources import StreamSource, lateness_ms, parse_source

#: Spark's state store that ``transformWithState`` needs.
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_SETTINGS = {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
             "spark.sql.streaming.multipleWatermarkPolicy": "min"}
#: The output column that says what a row is: ``joined``, ``late`` or ``malformed``.
KIND = "_tt_kind"
JOINED, LATE, MALFORMED = "joined", "late", "malformed"
_SIDE, _BAD, _EVENT_TS = "_tt_side", MALFORMED_FLAG, "_tt_event_ts"
_STRUCT = {LEFT: "_tt_l", RIGHT: "_tt_r"}
_BUCKET = "_tt_bucket"
#: How many groups of keys the join keeps state for: each group's keys share one processor,
#: one state value and one timer, so a micro-batch makes a few round trips to Spark's state
#: server per group it touches, not per key (the measured choice is in
#: docs/interval_joins.md). A key lies in one group: a hot key is one group. Fixed, not taken
#: from the session: a checkpoint's state is laid out by it.
KEY_GROUPS = 256
#: A group's state: its processor's snapshot, and the event time of its one timer.
_STATE = StructType([StructField("snapshot", BinaryType()), StructField("timer", LongType())])


@dataclass(frozen=True)
class _Plan:
    """What the state processor needs: plain values, so the processor pickles small."""

    condition: str
    time_fields: Mapping[str, Sequence[str]]
    keys: Sequence[tuple[str, str]]
    how: str
    max_buffered: int | None

    def spec(self) -> JoinSpec:
        return JoinSpec(parse_condition(self.condition, self.time_fields), self.time_fields,
                        self.keys, self.how, self.max_buffered)


class KeyJoin(StatefulProcessor):
    """The join of one group of keys in ``transformWithState``: the join processor, restored.

    Per group the state is one value, the processor's snapshot (its buffered rows with their
    used flags), and one event-time timer: each call restores it, gives it the query's
    watermark, then the group's rows of the micro-batch (none when the timer fired), saves
    it and moves the timer to :meth:`~IntervalJoinProcessor.next_eviction`. Cost per call:
    O(b) to restore and save the group's b buffered rows, plus the processor's own, and two
    to four round trips to Spark's state server (read, write, and the timer when it moves).
    """

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self._timer: int | None = None
        self._mark = 0

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Open the group's state; parse the condition once per task."""
        self.handle = handle
        self.state = handle.getValueState("join", _STATE)
        self.spec = self.plan.spec()

    def handleInputRows(self, key: Any, rows: Iterator[Row],  # noqa: N802, ARG002
                        timerValues: TimerValues) -> Iterator[Row]:  # noqa: N803
        """Join the group's rows of this micro-batch; yield the rows out, late ones marked."""
        processor, out = self._restored(timerValues)
        for row in rows:
            alias = row[_SIDE]
            if row[_BAD]:
                out.append(self._row(alias, None, MALFORMED))
                continue
            values = row[_STRUCT[alias]]  # a dict in PySpark 4.3, a Row before
            values = values.asDict() if isinstance(values, Row) else dict(values)
            late = processor.counts.late
            found = processor.row(alias, values)
            if processor.counts.late > late:
                out.append(self._row(alias, values, LATE))
            out += [self._joined(item) for item in found if isinstance(item, Joined)]
        yield from self._saved(processor, out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N802, N803, ARG002
                           expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803, ARG002
                           ) -> Iterator[Row]:
        """Give the group's processor the risen watermark; yield the rows it lets out."""
        processor, out = self._restored(timerValues, fired=True)
        yield from self._saved(processor, out)

    def close(self) -> None:
        """Nothing to release."""

    def _restored(self, timer_values: TimerValues, *, fired: bool = False,
                  ) -> tuple[IntervalJoinProcessor, list[Row]]:
        saved = self.state.get()
        self._timer = None if saved is None or fired else saved[1]  # Spark removes a fired one
        self._mark = timer_values.getCurrentWatermarkInMs()
        processor = (IntervalJoinProcessor.restore(self.spec, pickle.loads(saved[0]), deep=False)
                     if saved is not None else IntervalJoinProcessor(self.spec))
        found: list[Any] = []
        if self._mark > 0:  # Spark's watermark starts at 0: none yet
            for time_field in self.spec.fields:
                found += processor.watermark(time_field, self._mark)
        return processor, [self._joined(item) for item in found if isinstance(item, Joined)]

    def _saved(self, processor: IntervalJoinProcessor, out: list[Row]) -> Iterator[Row]:
        """Save the group's state and move its one timer; each state call is a round trip."""
        due = processor.next_eviction()
        if due is not None:  # above the watermark: Spark would fire (and drop) one at or below
            due = max(due, self._mark + 1)
        if self._timer is not None and self._timer != due:
            self.handle.deleteTimer(self._timer)
        if due is not None:
            if self._timer != due:
                self.handle.registerTimer(due)
            self.state.update((pickle.dumps(processor.snapshot(deep=False)), due))
        else:
            self.state.clear()
        yield from out

    def _joined(self, joined: Joined) -> Row:
        return self._out(joined.left, joined.right, joined_at(self.spec, joined), JOINED)

    def _row(self, alias: str, values: Mapping[str, Any] | None, kind: str) -> Row:
        return self._out(values if alias == LEFT else None, values if alias == RIGHT else None,
                         None, kind)

    @staticmethod
    def _out(left: Mapping[str, Any] | None, right: Mapping[str, Any] | None,
             time: int | None, kind: str) -> Row:
        return Row(**{_STRUCT[LEFT]: None if left is None else dict(left),
                      _STRUCT[RIGHT]: None if right is None else dict(right),
                      JOINED_AT: time, KIND: kind})


def joined_stream(spark: SparkSession, join: IntervalJoin,
                  sources: Mapping[str, StreamSource | str], *, lateness_ms: int = 0,
                  field: str = "source") -> DataFrame:
    """Return the join's rows as a streaming DataFrame: the batch join's columns and :data:`KIND`.

    ``sources`` gives a stream source (or its URI) per input, ``left`` and ``right``; each is
    read with its batch table's schema. No job runs.

    Raises:
        DefinitionError: naming ``{field}``, as the batch join, or when an input is itself a
            join (a chain runs in batch only) or ``sources`` lacks an input.

    """
    inputs: dict[str, DataFrame] = {}
    for alias, side in ((LEFT, "left"), (RIGHT, "right")):
        source = getattr(join, side)
        if isinstance(source, IntervalJoin):
            raise DefinitionError.single(
                "source", f"{field}.{side}", f"is {source.label}: a chain of joins runs in "
                "batch (backfill, upload), not yet as one stream",
                "stream the inner join to Parquet (timetile join stream) and read that "
                "folder as an input")
        if side not in sources:
            raise DefinitionError.single(
                "source", f"{field}.{side}", "has no stream source",
                f"give one, e.g. {{'{side}': 'dir:landing/{side}'}}")
        stream = sources[side]
        stream = parse_source(stream) if isinstance(stream, str) else stream
        inputs[alias] = _stream_input(spark, source, stream, f"{field}.{side}")
    plain = {alias: frame.drop(_BAD) for alias, frame in inputs.items()}
    check_inputs(join, plain, field)
    names = output_names(join, plain, field)
    structs = {alias: StructType(list(frame.schema.fields)) for alias, frame in plain.items()}
    united: DataFrame | None = None
    for alias, frame in inputs.items():
        position = 0 if alias == LEFT else 1
        times = [F.col(name) for name in join.input_time_fields[alias]]
        least = times[0] if len(times) == 1 else F.least(*times)
        shaped = frame.select(
            F.pmod(F.xxhash64(*[_hashable(frame, pair[position]) for pair in join.key_pairs]),
                   F.lit(KEY_GROUPS)).alias(_BUCKET),
            F.lit(alias).alias(_SIDE), F.col(_BAD),
            *[(F.struct(*plain[alias].columns) if side == alias
               else F.lit(None).cast(structs[side])).alias(_STRUCT[side])
              for side in (LEFT, RIGHT)],
            watermark_instant(least).alias(_EVENT_TS),
        ).withWatermark(_EVENT_TS, f"{lateness_ms} milliseconds")
        united = shaped if united is None else united.unionByName(shaped)
    assert united is not None
    # the query keeps the watermark, the column loses it: Spark drops no late row before the
    # processor counts it
    united = united.withColumn(_EVENT_TS, F.unix_millis(_EVENT_TS))
    plan = _Plan(join.condition, join.input_time_fields, join.key_pairs, join.how,
                 join.max_buffered)
    output = StructType([*(StructField(_STRUCT[alias], structs[alias]) for alias in (LEFT, RIGHT)),
                         StructField(JOINED_AT, LongType()), StructField(KIND, StringType())])
    joined = (united.groupBy(_BUCKET)
              .transformWithState(KeyJoin(plan), output, "Append", "EventTime"))
    return joined.select(*[F.col(f"{_STRUCT[alias]}.{quote(name)}").alias(renamed)
                           for alias in (LEFT, RIGHT) for name, renamed in names[alias].items()],
                         JOINED_AT, KIND)


def _hashable(frame: DataFrame, column: str) -> Column:
    """Return a key column as a value that hashes alike on both inputs when keys are equal.

    Keys of one coarse type may differ in width (``int`` and ``bigint``), and ``-0.0``
    equals ``0.0``: each is hashed as the widest type, zero unsigned.
    """
    kind = coarse_type(frame.schema[column].dataType)
    value = F.col(quote(column))
    if kind == "int":
        return value.cast("bigint")
    if kind == "float":
        wide = value.cast("double")
        return F.when(wide == 0, F.lit(0.0)).otherwise(wide)
    if kind == "timestamp":
        return value.cast("timestamp")
    return value


def _stream_input(spark: SparkSession, source: EventSource, stream: StreamSource,
                  field: str) -> DataFrame:
    """Return one input's stream: projected, times in milliseconds, and the malformed flag."""
    raw = flag_malformed(stream.read_stream(spark, read_table(spark, source.table).schema))
    frame = project(raw, source, field, keep=[_BAD], exempt=_BAD)
    return timed_input(with_time(spark, frame, source, field), source, field)


@dataclass
class JoinStream:
    """A running streaming join into a Parquet folder.

    Attributes:
        join: the definition.
        spark: the session it runs in.
        output: the folder (Spark's file sink: a batch's files are committed once).
        query: the Spark query.
        schema: the output's columns, :data:`KIND` included.

    """

    join: IntervalJoin
    spark: SparkSession
    output: str
    query: StreamingQuery
    schema: StructType

    def read(self, kind: str = JOINED) -> DataFrame:
        """Return the rows of one :data:`KIND` written so far. No job runs."""
        return read_join_output(self.spark, self.output, kind, self.schema)

    def process_all_available(self) -> None:
        """Block until every row available now is joined and written."""
        self.query.processAllAvailable()

    def await_termination(self, timeout: int | None = None) -> bool | None:
        """Wait for the query to end (an ``until_idle`` run ends by itself); re-raise its error."""
        return self.query.awaitTermination(timeout)

    def stop(self) -> None:
        """Stop the query; a restart from the same checkpoint carries on where it stopped."""
        self.query.stop()


def stream_join(join: IntervalJoin, spark: SparkSession,
                sources: Mapping[str, StreamSource | str], output: str, checkpoint: str, *,
                lateness: str | int = "1h", trigger_seconds: float = 5.0,
                until_idle: bool = False) -> JoinStream:
    """Start a streaming query that writes the join's rows to Parquet under ``output``.

    Promise: with no row late, once the watermark has passed every row's bound, ``output``
    holds exactly the batch join's rows (:func:`read_join_output`; the newest rows, whose
    bound it has not passed, wait in the state); a query killed at any point and restarted
    from ``checkpoint`` writes exactly what an uninterrupted one writes. Cost per
    micro-batch: one shuffle of the batch's rows by key group; per group with rows or a due
    timer, O(b) to restore and save its b buffered rows, plus the join processor's work.

    Args:
        join: the definition; its inputs are event sources (a chain runs in batch).
        spark: the session the query runs in.
        sources: a stream source or its URI per input: ``{"left": ..., "right": ...}``.
        output: the Parquet folder, partitioned by :data:`KIND`.
        checkpoint: Spark's checkpoint directory (the offsets and the state store).
        lateness: how far behind each input's newest time a row may come: a duration or ms.
        trigger_seconds: the micro-batch interval.
        until_idle: process what the sources hold now, then stop.

    """
    rows = joined_stream(spark, join, sources, lateness_ms=lateness_ms(lateness))
    writer = (rows.writeStream.queryName(f"timetile_join_{join.name}").format("parquet")
              .partitionBy(KIND).option("path", output)
              .option("checkpointLocation", checkpoint).outputMode("append"))
    writer = (writer.trigger(availableNow=True) if until_idle else
              writer.trigger(processingTime=f"{round(trigger_seconds * 1000)} milliseconds"))
    return JoinStream(join, spark, output, start_stateful(spark, writer.start),
                      rows.schema)


def start_stateful(spark: SparkSession, start: Callable[[], StreamingQuery]) -> StreamingQuery:
    """Call ``start()`` with the settings the join's query needs, then restore the session's.

    RocksDB as the state store (``transformWithState`` needs it), and the least of the
    inputs' watermarks as the query's (Spark's default ``min`` policy, which the join's
    soundness rests on). A query copies the session's settings when it starts and keeps
    them in its checkpoint, so the user's other queries are untouched.
    """
    previous: dict[str, str | None] = {name: spark.conf.get(name, None) for name in _SETTINGS}
    for name, value in _SETTINGS.items():
        spark.conf.set(name, value)
    try:
        return start()
    finally:
        for name, before in previous.items():
            if before is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, before)


def read_join_output(spark: SparkSession, output: str, kind: str = JOINED,
                     schema: StructType | None = None) -> DataFrame:
    """Return the rows of one :data:`KIND` a streaming join wrote to ``output``. No job runs.

    ``schema`` (:attr:`JoinStream.schema`) reads a folder that holds no row yet; without it
    Spark infers the schema from the files.
    """
    reader = spark.read if schema is None else spark.read.schema(schema)
    return reader.parquet(output).where(F.col(KIND) == kind).drop(KIND)
