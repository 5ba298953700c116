"""The value order and value identity that every ordering or distinct op shares (DESIGN §2).

One order, Spark SQL's, for all column types:

- numbers in numeric order, with NaN *greater* than every number, +inf included;
- ``-0.0`` equals ``0.0``, and all NaNs are one value;
- strings by code point, which is the order of Spark's UTF-8 byte comparison;
- ``False < True``.

Results carry normalized values: ``0.0`` for either zero and the one NaN object
:data:`math.nan`, so equal values are the same dict key and results do not depend on how the
input was cut into batches.

>>> sorted([2.0, math.nan, -math.inf, 1.0], key=order_key)
[-inf, 1.0, 2.0, nan]
>>> canonical(-0.0), canonical(float("nan")) is math.nan
(0.0, True)
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

from timetile.core.aggregators.base import Times, Values
from timetile.core.aggregators.codec import Scalar
from timetile.core.types import ValueType


def canonical(value: Scalar) -> Scalar:
    """Normalize ``value``: any NaN becomes :data:`math.nan`, ``-0.0`` becomes ``0.0``. O(1)."""
    if isinstance(value, float):
        return canonical_float(value)
    return value


def canonical_float(value: float) -> float:
    """:func:`canonical` of a float, typed as one. O(1)."""
    if math.isnan(value):
        return math.nan
    return value + 0.0  # -0.0 + 0.0 == +0.0 under round-to-nearest


def order_key(value: Scalar) -> tuple[bool, Scalar]:
    """Return a sort key that realizes the value order: NaN last, ``-0.0 == 0.0``. O(1)."""
    if isinstance(value, float) and math.isnan(value):
        return (True, 0.0)
    return (False, value)


def as_values(values: Values, value_type: ValueType) -> Values:
    """Return ``values`` as an array of the column's dtype (no copy when it already is one)."""
    return np.asarray(values, dtype=value_type.numpy_dtype)


def check_aligned(values: Values, times: Times) -> None:
    """Raise ValueError unless ``values`` and ``times`` have the same length."""
    if len(values) != len(times):
        raise ValueError(f"{len(values)} values but {len(times)} times")


def normalized(values: Values) -> Values:
    """Return ``values`` with ``-0.0`` turned into ``0.0`` (a new array for floats). O(n).

    NaN payloads are left alone: numpy compares and sorts every NaN alike.
    """
    if values.dtype.kind == "f":
        return values + 0.0
    return values


def canonical_array(values: Values) -> Values:
    """Return ``values`` as :func:`canonical` gives each one (a new array for floats). O(n).

    For vectorized paths whose results stay in arrays: ``-0.0`` becomes ``0.0`` and every
    NaN, whatever its sign bit and payload, has the bits of :data:`math.nan`. Arrays of
    other dtypes (object included) are returned as they are, not copied.

    >>> [math.copysign(1.0, value) for value in canonical_array(np.array([-0.0, -math.nan]))]
    [1.0, 1.0]
    """
    if values.dtype.kind != "f":
        return values
    out = values + 0.0
    out[np.isnan(out)] = math.nan
    return out


def to_scalars(values: Values) -> list[Scalar]:
    """Return the normalized values as Python scalars (see :func:`canonical`). O(n)."""
    items: list[Any] = normalized(values).tolist()
    if values.dtype.kind == "f":
        return [math.nan if math.isnan(item) else item for item in items]
    return items


def extreme(values: Values, *, largest: bool) -> Scalar:
    """Return the largest (or smallest) value of a non-empty array. O(n), vectorized.

    >>> values = np.array([1.0, math.nan])
    >>> extreme(values, largest=True), extreme(values, largest=False)
    (nan, 1.0)
    """
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if largest and nan.any():
            return math.nan
        if not largest and nan.all():
            return math.nan
        found = values[~nan].max() if largest else values[~nan].min()
        return canonical(float(found))
    if values.dtype.kind == "O":  # strings: Python's comparison is by code point
        strings: list[str] = values.tolist()
        return max(strings) if largest else min(strings)
    found_item: Scalar = (values.max() if largest else values.min()).item()
    return found_item


@numba.njit(cache=True)
def value_above(a: float, b: float) -> bool:
    """Tell whether ``a`` comes after ``b`` in the value order: NaN above every number.

    Compiled, for the kernels that keep a window's extreme (the sweep's ``min``/``max``);
    :func:`order_key` is the same order for Python values. O(1).

    >>> value_above(math.nan, math.inf), value_above(1.0, math.nan), value_above(2.0, 1.0)
    (True, False, True)
    """
    if np.isnan(a):
        return not np.isnan(b)
    if np.isnan(b):
        return False
    return a > b


def sorted_order(values: Values, times: Times | None = None) -> Values:
    """Return indices that sort ``values`` ascending, by ``times`` first if given.

    Stable, O(n log n), vectorized (numpy sorts NaN last; ``-0.0`` is normalized first).
    """
    keys = normalized(values)
    if times is None:
        return np.argsort(keys, kind="stable")
    return np.lexsort((keys, times))
