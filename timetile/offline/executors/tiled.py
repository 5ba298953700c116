"""The tiled executor: hop partials, heads, tail edges and tails (DESIGN §4, seed 000).

For hop size ``H`` (:func:`timetile.core.tiling.choose_hop`) a window ``[s, e)`` of a query
splits into a **tail edge** (events of hop ``floor(s, H)`` at or after ``s``), a **tail** (the
whole hops in ``[ceil(s, H), floor(e, H))``) and a **head** (events of hop ``floor(e, H)``
before ``e``). Three Spark stages compute them:

1. *hop pass* — events and head/edge requests, partitioned by (key, hop) and sorted: one
   merging scan per group gives the hop's partial state, each head's prefix state and each
   edge's suffix state. No task holds more than one hop of one key's raw events, which bounds
   skew.
2. *tail pass* — hop partials and tail requests, partitioned by key: a range index over the
   key's partials (prefix differences for invertible ops, a segment tree otherwise) answers
   each tail in O(1) or O(log n) merges.
3. *assembly* — each query's edge, tail and head states merged in time order and finalized.

Each head, edge and tail request is one per (query, window) and carries the query's time and
the window's index, so the answers of stages 1 and 2 go straight into the assembly's sort:
no distinct and no join matches them back to their queries (two windows sharing a bound
each get their own scan answer, a small price against a shuffle of every state).

Every stage streams sorted partitions through ``mapInArrow``
(:mod:`timetile.spark.sorted_groups`): Spark calls Python once per batch, not once per group
(as grouped UDFs would), but the merging scans themselves still run in Python for each
group, which is this executor's main cost. States cross stages as bytes
(``to_bytes``), and every state is computed by the core's aggregators: the same code as the
reference executor and the online fetcher.

This module plans the stages on Spark; what they share (columns, aggregators, the hop) is
:mod:`.tiled_layout`, and what their tasks run is :mod:`.tiled_passes`.
"""

from __future__ import annotations

import logging

from pyspark import StorageLevel
from pyspark.accumulators import Accumulator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.windows import window_spec
from timetile.core.tiling import window_pieces
from timetile.core.timeutil import DAY_MS
from timetile.core.windows import window_span
from timetile.offline.executors.features import output_schema
from timetile.offline.executors.partial_store import EPOCH_DAY, PartialStore, day_label
from timetile.offline.executors.tiled_layout import (
    ANCHOR,
    BOUND,
    CUT,
    EDGE,
    END,
    HEAD,
    HIGH,
    HOP,
    KIND,
    ORDER,
    PARTIAL,
    PREFIX,
    QUERY,
    SIDE,
    START,
    SUFFIX,
    TAIL,
    WINDOW,
    TiledLayout,
    partials_problem,
)
from timetile.offline.executors.tiled_passes import (
    Assembly,
    HopPass,
    LargestGroup,
    TailPass,
    largest_group_gauge,
)
from timetile.offline.options import BROADCAST_QUERY_LIMIT
from timetile.offline.plan import ExecutorOptions, PartPlan
from timetile.spark.result_types import arrow_schema
from timetile.spark.sorted_groups import sorted_by_groups
from timetile.spark.sources import TIME, epoch_day, table_identity
from timetile.spark.time_columns import COLUMNS

log = logging.getLogger(__name__)


def _bounds(layout: TiledLayout) -> dict[str, Column]:
    """Per query, each window's ``[start, end)``: the core's rule on Spark columns."""
    bounds: dict[str, Column] = {}
    for index, window in enumerate(layout.windows):
        start, end = window_span(COLUMNS, F.col(TIME), *window_spec(window))
        bounds |= {f"{START}{index}": start, f"{END}{index}": end}
    return bounds


def _cuts(layout: TiledLayout) -> dict[str, Column]:
    """Per query, each window's cut into edge, tail and head, over the bounds of :func:`_bounds`.

    The cut is the core's rule (:func:`~timetile.core.tiling.hops.window_pieces`) on Spark
    columns. The hop leaves no window an inner piece (:attr:`TiledLayout.hop_problem`).
    """
    cuts: dict[str, Column] = {}
    for index in range(len(layout.windows)):
        cut = window_pieces(COLUMNS, F.col(f"{START}{index}"), F.col(f"{END}{index}"),
                            layout.hop_ms)
        cuts |= {f"{CUT}edge_{index}": cut.edge, f"{CUT}edge_hop_{index}": cut.edge_hop,
                 f"{CUT}tail_lo_{index}": cut.tail_lo, f"{CUT}tail_hi_{index}": cut.tail_hi,
                 f"{CUT}head_{index}": cut.head, f"{CUT}head_hop_{index}": cut.head_hop}
    return cuts


