"""Range merges over a sequence of states: a segment tree, and prefix differences.

The tail of a window is a run of whole hops, so a tail is ``merge(states[lo:hi])`` over one
key's hop partials sorted by hop (DESIGN §4). Two structures answer such range queries using
only the aggregator algebra (STYLE §2):

- :class:`SegmentTree` for any op: O(n) merges to build, O(log n) per query. The structure
  of Spark's segment-tree window frame (seed 003, SPARK-56546/SPARK-57220), unchunked.
- :class:`PrefixStates` for invertible ops: O(n) merges to build, one ``unmerge`` per query.

Both grow without a rebuild (:meth:`RangeIndex.extended`): the online fetcher's index over
a hot key's blocks of streamed events gains a block or two as each tile lands.

:func:`range_index` picks one from the op's declared capability (``invertible``), never by
trying and catching.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from timetile.core.aggregators.base import Aggregator

S = TypeVar("S")


class RangeIndex(Protocol[S]):
    """Answers ``merge(states[lo:hi])`` over a fixed sequence of states."""

    def __len__(self) -> int:
        """Return how many states the index holds."""
        ...

    def query(self, lo: int, hi: int) -> S:
        """Return the merge of ``states[lo:hi]``, or ``init()`` for an empty range."""
        ...

    def extended(self, keep: int, states: Sequence[S]) -> RangeIndex[S]:
        """Return an index over this one's first ``keep`` states, then ``states``.

        This index stays as it is (readers may share it); the new one shares its states.
        """
        ...

    def _check(self) -> None:
        """Assert the index's invariants (tests and stress runs call it)."""
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
        self._empty = aggregator.init()
        self._nodes: list[S] = [self._empty] * (2 * size)
        self._nodes[size : size + self._n] = states
        self._merge_up(0, self._n)

    def _merge_up(self, first: int, end: int) -> None:
        """Set the nodes above leaves ``[first, end)`` from their children, level by level.

        A node merges its two children; one whose right child covers padding only is its
        left child (no merge), and one over padding only is ``init()``. O((end - first) +
        log n) merges.
        """
        nodes, merge = self._nodes, self.aggregator.merge
        level, real = self._size, self._n  # the level's first node; how many are real
        lo, hi = level + first, level + end  # the nodes [lo, hi) of this level changed
        while level > 1 and lo < hi:
            lo, hi = lo // 2, (hi - 1) // 2 + 1
            for node in range(lo, hi):
                left = 2 * node
                if left + 1 - level < real:
                    nodes[node] = merge(nodes[left], nodes[left + 1])
                else:
                    nodes[node] = nodes[left] if left - level < real else self._empty
            level, real = level // 2, (real + 1) // 2

    def extended(self, keep: int, states: Sequence[S]) -> SegmentTree[S]:
        """Return a tree over this one's first ``keep`` states, then ``states``.

        This tree stays as it is. O(2n) to copy the node list (no merge), then the nodes
        above the changed leaves: O((n - keep + len(states)) + log n) merges. A tree that
        outgrows its power of two, or needs half of it or less, is built anew (O(n) merges).

        Raises:
            IndexError: if ``keep`` is not in ``[0, len(self)]``.

        """
        n = keep + len(states)
        if not 0 <= keep <= self._n:
            raise IndexError(f"keep {keep} is outside [0, {self._n}]")
        if n > self._size or 2 * n <= self._size > 1:
            return SegmentTree(self.aggregator,
                               [*self._nodes[self._size : self._size + keep], *states])
        tree = copy.copy(self)
        tree._nodes = list(self._nodes)
        tree._nodes[self._size + keep : self._size + self._n] = [self._empty] * (self._n - keep)
        tree._nodes[self._size + keep : self._size + n] = states
        tree._n = n
        tree._merge_up(keep, max(n, self._n))
        return tree

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

    def extended(self, keep: int, states: Sequence[S]) -> PrefixStates[S]:
        """Return prefix states over this one's first ``keep`` states, then ``states``.

        This one stays as it is. O(n) to copy (no merge), then ``len(states)`` merges.

        Raises:
            IndexError: if ``keep`` is not in ``[0, len(self)]``.

        """
        if not 0 <= keep <= len(self._states):
            raise IndexError(f"keep {keep} is outside [0, {len(self._states)}]")
        index = copy.copy(self)
        index._states = (*self._states[:keep], *states)
        index._prefix = self._prefix[:keep + 1]
        for state in states:
            index._prefix.append(self.aggregator.merge(index._prefix[-1], state))
        return index

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
