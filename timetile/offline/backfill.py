"""``backfill``: point-in-time-correct training data for a Join (DESIGN §2, contract).

The output holds every left row in ``[start, end]`` exactly once, duplicates included, its
columns unchanged, plus one column per (part, aggregation, window). A backfill is three
steps, each explicit in :class:`BackfillJob`:

1. **arguments** (``BackfillJob(...)``): checked, each error naming its argument; no Spark
   job runs;
2. **plan** (:meth:`BackfillJob.plan`): the sources' schemas are read and the definition
   checked against them, the input counted (one Spark job over every source, plus small
   ones for entity snapshot days, a query count where it decides, and a sampled search for
   hot keys where one could exist), and each part given its executors (a
   :class:`~timetile.offline.executors.Route`, from the capability table);
3. **output** (:meth:`BackfillJob.dataframe`): a lazy DataFrame; Spark computes it when it
   is written or collected.

:func:`backfill` does all three.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.join import Join
from timetile.core.timeutil import DAY_MS
from timetile.offline.arguments import (
    check_arguments,
    partials_location,
    shifted,
    time_range,
)
from timetile.offline.attach import can_ride, joined, ridden
from timetile.offline.derivations import apply_derivations, check_plan
from timetile.offline.executors import (
    EXECUTORS,
    Executor,
    Piece,
    Route,
    Source,
    route,
)
from timetile.offline.executors.entity import entity_output_fields
from timetile.offline.executors.tiled_layout import partials_problem
from timetile.offline.hot_keys import KeySplit, find_hot_keys, part_reach, worth_tallying
from timetile.offline.input_checks import check_input, snapshot_days
from timetile.offline.options import (
    AUTO,
    BROADCAST_QUERY_LIMIT,
    DEFAULT_EXECUTOR,
    DEFAULT_MAX_KEY_EVENTS,
)
from timetile.offline.plan import (
    AnyPartPlan,
    BackfillPlan,
    EntityPartPlan,
    ExecutorOptions,
    PartPlan,
    plan_backfill,
)
from timetile.offline.report import JobReport
from timetile.offline.source_counts import count_sources
from timetile.spark.sources import TIME, quote

#: The executors ``backfill(executor=...)`` may name besides ``"auto"``: those of events
#: (an entity part always runs on its own).
CHOOSABLE = tuple(name for name, executor in EXECUTORS.items()
                  if executor.source is Source.EVENTS)


class BackfillJob:
    """A backfill: arguments checked on construction, planned by :meth:`plan`, run lazily.

    Construction only checks the arguments: no Spark job runs. :meth:`plan` reads the
    sources' schemas, checks the definition against them and counts the input (Spark
    jobs); :meth:`dataframe` plans first if that has not happened, then returns the output.

    Args:
        join: the definition.
        spark: the session.
        start: first day of left rows to keep, ``YYYY-MM-DD`` (UTC), or None for all.
        end: last day of left rows to keep, inclusive, or None for all.
        strict: raise :class:`BadInputError` instead of leaving out rows without a time.
        executor: ``"auto"`` (the default: each part by the capability table,
            :func:`~timetile.offline.executors.route`) or one of :data:`CHOOSABLE`.
        partials_path: where to store and reuse hop partials between runs (a directory or
            URI); a later backfill of later days then computes only the days not stored.
            Implies the ``tiled`` executor.
        max_key_events: on the sweep, a key with more rows than this (its events and its
            left rows together) is cut into chunks of time, each swept in its own task (see
            :mod:`timetile.offline.hot_keys`). Finding such keys costs one sampled pass
            over a part's events and left rows, run only when a key could hold more than
            this (as counted by bucket of key hashes).
        landed_before: with ``partials_path``, the time (epoch milliseconds) before which
            every event has landed: the days that end by it are stored, later ones only
            computed. Default: the range's end (a day earlier for an entity left side,
            whose rows ask at their day's end; without a range, the start of the latest
            event's day). Give it when the range's last day is still landing.

    Raises:
        TypeError, ValueError: an argument that cannot work, named with its fix.

    """

    def __init__(
        self,
        join: Join,
        spark: SparkSession,
        start: str | None = None,
        end: str | None = None,
        *,
        strict: bool = False,
        executor: str = DEFAULT_EXECUTOR,
        partials_path: str | os.PathLike[str] | None = None,
        max_key_events: int = DEFAULT_MAX_KEY_EVENTS,
        landed_before: int | None = None,
    ) -> None:
        check_arguments(join, spark, executor=executor, strict=strict, executors=CHOOSABLE)
        if isinstance(max_key_events, bool) or not isinstance(max_key_events, int) \
                or max_key_events < 1:
            raise ValueError(f"max_key_events is {max_key_events!r}: give a positive int")
        if landed_before is not None and (isinstance(landed_before, bool)
                                          or not isinstance(landed_before, int)):
            raise ValueError(f"landed_before is {landed_before!r}: give epoch milliseconds "
                             "(an int), or None for the range's end")
        if partials_path is not None:
            partials_path = partials_location(partials_path, join)
            stores = [name for name in CHOOSABLE if EXECUTORS[name].stores_partials]
            if executor == AUTO:
                executor = stores[0]
            if executor not in stores:
                raise ValueError(f"partials_path works with the {' or '.join(stores)} "
                                 f"executor, not {executor!r}")
        if executor != AUTO and executor not in CHOOSABLE:
            raise ValueError(f"executor {executor!r} is unknown: use {AUTO!r} or one of "
                             f"{', '.join(CHOOSABLE)}")
        self.join = join
        self.spark = spark
        self.strict = strict
        self.range_ms = time_range(start, end)
        self.executor = executor
        self.max_key_events = max_key_events
        self.landed_before = landed_before
        self.report = JobReport(job=join.name, path=executor)
        self.options = ExecutorOptions(partials_path=partials_path, notes=self.report.notes,
                                       gauges=self.report.gauges)
        self._planned: BackfillPlan | None = None
        self._routes: tuple[Route, ...] = ()
        self._splits: dict[str, KeySplit | None] = {}  # by GroupBy name

    # --- planning ---------------------------------------------------------------------------

    def plan(self) -> BackfillJob:
        """Plan the backfill: schemas, checks, input counts, each part's route. Runs Spark jobs.

        Loads every source lazily and checks the definition against the real schemas; then
        one Spark job counts, over every source side by side, the rows that cannot be used
        (and, for the parts that may sweep, the rows of their fullest bucket of key hashes);
        small jobs find the days of entity snapshots; each part gets its route, for which
        ``auto`` may count a part's distinct queries (when the left has more timed rows than
        :data:`~timetile.offline.options.BROADCAST_QUERY_LIMIT`); a part that sweeps and
        could hold a key of more than ``max_key_events`` rows is sampled for hot keys. Only
        the first call that succeeds plans; it returns the job. A call that fails leaves the
        job as it was, so a later call plans again.

        Raises:
            DefinitionError: the definition cannot work against the real schemas.
            BadInputError: ``strict`` and some rows have no usable time, or an entity
                part's query days lack the snapshot of the day before.

        """
        if self._routes:  # planned (a Join has parts, each with its route)
            return self
        unplanned = (self.range_ms, self.options)
        try:
            self._plan()
        except BaseException:
            self.range_ms, self.options = unplanned
            self._planned, self._routes = None, ()
            self._splits.clear()
            self.report.sources.clear()
            raise
        return self

    def _plan(self) -> None:
        with self.report.stage("plan"):
            planned = plan_backfill(self.join, self.spark)
            check_plan(planned)  # derivations, against the real schemas
        if self.options.partials_path is not None:
            _check_partials(planned)
        if planned.entity_left and self.range_ms is not None:  # a left row is its day's end
            self.range_ms = (shifted(self.range_ms[0]), shifted(self.range_ms[1]))
        self._planned = planned
        landed = self._events_before() if self.landed_before is None else self.landed_before
        self.options = replace(self.options, landed_before=landed)
        with self.report.stage("count input"):
            self.report.sources.extend(count_sources(planned, self._bounded_keys(),
                                                     self._asked()))
        check_input(self.report, strict=self.strict)
        left_rows = self.report.sources[0]  # the left rows are counted first
        self.options = replace(self.options,
                               asked_rows=left_rows.usable - left_rows.outside_range)
        with self.report.stage("find snapshot days"):
            self._planned = snapshot_days(self.planned, self._kept_left(), self.report,
                                          strict=self.strict)
        self._routes = self._route_parts()
        self.report.path = ", ".join(f"{part.part.label}: {chosen.label}" for part, chosen
                                     in zip(self.planned.parts, self._routes, strict=True))

    @property
    def planned(self) -> BackfillPlan:
        """The plan: the left rows, each part's events and features (see :meth:`plan`)."""
        if self._planned is None:
            raise RuntimeError("the backfill is not planned yet: call plan() first")
        return self._planned

    @property
    def routes(self) -> tuple[Route, ...]:
        """Each part's executors, in the Join's order (after :meth:`plan`)."""
        self.planned  # noqa: B018  (raises before planning)
        return self._routes

    def _route_parts(self) -> tuple[Route, ...]:
        """Route each part (see :func:`~timetile.offline.executors.route`), then find hot keys.

        A part has at most as many distinct queries as the left has timed rows in
        [start, end] (counted already), so its queries are counted (one job) only when those
        are more than the broadcast limit.
        """
        left = self._kept_left()
        asked = self.options.asked_rows
        assert asked is not None  # counted by _plan
        routes = []
        for part in self.planned.parts:
            queries = part.queries(left)

            @functools.cache
            def queries_fit(queries: DataFrame = queries) -> bool:
                if asked <= BROADCAST_QUERY_LIMIT:
                    return True
                with self.report.stage("count queries"):
                    return queries.limit(BROADCAST_QUERY_LIMIT + 1).count() \
                        <= BROADCAST_QUERY_LIMIT

            chosen = route(part, self.executor, queries_fit)
            for piece in chosen.pieces:
                if piece.executor.cuts_hot_keys and isinstance(piece.part, PartPlan) \
                        and piece.executor.takes(piece.part):  # else it refuses it, later
                    self._find_hot_keys(piece.executor, self._ranged(piece.part))
            routes.append(chosen)
        return tuple(routes)

    def _bounded_keys(self) -> dict[int, set[tuple[str, ...]]]:
        """Return the key columns, per counted source, whose fullest hash bucket to count.

        Those of each part that may sweep and be split (the parts :meth:`_find_hot_keys`
        looks at), when Spark's size estimate makes it big enough to need a search
        (:func:`worth_tallying`): its GroupBy's keys on its events, and its left keys on the
        left rows (index 0).
        """
        bounded: dict[int, set[tuple[str, ...]]] = {}
        if self.executor != AUTO and not EXECUTORS[self.executor].cuts_hot_keys:
            return bounded
        roles = {source.role: index for index, source in enumerate(self.planned.counted)
                 if index > 0}
        cutting = [executor for executor in EXECUTORS.values() if executor.cuts_hot_keys]
        for part in self.planned.parts:
            if (not isinstance(part, PartPlan) or part_reach(part) is None
                    or not any(executor.computes(feature) for executor in cutting
                               for feature in part.features)
                    or not worth_tallying([part.events, part.query_rows(self.planned.left)],
                                          self.max_key_events)):
                continue
            group_by = part.part.group_by
            bounded.setdefault(roles[group_by.name], set()).add(tuple(group_by.keys))
            bounded.setdefault(0, set()).add(tuple(part.part.left_keys))
        return bounded

    def _find_hot_keys(self, executor: Executor, part: PartPlan) -> None:
        """Find the part's hot keys, if it has enough rows for one and can be split.

        Once per GroupBy: parts that share one (with other key mappings) share its keys,
        found among its events and the queries each of them sends to its own ``executor``
        (the sweep).
        """
        group_by = part.part.group_by
        name = group_by.name
        if name in self._splits:
            return
        left_rows, *sources = self.report.sources  # the left rows are counted first
        events = next(source for source in sources if source.role == name)
        sharing = [other for other in self.planned.parts
                   if isinstance(other, PartPlan) and other.part.group_by.name == name]
        reach = part_reach(part)
        self._splits[name] = None
        # At most the fullest hash bucket of each side: of the events, and of the left rows
        # of the sweep that gets the most of them (else each side's usable rows).
        most = events.fullest_bucket.get(tuple(group_by.keys), events.usable) + max(
            left_rows.fullest_bucket.get(tuple(other.part.left_keys), left_rows.usable)
            for other in sharing)
        if most <= self.max_key_events or reach is None:
            return  # no key can be hot, or a lifetime window
        left = self._kept_left()  # each part's sweep gets its left rows, or its distinct
        # queries where they cannot ride (dataframe() asks can_ride of them with the columns
        # of earlier parts added, which are Arrow's own types)
        queries = [other.query_rows(left) if can_ride(executor, other, left)
                   else other.queries(left) for other in sharing]
        with self.report.stage("find hot keys"):
            found = find_hot_keys(part, queries, reach, self.max_key_events,
                                  rows=events.usable + left_rows.usable * len(queries))
        self.report.notes.extend(found.describe(name))
        if found.hot:
            self._splits[name] = found

    # --- the left rows and the range ---------------------------------------------------------

    def _asked(self) -> Column | None:
        """Return what is true for the left rows in [start, end]; None without a range."""
        if self.range_ms is None:
            return None
        low, high = self.range_ms
        kept = F.lit(True)
        if low is not None:
            kept &= F.col(TIME) >= low
        if high is not None:
            kept &= F.col(TIME) < high
        return kept

    def _kept_left(self) -> DataFrame:
        """Return the left rows in [start, end] (all of them without a range)."""
        asked = self._asked()
        return self.planned.left if asked is None else self.planned.left.where(asked)

    def _events_before(self) -> int | None:
        """Return the time before which lie the events that the kept left rows can see.

        The range's end, or for an entity left side the end of its last day, where its last
        rows ask (they see the events before it). None without an end.
        """
        if self.range_ms is None or self.range_ms[1] is None:
            return None
        return self.range_ms[1] - DAY_MS if self.planned.entity_left else self.range_ms[1]

    def _ranged(self, part: PartPlan) -> PartPlan:
        """Return the part without the events after the range: they count for no left row."""
        before = self._events_before()
        if before is None:
            return part
        return replace(part, events=part.events.where(F.col(TIME) < before))

    # --- the output ------------------------------------------------------------------------

    def dataframe(self) -> DataFrame:
        """Return the output DataFrame, planning first if :meth:`plan` has not run.

        Spark computes it when you write or collect it; the small jobs that shape it ran in
        :meth:`plan`. Lazy but for the parts on an executor that collects queries (the
        interval tree): each collects its distinct queries to the driver here and broadcasts
        them (a job or two per part).
        """
        self.plan()
        left = self._kept_left()
        untimed = self.report.sources[0].without_time
        if self.range_ms is not None:
            note = (f"{self.report.sources[0].outside_range:,} left rows outside [start, end] "
                    f"and {untimed:,} without time are not returned")
        else:
            note = f"{untimed:,} left rows without time are returned with null features"
        if note not in self.report.notes and (untimed or self.range_ms is not None):
            self.report.notes.append(note)
        carry_untimed = self.range_ms is None and untimed > 0
        result = left
        feature_columns: list[str] = []
        for planned, chosen in zip(self.planned.parts, self._routes, strict=True):
            tag = len(feature_columns)
            for piece in chosen.pieces:
                result = self._with_features(piece, result, left, tag,
                                             carry_untimed=carry_untimed)
                tag += len(piece.part.features)
            feature_columns.extend(_output_columns(planned))
        output = result.select(*[F.col(quote(column)) for column in
                                 (*self.planned.left_columns, *feature_columns)])
        return apply_derivations(self.join, output)

    def _with_features(self, piece: Piece, rows: DataFrame, left: DataFrame, tag: int, *,
                       carry_untimed: bool) -> DataFrame:
        """Add a piece's features to ``rows`` with its executor.

        An executor that rides takes ``rows`` through itself where they can ride it; every
        other gets the part's distinct queries, whose features are joined back (``tag``
        keeps the join's columns apart from other parts').
        """
        executor, part = piece.executor, piece.part
        options = self.options
        if isinstance(part, PartPlan):
            part = self._ranged(part)
            if executor.cuts_hot_keys:
                options = replace(options, key_split=self._splits.get(part.part.group_by.name))
            if can_ride(executor, part, rows):
                return ridden(executor, part, rows, options, self.join,
                              carry_untimed=carry_untimed)
        return joined(executor.run(part, part.queries(left), options), part, rows, tag)

    def release(self) -> None:
        """Unpersist what the executors cached for the output, once it is written.

        The tiled pass keeps its first stage (memory, then disk) for its two readers; a
        long-lived session running many backfills calls this after each write. Reading
        the output again afterwards recomputes that stage.
        """
        for frame in self.options.cached:
            frame.unpersist()
        self.options.cached.clear()


