"""One served value against its offline value: decoding, equality, bounds and distances.

Plain Python, run inside the consistency job's Arrow function (:mod:`timetile.verify.
consistency`), one call per (logged row, feature). A served value arrives as the response log
wrote it (:mod:`timetile.online.jsonable`: non-finite floats as ``"NaN"``/``"Infinity"``
strings, map keys as strings); :func:`decode_served` turns it back into the Python value of
the offline column's Spark type, so that :func:`~timetile.core.equality.same_value` compares like
with like. A number served for a double column reads as that float (JSON writers may drop
the ``.0`` of an integral float, so an int ``3`` served for a double is ``3.0``); nothing
else is coerced: a float served where the offline column is an int stays a float, and so
never equals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from pyspark.sql import types as T

from timetile.core.aggregators.sketches import HLL_RSE
from timetile.core.equality import percentiles_within, same_value

_FLOATS = (T.DoubleType, T.FloatType)
_INTS = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

#: How far an ``approx_unique_count`` may be from the exact count: 3 relative standard errors
#: of the HLL sketch (about 99.7% of estimates fall within).
UNIQUE_COUNT_BOUND = 3 * HLL_RSE


class Bound(NamedTuple):
    """One percentile's rank bounds, as :func:`~timetile.core.equality.percentiles_within` reads."""

    lo: float
    hi: float


def decode_served(value: Any, data_type: T.DataType) -> Any:
    """Return a served JSON value as the Python value of the offline ``data_type``.

    >>> decode_served(["NaN", 1], T.ArrayType(T.DoubleType()))
    [nan, 1.0]
    >>> decode_served({"3": 2, "true": 1}, T.MapType(T.LongType(), T.LongType()))
    {3: 2, 'true': 1}
    >>> decode_served(2.5, T.LongType())  # not an int: kept, and so it never matches
    2.5
    """
    if isinstance(data_type, _FLOATS):
        if isinstance(value, str):
            return _NON_FINITE.get(value, value)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if number else value
    if isinstance(data_type, T.ArrayType) and isinstance(value, list):
        return [decode_served(item, data_type.elementType) for item in value]
    if isinstance(data_type, T.MapType) and isinstance(value, dict):
        return {_decode_key(key, data_type.keyType): decode_served(item, data_type.valueType)
                for key, item in value.items()}
    return value


def _decode_key(key: str, data_type: T.DataType) -> Any:
    """Read a JSON object key back as the map's key type; kept as text when it cannot be read."""
    try:
        if isinstance(data_type, _INTS):
            return int(key)
        if isinstance(data_type, _FLOATS):
            return _NON_FINITE[key] if key in _NON_FINITE else float(key)
    except ValueError:
        return key
    if isinstance(data_type, T.BooleanType) and key in ("true", "false"):
        return key == "true"
    return key


def offline_value(value: Any, data_type: T.DataType) -> Any:
    """Return a value of Arrow's ``to_pylist`` as plain Python: maps as dicts.

    >>> offline_value([("a", [1.0])], T.MapType(T.StringType(), T.ArrayType(T.DoubleType())))
    {'a': [1.0]}
    """
    if value is None:
        return None
    if isinstance(data_type, T.MapType):
        return {key: offline_value(item, data_type.valueType) for key, item in value}
    if isinstance(data_type, T.ArrayType):
        return [offline_value(item, data_type.elementType) for item in value]
    return value


def is_number(data_type: T.DataType) -> bool:
    """Whether a feature of this type is a scalar number (SMAPE and differences apply)."""
    return isinstance(data_type, (*_FLOATS, *_INTS))


def is_list(data_type: T.DataType) -> bool:
    """Whether a feature of this type is a list (the edit distance applies)."""
    return isinstance(data_type, T.ArrayType)


