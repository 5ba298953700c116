"""A realistic marketplace dataset for the demo, generated in Spark so it scales.

Eight tables, written as Parquet under a data directory (``timetile-demo/data`` by default,
or ``$TIMETILE_DEMO_DATA``), the inputs of ``timetile/demo/checkout_model.py``:

========== ==================================================================================
users      ``user_id``, ``country``, ``signup_ts``
listings   ``listing_id``, ``seller_id``, ``category``, ``price``
views      ``user_id``, ``listing_id``, ``ts`` (epoch ms), ``duration`` (seconds, ~5% null)
purchases  ``user_id``, ``listing_id``, ``seller_id``, ``ts``, ``quantity``, ``amount``
deliveries ``user_id``, ``listing_id``, ``ts``, ``fee``: 85% of the purchases are delivered,
           10 to 110 minutes after them (the right input of an interval join)
checkouts  ``checkout_id``, ``user_id``, ``listing_id``, ``seller_id``, ``ts``: the left side,
           with ~1% exact duplicate rows and two rows whose ``ts`` is null
ratings_*  an entity source: daily snapshots and mutations of listing ratings
           (:mod:`timetile.demo.ratings`), the input of ``timetile/demo/listing_ratings.py``
========== ==================================================================================

Every row is computed by executors from ``spark.range`` with seeded ``rand``: the driver
holds no data, so ``events=50_000_000`` works as well as the default. Activity is Zipf-ish:
user and listing ids are drawn from a power law (exponent 0.8), so a few users and listings
are hot, as in real logs. Times are uniform over :data:`DAYS` days from :data:`START`, with a
daily rhythm (more activity in the evening, UTC). The same ``events`` and ``seed`` give the
same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from timetile.demo.ratings import rating_tables

#: The first day of events, and how many days they span.
START = "2024-01-01"
DAYS = 60
#: The days the demo backfills: the last month, so the 30-day windows have full history.
BACKFILL_START = "2024-02-01"
BACKFILL_END = "2024-02-29"
#: The day whose state the demo uploads: it then streams the last day's morning and fetches.
SERVE_DS = "2024-02-28"

_START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
_DAY_MS = 86_400_000
_ZIPF_EXPONENT = 0.8
_CATEGORIES = ("home", "fashion", "electronics", "toys", "books", "garden", "sports", "art")
_COUNTRIES = ("US", "GB", "DE", "FR", "BR", "IN", "JP", "MX")
_TABLES = ("users", "listings", "views", "purchases", "deliveries", "checkouts",
           "ratings_snapshots", "ratings_mutations")


@dataclass(frozen=True)
class DemoSizes:
    """How many rows each table gets, all derived from the number of views.

    >>> DemoSizes.for_events(200_000)  # doctest: +NORMALIZE_WHITESPACE
    DemoSizes(views=200000, users=1000, listings=2000, purchases=10000, checkouts=4000,
              ratings=5000)
    """

    views: int
    users: int
    listings: int
    purchases: int
    checkouts: int
    ratings: int

    @classmethod
    def for_events(cls, events: int) -> DemoSizes:
        """Sizes for ``events`` views: a user per 200 views, a checkout per 50, a rating per 40."""
        if events < 1:
            raise ValueError(f"events must be positive, not {events}")
        return cls(
            views=events,
            users=max(20, events // 200),
            listings=max(20, events // 100),
            purchases=max(10, events // 20),
            checkouts=max(10, events // 50),
            ratings=max(20, events // 40),
        )

    @property
    def partitions(self) -> int:
        """Partitions of the generated views: fixed by the size, so the data is reproducible."""
        return max(2, self.views // 1_000_000)


def table_paths(data_dir: str | Path) -> dict[str, str]:
    """Map each demo table to its Parquet path under ``data_dir``."""
    return {name: str(Path(data_dir) / name) for name in _TABLES}


def zipf_id(uniform: Column, count: int) -> Column:
    """Draw an id in ``[0, count)`` from a power law over ranks, given a uniform in [0, 1).

    Inverts the CDF of the density ``x^-s`` on ``[1, count + 1)``, ``s`` = 0.8: id 0 is the
    most frequent (about 5% of draws for 1,000 ids), the tail is long.
    """
    power = 1.0 - _ZIPF_EXPONENT
    span = (count + 1) ** power - 1.0
    rank = sf.pow(sf.lit(1.0) + uniform * sf.lit(span), sf.lit(1.0 / power))
    return sf.least(sf.floor(rank) - 1, sf.lit(count - 1)).cast("long")


def _event_time(seed: int) -> Column:
    """Epoch ms over the demo's days; the time of day leans to the evening (UTC)."""
    day = sf.floor(sf.rand(seed) * DAYS)
    time_of_day = sf.sqrt(sf.rand(seed + 1)) * sf.lit(_DAY_MS)
    return (sf.lit(_START_MS) + day * _DAY_MS + sf.floor(time_of_day)).cast("long")


