"""An interval join's condition: its time bounds, its one-input filters, and its evaluation.

The condition is SQL over two inputs, ``l`` (left) and ``r`` (right), parsed with sqlglot
(Spark's dialect). Seed 004 (the stream-to-stream join) fixes what is accepted:

- The condition is a conjunction: an ``OR`` anywhere is refused, even when each branch is
  bounded.
- Every conjunct comparing a time field of one input with one of the other, offset by a
  constant (``r.t BETWEEN l.t - 1 AND l.t + INTERVAL '1' HOUR``, ``l.t = r.t``), gives time
  bounds, each put in the form ``a >= b - c`` (:class:`TimeBound`); of several bounds of one
  pair of fields, the lowest constant is kept.
- Each input needs a bound on one of its fields (``a`` of a bound on that input, ``b`` on the
  other): otherwise its rows would wait for ever, and the condition is refused, naming the
  conjunct that could have bounded it (a bound that is not constant, as the seed's
  ``o.time + o.delivery_deadline``, or a comparison with a column that is not a time field).
- A conjunct on one input alone is that input's filter, applied before a row is buffered.
- The whole condition is evaluated on each candidate pair, with SQL's rule that a null
  comparison is not true.

Times are integers (epoch milliseconds); ``INTERVAL 'n' UNIT`` is ``n`` units of them, and a
bare integer offset is milliseconds. Every refusal is a :class:`ConditionError` that names
the conjunct and the fix, raised when the condition is built: before any job.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from timetile.core.timeutil import DAY_MS, HOUR_MS, MINUTE_MS

#: The aliases of the two inputs in a condition.
LEFT, RIGHT = "l", "r"
#: A field of one input: (alias, column).
Field = tuple[str, str]
#: A row of one input: column → value.
Row = Mapping[str, Any]
#: The condition evaluated on a pair: true, false, or None (null).
Predicate = Callable[[Row, Row], Any]

_UNIT_MS = {"MILLISECOND": 1, "SECOND": 1_000, "MINUTE": MINUTE_MS, "HOUR": HOUR_MS,
            "DAY": DAY_MS, "WEEK": 7 * DAY_MS}
_COMPARISONS: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.GT: operator.gt, exp.GTE: operator.ge,
    exp.LT: operator.lt, exp.LTE: operator.le,
}
_ARITHMETIC: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.Add: operator.add, exp.Sub: operator.sub, exp.Mul: operator.mul,
    exp.Div: operator.truediv,
}
_SUPPORTED = ("comparisons (=, <>, <, <=, >, >=), BETWEEN, IN, IS [NOT] NULL, NOT, AND, "
              "+ - * /, columns l.<name> and r.<name>, numbers, strings and INTERVAL 'n' UNIT")


class ConditionError(ValueError):
    """A condition that cannot be run: ``message`` names the clause, ``fix`` what to do."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message}. Fix: {fix}")
        self.message, self.fix = message, fix


@dataclass(frozen=True)
class TimeBound:
    """``later >= earlier - postpone``, with ``later`` and ``earlier`` on different inputs.

    When the watermark of ``earlier`` reaches ``w``, no row of ``later``'s input with
    ``later < w - postpone`` can match a row still to come: it leaves the buffer (seed 004).
    """

    later: Field
    earlier: Field
    postpone: int


