"""The consistency job: recompute every logged response offline and compare (DESIGN §5).

:func:`consistency` reads a Join's response logs (:mod:`timetile.online.response_log`) with
Spark, turns each logged row into a left row at its request time (its ``keys`` JSON cast to
the types of the Join's left source), runs :func:`~timetile.offline.backfill.backfill` on
those rows and compares every feature, row by row, inside an Arrow function on the
executors (:mod:`timetile.verify.values`). Only per-feature counts, hourly rates and
histogram counts come back to the driver.

How a served value is judged, per op (:data:`APPROX_CHECKS`):

- exact ops equal the backfill's value as :func:`~timetile.testing.same_value` says
  (floats to 1e-9 relative, NaN equals NaN; a number served for a double column reads as
  that float, :func:`~timetile.verify.values.decode_served`);
- ``approx_unique_count`` lies within 3 × ``HLL_RSE`` of the exact distinct count, and
  ``approx_percentile`` within the exact rank bounds of
  :func:`~timetile.testing.percentile_rank_bounds`: both from the naive oracle on the logged
  rows (O(n²/k), fine for logs, which are samples).

A row whose ``stale`` lists a GroupBy is not compared for that GroupBy's features, only
counted: the late upload explains any difference.

Which logged rows are compared: those of this Join and this definition. A row is left out,
counted in :attr:`~timetile.verify.results.ConsistencyReport.left_out` and warned about
(with how many and why) when it lacks a column a ResponseLog always writes (a null
``request_id``, ``join``, ``row_index``, ``request_time``, ``keys`` or ``stale``; features
that are not a JSON object), when its ``join`` names another Join, when its keys do not read
as the Join's key columns, or when its features lack one of the Join's features: the Fetcher
logs every feature of its definition, nulls included, so such a row was served by another
definition (one changed while the logs were written), and none of its features is compared;
or when its ``definition`` gives one of the Join's parts another digest, or none
(:func:`~timetile.store.layout.part_signatures`: changed with the same feature names, a
``where`` added). Logs where no row is left, where no row holds some feature of the Join,
or where every row names another definition, are a :class:`ConsistencyError`, never
"served null" mismatches; so is an empty local log file.

Cost: one read of the logs, the backfill of the logged rows (plus the oracle's, when the
Join has approximate ops), then O(rows × features) Python on the executors; the compared
rows are cached for the summaries.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timetile.api.errors import expect_argument
from timetile.api.join import Join, JoinPart
from timetile.api.sources import EventSource
from timetile.core.aggregators.sketches import KLL_RANK_ERROR
from timetile.core.locations import write_problem
from timetile.core.timeutil import HOUR_MS
from timetile.offline.backfill import backfill
from timetile.spark.sources import check_session
from timetile.testing import percentile_rank_bounds
from timetile.verify.compare import COMPARED_SCHEMA, Comparer, FeatureSpec
from timetile.verify.logs import LOG_COLUMNS, ConsistencyError, left_rows, logs_path, read_logs
from timetile.verify.report_html import render_report
from timetile.verify.results import (
    BOUND,
    EXACT,
    ConsistencyReport,
    FeatureConsistency,
    Histogram,
    TimelinePoint,
)
from timetile.verify.values import within_percentiles, within_unique_count

__all__ = ["APPROX_CHECKS", "ConsistencyError", "Stages", "approx_parts", "consistency",
           "feature_ops"]

log = logging.getLogger(__name__)

#: The approximate ops and how a served value is checked against the oracle's truth.
APPROX_CHECKS: dict[str, Callable[[Any, Any], bool]] = {
    "approx_unique_count": within_unique_count,
    "approx_percentile": within_percentiles,
}
#: Bins of each feature's histogram of differences.
HISTOGRAM_BINS = 20
#: Features drawn one by one in the mismatch-rate-over-time chart: those that mismatch most.
TIMELINE_FEATURES = 5


@runtime_checkable
class Stages(Protocol):
    """What shows a long job's named stages: ``timetile.cli.progress.JobProgress``, say."""

    def stage(self, name: str) -> AbstractContextManager[Any]:
        """Return a context that spans the stage ``name``."""
        ...


