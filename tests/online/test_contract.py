"""The online contract: upload day D, stream D+1 up to t, and every fetch at t' <= t equals
``tt.backfill`` at (key, t'), for every op and window kind, on both stores (DESIGN §5).

Exact ops compare exactly. ``approx_percentile`` is a KLL sketch, randomized above 200
values, and merging the record's parts online cuts the input differently from the backfill:
its answers are checked within the oracle's rank bounds instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import timetile as tt
from timetile.core import series_folds
from timetile.core.aggregators.sketches import KLL_RANK_ERROR
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher, NotUploadedError
from timetile.store.kv import open_store
from timetile.store.layout import encode_key, tile_table
from timetile.store.tiles import put_events
from timetile.testing import (
    percentile_rank_bounds,
    percentiles_within,
    random_events,
    same_value,
    to_spark,
)

DS = "2024-01-02"
DAY_END = date_to_ms(DS) + DAY_MS
STREAMED_UNTIL = DAY_END + 20 * HOUR_MS
WINDOWS = ["1h", "1d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="6h", kind="hopping")]
PARAMS: dict[str, dict[str, Any]] = {
    "first_k": {"k": 2}, "last_k": {"k": 3}, "top_k": {"k": 2}, "bottom_k": {"k": 2},
    "approx_percentile": {"percentiles": [0.1, 0.5, 0.9]},
    **{op: {"half_life": "6h"} for op in ("decayed_count", "decayed_sum", "decayed_avg")},
}
COLUMNS = {
    "amount": ["sum", "avg", "min", "max", "variance", "stddev", "skew", "kurtosis",
               "approx_percentile", "top_k", "decayed_sum", "decayed_avg"],
    "quantity": ["count", "sum", "first", "last", "bottom_k", "decayed_sum"],
    "item": ["last_k", "first_k", "unique_count", "approx_unique_count", "histogram",
             "decayed_count"],
    "flag": ["count", "last"],
}


def aggregations() -> list[tt.Aggregation]:
    made = []
    for column, ops in COLUMNS.items():
        for op in ops:
            made.append(tt.Aggregation(column, op, windows=WINDOWS, **PARAMS.get(op, {})))
            made.append(tt.Aggregation(column, op, **PARAMS.get(op, {})))
    made.append(tt.Aggregation("amount", "sum", windows=["1d"], buckets=["item"]))
    return made


@dataclass(frozen=True)
class Contract:
    """The events, the ones streamed after the upload, and the backfill at every fetch."""

    users: tt.GroupBy
    streamed: pa.Table
    late: pa.Table
    keys: list[int]
    at: list[int]
    join: tt.Join
    truth: dict[tuple[int, int], Any]
    bounds: dict[tuple[int, int], Any]


@pytest.fixture(scope="module")
def contract(spark: Any) -> Contract:
    """What both stores' test compares with: the backfill and the oracle, computed once."""
    table = random_events(700, 12, seed=51, start="2024-01-01", days=3)
    events = to_spark(spark, table)
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"], aggregations())
    times = pc.fill_null(table.column("ts"), -1)
    streamed = table.filter(pc.and_(pc.greater_equal(times, DAY_END),
                                    pc.less(times, STREAMED_UNTIL)))
    late = table.filter(pc.and_(pc.greater_equal(times, 0), pc.less(times, DAY_END))).slice(0, 5)
    rng = np.random.default_rng(52)
    stamps = streamed.column("ts").to_pylist()
    at = sorted({DAY_END, STREAMED_UNTIL, DAY_END + 6 * HOUR_MS, *stamps[:6],
                 *(int(t) for t in rng.integers(DAY_END, STREAMED_UNTIL, 8))})
    keys = [1, 2, 3, 7, 12, 99]  # 99 has no event at all
    queries = spark.createDataFrame([(k, t) for k in keys for t in at], "user_id long, ts long")
    join = tt.Join("online", tt.EventSource(queries), [users])
    truth = {(row["user_id"], row["ts"]): row for row in tt.backfill(join, spark).collect()}
    bounds = {(row["user_id"], row["ts"]): row
              for row in percentile_rank_bounds(join, spark, KLL_RANK_ERROR).collect()}
    return Contract(users, streamed, late, keys, at, join, truth, bounds)