@dataclass(frozen=True)
class JoinCondition:
    """A parsed condition: see the module docstring for what is accepted.

    Attributes:
        text: the condition as written.
        sql: the condition in Spark SQL over times in epoch milliseconds (each ``INTERVAL``
            written as its milliseconds), for an engine that evaluates it itself.
        bounds: one :class:`TimeBound` per (later, earlier) pair, the lowest constant.
        filters: per alias, the conjuncts on that input alone (SQL), ANDed.
        matches: the whole condition on a (left row, right row) pair; rows map column →
            value, times in epoch milliseconds.
        exact: every conjunct across the inputs is a non-strict time bound, so the bounds
            are the whole condition on rows that pass their inputs' own conjuncts.

    """

    text: str
    sql: str
    bounds: tuple[TimeBound, ...]
    filters: Mapping[str, tuple[str, ...]]
    matches: Predicate = field(compare=False, repr=False)
    _filter_predicates: Mapping[str, Callable[[Row], bool]] = field(compare=False, repr=False)
    exact: bool = field(default=False, compare=False)

    def joins(self, l_row: Row, r_row: Row) -> bool:
        """Tell whether a pair of rows that each pass :meth:`keeps` satisfies the condition.

        The same answer as :attr:`matches` for such rows, sooner: the time bounds are
        checked first (most pairs a buffer holds fail one), and when the condition is
        :attr:`exact` they are the whole answer. O(bounds), or the predicate's cost.
        """
        for bound in self.bounds:
            later = (l_row if bound.later[0] == LEFT else r_row).get(bound.later[1])
            earlier = (l_row if bound.earlier[0] == LEFT else r_row).get(bound.earlier[1])
            if later is None or earlier is None or later < earlier - bound.postpone:
                return False  # that bound's conjunct is null or false: so is the condition
        return self.exact or self.matches(l_row, r_row)

    def keeps(self, alias: str, row: Row) -> bool:
        """Tell whether a row of input ``alias`` passes that input's own conjuncts."""
        return self._filter_predicates[alias](row)

    def postponements(self, earlier: Field) -> list[tuple[Field, int]]:
        """Return seed 004's ``postponeTimeMap`` entry: the (later, postpone) of ``earlier``."""
        return [(bound.later, bound.postpone) for bound in self.bounds
                if bound.earlier == earlier]

    def settled_after(self, alias: str) -> list[tuple[Field, int]]:
        """Return the (field, c) of each bound ``field >= other - c`` on input ``alias``.

        A row of ``alias`` can match no row of the other input whose ``other`` passed
        ``row[field] + c``: it is settled, joined or not, by the least such time.
        """
        return [(bound.later, bound.postpone) for bound in self.bounds
                if bound.later[0] == alias]

    def widest_bound(self) -> int:
        """Return the largest postpone time: how far behind a watermark a row may still join.

        0 when every bound is tighter (or there is none).
        """
        return max([0, *(bound.postpone for bound in self.bounds)])

    def bounded(self, alias: str) -> list[Field]:
        """Return the fields of input ``alias`` that some bound can move rows out by."""
        return sorted({bound.later for bound in self.bounds if bound.later[0] == alias})


