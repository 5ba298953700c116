"""A backfill's input, judged once counted: rows left out, seconds for milliseconds, snapshots.

Called by :meth:`timetile.offline.backfill.BackfillJob.plan` after the count job: under
``strict`` unusable rows are an error (:class:`BadInputError`), else they are logged and
reported; an entity part's query days are found, and those whose previous day has no
snapshot partition.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from timetile.core.timeutil import DAY_MS, SECONDS_LIKE_MS, ms_to_iso
from timetile.offline.plan import BackfillPlan, EntityPartPlan
from timetile.offline.report import BadInputError, JobReport
from timetile.spark.entities import DAY
from timetile.spark.sources import TIME, epoch_day

log = logging.getLogger("timetile.offline.backfill")


def check_input(report: JobReport, *, strict: bool) -> None:
    """Act on the input counts: raise under ``strict``, else warn of rows left out.

    Also notes a source whose integer times all fall before 1973: likely seconds, not
    milliseconds.

    Raises:
        BadInputError: ``strict`` and some rows have no usable time.

    """
    for source in report.sources:
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
            report.notes.append(message)


def snapshot_days(plan: BackfillPlan, left: DataFrame, report: JobReport, *,
                  strict: bool) -> BackfillPlan:
    """Return ``plan`` with each entity part's query days, and those without a snapshot.

    Two small jobs per entity part (the distinct days of the kept ``left`` rows and of the
    snapshot partitions); the features of queries on a day whose previous snapshot is
    missing are null, and the report says how many left rows that touches.

    Raises:
        BadInputError: ``strict`` and some query day lacks the snapshot of the day before.

    """
    parts = list(plan.parts)
    for index, part in enumerate(parts):
        if not isinstance(part, EntityPartPlan):
            continue
        day = epoch_day(part.as_of(F.col(TIME)))
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
        report.notes.append(message)
    return replace(plan, parts=tuple(parts))
