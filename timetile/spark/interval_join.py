"""The batch interval join on Spark: an :class:`~timetile.api.interval_join.IntervalJoin`'s rows.

It gives what the streaming join gives when no row is late (docs/interval_joins.md): every
pair of rows with equal, non-null keys that satisfies the condition, then, for an outer
join, each row of the outer side that joined nothing, the other side's columns null.

Skew-safe by time: when the condition bounds a time ``a`` of the left input and a time ``b``
of the right both ways (``a`` within ``[b - c1, b + c2]``), each left row falls in one
bucket of width ``W = max(c1 + c2, 1)`` of ``a``, and each right row is copied into the
buckets its range reaches (at most two when the widths agree). Spark then joins on the keys
and the bucket, so a task holds one bucket of a hot key, never the key's whole history. A
pair meets in exactly one bucket, the left row's, so no pair is joined twice. The right
side's unmatched rows come from the mirror join (the right rows in one bucket each, the left
ones copied), so each is padded once. Without such a pair of times the join is on the keys
alone. No job runs until the rows are read.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.errors import DefinitionError
from timetile.api.interval_join import JOINED_AT, IntervalJoin
from timetile.api.sources import EventSource
from timetile.core.interval_join import ConditionError, parse_condition
from timetile.core.interval_join.condition import LEFT, RIGHT, Field
from timetile.spark.sources import TIME, coarse_schema, load

_BUCKET, _SEEN = "_tt_bucket", "_tt_seen"


def joined_rows(spark: SparkSession, join: IntervalJoin, field: str = "source") -> DataFrame:
    """Return the join's rows: prefixed columns, times as epoch milliseconds. No job runs.

    Raises:
        DefinitionError: naming ``{field}`` and the fix, when the condition names a column
            an input lacks, or keys differ in type.

    """
    inputs = {LEFT: _input(spark, join.left, f"{field}.left"),
              RIGHT: _input(spark, join.right, f"{field}.right")}
    check_inputs(join, inputs, field)
    condition = F.expr(join.parsed.sql)
    keys = [F.col(f"l.{left}") == F.col(f"r.{right}") for left, right in join.key_pairs]
    pair = _bucketed_pair(join)
    columns = [*(F.col(f"{alias}.{name}").alias(renamed)
                 for alias, names in output_names(join, inputs, field).items()
                 for name, renamed in names.items()),
               _joined_at(join).alias(JOINED_AT)]
    on = [*keys, condition]
    rows = _major(inputs, LEFT, pair, on, how="left" if join.how in ("left", "full")
                  else "inner").select(*columns)
    if join.how in ("right", "full"):
        mirrored = _major(inputs, RIGHT, pair, on, how="left")
        rows = rows.unionByName(mirrored.where(F.col(f"l.{_SEEN}").isNull()).select(*columns))
    return rows


def _joined_at(join: IntervalJoin) -> Column:
    """When each output row is certain, as :func:`~timetile.core.interval_join.joined_at`."""
    def extreme(pick: Any, columns: list[Column]) -> Column:
        return columns[0] if len(columns) == 1 else pick(*columns)

    times = [F.col(f"{alias}.{name}") for alias, names in join.input_time_fields.items()
             for name in names]
    settled = {alias: extreme(F.least, [F.col(f"{alias}.{name}") + F.lit(c)
                                        for (_, name), c in join.parsed.settled_after(alias)])
               for alias in (LEFT, RIGHT)}
    seen = {alias: F.col(f"{alias}.{_SEEN}").isNotNull() for alias in (LEFT, RIGHT)}
    return (F.when(seen[LEFT] & seen[RIGHT], extreme(F.greatest, times))
            .when(seen[LEFT], settled[LEFT]).otherwise(settled[RIGHT]))


def output_names(join: IntervalJoin, inputs: dict[str, DataFrame],
                 field: str) -> dict[str, dict[str, str]]:
    """Per alias, each input column's output name: its input's prefix, then its name.

    Raises:
        DefinitionError: naming ``{field}.prefixes`` when an output name is ``joined_at``.

    """
    names = {alias: {name: prefix + name for name in inputs[alias].columns}
             for alias, prefix in zip((LEFT, RIGHT), join.prefixes, strict=True)}
    if any(JOINED_AT in renamed.values() for renamed in names.values()):
        raise DefinitionError.single(
            "source", f"{field}.prefixes", f"{join.prefixes!r} name an output column "
            f"{JOINED_AT!r}, the join's own", "choose prefixes that do not")
    return names


def _input(spark: SparkSession, source: object, field: str) -> DataFrame:
    """Return an input's rows, each time column as epoch milliseconds under its own name."""
    if isinstance(source, IntervalJoin):
        return joined_rows(spark, source, field)
    assert isinstance(source, EventSource)
    return timed_input(load(spark, source, source.table, field), source, field)


