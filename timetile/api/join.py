"""Join: the left rows (queries) enriched with the features of several GroupBys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from timetile.api.errors import DefinitionError, Problem
from timetile.api.group_by import GroupBy, check_name
from timetile.api.sources import EntitySource, EventSource


@dataclass(frozen=True)
class JoinPart:
    """One GroupBy inside a Join, with how the left side's columns reach its keys.

    Args:
        group_by: the features.
        prefix: prepended to the part's output columns with ``_``, so one GroupBy can be
            joined twice (``guest`` and ``host``).
        key_mapping: ``{left_column: group_by_key}`` for keys whose left column has another
            name. Keys not in the mapping are read from the left column of the same name.

    >>> from timetile import Aggregation, EventSource
    >>> views = GroupBy("user_views", EventSource("v"), ["user_id"],
    ...                 [Aggregation("duration", "sum", ["1d"])])
    >>> part = JoinPart(views, prefix="guest", key_mapping={"guest_id": "user_id"})
    >>> part.left_keys, part.output_columns()
    (('guest_id',), ['guest_user_views_duration_sum_1d'])

    """

    group_by: GroupBy
    prefix: str | None = None
    key_mapping: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        subject = "JoinPart"
        if not isinstance(self.group_by, GroupBy):
            raise DefinitionError.single(subject, "group_by", f"{self.group_by!r} is not a "
                                         "GroupBy", "pass a tt.GroupBy")
        subject = f"JoinPart {self.group_by.name!r}"
        if self.prefix is not None:
            check_name(subject + ".prefix", self.prefix)
        mapping = dict(self.key_mapping or {})
        unknown = {left: key for left, key in mapping.items() if key not in self.group_by.keys}
        if unknown:
            raise DefinitionError.single(
                subject, "key_mapping", f"maps to {sorted(unknown.values())}, which are not "
                f"keys of {self.group_by.name}", f"map left columns to its keys "
                f"{list(self.group_by.keys)}, as {{left_column: key}}",
            )
        if len(set(mapping.values())) != len(mapping):
            raise DefinitionError.single(subject, "key_mapping", "maps two columns to one key",
                                         "map each key from exactly one left column")
        object.__setattr__(self, "key_mapping", tuple(sorted(mapping.items())))

    @property
    def mapping(self) -> tuple[tuple[str, str], ...]:
        """``key_mapping`` as sorted (left column, key) pairs."""
        return self.key_mapping  # type: ignore[return-value]

    @property
    def left_keys(self) -> tuple[str, ...]:
        """Give the left column for each of the GroupBy's keys, in key order."""
        by_key = {key: left for left, key in self.mapping}
        return tuple(by_key.get(key, key) for key in self.group_by.keys)

    def output_columns(self) -> list[str]:
        """Return the part's output columns, prefixed."""
        return self.group_by.output_columns(self.prefix)


@dataclass(frozen=True)
class Join:
    """Every left row, enriched with point-in-time-correct features (DESIGN §2, contract).

    Each left row is a query at its time: its features are computed from events strictly
    before that time. The output holds every left row exactly once, its columns unchanged,
    plus one column per (part, aggregation, window).

    Args:
        name: the model's name, explicit (used for output tables and logs).
        left: the queries: an :class:`EventSource` (its ``time_column`` is the query time).
        parts: GroupBys, or :class:`JoinPart` to set ``prefix`` and ``key_mapping``.

    """

    name: str
    left: EventSource | EntitySource
    parts: Sequence[GroupBy | JoinPart]

    def __post_init__(self) -> None:
        check_name("Join", self.name)
        subject = f"Join {self.name!r}"
        if not isinstance(self.left, (EventSource, EntitySource)):
            raise DefinitionError.single(subject, "left", f"{self.left!r} is not a source",
                                         "use tt.EventSource(table, time_column='ts')")
        if isinstance(self.parts, (GroupBy, JoinPart)) or not self.parts:
            raise DefinitionError.single(subject, "parts", "needs a non-empty list",
                                         "give parts=[group_by, ...]")
        parts: list[JoinPart] = []
        for index, given in enumerate(self.parts):
            part = JoinPart(given) if isinstance(given, GroupBy) else given
            if not isinstance(part, JoinPart):
                raise DefinitionError.single(subject, f"parts[{index}]", f"{part!r} is not a "
                                             "GroupBy", "give tt.GroupBy or tt.JoinPart")
            parts.append(part)
        object.__setattr__(self, "parts", tuple(parts))
        problems = self._repeated_columns()
        if problems:
            raise DefinitionError(subject, problems)

    @property
    def join_parts(self) -> tuple[JoinPart, ...]:
        """The parts, each normalized to a :class:`JoinPart`."""
        return self.parts  # type: ignore[return-value]

    def _repeated_columns(self) -> list[Problem]:
        seen: dict[str, int] = {}
        problems = []
        named: dict[str, tuple[int, GroupBy]] = {}
        for index, part in enumerate(self.join_parts):
            first = named.setdefault(part.group_by.name, (index, part.group_by))
            if first[1] is not part.group_by and first[1] != part.group_by:
                problems.append(Problem(
                    f"parts[{index}].group_by.name", f"{part.group_by.name!r} names another "
                    f"GroupBy too (parts[{first[0]}])",
                    "give each GroupBy its own name; a prefix only renames columns",
                ))
        for index, part in enumerate(self.join_parts):
            for column in part.output_columns():
                if column in seen:
                    problems.append(Problem(
                        f"parts[{index}]", f"produces {column!r}, as parts[{seen[column]}] does",
                        "give one of them a prefix: tt.JoinPart(group_by, prefix='...')",
                    ))
                seen.setdefault(column, index)
        return problems

    def output_columns(self) -> list[str]:
        """Return the feature columns added to the left rows, in part order."""
        return [column for part in self.join_parts for column in part.output_columns()]
