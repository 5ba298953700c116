"""The consistency job end to end: upload day D, stream part of D+1, serve through a real
Fetcher with a real ResponseLog, then recompute every logged row offline (DESIGN §5).

Served values must match the backfill exactly for exact ops and lie within the oracle's
bounds for approximate ones; a tampered log row is exactly one mismatch; a stale row is
counted, not compared. Then the pieces: value decoding, distances and the SVG plots.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

import timetile as tt
from timetile.core.batch_record import DEFAULT_SLACK_MS
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.online.response_log import SCHEMA, ResponseLog
from timetile.store.kv import open_store
from timetile.store.tiles import put_events
from timetile.testing import random_events, to_spark
from timetile.verify.consistency import ConsistencyError, consistency
from timetile.verify.report_html import histogram_svg, line_svg
from timetile.verify.results import BOUND, EXACT, ConsistencyReport, Histogram
from timetile.verify.values import (
    decode_served,
    edit_distance,
    smape,
    within_percentiles,
    within_unique_count,
)

DS = "2024-01-02"
DAY_END = date_to_ms(DS) + DAY_MS
STREAMED_UNTIL = DAY_END + 20 * HOUR_MS
STALE_AT = DAY_END + DEFAULT_SLACK_MS + HOUR_MS  # past the slack: the record no longer covers it
TAMPERED = "users_amount_sum_1d"
AGGREGATIONS = [
    tt.Aggregation("amount", "sum", windows=["1h", "1d", tt.Window("1d", hop="1h")]),
    tt.Aggregation("amount", "avg", windows=["1d"]),
    tt.Aggregation("amount", "max"),
    tt.Aggregation("quantity", "count", windows=["1d"]),
    tt.Aggregation("quantity", "sum", windows=[tt.Window("1d", hop="6h", kind="hopping")]),
    tt.Aggregation("item", "last"),
    tt.Aggregation("flag", "last", windows=["1d"]),
    tt.Aggregation("item", "last_k", k=3, windows=["1d"]),
    tt.Aggregation("amount", "top_k", k=2),
    tt.Aggregation("item", "histogram", windows=["1d"]),
    tt.Aggregation("quantity", "histogram"),
    tt.Aggregation("item", "approx_unique_count", windows=["1d"]),
    tt.Aggregation("amount", "approx_percentile", percentiles=[0.1, 0.5, 0.9]),
    tt.Aggregation("amount", "sum", windows=["1d"], buckets=["item"]),
]


@dataclass
class Served:
    join: tt.Join
    logs: Path
    rows: int  # logged rows
    stale: int  # of them, fetched past the slack
    report: ConsistencyReport  # of the untouched logs, with output


@pytest.fixture(scope="module")
def served(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Served:
    root = tmp_path_factory.mktemp("consistency")
    table = random_events(700, 12, seed=61, start="2024-01-01", days=3)
    users = tt.GroupBy("users", tt.EventSource(to_spark(spark, table)), ["user_id"],
                       AGGREGATIONS)
    queries = spark.createDataFrame([(1, 0)], "user_id long, ts long")
    join = tt.Join("online", tt.EventSource(queries), [users])
    store_uri = f"lmdb://{root / 'store'}"
    upload(users, spark, DS, store_uri)
    times = pc.fill_null(table.column("ts"), -1)
    streamed = table.filter(pc.and_(pc.greater_equal(times, DAY_END),
                                    pc.less(times, STREAMED_UNTIL)))
    rng = np.random.default_rng(62)
    moments = sorted({DAY_END, STREAMED_UNTIL, *(int(t) for t in rng.integers(
        DAY_END, STREAMED_UNTIL, 10))})
    # Key 99 has no event; "3" is a digit string, as an HTTP client may send it.
    rows: list[dict[str, Any]] = [{"user_id": key} for key in (1, 2, 7, 12, 99)]
    rows.append({"user_id": "3"})
    logged = stale = 0
    with open_store(store_uri) as store, ResponseLog(root / "logs", max_seconds=60) as log:
        put_events(store, users, streamed, "b1")
        fetcher = Fetcher(join, store)
        for index, moment in enumerate(moments):
            assert log.log(f"request-{index}", join.name, moment, rows,
                           fetcher.fetch(rows, at=moment))
            logged += len(rows)
        late = fetcher.fetch(rows[:2], at=STALE_AT)
        assert all(result.stale == ["users"] for result in late)
        assert log.log("late", join.name, STALE_AT, rows[:2], late)
        logged += 2
        stale += 2
    report = consistency(join, spark, root / "logs", output=root / "report")
    return Served(join, root / "logs", logged, stale, report)


def test_every_logged_row_matches_the_backfill(served: Served) -> None:
    report = served.report
    assert report.rows == served.rows
    assert [entry.feature for entry in report.features] == served.join.output_columns()
    for entry in report.features:
        assert entry.check == (BOUND if entry.op.startswith("approx_") else EXACT)
        assert (entry.rows, entry.stale) == (served.rows - served.stale, served.stale)
        assert entry.matches == entry.rows, entry
        assert (entry.mismatches, entry.missing, entry.extra) == (0, 0, 0), entry
        assert entry.mismatch_rate == 0.0
        if entry.check == BOUND:
            assert entry.within_bound_rate == 1.0
    numbers = report.feature("users_amount_sum_1d")
    assert (numbers.smape_mean, numbers.smape_max, numbers.edit_distance_mean) == (0, 0, None)
    assert report.feature("users_item_last_k_1d").edit_distance_mean == 0.0
    assert report.feature("users_item_histogram_1d").smape_mean is None
    assert report.summary().startswith(f"{len(report.features)} of {len(report.features)} "
                                       "features match exactly on all")
    assert (f"; up to {served.stale} of them stale, not compared for their stale GroupBy's "
            "features") in report.summary()
    assert sum(point.rows for point in report.timeline) == (
        (served.rows - served.stale) * len(report.features))
    assert all(point.mismatches == 0 for point in report.timeline)
    assert report.feature_timelines == {}


def test_outputs_parse(served: Served) -> None:
    folder = Path(served.report.output or "")
    features = pq.read_table(folder / "features.parquet")
    assert features.equals(served.report.table())
    assert features.column("feature").to_pylist() == served.join.output_columns()
    assert pq.read_table(folder / "differences.parquet").num_rows == 0
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "<script" not in page
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")  # self-contained
    svgs = [ET.fromstring(svg) for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S)]
    assert len(svgs) == 1 + len(served.report.histograms)
    ns = "{http://www.w3.org/2000/svg}"
    timeline, *histograms = svgs
    assert len(timeline.findall(f"{ns}circle")) == len(served.report.timeline)
    for svg, histogram in zip(histograms, served.report.histograms.values(), strict=True):
        assert len(svg.findall(f"{ns}rect")) == len(histogram.counts)
    assert "users_amount_sum_1d" in served.report.histograms


@dataclass
class Edited:
    """One consistency run over ``served``'s logs and every kind of odd row at once."""

    report: ConsistencyReport
    output: Path
    tampered: dict[str, Any]  # the tampered row, as logged
    true_value: float  # its feature's value before tampering
    copies: int  # how many copies of the logs were added, each compared in full
    warnings: str  # what the job logged