def parse_condition(text: str, time_fields: Mapping[str, Sequence[str]],
                    columns: Mapping[str, Sequence[str]] | None = None) -> JoinCondition:
    """Parse ``text``, with each input's watermarked ``time_fields`` (alias → columns).

    ``columns`` (alias → every column of the input), when known, lets unknown columns be
    refused here; times are always columns of their input.

    >>> c = parse_condition("r.t BETWEEN l.t - 1 AND l.t + 4", {"l": ["t"], "r": ["t"]})
    >>> [(b.later, b.earlier, b.postpone) for b in c.bounds]
    [(('l', 't'), ('r', 't'), 4), (('r', 't'), ('l', 't'), 1)]
    >>> c.matches({"t": 10}, {"t": 14}), c.matches({"t": 10}, {"t": 15})
    (True, False)

    Raises:
        ConditionError: naming the clause and the fix.

    """
    if not isinstance(text, str) or not text.strip():
        raise ConditionError("condition is empty", "write SQL over l.<column> and "
                             "r.<column>, e.g. \"r.ts BETWEEN l.ts AND l.ts + INTERVAL 1 HOUR\"")
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.ParseError as error:
        raise ConditionError(f"condition {text!r} is not SQL ({error.errors[0]['description']})",
                             "write it as a Spark SQL boolean expression") from None
    known = {alias: set(names) for alias, names in (columns or {}).items()}
    times = {(alias, name) for alias, names in time_fields.items() for name in names}
    conjuncts = _conjuncts(tree)
    for conjunct in conjuncts:
        _refuse_unsupported(conjunct, text)
        for column in conjunct.find_all(exp.Column):
            _check_column(column, conjunct, known, columns is not None)
    bounds: dict[tuple[Field, Field], int] = {}
    missed: list[str] = []  # conjuncts across the inputs that bound nothing, for the message
    exact = True  # so far, every conjunct across the inputs is a non-strict bound
    filters: dict[str, list[str]] = {LEFT: [], RIGHT: []}
    for conjunct in conjuncts:
        aliases = {column.table for column in conjunct.find_all(exp.Column)}
        if len(aliases) == 1:
            filters[aliases.pop()].append(conjunct.sql(dialect="spark"))
            continue
        for part in _halves(conjunct):
            found = _bounds_of(part, times)
            exact = exact and found is not None and not isinstance(part, (exp.GT, exp.LT))
            if found is None:
                if any((c.table, c.name) in times for c in part.find_all(exp.Column)):
                    missed.append(part.sql(dialect="spark"))
                continue
            for later, earlier, postpone in found:
                pair = (later, earlier)
                bounds[pair] = min(postpone, bounds.get(pair, postpone))
    for alias, other in ((LEFT, RIGHT), (RIGHT, LEFT)):
        if not any(later[0] == alias for later, _ in bounds):
            hint = (f"; {' and '.join(repr(m) for m in missed)} bound(s) nothing: a bound "
                    "must be a time field of the other input plus or minus a constant"
                    if missed else "")
            raise ConditionError(
                f"condition {text!r} never bounds how long a row of the "
                f"{'left' if alias == LEFT else 'right'} input ({alias}) waits{hint}",
                f"bound a time of {alias} by one of {other}, e.g. {alias}.<time> >= "
                f"{other}.<time> - INTERVAL 1 HOUR (time fields: "
                f"{_listed(time_fields.get(alias))} and {_listed(time_fields.get(other))})")
    predicates = {alias: _compile_filter(clauses) for alias, clauses in filters.items()}
    in_ms = tree.copy().transform(
        lambda node: exp.Literal.number(ms) if isinstance(node, exp.Interval)
        and (ms := _constant_ms(node)) is not None else node)
    return JoinCondition(
        text, in_ms.sql(dialect="spark"), tuple(TimeBound(later, earlier, postpone)
                    for (later, earlier), postpone in sorted(bounds.items())),
        {alias: tuple(clauses) for alias, clauses in filters.items()},
        _compile_pair(tree), predicates, exact)


def _listed(names: Sequence[str] | None) -> str:
    return ", ".join(names or ()) or "none"


def _refuse_unsupported(conjunct: exp.Expr, text: str) -> None:
    for node in conjunct.walk():
        if isinstance(node, exp.Or):
            raise ConditionError(
                f"condition {text!r} has an OR ({node.sql(dialect='spark')}): an interval "
                "join takes a conjunction only (seed 004)", "join once per branch and "
                "union the results, or move the OR into a source's where")
        if isinstance(node, exp.Interval) and _constant_ms(node) is None:
            raise ConditionError(
                f"condition {text!r}: {node.sql(dialect='spark')!r} is no whole number of "
                "milliseconds to weeks", "write INTERVAL 'n' UNIT with a whole n and a unit "
                "of MILLISECOND, SECOND, MINUTE, HOUR, DAY or WEEK")
        if isinstance(node, exp.Between) and node.args.get("symmetric"):
            raise ConditionError(f"condition {text!r} has BETWEEN SYMMETRIC, an OR of two "
                                 "ranges", "write the range low to high, as BETWEEN")
        if not isinstance(node, _NODES) or (isinstance(node, exp.Is)
                                            and not isinstance(node.expression, exp.Null)):
            raise ConditionError(
                f"condition {text!r}: {node.sql(dialect='spark')!r} is not supported in a "
                "join condition", f"use {_SUPPORTED}")


