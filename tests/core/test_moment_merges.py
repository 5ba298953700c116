"""The core's moments are exact far from zero, however the values are cut and merged.

No Spark. Tiles, the stream and the online store fold values into batches and merge the
states in whatever order their hops and tiles come; the sweep's tree merges nodes. With each
mean a double-double, ``skew`` and ``kurtosis`` of values like 1e9 ± 1 must be within 1e-9
of exact rational arithmetic for every cut and every order of merges. The state's bytes keep
the mean's low word, and bytes written before it existed still read.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from exact_moments import exact_moments, exact_shape
from hypothesis import example, given, settings
from hypothesis import strategies as st

from timetile.core.aggregators import codec, make_aggregator
from timetile.core.aggregators.moments import MomentState
from timetile.core.types import ValueType

CENTERS = st.sampled_from([0.0, 1e9, -1e12, 1e15])
# No magnitudes below 1e-40 about zero: m4, which kurtosis reads, underflows for deviations
# below about 1e-77.
SPREAD = st.lists(st.floats(-1.0, 1.0).filter(lambda x: x == 0.0 or abs(x) > 1e-40),
                  min_size=3, max_size=40)


def fold_in_pieces(op: str, values: np.ndarray, cuts: list[int], seed: int) -> float | None:
    """Fold each piece between ``cuts`` alone, then merge the states in a random order."""
    aggregator = make_aggregator(op, ValueType.FLOAT)
    bounds = [0, *sorted(cut % (len(values) + 1) for cut in cuts), len(values)]
    states = [aggregator.fold(values[a:b], np.zeros(b - a, dtype=np.int64))
              for a, b in itertools.pairwise(bounds)]
    order = random.Random(seed)
    while len(states) > 1:  # merge neighbours only: states of a window are in time order
        at = order.randrange(len(states) - 1)
        states[at:at + 2] = [aggregator.merge(states[at], states[at + 1])]
        assert states[at].mean + states[at].mean_low == states[at].mean, "a low word too big"
    result: float | None = aggregator.finalize(states[0])
    return result


@settings(max_examples=300, deadline=None)
@given(CENTERS, SPREAD, st.lists(st.integers(0, 40), max_size=8), st.integers(0, 2**32))
@example(1e9, [0.0, 0.9, -0.7], [1, 2], 0)  # a mean rounded to one double fails this
def test_any_cut_and_merge_order_is_exact(center: float, spread: list[float],
                                          cuts: list[int], seed: int) -> None:
    values = center + np.array(spread) * max(1.0, abs(center) * 1e-9)
    m2 = exact_moments(values)[0]
    if m2 == 0:  # constant: covered by the semantics tests
        return
    variance = fold_in_pieces("variance", values, cuts, seed)
    assert variance is not None
    assert math.isclose(variance, float(m2) / (len(values) - 1), rel_tol=1e-12)
    for op in ("skew", "kurtosis"):
        ours = fold_in_pieces(op, values, cuts, seed)
        exact = exact_shape(op, values)
        assert ours is not None
        assert math.isclose(ours, exact, rel_tol=1e-9, abs_tol=1e-9), (op, ours, exact)


def test_far_from_zero_one_batch_or_one_value_at_a_time_agree() -> None:
    """1,000 values 1e9 + exponential(3): folded whole, or merged one by one, skew and
    kurtosis agree with each other and with exact arithmetic to 1e-12."""
    values = 1e9 + np.random.default_rng(5).exponential(3.0, 1000)
    for op in ("skew", "kurtosis"):
        whole = fold_in_pieces(op, values, [], 0)
        singles = fold_in_pieces(op, values, list(range(1, 1000)), 1)
        exact = exact_shape(op, values)
        assert whole is not None
        assert singles is not None
        assert abs(whole - exact) < 1e-12, (op, whole, exact)
        assert abs(singles - exact) < 1e-12, (op, singles, exact)


def test_state_bytes_keep_the_low_word_and_read_the_six_field_form() -> None:
    aggregator = make_aggregator("skew", ValueType.FLOAT)
    state = aggregator.fold(np.array([1e9, 1e9 + 0.9, 1e9 - 0.7]), np.zeros(3, dtype=np.int64))
    assert state.mean_low != 0.0
    assert aggregator.from_bytes(aggregator.to_bytes(state)) == state
    written_before = codec.encode((3, 1e9, 2.0, 0.5, 0.25, 1))  # before the mean's low word
    assert aggregator.from_bytes(written_before) == MomentState(3, 1e9, 0.0, 2.0, 0.5, 0.25, 1)
    with pytest.raises(ValueError, match="moments must have 7 items, got 5"):
        aggregator.from_bytes(codec.encode((3, 1e9, 2.0, 0.5, 0.25)))
    with pytest.raises(ValueError, match="moments mean_low must be a float"):
        aggregator.from_bytes(codec.encode((3, 1e9, 1, 2.0, 0.5, 0.25, 1)))
    with pytest.raises(ValueError, match="mean_low is not below half an ulp of mean"):
        aggregator.from_bytes(codec.encode((3, 1e9, 5.0, 2.0, 0.5, 0.25, 1)))
    with pytest.raises(ValueError, match="negative or beyond int64"):
        aggregator.from_bytes(codec.encode((2**70, 1e9, 0.0, 2.0, 0.5, 0.25, 1)))


def test_the_bounds_the_docs_state_hold_for_every_cut() -> None:
    """docs/semantics.md: ``variance`` within about 1e-15 relative of exact arithmetic, and
    ``skew`` and ``kurtosis`` within about 1e-14 of their value or of 1, whichever is larger,
    however the values are cut and merged. Seeded: 400 draws of up to 300 values, from
    symmetric (a skew of zero, where only an absolute bound means anything) to Pareto."""
    draw = random.Random(2026)

    def symmetric(size: int) -> list[float]:
        half = [draw.gauss(0.0, 1.0) for _ in range(size // 2)]
        return [*half, *(-x for x in half), 0.0]

    kinds = [
        lambda size: [draw.gauss(0.0, 1.0) for _ in range(size)],
        lambda size: [draw.expovariate(1 / 3) for _ in range(size)],
        lambda size: [1e9 + draw.gauss(0.0, 1.0) for _ in range(size)],  # far from zero
        lambda size: [round(draw.uniform(0.0, 500.0), 2) for _ in range(size)],  # money
        lambda size: [draw.lognormvariate(0.0, 2.0) for _ in range(size)],
        lambda size: [draw.paretovariate(1.5) for _ in range(size)],
        symmetric,
    ]
    worst = {"variance": 0.0, "skew": 0.0, "kurtosis": 0.0}
    for case in range(400):
        values = np.array(kinds[case % len(kinds)](draw.randint(3, 300)))
        cuts = [draw.randrange(len(values) + 1) for _ in range(draw.randint(0, 8))]
        m2 = exact_moments(values)[0]
        variance = fold_in_pieces("variance", values, cuts, case)
        assert variance is not None
        exact_variance = float(m2) / (len(values) - 1)
        worst["variance"] = max(worst["variance"], abs(variance - exact_variance) / exact_variance)
        for op in ("skew", "kurtosis"):
            ours = fold_in_pieces(op, values, cuts, case)
            exact = exact_shape(op, values)
            assert ours is not None
            worst[op] = max(worst[op], abs(ours - exact) / max(1.0, abs(exact)))
    assert worst["variance"] < 5e-15, worst
    assert max(worst["skew"], worst["kurtosis"]) < 5e-14, worst
