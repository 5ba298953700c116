"""``approx_unique_count`` (HLL) and ``approx_percentile`` (KLL), on Apache DataSketches.

The sketches are configured as Spark's defaults (``hll_sketch_agg``: ``lgConfigK`` 12, HLL_8;
``kll_sketch_agg_double``: k = 200) and serialized in DataSketches' own binary format, so a
state can be built natively by Spark and merged here, and the reverse. State bytes are one
format byte (:data:`SKETCH_FORMAT`) followed by the sketch's serialization.

Sketch objects are mutable; these aggregators never mutate a state they were given: they build
a new sketch (a fresh union, or a copy through serialization) for every result.

References: Flajolet et al., *HyperLogLog* (2007); Karnin, Lang & Liberty, *Optimal Quantile
Approximation in Streams* (KLL, 2016); https://datasketches.apache.org.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, TypeAlias

import numpy as np
from datasketches import hll_sketch, hll_union, kll_doubles_sketch, tgt_hll_type

from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.aggregators.ordering import as_values, normalized, to_scalars
from timetile.core.types import ResultType, Shape, ValueType

#: The byte in front of every serialized sketch; bump it when the layout changes.
SKETCH_FORMAT = 1

#: HLL size: ``2**12`` buckets, Spark's ``hll_sketch_agg`` default.
HLL_LG_K = 12
#: HLL bucket width: 8 bits, Spark's default and the fastest to merge.
HLL_TYPE = tgt_hll_type.HLL_8
#: HLL relative standard error, ``1.04 / sqrt(2**lg_k)`` (Flajolet et al.).
HLL_RSE = 1.04 / math.sqrt(2**HLL_LG_K)

#: KLL accuracy parameter, Spark's ``kll_sketch_agg_double`` default.
KLL_K = 200
#: KLL normalized rank error of a quantile query at 99% confidence (DataSketches' fit).
KLL_RANK_ERROR: float = kll_doubles_sketch.get_normalized_rank_error(KLL_K, False)

# datasketches ships no type stubs: its sketches are Any to mypy; these names say which is which.
HllState: TypeAlias = Any  # datasketches.hll_sketch
KllState: TypeAlias = Any  # datasketches.kll_doubles_sketch

# Exceptions that DataSketches raises on corrupt bytes (C++ invalid_argument, out_of_range…).
_SKETCH_ERRORS = (ValueError, IndexError, RuntimeError, MemoryError, OverflowError)


def _sketch_payload(data: bytes) -> bytes:
    if len(data) < 2 or data[0] != SKETCH_FORMAT:
        found = data[0] if data else "nothing"
        raise ValueError(f"state bytes: expected sketch format {SKETCH_FORMAT}, got {found}")
    return data[1:]


class ApproxUniqueCount(Aggregator[HllState]):
    """Estimated number of distinct values, with an HLL sketch; 0 for no values.

    Values are identified as in ``unique_count`` (NaNs are one value, ``-0.0 == 0.0``), then
    hashed by DataSketches: ints as int64 (Spark's hashing of INT and BIGINT), strings as UTF-8,
    floats as doubles, bools as the ints 0 and 1. DataSketches ignores the empty string, as
    Spark's ``hll_sketch_agg`` does, so ``''`` is not counted. The hashes are Spark's: a
    sketch Spark builds from the same INT or STRING values has the same registers.

    The sketch's estimator (HIP) depends on the order values arrive in, so each batch's
    distinct values are fed in sorted order: the same batches always give the same estimate.

    State: an ``hll_sketch`` of at most 4 KiB. ``update`` O(n log n) to deduplicate the batch
    plus one hash per distinct value; ``merge`` O(2**12).

    >>> from timetile.core.types import ValueType
    >>> agg = ApproxUniqueCount(ValueType.INT)
    >>> agg.finalize(agg.fold(np.array([3, 1, 3, 2]), np.zeros(4, dtype=np.int64)))
    3
    """

    op: ClassVar[str] = "approx_unique_count"
    approximate: ClassVar[bool] = True
    error_bound: ClassVar[str | None] = (
        f"HLL with lg_k={HLL_LG_K}: relative standard error 1.04/sqrt(2^{HLL_LG_K}) ≈ "
        f"{HLL_RSE:.2%}; about 99.7% of estimates fall within 3 standard errors "
        f"(±{3 * HLL_RSE:.2%}) of the true count, and small counts (below a few hundred, where "
        "the sketch still lists its hashes) are nearly exact."
    )

    def result_type(self) -> ResultType:
        """Return ``INT``, whatever the column type."""
        return ResultType(ValueType.INT)

    def init(self) -> HllState:
        """Return a new, empty sketch."""
        return hll_sketch(HLL_LG_K, HLL_TYPE)

    def _batch_sketch(self, values: Values) -> HllState:
        values = as_values(values, self.input_type)
        distinct: list[Any]
        if values.dtype.kind == "O":  # sorted: HLL's estimator depends on insertion order
            distinct = sorted(set(values.tolist()))
        else:
            distinct = to_scalars(np.unique(normalized(values)))
        if values.dtype.kind == "b":
            distinct = [int(item) for item in distinct]
        sketch = hll_sketch(HLL_LG_K, HLL_TYPE)
        for item in distinct:
            sketch.update(item)
        return sketch

    def update(self, state: HllState, values: Values, times: Times) -> HllState:
        """Union the batch's sketch into a new copy of ``state``."""
        del times  # distinctness ignores event order
        if len(values) == 0:
            return state
        return self.merge(state, self._batch_sketch(values))

    def merge(self, left: HllState, right: HllState) -> HllState:
        """Return a new sketch of the union (an empty side returns the other unchanged)."""
        if right.is_empty():
            return left
        if left.is_empty():
            return right
        union = hll_union(HLL_LG_K)
        union.update(left)
        union.update(right)
        return union.get_result(HLL_TYPE)

    def finalize(self, state: HllState) -> int:
        """Return the estimate rounded to an int; 0 for an empty sketch."""
        estimate: float = state.get_estimate()
        return round(estimate)

    def to_bytes(self, state: HllState) -> bytes:
        """Return the format byte, then the sketch's compact serialization (Spark reads it)."""
        payload: bytes = state.serialize_compact()
        return bytes([SKETCH_FORMAT]) + payload

    def from_bytes(self, data: bytes) -> HllState:
        """Inverse of :meth:`to_bytes`; ValueError on malformed bytes."""
        try:
            return hll_sketch.deserialize(_sketch_payload(data))
        except _SKETCH_ERRORS as error:
            raise ValueError(f"state bytes: not an HLL sketch: {error}") from error


class ApproxPercentile(Aggregator[KllState]):
    """Estimated percentiles of the values, with a KLL sketch; None for no values.

    For each requested ``p`` in [0, 1] the result is a value ``q`` of the input whose rank is
    about ``p``: the least ``q`` with at least a fraction ``p`` of the values ``<= q`` in the
    sketch's view (DataSketches' inclusive search, which Spark's
    ``kll_sketch_get_quantile_double`` uses). NaN values are skipped (KLL cannot rank them);
    a window of only NaNs gives None. INT values are ranked as doubles.

    State: a ``kll_doubles_sketch`` of O(k log(n / k)) values. ``update`` O(n) amortized;
    ``merge`` O(sketch size). Beyond about ``k`` values KLL compacts at random, so results (and
    merged ones) can differ from run to run within the bound; below that they are exact.

    >>> from timetile.core.types import ValueType
    >>> agg = ApproxPercentile(ValueType.FLOAT, [0.0, 0.5, 1.0])
    >>> agg.finalize(agg.fold(np.array([4.0, 1.0, 3.0, 2.0]), np.zeros(4, dtype=np.int64)))
    [1.0, 2.0, 4.0]
    """

    op: ClassVar[str] = "approx_percentile"
    numeric_only: ClassVar[bool] = True
    approximate: ClassVar[bool] = True
    error_bound: ClassVar[str | None] = (
        f"KLL with k={KLL_K}: the returned value's normalized rank in the data is within "
        f"±{KLL_RANK_ERROR:.2%} of the requested percentile, with 99% confidence."
    )

    def __init__(self, input_type: ValueType, percentiles: Sequence[float]) -> None:
        super().__init__(input_type)
        ranks = tuple(float(p) for p in percentiles)
        if not ranks:
            raise ValueError(f"{self.op}: give at least one percentile")
        for rank in ranks:
            if not 0.0 <= rank <= 1.0:
                raise ValueError(f"{self.op}: percentiles must lie in [0, 1], got {rank}")
        self.percentiles = ranks

    def result_type(self) -> ResultType:
        """Return an array of ``FLOAT``, one per requested percentile."""
        return ResultType(ValueType.FLOAT, Shape.ARRAY)

    def init(self) -> KllState:
        """Return a new, empty sketch."""
        return kll_doubles_sketch(KLL_K)

    @staticmethod
    def _copy(sketch: KllState) -> KllState:
        return kll_doubles_sketch.deserialize(sketch.serialize())

    def update(self, state: KllState, values: Values, times: Times) -> KllState:
        """Return a copy of ``state`` with the batch's non-NaN values added."""
        del times  # ranks ignore event order
        values = np.asarray(values, dtype=np.float64)
        values = values[~np.isnan(values)]
        if len(values) == 0:
            return state
        sketch = self.init() if state.is_empty() else self._copy(state)
        sketch.update(np.ascontiguousarray(values))
        return sketch

    def merge(self, left: KllState, right: KllState) -> KllState:
        """Return a new sketch of both inputs (an empty side returns the other unchanged)."""
        if right.is_empty():
            return left
        if left.is_empty():
            return right
        sketch = self._copy(left)
        sketch.merge(right)
        return sketch

    def finalize(self, state: KllState) -> list[float] | None:
        """Return one estimate per requested percentile, or None for an empty sketch."""
        if state.is_empty():
            return None
        # A query sorts the sketch's buffer in place: ask a copy, so ``state`` stays untouched.
        sketch = self._copy(state)
        return [float(sketch.get_quantile(rank, inclusive=True)) for rank in self.percentiles]

    def to_bytes(self, state: KllState) -> bytes:
        """Return the format byte, then the sketch's serialization (Spark reads it)."""
        payload: bytes = state.serialize()
        return bytes([SKETCH_FORMAT]) + payload

    def from_bytes(self, data: bytes) -> KllState:
        """Inverse of :meth:`to_bytes`; ValueError on malformed bytes."""
        try:
            return kll_doubles_sketch.deserialize(_sketch_payload(data))
        except _SKETCH_ERRORS as error:
            raise ValueError(f"state bytes: not a KLL sketch: {error}") from error

    def __repr__(self) -> str:
        ranks = list(self.percentiles)
        return f"{type(self).__name__}({self.input_type.value}, percentiles={ranks})"
