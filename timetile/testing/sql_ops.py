"""The SQL pieces of the naive oracle: each op's aggregate, each window's interval.

:mod:`timetile.testing.oracle` assembles them into the plan of seed 000. Plain Spark SQL
only, no UDFs: the oracle stays independent of the engine it checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from timetile.api import Window
from timetile.core.windows import WindowKind

# Internal column names; a left column must not use the ``_tt_`` prefix.
_QUERY_TIME = "_tt_q"  # the query's time, as in the left rows
_AT = "_tt_at"  # the query's as-of time: q, floored to the day (SNAPSHOT) and the period
_EVENT_TIME = "_tt_t"
_FINEST = -38  # the exponent of the smallest step of Spark's widest decimal


def _query_key(index: int) -> str:
    return f"_tt_qk{index}"


def _event_key(index: int) -> str:
    return f"_tt_ek{index}"


def _value(index: int) -> str:
    return f"_tt_v{index}"


def _partial(index: int) -> str:
    return f"_tt_a{index}"


@dataclass(frozen=True)
class SqlOp:
    """How the oracle computes one op: a SQL aggregate, then a SQL expression finishing it.

    Attributes:
        aggregate: an aggregate over ``{v}`` (the value), ``{t}`` (the event time), ``{at}``
            (the query's as-of time) and ``{h}`` (the half-life in milliseconds). The plan
            appends ``FILTER (WHERE <window> AND {v} IS NOT NULL)``, so the aggregate sees
            exactly the window's non-null values, possibly none.
        finish: an expression over ``{a}`` (the aggregate's result), ``{k}``, ``{ps}``
            (the percentiles as a comma-separated list of exact decimals) and ``{h}``.
        timed: whether rows without a time are left out (the plan adds
            ``{t} IS NOT NULL`` to the filter), as they are of windowed aggregations.

    """

    aggregate: str
    finish: str = "{a}"
    timed: bool = False


def _non_empty(body: str) -> str:
    """Make a list op's result null on an empty window (collect_list gives ``[]`` there)."""
    return f"IF(size({{a}}) = 0, NULL, {body})"


def _without_nan(finish: str) -> str:
    """Make a finish over a list of doubles see only its numbers (NaNs removed)."""
    return finish.replace("{a}", "filter({a}, x -> NOT isnan(x))")


_PAIR = "named_struct('t', {t}, 'v', {v})"  # ordered by time, ties by value (NaN largest)


def _decayed(value: str, age: str) -> str:
    """Weigh ``value`` by ``2^(−age/h)``, in SQL; NaN and ±inf stay as they are.

    ``inf · 0`` would be NaN where the weight underflows: kept, a sum of them follows
    ``sum``'s rules.
    """
    return (f"IF(isnan({value}) OR abs({value}) = double('inf'), {value}, "
            f"{value} * pow(2D, -({age}) / {{h}}))")


_DOUBLE = "CAST({v} AS DOUBLE)"
#: The weighted mean of a list of (t, v), its weights relative to its newest time: the
#: decayed_avg's definition written directly, so that it holds where every weight at the
#: query time underflows.
_NEWEST = "array_max(transform({a}, x -> x.t))"
_DECAYED_AVG = (
    f"aggregate({{a}}, named_struct('s', 0D, 'c', 0D), (acc, p) -> named_struct("
    f"'s', acc.s + {_decayed('p.v', f'{_NEWEST} - p.t')}, "
    f"'c', acc.c + pow(2D, -({_NEWEST} - p.t) / {{h}})), acc -> acc.s / acc.c)")

#: Each op of DESIGN §2 as Spark SQL (STYLE §9). Spark orders NaN above every double, which
#: is the contract's order for min, max, first, last and the k-ops; ``count(DISTINCT)``,
#: ``array_distinct`` and ``<=>`` treat all NaNs as one value and -0.0 as 0.0.
SQL_OPS: Mapping[str, SqlOp] = {
    "count": SqlOp("count({v})", "coalesce({a}, 0)"),
    "sum": SqlOp("sum({v})"),
    "avg": SqlOp("avg({v})"),
    "min": SqlOp("min({v})"),
    "max": SqlOp("max({v})"),
    "first": SqlOp(f"min({_PAIR})", "{a}.v"),
    "last": SqlOp(f"max({_PAIR})", "{a}.v"),
    "first_k": SqlOp(f"collect_list({_PAIR})",
                     _non_empty("transform(slice(sort_array({a}, true), 1, {k}), p -> p.v)")),
    "last_k": SqlOp(f"collect_list({_PAIR})",
                    _non_empty("transform(slice(sort_array({a}, false), 1, {k}), p -> p.v)")),
    "top_k": SqlOp("collect_list({v})", _non_empty("slice(sort_array({a}, false), 1, {k})")),
    "bottom_k": SqlOp("collect_list({v})", _non_empty("slice(sort_array({a}, true), 1, {k})")),
    "variance": SqlOp("var_samp({v})"),
    "stddev": SqlOp("stddev_samp({v})"),
    "skew": SqlOp("skewness({v})"),
    "kurtosis": SqlOp("kurtosis({v})"),
    "unique_count": SqlOp("count(DISTINCT {v})", "coalesce({a}, 0)"),
    # The truth: engine tests check the sketch's estimate against its error bound. HLL
    # sketches (DataSketches, and Spark's hll_sketch_agg) skip the empty string.
    "approx_unique_count": SqlOp("count(DISTINCT IF(CAST({v} AS STRING) = '', NULL, {v}))",
                                 "coalesce({a}, 0)"),
    # value -> how many times it occurs; array_distinct and <=> merge NaNs and ±0.0 as
    # count(DISTINCT) does, so size(histogram) = unique_count.
    "histogram": SqlOp("collect_list({v})", _non_empty(
        "map_from_entries(transform(array_distinct({a}), "
        "x -> struct(x, CAST(size(filter({a}, y -> y <=> x)) AS BIGINT))))")),
    # The exact nearest-rank percentile (percentile_disc): the ceil(p·n)-th smallest value,
    # the smallest for p = 0, in exact decimal arithmetic. NaNs are skipped, as KLL sketches
    # (DataSketches, and Spark's kll_sketch_agg_double) skip them.
    "approx_percentile": SqlOp("collect_list(CAST({v} AS DOUBLE))", _without_nan(_non_empty(
        "transform(array({ps}), p -> element_at(sort_array({a}), "
        "CAST(greatest(1, ceil(p * size({a}))) AS INT)))"))),
    # Σ 2^(−(at − t)/h), Σ v · 2^(−(at − t)/h) in doubles, rounded after every addition; a
    # row without a time (an entity row) has no age, and is left out
    "decayed_count": SqlOp("sum(pow(2D, -({at} - {t}) / {h}))", "coalesce({a}, 0D)", True),
    "decayed_sum": SqlOp(f"sum({_decayed(_DOUBLE, '{at} - {t}')})", timed=True),
    "decayed_avg": SqlOp(f"collect_list(named_struct('t', {{t}}, 'v', {_DOUBLE}))",
                         _non_empty(_DECAYED_AVG), timed=True),
}


def percentile_bounds_op(epsilon: float) -> SqlOp:
    """``approx_percentile`` as the interval a rank-ε approximation must fall in.

    For the window's n values other than NaN sorted ascending as ``s[1..n]`` and each
    percentile p, the result is ``struct(lo, hi)`` with ``lo = s[clamp(floor((p − ε)·n))]``
    and ``hi = s[clamp(ceil((p + ε)·n) + 1)]``, indices clamped to ``[1, n]``. Any data item
    whose normalized rank is within ε of p lies in ``[lo, hi]`` whichever rank convention
    (inclusive or exclusive) the sketch uses: the bounds are one item generous on each side.
    A percentile finer than about ``1e-27`` loses its last places in Spark's decimal product
    (which keeps 27 there), so its ``hi`` may be that one item less generous.
    """
    eps = _decimal(epsilon)
    at = "element_at(sort_array({a}), CAST(least(size({a}), greatest(1, {i})) AS INT))"
    lo = at.replace("{i}", f"floor((p - {eps}) * size({{a}}))")
    hi = at.replace("{i}", f"ceil((p + {eps}) * size({{a}})) + 1")
    return SqlOp("collect_list(CAST({v} AS DOUBLE))", _without_nan(_non_empty(
        f"transform(array({{ps}}), p -> named_struct('lo', {lo}, 'hi', {hi}))")))


def _decimal(number: float) -> str:
    """Write a float as an SQL decimal literal (``0.3``, never ``3e-01``), exact to 38 places.

    Spark's decimals hold 38 digits: a fraction with more (``1e-40``) is rounded up to 38
    places, which keeps the literal above zero and moves ``p * n`` by less than ``1e-19``
    for any count ``n`` below 2**63 (Spark's own arithmetic on it may round further).

    >>> _decimal(0.3), _decimal(1e-40)
    ('0.3', '0.00000000000000000000000000000000000001')
    """
    exact = Decimal(repr(float(number)))
    places = exact.as_tuple().exponent  # a str for NaN and the infinities
    if isinstance(places, int) and places < _FINEST:
        exact = exact.quantize(Decimal(1).scaleb(_FINEST), rounding=ROUND_CEILING)
    return format(exact, "f")


#: ``[start, end)`` of each window kind as SQL over ``{q}`` (the time the window ends at),
#: ``{length}`` and ``{hop}``; None is an unbounded start. ``x - pmod(x, hop)`` is a true
#: floor, also before the epoch. A bound before the first int64 millisecond is that
#: millisecond (the window starts there): ``try_subtract`` gives null where ``-`` overflows.
_FIRST = "(-9223372036854775807 - 1)"  # a bigint: the literal 2**63 is a decimal
_FLOOR_START = (f"coalesce(try_subtract(try_subtract({{q}}, {{length}}), "
                f"pmod(try_subtract({{q}}, {{length}}), {{hop}})), {_FIRST})")
WINDOW_SQL: Mapping[WindowKind, tuple[str | None, str]] = {
    WindowKind.SLIDING: (f"coalesce(try_subtract({{q}}, {{length}}), {_FIRST})", "{q}"),
    WindowKind.SAWTOOTH: (_FLOOR_START, "{q}"),
    WindowKind.HOPPING: (_FLOOR_START,
                         f"coalesce(try_subtract({{q}}, pmod({{q}}, {{hop}})), {_FIRST})"),
    WindowKind.LIFETIME: (None, "{q}"),
}


def window_interval(window: Window | None, at: str) -> tuple[str | None, str]:
    """Write SQL for a window's ``[start, end)`` at the times in column ``at`` (None: lifetime).

    >>> window_interval(Window(10, hop=4), "q")
    ('coalesce(try_subtract(try_subtract(q, 10), pmod(try_subtract(q, 10), 4)), \
(-9223372036854775807 - 1))', 'q')
    >>> window_interval(None, "q")
    (None, 'q')
    """
    kind = WindowKind.LIFETIME if window is None else window.window_kind
    start, end = WINDOW_SQL[kind]
    fields = {"q": at, "length": window.length_ms if window else None,
              "hop": window.hop_ms if window else None}
    return (None if start is None else start.format(**fields)), end.format(**fields)
