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