#: The unreadable rows: no keys, time, features or stale flag, keys of another Join, a key
#: that is text ("abc") or 7.5 (not key 7), features that are not a JSON object (never
#: served, not "served null").
UNREADABLE = 9
#: Rows of another Join (2) or definition (1 lacks a feature, 1 names another digest), and
#: rows whose request id is null or whose features json.loads does not read as Spark does.
OTHERS = 7


@pytest.fixture(scope="module")
def edited(spark: SparkSession, served: Served,
           tmp_path_factory: pytest.TempPathFactory) -> Edited:
    """``served``'s logs with odd rows added, in a folder whose name holds glob characters
    (read as named: it read as a pattern that matched nothing), checked in one run.

    Added: one tampered row; :data:`UNREADABLE` and :data:`OTHERS` rows to leave out; a row
    of an earlier build, which logged no definition (compared, by its names); and three
    copies of every logged row, each compared: one whose request ids all read
    ``request-0`` (a ResponseLog user's counter restarted: each row keeps its own truth for
    the approximate ops), one served by a Join with one GroupBy more (its extra features
    are ignored), and one written by an earlier build, without the definition column.
    """
    root = tmp_path_factory.mktemp("edited")
    logs = root / "logs[1]{a}"
    shutil.copytree(served.logs, logs)
    folder = logs / served.join.name
    table = pq.read_table(served.logs / served.join.name)
    rows = table.to_pylist()
    fresh = [row for row in rows if not row["stale"]]

    def write(name: str, written: list[dict[str, Any]] | pa.Table) -> None:
        written = written if isinstance(written, pa.Table) else pa.Table.from_pylist(
            written, schema=SCHEMA)
        pq.write_table(written, folder / f"part-{name}-000000.parquet")

    candidates = [row for row in fresh
                  if isinstance(json.loads(row["features"])[TAMPERED], float)
                  and json.loads(row["features"])[TAMPERED] > 0]
    tampered = dict(candidates[0])
    features = json.loads(tampered["features"])
    true_value = features[TAMPERED]
    features[TAMPERED] = true_value * 1.5
    tampered.update(request_id="tampered", features=json.dumps(features))
    write("9999999999991", [tampered])

    [key] = json.loads(rows[0]["keys"])
    unreadable = [{**rows[0], "keys": None}, {**rows[0], "request_time": None},
                  {**rows[0], "keys": json.dumps({key: "abc"})},
                  {**rows[0], "keys": json.dumps({"uid": 1})},
                  {**rows[0], "keys": json.dumps({key: 7.5})}, {**rows[0], "features": None},
                  {**rows[0], "features": "{not json"}, {**rows[0], "features": "[1, 2]"},
                  {**rows[0], "stale": None}]
    assert len(unreadable) == UNREADABLE
    older = json.loads(fresh[1]["features"])
    del older[TAMPERED]
    others = [{**fresh[0], "join": "other"}, {**fresh[0], "join": "other"},
              {**fresh[1], "features": json.dumps(older)},
              {**fresh[2], "request_id": None},
              {**fresh[3], "features": fresh[3]["features"].replace('"', "'")},
              {**fresh[4], "features": fresh[4]["features"] + " trailing text"},
              {**fresh[5], "definition": "0123456789abcdef"}]
    assert len(others) == OTHERS
    earlier = {**fresh[6], "request_id": "earlier", "definition": None}
    write("9999999999992", [{**row, "request_id": f"odd-{index}"}
                            for index, row in enumerate(unreadable)] + others + [earlier])

    write("9999999999993", _set_every(table, "request_id", "request-0"))
    [served_as] = set(table.column("definition").to_pylist())
    wider = json.dumps({**json.loads(served_as), "another": "0123456789abcdef"})
    write("9999999999994", _set_every(table, "definition", wider))
    write("9999999999995", table.drop_columns(["definition"]))

    said = _Said()
    logger = logging.getLogger("timetile.verify")
    logger.addHandler(said)
    try:
        report = consistency(served.join, spark, logs, output=root / "report")
    finally:
        logger.removeHandler(said)
    return Edited(report, root / "report", tampered, true_value, 3, said.text())


