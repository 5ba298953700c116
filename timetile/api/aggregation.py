"""Aggregations: an op over a column, for one or more windows (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from timetile.api.errors import DefinitionError, one_of
from timetile.api.windows import Window
from timetile.core.aggregators import OPS

#: The ops that take ``k``; those that take ``percentiles``.
_PARAM_OPS = {
    name: tuple(op for op, spec in OPS.items() if name in spec.params)
    for name in ("k", "percentiles")
}


@dataclass(frozen=True)
class Aggregation:
    """An op over one column, computed for each of ``windows``.

    Args:
        column: the input column; its nulls are ignored.
        op: one of ``count sum avg min max first last first_k last_k top_k bottom_k variance
            stddev skew kurtosis unique_count approx_unique_count approx_percentile histogram``.
        windows: window strings (``"7d"``) or :class:`Window` objects; none means lifetime.
        k: how many values ``first_k``, ``last_k``, ``top_k`` and ``bottom_k`` keep.
        percentiles: the ranks in [0, 1] that ``approx_percentile`` returns, in order.

    >>> [window.name for window in Aggregation("duration", "sum", windows=["1h", "7d"]).windows]
    ['1h', '7d']
    >>> Aggregation("listing_id", "last_k", k=5).column_names("user_views")
    ['user_views_listing_id_last_k']

    """

    column: str
    op: str
    windows: Sequence[str | Window] | None = None
    k: int | None = None
    percentiles: Sequence[float] | None = None

    def __post_init__(self) -> None:
        subject = f"Aggregation({self.column!r}, {self.op!r})"
        if not isinstance(self.column, str) or not self.column:
            raise DefinitionError.single(subject, "column", "is empty", "name an input column")
        if self.op not in OPS:
            raise DefinitionError.single(
                subject, "op", f"{self.op!r} is not an op", one_of(str(self.op), OPS)
            )
        self._check_params(subject)
        windows = None if self.windows is None else self._parse_windows(subject)
        object.__setattr__(self, "windows", windows)
        if self.percentiles is not None:
            object.__setattr__(self, "percentiles", tuple(float(p) for p in self.percentiles))

    def _check_params(self, subject: str) -> None:
        spec = OPS[self.op]
        for name, ops in _PARAM_OPS.items():
            value = getattr(self, name)
            if name in spec.params and value is None:
                example = "k=5" if name == "k" else "percentiles=[0.5, 0.95]"
                raise DefinitionError.single(subject, name, f"{self.op} needs {name}",
                                             f"give {example}")
            if name not in spec.params and value is not None:
                raise DefinitionError.single(subject, name, f"{self.op} takes no {name}",
                                             f"drop {name}; only {', '.join(ops)} take it")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int)
                                   or self.k < 1):
            raise DefinitionError.single(subject, "k", f"{self.k!r} is not a positive int",
                                         "give k >= 1")
        if self.percentiles is not None:
            bad = [p for p in self.percentiles
                   if not isinstance(p, (int, float)) or not 0 <= p <= 1]
            if bad or isinstance(self.percentiles, str) or not list(self.percentiles):
                raise DefinitionError.single(
                    subject, "percentiles", f"{self.percentiles!r} are not ranks in [0, 1]",
                    "give a non-empty list such as [0.5, 0.95]",
                )

    def _parse_windows(self, subject: str) -> tuple[Window, ...]:
        if isinstance(self.windows, (str, Window)):
            raise DefinitionError.single(subject, "windows", "is a single window, not a list",
                                         f"write windows=[{self.windows!r}]")
        assert self.windows is not None
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

    @property
    def window_list(self) -> tuple[Window | None, ...]:
        """The windows, with None standing for the lifetime window."""
        return (None,) if self.windows is None else tuple(self.windows)  # type: ignore[arg-type]

    def column_names(self, group_by: str, prefix: str | None = None) -> list[str]:
        """Output column names, one per window: ``{prefix_}{group_by}_{column}_{op}_{window}``.

        A lifetime aggregation drops the ``_{window}`` suffix.
        """
        stem = f"{prefix}_{group_by}" if prefix else group_by
        base = f"{stem}_{self.column}_{self.op}"
        return [base if window is None else f"{base}_{window.name}"
                for window in self.window_list]
