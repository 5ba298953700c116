"""Inputs the online path must read as the backfill reads them: float keys, a key or the time
aggregated as a value, string times, and pre-aggregated periods (DESIGN §5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import MAX_NAME, upload
from timetile.online.fetcher import Fetcher, NotUploadedError
from timetile.store.kv import check_table, open_store
from timetile.store.layout import KeyValueError, batch_table, encode_key, tile_table
from timetile.store.tiles import put_events

DS = "2024-01-02"
DAY_END = date_to_ms(DS) + DAY_MS


def backfilled(join: tt.Join, spark: Any, rows: list[tuple[Any, int]], key: str) -> list[Any]:
    """Return the backfill's rows for (key, time) left rows, in order."""
    left = spark.createDataFrame([(i, k, t) for i, (k, t) in enumerate(rows)],
                                 f"qid long, {key} double, ts long")
    backfill = tt.backfill(tt.Join(join.name, tt.EventSource(left), join.join_parts), spark)
    return sorted(backfill.collect(), key=lambda row: row["qid"])


def test_float_keys_are_one_key_where_spark_groups_them(spark: Any, store_uri: str) -> None:
    # -0.0 and 0.0 are one key, and so is every NaN, as Spark groups them: the upload,
    # the stream and the fetch must not split them by sign or payload.
    nan = float("nan")
    negative_nan = -nan
    batch = [(0.0, DAY_END - 2 * HOUR_MS, 1.0), (-0.0, DAY_END - HOUR_MS, 2.0),
             (nan, DAY_END - HOUR_MS, 16.0)]
    streamed = [(-0.0, DAY_END + HOUR_MS, 4.0), (0.0, DAY_END + HOUR_MS + 5, 8.0),
                (negative_nan, DAY_END + HOUR_MS, 32.0), (nan, DAY_END + 2 * HOUR_MS, 64.0)]
    events = spark.createDataFrame(batch + streamed, "k double, ts long, amount double")
    sums = tt.GroupBy("sums", tt.EventSource(events), ["k"], [
        tt.Aggregation("amount", "sum"), tt.Aggregation("amount", "count", windows=["1d"])])
    join = tt.Join("floats", tt.EventSource(events), [sums])
    upload(sums, spark, DS, store_uri)
    at = DAY_END + 3 * HOUR_MS
    asked = [(0.0, at), (-0.0, at), (nan, at), (negative_nan, at)]
    expected = backfilled(join, spark, asked, "k")
    assert [row["sums_amount_sum"] for row in expected] == [15.0, 15.0, 112.0, 112.0]
    with open_store(store_uri) as store:
        streamed_table = pa.table({"k": [row[0] for row in streamed],
                                   "ts": [row[1] for row in streamed],
                                   "amount": [row[2] for row in streamed]})
        put_events(store, sums, streamed_table, "b1")
        fetched = Fetcher(join, store).fetch([{"k": k} for k, _ in asked], at=at)
    for result, row in zip(fetched, expected, strict=True):
        assert result.features == {name: row[name] for name in result.features}


def test_a_key_or_the_time_may_be_aggregated_too(spark: Any, store_uri: str) -> None:
    events = spark.createDataFrame(
        [(1, "a", DAY_END - HOUR_MS, 2.0), (1, "a", DAY_END - 2 * HOUR_MS, 3.0),
         (2, "b", DAY_END - 1, 1.0)], "user_id long, item string, ts long, amount double")
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("user_id", "count", windows=["1d"]), tt.Aggregation("ts", "max")])
    items = tt.GroupBy("items", tt.EventSource(events), ["item"],
                       [tt.Aggregation("amount", "sum", buckets=["item"])])
    join = tt.Join("keyed", tt.EventSource(events), [users, items])
    for group_by in (users, items):
        upload(group_by, spark, DS, store_uri)
    at = DAY_END + 2 * HOUR_MS
    streamed = pa.table({"user_id": [1], "item": ["a"], "ts": [DAY_END + HOUR_MS],
                         "amount": [5.0]})
    with open_store(store_uri) as store:
        for group_by in (users, items):
            put_events(store, group_by, streamed, "b1")
        fetched = Fetcher(join, store).fetch([{"user_id": 1, "item": "a"}], at=at)[0].features
    everything = spark.createDataFrame(
        [*events.collect(), tuple(streamed.to_pylist()[0].values())], events.schema)
    left = spark.createDataFrame([(1, "a", at)], "user_id long, item string, ts long")
    parts = [tt.GroupBy(g.name, tt.EventSource(everything), g.keys, g.aggregations)
             for g in (users, items)]
    row = tt.backfill(tt.Join("keyed", tt.EventSource(left), parts), spark).collect()[0]
    assert fetched == {name: row[name] for name in fetched} == {
        "users_user_id_count_1d": 3, "users_ts_max": DAY_END + HOUR_MS,
        "items_amount_sum_by_item": {"a": 10.0}}


