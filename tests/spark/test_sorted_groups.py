"""Whole groups out of sorted batches: any key type, nulls, NaN, groups over many batches; and
the shuffle that feeds them keeps each group in one partition when Spark coalesces."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from timetile.core.kernels.sweep import int_prefix_sums
from timetile.spark.sorted_groups import group_starts, sorted_by_groups, whole_groups


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


def test_integer_prefix_sums_never_wrap() -> None:
    prefix = int_prefix_sums(np.array([-(2**63), -1]))
    assert (prefix[2] - prefix[0]) == -(2**63) - 1  # Python integers where int64 would wrap


def test_sorted_by_groups_keeps_each_group_whole_when_spark_coalesces(spark: Any) -> None:
    # nested, so that Spark pickles it by value: the workers cannot import this module
    def _tag_partitions(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Add each row's partition and its place in the partition's stream."""
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        seen = 0
        for batch in batches:
            rows = batch.num_rows
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.array([context.partitionId()] * rows, pa.int32()),
                 pa.array(np.arange(seen, seen + rows), pa.int64())],
                names=[*batch.schema.names, "part", "seq"])
            seen += rows

    rng = np.random.default_rng(11)
    keys = rng.zipf(1.4, 3000) % 60  # skewed; 0 stands for a null key
    times = rng.integers(0, 40, 3000)  # many equal times
    rows = [(None if k == 0 else int(k), int(t), i)
            for i, (k, t) in enumerate(zip(keys, times, strict=True))]
    frame = spark.createDataFrame(rows, "k long, t long, row long")
    conf = {"spark.sql.shuffle.partitions": "16",  # then merged into partitions of about 2 KB
            "spark.sql.adaptive.coalescePartitions.parallelismFirst": "false",
            "spark.sql.adaptive.advisoryPartitionSizeInBytes": "2k",
            "spark.sql.adaptive.coalescePartitions.minPartitionSize": "1"}
    before = {name: spark.conf.get(name) for name in conf}
    try:
        for name, value in conf.items():
            spark.conf.set(name, value)
        out = (sorted_by_groups(frame, ["k"], "t")
               .mapInArrow(_tag_partitions, "k long, t long, row long, part int, seq long")
               .toArrow().to_pylist())
    finally:
        for name, value in before.items():
            spark.conf.set(name, value)
    assert sorted(row["row"] for row in out) == list(range(len(rows)))  # every row, once
    parts = {row["part"] for row in out}
    assert 1 < len(parts) < 16  # Spark did merge hash partitions, and not into one
    homes: dict[int | None, set[int]] = {}
    for row in out:
        homes.setdefault(row["k"], set()).add(row["part"])
    assert all(len(home) == 1 for home in homes.values())  # each group in one partition
    for part in parts:
        stream = sorted((row for row in out if row["part"] == part), key=lambda r: r["seq"])
        order = [(row["k"] is not None, row["k"] or 0, row["t"]) for row in stream]
        assert order == sorted(order)  # nulls first, then by key, then by time
