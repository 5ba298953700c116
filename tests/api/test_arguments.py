"""Arguments of the wrong type or shape are refused where they are given, naming the argument
and the fix: before, some raised AttributeError or TypeError from deep inside, and some
were read as something else (bytes as window lengths, a set's order as the percentiles')."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import timetile as tt
from timetile.core.timeutil import date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.online.response_log import ResponseLog
from timetile.store.kv import open_store
from timetile.store.tiles import millis


def _group_by() -> tt.GroupBy:
    return tt.GroupBy("g", tt.EventSource("data/events"), ["user_id"],
                      [tt.Aggregation("amount", "sum", windows=["1d"])])


def _join() -> tt.Join:
    return tt.Join("j", tt.EventSource("data/left"), [_group_by()])


@pytest.mark.parametrize(("given", "message"), [
    ((b"7d",), r"windows: b'7d' is not a list of windows"),
    ((bytearray(b"7d"),), r"windows: bytearray\(b'7d'\) is not a list of windows"),
])
def test_bytes_are_not_windows(given: tuple[Any], message: str) -> None:
    with pytest.raises(tt.DefinitionError, match=message):
        tt.Aggregation("amount", "sum", windows=given[0])


@pytest.mark.parametrize("ranks", [(p for p in [0.5, 0.9]), {0.9, 0.1}, {0.5: "median"}])
def test_percentiles_are_an_ordered_list(ranks: Any) -> None:
    with pytest.raises(tt.DefinitionError, match=r"percentiles: .* is not a list of ranks.*its "
                       r"order orders the output"):
        tt.Aggregation("amount", "approx_percentile", percentiles=ranks)
    taken = tt.Aggregation("amount", "approx_percentile", percentiles=np.array([0.9, 0.1]))
    assert taken.percentiles == (0.9, 0.1)


def test_definition_fields_of_the_wrong_type_or_size() -> None:
    with pytest.raises(tt.DefinitionError, match=r"column: 5 is not a column name"):
        tt.Aggregation(5, "sum")  # type: ignore[arg-type]
    with pytest.raises(tt.DefinitionError, match=r"kind: \['sliding'\] is not a window kind"):
        tt.Window("1d", kind=["sliding"])  # type: ignore[arg-type]
    with pytest.raises(tt.DefinitionError, match=r"length: '0s' is not positive"):
        tt.Window("0s")
    with pytest.raises(tt.DefinitionError, match=r"length: '\u0667d' is not a duration"):
        tt.Window("\u0667d")  # an Arabic-Indic seven
    with pytest.raises(tt.DefinitionError, match=r"period: '1000000000d' is longer than "
                       r"10,000 years"):
        tt.EventSource("data/events", period="1000000000d")


def test_a_day_is_not_a_moment() -> None:
    """A datetime is a date to Python: its time and zone were dropped, so 01:00 at +05:00
    on the 2nd (20:00 UTC on the 1st) kept the rows of the 2nd."""
    with pytest.raises(ValueError, match="is a moment, not a day"):
        date_to_ms(dt.datetime(2024, 3, 2, 1, tzinfo=dt.timezone(dt.timedelta(hours=5))))
    assert date_to_ms(dt.date(2024, 3, 2)) == date_to_ms("2024-03-02")


def test_backfill_arguments(spark: Any) -> None:
    with pytest.raises(TypeError, match=r"join is GroupBy\(.*not a tt\.Join\. Fix: backfill a "
                       r"Join|join is a GroupBy, not a tt\.Join"):
        tt.backfill(_group_by(), spark)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"spark is None, not a SparkSession\. Fix: pass your "
                       r"session"):
        tt.backfill(_join(), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"executor is \['sweep'\], not an executor's name"):
        tt.backfill(_join(), spark, executor=["sweep"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"strict is 'no', not True or False"):
        tt.backfill(_join(), spark, strict="no")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"start datetime.datetime\(2024, 3, 2, 1, 0\) is not "
                       r"a day"):
        tt.backfill(_join(), spark, start=dt.datetime(2024, 3, 2, 1))  # type: ignore[arg-type]


def test_upload_arguments(spark: Any, tmp_path: Path) -> None:
    uri = f"lmdb:{tmp_path / 'store'}"
    with pytest.raises(TypeError, match=r"target is None, not a tt\.Join or tt\.GroupBy"):
        upload(None, spark, "2024-01-01", uri)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"spark is None, not a SparkSession"):
        upload(_group_by(), None, "2024-01-01", uri)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"store_uri is None, not a store URI"):
        upload(_group_by(), spark, "2024-01-01", None)  # type: ignore[arg-type]
    for slack in ("x", -5, 0):
        with pytest.raises(ValueError, match=r"slack_ms is .*: give a positive int"):
            upload(_group_by(), spark, "2024-01-01", uri, slack_ms=slack)  # type: ignore[arg-type]
    for day in (20240101, "2024-13-01", dt.datetime(2024, 1, 1, 5)):
        with pytest.raises(ValueError, match=r"^ds .* is not a day: write it as YYYY-MM-DD"):
            upload(_group_by(), spark, day, uri)  # type: ignore[arg-type]
    assert not (tmp_path / "store").exists()  # refused before the store is made


def test_online_arguments(tmp_path: Path) -> None:
    with open_store(tmp_path / "store") as store:  # a path-like is an LMDB folder
        with pytest.raises(TypeError, match=r"store is 'lmdb:x', not an open store\. Fix: "
                           r"open it first"):
            Fetcher(_join(), "lmdb:x")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"not a tt\.Join\. Fix: serve a Join"):
            Fetcher(_group_by(), store)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"uri is None, not a store URI"):
        open_store(None)  # type: ignore[arg-type]
    for options in ({"max_rows": "10"}, {"max_rows": 2.5}, {"queue_size": 0}):
        with pytest.raises(ValueError, match=r"is .*: give an int of at least 1"):
            ResponseLog(tmp_path / "log", **options)
    with pytest.raises(ValueError, match=r"max_seconds is 0: give a number above 0"):
        ResponseLog(tmp_path / "log", max_seconds=0)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match=r"is a file: give a folder"):
        ResponseLog(tmp_path / "a_file")
    with pytest.raises(TypeError, match=r"log_dir is None, not a folder"):
        ResponseLog(None)  # type: ignore[arg-type]


def test_streamed_times_of_a_type_the_batch_side_refuses_are_refused() -> None:
    """int32 seconds were counted late (read as ms of 1970), floats truncated toward zero,
    dates raised a bare TypeError; dictionary-encoded text is text."""
    assert millis(pa.chunked_array([[5, None]], pa.int64()), "ts") == [5, None]
    text = pa.chunked_array([pa.array(["1970-01-01T00:00:00.007Z"]).dictionary_encode()])
    assert millis(text, "ts") == [7]
    for column in (pa.array([1_700_000_000], pa.int32()), pa.array([-0.5]),
                   pa.array([dt.date(2024, 1, 1)]), pa.array([True]),
                   pa.array([2**63], pa.uint64())):
        with pytest.raises(ValueError, match=r"time column 'ts' is .*Fix: send epoch "
                           r"milliseconds as int64"):
            millis(pa.chunked_array([column]), "ts")


def test_a_time_column_of_nulls_only_is_nulls() -> None:
    """pyarrow types a column holding only None as null: its rows are unusable, not a
    refused batch (a mutation's null row time is valid)."""
    assert millis(pa.chunked_array([pa.array([None, None])]), "ts") == [None, None]
