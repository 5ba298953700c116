"""The naive oracle on hand-computed cases: every value below was worked out on paper.

Events of user 1, by time (ms), with ``amount`` / ``score`` / ``quantity`` / ``item``::

    t=0: 1.0 / 1.0 / 1 / a     t=2: 5.0 / NaN / 2 / b     t=2: 3.0 / -1.0 / 3 / c
    t=4: null everywhere       t=7: 2.0 / inf / 4 / a     t=10: 9.0 / NaN / 5 / a

user 2 has one event at t=-3 (amount 4.0); one event has a null key, one a null time.
Windows: ``10ms`` sliding, ``10ms_hop4ms`` sawtooth, ``10ms_hopping4ms`` hopping, ``3ms``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

import timetile as tt
from timetile.testing import (
    naive_backfill,
    percentile_rank_bounds,
    percentiles_within,
    random_events,
    random_queries,
    to_spark,
)

NAN, INF = math.nan, math.inf
DAY = 86_400_000

EVENTS = [  # user_id, ts, amount, score, quantity, item
    (1, 0, 1.0, 1.0, 1, "a"),
    (1, 2, 5.0, NAN, 2, "b"),
    (1, 2, 3.0, -1.0, 3, "c"),
    (1, 4, None, None, None, None),
    (1, 7, 2.0, INF, 4, "a"),
    (1, 10, 9.0, NAN, 5, "a"),
    (2, -3, 4.0, None, 6, "z"),
    (None, 5, 100.0, 100.0, 100, "n"),
    (1, None, 50.0, 50.0, 50, "q"),
]
EVENT_SCHEMA = "user_id bigint, ts bigint, amount double, score double, quantity int, item string"

LEFT = [  # user_id, other_id, item, ts, label
    (1, 2, "a", 10, "q10"),
    (1, 2, "a", 10, "q10"),  # a duplicate row
    (1, None, None, 11, "q11"),
    (1, 1, "a", 12, "q12"),
    (1, None, None, 13, "q13"),
    (1, None, None, 0, "q0"),
    (1, None, None, 3, "q3"),
    (1, None, None, 5, "q5"),
    (2, None, None, 7, "u2q7"),
    (2, None, None, 8, "u2q8"),
    (None, 1, None, 6, "nullkey"),
    (1, 1, "a", None, "nulltime"),
    (3, None, None, 10, "nokey"),
]
LEFT_SCHEMA = "user_id bigint, other_id bigint, item string, ts bigint, label string"

W10 = tt.Window(10)
SAW = tt.Window(10, hop=4)
HOP = tt.Window(10, hop=4, kind="hopping")
W3 = tt.Window(3)


def _aggregations() -> list[tt.Aggregation]:
    agg = tt.Aggregation
    return [
        agg("amount", "count", windows=[W10, SAW, HOP, W3]),
        agg("amount", "count"),
        agg("amount", "sum", windows=[W10, SAW, HOP]),
        agg("quantity", "sum", windows=[W10]),
        agg("quantity", "min", windows=[W10]),
        *(agg("amount", op, windows=[W10]) for op in (
            "avg", "min", "max", "variance", "stddev", "skew", "kurtosis", "unique_count",
            "approx_unique_count", "histogram")),
        agg("amount", "first", windows=[W10, W3]),
        agg("amount", "last", windows=[W10, W3]),
        agg("amount", "first_k", k=2, windows=[W10, W3]),
        agg("amount", "last_k", k=2, windows=[W10, W3]),
        agg("amount", "top_k", k=2, windows=[W10]),
        agg("amount", "bottom_k", k=2, windows=[W10]),
        agg("amount", "approx_percentile", percentiles=[0, 0.3, 0.5, 1], windows=[W10]),
        *(agg("score", op, windows=[W10]) for op in (
            "min", "max", "first", "last", "unique_count", "histogram")),
        agg("score", "top_k", k=2, windows=[W10]),
        agg("score", "bottom_k", k=2, windows=[W10]),
        agg("score", "first_k", k=3, windows=[W10]),
        agg("score", "last_k", k=3, windows=[W10]),
        agg("item", "first"),
        agg("item", "unique_count"),
        agg("item", "histogram"),
        agg("item", "last_k", k=2),
    ]


@pytest.fixture(scope="module")
def sources(spark: Any) -> tuple[tt.EventSource, tt.EventSource]:
    events = tt.EventSource(spark.createDataFrame(EVENTS, EVENT_SCHEMA), time_column="ts")
    left = tt.EventSource(spark.createDataFrame(LEFT, LEFT_SCHEMA), time_column="ts")
    return events, left


@pytest.fixture(scope="module")
def result(spark: Any, sources: tuple[tt.EventSource, tt.EventSource]) -> Any:
    events, left = sources
    ev = tt.GroupBy("ev", events, ["user_id"], _aggregations())
    cnt = tt.GroupBy("cnt", events, ["user_id"], [tt.Aggregation("amount", "count", [W10]),
                                                    tt.Aggregation("amount", "count")])
    pair = tt.GroupBy("pair", events, ["user_id", "item"], [tt.Aggregation("amount", "count")])
    join = tt.Join("hand", left, [
        ev, tt.JoinPart(cnt, prefix="other", key_mapping={"other_id": "user_id"}), pair,
    ])
    frame = naive_backfill(join, spark)
    return join, frame, frame.collect()


def _by_label(rows: list[Any]) -> dict[str, dict[str, Any]]:
    by_label: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_label.setdefault(row["label"], row.asDict(recursive=True))
    return by_label


def norm(value: Any) -> Any:
    """Comparable form: NaN is 'NaN', maps become sorted item lists, -0.0 stays signed."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return ("-0.0" if value == 0 and math.copysign(1, value) < 0 else value)
    if isinstance(value, (list, tuple)):
        return [norm(item) for item in value]
    if isinstance(value, dict):
        return sorted(((norm(k), norm(v)) for k, v in value.items()), key=repr)
    return value


