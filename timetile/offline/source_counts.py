"""The count job: every source's rows, those a backfill cannot use, and its fullest key buckets.

It runs when a :class:`~timetile.offline.backfill.BackfillJob` is planned (its ``plan()``),
before any feature work: the report's rows left out, ``strict``, and the search for hot keys
read it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from timetile.offline.hot_keys import key_bucket
from timetile.offline.plan import BackfillPlan
from timetile.offline.report import SourceCounts


def count_sources(plan: BackfillPlan, bounded: Mapping[int, Collection[tuple[str, ...]]],
                  left_asked: Column | None = None) -> list[SourceCounts]:
    """Count every source's rows, those it cannot use, and its fullest key buckets: one job.

    It also finds the latest time of each source that gives its time as integers
    (:attr:`SourceCounts.latest_integer_time`) and, given ``left_asked`` (true for the left
    rows in the job's range), the left's timed rows outside it
    (:attr:`SourceCounts.outside_range`).

    ``bounded`` names, per index into ``plan.counted``, the tuples of key columns whose
    fullest bucket to find (:attr:`SourceCounts.fullest_bucket`): a source's usable rows are
    tallied per bucket of each tuple's hash (:func:`key_bucket`), the fullest kept. One
    aggregate row per (source, tuple of keys), tagged and unioned, so that the sources are
    scanned side by side instead of one job (and its scheduling) after another; a source is
    scanned once per tuple of keys, or once without any.
    """
    tallies = []
    for index, source in enumerate(plan.counted):
        no_key = F.lit(False)
        for key in source.keys:
            no_key |= F.col(key).isNull()
        integer_time = (F.lit(None).cast("long") if source.integer_time is None
                        else source.integer_time)
        flags = [source.placed.alias("_tt_placed"), no_key.alias("_tt_no_key"),
                 integer_time.alias("_tt_integer_time")]
        asked = left_asked if index == 0 and left_asked is not None else F.lit(True)
        flags.append(asked.alias("_tt_asked"))
        nulls = [f"null_bucket_{position}" for position in range(len(source.buckets))]
        flags += [F.col(bucket).isNull().alias(f"_tt_{null}")
                  for bucket, null in zip(source.buckets, nulls, strict=True)]
        placed, keyless = F.col("_tt_placed"), F.col("_tt_no_key")
        counts = [F.count(F.lit(1)).alias("rows"), F.count_if(~placed).alias("without_time"),
                  F.count_if(placed & keyless).alias("without_key"),
                  F.count_if(placed & ~F.col("_tt_asked")).alias("outside"),
                  *[F.count_if(placed & ~keyless & F.col(f"_tt_{null}")).alias(null)
                    for null in nulls],
                  F.max("_tt_integer_time").alias("latest")]
        tag = [F.lit(index).alias("source")]
        if not bounded.get(index):  # one aggregate: no shuffle of buckets
            tallies.append(source.frame.select(*flags).agg(
                *tag, F.lit(0).alias("keys"), *counts, F.lit(None).cast("long").alias("fullest")))
            continue
        for position, keys in enumerate(sorted(bounded[index])):
            tallies.append(
                source.frame.select(key_bucket(keys).alias("_tt_bucket"), *flags)
                .groupBy("_tt_bucket")
                .agg(*counts, F.count_if(placed & ~keyless).alias("usable"))
                .agg(*tag, F.lit(position).alias("keys"),
                     *[F.coalesce(F.sum(name), F.lit(0)).alias(name)  # 0, not null, if empty
                       for name in ("rows", "without_time", "without_key", "outside", *nulls)],
                     F.max("latest").alias("latest"), F.max("usable").alias("fullest")))
    union = tallies[0]
    for tally in tallies[1:]:
        union = union.unionByName(tally, allowMissingColumns=True)  # buckets differ
    rows = {(row["source"], row["keys"]): row for row in union.collect()}  # a few small rows
    found = []
    for index, source in enumerate(plan.counted):
        row = rows[(index, 0)]
        fullest = {keys: rows[(index, position)]["fullest"] or 0
                   for position, keys in enumerate(sorted(bounded.get(index, ())))}
        null_buckets = {bucket: row[f"null_bucket_{position}"]
                        for position, bucket in enumerate(source.buckets)}
        found.append(SourceCounts(source.role, source.label, row["rows"], row["without_time"],
                                  row["without_key"], source.time, fullest, row["latest"],
                                  row["outside"], null_buckets))
    return found
