"""Decayed ops equal direct summation, on every executor and online.

The oracle here is independent of the engine and of the SQL oracle: for each query at q it
takes the window's events by the contract's bounds (written out below, not timetile's),
weighs each by ``2^(−(q − ts)/h)`` in long double and sums the products with ``math.fsum``;
``decayed_avg`` over lifetime windows is also checked against ``pandas.ewm(times=…,
halflife=…)`` (to pandas' own precision, see its test). Results must agree to 1e-12 relative
(of ``Σ |v · w|`` for the sums, whose terms may cancel). Two parts: random skewed events (nulls,
NaN, ±inf, ties, duplicates, empty windows, a hot key) at a one-hour half-life, and ten years
of events at a one-minute half-life, where nearly every weight underflows a double.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.store.kv import open_store
from timetile.store.tiles import put_events
from timetile.testing import random_events, random_queries, to_spark

pytestmark = pytest.mark.spark

TOLERANCE = 1e-12
WINDOWS: list[tt.Window | str] = ["1d", tt.Window("1d", hop="1h"),
                                  tt.Window("2d", hop="6h", kind="hopping")]
OPS = ("decayed_count", "decayed_sum", "decayed_avg")
DECADE_START = "2014-01-01"
#: The last day of the ten years: uploaded as of the day before, then streamed.
LAST_DAY = "2023-12-31"


def decade_events(seed: int) -> pa.Table:
    """Ten years of events of 4 keys, most far apart, and bursts of a few minutes at the end."""
    rng = np.random.default_rng(seed)
    start, end = date_to_ms(DECADE_START), date_to_ms(LAST_DAY) + DAY_MS
    spread = rng.integers(start, end, 3_000)
    burst = end - rng.integers(1, 90 * MINUTE_MS, 600)  # the last hour and a half
    times = np.concatenate([spread, burst])
    users = rng.integers(1, 5, len(times))
    amounts = rng.integers(-400, 400, len(times)) / 8.0
    return pa.table({"user_id": pa.array(users, pa.int64()), "ts": pa.array(times, pa.int64()),
                     "amount": pa.array(amounts, pa.float64())})


def decade_queries() -> pa.Table:
    end = date_to_ms(LAST_DAY) + DAY_MS
    times = [end - offset for offset in (1, 7 * MINUTE_MS, 45 * MINUTE_MS, 20 * HOUR_MS)]
    rows = [(user, t) for user in (1, 2, 3, 4, 9) for t in times]
    return pa.table({"user_id": pa.array([u for u, _ in rows], pa.int64()),
                     "ts": pa.array([t for _, t in rows], pa.int64())})


def bounds(window: tt.Window | None, q: int) -> tuple[float, float]:
    """The contract's ``[start, end)`` of a window at q, written out."""
    if window is None:
        return -math.inf, q
    length, hop = window.length_ms, window.hop_ms
    if hop is None:
        return q - length, q
    start = (q - length) - (q - length) % hop
    return start, (q if window.kind == "sawtooth" else q - q % hop)


def direct(op: str, values: list[float], times: list[int], q: int, half_life: int
           ) -> tuple[float | None, float]:
    """The op at q by direct summation, and the scale its error is measured against."""
    if not values:
        return (0.0 if op == "decayed_count" else None), 0.0
    numbers = np.array(values, dtype=np.float64)
    if op != "decayed_count" and not np.isfinite(numbers).all():  # sum's rules
        nan, positive, negative = (np.isnan(numbers).any(), (numbers == math.inf).any(),
                                   (numbers == -math.inf).any())
        return (math.nan if nan or (positive and negative) else
                math.inf if positive else -math.inf), 0.0
    newest = q if op != "decayed_avg" else max(times)  # the avg's factor at q cancels
    ages = np.array([newest - t for t in times], dtype=np.longdouble)
    weights = np.exp2(-ages / np.longdouble(half_life))
    if op == "decayed_count":
        total = float(np.sum(weights))
        return total, total
    products = numbers.astype(np.longdouble) * weights
    total = math.fsum(float(p) for p in products)
    scale = math.fsum(float(abs(p)) for p in products)
    if op == "decayed_sum":
        return total, scale
    weight = float(np.sum(weights))
    return total / weight, scale / weight


def agrees(ours: Any, truth: float | None, scale: float) -> bool:
    if truth is None or ours is None:
        return ours is None and truth is None
    if math.isnan(truth) or math.isinf(truth):
        return repr(ours) == repr(truth)
    return abs(ours - truth) <= TOLERANCE * scale


def aggregations(half_life: str, windows: list[tt.Window | str]) -> list[tt.Aggregation]:
    made = []
    for op in OPS:
        column = "item" if op == "decayed_count" else "amount"
        made.append(tt.Aggregation(column, op, half_life=half_life, windows=windows))
        made.append(tt.Aggregation(column, op, half_life=half_life))  # lifetime
    return made


@pytest.fixture(scope="module")
def world(spark: Any) -> dict[str, Any]:
    """Both parts' events and queries, the Joins, and the direct sums of every output."""
    random = random_events(400, 8, seed=61, days=4)
    queries = random_queries(random, 80, seed=62, window_lengths=("1d", "6h"))
    decade = decade_events(63)
    recent = tt.GroupBy("recent", tt.EventSource(to_spark(spark, random)), ["user_id"],
                        aggregations("1h", WINDOWS))
    years = tt.GroupBy("years", tt.EventSource(to_spark(spark, decade)), ["user_id"], [
        tt.Aggregation("amount", op, half_life="1m", windows=["30d"]) for op in OPS
    ] + [tt.Aggregation("amount", op, half_life="1m") for op in OPS])
    joins = {"recent": tt.Join("decayed", tt.EventSource(to_spark(spark, queries)), [recent]),
             "years": tt.Join("decade", tt.EventSource(to_spark(spark, decade_queries())),
                              [years])}
    truth = {"recent": expected(recent, random, queries), "years":
             expected(years, decade, decade_queries())}
    return {"joins": joins, "truth": truth, "decade": decade, "years": years}