def _output_columns(part: AnyPartPlan) -> list[str]:
    """Return a part's output columns: its features', or an entity lookup's."""
    if isinstance(part, EntityPartPlan):
        return [column.name for column in entity_output_fields(part)]
    return [feature.name for feature in part.features]


def partials_refusal(plan: BackfillPlan) -> str | None:
    """Say why ``partials_path`` cannot serve ``plan``'s Join (None when it can)."""
    problems = [problem for part in plan.parts if isinstance(part, PartPlan)
                for problem in [partials_problem(part)] if problem is not None]
    return "; ".join(problems) if problems else None


def _check_partials(plan: BackfillPlan) -> None:
    """Refuse ``partials_path`` for a part whose partials cannot be stored, before any job."""
    refusal = partials_refusal(plan)
    if refusal is not None:
        raise ValueError(f"partials_path cannot serve Join {plan.join.name!r}: "
                         f"{refusal}. Fix: backfill without partials_path, or, for a "
                         "hop that does not divide a day, give that GroupBy's windows one, e.g. "
                         "tt.Window('7d', hop='1h'), and no 1 ms sliding window (the hop a "
                         "sliding window gets by default divides its length, not always a "
                         "day)")


def backfill(
    join: Join,
    spark: SparkSession,
    start: str | None = None,
    end: str | None = None,
    *,
    strict: bool = False,
    executor: str = DEFAULT_EXECUTOR,
    partials_path: str | os.PathLike[str] | None = None,
    max_key_events: int = DEFAULT_MAX_KEY_EVENTS,
) -> DataFrame:
    """Point-in-time-correct features for every left row of ``join``: a Spark DataFrame.

    A left row at time ``q`` sees the events with ``start(q) <= ts < q`` of each window: never
    an event at or after ``q``. Rows that cannot be used (null time, null key) are counted
    and logged; see :class:`BackfillJob` for the report. Plans the job (Spark jobs that
    count the input, :meth:`BackfillJob.plan`) and returns its lazy output.

    A part on the tiled executor caches a stage of its pass for the session's life: a
    long-lived session running many backfills uses :class:`BackfillJob` and calls its
    :meth:`~BackfillJob.release` after each write.

    Args:
        join: the definition.
        spark: the session.
        start: first day (``YYYY-MM-DD``, UTC) of left rows to return; None for all.
        end: last day, inclusive; None for all.
        strict: raise instead of leaving out rows without a usable time.
        executor: ``"auto"`` or one of :data:`CHOOSABLE` (see :class:`BackfillJob`).
        partials_path: store and reuse hop partials here between runs (see
            :class:`BackfillJob`).
        max_key_events: the sweep cuts a key with more events and left rows than this
            into chunks of time (see :class:`BackfillJob`).

    Returns:
        The left rows' columns, unchanged, then one column per feature named
        ``{prefix_}{group_by}_{column}_{op}_{window}`` (a lookup's
        ``{prefix_}{group_by}_{column}``); with ``join.derivations``, the derived columns
        instead of the features, or after them when ``"*"`` keeps them.

    """
    job = BackfillJob(join, spark, start, end, strict=strict, executor=executor,
                      partials_path=partials_path, max_key_events=max_key_events)
    return job.plan().dataframe()
