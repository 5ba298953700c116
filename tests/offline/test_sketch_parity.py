"""The approximate ops against Spark SQL's own DataSketches functions (Spark 4.3).

For about a hundred random groups per value type (sizes from 0 to 3,000 values, so every HLL
mode and both sides of KLL's exact range; duplicates, nulls, '' and non-ASCII strings, NaN,
±inf, -0.0, int64 extremes), one Spark query builds Spark's sketches and timetile builds its
states from the same values cut into random batches, merged and updated; a second query hands
our state bytes to Spark's functions. The test also checks that the groups reached every HLL
layout, both sides of KLL's k, all-NaN groups and ranks where rounding matters. Per group, with
``s = hll_sketch_agg(x)`` and ``K = kll_sketch_agg_double(CAST(v AS DOUBLE))``, it asserts:

HLL (``x`` is ``v`` for INT and STRING, ``CAST(v AS INT)`` for BOOL; Spark's hll_sketch_agg
takes no DOUBLE, so for FLOAT ``x`` is the BINARY of v's 8 little-endian IEEE bytes with
``-0.0`` as ``0.0`` and NaN as ``0x7ff8000000000000``, which is how DataSketches hashes a double):

1. our state and ``s`` hold the same registers (the same coupons while not yet an HLL array);
2. ``finalize == hll_sketch_estimate(hll_union(s, s))``, and before rounding our estimate equals
   DataSketches' estimate of Spark's ``hll_union(s, s)`` bytes to the last bit;
3. Spark reads our state: ``hll_sketch_estimate(hll_union(ours, ours))`` and
   ``hll_sketch_estimate(hll_union(ours, s))`` both equal ``finalize``.

Spark's plain ``hll_sketch_estimate(s)`` is not asserted: when one task sketched a whole group,
``s`` answers with HIP, which depends on row order (0..4999: 4944 against 4986 merged).

KLL (INT and FLOAT):

4. ``kll_sketch_get_n_double(K)`` is the number of non-null, non-NaN values, and so is our
   sketch's n: both skip NaN. A group of only NaN or null gives None here; Spark's sketch is
   empty and ``kll_sketch_get_quantile_double`` raises on it, so it is not queried;
5. with at most k = 200 such values ``finalize == kll_sketch_get_quantile_double(K, ps)``
   exactly, for every p (both sketches keep every value; Spark's search is inclusive, and
   rounds ``p * n`` to 7 decimals before its ceiling, as finalize does);
6. for every non-empty group ``finalize == kll_sketch_get_quantile_double(ours, ps)``: Spark
   queried on our state bytes answers as we do;
7. beyond k both answers lie within KLL's rank bound (each side compacts at random).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from datasketches import hll_sketch, kll_doubles_sketch
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.core.aggregators import Aggregator, make_aggregator
from timetile.core.aggregators.sketches import (
    KLL_K,
    KLL_RANK_ERROR,
    inclusive_natural_rank,
    order_free_estimate,
)
from timetile.core.types import ValueType

#: With ranks whose product with n floating point puts just above an integer (0.07 * 100).
PERCENTILES = (0.0, 0.01, 0.07, 0.1, 0.25, 0.29, 0.5, 0.57, 0.75, 0.9, 0.99, 1.0)
SPARK_RANKS = "array(" + ", ".join(f"{p}D" for p in PERCENTILES) + ")"
#: Sizes on both sides of the HLL modes (LIST < 8 coupons, SET, HLL past ~384) and of KLL's k.
SIZES = [0, 1, 2, 3, 7, 8, 9, 30, 100, 150, 199, 200, 201, 380, 400, 1_000, 3_000]
GROUPS = 100

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308, -1e308, 5e-324]
STRINGS = ["", "a", "é", "日本", "😀", "\x00", "Z z"]
SPARK_TYPES = {
    ValueType.INT: T.LongType(),
    ValueType.FLOAT: T.DoubleType(),
    ValueType.STRING: T.StringType(),
    ValueType.BOOL: T.BooleanType(),
}
#: Spark's input to hll_sketch_agg for each value type (``b``: the double's bytes, FLOAT only).
HLL_INPUT = {
    ValueType.INT: "v",
    ValueType.FLOAT: "b",
    ValueType.STRING: "v",
    ValueType.BOOL: "CAST(v AS INT)",
}
CANONICAL_NAN = struct.pack("<Q", 0x7FF8000000000000)


def _value(value_type: ValueType, rng: np.random.Generator, spread: int) -> Any:
    """A random value: drawn from ``spread`` distinct ones, plus the edge cases."""
    special = rng.random() < 0.05
    pick = int(rng.integers(0, spread))
    if value_type is ValueType.INT:
        return int(rng.choice([INT64_MIN, INT64_MAX, 0, -1])) if special else pick - spread // 2
    if value_type is ValueType.FLOAT:
        if special:
            return SPECIAL_FLOATS[int(rng.integers(len(SPECIAL_FLOATS)))]
        return (pick - spread / 2) / 8.0
    if value_type is ValueType.STRING:
        return STRINGS[int(rng.integers(len(STRINGS)))] + (str(pick) if not special else "")
    return bool(pick % 2)


def random_groups(value_type: ValueType, seed: int) -> dict[int, list[Any]]:
    """Group → its values (None for null), many duplicates; some groups of only nulls or NaNs."""
    rng = np.random.default_rng(seed)
    groups: dict[int, list[Any]] = {}
    for group in range(GROUPS):
        size = SIZES[group % len(SIZES)]
        spread = max(1, int(size * rng.choice([0.3, 1.0, 4.0])))
        null_share = rng.choice([0.0, 0.1, 1.0])
        values = [
            None if rng.random() < null_share else _value(value_type, rng, spread)
            for _ in range(size)
        ]
        if value_type is ValueType.FLOAT and group % 13 == 0:
            values = [math.nan] * size  # only NaNs: KLL's empty sketch
        groups[group] = values
    return groups


def double_bytes(value: float | None) -> bytes | None:
    """The bytes DataSketches hashes for a double: little-endian, ``-0.0`` as ``0.0``, one NaN."""
    if value is None:
        return None
    if math.isnan(value):
        return CANONICAL_NAN
    return struct.pack("<d", value + 0.0)


def our_state(agg: Aggregator[Any], values: list[Any], seed: int) -> Any:
    """The group's state, its values cut at random: first parts merged, the last updated in."""
    kept = np.empty(sum(v is not None for v in values), dtype=agg.input_type.numpy_dtype)
    kept[:] = [v for v in values if v is not None]
    times = np.zeros(len(kept), dtype=np.int64)
    rng = np.random.default_rng(seed)
    cuts = sorted(rng.integers(0, len(kept) + 1, size=int(rng.integers(0, 6))).tolist())
    bounds = list(zip([0, *cuts], [*cuts, len(kept)], strict=True))
    state = agg.init()
    for low, high in bounds[:-1]:
        state = agg.merge(agg.fold(kept[low:high], times[low:high]), state)
    low, high = bounds[-1]
    return agg.update(state, kept[low:high], times[low:high])


