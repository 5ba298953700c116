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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.windows import window_spec
from timetile.core.aggregators import Aggregator
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.tiling import (
    choose_hop,
    prefix_states,
    range_index,
    suffix_states,
    window_pieces,
)
from timetile.core.timeutil import DAY_MS, ms_to_iso
from timetile.core.windows import WindowKind, window_span
from timetile.offline.executors.features import (
    build_aggregator,
    kept_feature_values,
    output_schema,
    refused,
)
from timetile.offline.executors.partial_store import EPOCH_DAY, PartialStore, day_label
from timetile.offline.options import BROADCAST_QUERY_LIMIT
from timetile.offline.plan import ExecutorOptions, Feature, PartPlan
from timetile.spark.result_types import arrow_schema, arrow_value
from timetile.spark.sorted_groups import (
    Rows,
    group_starts,
    map_groups,
    sorted_by_groups,
    whole_groups,
)
from timetile.spark.sources import TIME, epoch_day, table_identity
from timetile.spark.time_columns import COLUMNS

log = logging.getLogger(__name__)

HOP = "_tt_hop"
BOUND = "_tt_bound"
SIDE = "_tt_side"
KIND = "_tt_kind"
HIGH = "_tt_high"
WINDOW = "_tt_window"
ORDER = "_tt_order"
QUERY = "_tt_query"  # the time of the query a scan or tail request serves
START = "_tt_start_"  # a window's start, by its index: _tt_start_0
END = "_tt_end_"
CUT = "_tt_cut_"  # a window's pieces, by name and index: _tt_cut_edge_hop_0

#: What a stage-1 output row holds: a hop's partial, a head's prefix, an edge's suffix.
PARTIAL, PREFIX, SUFFIX = 0, 1, 2
#: Order in which a window's pieces are merged: edge, tail, head (time order).
ANCHOR, EDGE, TAIL, HEAD = 0, 1, 2, 3


def state_column(index: int) -> str:
    """Name the column holding the state bytes of the ``index``-th distinct aggregator."""
    return f"_tt_state_{index}"


@dataclass(frozen=True)
class TiledLayout:
    """What the stages share: the part's distinct aggregators, windows and hop size."""

    keys: tuple[str, ...]
    features: tuple[Feature, ...]
    aggregations: tuple[Feature, ...]  # one representative feature per distinct aggregator
    feature_aggregator: tuple[int, ...]  # feature index → aggregator index
    windows: tuple[Any, ...]  # distinct windows (None = lifetime)
    feature_window: tuple[int, ...]  # feature index → window index

    @classmethod
    def of(cls, plan: PartPlan) -> TiledLayout:
        """Index a part's features by distinct aggregator and window."""
        aggregator_ids: dict[tuple[Any, ...], int] = {}
        window_ids: dict[Any, int] = {}
        representatives: list[Feature] = []
        for feature in plan.features:
            if feature.aggregator_key not in aggregator_ids:
                aggregator_ids[feature.aggregator_key] = len(aggregator_ids)
                representatives.append(feature)
            window_ids.setdefault(feature.window, len(window_ids))
        return cls(
            keys=tuple(plan.keys),
            features=plan.features,
            aggregations=tuple(representatives),
            feature_aggregator=tuple(aggregator_ids[f.aggregator_key] for f in plan.features),
            windows=tuple(window_ids),
            feature_window=tuple(window_ids[f.window] for f in plan.features),
        )

    @property
    def hop_ms(self) -> int:
        """The hop size of the tiled pass, computed when asked.

        The interval tree shares this layout and never asks: it takes windows of any length.

        Raises:
            ValueError: a sliding window shorter than two hops (:meth:`hop_problem`).

        """
        hop, problem = self._hop()
        if problem is not None:
            raise ValueError(f"{problem}: use executor 'auto' or 'interval_tree' for them")
        return hop

    @property
    def hop_problem(self) -> str | None:
        """Say why no hop suits the windows (None when one does).

        :func:`~timetile.core.tiling.choose_hop` keeps sliding windows at least four hops
        long where it can, and aligns sawtooth and hopping starts to the hop; a sliding
        window of less than two hops (1 ms, say) would need
        :func:`~timetile.core.tiling.split_windows`'s ``inner`` pieces, which the tiled pass
        has not got. O(windows).
        """
        return self._hop()[1]

    def _hop(self) -> tuple[int, str | None]:
        """Return the hop :func:`~timetile.core.tiling.choose_hop` picks, and its problem."""
        specs = [window_spec(window) for window in self.windows]
        hop = choose_hop(specs)
        short = [length for kind, length, _ in specs
                 if kind is WindowKind.SLIDING and length is not None and length < 2 * hop]
        if short:
            return hop, (f"the tiled executor's hop of {hop} ms leaves sliding windows of "
                         f"{short} ms without whole hops")
        return hop, None

    @property
    def signature(self) -> str:
        """What stored hop partials depend on: hop size, aggregations, their states' forms.

        A form is :attr:`~timetile.core.aggregators.base.Aggregator.state_version`.
        """
        parts = [(f.aggregation.column, f.aggregation.op, f.aggregation.k,
                  f.aggregation.percentiles, f.input_type.value, f.bucket)
                 # only a changed form adds its version: the other ops' partials stay valid
                 + ((aggregator.state_version,) if aggregator.state_version > 1 else ())
                 + (() if f.aggregation.half_life is None else (f.aggregation.half_life,))
                 for f, aggregator in zip(self.aggregations, self.aggregators(), strict=True)]
        return repr((self.hop_ms, parts))

    def aggregators(self) -> list[Aggregator[Any]]:
        """Fresh aggregators, one per distinct aggregation (built in each task)."""
        return [build_aggregator(feature) for feature in self.aggregations]

    @property
    def state_columns(self) -> list[str]:
        """The state columns, one per distinct aggregator."""
        return [state_column(i) for i in range(len(self.aggregations))]


