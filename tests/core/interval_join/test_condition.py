"""Parsing an interval join's condition: time bounds as seed 004 extracts them, refusals.

Each refusal names the clause and the fix, before any row is read.
"""

from __future__ import annotations

import pytest

from timetile.core.interval_join import ConditionError, TimeBound, parse_condition
from timetile.core.timeutil import DAY_MS, HOUR_MS

TIMES = {"l": ["t"], "r": ["t"]}


def bounds(text: str, times: dict[str, list[str]] = TIMES) -> set[tuple[str, str, int]]:
    return {(f"{b.later[0]}.{b.later[1]}", f"{b.earlier[0]}.{b.earlier[1]}", b.postpone)
            for b in parse_condition(text, times).bounds}


def test_the_seeds_example_gives_its_two_bounds() -> None:
    # i2.time BETWEEN i1.time - 1 AND i1.time + 4: i1 >= i2 - 4 and i2 >= i1 - 1
    assert bounds("r.t BETWEEN l.t - 1 AND l.t + 4") == {("l.t", "r.t", 4), ("r.t", "l.t", 1)}


@pytest.mark.parametrize(("text", "expected"), [
    ("l.t = r.t", {("l.t", "r.t", 0), ("r.t", "l.t", 0)}),
    ("r.t >= l.t AND r.t <= l.t + INTERVAL '1' HOUR",
     {("r.t", "l.t", 0), ("l.t", "r.t", HOUR_MS)}),
    ("l.t + INTERVAL 2 DAYS > r.t AND r.t > l.t", {("l.t", "r.t", 2 * DAY_MS),
                                                  ("r.t", "l.t", 0)}),
    ("(r.t - l.t) <= 5 AND l.t - 1 <= r.t", {("l.t", "r.t", 5), ("r.t", "l.t", 1)}),
    # parentheses around a conjunct, a conjunction or a BETWEEN
    ("(r.t BETWEEN l.t AND l.t + 5)", {("l.t", "r.t", 5), ("r.t", "l.t", 0)}),
    ("(r.t >= l.t AND (r.t <= l.t + 5)) AND l.v > 1", {("l.t", "r.t", 5), ("r.t", "l.t", 0)}),
    # the lowest constant of one pair is kept
    ("r.t <= l.t + 9 AND r.t <= l.t + 3 AND r.t >= l.t", {("l.t", "r.t", 3),
                                                          ("r.t", "l.t", 0)}),
])
def test_inequalities_are_put_in_the_form_a_ge_b_minus_c(
        text: str, expected: set[tuple[str, str, int]]) -> None:
    assert bounds(text) == expected


def test_the_three_stream_chain_bounds_only_what_its_condition_names() -> None:
    times = {"l": ["o", "d"], "r": ["t"]}
    parsed = parse_condition("r.t BETWEEN l.d - 1 AND l.d + 4", times)
    assert parsed.bounds == (TimeBound(("l", "d"), ("r", "t"), 4),
                             TimeBound(("r", "t"), ("l", "d"), 1))
    assert parsed.postponements(("l", "o")) == []  # the seed's postponeTimeMap, 0 -> []
    assert parsed.postponements(("l", "d")) == [(("r", "t"), 1)]
    assert parsed.postponements(("r", "t")) == [(("l", "d"), 4)]


def test_one_input_conjuncts_are_that_inputs_filters() -> None:
    parsed = parse_condition("l.v > 10 AND r.name IN ('a', 'b') AND l.t = r.t", TIMES)
    assert parsed.filters == {"l": ("l.v > 10",), "r": ("r.name IN ('a', 'b')",)}
    assert parsed.keeps("l", {"v": 11})
    assert not parsed.keeps("l", {"v": 10})
    assert not parsed.keeps("l", {"v": None})  # null is not true
    assert parsed.keeps("r", {"name": "b"})
    assert not parsed.keeps("r", {"name": "c"})


