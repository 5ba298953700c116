"""The arguments of a backfill, checked before anything reads them: each error names one."""

from __future__ import annotations

import os
from collections.abc import Iterable

from timetile.api.errors import expect_argument
from timetile.api.join import Join
from timetile.core.locations import overlapping, write_problem
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.offline.options import AUTO
from timetile.spark.sources import check_session


def check_arguments(join: object, spark: object, *, executor: object, strict: object,
                    executors: Iterable[str]) -> None:
    """Refuse arguments of the wrong type before anything reads them, naming each."""
    expect_argument("join", join, Join, "a tt.Join",
                    "backfill a Join: tt.Join(name, left=tt.EventSource(...), parts=[group_by])")
    check_session(spark)
    expect_argument("executor", executor, str, "an executor's name",
                    f"give one of {AUTO!r}, {', '.join(map(repr, executors))}")
    expect_argument("strict", strict, bool, "True or False", "give a bool")


#: The left rows kept, as epoch milliseconds: ``low <= time < high``, a side None if open.
TimeRange = tuple[int | None, int | None]


def shifted(millis: int | None) -> int | None:
    """Move a range bound one day later (an open side stays open)."""
    return None if millis is None else millis + DAY_MS


def _day_ms(name: str, day: str) -> int:
    """Return a ``start`` or ``end`` day in epoch milliseconds; errors name the argument."""
    try:
        return date_to_ms(day)
    except (ValueError, TypeError, AttributeError):  # not a day, or not a str or date
        raise ValueError(f"{name} {day!r} is not a day: write it as YYYY-MM-DD, e.g. "
                         "2024-01-31") from None


def partials_location(location: object, join: Join) -> str:
    """Return ``partials_path`` as a string, or raise naming it when it cannot be written.

    A local path may not be or lie in a path ``join`` reads (remote URIs are not checked):
    Spark would read the partials as rows of that table, or fail to read it at all. It may
    hold one, unless a GroupBy's partials (under ``{path}/{group_by}/``) would lie in it.
    Neither the path nor a GroupBy's folder in it may be a file.
    """
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"partials_path is {location!r}: give a folder path or URI "
                         "(str), e.g. 's3://bucket/partials' or '/data/partials'")
    written = [location, *(f"{location.rstrip('/')}/{part.group_by.name}"
                           for part in join.join_parts)]
    problem = next(filter(None, map(write_problem, written)), None)
    if problem is not None:
        raise ValueError(f"partials_path {location}: {problem}")
    read = next((found for folder in written
                 if (found := overlapping(folder, list(join.paths_read), holding=False))),
                None)
    if read is not None:
        raise ValueError(f"partials_path {location}: the Join {join.name!r} reads {read}, "
                         "which stored partials there would break. Fix: keep the partials "
                         "in a folder of their own")
    return location


def time_range(start: str | None, end: str | None) -> TimeRange | None:
    """Return the range of ``start`` and ``end`` (days, inclusive), or None for all rows.

    A side not given is open, so no time is left out on it (the first and last int64
    milliseconds included).
    """
    if start is None and end is None:
        return None
    low = _day_ms("start", start) if start is not None else None
    high = _day_ms("end", end) + DAY_MS if end is not None else None
    if low is not None and high is not None and low >= high:
        raise ValueError(f"start {start} is after end {end}: give start <= end")
    return low, high
