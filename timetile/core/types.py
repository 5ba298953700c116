"""Engine-free descriptions of column and result types.

Adapters map these to their own type systems (Spark, Arrow); the core reasons only about them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


class ValueType(Enum):
    """The kind of values an aggregation reads. Integers are 64-bit, floats double."""

    INT = "int"
    FLOAT = "float"
    STRING = "string"
    BOOL = "bool"

    @property
    def numeric(self) -> bool:
        """Whether arithmetic ops (sum, avg, moments, percentiles) accept this type."""
        return self in (ValueType.INT, ValueType.FLOAT)

    @property
    def numpy_dtype(self) -> np.dtype[np.generic]:
        """The dtype of the value arrays that aggregators receive for this type."""
        return np.dtype(_NUMPY_DTYPES[self])


_NUMPY_DTYPES = {
    ValueType.INT: np.int64,
    ValueType.FLOAT: np.float64,
    ValueType.STRING: object,
    ValueType.BOOL: np.bool_,
}


class Shape(Enum):
    """How a finalized result is shaped."""

    SCALAR = "scalar"
    ARRAY = "array"
    MAP = "map"


@dataclass(frozen=True)
class ResultType:
    """The type of a finalized aggregation result.

    ``element`` is the scalar type, the array's element type, or the map's value type;
    ``key`` is the map's key type and is set only when ``shape`` is ``MAP``. ``bucketed``
    wraps the whole: a map from a string bucket to a result of this type
    (:class:`timetile.core.aggregators.bucketed.Bucketed`), whose values may be null where
    the op's result may be (``variance`` of one value).
    """

    element: ValueType
    shape: Shape = Shape.SCALAR
    key: ValueType | None = None
    bucketed: bool = False