def _pieces(layout: TiledLayout) -> Column:
    """Per query, an array of every window's pieces (anchor, edge, tail, head; null if none).

    It reads the columns of :func:`_bounds` and :func:`_cuts` by name. Each stage of the
    three is a projection of its own, so that no expression holds another's many times: the
    code Spark generates for the cut stays small (as one expression, the cut's shared floors
    and flags were copied into every piece, thousands of lines of code to compile per
    query plan).
    """
    piece = "struct<w:int,o:int,hop:bigint,bound:bigint,high:bigint>"
    null = F.lit(None).cast("bigint")
    made: list[Column] = []
    for index in range(len(layout.windows)):
        def cut(name: str, w: int = index) -> Column:
            return F.col(f"{CUT}{name}_{w}")

        def make(order: int, hop_start: Column, bound: Column, high: Column,
                 w: int = index) -> Column:
            return F.struct(F.lit(w).alias("w"), F.lit(order).alias("o"),
                            hop_start.alias("hop"), bound.alias("bound"), high.alias("high"))

        start, end = F.col(f"{START}{index}"), F.col(f"{END}{index}")
        made.append(make(ANCHOR, null, null, null))
        made.append(F.when(cut("edge"), make(EDGE, cut("edge_hop"), start, null)))
        made.append(F.when(cut("tail_lo") < cut("tail_hi"),
                           make(TAIL, null, cut("tail_lo"), cut("tail_hi"))))
        made.append(F.when(cut("head"), make(HEAD, cut("head_hop"), end, null)))
    return F.array(*made).cast(f"array<{piece}>")


def _binary_fields(layout: TiledLayout) -> list[T.StructField]:
    return [T.StructField(name, T.BinaryType()) for name in layout.state_columns]


def _hop_pass(layout: TiledLayout, events: DataFrame, requests: DataFrame | None,
              largest: Accumulator[tuple[int, str]] | None = None
              ) -> DataFrame:
    """Stage 1: events (with :data:`HOP`) and scan requests, by (key, hop).

    A request row holds its bound as :data:`TIME`, its :data:`SIDE`, and the query and
    window it serves.
    """
    keys = list(layout.keys)
    key_fields = [events.schema[key] for key in keys]
    value_columns = [c for c in events.columns if c not in (*keys, TIME, HOP)]
    rows = events.select(*keys, HOP, TIME, F.lit(0).alias(KIND),
                         F.lit(None).cast("int").alias(SIDE),
                         F.lit(None).cast("bigint").alias(QUERY),
                         F.lit(None).cast("int").alias(WINDOW), *value_columns)
    if requests is not None:
        rows = rows.unionByName(requests.select(
            *keys, HOP, TIME, F.lit(1).alias(KIND), SIDE, QUERY, WINDOW,
            *[F.lit(None).cast(events.schema[c].dataType).alias(c) for c in value_columns]))
    schema = T.StructType([*key_fields, T.StructField(HOP, T.LongType()),
                           T.StructField(BOUND, T.LongType()),
                           T.StructField(SIDE, T.IntegerType()),
                           T.StructField(QUERY, T.LongType()),
                           T.StructField(WINDOW, T.IntegerType()), *_binary_fields(layout)])
    return (sorted_by_groups(rows, [*keys, HOP], TIME, KIND)
            .mapInArrow(HopPass(layout, arrow_schema(schema, rows.sparkSession), largest), schema))


def _source_signature(plan: PartPlan, identity: str | None) -> str:
    """Describe what stored partials depend on in the source: table, time, select, where, keys.

    ``identity`` is the table's (:func:`~timetile.spark.sources.table_identity`); a source
    without one (a DataFrame, a temporary view) counts only by its selection and filters:
    :func:`_stored_partials` says so in the report.
    """
    group_by = plan.part.group_by
    key_types = [plan.events.schema[key].dataType.simpleString() for key in plan.keys]
    return repr((identity or "DataFrame", group_by.source.time_column,
                 group_by.source.projection, group_by.source.filters, group_by.keys, key_types))