def check(row: dict[str, Any], expected: dict[str, Any]) -> None:
    actual = {name: norm(row[name]) for name in expected}
    assert actual == {name: norm(value) for name, value in expected.items()}


def test_columns_rows_and_types(result: Any) -> None:
    join, frame, rows = result
    assert frame.columns == ["user_id", "other_id", "item", "ts", "label",
                             *join.output_columns()]
    assert frame.columns[-3:] == ["other_cnt_amount_count_10ms", "other_cnt_amount_count",
                                  "pair_amount_count"]
    assert Counter(tuple(row)[:5] for row in rows) == Counter(LEFT)
    types = {field.name: field.dataType.simpleString() for field in frame.schema.fields}
    assert types["label"] == "string"
    assert {types[name] for name in ("ev_amount_count_10ms", "ev_amount_unique_count_10ms",
                                     "ev_amount_approx_unique_count_10ms",
                                     "ev_quantity_sum_10ms", "ev_quantity_min_10ms")} == {"bigint"}
    assert types["ev_amount_sum_10ms"] == "double"
    assert types["ev_amount_last_k_3ms"] == "array<double>"
    assert types["ev_item_first"] == "string"
    assert types["ev_item_histogram"] == "map<string,bigint>"
    assert types["ev_amount_approx_percentile_10ms"] == "array<double>"


COUNTS = ["ev_amount_count_10ms", "ev_amount_count_10ms_hop4ms", "ev_amount_count_10ms_hopping4ms",
          "ev_amount_count_3ms", "ev_amount_count"]


@pytest.mark.parametrize(("label", "counts"), [
    # sliding [q-10, q), sawtooth [floor(q-10, 4), q), hopping [.., floor(q, 4)), 3ms, lifetime
    ("q10", [4, 4, 4, 1, 4]),  # t=0 is exactly q - 10: in; t=10 is q: out
    ("q11", [4, 5, 4, 1, 5]),  # sliding drops t=0; sawtooth keeps it; hopping ends at 8
    ("q12", [4, 5, 5, 1, 5]),
    ("q13", [2, 5, 5, 1, 5]),
    ("q0", [0, 0, 0, 0, 0]),
    ("q3", [3, 3, 0, 3, 3]),  # hopping [-8, 0) is empty
    ("q5", [3, 3, 3, 2, 3]),  # the null amount at t=4 is not counted
    ("u2q7", [1, 1, 1, 0, 1]),  # t=-3 is exactly q - 10
    ("u2q8", [0, 1, 1, 0, 1]),  # floor(-2, 4) = -4 (a true floor, not truncation)
    ("nullkey", [0, 0, 0, 0, 0]),
    ("nokey", [0, 0, 0, 0, 0]),
])
def test_window_kinds(result: Any, label: str, counts: list[int]) -> None:
    check(_by_label(result[2])[label], dict(zip(COUNTS, counts, strict=True)))


