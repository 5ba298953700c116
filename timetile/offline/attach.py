"""How a part's features reach the left rows: riding through its executor, or joined back.

An executor that ``rides`` (the sweep) takes the left rows themselves, duplicates and all,
and hands them back with the features added: one shuffle, no distinct queries, no join.
Every other executor computes the part's distinct (keys, as-of time) queries, whose features
are joined back onto the left rows (:func:`joined`). Riding needs every left column to cross
into Python as Arrow (:func:`~timetile.spark.result_types.arrow_transportable`) and queries at
the rows' own times (no floors).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.join import Join
from timetile.api.sources import EventSource
from timetile.offline.executors import Executor
from timetile.offline.plan import AnyPartPlan, ExecutorOptions, PartPlan
from timetile.spark.result_types import arrow_transportable
from timetile.spark.sources import TIME


def can_ride(executor: Executor, part: AnyPartPlan, rows: DataFrame) -> bool:
    """Whether ``rows`` can ride through ``executor`` for ``part``, duplicates and all.

    Else the executor gets the part's distinct queries and its features are joined back.
    """
    return executor.rides and not part.floors and arrow_transportable(rows.schema)


def joined(features: DataFrame, part: AnyPartPlan, rows: DataFrame, tag: int) -> DataFrame:
    """Join one feature row per distinct (keys, as-of time) back onto ``rows``.

    ``tag`` keeps the join's columns apart from other parts'.
    """
    renamed = {name: f"_tt_p{tag}_{name}" for name in (*part.keys, TIME)}
    features = features.withColumnsRenamed(renamed)
    condition = part.as_of(rows[TIME]) == features[renamed[TIME]]
    for left_key, key in zip(part.part.left_keys, part.keys, strict=True):
        condition &= rows[left_key].eqNullSafe(features[renamed[key]])
    return rows.join(features, on=condition, how="left").drop(*renamed.values())


def ridden(executor: Executor, part: PartPlan, rows: DataFrame, options: ExecutorOptions,
           join: Join, *, carry_untimed: bool) -> DataFrame:
    """Add a part's features to ``rows`` by sending them through ``executor`` themselves.

    One shuffle instead of three (distinct queries, executor, join back): the rows ride
    through unchanged, duplicates included. Rows without a time skip it and come back with
    null features when ``carry_untimed``.

    A left column the executor carries anyway is not sent twice: a key column of the
    events' key type travels as the part's key, and a time column of epoch milliseconds as
    :data:`TIME`; both are restored, unchanged, afterwards.
    """
    timed = rows.where(F.col(TIME).isNotNull())
    shared_keys: dict[str, str] = {}  # left column → the part key that carries it
    copies: dict[str, str] = {}  # part key → the left column it copies
    for left_key, key in zip(part.part.left_keys, part.keys, strict=True):
        if (left_key not in shared_keys
                and timed.schema[left_key].dataType == part.events.schema[key].dataType):
            shared_keys[left_key] = key
        else:
            copies[key] = left_key
    timed = timed.withColumns({key: F.col(left) for key, left in copies.items()})
    timed = timed.withColumnsRenamed(shared_keys)
    time_column = _millis_column(join, rows)
    if time_column is not None:
        timed = timed.drop(time_column)
    swept = (executor.run(part, timed, options)
             .drop(*copies)
             .withColumnsRenamed({key: left for left, key in shared_keys.items()}))
    if time_column is not None:
        swept = swept.withColumn(time_column, F.col(TIME))
    if not carry_untimed:
        return swept
    return swept.unionByName(rows.where(F.col(TIME).isNull()), allowMissingColumns=True)


def _millis_column(join: Join, rows: DataFrame) -> str | None:
    """Return the left's time column if it holds epoch milliseconds (so equals TIME)."""
    source = join.left
    if not isinstance(source, EventSource):
        return None
    column = source.time_column
    fields = {f.name: f.dataType for f in rows.schema.fields}
    return column if isinstance(fields.get(column), T.LongType) else None