def consistency(join: Join, spark: SparkSession, logs_dir: str | os.PathLike[str], *,
                output: str | os.PathLike[str] | None = None,
                progress: Stages | None = None) -> ConsistencyReport:
    """Recompute the logged responses of ``join`` offline and report per feature.

    Reads ``{logs_dir}/{join.name}``. With ``output`` (a local directory, created), writes
    ``features.parquet`` (:meth:`ConsistencyReport.table`), ``differences.parquet`` (one row
    per mismatching (row, feature): request_id, row_index, request_time, feature, served and
    offline as JSON text, smape) and ``report.html`` (self-contained, SVG plots).

    Raises:
        ConsistencyError: no logs for the Join, unreadable or empty local log files, no usable
            row of the Join, a feature no usable row holds or no row of this definition
            (the logs of another definition), an unreadable left source, or a key column
            the left source does not have.
        DefinitionError: the definition cannot work against the sources.
        TypeError: an argument of the wrong type, named with the fix.

    """
    _check_arguments(join, spark, logs_dir, output, progress)
    stage: Callable[[str], AbstractContextManager[Any]] = (
        progress.stage if progress is not None else lambda _: nullcontext())
    path = logs_path(logs_dir, join.name)
    if output is not None:
        problem = write_problem(os.fspath(output))
        if problem is not None:
            raise ConsistencyError(f"The output {os.fspath(output)} {problem}")
    with stage("read logs"):
        logs, unusable = read_logs(spark, path, join)
        left, unreadable = left_rows(spark, join, logs)
    compared: DataFrame | None = None
    try:
        with stage("recompute and compare"):
            specs, frame = _compared(join, spark, left)
            compared = frame.persist()
            features, unparsed = _features(compared, specs)
        with stage("summarize"):
            timeline, per_feature = _timelines(compared, features)
            histograms = _histograms(spark, compared, specs)
        rows = features[0].rows + features[0].stale if features else 0
        report = ConsistencyReport(join.name, path, rows, features, timeline, per_feature,
                                   histograms, None if output is None else str(output),
                                   unusable + unreadable + unparsed)
        if output is not None:
            with stage("write report"):
                _write(report, compared, Path(output))
        return report
    finally:
        if compared is not None:
            compared.unpersist()


def _check_arguments(join: object, spark: object, logs_dir: object, output: object,
                     progress: object) -> None:
    """Refuse arguments of the wrong type, each named with its fix, before any job."""
    expect_argument("join", join, Join, "a tt.Join",
                    "pass the Join whose responses were logged; a GroupBy is served and "
                    "logged as a part of one")
    check_session(spark)
    folder = "give a str or a pathlib.Path"
    expect_argument("logs_dir", logs_dir, (str, os.PathLike), "a folder", folder)
    expect_argument("output", output, (str, os.PathLike, type(None)), "a folder or None",
                    folder)
    expect_argument("progress", progress, (Stages, type(None)),
                    "an object with a stage(name) context, or None",
                    "pass timetile.cli.progress.JobProgress(...) or leave it out")


# --- recomputing and comparing --------------------------------------------------------------


def feature_ops(join: Join) -> list[tuple[str, str, str]]:
    """(feature, group_by, op) for every output column, in ``join.output_columns()`` order."""
    made: list[tuple[str, str, str]] = []
    for part in join.join_parts:
        group_by = part.group_by
        stem = f"{part.prefix}_{group_by.name}" if part.prefix else group_by.name
        made.extend((f"{stem}_{column}", group_by.name, "lookup")
                    for column in group_by.lookup_columns)
        for aggregation in group_by.aggregations or ():
            made.extend((name, group_by.name, aggregation.op)
                        for name, _, _ in aggregation.outputs(group_by.name, part.prefix))
    return made


def approx_parts(join: Join) -> list[JoinPart]:
    """Return the parts with approximate aggregations, each with those only."""
    parts = []
    for part in join.join_parts:
        approx = [aggregation for aggregation in part.group_by.aggregations or ()
                  if aggregation.op in APPROX_CHECKS]
        if approx:
            parts.append(replace(part, group_by=replace(part.group_by, aggregations=approx)))
    return parts


def _compared(join: Join, spark: SparkSession, left: DataFrame
              ) -> tuple[list[FeatureSpec], DataFrame]:
    """Backfill the left rows, add the oracle's truth for approximate ops, compare per row."""
    logged = Join(join.name, EventSource(left, time_column="request_time"), join.parts)
    offline = backfill(logged, spark)
    named = feature_ops(join)
    frame = offline.select(*LOG_COLUMNS, *(F.col(name).alias(f"_tt_f{index}")
                                           for index, (name, _, _) in enumerate(named)))
    parts = approx_parts(join)
    if parts:
        truth = percentile_rank_bounds(Join(join.name, logged.left, parts), spark,
                                       KLL_RANK_ERROR)
        # a logged row is known by all of these: a request id may be reused (a ResponseLog
        # user's counter restarted), and rows equal in all of them have the same truth
        logged_row = ["request_id", "row_index", "request_time", "log_keys"]
        bounds = truth.select(*logged_row, *(
            F.col(name).alias(f"_tt_b{index}") for index, (name, _, op) in enumerate(named)
            if op in APPROX_CHECKS)).dropDuplicates(logged_row)
        frame = frame.join(bounds, on=logged_row, how="left")
    schema = frame.schema
    specs = [FeatureSpec(
        name, group_by, op, f"_tt_f{index}", schema[f"_tt_f{index}"].dataType,
        f"_tt_b{index}" if op in APPROX_CHECKS else None,
        schema[f"_tt_b{index}"].dataType if op in APPROX_CHECKS else None,
    ) for index, (name, group_by, op) in enumerate(named)]
    return specs, frame.mapInArrow(Comparer(specs, APPROX_CHECKS), COMPARED_SCHEMA)