def _stored_partials(layout: TiledLayout, plan: PartPlan, events: DataFrame,
                     options: ExecutorOptions, largest: Accumulator[tuple[int, str]]
                     ) -> DataFrame:
    """Hop partials from the store, computing only the days it lacks.

    One small job finds the days of the events. Of those the store lacks, the days that end
    by ``options.landed_before`` (without it: the days before the latest event's) are stored;
    a later day may still be landing, so its partials serve this run only.
    """
    problem = partials_problem(plan)  # BackfillJob refuses it before any job
    if problem is not None:
        raise ValueError(f"stored partials: {problem}")
    assert options.partials_path is not None
    name = plan.part.group_by.name
    spark = events.sparkSession
    source = plan.part.group_by.source
    table = getattr(source, "table", None)
    identity = table_identity(spark, table)
    store = PartialStore.at(options.partials_path, name,
                            layout.signature + _source_signature(plan, identity))
    stored = store.stored_days(spark)
    days = {row[0] for row in events.select(epoch_day(F.col(TIME))).distinct().collect()}
    missing = sorted(days - stored)
    if options.landed_before is not None:
        landed = [day for day in missing if (day + 1) * DAY_MS <= options.landed_before]
    else:  # the latest event's day may still be landing
        landed = [day for day in missing if day < max(days)]
    unlanded = [day for day in missing if day not in landed]
    columns = [*layout.keys, HOP, *layout.state_columns]

    def computed(of_days: list[int]) -> DataFrame:
        chosen = events.where(epoch_day(F.col(TIME)).isin(of_days))
        return _hop_pass(layout, chosen, None, largest).select(*columns)

    if landed:
        store.write(computed(landed).withColumn(EPOCH_DAY, epoch_day(F.col(HOP))))
    said = f"{plan.part.label}: hop partials of "
    options.notes[:] = [note for note in options.notes if not note.startswith(said)]
    options.notes.append(  # this build's, in place of an earlier build's (a new dataframe())
        f"{said}{len(days) - len(missing)} days reused, {len(landed)} "
        f"computed and stored, in {store.location}"
        + (f"; {len(unlanded)} days computed but not stored, as they may still be landing "
           f"(from {day_label(unlanded[0])})" if unlanded else ""))
    if identity is None:
        read = (f"{source.label!r}, which names no stored table (a temporary view?)"
                if isinstance(table, str) else "a DataFrame")
        message = (f"{name} reads {read}, so its stored partials are known by the GroupBy's "
                   "name and definition alone: another GroupBy of that name over other data "
                   "must store its partials under another partials_path")
        if message not in options.notes:
            log.warning("%s", message)
            options.notes.append(message)
    if not stored and not landed:  # an empty store: every partial is computed here
        return computed(unlanded)
    partials = store.read(spark).select(*columns)
    return partials.unionByName(computed(unlanded)) if unlanded else partials