def _check_column(column: exp.Column, conjunct: exp.Expr,
                  known: Mapping[str, set[str]], checked: bool) -> None:
    if column.table not in (LEFT, RIGHT):
        raise ConditionError(
            f"{conjunct.sql(dialect='spark')!r}: {column.sql(dialect='spark')!r} names no "
            "input", "prefix each column with l. (the left input) or r. (the right)")
    if checked and column.name not in known.get(column.table, ()):
        raise ConditionError(
            f"{conjunct.sql(dialect='spark')!r}: {column.table} has no column "
            f"{column.name!r}", f"use one of {sorted(known.get(column.table, ()))}")


#: A linear form: field → coefficient, and a constant in milliseconds.
_Linear = tuple[dict[Field, int], int]


def _linear(node: exp.Expr, times: set[Field]) -> _Linear | None:  # noqa: PLR0911
    """Return ``node`` as a sum of time fields and a constant, or None if it is not one."""
    if isinstance(node, exp.Paren):
        return _linear(node.this, times)
    if isinstance(node, exp.Column):
        key = (node.table, node.name)
        return ({key: 1}, 0) if key in times else None
    constant = _constant_ms(node)
    if constant is not None:
        return {}, constant
    if isinstance(node, exp.Neg):
        inner = _linear(node.this, times)
        return None if inner is None else ({k: -v for k, v in inner[0].items()}, -inner[1])
    if isinstance(node, exp.Add | exp.Sub):
        left, right = _linear(node.this, times), _linear(node.expression, times)
        if left is None or right is None:
            return None
        sign = 1 if isinstance(node, exp.Add) else -1
        terms = dict(left[0])
        for key, coefficient in right[0].items():
            terms[key] = terms.get(key, 0) + sign * coefficient
        return {k: v for k, v in terms.items() if v}, left[1] + sign * right[1]
    return None


def _constant_ms(node: exp.Expr) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.lstrip("-").isdigit():
        return int(node.this)
    if isinstance(node, exp.Interval):
        unit = (node.unit.name if node.unit is not None else "").upper().rstrip("S")
        amount = node.this.name if isinstance(node.this, exp.Literal) else None
        if unit in _UNIT_MS and amount is not None and amount.strip().lstrip("-").isdigit():
            return int(amount) * _UNIT_MS[unit]
    return None


