"""A source as it stood at a time: the one rule of what existed before a cut (seed 001).

Both checks of :mod:`timetile.verify` recompute features over sources cut at a time ``b``:
the tilings at each segment's end (:mod:`timetile.verify.invariance`), the leak check at each
left row's own time (:mod:`timetile.verify.leaks`). What existed before ``b`` is, here only:

- of an event source, the rows with a time before ``b``;
- of an entity source, the snapshots of days that ended by ``b`` and the mutations that
  happened before ``b``;
- with ``known_at`` (the leak check), of those only the rows known before ``b``.

No job runs: each cut is a lazy filter of the source's projected tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.sources import EntitySource, EventSource
from timetile.spark.entities import day_end_ms, partition_day
from timetile.spark.sources import TIME, load_events, project, read_table, time_millis

__all__ = ["Cut", "source_as_of"]


@dataclass(frozen=True)
class Cut:
    """Where to cut a source.

    Attributes:
        before: the time of the cut (epoch milliseconds), a Column: a literal for one cut
            of all rows, or a column of ``askers`` for a cut per asking row.
        known: also cut by the source's ``known_at``, where it declares one.
        askers: rows that each ask for their own cut, joined to the source on ``keys``
            (each source row copied to every asker of its keys); None for one cut.
        keys: the columns ``askers`` share with the source.
        drop: columns of ``askers`` that the cut source does not keep (``before``'s).

    """

    before: Column
    known: bool = False
    askers: DataFrame | None = None
    keys: Sequence[str] = ()
    drop: Sequence[str] = ()

    def rows(self, frame: DataFrame, kept: Column) -> DataFrame:
        """Return the rows of ``frame`` for which ``kept`` holds, per asker if any."""
        if self.askers is not None:
            frame = frame.join(self.askers, list(self.keys), "inner")
        return frame.where(kept).drop(*self.drop)

    def known_before(self, known_at: str | None, frame: DataFrame) -> Column:
        """Return what holds of the rows known before the cut (all, without ``known_at``)."""
        if not self.known or known_at is None:
            return F.lit(True)
        return time_millis(known_at, frame.schema[known_at].dataType) < self.before


def source_as_of(spark: SparkSession, source: EventSource | EntitySource, field: str,
                 cut: Cut) -> EventSource | EntitySource:
    """Return ``source`` as it stood at ``cut`` (see the module).

    ``field`` names the source in errors (``parts[0].source``). No job runs. An event
    source comes back projected. An entity source cut once keeps its raw tables, cut, and
    its own ``select`` and ``where``: its snapshot days are listed before ``where``, as the
    backfill lists them. Cut per asker, see :func:`_entity_per_asker`.
    """
    before = cut.before
    if isinstance(source, EventSource):
        events = load_events(spark, source, field)  # projected, with its time as TIME
        kept = cut.rows(events, (F.col(TIME) < before)
                        & cut.known_before(source.known_at, events))
        return EventSource(kept.drop(TIME), source.time_column, period=source.period)
    if cut.askers is not None:
        return _entity_per_asker(spark, source, field, cut)
    snapshots = read_table(spark, source.snapshot_table)
    partition = source.partition_column
    day = partition_day(partition, snapshots.schema[partition].dataType)
    ended = replace(source, snapshot_table=snapshots.where(day_end_ms(day) <= before))
    if source.mutation_table is None:
        return ended
    mutations = read_table(spark, source.mutation_table)
    time = time_millis(source.mutation_time_column,
                       mutations.schema[source.mutation_time_column].dataType)
    return replace(ended, mutation_table=mutations.where(
        (time < before) & cut.known_before(source.known_at, mutations)))


#: The column marking :func:`_entity_per_asker`'s rows that only say a snapshot day exists.
DAY_MARK = "verify_snapshot_day"


def _entity_per_asker(spark: SparkSession, source: EntitySource, field: str,
                      cut: Cut) -> EntitySource:
    """Return an entity source whose rows are each asker's cut, under the askers' columns.

    The rows are projected first (the keys to join on may be the ``select``'s), so the
    result selects the projected names and the askers' columns. The backfill lists a
    source's snapshot days before its ``where``, and an asker's copies cover only the days
    its key had rows: one row per snapshot day, marked by :data:`DAY_MARK` and filtered out
    by the result's ``where``, keeps every day of the source listed, so that no day reads
    as missing.
    """
    partition = source.partition_column
    raw = read_table(spark, source.snapshot_table)
    snapshots = project(raw, source, field, keep=(partition,))
    day = partition_day(partition, snapshots.schema[partition].dataType)
    copied = cut.rows(snapshots, day_end_ms(day) <= cut.before)
    marks = raw.select(partition).distinct().select(
        *(F.col(name) if name == partition else F.lit(None).cast(copied.schema[name].dataType)
          .alias(name) for name in copied.columns), F.lit(True).alias(DAY_MARK))
    cut_snapshots = copied.withColumn(DAY_MARK, F.lit(None).cast("boolean")).unionByName(marks)
    select = [name for name in copied.columns if name != partition]
    kept = replace(source, snapshot_table=cut_snapshots, select=select,
                   where=[f"`{DAY_MARK}` IS NULL"])
    if source.mutation_table is None:
        return kept
    happened = (source.mutation_time_column, source.is_before_column,
                *([source.known_at] if source.known_at else []))
    mutations = project(read_table(spark, source.mutation_table), source,
                        f"{field}.mutation_table", keep=happened)
    time = time_millis(source.mutation_time_column,
                       mutations.schema[source.mutation_time_column].dataType)
    copied_mutations = cut.rows(mutations, (time < cut.before)
                                & cut.known_before(source.known_at, mutations))
    return replace(kept, mutation_table=copied_mutations.withColumn(
        DAY_MARK, F.lit(None).cast("boolean")))