def tiled_features(plan: PartPlan, queries: DataFrame,
                   options: ExecutorOptions | None = None) -> DataFrame:
    """Every feature of ``plan`` at every query, by the three tiled stages.

    With ``options.partials_path``, hop partials come from the store (see
    :mod:`.partial_store`) and stage 1 reads only the events of the hops that heads and
    tail edges ask for.
    """
    options = options or ExecutorOptions()
    layout = TiledLayout.of(plan)
    keys = list(layout.keys)
    key_fields = [queries.schema[key] for key in keys]
    spark = queries.sparkSession

    # Null pieces go after the explode: a higher-order filter's lambda variable is new in
    # every build, so its generated code would miss Spark's cache in every backfill.
    pieces = queries.withColumns(_bounds(layout)).withColumns(_cuts(layout)).select(
        *keys, TIME, F.explode(_pieces(layout)).alias("p")).where(F.col("p").isNotNull()).select(
        *keys, TIME, F.col("p.w").alias(WINDOW), F.col("p.o").alias(ORDER),
        F.col("p.hop").alias(HOP), F.col("p.bound").alias(BOUND), F.col("p.high").alias(HIGH))
    # Every request carries the query and window it serves, so that each stage's answers
    # go straight to the assembly: no join matches them back to their queries.
    scans = pieces.where(F.col(ORDER).isin(EDGE, HEAD)).select(
        *keys, HOP, F.col(BOUND).alias(TIME),
        F.when(F.col(ORDER) == HEAD, PREFIX).otherwise(SUFFIX).alias(SIDE),
        F.col(TIME).alias(QUERY), WINDOW)
    events = plan.events.withColumn(HOP, COLUMNS.floor(F.col(TIME), layout.hop_ms))
    # Few queries: a broadcast join keeps only the rows of queried keys, before any shuffle
    # (a store's partials are kept whole: a later backfill may ask for other keys).
    few = options.asked_rows is not None and options.asked_rows <= BROADCAST_QUERY_LIMIT
    asked_keys = F.broadcast(queries.select(*keys).distinct()) if few else None

    # Stage 1: hop pass over events and head/edge requests, by (key, hop).
    largest = spark.sparkContext.accumulator((0, ""), LargestGroup())
    options.gauges[f"largest (key, hop) group of {plan.part.label}"] = largest_group_gauge(
        largest)
    if options.partials_path is None:
        if asked_keys is not None:
            events = events.join(asked_keys, keys, "left_semi")
        # Stage 1 feeds both stage 2 (partials) and stage 3 (scans): keep it, so that Spark
        # does not run the heaviest stage twice. Spark drops it under memory pressure.
        stage1 = _hop_pass(layout, events, scans, largest).persist(
            StorageLevel.MEMORY_AND_DISK)
        options.cached.append(stage1)  # until BackfillJob.release
        partials = stage1.where(F.col(SIDE) == PARTIAL).select(
            *keys, HOP, *layout.state_columns)
    else:
        partials = _stored_partials(layout, plan, events, options, largest)
        if asked_keys is not None:
            partials = partials.join(asked_keys, keys, "left_semi")
        requested = events.join(scans.select(*keys, HOP), on=[*keys, HOP], how="left_semi")
        stage1 = _hop_pass(layout, requested, scans, largest)

    # Stage 2: tail pass over hop partials and tail requests, by key.
    tails = pieces.where(F.col(ORDER) == TAIL).select(
        *keys, F.col(BOUND).alias(HOP), HIGH, F.lit(1).alias(KIND), F.col(TIME).alias(QUERY),
        WINDOW, *[F.lit(None).cast("binary").alias(c) for c in layout.state_columns])
    stage2_schema = T.StructType([*key_fields, T.StructField(QUERY, T.LongType()),
                                  T.StructField(WINDOW, T.IntegerType()),
                                  *_binary_fields(layout)])
    partials_and_tails = partials.select(
        *keys, HOP, F.lit(None).cast("bigint").alias(HIGH), F.lit(0).alias(KIND),
        F.lit(None).cast("bigint").alias(QUERY), F.lit(None).cast("int").alias(WINDOW),
        *layout.state_columns).unionByName(tails)
    stage2 = (sorted_by_groups(partials_and_tails, keys, KIND, HOP)
              .mapInArrow(TailPass(layout, arrow_schema(stage2_schema, spark)), stage2_schema))

    # Stage 3: assembly of each query's anchor, edges, tails and heads.
    columns = [*keys, TIME, WINDOW, ORDER, *layout.state_columns]
    scanned = stage1.where(F.col(SIDE) != PARTIAL).select(
        *keys, F.col(QUERY).alias(TIME), WINDOW,
        F.when(F.col(SIDE) == PREFIX, HEAD).otherwise(EDGE).alias(ORDER), *layout.state_columns)
    tailed = stage2.select(*keys, F.col(QUERY).alias(TIME), WINDOW, F.lit(TAIL).alias(ORDER),
                           *layout.state_columns)
    anchors = pieces.where(F.col(ORDER) == ANCHOR).select(
        *keys, TIME, WINDOW, ORDER,
        *[F.lit(None).cast("binary").alias(c) for c in layout.state_columns])
    assembled = sorted_by_groups(anchors.select(*columns).unionByName(scanned.select(*columns))
                                 .unionByName(tailed.select(*columns)),
                                 [*keys, TIME], WINDOW, ORDER)
    schema = output_schema(plan, queries)
    return assembled.mapInArrow(Assembly(layout, arrow_schema(schema, spark)), schema)
