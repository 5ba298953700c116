"""The naive oracle for entity sources: state, aggregations, lookups, entity left sides.

The contract of DESIGN §2 ("Entity sources", "Accuracy") spelled out in plain Spark SQL, no
UDFs and none of timetile's engine, as :mod:`timetile.testing.oracle` does for events; that
module's :func:`~timetile.testing.oracle.naive_backfill` calls this one for entity parts and
entity left sides. The rules, for a query at q with as-of time a (:func:`~timetile.testing.
oracle.as_of`: q under TEMPORAL, the start of q's UTC day under SNAPSHOT):

1. Days are UTC: ``day(t) = floor(t / 86_400_000)``. Snapshot partition d (``YYYY-MM-DD``
   or DATE) holds the table as of the end of day d. A mutation row is a row image plus
   ``mutation_ts`` (epoch ms or timestamp) and ``is_before`` (true: the image before a
   change, a retraction; false: the image after, an insertion).
2. The state at a is a multiset of row images: partition ``day(a) − 1``, plus the after
   images with ``day_start(day(a)) <= mutation_ts < a``, minus the before images in that
   range. A mutation at exactly a does not count; SNAPSHOT sees partition ``day(q) − 1``.
   Each distinct image (every column, nulls equal) is kept
   ``count(snapshot) + count(after) − count(before)`` times when that is positive: the
   oracle assumes consistent data, where each before image retracts a present row.
3. An aggregation reads the non-null values of its column over the state rows with the
   query's keys; a windowed one keeps the rows whose ``time_column`` t has
   ``start(a) <= t < end(a)`` (as event windows do), a lifetime one every row, null time
   included, except for the decayed ops, which weigh a row by its age and leave out a row
   without a time. Empty: ``count``, ``unique_count``, ``approx_unique_count`` 0, others null.
4. A lookup (``aggregations=None``) returns, per non-key selected column, the value of the
   state row with the query's keys that sorts last by (the row time when the source has a
   ``time_column``, then the selected non-key columns in select order), nulls first in
   each; all null without a row. Values keep the source's types (not widened).
5. When partition ``day(a) − 1`` is absent from the snapshot table (no row has it, before
   ``where``), every feature of the part is null for that query, counts included.
6. An entity left side: every row of every snapshot partition d is a left row (duplicates
   stay), queried at ``day_start(d + 1)``; its columns are the snapshot's after ``where``
   and ``select``, with the partition column appended when ``select`` left it out. Its
   mutations are not read.

Row images are the snapshot's columns after ``where`` and ``select`` less the partition
column; mutations are filtered and selected the same way, so they must hold those columns.

Cost: for each distinct (keys, as-of) of the queries, the key's rows of one partition and
of one day's mutations are joined and grouped: O(q·r) for q queries and r rows per key and
day. Keep the data small.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import DataType, NumericType, TimestampType

from timetile.api import EntitySource, JoinPart
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.spark.sources import TIME, quote, read_table, time_millis
from timetile.testing.oracle import (
    _queries,
    _widened,
    aggregate_features,
    value_columns,
)
from timetile.testing.sql_ops import (
    _AT,
    _EVENT_TIME,
    _QUERY_TIME,
    SQL_OPS,
    SqlOp,
    _partial,
    _query_key,
    _value,
)

# Internal column names (a source column must not use the ``_tt_`` prefix).
_DAY = "_tt_d"  # a snapshot row's partition as an epoch day
_AT_DAY = "_tt_ad"  # day(a) of a query
_MUTATION_TIME = "_tt_mt"
_IS_BEFORE = "_tt_before"
_SIGN = "_tt_sign"  # +1 a snapshot row or an after image, -1 a before image
_COPIES = "_tt_n"
_STATE_AT = "_tt_sa"  # the as-of time a state row belongs to
_MISSING = "_tt_missing"  # partition day(a) - 1 is absent
_ROW = "_tt_row"  # true on a state row (a lookup's "there is a row")
_PARTITIONS = "_tt_pd"


def _state_key(index: int) -> str:
    return f"_tt_sk{index}"


def _day_sql(frame: DataFrame, column: str) -> str:
    """Read an epoch day: of a ``YYYY-MM-DD`` string, a DATE, a timestamp's UTC day."""
    quoted = quote(column)
    if isinstance(frame.schema[column].dataType, TimestampType):
        return f"CAST(floor(unix_seconds({quoted}) / 86400) AS INT)"
    return f"unix_date(try_cast({quoted} AS DATE))"


