"""Each upload's generation: a record an earlier upload left, for a key the served upload
found no row of, reads as empty, the same day uploaded again included.

Before generations, a day uploaded again kept serving the earlier upload's record of a key
its source no longer held (a changed ``where``, a deleted user), until the next day's upload.
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

import timetile as tt
from timetile.core.aggregators.codec import decode, encode
from timetile.core.batch_record import answers_for, read_record
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import _next_generation, upload
from timetile.online.fetcher import Fetcher
from timetile.store.entity_records import EntityRecord
from timetile.store.kv import open_store
from timetile.store.layout import (
    META_TABLE,
    GroupByMeta,
    batch_table,
    encode_key,
    feature_signature,
    part_signatures,
)

DS = "2024-01-02"
DAY_END = date_to_ms(DS) + DAY_MS


def _generation(store_uri: str, name: str) -> int:
    with open_store(store_uri) as store:
        data = store.multi_get(META_TABLE, [name.encode()])[0]
    assert data is not None
    return GroupByMeta.from_bytes(data).generation


def test_a_day_uploaded_again_serves_no_key_it_no_longer_finds(spark: Any,
                                                               store_uri: str) -> None:
    events = spark.createDataFrame([(user, DAY_END - HOUR_MS, float(user)) for user in (1, 2, 3)],
                                   "user_id long, ts long, amount double")
    aggregations = [tt.Aggregation("amount", "sum", windows=["1d"]),
                    tt.Aggregation("amount", "count")]

    def sums(where: str | None) -> tt.GroupBy:  # the same definition over other rows
        rows = events if where is None else events.where(where)
        return tt.GroupBy("g", tt.EventSource(rows), ["user_id"], aggregations)

    join = tt.Join("j", tt.EventSource(events), [sums(None)])
    upload(sums(None), spark, DS, store_uri)
    keys = [{"user_id": user} for user in (1, 2, 3)]
    with open_store(store_uri) as store:
        fetcher = Fetcher(join, store)
        assert [r.features["g_amount_sum_1d"] for r in fetcher.fetch(keys, at=DAY_END)] == [
            1.0, 2.0, 3.0]
        upload(sums("user_id != 3"), spark, DS, store_uri)
        # until it re-reads the metadata, the fetcher serves the upload it knows
        assert fetcher.fetch(keys, at=DAY_END)[2].features["g_amount_sum_1d"] == 3.0
        fetcher.refresh()
        again = fetcher.fetch(keys, at=DAY_END)
    assert [r.features for r in again] == [
        {"g_amount_sum_1d": 1.0, "g_amount_count": 1},
        {"g_amount_sum_1d": 2.0, "g_amount_count": 1},
        {"g_amount_sum_1d": None, "g_amount_count": 0}]
    assert _generation(store_uri, "g") == 2


def test_records_a_failed_upload_left_are_older_than_its_retry(spark: Any,
                                                              store_uri: str) -> None:
    """An upload that dies after writing some records has taken its generation: its retry
    takes a higher one, so the dead upload's record of a key the retry does not find (the
    source changed in between) reads as empty, not as the served upload's."""
    events = spark.createDataFrame([(1, DAY_END - HOUR_MS, 1.0), (3, DAY_END - HOUR_MS, 3.0)],
                                   "user_id long, ts long, amount double")
    aggregations = [tt.Aggregation("amount", "sum")]
    whole = tt.GroupBy("g", tt.EventSource(events), ["user_id"], aggregations)
    upload(whole, spark, DS, store_uri)
    key = encode_key([3], ["int"])
    with open_store(store_uri) as store:
        # the dead upload: it took the next generation and rewrote key 3's record
        dead = _next_generation(store_uri, "g", None)
        assert dead == 2
        fields = list(decode(store.multi_get(batch_table("g"), [key])[0] or b""))
        fields[3] = dead  # (version, day_end, slack, generation, ...)
        store.multi_put(batch_table("g"), [(key, encode(tuple(fields)))])
        upload(tt.GroupBy("g", tt.EventSource(events.where("user_id = 1")), ["user_id"],
                          aggregations), spark, DS, store_uri)
        assert _generation(store_uri, "g") == 3
        fetched = Fetcher(tt.Join("j", tt.EventSource(events), [whole]), store).fetch(
            [{"user_id": 1}, {"user_id": 3}], at=DAY_END)
    assert [r.features["g_amount_sum"] for r in fetched] == [1.0, None]


def test_an_entity_day_uploaded_again_holds_no_row_of_a_key_gone_from_its_snapshot(
        spark: Any, store_uri: str) -> None:
    schema = "ds string, user_id long, stars double"
    mutations = spark.createDataFrame([], "user_id long, stars double, mutation_ts long, "
                                      "is_before boolean")

    def users(rows: list[tuple[str, int, float]]) -> tt.GroupBy:
        source = tt.EntitySource(spark.createDataFrame(rows, schema), mutation_table=mutations)
        return tt.GroupBy("users", source, ["user_id"], [tt.Aggregation("stars", "sum")])

    upload(users([(DS, 1, 4.0), (DS, 2, 5.0)]), spark, DS, store_uri)
    upload(users([(DS, 1, 4.5)]), spark, DS, store_uri)  # user 2 deleted, the day re-run
    left = tt.EventSource(spark.createDataFrame([(1, 0)], "user_id long, ts long"))
    with open_store(store_uri) as store:
        fetched = Fetcher(tt.Join("j", left, [users([])]), store).fetch(
            [{"user_id": 1}, {"user_id": 2}], at=DAY_END + HOUR_MS)
    assert [r.features for r in fetched] == [{"users_stars_sum": 4.5},
                                            {"users_stars_sum": None}]