def test_fetch_equals_backfill_at_every_time(spark: Any, store_uri: str, contract: Contract,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    users, streamed, late, keys = contract.users, contract.streamed, contract.late, contract.keys
    report = upload(users, spark, DS, store_uri)
    assert report.written["users"][0] > 0
    with open_store(store_uri) as store:
        half = streamed.num_rows // 2
        first = put_events(store, users, pa.concat_tables([streamed.slice(0, half), late]), "b1")
        assert first.late == late.num_rows
        put_events(store, users, streamed.slice(half), "b2")
        put_events(store, users, streamed.slice(half), "b2")  # a replay: no double count
        bad = []
        # As fetches fold these short runs, then with checkpoints every few events, so that
        # kept states stand in for most of each run, as they do for a hot key's.
        for min_block, scale in ((series_folds.MIN_BLOCK, series_folds.BLOCK_SCALE), (1, 1)):
            monkeypatch.setattr(series_folds, "MIN_BLOCK", min_block)
            monkeypatch.setattr(series_folds, "BLOCK_SCALE", scale)
            fetcher = Fetcher(contract.join, store)
            for moment in contract.at:
                for key, result in zip(keys, fetcher.fetch([{"user_id": k} for k in keys],
                                                           at=moment), strict=True):
                    assert result.stale == []
                    expected = contract.truth[(key, moment)]
                    bound = contract.bounds[(key, moment)]
                    for name, value in result.features.items():
                        ok = (percentiles_within(value, bound[name])
                              if "_approx_percentile" in name
                              else same_value(value, expected[name]))
                        if not ok:
                            bad.append((min_block, name, key, moment, value, expected[name]))
        assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def test_missing_keys_late_uploads_and_bad_rows(spark: Any, store_uri: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    events = spark.createDataFrame([(1, DAY_END - HOUR_MS, 2.0)],
                                   "user_id long, ts long, amount double")
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "count", windows=["1d"]), tt.Aggregation("amount", "max")])
    queries = spark.createDataFrame([(1, 0)], "user_id long, ts long")
    join = tt.Join("online", tt.EventSource(queries), [users])
    with open_store(store_uri) as store:
        with pytest.raises(NotUploadedError, match="timetile upload"):
            Fetcher(join, store)
        upload(users, spark, DS, store_uri)
        fetcher = Fetcher(join, store)
        missing, present = fetcher.fetch([{"user_id": 5}, {"user_id": "1"}], at=DAY_END)
        assert missing.features == {"users_amount_count_1d": 0, "users_amount_max": None}
        assert present.features == {"users_amount_count_1d": 1, "users_amount_max": 2.0}
        late = fetcher.fetch([{"user_id": 1}], at=DAY_END + 2 * DAY_MS)[0]
        assert late.stale == ["users"]
        with pytest.raises(tt.DefinitionError, match=r"rows\[0\]: lacks the key column user_id"):
            fetcher.fetch([{"id": 1}])
        with pytest.raises(tt.DefinitionError, match=r"rows\[0\]\.user_id: 'x' cannot be read"):
            fetcher.fetch([{"user_id": "x"}])
        for lossy in (1.7, True):
            with pytest.raises(tt.DefinitionError, match="user_id"):
                fetcher.fetch([{"user_id": lossy}])
        with pytest.raises(tt.DefinitionError, match=r"rows: dict is not a list of rows"):
            fetcher.fetch({"user_id": 1})  # type: ignore[arg-type]
        with pytest.raises(tt.DefinitionError, match=r"rows\[1\]: str is not a row\. Fix: "
                           r"pass a mapping of the key columns, e\.g\. \{'user_id': …\}"):
            fetcher.fetch([{"user_id": 1}, "user_id"])  # type: ignore[list-item]
        for unreadable, why in (("\u0663", "cannot be read as int"),  # an Arabic-Indic 3
                                (10**30, "is beyond a 64-bit int")):
            with pytest.raises(tt.DefinitionError, match=rf"rows\[0\]\.user_id: .*{why}"):
                fetcher.fetch([{"user_id": unreadable}])
        with pytest.raises(tt.DefinitionError, match=r"at: 10000000000000000000 is not epoch "
                           r"milliseconds in int64"):
            fetcher.fetch([{"user_id": 1}], at=10**19)
        with pytest.raises(tt.DefinitionError, match=r"at: '2024-01-03' is not epoch millis"):
            fetcher.fetch([{"user_id": 1}], at="2024-01-03")  # type: ignore[arg-type]
        assert fetcher.fetch([{"user_id": 1}], at=np.int64(DAY_END))[0].features == \
            present.features
        derived = tt.Join("online", tt.EventSource(queries), [users], derivations={
            "users_amount_max": "coalesce(users_amount_max, 0)"})
        with caplog.at_level(logging.WARNING, logger="timetile"):
            assert Fetcher(derived, store).fetch([{"user_id": 5}], at=DAY_END)[0].features == \
                missing.features
        assert "Join 'online' has derivations, which run offline only" in caplog.text
        assert "users_amount_max are derived offline under a feature's own name" in caplog.text


