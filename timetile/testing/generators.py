"""Deterministic random test data: events, queries and entities that hold every edge case.

Each generator is seeded (numpy's ``default_rng``) and returns a :class:`pyarrow.Table`:
the same arguments give the same table. Edge cases are injected as fixed rows, so each
documented promise holds for the smallest allowed ``n`` too; the random rows around them add
volume, Zipf-skewed keys and chance collisions. Rows come shuffled. These are small-data
generators for tests, not the scalable demo and benchmark data.

Use :func:`to_spark` to turn a table into a Spark DataFrame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from timetile.core.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, date_to_ms, parse_duration

#: The columns of :func:`random_events`.
EVENT_SCHEMA = pa.schema([
    ("user_id", pa.int64()),
    ("ts", pa.int64()),
    ("amount", pa.float64()),
    ("quantity", pa.int64()),
    ("item", pa.string()),
    ("flag", pa.bool_()),
])
#: The columns of :func:`random_queries`.
QUERY_SCHEMA = pa.schema([("user_id", pa.int64()), ("ts", pa.int64()), ("label", pa.float64())])
#: The columns of the snapshots of :func:`random_entities`.
SNAPSHOT_SCHEMA = pa.schema([
    ("ds", pa.string()), ("user_id", pa.int64()), ("balance", pa.float64()), ("tier", pa.string()),
    ("since", pa.int64()),
])
#: The columns of the mutations of :func:`random_entities`.
MUTATION_SCHEMA = pa.schema([
    ("user_id", pa.int64()), ("balance", pa.float64()), ("tier", pa.string()),
    ("since", pa.int64()), ("mutation_ts", pa.int64()), ("is_before", pa.bool_()),
])

#: Item strings: plain, empty, accented, CJK, an emoji and one with a space.
ITEMS = ("apple", "banana", "cherry", "", "é", "日本語", "🙂", "a b")
#: Tiers of the entity rows, the empty string included.
TIERS = ("gold", "silver", "bronze", "")

NAN, INF = math.nan, math.inf

Row = tuple[object, ...]


def _edge_events(base: int) -> list[Row]:
    """(user_id, ts, amount, quantity, item, flag) rows holding every promised edge case."""
    day = base + DAY_MS
    return [
        (1, day, 1.5, 3, "apple", True),  # on a day (and hop) boundary
        (1, day, 1.5, 3, "apple", True),  # an exact duplicate of it
        (1, day, -2.0, 1, "banana", False),  # the same time, another value: a tie
        (1, day, NAN, None, "", None),  # NaN in the tie; an empty item
        (1, day + HOUR_MS, INF, 0, "日本語", True),  # on an hour boundary
        (1, day + HOUR_MS, -INF, 5, "é", False),
        (1, day + DAY_MS - 1, -0.0, 2, "🙂", True),  # the last millisecond of a day
        (1, day + DAY_MS - 1, 0.0, 2, None, True),  # -0.0 and 0.0 tied
        (2, day, None, None, None, None),  # every value null
        (2, base, 7.25, 4, "a b", None),  # at the very start
        (None, day, 3.0, 1, "apple", True),  # a null key
        (1, None, 4.0, 1, "cherry", False),  # a null time
    ]


#: The fewest events :func:`random_events` makes: its fixed edge-case rows.
MIN_EVENTS = len(_edge_events(0))


def random_events(
    n: int,
    n_keys: int,
    *,
    seed: int,
    start: str = "2024-01-01",
    days: int = 7,
    zipf_exponent: float | None = 1.3,
    null_fraction: float = 0.05,
) -> pa.Table:
    """``n`` events of ``n_keys`` users over ``days`` days from ``start`` (UTC), shuffled.

    Columns (:data:`EVENT_SCHEMA`): ``user_id`` bigint in ``1..n_keys``, Zipf-skewed
    (``P(k) ∝ k^-zipf_exponent``; uniform for None); ``ts`` bigint epoch ms in
    ``[start, start + days)``; ``amount`` double; ``quantity`` bigint; ``item`` string;
    ``flag`` boolean. Random rows draw each column's nulls with ``null_fraction``, ``ts`` from
    a small pool of shared times (equal timestamps), from hour boundaries and uniformly, and
    ``amount`` from multiples of 0.25 (duplicates) with a few NaN, ±inf and -0.0.

    Promised for every ``n >= MIN_EVENTS`` (by fixed rows, see :func:`_edge_events`):

    - several events of user 1 at one time (the start of day 2, a day boundary), with
      different values (ties), an exact duplicate row, and NaN among the tied values;
    - events exactly on an hour boundary, at the last millisecond of a day and at ``start``;
    - ``amount`` with null, NaN, +inf, -inf, -0.0 and 0.0 (tied at one time) and duplicates;
    - ``quantity``, ``item`` and ``flag`` with nulls; ``item`` with ``''``, accented, CJK
      and emoji strings; ``flag`` both true and false;
    - a row with a null ``user_id`` and a row with a null ``ts``;
    - users 1 and 2 both have events with a time (``n_keys >= 2``).

    >>> table = random_events(40, 5, seed=7)
    >>> table.num_rows, table.schema == EVENT_SCHEMA
    (40, True)
    >>> repr(table.to_pylist()) == repr(random_events(40, 5, seed=7).to_pylist())  # NaN too
    True
    """
    if n < MIN_EVENTS or n_keys < 2:
        raise ValueError(f"random_events needs n >= {MIN_EVENTS} and n_keys >= 2, "
                         f"got n={n}, n_keys={n_keys}")
    rng = np.random.default_rng(seed)
    base = date_to_ms(start)
    m = n - MIN_EVENTS
    span = days * DAY_MS

    ranks = np.arange(1, n_keys + 1, dtype=np.float64)
    weights = None if zipf_exponent is None else ranks ** -zipf_exponent / np.sum(
        ranks ** -zipf_exponent)
    users = rng.choice(n_keys, size=m, p=weights) + 1

    pool = base + rng.integers(0, span, size=max(1, m // 8))
    how = rng.random(m)
    times = np.where(how < 0.4, rng.choice(pool, size=m),
                     np.where(how < 0.5, base + rng.integers(0, days * 24, size=m) * HOUR_MS,
                              base + rng.integers(0, span, size=m)))

    specials = np.array([NAN, INF, -INF, -0.0])
    amounts = rng.integers(-40, 400, size=m) / 4.0
    amounts = np.where(rng.random(m) < 0.04, rng.choice(specials, size=m), amounts)

    columns = [
        _nullable(users, rng, null_fraction),
        _nullable(times, rng, null_fraction),
        _nullable(amounts, rng, null_fraction),
        _nullable(rng.integers(0, 20, size=m), rng, null_fraction),
        _nullable(rng.choice(np.array(ITEMS, dtype=object), size=m), rng, null_fraction),
        _nullable(rng.random(m) < 0.5, rng, null_fraction),
    ]
    rows = _edge_events(base) + list(zip(*columns, strict=True))
    return _table(rows, EVENT_SCHEMA, rng)


def random_queries(
    events: pa.Table,
    n: int,
    *,
    seed: int,
    window_lengths: Sequence[str | int] = ("1h", "1d"),
    null_fraction: float = 0.05,
    duplicate_fraction: float = 0.1,
) -> pa.Table:
    """``n`` queries (left rows) at the keys and times of ``events``, shuffled.

    Columns (:data:`QUERY_SCHEMA`): ``user_id``, ``ts`` and ``label``, a random double
    payload to check that left columns come back unchanged. Random rows take the key of a
    random placed event (so they follow its skew) and a time that is that event's time
    (40%), its time plus one of ``window_lengths`` (20%), or uniform from a day before the
    first event to a day after the last; some take a key without events or a null key
    (``null_fraction``), a null time (``null_fraction``), or copy an earlier row whole
    (``duplicate_fraction``).

    Promised for every ``n >= min_queries(window_lengths)``, with ``a`` an event of
    ``events`` that has a key and a time (chosen by the seed):

    - a query exactly at ``a``'s time (``a`` must not count), and at ``a``'s time plus each
      window length (``a`` sits exactly at ``q − length``: counts in a sliding window) and
      plus each length plus 1 ms (``a`` no longer counts);
    - an exact duplicate row (same key, time and label);
    - queries at the earliest event time, 1 ms before it (before every event) and a day
      after the last event; one on a day boundary and one on an hour boundary;
    - a query of a key that has no events, one with a null key and one with a null time.
    """
    lengths = [parse_duration(length) if isinstance(length, str) else int(length)
               for length in window_lengths]
    placed = [(key, ts) for key, ts in zip(events.column("user_id").to_pylist(),
                                          events.column("ts").to_pylist(), strict=True)
              if key is not None and ts is not None]
    if not placed:
        raise ValueError("random_queries needs events with a key and a time")
    if n < min_queries(window_lengths):
        raise ValueError(f"random_queries needs n >= {min_queries(window_lengths)}, got {n}")
    rng = np.random.default_rng(seed)
    key, at = placed[int(rng.integers(len(placed)))]
    first = min(ts for _, ts in placed)
    last = max(ts for _, ts in placed)
    no_events = max(k for k, _ in placed) + 1

    edges: list[tuple[object, object]] = [
        (key, at), *((key, at + length) for length in lengths),
        *((key, at + length + 1) for length in lengths),
        (key, first), (key, first - 1), (key, last + DAY_MS),
        (key, at - at % DAY_MS + DAY_MS), (key, at - at % HOUR_MS + HOUR_MS),
        (no_events, at + HOUR_MS), (None, at), (key, None),
    ]
    rows: list[Row] = [(k, t, float(rng.normal())) for k, t in edges]
    duplicate = (key, at + lengths[0] if lengths else at + HOUR_MS, float(rng.normal()))
    rows += [duplicate, duplicate]

    for _ in range(n - len(rows)):
        if rng.random() < duplicate_fraction:
            rows.append(rows[int(rng.integers(len(rows)))])
            continue
        who, ts = placed[int(rng.integers(len(placed)))]
        how = rng.random()
        query: int | None = ts
        if how >= 0.6 or not lengths:
            query = int(rng.integers(first - DAY_MS, last + DAY_MS))
        elif how >= 0.4:
            query = ts + int(rng.choice(lengths))
        if rng.random() < null_fraction:
            who = None if rng.random() < 0.5 else no_events + int(rng.integers(3))
        if rng.random() < null_fraction:
            query = None
        rows.append((who, query, float(rng.normal())))
    return _table(rows, QUERY_SCHEMA, rng)


def min_queries(window_lengths: Sequence[str | int] = ("1h", "1d")) -> int:
    """Return the fewest queries :func:`random_queries` makes: its fixed edge-case rows.

    >>> min_queries(("1h", "1d"))
    15
    """
    return 11 + 2 * len(window_lengths)


#: A row image of :func:`random_entities` less its key: (balance, tier, since).
Image = tuple[float | None, str, int | None]


class EntityTables(NamedTuple):
    """The two tables of an entity source (DESIGN §2, entity sources)."""

    snapshots: pa.Table
    """Partition ``ds`` holds the table as of the end of that day."""
    mutations: pa.Table
    """Row images: ``is_before`` true retracts a row, false inserts one."""


def random_entities(
    n_keys: int,
    *,
    seed: int,
    start: str = "2024-01-01",
    days: int = 3,
    mutations_per_day: int = 10,
    missing_day: str | None = None,
) -> EntityTables:
    """Make a mutable table of users: daily snapshots and the mutations between them.

    The table maps ``user_id`` to (``balance`` double, ``tier`` string, ``since`` bigint),
    starting with keys ``1..n_keys``. ``since`` is when the row image was written (the time
    column of windowed features): a random time in the 30 days before ``start`` for the
    rows of the first snapshot, the ``mutation_ts`` for an after image. Snapshots
    (:data:`SNAPSHOT_SCHEMA`) cover the day before ``start`` and each of ``days`` days;
    mutations (:data:`MUTATION_SCHEMA`) cover the ``days`` days. An update is a before image
    (``is_before`` true) and an after image at the same ``mutation_ts``; a delete is a
    before image only; an insert an after image only. ``missing_day`` (``YYYY-MM-DD``, one
    of the snapshot days) leaves that day's snapshot partition out, and only it: the
    mutations and the other partitions stay as they were.

    Consistent by construction: each snapshot is the previous day's snapshot with that day's
    mutations applied (retract every before image, insert every after image), and every
    before image is the key's row at that time. Within one millisecond the images come in
    no particular order (a chained update retracts an after image of the same millisecond):
    apply a millisecond's images together.

    Promised on the first day (``n_keys >= 3``), besides ``mutations_per_day`` random
    mutations of other keys (on later days, of any key):

    - key 1 updated at exactly midnight, twice in one millisecond (chained: the second
      retracts the first's after image), and at the last millisecond of the day;
    - key 3 updated in that same millisecond (two keys mutated at once);
    - key 2 deleted, then re-inserted with other values later that day;
    - key ``n_keys + 1``, absent from the first snapshot, inserted;
    - null balances and empty tiers occur in the rows;
    - key 3's row in the first snapshot has a null ``since``.

    Keys ``1..n_keys + 1`` may appear; no row has a key above ``n_keys + 1``.
    """
    if n_keys < 3:
        raise ValueError(f"random_entities needs n_keys >= 3, got {n_keys}")
    base = date_to_ms(start)
    snapshot_days = [_day(base + index * DAY_MS) for index in range(-1, days)]
    if missing_day is not None and missing_day not in snapshot_days:
        raise ValueError(f"missing_day must be one of {snapshot_days}, got {missing_day!r}")
    rng = np.random.default_rng(seed)
    state: dict[int, Image] = {
        key: _entity_values(rng, base - int(rng.integers(1, 30 * DAY_MS)))
        for key in range(1, n_keys + 1)
    }
    state[1] = (None, "gold", state[1][2])
    state[3] = (*state[3][:2], None)
    new_key = n_keys + 1
    snapshots: list[Row] = _snapshot(_day(base - DAY_MS), state)
    mutations: list[Row] = []
    for index in range(days):
        midnight = base + index * DAY_MS
        same = midnight + 6 * HOUR_MS
        fixed: list[tuple[int, int, str]] = [] if index else [
            (midnight, 1, "update"), (same, 1, "update"), (same, 1, "update"),
            (same, 3, "update"), (midnight + 8 * HOUR_MS, 2, "delete"),
            (midnight + 9 * HOUR_MS, 2, "insert"), (midnight + 10 * HOUR_MS, new_key, "insert"),
            (midnight + DAY_MS - 1, 1, "update"),
        ]
        spared = {1, 2, 3, new_key} if not index else set()
        choices = [key for key in range(1, n_keys + 2) if key not in spared]
        planned = [*fixed, *(
            (midnight + int(rng.integers(DAY_MS // MINUTE_MS)) * MINUTE_MS,
             int(rng.choice(choices)), "random")
            for _ in range(mutations_per_day if choices else 0)
        )]
        for ts, key, kind in sorted(planned, key=lambda plan: plan[0]):
            mutations += _mutate(state, key, kind, ts, rng)
        snapshots += _snapshot(_day(midnight), state)
    snapshots = [row for row in snapshots if row[0] != missing_day]
    return EntityTables(_table(snapshots, SNAPSHOT_SCHEMA, rng),
                        _table(mutations, MUTATION_SCHEMA, rng))


def random_entity_queries(tables: EntityTables, n: int, *, seed: int) -> pa.Table:
    """Make queries (left rows, :data:`QUERY_SCHEMA`) over the keys and days of entities.

    Fixed rows first, then ``n`` random ones, all shuffled. With d0 the first snapshot day
    and d1 the last day with a snapshot or a mutation, the fixed rows are:

    - key 1 at every midnight from ``d0 + 1`` to ``d1 + 1`` (the query at the midnight
      that starts day d sees partition d − 1 and no mutation; one at midnight is also at
      the mutation of key 1 at midnight);
    - every mutation's key at exactly its ``mutation_ts`` (the mutation does not count yet)
      and 1 ms later (it does);
    - the key ``k`` above every key of the tables (never present) at a mutation time; a
      null key; a null time.

    A random row takes a key uniform in ``1..k`` and a time that is a mutation time (or 1 ms
    before or after it) for 40% of rows, else uniform in ``[d0, d1 + 2)`` (days; those on
    day d0 have no previous partition). ``label`` is a random double.

    >>> tables = random_entities(4, seed=1, days=2)
    >>> queries = random_entity_queries(tables, 20, seed=2)
    >>> queries.schema == QUERY_SCHEMA, queries.num_rows > 20
    (True, True)
    """
    rng = np.random.default_rng(seed)
    days = [date_to_ms(ds) for ds in tables.snapshots.column("ds").to_pylist()]
    mutations = sorted({(key, ts) for key, ts in zip(
        tables.mutations.column("user_id").to_pylist(),
        tables.mutations.column("mutation_ts").to_pylist(), strict=True)})
    first = min(days)
    last = max([*days, *(ts - ts % DAY_MS for _, ts in mutations)])
    never = 1 + max(key for key in [*tables.snapshots.column("user_id").to_pylist(),
                                     *(key for key, _ in mutations)] if key is not None)
    times = [ts for _, ts in mutations] or [first + DAY_MS]
    edges: list[tuple[object, object]] = [
        *((1, midnight) for midnight in range(first + DAY_MS, last + 2 * DAY_MS, DAY_MS)),
        *mutations, *((key, ts + 1) for key, ts in mutations),
        (never, times[len(times) // 2]), (None, times[0]), (1, None),
    ]
    for _ in range(n):
        if rng.random() < 0.4:
            at = int(rng.choice(times)) + int(rng.integers(-1, 2))
        else:
            at = int(rng.integers(first, last + 2 * DAY_MS))
        edges.append((int(rng.integers(1, never + 1)), at))
    return _table([(key, at, float(rng.normal())) for key, at in edges], QUERY_SCHEMA, rng)


def _mutate(
    state: dict[int, Image], key: int, kind: str, ts: int, rng: np.random.Generator,
) -> list[Row]:
    """Apply one mutation to ``state``; return its row images."""
    if kind == "random":
        kind = ("insert" if key not in state else
                "delete" if rng.random() < 0.3 else "update")
    before = state.pop(key, None)
    rows: list[Row] = []
    if before is not None:
        rows.append((key, *before, ts, True))
    if kind != "delete":
        after = _entity_values(rng, ts)
        state[key] = after
        rows.append((key, *after, ts, False))
    return rows


def _entity_values(rng: np.random.Generator, since: int) -> Image:
    balance = None if rng.random() < 0.1 else float(rng.integers(0, 10_000)) / 4
    return balance, str(rng.choice(TIERS)), since


def _snapshot(ds: str, state: dict[int, Image]) -> list[Row]:
    return [(ds, key, *values) for key, values in sorted(state.items())]


def _day(millis: int) -> str:
    return str(np.datetime64(millis, "ms").astype("datetime64[D]"))


def _nullable(values: np.ndarray, rng: np.random.Generator, fraction: float) -> list[object]:
    """``values`` as Python objects, each replaced by None with probability ``fraction``."""
    nulls = rng.random(len(values)) < fraction
    return [None if null else value
            for value, null in zip(values.tolist(), nulls.tolist(), strict=True)]


def _table(rows: Sequence[Row], schema: pa.Schema, rng: np.random.Generator) -> pa.Table:
    """Rows as a table of ``schema``, in a seeded random order."""
    order = rng.permutation(len(rows))
    shuffled = [rows[i] for i in order]
    columns = list(zip(*shuffled, strict=True)) if shuffled else [()] * len(schema)
    return pa.table([pa.array(list(column), type=field.type)
                     for column, field in zip(columns, schema, strict=True)], schema=schema)


def to_spark(spark: SparkSession, table: pa.Table) -> DataFrame:
    """Turn a pyarrow table into a Spark DataFrame with the same column names, types and nulls.

    Spark 4 reads pyarrow tables directly (through Arrow, no pandas round trip, so bigint
    nulls stay null instead of becoming NaN floats).
    """
    return spark.createDataFrame(table)
