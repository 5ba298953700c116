"""Future peeks: each sampled left row's features over what was known before its time (seed 001).

A training value at ``q`` must come only from rows that existed before ``q``; online, a row
counts once it has arrived. :func:`as_known` rewrites a Join so that one backfill computes
every sampled left row over **its own cut** of the sources at its time ``q``
(:func:`~timetile.verify.cuts.source_as_of`, cutting by ``known_at`` too): events with a
time before ``q`` and known before ``q``; an entity's snapshots of days that ended by ``q``
and its mutations that happened before ``q`` and were known before ``q``.

Each sampled row gets keys of its own (its row number, and the part it feeds), and its cut
of each source is copied under them, so the engine's own executors compute the features:
no rule of windows or ops is restated here. Compared with a backfill over whole sources
(:mod:`timetile.verify.invariance`), a feature whose value changes has seen the future:
rows that arrived late (``known_at`` after their time), or an engine that reads past ``q``.

Cost: one backfill whose sources hold, per sampled row, its keys' rows before its time:
O(sampled rows × rows per key), so a large sample over keys with long histories is costly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.join import Join, JoinPart
from timetile.api.sources import EventSource
from timetile.spark.sources import read_table, time_millis
from timetile.verify.cuts import Cut, source_as_of

__all__ = ["as_known"]

_ROW, _PART, _TIME = "verify_key", "verify_part", "verify_time"


def as_known(join: Join, spark: SparkSession, rows: DataFrame, row: str,
             time_column: str) -> Join:
    """Return ``join`` over ``rows``, each row's features computed over its own cut.

    Args:
        join: the definition (left side an event source).
        spark: the session.
        rows: the sampled left rows: the left source's columns, projected, and ``row``.
        row: the column numbering them, unique.
        time_column: the left rows' time column.

    Returns:
        The rewritten Join: each part's GroupBy keyed by (a copy of ``row``, the part's
        index) instead of its keys; parts that share a GroupBy share one rewritten source
        (the Join's plan knows a GroupBy by its name). Its output has ``rows``' columns,
        the key columns, and the features under their own names. Every column name it adds
        is new to the left rows and the sources. No job runs.

    """
    taken = {*rows.columns, *_source_columns(join, spark)}
    row_key, part_key, asked = (_fresh(name, taken) for name in (_ROW, _PART, _TIME))
    left_time = time_millis(time_column, rows.schema[time_column].dataType)
    part_columns = [_fresh(f"{part_key}_{index}", taken)
                    for index in range(len(join.join_parts))]
    left = rows.withColumns({row_key: F.col(row)}
                            | {name: F.lit(index) for index, name in enumerate(part_columns)})
    by_name: dict[str, list[int]] = {}
    for index, part in enumerate(join.join_parts):
        by_name.setdefault(part.group_by.name, []).append(index)
    rewritten = {}
    for name, indexes in by_name.items():
        group_by = join.join_parts[indexes[0]].group_by
        askers = [rows.select(F.col(row).alias(row_key), left_time.alias(asked),
                              F.lit(index).alias(part_key),
                              *(F.col(column).alias(key) for column, key in zip(
                                  join.join_parts[index].left_keys, group_by.keys,
                                  strict=True)))
                  for index in indexes]
        cut = Cut(F.col(asked), known=True, askers=_union(askers), keys=group_by.keys,
                  drop=(asked,))
        source = source_as_of(spark, group_by.source, f"parts[{indexes[0]}].source", cut)
        if group_by.is_lookup and source.projection is not None:  # its values, not its keys
            source = replace(source, select=[column for column, _ in source.projection
                                             if column not in group_by.keys])
        rewritten[name] = replace(group_by, source=source, keys=[row_key, part_key])
    parts = [JoinPart(rewritten[part.group_by.name], prefix=part.prefix,
                      key_mapping={row_key: row_key, part_columns[index]: part_key})
             for index, part in enumerate(join.join_parts)]
    return replace(join, left=EventSource(left, time_column), parts=parts)


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def _source_columns(join: Join, spark: SparkSession) -> set[str]:
    """Return the columns of every part's source, raw and selected (schemas only: no job)."""
    columns: set[str] = set()
    for part in join.join_parts:
        source = part.group_by.source
        columns |= {name for name, _ in source.projection or ()}
        tables = ([source.table] if isinstance(source, EventSource)
                  else [source.snapshot_table, source.mutation_table])
        for table in tables:
            if table is not None:
                columns |= set(read_table(spark, table).columns)
    return columns


def _fresh(name: str, taken: set[str]) -> str:
    """Return ``name``, or it with underscores appended, so that no name in ``taken`` is it."""
    folded = {column.casefold() for column in taken}  # Spark resolves names without case
    while name.casefold() in folded:
        name = f"{name}_"
    return name