class _Said(logging.Handler):
    """Keeps the message of every warning and worse (as caplog would, for a fixture of the
    module)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def text(self) -> str:
        return "\n".join(self.messages)


def _set_every(table: pa.Table, column: str, value: str) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column,
                            pa.array([value] * table.num_rows))


def _rewritten_logs(served: Served, tmp_path: Path,
                    rewrite: Callable[[pa.Table], pa.Table]) -> Path:
    """A logs folder holding one file: every logged row of ``served``, rewritten."""
    logs = tmp_path / "logs"
    (logs / served.join.name).mkdir(parents=True)
    pq.write_table(rewrite(pq.read_table(served.logs / served.join.name)),
                   logs / served.join.name / "part-0-000000.parquet")
    return logs


def test_odd_rows_are_left_out_and_copies_compared(served: Served, edited: Edited) -> None:
    """Every copy and the earlier build's row are compared; the odd rows are counted."""
    report = edited.report
    assert report.rows == (1 + edited.copies) * served.rows + 2  # the tampered, the earlier
    assert report.left_out == UNREADABLE + OTHERS
    assert report.summary().endswith(
        f"; {UNREADABLE + OTHERS} logged rows left out (unreadable, of another Join, or keys "
        "or features that are not the Join's)")
    fresh = (1 + edited.copies) * (served.rows - served.stale) + 2
    for entry in report.features:  # each copy's rows keep their own truth
        assert (entry.rows, entry.stale) == (fresh, (1 + edited.copies) * served.stale), entry
        assert entry.mismatches == (entry.feature == TAMPERED), entry
        assert (entry.missing, entry.extra) == (0, 0), entry
        if entry.check == BOUND:
            assert entry.within_bound_rate == 1.0, entry


