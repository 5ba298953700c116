"""GroupBy: aggregations of one source by its keys (DESIGN §1)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from timetile.api.aggregation import Aggregation
from timetile.api.errors import DefinitionError, Problem
from timetile.api.interval_join import IntervalJoin
from timetile.api.sources import EntitySource, EventSource
from timetile.api.windows import Window
from timetile.core.timeutil import DAY_MS
from timetile.core.windows import INTS, as_of

#: A name Spark and mapInArrow take as it is: a GroupBy's, a Join's, a column's.
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: timetile's own columns start with this, in any case; no name a user gives may.
RESERVED_PREFIX = "_tt_"


#: The ops that merge the rows of a pre-aggregated source (``EventSource(period=...)``).
PERIOD_OPS = ("sum", "min", "max", "first", "last", "first_k", "last_k")


class Accuracy(Enum):
    """How fresh a feature is at query time (DESIGN §2).

    ``TEMPORAL`` is exact to the query's millisecond. ``SNAPSHOT`` is the value as of the end
    of the day before the query's day: cheaper, and needs no stream.
    """

    TEMPORAL = "temporal"
    SNAPSHOT = "snapshot"


def check_name(subject: str, name: object) -> None:
    """Names become column prefixes and table names: they must be identifiers.

    Not ``_tt`` nor one that starts with ``_tt_``, in any case: the columns they begin
    would take the names of timetile's own (:data:`RESERVED_PREFIX`).
    """
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise DefinitionError.single(
            subject, "name", f"{name!r} is not a valid name",
            "use letters, digits and underscores, starting with a letter (e.g. 'user_views')",
        )
    if f"{name}_".casefold().startswith(RESERVED_PREFIX):
        raise DefinitionError.single(
            subject, "name", f"{name!r} would begin column names with {RESERVED_PREFIX!r}, which "
            "in any case are timetile's own", "use another name, starting with a letter "
            "(e.g. 'user_views')",
        )


@dataclass(frozen=True)
class GroupBy:
    """Aggregations of one source, grouped by ``keys``.

    Args:
        name: explicit and unique within a Join; it prefixes every output column.
        source: an :class:`EventSource`, an :class:`EntitySource`, or an
            :class:`~timetile.api.interval_join.IntervalJoin` (read as an event source at
            its ``time_column``).
        keys: the columns that identify an entity (``["user_id"]``), in order; one name
            alone (``"user_id"``) is one key.
        aggregations: what to compute. Every aggregation, column and window of a GroupBy
            is computed in one pass over the source. None on an :class:`EntitySource`
            makes a lookup: the source's ``select`` (required) names the columns, and each
            non-key one becomes an output ``{group_by}_{column}`` holding the value of the
            key's row in the table's state at query time (see :attr:`lookup_columns`).
        accuracy: ``Accuracy.TEMPORAL`` (default) or ``Accuracy.SNAPSHOT``.

    >>> views = EventSource("events.views")
    >>> gb = GroupBy("user_views", views, ["user_id"], [Aggregation("duration", "sum", ["7d"])])
    >>> gb.output_columns()
    ['user_views_duration_sum_7d']
    >>> users = EntitySource("users", select=["user_id", "country", "age"])
    >>> GroupBy("users", users, ["user_id"]).output_columns(prefix="guest")
    ['guest_users_country', 'guest_users_age']

    """

    name: str
    source: EventSource | EntitySource
    keys: Sequence[str]
    aggregations: Sequence[Aggregation] | None = None
    accuracy: Accuracy = Accuracy.TEMPORAL

    def __post_init__(self) -> None:
        subject = f"GroupBy {self.name!r}"
        check_name("GroupBy", self.name)
        if isinstance(self.source, IntervalJoin):  # its rows are events at its time
            object.__setattr__(self, "source", EventSource(
                self.source, time_column=str(self.source.time_column)))
        if not isinstance(self.source, (EventSource, EntitySource)):
            raise DefinitionError.single(subject, "source", f"{self.source!r} is not a source",
                                         "use tt.EventSource(...) or tt.EntitySource(...)")
        if not isinstance(self.keys, (str, Sequence)):
            raise DefinitionError.single(subject, "keys", f"{self.keys!r} names no key column",
                                         "give the key columns, e.g. keys=['user_id']")
        keys = (self.keys,) if isinstance(self.keys, str) else tuple(self.keys)
        if not keys or not all(isinstance(key, str) and key for key in keys):
            raise DefinitionError.single(subject, "keys", f"{self.keys!r} names no key column",
                                         "give the key columns, e.g. keys=['user_id']")
        if len(set(keys)) != len(keys):
            raise DefinitionError.single(subject, "keys", f"{list(keys)} repeats a column",
                                         "list each key once")
        object.__setattr__(self, "keys", keys)
        if not isinstance(self.accuracy, Accuracy):
            raise DefinitionError.single(subject, "accuracy", f"{self.accuracy!r} is unknown",
                                         "use tt.Accuracy.TEMPORAL or tt.Accuracy.SNAPSHOT")
        if self.aggregations is not None and not isinstance(self.aggregations, Sequence):
            raise DefinitionError.single(
                subject, "aggregations", f"{self.aggregations!r} is not a list",
                "write aggregations=[tt.Aggregation(...), ...]")
        aggregations = None if self.aggregations is None else tuple(self.aggregations)
        object.__setattr__(self, "aggregations", aggregations)
        problems = self._problems()
        if problems:
            raise DefinitionError(subject, problems)

    def _problems(self) -> list[Problem]:
        problems: list[Problem] = []
        if self.aggregations is None:
            if isinstance(self.source, EventSource):
                problems.append(Problem("aggregations", "an event source needs aggregations",
                                        "give aggregations=[tt.Aggregation(...)]"))
            elif self.source.projection is None:
                problems.append(Problem(
                    "source.select", "a lookup (aggregations=None) needs select",
                    "list the key and the columns to look up, e.g. select=['user_id', "
                    "'country']"))
            elif not self.lookup_columns:
                problems.append(Problem(
                    "source.select", "selects only keys, so the lookup has nothing to return",
                    "select the columns to look up besides the keys"))
            return problems
        if not self.aggregations:
            problems.append(Problem("aggregations", "is empty",
                                    "give at least one tt.Aggregation, or None for a lookup"))
        for index, aggregation in enumerate(self.aggregations):
            if not isinstance(aggregation, Aggregation):
                problems.append(Problem(f"aggregations[{index}]",
                                        f"{aggregation!r} is not an Aggregation",
                                        "use tt.Aggregation(column, op, windows=[...])"))
            elif aggregation.windows is not None and self.time_column is None:
                problems.append(Problem(
                    f"aggregations[{index}].windows",
                    f"source {self.source.label} has no time column, so windows cannot apply",
                    "set time_column on the source, or drop windows for a lifetime aggregation",
                ))
        if problems:
            return problems
        problems += self._period_problems()
        spellings: dict[str, list[str]] = {}  # Spark resolves names without regard to case
        for name in self.output_columns():
            spellings.setdefault(name.casefold(), []).append(name)
        repeated = sorted({name for spelled in spellings.values() for name in spelled
                           if spelled.count(name) > 1})
        if repeated:
            problems.append(Problem(
                "aggregations", f"produce the column {', '.join(repeated)} more than once",
                "remove the repeated aggregation (same column, op and window)",
            ))
        cased = [" and ".join(sorted(set(spelled))) for spelled in spellings.values()
                 if len(set(spelled)) > 1]
        if cased:
            problems.append(Problem(
                "aggregations", f"produce the columns {'; '.join(cased)}, which differ only "
                "in case: Spark reads them as one column",
                "remove one of the aggregations, or rename one input column in the source's "
                "select",
            ))
        return problems

    def _period_problems(self) -> list[Problem]:
        """Check a pre-aggregated source: ops that merge partials, windows of whole periods."""
        source = self.source
        if not isinstance(source, EventSource) or source.period_ms is None:
            return []
        period = source.period_ms
        problems = []
        for index, aggregation in enumerate(self.aggregations or ()):
            if aggregation.op not in PERIOD_OPS:
                problems.append(Problem(
                    f"aggregations[{index}].op", f"{aggregation.op} does not merge partial "
                    f"aggregates: {source.label} holds one row per {source.period}",
                    f"use one of {', '.join(PERIOD_OPS)} over the partial columns (an average "
                    "is sum(sums) / sum(counts): write it in the Join's derivations)"))
            for window in aggregation.windows or ():
                assert isinstance(window, Window)
                if window.length_ms % period or (window.hop_ms or period) % period:
                    problems.append(Problem(
                        f"aggregations[{index}].windows",
                        f"{window.name} is not a whole number of periods of {source.period}",
                        f"use windows and hops that are multiples of {source.period}"))
        return problems

    @property
    def floors(self) -> tuple[int, ...]:
        """Round a query's time down to a multiple of each of these, in turn, first.

        ``(DAY_MS,)`` under SNAPSHOT accuracy (the value as of the end of the previous day),
        then a pre-aggregated source's period (the value as of its last landed period);
        empty for TEMPORAL features of raw events. Offline and online both apply it.
        """
        floors = [DAY_MS] if self.accuracy is Accuracy.SNAPSHOT else []
        if isinstance(self.source, EventSource) and self.source.period_ms is not None:
            floors.append(self.source.period_ms)
        return tuple(floors)

    def as_of(self, at: int) -> int:
        """Return when this GroupBy's windows end for a query at ``at`` (see :attr:`floors`).

        >>> from timetile.api.sources import EventSource
        >>> GroupBy("g", EventSource("t", period="1h"), ["k"], [Aggregation("x", "sum")],
        ...         accuracy=Accuracy.SNAPSHOT).as_of(2 * 86_400_000 + 5)
        172800000
        """
        return as_of(INTS, at, self.floors)

    @property
    def time_column(self) -> str | None:
        """The source's time column, if it has one."""
        return self.source.time_column

    @property
    def is_lookup(self) -> bool:
        """Whether this is a lookup: an entity source without aggregations."""
        return self.aggregations is None and isinstance(self.source, EntitySource)

    @property
    def lookup_columns(self) -> tuple[str, ...]:
        """A lookup's value columns: the selected columns that are not keys, in select order.

        Empty for a GroupBy with aggregations.
        """
        if not self.is_lookup or self.source.projection is None:
            return ()
        return tuple(name for name, _ in self.source.projection if name not in self.keys)

    def output_columns(self, prefix: str | None = None) -> list[str]:
        """Every output column, in definition order.

        ``{prefix_}{group_by}_{column}`` per :attr:`lookup_columns` for a lookup, else the
        aggregations' columns (:meth:`Aggregation.column_names`).
        """
        stem = f"{prefix}_{self.name}" if prefix else self.name
        return [f"{stem}_{column}" for column in self.lookup_columns] + [
            name for aggregation in self.aggregations or ()
            for name in aggregation.column_names(self.name, prefix)]
