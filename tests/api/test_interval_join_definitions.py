"""``tt.IntervalJoin`` refuses a definition that cannot run, naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

import timetile as tt

ORDERS = tt.EventSource("orders", time_column="order_time")
DELIVERIES = tt.EventSource("deliveries", time_column="delivery_time")
CONDITION = "r.delivery_time BETWEEN l.order_time AND l.order_time + INTERVAL 1 HOUR"


def join(**change: Any) -> tt.IntervalJoin:
    arguments = {"name": "delivered", "left": ORDERS, "right": DELIVERIES,
                 "on": ["order_id"], "condition": CONDITION, **change}
    return tt.IntervalJoin(**arguments)


def test_a_join_is_a_source_with_prefixed_times() -> None:
    assert join().time_column == "joined_at"  # when each row is certain: no leak
    delivered = join(time_column="r_delivery_time", on=[("id", "order_id")])
    assert delivered.key_pairs == delivered.on == (("id", "order_id"),)
    assert hash(delivered) == hash(join(time_column="r_delivery_time", on=[("id", "order_id")]))
    group_by = tt.GroupBy("deliveries", delivered, ["l_id"],
                          [tt.Aggregation("r_fee", "sum", windows=["1d"])])
    assert group_by.source == tt.EventSource(delivered, time_column="r_delivery_time")
    assert group_by.source.label == "interval join 'delivered'"


@pytest.mark.parametrize(("change", "message"), [
    ({"condition": "l.order_time = r.delivery_time OR l.x = 1"},
     r"condition: .*has an OR.*Fix: join once per branch"),
    ({"condition": "r.delivery_time BETWEEN l.order_time AND l.order_time + l.deadline"},
     r"condition: .*never bounds how long a row of the left input.*r.delivery_time <= "
     r"l.order_time \+ l.deadline.*Fix: bound a time of l"),
    ({"condition": "r.delivery_time >= l.order_time"}, "never bounds how long a row of the left"),
    ({"condition": "l.order_time = r.fee AND r.delivery_time >= l.order_time"},
     r"'l.order_time = r.fee' bound\(s\) nothing"),
    ({"time_column": "l_fee"}, r"time_column: 'l_fee' is not a time of the join. Fix: name "
                               r"'joined_at' \(when each row is certain\) or one of "
                               "l_order_time, r_delivery_time"),
    ({"condition": ""}, r"condition: condition is empty. Fix: write SQL over"),
    ({"how": "outer"}, r"how: 'outer' is no join kind. Fix: use one of inner, left, right, full"),
    ({"on": []}, r"on: \[\] names no keys"),
    ({"on": [("a",)]}, r"on: \[\('a',\)\] names no keys"),
    ({"prefixes": ("x_", "x_")}, r"prefixes: .* are not two different prefixes"),
    ({"max_buffered": 0}, "max_buffered: 0 is not a positive count"),
    ({"left": "orders"}, r"left: 'orders' is not an event source. Fix: give a tt.EventSource"),
    ({"right": tt.EventSource("hourly", time_column="delivery_time", period="1h")},
     "right.period: joins rows of single events"),
    ({"name": ""}, "name: '' is no name"),
])
def test_bad_definitions_are_refused_before_any_job(change: dict[str, Any], message: str) -> None:
    with pytest.raises(tt.DefinitionError, match=message):
        join(**change)


def test_the_demo_definitions_build() -> None:
    import runpy
    from pathlib import Path

    import timetile.demo

    found = runpy.run_path(str(Path(timetile.demo.__file__).parent / "viewed_then_bought.py"))
    model = found["conversion_model"]
    source = model.parts[0].group_by.source
    assert source.table is found["viewed_then_bought"]
    assert source.time_column == "joined_at"
    assert model.output_columns()[-1] == "conversions_purchase_amount_sum_30d"
