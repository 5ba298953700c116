"""The naive oracle: the plan of seed 000, written plainly in Spark SQL (DESIGN §2, §4).

Every fast path of timetile is checked against this one brute-force evaluator of the
semantics (STYLE §4). It is shipped so users can check their own definitions too. It uses
neither Python UDFs nor timetile's aggregators: only Spark SQL, so it is independent of the
engine it checks.

The plan, per join part (seed 000, "Naive approach")::

    SELECT q.keys, q.time, <op>(e.value) FILTER (WHERE <window> AND e.value IS NOT NULL), …
    FROM (SELECT DISTINCT keys, time FROM left WHERE time IS NOT NULL) q
    LEFT JOIN events e
      ON e.keys = q.keys AND e.time < q.time AND e.time >= <widest window start>
    GROUP BY q.keys, q.time

then the features are joined back to the left rows on the keys (null-safe) and the time.
Every query meets every earlier event of its key: with n queries and n events spread over k
keys that is O(n²/k) pairs, and a hot key holds most of them. Use it on small data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
)

from timetile.api import (
    Accuracy,
    Aggregation,
    EntitySource,
    EventSource,
    GroupBy,
    Join,
    JoinPart,
    Window,
)
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.spark.sources import TIME, load_events, quote
from timetile.testing.sql_ops import (
    _AT,
    _EVENT_TIME,
    _QUERY_TIME,
    SQL_OPS,
    SqlOp,
    _decimal,
    _event_key,
    _partial,
    _query_key,
    _value,
    percentile_bounds_op,
    window_interval,
)


def as_of(group_by: GroupBy, q: str) -> str:
    """Write SQL for the as-of time a of a query at the times in column ``q`` (DESIGN §2).

    ``a = q`` under TEMPORAL accuracy, the start of q's UTC day under SNAPSHOT; for an
    :class:`EventSource` with a ``period`` p (pre-aggregated rows), a is then floored to a
    multiple of p from the epoch. Windows end at a, and an entity's state is taken at a.

    >>> views = EventSource("v", period="1h")
    >>> as_of(GroupBy("g", views, ["k"], [Aggregation("x", "sum")]), "q")
    '(q) - pmod(q, 3600000)'
    """
    at = q if group_by.accuracy is Accuracy.TEMPORAL else f"{q} - pmod({q}, {DAY_MS})"
    source = group_by.source
    period = source.period_ms if isinstance(source, EventSource) else None
    return at if period is None else f"({at}) - pmod({at}, {period})"


def naive_backfill(
    join: Join, spark: SparkSession, start: str | None = None, end: str | None = None
) -> DataFrame:
    """Compute ``join`` by brute force: the contract of DESIGN §2, spelled out in Spark SQL.

    The result holds every kept left row exactly once (duplicates included), its columns
    unchanged and in order, then one column per (part, aggregation, window) in
    ``join.output_columns()`` order. A feature of the query at time q aggregates the
    non-null values of the part's events with the same keys and a time in the window's
    interval (all before q); a query with a null key has empty windows. On an empty window
    ``count``, ``unique_count`` and ``approx_unique_count`` are 0 and every other op is
    null. A left row with a null time gets null in every feature column, counts included.
    A bucketed feature is a map from each non-null bucket value with values in the window
    to the op's result over that bucket's rows (:func:`_bucket_maps`); null when it has none.
    Windows end at the query's as-of time (:func:`as_of`): q, or the start of q's day (UTC)
    under ``Accuracy.SNAPSHOT``, floored to the ``period`` of a pre-aggregated source.
    Entity sources (parts, lookups, an entity left side) follow
    :mod:`timetile.testing.entity_oracle`.

    Result types: counts bigint; ``avg``, ``variance``, ``stddev``, ``skew`` and
    ``kurtosis`` double; integral inputs are widened to bigint and float ones to double
    before anything else, so ``sum``, ``min``, ``max``, ``first`` and ``last`` give bigint or
    double for numbers and the input type otherwise; the k-ops arrays of that type;
    ``histogram`` a map to bigint; ``approx_unique_count`` the exact distinct count; and
    ``approx_percentile`` the exact nearest-rank values as ``array<double>`` (see
    :func:`percentile_rank_bounds` to check an approximation). Spark's order of values
    applies: NaN above every number, -0.0 equal to 0.0 (so which of the two a tie yields is
    unspecified), all NaNs one value for ``unique_count`` and ``histogram``.

    Cost: O(n²/k) for n left rows and n events over k keys (seed 000): every query meets
    every earlier event of its key, and one key's events are never split, so keep the data
    small. No job runs until the result is used.

    Args:
        join: the definition.
        spark: the session to build the plan in.
        start: ``YYYY-MM-DD`` (UTC): keep only left rows at or after this day's start
            (for an entity left side: the snapshot partitions from this day on).
        end: ``YYYY-MM-DD`` (UTC): keep only left rows before the end of this day (for an
            entity left side: the partitions up to this day). Once ``start`` or ``end`` is
            given, left rows with a null time are dropped too.

    Raises:
        ValueError: when a left column has the name of a feature column.

    """
    return _backfill(join, spark, start, end, SQL_OPS)


def percentile_rank_bounds(
    join: Join,
    spark: SparkSession,
    epsilon: float,
    start: str | None = None,
    end: str | None = None,
) -> DataFrame:
    """:func:`naive_backfill`, with each ``approx_percentile`` column as rank bounds.

    Each such column holds, per percentile p in order, ``struct(lo, hi)`` (see
    :func:`percentile_bounds_op`): the values a sketch with normalized rank error
    ``epsilon`` may return (:data:`~timetile.core.aggregators.sketches.KLL_RANK_ERROR`,
    0.0133, for KLL with k = 200, at 99% confidence). Compare an engine's answer with
    :func:`timetile.core.equality.percentiles_within`. Every other column is as in
    :func:`naive_backfill`.
    """
    return _backfill(join, spark, start, end,
                     {**SQL_OPS, "approx_percentile": percentile_bounds_op(epsilon)})


def _backfill(
    join: Join,
    spark: SparkSession,
    start: str | None,
    end: str | None,
    ops: Mapping[str, SqlOp],
) -> DataFrame:
    if isinstance(join.left, EntitySource):
        from timetile.testing.entity_oracle import entity_left  # noqa: PLC0415  (a cycle)

        left = entity_left(spark, join.left, start, end)
    else:
        left = load_events(spark, join.left)
        if start is not None:
            left = left.where(sf.col(TIME) >= date_to_ms(start))
        if end is not None:
            left = left.where(sf.col(TIME) < date_to_ms(end) + DAY_MS)
    originals = [column for column in left.columns if column != TIME]
    clashes = sorted(set(originals) & set(join.output_columns()))
    if clashes:
        raise ValueError(f"left columns {clashes} have the names of feature columns")
    result = left
    for part in join.join_parts:
        features = part_features(part, spark, left, ops)
        condition = sf.col(TIME) == sf.col(_QUERY_TIME)
        for index, column in enumerate(part.left_keys):  # null keys meet their null queries
            condition &= sf.col(quote(column)).eqNullSafe(sf.col(_query_key(index)))
        internal = [_QUERY_TIME, *(_query_key(i) for i in range(len(part.left_keys)))]
        result = result.join(features, condition, "left").drop(*internal)
    result = result.select(*[sf.col(quote(c)) for c in [*originals, *join.output_columns()]])
    if not join.derivation_items:  # derivations: per-row SQL over the left and feature columns
        return result
    kept = join.output_columns() if join.keeps_features else []
    return result.select(*[sf.col(quote(c)) for c in [*originals, *kept]],
                         *[sf.expr(sql).alias(name) for name, sql in join.derivation_items])


def part_features(
    part: JoinPart, spark: SparkSession, left: DataFrame, ops: Mapping[str, SqlOp] = SQL_OPS
) -> DataFrame:
    """One part's features per distinct query: the naive join and group-by of seed 000.

    Args:
        part: the join part.
        spark: the session.
        left: the left rows with :data:`TIME` (as :func:`load_events` gives them).
        ops: how each op is computed (:data:`SQL_OPS` by default).

    Returns:
        One row per distinct (left keys, time) with a non-null time: the keys as ``_tt_qk0,
        _tt_qk1, …``, the time as ``_tt_q``, then the part's output columns.

    """
    group_by = part.group_by
    if not isinstance(group_by.source, EventSource):
        from timetile.testing.entity_oracle import entity_features  # noqa: PLC0415  (a cycle)

        return entity_features(part, spark, left, ops)
    columns = value_columns(group_by)
    queries = _queries(part, left)
    events = _events(load_events(spark, group_by.source), group_by.keys, columns)

    pairs = _pairs(group_by)
    on = sf.col(_EVENT_TIME) < sf.col(_AT)
    for index in range(len(group_by.keys)):
        on &= sf.col(_event_key(index)) == sf.col(_query_key(index))
    starts = list(dict.fromkeys(window_interval(window, _AT)[0] for _, window in pairs))
    if None not in starts:  # no lifetime window: events before the widest start never count
        widest = starts[0] if len(starts) == 1 else f"least({', '.join(map(str, starts))})"
        on &= sf.col(_EVENT_TIME) >= sf.expr(str(widest))
    return aggregate_features(part, queries.join(events, on, "left"), ops)


def value_columns(group_by: GroupBy) -> list[str]:
    """List the distinct input columns, then bucket columns: ``_tt_v{i}`` holds the i-th."""
    aggregations = group_by.aggregations or ()
    return list(dict.fromkeys([*(aggregation.column for aggregation in aggregations),
                               *(bucket for aggregation in aggregations
                                 for bucket in aggregation.buckets or ())]))


def _pairs(group_by: GroupBy) -> list[tuple[Aggregation, Window | None]]:
    return [(aggregation, window) for aggregation in group_by.aggregations or ()
            for window in aggregation.window_list]


def aggregate_features(
    part: JoinPart, matched: DataFrame, ops: Mapping[str, SqlOp] = SQL_OPS,
    extra: Sequence[str] = (),
) -> DataFrame:
    """Aggregate each query's matched rows into the part's features (events and entities).

    Args:
        part: the join part; its GroupBy has aggregations.
        matched: one row per (query, candidate row): the query's ``_tt_qk0, …``, ``_tt_q``
            and ``_tt_at`` (its as-of time), the row's time ``_tt_t`` and its values
            ``_tt_v{i}`` (of ``value_columns(group_by)[i]``); a query without rows comes
            once with a null ``_tt_v{i}``. A windowed feature keeps the rows with
            ``start(at) <= _tt_t < end(at)`` (:func:`window_interval`); a lifetime one keeps
            every row given (events are matched before ``at`` already).
        ops: how each op is computed.
        extra: more per-query columns of ``matched`` to group by and return.

    Returns:
        One row per distinct query: ``_tt_qk0, …, _tt_q``, the ``extra`` columns, then the
        part's output columns. Cost: one aggregation over ``matched``.

    """
    group_by = part.group_by
    columns = value_columns(group_by)
    partials = []
    finals = []
    bucketed: dict[str, list[tuple[str, Aggregation, str, str]]] = {}
    outputs = [(aggregation, window, bucket, name) for aggregation in group_by.aggregations or ()
               for name, window, bucket in aggregation.outputs(group_by.name, part.prefix)]
    for index, (aggregation, window, bucket, name) in enumerate(outputs):
        op = ops[aggregation.op]
        value = _value(columns.index(aggregation.column))
        window_start, window_end = window_interval(window, _AT)
        keep = [f"{value} IS NOT NULL"]
        if op.timed:
            keep.append(f"{_EVENT_TIME} IS NOT NULL")
        if window is not None:
            keep.insert(0, f"{_EVENT_TIME} < {window_end}")
        if window_start is not None:
            keep.insert(0, f"{_EVENT_TIME} >= {window_start}")
        aggregate = op.aggregate.format(v=value, t=_EVENT_TIME, at=_AT,
                                        h=aggregation.half_life)
        if bucket is not None:
            bucketed.setdefault(_value(columns.index(bucket)), []).append(
                (name, aggregation, aggregate, " AND ".join(keep)))
            finals.append(sf.col(quote(name)))
            continue
        partials.append(sf.expr(f"{aggregate} FILTER (WHERE {' AND '.join(keep)})")
                        .alias(_partial(index)))
        finals.append(sf.expr(_finish(op, aggregation, _partial(index))).alias(name))

    query_columns = [*(_query_key(i) for i in range(len(group_by.keys))), _QUERY_TIME]
    group = [*query_columns, _AT, *extra]
    grouped = (matched.groupBy(*group).agg(*partials) if partials
               else matched.select(*group).distinct())
    for bucket, features in bucketed.items():
        maps = _bucket_maps(matched, group, bucket, features, ops)
        joined = [sf.col(column).alias(f"_tt_j{i}") for i, column in enumerate(group)]
        maps = maps.select(*joined, *(sf.col(quote(name)) for name, *_ in features))
        on = [sf.col(column).eqNullSafe(sf.col(f"_tt_j{i}")) for i, column in enumerate(group)]
        grouped = grouped.join(maps, on, "left").drop(*(f"_tt_j{i}" for i in range(len(group))))
    return grouped.select(*query_columns, *extra, *finals)


def _bucket_maps(matched: DataFrame, group: Sequence[str], bucket: str,
                 features: Sequence[tuple[str, Aggregation, str, str]],
                 ops: Mapping[str, SqlOp]) -> DataFrame:
    """Per query (``group``), each bucketed feature's map from bucket value to the op's result.

    ``features`` holds (name, aggregation, its aggregate SQL, its row filter). The op runs per
    (query, bucket) on the rows that pass the filter and have a non-null ``bucket``; each
    bucket with such rows is one entry, and a query with none gets a null map.
    """
    partials, lists = [], []
    for index, (name, aggregation, aggregate, keep) in enumerate(features):
        condition = f"{keep} AND {bucket} IS NOT NULL"
        partials.append(sf.expr(f"{aggregate} FILTER (WHERE {condition})").alias(_partial(index)))
        partials.append(sf.expr(f"count(*) FILTER (WHERE {condition})").alias(f"_tt_n{index}"))
        finish = _finish(ops[aggregation.op], aggregation, _partial(index))
        lists.append(sf.expr(f"collect_list(IF(_tt_n{index} > 0, named_struct('k', {bucket}, "
                             f"'v', {finish}), NULL))").alias(name))
    per_bucket = matched.groupBy(*group, bucket).agg(*partials)
    return per_bucket.groupBy(*group).agg(*lists).select(*group, *(
        sf.expr(f"IF(size({quote(name)}) = 0, NULL, map_from_entries({quote(name)}))")
        .alias(name) for name, *_ in features))


def _queries(part: JoinPart, left: DataFrame) -> DataFrame:
    """Distinct (keys, time) of the left rows that have a time, with their as-of time."""
    at = sf.expr(as_of(part.group_by, TIME))
    keys = [sf.col(quote(column)).alias(_query_key(index))
            for index, column in enumerate(part.left_keys)]
    return (left.where(sf.col(TIME).isNotNull())
            .select(*keys, sf.col(TIME).alias(_QUERY_TIME), at.alias(_AT))
            .distinct())


def _events(source: DataFrame, keys: Sequence[str], columns: Sequence[str]) -> DataFrame:
    """Keep the events that can be placed (non-null time and keys); widen their values."""
    placed = source.where(sf.col(TIME).isNotNull())
    for key in keys:
        placed = placed.where(sf.col(quote(key)).isNotNull())
    return placed.select(
        *[sf.col(quote(key)).alias(_event_key(index)) for index, key in enumerate(keys)],
        sf.col(TIME).alias(_EVENT_TIME),
        *[_widened(placed, column).alias(_value(index)) for index, column in enumerate(columns)],
    )


#: Integral values are read as bigint and floating ones as double, as the engine reads them.
_WIDENED: Mapping[type[DataType], str] = {
    ByteType: "bigint", ShortType: "bigint", IntegerType: "bigint",
    LongType: "bigint", FloatType: "double", DoubleType: "double",
}


def _widened(frame: DataFrame, column: str) -> Column:
    target = _WIDENED.get(type(frame.schema[column].dataType))
    value = sf.col(quote(column))
    return value if target is None else value.cast(target)


def _finish(op: SqlOp, aggregation: Aggregation, partial: str) -> str:
    percentiles = ", ".join(_decimal(p) for p in aggregation.percentiles or ())
    return op.finish.format(a=partial, k=aggregation.k, ps=percentiles, h=aggregation.half_life)
