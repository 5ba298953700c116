"""Derivations on real data: equal to the same SQL over the oracle; bad ones fail before a job.

The oracle's output (``naive_backfill`` of the Join without derivations) with each
expression computed on top by plain ``selectExpr`` is the truth for ``tt.backfill`` of the
Join with them, on random data with nulls, NaN, ±inf, duplicates and empty windows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from rich.console import Console

import timetile as tt
from timetile.cli.render import print_summary
from timetile.offline.derivations import apply_derivations, check_derivations
from timetile.offline.report import JobReport
from timetile.testing import (
    differing_cells,
    naive_backfill,
    random_events,
    random_queries,
    to_spark,
)

LEFT = ["user_id", "ts", "label"]
DERIVATIONS = {
    "amount_per_item": "views_amount_sum_1d / nullif(views_item_count_1d, 0)",
    "count_gap": "views_item_count_1d - buys_flag_count_1h",
    "label_twice": "label * 2",
}


def parts(events: Any) -> list[tt.GroupBy]:
    source = tt.EventSource(events, time_column="ts")
    return [
        tt.GroupBy("views", source, ["user_id"], [
            tt.Aggregation("amount", "sum", windows=["1d"]),
            tt.Aggregation("item", "count", windows=["1d"]),
        ]),
        tt.GroupBy("buys", source, ["user_id"], [tt.Aggregation("flag", "count", windows=["1h"])]),
    ]


@pytest.fixture(scope="module")
def frames(spark: Any) -> tuple[Any, Any]:
    table = random_events(400, 12, seed=21, days=3)
    events = to_spark(spark, table)
    queries = to_spark(spark, random_queries(table, 100, seed=22, window_lengths=("1h", "1d")))
    return events, queries


def join_of(frames: tuple[Any, Any], derivations: dict[str, str] | None) -> tt.Join:
    events, queries = frames
    return tt.Join("derived", tt.EventSource(queries, time_column="ts"), parts(events),
                   derivations=derivations)


@pytest.fixture(scope="module")
def expected(spark: Any, frames: tuple[Any, Any]) -> list[Any]:
    """The oracle's features, then each derivation by plain selectExpr on top."""
    plain = naive_backfill(join_of(frames, None), spark)
    return by_row(plain.selectExpr("*", *[f"{sql} AS {name}" for name, sql in
                                          DERIVATIONS.items()]).collect())


def by_row(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda row: (repr(row["user_id"]), repr(row["ts"]), repr(row["label"])))


def assert_same(ours: list[Any], theirs: list[Any], columns: list[str]) -> None:
    assert len(ours) == len(theirs) == 100
    mismatches = differing_cells(ours, theirs, columns)
    assert not mismatches, mismatches[:10]


def test_star_keeps_the_features_and_adds_the_derived(
    spark: Any, frames: tuple[Any, Any], expected: list[Any]
) -> None:
    join = join_of(frames, {"*": "*", **DERIVATIONS})
    output = tt.backfill(join, spark)
    features = join.output_columns()
    assert output.columns == [*LEFT, *features, *DERIVATIONS] == [*LEFT, *join.final_columns()]
    assert output.schema["amount_per_item"].dataType.simpleString() == "double"
    assert output.schema["count_gap"].dataType.simpleString() == "bigint"
    ours = by_row(output.collect())
    assert_same(ours, expected, output.columns)
    empty = [row for row in ours if row["views_item_count_1d"] == 0]
    assert empty, "the data should hold empty windows"
    assert all(row["amount_per_item"] is None for row in empty)  # 0 items: null, not an error


def test_without_star_only_the_derived_follow_the_left_columns(
    spark: Any, frames: tuple[Any, Any], expected: list[Any]
) -> None:
    join = join_of(frames, DERIVATIONS)
    output = tt.backfill(join, spark, executor="reference")
    assert output.columns == [*LEFT, *DERIVATIONS]
    assert_same(by_row(output.collect()), expected, output.columns)