def _features(compared: DataFrame, specs: Sequence[FeatureSpec]
              ) -> tuple[list[FeatureConsistency], int]:
    """Return the per-feature counts and means, and the rows the Comparer could not read.

    One job. Rows it could not read hold features Spark's reader accepted but ``json.loads``
    does not (text after the JSON object): they are left out, and warned about.
    """
    fresh = ~F.col("stale")
    stats = {row["feature"]: row for row in compared.groupBy("feature").agg(
        F.count(F.lit(1)).alias("all"),
        F.count_if(fresh).alias("rows"),
        F.count_if(F.col("stale")).alias("stale"),
        F.count_if(fresh & F.col("match")).alias("matches"),
        F.count_if(fresh & F.col("missing")).alias("missing"),
        F.count_if(fresh & F.col("extra")).alias("extra"),
        F.avg("smape").alias("smape_mean"), F.max("smape").alias("smape_max"),
        F.avg("edit").alias("edit_distance_mean"),
    ).collect()}
    made = []
    for spec in specs:
        row = stats.get(spec.name)
        made.append(FeatureConsistency(
            spec.name, spec.group_by, spec.op, BOUND if spec.bound else EXACT,
            *((row["rows"], row["stale"], row["matches"], row["missing"], row["extra"],
               row["smape_mean"], row["smape_max"], row["edit_distance_mean"])
              if row is not None else (0, 0, 0, 0, 0))))
    unparsed = int(stats[None]["all"]) if None in stats else 0
    if unparsed:
        log.warning("%s logged rows have features that Spark read but json.loads does not "
                    "(text after the JSON object?); they are left out", f"{unparsed:,}")
    return made, unparsed


def _hour() -> Column:
    return (F.col("request_time") - F.pmod("request_time", F.lit(HOUR_MS))).alias("hour")


def _timelines(compared: DataFrame, features: Sequence[FeatureConsistency]
               ) -> tuple[list[TimelinePoint], dict[str, list[TimelinePoint]]]:
    """Mismatch rates per hour: over every feature, and for those that mismatch most."""
    fresh = compared.where(~F.col("stale"))
    counts = (F.count(F.lit(1)).alias("rows"), F.count_if(~F.col("match")).alias("bad"))
    overall = [TimelinePoint(row["hour"], row["rows"], row["bad"]) for row in
               fresh.groupBy(_hour()).agg(*counts).orderBy("hour").collect()]
    worst = sorted((entry for entry in features if entry.mismatches),
                   key=lambda entry: -entry.mismatches)[:TIMELINE_FEATURES]
    per_feature: dict[str, list[TimelinePoint]] = {entry.feature: [] for entry in worst}
    if worst:
        for row in (fresh.where(F.col("feature").isin(list(per_feature)))
                    .groupBy("feature", _hour()).agg(*counts).orderBy("hour").collect()):
            per_feature[row["feature"]].append(TimelinePoint(row["hour"], row["rows"],
                                                             row["bad"]))
    return overall, per_feature


def _histograms(spark: SparkSession, compared: DataFrame, specs: Sequence[FeatureSpec]
                ) -> dict[str, Histogram]:
    """Per numeric feature, counts of ``served − offline`` in equal bins: two small jobs."""
    numeric = [spec.name for spec in specs if spec.numeric]
    if not numeric:
        return {}
    known = compared.where(F.col("difference").isNotNull() & F.col("feature").isin(numeric))
    ranges = {row["feature"]: (row["lo"], row["hi"]) for row in known.groupBy("feature").agg(
        F.min("difference").alias("lo"), F.max("difference").alias("hi")).collect()}
    if not ranges:
        return {}
    bins = {name: HISTOGRAM_BINS if hi > lo else 1 for name, (lo, hi) in ranges.items()}
    frame = spark.createDataFrame([(name, lo, hi, bins[name]) for name, (lo, hi)
                                   in ranges.items()], "feature string, lo double, hi double, "
                                  "bins int")
    # in halves: hi − lo overflows past 1.8e308, while hi/2 − lo/2 and d/2 − lo/2 cannot
    share = ((F.col("difference") / 2 - F.col("lo") / 2)
             / F.greatest(F.col("hi") / 2 - F.col("lo") / 2, F.lit(5e-324)))
    index = F.least(F.floor(share * F.col("bins")), F.col("bins") - 1).cast("int").alias("bin")
    counts = {name: [0] * bins[name] for name in ranges}
    for row in known.join(F.broadcast(frame), "feature").groupBy("feature", index).count() \
            .collect():
        counts[row["feature"]][row["bin"]] = row["count"]
    return {name: Histogram(lo, hi, tuple(counts[name]))
            for name in numeric if name in ranges for lo, hi in [ranges[name]]}


# --- writing --------------------------------------------------------------------------------


def _write(report: ConsistencyReport, compared: DataFrame, folder: Path) -> None:
    """Write ``features.parquet``, ``differences.parquet`` and ``report.html``."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(report.table(), folder / "features.parquet")
    differences = compared.where(~F.col("stale") & ~F.col("match")).select(
        "request_id", "row_index", "request_time", "feature", "served", "offline", "smape")
    differences.write.mode("overwrite").parquet(str((folder / "differences.parquet").resolve()))
    (folder / "report.html").write_text(render_report(report), encoding="utf-8")

