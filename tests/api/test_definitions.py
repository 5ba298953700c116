"""Definitions validate on construction; every error names the field and the fix."""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

import pytest

import timetile as tt
from timetile.api.schema import check_join
from timetile.core.timeutil import DAY_MS, HOUR_MS

VIEWS = tt.EventSource("events.views", time_column="ts")


def views_group_by(**overrides: object) -> tt.GroupBy:
    arguments: dict[str, object] = {
        "name": "user_views",
        "source": VIEWS,
        "keys": ["user_id"],
        "aggregations": [tt.Aggregation("duration", "sum", windows=["1h", "7d"])],
    }
    arguments.update(overrides)
    return tt.GroupBy(**arguments)  # type: ignore[arg-type]


def raises(match: str):  # type: ignore[no-untyped-def]
    return pytest.raises(tt.DefinitionError, match=match)


class TestWindow:
    def test_names_follow_the_contract(self) -> None:
        assert tt.Window("7d").name == "7d"
        assert tt.Window("90m").name == "90m"
        assert tt.Window("7d", hop="1h").name == "7d_hop1h"
        assert tt.Window("7d", hop="1h", kind="hopping").name == "7d_hopping1h"
        assert tt.Window(DAY_MS).name == "1d"
        assert tt.Window("24h").name == "1d"

    def test_kinds_and_lengths(self) -> None:
        window = tt.Window("7d", hop="1h")
        assert (window.length_ms, window.hop_ms, window.kind) == (7 * DAY_MS, HOUR_MS, "sawtooth")

    @pytest.mark.parametrize(
        ("arguments", "field"),
        [
            (("7x",), "length"),
            (("",), "length"),
            (("0d",), "length"),
            ((-5,), "length"),
            ((1.5,), "length"),
            (("1h", "2h"), "hop"),
            (("1d", None, "hopping"), "hop"),
            (("1d", "1h", "sliding"), "hop"),
            (("1d", "1h", "tumbling"), "kind"),
        ],
    )
    def test_bad_windows_name_the_field_and_the_fix(self, arguments: tuple, field: str) -> None:
        with pytest.raises(tt.DefinitionError) as caught:
            tt.Window(*arguments)
        assert caught.value.problems[0].field == field
        assert "Fix:" in str(caught.value)


def test_windows_longer_than_ten_thousand_years_are_refused() -> None:
    assert tt.Window("3650000d").length_ms == 3_650_000 * DAY_MS
    with raises(r"length: '3650001d' is longer than 10,000 years\. Fix: leave windows out"):
        tt.Window("3650001d")
    with raises(r"length: 9223372036854775807 is longer than 10,000 years"):
        tt.Window(2**63 - 1)