def registers(data: bytes) -> tuple[str, Any]:
    """An HLL sketch's content, whatever its layout: the HLL_8 array, or its sorted coupons."""
    sketch = hll_sketch.deserialize(bytes(data))
    if sketch.is_empty():
        return ("empty", None)
    assert sketch.lg_config_k == 12
    compact = sketch.serialize_compact()
    mode = compact[7] & 3  # DataSketches' preamble: mode byte, LIST 0, SET 1, HLL 2
    if mode == 2:
        assert (compact[7] >> 2) == 2  # HLL_8: no aux table, one byte per register
        return ("hll", compact[40:])
    count, start = (compact[6], 8) if mode == 0 else (int.from_bytes(compact[8:12], "little"), 12)
    coupons = struct.unpack(f"<{count}I", compact[start : start + 4 * count])
    return ("coupons", sorted(coupons))


def within_rank_bound(result: list[float], values: list[float]) -> bool:
    data = np.sort(np.array(values, dtype=np.float64))
    for rank, quantile in zip(PERCENTILES, result, strict=True):
        below = np.searchsorted(data, quantile, side="left") / len(data)
        at_or_below = np.searchsorted(data, quantile, side="right") / len(data)
        if not below - KLL_RANK_ERROR <= rank <= at_or_below + KLL_RANK_ERROR:
            return False
    return True


def spark_sketches(spark: Any, value_type: ValueType, groups: dict[int, list[Any]]) -> dict:
    """Group → Spark's row: its HLL sketch, ``hll_union(s, s)`` and estimate; KLL sketch and n."""
    rows = [
        (g, v, double_bytes(v)) if value_type is ValueType.FLOAT else (g, v)
        for g, values in groups.items()
        for v in values or [None]  # an empty group: one null row, so Spark sees the group
    ]
    fields = [T.StructField("g", T.LongType()), T.StructField("v", SPARK_TYPES[value_type])]
    if value_type is ValueType.FLOAT:
        fields.append(T.StructField("b", T.BinaryType()))
    sketch = f"hll_sketch_agg({HLL_INPUT[value_type]})"
    aggregates = [
        F.expr(sketch).alias("hll"),
        F.expr(f"hll_union({sketch}, {sketch})").alias("hll_ss"),
        F.expr(f"hll_sketch_estimate(hll_union({sketch}, {sketch}))").alias("estimate"),
    ]
    if value_type.numeric:
        kll = "kll_sketch_agg_double(CAST(v AS DOUBLE))"
        aggregates.append(F.expr(kll).alias("kll"))
        aggregates.append(F.expr(f"kll_sketch_get_n_double({kll})").alias("n"))
    frame = spark.createDataFrame(rows, T.StructType(fields)).groupBy("g").agg(*aggregates)
    return {row["g"]: row for row in frame.collect()}