def timed_input(frame: DataFrame, source: EventSource, field: str) -> DataFrame:
    """Return a loaded input (its time as :data:`TIME`) with the time under its own name.

    Raises:
        DefinitionError: naming ``{field}.time_column`` when the input has no such column.

    """
    column = source.time_column
    if column not in frame.columns:
        raise DefinitionError.single(
            "source", f"{field}.time_column", f"{column!r} is no column of {source.label}",
            f"name one of {', '.join(c for c in frame.columns if c != TIME)}")
    return frame.withColumn(column, F.col(TIME)).drop(TIME)


def check_inputs(join: IntervalJoin, inputs: dict[str, DataFrame], field: str) -> None:
    """Refuse a condition or keys the inputs' columns do not fit, naming ``{field}``."""
    try:
        parse_condition(join.condition, join.input_time_fields,
                        {alias: frame.columns for alias, frame in inputs.items()})
    except ConditionError as error:
        raise DefinitionError.single("source", f"{field}.condition", error.message,
                                     error.fix) from None
    types = {alias: coarse_schema(frame) for alias, frame in inputs.items()}
    for left, right in join.key_pairs:
        found = [name in types[alias] for alias, name in ((LEFT, left), (RIGHT, right))]
        if not all(found):
            alias, name = (LEFT, left) if not found[0] else (RIGHT, right)
            raise DefinitionError.single(
                "source", f"{field}.on", f"{'left' if alias == LEFT else 'right'} input has "
                f"no column {name!r}", f"name one of {', '.join(inputs[alias].columns)}")
        if types[LEFT][left] != types[RIGHT][right]:
            named = [inputs[alias].schema[name].dataType.simpleString()
                     for alias, name in ((LEFT, left), (RIGHT, right))]
            raise DefinitionError.single(
                "source", f"{field}.on", f"keys {left!r} ({named[0]}) and {right!r} "
                f"({named[1]}) differ in type, so no row would join",
                f"cast one in its source's select, e.g. {{{right!r}: 'CAST({right} AS "
                f"{named[0].upper()})'}}")


def _bucketed_pair(join: IntervalJoin) -> tuple[Field, Field, int, int] | None:
    """Return a left time ``a``, a right time ``b`` and ``c1, c2``: ``b - c1 <= a <= b + c2``."""
    postpones = {(bound.later, bound.earlier): bound.postpone for bound in join.parsed.bounds}
    for (later, earlier), c1 in sorted(postpones.items()):
        if later[0] == LEFT and (earlier, later) in postpones:
            return later, earlier, c1, postpones[(earlier, later)]
    return None


def _floor_div(millis: Column, width: int) -> Column:
    """``floor(millis / width)``, exact over longs."""
    return F.call_function("div", millis - F.pmod(millis, F.lit(width)), F.lit(width))


def _major(inputs: dict[str, DataFrame], major: str, pair: tuple[Field, Field, int, int] | None,
           on: list[Column], *, how: str) -> DataFrame:
    """Join with ``major``'s rows in one bucket each and the other's copied: ``major`` first."""
    frames = {alias: frame.withColumn(_SEEN, F.lit(True)) for alias, frame in inputs.items()}
    on = list(on)
    if pair is not None:
        (_, a), (_, b), c1, c2 = pair
        width = max(c1 + c2, 1)
        # a in [b - c1, b + c2], and b in [a - c2, a + c1]
        own, other, low, high = (a, b, c1, c2) if major == LEFT else (b, a, c2, c1)
        minor = RIGHT if major == LEFT else LEFT
        first = _floor_div(F.col(other) - F.lit(low), width)
        last = _floor_div(F.col(other) + F.lit(high), width)
        frames[major] = frames[major].withColumn(_BUCKET, _floor_div(F.col(own), width))
        frames[minor] = frames[minor].withColumn(
            _BUCKET, F.explode(F.when(first <= last, F.sequence(first, last))))
        on.append(F.col(f"l.{_BUCKET}") == F.col(f"r.{_BUCKET}"))
    minor = RIGHT if major == LEFT else LEFT
    joined_on = on[0]
    for clause in on[1:]:
        joined_on = joined_on & clause
    return frames[major].alias(major).join(frames[minor].alias(minor), joined_on, how)
