"""The contenders: each computes sum, count and max of ``value`` over the sliding windows
``[q − 1d, q)`` and ``[q − 7d, q)`` for every query ``(key, q)``.

Each one returns, for a set of inputs, either a Spark DataFrame or a DuckDB SELECT whose rows
are ``RESULT_COLUMNS``; the runner times materializing it (a ``noop`` write for Spark,
``CREATE TEMP TABLE … AS`` for DuckDB) and, for the correctness check, collects it on a sample.
On an empty window every contender gives count 0 and null sum and max (DESIGN §2).

With other ``ops`` (``backfill.py --ops``), or with buckets (``--buckets``), only timetile's
executors run, against each other: the hand-written plans compute sum, count and max alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.offline.options import DEFAULT_MAX_KEY_EVENTS

OPS = ("sum", "count", "max")
WINDOWS = {"1d": 86_400_000, "7d": 7 * 86_400_000}
#: ``k`` of the ``_k`` ops, when ``--ops`` asks for them.
K = 5
#: The bucket column of ``--buckets``.
BUCKET = "bucket"


def result_columns(ops: tuple[str, ...] = OPS) -> tuple[str, ...]:
    """The columns every contender returns: the query, then each op for each window."""
    return ("key", "ts", *(f"{op}_{w}" for w in WINDOWS for op in ops))


RESULT_COLUMNS = result_columns()
SEGTREE = "spark.sql.window.segmentTree.enabled"

# The naive plan of seed 000, as a left join so that queries with an empty week stay (count 0).
NAIVE_SQL = """
SELECT q.key, q.ts,
  sum(e.value) FILTER (WHERE e.ts >= q.ts - {d1}) AS sum_1d,
  count(e.value) FILTER (WHERE e.ts >= q.ts - {d1}) AS count_1d,
  max(e.value) FILTER (WHERE e.ts >= q.ts - {d1}) AS max_1d,
  sum(e.value) AS sum_7d, count(e.value) AS count_7d, max(e.value) AS max_7d
FROM {queries} q LEFT JOIN {events} e
  ON e.key = q.key AND e.ts < q.ts AND e.ts >= q.ts - {d7}