def test_a_tampered_value_is_one_mismatch(edited: Edited) -> None:
    report = edited.report
    bad = report.feature(TAMPERED)
    assert (bad.mismatches, bad.missing, bad.extra) == (1, 0, 0)
    assert bad.smape_max == pytest.approx(0.4)  # |1.5v − v| / ((1.5v + v) / 2)
    assert [entry.feature for entry in report.features if entry.mismatches] == [TAMPERED]
    n = len(report.features)
    assert report.summary().startswith(f"{n - 1} of {n} features match exactly")
    assert sum(point.mismatches for point in report.timeline) == 1
    assert list(report.feature_timelines) == [TAMPERED]

    differences = pq.read_table(edited.output / "differences.parquet").to_pylist()
    assert len(differences) == 1
    [difference] = differences
    row = edited.tampered
    assert (difference["request_id"], difference["feature"]) == ("tampered", TAMPERED)
    assert (difference["row_index"], difference["request_time"]) == (
        row["row_index"], row["request_time"])
    assert json.loads(difference["served"]) == pytest.approx(edited.true_value * 1.5)
    assert json.loads(difference["offline"]) == pytest.approx(edited.true_value)
    assert difference["smape"] == pytest.approx(0.4)
    histogram = report.histograms[TAMPERED]  # every other difference is 0
    assert (histogram.lo, histogram.hi) == (0.0, pytest.approx(edited.true_value * 0.5))
    assert len(histogram.counts) == 20
    assert (histogram.counts[0], histogram.counts[-1]) == (sum(histogram.counts) - 1, 1)


def test_each_kind_of_odd_row_is_named(served: Served, edited: Edited) -> None:
    """Rows that name another Join, lack a feature (served by an older definition), name
    another definition, have no request id (the oracle's bounds are joined by it), or hold
    features that json.loads does not read as Spark does: each kind is said, with its count."""
    said = " ".join(edited.warnings.split())
    total = (1 + edited.copies) * served.rows + 2 + UNREADABLE + OTHERS
    # 6 of the unreadable rows, and of the others the null request id and the features in
    # single quotes, which Spark does not read as JSON either
    assert (f"8 of {total:,} logged rows are unusable and left out (request_id null in 1; "
            "request_time null in 1; keys null in 1; features null or not a JSON object in "
            "4; stale null in 1)") in said
    assert "3 of the logged rows have keys that are not Join 'online''s key columns" in said
    assert "2 logged rows are of another Join ('other' (2)), not 'online'" in said
    assert (f"1 logged rows of Join 'online' lack some of its features ({TAMPERED}): served "
            "by another definition of it, they are left out") in said
    assert "1 logged rows have features that Spark read but json.loads does not" in said
    assert ("1 logged rows of Join 'online' were served by another definition of it (their "
            "definition column gives some of its GroupBys another digest") in said