def test_sums_by_window(result: Any) -> None:
    rows = _by_label(result[2])
    names = ["ev_amount_sum_10ms", "ev_amount_sum_10ms_hop4ms", "ev_amount_sum_10ms_hopping4ms"]
    check(rows["q10"], dict(zip(names, [11.0, 11.0, 11.0], strict=True)))
    check(rows["q11"], dict(zip(names, [19.0, 20.0, 11.0], strict=True)))
    check(rows["q13"], dict(zip(names, [11.0, 20.0, 20.0], strict=True)))
    check(rows["u2q8"], dict(zip(names, [None, 4.0, 4.0], strict=True)))
    check(rows["q10"], {"ev_quantity_sum_10ms": 10, "ev_quantity_min_10ms": 1})
    check(rows["q11"], {"ev_quantity_sum_10ms": 14})


def test_every_op_on_one_window(result: Any) -> None:
    row = _by_label(result[2])["q10"]  # values (time, amount): (0, 1) (2, 5) (2, 3) (7, 2)
    check(row, {
        "ev_amount_avg_10ms": 2.75, "ev_amount_min_10ms": 1.0, "ev_amount_max_10ms": 5.0,
        "ev_amount_first_10ms": 1.0, "ev_amount_last_10ms": 2.0,
        "ev_amount_first_k_10ms": [1.0, 3.0], "ev_amount_last_k_10ms": [2.0, 5.0],
        "ev_amount_top_k_10ms": [5.0, 3.0], "ev_amount_bottom_k_10ms": [1.0, 2.0],
        "ev_amount_unique_count_10ms": 4, "ev_amount_approx_unique_count_10ms": 4,
        "ev_amount_histogram_10ms": {1.0: 1, 5.0: 1, 3.0: 1, 2.0: 1},
        # nearest rank of [1, 2, 3, 5]: ceil(p * 4)-th, the first for p = 0
        "ev_amount_approx_percentile_10ms": [1.0, 2.0, 2.0, 5.0],
    })
    # deviations from 2.75: -1.75 2.25 0.25 -0.75; Σd² = 8.75, Σd³ = 5.625, Σd⁴ = 35.328125
    assert row["ev_amount_variance_10ms"] == pytest.approx(8.75 / 3)
    assert row["ev_amount_stddev_10ms"] == pytest.approx(math.sqrt(8.75 / 3))
    assert row["ev_amount_skew_10ms"] == pytest.approx(2 * 5.625 / 8.75**1.5)
    assert row["ev_amount_kurtosis_10ms"] == pytest.approx(4 * 35.328125 / 8.75**2 - 3)


def test_ties_are_broken_by_value(result: Any) -> None:
    rows = _by_label(result[2])
    # 3ms at q=5: (2, 5.0) and (2, 3.0) tie on time; the null at t=4 is ignored
    check(rows["q5"], {"ev_amount_first_3ms": 3.0, "ev_amount_last_3ms": 5.0,
                       "ev_amount_first_k_3ms": [3.0, 5.0], "ev_amount_last_k_3ms": [5.0, 3.0]})
    # 3ms at q=3: (0, 1.0) (2, 5.0) (2, 3.0)
    check(rows["q3"], {"ev_amount_first_3ms": 1.0, "ev_amount_last_3ms": 5.0,
                       "ev_amount_first_k_3ms": [1.0, 3.0], "ev_amount_last_k_3ms": [5.0, 3.0]})