GROUP BY q.key, q.ts
"""

# Queries ride along the events with a null value, so they add nothing to any frame; the frame
# ends 1 ms before the row, so events at exactly q are left out as the contract says.
WINDOW_SQL = """
SELECT key, ts, sum_1d, count_1d, max_1d, sum_7d, count_7d, max_7d FROM (
  SELECT key, ts, is_query,
    sum(value) OVER d1 AS sum_1d, count(value) OVER d1 AS count_1d, max(value) OVER d1 AS max_1d,
    sum(value) OVER d7 AS sum_7d, count(value) OVER d7 AS count_7d, max(value) OVER d7 AS max_7d
  FROM (
    SELECT key, ts, value, false AS is_query FROM {events}
    UNION ALL
    SELECT key, ts, CAST(NULL AS DOUBLE) AS value, true AS is_query FROM {queries}
  ) AS rows
  WINDOW d1 AS (PARTITION BY key ORDER BY ts RANGE BETWEEN {d1} PRECEDING AND 1 PRECEDING),
         d7 AS (PARTITION BY key ORDER BY ts RANGE BETWEEN {d7} PRECEDING AND 1 PRECEDING)
) AS framed
WHERE is_query
"""


def _sql(template: str, events: str, queries: str) -> str:
    return template.format(events=events, queries=queries, d1=WINDOWS["1d"], d7=WINDOWS["7d"])


@dataclass(frozen=True)
class Inputs:
    """The same data, as each engine reads it (all of it, or the check's sample of keys).

    The Spark contenders, timetile included, start from the same DataFrames, read (file
    listing and Parquet footers) before any clock; DuckDB reads its files in its query.
    """

    spark: SparkSession
    events: DataFrame
    queries: DataFrame
    events_duck: str  # a DuckDB FROM item
    queries_duck: str


def make_inputs(spark: SparkSession, events: Path, queries: Path,
                sample: tuple[int, int] | None = None) -> Inputs:
    """Inputs over the Parquet at ``events`` and ``queries``; with ``sample=(m, r)`` only the
    keys with ``key % m == r``."""
    def duck(path: Path) -> str:
        scan = f"read_parquet('{path}/*.parquet')"
        if sample is None:
            return scan
        return f"(SELECT * FROM {scan} WHERE key % {sample[0]} = {sample[1]})"

    frames = [spark.read.parquet(str(path)) for path in (events, queries)]
    if sample is not None:
        frames = [frame.where(F.col("key") % sample[0] == sample[1]) for frame in frames]
    return Inputs(spark, frames[0], frames[1], duck(events), duck(queries))


@dataclass(frozen=True)
class Contender:
    """One way to compute the features."""

    name: str  # for --only
    title: str  # for the table
    engine: str  # "spark" or "duckdb"
    family: str  # "spark_sql", "duckdb", "floor" or "timetile"
    build: Callable[[Inputs], DataFrame | str]
    conf: Mapping[str, str] = field(default_factory=dict)
    checked: bool = True  # computes the features, so it takes part in the check


def _spark_sql(template: str) -> Callable[[Inputs], DataFrame]:
    def build(inputs: Inputs) -> DataFrame:
        inputs.events.createOrReplaceTempView("bench_events")
        inputs.queries.createOrReplaceTempView("bench_queries")
        return inputs.spark.sql(_sql(template, "bench_events", "bench_queries"))
    return build


def _duck_sql(template: str) -> Callable[[Inputs], str]:
    def build(inputs: Inputs) -> str:
        return _sql(template, inputs.events_duck, inputs.queries_duck)
    return build


def _scan(inputs: Inputs) -> DataFrame:
    # Reads every column of every event once: what any plan pays at least.
    return inputs.events.agg(F.sum("value"), F.count("value"), F.max("value"),
                             F.max("ts"), F.sum("key"))


def with_buckets(events: DataFrame, buckets: int) -> DataFrame:
    """The events with a string column :data:`BUCKET` of ``buckets`` values: the integer part
    of ``value`` modulo ``buckets``."""
    return events.withColumn(BUCKET, F.pmod(F.floor("value"), F.lit(buckets)).cast("string"))


def _timetile(executor: str, max_key_events: int | None, ops: tuple[str, ...],
              buckets: int) -> Callable[[Inputs], DataFrame]:
    suffix = f"_by_{BUCKET}" if buckets else ""

    def build(inputs: Inputs) -> DataFrame:
        import timetile as tt

        events = tt.EventSource(with_buckets(inputs.events, buckets) if buckets
                                else inputs.events, time_column="ts")
        group_by = tt.GroupBy("ev", events, ["key"], [
            tt.Aggregation("value", op, windows=list(WINDOWS),
                           k=K if op.endswith("_k") else None,
                           buckets=[BUCKET] if buckets else None) for op in ops
        ])
        join = tt.Join("bench", left=tt.EventSource(inputs.queries, time_column="ts"),
                       parts=[group_by])
        frame = tt.backfill(join, inputs.spark, executor=executor,
                            max_key_events=(DEFAULT_MAX_KEY_EVENTS if max_key_events is None
                                            else max_key_events))
        return frame.select("key", "ts", *(F.col(f"ev_value_{op}_{w}{suffix}").alias(f"{op}_{w}")
                                           for w in WINDOWS for op in ops))
    return build


def contenders(executors: list[str], *, segtree: bool, max_key_events: int | None = None,
               ops: tuple[str, ...] = OPS, buckets: int = 0) -> list[Contender]:
    """Every contender, timetile once per executor (with ``max_key_events`` if given, else
    the library's default); the segment-tree pair only if ``segtree`` (the conf exists in
    this Spark), else one plain window run. With ``ops`` other than :data:`OPS`, or
    ``buckets`` (timetile's features broken down by :func:`with_buckets`), timetile's
    executors alone."""
    mine = [Contender(f"timetile[{name}]", f"timetile[{name}]", "spark", "timetile",
                      _timetile(name, max_key_events, ops, buckets)) for name in executors]
    if ops != OPS or buckets:
        return mine
    if segtree:
        windows = [
            Contender("spark_window_segtree", "Spark window, segtree on", "spark", "spark_sql",
                      _spark_sql(WINDOW_SQL), {SEGTREE: "true"}),
            Contender("spark_window", "Spark window, segtree off", "spark", "spark_sql",
                      _spark_sql(WINDOW_SQL), {SEGTREE: "false"}),
        ]
    else:
        windows = [Contender("spark_window", "Spark window", "spark", "spark_sql",
                             _spark_sql(WINDOW_SQL))]
    return [
        Contender("spark_join", "naive Spark join", "spark", "spark_sql", _spark_sql(NAIVE_SQL)),
        *windows,
        Contender("duckdb_join", "DuckDB naive join", "duckdb", "duckdb", _duck_sql(NAIVE_SQL)),
        Contender("duckdb_window", "DuckDB window", "duckdb", "duckdb", _duck_sql(WINDOW_SQL)),
        Contender("spark_scan", "Spark scan (floor)", "spark", "floor", _scan, checked=False),
        *mine,
    ]
