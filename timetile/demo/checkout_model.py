r"""Features for a checkout model on a marketplace: the definitions `timetile demo` runs.

Each checkout (the left side) is a query at its time: what had this buyer viewed and bought
before that moment, and what had the listing's seller bought? Every feature counts only the
events strictly before the checkout.

Generate the data and backfill it:

    timetile demo                                   # writes timetile-demo/data, then runs this
    timetile backfill timetile/demo/checkout_model.py --start 2024-02-01 --end 2024-02-29 \\
        --output timetile-demo/output/checkout_model --show 5

The tables are read from $TIMETILE_DEMO_DATA (default: timetile-demo/data, relative to the
current directory).
"""

import os

import timetile as tt

DATA = os.environ.get("TIMETILE_DEMO_DATA", "timetile-demo/data")

views = tt.EventSource(f"{DATA}/views", time_column="ts")
purchases = tt.EventSource(f"{DATA}/purchases", time_column="ts")
checkouts = tt.EventSource(f"{DATA}/checkouts", time_column="ts")

# What the buyer has been browsing: engagement over the last hour, day and week.
user_views = tt.GroupBy(
    name="user_views",
    source=views,
    keys=["user_id"],
    aggregations=[
        *[tt.Aggregation("duration", op, windows=["1h", "1d", "7d"])
          for op in ("count", "sum", "avg", "max")],
        tt.Aggregation("listing_id", "last_k", k=5, windows=["30d"]),
        tt.Aggregation("listing_id", "approx_unique_count", windows=["7d"]),
    ],
)

# What the buyer has spent: exact 7- and 30-day sums, a 30-day sum whose tail moves by whole
# days (sawtooth: cheaper to serve online), and the number of purchases ever made.
user_purchases = tt.GroupBy(
    name="user_purchases",
    source=purchases,
    keys=["user_id"],
    aggregations=[
        tt.Aggregation("amount", "sum", windows=["7d", "30d", tt.Window("30d", hop="1d")]),
        tt.Aggregation("amount", "count"),
    ],
)

checkout_model = tt.Join(
    name="checkout_model",
    left=checkouts,
    parts=[
        user_views,
        user_purchases,
        # The seller is a user too: the same features, read at the checkout's seller_id.
        tt.JoinPart(user_purchases, prefix="seller", key_mapping={"seller_id": "user_id"}),
    ],
)