class TestAggregation:
    def test_unknown_op_suggests_the_closest(self) -> None:
        with raises(r"op: 'summ' is not an op\. Fix: use one of .*did you mean 'sum'"):
            tt.Aggregation("duration", "summ")

    def test_missing_k(self) -> None:
        with raises(r"k: last_k needs k\. Fix: give k=5"):
            tt.Aggregation("listing_id", "last_k", windows=["30d"])

    def test_k_where_it_does_not_apply(self) -> None:
        with raises(r"k: sum takes no k\. Fix: drop k; only first_k, last_k, top_k, bottom_k"):
            tt.Aggregation("duration", "sum", k=3)

    @pytest.mark.parametrize("k", [0, -1, True, 2.5])
    def test_bad_k(self, k: object) -> None:
        with raises(r"k: .* is not a positive int"):
            tt.Aggregation("listing_id", "top_k", k=k)  # type: ignore[arg-type]

    def test_percentiles(self) -> None:
        with raises("percentiles: approx_percentile needs percentiles"):
            tt.Aggregation("duration", "approx_percentile")
        with raises(r"percentiles: .* are not ranks in \[0, 1\]"):
            tt.Aggregation("duration", "approx_percentile", percentiles=[0.5, 1.5])
        agg = tt.Aggregation("duration", "approx_percentile", percentiles=[0.5, 0.95])
        assert agg.percentiles == (0.5, 0.95)
        with raises(r"percentiles: \[True\] are not ranks"):  # a bool is no rank
            tt.Aggregation("duration", "approx_percentile", percentiles=[True])

    def test_numpy_params(self) -> None:
        """numpy's arrays, floats and ints are what a notebook passes."""
        np = pytest.importorskip("numpy")
        agg = tt.Aggregation("duration", "approx_percentile",
                             percentiles=np.array([0.5, np.float32(0.25)]))
        assert agg.percentiles == (0.5, 0.25)
        top = tt.Aggregation("listing_id", "top_k", k=np.int64(5))
        assert top.k == 5
        assert type(top.k) is int

    def test_buckets_must_be_ordered(self) -> None:
        """A set's order, and so the output columns', would change from run to run."""
        with raises(r"buckets: .* is not a list of columns\. Fix: write buckets=\['category'\]"):
            tt.Aggregation("duration", "sum", buckets={"category", "shop"})  # type: ignore[arg-type]

    def test_bad_windows(self) -> None:
        with raises(r"windows\.length: '7 days' is not a duration"):
            tt.Aggregation("duration", "sum", windows=["7 days"])
        with raises(r"windows: is a single window, not a list\. Fix: write windows=\['7d'\]"):
            tt.Aggregation("duration", "sum", windows="7d")  # type: ignore[arg-type]
        with raises("windows: repeats 1d"):
            tt.Aggregation("duration", "sum", windows=["1d", "24h"])

    def test_column_names(self) -> None:
        agg = tt.Aggregation("duration", "sum", windows=["1h", tt.Window("7d", hop="1h")])
        assert agg.column_names("user_views") == [
            "user_views_duration_sum_1h",
            "user_views_duration_sum_7d_hop1h",
        ]
        prefixed = agg.column_names("user_views", prefix="guest")
        assert prefixed[0] == "guest_user_views_duration_sum_1h"
        assert tt.Aggregation("duration", "max").column_names("v") == ["v_duration_max"]


class TestGroupBy:
    def test_frozen(self) -> None:
        group_by = views_group_by()
        with pytest.raises(AttributeError):
            group_by.name = "other"  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("overrides", "match"),
        [
            ({"name": "user views"}, "name: 'user views' is not a valid name"),
            ({"keys": []}, "keys: .* names no key column"),
            ({"keys": ["user_id", "user_id"]}, "keys: .* repeats a column"),
            ({"aggregations": []}, "aggregations: is empty"),
            ({"aggregations": None}, "aggregations: an event source needs aggregations"),
            ({"aggregations": ["sum"]}, r"aggregations\[0\]: 'sum' is not an Aggregation"),
            ({"source": "events.views"}, "source: 'events.views' is not a source"),
            ({"accuracy": "snapshot"}, "accuracy: 'snapshot' is unknown"),
        ],
    )
    def test_bad_group_bys(self, overrides: dict, match: str) -> None:
        with raises(match):
            views_group_by(**overrides)

    def test_repeated_output_columns(self) -> None:
        aggregation = tt.Aggregation("duration", "sum", windows=["1d"])
        with raises("produce the column user_views_duration_sum_1d more than once"):
            views_group_by(aggregations=[aggregation, aggregation])

    @pytest.mark.parametrize("name", ["_tt", "_TT", "_tt_views", "_Tt_x"])
    def test_names_that_begin_timetiles_own_columns_are_refused(self, name: str) -> None:
        """A prefix ``_tt`` made a feature ``_tt_value_x_sum``: the name of the sweep's
        own value column of another part's ``x_sum``, which took the left rows for events
        (no row came back)."""
        with raises(rf"name: '{name}' would begin column names with '_tt_', which in any "
                    r"case are timetile's own\. Fix: use another name"):
            tt.JoinPart(views_group_by(), prefix=name)
        with raises(rf"in GroupBy:\n  - name: '{name}' would begin column names with '_tt_'"):
            views_group_by(name=name)
        tt.JoinPart(views_group_by(), prefix="_ttl")  # its columns begin with _ttl_

    def test_output_columns_that_differ_in_case_are_one_column(self) -> None:
        """Spark reads them as one: no prefix of the Join could tell them apart."""
        with raises(r"aggregations: produce the columns user_views_Duration_sum_1d and "
                    r"user_views_duration_sum_1d, which differ only in case: Spark reads "
                    r"them as one column\. Fix: remove one of the aggregations"):
            views_group_by(aggregations=[tt.Aggregation("duration", "sum", windows=["1d"]),
                                         tt.Aggregation("Duration", "sum", windows=["1d"])])

    def test_windows_need_a_time_column(self) -> None:
        ratings = tt.EntitySource("ratings_snapshots", mutation_table="rating_mutations")
        with raises(r"aggregations\[0\]\.windows: source ratings_snapshots has no time column"):
            tt.GroupBy("ratings", ratings, ["listing_id"],
                       [tt.Aggregation("rating", "avg", windows=["90d"])])
        tt.GroupBy("ratings", ratings, ["listing_id"], [tt.Aggregation("rating", "avg")])