def test_nan_orders_above_every_number(result: Any) -> None:
    rows = _by_label(result[2])
    # q=10, scores (time, value): (0, 1.0) (2, NaN) (2, -1.0) (7, inf)
    check(rows["q10"], {
        "ev_score_min_10ms": -1.0, "ev_score_max_10ms": NAN, "ev_score_first_10ms": 1.0,
        "ev_score_last_10ms": INF, "ev_score_top_k_10ms": [NAN, INF],
        "ev_score_bottom_k_10ms": [-1.0, 1.0], "ev_score_first_k_10ms": [1.0, -1.0, NAN],
        "ev_score_last_k_10ms": [INF, NAN, -1.0], "ev_score_unique_count_10ms": 4,
        "ev_score_histogram_10ms": {1.0: 1, NAN: 1, -1.0: 1, INF: 1},
    })
    # q=11: (2, NaN) (2, -1.0) (7, inf) (10, NaN): the two NaNs are one value
    check(rows["q11"], {
        "ev_score_last_10ms": NAN, "ev_score_top_k_10ms": [NAN, NAN],
        "ev_score_unique_count_10ms": 3, "ev_score_histogram_10ms": {NAN: 2, -1.0: 1, INF: 1},
    })


def test_strings_over_lifetime(result: Any) -> None:
    rows = _by_label(result[2])
    check(rows["q11"], {"ev_item_first": "a", "ev_item_unique_count": 3,
                        "ev_item_histogram": {"a": 3, "b": 1, "c": 1},
                        "ev_item_last_k": ["a", "a"]})
    check(rows["q3"], {"ev_item_last_k": ["c", "b"], "ev_item_unique_count": 3})


def test_empty_windows_give_zero_counts_and_null_values(result: Any) -> None:
    join, _, rows = result
    by_label = _by_label(rows)
    for label in ("q0", "nullkey", "nokey"):
        for aggregation in join.join_parts[0].group_by.aggregations:
            counts = aggregation.op in ("count", "unique_count", "approx_unique_count")
            for name in aggregation.column_names("ev"):
                assert by_label[label][name] == (0 if counts else None), (label, name)
    # a single value: the sample variance is null, the mean is the value
    check(by_label["u2q7"], {"ev_amount_variance_10ms": None, "ev_amount_stddev_10ms": None,
                             "ev_amount_avg_10ms": 4.0})


def test_null_time_rows_get_null_features(result: Any) -> None:
    join, _, rows = result
    row = _by_label(rows)["nulltime"]
    assert all(row[name] is None for name in join.output_columns())


def test_duplicates_prefix_key_mapping_and_multi_key(result: Any) -> None:
    rows = [row.asDict(recursive=True) for row in result[2] if row["label"] == "q10"]
    assert len(rows) == 2
    assert norm(rows[0]) == norm(rows[1])
    by_label = _by_label(result[2])
    # other_id 2 at q=10: user 2's event at t=-3 is outside 10ms but in the lifetime
    check(by_label["q10"], {"other_cnt_amount_count_10ms": 0, "other_cnt_amount_count": 1,
                            "pair_amount_count": 2})  # (1, 'a') at t=0 and t=7
    check(by_label["q12"], {"other_cnt_amount_count_10ms": 4, "other_cnt_amount_count": 5,
                            "pair_amount_count": 3})
    check(by_label["q11"], {"other_cnt_amount_count": 0, "pair_amount_count": 0})


def test_start_end_and_snapshot_accuracy(spark: Any) -> None:
    events = tt.EventSource(spark.createDataFrame(
        [(1, -5, 1.0), (1, DAY - 1, 2.0), (1, DAY + 1, 4.0)],
        "user_id bigint, ts bigint, x double"))
    left = tt.EventSource(spark.createDataFrame(
        [(1, t, str(t)) for t in (-1, 0, DAY - 1, DAY, DAY + 5, 2 * DAY)] + [(1, None, "null")],
        "user_id bigint, ts bigint, label string"))
    temporal = tt.GroupBy("t", events, ["user_id"], [tt.Aggregation("x", "sum")])
    snapshot = tt.GroupBy("s", events, ["user_id"], [tt.Aggregation("x", "sum", ["1d"])],
                          accuracy=tt.Accuracy.SNAPSHOT)
    join = tt.Join("dates", left, [temporal, snapshot])

    rows = naive_backfill(join, spark, start="1970-01-01", end="1970-01-02").collect()
    # [0, 2 DAY): the start day from its first ms, the end day to its last; null times dropped
    assert {row["label"]: (row["t_x_sum"], row["s_x_sum_1d"]) for row in rows} == {
        "0": (1.0, 1.0),
        str(DAY - 1): (1.0, 1.0),
        str(DAY): (3.0, 2.0),
        str(DAY + 5): (7.0, 2.0),  # SNAPSHOT: as of the end of the day before, DAY+1 unseen
    }


