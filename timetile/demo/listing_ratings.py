r"""The average rating of a listing as of each checkout: an entity source (docs/entities.md).

Ratings are a mutable table: buyers write, edit and delete them. Its daily snapshots and its
mutations (``timetile demo`` writes both) give the listing's ratings exactly as they stood at
each checkout's millisecond (TEMPORAL), or as of the end of the day before (SNAPSHOT, which
needs no mutations and no stream).

    timetile demo                                   # writes timetile-demo/data
    timetile backfill timetile/demo/listing_ratings.py --start 2024-02-01 --end 2024-02-29 \\
        --output timetile-demo/output/listing_ratings --show 5

The tables are read from $TIMETILE_DEMO_DATA (default: timetile-demo/data).
"""

import os

import timetile as tt

DATA = os.environ.get("TIMETILE_DEMO_DATA", "timetile-demo/data")

ratings = tt.EntitySource(
    f"{DATA}/ratings_snapshots",  # partition ds: every rating alive at the end of that day
    mutation_table=f"{DATA}/ratings_mutations",  # inserts, edits and deletes
    time_column="rated_at",  # for the 30-day window
)
checkouts = tt.EventSource(f"{DATA}/checkouts", time_column="ts")

rating_aggregations = [
    tt.Aggregation("stars", "avg"),
    tt.Aggregation("stars", "count"),
    tt.Aggregation("stars", "avg", windows=["30d"]),  # ratings written in the last 30 days
]

# Exact to the checkout's millisecond: the snapshot of the day before, plus the day's edits.
listing_rating = tt.GroupBy("listing_rating", ratings, ["listing_id"], rating_aggregations)

# As of the end of the previous day: cheaper, a day late.
listing_rating_daily = tt.GroupBy("listing_rating_daily", ratings, ["listing_id"],
                                  rating_aggregations, accuracy=tt.Accuracy.SNAPSHOT)

listing_ratings = tt.Join(
    name="listing_ratings",
    left=checkouts,
    parts=[listing_rating, listing_rating_daily],
    derivations={
        "*": "*",  # keep every feature, and add:
        "rating_change_today": "listing_rating_stars_avg - listing_rating_daily_stars_avg",
    },
)