def tileable(plan: PartPlan) -> bool:
    """Whether the tiled executor can compute ``plan``: a hop fits all its windows.

    A 1 ms sliding window has none (:attr:`TiledLayout.hop_problem`).
    """
    return TiledLayout.of(plan).hop_problem is None


def partials_problem(plan: PartPlan) -> str | None:
    """Say why ``plan``'s hop partials cannot be stored (None when they can).

    A stored day holds whole hops, so the tiled pass must have a hop, and one that divides a
    day. No job runs.
    """
    name = plan.part.group_by.name
    layout = TiledLayout.of(plan)
    if layout.hop_problem is not None:
        return f"GroupBy {name!r}: {layout.hop_problem}"
    hop = layout.hop_ms
    if DAY_MS % hop:
        return (f"GroupBy {name!r}: its windows' hop is {hop:,} ms, which does not divide a "
                "day, and a stored day must hold whole hops")
    return None


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


class LargestGroup(AccumulatorParam[tuple[int, str]]):
    """A Spark accumulator of the largest (key, hop) group: (events, description)."""

    def zero(self, value: tuple[int, str]) -> tuple[int, str]:
        """Return no group."""
        del value
        return (0, "")

    def addInPlace(  # noqa: N802  (PySpark's name)
        self, value1: tuple[int, str], value2: tuple[int, str]
    ) -> tuple[int, str]:
        """Keep the larger group (idempotent, so retried tasks do no harm)."""
        return max(value1, value2)


def largest_group_gauge(accumulator: Accumulator[tuple[int, str]]) -> Callable[[], str | None]:
    """Render the accumulator for the job report; None until a task has run."""

    def read() -> str | None:
        events, where = accumulator.value
        return f"{events:,} events at {where}" if events else None

    return read


class HopPass:
    """Stage 1 over one partition: per (key, hop), the partial and the requested scans."""

    def __init__(self, layout: TiledLayout, schema: pa.Schema,
                 largest: Accumulator[tuple[int, str]] | None = None) -> None:
        self.layout = layout
        self.schema = schema
        self.largest = largest

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield stage-1 rows for every whole (key, hop) group of the partition."""
        aggregators = self.layout.aggregators()
        for table in whole_groups(batches, [*self.layout.keys, HOP]):
            yield from self._groups(table, aggregators).to_batches()

    def _groups(self, table: pa.Table, aggregators: list[Aggregator[Any]]) -> pa.Table:
        """Return the stage-1 rows of a table of whole (key, hop) groups.

        Per group its partial, and per request row (one per query and window) its prefix or
        suffix state. The columns
        are read out of Arrow once per table and each group folds a slice of them: O(rows)
        vectorized, then per group one ``fold`` of each aggregator and, where the group
        has requests, one ``update`` per distinct request bound.
        """
        starts = group_starts(table, [*self.layout.keys, HOP])
        is_request = table.column(KIND).to_numpy(zero_copy_only=False) == 1
        events = table.filter(pa.array(~is_request))
        requests = table.filter(pa.array(is_request))
        event_cuts = _group_cuts(~is_request, starts)  # group g: events[cuts[g]:cuts[g + 1]]
        request_cuts = _group_cuts(is_request, starts)
        times = events.column(TIME).to_numpy().astype(np.int64)
        bounds = requests.column(TIME).to_numpy().astype(np.int64)
        sides = requests.column(SIDE).to_numpy(zero_copy_only=False)
        firsts = table.take(pa.array(starts))
        if self.largest is not None and len(starts):
            sizes = np.diff(event_cuts)
            most = int(np.argmax(sizes))
            keys = tuple(firsts.column(key)[most].as_py() for key in self.layout.keys)
            hop = ms_to_iso(firsts.column(HOP)[most].as_py())
            self.largest.add((int(sizes[most]), f"key {keys}, hop {hop}"))
        partials: list[list[bytes]] = []
        scans: list[list[bytes]] = []
        for aggregator, feature in zip(aggregators, self.layout.aggregations, strict=True):
            values, kept = kept_feature_values(events, feature)
            kept_times = times[kept]
            value_cuts = _group_cuts(kept, event_cuts[:-1])
            partial: list[bytes] = []
            scanned: list[bytes] = [b""] * requests.num_rows
            for group in range(len(starts)):
                low, high = value_cuts[group], value_cuts[group + 1]
                group_values, group_times = values[low:high], kept_times[low:high]
                partial.append(aggregator.to_bytes(aggregator.fold(group_values, group_times)))
                first, last = request_cuts[group], request_cuts[group + 1]
                if first == last:
                    continue
                for side, scan in ((PREFIX, prefix_states), (SUFFIX, suffix_states)):
                    at = first + np.flatnonzero(sides[first:last] == side)
                    for position, state in zip(
                            at.tolist(), scan(aggregator, group_times, group_values, bounds[at]),
                            strict=True):
                        scanned[position] = aggregator.to_bytes(state)
            partials.append(partial)
            scans.append(scanned)
        return pa.concat_tables([
            self._rows(firsts, np.full(len(starts), PARTIAL), partials, requested=False),
            self._rows(requests, sides, scans, requested=True)])

    def _rows(self, source: pa.Table, sides: np.ndarray, states: list[list[bytes]], *,
              requested: bool) -> pa.Table:
        """Stage-1 rows: ``source``'s keys and hop, sides and states; a request's query too.

        A partial's row (``requested`` false) has null bound, query and window.
        """
        columns = {name: source.column(name) for name in (*self.layout.keys, HOP)}
        for name in (BOUND, QUERY, WINDOW):
            columns[name] = (source.column(TIME if name == BOUND else name) if requested
                             else pa.nulls(len(sides)))
        columns[SIDE] = pa.array(np.asarray(sides, dtype=np.int32))
        columns |= {state_column(index): pa.array(column, pa.binary())
                    for index, column in enumerate(states)}
        return pa.table([columns[field.name].cast(field.type) for field in self.schema],
                        schema=self.schema)


def _group_cuts(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Return where each group's rows of ``mask`` begin among them, and their total last.

    The groups start at the rows ``starts`` (ascending, the first at 0); group ``g`` holds
    the masked rows ``[cuts[g], cuts[g + 1])`` of those ``mask`` selects. O(rows).
    """
    counts = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])
    cuts: np.ndarray = counts[np.append(starts, len(mask))]
    return cuts


