"""Exact central moments, in rational arithmetic: the oracle of the moment tests."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def exact_moments(values: np.ndarray) -> tuple[Fraction, Fraction, Fraction]:
    """m2, m3, m4 of ``values`` in exact rational arithmetic."""
    exact = [Fraction(value) for value in values]
    mean = sum(exact, Fraction(0)) / len(exact)
    return tuple(sum(((value - mean) ** power for value in exact), Fraction(0))  # type: ignore[return-value]
                 for power in (2, 3, 4))


def exact_shape(op: str, values: np.ndarray) -> float:
    """``skew`` or ``kurtosis`` of ``values`` from their exact moments."""
    m2, m3, m4 = exact_moments(values)
    n = len(values)
    if op == "skew":
        return float(m3 / m2) / math.sqrt(float(m2)) * math.sqrt(n)
    return float(n * m4 / (m2 * m2)) - 3.0