@pytest.mark.parametrize("value_type", list(ValueType), ids=lambda v: v.value)
def test_sketches_equal_spark(spark: Any, value_type: ValueType) -> None:
    groups = random_groups(value_type, seed=11 + list(ValueType).index(value_type))
    theirs = spark_sketches(spark, value_type, groups)
    assert set(theirs) == set(groups)
    hll = make_aggregator("approx_unique_count", value_type)
    mismatches = _hll_mismatches(
        spark, hll, {g: our_state(hll, values, seed=g) for g, values in groups.items()}, theirs
    )
    if value_type.numeric:
        kll = make_aggregator("approx_percentile", value_type, percentiles=PERCENTILES)
        ours = {g: our_state(kll, values, seed=g) for g, values in groups.items()}
        mismatches += _kll_mismatches(spark, kll, groups, ours, theirs)
    assert not mismatches, "\n".join(map(repr, mismatches[:20]))


def _hll_mismatches(
    spark: Any, hll: Aggregator[Any], ours: dict[int, Any], theirs: dict[int, Any]
) -> list[tuple[Any, ...]]:
    mismatches: list[tuple[Any, ...]] = []
    modes = set()
    for g, state in ours.items():
        spark_row = theirs[g]
        result = hll.finalize(state)
        content = registers(hll.to_bytes(state)[1:])
        modes.add(content[0])
        spark_union = hll_sketch.deserialize(bytes(spark_row["hll_ss"]))
        checks = {
            "registers": content == registers(spark_row["hll"]),
            "estimate": result == spark_row["estimate"],
            "unrounded": order_free_estimate(state) == spark_union.get_estimate(),
        }
        mismatches += [
            ("hll", name, g, result, spark_row["estimate"]) for name, ok in checks.items() if not ok
        ]
    # Every layout was compared (two booleans never fill an HLL array).
    layouts = {"empty", "coupons", "hll"} - ({"hll"} if hll.input_type is ValueType.BOOL else set())
    assert modes == layouts
    # Spark reads our states: in a union with themselves, and with Spark's own sketch.
    frame = spark.createDataFrame(
        [(g, hll.to_bytes(state)[1:], bytes(theirs[g]["hll"])) for g, state in ours.items()],
        "g BIGINT, ours BINARY, theirs BINARY",
    ).select(
        "g",
        F.expr("hll_sketch_estimate(hll_union(ours, ours))").alias("ours_ours"),
        F.expr("hll_sketch_estimate(hll_union(ours, theirs))").alias("ours_theirs"),
    )
    for row in frame.collect():
        result = hll.finalize(ours[row["g"]])
        if not result == row["ours_ours"] == row["ours_theirs"]:
            mismatches.append(("hll", "spark reads ours", row["g"], result, tuple(row)))
    return mismatches


def _kll_mismatches(
    spark: Any,
    kll: Aggregator[Any],
    groups: dict[int, list[Any]],
    ours: dict[int, Any],
    theirs: dict[int, Any],
) -> list[tuple[Any, ...]]:
    mismatches: list[tuple[Any, ...]] = []
    ranked = {
        g: [float(v) for v in values if v is not None and not math.isnan(v)]
        for g, values in groups.items()
    }
    for g, values in ranked.items():
        n = kll_doubles_sketch.deserialize(kll.to_bytes(ours[g])[1:]).n
        if not len(values) == n == theirs[g]["n"]:
            mismatches.append(("kll", "n", g, len(values), n, theirs[g]["n"]))
        if not values and kll.finalize(ours[g]) is not None:
            mismatches.append(("kll", "empty", g, kll.finalize(ours[g])))
    # kll_sketch_get_quantile_double raises on an empty sketch: query the others only.
    filled = [g for g, values in ranked.items() if values]
    counts = [len(ranked[g]) for g in filled]
    assert len(filled) < len(ranked)  # groups of only NaN or null
    assert min(counts) <= KLL_K < max(counts)  # both sides of KLL's exact range
    # Ranks whose product with n lies just above an integer, where Java's rounding matters.
    assert any(
        math.ceil(p * n) != inclusive_natural_rank(p, n)
        for p in PERCENTILES
        for n in counts
        if n <= KLL_K
    )
    frame = spark.createDataFrame(
        [(g, bytes(theirs[g]["kll"]), kll.to_bytes(ours[g])[1:]) for g in filled],
        "g BIGINT, theirs BINARY, ours BINARY",
    ).select(
        "g",
        F.expr(f"kll_sketch_get_quantile_double(theirs, {SPARK_RANKS})").alias("theirs"),
        F.expr(f"kll_sketch_get_quantile_double(ours, {SPARK_RANKS})").alias("ours"),
    )
    for row in frame.collect():
        g = row["g"]
        result = kll.finalize(ours[g])
        if result != row["ours"]:
            mismatches.append(("kll", "spark reads ours", g, result, row["ours"]))
        if len(ranked[g]) <= KLL_K:
            if result != row["theirs"]:
                mismatches.append(("kll", "exact", g, result, row["theirs"]))
        elif not (within_rank_bound(result, ranked[g])
                  and within_rank_bound(row["theirs"], ranked[g])):
            mismatches.append(("kll", "bound", g, result, row["theirs"]))
    return mismatches