def _pick(values: tuple[str, ...], key: Column) -> Column:
    index = sf.pmod(sf.hash(key), sf.lit(len(values))) + 1
    return sf.element_at(sf.array(*[sf.lit(value) for value in values]), index.cast("int"))


def generate(spark: SparkSession, data_dir: str | Path, events: int = 200_000,
             seed: int = 7) -> DemoSizes:
    """Write the demo tables as Parquet under ``data_dir``, replacing what is there.

    Args:
        spark: the session; the data is computed and written by its executors.
        data_dir: the directory; one Parquet directory per table is written in it.
        events: how many views; every other table is sized from it (:class:`DemoSizes`).
        seed: the random seed.

    Returns:
        The sizes used (checkouts before duplicates and null-time rows are added).

    """
    sizes = DemoSizes.for_events(events)
    paths = table_paths(data_dir)
    tables = _tables(spark, sizes, seed)
    for name in _TABLES:
        tables[name].write.mode("overwrite").parquet(paths[name])
    return sizes


def _tables(spark: SparkSession, sizes: DemoSizes, seed: int) -> dict[str, DataFrame]:
    users = spark.range(sizes.users, numPartitions=1).select(
        sf.col("id").alias("user_id"),
        _pick(_COUNTRIES, sf.col("id")).alias("country"),
        (sf.lit(_START_MS) - sf.floor(sf.rand(seed) * 700 * _DAY_MS))
        .cast("long").alias("signup_ts"),
    )
    listings = spark.range(sizes.listings, numPartitions=1).select(
        sf.col("id").alias("listing_id"),
        zipf_id(sf.rand(seed + 1), sizes.users).alias("seller_id"),
        _pick(_CATEGORIES, sf.col("id") * 31 + 7).alias("category"),
        sf.round(sf.exp(sf.randn(seed + 2) * 0.8 + 3.5), 2).alias("price"),
    )
    views = spark.range(sizes.views, numPartitions=sizes.partitions).select(
        zipf_id(sf.rand(seed + 3), sizes.users).alias("user_id"),
        zipf_id(sf.rand(seed + 4), sizes.listings).alias("listing_id"),
        _event_time(seed + 5).alias("ts"),
        sf.when(sf.rand(seed + 7) < 0.05, sf.lit(None).cast("double"))
        .otherwise(sf.round(sf.exp(sf.randn(seed + 8) * 0.9 + 3.0), 1)).alias("duration"),
    )
    sellers = sf.broadcast(listings.select("listing_id", "seller_id", "price"))
    purchases = (
        spark.range(sizes.purchases, numPartitions=sizes.partitions).select(
            zipf_id(sf.rand(seed + 9), sizes.users).alias("user_id"),
            zipf_id(sf.rand(seed + 10), sizes.listings).alias("listing_id"),
            _event_time(seed + 11).alias("ts"),
            (sf.floor(sf.pow(sf.rand(seed + 13), 3) * 3) + 1).cast("int").alias("quantity"),
        )
        .join(sellers, "listing_id")
        .select("user_id", "listing_id", "seller_id", "ts", "quantity",
                sf.round(sf.col("price") * sf.col("quantity"), 2).alias("amount"))
    )
    minutes = sf.floor(sf.rand(seed + 21) * 100 + 10).cast("long")
    deliveries = purchases.where(sf.rand(seed + 20) < 0.85).select(
        "user_id", "listing_id", (sf.col("ts") + minutes * 60_000).alias("ts"),
        sf.round(sf.rand(seed + 22) * 8 + 2, 2).alias("fee"))
    checkouts = (
        spark.range(sizes.checkouts, numPartitions=sizes.partitions).select(
            sf.col("id").alias("checkout_id"),
            zipf_id(sf.rand(seed + 14), sizes.users).alias("user_id"),
            zipf_id(sf.rand(seed + 15), sizes.listings).alias("listing_id"),
            _event_time(seed + 16).alias("ts"),
        )
        .join(sellers, "listing_id")
        .select("checkout_id", "user_id", "listing_id", "seller_id", "ts")
    )
    duplicates = checkouts.where(sf.hash("checkout_id", sf.lit(seed)) % 100 == 0)
    no_time = spark.range(2, numPartitions=1).select(
        (sf.col("id") + sizes.checkouts).alias("checkout_id"),
        sf.col("id").alias("user_id"),
        sf.col("id").alias("listing_id"),
        sf.col("id").alias("seller_id"),
        sf.lit(None).cast("long").alias("ts"),
    )
    rating_ids = spark.range(sizes.ratings, numPartitions=1).select(
        sf.col("id").alias("rating_id"),
        zipf_id(sf.rand(seed + 17), sizes.listings).alias("listing_id"),
        zipf_id(sf.rand(seed + 18), sizes.users).alias("user_id"),
    )
    return {
        **rating_tables(rating_ids, start_ms=_START_MS, days=DAYS, seed=seed + 19),
        "users": users,
        "listings": listings,
        "views": views,
        "purchases": purchases,
        "deliveries": deliveries,
        "checkouts": checkouts.unionByName(duplicates).unionByName(no_time),
    }