def _unwrapped(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _conjuncts(tree: exp.Expr) -> list[exp.Expr]:
    """Return the ANDed parts of a condition, looking inside parentheses."""
    node = _unwrapped(tree)
    if not isinstance(node, exp.And):
        return [node]
    return [part for side in (node.this, node.expression) for part in _conjuncts(side)]


def _halves(conjunct: exp.Expr) -> list[exp.Expr]:
    """Return ``x BETWEEN a AND b`` as its two comparisons, any other conjunct as itself."""
    if not isinstance(conjunct, exp.Between):
        return [conjunct]
    return [exp.GTE(this=conjunct.this.copy(), expression=conjunct.args["low"].copy()),
            exp.LTE(this=conjunct.this.copy(), expression=conjunct.args["high"].copy())]


def _bounds_of(conjunct: exp.Expr,
               times: set[Field]) -> list[tuple[Field, Field, int]] | None:
    """Return the bounds ``(later, earlier, postpone)`` a comparison gives, or None."""
    directions: dict[type[exp.Expr], tuple[int, ...]] = {
        exp.GTE: (1,), exp.GT: (1,), exp.LTE: (-1,), exp.LT: (-1,), exp.EQ: (1, -1)}
    signs = directions.get(type(conjunct))
    if signs is None:
        return None
    left, right = _linear(conjunct.this, times), _linear(conjunct.expression, times)
    if left is None or right is None:
        return None
    found = []
    for sign in signs:  # sign * (left - right) >= 0, i.e. a - b + k >= 0: a >= b - k
        terms = dict(left[0])
        for key, coefficient in right[0].items():
            terms[key] = terms.get(key, 0) - coefficient
        terms = {k: sign * v for k, v in terms.items() if v}
        constant = sign * (left[1] - right[1])
        later = [k for k, v in terms.items() if v == 1]
        earlier = [k for k, v in terms.items() if v == -1]
        if len(terms) != 2 or len(later) != 1 or len(earlier) != 1 \
                or later[0][0] == earlier[0][0]:
            return None
        found.append((later[0], earlier[0], constant))
    return found


def _value(node: exp.Expr) -> Callable[[Row, Row], Any]:  # noqa: PLR0911
    """Compile an expression into a function of (left row, right row); null propagates."""
    if isinstance(node, exp.Paren):
        return _value(node.this)
    if isinstance(node, exp.Column):
        name, on_left = node.name, node.table == LEFT
        return (lambda l_row, _r: l_row.get(name)) if on_left \
            else (lambda _l, r_row: r_row.get(name))
    constant = _constant_ms(node)
    if constant is not None:
        return lambda _l, _r: constant
    if isinstance(node, exp.Literal):
        literal: Any = node.this if node.is_string else float(node.this)
        return lambda _l, _r: literal
    if isinstance(node, exp.Null):
        return lambda _l, _r: None
    if isinstance(node, exp.Boolean):
        truth = bool(node.this)
        return lambda _l, _r: truth
    if isinstance(node, exp.Neg):
        inner = _value(node.this)
        return lambda l_row, r_row: None if (v := inner(l_row, r_row)) is None else -v
    if type(node) in _ARITHMETIC or type(node) in _COMPARISONS:
        function = {**_ARITHMETIC, **_COMPARISONS}[type(node)]
        first, second = _value(node.this), _value(node.expression)

        def binary(l_row: Row, r_row: Row) -> Any:
            a = first(l_row, r_row)
            if a is None:
                return None
            b = second(l_row, r_row)
            if b is None or (function is operator.truediv and b == 0):
                return None
            return function(a, b)
        return binary
    return _logical(node)


def _logical(node: exp.Expr) -> Callable[[Row, Row], Any]:
    if isinstance(node, exp.And):
        parts = [_value(part) for part in node.flatten()]

        def conjunction(l_row: Row, r_row: Row) -> Any:
            unknown = False  # SQL's AND: false if any part is, else null if any is
            for part in parts:
                value = part(l_row, r_row)
                if value is None:
                    unknown = True
                elif not value:
                    return False
            return None if unknown else True
        return conjunction
    if isinstance(node, exp.Not):
        inner = _value(node.this)
        return lambda l_row, r_row: None if (v := inner(l_row, r_row)) is None else not v
    if isinstance(node, exp.Is):
        inner = _value(node.this)
        return lambda l_row, r_row: inner(l_row, r_row) is None
    if isinstance(node, exp.Between):
        return _value(exp.And(this=exp.GTE(this=node.this, expression=node.args["low"]),
                              expression=exp.LTE(this=node.this, expression=node.args["high"])))
    if isinstance(node, exp.In):
        inner, options = _value(node.this), [_value(option) for option in node.expressions]

        def contained(l_row: Row, r_row: Row) -> Any:
            value = inner(l_row, r_row)
            if value is None:
                return None
            values = [option(l_row, r_row) for option in options]
            return True if value in values else None if None in values else False
        return contained
    raise AssertionError(f"unsupported node {node!r} passed the check")  # pragma: no cover


def _compile_pair(tree: exp.Expr) -> Predicate:
    value = _value(tree)
    return lambda l_row, r_row: value(l_row, r_row) is True


def _compile_filter(clauses: Sequence[str]) -> Callable[[Row], bool]:
    if not clauses:
        return lambda _row: True
    values = [_value(sqlglot.parse_one(clause, read="spark")) for clause in clauses]
    return lambda row: all(value(row, row) is True for value in values)


#: The node types a condition may hold.
_NODES: tuple[type[exp.Expr], ...] = (
    exp.And, exp.Not, exp.Paren, exp.Column, exp.Identifier, exp.Literal, exp.Null,
    exp.Boolean, exp.Neg, exp.Interval, exp.Var, exp.Between, exp.In, exp.Is,
    *_ARITHMETIC, *_COMPARISONS)
