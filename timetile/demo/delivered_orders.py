r"""Orders and their deliveries within the hour: an interval join, as a seller's feature.

Each order (a purchase) is joined with its delivery in the hour after it (an
``IntervalJoin``, seed 004; an order not delivered within the hour keeps its row, the
delivery's columns null), and each checkout asks how many of the seller's orders were
delivered within the hour, over the last week and month, and what the deliveries cost:

    timetile demo                                   # writes timetile-demo/data
    timetile join run timetile/demo/delivered_orders.py \\
        --output timetile-demo/output/delivered_orders_rows --show 5
    timetile backfill timetile/demo/delivered_orders.py --start 2024-02-01 \\
        --end 2024-02-29 --output timetile-demo/output/delivery_model --show 5

The tables are read from $TIMETILE_DEMO_DATA (default: timetile-demo/data).
"""

import os

import timetile as tt

DATA = os.environ.get("TIMETILE_DEMO_DATA", "timetile-demo/data")

orders = tt.EventSource(f"{DATA}/purchases", time_column="ts")
deliveries = tt.EventSource(f"{DATA}/deliveries", time_column="ts")
checkouts = tt.EventSource(f"{DATA}/checkouts", time_column="ts")

delivered = tt.IntervalJoin(
    name="delivered",
    left=orders,
    right=deliveries,
    on=["user_id", "listing_id"],
    condition="r.ts BETWEEN l.ts AND l.ts + INTERVAL 1 HOUR",
    how="left",
    prefixes=("order_", "delivery_"),
)

# Each row is an event at "joined_at", when it is certain: an order with its delivery at the
# delivery, an order without one an hour after it, once no delivery can still match.
seller_deliveries = tt.GroupBy(
    name="seller_deliveries",
    source=tt.EventSource(delivered, time_column="joined_at"),
    keys=["order_seller_id"],
    aggregations=[
        tt.Aggregation("order_ts", "count", windows=["7d", "30d"]),  # settled orders
        tt.Aggregation("delivery_ts", "count", windows=["7d", "30d"]),  # delivered in the hour
        tt.Aggregation("delivery_fee", "sum", windows=["30d"]),
    ],
)

delivery_model = tt.Join(
    name="delivery_model",
    left=checkouts,
    parts=[tt.JoinPart(seller_deliveries, key_mapping={"seller_id": "order_seller_id"})],
)