class TestSources:
    def test_select_and_where_normalize(self) -> None:
        source = tt.EventSource("t", select={"amount": "price * 2", "ts": "ts"}, where="price > 0")
        assert source.select == (("amount", "price * 2"), ("ts", "ts"))
        assert source.where == ("price > 0",)
        assert tt.EventSource("t", select=["a", "ts"]).select == (("a", "a"), ("ts", "ts"))
        entity = tt.EntitySource("s", select={"user_id": "user_id", "level": "upper(tier)"})
        copied = dataclasses.replace(entity, snapshot_table="other")  # normalized again
        assert copied.select == entity.select == (("user_id", "user_id"),
                                                  ("level", "upper(tier)"))
        assert dataclasses.replace(source, table="u").select == source.select

    @pytest.mark.parametrize(
        ("arguments", "match"),
        [
            ({"table": ""}, "table: is empty"),
            ({"table": 42}, "table: int is not a table"),
            ({"table": "t", "time_column": ""}, "time_column: is missing"),
            ({"table": "t", "select": "a, b"}, "select: a single string is ambiguous"),
            ({"table": "t", "select": []}, "select: selects no columns"),
            ({"table": "t", "where": [""]}, "where: .* is not a filter"),
        ],
    )
    def test_bad_sources(self, arguments: dict, match: str) -> None:
        with raises(match):
            tt.EventSource(**arguments)


class TestJoin:
    def test_prefix_and_key_mapping(self) -> None:
        part = tt.JoinPart(views_group_by(), prefix="guest", key_mapping={"guest_id": "user_id"})
        join = tt.Join("checkout_model", tt.EventSource("checkouts"), [part])
        assert join.output_columns() == [
            "guest_user_views_duration_sum_1h",
            "guest_user_views_duration_sum_7d",
        ]
        assert join.join_parts[0].left_keys == ("guest_id",)

    def test_same_group_by_twice_needs_a_prefix(self) -> None:
        views = views_group_by()
        with raises(r"parts\[1\]: produces 'user_views_duration_sum_1h', as parts\[0\] does\. "
                    r"Fix: give one of them a prefix"):
            tt.Join("m", tt.EventSource("checkouts"), [views, views])
        tt.Join("m", tt.EventSource("checkouts"), [views, tt.JoinPart(views, prefix="host")])

    def test_names_that_differ_only_in_case_are_one_column_to_spark(self) -> None:
        views = views_group_by()
        shouting = views_group_by(name="User_views",
                                  source=tt.EventSource("events.other_views"))
        with raises(r"parts\[1\]: produces 'User_views_duration_sum_1h', as parts\[0\] does "
                    r"\(as 'user_views_duration_sum_1h': Spark ignores case\)\. Fix: give one"):
            tt.Join("m", tt.EventSource("checkouts"), [views, shouting])
        with raises(r"select: names 'ts' and 'TS', one column to Spark"):
            tt.EventSource("events.views", select=["user_id", "ts", "TS"])
        with raises(r"select: names 'ts' twice"):
            tt.EventSource("events.views", select=["user_id", "ts", "ts"])

    def test_key_mapping_to_an_unknown_key(self) -> None:
        with raises(r"key_mapping: maps to \['guest'\], which are not keys of user_views"):
            tt.JoinPart(views_group_by(), key_mapping={"guest_id": "guest"})

    def test_bad_parts(self) -> None:
        with raises("parts: needs a non-empty list"):
            tt.Join("m", tt.EventSource("checkouts"), [])
        with raises(r"parts\[0\]: 'x' is not a GroupBy"):
            tt.Join("m", tt.EventSource("checkouts"), ["x"])  # type: ignore[list-item]
        for unordered in ({views_group_by()}, (part for part in [views_group_by()])):
            with raises("parts: .* is not a list. Fix: give parts=.*its order orders the output"):
                tt.Join("m", tt.EventSource("checkouts"), unordered)  # type: ignore[arg-type]
        assert tt.Join("m", tt.EventSource("checkouts"), (views_group_by(),)).parts