def test_the_whole_condition_follows_sqls_nulls() -> None:
    parsed = parse_condition("l.t = r.t AND NOT l.v = r.v AND r.w IS NULL", TIMES)
    assert parsed.matches({"t": 1, "v": 1}, {"t": 1, "v": 2, "w": None})
    assert not parsed.matches({"t": 1, "v": 1}, {"t": 1, "v": 1, "w": None})
    assert not parsed.matches({"t": 1, "v": None}, {"t": 1, "v": 2, "w": None})
    assert not parsed.matches({"t": None, "v": 1}, {"t": 1, "v": 2, "w": None})
    assert not parsed.matches({"t": 1, "v": 1}, {"t": 1, "v": 2, "w": 3})


@pytest.mark.parametrize(("text", "message"), [
    ("l.t = r.t OR l.t = r.t + 1", r"has an OR \(l.t = r.t OR l.t = r.t \+ 1\).*Fix: join "
                                   "once per branch"),
    # the seed's Q&A: a bound that is not constant leaves the orders' rows unbounded
    ("r.t BETWEEN l.t AND l.t + l.deadline + INTERVAL '1' DAY",
     r"never bounds how long a row of the left input \(l\) waits; \"r.t <= l.t \+ "
     r"l.deadline.*bound\(s\) nothing.*Fix: bound a time of l"),
    ("r.t >= l.t", r"never bounds how long a row of the left input \(l\) waits\. Fix"),
    ("r.t <= l.t + 5", r"never bounds how long a row of the right input \(r\) waits"),
    ("l.t = r.amount AND r.t >= l.t", r"left input \(l\) waits; 'l.t = r.amount'"),
    ("l.t > 5 AND r.t > 5", "never bounds how long a row of the left input"),
    ("l.t = r.t AND x.v = 1", r"'x.v' names no input. Fix: prefix each column with l."),
    ("l.t = r.t AND l.v LIKE 'a%'", r"is not supported in a join condition. Fix: use"),
    ("l.t = r.t AND l.flag IS TRUE", r"'l.flag IS TRUE' is not supported"),
    ("l.t = r.t AND", "is not SQL"),
    ("l.t = r.t AND r.t < l.t + INTERVAL 1 MONTH", r"INTERVAL '1' MONTH\" is no whole number "
                                                  r"of milliseconds to weeks. Fix: write"),
    ("l.t = r.t AND r.t < l.t + INTERVAL '1.5' HOURS", "is no whole number of milliseconds"),
    ("r.t BETWEEN SYMMETRIC l.t AND l.t + 5", "has BETWEEN SYMMETRIC"),
    ("", "condition is empty"),
])
def test_bad_conditions_are_refused_naming_the_clause(text: str, message: str) -> None:
    with pytest.raises(ConditionError, match=message):
        parse_condition(text, TIMES)


def test_unknown_columns_are_refused_when_the_columns_are_known() -> None:
    with pytest.raises(ConditionError, match=r"l has no column 'amount'. Fix: use one of "
                                             r"\['k', 't'\]"):
        parse_condition("l.t = r.t AND l.amount > 1", TIMES,
                        columns={"l": ["k", "t"], "r": ["k", "t"]})


@pytest.mark.parametrize(("text", "exact"), [
    ("r.t BETWEEN l.t AND l.t + INTERVAL 1 HOUR", True),
    ("l.t = r.t AND l.v > 2", True),  # a one-input conjunct is the input's own filter
    ("r.t >= l.t AND r.t < l.t + 10", False),  # strict: the bound is not the whole conjunct
    ("l.t BETWEEN r.t - 4 AND r.t + 4 AND l.v + r.v <> 7", False),
])
def test_joins_answers_as_matches_sooner_when_the_bounds_are_the_condition(
        text: str, exact: bool) -> None:
    parsed = parse_condition(text, TIMES)
    assert parsed.exact is exact
    pairs = [({"t": lt, "v": lv}, {"t": rt, "v": rv}) for lt in (0, 5, None)
             for rt in (-4, 0, 3, 4, 9, 10, 11, None) for lv in (3, 4) for rv in (3, 4, None)]
    for left, right in pairs:
        if parsed.keeps("l", left) and parsed.keeps("r", right):
            assert parsed.joins(left, right) == parsed.matches(left, right), (left, right)
