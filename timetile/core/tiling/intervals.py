"""Interval-tree tiling of sorted queries (seed 000, "Interval tree approach").

When the queries fit in memory they are sorted and broadcast, and events stream past them. An
event reaches a contiguous run ``[lo, hi)`` of the sorted queries; instead of updating each of
them, it updates the O(log n) power-of-two aligned *tiles* that cover the run. Every run is cut
from the same fixed set of tiles (the nodes of a complete binary tree over the queries), which
is what lets events share them. One push-down at the end gives each query the merge of the
tiles that contain it: O(n) merges, whatever the number of events.

A tile is a half-open range of query indices ``[j · 2**level, (j + 1) · 2**level)``.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from timetile.core.aggregators import codec
from timetile.core.aggregators.base import Aggregator

S = TypeVar("S")


def _dyadic(left: int, right: int) -> list[tuple[int, int]]:
    """Return ``(level, index)`` of the tiles of :func:`generate_tiles`, left to right.

    Walks up the levels; at each, a range end that is not aligned to the next level's tiles
    sheds one tile. At most two tiles per level.
    """
    if left < 0:
        raise ValueError(f"tiles cover non-negative indices, got left={left}")
    lefts: list[tuple[int, int]] = []
    rights: list[tuple[int, int]] = []
    level = 0
    while left < right:
        if left & 1:
            lefts.append((level, left))
            left += 1
        if right & 1:
            right -= 1
            rights.append((level, right))
        left //= 2
        right //= 2
        level += 1
    lefts.extend(reversed(rights))
    return lefts


def generate_tiles(left: int, right: int) -> list[tuple[int, int]]:
    """Return the fewest power-of-two aligned tiles that cover ``[left, right)`` exactly.

    Each tile is a half-open ``(start, end)`` with ``end - start = 2**i`` and ``start``
    divisible by ``2**i``; the tiles are disjoint, in increasing order, and their union is
    ``[left, right)``. Empty when ``left >= right``. For a range of length ``L`` there are at
    most ``2·log2(L)`` tiles (two per level); O(log L) time.

    >>> generate_tiles(4, 14)
    [(4, 8), (8, 12), (12, 14)]
    >>> generate_tiles(3, 3)
    []

    Raises:
        ValueError: if ``left`` is negative.

    """
    return [(index << level, (index + 1) << level) for level, index in _dyadic(left, right)]


class QueryTiling(Generic[S]):
    """Tiles over ``n`` sorted queries: fold states into ranges, then push down to the queries.

    Tiles are the nodes of a complete binary tree in heap order: with ``cap`` the least power
    of two ``>= n``, node 1 covers ``[0, cap)``, node ``v`` has children ``2v`` and ``2v + 1``,
    query ``i`` is node ``cap + i``. Only non-empty tiles are stored (a dict), so a tiling
    that saw few events is small to ship between tasks.

    ``add`` changes the tiling in place (O(log n) merges); ``merge``, ``results`` and
    ``to_bytes`` leave it as it is. States are never mutated.

    >>> import numpy as np
    >>> from timetile.core.aggregators import make_aggregator
    >>> from timetile.core.types import ValueType
    >>> agg = make_aggregator("sum", ValueType.INT)
    >>> tiling = QueryTiling(agg, 5)
    >>> tiling.add(1, 5, agg.fold(np.array([10]), np.array([0])))
    >>> tiling.add(0, 2, agg.fold(np.array([1]), np.array([0])))
    >>> [agg.finalize(state) for state in tiling.results()]
    [1, 11, 10, 10, 10]
    """

    def __init__(self, aggregator: Aggregator[S], n: int) -> None:
        if n < 0:
            raise ValueError(f"a tiling needs n >= 0 queries, got {n}")
        self.aggregator = aggregator
        self.n = n
        cap = 1
        while cap < n:
            cap *= 2
        self._cap = cap
        self._tiles: dict[int, S] = {}

    def __len__(self) -> int:
        """Return the number of queries ``n``."""
        return self.n

    def _first_query(self, node: int) -> int:
        """Return the first query index that ``node`` covers."""
        height = self._cap.bit_length() - node.bit_length()  # levels from the node to a leaf
        return (node << height) - self._cap

    def add(self, lo: int, hi: int, state: S) -> None:
        """Fold ``state`` into queries ``[lo, hi)``: a merge into each of their O(log n) tiles.

        A no-op when ``lo >= hi``.

        Raises:
            IndexError: if a non-empty range reaches outside ``[0, n)``.

        """
        if lo >= hi:
            return
        if lo < 0 or hi > self.n:
            raise IndexError(f"range [{lo}, {hi}) is outside [0, {self.n})")
        tiles, merge = self._tiles, self.aggregator.merge
        for level, index in _dyadic(lo, hi):
            node = (self._cap >> level) + index
            held = tiles.get(node)
            tiles[node] = state if held is None else merge(held, state)

    def merge(self, other: QueryTiling[S]) -> QueryTiling[S]:
        """Return a new tiling holding both tilings' states (e.g. from two partitions).

        O(tiles of both) merges at most; neither input changes.

        Raises:
            ValueError: if the tilings cover different numbers of queries.

        """
        if other.n != self.n:
            raise ValueError(f"cannot merge tilings of {self.n} and {other.n} queries")
        out = QueryTiling(self.aggregator, self.n)
        tiles = dict(self._tiles)
        for node, state in other._tiles.items():
            held = tiles.get(node)
            tiles[node] = state if held is None else self.aggregator.merge(held, state)
        out._tiles = tiles
        return out

    def results(self) -> list[S]:
        """Return each query's state: the merge of every tile that contains it.

        Pushes tiles down from the root, each non-empty tile merging into its children: at
        most two merges per tree node, O(n) merges in all. Queries no tile reached get
        ``init()``.
        """
        pushed = dict(self._tiles)
        merge = self.aggregator.merge
        for node in range(1, self._cap):
            state = pushed.get(node)
            if state is None:
                continue
            for child in (2 * node, 2 * node + 1):
                if self._first_query(child) >= self.n:  # only padding below
                    continue
                held = pushed.get(child)
                pushed[child] = state if held is None else merge(held, state)
        empty = self.aggregator.init()
        return [pushed.get(self._cap + i, empty) for i in range(self.n)]

    def to_bytes(self) -> bytes:
        """Serialize ``n`` and the non-empty tiles (node, state bytes), in node order.

        Uses :mod:`timetile.core.aggregators.codec` (versioned, safe to decode) and the
        aggregator's ``to_bytes``. O(non-empty tiles).
        """
        tiles = tuple(
            (node, self.aggregator.to_bytes(self._tiles[node])) for node in sorted(self._tiles)
        )
        return codec.encode((self.n, tiles))

    @classmethod
    def from_bytes(cls, aggregator: Aggregator[S], n: int, data: bytes) -> QueryTiling[S]:
        """Inverse of :meth:`to_bytes`, for the same op and ``n`` queries.

        The receiver states ``n`` (it knows its queries), and the bytes must agree: a tiling
        shipped to the wrong query set fails loudly. O(non-empty tiles) plus decoding.

        Raises:
            ValueError: on malformed bytes: bad structure, another ``n``, a node outside the
                tree or over padding only, nodes out of order, or a state that does not decode.

        """
        n_field, tiles_field = codec.expect_tuple(codec.decode(data), "query tiling", 2)
        encoded_n = codec.expect_int(n_field, "query tiling size")
        if encoded_n != n:
            raise ValueError(f"tiling bytes: a tiling of {encoded_n} queries, expected {n}")
        tiling = cls(aggregator, n)
        previous = 0
        for entry in codec.expect_tuple(tiles_field, "query tiling tiles"):
            node_field, payload = codec.expect_tuple(entry, "query tiling tile", 2)
            node = codec.expect_int(node_field, "tile node")
            if not isinstance(payload, bytes):
                raise ValueError("tiling bytes: a tile's state is not bytes")
            if node <= previous or node >= 2 * tiling._cap or tiling._first_query(node) >= n:
                raise ValueError(f"tiling bytes: node {node} out of order or out of range")
            tiling._tiles[node] = aggregator.from_bytes(payload)
            previous = node
        return tiling

    def _check(self) -> None:
        """Assert the invariants: the tree's shape, and every stored tile a node over a query."""
        cap, n = self._cap, self.n
        assert n >= 0
        assert cap >= 1
        assert cap & (cap - 1) == 0, "cap is a power of two"
        assert cap == 1 or cap < 2 * n, "cap is the least power of two >= n"
        for node, state in self._tiles.items():
            assert 1 <= node < 2 * cap, f"node {node} outside the tree"
            assert self._first_query(node) < n, f"node {node} covers padding only"
            assert state is not None