def test_which_records_answer() -> None:
    assert answers_for(3, "a", served=3, served_signature="a")
    assert answers_for(4, "a", served=3, served_signature="a")  # an upload under way
    assert not answers_for(2, "a", served=3, served_signature="a")
    assert not answers_for(2, "b", served=3, served_signature="a")  # left by an older one
    assert answers_for(0, "b", served=None, served_signature=None)
    for newer in (3, 4):
        with pytest.raises(ValueError, match="an upload of a changed definition is under way"):
            answers_for(newer, "b", served=3, served_signature="a")


def test_records_of_an_earlier_build_are_older_than_any_upload() -> None:
    """Before generations, a record version 2 of a key the new upload did not rewrite failed
    every fetch of it (HTTP 503); it is older than the served upload, so it reads as empty."""
    old_batch = encode((2, DAY_END, DAY_MS, "sig", (), ()))
    assert read_record(old_batch, [], {}, signature="sig", generation=1).generation == -1
    with pytest.raises(ValueError, match="not a timetile batch record of version 3"):
        read_record(old_batch, [], {})
    old_entity = encode((1, DAY_END, ()))
    assert EntityRecord.from_bytes(old_entity, signature="sig", generation=1).rows == ()
    with pytest.raises(ValueError, match="not a timetile entity record of version 2"):
        EntityRecord.from_bytes(old_entity)


def test_a_source_of_defaults_keeps_the_signature_of_earlier_builds() -> None:
    """The signature holds a source's where, select and time columns only where they are not
    the defaults: stores uploaded before it held them serve on without a re-upload (digests
    of a77a6b2), and a changed where is a changed definition."""
    plain = tt.GroupBy("g", tt.EventSource("t"), ["u"], [tt.Aggregation("x", "sum")])
    entity = tt.GroupBy("users", tt.EntitySource("s", mutation_table="m"), ["user_id"],
                        [tt.Aggregation("stars", "sum")])
    assert feature_signature(plain) == "dbc805a65a895c81"
    assert feature_signature(entity) == "aaad11d1b7fcce88"
    changed = [tt.EventSource("t", where="x > 0"), tt.EventSource("t", select=["u", "x"]),
               tt.EventSource("t", time_column="at"), tt.EventSource("t", period="1h")]
    digests = {feature_signature(replace(plain, source=source)) for source in changed}
    assert len(digests) == len(changed)
    assert feature_signature(plain) not in digests
    moved = replace(plain, source=tt.EventSource("other_table"))
    assert feature_signature(moved) == feature_signature(plain)  # a table moved: no change


def test_part_signatures_follow_what_is_served() -> None:
    """The response log's definition: another where, prefix or key mapping serves other
    values of that part; the left source, derivations, the parts' order, the Join's name
    and the other parts serve the same ones."""
    views = tt.GroupBy("views", tt.EventSource("t"), ["u"], [tt.Aggregation("x", "sum")])
    buys = tt.GroupBy("buys", tt.EventSource("b"), ["u"], [tt.Aggregation("y", "max")])
    signatures = part_signatures(tt.Join("model", tt.EventSource("q"), [views, buys]))
    assert list(signatures) == ["views", "buys"]
    same = [tt.Join("other", tt.EventSource("other_queries", time_column="at"), [buys, views],
                    derivations={"z": "views_x_sum + 1"}),
            tt.Join("model", tt.EventSource("q"),
                    [replace(views, source=tt.EventSource("moved")), buys])]
    assert all(part_signatures(join) == signatures for join in same)
    assert part_signatures(tt.Join("model", tt.EventSource("q"), [views])) == {
        "views": signatures["views"]}
    changed = [
        replace(views, source=tt.EventSource("t", where="x > 0")),
        tt.JoinPart(views, key_mapping={"v": "u"}),
        replace(views, aggregations=[tt.Aggregation("x", "sum", windows=["1d"])]),
    ]
    digests = {part_signatures(tt.Join("model", tt.EventSource("q"), [part, buys]))["views"]
               for part in changed}
    assert len(digests) == len(changed)
    assert signatures["views"] not in digests
    prefixed = part_signatures(tt.Join("m", tt.EventSource("q"), [tt.JoinPart(views, "p")]))
    assert list(prefixed) == ["p_views"]
    assert prefixed["p_views"] != signatures["views"]


class _SlowReads:
    """A store whose reads take 2 ms, so that a read-then-write race would show."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __enter__(self) -> _SlowReads:
        self._store.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._store.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def multi_get(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        values = self._store.multi_get(table, keys)
        time.sleep(0.002)
        return values  # type: ignore[no-any-return]

    def update(self, table: str, key: bytes, change: Any) -> bytes:
        def slow_change(old: bytes | None) -> bytes:
            time.sleep(0.002)
            return change(old)  # type: ignore[no-any-return]
        return self._store.update(table, key, slow_change)  # type: ignore[no-any-return]


def test_uploads_side_by_side_take_distinct_generations(tmp_path: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Read, then write (two calls) let threads take one generation; now one update.

    Reads take 2 ms here, so the old two calls lose generations on nearly every run.
    """
    upload_module = importlib.import_module("timetile.offline.upload")  # not its function
    monkeypatch.setattr(upload_module, "open_store", lambda uri: _SlowReads(open_store(uri)))
    store_uri = f"lmdb:{tmp_path}/store"
    taken: list[int] = []

    def take() -> None:
        taken.extend(_next_generation(store_uri, "g", None) for _ in range(10))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == list(range(1, 41))
