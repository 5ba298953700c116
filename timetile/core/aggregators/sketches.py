"""``approx_unique_count`` (HLL) and ``approx_percentile`` (KLL), on Apache DataSketches.

The sketches are configured as Spark's defaults (``hll_sketch_agg``: ``lgConfigK`` 12, HLL_8;
``kll_sketch_agg_double``: k = 200) and serialized in DataSketches' own binary format, so a
state can be built natively by Spark and merged here, and the reverse. State bytes are one
format byte (:data:`SKETCH_FORMAT`) followed by the sketch's serialization.

What matches Spark SQL 4.3 exactly (asserted by ``tests/offline/test_sketch_parity.py``):

- ``approx_unique_count``: the state holds the same registers (coupons, before the sketch
  switches to its HLL array) as ``hll_sketch_agg(v)`` for INT and STRING columns, and as
  ``hll_sketch_agg(CAST(v AS INT))`` for BOOL. Spark has no DOUBLE input; a FLOAT state holds
  the registers of ``hll_sketch_agg`` over the 8 little-endian bytes of the double as BINARY
  (``-0.0`` as ``0.0``, every NaN as ``0x7ff8000000000000``). The result equals
  ``hll_sketch_estimate(hll_union(s, s))`` for ``s = hll_sketch_agg(v)``, and before rounding
  it equals DataSketches' estimate of that union to the last bit. Spark's plain
  ``hll_sketch_estimate(s)`` need not: a sketch that filled its HLL array without a later
  union between two HLL arrays (one task sketching the whole group, say) answers with its
  order-dependent HIP estimator (see :class:`ApproxUniqueCount`).
- ``approx_percentile``: equals ``kll_sketch_get_quantile_double(kll_sketch_agg_double(v), p)``
  (INT cast to DOUBLE) for every ``p`` wherever the group has at most k = 200 non-NaN values,
  where both sketches are exact. Beyond that both compact at random and each lies within the
  rank bound, but Spark's function queried on *our* state bytes returns exactly our result:
  finalize answers as DataSketches-Java does (its rounding of ``p * n``, and the exact minimum
  and maximum at the ends), not as DataSketches-C++'s own ``get_quantile``, which differs from
  it in both (``p = 0.07`` over 1..100: Java and Spark say 7, C++ 8).
  ``kll_sketch_get_n_double`` equals the number of non-NaN values: both skip NaN.

Sketch objects are mutable; these aggregators never mutate a state they were given: they build
a new sketch (a fresh union, or a copy through serialization) for every result.

References: Flajolet et al., *HyperLogLog* (2007); Ting, *Streamed approximate counting of
distinct elements* (HIP, KDD 2014); Karnin, Lang & Liberty, *Optimal Quantile Approximation in
Streams* (KLL, 2016); https://datasketches.apache.org.
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

#: DataSketches-Java rounds ``rank * n`` to 7 decimals before its ceiling, for ``n`` up to this.
_TAIL_ROUNDING = 10_000_000

# The HLL serialization's preamble (DataSketches' HllUtil): the flags byte, its "out of order"
# bit, and the mode byte, whose low two bits say LIST (0), SET (1) or HLL (2).
_HLL_FLAGS_BYTE = 5
_HLL_OUT_OF_ORDER_FLAG = 16
_HLL_MODE_BYTE = 7
_HLL_MODE_MASK = 3
_HLL_MODE_HLL = 2

# Exceptions that DataSketches raises on corrupt bytes (C++ invalid_argument, out_of_range…).
_SKETCH_ERRORS = (ValueError, IndexError, RuntimeError, MemoryError, OverflowError)


def _sketch_payload(data: bytes) -> bytes:
    if len(data) < 2 or data[0] != SKETCH_FORMAT:
        found = data[0] if data else "nothing"
        raise ValueError(f"state bytes: expected sketch format {SKETCH_FORMAT}, got {found}")
    return data[1:]


def order_free_estimate(sketch: HllState) -> float:
    """Return the sketch's estimate as a function of its registers only. O(2**lg_k).

    An HLL-mode sketch that was only ever updated (never unioned) answers with its HIP
    accumulator, which depends on the order its values arrived in; a union's result is marked
    *out of order* and answers with the composite estimator, a function of the registers. This
    marks the sketch (a copy) out of order, as a union would, so every sketch of the same
    values answers alike however they were cut, ordered or merged. It equals
    ``hll_union`` of the sketch with itself, without its two passes over the registers. LIST
    and SET sketches (up to a few hundred values) estimate from their coupons: already
    order-free.
    """
    data = bytearray(sketch.serialize_compact())
    if (data[_HLL_MODE_BYTE] & _HLL_MODE_MASK) != _HLL_MODE_HLL or (
        data[_HLL_FLAGS_BYTE] & _HLL_OUT_OF_ORDER_FLAG
    ):
        estimate: float = sketch.get_estimate()
        return estimate
    data[_HLL_FLAGS_BYTE] |= _HLL_OUT_OF_ORDER_FLAG
    composite: float = hll_sketch.deserialize(bytes(data)).get_estimate()
    return composite


class ApproxUniqueCount(Aggregator[HllState]):
    """Estimated number of distinct values, with an HLL sketch; 0 for no values.

    Values are identified as in ``unique_count`` (NaNs are one value, ``-0.0 == 0.0``), then
    hashed by DataSketches: ints as int64 (Spark's hashing of INT and BIGINT), strings as UTF-8,
    floats as doubles, bools as the ints 0 and 1. DataSketches ignores the empty string, as
    Spark's ``hll_sketch_agg`` does, so ``''`` is not counted. The hashes are Spark's: a
    sketch Spark builds from the same INT or STRING values has the same registers.

    The estimate is a function of the registers only (:func:`order_free_estimate`: the
    composite estimator once the sketch holds an HLL array), so it does not depend on how the
    input was cut, ordered or merged: 0..4999 gives 4986 in one batch, in halves or in ten
    pieces. DataSketches' own ``get_estimate`` would answer 4944 for the single batch (HIP),
    and so does Spark's ``hll_sketch_estimate(hll_sketch_agg(v))`` when one task sketches the
    whole group (4986 when two tasks' sketches are merged);
    ``hll_sketch_estimate(hll_union(s, s))`` is Spark's order-free equivalent and equals this
    result. Each batch's distinct values are still fed in sorted order, so
    the same batches also give the same state bytes.

    State: an ``hll_sketch`` of at most 4 KiB. ``update`` O(n log n) to deduplicate the batch
    plus one hash per distinct value; ``merge`` and ``finalize`` O(2**12).

    >>> from timetile.core.types import ValueType
    >>> agg = ApproxUniqueCount(ValueType.INT)
    >>> agg.finalize(agg.fold(np.array([3, 1, 3, 2]), np.zeros(4, dtype=np.int64)))
    3
    """

    op: ClassVar[str] = "approx_unique_count"
    approximate: ClassVar[bool] = True
    checkpointable: ClassVar[bool] = True
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
        if values.dtype.kind == "O":  # sorted: the same batch always gives the same bytes
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
        """Return the order-free estimate rounded to an int; 0 for an empty sketch."""
        if state.is_empty():
            return 0
        return round(order_free_estimate(state))

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


def inclusive_natural_rank(rank: float, n: int) -> int:
    """Return how many of ``n`` values lie at or below the ``rank`` quantile (``1 <= .. <= n``).

    DataSketches-Java's ``QuantilesUtil.getNaturalRank`` for the inclusive search, which
    Spark's ``kll_sketch_get_quantile_double`` uses: ``ceil(rank * n)``, where for ``n <= 1e7``
    the product is first rounded to 7 decimals, so a product that floating point puts just
    above an integer counts as that integer (``0.07 * 100 == 7.000000000000001`` gives 7;
    DataSketches-C++ would give 8). The quantile is then the least value whose cumulative
    weight reaches it. O(1).

    >>> inclusive_natural_rank(0.07, 100), inclusive_natural_rank(0.5, 5)
    (7, 3)
    """
    product = rank * n
    if n <= _TAIL_ROUNDING:
        scaled = product * _TAIL_ROUNDING
        whole = math.floor(scaled)
        if scaled - whole >= 0.5:  # Java's Math.round: half up, exactly
            whole += 1
        product = whole / _TAIL_ROUNDING
    return max(1, min(n, math.ceil(product)))


class ApproxPercentile(Aggregator[KllState]):
    """Estimated percentiles of the values, with a KLL sketch; None for no values.

    For each requested ``p`` in [0, 1] the result is a value ``q`` of the input whose rank is
    about ``p``: the least ``q`` with at least ``ceil(p * n)`` of the ``n`` values ``<= q`` in
    the sketch's view (the inclusive search of DataSketches-Java, which Spark's
    ``kll_sketch_get_quantile_double`` uses, with its rounding: :func:`inclusive_natural_rank`).
    Ranks that round to the first or the last value give the input's exact minimum or maximum,
    as Java's does. INT values are ranked as doubles (Spark's ``kll_sketch_agg_double`` takes
    only FLOAT and DOUBLE: cast INT columns to DOUBLE).

    NaN values are skipped, as Spark's ``kll_sketch_agg_double`` skips them (DataSketches'
    ``update`` ignores NaN: KLL cannot rank it). A window of only NaNs (or none) gives None;
    Spark's sketch of such a group is empty (``kll_sketch_get_n_double`` 0) and
    ``kll_sketch_get_quantile_double`` raises ``KLL_INVALID_INPUT_SKETCH_BUFFER`` on it. ``-0.0``
    is stored as ``0.0``, so results carry normalized zeros whatever the cut (Spark keeps the
    sign of whichever zero its sort returns; the two compare equal).

    With at most ``k`` = 200 values the sketch keeps them all: results are exact, do not depend
    on how the input was cut or merged, and equal Spark's. Beyond that KLL compacts at random,
    so results (and merged ones) can differ from run to run within the bound.

    State: a ``kll_doubles_sketch`` of O(k log(n / k)) values. ``update`` O(n) amortized;
    ``merge`` O(sketch size); ``finalize`` O(sketch size) to sort a copy, O(1) where every
    requested rank falls on the minimum or the maximum.

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
        """Return a copy of ``state`` with the batch's non-NaN values added, ``-0.0`` as ``0.0``."""
        del times  # ranks ignore event order
        values = np.asarray(values, dtype=np.float64)
        values = values[~np.isnan(values)] + 0.0  # -0.0 + 0.0 == +0.0
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
        """Return one estimate per requested percentile, or None for an empty sketch.

        Answers as DataSketches-Java's inclusive ``getQuantile`` (Spark's
        ``kll_sketch_get_quantile_double``) does on the same sketch: see
        :func:`inclusive_natural_rank`; a natural rank of at most 1 gives the input's minimum
        and one of ``n`` its maximum, which the sketch keeps exactly even after compaction.
        """
        if state.is_empty():
            return None
        n: int = state.n
        sketch: KllState = None
        results: list[float] = []
        for position in (inclusive_natural_rank(rank, n) for rank in self.percentiles):
            if position <= 1:
                results.append(float(state.get_min_value()))
            elif position >= n:
                results.append(float(state.get_max_value()))
            else:
                # A query sorts the sketch's buffer in place: ask a copy, so ``state`` stays
                # untouched. The rank handed over is the middle of the position's step, so
                # DataSketches-C++'s own ceil(rank * n) lands on ``position`` whatever its
                # rounding.
                if sketch is None:
                    sketch = self._copy(state)
                results.append(float(sketch.get_quantile((position - 0.5) / n, inclusive=True)))
        return results

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
