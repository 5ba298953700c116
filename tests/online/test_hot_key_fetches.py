"""A hot key's fetches merge kept states (``timetile.core.series_folds``) and stay exact.

One key holds most of the events, so its runs of edge and streamed events are long enough
for the fetcher to keep their states. Its fetches, at times in any order, as the stream's
batches land and after ``refresh``, equal the backfill; and a refresh keeps the states kept
(their ops are the same), where it used to build them again beside the old ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.online.fetcher import Fetcher
from timetile.online.store import open_store
from timetile.online.tiles import put_events
from timetile.online.upload import upload
from timetile.testing import random_events, same_value, to_spark

pytestmark = pytest.mark.spark

DS = "2024-01-03"
DAY_END = date_to_ms(DS) + DAY_MS
WINDOWS: list[str | tt.Window] = [
    "1h", "1d", "3d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="7h", kind="hopping")]


def test_a_hot_keys_fetches_equal_the_backfill_as_batches_land(spark: Any,
                                                                store_uri: str) -> None:
    table = random_events(6_000, 6, seed=71, start="2024-01-01", days=4)
    events = to_spark(spark, table)
    aggregations = [tt.Aggregation("amount", op, windows=WINDOWS)
                    for op in ("count", "sum", "max", "variance")]
    aggregations += [tt.Aggregation("item", "last_k", k=3, windows=WINDOWS),
                     tt.Aggregation("item", "approx_unique_count", windows=WINDOWS),
                     tt.Aggregation("amount", "sum")]
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"], aggregations)
    upload(users, spark, DS, store_uri)
    times = pc.fill_null(table.column("ts"), -1)
    batches = [table.filter(pc.and_(pc.greater_equal(times, DAY_END + begin * HOUR_MS),
                                    pc.less(times, DAY_END + end * HOUR_MS)))
               for begin, end in ((0, 9), (9, 15), (15, 24))]
    rng = np.random.default_rng(72)
    moments = [sorted(int(t) for t in rng.integers(DAY_END, DAY_END + end * HOUR_MS, 12))
               for end in (9, 15, 24)]
    at = sorted({t for chunk in moments for t in chunk})
    keys = [1, 2]  # 1 holds about 40% of the events: runs of hundreds
    queries = spark.createDataFrame([(k, t) for k in keys for t in at], "user_id long, ts long")
    join = tt.Join("hot", tt.EventSource(queries), [users])
    truth = {(row["user_id"], row["ts"]): row for row in tt.backfill(join, spark).collect()}
    bad = []
    with open_store(store_uri) as store:
        fetcher = Fetcher(join, store)
        for index, (batch, chunk) in enumerate(zip(batches, moments, strict=True)):
            put_events(store, users, batch, f"b{index}")
            for moment in rng.permutation(chunk):  # later times first, then earlier
                for key in keys:
                    [result] = fetcher.fetch([{"user_id": key}], at=int(moment))
                    expected = truth[(key, int(moment))]
                    bad += [(name, key, int(moment), value, expected[name])
                            for name, value in result.features.items()
                            if not same_value(value, expected[name])]
            kept = fetcher.kept_states
            assert kept > 0, "the hot key's runs keep states"
            fetcher.refresh()
            for moment in chunk:
                fetcher.fetch([{"user_id": key} for key in keys], at=moment)
            assert fetcher.kept_states == kept, "a refresh keeps the states kept"
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"
