"""The core's time rules on Spark columns: window bounds, as-of times and hop pieces in a plan.

:class:`ColumnTimes` is :class:`timetile.core.windows.TimeArithmetic` for Spark ``bigint``
columns of epoch milliseconds, so a backfill's plan computes each window's bounds, each
query's as-of time and each window's hop pieces with the very rules the kernels and the
online fetcher run (:func:`~timetile.core.windows.window_span`,
:func:`~timetile.core.windows.as_of`, :func:`~timetile.core.tiling.hops.window_pieces`),
as column expressions: no Python runs per row.

For example ``window_span(COLUMNS, F.col("q"), WindowKind.SLIDING, 1_000, None)`` is
``q`` and ``coalesce(try_subtract(q, 1000), CASE WHEN q IS NOT NULL THEN MIN_TIME END)``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from timetile.core.windows import MAX_TIME, MIN_TIME, TimeArithmetic


class ColumnTimes(TimeArithmetic[Column]):
    """Time arithmetic on Spark columns: ``try_`` operations, saturated at the ends of int64.

    Spark's ``try_subtract`` and ``try_add`` give null where ``bigint`` arithmetic would
    overflow; the end of int64 takes the place of that null, as the core's saturation does.
    A null time stays null (a row without a time is in no window and matches no query).
    ``pmod`` is a floor's modulo (never negative), so times before the epoch floor down.
    """

    def minus(self, times: Column, millis: int) -> Column:
        """Return ``times − millis``, at least MIN_TIME."""
        return _saturated(F.try_subtract(times, F.lit(millis)), times, int(MIN_TIME))

    def floor(self, times: Column, step: int) -> Column:
        """Return ``times`` rounded down to a multiple of ``step``, at least MIN_TIME."""
        return _saturated(F.try_subtract(times, F.pmod(times, F.lit(step))), times,
                          int(MIN_TIME))

    def ceil(self, times: Column, step: int) -> Column:
        """Return ``times`` rounded up to a multiple of ``step``, at most MAX_TIME."""
        up = F.pmod(F.lit(step) - F.pmod(times, F.lit(step)), F.lit(step))
        return _saturated(F.try_add(times, up), times, int(MAX_TIME))

    def where(self, condition: Any, then: Column, otherwise: Column) -> Column:
        """Return ``CASE WHEN condition THEN then ELSE otherwise END``."""
        return F.when(condition, then).otherwise(otherwise)

    def constant(self, millis: int, like: Column) -> Column:
        """Return the literal ``millis``."""
        del like
        return F.lit(millis)


def _saturated(result: Column, times: Column, end: int) -> Column:
    """Return ``result``, or ``end`` where it overflowed (null from a time that was not)."""
    return F.coalesce(result, F.when(times.isNotNull(), F.lit(end)))


#: The time rules on Spark columns.
COLUMNS = ColumnTimes()


#: The epoch milliseconds Spark's timestamps reach either side of 0 (about ±292,000 years).
MAX_INSTANT_MS = MAX_TIME // 1000


def watermark_instant(millis: Column) -> Column:
    """Return epoch milliseconds as a timestamp for Spark's watermark, saturated at its ends.

    Where int64 milliseconds go on past Spark's timestamps, one event far in the future or
    past is counted like any other instead of failing every replay of its micro-batch.
    """
    clamped = F.least(F.greatest(millis, F.lit(-MAX_INSTANT_MS)), F.lit(MAX_INSTANT_MS))
    return F.timestamp_millis(clamped)