def test_streamed_values_of_another_type_are_refused(spark: Any, store_uri: str) -> None:
    """numpy would cast them silently (7.9 to 7, a uint64 around to -1, b"a" to "b'a'")."""
    events = spark.createDataFrame([(1, "a", DAY_END - HOUR_MS, 2.0, 3)],
                                   "user_id long, item string, ts long, amount double, n long")
    users = tt.GroupBy("users", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "sum", buckets=["item"]), tt.Aggregation("n", "max")])
    upload(users, spark, DS, store_uri)
    good = {"user_id": [1], "item": ["a"], "ts": [DAY_END + 1], "amount": [5.0], "n": [4]}
    with open_store(store_uri) as store:
        for column, odd, kind in (("n", pa.array([7.9]), "double"),
                                  ("n", pa.array([2**64 - 1], pa.uint64()), "uint64"),
                                  ("amount", pa.array(["x"]), "string"),
                                  ("item", pa.array([b"a"]), "binary")):
            table = pa.table({**good, column: odd})
            with pytest.raises(ValueError, match=rf"'{column}' is {kind}, the upload's is "
                               r".*Fix: send the aggregated and bucket columns with the "
                               "upload's types"):
                put_events(store, users, table, "bad")
        widened = pa.table({**good, "amount": pa.array([5], pa.int32())})  # ints fit a double
        assert put_events(store, users, widened, "b1").written == 1
        fetched = Fetcher(tt.Join("typed", tt.EventSource(events), [users]), store).fetch(
            [{"user_id": 1}], at=DAY_END + HOUR_MS)[0].features
    assert fetched == {"users_amount_sum_by_item": {"a": 7.0}, "users_n_max": 4}


def test_string_times_are_placed_as_the_backfill_places_them(spark: Any,
                                                             store_uri: str) -> None:
    # Every row below is read by Spark's cast, or left out by it (null), and put_events
    # must do the same: 30 February and hour 24 are left out, not moved.
    events = spark.createDataFrame([(1, "2024-01-02T20:00:00Z", 1.0)],
                                   "user_id long, ts string, amount double")
    users = tt.GroupBy("users", tt.EventSource(events, time_column="ts"), ["user_id"],
                       [tt.Aggregation("amount", "sum", windows=["1d"])])
    join = tt.Join("texts", tt.EventSource(events, time_column="ts"), [users])
    upload(users, spark, DS, store_uri)
    texts = {" 2024-01-03 01:00 ": 2.0, "2024-1-3T02:00:00.5+01:00": 4.0,
             "2024-01-03T03:00:00.123456789": 8.0, "2024-02-30T01:00:00": 16.0,
             "2024-01-03T24:00:00": 32.0, None: 64.0}
    streamed = pa.table({"user_id": [1] * len(texts), "ts": list(texts),
                         "amount": list(texts.values())})
    at = DAY_END + 4 * HOUR_MS
    with open_store(store_uri) as store:
        report = put_events(store, users, streamed, "b1")
        assert (report.written, report.unusable) == (3, 3)
        fetched = Fetcher(join, store).fetch([{"user_id": 1}], at=at)[0].features
        with pytest.raises(ValueError, match=r"time column 'ts': '20240103T010000' is not"):
            put_events(store, users, streamed.slice(0, 1).set_column(
                1, "ts", pa.array(["20240103T010000"])), "b2")
    everything = spark.createDataFrame(
        [(1, "2024-01-02T20:00:00Z", 1.0)] + [(1, text, amount) for text, amount in texts.items()],
        "user_id long, ts string, amount double")
    again = tt.GroupBy("users", tt.EventSource(everything, time_column="ts"), ["user_id"],
                       [tt.Aggregation("amount", "sum", windows=["1d"])])
    left = spark.createDataFrame([(1, at)], "user_id long, ts long")
    row = tt.backfill(tt.Join("texts", tt.EventSource(left), [again]), spark).collect()[0]
    assert fetched == {"users_amount_sum_1d": row["users_amount_sum_1d"]} == {
        "users_amount_sum_1d": 15.0}