def test_percentile_rank_bounds(spark: Any, sources: tuple[tt.EventSource, tt.EventSource]
                                ) -> None:
    events, left = sources
    part = tt.GroupBy("p", events, ["user_id"], [
        tt.Aggregation("amount", "approx_percentile", percentiles=[0, 0.5, 1], windows=[W10])])
    rows = _by_label(percentile_rank_bounds(tt.Join("bounds", left, [part]), spark, 0.25)
                     .collect())
    # q=10, sorted [1, 2, 3, 5]: lo = s[floor((p - .25) * 4)], hi = s[ceil((p + .25) * 4) + 1]
    bounds = rows["q10"]["p_amount_approx_percentile_10ms"]
    assert [(b["lo"], b["hi"]) for b in bounds] == [(1.0, 2.0), (1.0, 5.0), (3.0, 5.0)]
    assert rows["q0"]["p_amount_approx_percentile_10ms"] is None
    assert percentiles_within([2.0, 3.0, 5.0], [_Bound(**b) for b in bounds])
    assert not percentiles_within([3.0, 3.0, 5.0], [_Bound(**b) for b in bounds])
    assert percentiles_within(None, None)
    assert not percentiles_within([1.0], None)


def test_percentiles_finer_than_sparks_decimals(spark: Any,
                                                sources: tuple[tt.EventSource, tt.EventSource]
                                                ) -> None:
    """A percentile of more than 38 decimal places (``1e-40``) failed the oracle with
    DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION; its nearest rank is 1, as the engine says."""
    events, left = sources
    part = tt.GroupBy("p", events, ["user_id"], [
        tt.Aggregation("amount", "approx_percentile", percentiles=[1e-40, 1e-25 / 3, 1.0],
                       windows=[W10])])
    join = tt.Join("fine", left, [part])
    rows = _by_label(naive_backfill(join, spark).collect())
    assert rows["q10"]["p_amount_approx_percentile_10ms"] == [1.0, 1.0, 5.0]
    bounds = _by_label(percentile_rank_bounds(join, spark, 0.25).collect())
    found = bounds["q10"]["p_amount_approx_percentile_10ms"]
    assert [b["lo"] for b in found] == [1.0, 1.0, 3.0]
    assert percentiles_within([1.0, 1.0, 5.0], [_Bound(**b) for b in found])


class _Bound:
    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi


def test_random_data_is_self_consistent(spark: Any) -> None:
    """On generated data: every left row once, and the ops agree with one another."""
    event_table = random_events(120, 6, seed=11)
    query_table = random_queries(event_table, 60, seed=12)
    events = tt.EventSource(to_spark(spark, event_table), time_column="ts")
    left = tt.EventSource(to_spark(spark, query_table), time_column="ts")
    windows = ["1h", tt.Window("1d", hop="1h", kind="hopping")]
    ops = ("count", "unique_count", "histogram")
    part = tt.GroupBy("g", events, ["user_id"], [
        tt.Aggregation(column, op, windows=windows) for column in ("amount", "item") for op in ops
    ])
    join = tt.Join("random", left, [part])
    rows = naive_backfill(join, spark).collect()
    assert Counter(tuple(row)[:3] for row in rows) == Counter(
        zip(*(query_table.column(c).to_pylist() for c in ("user_id", "ts", "label")),
            strict=True))
    triples = [[tt.Aggregation(column, op, windows=windows).column_names("g")[index]
                for op in ops]
               for column in ("amount", "item") for index in range(len(windows))]
    for row in rows:
        if row["ts"] is None:
            assert all(row[name] is None for name in join.output_columns())
            continue
        for count, unique, histogram in triples:
            if row[count] == 0:
                assert row[unique] == 0
                assert row[histogram] is None
            else:
                assert sum(row[histogram].values()) == row[count]
                assert len(row[histogram]) == row[unique]
