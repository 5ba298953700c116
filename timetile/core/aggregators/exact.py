"""Exact sums of int64 and float64 arrays as Python integers, vectorized.

Every finite double is an integer multiple of ``2**-1074``, so a sum of doubles is exactly an
integer count of a fixed unit. Keeping that integer (instead of a rounded running double) makes
``sum`` and ``avg`` exactly invertible, associative and independent of how the input is cut:
``retract`` subtracts precisely what ``update`` added, and the result is rounded once, correctly,
at the end (``math.fsum``'s promise, kept across merges).

The cost is numpy passes plus one Python big-integer step per distinct binary exponent in the
batch (at most 2,098, usually a few dozen).

:func:`two_sum` is the error-free sum that double-double arithmetic stands on: the sweep's
prefix sums and every mean of the moment ops.

>>> total = exact_float_sum(np.array([0.1, 0.2, -0.3]))
>>> scaled_to_float(total), 0.1 + 0.2 - 0.3
(2.7755575615628914e-17, 5.551115123125783e-17)
>>> exact_int_sum(np.array([2**63 - 1, 2**63 - 1]))
18446744073709551614
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

#: Exact float sums count units of ``2**-FLOAT_SCALE``: with 53-bit integer mantissas, the
#: smallest subnormal ``2**-1074`` is ``2**52`` units, so every shift below is non-negative.
FLOAT_SCALE = 1126

# frexp exponents run from -1073 (smallest subnormal) to 1024 (largest finite).
_MIN_EXPONENT = -1073
_N_EXPONENTS = 1024 - _MIN_EXPONENT + 1
_HALF_BITS = 26
# Sums of at most 2**25 half-mantissas (each < 2**27) stay below 2**52: exact in float64.
_FLOAT_CHUNK = 2**25
# Arrays up to this long are summed value by value (see exact_float_sum).
_SHORT = 48
# Sums of at most 2**30 int64 halves (each < 2**32 in magnitude) stay below 2**62.
_INT_CHUNK = 2**30


def exact_int_sum(values: npt.NDArray[np.int64]) -> int:
    """Return the exact sum of an int64 array as a Python int (no overflow). O(n), vectorized."""
    total = 0
    for start in range(0, len(values), _INT_CHUNK):
        chunk = values[start : start + _INT_CHUNK].astype(np.int64, copy=False)
        high = np.right_shift(chunk, 32)  # arithmetic shift: in [-2**31, 2**31)
        low = np.bitwise_and(chunk, 0xFFFFFFFF)  # in [0, 2**32)
        total += (int(high.sum()) << 32) + int(low.sum())
    return total


def exact_float_sum(values: npt.NDArray[np.float64]) -> int:
    """Return the exact sum of an array of *finite* doubles, in units of ``2**-FLOAT_SCALE``.

    O(n) numpy work plus O(distinct exponents) big-integer additions; a short array (the
    online fetcher's common case) takes one Python big-integer step per value instead,
    which is the same sum without numpy's fixed cost.
    """
    total = 0
    if len(values) <= _SHORT:
        for value in values.tolist():
            fraction, power = math.frexp(value)
            total += int(fraction * 2.0**53) << (power - _MIN_EXPONENT)
        return total
    for start in range(0, len(values), _FLOAT_CHUNK):
        chunk = values[start : start + _FLOAT_CHUNK]
        mantissa, exponent = np.frexp(chunk)  # x == mantissa * 2**exponent, |mantissa| < 1
        # x == m * 2**(exponent - 53) with m an integer, |m| < 2**53; in units of
        # 2**-FLOAT_SCALE that is m << (exponent - 53 + FLOAT_SCALE) == m << (exponent + 1073).
        m = (mantissa * 2.0**53).astype(np.int64)
        shift = exponent.astype(np.int64) - _MIN_EXPONENT
        sign = np.sign(m)
        magnitude = np.abs(m)
        high = (sign * np.right_shift(magnitude, _HALF_BITS)).astype(np.float64)
        low = (sign * np.bitwise_and(magnitude, (1 << _HALF_BITS) - 1)).astype(np.float64)
        high_sums = np.bincount(shift, weights=high, minlength=_N_EXPONENTS)
        low_sums = np.bincount(shift, weights=low, minlength=_N_EXPONENTS)
        for bit in np.flatnonzero((high_sums != 0) | (low_sums != 0)).tolist():
            part = (int(high_sums[bit]) << _HALF_BITS) + int(low_sums[bit])
            total += part << bit
    return total


def scaled_to_float(total: int) -> float:
    """Round ``total * 2**-FLOAT_SCALE`` correctly to a double; ±inf past the double range.

    O(size of ``total``): Python's integer true division rounds correctly, subnormals included.
    """
    try:
        return total / (1 << FLOAT_SCALE)
    except OverflowError:
        return math.inf if total > 0 else -math.inf


@numba.njit(cache=True)
def two_sum(a: float, b: float) -> tuple[float, float]:
    """Return ``a + b`` rounded, and its rounding error, exactly (Knuth's TwoSum).

    Compiled, so numba kernels inline it; from Python it is an ordinary call. It works
    elementwise on arrays of doubles too (:mod:`timetile.core.kernels.sweep` uses it so).

    >>> two_sum(1e16, 1.0)
    (1e+16, 1.0)
    """
    total = a + b
    z = total - a
    return total, (a - (total - z)) + (b - z)


#: How many partials :func:`rounded_run_sum` keeps. Shewchuk's partials of finite doubles
#: never overlap, so they number at most about 40 (2,098 exponents over 53-bit mantissas).
MAX_PARTIALS = 64


@numba.njit(cache=True)
def rounded_run_sum(values: npt.NDArray[np.float64], start: int, stop: int,
                    partials: npt.NDArray[np.float64]) -> tuple[float, bool]:
    """Return the finite values of ``values[start:stop]`` summed exactly, then rounded once.

    The rounding is correct (half to even; ``0.0`` for an exact zero); the flag tells whether
    the sum could be found. Compiled, with no Python integer: Shewchuk's non-overlapping
    partials, as ``math.fsum`` keeps them, then its rounding across partials. It gives up
    (``False``) where an intermediate sum leaves the double range, or the rounded sum does:
    callers then fall back to :func:`exact_float_sum`, which has no range. ``partials`` is
    scratch space of :data:`MAX_PARTIALS` doubles, reused from call to call.
    O(run · partials), usually O(run): a run of similar magnitudes keeps one or two partials.

    J. R. Shewchuk, "Adaptive Precision Floating-Point Arithmetic and Fast Robust Geometric
    Predicates", Discrete & Computational Geometry 18 (1997); CPython's ``math_fsum``.
    """
    count = 0
    for index in range(start, stop):
        x = values[index]
        if not np.isfinite(x):
            continue
        kept = 0
        for slot in range(count):
            y = partials[slot]
            if abs(x) < abs(y):
                x, y = y, x
            total = x + y
            error = y - (total - x)  # exact: |x| >= |y| (Fast2Sum)
            if error != 0.0:
                partials[kept] = error
                kept += 1
            x = total
        if not np.isfinite(x) or kept == len(partials):
            return 0.0, False
        partials[kept] = x
        count = kept + 1
    if count == 0:
        return 0.0, True
    count -= 1
    total = partials[count]
    error = 0.0
    while count > 0:  # add from the top while the sum stays exact
        x = total
        count -= 1
        y = partials[count]
        total = x + y
        error = y - (total - x)
        if error != 0.0:
            break
    # The partials below can tip a halfway error: round it away from total if they agree.
    if count > 0 and ((error < 0.0 and partials[count - 1] < 0.0)
                      or (error > 0.0 and partials[count - 1] > 0.0)):
        y = error * 2.0
        x = total + y
        if y == x - total:
            total = x
    if not np.isfinite(total):
        return 0.0, False
    return total + 0.0, True  # + 0.0: an exact zero is 0.0, as exact_float_sum's
