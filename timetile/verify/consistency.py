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
definition (one changed while the logs were written), and none of its features is compared.
Logs where no row is left, or where no row holds some feature of the Join (the logs of
another definition), are a :class:`ConsistencyError`, never "served null" mismatches.

Cost: one read of the logs, the backfill of the logged rows (plus the oracle's, when the
Join has approximate ops), then O(rows × features) Python on the executors; the compared
rows are cached for the summaries.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from timetile.api.errors import expect_argument
from timetile.api.join import Join, JoinPart
from timetile.api.sources import EventSource
from timetile.core.aggregators.sketches import KLL_RANK_ERROR
from timetile.core.locations import write_problem
from timetile.core.timeutil import HOUR_MS
from timetile.offline.backfill import backfill
from timetile.online.response_log import SCHEMA
from timetile.progress import JobProgress
from timetile.spark.sources import check_session, load
from timetile.testing import percentile_rank_bounds
from timetile.verify.compare import COMPARED_SCHEMA, Comparer, FeatureSpec
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

#: The log columns a left row carries through the backfill; key columns may not take them.
LOG_COLUMNS = ("request_id", "row_index", "request_time", "log_keys", "log_features",
               "log_stale")


class ConsistencyError(Exception):
    """The logs cannot be compared: none for the Join, unreadable, or keys the left lacks."""