def test_uploads_in_flight_changed_definitions_and_unfinished_days(spark: Any,
                                                                   store_uri: str) -> None:
    events = spark.createDataFrame(
        [(1, DAY_END - HOUR_MS, 2.0), (1, DAY_END + HOUR_MS, 3.0)],
        "user_id long, ts long, amount double")
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"],
                       [tt.Aggregation("amount", "count", windows=["7d"])])
    join = tt.Join("online", tt.EventSource(events), [users])
    upload(users, spark, DS, store_uri)
    with open_store(store_uri) as store:
        fetcher = Fetcher(join, store)  # reads the metadata of DS
        upload(users, spark, "2024-01-03", store_uri)  # the next day's records land
        at = DAY_END + DAY_MS + HOUR_MS
        # records newer than the fetcher's metadata answer by themselves
        assert fetcher.fetch([{"user_id": 1}], at=at)[0].features == {"users_amount_count_7d": 2}
        wider = tt.GroupBy("users", tt.EventSource(events), ["user_id"], [
            tt.Aggregation("amount", "count", windows=["7d", "30d"])])
        with pytest.raises(NotUploadedError, match="changed since its upload"):
            Fetcher(tt.Join("online", tt.EventSource(events), [wider]), store)
    with pytest.raises(tt.DefinitionError, match="has not ended yet"):
        upload(users, spark, "2999-01-01", store_uri)


def test_uploads_expire_the_tiles_their_records_hold(spark: Any, store_uri: str) -> None:
    events = spark.createDataFrame([(1, DAY_END + HOUR_MS, 2.0)],
                                   "user_id long, ts long, amount double")
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"],
                       [tt.Aggregation("amount", "count", windows=["7d"])])
    join = tt.Join("online", tt.EventSource(events), [users])
    # key 2's event reaches only the stream: no upload ever rewrites its record, so a fetcher
    # reads it from the tiles since the day end of the metadata it holds
    streamed = pa.table({"user_id": [2], "ts": [DAY_END + HOUR_MS], "amount": [2.0]})
    upload(users, spark, DS, store_uri)
    with open_store(store_uri) as store:
        put_events(store, users, streamed, "b1")
        behind = Fetcher(join, store)  # keeps the metadata of DS until refreshed

        def tiles() -> int:
            return len(store.get_tiles(tile_table("users"), [encode_key([2], ["int"])],
                                       -(1 << 62), 1 << 62)[0])

        def count(fetcher: Fetcher) -> int:
            result = fetcher.fetch([{"user_id": 2}], at=DAY_END + 2 * DAY_MS + HOUR_MS)[0]
            return int(result.features["users_amount_count_7d"])

        upload(users, spark, "2024-01-04", store_uri)  # a day skipped: the tiles since the
        assert tiles() == 1                            # previous upload's day end stay
        assert count(behind) == 1
        with pytest.raises(tt.DefinitionError, match=r"ds: the store holds it as of 2024-01-05"):
            upload(users, spark, DS, store_uri)  # older than the stored upload
        upload(users, spark, "2024-01-05", store_uri)
        assert tiles() == 0
        assert count(Fetcher(join, store)) == 0  # as offline, whose source never had it
