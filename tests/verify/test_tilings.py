"""The cuts of ``timetile verify``, and its options: checked without Spark (the guard in
tests/conftest.py fails a test here that starts it)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from timetile.cli.app import app
from timetile.cli.common import USAGE_ERROR
from timetile.core.timeutil import DAY_MS
from timetile.verify.tilings import MAX_RANDOM_CUTS, Tiling, parse_tilings, segments

TILINGS = st.sampled_from([Tiling("one"), Tiling("daily"), Tiling("random", 1),
                           Tiling("random", 3), Tiling("random", 50)])


def test_names_read_in_order_any_case_and_spacing() -> None:
    assert [t.name for t in parse_tilings(" One ,DAILY, random:12")] == [
        "one", "daily", "random:12"]
    assert parse_tilings(["daily", "one"]) == (Tiling("daily"), Tiling("one"))
    assert parse_tilings("one,Stream") == (Tiling("one"), Tiling("stream"))
    assert not Tiling("stream").incremental
    with pytest.raises(ValueError, match="micro-batches of rows, not segments"):
        segments(Tiling("stream"), 0, DAY_MS, seed=0)


@pytest.mark.parametrize(("text", "said"), [
    ("one,weekly", "'weekly' is not a tiling"),
    ("random", "'random' is not a tiling"),
    ("random:0", "random:N with N from 1"),
    (f"random:{MAX_RANDOM_CUTS + 1}", "random:N with N from 1"),
    ("one,one", "names 'one' twice"),
    ("one", "names only 'one', which has nothing to be compared with"),
    ("stream,daily", "names 'stream' first, but the first is the reference of exact features, "
                     "a batch backfill: name another first, e.g. 'daily,stream'"),
    ("stream", "e.g. 'one,stream'"),
    ("daily", "e.g. 'one,daily'"),
    ("", "'' is not a tiling"),
    ([], "tilings is empty"),
])
def test_a_bad_tiling_is_named_with_the_fix(text: str | list[str], said: str) -> None:
    with pytest.raises(ValueError, match="tilings") as caught:
        parse_tilings(text)
    assert said in str(caught.value)


def test_one_tiling_is_enough_when_leaks_are_its_comparison() -> None:
    assert parse_tilings("one", alone=True) == (Tiling("one"),)
    with pytest.raises(ValueError, match="or check leaks with it"):
        parse_tilings("daily")


@given(TILINGS, st.integers(-10 * DAY_MS, 10 * DAY_MS), st.integers(1, 5 * DAY_MS),
       st.integers(0, 2**32))
def test_segments_cover_the_range_without_gaps_overlaps_or_empties(
        tiling: Tiling, low: int, span: int, seed: int) -> None:
    cut = segments(tiling, low, low + span, seed=seed)
    assert cut[0][0] == low
    assert cut[-1][1] == low + span
    assert all(a < b for a, b in cut)
    assert all(left[1] == right[0] for left, right in itertools.pairwise(cut))
    if tiling.kind == "one":
        assert len(cut) == 1
    elif tiling.kind == "daily":
        assert all(a % DAY_MS == 0 for a, _ in cut[1:])
        assert len(cut) == (low + span - 1) // DAY_MS - low // DAY_MS + 1  # days touched
    else:
        assert len(cut) == min(tiling.cuts, span - 1) + 1
    assert segments(tiling, low, low + span, seed=seed) == cut  # the seed fixes the cuts


def test_daily_segments_are_the_days_of_the_range() -> None:
    assert segments(Tiling("daily"), DAY_MS // 2, 3 * DAY_MS, seed=0) == [
        (DAY_MS // 2, DAY_MS), (DAY_MS, 2 * DAY_MS), (2 * DAY_MS, 3 * DAY_MS)]


DEFS = str(Path(__file__).resolve().parents[2] / "timetile" / "demo" / "checkout_model.py")


@pytest.mark.parametrize(("options", "said"), [
    (["--tilings", "one,weekly"], "--tilings: 'weekly' is not a tiling"),
    (["--tilings", "random:0"], "random:N with N from 1"),
    (["--start", "2024-02-03", "--end", "2024-02-01"], "--start 2024-02-03 is after --end"),
    (["--start", "Feb 1"], "--start 'Feb 1' is not a date"),
    (["--sample", "0"], "--sample"),
    (["--tilings", "daily"], "or check leaks with it"),
    (["--tilings", "stream,one"], "e.g. 'one,stream'"),
    (["--stream-batch", "0"], "--stream-batch"),
])
def test_the_command_refuses_bad_options_before_spark_starts(options: list[str],
                                                             said: str) -> None:
    given = dict(zip(options[::2], options[1::2], strict=True))
    arguments = {"--start": "2024-02-01", "--end": "2024-02-29", **given}
    result = CliRunner().invoke(app, ["verify", DEFS, *(item for pair in arguments.items()
                                                        for item in pair)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == USAGE_ERROR, result.output
    assert said in " ".join(result.output.split())


def test_a_row_the_reference_lost_is_its_mismatch_and_compared_nowhere_else() -> None:
    import pyarrow as pa
    from pyspark.sql import types as T

    from timetile.verify.tiling_compare import _Feature, _Judge

    batch = pa.RecordBatch.from_pydict({
        "time": [1, 2, 3], "left": ['{"k":1}', '{"k":2}', '{"k":3}'],
        "p0": [None, True, True], "t0_0": [None, 5.0, 7.0],
        "p1": [True, True, None], "t1_0": [4.0, 5.5, None]})
    judged = _Judge([_Feature("f", "sum", T.DoubleType(), None)], ["one", "daily"],
                    [False, False], [set(), set()]).judge(batch)
    assert judged.to_pylist() == [
        {"feature": "f", "tiling": "one", "time": 1, "match": False, "left": '{"k":1}',
         "reference": "(row missing)", "value": "(row missing)", "moved": None},
        {"feature": "f", "tiling": "daily", "time": 2, "match": False, "left": '{"k":2}',
         "reference": "5.0", "value": "5.5", "moved": 0.5},
        {"feature": "f", "tiling": "daily", "time": 3, "match": False, "left": '{"k":3}',
         "reference": "7.0", "value": "(row missing)", "moved": None}]


def test_served_values_are_read_as_json_and_unserved_features_are_not_judged() -> None:
    """The stream tiling's values are the response log's JSON text; a derivation it never
    fetched is judged in no row of it, and still in the other tilings."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from timetile.verify.tiling_compare import _Feature, _Judge

    batch = pa.RecordBatch.from_pydict({
        "time": [1, 2], "left": ['{"k":1}', '{"k":2}'],
        "p0": [True, True], "t0_0": [[1.0, float("nan")], [2.0]], "t0_1": [3.0, 4.0],
        "p1": [True, True], "t1_0": [None, None], "t1_1": [3.5, 4.0],
        "p2": [True, True], "t2_0": ['[1,"NaN"]', "[2.5]"], "t2_1": [None, None]})
    features = [_Feature("f", "last_k", T.ArrayType(T.DoubleType()), None),
                _Feature("d", "derived", T.DoubleType(), None)]
    judged = _Judge(features, ["one", "daily", "stream"], [False, False, True],
                    [set(), {0}, {1}]).judge(batch).to_pylist()
    assert [(row["feature"], row["tiling"], row["time"], row["match"]) for row in judged] == [
        ("f", "stream", 1, True), ("d", "daily", 1, False),
        ("f", "stream", 2, False), ("d", "daily", 2, True)]
    assert judged[2]["reference"] == "[2.0]"
    assert judged[2]["value"] == "[2.5]"