def test_logs_of_another_join_or_definition_are_refused(
        spark: SparkSession, served: Served, tmp_path: Path) -> None:
    """A feature no logged row holds was not served null: the logs are of another definition."""
    users = served.join.parts[0].group_by
    added = tt.Join("online", served.join.left, [tt.GroupBy(
        "users", users.source, ["user_id"],
        [*AGGREGATIONS, tt.Aggregation("amount", "min", windows=["1d"])])])
    with pytest.raises(ConsistencyError, match=r"No usable logged row under .* holds the "
                                               r"feature users_amount_min_1d of Join 'online'"
                                               r".*Fix: pass the definitions of the Join that "
                                               "served these logs"):
        consistency(added, spark, served.logs)
    logs = _rewritten_logs(served, tmp_path, lambda table: _set_every(table, "join", "other"))
    with pytest.raises(ConsistencyError, match=rf"None of the {served.rows} usable logged rows "
                                               r".* is of Join 'online': their join column "
                                               rf"names 'other' \({served.rows}\)\. Fix: pass "
                                               "the definitions"):
        consistency(served.join, spark, logs)


def test_logs_of_a_definition_with_the_same_names_are_refused(
        spark: SparkSession, served: Served) -> None:
    """A ``where`` added to the source changes no feature name, but every served value may
    differ: the logs name the definition that served them, so they are refused, not scored
    as mismatches (logs of an earlier build, without a definition, are still compared: see
    :func:`edited`)."""
    users = served.join.parts[0].group_by
    source = users.source
    assert isinstance(source, tt.EventSource)
    filtered = tt.Join("online", served.join.left, [tt.GroupBy(
        "users", tt.EventSource(source.table, where="amount > 0"), ["user_id"],
        AGGREGATIONS)])
    assert filtered.output_columns() == served.join.output_columns()
    with pytest.raises(ConsistencyError, match=rf"None of the {served.rows} logged rows of "
                                               r"Join 'online' under .* that hold all of its "
                                               r"features was served by this definition of "
                                               r"it: .*Fix: pass the definitions of the Join "
                                               "that served these logs"):
        consistency(filtered, spark, served.logs)


def test_an_empty_log_file_is_refused(spark: SparkSession, served: Served,
                                      tmp_path: Path) -> None:
    """A 0-byte file (an OS crash under a build that did not sync) lost its rows: Spark
    would skip it without a word, so the job names it instead."""
    logs = tmp_path / "logs"
    shutil.copytree(served.logs, logs)
    (logs / served.join.name / "part-9999999999999-000000.parquet").write_bytes(b"")
    with pytest.raises(ConsistencyError, match=r"1 response log file under .* is empty "
                                               r"\(part-9999999999999-000000\.parquet\): what "
                                               r"it held was lost .*Fix: remove the empty "
                                               "files"):
        consistency(served.join, spark, logs)


def test_unusable_logs_name_the_column_they_lack(spark: SparkSession, served: Served,
                                                 tmp_path: Path) -> None:
    """A file written without ``stale`` reads as nulls: the error names the column and the
    file, and every column a row needs, not only keys, time and features."""
    logs = _rewritten_logs(served, tmp_path, lambda table: table.drop(["stale"]))
    with pytest.raises(ConsistencyError, match=rf"hold no usable row \({served.rows} rows; "
                                               rf"stale null in {served.rows}; stale absent "
                                               r"from the file part-0-000000\.parquet\)\. Fix: "
                                               r"rewrite or remove those rows or files: a "
                                               r"ResponseLog writes every column of its SCHEMA "
                                               r"\(request_id, join, row_index"):
        consistency(served.join, spark, logs)


def test_an_unreadable_left_source_is_named(spark: SparkSession, served: Served,
                                            tmp_path: Path) -> None:
    for table in (str(tmp_path / "no_such_left"), "no_db.no_table"):
        join = tt.Join("online", tt.EventSource(table, time_column="ts"), served.join.parts)
        with pytest.raises(ConsistencyError, match=rf"Cannot read join.left of Join 'online' "
                                                   rf"\({re.escape(table)}\): .*Fix: pass a "
                                                   "left source Spark can read"):
            consistency(join, spark, served.logs)


def test_logs_of_another_join_are_refused(spark: SparkSession, served: Served,
                                          tmp_path: Path) -> None:
    logs = _rewritten_logs(served, tmp_path, lambda table: _set_every(table, "keys", '{"uid": 1}'))
    with pytest.raises(ConsistencyError, match=r"None of the \d+ usable logged rows holds "
                                               r"Join 'online'\'s keys \(user_id, .*Fix: pass "
                                               "the definitions of the Join that served"):
        consistency(served.join, spark, logs)


