"""Range merges over a sequence of states: a segment tree, and prefix differences.

The tail of a window is a run of whole hops, so a tail is ``merge(states[lo:hi])`` over one
key's hop partials sorted by hop (DESIGN §4). Two structures answer such range queries using
only the aggregator algebra (STYLE §2):

- :class:`SegmentTree` for any op: O(n) merges to build, O(log n) per query. The structure
  of Spark's segment-tree window frame (seed 003, SPARK-56546/SPARK-57220), unchunked.
- :class:`PrefixStates` for invertible ops: O(n) merges to build, one ``unmerge`` per query.

:func:`range_index` picks one from the op's declared capability (``invertible``), never by
trying and catching.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from timetile.core.aggregators.base import Aggregator

S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)


class RangeIndex(Protocol[S_co]):
    """Answers ``merge(states[lo:hi])`` over a fixed sequence of states."""

    def __len__(self) -> int:
        """Return how many states the index holds."""
        ...

    def query(self, lo: int, hi: int) -> S_co:
        """Return the merge of ``states[lo:hi]``, or ``init()`` for an empty range."""
        ...


def _same_state(aggregator: Aggregator[Any], left: Any, right: Any) -> bool:
    """Whether two states are the same: equal bytes, or for approximate ops equal results.

    Sketches (approximate ops) may lay out equal content differently, and KLL's merges are
    randomized beyond its exact range, so only their finalized results are compared; those
    agree while the sketches are exact (HLL always here: its merges are deterministic).
    """
    if aggregator.to_bytes(left) == aggregator.to_bytes(right):
        return True
    if not aggregator.approximate:
        return False
    return repr(aggregator.finalize(left)) == repr(aggregator.finalize(right))


def _check_bounds(lo: int, hi: int, n: int) -> None:
    if lo < 0 or hi > n:
        raise IndexError(f"range [{lo}, {hi}) is outside [0, {n})")


def _fold_in_order(aggregator: Aggregator[S], parts: Sequence[S]) -> S:
    """Merge ``parts`` left to right: ``len(parts) - 1`` merges, ``init()`` for none."""
    if not parts:
        return aggregator.init()
    return functools.reduce(aggregator.merge, parts)


class SegmentTree(Generic[S]):
    """A bottom-up segment tree over ``states``: ``query(lo, hi)`` is ``merge(states[lo:hi])``.

    Nodes live in one list in heap order: with ``size`` the least power of two ``>= n``, leaf
    ``i`` is node ``size + i`` and node ``v`` (``1 <= v < size``) is the merge of nodes ``2v``
    and ``2v + 1``, so each node covers an aligned run of leaves. Leaves past ``n`` hold
    ``init()``. Merges always combine a left range with the range right after it, so the
    result keeps the states' order even for an order-sensitive merge.

    Build: n - 1 merges at most (nodes over padding only are not merged), O(n) memory.
    Query: at most 2·log2(n) merges. States are never copied or mutated, only shared.

    >>> import numpy as np
    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> agg = make_aggregator("max", ValueType.INT)
    >>> leaves = [agg.fold(np.array([v]), np.array([0])) for v in [3, 1, 4, 1, 5]]
    >>> tree = SegmentTree(agg, leaves)
    >>> tree.query(1, 4), tree.query(4, 5), tree.query(2, 2)
    (4, 5, None)
    """

    def __init__(self, aggregator: Aggregator[S], states: Sequence[S]) -> None:
        self.aggregator = aggregator
        self._n = len(states)
        size = 1
        while size < self._n:
            size *= 2
        self._size = size
        empty = aggregator.init()
        nodes: list[S] = [empty] * (2 * size)
        nodes[size : size + self._n] = states
        # Level by level, merge only the nodes that hold real leaves: `count` of them at
        # `first`, the first node of the level; the rest of the level is padding (init()).
        first, count = size, self._n
        while first > 1:
            parent = first // 2
            for j in range(count // 2):
                left = first + 2 * j
                nodes[parent + j] = aggregator.merge(nodes[left], nodes[left + 1])
            if count % 2:  # the last real node has only padding to its right
                nodes[parent + count // 2] = nodes[first + count - 1]
            first, count = parent, (count + 1) // 2
        self._nodes = nodes

    def __len__(self) -> int:
        """Return the number of states (leaves)."""
        return self._n

    def query(self, lo: int, hi: int) -> S:
        """Return ``merge(states[lo:hi])`` in order; ``init()`` when ``lo >= hi``.

        O(log n): at most two nodes per level, at most 2·log2(n) merges.

        Raises:
            IndexError: if a non-empty range reaches outside ``[0, n)``.

        """
        if lo >= hi:
            return self.aggregator.init()
        _check_bounds(lo, hi, self._n)
        nodes = self._nodes
        lefts: list[S] = []
        rights: list[S] = []
        lo += self._size
        hi += self._size
        while lo < hi:
            if lo & 1:
                lefts.append(nodes[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                rights.append(nodes[hi])
            lo //= 2
            hi //= 2
        lefts.extend(reversed(rights))
        return _fold_in_order(self.aggregator, lefts)

    def _check(self) -> None:
        """Assert the invariants: layout, padding, and every node the merge of its children.

        O(n) merges. States are compared with :func:`_same_state`.
        """
        agg, nodes, size, n = self.aggregator, self._nodes, self._size, self._n
        assert size >= 1
        assert size & (size - 1) == 0, "size is a power of two"
        assert n <= size, "size is the least power of two >= n"
        assert size == 1 or size < 2 * n, "size is the least power of two >= n"
        assert len(nodes) == 2 * size
        empty = agg.to_bytes(agg.init())
        for leaf in range(size + n, 2 * size):
            assert agg.to_bytes(nodes[leaf]) == empty, f"padding leaf {leaf} is not empty"
        for node in range(size - 1, 0, -1):
            merged = agg.merge(nodes[2 * node], nodes[2 * node + 1])
            assert _same_state(agg, nodes[node], merged), f"node {node} != merge of its children"


class PrefixStates(Generic[S]):
    """Prefix merges of ``states`` for an invertible op: ``query(lo, hi)`` in one unmerge.

    ``prefix[i] = merge(states[:i])``, and ``merge(states[lo:hi]) = unmerge(prefix[hi],
    prefix[lo])``, exact for every invertible op.

    Build: n merges. Query: one ``unmerge`` (none when ``lo == 0``). Memory: n + 1 prefix
    states; for the multiset ops (``unique_count``, ``histogram``) a prefix holds every
    distinct value before it, so memory and unmerge cost grow with the prefix's distinct
    values, not the range's.

    >>> import numpy as np
    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> agg = make_aggregator("sum", ValueType.INT)
    >>> index = PrefixStates(agg, [agg.fold(np.array([v]), np.array([0])) for v in [3, 1, 4]])
    >>> agg.finalize(index.query(1, 3)), agg.finalize(index.query(0, 0))
    (5, None)

    Raises:
        TypeError: if the op is not invertible.

    """

    def __init__(self, aggregator: Aggregator[S], states: Sequence[S]) -> None:
        if not aggregator.invertible:
            raise TypeError(f"{aggregator.op} is not invertible: use a SegmentTree")
        self.aggregator = aggregator
        self._states = tuple(states)
        prefix = [aggregator.init()]
        for state in self._states:
            prefix.append(aggregator.merge(prefix[-1], state))
        self._prefix = prefix

    def __len__(self) -> int:
        """Return the number of states."""
        return len(self._states)

    def query(self, lo: int, hi: int) -> S:
        """Return ``merge(states[lo:hi])``; ``init()`` when ``lo >= hi``. O(1) unmerges.

        Raises:
            IndexError: if a non-empty range reaches outside ``[0, n)``.

        """
        if lo >= hi:
            return self.aggregator.init()
        _check_bounds(lo, hi, len(self._states))
        if lo == 0:
            return self._prefix[hi]
        return self.aggregator.unmerge(self._prefix[hi], self._prefix[lo])

    def _check(self) -> None:
        """Assert ``prefix[0] = init()`` and ``prefix[i + 1] = merge(prefix[i], states[i])``."""
        agg = self.aggregator
        assert len(self._prefix) == len(self._states) + 1
        assert agg.to_bytes(self._prefix[0]) == agg.to_bytes(agg.init())
        for i, state in enumerate(self._states):
            merged = agg.merge(self._prefix[i], state)
            assert agg.to_bytes(self._prefix[i + 1]) == agg.to_bytes(merged), f"prefix {i + 1}"


def range_index(aggregator: Aggregator[S], states: Sequence[S]) -> RangeIndex[S]:
    """Return the range index that suits the op: prefix differences if ``invertible``.

    :class:`PrefixStates` (O(1) unmerges per query) for invertible ops, :class:`SegmentTree`
    (O(log n) merges per query) for the rest. Both build in O(n) merges.

    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> type(range_index(make_aggregator("count", ValueType.INT), [])).__name__
    'PrefixStates'
    >>> type(range_index(make_aggregator("min", ValueType.INT), [])).__name__
    'SegmentTree'
    """
    if aggregator.invertible:
        return PrefixStates(aggregator, states)
    return SegmentTree(aggregator, states)