def _flag(flag: Column, data_type: DataType) -> Column:
    """Read a mutation's ``is_before``: 1 or 0 for a number, as cast for text; else null."""
    if isinstance(data_type, NumericType):
        return sf.when(flag.isin(0, 1), flag == 1)
    return flag.try_cast("boolean")


def _project(frame: DataFrame, source: EntitySource, keep: Sequence[str]) -> DataFrame:
    """Apply ``where``, then ``select``; the columns in ``keep`` survive the select."""
    for clause in source.filters:
        frame = frame.where(sf.expr(clause))
    if source.projection is None:
        return frame
    names = [name for name, _ in source.projection]
    return frame.select(*[sf.expr(expression).alias(name) for name, expression in
                          source.projection],
                        *[sf.col(quote(column)) for column in keep if column not in names])


def _row_time(frame: DataFrame, source: EntitySource) -> Column:
    """Read a row's ``time_column`` as epoch ms; null without one (as events are read)."""
    column = source.time_column
    if column is None or column not in frame.columns:
        return sf.lit(None).cast("long")
    return time_millis(quote(column), frame.schema[column].dataType)


def load_snapshots(spark: SparkSession, source: EntitySource) -> DataFrame:
    """Read the snapshots: the projected columns (with the partition column), then ``_tt_d``.

    ``_tt_d`` is the partition as an epoch day (null when unparseable). No job runs.
    """
    partition = source.partition_column
    raw = read_table(spark, source.snapshot_table)
    raw = raw.withColumn(_DAY, sf.expr(_day_sql(raw, partition)))
    return _project(raw, source, [partition, _DAY])


def image_columns(snapshots: DataFrame, source: EntitySource) -> list[str]:
    """List a row image's columns: those of :func:`load_snapshots` but the partition."""
    return [column for column in snapshots.columns
            if column not in (source.partition_column, _DAY)]


def load_mutations(
    spark: SparkSession, source: EntitySource, image: Sequence[str]
) -> DataFrame | None:
    """Read the mutations: the ``image`` columns, ``_tt_mt`` (epoch ms), ``_tt_before``.

    None without a mutation table. Rows with a null time or flag cannot be applied and are
    left out. No job runs.
    """
    if source.mutation_table is None:
        return None
    raw = read_table(spark, source.mutation_table)
    column = source.mutation_time_column
    raw = raw.withColumns({
        _MUTATION_TIME: time_millis(quote(column), raw.schema[column].dataType),
        _IS_BEFORE: _flag(sf.col(quote(source.is_before_column)),
                          raw.schema[source.is_before_column].dataType),
    })
    frame = _project(raw, source, [_MUTATION_TIME, _IS_BEFORE])
    return (frame.where(sf.col(_MUTATION_TIME).isNotNull() & sf.col(_IS_BEFORE).isNotNull())
            .select(*[sf.col(quote(c)) for c in image], _MUTATION_TIME, _IS_BEFORE))


