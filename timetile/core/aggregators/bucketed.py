"""Bucketed aggregations: one inner op per value of a string bucket column.

``Aggregation(column, op, buckets=["category"])`` gives, per window, a map from each
category to what ``op`` gives over that category's rows alone (Chronon's bucketed
aggregations). :class:`Bucketed` wraps the op's aggregator (the *inner* one) and keeps the
algebra of :mod:`.base`, so tiles, scans, segment trees and prefix differences run it like
any other op (STYLE §2).

Values: a numpy structured array of dtype :func:`bucketed_dtype`, one row per event, with a
``bucket`` field (``object``, a ``str``) and a ``value`` field (the inner op's dtype); make
one with :func:`bucketed_values`. As with every aggregator nulls never reach it: the
windowing layer drops rows whose value or bucket is null.

State: a mapping bucket → inner state, holding only buckets whose state is not the inner
op's identity (``init()``), and never mutated. A retraction can bring a bucket's state back
to the identity (the retraction of its last value); such a bucket is dropped, so a key seen
again in the state always has values. The test is on the state itself (its bytes equal
``init()``'s, exact for every invertible op), not on a count of values: a partial that
retracts one value of a bucket and inserts another (an entity mutation) has a net count of
zero and still carries a change.

Result: ``{bucket: inner result}`` with buckets in code-point order (Spark's string order),
or None when no bucket has a value, whatever the inner op (an empty ``count`` is None, not
0). Each entry is exactly the inner op's result over that bucket's values, which are never
empty.

Cost: ``update``/``retract`` group a batch by bucket (O(n log n)) and then cost what the
inner op costs per bucket, plus a copy of the bucket map (O(buckets)); ``merge``/``unmerge``
are one inner merge per bucket of the smaller side plus that copy.

>>> from timetile.core.aggregators import make_aggregator
>>> from timetile.core.types import ValueType
>>> agg = Bucketed(make_aggregator("sum", ValueType.INT))
>>> values = bucketed_values(["b", "a", "b"], np.array([1, 2, 3]), ValueType.INT)
>>> agg.finalize(agg.fold(values, np.array([1, 2, 3])))
{'a': 2, 'b': 4}
>>> agg.finalize(agg.init()) is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator, Times, Values
from timetile.core.types import ResultType, ValueType

#: The fields of a bucketed values array.
BUCKET, VALUE = "bucket", "value"

#: The state: bucket → the inner op's state (never its identity).
BucketStates = Mapping[str, Any]


def bucketed_dtype(value_type: ValueType) -> np.dtype[np.void]:
    """Return the structured dtype of bucketed values over a column of ``value_type``.

    >>> bucketed_dtype(ValueType.FLOAT).names
    ('bucket', 'value')
    """
    return np.dtype([(BUCKET, object), (VALUE, value_type.numpy_dtype)])


def bucketed_values(buckets: Sequence[str] | Values, values: Values,
                    value_type: ValueType) -> Values:
    """Pair non-null ``values`` with their non-null string ``buckets``. O(n), one copy."""
    if len(buckets) != len(values):
        raise ValueError(f"{len(values)} values but {len(buckets)} buckets")
    out = np.empty(len(values), dtype=bucketed_dtype(value_type))
    out[BUCKET] = buckets
    out[VALUE] = values
    return out


def _by_bucket(values: Values, times: Times) -> Iterator[tuple[str, Values, Times]]:
    """Split a batch by bucket, keeping each bucket's rows in batch order."""
    if values.dtype.names != (BUCKET, VALUE):
        raise TypeError(f"bucketed values need the fields {(BUCKET, VALUE)}, "
                        f"got dtype {values.dtype}")
    if len(values) != len(times):
        raise ValueError(f"{len(values)} values but {len(times)} times")
    keys, inverse = np.unique(values[BUCKET], return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    cuts = np.flatnonzero(np.diff(inverse[order])) + 1
    inner = values[VALUE]
    for key, rows in zip(keys.tolist(), np.split(order, cuts), strict=True):
        yield key, inner[rows], times[rows]


class Bucketed(Aggregator[BucketStates]):
    """The inner op, once per bucket value; see the module docstring for the contract.

    ``Bucketed(inner)`` declares the inner op's capabilities: it is an
    :class:`InvertibleBucketed` when ``inner`` is invertible and an
    :class:`ApproximateBucketed` when ``inner`` is approximate.

    Raises:
        TypeError: if ``inner`` is itself bucketed, or a subclass is asked to wrap an op
            whose capabilities it does not declare.

    """

    op: ClassVar[str] = "bucketed"

    def __new__(cls, inner: Aggregator[Any]) -> Bucketed:
        """Return an instance of the class that declares ``inner``'s capabilities."""
        capable = _CAPABLE.get((inner.invertible, inner.approximate))
        if capable is None or not issubclass(capable, cls):
            raise TypeError(f"{cls.__name__} cannot declare the capabilities of {inner!r}")
        return super().__new__(capable)

    def warm_up(self) -> None:
        """Warm up the inner op's merge, which merging maps calls."""
        self.inner.warm_up()

    def __init__(self, inner: Aggregator[Any]) -> None:
        if inner.result_type().bucketed:
            raise TypeError(f"{inner!r} is already bucketed")
        super().__init__(inner.input_type)
        self.inner = inner
        self._empty = inner.to_bytes(inner.init())

    def __getnewargs__(self) -> tuple[Aggregator[Any]]:
        return (self.inner,)

    def result_type(self) -> ResultType:
        """Return a map from string bucket to the inner op's result type."""
        return replace(self.inner.result_type(), bucketed=True)

    def init(self) -> BucketStates:
        """Return the empty map: no bucket has values."""
        return {}

    def _apply(self, state: BucketStates, values: Values, times: Times,
               step: Callable[[Any, Values, Times], Any]) -> BucketStates:
        if len(values) == 0:
            return state
        out = dict(state)
        for bucket, inner_values, inner_times in _by_bucket(values, times):
            self._settle(out, bucket,
                         step(out.get(bucket, self.inner.init()), inner_values, inner_times))
        return out

    def _settle(self, out: dict[str, Any], bucket: str, state: Any) -> None:
        """Store a bucket's new state, or drop the bucket if its state is the identity."""
        if self.invertible and self.inner.to_bytes(state) == self._empty:
            out.pop(bucket, None)
        else:
            out[bucket] = state

    def update(self, state: BucketStates, values: Values, times: Times) -> BucketStates:
        """Update each bucket's inner state with its rows of the batch."""
        return self._apply(state, values, times, self.inner.update)

    def _combine(self, left: BucketStates, right: BucketStates,
                 step: Callable[[Any, Any], Any]) -> BucketStates:
        out = dict(left)
        for bucket, state in right.items():
            self._settle(out, bucket, step(out.get(bucket, self.inner.init()), state))
        return out

    def merge(self, left: BucketStates, right: BucketStates) -> BucketStates:
        """Merge bucket by bucket; a bucket on one side only is kept as it is."""
        if not right:
            return left
        if not left:
            return right
        return self._combine(left, right, self.inner.merge)

    def finalize(self, state: BucketStates) -> dict[str, Any] | None:
        """Return ``{bucket: inner result}`` in bucket order, or None for no values."""
        if not state:
            return None
        return {bucket: self.inner.finalize(state[bucket]) for bucket in sorted(state)}

    def needs_times(self) -> bool:
        """Whether the inner op needs each value's time."""
        return self.inner.needs_times()

    def finalize_at(self, state: BucketStates, at_ms: int | None) -> dict[str, Any] | None:
        """Return ``{bucket: inner result at at_ms}`` in bucket order, or None for no values."""
        if not state:
            return None
        return {bucket: self.inner.finalize_at(state[bucket], at_ms) for bucket in sorted(state)}

    def to_bytes(self, state: BucketStates) -> bytes:
        """Encode ``(buckets, inner state bytes)`` in bucket order with :mod:`.codec`."""
        buckets = tuple(sorted(state))
        return codec.encode((buckets, tuple(self.inner.to_bytes(state[b]) for b in buckets)))

    def from_bytes(self, data: bytes) -> BucketStates:
        """Decode, checking that buckets are distinct, sorted strings.

        Raises:
            ValueError: on malformed bytes, the inner op's included.

        """
        buckets, blobs = codec.expect_tuple(codec.decode(data), "bucketed state", 2)
        buckets = codec.expect_tuple(buckets, "buckets")
        blobs = codec.expect_tuple(blobs, "bucket states", len(buckets))
        state: dict[str, Any] = {}
        previous: str | None = None
        for bucket, blob in zip(buckets, blobs, strict=True):
            if not isinstance(bucket, str) or not isinstance(blob, bytes):
                raise ValueError("state bytes: a bucket must be a string with a state in bytes")
            if previous is not None and bucket <= previous:
                raise ValueError("state bytes: buckets must be distinct and sorted")
            state[bucket] = self.inner.from_bytes(blob)
            previous = bucket
        return state

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class InvertibleBucketed(Bucketed):
    """:class:`Bucketed` over an invertible op: it retracts and unmerges bucket by bucket."""

    invertible: ClassVar[bool] = True

    def retract(self, state: BucketStates, values: Values, times: Times) -> BucketStates:
        """Retract each bucket's rows; a bucket whose state returns to empty is dropped."""
        return self._apply(state, values, times, self.inner.retract)

    def unmerge(self, whole: BucketStates, part: BucketStates) -> BucketStates:
        """Unmerge bucket by bucket: exactly undoes :meth:`merge`."""
        if not part:
            return whole
        return self._combine(whole, part, self.inner.unmerge)


class ApproximateBucketed(Bucketed):
    """:class:`Bucketed` over an approximate op: each entry keeps the op's error bound."""

    approximate: ClassVar[bool] = True
    error_bound: ClassVar[str | None] = "each entry is within the bucketed op's error bound"


#: Which class declares the capabilities of an inner op: (invertible, approximate) → class.
_CAPABLE: dict[tuple[bool, bool], type[Bucketed]] = {
    (False, False): Bucketed,
    (True, False): InvertibleBucketed,
    (False, True): ApproximateBucketed,
}
