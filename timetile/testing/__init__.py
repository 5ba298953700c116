"""Testing helpers shipped with timetile: the naive oracle and seeded data generators.

:func:`naive_backfill` computes a Join by brute force in plain Spark SQL (DESIGN §4): every
engine path is tested against it, and users can test their own definitions with it. The
generators make small tables that hold every edge case the semantics care about.
:class:`RedisServer` runs a throwaway ``redis-server`` for the online stores' tests, and
:func:`run_on_local_cluster` a program on a local Spark cluster, with its executors' logs
when it fails (:data:`SHORT_RUN_JAVA_OPTIONS` suit such a short-lived JVM).
"""

from timetile.core.equality import differing_cells, percentiles_within, same_value
from timetile.testing.generators import (
    EVENT_SCHEMA,
    MIN_EVENTS,
    MUTATION_SCHEMA,
    QUERY_SCHEMA,
    SNAPSHOT_SCHEMA,
    EntityTables,
    min_queries,
    random_entities,
    random_events,
    random_queries,
    to_spark,
)
from timetile.testing.local_cluster import SHORT_RUN_JAVA_OPTIONS, run_on_local_cluster
from timetile.testing.oracle import (
    naive_backfill,
    percentile_rank_bounds,
)
from timetile.testing.redis_server import RedisServer, emptied
from timetile.testing.sql_ops import SQL_OPS, SqlOp

__all__ = [
    "EVENT_SCHEMA",
    "MIN_EVENTS",
    "MUTATION_SCHEMA",
    "QUERY_SCHEMA",
    "SHORT_RUN_JAVA_OPTIONS",
    "SNAPSHOT_SCHEMA",
    "SQL_OPS",
    "EntityTables",
    "RedisServer",
    "SqlOp",
    "differing_cells",
    "emptied",
    "min_queries",
    "naive_backfill",
    "percentile_rank_bounds",
    "percentiles_within",
    "random_entities",
    "random_events",
    "random_queries",
    "run_on_local_cluster",
    "same_value",
    "to_spark",
]