class TestSchemaChecks:
    LEFT: ClassVar = {"user_id": "int", "ts": "int", "guest": "string"}
    VIEWS: ClassVar = {"user_id": "int", "ts": "timestamp", "duration": "float",
                       "listing": "string", "tags": "array<string>"}

    def check(self, join: tt.Join, left: dict | None = None, views: dict | None = None) -> None:
        check_join(join, left or self.LEFT, {"user_views": views or self.VIEWS})

    def join(self, *aggregations: tt.Aggregation, **part: object) -> tt.Join:
        group_by = views_group_by(aggregations=list(aggregations))
        return tt.Join("m", tt.EventSource("checkouts"), [tt.JoinPart(group_by, **part)])

    def test_a_good_join_passes(self) -> None:
        self.check(self.join(tt.Aggregation("duration", "sum"),
                             tt.Aggregation("listing", "last_k", k=3)))

    def test_unknown_column_lists_the_columns(self) -> None:
        with raises(r"parts\[0\]\.aggregations\[0\]\.column: 'durration' is not a column of "
                    r"events\.views\. Fix: use one of .*did you mean 'duration'"):
            self.check(self.join(tt.Aggregation("durration", "sum")))

    def test_numeric_op_on_a_string(self) -> None:
        with raises(r"aggregations\[0\]\.op: avg needs a numeric column, and 'listing' is string"):
            self.check(self.join(tt.Aggregation("listing", "avg")))

    def test_unsupported_value_type(self) -> None:
        with raises(r"'tags' is array<string>, which no op reads\. Fix: cast it"):
            self.check(self.join(tt.Aggregation("tags", "count")))

    def test_key_type_mismatch(self) -> None:
        with raises(r"keys: key 'user_id' is int in user_views but 'guest' is string on the "
                    r"left side.*Fix: cast one side"):
            self.check(self.join(tt.Aggregation("duration", "sum"),
                                 key_mapping={"guest": "user_id"}))

    @pytest.mark.parametrize("nested", ["array<bigint>", "struct<a:int>", "map<string,int>"])
    def test_a_nested_key(self, nested: str) -> None:
        # the executors group by one value (Arrow has no comparison of nested values)
        with raises(rf"keys: key 'user_id' is {re.escape(nested)}, and a key must be one "
                    r"value.*Fix: cast it in the source's select, e.g. \{'user_id': "
                    r"'to_json\(user_id\)'\}"):
            self.check(self.join(tt.Aggregation("duration", "sum")),
                       left={"user_id": nested, "ts": "int"},
                       views={**self.VIEWS, "user_id": nested})

    def test_missing_left_key(self) -> None:
        with raises(r"key_mapping: 'user_id' is not a column of the left side checkouts"):
            self.check(self.join(tt.Aggregation("duration", "sum")), left={"ts": "int"})

    def test_a_left_column_differing_only_in_case_from_a_feature(self) -> None:
        with raises(r"prefix: outputs \['user_views_duration_sum_1h'\], which the left side "
                    r"already has"):
            self.check(self.join(tt.Aggregation("duration", "sum", windows=["1h"])),
                       left={**self.LEFT, "USER_VIEWS_DURATION_SUM_1H": "int"})

    def test_time_column_type(self) -> None:
        with raises(r"left\.time_column: 'ts' is float, not a time"):
            self.check(self.join(tt.Aggregation("duration", "sum")),
                       left={"user_id": "int", "ts": "float"})

    def test_all_problems_are_reported_at_once(self) -> None:
        with pytest.raises(tt.DefinitionError) as caught:
            self.check(self.join(tt.Aggregation("nope", "sum"), tt.Aggregation("listing", "sum")))
        assert len(caught.value.problems) == 2
        assert str(caught.value).startswith("2 problems in Join 'm':")


