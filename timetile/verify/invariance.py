"""``verify``: a Join's features under several cuts of time, compared value by value (seed 001).

A computation is correct when its result does not depend on how its input is cut along
time. :func:`verify` samples left rows of a range, then runs each tiling
(:mod:`timetile.verify.tilings`): per segment ``[a, b)``, a backfill of the sampled left
rows in it over the sources **as they stood at b** (events before ``b``; an entity's
mutations before ``b`` and the snapshots of days that ended by ``b``), the incremental
tilings on hop partials stored by the segments before (a store of their own, told that
events landed before ``b`` only, so a cut day is never stored part-landed; the days before
the range are copied from the first such store). With ``leaks``, one more backfill computes
each sampled row over its own cut at its time (:mod:`timetile.verify.leaks`), compared as
one more tiling. Then it compares every feature of every sampled row, on the executors:

- exact ops (and derivations) against the reference tiling, the first one named, with
  :func:`~timetile.core.equality.same_value` (floats to 1e-9 relative, NaN equals NaN);
- approximate ops in every tiling against the exact oracle's error bounds, as the
  consistency check judges them (:data:`~timetile.verify.consistency.APPROX_CHECKS`).

A row a tiling lost or repeated counts as a mismatch too. A derived column that reads an
approximate feature has no bound to be judged by: it is left out, and the report names it.
Only per-(feature, tiling) counts and the first mismatching rows come back to the driver,
and the left rows' times (at most ``sample`` numbers, to skip segments without a row).

Cost: one sampling pass over the left source; per tiling, one backfill per segment that
holds a sampled row (each plans and counts its input, so a backfill's fixed cost of a few
seconds on local Spark multiplies by the days of a ``daily`` tiling); with ``leaks``, one
backfill over copies of each sampled row's sources; the oracle over the sampled rows when
the Join has approximate ops; one comparison job. Work files (the sampled
rows, each tiling's output, stored partials) live in a temporary local folder, removed at the
end, or in a new ``run-…`` folder of ``work_dir`` when given, kept (on a cluster, give a
folder every executor can reach).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.errors import expect_argument
from timetile.api.join import Join
from timetile.api.sources import EntitySource, EventSource
from timetile.core.aggregators.sketches import KLL_RANK_ERROR
from timetile.core.equality import same_value
from timetile.core.locations import write_problem
from timetile.core.timeutil import DAY_MS, ms_to_iso
from timetile.offline.arguments import time_range
from timetile.offline.backfill import BackfillJob, partials_refusal
from timetile.offline.executors.partial_store import copy_days
from timetile.offline.plan import PartPlan, plan_backfill
from timetile.online.jsonable import dumps
from timetile.spark.sources import TIME, check_session, load_events, time_millis
from timetile.testing import percentile_rank_bounds
from timetile.verify.consistency import APPROX_CHECKS, Stages, approx_parts, feature_ops
from timetile.verify.cuts import Cut, source_as_of
from timetile.verify.leaks import as_known
from timetile.verify.replay import SampledRows, replay
from timetile.verify.results import BOUND, EXACT
from timetile.verify.tiling_report import FeatureTiling, TilingMismatch, TilingRun, VerifyReport
from timetile.verify.tilings import (
    DEFAULT_STREAM_BATCH,
    DEFAULT_TILINGS,
    KNOWN_BEFORE,
    Tiling,
    parse_tilings,
    segments,
)
from timetile.verify.values import decode_served, offline_value

__all__ = ["DEFAULT_SAMPLE", "EXAMPLES", "verify"]

log = logging.getLogger(__name__)

#: Left rows checked when ``sample`` is not given.
DEFAULT_SAMPLE = 2_000
#: Mismatching rows kept per (feature, tiling) for the report: the earliest ones.
EXAMPLES = 5
#: What the comparison writes per (sampled row, feature, tiling) it judges.
_COMPARED = pa.schema([("feature", pa.string()), ("tiling", pa.string()),
                       ("time", pa.int64()), ("match", pa.bool_()), ("left", pa.string()),
                       ("reference", pa.string()), ("value", pa.string()),
                       ("moved", pa.float64())])
_COMPARED_SPARK = T.StructType([
    T.StructField("feature", T.StringType()), T.StructField("tiling", T.StringType()),
    T.StructField("time", T.LongType()), T.StructField("match", T.BooleanType()),
    T.StructField("left", T.StringType()), T.StructField("reference", T.StringType()),
    T.StructField("value", T.StringType()), T.StructField("moved", T.DoubleType())])
_MISSING_ROW = "(row missing)"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def verify(join: Join, spark: SparkSession, start: str, end: str, *,
           tilings: str | Sequence[str] = DEFAULT_TILINGS, sample: int = DEFAULT_SAMPLE,
           seed: int = 0, output: str | os.PathLike[str] | None = None,
           work_dir: str | os.PathLike[str] | None = None,
           progress: Stages | None = None, leaks: bool = False,
           stream_batch: int = DEFAULT_STREAM_BATCH) -> VerifyReport:
    """Compute ``join``'s features under each tiling of ``[start, end]`` and compare them.

    Args:
        join: the definition; its left side must be an :class:`~timetile.EventSource`.
        spark: the session.
        start: first day of left rows checked, ``YYYY-MM-DD`` (UTC).
        end: last day, inclusive.
        tilings: ``"one,daily,random:3"`` or a list of such names; the first is the
            reference of exact features.
        sample: at most this many left rows of the range are checked, drawn by a hash of
            their columns and ``seed`` (the same rows every time).
        seed: seeds the sample and the random cuts.
        output: a local folder (created) for ``report.md``, ``report.html`` and
            ``mismatches.parquet`` (every mismatching row, feature and tiling).
        work_dir: where the work files go (see the module); kept when given.
        progress: shows each backfill as a stage (``timetile.cli.progress.JobProgress``).
        leaks: also compute each sampled row over what was known before its time
            (:mod:`timetile.verify.leaks`) and report, as mismatches, the features whose
            value changes: rows that arrived late (a source's ``known_at``) or an engine
            that reads past the row's time. Then one tiling is enough.
        stream_batch: the ``stream`` tiling's rows per micro-batch, across all sources
            (:mod:`timetile.verify.replay`).

    Returns:
        The :class:`~timetile.verify.tiling_report.VerifyReport`; ``report.passed`` says
        whether every tiling agreed.

    Raises:
        TypeError, ValueError: an argument that cannot work, named with its fix, before any
            Spark job; or, after the sampling job, a range without a left row.
        DefinitionError: the definition cannot work against the sources.

    """
    chosen, (low, high) = _check_arguments(join, spark, start, end, tilings=tilings,
                                           sample=sample, seed=seed, output=output,
                                           work_dir=work_dir, progress=progress, leaks=leaks,
                                           stream_batch=stream_batch)
    stage: Callable[[str], AbstractContextManager[Any]] = (
        progress.stage if progress is not None else lambda _: nullcontext())
    owned = work_dir is None
    # a folder of this run's own, so that nothing an earlier run left in work_dir is read
    work = tempfile.mkdtemp(prefix="timetile-verify-") if work_dir is None \
        else f"{os.fspath(work_dir).rstrip('/')}/run-{uuid.uuid4().hex[:12]}"
    if output is not None:
        Path(output).mkdir(parents=True, exist_ok=True)
    try:
        with stage("plan"):
            plan = plan_backfill(join, spark)  # the definition against the real sources
            refusal = (partials_refusal(plan)
                       if any(isinstance(part, PartPlan) for part in plan.parts)
                       else "no part over events (an entity part stores none)")
        with stage("sample left rows"):
            sampled = _sample(join, spark, low=low, high=high, sample=sample, seed=seed,
                              path=f"{work}/left")
        if not sampled.times:
            raise ValueError(f"Join {join.name!r}: its left source has no row with a time "
                             f"from {start} to {end}, so nothing can be verified: give a "
                             "range that holds left rows")
        runs: list[TilingRun] = []
        history: tuple[str, str] | None = None  # the first store: (its tiling, its folder)
        for index, tiling in enumerate(chosen):
            path = f"{work}/tiling{index}"
            if tiling.kind == "stream":
                runs.append(replay(join, spark, _fetched_rows(spark, sampled),
                                   bounds=(low, high), batch_rows=stream_batch, work=work,
                                   path=path, stage=stage))
                continue
            runs.append(_run(join, spark, tiling, sampled, bounds=(low, high), seed=seed,
                             refusal=refusal, path=path, history=history, stage=stage))
            if tiling.incremental and refusal is None and history is None:
                history = (tiling.name, f"{path}-partials")
        if leaks:
            with stage(f"{KNOWN_BEFORE}: each row over what was known before its time"):
                runs.append(_run_known(join, spark, sampled, path=f"{work}/known"))
        outputs = [(run.tiling, f"{work}/tiling{index}" if index < len(chosen)
                    else f"{work}/known") for index, run in enumerate(runs)]
        with stage("compare"):
            features, examples, skipped = _compare(
                join, spark, sampled, outputs, output=output,
                served=[tiling.kind == "stream" for tiling in chosen]
                + [False] * (len(runs) - len(chosen)))
        report = VerifyReport(join.name, start, end, chosen[0].name, len(sampled.times),
                              runs, features, examples,
                              None if output is None else os.fspath(output), skipped)
        if output is not None:
            folder = Path(output)
            (folder / "report.md").write_text(report.markdown(), encoding="utf-8")
            (folder / "report.html").write_text(report.html(), encoding="utf-8")
        return report
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)


def _check_arguments(join: Join, spark: SparkSession, start: str, end: str, *,
                     tilings: str | Sequence[str], sample: int, seed: int,
                     output: str | os.PathLike[str] | None,
                     work_dir: str | os.PathLike[str] | None, progress: Stages | None,
                     leaks: bool, stream_batch: int
                     ) -> tuple[tuple[Tiling, ...], tuple[int, int]]:
    """Refuse arguments that cannot work, each named with its fix, before any job."""
    expect_argument("join", join, Join, "a tt.Join",
                    "verify a Join: tt.Join(name, left=tt.EventSource(...), parts=[...])")
    check_session(spark)
    if not isinstance(join.left, EventSource):
        raise ValueError(f"Join {join.name!r}: verify needs left rows with their own times: "
                         "give the Join a left tt.EventSource (an entity's snapshot rows "
                         "are not verified yet)")
    for name, day in (("start", start), ("end", end)):
        expect_argument(name, day, str, "a day", "write it as YYYY-MM-DD, e.g. 2024-02-01")
    bounds = time_range(start, end)
    assert bounds is not None
    low, high = bounds
    assert low is not None
    assert high is not None
    expect_argument("tilings", tilings, (str, list, tuple), "tiling names",
                    f"give them comma-separated, e.g. {DEFAULT_TILINGS!r}")
    if not isinstance(leaks, bool):
        raise ValueError(f"leaks is {leaks!r}: give True or False")
    chosen = parse_tilings(tilings, alone=leaks)
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise ValueError(f"sample is {sample!r}: give how many left rows to check, a "
                         "positive int")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed is {seed!r}: give an int")
    if isinstance(stream_batch, bool) or not isinstance(stream_batch, int) or stream_batch < 1:
        raise ValueError(f"stream_batch is {stream_batch!r}: give how many rows each "
                         "micro-batch of the stream tiling holds, a positive int")
    if any(tiling.kind == "stream" for tiling in chosen):
        _check_streamable(join, work_dir)
    folder = "give a str or a pathlib.Path"
    expect_argument("output", output, (str, os.PathLike, type(None)), "a folder or None",
                    folder)
    expect_argument("work_dir", work_dir, (str, os.PathLike, type(None)), "a folder or None",
                    folder)
    for name, path in (("output", output), ("work_dir", work_dir)):
        if isinstance(path, (str, os.PathLike)):
            text = os.fspath(path)
            problem = write_problem(str(text))
            if problem is not None:
                raise ValueError(f"{name} {text!s} {problem}")
    expect_argument("progress", progress, (Stages, type(None)),
                    "an object with a stage(name) context, or None",
                    "pass timetile.cli.progress.JobProgress(...) or leave it out")
    return chosen, (low, high)


def _check_streamable(join: Join, work_dir: str | os.PathLike[str] | None) -> None:
    """Refuse what the ``stream`` tiling cannot replay, before any job."""
    if work_dir is not None and "://" in os.fspath(work_dir):
        raise ValueError(f"work_dir {os.fspath(work_dir)!s}: the stream tiling moves files "
                         "into landing folders and keeps an LMDB store there, so it needs a "
                         "local folder: give a local path, or leave work_dir out")
    for index, part in enumerate(join.join_parts):
        source = part.group_by.source
        if isinstance(source, EntitySource) and source.mutation_table is None:
            raise ValueError(
                f"tilings: 'stream' replays change streams, and parts[{index}] "
                f"({part.group_by.name!r}) reads an entity source without a mutation_table, "
                "which online changes only with each day's upload: give the source its "
                "mutation_table, or verify this Join with batch tilings only")


# --- the sampled left rows ------------------------------------------------------------------


@dataclass(frozen=True)
class _Sampled:
    """The sampled left rows, written once so that every tiling reads the same ones.

    Attributes:
        path: their Parquet folder (the left source's columns, projected, and ``row``).
        row: the column numbering them 0, 1, …: a name the left source does not use.
        columns: the left source's columns, projected.
        time_column: the left source's time column.
        times: their times, epoch milliseconds, ascending.

    """

    path: str
    row: str
    columns: tuple[str, ...]
    time_column: str
    times: tuple[int, ...]

    def read(self, spark: SparkSession) -> DataFrame:
        return spark.read.parquet(self.path)

    def millis(self, frame: DataFrame) -> Any:
        """Return the rows' time as epoch milliseconds, a Column of ``frame``."""
        return time_millis(self.time_column, frame.schema[self.time_column].dataType)


def _sample(join: Join, spark: SparkSession, *, low: int, high: int, sample: int, seed: int,
            path: str) -> _Sampled:
    """Draw at most ``sample`` left rows of ``[low, high)``, number them, write them.

    The rows with the lowest hash of (their columns as JSON, seed): a top-``sample`` per
    partition, then one small sort. One job writes them, one reads back their times.
    """
    left = join.left
    assert isinstance(left, EventSource)
    frame = load_events(spark, left, "left")
    columns = tuple(column for column in frame.columns if column != TIME)
    row = "verify_row"
    while row in columns:
        row = f"{row}_"
    rank = F.xxhash64(F.to_json(F.struct(*columns)), F.lit(seed))
    drawn = (frame.where((F.col(TIME) >= low) & (F.col(TIME) < high))
             .withColumn(row, rank).orderBy(row, TIME).limit(sample))
    numbered = drawn.withColumn(row, F.row_number().over(Window.orderBy(row, TIME)) - 1)
    numbered.select(row, *columns).write.mode("overwrite").parquet(path)
    sampled = _Sampled(path, row, columns, left.time_column, ())
    written = sampled.read(spark)
    times = sorted(value[0] for value in written.select(sampled.millis(written)).collect())
    return replace(sampled, times=tuple(times))


def _fetched_rows(spark: SparkSession, sampled: _Sampled) -> SampledRows:
    """Return the sampled rows as the stream tiling fetches them (at most ``sample``)."""
    frame = sampled.read(spark)
    collected = sorted((row[0], row[1:]) for row in
                       frame.select(sampled.millis(frame), sampled.row, *sampled.columns)
                       .collect())
    names = (sampled.row, *sampled.columns)
    return SampledRows([dict(zip(names, values, strict=True)) for _, values in collected],
                       sampled.row, [at for at, _ in collected])


# --- one tiling ----------------------------------------------------------------------------


def _run(join: Join, spark: SparkSession, tiling: Tiling, sampled: _Sampled, *,
         bounds: tuple[int, int], seed: int, refusal: str | None, path: str,
         history: tuple[str, str] | None,
         stage: Callable[[str], AbstractContextManager[Any]]) -> TilingRun:
    """Backfill each segment of ``tiling`` that holds a sampled row; write to ``path``.

    An incremental tiling stores partials under ``{path}-partials``. The days before the
    range have landed under every cut, so when an earlier tiling stored them (``history``:
    its name and store), their partials are copied, not computed again; the days of the
    range each tiling stores itself.
    """
    cut = segments(tiling, *bounds, seed=seed)
    held = [(a, b) for a, b in cut
            if bisect_left(sampled.times, b) > bisect_left(sampled.times, a)]
    stored = tiling.incremental and refusal is None
    partials = f"{path}-partials" if stored else None
    began = time.perf_counter()
    copied = None
    if partials is not None and history is not None:
        with stage(f"{tiling.name}: copy the partials of the days before the range"):
            copied = copy_days(spark, history[1], partials,
                               lambda day: (day + 1) * DAY_MS <= bounds[0])
    rows = sampled.read(spark)
    for index, (a, b) in enumerate(held):
        with stage(f"{tiling.name}: backfill {index + 1}/{len(held)}, "
                   f"{_label(a)} to {_label(b)}"), _quiet_partial_identity():
            left = rows.where((sampled.millis(rows) >= a) & (sampled.millis(rows) < b))
            segment = _as_of(join, spark, b, EventSource(left, sampled.time_column))
            job = BackfillJob(segment, spark, _day(a), _day(b - 1), partials_path=partials,
                              landed_before=b if stored else None)
            job.plan().dataframe().write.mode("append").parquet(path)
            job.release()
    seconds = time.perf_counter() - began
    written = spark.read.parquet(path).count() if held else 0
    how = ("no: one batch" if not tiling.incremental
           else f"no: {refusal}" if not stored
           else "yes" if not copied or history is None
           else f"yes; those of the days before the range copied from {history[0]}'s store "
                f"({copied:,} day folders)")
    return TilingRun(tiling.name, len(cut), len(held), written, seconds, how)


def _run_known(join: Join, spark: SparkSession, sampled: _Sampled, *, path: str) -> TilingRun:
    """Backfill every sampled row over its own cut of the sources; write to ``path``."""
    began = time.perf_counter()
    known = as_known(join, spark, sampled.read(spark), sampled.row, sampled.time_column)
    BackfillJob(known, spark).plan().dataframe().write.mode("overwrite").parquet(path)
    rows = spark.read.parquet(path).count()
    return TilingRun(KNOWN_BEFORE, 1, 1, rows, time.perf_counter() - began,
                     "no: one batch, each row over its own cut")


def _label(millis: int) -> str:
    text = ms_to_iso(millis)
    return text[:10] if millis % DAY_MS == 0 else text


def _day(millis: int) -> str:
    """Return the ``YYYY-MM-DD`` of a time's UTC day."""
    return ms_to_iso(millis - millis % DAY_MS)[:10]


def _as_of(join: Join, spark: SparkSession, before: int, left: EventSource) -> Join:
    """``join`` over ``left`` and its sources as they stood at ``before``.

    :func:`~timetile.verify.cuts.source_as_of`, by event and mutation time (not by
    ``known_at``: a tiling checks the engine, the leak check the data). A source shared by
    several parts is cut once.
    """
    cut: dict[int, EventSource | EntitySource] = {}
    parts = []
    for index, part in enumerate(join.join_parts):
        source = part.group_by.source
        if id(source) not in cut:
            cut[id(source)] = source_as_of(spark, source, f"parts[{index}].source",
                                           Cut(F.lit(before)))
        parts.append(replace(part, group_by=replace(part.group_by, source=cut[id(source)])))
    return replace(join, left=left, parts=parts)


@contextmanager
def _quiet_partial_identity() -> Iterator[None]:
    """Drop the tiled executor's warning that a DataFrame's partials are known by name only.

    True, and meant, for a verify's own store of its cut sources.
    """
    logger = logging.getLogger("timetile.offline.executors.tiled")

    def keep(record: logging.LogRecord) -> bool:
        return "stored partials are known by" not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


# --- the comparison ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Feature:
    """One compared output column: its op, Spark type and, for an approximate op, truth's."""

    name: str
    op: str
    data_type: T.DataType
    bound_type: T.DataType | None


def _compare(join: Join, spark: SparkSession, sampled: _Sampled,
             written: Sequence[tuple[str, str]], *, output: str | os.PathLike[str] | None,
             served: Sequence[bool]) -> tuple[list[FeatureTiling], list[TilingMismatch],
                                              list[str]]:
    """Join every run's output on the row number, judge each value, count per feature.

    ``written`` names each run (a tiling, or the leak check) and its output's folder, the
    reference first; ``served`` says, per run, that its values are served JSON text (the
    stream tiling's), and a feature its output lacks (a derivation, which no fetch serves)
    is not judged in it. Returns the per-(feature, run) counts, the first mismatching rows,
    and the derived columns left out (:func:`_uncomparable`).
    """
    rows = sampled.read(spark)
    frame = rows.select(sampled.row, sampled.millis(rows).alias("time"),
                        F.to_json(F.struct(*sampled.columns)).alias("left"))
    names_of_runs = [name for name, _ in written]
    outputs = [spark.read.parquet(path) for _, path in written]
    ops = {name: op for name, _, op in feature_ops(join)}
    skipped = _uncomparable(join)
    names = [column for column in outputs[0].columns
             if column not in (sampled.row, *sampled.columns, *skipped)]
    truth = _truth(join, spark, sampled, {name: feature for feature, name in enumerate(names)
                                          if ops.get(name) in APPROX_CHECKS})
    absent = [{feature for feature, name in enumerate(names) if name not in out.columns}
              for out in outputs]
    for index, out in enumerate(outputs):
        frame = frame.join(out.select(
            sampled.row, F.lit(True).alias(f"p{index}"),
            *((F.lit(None) if feature in absent[index] else F.col(name))
              .alias(f"t{index}_{feature}") for feature, name in enumerate(names))),
            sampled.row, "left")
    if truth is not None:
        frame = frame.join(truth, sampled.row, "left")
    schema = frame.schema
    features = [_Feature(name, ops.get(name, "derived"), outputs[0].schema[name].dataType,
                         schema[f"b{feature}"].dataType if f"b{feature}" in schema.names
                         else None) for feature, name in enumerate(names)]
    compared = frame.mapInArrow(_Judge(features, names_of_runs, served, absent),
                                _COMPARED_SPARK).persist()
    try:
        counts = {(row["feature"], row["tiling"]): (row["n"], row["bad"], row["moved"])
                  for row in compared.groupBy("feature", "tiling").agg(
                      F.count(F.lit(1)).alias("n"), F.count_if(~F.col("match")).alias("bad"),
                      F.max("moved").alias("moved")).collect()}
        bad = compared.where(~F.col("match"))
        first = F.row_number().over(Window.partitionBy("feature", "tiling").orderBy("time"))
        examples = [TilingMismatch(row["feature"], row["tiling"], row["time"], row["left"],
                                   row["reference"], row["value"])
                    for row in bad.withColumn("n", first).where(F.col("n") <= EXAMPLES)
                    .orderBy("feature", "tiling", "time").collect()]
        if output is not None:
            bad.write.mode("overwrite").parquet(str(Path(output).resolve() / "mismatches.parquet"))
    finally:
        compared.unpersist()
    table = [FeatureTiling(feature.name, feature.op,
                           BOUND if feature.bound_type is not None else EXACT, name,
                           *counts.get((feature.name, name), (0, 0, None)))
             for feature in features for name in names_of_runs]
    return table, examples, skipped


def _uncomparable(join: Join) -> list[str]:
    """Return the derived columns whose expression reads an approximate feature.

    A sketch may answer differently under another cut (KLL compacts at random) while each
    answer lies within its bound, and a derivation of it has no bound: such columns are
    left out of the comparison, and the report names them.
    """
    approx = {name.casefold() for name, _, op in feature_ops(join) if op in APPROX_CHECKS}
    return [name for name, expression in join.derivation_items
            if approx & {word.casefold() for word in _WORD.findall(expression)}]


def _truth(join: Join, spark: SparkSession, sampled: _Sampled, names: dict[str, int]
           ) -> DataFrame | None:
    """Return the oracle's truth of the approximate features, ``b{index}`` by output index."""
    parts = approx_parts(join)
    if not names or not parts:
        return None
    left = EventSource(sampled.read(spark), sampled.time_column)
    truth = percentile_rank_bounds(Join(join.name, left, parts), spark, KLL_RANK_ERROR)
    return truth.select(sampled.row, *(F.col(name).alias(f"b{index}")
                                       for name, index in names.items()))


class _Judge:
    """The Arrow function of ``mapInArrow``: per sampled row, each feature in each tiling.

    Picklable (names, Spark types, module-level functions), so it travels to the executors.
    O(features × tilings) per row. ``served[t]``: tiling ``t``'s values are served JSON text;
    ``absent[t]``: the features it has no value of, not judged in it.
    """

    def __init__(self, features: Sequence[_Feature], tilings: Sequence[str],
                 served: Sequence[bool], absent: Sequence[set[int]]) -> None:
        self.features = list(features)
        self.tilings = list(tilings)
        self.served = list(served)
        self.absent = list(absent)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self.judge(batch)

    def judge(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Return the judged (row, feature, tiling) triples of one batch of joined rows.

        A row the reference tiling lost is that tiling's mismatch, per exact feature, and
        those features of the row are compared in no other tiling.
        """
        columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        out: dict[str, list[Any]] = {name: [] for name in _COMPARED.names}

        def judged(feature: str, tiling: str, row: int, *, match: bool,
                   reference: Any = _MISSING_ROW, value: Any = _MISSING_ROW) -> None:
            out["feature"].append(feature)
            out["tiling"].append(tiling)
            out["time"].append(columns["time"][row])
            out["match"].append(match)
            out["left"].append(None if match else columns["left"][row])
            out["reference"].append(None if match else _text(reference))
            out["value"].append(None if match else _text(value))
            out["moved"].append(None if match else _moved(reference, value))

        for row in range(batch.num_rows):
            for index, feature in enumerate(self.features):
                bound = feature.bound_type is not None
                truth = (offline_value(columns[f"b{index}"][row], feature.bound_type)
                         if feature.bound_type is not None else None)
                if not bound and columns["p0"][row] is None:
                    judged(feature.name, self.tilings[0], row, match=False)
                    continue
                reference = offline_value(columns[f"t0_{index}"][row], feature.data_type)
                for tiling, name in enumerate(self.tilings):
                    if (tiling == 0 and not bound) or index in self.absent[tiling]:
                        continue  # the reference of an exact feature, or a value not served
                    present = columns[f"p{tiling}"][row] is not None
                    cell = columns[f"t{tiling}_{index}"][row]
                    value = (decode_served(json.loads(cell), feature.data_type)
                             if self.served[tiling] and cell is not None
                             else offline_value(cell, feature.data_type))
                    match = present and (APPROX_CHECKS[feature.op](value, truth) if bound
                                         else same_value(value, reference))
                    if match:
                        judged(feature.name, name, row, match=True)
                    else:
                        judged(feature.name, name, row, match=False,
                               reference=truth if bound else reference,
                               value=value if present else _MISSING_ROW)
        return pa.RecordBatch.from_pydict(out, schema=_COMPARED)


def _text(value: Any) -> str:
    """Return a compared value as JSON text (the missing-row marker as it is)."""
    return value if value is _MISSING_ROW else dumps(value)


def _moved(reference: Any, value: Any) -> float | None:
    """Return how far a number moved from the reference; None where either is no number."""
    numbers = [v for v in (reference, value)
               if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) < 2:
        return None
    moved = abs(float(value) - float(reference))
    return moved if math.isfinite(moved) else None