def test_errors_name_the_logs(spark: SparkSession, served: Served, tmp_path: Path) -> None:
    with pytest.raises(ConsistencyError, match="No response logs of Join 'online' under"):
        consistency(served.join, spark, tmp_path)
    with pytest.raises(ConsistencyError, match=r"No response logs under file:.*/online: the "
                                               "path does not exist"):
        consistency(served.join, spark, f"file:{tmp_path}")
    (tmp_path / "taken").write_text("")
    with pytest.raises(ConsistencyError, match=r"The output .*taken .*is a file, not a folder"):
        consistency(served.join, spark, served.logs, output=tmp_path / "taken" / "report")
    logs = tmp_path / "logs"
    shutil.copytree(served.logs, logs)
    (logs / served.join.name / "part-9999999999999-000001.parquet").write_text("garbage")
    with pytest.raises(ConsistencyError, match=r"Cannot read the response logs under .*"
                                               "is not a Parquet file"):
        consistency(served.join, spark, logs)
    empty = tmp_path / "empty"
    (empty / served.join.name).mkdir(parents=True)
    with pytest.raises(ConsistencyError, match="hold no usable row"):
        consistency(served.join, spark, empty)


def test_arguments_of_the_wrong_type_are_named(spark: SparkSession, served: Served) -> None:
    group_by = served.join.parts[0].group_by
    with pytest.raises(TypeError, match=r"GroupBy.*, not a tt\.Join\. Fix: pass the Join"):
        consistency(group_by, spark, served.logs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"logs_dir is None, not a folder. Fix: give a str"):
        consistency(served.join, spark, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="output is 5, not a folder or None"):
        consistency(served.join, spark, served.logs, output=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="spark"):
        consistency(served.join, None, served.logs)  # type: ignore[arg-type]


# --- the pieces -----------------------------------------------------------------------------


@pytest.mark.parametrize(("served", "data_type", "expected"), [
    ("NaN", T.DoubleType(), math.nan),
    ("-Infinity", T.DoubleType(), -math.inf),
    (3, T.DoubleType(), 3.0),
    (3, T.LongType(), 3),
    (True, T.BooleanType(), True),
    ("日本語", T.StringType(), "日本語"),
    (["Infinity", 1.5], T.ArrayType(T.DoubleType()), [math.inf, 1.5]),
    ({"7": 2, "-1": 1}, T.MapType(T.LongType(), T.LongType()), {7: 2, -1: 1}),
    ({"true": 1}, T.MapType(T.BooleanType(), T.LongType()), {True: 1}),
    ({"NaN": 1, "0.5": 2}, T.MapType(T.DoubleType(), T.LongType()), {math.nan: 1, 0.5: 2}),
    ({"apple": [1.0, "NaN"]}, T.MapType(T.StringType(), T.ArrayType(T.DoubleType())),
     {"apple": [1.0, math.nan]}),
    (None, T.LongType(), None),
])
def test_served_values_decode_to_the_offline_type(served: Any, data_type: T.DataType,
                                                  expected: Any) -> None:
    from timetile.testing import same_value

    assert same_value(decode_served(served, data_type), expected)


def test_histogram_bins_hold_differences_past_the_double_range(spark: SparkSession) -> None:
    """hi − lo overflows to infinity past 1.8e308: the bins are found from halves."""
    from timetile.verify.compare import FeatureSpec
    from timetile.verify.consistency import _histograms

    differences = [-1.7e308, 0.0, 0.0, 0.0, 1.7e308, 1e308]
    frame = spark.createDataFrame([("f", value) for value in differences],
                                  "feature string, difference double")
    histogram = _histograms(spark, frame, [FeatureSpec("f", "g", "sum", "c", T.DoubleType())])
    counts = histogram["f"].counts
    assert sum(counts) == len(differences)
    assert (counts[0], counts[10], counts[15], counts[19]) == (1, 3, 1, 1)