def test_upload_refuses_a_period_that_does_not_divide_a_day(spark: Any, store_uri: str) -> None:
    events = spark.createDataFrame([(1, DAY_END - 7 * HOUR_MS, 2.0)],
                                   "user_id long, ts long, amount double")
    hourly = tt.GroupBy("users", tt.EventSource(events, period="7h"), ["user_id"],
                        [tt.Aggregation("amount", "sum", windows=["14h"])])
    with pytest.raises(tt.DefinitionError, match=r"source\.period: 7h does not divide a day"):
        upload(hourly, spark, DS, store_uri)
    six = tt.GroupBy("users", tt.EventSource(events, period="6h"), ["user_id"],
                     [tt.Aggregation("amount", "sum", windows=["12h"])])
    assert upload(six, spark, DS, store_uri).written["users"][0] == 1


@pytest.mark.parametrize(("value", "kind", "why"), [
    (10**400, "float", "is beyond a double"),
    ("1_000", "float", "cannot be read as float"),  # Python reads it; Spark's cast gives null
    ("\ud800", "string", "is not Unicode text"),  # a lone surrogate: no Spark string holds one
    ("\u0663", "int", "cannot be read as int"),  # a non-ASCII digit, null in Spark
    (-(2**63) - 1, "int", "is beyond a 64-bit int"),
    (float(2**60), "int", r"is a float at or beyond 2\*\*53.*send it as an integer or a"),
])
def test_a_key_no_spark_column_holds_is_refused(value: Any, kind: str, why: str) -> None:
    with pytest.raises(KeyValueError, match=why):
        encode_key([value], [kind])


def test_an_int_key_given_as_a_float_is_read_only_where_the_float_is_exact() -> None:
    """JSON parsers read 1152921504606847000 written as a float as 2**60: beyond 2**53 a float
    names several ints, and serving one of them would be another key's features."""
    top = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER
    assert encode_key([float(top)], ["int"]) == encode_key([top], ["int"])
    assert encode_key([-float(top)], ["int"]) == encode_key([-top], ["int"])
    for beyond in (float(2**53), -float(2**53), float(2**53 + 2)):  # 2**53 + 1 reads as 2**53
        with pytest.raises(KeyValueError, match="at or beyond 2"):
            encode_key([beyond], ["int"])
    assert encode_key([str(2**60)], ["int"]) == encode_key([2**60], ["int"])


@pytest.mark.parametrize("change", ["adds", "drops", "k"])
def test_records_of_a_changed_definition_are_never_read_as_the_old(
        spark: Any, store_uri: str, change: str) -> None:
    """A fetcher of the last definition meets the records of the next upload before its
    metadata: a column added gave a KeyError, a column dropped a silent null, a changed
    ``k`` (which no output name holds) the old number of items."""
    events = spark.createDataFrame([(1, DAY_END + DAY_MS - HOUR_MS, 2.0, 3),
                                    (2, DAY_END - HOUR_MS, 4.0, 5),  # not in the next's 1d
                                    (3, DAY_END + DAY_MS - 2 * HOUR_MS, 8.0, 7)],
                                   "user_id long, ts long, amount double, quantity long")
    source = tt.EventSource(events)
    amount = tt.Aggregation("amount", "sum", windows=["1d"])
    served, next_one = {
        "adds": ([amount], [amount, tt.Aggregation("quantity", "sum", windows=["1d"])]),
        "drops": ([amount, tt.Aggregation("quantity", "sum", windows=["1d"])], [amount]),
        "k": ([amount, tt.Aggregation("quantity", "last_k", k=1, windows=["1d"])],
              [amount, tt.Aggregation("quantity", "last_k", k=5, windows=["1d"])]),
    }[change]

    def group_by(aggregations: list[tt.Aggregation]) -> tt.GroupBy:
        return tt.GroupBy("g", source, ["user_id"], aggregations)

    upload(group_by(served), spark, DS, store_uri)
    with open_store(store_uri) as store:
        fetcher = Fetcher(tt.Join("j", source, [group_by(served)]), store)
        upload(group_by(next_one), spark, "2024-01-03", store_uri)
        with pytest.raises(ValueError, match=r"a record newer than the served upload, "
                           r"of another definition.*Fix: once it is done, serve the new"):
            fetcher.fetch([{"user_id": 1}], at=DAY_END + DAY_MS + 1)
        with pytest.raises(NotUploadedError, match="changed since its upload"):
            fetcher.refresh()
        # key 2 keeps its record of the last definition, as of an earlier day: read as empty
        current = Fetcher(tt.Join("j", source, [group_by(next_one)]), store)
        fetched = current.fetch([{"user_id": 1}, {"user_id": 2}], at=DAY_END + DAY_MS + 1)
        assert [result.features["g_amount_sum_1d"] for result in fetched] == [2.0, None]
        # the same day under the old definition, then again under the new one without key
        # 3: its record of that day is the old definition's, left over. Newer than the
        # upload the fetcher serves, it is refused until the fetcher re-reads the metadata;
        # then it is older than the served upload, so read as empty
        upload(group_by(served), spark, "2024-01-03", store_uri)
        upload(tt.GroupBy("g", tt.EventSource(events.where("user_id != 3")), ["user_id"],
                          next_one), spark, "2024-01-03", store_uri)
        with pytest.raises(ValueError, match="an upload of a changed definition is under way"):
            current.fetch([{"user_id": 3}], at=DAY_END + DAY_MS + 1)
        current.refresh()
        again = current.fetch([{"user_id": 1}, {"user_id": 3}], at=DAY_END + DAY_MS + 1)
    assert [result.features["g_amount_sum_1d"] for result in again] == [2.0, None]