class TailPass:
    """Stage 2 over one partition: per key, every tail from a range index over its partials."""

    def __init__(self, layout: TiledLayout, schema: pa.Schema) -> None:
        self.layout = layout
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield one row per tail request (a query's window) of every whole key group."""
        aggregators = self.layout.aggregators()
        return map_groups(batches, list(self.layout.keys), self.schema,
                          lambda group, rows: self._key(group, aggregators, rows))

    def _key(self, group: pa.Table, aggregators: list[Aggregator[Any]], rows: Rows) -> None:
        is_request = group.column(KIND).to_numpy(zero_copy_only=False) == 1
        partials = group.filter(pa.array(~is_request))
        requests = group.filter(pa.array(is_request))
        if requests.num_rows == 0:
            return
        hops = partials.column(HOP).to_numpy().astype(np.int64)
        lows = np.searchsorted(hops, requests.column(HOP).to_numpy().astype(np.int64))
        highs = np.searchsorted(hops, requests.column(HIGH).to_numpy().astype(np.int64))
        for name in (*self.layout.keys, QUERY, WINDOW):
            rows[name].extend(requests.column(name).to_pylist())
        for index, aggregator in enumerate(aggregators):
            states = [aggregator.from_bytes(data)
                      for data in partials.column(state_column(index)).to_pylist()]
            index_structure = range_index(aggregator, states)
            rows[state_column(index)].extend(
                aggregator.to_bytes(index_structure.query(int(low), int(high)))
                for low, high in zip(lows.tolist(), highs.tolist(), strict=True))


class Assembly:
    """Stage 3 over one partition: per query, merge each window's pieces and finalize."""

    def __init__(self, layout: TiledLayout, schema: pa.Schema) -> None:
        self.layout = layout
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield one finished row per query."""
        aggregators = self.layout.aggregators()
        return map_groups(batches, [*self.layout.keys, TIME], self.schema,
                          lambda group, rows: self._query(group, aggregators, rows))

    def _query(self, group: pa.Table, aggregators: list[Aggregator[Any]], rows: Rows) -> None:
        for name in (*self.layout.keys, TIME):
            rows[name].append(group.column(name)[0].as_py())
        at = rows[TIME][-1]
        windows = group.column(WINDOW).to_pylist()
        state_lists = [group.column(name).to_pylist() for name in self.layout.state_columns]
        for index, feature in enumerate(self.layout.features):
            aggregator = aggregators[self.layout.feature_aggregator[index]]
            window = self.layout.feature_window[index]
            state = aggregator.init()
            for row_window, data in zip(
                    windows, state_lists[self.layout.feature_aggregator[index]], strict=True):
                if row_window == window and data is not None:
                    state = aggregator.merge(state, aggregator.from_bytes(data))
            try:
                rows[feature.name].append(arrow_value(aggregator.finalize_at(state, at)))
            except ResultOverflowError as error:
                raise refused(feature, error) from None


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
