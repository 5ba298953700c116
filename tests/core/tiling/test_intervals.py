"""The interval-tree tiling (seed 000): tile properties, and seeded stress against brute force."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from aggregator_strategies import agree
from hypothesis import given, settings
from hypothesis import strategies as st
from tiling_helpers import STRESS_OPS, MergeCounter, aggregator

from timetile.core.aggregators import codec
from timetile.core.tiling import QueryTiling, generate_tiles


def _check_tiles(left: int, right: int) -> None:
    tiles = generate_tiles(left, right)
    if left >= right:
        assert tiles == []
        return
    position = left
    for start, end in tiles:
        size = end - start
        assert size > 0
        assert size & (size - 1) == 0, "a power of two"
        assert start % size == 0, "aligned"
        assert start == position, "disjoint, in order, no gap"
        position = end
    assert position == right, "covers the range exactly"
    assert len(tiles) <= 2 * math.log2(right - left) + 2
    # Fewest: no two neighbours could be one aligned tile.
    for (a, b), (c, d) in itertools.pairwise(tiles):
        assert not (b - a == d - c and a % (2 * (b - a)) == 0 and b == c)


def test_small_ranges_exhaustively() -> None:
    for left in range(70):
        for right in range(left - 2, 70):
            _check_tiles(left, right)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**40), st.integers(-5, 2**22))
def test_tiles_cover_aligned_and_few(left: int, length: int) -> None:
    _check_tiles(left, left + length)


def test_tiles_examples() -> None:
    assert generate_tiles(4, 14) == [(4, 8), (8, 12), (12, 14)]
    assert generate_tiles(0, 16) == [(0, 16)]
    assert generate_tiles(1, 16) == [(1, 2), (2, 4), (4, 8), (8, 16)]
    assert generate_tiles(7, 8) == [(7, 8)]
    with pytest.raises(ValueError, match="non-negative"):
        generate_tiles(-1, 3)


def _events(rng: np.random.Generator, n: int, count: int) -> list[tuple[int, int, int, int]]:
    """(lo, hi, value, time): random ranges over the n queries, some empty or full."""
    out = []
    for _ in range(count):
        lo, hi = sorted(int(x) for x in rng.integers(0, n + 1, size=2))
        if rng.random() < 0.1:
            lo, hi = 0, n
        out.append((lo, hi, int(rng.integers(-50, 50)), int(rng.integers(0, 20))))
    return out


def _fold_events(agg: Any, events: list[tuple[int, int, int, int]]) -> tuple[Any, np.ndarray]:
    values = np.array([value for _, _, value, _ in events], dtype=np.int64)
    times = np.array([time for _, _, _, time in events], dtype=np.int64)
    order = np.argsort(times, kind="stable")
    return agg.fold(values[order], times[order]), values


def _tiling(agg: Any, n: int, events: list[tuple[int, int, int, int]]) -> QueryTiling[Any]:
    tiling = QueryTiling(agg, n)
    for step, (lo, hi, value, time) in enumerate(events):
        tiling.add(lo, hi, agg.fold(np.array([value]), np.array([time])))
        if n < 100 or step % 50 == 0:
            tiling._check()
    tiling._check()
    return tiling


def _assert_results(agg: Any, n: int, events: list[Any], results: list[Any]) -> None:
    assert len(results) == n
    for query, state in enumerate(results):
        covering = [event for event in events if event[0] <= query < event[1]]
        want, values = _fold_events(agg, covering)
        agree(agg, agg.finalize(state), agg.finalize(want), values)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 17, 200])
@pytest.mark.parametrize("op", [*STRESS_OPS, "count", "histogram"])
def test_query_tiling_matches_brute_force(op: str, n: int) -> None:
    rng = np.random.default_rng(n * 101 + len(op))
    agg = aggregator(op)
    events = _events(rng, n, 3 * n + 5) if n else []
    tiling = _tiling(agg, n, events)
    _assert_results(agg, n, events, tiling.results())
    tiling._check()  # results() leaves the tiling as it was
    _assert_results(agg, n, events, tiling.results())

    # Cut into partitions, tiled apart, shipped as bytes, merged: the same results.
    cut = len(events) // 3
    parts = [events[:cut], events[cut:]]
    shipped = [QueryTiling.from_bytes(agg, n, _tiling(agg, n, part).to_bytes()) for part in parts]
    merged = shipped[0].merge(shipped[1])
    merged._check()
    _assert_results(agg, n, events, merged.results())
    assert QueryTiling(agg, n).merge(tiling).to_bytes() == tiling.to_bytes()


def test_tiling_merge_counts() -> None:
    agg = aggregator("concat")
    counter = MergeCounter(agg)
    n = 1000
    tiling = QueryTiling(agg, n)
    rng = np.random.default_rng(3)
    for lo, hi, value, _ in _events(rng, n, 500):
        counter.reset()
        tiling.add(lo, hi, (value,))
        assert counter.calls <= 2 * math.log2(n)
    counter.reset()
    results = tiling.results()
    assert counter.calls <= 2 * 1024
    assert len(results) == n


def test_tiling_bytes_are_sparse_and_checked() -> None:
    agg = aggregator("sum")
    tiling = QueryTiling(agg, 1000)
    tiling.add(0, 512, agg.fold(np.array([3]), np.array([0])))
    data = tiling.to_bytes()
    assert len(data) < 40  # one tile, not a thousand
    assert agg.finalize(QueryTiling.from_bytes(agg, 1000, data).results()[511]) == 3
    assert QueryTiling.from_bytes(agg, 0, QueryTiling(agg, 0).to_bytes()).results() == []
    state = agg.to_bytes(agg.init())
    bad = [
        data[:-1],  # truncated
        codec.encode((1000, ((3, state), (2, state)))),  # out of order
        codec.encode((1000, ((2048, state),))),  # outside the tree
        codec.encode((1000, ((1023, state),))),  # covers padding only
        codec.encode((1000, ((0, state),))),  # no node 0
        codec.encode((1000, ((5, "x"),))),  # not bytes
        codec.encode((1000,)),
    ]
    for wrong in bad:
        with pytest.raises(ValueError, match=r"bytes|query tiling"):
            QueryTiling.from_bytes(agg, 1000, wrong)
    with pytest.raises(ValueError, match="expected 999"):
        QueryTiling.from_bytes(agg, 999, data)


def test_tiling_rejects_bad_ranges_and_sizes() -> None:
    agg = aggregator("sum")
    tiling = QueryTiling(agg, 5)
    one = agg.fold(np.array([1]), np.array([0]))
    tiling.add(3, 3, one)
    tiling.add(4, 2, one)  # empty: nothing happens
    assert tiling.to_bytes() == QueryTiling(agg, 5).to_bytes()
    with pytest.raises(IndexError):
        tiling.add(-1, 2, one)
    with pytest.raises(IndexError):
        tiling.add(2, 6, one)
    with pytest.raises(ValueError, match="cannot merge"):
        tiling.merge(QueryTiling(agg, 6))
    with pytest.raises(ValueError, match="n >= 0"):
        QueryTiling(agg, -1)
