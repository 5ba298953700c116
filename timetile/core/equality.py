"""When two feature values agree: the one rule every comparison of timetile's uses.

The consistency check (:mod:`timetile.verify`), the oracle tests and users' own tests compare
a value computed one way with the same value computed another way (online against offline,
an engine path against the naive oracle). Exact ops must match exactly, with NaN equal to
NaN and a float sum allowed its last bits (:func:`same_value`); an ``approx_percentile``
must lie within the rank bounds the oracle gives for its sketch (:func:`percentiles_within`).
Plain Python, no engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def same_value(ours: Any, theirs: Any, rel_tol: float = 1e-9) -> bool:
    """Tell whether two feature values agree.

    Floats agree when equal (±inf included), both NaN, or within ``rel_tol`` relative (and
    absolute, near zero): sums in another order differ in the last bits. Ints must match
    exactly, and an int never equals a float. Lists compare item by item, maps key by key.

    >>> same_value([1.0, float("nan")], [1.0 + 1e-12, float("nan")])
    True
    >>> same_value(1, 1.0), same_value(None, 0), same_value({"a": 1}, {"a": 1})
    (False, False, True)
    """
    if isinstance(ours, float) and isinstance(theirs, float):
        if math.isnan(ours) or math.isnan(theirs):
            return math.isnan(ours) and math.isnan(theirs)
        return ours == theirs or math.isclose(ours, theirs, rel_tol=rel_tol, abs_tol=rel_tol)
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(
            same_value(a, b, rel_tol) for a, b in zip(ours, theirs, strict=True))
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return len(ours) == len(theirs) and all(
            any(same_value(key, other, rel_tol) and same_value(value, theirs[other], rel_tol)
                for other in theirs)
            for key, value in ours.items())
    return type(ours) is type(theirs) and bool(ours == theirs)


def differing_cells(ours: Sequence[Any], theirs: Sequence[Any],
                    columns: Iterable[str]) -> list[tuple[str, Any, Any, Any]]:
    """Return the cells of ``columns`` where two results are not :func:`same_value`.

    Rows are paired in order; each cell comes back as ``(column, our row, our value, their
    value)``.

    >>> differing_cells([{"a": 1.0, "b": 2}], [{"a": 1.0, "b": 3}], ["a", "b"])
    [('b', {'a': 1.0, 'b': 2}, 2, 3)]

    Raises:
        ValueError: the results have different numbers of rows.

    """
    names = list(columns)
    return [(column, mine, mine[column], other[column])
            for mine, other in zip(ours, theirs, strict=True)
            for column in names if not same_value(mine[column], other[column])]


def percentiles_within(answer: Sequence[float] | None, bounds: Sequence[Any] | None) -> bool:
    """Whether an engine's percentiles lie in the oracle's rank bounds.

    The bounds are :func:`timetile.testing.percentile_rank_bounds`'s.

    ``bounds`` is a row's value of that column (a list of ``Row(lo, hi)``); null bounds
    (an empty window) require a null answer. Values compare as Spark orders doubles: NaN is
    above every number and equal to itself.

    >>> from collections import namedtuple
    >>> Bound = namedtuple("Bound", "lo hi")
    >>> percentiles_within([2.0, float("nan")], [Bound(1.0, 3.0), Bound(5.0, float("nan"))])
    True
    >>> percentiles_within([4.0], [Bound(1.0, 3.0)])
    False
    """
    if answer is None or bounds is None:
        return answer is None and bounds is None
    if len(answer) != len(bounds):
        return False
    return all(_spark_le(bound.lo, value) and _spark_le(value, bound.hi)
               for value, bound in zip(answer, bounds, strict=True))


def _spark_le(x: float, y: float) -> bool:
    """``x <= y`` in Spark's order of doubles: NaN above everything, equal to itself."""
    if math.isnan(y):
        return True
    return not math.isnan(x) and x <= y
