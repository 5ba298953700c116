r"""Purchases that followed a view of the same listing within the hour: an interval join.

Each view is joined with the buyer's purchases of that listing in the hour after it (an
``IntervalJoin``, seed 004), and each checkout asks how many of the buyer's views turned
into a purchase within the hour, over the last week and month, and what they spent:

    timetile demo                                   # writes timetile-demo/data
    timetile backfill timetile/demo/viewed_then_bought.py --start 2024-02-01 \\
        --end 2024-02-29 --output timetile-demo/output/viewed_then_bought --show 5

The tables are read from $TIMETILE_DEMO_DATA (default: timetile-demo/data).
"""

import os

import timetile as tt

DATA = os.environ.get("TIMETILE_DEMO_DATA", "timetile-demo/data")

views = tt.EventSource(f"{DATA}/views", time_column="ts")
purchases = tt.EventSource(f"{DATA}/purchases", time_column="ts")
checkouts = tt.EventSource(f"{DATA}/checkouts", time_column="ts")

# Every view, with the purchases of its listing by its user in the hour after it (none: a
# view that led to no purchase keeps its row, the purchase's columns null)
viewed_then_bought = tt.IntervalJoin(
    name="viewed_then_bought",
    left=views,
    right=purchases,
    on=["user_id", "listing_id"],
    condition="r.ts BETWEEN l.ts AND l.ts + INTERVAL 1 HOUR",
    how="left",
    prefixes=("view_", "purchase_"),
)

# Each joined row is an event at "joined_at", when it is certain: a view with a purchase at
# the purchase, a view without one an hour after it, once no purchase can still match. So
# a checkout never counts a purchase that came after it.
conversions = tt.GroupBy(
    name="conversions",
    source=tt.EventSource(viewed_then_bought, time_column="joined_at"),
    keys=["view_user_id"],
    aggregations=[
        # (view, purchase) pairs: views followed by a purchase of the listing in the hour
        tt.Aggregation("purchase_ts", "count", windows=["7d", "30d"]),
        tt.Aggregation("purchase_amount", "sum", windows=["30d"]),
    ],
)

conversion_model = tt.Join(
    name="conversion_model",
    left=checkouts,
    parts=[tt.JoinPart(conversions, key_mapping={"user_id": "view_user_id"})],
)
