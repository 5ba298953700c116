"""Sources: where a GroupBy's rows come from (DESIGN §1–2).

A source reads a Spark table name, a Parquet path, or a Spark DataFrame. A string with a
``/`` or a URI scheme (``s3://…``, ``file:…``) is a path; any other string is a table name.
``select`` and ``where`` are Spark SQL expressions applied before anything else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from timetile.api.errors import DefinitionError
from timetile.api.windows import MAX_WINDOW_MS
from timetile.core.timeutil import parse_duration

#: What ``select`` holds once normalized: (output name, Spark SQL expression) pairs.
Projection = tuple[tuple[str, str], ...]


def _normalize_select(owner: str, select: object) -> Projection | None:
    if select is None:
        return None
    if isinstance(select, str):
        raise DefinitionError.single(
            owner, "select", "a single string is ambiguous", "give a list of columns or a "
            "mapping {output_name: spark_sql_expression}"
        )
    if isinstance(select, Mapping):
        pairs = tuple(select.items())
    elif isinstance(select, tuple) and select and all(
            isinstance(pair, tuple) and len(pair) == 2 for pair in select):
        pairs = select  # normalized already: a source copied by dataclasses.replace
    elif isinstance(select, Sequence):
        pairs = tuple((column, column) for column in select)
    else:
        raise DefinitionError.single(owner, "select", f"{select!r} is not a selection",
                                     "give a list of columns or a mapping {name: expression}")
    if not pairs:
        raise DefinitionError.single(owner, "select", "selects no columns",
                                     "list the columns to keep, or leave select out")
    for name, expression in pairs:
        if not isinstance(name, str) or not isinstance(expression, str) or not name:
            raise DefinitionError.single(
                owner, "select", f"{name!r}: {expression!r} is not a column name and expression",
                "use strings: {'amount': 'price * quantity'} or ['amount', 'ts']",
            )
    seen: dict[str, str] = {}  # Spark resolves names without regard to case
    for name, _ in pairs:
        if name.casefold() in seen:
            raise DefinitionError.single(
                owner, "select", f"names {name!r} twice" if seen[name.casefold()] == name
                else f"names {seen[name.casefold()]!r} and {name!r}, one column to Spark",
                "keep one of them, or rename one in a mapping {name: expression}")
        seen[name.casefold()] = name
    return pairs


def _normalize_where(owner: str, where: object) -> tuple[str, ...]:
    if where is None:
        return ()
    if isinstance(where, str):
        clauses: tuple[object, ...] = (where,)
    elif isinstance(where, Sequence):
        clauses = tuple(where)
    else:
        clauses = (where,)
    if not all(isinstance(clause, str) and clause.strip() for clause in clauses):
        raise DefinitionError.single(owner, "where", f"{where!r} is not a filter",
                                     "give Spark SQL boolean expressions as strings")
    return tuple(str(clause) for clause in clauses)


class _Projected:
    """Typed views of the normalized ``select`` and ``where`` of a source."""

    select: object
    where: object

    @property
    def projection(self) -> Projection | None:
        """``select`` as (name, expression) pairs, or None to keep every column."""
        return self.select  # type: ignore[return-value]

    @property
    def filters(self) -> tuple[str, ...]:
        """``where`` as a tuple of Spark SQL filters, ANDed."""
        return self.where  # type: ignore[return-value]


def _check_table(owner: str, name: str, table: Any) -> None:
    from timetile.api.interval_join import IntervalJoin  # noqa: PLC0415  (it imports this)

    if isinstance(table, IntervalJoin):
        return
    if isinstance(table, str):
        if not table.strip():
            raise DefinitionError.single(owner, name, "is empty",
                                         "give a table name, a Parquet path or a DataFrame")
        return
    if not (hasattr(table, "schema") and hasattr(table, "select")):
        raise DefinitionError.single(
            owner, name, f"{type(table).__name__} is not a table",
            "give a table name, a Parquet path, a Spark DataFrame or a tt.IntervalJoin",
        )


def describe_table(table: Any) -> str:
    """Name a table reference briefly, for messages and reports."""
    if isinstance(table, str):
        return table
    label = getattr(table, "label", None)  # an IntervalJoin names itself
    return label if isinstance(label, str) else "a DataFrame"


def is_path(table: str) -> bool:
    """Tell whether a table string is a path (it holds a ``/`` or a URI scheme) or a table name.

    >>> is_path("events.views"), is_path("data/views"), is_path("s3://bucket/views")
    (False, True, True)
    """
    return "/" in table or "\\" in table or ":" in table


def _parse_period(period: object) -> int:
    """Parse a period, a positive duration string like a window length, into milliseconds."""
    fix = "write '<n><unit>' with unit one of s, m, h, d (e.g. '1h'), or None for raw events"
    if not isinstance(period, str):
        raise DefinitionError.single("EventSource", "period", f"{period!r} is not a duration",
                                     fix)
    try:
        millis = parse_duration(period)
    except ValueError:
        raise DefinitionError.single("EventSource", "period",
                                     f"{period!r} is not a positive duration", fix) from None
    if millis > MAX_WINDOW_MS:  # floors of every time to one period would leave int64
        raise DefinitionError.single("EventSource", "period", f"{period!r} is longer than "
                                     "10,000 years", "give the cadence the rows land at, "
                                     "such as '1h' or '1d'")
    return millis


@dataclass(frozen=True)
class EventSource(_Projected):
    """An append-only log of events, each with a time (DESIGN §2).

    Args:
        table: a Spark table name, a Parquet path, a Spark DataFrame, or a
            :class:`~timetile.api.interval_join.IntervalJoin` (whose rows it reads).
        time_column: the event time: int64 epoch milliseconds, a Spark timestamp, or an
            ISO-8601 string. Rows whose time is null or unparseable are left out and counted.
        select: columns to keep, as a list of names or ``{name: spark_sql_expression}``.
        where: Spark SQL filters, ANDed.
        period: for pre-aggregated data, the cadence its rows land at (``"1h"``, ``"1d"``):
            each row is the partial aggregate of one period, so a feature at q is the
            TEMPORAL feature at ``floor(q, period)`` (after the SNAPSHOT floor to the day,
            under that accuracy). None (the default) for raw events.
        known_at: a time column (after ``select``) saying when each row became known to
            the system, such as an ingestion time. Backfills ignore it; ``timetile verify
            --leaks`` cuts each left row's sources by it, to find the features whose
            training values saw rows that had not arrived yet (see docs/verify.md).

    >>> EventSource("events.views", time_column="ts", where="duration > 0").where
    ('duration > 0',)
    >>> EventSource("hourly_views", period="1h").period_ms
    3600000

    """

    table: Any
    time_column: str = "ts"
    select: Projection | Mapping[str, str] | Sequence[str] | None = None
    where: tuple[str, ...] | str | Sequence[str] | None = None
    period: str | None = None
    known_at: str | None = None

    def __post_init__(self) -> None:
        _check_table("EventSource", "table", self.table)
        if not isinstance(self.time_column, str) or not self.time_column:
            raise DefinitionError.single("EventSource", "time_column", "is missing",
                                         "name the column that holds each event's time")
        _check_known_at("EventSource", self.known_at)
        object.__setattr__(self, "select", _normalize_select("EventSource", self.select))
        object.__setattr__(self, "where", _normalize_where("EventSource", self.where))
        if self.period is not None:
            _parse_period(self.period)

    @property
    def period_ms(self) -> int | None:
        """The period in milliseconds, or None for raw (not pre-aggregated) events."""
        return None if self.period is None else _parse_period(self.period)

    @property
    def label(self) -> str:
        """Name the source as people name it in messages."""
        return describe_table(self.table)


@dataclass(frozen=True)
class EntitySource(_Projected):
    """A mutable table: daily snapshots plus a log of mutations (DESIGN §2).

    Partition ``ds`` of ``snapshot_table`` holds the table as of the end of that day.
    ``mutation_table`` rows carry ``mutation_time_column`` and ``is_before_column``: the row
    image before a change is a retraction, the one after it an insertion.

    Args:
        snapshot_table: table name, Parquet path or DataFrame of daily snapshots.
        mutation_table: the mutations, or None when only snapshots exist (SNAPSHOT accuracy).
        time_column: a time column of the rows, needed only for windowed aggregations.
        mutation_time_column: when each mutation happened: epoch milliseconds, a timestamp
            or time text, as an event source's time column.
        is_before_column: true for the row image before a change (a boolean, the text
            ``true``/``false``, or a number 1/0; anything else leaves the mutation out,
            counted).
        partition_column: the snapshot's day partition: ``YYYY-MM-DD`` text, a date, or a
            timestamp (its UTC day).
        select: columns to keep.
        where: Spark SQL filters, ANDed.
        known_at: a time column of the mutation table (as ``mutation_time_column``) saying
            when each mutation became known, such as when the change data capture delivered
            it. Backfills ignore it; ``timetile verify --leaks`` cuts each left row's
            mutations by it (see docs/verify.md).

    """

    snapshot_table: Any
    mutation_table: Any = None
    time_column: str | None = None
    mutation_time_column: str = "mutation_ts"
    is_before_column: str = "is_before"
    partition_column: str = "ds"
    select: Projection | Mapping[str, str] | Sequence[str] | None = None
    where: tuple[str, ...] | str | Sequence[str] | None = field(default=None)
    known_at: str | None = None

    def __post_init__(self) -> None:
        _check_table("EntitySource", "snapshot_table", self.snapshot_table)
        named = ("mutation_time_column", "is_before_column", "partition_column")
        defaults = {field.name: field.default for field in fields(self) if field.name in named}
        for name, default in defaults.items():
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise DefinitionError.single("EntitySource", name, f"{value!r} names no column",
                                             f"name the column, or leave {name} out for its "
                                             f"default {default!r}")
        if self.is_before_column == self.mutation_time_column:
            raise DefinitionError.single(
                "EntitySource", "is_before_column", f"{self.is_before_column!r} is the "
                "mutation_time_column too, so every mutation would read as a retraction",
                "name the column that is true for the row image before a change")
        if self.time_column is not None and (not isinstance(self.time_column, str)
                                             or not self.time_column):
            raise DefinitionError.single("EntitySource", "time_column",
                                         f"{self.time_column!r} names no column",
                                         "name the rows' time column, or None")
        if self.mutation_table is not None:
            _check_table("EntitySource", "mutation_table", self.mutation_table)
        _check_known_at("EntitySource", self.known_at)
        if self.known_at is not None and self.mutation_table is None:
            raise DefinitionError.single(
                "EntitySource", "known_at", "says when mutations became known, and this "
                "source has no mutation_table", "give the mutation_table, or leave known_at out")
        object.__setattr__(self, "select", _normalize_select("EntitySource", self.select))
        object.__setattr__(self, "where", _normalize_where("EntitySource", self.where))

    @property
    def label(self) -> str:
        """Name the source as people name it in messages."""
        return describe_table(self.snapshot_table)


def _check_known_at(kind: str, known_at: object) -> None:
    """Refuse a ``known_at`` that names no column."""
    if known_at is not None and (not isinstance(known_at, str) or not known_at):
        raise DefinitionError.single(kind, "known_at", f"{known_at!r} names no column",
                                     "name the column of when each row became known, or "
                                     "leave known_at out")


Source = EventSource | EntitySource