def smape(served: float, offline: float) -> float:
    """Symmetric absolute percentage error as a fraction: ``|s − o| / ((|s| + |o|) / 2)``.

    In ``[0, 2]``: 0 when equal (both zero, equal infinities and both NaN included), 2 at
    most, which is also what a NaN or an infinity against anything else gets.

    Numbers so small or so large that the sum would underflow or overflow are scaled by the
    larger magnitude first.

    >>> smape(110.0, 100.0), smape(0.0, 0.0), smape(float("nan"), 1.0), smape(-1.0, 1.0)
    (0.09523809523809523, 0.0, 2.0, 2.0)
    >>> smape(5e-324, 0.0), smape(1e308, -1e308), round(smape(1.7e308, 1.6e308), 4)
    (2.0, 2.0, 0.0606)
    """
    if served == offline or (math.isnan(served) and math.isnan(offline)):
        return 0.0
    if not (math.isfinite(served) and math.isfinite(offline)):
        return 2.0
    if not 1e-300 < abs(served) + abs(offline) < math.inf:
        scale = max(abs(served), abs(offline))  # > 0: they differ
        served, offline = served / scale, offline / scale
    return min(2.0, abs(served - offline) / ((abs(served) + abs(offline)) / 2))


def difference(served: float, offline: float) -> float | None:
    """Return ``served − offline``, or None when it is not a finite number (a NaN, an infinity).

    >>> difference(3, 1.5), difference(float("inf"), 1.0)
    (1.5, None)
    """
    if served == offline:
        return 0.0
    result = float(served) - float(offline)
    return result if math.isfinite(result) else None


def edit_distance(served: Sequence[Any], offline: Sequence[Any]) -> int:
    """Levenshtein distance between two lists, items equal as :func:`same_value` says.

    O(len(served) × len(offline)) time, O(len(offline)) memory (Wagner–Fischer).

    >>> edit_distance([1, 2, 3], [1, 3]), edit_distance([], ["a"]), edit_distance([1.0], [1.0])
    (1, 1, 0)
    """
    previous = list(range(len(offline) + 1))
    for row, item in enumerate(served, start=1):
        current = [row]
        for column, other in enumerate(offline, start=1):
            current.append(min(previous[column] + 1, current[column - 1] + 1,
                               previous[column - 1] + (not same_value(item, other))))
        previous = current
    return previous[-1]


def within_unique_count(served: Any, exact: Any) -> bool:
    """Whether an ``approx_unique_count`` lies within :data:`UNIQUE_COUNT_BOUND` of exact.

    Relative to the exact count, so an exact 0 demands 0. Bucketed: key by key, same keys.

    >>> within_unique_count(1010, 1000), within_unique_count(1100, 1000)
    (True, False)
    """
    if isinstance(exact, Mapping):
        return _per_bucket(served, exact, within_unique_count)
    if served is None or exact is None:
        return served is None and exact is None
    if isinstance(served, bool) or not isinstance(served, (int, float)):
        return False
    return bool(abs(served - exact) <= UNIQUE_COUNT_BOUND * abs(exact))


def within_percentiles(served: Any, bounds: Any) -> bool:
    """Whether ``approx_percentile`` answers lie within the oracle's rank bounds.

    ``bounds`` as Arrow gives :func:`~timetile.testing.percentile_rank_bounds`' column:
    a list of ``{"lo", "hi"}`` per percentile (a map of them per bucket when bucketed).

    >>> within_percentiles([2.0], [{"lo": 1.0, "hi": 3.0}]), within_percentiles(None, None)
    (True, True)
    """
    if isinstance(bounds, Mapping):
        return _per_bucket(served, bounds, within_percentiles)
    if bounds is not None:
        bounds = [Bound(item["lo"], item["hi"]) for item in bounds]
    if served is not None and not (isinstance(served, list) and all(
            isinstance(item, float) for item in served)):
        return False
    return bool(percentiles_within(served, bounds))


def _per_bucket(served: Any, truth: Mapping[Any, Any],
                check: Callable[[Any, Any], bool]) -> bool:
    """Apply ``check`` per bucket; served map keys are text, the oracle's are the column's."""
    if not isinstance(served, Mapping):
        return False
    expected = {bucket_key(key): value for key, value in truth.items()}
    answered = {bucket_key(key): value for key, value in served.items()}
    return answered.keys() == expected.keys() and all(
        check(answered[key], value) for key, value in expected.items())


def bucket_key(key: Any) -> str:
    """Write a map key as text, the way :mod:`timetile.online.jsonable` writes it.

    >>> bucket_key(True), bucket_key(3), bucket_key("a")
    ('true', '3', 'a')
    """
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)
