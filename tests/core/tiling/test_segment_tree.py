"""Seeded stress tests of the range indexes: every query against a brute-force fold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from aggregator_strategies import agree
from tiling_helpers import (
    INVERTIBLE_OPS,
    STRESS_OPS,
    MergeCounter,
    aggregator,
    fold_range,
    random_batches,
    random_ranges,
)

from timetile.core.aggregators import Aggregator
from timetile.core.tiling import PrefixStates, SegmentTree, range_index

SIZES = (0, 1, 2, 3, 5, 8, 13, 1000)


def _values(parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    return np.concatenate([values for values, _ in parts]) if parts else np.array([], np.int64)


def _stress(agg: Aggregator[Any], index_type: type, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = random_batches(rng, n)
    states = [agg.fold(*part) for part in parts]
    before = [agg.to_bytes(state) for state in states]
    index = index_type(agg, states)
    index._check()
    assert len(index) == n
    for lo, hi in random_ranges(rng, n, 60 if n > 100 else 25):
        got = agg.finalize(index.query(lo, hi))
        want = agg.finalize(fold_range(agg, parts[lo:hi]))
        agree(agg, got, want, _values(parts[lo:hi]))
    if n <= 100:
        index._check()  # queries change nothing
    assert [agg.to_bytes(state) for state in states] == before


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", [*STRESS_OPS, "concat"])
def test_segment_tree_matches_brute_force(op: str, n: int) -> None:
    _stress(aggregator(op), SegmentTree, n, seed=n * 31 + len(op))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", INVERTIBLE_OPS)
def test_prefix_states_match_brute_force(op: str, n: int) -> None:
    _stress(aggregator(op), PrefixStates, n, seed=n * 17 + len(op))


def test_segment_tree_keeps_order() -> None:
    agg = aggregator("concat")
    for n in range(40):
        tree = SegmentTree(agg, [(i,) for i in range(n)])
        tree._check()
        for lo in range(n + 1):
            for hi in range(lo, n + 1):
                assert tree.query(lo, hi) == tuple(range(lo, hi))


def test_segment_tree_merge_counts() -> None:
    agg = aggregator("concat")
    counter = MergeCounter(agg)
    for n in (1, 2, 3, 5, 1000):
        counter.reset()
        tree = SegmentTree(agg, [(i,) for i in range(n)])
        assert counter.calls <= n - 1  # build
        for lo, hi in random_ranges(np.random.default_rng(n), n, 200):
            counter.reset()
            tree.query(lo, hi)
            assert counter.calls <= max(0, 2 * np.log2(max(hi - lo, 1)))  # query


def test_out_of_range_queries_raise() -> None:
    agg = aggregator("sum")
    states = [agg.fold(np.array([1]), np.array([0]))] * 3
    for index in (SegmentTree(agg, states), PrefixStates(agg, states)):
        with pytest.raises(IndexError):
            index.query(-1, 2)
        with pytest.raises(IndexError):
            index.query(1, 4)
        assert agg.finalize(index.query(5, 5)) is None  # empty: no bounds to break


def test_range_index_follows_the_declared_capability() -> None:
    for op in (*STRESS_OPS, *INVERTIBLE_OPS):
        agg = aggregator(op)
        want = PrefixStates if agg.invertible else SegmentTree
        assert type(range_index(agg, [])) is want
    with pytest.raises(TypeError, match="not invertible"):
        PrefixStates(aggregator("max"), [])



@pytest.mark.parametrize(("index_type", "ops"), [(SegmentTree, ["max", "concat"]),
                                                 (PrefixStates, INVERTIBLE_OPS)])
def test_an_extended_index_equals_one_built_whole(index_type: type, ops: list[str]) -> None:
    """Cut and grown step by step, as the fetcher's blocks are as tiles land: the last few
    states dropped, others added. It answers as brute force does, merges only above the
    changed leaves until it outgrows its size, and leaves the index it came from as it was.
    """
    rng = np.random.default_rng(23)
    for op in ops:
        agg = aggregator(op)
        counter = MergeCounter(agg)
        values: list[int] = []
        index = index_type(agg, [])
        for step in range(80):
            keep = int(rng.integers(max(0, len(values) - 3), len(values) + 1))
            added = [int(v) for v in rng.integers(0, 1_000, int(rng.integers(0, 12)))]
            before = [agg.to_bytes(index.query(k, k + 1)) for k in range(len(index))]
            states = [agg.fold(np.array([v]), np.array([step])) for v in added]
            counter.reset()
            grown = index.extended(keep, states)
            changed = max(len(values), keep + len(added)) - keep
            if index_type is SegmentTree and len(grown) <= index._size:
                assert counter.calls <= changed + 2 * index._size.bit_length()
            assert [agg.to_bytes(index.query(k, k + 1)) for k in range(len(index))] == before
            index, values = grown, values[:keep] + added
            index._check()
            for lo, hi in random_ranges(rng, len(values), 20):
                parts = [(np.array([v]), np.array([0])) for v in values[lo:hi]]
                assert agg.finalize(index.query(lo, hi)) == agg.finalize(fold_range(agg, parts))
        if op == "concat":
            assert index.query(0, len(values)) == tuple(values)
        with pytest.raises(IndexError):
            index.extended(len(values) + 1, [])
        # Cut to half its power of two or less, a tree is built again at the size it needs.
        whole = index_type(agg, [agg.fold(np.array([v]), np.array([0])) for v in range(9)])
        for keep in (8, 4, 1, 0):
            cut = whole.extended(keep, [])
            cut._check()
            assert len(cut) == keep
            assert agg.finalize(cut.query(0, keep)) == agg.finalize(
                fold_range(agg, [(np.array([v]), np.array([0])) for v in range(keep)]))
