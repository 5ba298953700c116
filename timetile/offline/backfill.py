"""``backfill``: point-in-time-correct training data for a Join (DESIGN §2, contract).

The output holds every left row in ``[start, end]`` exactly once, duplicates included, its
columns unchanged, plus one column per (part, aggregation, window). A part on the sweep
executor takes the left rows through the sweep itself (one shuffle); the other executors
compute features per distinct (keys, time) query, which are joined back to the left rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.join import Join
from timetile.api.sources import EventSource
from timetile.core.timeutil import DAY_MS, SECONDS_LIKE_MS, ms_to_iso
from timetile.offline.arguments import (
    check_arguments,
    partials_location,
    shifted,
    time_range,
)
from timetile.offline.derivations import apply_derivations, check_plan
from timetile.offline.executors.entity import entity_features, entity_output_fields
from timetile.offline.executors.interval_tree import (
    BROADCAST_QUERY_LIMIT,
    interval_tree_features,
)
from timetile.offline.executors.reference import reference_features
from timetile.offline.executors.sweep.executor import sweep_features, sweepable, sweeps
from timetile.offline.executors.tiled import partials_problem, tileable, tiled_features
from timetile.offline.hot_keys import (
    KeySplit,
    find_hot_keys,
    part_reach,
    worth_tallying,
)
from timetile.offline.options import AUTO, DEFAULT_EXECUTOR, DEFAULT_MAX_KEY_EVENTS
from timetile.offline.plan import (
    AnyPartPlan,
    BackfillPlan,
    EntityPartPlan,
    ExecutorOptions,
    PartPlan,
    plan_backfill,
)
from timetile.offline.report import BadInputError, JobReport
from timetile.offline.source_counts import count_sources
from timetile.spark.entities import DAY
from timetile.spark.result_types import arrow_schema
from timetile.spark.sources import TIME, quote

log = logging.getLogger(__name__)

#: An executor computes a part's features for a frame of distinct (keys, time) queries.
Executor = Callable[[PartPlan, DataFrame, ExecutorOptions], DataFrame]

#: The executors by name; ``backfill(executor=...)`` picks one, or ``"auto"`` (the default)
#: picks per part: ``sweep`` when every aggregation is one it computes (``SWEEP_OPS``: count,
#: first, last, first_k, last_k, unique_count, histogram, top_k or bottom_k of any column;
#: sum, avg, min, max, variance, stddev, skew or kurtosis of a number); otherwise
#: ``interval_tree`` when the part's distinct queries fit in memory
#: (:data:`BROADCAST_QUERY_LIMIT`) and ``tiled`` when they do not. ``reference`` is the
#: brute-force executor the others are checked against.
EXECUTORS: Mapping[str, Executor] = {
    "tiled": tiled_features,
    "sweep": sweep_features,
    "interval_tree": interval_tree_features,
    "reference": reference_features,
}


class BackfillJob:
    """A backfill, planned and checked on construction, run by :meth:`dataframe`.

    Construction loads the sources lazily, checks the definition against their schemas and
    counts, in one Spark job over every source, the rows that cannot be used, and for the
    parts that may sweep, the rows of their fullest bucket of key hashes. It raises before
    any feature work starts. It then picks each part's executor, and for a swept part whose
    fullest buckets of events and left rows together hold more than ``max_key_events``,
    samples them for hot keys (one job).

    Args:
        join: the definition.
        spark: the session.
        start: first day of left rows to keep, ``YYYY-MM-DD`` (UTC), or None for all.
        end: last day of left rows to keep, inclusive, or None for all.
        strict: raise :class:`BadInputError` instead of leaving out rows without a time.
        executor: which executor runs (see :data:`EXECUTORS`).
        partials_path: where to store and reuse hop partials between runs (a directory or
            URI); a later backfill of later days then computes only the days not stored.
            Implies the ``tiled`` executor.
        max_key_events: on the sweep, a key with more rows than this (its events and its
            left rows together) is cut into chunks of time, each swept in its own task (see
            :mod:`timetile.offline.hot_keys`). Finding such keys costs one sampled pass
            over a part's events and left rows, run only when a key could hold more than
            this (as counted by bucket of key hashes).

    Raises:
        DefinitionError: the definition cannot work against the real schemas.
        BadInputError: ``strict`` and some rows have no usable time.

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
    ) -> None:
        check_arguments(join, spark, executor=executor, strict=strict,
                        executors=EXECUTORS)
        if isinstance(max_key_events, bool) or not isinstance(max_key_events, int) \
                or max_key_events < 1:
            raise ValueError(f"max_key_events is {max_key_events!r}: give a positive int")
        if partials_path is not None:
            partials_path = partials_location(partials_path, join)
        if partials_path is not None and executor == AUTO:
            executor = "tiled"
        if partials_path is not None and executor != "tiled":
            raise ValueError(f"partials_path works with the tiled executor, not {executor!r}")
        if executor != AUTO and executor not in EXECUTORS:
            raise ValueError(f"executor {executor!r} is unknown: use {AUTO!r} or one of "
                             f"{', '.join(EXECUTORS)}")
        self.join = join
        self.spark = spark
        self.range_ms = time_range(start, end)
        self.executor = executor
        self.max_key_events = max_key_events
        self._splits: dict[str, KeySplit | None] = {}  # by GroupBy name
        self.report = JobReport(job=join.name, path=executor)
        self.options = ExecutorOptions(partials_path=partials_path, notes=self.report.notes,
                                       gauges=self.report.gauges)
        with self.report.stage("plan"):
            self.plan: BackfillPlan = plan_backfill(join, spark)
            check_plan(self.plan)  # derivations, against the real schemas
        if partials_path is not None:
            _check_partials(self.plan)
        if self.plan.entity_left and self.range_ms is not None:  # a left row is its day's end
            self.range_ms = (shifted(self.range_ms[0]), shifted(self.range_ms[1]))
        self.options = replace(self.options, landed_before=self._events_before())
        with self.report.stage("count input"):
            self.report.sources.extend(count_sources(self.plan, self._bounded_keys(),
                                                     self._asked()))
        self._check_input(strict)
        with self.report.stage("find snapshot days"):
            self._check_snapshots(strict)
        self._paths = self._choose_executors()
        self.report.path = ", ".join(f"{part.part.label}: {path}"
                                     for part, path in zip(self.plan.parts, self._paths,
                                                           strict=True))

    def _bounded_keys(self) -> dict[int, set[tuple[str, ...]]]:
        """Return the key columns, per counted source, whose fullest hash bucket to count.

        Those of each part that may sweep and be split (the parts :meth:`_find_hot_keys`
        looks at), when Spark's size estimate makes it big enough to need a search
        (:func:`worth_tallying`): its GroupBy's keys on its events, and its left keys on the
        left rows (index 0).
        """
        bounded: dict[int, set[tuple[str, ...]]] = {}
        if self.executor not in (AUTO, "sweep"):
            return bounded
        roles = {source.role: index for index, source in enumerate(self.plan.counted)
                 if index > 0}
        for part in self.plan.parts:
            if (not isinstance(part, PartPlan) or part_reach(part) is None
                    or not any(sweeps(feature) for feature in part.features)
                    or not worth_tallying([part.events, part.query_rows(self.plan.left)],
                                          self.max_key_events)):
                continue
            group_by = part.part.group_by
            bounded.setdefault(roles[group_by.name], set()).add(tuple(group_by.keys))
            bounded.setdefault(0, set()).add(tuple(part.part.left_keys))
        return bounded

    def _check_input(self, strict: bool) -> None:
        for source in self.report.sources:
            if source.without_time and strict:
                raise BadInputError(
                    f"{source.role} ({source.label}): {source.without_time:,} of "
                    f"{source.rows:,} rows have a null or unparseable {source.time}. Fix: "
                    "repair or filter them in the source's where, or run without strict to "
                    "leave them out"
                )
            if source.left_out:
                log.warning("%s (%s): %s rows left out (%s without time, %s without key)",
                            source.role, source.label, f"{source.left_out:,}",
                            f"{source.without_time:,}", f"{source.without_key:,}")
            latest = source.latest_integer_time
            if latest is not None and latest < SECONDS_LIKE_MS:
                message = (
                    f"{source.role} ({source.label}): every time is before "
                    f"{ms_to_iso(SECONDS_LIKE_MS)[:10]} (the latest is {latest:,}), and integer "
                    "times are epoch milliseconds: if they are seconds, convert them in the "
                    "source's select with timestamp_seconds(...)")
                log.warning("%s", message)
                self.report.notes.append(message)

    def _check_snapshots(self, strict: bool) -> None:
        """Find, per entity part, the query days and those without a previous snapshot.

        Two small jobs per entity part (the distinct days of the left rows and of the
        snapshot partitions); the features of queries on a day whose previous snapshot is
        missing are null, and the report says how many left rows that touches.
        """
        parts = list(self.plan.parts)
        left = self._kept_left()
        for index, part in enumerate(parts):
            if not isinstance(part, EntityPartPlan):
                continue
            day = F.floor(part.as_of(F.col(TIME)) / DAY_MS)
            days = {row[0] for row in left.where(F.col(TIME).isNotNull()).select(day)
                    .distinct().collect()}
            partitions = part.tables.partitions
            available = {row[0] for row in partitions.where(F.col(DAY).isNotNull())
                         .distinct().collect()}
            missing = frozenset(d for d in days if d - 1 not in available)
            parts[index] = replace(part, query_days=frozenset(days), missing_days=missing)
            if not missing:
                continue
            rows = left.where(day.isin(sorted(missing))).count()
            listed = [ms_to_iso((d - 1) * DAY_MS)[:10] for d in sorted(missing)]
            message = (
                f"{part.part.label} ({part.tables.source.label}): no snapshot "
                f"partition for {len(missing)} day(s) ({', '.join(listed[:5])}"
                f"{', …' if len(listed) > 5 else ''}), so the features of {rows:,} left rows "
                "on the days after are null")
            if strict:
                raise BadInputError(f"{message}. Fix: land those partitions, or choose "
                                    "start/end where they exist")
            log.warning("%s", message)
            self.report.notes.append(message)
        self.plan = replace(self.plan, parts=tuple(parts))

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
        return self.plan.left if asked is None else self.plan.left.where(asked)

    def release(self) -> None:
        """Unpersist what the executors cached for the output, once it is written.

        The tiled pass keeps its first stage (memory, then disk) for its two readers; a
        long-lived session running many backfills calls this after each write. Reading
        the output again afterwards recomputes that stage.
        """
        for frame in self.options.cached:
            frame.unpersist()
        self.options.cached.clear()

    def dataframe(self) -> DataFrame:
        """Return the output DataFrame. Spark runs it when you write or collect it.

        The small jobs that shape the plan (counts, snapshot days, hot keys) ran when the
        job was built. Lazy but for the parts on the interval tree: each collects its
        distinct queries to the driver here and broadcasts them (a job or two per part).
        """
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
        for planned, path in zip(self.plan.parts, self._paths, strict=True):
            if isinstance(planned, EntityPartPlan):
                features = entity_features(planned, planned.queries(left), self.options)
                result = self._joined(features, planned, result, len(feature_columns))
                feature_columns.extend(column.name for column in
                                       entity_output_fields(planned))
                continue
            part = self._ranged(planned)
            tag = len(feature_columns)
            for piece, piece_path in _pieces(part, path):
                result = self._with_features(piece, piece_path, result, left, tag,
                                             carry_untimed=carry_untimed)
                tag += len(piece.features)
            feature_columns.extend(feature.name for feature in part.features)
        output = result.select(*[F.col(quote(column)) for column in
                                 (*self.plan.left_columns, *feature_columns)])
        return apply_derivations(self.join, output)

    def _with_features(self, part: PartPlan, path: str, rows: DataFrame, left: DataFrame,
                       tag: int, *, carry_untimed: bool) -> DataFrame:
        """Add a part's features to ``rows`` with the executor ``path``.

        A sweep takes ``rows`` through itself where they can ride it; every other executor
        computes the part's distinct queries, whose features are joined back (``tag`` keeps
        the join's columns apart from other parts').
        """
        options = self.options
        if path == "sweep":
            options = replace(options, key_split=self._splits.get(part.part.group_by.name))
            if _rides(part, rows):
                return self._swept(part, rows, options, carry_untimed=carry_untimed)
        return self._joined(EXECUTORS[path](part, part.queries(left), options), part, rows, tag)

    def _events_before(self) -> int | None:
        """Return the time before which lie the events that the kept left rows can see.

        The range's end, or for an entity left side the end of its last day, where its last
        rows ask (they see the events before it). None without an end.
        """
        if self.range_ms is None or self.range_ms[1] is None:
            return None
        return self.range_ms[1] - DAY_MS if self.plan.entity_left else self.range_ms[1]

    def _ranged(self, part: PartPlan) -> PartPlan:
        """Return the part without the events after the range: they count for no left row."""
        before = self._events_before()
        if before is None:
            return part
        return replace(part, events=part.events.where(F.col(TIME) < before))

    def _choose_executors(self) -> list[str]:
        """Pick each part's executor (``entity`` for entity parts).

        Then find the hot keys of the parts that sweep (:meth:`_find_hot_keys`).
        """
        left = self._kept_left()
        paths = []
        for part in self.plan.parts:
            if isinstance(part, EntityPartPlan):
                paths.append("entity")
                continue
            path = self._choose(part, part.queries(left))
            swept = next((piece for piece, piece_path in _pieces(part, path)
                          if piece_path == "sweep"), None)
            if swept is not None and sweepable(swept):  # else the sweep refuses it, later
                self._find_hot_keys(self._ranged(swept))
            paths.append(path)
        return paths

    def _find_hot_keys(self, part: PartPlan) -> None:
        """Find the part's hot keys, if it has enough rows for one and can be split.

        Once per GroupBy: parts that share one (with other key mappings) share its keys,
        found among its events and the queries each of them sends to its own sweep.
        """
        group_by = part.part.group_by
        name = group_by.name
        if name in self._splits:
            return
        left_rows, *sources = self.report.sources  # the left rows are counted first
        events = next(source for source in sources if source.role == name)
        sharing = [other for other in self.plan.parts
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
        # queries where they cannot ride (dataframe() asks _rides of them with the columns
        # of earlier parts added, which are Arrow's own types)
        queries = [other.query_rows(left) if _rides(other, left) else other.queries(left)
                   for other in sharing]
        with self.report.stage("find hot keys"):
            found = find_hot_keys(part, queries, reach, self.max_key_events,
                                  rows=events.usable + left_rows.usable * len(queries))
        self.report.notes.extend(found.describe(name))
        if found.hot:
            self._splits[name] = found

    def _swept(self, part: PartPlan, rows: DataFrame, options: ExecutorOptions, *,
               carry_untimed: bool) -> DataFrame:
        """Add a part's features to ``rows`` by sending them through the sweep themselves.

        One shuffle instead of three (distinct queries, sweep, join back): the rows ride
        through unchanged, duplicates included. Rows without a time skip the sweep and come
        back with null features when ``carry_untimed``.

        A left column the sweep carries anyway is not sent twice: a key column of the
        events' key type travels as the part's key, and a time column of epoch
        milliseconds as :data:`TIME`; both are restored, unchanged, afterwards.
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
        time_column = self._left_millis_column()
        if time_column is not None:
            timed = timed.drop(time_column)
        swept = (sweep_features(part, timed, options)
                 .drop(*copies)
                 .withColumnsRenamed({key: left for left, key in shared_keys.items()}))
        if time_column is not None:
            swept = swept.withColumn(time_column, F.col(TIME))
        if not carry_untimed:
            return swept
        return swept.unionByName(rows.where(F.col(TIME).isNull()), allowMissingColumns=True)

    def _left_millis_column(self) -> str | None:
        """Return the left's time column if it holds epoch milliseconds (so equals TIME)."""
        source = self.join.left
        if not isinstance(source, EventSource):
            return None
        column = source.time_column
        fields = {f.name: f.dataType for f in self.plan.left.schema.fields}
        return column if isinstance(fields.get(column), T.LongType) else None

    @staticmethod
    def _joined(features: DataFrame, part: AnyPartPlan, rows: DataFrame, tag: int) -> DataFrame:
        """Join one feature row per distinct (keys, as-of time) back onto ``rows``."""
        renamed = {name: f"_tt_p{tag}_{name}" for name in (*part.keys, TIME)}
        features = features.withColumnsRenamed(renamed)
        condition = part.as_of(rows[TIME]) == features[renamed[TIME]]
        for left_key, key in zip(part.part.left_keys, part.keys, strict=True):
            condition &= rows[left_key].eqNullSafe(features[renamed[key]])
        return rows.join(features, on=condition, how="left").drop(*renamed.values())

    def _choose(self, part: PartPlan, queries: DataFrame) -> str:
        """Return the executor for one part: the one asked for, or by its ops and queries.

        Under ``auto``, a part whose features the sweep mostly computes, but not all, gets
        ``sweep+`` the other executor: :func:`_pieces` splits its features between the two.
        A part has at most as many distinct queries as the left has timed rows in [start, end]
        (counted already), so its queries are counted (one job) only when those are more than
        :data:`BROADCAST_QUERY_LIMIT`.
        """
        if self.executor != AUTO:
            return self.executor
        if sweepable(part):
            return "sweep"
        left_rows = self.report.sources[0]
        small = left_rows.usable - left_rows.outside_range <= BROADCAST_QUERY_LIMIT
        if not small:
            with self.report.stage("count queries"):
                small = queries.limit(BROADCAST_QUERY_LIMIT + 1).count() <= BROADCAST_QUERY_LIMIT
        other = "interval_tree" if small else "tiled" if tileable(part) else "reference"
        swept = sum(sweeps(feature) for feature in part.features)
        return f"sweep+{other}" if swept >= len(part.features) - swept else other


def _check_partials(plan: BackfillPlan) -> None:
    """Refuse ``partials_path`` for a part whose partials cannot be stored, before any job."""
    problems = [problem for part in plan.parts if isinstance(part, PartPlan)
                for problem in [partials_problem(part)] if problem is not None]
    if problems:
        raise ValueError(f"partials_path cannot serve Join {plan.join.name!r}: "
                         f"{'; '.join(problems)}. Fix: backfill without partials_path, or "
                         "give that GroupBy's windows a hop that divides a day, e.g. "
                         "tt.Window('7d', hop='1h'), and no 1 ms sliding window (the hop a "
                         "sliding window gets by default divides its length, not always a "
                         "day)")


def _pieces(part: PartPlan, path: str) -> list[tuple[PartPlan, str]]:
    """Return the part, or its two pieces for a ``sweep+other`` path, with their executors.

    The sweep's piece holds the features it computes; the other piece the rest. A split pays
    one more pass over the events and a join, and saves the slower executor the swept
    features, since its cost grows with them: on the demo's ``user_views`` the interval tree
    took 8.9 s for all 14 features, 3.7 s for 2 and 2.2 s for 1, and the sweep 1.2 s for 12.
    Hence a split only when the sweep computes at least half of the features.
    """
    if not path.startswith("sweep+"):
        return [(part, path)]
    swept = tuple(feature for feature in part.features if sweeps(feature))
    rest = tuple(feature for feature in part.features if not sweeps(feature))
    return [(replace(part, features=swept), "sweep"),
            (replace(part, features=rest), path.removeprefix("sweep+"))]


def _rides(part: PartPlan, rows: DataFrame) -> bool:
    """Whether ``rows`` can ride a sweep of ``part`` themselves, duplicates and all.

    Else the sweep gets the part's distinct queries and its features are joined back.
    """
    return not part.floors and _arrow_compatible(rows)


def _arrow_compatible(frame: DataFrame) -> bool:
    """Whether every column of ``frame`` can cross into Python as Arrow (to ride a sweep).

    PySpark answers with a ``TypeError`` for a type Arrow lacks, and with a failed
    assertion for some nested ones (a timestamp in a map's struct): either means no.
    """
    try:
        arrow_schema(frame.schema, frame.sparkSession)
    except (TypeError, AssertionError):
        return False
    return True


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
    and logged; see :class:`BackfillJob` for the report.

    A part on the tiled executor caches a stage of its pass for the session's life: a
    long-lived session running many backfills uses :class:`BackfillJob` and calls its
    :meth:`~BackfillJob.release` after each write.

    Args:
        join: the definition.
        spark: the session.
        start: first day (``YYYY-MM-DD``, UTC) of left rows to return; None for all.
        end: last day, inclusive; None for all.
        strict: raise instead of leaving out rows without a usable time.
        executor: which executor runs (see :data:`EXECUTORS`).
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
    return job.dataframe()