@given(st.lists(st.integers(0, 100), max_size=30).map(sorted),
       st.sets(st.integers(1, 99), max_size=8).map(sorted))
def test_each_row_is_fetched_once_after_the_batch_that_streams_what_precedes_it(
        times: list[int], inner: list[int]) -> None:
    from timetile.verify.replay import _asked

    cuts = [0, *inner, 100]
    fetched = [(batch, position) for batch in range(len(cuts) - 1)
               for position in _asked(times, cuts, batch)]
    assert sorted(position for _, position in fetched) == [
        position for position, at in enumerate(times) if at <= 100]
    for batch, position in fetched:  # every row before it streamed, and nothing of a later batch
        assert cuts[batch] <= times[position] <= cuts[batch + 1]
        assert batch == 0 or times[position] > cuts[batch]


def test_a_derivation_of_an_approximate_feature_is_left_out_by_name() -> None:
    import timetile as tt
    from timetile.verify.tiling_compare import _uncomparable

    spend = tt.GroupBy("spend", tt.EventSource("events"), ["user_id"], [
        tt.Aggregation("amount", "approx_percentile", percentiles=[0.5]),
        tt.Aggregation("amount", "sum")])
    join = tt.Join("model", tt.EventSource("queries"), [spend], derivations={
        "*": "*", "median_share": "SPEND_amount_approx_percentile[0] / spend_amount_sum",
        "double_sum": "2 * spend_amount_sum"})
    assert _uncomparable(join) == ["median_share"]


def test_a_summary_says_rows_were_lost_without_counting_features() -> None:
    from timetile.verify.tiling_report import TilingRun, VerifyReport

    runs = [TilingRun("one", 1, 1, 10, 1.0, "no: one batch"),
            TilingRun("daily", 2, 2, 9, 1.0, "yes")]
    report = VerifyReport("model", "2024-01-01", "2024-01-02", "one", 10, runs, [])
    assert not report.passed
    assert report.summary().startswith("MISMATCH: rows lost or repeated (daily gave 9 rows)")