def _state(
    spark: SparkSession, source: EntitySource, keys: Sequence[str], targets: DataFrame
) -> tuple[DataFrame, list[str]]:
    """Build the state rows at each target (rule 2); return them and the image columns.

    ``targets`` holds distinct ``_tt_sk{i}`` (keys) and ``_tt_sa`` (as-of times). The result
    holds, per target, one row per copy of each image in the state: the target's columns,
    then the image columns.
    """
    snapshots = load_snapshots(spark, source)
    image = image_columns(snapshots, source)
    target = [*(_state_key(i) for i in range(len(keys))), _STATE_AT]
    targets = targets.withColumn(_AT_DAY, sf.expr(
        f"CAST(({_STATE_AT} - pmod({_STATE_AT}, {DAY_MS})) DIV {DAY_MS} AS BIGINT)"))

    def same_keys() -> Column:
        on = sf.lit(True)
        for index, key in enumerate(keys):
            on &= sf.col(quote(key)) == sf.col(_state_key(index))
        return on

    images = [sf.col(quote(column)) for column in image]
    signed = (targets.join(snapshots, same_keys() & (sf.col(_DAY) == sf.col(_AT_DAY) - 1))
              .select(*target, *images, sf.lit(1).alias(_SIGN)))
    mutations = load_mutations(spark, source, image)
    if mutations is not None:
        day_start = sf.col(_AT_DAY) * DAY_MS
        in_range = ((sf.col(_MUTATION_TIME) >= day_start)
                    & (sf.col(_MUTATION_TIME) < sf.col(_STATE_AT)))
        signed = signed.unionByName(
            targets.join(mutations, same_keys() & in_range)
            .select(*target, *images,
                    sf.when(sf.col(_IS_BEFORE), -1).otherwise(1).alias(_SIGN)))
    counted = (signed.groupBy(*target, *images).agg(sf.sum(_SIGN).alias(_COPIES))
               .where(sf.col(_COPIES) > 0))
    copies = sf.explode(sf.array_repeat(sf.lit(True), sf.col(_COPIES).cast("int")))
    return counted.select(*target, *images, copies.alias(_ROW)), image


def _flag_missing(spark: SparkSession, source: EntitySource, frame: DataFrame,
                  at: str) -> DataFrame:
    """Add ``_tt_missing``: whether no row of the snapshot table has partition day(at) − 1."""
    snapshots = read_table(spark, source.snapshot_table)
    partitions = (snapshots
                  .select(sf.expr(_day_sql(snapshots, source.partition_column)).alias(_PARTITIONS))
                  .where(sf.col(_PARTITIONS).isNotNull()).distinct())
    day = sf.expr(f"CAST(({at} - pmod({at}, {DAY_MS})) DIV {DAY_MS} AS BIGINT)")
    return (frame.join(partitions, sf.col(_PARTITIONS) == day - 1, "left")
            .select(*frame.columns, sf.col(_PARTITIONS).isNull().alias(_MISSING)))


def entity_state(
    spark: SparkSession, source: EntitySource, keys: Sequence[str], targets: DataFrame,
    at: str = "at",
) -> DataFrame:
    """Build the state of an entity table at given keys and times (rule 2 above).

    Args:
        spark: the session.
        source: the entity source (its ``where`` and ``select`` apply).
        keys: key columns of the row images.
        targets: rows with a column per key (named as the key) and ``at`` (epoch ms).
        at: the name of the time column of ``targets``.

    Returns:
        Per distinct (keys, at) of ``targets``, one row per copy of each row image in the
        state: ``at``, then the image columns (keys included). A target without rows has
        none, and so has one whose partition ``day(at) − 1`` is missing (rule 5). No job
        runs.

    """
    selected = targets.select(
        *[sf.col(quote(key)).alias(_state_key(i)) for i, key in enumerate(keys)],
        sf.col(quote(at)).cast("long").alias(_STATE_AT)).distinct()
    selected = (_flag_missing(spark, source, selected, _STATE_AT)
                .where(~sf.col(_MISSING)).drop(_MISSING))
    state, image = _state(spark, source, keys, selected)
    return state.select(sf.col(_STATE_AT).alias(at), *[sf.col(quote(c)) for c in image])


