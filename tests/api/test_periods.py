"""Pre-aggregated sources (``EventSource(period=...)``): what a definition may ask of them."""

from __future__ import annotations

import pytest

import timetile as tt

HOURLY = tt.EventSource("hourly_views", time_column="hour", period="1h")


def test_merging_ops_over_whole_periods_are_accepted() -> None:
    group_by = tt.GroupBy("h", HOURLY, ["user_id"], [
        tt.Aggregation("views", "sum", windows=["2h", tt.Window("1d", hop="1h")]),
        tt.Aggregation("longest", "max")])
    assert group_by.output_columns() == ["h_views_sum_2h", "h_views_sum_1d_hop1h",
                                         "h_longest_max"]


def test_an_op_that_does_not_merge_partials_names_the_fix() -> None:
    with pytest.raises(tt.DefinitionError, match=r"aggregations\[0\]\.op: avg does not merge "
                       r"partial aggregates.*sum\(sums\) / sum\(counts\)"):
        tt.GroupBy("h", HOURLY, ["user_id"], [tt.Aggregation("views", "avg")])


@pytest.mark.parametrize("window", ["90m", tt.Window("1d", hop="30m")])
def test_windows_must_be_whole_periods(window: str | tt.Window) -> None:
    with pytest.raises(tt.DefinitionError, match="not a whole number of periods of 1h"):
        tt.GroupBy("h", HOURLY, ["user_id"], [tt.Aggregation("views", "sum", windows=[window])])