def test_the_time_axis_names_hours_outside_iso_years() -> None:
    from timetile.verify.report_html import render_report
    from timetile.verify.results import FeatureConsistency, TimelinePoint

    report = ConsistencyReport("j", "logs", 2, [FeatureConsistency("f", "g", "sum", EXACT, 2,
                                                                   0, 2, 0, 0)],
                               [TimelinePoint(HOUR_MS, 1, 0), TimelinePoint(2**62, 1, 0)])
    assert ("hour of request time, 1970-01-01T01h to epoch ms 4611686018427387904 UTC"
            in render_report(report))


def test_an_int_never_decodes_where_a_float_was_not_served() -> None:
    assert decode_served(2.5, T.LongType()) == 2.5  # kept as is: same_value(2.5, 2) fails
    assert decode_served(True, T.DoubleType()) is True


def test_distances() -> None:
    assert smape(150.0, 100.0) == pytest.approx(0.4)
    assert smape(-0.0, 0.0) == 0.0
    assert smape(math.inf, math.inf) == 0.0
    assert smape(math.inf, 1.0) == 2.0
    assert smape(5e-324, 0.0) == smape(1e308, -1e308) == 2.0  # no underflow, no overflow
    assert smape(1.7e308, 1.6e308) == pytest.approx(0.1 / 1.65)
    assert edit_distance(["a", "b", "c"], ["b", "c", "d"]) == 2
    assert edit_distance([math.nan], [math.nan]) == 0


def test_bounds() -> None:
    assert within_unique_count(0, 0)
    assert not within_unique_count(1, 0)
    assert not within_unique_count(None, 3)
    assert within_unique_count({"a": 100}, {"a": 101})
    assert not within_unique_count({"a": 100}, {"a": 100, "b": 1})
    bounds = [{"lo": 1.0, "hi": 2.0}, {"lo": 5.0, "hi": math.nan}]
    assert within_percentiles([1.5, math.nan], bounds)
    assert not within_percentiles([2.5, 6.0], bounds)
    assert not within_percentiles(None, bounds)
    assert within_percentiles({"x": [1.0]}, {"x": [{"lo": 0.0, "hi": 1.0}]})


def test_svg_plots_parse_and_count() -> None:
    svg = ET.fromstring(histogram_svg(Histogram(-2.0, 2.0, (1, 0, 3, 7)), title="a < b & c"))
    ns = "{http://www.w3.org/2000/svg}"
    assert len(svg.findall(f"{ns}rect")) == 4
    heights = [float(rect.get("height", "")) for rect in svg.findall(f"{ns}rect")]
    assert heights[3] == max(heights)
    assert heights[1] == 0
    assert any(text.text == "a < b & c" for text in svg.iter(f"{ns}text"))
    lines = ET.fromstring(line_svg({"all": [(0, 0.0), (1, 0.5), (2, 0.0)], "f": [(1, 1.0)]}))
    assert len(lines.findall(f"{ns}polyline")) == 2
    assert len(lines.findall(f"{ns}circle")) == 4
    empty = ET.fromstring(line_svg({"all": []}))
    assert empty.findall(f"{ns}circle") == []


def test_specs_follow_prefixes_and_key_mappings() -> None:
    from timetile.verify.consistency import approx_parts, feature_ops

    views = tt.GroupBy("views", tt.EventSource("v"), ["user_id"], [
        tt.Aggregation("x", "sum", windows=["1d"], buckets=["b"]),
        tt.Aggregation("x", "approx_percentile", percentiles=[0.5])])
    join = tt.Join("j", tt.EventSource("q"), [
        views, tt.JoinPart(views, prefix="host", key_mapping={"host_id": "user_id"})])
    assert [name for name, _, _ in feature_ops(join)] == join.output_columns()
    assert [op for _, _, op in feature_ops(join)] == ["sum", "approx_percentile"] * 2
    parts = approx_parts(join)
    assert [part.left_keys for part in parts] == [("user_id",), ("host_id",)]
    assert [part.output_columns() for part in parts] == [
        ["views_x_approx_percentile"], ["host_views_x_approx_percentile"]]
