"""Bucketed aggregations: names, order and every validation error (field and fix)."""

from __future__ import annotations

from typing import Any

import pytest

import timetile as tt
from timetile.api.schema import check_join, group_by_problems

VIEWS = tt.EventSource("events.views", time_column="ts")
SCHEMA = {"user_id": "int", "ts": "int", "duration": "float", "category": "string",
          "shop": "string", "rank": "int"}


def problem_of(**arguments: Any) -> tuple[str, str, str]:
    with pytest.raises(tt.DefinitionError) as caught:
        tt.Aggregation(**arguments)
    (problem,) = caught.value.problems
    return problem.field, problem.message, problem.fix


def test_buckets_are_normalized_to_a_tuple() -> None:
    aggregation = tt.Aggregation("duration", "sum", buckets=["category", "shop"])
    assert aggregation.buckets == ("category", "shop")
    assert tt.Aggregation("duration", "sum").buckets is None
    assert aggregation == tt.Aggregation("duration", "sum", buckets=("category", "shop"))


def test_names_go_window_by_window_then_bucket_by_bucket() -> None:
    aggregation = tt.Aggregation("duration", "sum", windows=["1h", tt.Window("1d", hop="1h")],
                                 buckets=["category", "shop"])
    assert aggregation.column_names("views", prefix="guest") == [
        "guest_views_duration_sum_1h_by_category",
        "guest_views_duration_sum_1h_by_shop",
        "guest_views_duration_sum_1d_hop1h_by_category",
        "guest_views_duration_sum_1d_hop1h_by_shop",
    ]
    outputs = aggregation.outputs("views")
    assert [(window.name, bucket) for _, window, bucket in outputs] == [  # type: ignore[union-attr]
        ("1h", "category"), ("1h", "shop"), ("1d_hop1h", "category"), ("1d_hop1h", "shop")]


def test_lifetime_and_unbucketed_names() -> None:
    assert tt.Aggregation("duration", "count", buckets=["shop"]).column_names("v") == [
        "v_duration_count_by_shop"]
    assert tt.Aggregation("duration", "count").outputs("v") == [("v_duration_count", None, None)]


def test_a_bucketed_aggregation_gives_only_its_bucketed_columns() -> None:
    group_by = tt.GroupBy("views", VIEWS, ["user_id"], [
        tt.Aggregation("duration", "sum", windows=["1h"], buckets=["shop"]),
        tt.Aggregation("duration", "sum", windows=["1h"]),
    ])
    assert group_by.output_columns() == ["views_duration_sum_1h_by_shop", "views_duration_sum_1h"]


@pytest.mark.parametrize(
    ("buckets", "field", "message", "fix"),
    [
        ("shop", "buckets", "is a single column, not a list", "write buckets=['shop']"),
        ([], "buckets", "is empty", "give at least one bucket column, or None"),
        (["shop", ""], "buckets[1]", "'' is not a column name", "name a string column"),
        ([3], "buckets[0]", "3 is not a column name", "name a string column"),
        (["shop", "shop"], "buckets", "repeats shop", "list each bucket once"),
        (["duration"], "buckets[0]", "'duration' is the aggregated column",
         "bucket by another column"),
    ],
)
def test_bad_buckets_name_the_field_and_the_fix(buckets: Any, field: str, message: str,
                                                fix: str) -> None:
    got = problem_of(column="duration", op="sum", buckets=buckets)
    assert got[0] == field
    assert got[1] == message
    assert got[2].startswith(fix)


def test_schema_problems_of_buckets() -> None:
    group_by = tt.GroupBy("views", VIEWS, ["user_id"], [
        tt.Aggregation("duration", "sum", buckets=["category", "rank", "shopp"])])
    problems = group_by_problems(group_by, SCHEMA)
    assert [problem.field for problem in problems] == [
        "aggregations[0].buckets[1]", "aggregations[0].buckets[2]"]
    rank, missing = problems
    assert rank.message == "'rank' is int, and buckets must be strings"
    assert "cast it in the source's select" in rank.fix
    assert "CAST(rank AS STRING)" in rank.fix
    assert missing.message == "'shopp' is not a column of events.views"
    assert "did you mean 'shop'" in missing.fix


def test_check_join_names_the_part() -> None:
    group_by = tt.GroupBy("views", VIEWS, ["user_id"], [
        tt.Aggregation("duration", "count", windows=["1d"]),
        tt.Aggregation("duration", "max", windows=["1d"], buckets=["shop", "rank"])])
    join = tt.Join("m", tt.EventSource("checkouts"), [tt.JoinPart(group_by)])
    with pytest.raises(tt.DefinitionError, match=r"parts\[0\]\.aggregations\[1\]\.buckets\[1\]: "
                       r"'rank' is int, and buckets must be strings\. Fix: cast it in the "
                       r"source's select"):
        check_join(join, {"user_id": "int", "ts": "int"}, {"views": SCHEMA})
    good = tt.GroupBy("views", VIEWS, ["user_id"], [
        tt.Aggregation("duration", "max", windows=["1d"], buckets=["shop", "category"])])
    check_join(tt.Join("m", tt.EventSource("checkouts"), [tt.JoinPart(good)]),
               {"user_id": "int", "ts": "int"}, {"views": SCHEMA})
