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
one more tiling. The ``stream`` tiling runs no backfill: it replays the sources through the
streaming job and fetches each sampled row online (:mod:`timetile.verify.replay`). Then it
compares every feature of every sampled row, on the executors
(:mod:`timetile.verify.tiling_compare`): exact ops (and derivations) against the reference
tiling, the first one named; approximate ops in every tiling against the exact oracle's
error bounds. A derived column that reads an approximate feature has no bound to be judged
by: it is left out, and the report names it. Only per-(feature, tiling) counts and the
first mismatching rows come back to the driver, and the left rows' times (at most
``sample`` numbers, to skip segments without a row).

Cost: one sampling pass over the left source; per tiling, one backfill per segment that
holds a sampled row (each plans and counts its input, so a backfill's fixed cost of a few
seconds on local Spark multiplies by the days of a ``daily`` tiling); with ``leaks``, one
backfill over copies of each sampled row's sources; for ``stream``, see its module; the
oracle over the sampled rows when the Join has approximate ops; one comparison job. Work
files (the sampled rows, each tiling's output, stored partials) live in a temporary local
folder, removed at the end, or in a new ``run-…`` folder of ``work_dir`` when given, kept
(on a cluster, give a folder every executor can reach).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from timetile.api.errors import expect_argument
from timetile.api.join import Join
from timetile.api.sources import EntitySource, EventSource
from timetile.core.locations import local_path, write_problem
from timetile.core.timeutil import DAY_MS, ms_to_iso
from timetile.offline.arguments import time_range
from timetile.offline.backfill import BackfillJob, partials_refusal
from timetile.offline.executors.partial_store import copy_days
from timetile.offline.plan import PartPlan, plan_backfill
from timetile.spark.session import remote_master
from timetile.spark.sources import TIME, check_session, load_events
from timetile.verify.consistency import Stages
from timetile.verify.cuts import Cut, source_as_of
from timetile.verify.leaks import as_known
from timetile.verify.replay import SampledRows, replay
from timetile.verify.tiling_compare import Sampled, compare
from timetile.verify.tiling_report import TilingRun, VerifyReport
from timetile.verify.tilings import (
    DEFAULT_STREAM_BATCH,
    DEFAULT_TILINGS,
    KNOWN_BEFORE,
    Tiling,
    parse_tilings,
    segments,
)

__all__ = ["DEFAULT_SAMPLE", "verify"]

log = logging.getLogger(__name__)

#: Left rows checked when ``sample`` is not given.
DEFAULT_SAMPLE = 2_000


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
            if tiling.streamed:
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
            features, examples, skipped = compare(
                join, spark, sampled, outputs, output=output,
                served=[tiling.streamed for tiling in chosen] + [False] * leaks)
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
    if any(tiling.streamed for tiling in chosen):
        _check_streamable(join, spark, work_dir)
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


def _check_streamable(join: Join, spark: SparkSession,
                      work_dir: str | os.PathLike[str] | None) -> None:
    """Refuse what the ``stream`` tiling cannot replay, before any job."""
    if work_dir is not None and local_path(os.fspath(work_dir)) is None:
        raise ValueError(f"work_dir {os.fspath(work_dir)!s}: the stream tiling moves files "
                         "into landing folders and keeps an LMDB store there, so it needs a "
                         "local folder: give a local path, or leave work_dir out")
    master = remote_master(spark)
    if master is not None:
        raise ValueError(f"tilings: 'stream' keeps its store in LMDB, which the executors of "
                         f"{master} may not share: run it on local Spark, or verify with "
                         "batch tilings only")
    if not join.keeps_features:
        raise ValueError(f"tilings: 'stream' fetches features online, and Join {join.name!r} "
                         "outputs only its derivations, which no fetch serves: add '*': '*' "
                         "to its derivations, or verify it with batch tilings only")
    for index, part in enumerate(join.join_parts):
        source = part.group_by.source
        if isinstance(source, EntitySource) and source.mutation_table is None:
            raise ValueError(
                f"tilings: 'stream' replays change streams, and parts[{index}] "
                f"({part.group_by.name!r}) reads an entity source without a mutation_table, "
                "which online changes only with each day's upload: give the source its "
                "mutation_table, or verify this Join with batch tilings only")


# --- the sampled left rows ------------------------------------------------------------------


def _sample(join: Join, spark: SparkSession, *, low: int, high: int, sample: int, seed: int,
            path: str) -> Sampled:
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
    sampled = Sampled(path, row, columns, left.time_column, ())
    written = sampled.read(spark)
    times = sorted(value[0] for value in written.select(sampled.millis(written)).collect())
    return replace(sampled, times=tuple(times))


def _fetched_rows(spark: SparkSession, sampled: Sampled) -> SampledRows:
    """Return the sampled rows as the stream tiling fetches them (at most ``sample``)."""
    frame = sampled.read(spark)
    collected = sorted((row[0], row[1:]) for row in
                       frame.select(sampled.millis(frame), sampled.row, *sampled.columns)
                       .collect())
    names = (sampled.row, *sampled.columns)
    return SampledRows([dict(zip(names, values, strict=True)) for _, values in collected],
                       sampled.row, [at for at, _ in collected])


# --- one tiling ----------------------------------------------------------------------------


def _run(join: Join, spark: SparkSession, tiling: Tiling, sampled: Sampled, *,
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


def _run_known(join: Join, spark: SparkSession, sampled: Sampled, *, path: str) -> TilingRun:
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