def expected(group_by: tt.GroupBy, events: pa.Table, queries: pa.Table
             ) -> dict[tuple[Any, Any], dict[str, tuple[float | None, float]]]:
    """Per (key, q): each output's direct value and error scale."""
    by_key: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in events.to_pylist():
        if row["user_id"] is not None and row["ts"] is not None:
            by_key[row["user_id"]].append(row)
    out: dict[tuple[Any, Any], dict[str, tuple[float | None, float]]] = {}
    for query in queries.to_pylist():
        key, q = query["user_id"], query["ts"]
        if q is None or (key, q) in out:
            continue
        answers = out[(key, q)] = {}
        for aggregation in group_by.aggregations or ():
            for name, window, _ in aggregation.outputs(group_by.name):
                low, high = bounds(window, q)
                rows = [row for row in by_key.get(key, [])
                        if low <= row["ts"] < high and row[aggregation.column] is not None]
                values = [1.0 if aggregation.op == "decayed_count" else row[aggregation.column]
                          for row in rows]
                answers[name] = direct(aggregation.op, values, [row["ts"] for row in rows], q,
                                       aggregation.half_life_ms or 0)
    return out


def mismatches(rows: list[dict[str, Any]], truth: dict[tuple[Any, Any], Any]) -> list[Any]:
    bad = []
    for row in rows:
        if row["ts"] is None:
            continue
        for name, (value, scale) in truth[(row["user_id"], row["ts"])].items():
            if not agrees(row[name], value, scale):
                bad.append((name, row["user_id"], row["ts"], row[name], value))
    return bad


@pytest.mark.parametrize("executor", ["tiled", "interval_tree", "reference", "auto"])
def test_every_executor_equals_direct_summation(spark: Any, world: dict[str, Any],
                                                executor: str) -> None:
    for part, join in world["joins"].items():
        rows = [row.asDict() for row in tt.backfill(join, spark, executor=executor).collect()]
        assert rows
        bad = mismatches(rows, world["truth"][part])
        assert not bad, f"{part}: {len(bad)} mismatches, e.g. {bad[:5]}"


def test_the_decade_part_is_mostly_underflow_yet_its_average_holds(world: dict[str, Any]) -> None:
    """Where every weight at q underflows, the sum is 0.0 and the average still the mean."""
    answers = world["truth"]["years"].values()
    sums = [answer["years_amount_decayed_sum_hl1m"][0] for answer in answers]
    averages = [answer["years_amount_decayed_avg_hl1m"][0] for answer in answers]
    assert 0.0 in sums  # 20 hours after a key's last event: 2^-1200 is below every double
    assert all(average is not None and math.isfinite(average) for average, total in
               zip(averages, sums, strict=True) if total == 0.0)


def test_lifetime_average_equals_pandas_ewm(world: dict[str, Any]) -> None:
    """pandas' time-weighted EWM mean at a key's last event before q is the direct sums'
    lifetime decayed average at q, which every executor equals to 1e-12 (the factor of q
    cancels). To 1e-8 only: pandas turns nanosecond
    times into doubles, whose steps near 2023 are 256 ns, which moves a weight by up to
    ``256 ns / 1 min · ln 2``, about 3e-9, relative: measured against the mean of the
    values' magnitudes, as the direct sums are (which hold to 1e-12)."""
    decade = world["decade"].to_pandas().sort_values("ts", kind="stable")
    checked = 0
    for (key, q), answers in world["truth"]["years"].items():
        events = decade[(decade.user_id == key) & (decade.ts < q)]
        summed, scale = answers["years_amount_decayed_avg_hl1m"]
        if events.empty:
            assert summed is None
            continue
        ewm = events.amount.ewm(halflife=pd.Timedelta(minutes=1),
                                times=pd.to_datetime(events.ts, unit="ms")).mean()
        assert summed is not None
        assert abs(summed - float(ewm.iloc[-1])) <= 1e-8 * scale, (key, q)
        checked += 1
    assert checked >= 12


def test_fetch_at_q_equals_the_backfill_at_q(spark: Any, world: dict[str, Any],
                                             tmp_path: Any) -> None:
    """Upload the ten years as of the day before the last, stream the last day, fetch."""
    years, decade = world["years"], world["decade"]
    last_day = date_to_ms(LAST_DAY)
    store_uri = f"lmdb://{tmp_path / 'store'}"
    source = tt.EventSource(to_spark(spark, decade.filter(
        pa.compute.less(decade.column("ts"), last_day))))
    uploaded = tt.GroupBy(years.name, source, years.keys, years.aggregations)
    upload(uploaded, spark, "2023-12-30", store_uri)
    streamed = decade.filter(pa.compute.greater_equal(decade.column("ts"), last_day))
    join = world["joins"]["years"]
    with open_store(store_uri) as store:
        put_events(store, years, streamed, "last-day")
        fetcher = Fetcher(join, store)
        rows = []
        for (key, q) in world["truth"]["years"]:
            (result,) = fetcher.fetch([{"user_id": key}], at=q)
            assert result.stale == []
            rows.append({"user_id": key, "ts": q, **result.features})
    bad = mismatches(rows, world["truth"]["years"])
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"