@pytest.mark.parametrize(("make", "match"), [
    (lambda: views_group_by(keys=None), r"keys: None names no key column"),
    (lambda: views_group_by(keys=5), r"keys: 5 names no key column"),
    (lambda: views_group_by(aggregations=tt.Aggregation("duration", "sum")),
     r"aggregations: Aggregation\(.*\) is not a list\. Fix: write aggregations=\["),
    (lambda: tt.Aggregation("duration", ["sum"]), r"op: \['sum'\] is not an op"),
    (lambda: tt.Aggregation("duration", "sum", windows=7),
     r"windows: 7 is not a list of windows"),
    (lambda: tt.Aggregation("duration", "approx_percentile", percentiles=0.5),
     r"percentiles: 0\.5 is not a list of ranks\. Fix: write percentiles=\[0\.5\]"),
    (lambda: tt.JoinPart(views_group_by(), key_mapping="user_id"),
     r"key_mapping: 'user_id' is not a mapping"),
    (lambda: tt.EntitySource("listings", partition_column=None),
     r"partition_column: None names no column\. Fix: .* its default 'ds'"),
    (lambda: tt.EntitySource("listings", time_column=""), r"time_column: '' names no column"),
    (lambda: tt.Aggregation("duration", "decayed_sum"),
     r"half_life: decayed_sum needs half_life\. Fix: give half_life='1d'"),
    (lambda: tt.Aggregation("duration", "decayed_avg", half_life="0d"),
     r"half_life: '0d' is not positive\. Fix: give a positive half-life, such as '1d'"),
    (lambda: tt.Aggregation("duration", "decayed_avg", half_life=-5),
     r"half_life: -5 ms is not positive"),
    (lambda: tt.Aggregation("duration", "decayed_count", half_life="a day"),
     r"half_life: 'a day' is not a duration\. Fix: write half_life='<n><unit>'"),
    (lambda: tt.Aggregation("duration", "decayed_count", half_life=1.5),
     r"half_life: 1\.5 is not a duration"),
    (lambda: tt.Aggregation("duration", "sum", half_life="1d"),
     r"half_life: sum takes no half_life\. Fix: drop half_life; only decayed_count, "
     r"decayed_sum, decayed_avg take it"),
])
def test_arguments_of_the_wrong_type_name_their_field(make: object, match: str) -> None:
    with raises(match):
        make()  # type: ignore[operator]


def test_two_group_bys_with_one_name_are_refused() -> None:
    a = views_group_by()
    b = views_group_by(source=tt.EventSource("events.other_views"))
    with raises(r"parts\[1\]\.group_by\.name: 'user_views' names another GroupBy too "
                r"\(parts\[0\]\)\. Fix: give each GroupBy its own name"):
        tt.Join("m", tt.EventSource("checkouts"), [tt.JoinPart(a, prefix="a"),
                                                   tt.JoinPart(b, prefix="b")])
    tt.Join("m", tt.EventSource("checkouts"), [tt.JoinPart(a, prefix="a"),
                                               tt.JoinPart(views_group_by(), prefix="b")])
