"""Whole groups out of sorted batches: any key type, nulls, NaN, groups over many batches."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pyarrow as pa
import pytest

from timetile.core.kernels.sweep import window_int_sums
from timetile.spark.sorted_groups import group_starts, whole_groups


@pytest.mark.parametrize("seed", range(5))
def test_whole_groups_never_split_a_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(60):
        codes = np.sort(rng.integers(0, 6, int(rng.integers(1, 80))))
        keys = pa.array([None if c == 0 else f"k{c}" for c in codes], pa.string())
        floats = pa.array([float("nan") if c == 5 else float(c % 2) for c in codes])
        table = pa.table({"k": keys, "f": floats, "row": np.arange(len(codes))})
        cuts = sorted({int(c) for c in rng.integers(0, len(codes) + 1, 5)} | {0, len(codes)})
        batches = [batch for low, high in itertools.pairwise(cuts)
                   for batch in table.slice(low, high - low).to_batches()]
        tables = list(whole_groups(iter(batches), ["k", "f"]))
        assert pa.concat_tables(tables).column("row").to_pylist() == list(range(len(codes)))
        expected = len(group_starts(table, ["k", "f"]))
        assert sum(len(group_starts(t, ["k", "f"])) for t in tables) == expected


def test_nulls_and_nans_group_together() -> None:
    table = pa.table({"k": [None, None, "a"], "f": [float("nan"), float("nan"), 1.0]})
    assert group_starts(table, ["k", "f"]).tolist() == [0, 2]


def test_one_huge_group_is_linear() -> None:
    def seconds(rows: int) -> float:
        batches = pa.table({"k": np.zeros(rows, dtype=np.int64)}).to_batches(max_chunksize=5_000)
        began = time.perf_counter()
        assert sum(t.num_rows for t in whole_groups(iter(batches), ["k"])) == rows
        return time.perf_counter() - began

    small, large = seconds(200_000), seconds(1_600_000)
    assert large < 40 * max(small, 1e-3)  # 8× the rows; quadratic would be 64×


def test_integer_prefix_sums_refuse_to_wrap() -> None:
    with pytest.raises(OverflowError):
        window_int_sums(np.array([-(2**63), -1]), np.array([0]), np.array([2]))
