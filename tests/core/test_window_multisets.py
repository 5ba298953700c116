"""The sweep's multiset kernels equal counting, listing and sorting each run by hand.

No Spark: hypothesis draws keys of ranks and runs inside each key, in any order (the sweep's
bounds never move back, but the kernels must stay exact when they do).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.kernels.multisets import (
    _fenwick_add,
    _fenwick_find,
    check_fenwick,
    window_distinct_counts,
    window_histograms,
    window_top_k,
)


@st.composite
def keys_and_runs(draw: st.DrawFn) -> tuple[np.ndarray, int, np.ndarray, np.ndarray,
                                            np.ndarray, np.ndarray]:
    distinct = draw(st.integers(1, 8) | st.integers(1, 300))  # Fenwick trees of many levels
    sizes = draw(st.lists(st.integers(0, 25), min_size=1, max_size=5))
    ids = np.array(draw(st.lists(st.integers(0, distinct - 1), min_size=sum(sizes),
                                 max_size=sum(sizes))), dtype=np.int64)
    event_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    lows, highs, per_key = [], [], []
    for key, size in enumerate(sizes):
        runs = draw(st.lists(st.tuples(st.integers(0, size), st.integers(0, size)),
                             max_size=6))  # empty runs among them
        if draw(st.booleans()):  # as the sweep sends them: bounds that never move back
            runs = list(zip(sorted(min(a, b) for a, b in runs),
                            sorted(max(a, b) for a, b in runs), strict=True))
        for a, b in runs:
            lows.append(event_offsets[key] + min(a, b))
            highs.append(event_offsets[key] + max(a, b))
        per_key.append(len(runs))
    query_offsets = np.concatenate([[0], np.cumsum(per_key)]).astype(np.int64)
    return (ids, distinct, event_offsets, query_offsets, np.array(lows, dtype=np.int64),
            np.array(highs, dtype=np.int64))


@settings(max_examples=400, deadline=None)
@given(keys_and_runs())
def test_each_run_counts_its_distinct_ids(
        drawn: tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
    ids, distinct, event_offsets, query_offsets, lows, highs = drawn
    counts = window_distinct_counts(ids, distinct, event_offsets, query_offsets, lows, highs)
    expected = [len(set(ids[low:high].tolist())) for low, high in zip(lows, highs, strict=True)]
    assert counts.tolist() == expected


@settings(max_examples=400, deadline=None)
@given(keys_and_runs())
def test_each_run_lists_its_ranks_in_order_with_their_multiplicities(
        drawn: tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
    ids, distinct, event_offsets, query_offsets, lows, highs = drawn
    entries, held, multiplicities = window_histograms(ids, distinct, event_offsets,
                                                      query_offsets, lows, highs)
    assert entries[0] == 0
    assert len(entries) == len(lows) + 1
    for query, (low, high) in enumerate(zip(lows, highs, strict=True)):
        expected = sorted(Counter(ids[low:high].tolist()).items())
        at, end = entries[query], entries[query + 1]
        assert list(zip(held[at:end].tolist(), multiplicities[at:end].tolist(),
                        strict=True)) == expected


@settings(max_examples=400, deadline=None)
@given(keys_and_runs(), st.integers(1, 6), st.booleans())
def test_each_run_gives_its_k_best_ranks_with_repeats(
        drawn: tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray], k: int,
        largest: bool) -> None:
    ids, distinct, event_offsets, query_offsets, lows, highs = drawn
    entries, chosen = window_top_k(ids, distinct, event_offsets, query_offsets, lows, highs, k,
                                    largest)
    for query, (low, high) in enumerate(zip(lows, highs, strict=True)):
        expected = sorted(ids[low:high].tolist(), reverse=largest)[:k]
        assert chosen[entries[query]:entries[query + 1]].tolist() == expected


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 70).flatmap(lambda distinct: st.tuples(
    st.just(distinct), st.lists(st.tuples(st.integers(0, distinct - 1), st.sampled_from([1, -1])),
                                max_size=120))))
def test_the_fenwick_tree_finds_the_rank_of_every_position(
        drawn: tuple[int, list[tuple[int, int]]]) -> None:
    """After any additions and removals (none below zero), the tree is checked, and the
    ``target``-th smallest value is where cumulative multiplicities first reach ``target``."""
    distinct, moves = drawn
    tree = np.zeros(distinct + 1, dtype=np.int64)
    multiplicities = np.zeros(distinct, dtype=np.int64)
    for rank, delta in moves:
        if multiplicities[rank] + delta < 0:
            continue
        _fenwick_add(tree, rank, delta)
        multiplicities[rank] += delta
    check_fenwick(tree, multiplicities)
    cumulative = np.cumsum(multiplicities)
    for target in range(1, int(cumulative[-1]) + 1):
        assert _fenwick_find(tree, target) == int(np.searchsorted(cumulative, target)), target


def test_a_key_starts_empty_after_a_busy_one() -> None:
    """Ids left in the last run of one key must not count for the next key's first run."""
    ids = np.array([0, 1, 2, 0, 1], dtype=np.int64)
    counts = window_distinct_counts(ids, 3, np.array([0, 3, 5]), np.array([0, 1, 3]),
                                    np.array([0, 3, 3]), np.array([3, 3, 5]))
    assert counts.tolist() == [3, 0, 2]
    entries, held, _ = window_histograms(ids, 3, np.array([0, 3, 5]), np.array([0, 1, 3]),
                                         np.array([0, 3, 3]), np.array([3, 3, 5]))
    assert held[entries[2]:].tolist() == [0, 1]
    entries, chosen = window_top_k(ids, 3, np.array([0, 3, 5]), np.array([0, 1, 3]),
                                    np.array([0, 3, 3]), np.array([3, 3, 5]), 3, True)
    assert chosen[entries[2]:].tolist() == [1, 0]
