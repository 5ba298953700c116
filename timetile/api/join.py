"""Join: the left rows (queries) enriched with the features of several GroupBys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from timetile.api.errors import DefinitionError, Problem
from timetile.api.group_by import IDENTIFIER, RESERVED_PREFIX, GroupBy, check_name
from timetile.api.sources import EntitySource, EventSource, is_path

#: The key of ``Join.derivations`` (and its only value) that keeps every feature column.
KEEP_FEATURES = "*"


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
        given = _mapping_of(self.key_mapping)
        if self.key_mapping is not None and given is None:
            raise DefinitionError.single(subject, "key_mapping", f"{self.key_mapping!r} is not "
                                         "a mapping", "write key_mapping={'left_column': 'key'}")
        mapping = dict(given or {})
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

    @property
    def label(self) -> str:
        """The part's name in reports: ``{prefix}_{group_by}``, as its columns begin.

        The GroupBy's name alone without a prefix; two parts of one GroupBy differ by theirs.
        """
        name = self.group_by.name
        return name if self.prefix is None else f"{self.prefix}_{name}"


@dataclass(frozen=True)
class Join:
    """Every left row, enriched with point-in-time-correct features (DESIGN §2, contract).

    Each left row is a query at its time: its features are computed from events strictly
    before that time. The output holds every left row exactly once, its columns unchanged
    and first, then :meth:`final_columns`: one column per (part, aggregation, window)
    (:meth:`output_columns`), or, with ``derivations``, what they ask for.

    Args:
        name: the model's name, explicit (used for output tables and logs).
        left: the queries: an :class:`EventSource` (its ``time_column`` is the query time),
            or an :class:`EntitySource` (each snapshot row, queried at 00:00 UTC of the day
            after its partition: see docs/entities.md).
        parts: GroupBys, or :class:`JoinPart` to set ``prefix`` and ``key_mapping``.
        derivations: ``{name: spark_sql_expression}``: columns computed per row over the
            left columns and every feature column, e.g. ``{"views_per_purchase":
            "user_views_duration_count_7d / nullif(user_purchases_amount_count, 0)"}``. The
            derived columns follow the left columns in the given order, and replace the
            feature columns unless the key ``"*"`` (with the value ``"*"``) keeps them, before the
            derived ones. An expression sees every feature column, kept or not. None or
            ``{}``: no derivations. Names are checked here; expressions, against the real
            schemas before any job starts (unknown columns, syntax, aggregates, a name
            that a left column has). Kept as (name, expression) pairs in the given order,
            ``"*"`` included; :attr:`derivation_items` leaves ``"*"`` out.

    >>> from timetile import Aggregation, EventSource
    >>> views = GroupBy("views", EventSource("v"), ["user_id"],
    ...                 [Aggregation("duration", "sum", ["1d"]), Aggregation("duration", "count")])
    >>> join = Join("model", EventSource("q"), [views], derivations={
    ...     "*": "*", "per_view": "views_duration_sum_1d / nullif(views_duration_count, 0)"})
    >>> join.final_columns()
    ['views_duration_sum_1d', 'views_duration_count', 'per_view']
    >>> Join("model", EventSource("q"), [views], derivations={
    ...     "long": "views_duration_sum_1d > 3600"}).final_columns()
    ['long']

    """

    name: str
    left: EventSource | EntitySource
    parts: Sequence[GroupBy | JoinPart]
    derivations: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        check_name("Join", self.name)
        subject = f"Join {self.name!r}"
        if not isinstance(self.left, (EventSource, EntitySource)):
            raise DefinitionError.single(subject, "left", f"{self.left!r} is not a source",
                                         "use tt.EventSource(table, time_column='ts')")
        if isinstance(self.parts, (GroupBy, JoinPart)) or not self.parts:
            raise DefinitionError.single(subject, "parts", "needs a non-empty list",
                                         "give parts=[group_by, ...]")
        if isinstance(self.parts, str) or not isinstance(self.parts, Sequence):
            raise DefinitionError.single(  # a set's order, hence the columns', is not fixed
                subject, "parts", f"a {type(self.parts).__name__} is not a list",
                "give parts=[group_by, ...], a list: its order orders the output columns")
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
        derivations, problems = _checked_derivations(self.derivations, self.output_columns())
        if problems:
            raise DefinitionError(subject, problems)
        object.__setattr__(self, "derivations", derivations)

    @property
    def join_parts(self) -> tuple[JoinPart, ...]:
        """The parts, each normalized to a :class:`JoinPart`."""
        return self.parts  # type: ignore[return-value]

    @property
    def paths_read(self) -> tuple[str, ...]:
        """The tables the Join reads that are paths (not table names nor DataFrames), in order.

        Its left's, then each part's source's: events, snapshots and mutations. A job's
        output or stored partials must lie outside them.
        """
        sources = [self.left, *(part.group_by.source for part in self.join_parts)]
        tables = [getattr(source, name, None) for source in sources
                  for name in ("table", "snapshot_table", "mutation_table")]
        return tuple(dict.fromkeys(table for table in tables
                                   if isinstance(table, str) and is_path(table)))

    @property
    def derivation_items(self) -> tuple[tuple[str, str], ...]:
        """The derived columns as (name, expression) pairs in the given order, without ``"*"``."""
        pairs: tuple[tuple[str, str], ...] = self.derivations  # type: ignore[assignment]
        return tuple((name, expression) for name, expression in pairs
                     if name != KEEP_FEATURES)

    @property
    def keeps_features(self) -> bool:
        """Whether the output holds the feature columns: no derivations, or ``"*"`` among them."""
        pairs: tuple[tuple[str, str], ...] = self.derivations  # type: ignore[assignment]
        return not pairs or any(name == KEEP_FEATURES for name, _ in pairs)

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
        spelled: dict[str, str] = {}  # Spark resolves names without regard to case
        for index, part in enumerate(self.join_parts):
            for column in part.output_columns():
                folded = column.casefold()
                if folded in seen:
                    same = spelled[folded] == column
                    problems.append(Problem(
                        f"parts[{index}]", f"produces {column!r}, as parts[{seen[folded]}] does"
                        + ("" if same else f" (as {spelled[folded]!r}: Spark ignores case)"),
                        "give one of them a prefix: tt.JoinPart(group_by, prefix='...')",
                    ))
                seen.setdefault(folded, index)
                spelled.setdefault(folded, column)
        return problems

    def output_columns(self) -> list[str]:
        """Return the feature columns, in part order, kept in the output or not.

        Without derivations these are the columns the output adds to the left ones; see
        :meth:`final_columns` for what it adds after derivations.
        """
        return [column for part in self.join_parts for column in part.output_columns()]

    def derived_columns(self) -> list[str]:
        """Return the names of the derived columns, in the order given (``"*"`` left out)."""
        return [name for name, _ in self.derivation_items]

    def final_columns(self) -> list[str]:
        """Return the columns the output holds after the left columns, derivations applied.

        Every feature column when there are no derivations or ``"*"`` is among them, then
        the derived columns in order. The output table is the left columns, then these.
        """
        features = self.output_columns() if self.keeps_features else []
        return [*features, *self.derived_columns()]


def _checked_derivations(
    given: object, features: Sequence[str]
) -> tuple[tuple[tuple[str, str], ...], list[Problem]]:
    """Check ``Join.derivations`` without an engine; return them as ordered pairs.

    Checks: a mapping of column names (identifiers, not timetile's ``_tt_`` ones) to
    non-empty strings; ``"*"`` maps to ``"*"``; with ``"*"``, no derived name is a feature
    column's (compared case-insensitively, as Spark resolves names). Expressions and clashes
    with left columns need the schemas: ``timetile.offline.derivations`` checks those.
    """
    if given is None:
        return (), []
    mapping = _mapping_of(given)
    if mapping is None:
        return (), [Problem("derivations", f"{given!r} is not a mapping",
                            "give derivations={'name': 'spark sql expression', ...}, with "
                            "'*': '*' to keep every feature column")]
    pairs = tuple(mapping.items())
    keep = KEEP_FEATURES in mapping
    kept = {column.casefold() for column in features} if keep else set()
    problems = []
    seen: dict[str, str] = {}
    for name, expression in pairs:
        field = f"derivations[{name!r}]"
        if name == KEEP_FEATURES:
            if expression != KEEP_FEATURES:
                problems.append(Problem(field, f"maps to {expression!r}, and '*' can only map "
                                        "to '*'", "write '*': '*' to keep every feature "
                                        "column, or leave '*' out to keep only derived ones"))
            continue
        if not isinstance(name, str) or not IDENTIFIER.match(name) or name.casefold(
                ).startswith(RESERVED_PREFIX):
            problems.append(Problem(field, f"{name!r} is not a valid column name",
                                    "use letters, digits and underscores, starting with a "
                                    "letter, e.g. 'views_per_purchase'"))
        elif name.casefold() in kept:
            problems.append(Problem(field, f"{name!r} is a feature column, which '*' keeps",
                                    "give the derived column another name, or leave '*' out "
                                    "to replace the feature columns"))
        elif name.casefold() in seen:
            problems.append(Problem(field, f"{name!r} differs from {seen[name.casefold()]!r} "
                                    "only in case, and Spark resolves names without case",
                                    "give the derived columns names that differ in letters"))
        else:
            seen[name.casefold()] = name
        if not isinstance(expression, str) or not expression.strip():
            problems.append(Problem(field, f"{expression!r} is not an expression",
                                    "write a Spark SQL expression over the left and feature "
                                    "columns, e.g. 'a / nullif(b, 0)'"))
    return pairs, problems


def _mapping_of(given: object) -> Mapping[Any, Any] | None:
    """Return ``given`` as a mapping, or None if it is none.

    The (key, value) pairs a definition stores a mapping as count as one, so that
    ``dataclasses.replace`` of a definition takes its own fields back.
    """
    if isinstance(given, Mapping):
        return given
    if isinstance(given, tuple) and all(isinstance(pair, tuple) and len(pair) == 2
                                        for pair in given):
        return dict(given)
    return None
