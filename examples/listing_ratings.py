"""Ratings as an entity source, shipped inside the package as ``timetile.examples.listing_ratings``.

Run it with ``timetile backfill examples/listing_ratings.py --start … --end … --output …``
after ``timetile demo`` has written the data (see that module for the Join and its parts).
"""

from timetile.examples.listing_ratings import listing_ratings

__all__ = ["listing_ratings"]
