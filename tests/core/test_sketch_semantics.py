"""What the approximate ops return: error bounds, cut-invariance, DataSketches' formats."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from aggregator_strategies import check_within_bound, column, fold_parts, run, true_distinct
from datasketches import hll_sketch, hll_union, kll_doubles_sketch, tgt_hll_type
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.aggregators import make_aggregator
from timetile.core.aggregators.sketches import (
    HLL_RSE,
    KLL_RANK_ERROR,
    inclusive_natural_rank,
    order_free_estimate,
)
from timetile.core.types import ValueType

NAN, INF = math.nan, math.inf


# --- approx_unique_count -------------------------------------------------------------------


def test_approx_unique_count_small_inputs_are_exact() -> None:
    assert run("approx_unique_count", list(range(300)), value_type=ValueType.INT) == 300
    assert run("approx_unique_count", [NAN, -0.0, 0.0, NAN, 1.5]) == 3
    assert run("approx_unique_count", [True, False, True], value_type=ValueType.BOOL) == 2
    # DataSketches (and Spark's hll_sketch_agg) ignore the empty string.
    assert run("approx_unique_count", ["", "a", "b", "a"], value_type=ValueType.STRING) == 2
    assert run("approx_unique_count", [""], value_type=ValueType.STRING) == 0


@pytest.mark.parametrize("value_type", [ValueType.INT, ValueType.FLOAT, ValueType.STRING])
def test_approx_unique_count_error_bound(value_type: ValueType) -> None:
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 150_000, 100_000)
    values = {
        ValueType.INT: raw,
        ValueType.FLOAT: raw / 7.0,
        ValueType.STRING: np.array([f"user-{x}" for x in raw.tolist()], dtype=object),
    }[value_type]
    agg = make_aggregator("approx_unique_count", value_type)
    truth = true_distinct(value_type, values)
    whole = agg.finalize(agg.fold(values, np.zeros(len(values), np.int64)))
    parts = fold_parts(agg, [list(part) for part in np.array_split(values, 8)])
    for estimate in (whole, agg.finalize(parts)):
        assert abs(estimate - truth) <= 3 * HLL_RSE * truth, (estimate, truth)


def test_hll_batch_order_does_not_matter() -> None:
    agg = make_aggregator("approx_unique_count", ValueType.STRING)
    values = [f"v{i}" for i in range(2_000)]  # past the exact list/set modes
    zero = np.zeros(len(values), np.int64)
    forward = agg.to_bytes(agg.fold(column(ValueType.STRING, values), zero))
    backward = agg.to_bytes(agg.fold(column(ValueType.STRING, values[::-1]), zero))
    assert forward == backward


@pytest.mark.parametrize("value_type", [ValueType.INT, ValueType.STRING])
def test_approx_unique_count_does_not_depend_on_the_cut(value_type: ValueType) -> None:
    # 0..4999 in one batch, halves or ten pieces (merged, or updated day by day), in any order.
    agg = make_aggregator("approx_unique_count", value_type)
    values = list(range(5_000)) if value_type is ValueType.INT else [str(x) for x in range(5_000)]
    shuffled = [values[i] for i in np.random.default_rng(3).permutation(len(values))]
    estimates = {}
    for order, items in (("forward", values), ("backward", values[::-1]), ("shuffled", shuffled)):
        for pieces in (1, 2, 10):
            parts = [list(part) for part in np.array_split(np.array(items, dtype=object), pieces)]
            estimates[order, pieces, "merged"] = agg.finalize(fold_parts(agg, parts))
            running = agg.init()
            for part in parts:
                stamps = np.zeros(len(part), np.int64)
                running = agg.update(running, column(value_type, part), stamps)
            estimates[order, pieces, "updated"] = agg.finalize(running)
    assert len(set(estimates.values())) == 1, estimates
    if value_type is ValueType.INT:
        # The composite estimator's answer; one batch's HIP accumulator would say 4944.
        assert estimates["forward", 1, "merged"] == 4986


def _hll_of(values: Any) -> Any:
    sketch = hll_sketch(12, tgt_hll_type.HLL_8)
    for value in values:
        sketch.update(value)
    return sketch


@settings(max_examples=40, deadline=None)
@given(
    size=st.sampled_from([0, 1, 7, 8, 100, 300, 400, 700, 1_000, 3_000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_order_free_estimate_is_the_union_estimate(size: int, seed: int) -> None:
    # Every mode (LIST, SET, HLL), in any order, in-order or already unioned: the estimate of
    # a union of the sketch with itself, which DataSketches computes from the registers alone.
    order = np.random.default_rng(seed).permutation(size).tolist()
    halves = _union_of(_hll_of(order[::2]), _hll_of(order[1::2]))
    for sketch in (_hll_of(order), _hll_of(sorted(order)), halves):
        union = hll_union(12)
        union.update(sketch)
        union.update(sketch)
        assert order_free_estimate(sketch) == union.get_estimate()
    assert order_free_estimate(_hll_of(order)) == order_free_estimate(_hll_of(sorted(order)))


def _union_of(left: Any, right: Any) -> Any:
    union = hll_union(12)
    union.update(left)
    union.update(right)
    return union.get_result(tgt_hll_type.HLL_8)


def test_hll_state_is_a_plain_datasketches_sketch() -> None:
    agg = make_aggregator("approx_unique_count", ValueType.INT)
    state = agg.fold(np.arange(1_000), np.zeros(1_000, np.int64))
    sketch = hll_sketch.deserialize(agg.to_bytes(state)[1:])
    assert sketch.lg_config_k == 12
    assert sketch.tgt_type == tgt_hll_type.HLL_8
    # One batch's sketch answers get_estimate() with HIP; finalize with the composite estimator,
    # as a union does (Spark: hll_sketch_estimate(hll_union(s, s))).
    union = hll_union(12)
    union.update(sketch)
    union.update(sketch)
    assert round(union.get_estimate()) == agg.finalize(state) == 988
    assert round(sketch.get_estimate()) == 996
    # And a sketch built directly (as Spark would) merges in.
    direct = hll_sketch(12)
    for x in range(500, 1_500):
        direct.update(x)
    merged = agg.merge(state, agg.from_bytes(b"\x01" + direct.serialize_compact()))
    assert abs(agg.finalize(merged) - 1_500) <= 3 * HLL_RSE * 1_500


# --- approx_percentile ---------------------------------------------------------------------


def test_approx_percentile_small_inputs_are_exact() -> None:
    # Inclusive ranks, as Spark's kll_sketch_get_quantile_double: [1, 2, 3, 4] at 0.5 is 2.0.
    assert run("approx_percentile", [4.0, 1.0, 3.0, 2.0], percentiles=[0.0, 0.5, 0.75, 1.0]) == [
        1.0, 2.0, 3.0, 4.0,
    ]
    assert run("approx_percentile", [1, 5, 3], value_type=ValueType.INT, percentiles=[0.5]) == [3.0]
    assert run("approx_percentile", [1.0, NAN, 3.0], percentiles=[0.5]) == [1.0]  # NaN skipped
    assert run("approx_percentile", [NAN, NAN], percentiles=[0.5]) is None
    assert run("approx_percentile", [-INF, 0.0, INF], percentiles=[0.0, 1.0]) == [-INF, INF]


def test_approx_percentile_error_bound() -> None:
    rng = np.random.default_rng(9)
    values = np.concatenate([rng.normal(0, 1, 60_000), rng.exponential(5, 40_000)])
    rng.shuffle(values)
    ranks = [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0]
    agg = make_aggregator("approx_percentile", ValueType.FLOAT, percentiles=ranks)
    whole = agg.finalize(agg.fold(values, np.zeros(len(values), np.int64)))
    state = agg.init()
    for part in np.array_split(values, 10):
        state = agg.merge(state, agg.fold(part, np.zeros(len(part), np.int64)))
    for result in (whole, agg.finalize(state)):
        check_within_bound(agg, result, values)
        # The ends are the exact minimum and maximum, which KLL keeps even after compacting.
        assert (result[0], result[-1]) == (values.min(), values.max())
    assert 0.01 < KLL_RANK_ERROR < 0.02


def test_approx_percentile_rounds_ranks_as_spark() -> None:
    # Spark (DataSketches-Java) rounds p * n to 7 decimals before its ceiling: 0.07 * 100 is
    # 7.000000000000001 in floating point and still means the 7th value, where
    # DataSketches-C++'s own get_quantile would return the 8th.
    ranks = [0.07, 0.29, 0.57, 0.58, 0.7, 0.0, 1.0]
    values = [float(x) for x in range(1, 101)]
    assert run("approx_percentile", values, percentiles=ranks) == [
        7.0, 29.0, 57.0, 58.0, 70.0, 1.0, 100.0,
    ]
    assert [inclusive_natural_rank(p, 100) for p in ranks] == [7, 29, 57, 58, 70, 1, 100]
    assert inclusive_natural_rank(0.5, 7) == 4
    assert inclusive_natural_rank(1e-9, 10**8) == 1  # past 1e7 values: no rounding, ceil(0.1)


def test_approx_percentile_ends_survive_compaction() -> None:
    rng = np.random.default_rng(4)
    values = rng.normal(0, 1, 50_000)
    values[rng.integers(len(values))] = 1e9
    values[rng.integers(len(values))] = -1e9
    agg = make_aggregator("approx_percentile", ValueType.FLOAT, percentiles=[0.0, 1e-6, 1.0])
    state = fold_parts(agg, [list(part) for part in np.array_split(values, 7)])
    assert agg.finalize(state) == [-1e9, -1e9, 1e9]


def test_kll_state_is_a_plain_datasketches_sketch() -> None:
    agg = make_aggregator("approx_percentile", ValueType.FLOAT, percentiles=[0.5])
    state = agg.fold(np.arange(10.0), np.zeros(10, np.int64))
    sketch = kll_doubles_sketch.deserialize(agg.to_bytes(state)[1:])
    assert sketch.k == 200
    assert sketch.n == 10
