"""Aggregations: an op over a column, for one or more windows (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from timetile.api.errors import DefinitionError, one_of
from timetile.api.windows import Window
from timetile.core.aggregators import OPS
from timetile.core.timeutil import format_duration, parse_duration

#: The ops that take ``k``; those that take ``percentiles``; those that take ``half_life``.
_PARAM_OPS = {
    name: tuple(op for op, spec in OPS.items() if name in spec.params)
    for name in ("k", "percentiles", "half_life")
}
#: How the error for a missing parameter shows one.
_PARAM_EXAMPLES = {"k": "k=5", "percentiles": "percentiles=[0.5, 0.95]",
                   "half_life": "half_life='1d'"}


@dataclass(frozen=True)
class Aggregation:
    """An op over one column, computed for each of ``windows``.

    Args:
        column: the input column; its nulls are ignored.
        op: one of ``count sum avg min max first last first_k last_k top_k bottom_k variance
            stddev skew kurtosis unique_count approx_unique_count approx_percentile histogram
            decayed_count decayed_sum decayed_avg``.
        windows: window strings (``"7d"``) or :class:`Window` objects; none means lifetime.
        k: how many values ``first_k``, ``last_k``, ``top_k`` and ``bottom_k`` keep.
        percentiles: the ranks in [0, 1] that ``approx_percentile`` returns, in order.
        buckets: string columns to break the result down by (Chronon's bucketed
            aggregations). Each window then gives, per bucket column, a map from bucket value
            to the op's result over that bucket's rows alone, with one entry per bucket value
            that has a non-null value of ``column`` in the window; rows whose bucket is null
            are left out, and an empty window gives a null map, whatever the op (``count``
            too). Such an aggregation outputs only the bucketed columns
            (``…_{window}_by_{bucket}``), for each window in order, for each bucket in order.
        half_life: the decayed ops' half-life, ``"<n><unit>"`` (unit one of ``s m h d``) or
            milliseconds: at a query time q an event of time ts weighs
            ``2^(−(q − ts)/half_life)`` (:mod:`timetile.core.aggregators.decayed`). Part of
            the output's name, after the op: ``…_decayed_sum_hl1d_30d``, so one column can be
            decayed at several half-lives.

    >>> [window.name for window in Aggregation("duration", "sum", windows=["1h", "7d"]).windows]
    ['1h', '7d']
    >>> Aggregation("listing_id", "last_k", k=5).column_names("user_views")
    ['user_views_listing_id_last_k']
    >>> Aggregation("price", "sum", windows=["1d"], buckets=["category"]).column_names("items")
    ['items_price_sum_1d_by_category']
    >>> Aggregation("amount", "decayed_sum", half_life="1d", windows=["30d"]).column_names("p")
    ['p_amount_decayed_sum_hl1d_30d']

    """

    column: str
    op: str
    windows: Sequence[str | Window] | None = None
    k: int | None = None
    percentiles: Sequence[float] | None = None
    buckets: Sequence[str] | None = None
    half_life: str | int | None = None

    def __post_init__(self) -> None:
        subject = f"Aggregation({self.column!r}, {self.op!r})"
        if not isinstance(self.column, str):
            raise DefinitionError.single(subject, "column", f"{self.column!r} is not a column "
                                         "name", "name an input column, as a string")
        if not self.column:
            raise DefinitionError.single(subject, "column", "is empty", "name an input column")
        if not isinstance(self.op, str) or self.op not in OPS:
            raise DefinitionError.single(
                subject, "op", f"{self.op!r} is not an op", one_of(str(self.op), OPS)
            )
        self._check_params(subject)
        windows = None if self.windows is None else self._parse_windows(subject)
        object.__setattr__(self, "windows", windows)
        if self.buckets is not None:
            object.__setattr__(self, "buckets", self._parse_buckets(subject))

    def _check_params(self, subject: str) -> None:
        spec = OPS[self.op]
        for name, ops in _PARAM_OPS.items():
            value = getattr(self, name)
            if name in spec.params and value is None:
                raise DefinitionError.single(subject, name, f"{self.op} needs {name}",
                                             f"give {_PARAM_EXAMPLES[name]}")
            if name not in spec.params and value is not None:
                raise DefinitionError.single(subject, name, f"{self.op} takes no {name}",
                                             f"drop {name}; only {', '.join(ops)} take it")
        if self.k is not None:
            if isinstance(self.k, bool) or not isinstance(self.k, Integral) or self.k < 1:
                raise DefinitionError.single(subject, "k", f"{self.k!r} is not a positive int",
                                             "give k >= 1")
            object.__setattr__(self, "k", int(self.k))  # numpy's ints too
        if self.percentiles is not None:
            given = self.percentiles
            if isinstance(given, (str, bytes, bytearray, Real)):
                raise DefinitionError.single(
                    subject, "percentiles", f"{given!r} is not a list of ranks",
                    f"write percentiles=[{given!r}]")
            # A list or an array: a set has no order, and checking a generator spends it.
            if not isinstance(given, Sequence) and not hasattr(given, "tolist"):
                raise DefinitionError.single(
                    subject, "percentiles", f"{given!r} is not a list of ranks",
                    "write a list such as [0.5, 0.95]: its order orders the output")
            ranks = tuple(given)
            bad = [p for p in ranks
                   if isinstance(p, bool) or not isinstance(p, Real) or not 0 <= p <= 1]
            if bad or not ranks:
                raise DefinitionError.single(
                    subject, "percentiles", f"{given!r} are not ranks in [0, 1]",
                    "give a non-empty list such as [0.5, 0.95]",
                )
            object.__setattr__(self, "percentiles", tuple(float(p) for p in ranks))
        if self.half_life is not None:
            object.__setattr__(self, "half_life", _half_life_ms(subject, self.half_life))

    def _parse_windows(self, subject: str) -> tuple[Window, ...]:
        if isinstance(self.windows, (str, Window)):
            raise DefinitionError.single(subject, "windows", "is a single window, not a list",
                                         f"write windows=[{self.windows!r}]")
        if not isinstance(self.windows, Sequence) or isinstance(self.windows, (bytes, bytearray)):
            raise DefinitionError.single(subject, "windows", f"{self.windows!r} is not a list "
                                         "of windows", "write windows=['1d', '7d']")
        try:
            parsed = tuple(Window.parse(window) for window in self.windows)
        except DefinitionError as error:
            raise DefinitionError(subject, [
                type(problem)(f"windows.{problem.field}", problem.message, problem.fix)
                for problem in error.problems
            ]) from None
        if not parsed:
            raise DefinitionError.single(subject, "windows", "is empty",
                                         "give at least one window, or None for lifetime")
        names = [window.name for window in parsed]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise DefinitionError.single(subject, "windows", f"repeats {', '.join(duplicates)}",
                                         "list each window once")
        return parsed

    def _parse_buckets(self, subject: str) -> tuple[str, ...]:
        """Check ``buckets``: a non-empty list of distinct column names, none the input column."""
        def fail(field: str, message: str, fix: str) -> DefinitionError:
            return DefinitionError.single(subject, field, message, fix)

        if isinstance(self.buckets, str):
            raise fail("buckets", "is a single column, not a list",
                       f"write buckets=[{self.buckets!r}]")
        if not isinstance(self.buckets, Sequence):  # a set's order would name the outputs
            raise fail("buckets", f"{self.buckets!r} is not a list of columns",
                       "write buckets=['category'], a list: its order orders the outputs")
        buckets = tuple(self.buckets)
        if not buckets:
            raise fail("buckets", "is empty", "give at least one bucket column, or None")
        for index, bucket in enumerate(buckets):
            if not isinstance(bucket, str) or not bucket:
                raise fail(f"buckets[{index}]", f"{bucket!r} is not a column name",
                           "name a string column of the source")
            if bucket == self.column:
                raise fail(f"buckets[{index}]", f"{bucket!r} is the aggregated column",
                           "bucket by another column")
        duplicates = sorted({bucket for bucket in buckets if buckets.count(bucket) > 1})
        if duplicates:
            raise fail("buckets", f"repeats {', '.join(duplicates)}", "list each bucket once")
        return buckets

    @property
    def half_life_ms(self) -> int | None:
        """The half-life in milliseconds, or None for ops without one."""
        assert self.half_life is None or isinstance(self.half_life, int)
        return self.half_life

    @property
    def params(self) -> dict[str, Any]:
        """The op's parameters, as :func:`~timetile.core.aggregators.make_aggregator` takes them.

        >>> Aggregation("v", "last_k", k=3).params, Aggregation("v", "sum").params
        ({'k': 3}, {})
        """
        given = {"k": self.k, "percentiles": self.percentiles, "half_life": self.half_life}
        return {name: given[name] for name in OPS[self.op].params}

    @property
    def op_key(self) -> tuple[Any, ...]:
        """What identifies the op over its column: features that share it share states."""
        return (self.column, self.op, self.k, self.percentiles, self.half_life)

    @property
    def window_list(self) -> tuple[Window | None, ...]:
        """The windows, with None standing for the lifetime window."""
        return (None,) if self.windows is None else tuple(self.windows)  # type: ignore[arg-type]

    @property
    def bucket_list(self) -> tuple[str | None, ...]:
        """The bucket columns, with None standing for "not bucketed"."""
        return (None,) if self.buckets is None else tuple(self.buckets)

    def outputs(self, group_by: str, prefix: str | None = None
                ) -> list[tuple[str, Window | None, str | None]]:
        """Every output as ``(name, window, bucket)``: for each window, for each bucket.

        Names are ``{prefix_}{group_by}_{column}_{op}_{window}``, with ``_by_{bucket}``
        appended when bucketed; a lifetime aggregation (window None) drops the
        ``_{window}`` part; a decayed op's is ``{op}_hl{half_life}``.

        >>> agg = Aggregation("price", "max", windows=["1h", "1d"], buckets=["shop", "kind"])
        >>> for name, window, bucket in agg.outputs("items", prefix="p"):
        ...     print(name, window.name, bucket)
        p_items_price_max_1h_by_shop 1h shop
        p_items_price_max_1h_by_kind 1h kind
        p_items_price_max_1d_by_shop 1d shop
        p_items_price_max_1d_by_kind 1d kind
        """
        stem = f"{prefix}_{group_by}" if prefix else group_by
        base = f"{stem}_{self.column}_{self.op}"
        if self.half_life_ms is not None:
            base += f"_hl{format_duration(self.half_life_ms)}"
        made = []
        for window in self.window_list:
            windowed = base if window is None else f"{base}_{window.name}"
            for bucket in self.bucket_list:
                name = windowed if bucket is None else f"{windowed}_by_{bucket}"
                made.append((name, window, bucket))
        return made

    def column_names(self, group_by: str, prefix: str | None = None) -> list[str]:
        """Output column names, in the order of :meth:`outputs`.

        ``{prefix_}{group_by}_{column}_{op}_{window}``, one per window, or with buckets one
        per (window, bucket) ending in ``_by_{bucket}``. A lifetime aggregation drops the
        ``_{window}`` part.
        """
        return [name for name, _, _ in self.outputs(group_by, prefix)]


def _half_life_ms(subject: str, value: object) -> int:
    """Read a half-life: a positive duration string or number of milliseconds."""
    fix = "write half_life='<n><unit>' with unit one of s, m, h, d (e.g. '1d'), or milliseconds"
    if isinstance(value, bool) or not isinstance(value, (str, Integral)):
        raise DefinitionError.single(subject, "half_life", f"{value!r} is not a duration", fix)
    if isinstance(value, Integral):
        if value <= 0:
            raise DefinitionError.single(subject, "half_life", f"{value} ms is not positive",
                                         "give a positive half-life, such as '1d'")
        return int(value)
    try:
        millis = parse_duration(value, allow_zero=True)
    except ValueError:
        raise DefinitionError.single(subject, "half_life", f"{value!r} is not a duration",
                                     fix) from None
    if millis == 0:
        raise DefinitionError.single(subject, "half_life", f"{value!r} is not positive",
                                     "give a positive half-life, such as '1d'")
    return millis
