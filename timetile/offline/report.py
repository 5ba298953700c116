"""The job report: what a backfill read, what it left out and why, and where time went."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field


class BadInputError(ValueError):
    """Raised under ``strict=True`` when rows cannot be used (for example, null time)."""


@dataclass(frozen=True)
class SourceCounts:
    """Row counts of one source.

    Attributes:
        role: ``left`` or the GroupBy's name.
        label: the table as the user named it.
        rows: rows read after ``where`` and ``select``.
        without_time: rows whose time is null or unparseable: left out.
        without_key: rows with a null key: they can match no query, so they are left out.
        time: what places a row in time: ``time``, or an entity's ``partition`` or
            ``mutation time or is_before``.
        fullest_bucket: for some tuples of key columns (those of the parts that may sweep),
            the most usable rows in one bucket of the keys' hash
            (:func:`timetile.offline.hot_keys.key_bucket`): no key has more rows.
        latest_integer_time: the latest time, if the source gives its time as integers
            (epoch milliseconds); None otherwise, or when no row has one.
        outside_range: of the left's timed rows, those outside the job's [start, end]: not
            asked for, so not returned (and not counted as left out).
        null_buckets: per bucket column, the usable rows whose bucket is null: no feature
            bucketed by it holds them. They are not counted as left out: the GroupBy's
            unbucketed features, if it has any, hold them.

    """

    role: str
    label: str
    rows: int
    without_time: int
    without_key: int
    time: str = "time"
    fullest_bucket: Mapping[tuple[str, ...], int] = field(default_factory=dict, hash=False)
    latest_integer_time: int | None = None
    outside_range: int = 0
    null_buckets: Mapping[str, int] = field(default_factory=dict, hash=False)

    @property
    def left_out(self) -> int:
        """Rows this source could not use."""
        return self.without_time + self.without_key

    @property
    def usable(self) -> int:
        """Rows this source could use."""
        return self.rows - self.left_out


@dataclass
class JobReport:
    """What a job did. Filled while it runs; rendered by the CLI and logged.

    Attributes:
        job: the Join's name.
        path: which executor ran each part, as ``part: executor`` pairs, the part named
            by :attr:`~timetile.api.join.JoinPart.label` (``guest_spend: sweep, ...``).
        sources: row counts per source.
        stage_seconds: wall time per named stage, in order.
        notes: anything else worth telling the user.

    """

    job: str
    path: str
    sources: list[SourceCounts] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    gauges: dict[str, Callable[[], str | None]] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage of the job."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + (
                time.perf_counter() - began
            )

    @property
    def rows_left_out(self) -> int:
        """Rows left out over all sources."""
        return sum(source.left_out for source in self.sources)

    def lines(self) -> list[str]:
        """Return the report as plain text lines."""
        out = [f"job {self.job}: path {self.path}"]
        for source in self.sources:
            line = f"  {source.role} ({source.label}): {source.rows:,} rows read"
            if source.without_time:
                line += f", {source.without_time:,} left out: {source.time} null or unparseable"
            if source.without_key:
                line += f", {source.without_key:,} left out: key null"
            if source.outside_range:
                line += f", {source.outside_range:,} outside [start, end]: not returned"
            for bucket, rows in source.null_buckets.items():
                if rows:
                    line += f", {rows:,} with {bucket} null: in no bucket of it"
            out.append(line)
        out += [f"  stage {name}: {seconds:.2f}s" for name, seconds in self.stage_seconds.items()]
        out += [f"  note: {note}" for note in self.notes]
        for name, read in self.gauges.items():
            value = read()
            if value is not None:
                out.append(f"  {name}: {value}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())