def test_the_oracle_applies_derivations_too(
    spark: Any, frames: tuple[Any, Any], expected: list[Any]
) -> None:
    join = join_of(frames, {"label_twice": "label * 2 AS twice", "*": "*",
                            "amount_per_item": DERIVATIONS["amount_per_item"]})
    oracle = naive_backfill(join, spark)
    assert oracle.columns == [*LEFT, *join.output_columns(), "label_twice", "amount_per_item"]
    assert_same(by_row(oracle.collect()), expected, oracle.columns)


def test_the_check_leaves_pyspark_error_logging_whole(
    spark: Any, frames: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark logs analysis errors through loggers of its own class: the check, which
    silences them, must not create plain ones, on which every later error raised TypeError."""
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        monkeypatch.delitem(logging.Logger.manager.loggerDict, name, raising=False)
    tt.BackfillJob(join_of(frames, DERIVATIONS), spark).plan()
    with pytest.raises(AnalysisException, match="no_such_column"):
        _ = spark.range(1).select("no_such_column").schema


def test_division_by_zero_gives_null(spark: Any) -> None:
    events = spark.createDataFrame([(1, 10, 4.0), (1, 20, 2.0)],
                                   "user_id long, ts long, amount double")
    queries = spark.createDataFrame([(1, 30), (1, 5), (2, 30)], "user_id long, ts long")
    group_by = tt.GroupBy("g", tt.EventSource(events), ["user_id"], [
        tt.Aggregation("amount", "sum"), tt.Aggregation("amount", "count")])
    join = tt.Join("zero", tt.EventSource(queries), [group_by], derivations={
        "mean": "g_amount_sum / nullif(g_amount_count, 0)",
        "safe": "try_divide(g_amount_count, g_amount_count)",
    })
    rows = {(row["user_id"], row["ts"]): (row["mean"], row["safe"])
            for row in tt.backfill(join, spark).collect()}
    assert rows == {(1, 30): (3.0, 1.0), (1, 5): (None, None), (2, 30): (None, None)}


def test_no_derivations_leave_the_frame_alone(spark: Any, frames: tuple[Any, Any]) -> None:
    frame = spark.createDataFrame([(1, 2)], "a long, b long")
    for derivations in (None, {"*": "*"}):
        join = join_of(frames, derivations)
        assert apply_derivations(join, frame) is frame
        check_derivations(join, frame)  # nothing to check: no error


@pytest.fixture
def job_group(spark: Any) -> Iterator[str]:
    """Tag the jobs this test starts, to show that a bad definition starts none."""
    context = spark.sparkContext
    context.setJobGroup("tt-derivations", "bad derivations must fail before any job")
    yield "tt-derivations"
    context.setLocalProperty("spark.jobGroup.id", None)
    context.setLocalProperty("spark.job.description", None)


def error_of(spark: Any, frames: tuple[Any, Any], derivations: dict[str, str]) -> str:
    with pytest.raises(tt.DefinitionError) as caught:
        tt.BackfillJob(join_of(frames, derivations), spark).plan()
    return str(caught.value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("views_amount_sum_id / 2", r"derivations\['ratio'\]: Spark cannot use 'views_amount_sum"
         r"_id / 2': A column, variable, or function parameter with name `views_amount_sum_id` "
         r"cannot be resolved\. Fix: use a left or feature column; the closest to "
         r"'views_amount_sum_id': views_amount_sum_1d"),
        ("lable * 2", r"name `lable` cannot be resolved\. Fix: .*closest to 'lable': label\."),
        ("zzzz + 1", r"name `zzzz` cannot be resolved\. Fix: use one of user_id, ts, label, "
         r"views_amount_sum_1d, views_item_count_1d, buys_flag_count_1h\."),
        ("views_amount_sum_1d /", r"derivations\['ratio'\]: Spark cannot use "
         r"'views_amount_sum_1d /': Syntax error at or near end of input\. Fix: write one Spark "
         r"SQL expression over the left and feature columns"),
        ("label, ts", r"Spark cannot use 'label, ts': Syntax error at or near ','"),
        ("size(label)", r"Spark cannot use 'size\(label\)': Cannot resolve \"size\(label\)\" "
         r"due to data type mismatch"),
        ("sum(label)", r"'sum\(label\)' is not one value per row: it aggregates rows\. Fix: "
         r"compute from the row's own columns: no aggregates \(sum, count\), window functions "
         r"\(OVER\) or generators \(explode\)\."),
        ("count(*)", r"'count\(\*\)' is not one value per row: it aggregates rows\. Fix"),
        ("label - avg(label) OVER ()", r"'label - avg\(label\) OVER \(\)' is not one value per "
         r"row: it is a window function\. Fix"),
        ("explode(array(label, ts))", r"is not one value per row: it generates rows\. Fix"),
        ("NULL", r"'NULL' has no type\. Fix: cast it, e\.g\. 'CAST\(NULL AS DOUBLE\)'"),
        ("(SELECT max(v) FROM VALUES (1) AS t(v))", r"holds a subquery, which reads rows other "
         r"than its own \(and may read past the row's time\)\. Fix: compute from the row's own "
         r"columns; join what else it needs to the left rows before the backfill"),
        ("label + 1 > 0 OR EXISTS (SELECT 1 FROM VALUES (2) AS t(v) WHERE v > ts)",
         r"holds a subquery"),
        ("label IN (SELECT v FROM VALUES (1) AS t(v))", r"holds a subquery"),
    ],
)
def test_a_bad_expression_fails_before_any_job(
    spark: Any, frames: tuple[Any, Any], job_group: str, expression: str, message: str
) -> None:
    text = error_of(spark, frames, {"*": "*", "ratio": expression})
    assert text.startswith("1 problem in Join 'derived':")
    assert re.search(message, text), text
    assert "SQLSTATE" not in text
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(job_group) == []


@pytest.mark.parametrize("name", ["label", "TS"])
def test_a_derived_name_may_not_be_a_left_column(
    spark: Any, frames: tuple[Any, Any], name: str
) -> None:
    text = error_of(spark, frames, {name: "views_amount_sum_1d * 2"})
    assert f"derivations[{name!r}]: {name!r} is a left column's name too, and the output keeps " \
           "it. Fix: give the derived column another name." in text


def test_every_problem_is_listed_at_once(spark: Any, frames: tuple[Any, Any]) -> None:
    text = error_of(spark, frames, {"ok": "label + 1", "label": "1", "a": "nope", "b": "1 +"})
    assert text.startswith("3 problems in Join 'derived':")
    for field in ("derivations['label']", "derivations['a']", "derivations['b']"):
        assert f"  - {field}: " in text


def test_check_derivations_sees_every_feature_even_unkept(spark: Any,
                                                         frames: tuple[Any, Any]) -> None:
    join = join_of(frames, {"x": "views_item_count_1d + buys_flag_count_1h + label"})
    frame = spark.createDataFrame([], "user_id long, ts long, label double, "
                                  "views_amount_sum_1d double, views_item_count_1d long, "
                                  "buys_flag_count_1h long")
    check_derivations(join, frame)
    assert apply_derivations(join, frame).columns == [*LEFT, "x"]


@pytest.mark.parametrize(("derivations", "line"), [
    (None, None),
    ({"*": "*", "x": "label"}, "derived  1 columns, written with the features"),
    ({"x": "label", "y": "ts"}, "derived  2 columns, written instead of the features"),
])
def test_the_demo_summary_says_what_the_output_holds(
    frames: tuple[Any, Any], derivations: dict[str, str] | None, line: str | None
) -> None:
    console = Console(record=True, width=120)
    print_summary(console, join_of(frames, derivations), JobReport("derived", "auto"), rows=3,
                  seconds=1.0, definitions=Path("defs.py"), output=Path("out"))
    text = console.export_text()
    assert "features  3 columns from 2 parts" in text
    assert ("derived  " in text) == (line is not None)
    assert line is None or line in text