def consistency(join: Join, spark: SparkSession, logs_dir: str | os.PathLike[str], *,
                output: str | os.PathLike[str] | None = None,
                progress: JobProgress | None = None) -> ConsistencyReport:
    """Recompute the logged responses of ``join`` offline and report per feature.

    Reads ``{logs_dir}/{join.name}``. With ``output`` (a local directory, created), writes
    ``features.parquet`` (:meth:`ConsistencyReport.table`), ``differences.parquet`` (one row
    per mismatching (row, feature): request_id, row_index, request_time, feature, served and
    offline as JSON text, smape) and ``report.html`` (self-contained, SVG plots).

    Raises:
        ConsistencyError: no logs for the Join, unreadable log files, no usable row of the
            Join, a feature no usable row holds (the logs of another definition), an
            unreadable left source, or a key column the left source does not have.
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
        logs, unusable = _read_logs(spark, path, join)
        left, unreadable = _left_rows(spark, join, logs)
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
    expect_argument("progress", progress, (JobProgress, type(None)), "a JobProgress or None",
                    "pass timetile.progress.JobProgress(...) or leave it out")


# --- reading the logs -----------------------------------------------------------------------


def logs_path(logs_dir: str | os.PathLike[str], join: str) -> str:
    """Return the folder of ``join``'s logs under ``logs_dir``; a local one must exist.

    Raises:
        ConsistencyError: a local ``logs_dir`` has no folder for ``join``.

    """
    text = os.fspath(logs_dir)
    local = "://" not in text and not text.startswith("file:")
    path = str(Path(text) / join) if local else f"{text.rstrip('/')}/{join}"
    if local and not Path(path).is_dir():
        raise ConsistencyError(
            f"No response logs of Join {join!r} under {text}: {path} does not exist. Fix: "
            f"serve with --log-dir {text} (or log fetches with a ResponseLog) first, or pass "
            f"the directory that holds the {join} folder")
    return path


#: How ``features`` is read in Spark: as the Comparer's ``json.loads`` reads it (no single
#: quotes), so that a row Spark finds usable holds the values Python compares.
_JSON_OPTIONS = {"allowSingleQuotes": "false"}


def _features_map(column: str = "features") -> Column:
    """Read the logged features as a map of JSON texts, null where they are no JSON object."""
    return F.from_json(column, T.MapType(T.StringType(), T.StringType()), _JSON_OPTIONS)


#: Per column a ResponseLog always writes: what a row lacks when that check is true. A row
#: lacking any of them is unusable: left out and counted.
_UNUSABLE: dict[str, tuple[Callable[[], Column], str]] = {
    "request_id": (lambda: F.col("request_id").isNull(), "null"),
    "join": (lambda: F.col("join").isNull(), "null"),
    "row_index": (lambda: F.col("row_index").isNull(), "null"),
    "request_time": (lambda: F.col("request_time").isNull(), "null"),
    "keys": (lambda: F.col("keys").isNull(), "null"),
    "features": (lambda: _features_map().isNull(), "null or not a JSON object"),
    "stale": (lambda: F.col("stale").isNull(), "null"),
}


def _read_logs(spark: SparkSession, path: str, join: Join) -> tuple[DataFrame, int]:
    """Return the usable log rows of ``join``'s definition; count the rest (one job).

    A row is left out, counted and warned about when it lacks a column a ResponseLog always
    writes (:data:`_UNUSABLE`: a null ``request_id``, ``join``, ``row_index``,
    ``request_time``, ``keys`` or ``stale``, or ``features`` that are not a JSON object);
    when its ``join`` names another Join; or when its features lack one of the Join's
    features that other rows hold: the Fetcher logs every feature of its definition, nulls
    included, so such a row was served by another definition of the Join (one changed
    while it logged), and none of its values is compared.

    Raises:
        ConsistencyError: no logs at ``path``, files that are not response logs, no usable
            row, none of ``join``, or a feature of ``join`` that no usable row holds (the
            logs of another definition).

    """
    names = join.output_columns()
    lacks = {column: check() for column, (check, _) in _UNUSABLE.items()}
    usable = ~functools.reduce(operator.or_, lacks.values())  # each check is never null
    ours = F.col("join") == join.name
    lacking = F.array_sort(F.array_except(F.array(*map(F.lit, names)),
                                          F.map_keys(_features_map())))
    try:
        logs = spark.read.schema(from_arrow_schema(SCHEMA)).parquet(path)
        groups = logs.groupBy(  # few groups: the unusable rows, one per other Join and
            F.when(usable & ~ours, F.col("join")).alias("other"),  # per definition
            F.when(usable & ours, lacking).alias("lacking"),
        ).agg(F.count(F.lit(1)).alias("rows"),
              *(F.count_if(bad).alias(column) for column, bad in lacks.items()),
              ).collect()  # reads every column: corrupt files fail
    except (PySparkException, Py4JJavaError) as error:
        if isinstance(error, AnalysisException) and error.getCondition() == "PATH_NOT_FOUND":
            raise ConsistencyError(
                f"No response logs under {path}: the path does not exist. Fix: serve with "
                "--log-dir (or log fetches with a ResponseLog) first, or pass the directory "
                "that holds the Join's folder") from None
        raise ConsistencyError(
            f"Cannot read the response logs under {path}: {_cause(error)}. Fix: remove or "
            "repair the files that are not response logs (ResponseLog writes "
            "part-*.parquet files of its SCHEMA)") from None
    total = sum(group["rows"] for group in groups)
    unusable = sum(group["rows"] for group in groups
                   if group["other"] is None and group["lacking"] is None)
    lacked = _lacked(groups, path) if unusable else ""
    if unusable:
        log.warning("%s: %s of %s logged rows are unusable and left out (%s); %s", path,
                    f"{unusable:,}", f"{total:,}", lacked, _LOGGED)
    if total == unusable:
        fix = (f"rewrite or remove those rows or files: {_LOGGED}" if total else
               "serve some requests with logging on first")
        raise ConsistencyError(
            f"The response logs under {path} hold no usable row ({total:,} rows"
            + (f"; {lacked}" if total else "") + f"). Fix: {fix}")
    others: dict[str, int] = {}
    for group in groups:
        if group["other"] is not None:
            others[group["other"]] = others.get(group["other"], 0) + group["rows"]
    other = sum(others.values())
    named = ", ".join(f"{name!r} ({count:,})" for name, count in
                      sorted(others.items(), key=lambda item: -item[1])[:5])
    if other == total - unusable:
        raise ConsistencyError(
            f"None of the {other:,} usable logged rows under {path} is of Join {join.name!r}: "
            f"their join column names {named}{' and more' if len(others) > 5 else ''}. Fix: "
            "pass the definitions of the Join that served these logs, or the logs of "
            f"{join.name!r}")
    if other:
        log.warning("%s: %s logged rows are of another Join (%s%s), not %r, and are left out",
                    path, f"{other:,}", named, " and more" if len(others) > 5 else "",
                    join.name)
    definitions = {tuple(group["lacking"]): group["rows"] for group in groups
                   if group["lacking"] is not None}
    held = set(names) - set.intersection(*(set(gone) for gone in definitions))
    if len(held) < len(names):
        absent = [name for name in names if name not in held]
        raise ConsistencyError(
            f"No usable logged row under {path} holds the feature"
            f"{'s' if len(absent) > 1 else ''} {', '.join(absent[:10])}"
            f"{f' (and {len(absent) - 10} more)' if len(absent) > 10 else ''} of Join "
            f"{join.name!r}, and the Fetcher logs every feature of its Join, nulls included: "
            "these logs were served by another definition (an aggregation or window added "
            "or changed since). Fix: pass the definitions of the Join that served these logs")
    changed = {gone: rows for gone, rows in definitions.items() if gone}
    if changed:
        gone = sorted({name for lost in changed for name in lost}, key=names.index)
        log.warning("%s: %s logged rows of Join %r lack some of its features (%s%s): served "
                    "by another definition of it, they are left out", path,
                    f"{sum(changed.values()):,}", join.name, ", ".join(gone[:10]),
                    " and more" if len(gone) > 10 else "")
    if not definitions.get(()):
        raise ConsistencyError(
            f"No usable logged row of Join {join.name!r} under {path} holds all of its "
            "features: each was served by another definition. Fix: pass the definitions of "
            "the Join that served these logs")
    return (logs.where(usable & ours & (F.size(lacking) == 0)),
            total - definitions[()])


#: Where the fix of logs that lack columns begins.
_LOGGED = ("a ResponseLog writes every column of its SCHEMA (request_id, join, row_index, "
           "request_time, served_at, keys, features, stale)")


def _lacked(groups: Sequence[Any], path: str) -> str:
    """Say how many rows lack each column, and which local files have no such column."""
    counts = {column: sum(group[column] for group in groups) for column in _UNUSABLE}
    said = [f"{column} {_UNUSABLE[column][1]} in {count:,}"
            for column, count in counts.items() if count]
    missing = _files_without(path, [column for column, count in counts.items() if count])
    said.extend(f"{column} absent from the file{'s' if len(files) > 1 else ''} "
                f"{', '.join(files[:3])}{' and more' if len(files) > 3 else ''}"
                for column, files in missing.items())
    return "; ".join(said)


def _files_without(path: str, columns: Sequence[str]) -> dict[str, list[str]]:
    """Per column, the local log files whose Parquet schema lacks it (their footers only).

    Spark reads such a column as nulls; empty for logs that are not on the local disk.
    """
    folder = Path(path)
    if not columns or "://" in path or path.startswith("file:") or not folder.is_dir():
        return {}
    found: dict[str, list[str]] = {}
    for file in sorted(folder.iterdir()):
        if file.name.startswith((".", "_")) or not file.is_file():
            continue
        try:
            names = set(pq.read_schema(file).names)
        except (OSError, ValueError):  # Spark read it: a race with a writer, at worst
            continue
        for column in columns:
            if column not in names:
                found.setdefault(column, []).append(file.name)
    return found


_JAVA_ERROR = re.compile(r"^(Caused by: )?[\w.$]+(Exception|Error): (.+)$")


def _cause(error: Exception) -> str:
    """Return the root cause of a Spark error in one line: the last Java "Caused by"."""
    lines = [line.strip() for line in str(error).splitlines()]
    found = [match for match in map(_JAVA_ERROR.match, lines) if match is not None]
    causes = [match for match in found if match.group(1)] or found
    text = causes[-1].group(3) if causes else (lines[0] if lines else type(error).__name__)
    return text.rstrip(". ")[:300]


def _left_rows(spark: SparkSession, join: Join, logs: DataFrame) -> tuple[DataFrame, int]:
    """Each log row as a left row: key columns (the left source's types), time, log columns.

    A row whose keys lack one of the Join's, or hold a value that does not read as its
    column's type, was not a fetch of this Join's keys: it is left out, and counted (one job).

    Raises:
        ConsistencyError: no row holds this Join's keys.

    """
    keys = list(dict.fromkeys(key for part in join.join_parts for key in part.left_keys))
    taken = sorted(set(keys) & set(LOG_COLUMNS))
    if taken:
        raise ConsistencyError(
            f"Join {join.name!r} has key columns named {', '.join(taken)}, which the "
            f"consistency job uses for the log's own columns. Fix: rename them in the left "
            "source's select")
    schema = _left_schema(spark, join)
    lacking = [key for key in keys if key not in schema.names]
    if lacking:
        raise ConsistencyError(
            f"The left source of Join {join.name!r} has no column {', '.join(lacking)}, so "
            "the logged keys have no type to take. Fix: select the key columns in the left "
            "source")
    parsed = F.from_json("keys", T.MapType(T.StringType(), T.StringType()))
    readable = F.lit(True)
    for key in keys:
        text = parsed.getItem(key)
        readable &= F.map_contains_key(parsed, key) & (
            text.isNull() | _typed(text, schema[key].dataType).isNotNull())
    rows = logs.select(
        *(_typed(parsed.getItem(key), schema[key].dataType).alias(key) for key in keys),
        "request_id", "row_index", "request_time", F.col("keys").alias("log_keys"),
        F.col("features").alias("log_features"), F.col("stale").alias("log_stale"),
        F.coalesce(readable, F.lit(False)).alias("_tt_readable"))
    counted = rows.agg(F.count(F.lit(1)), F.count_if(~F.col("_tt_readable"))).first()
    assert counted is not None
    total, unreadable = int(counted[0]), int(counted[1] or 0)
    if unreadable == total:
        raise ConsistencyError(
            f"None of the {total:,} usable logged rows holds Join {join.name!r}'s keys "
            f"({', '.join(keys)}, each of its left column's type). Fix: pass the definitions "
            "of the Join that served these logs")
    if unreadable:
        log.warning("%s of the logged rows have keys that are not Join %r's key columns; "
                    "they are left out", f"{unreadable:,}", join.name)
    return rows.where("_tt_readable").drop("_tt_readable"), unreadable


def _left_schema(spark: SparkSession, join: Join) -> T.StructType:
    """Return the left source's schema after its select (no job runs).

    Raises:
        ConsistencyError: Spark cannot read the left source.

    """
    table = join.left.table if isinstance(join.left, EventSource) else \
        join.left.snapshot_table
    try:
        return load(spark, join.left, table, "left").schema
    except (PySparkException, Py4JJavaError) as error:
        shown = table if isinstance(table, str) else type(table).__name__
        raise ConsistencyError(
            f"Cannot read join.left of Join {join.name!r} ({shown}): {_cause(error)}. The "
            "logged keys take the types of its key columns. Fix: pass a left source Spark "
            "can read (a table that exists, a Parquet path or a DataFrame) with the key "
            "columns") from None


def _typed(text: Column, data_type: T.DataType) -> Column:
    """Cast a logged key (JSON text) to ``data_type``, null where it is not one.

    Integral keys accept ``7.0`` too, but ``7.5`` is no key of the type (null), not 7.
    """
    if isinstance(data_type, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        decimal = text.try_cast("decimal(38,6)")
        return F.coalesce(text.try_cast(data_type),
                          F.when(decimal == F.floor(decimal), decimal.try_cast(data_type)))
    return text.try_cast(data_type)


# --- recomputing and comparing --------------------------------------------------------------


def _specs(join: Join) -> list[tuple[str, str, str]]:
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


def _approx_parts(join: Join) -> list[JoinPart]:
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
    named = _specs(join)
    frame = offline.select(*LOG_COLUMNS, *(F.col(name).alias(f"_tt_f{index}")
                                           for index, (name, _, _) in enumerate(named)))
    approx_parts = _approx_parts(join)
    if approx_parts:
        truth = percentile_rank_bounds(Join(join.name, logged.left, approx_parts), spark,
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

