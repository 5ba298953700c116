"""The benchmark's datasets: generated once with Spark, cached as Parquet, reused.

Rows are made by executors from ``spark.range`` and seeded ``rand``, never on the driver.
Events are ``(key bigint, ts bigint epoch ms, value double)``; queries ``(key bigint, ts
bigint)``, with duplicate ``(key, ts)`` pairs dropped so that "one row per query" is the same
thing for every contender. Times are uniform over ``days`` days from 2024-01-01 UTC and values
uniform in [0, 100).

Zipf keys use Walker's alias method: the driver builds a table of ``n_keys`` rows (the
probability ``P(k) ∝ k^-s`` of key ``k``, ``k = 1..n_keys``, split into a cut-off and an
alias), and each row picks a slot with one uniform draw and keeps the slot's key or takes its
alias with a second one, through a broadcast join on the slot. That samples the truncated
Zipf law exactly, with no clipping artefact at ``n_keys``. Key 1 is the hottest.

``--scale`` multiplies events, queries and keys alike, so the rows per key, and so the shape
of each key's work, stay the same; days stay the same.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

DAY_MS = 86_400_000
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
PARTITIONS = 4  # of spark.range: fixed, so that seeded rand gives the same rows on any machine


@dataclass(frozen=True)
class Spec:
    """One dataset at scale 1."""

    name: str
    events: int
    queries: int
    keys: int
    days: int
    zipf: float | None  # None: uniform keys

    def scaled(self, scale: float) -> Spec:
        return Spec(self.name, max(1, round(self.events * scale)),
                    max(1, round(self.queries * scale)), max(1, round(self.keys * scale)),
                    self.days, self.zipf)

    def describe(self) -> str:
        keys = "uniform keys" if self.zipf is None else f"Zipf keys, s={self.zipf}"
        return (f"{self.events:,} events, {self.queries:,} queries, {self.keys:,} keys "
                f"({keys}), {self.days} days")


SPECS = {
    "uniform": Spec("uniform", 10_000_000, 1_000_000, 100_000, 60, None),
    "skewed": Spec("skewed", 1_000_000, 100_000, 10_000, 60, 1.3),
}


@dataclass(frozen=True)
class Dataset:
    """A generated dataset: where its Parquet lives and what it holds."""

    spec: Spec
    scale: float
    events_path: Path
    queries_path: Path
    meta: dict[str, float | int]

    @property
    def label(self) -> str:
        return f"{self.spec.name} (scale {self.scale:g})"


def alias_table(n_keys: int, exponent: float) -> tuple[np.ndarray, np.ndarray]:
    """Walker/Vose alias table of ``P(k) ∝ k^-exponent``, ``k = 1..n_keys``: (cut, alias).

    Slot ``i`` (0-based) yields key ``i + 1`` when a uniform draw is below ``cut[i]`` and key
    ``alias[i] + 1`` otherwise.
    """
    weights = np.arange(1, n_keys + 1, dtype=np.float64) ** -exponent
    scaled = weights / weights.sum() * n_keys
    cut = np.ones(n_keys)
    alias = np.arange(n_keys)
    small = [i for i in range(n_keys) if scaled[i] < 1.0]
    large = [i for i in range(n_keys) if scaled[i] >= 1.0]
    while small and large:
        low, high = small.pop(), large.pop()
        cut[low], alias[low] = scaled[low], high
        scaled[high] -= 1.0 - scaled[low]
        (small if scaled[high] < 1.0 else large).append(high)
    return cut, alias  # leftovers keep cut 1: rounding error only


def _rows(spark: SparkSession, spec: Spec, n: int, seed: int, *, values: bool) -> DataFrame:
    base = spark.range(0, n, numPartitions=PARTITIONS)
    span = spec.days * DAY_MS
    ts = (F.lit(START_MS) + F.floor(F.rand(seed + 1) * span)).cast("long").alias("ts")
    extra = [(F.rand(seed + 2) * 100.0).alias("value")] if values else []
    if spec.zipf is None:
        key = (F.floor(F.rand(seed) * spec.keys) + 1).cast("long").alias("key")
        return base.select(key, ts, *extra)
    cut, alias = alias_table(spec.keys, spec.zipf)
    table = spark.createDataFrame(
        [(i, float(c), int(a) + 1) for i, (c, a) in enumerate(zip(cut, alias, strict=True))],
        "slot long, cut double, alias long",
    )
    drawn = base.select(F.floor(F.rand(seed) * spec.keys).cast("long").alias("slot"),
                        F.rand(seed + 3).alias("u"), ts, *extra)
    picked = drawn.join(F.broadcast(table), "slot")
    key = F.when(F.col("u") < F.col("cut"), F.col("slot") + 1).otherwise(F.col("alias"))
    return picked.select(key.cast("long").alias("key"), "ts", *(["value"] if values else []))


def _top_share(frame: DataFrame) -> float:
    row = frame.groupBy("key").count().agg(F.max("count").alias("top"),
                                           F.sum("count").alias("all")).first()
    return 0.0 if row is None or not row["all"] else row["top"] / row["all"]


def ensure(spark: SparkSession, name: str, scale: float, cache: Path,
           log: Callable[[str], None] = print) -> Dataset:
    """Return the dataset ``name`` at ``scale``, generating it under ``cache`` if missing."""
    spec = SPECS[name].scaled(scale)
    root = cache / f"{name}_scale{scale:g}"
    events, queries, meta_path = root / "events", root / "queries", root / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        log(f"[{name}] reusing {root} (generated in {meta['generate_s']:.1f} s)")
        return Dataset(spec, scale, events, queries, meta)
    shutil.rmtree(root, ignore_errors=True)
    log(f"[{name}] generating {spec.describe()} into {root}")
    started = time.perf_counter()
    _rows(spark, spec, spec.events, 11, values=True).write.mode("overwrite").parquet(str(events))
    _rows(spark, spec, spec.queries, 101, values=False).dropDuplicates(["key", "ts"]) \
        .write.mode("overwrite").parquet(str(queries))
    generate_s = time.perf_counter() - started
    written_events, written_queries = spark.read.parquet(str(events)), spark.read.parquet(
        str(queries))
    meta = {
        "generate_s": round(generate_s, 2),
        "events": written_events.count(),
        "queries": written_queries.count(),
        "keys": spec.keys,
        "days": spec.days,
        "top_key_share_events": round(_top_share(written_events), 6),
        "top_key_share_queries": round(_top_share(written_queries), 6),
    }
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    log(f"[{name}] generated in {generate_s:.1f} s: {meta['events']:,} events, "
        f"{meta['queries']:,} distinct queries; top key holds "
        f"{meta['top_key_share_events'] * 100:.3g}% of events, "
        f"{meta['top_key_share_queries'] * 100:.3g}% of queries")
    return Dataset(spec, scale, events, queries, meta)


def zipf_events(n: int, keys: int, seed: int, since: int, until: int) -> pa.Table:
    """``n`` Zipf-skewed events over ``[since, until)`` in time order, for the online benchmarks.

    Columns: ``user_id`` (1..``keys``, exponent 1.2), ``ts`` (epoch ms), ``amount``, ``item``.
    """
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.2, n * 3)
    users = ranks[ranks <= keys][:n]
    return pa.table({
        "user_id": users.astype(np.int64),
        "ts": np.sort(rng.integers(since, until, len(users))).astype(np.int64),
        "amount": np.round(rng.exponential(30.0, len(users)), 2),
        "item": rng.integers(0, 5_000, len(users)).astype(np.int64),
    })