def test_a_relative_store_path_is_the_drivers_after_a_chdir(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's Python workers keep the folder the JVM started in: records written there and
    metadata here served every feature empty, after an upload that reported success."""
    events = spark.createDataFrame([(1, DAY_END - HOUR_MS, 2.0)],
                                   "user_id long, ts long, amount double")
    sums = tt.GroupBy("g", tt.EventSource(events), ["user_id"],
                      [tt.Aggregation("amount", "sum", windows=["1d"])])
    monkeypatch.chdir(tmp_path)
    upload(sums, spark, DS, "lmdb:relative/store")
    with open_store("lmdb:relative/store") as store:
        [result] = Fetcher(tt.Join("j", tt.EventSource(events), [sums]), store).fetch(
            [{"user_id": 1}], at=DAY_END + 1)
    assert result.features == {"g_amount_sum_1d": 2.0}


def test_keys_too_long_for_lmdb_are_left_out_and_counted(spark: Any, tmp_path: Path) -> None:
    """LMDB keys end at 511 bytes: such a key failed the upload's Spark task (after other
    tasks had written), where it is now left out like a null key, and counted. A key of 495
    characters fit a record but not a tile of a long batch id: it is left out of both."""
    long_key = "k" * 495
    rows = [("a", DAY_END - HOUR_MS, 1.0), (long_key, DAY_END - HOUR_MS, 2.0),
            (long_key, DAY_END - 2 * HOUR_MS, 4.0)]
    events = spark.createDataFrame(rows, "name string, ts long, amount double")
    sums = tt.GroupBy("g", tt.EventSource(events), ["name"],
                      [tt.Aggregation("amount", "sum", windows=["1d"])])
    uri = f"lmdb://{tmp_path / 'store'}"
    report = upload(sums, spark, DS, uri)
    assert (report.written["g"][0], report.left_out["g"]) == (1, 2)
    with open_store(uri) as store:
        fetched = Fetcher(tt.Join("j", tt.EventSource(events), [sums]), store).fetch(
            [{"name": "a"}, {"name": long_key}], at=DAY_END + 1)
    assert [result.features for result in fetched] == [{"g_amount_sum_1d": 1.0},
                                                       {"g_amount_sum_1d": None}]
    streamed = pa.table({"name": ["a", long_key], "ts": [DAY_END + 1, DAY_END + 2],
                         "amount": [8.0, 16.0]})
    with open_store(uri) as store:  # as a null key: counted, and the stream goes on
        counts = put_events(store, sums, streamed, "b1")
        assert (counts.written, counts.unusable, counts.tiles) == (1, 1, 1)
        [result] = Fetcher(tt.Join("j", tt.EventSource(events), [sums]), store).fetch(
            [{"name": "a"}], at=DAY_END + 5)
    assert result.features == {"g_amount_sum_1d": 9.0}


def test_a_name_too_long_for_the_stores_tables_is_refused_before_the_upload(
        spark: Any, tmp_path: Path) -> None:
    """It once failed inside a Spark task; offline, any length is fine."""
    events = spark.createDataFrame([(1, DAY_END - HOUR_MS, 2.0)],
                                   "user_id long, ts long, amount double")
    sums = [tt.Aggregation("amount", "sum")]
    longest = tt.GroupBy("g" * MAX_NAME, tt.EventSource(events), ["user_id"], sums)
    assert check_table(batch_table(longest.name))
    assert check_table(tile_table(longest.name))
    too_long = tt.GroupBy("g" * (MAX_NAME + 1), tt.EventSource(events), ["user_id"], sums)
    with pytest.raises(tt.DefinitionError, match=r"group_by.name: has 192 characters, and its "
                       r"online tables \(tt_batch.NAME\) take at most 191.*Fix: give it a "
                       r"shorter name"):
        upload(too_long, spark, DS, f"lmdb://{tmp_path / 'store'}")
