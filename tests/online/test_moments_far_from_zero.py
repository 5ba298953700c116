"""Far from zero, every executor and the online store give the exact moments.

Values 1e9 + exponential(3): a mean rounded to one double is off by about 1e-7 there, and
``skew`` and ``kurtosis`` feel that at first order (Spark's own ``skewness`` is off by about
2e-8, relative). The sweep, the tiles and the interval tree, and a fetch from each store after
an upload of day D and a stream of D + 1, must all be within 1e-9 of exact rational
arithmetic over each window's values, for sliding, sawtooth, hopping and lifetime windows.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.core.windows import window_interval
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.store.kv import open_store
from timetile.store.tiles import put_events
from timetile.testing import random_events, to_spark

DS = "2024-01-02"
DAY_END = date_to_ms(DS) + DAY_MS
STREAMED_UNTIL = DAY_END + 20 * HOUR_MS
WINDOWS: list[str | tt.Window] = ["1d", tt.Window("1d", hop="1h"),
                                  tt.Window("1d", hop="6h", kind="hopping")]
OPS = ("variance", "skew", "kurtosis")
KEYS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def events() -> pa.Table:
    """Four Zipf-skewed users over three days; ``far`` is 1e9 + exponential(3), or null."""
    table = random_events(600, len(KEYS), seed=61, start="2024-01-01", days=3)
    rng = np.random.default_rng(62)
    far = pa.array(1e9 + rng.exponential(3.0, table.num_rows),
                   mask=pc.is_null(table.column("amount")).to_numpy(zero_copy_only=False))
    return table.append_column("far", far)


def group_by(spark: Any, table: pa.Table) -> tt.GroupBy:
    aggregations = [tt.Aggregation("far", op, windows=WINDOWS) for op in OPS]
    aggregations += [tt.Aggregation("far", op) for op in OPS]  # lifetime
    return tt.GroupBy("far", tt.EventSource(to_spark(spark, table)), ["user_id"], aggregations)


def exact(table: pa.Table) -> Any:
    """Return ``expected(op, key, start, end)``: the op over ``far`` in exact arithmetic."""
    rows = [(row["user_id"], row["ts"], row["far"]) for row in table.to_pylist()
            if row["ts"] is not None and row["far"] is not None]

    @cache
    def moments(key: int, start: int, end: int) -> tuple[int, float, float, float]:
        values = [v for user, ts, v in rows if user == key and start <= ts < end]
        if len(values) < 2:
            return len(values), 0.0, 0.0, 0.0
        exact_values = [Fraction(v) for v in values]
        mean = sum(exact_values, Fraction(0)) / len(values)
        m2, m3, m4 = (sum(((v - mean) ** p for v in exact_values), Fraction(0))
                      for p in (2, 3, 4))
        return (len(values), float(m2), float(m3 / m2) / math.sqrt(float(m2)),
                float(len(values) * m4 / (m2 * m2)))

    def expected(op: str, key: int, start: int, end: int) -> float | None:
        n, m2, m3_over, m4_over = moments(key, start, end)
        if op == "variance":
            return None if n < 2 else m2 / (n - 1)
        if n < 2 or m2 == 0.0:
            return None
        return m3_over * math.sqrt(n) if op == "skew" else m4_over - 3.0

    return expected


def features(window: str | tt.Window | None) -> list[tuple[str, tt.Window | None]]:
    """The output column of each op over ``window`` (None: lifetime), with the window."""
    if window is None:
        return [(f"far_far_{op}", None) for op in OPS]
    parsed = tt.Window.parse(window)
    return [(f"far_far_{op}_{parsed.name}", parsed) for op in OPS]


def mismatches(rows: list[tuple[int, int, dict[str, Any]]], expected: Any) -> list[Any]:
    """The (column, key, time, ours, exact) of every value off by more than 1e-9."""
    bad = []
    for key, at, values in rows:
        for window in [*WINDOWS, None]:
            for (column, parsed), op in zip(features(window), OPS, strict=True):
                start, end = (window_interval(at, parsed.window_kind, parsed.length_ms,
                                              parsed.hop_ms) if parsed else (-(2**62), at))
                want, got = expected(op, key, start, end), values[column]
                ok = (got is None) == (want is None) and (
                    want is None or math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9))
                if not ok:
                    bad.append((column, key, at, got, want))
    return bad


def query_times() -> list[int]:
    rng = np.random.default_rng(63)
    return sorted({DAY_END, STREAMED_UNTIL,
                   *(int(t) for t in rng.integers(DAY_END - DAY_MS, STREAMED_UNTIL, 10))})


@pytest.mark.parametrize("executor", ["sweep", "tiled", "interval_tree"])
def test_every_executor_is_exact_far_from_zero(spark: Any, events: pa.Table,
                                               executor: str) -> None:
    queries = spark.createDataFrame([(k, t) for k in KEYS for t in query_times()],
                                    "user_id long, ts long")
    join = tt.Join("far", tt.EventSource(queries), [group_by(spark, events)])
    rows = [(row["user_id"], row["ts"], row.asDict())
            for row in tt.backfill(join, spark, executor=executor).collect()]
    assert len(rows) == len(KEYS) * len(query_times())
    bad = mismatches(rows, exact(events))
    assert not bad, f"{len(bad)} off by more than 1e-9, e.g. {bad[:5]}"


def test_fetches_are_exact_far_from_zero(spark: Any, events: pa.Table, store_uri: str) -> None:
    users = group_by(spark, events)
    upload(users, spark, DS, store_uri)
    times = pc.fill_null(events.column("ts"), -1)
    streamed = events.filter(pc.and_(pc.greater_equal(times, DAY_END),
                                     pc.less(times, STREAMED_UNTIL)))
    with open_store(store_uri) as store:
        put_events(store, users, streamed.slice(0, streamed.num_rows // 2), "b1")
        put_events(store, users, streamed.slice(streamed.num_rows // 2), "b2")
        queries = spark.createDataFrame([(1, 0)], "user_id long, ts long")
        fetcher = Fetcher(tt.Join("far", tt.EventSource(queries), [users]), store)
        rows = []
        for at in query_times():
            if at < DAY_END:
                continue  # before the upload's day ends: the store does not answer it
            results = fetcher.fetch([{"user_id": key} for key in KEYS], at=at)
            rows += [(key, at, result.features)
                     for key, result in zip(KEYS, results, strict=True)]
    assert rows
    bad = mismatches(rows, exact(events))
    assert not bad, f"{len(bad)} off by more than 1e-9, e.g. {bad[:5]}"
