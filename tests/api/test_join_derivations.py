"""``Join(derivations=...)``: the output's column list and the checks that need no engine.

Expressions themselves are checked against the real schemas in
``tests/offline/test_derivations.py``.
"""

from __future__ import annotations

import dataclasses

import pytest

import timetile as tt

VIEWS = tt.GroupBy("user_views", tt.EventSource("events.views", time_column="ts"), ["user_id"],
                   [tt.Aggregation("duration", "count", windows=["7d"]),
                    tt.Aggregation("duration", "sum", windows=["7d"])])
BUYS = tt.GroupBy("user_purchases", tt.EventSource("events.buys", time_column="ts"),
                  ["user_id"], [tt.Aggregation("amount", "count", windows=["7d"])])
LEFT = tt.EventSource("events.checkouts", time_column="ts")
FEATURES = ["user_views_duration_count_7d", "user_views_duration_sum_7d",
            "user_purchases_amount_count_7d"]
RATIO = "user_views_duration_count_7d / nullif(user_purchases_amount_count_7d, 0)"


def join(derivations: object) -> tt.Join:
    return tt.Join("checkout_model", LEFT, [VIEWS, BUYS],
                   derivations=derivations)  # type: ignore[arg-type]


def problems(derivations: object) -> list[tuple[str, str]]:
    with pytest.raises(tt.DefinitionError) as caught:
        join(derivations)
    text = str(caught.value)
    assert text.startswith(f"{len(caught.value.problems)} problem")
    assert "in Join 'checkout_model'" in text
    return [(problem.field, str(problem)) for problem in caught.value.problems]


class TestColumns:
    @pytest.mark.parametrize("derivations", [None, {}, {"*": "*"}])
    def test_without_derivations_the_output_is_the_features(self, derivations: object) -> None:
        plain = join(derivations)
        assert plain.output_columns() == plain.final_columns() == FEATURES
        assert plain.derived_columns() == []
        assert plain.keeps_features
        assert plain.derivation_items == ()

    def test_star_keeps_every_feature_then_the_derived_in_order(self) -> None:
        derived = join({"views_per_purchase": RATIO, "*": "*", "unspent": "1 - 2"})
        assert derived.final_columns() == [*FEATURES, "views_per_purchase", "unspent"]
        assert derived.derived_columns() == ["views_per_purchase", "unspent"]
        assert derived.derivation_items == (("views_per_purchase", RATIO), ("unspent", "1 - 2"))
        assert derived.output_columns() == FEATURES  # the feature columns, as before

    def test_without_star_only_the_derived_follow_the_left_columns(self) -> None:
        derived = join({"b": "user_views_duration_sum_7d", "a": RATIO})
        assert not derived.keeps_features
        assert derived.final_columns() == ["b", "a"]
        assert derived.output_columns() == FEATURES

    def test_without_star_a_derived_column_may_take_a_feature_name(self) -> None:
        derived = join({"user_views_duration_count_7d": "coalesce(user_views_duration_sum_7d, 0)"})
        assert derived.final_columns() == ["user_views_duration_count_7d"]

    def test_the_definition_stays_frozen_hashable_and_equal(self) -> None:
        one = join({"*": "*", "ratio": RATIO})
        same = join({"*": "*", "ratio": RATIO})
        assert one == same
        assert hash(one) == hash(same)
        assert one != join({"ratio": RATIO, "*": "*"})  # the order is part of the output
        with pytest.raises(AttributeError):
            one.derivations = None  # type: ignore[misc]


class TestErrors:
    @pytest.mark.parametrize("derivations", ["a / b", [("ratio", RATIO)], 3])
    def test_not_a_mapping(self, derivations: object) -> None:
        [(field, message)] = problems(derivations)
        assert field == "derivations"
        assert "is not a mapping. Fix: give derivations={'name': 'spark sql expression'" in message

    @pytest.mark.parametrize("value", ["user_views_duration_count_7d", "", "**", None])
    def test_star_maps_only_to_star(self, value: object) -> None:
        [(field, message)] = problems({"*": value, "ratio": RATIO})
        assert field == "derivations['*']"
        assert f"maps to {value!r}, and '*' can only map to '*'. Fix: write '*': '*'" in message

    @pytest.mark.parametrize("name", ["views per purchase", "1st", "", "a-b", "_tt_ratio", 7])
    def test_names_are_identifiers(self, name: object) -> None:
        [(field, message)] = problems({name: RATIO})
        assert field == f"derivations[{name!r}]"
        assert f"{name!r} is not a valid column name. Fix: use letters, digits and" in message

    @pytest.mark.parametrize("expression", ["", "   ", None, 42, ["a"]])
    def test_expressions_are_non_empty_strings(self, expression: object) -> None:
        [(field, message)] = problems({"ratio": expression})
        assert field == "derivations['ratio']"
        assert f"{expression!r} is not an expression. Fix: write a Spark SQL expression" in message

    @pytest.mark.parametrize("name", ["user_views_duration_sum_7d", "USER_VIEWS_DURATION_SUM_7D"])
    def test_a_derived_name_may_not_be_a_kept_feature(self, name: str) -> None:
        [(field, message)] = problems({"*": "*", name: "1"})
        assert field == f"derivations[{name!r}]"
        assert "is a feature column, which '*' keeps. Fix: give the derived column another" in (
            message)

    def test_derived_names_differ_in_more_than_case(self) -> None:
        [(field, message)] = problems({"ratio": RATIO, "Ratio": "1"})
        assert field == "derivations['Ratio']"
        assert "'Ratio' differs from 'ratio' only in case" in message

    def test_every_problem_is_listed_at_once(self) -> None:
        found = problems({"*": "all", "bad name": RATIO, "empty": " ", "ok": RATIO})
        assert [field for field, _ in found] == [
            "derivations['*']", "derivations['bad name']", "derivations['empty']"]


@pytest.mark.parametrize("derivations", [None, {"*": "*", "ratio": RATIO}, {"ratio": RATIO}])
def test_replace_takes_a_definitions_own_fields_back(derivations: object) -> None:
    """``dataclasses.replace`` re-checks the stored pairs of derivations and key_mapping."""
    original = join(derivations)
    renamed = dataclasses.replace(original, name="renamed")
    assert (renamed.name, renamed.derivations, renamed.final_columns()) == (
        "renamed", original.derivations, original.final_columns())
    part = tt.JoinPart(VIEWS, prefix="guest", key_mapping={"guest_id": "user_id"})
    host = dataclasses.replace(part, prefix="host")
    assert (host.left_keys, host.output_columns()) == (
        ("guest_id",), ["host_user_views_duration_count_7d", "host_user_views_duration_sum_7d"])