def entity_features(
    part: JoinPart, spark: SparkSession, left: DataFrame, ops: Mapping[str, SqlOp] = SQL_OPS
) -> DataFrame:
    """One entity part's features per distinct query (rules 2–5 above).

    Args:
        part: a join part whose GroupBy reads an :class:`EntitySource`, with aggregations
            or a lookup.
        spark: the session.
        left: the left rows with :data:`TIME`.
        ops: how each op is computed.

    Returns:
        As :func:`~timetile.testing.oracle.part_features`: one row per distinct (left keys,
        time) with a non-null time, ``_tt_qk0, …``, ``_tt_q``, then the output columns.

    """
    group_by = part.group_by
    source = group_by.source
    assert isinstance(source, EntitySource)
    n_keys = len(group_by.keys)
    queries = _flag_missing(spark, source, _queries(part, left), _AT)
    targets = (queries.select(*[sf.col(_query_key(i)).alias(_state_key(i))
                                for i in range(n_keys)], sf.col(_AT).alias(_STATE_AT))
               .distinct())
    state, _ = _state(spark, source, group_by.keys, targets)
    columns = list(group_by.lookup_columns) if group_by.is_lookup else value_columns(group_by)
    values = [(sf.col(quote(c)) if group_by.is_lookup else _widened(state, c)).alias(_value(i))
              for i, c in enumerate(columns)]
    state = state.select(*[_state_key(i) for i in range(n_keys)], _STATE_AT, _ROW,
                         _row_time(state, source).alias(_EVENT_TIME), *values)

    on = sf.col(_AT) == sf.col(_STATE_AT)
    for index in range(n_keys):
        on &= sf.col(_query_key(index)) == sf.col(_state_key(index))
    matched = queries.join(state, on, "left")
    if group_by.is_lookup:
        features = _lookup(part, matched, has_time=source.time_column is not None)
    else:
        features = aggregate_features(part, matched, ops, extra=[_MISSING])
    query_columns = [*(_query_key(i) for i in range(n_keys)), _QUERY_TIME]
    return features.select(*query_columns, *[
        sf.when(~sf.col(_MISSING), sf.col(quote(name))).alias(name)
        for name in part.output_columns()])


def _lookup(part: JoinPart, matched: DataFrame, *, has_time: bool) -> DataFrame:
    """Pick each query's last state row by (time, values in select order), nulls first.

    Spark orders structs field by field with nulls first, so ``max`` of a struct of the
    ordering fields is that row. Returns the query columns, ``_tt_missing``, the outputs.
    """
    fields = [*(["'o', " + _EVENT_TIME] if has_time else []),
              *(f"'c{i}', {_value(i)}" for i in range(len(part.group_by.lookup_columns)))]
    last = sf.expr(f"max(named_struct({', '.join(fields)})) FILTER (WHERE {_ROW})")
    query_columns = [*(_query_key(i) for i in range(len(part.group_by.keys))), _QUERY_TIME]
    grouped = matched.groupBy(*query_columns, _AT, _MISSING).agg(last.alias(_partial(0)))
    return grouped.select(*query_columns, _MISSING, *[
        sf.col(_partial(0)).getField(f"c{i}").alias(name)
        for i, name in enumerate(part.output_columns())])


def entity_left(
    spark: SparkSession, source: EntitySource, start: str | None = None, end: str | None = None
) -> DataFrame:
    """Read the left rows of an entity left side (rule 6), :data:`TIME` the query time.

    Every row of snapshot partition d with ``start <= d <= end`` (``YYYY-MM-DD``, either
    bound optional), its columns as :func:`load_snapshots` gives them, then :data:`TIME`
    ``= day_start(d + 1)``; null when the partition cannot be read as a day (such rows are
    dropped once ``start`` or ``end`` is given). No job runs.
    """
    snapshots = load_snapshots(spark, source)
    if start is not None:
        snapshots = snapshots.where(sf.col(_DAY) >= date_to_ms(start) // DAY_MS)
    if end is not None:
        snapshots = snapshots.where(sf.col(_DAY) <= date_to_ms(end) // DAY_MS)
    columns = [sf.col(quote(column)) for column in snapshots.columns if column != _DAY]
    return snapshots.select(*columns, ((sf.col(_DAY).cast("long") + 1) * DAY_MS).alias(TIME))
