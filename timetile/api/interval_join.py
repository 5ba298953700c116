"""IntervalJoin: two event streams joined within a time bound, as a source (seed 004).

Its rows are both inputs' rows joined on equal keys and the condition, each column renamed
with its input's prefix (``l_``, ``r_`` by default) so both sides' columns survive, plus, for
an outer join, the unmatched rows of the outer side with the other side's columns null, and
``joined_at``: when the row is certain, its time by default. A GroupBy aggregates it as an
:class:`~timetile.api.sources.EventSource`, and another IntervalJoin may take it as an
input (a chain of three streams, whose middle input carries two time fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from timetile.api.errors import DefinitionError
from timetile.api.sources import EventSource
from timetile.core.interval_join import ConditionError, JoinCondition, parse_condition
from timetile.core.interval_join.condition import LEFT, RIGHT
from timetile.core.interval_join.processor import OUTER_SIDES

#: The output column of when each joined row is certain (the default time column).
JOINED_AT = "joined_at"


@dataclass(frozen=True)
class IntervalJoin:
    """Rows of ``left`` and ``right`` with equal ``on`` keys that satisfy ``condition``.

    Args:
        name: names the join in messages and reports.
        left: an :class:`EventSource` or another IntervalJoin.
        right: the same.
        on: the key columns: a name both inputs have, or a (left, right) pair of names.
        condition: Spark SQL over ``l.<column>`` and ``r.<column>`` (the inputs' columns
            before prefixing), a conjunction that bounds each input's time by the other's,
            e.g. ``"r.delivery_time BETWEEN l.order_time AND l.order_time + INTERVAL 1
            HOUR"``. Its rules are in docs/interval_joins.md.
        how: ``inner``, ``left``, ``right`` or ``full``.
        time_column: the joined rows' time: ``joined_at`` (the default), when each row is
            certain (a joined row at the later of its rows' times, a null-padded row once no
            row of the other input can still match it), so a feature never sees a row
            before it could exist; or a time of an input, prefixed, which places a joined
            row at that time, before the other row may have happened (a leak, unless that
            is the intent). Rows where it is null are left out of aggregations and counted.
        prefixes: the prefixes of the left and the right input's columns.
        max_buffered: the most rows the streaming join may buffer for one group of keys
            (:data:`timetile.streaming.interval_join.KEY_GROUPS` groups; None: no limit).

    >>> orders = EventSource("orders", time_column="order_time")
    >>> deliveries = EventSource("deliveries", time_column="delivery_time")
    >>> join = IntervalJoin("delivered", orders, deliveries, on=["order_id"],
    ...     condition="r.delivery_time BETWEEN l.order_time AND l.order_time + INTERVAL 1 HOUR")
    >>> join.time_column, join.time_fields
    ('joined_at', ('l_order_time', 'r_delivery_time'))

    """

    name: str
    left: Any
    right: Any
    on: Sequence[str | tuple[str, str]]
    condition: str
    how: str = "inner"
    time_column: str | None = None
    prefixes: tuple[str, str] = ("l_", "r_")
    max_buffered: int | None = None
    parsed: JoinCondition = field(init=False, compare=False, repr=False)
    key_pairs: tuple[tuple[str, str], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        subject = f"IntervalJoin {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise DefinitionError.single("IntervalJoin", "name", f"{self.name!r} is no name",
                                         "name the join, e.g. name='delivered_orders'")
        for side in ("left", "right"):
            _check_input(subject, side, getattr(self, side))
        object.__setattr__(self, "key_pairs", _pairs(subject, self.on))
        object.__setattr__(self, "on", self.key_pairs)  # a tuple: the join hashes, as sources do
        if self.how not in OUTER_SIDES:
            raise DefinitionError.single(subject, "how", f"{self.how!r} is no join kind",
                                         f"use one of {', '.join(OUTER_SIDES)}")
        prefixes = tuple(self.prefixes) if isinstance(self.prefixes, Sequence) else ()
        if len(prefixes) != 2 or not all(isinstance(p, str) for p in prefixes) \
                or prefixes[0] == prefixes[1]:
            raise DefinitionError.single(subject, "prefixes", f"{self.prefixes!r} are not two "
                                         "different prefixes", "give two strings, e.g. "
                                         "('order_', 'delivery_')")
        object.__setattr__(self, "prefixes", prefixes)
        if self.max_buffered is not None and (isinstance(self.max_buffered, bool) or not
                                              isinstance(self.max_buffered, int)
                                              or self.max_buffered < 1):
            raise DefinitionError.single(subject, "max_buffered", f"{self.max_buffered!r} is "
                                         "not a positive count", "give a number of rows, or "
                                         "None for no limit")
        try:
            parsed = parse_condition(self.condition, self.input_time_fields)
        except ConditionError as error:
            raise DefinitionError.single(subject, "condition", error.message,
                                         error.fix) from None
        object.__setattr__(self, "parsed", parsed)
        if self.time_column is None:
            object.__setattr__(self, "time_column", JOINED_AT)
        elif self.time_column not in (JOINED_AT, *self.time_fields):
            raise DefinitionError.single(
                subject, "time_column", f"{self.time_column!r} is not a time of the join",
                f"name {JOINED_AT!r} (when each row is certain) or one of "
                f"{', '.join(self.time_fields)}")

    @property
    def input_time_fields(self) -> dict[str, tuple[str, ...]]:
        """Per alias (``l``, ``r``), the input's watermarked time columns, unprefixed."""
        return {LEFT: time_fields_of(self.left), RIGHT: time_fields_of(self.right)}

    @property
    def time_fields(self) -> tuple[str, ...]:
        """The output's time columns: the left input's, then the right's, prefixed."""
        fields = self.input_time_fields
        return (*(self.prefixes[0] + name for name in fields[LEFT]),
                *(self.prefixes[1] + name for name in fields[RIGHT]))

    @property
    def label(self) -> str:
        """Name the join as people name it in messages."""
        return f"interval join {self.name!r}"


def is_interval_join(table: object) -> bool:
    """Tell whether a source's table is an :class:`IntervalJoin` (its rows are computed)."""
    return isinstance(table, IntervalJoin)


def time_fields_of(source: object) -> tuple[str, ...]:
    """Return the time columns of an input: an event source's one, a join's output ones."""
    if isinstance(source, IntervalJoin):
        return source.time_fields
    assert isinstance(source, EventSource)
    return (source.time_column,)


def _check_input(subject: str, side: str, source: object) -> None:
    if isinstance(source, IntervalJoin):
        return
    if not isinstance(source, EventSource):
        raise DefinitionError.single(subject, side, f"{source!r} is not an event source",
                                     "give a tt.EventSource or another tt.IntervalJoin")
    if source.period is not None:
        raise DefinitionError.single(subject, f"{side}.period", "joins rows of single "
                                     "events, and this source holds pre-aggregated periods",
                                     "join the raw events, or leave period out")


def _pairs(subject: str, on: object) -> tuple[tuple[str, str], ...]:
    items = [on] if isinstance(on, str) else on if isinstance(on, Sequence) else None
    pairs = []
    for item in items or ():
        if isinstance(item, str) and item:
            pairs.append((item, item))
        elif isinstance(item, tuple) and len(item) == 2 and all(
                isinstance(name, str) and name for name in item):
            pairs.append((item[0], item[1]))
        else:
            items = None
            break
    if not items:
        raise DefinitionError.single(subject, "on", f"{on!r} names no keys",
                                     "give key columns, e.g. on=['order_id'], or (left, "
                                     "right) pairs: on=[('id', 'order_id')]")
    return tuple(pairs)
