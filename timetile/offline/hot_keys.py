"""Hot keys: find the keys too big for one sweep task, and cut them into chunks of time.

The sweep (:mod:`timetile.offline.executors.sweep`) holds all the rows of a key in one
task: its events and its queries (the left rows that ride the sweep). A key with more than
``max_key_events`` such rows is split instead: its time line is cut into
chunks of ``length`` milliseconds; a query goes to the chunk of its time, and an event to
its own chunk and to every later chunk whose queries can still see it (those within the
window's reach, :func:`~timetile.core.windows.window_reach`). Each (key, chunk) is swept on
its own, so a task holds one chunk of the key and the reach before it, and every query still
sees exactly the events of its windows. The length is fitted on the key's sampled times,
so that each chunk holds about ``max_key_events`` rows wherever its bursts fall, and the
copies of events are bounded too (see :func:`chunk_length`): they add at most half the
key's rows, on average. A key of events alone thus gets chunks of at least two reaches (an
event goes to 1.5 chunks on average, and a task holds at least three reaches of its
events, which for a key dense enough is over the limit); a key hot by its left rows, with
few events, gets chunks as short as its queries need. A key whose fullest chunk would still
hold most of it (:data:`WORTH_CUTTING`) is swept whole, and the report says so (the tiled
executor bounds it by hop instead).

Finding hot keys costs one Spark job, which scans the part's events and left rows and groups
a sample of them by key. A backfill runs it only when a key could be hot: the job that counts
its input also tallies each side's rows in :data:`KEY_BUCKETS` buckets of the keys' hash
(:func:`key_bucket`), and no key holds more rows than its bucket, so when the fullest bucket
of the events and that of the left rows together hold at most ``max_key_events``, no search
runs. On big data without hot keys that saves the search's pass over the input; a part that
Spark estimates as small skips the tally (:func:`worth_tallying`). A key can be hot
by its left rows alone (a default or placeholder key on the left, null included): its
queries are cut just the same.
Parts with a lifetime window are never split: every chunk would need the whole history.
The default limit is :data:`timetile.offline.options.DEFAULT_MAX_KEY_EVENTS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from py4j.protocol import Py4JError
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.windows import Window, window_spec
from timetile.core.timeutil import UNIT_MS, format_duration, ms_to_iso
from timetile.core.windows import MAX_TIME, MIN_TIME, window_reach
from timetile.spark.sources import TIME

if TYPE_CHECKING:
    from timetile.offline.plan import PartPlan

#: Sampled rows expected from a key right at the limit: the relative error of its estimate
#: is about ``1 / sqrt(SAMPLED_AT_LIMIT)``, 3%.
SAMPLED_AT_LIMIT = 1_000

#: A hot key is cut only when its fullest chunk (with the reach before it), at the shortest
#: length allowed, holds at most this share of its rows: less is not worth the copies.
WORTH_CUTTING = 0.75

#: Sampled times the search gathers at most, for all keys together (16 MB): beyond it the
#: times are thinned, and the chunk lengths fitted on fewer of them.
MAX_SAMPLED_TIMES = 2_000_000

#: At most this many extra copies of an event, on average (a chunk is at least the reach over
#: it long): a key whose left rows are too dense to cut gets chunks over the limit instead.
MAX_EXTRA_COPIES = 128

#: Buckets of the keys' hash in which the count job tallies rows (a power of two): the
#: fullest bounds the rows of any one key. Even data of N rows fills each with about
#: N / 4,096, so at the default limit the bound rules out hot keys up to some 8 billion rows.
KEY_BUCKETS = 4096

#: Bytes a row is guessed to take in Spark's size estimate of a part's events and left rows,
#: by :func:`worth_tallying`: Parquet of a key, a time and a value takes about 16 (the
#: benchmarks' data).
ROW_BYTES = 16

#: The internal chunk column; 0 for every row of a key that is not split.
CHUNK = "_tt_chunk"
_CHUNK_LENGTH = "_tt_chunk_ms"
_SIDE = "_tt_side"  # in the search: -1 for an event, else the index of the query set
_DRAW = "_tt_draw"  # in the search: a row's uniform draw, for the sample and its times

#: Key comparisons (hot keys × key columns) up to which :func:`with_chunks` finds a row's
#: chunk length with one CASE expression, compiled; beyond it, by a broadcast join, which
#: costs more per row but does not grow with the keys, where a CASE of a few hundred
#: comparisons takes seconds to compile (benchmarks/HISTORY.md, "A key hot on the left, and
#: the chunk lookup by CASE").
CASE_LIMIT = 64


@dataclass(frozen=True)
class HotKey:
    """A key with too many rows for one task, and how to cut it.

    Attributes:
        key: the key's values, in the order of the part's key columns, as Spark compares
            them: a timestamp as epoch microseconds, a timestamp without time zone as its
            text (see :func:`key_literal`); other types as they come.
        events: its events, estimated from the sample.
        first: the earliest sampled time of its events and queries (epoch ms).
        last: the latest sampled time.
        chunk_ms: the length of its chunks of time.
        left_rows: its queries (left rows) in the sweep that gets the most of them,
            estimated from the sample.

    """

    key: tuple[object, ...]
    events: int
    first: int
    last: int
    chunk_ms: int
    left_rows: int = 0

    @property
    def rows(self) -> int:
        """Its events and queries: what a sweep task holding the whole key would hold."""
        return self.events + self.left_rows

    @property
    def chunks(self) -> int:
        """How many chunks its sampled span covers."""
        return self.last // self.chunk_ms - self.first // self.chunk_ms + 1


@dataclass(frozen=True)
class KeySplit:
    """The hot keys of one part, and how to cut them.

    Attributes:
        hot: the keys over the limit that are cut into chunks, the largest (in rows) first.
        reach: how far back the part's windows reach (ms): see :func:`part_reach`.
        key_types: the Spark types of the key columns: the events' and queries' types,
            widened where one side is narrower.
        whole: keys over the limit whose fullest chunk, with its reach, would still hold
            more than :data:`WORTH_CUTTING` of their rows, even at the shortest length that
            keeps the copies of events bounded (two reaches, for a key of events alone):
            they are swept whole. Reported, not split.

    """

    hot: tuple[HotKey, ...]
    reach: int
    key_types: tuple[T.DataType, ...]
    whole: tuple[HotKey, ...] = ()

    def describe(self, name: str) -> list[str]:
        """Return the lines for the job report: what was cut, and what could not be."""
        lines = []
        if self.hot:
            largest = self.hot[0]
            lines.append(f"{name}: {self._listed(self.hot)} swept in chunks of time; the largest "
                         f"cut into {largest.chunks} chunks of "
                         f"{_readable_duration(largest.chunk_ms)}")
        if self.whole:
            lines.append(f"{name}: {self._listed(self.whole)} swept whole, each in one task: their "
                         "rows lie too close in time to cut without copying their events "
                         "over and over. executor='tiled' bounds them by hop")
        return lines

    def _listed(self, keys: tuple[HotKey, ...]) -> str:
        """Count hot keys and name the largest (the first) for the report."""
        largest = keys[0]
        shown = ", ".join(_shown(value, kind)
                          for value, kind in zip(largest.key, self.key_types, strict=True))
        shown = shown if len(largest.key) == 1 else f"({shown})"
        held = f"{largest.events:,} events"
        if largest.left_rows:
            held += f" and {largest.left_rows:,} left rows"
        return f"{len(keys)} hot key(s) (the largest, {shown}, holds about {held})"


def _shown(value: object, kind: T.DataType) -> str:
    """Return one part of a hot key as the report shows it."""
    if value is None:
        return "null"
    if isinstance(kind, T.TimestampType) and isinstance(value, int):
        return ms_to_iso(value // 1000)
    if isinstance(value, str) and not isinstance(kind, T.TimestampNTZType):
        return repr(value)
    return str(value)


def _exact_type(kind: T.DataType) -> T.DataType:
    """Return the type a key part is collected as: one that survives the trip to Python.

    A timestamp becomes epoch microseconds (a Python datetime loses the fold of a repeated
    daylight-saving hour), and a timestamp without time zone its text (a literal from a
    naive datetime would be read in the driver's zone).
    """
    if isinstance(kind, T.TimestampType):
        return T.LongType()
    if isinstance(kind, T.TimestampNTZType):
        return T.StringType()
    return kind


def _collected(column: str, kind: T.DataType) -> Column:
    """Return a key column as :func:`_exact_type` collects it."""
    if isinstance(kind, T.TimestampType):
        return F.unix_micros(F.col(column))
    return F.col(column).cast(_exact_type(kind))


def key_literal(value: Column, kind: T.DataType) -> Column:
    """Return a collected key part (see :func:`_exact_type`) as a value of ``kind`` again."""
    value = value.cast(_exact_type(kind))
    return F.timestamp_micros(value) if isinstance(kind, T.TimestampType) else value.cast(kind)


def key_bucket(keys: Sequence[str]) -> Column:
    """Return the bucket of a row's ``keys``, in ``[0, KEY_BUCKETS)``; 0 without keys.

    Equal keys share a bucket (nulls too, and ``-0.0`` with ``0.0``, as Spark hashes them),
    so a bucket's rows bound those of each of its keys. Strings hash by their bytes: keys
    equal only under a collation (``UTF8_LCASE``) may fall apart, and the bound then misses
    a key hot through them, which costs memory, never a wrong result.
    """
    if not keys:
        return F.lit(0)
    return F.xxhash64(*keys).bitwiseAND(KEY_BUCKETS - 1)


def worth_tallying(frames: Sequence[DataFrame], max_rows: int) -> bool:
    """Whether the count job should tally a part's rows by :func:`key_bucket`.

    The tally spares the search on a big part without hot keys (a pass over its rows), and
    costs a small part, which needs no search at all (at most ``max_rows`` rows in all), a
    little for nothing (benchmarks/HISTORY.md, "variance and stddev on the sweep; no hot-key
    search on big data without hot keys"). The
    rows are unknown until counted, so this guesses from Spark's size estimate of ``frames``
    (the one its optimizer picks broadcast joins by): over ``max_rows`` rows of
    :data:`ROW_BYTES` is big. Frames without an estimate (Spark Connect) are big, and so are
    Python rows (Spark estimates them as unbounded). A wrong guess costs time only.
    """
    try:  # no public API gives the estimate
        estimate = sum(int(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
                       for frame in frames)
    except (AttributeError, Py4JError):
        return True
    return estimate > max_rows * ROW_BYTES


def part_reach(plan: PartPlan) -> int | None:
    """Return how far back the part's windows reach (ms), or None if one is lifetime."""
    return windows_reach([feature.window for feature in plan.features])


def windows_reach(windows: Sequence[Window | None]) -> int | None:
    """Return how far back ``windows`` reach (ms), or None if one is lifetime.

    The most any of them does (:func:`~timetile.core.windows.window_reach`); 0 for none.
    """
    reaches = [window_reach(*window_spec(window)) for window in windows]
    if any(reach is None for reach in reaches):
        return None
    return max((reach for reach in reaches if reach is not None), default=0)


def chunk_load(events: np.ndarray, queries: np.ndarray, reach: int, length: int) -> int:
    """Return the most rows one chunk of ``length`` holds.

    A chunk holds its queries, and its events with those of the reach before it; ``events``
    and ``queries`` are sorted times (int64). O((n + chunks) log n).
    """
    seen_until = np.minimum(events, MAX_TIME - reach) + reach  # saturated, as in Spark
    chunks = np.unique(np.concatenate([queries // length, events // length,
                                       seen_until // length]))
    with np.errstate(over="ignore"):  # the first chunk may start before int64's first time
        starts = np.where(chunks == MIN_TIME // length, MIN_TIME,
                          chunks * length)
    ends = np.minimum(starts, MAX_TIME - length) + length
    reached = np.maximum(starts, MIN_TIME + reach) - reach
    held = (np.searchsorted(events, ends) - np.searchsorted(events, reached)
            + np.searchsorted(queries, ends) - np.searchsorted(queries, starts))
    return int(held.max()) if len(held) else 0


def shortest_chunk(reach: int, events: int, queries: int) -> int:
    """Return the shortest chunk length that keeps a key's copies of events bounded (ms).

    An event is copied into 1 + reach / L chunks on average: at least 2·reach·E / (E + Q)
    keeps the copies under half the key's rows, and reach / :data:`MAX_EXTRA_COPIES` under
    that many per event.
    """
    return max(math.ceil(2 * reach * events / max(events + queries, 1)),
               math.ceil(reach / MAX_EXTRA_COPIES), 1)


def chunk_length(event_times: Sequence[int] | np.ndarray, query_times: Sequence[int] | np.ndarray,
                 reach: int, budget: float) -> int:
    """Return the chunk length of one key, fitted on its sampled times (each side sorted).

    The longest length whose every chunk holds at most ``budget`` sampled rows (see
    :func:`chunk_load`), found by bisection, so bursts of events or queries, and left rows
    tied on one instant (daily labels at midnight), size the chunks as they fall. It is
    never under :func:`shortest_chunk`: a key too dense for that gets chunks over the
    budget rather than more copies (rounded up to a whole unit: day, hour, minute, second).
    A key of events alone thus gets chunks of at least two reaches (1.5 copies per event); a
    key hot by its queries can get chunks shorter than the reach. A fitted length is
    rounded down to the largest whole unit of at most a tenth of it that still fits and
    stays above that bound. O(n log n · log span).

    >>> day, hour = 86_400_000, 3_600_000
    >>> spread = [i * 6 * day // 1000 for i in range(10_000)]  # evenly, over 60 days
    >>> chunk_length(spread, [], day, 1000) / hour  # 1,000 a chunk and its day of reach
    119.0
    >>> chunk_length(spread, [], 7 * day, 1000) / day  # never under two reaches
    14.0
    >>> midnights = [d * day for d in range(60) for _ in range(250)]  # ties: 250 a day
    >>> chunk_length(spread[::20], midnights, 7 * day, 1000) / hour  # three midnights
    71.0
    """
    events = np.asarray(event_times, dtype=np.int64)
    queries = np.asarray(query_times, dtype=np.int64)
    rows = len(events) + len(queries)
    low = floor = shortest_chunk(reach, len(events), len(queries))
    if chunk_load(events, queries, reach, low) > budget:  # too dense: the copies' bound
        units = _round_units(low)
        return -(-low // units[0]) * units[0] if units else low
    times = np.concatenate([events, queries])
    span = int(times.max()) - int(times.min()) + 1 if rows else 1  # Python ints: no wrap
    high = max(min(span, MAX_TIME), low)
    if chunk_load(events, queries, reach, high) <= budget:
        low = high
    while high - low > max(low // 100, 1):  # to 1%: the sample is no finer
        middle = (low + high) // 2
        if chunk_load(events, queries, reach, middle) <= budget:
            low = middle
        else:
            high = middle
    for unit in _round_units(low):
        rounded = low // unit * unit  # down to a round length (10% at most), for the report,
        if rounded >= floor and chunk_load(events, queries, reach, rounded) <= budget:
            return rounded  # where it still fits
    return low


def _readable_duration(millis: int) -> str:
    """Write a chunk length exactly, and roughly in its largest unit where that is not exact.

    >>> _readable_duration(2 * UNIT_MS["d"]), _readable_duration(562_064_000)
    ('2d', '562064s (6.5d)')
    >>> _readable_duration(59_999), _readable_duration(1)
    ('59999ms (1.0m)', '1ms')
    """
    exact = format_duration(millis)
    for unit, size in sorted(UNIT_MS.items(), key=lambda item: -item[1]):
        rough = round(millis / size, 1)
        if rough >= 1.0:  # the largest unit that holds at least one, once rounded
            return exact if millis % size == 0 else f"{exact} ({rough:.1f}{unit})"
    return exact


def _round_units(length: int) -> list[int]:
    """Return the units (day, hour, minute, second) of at most a tenth of ``length``.

    Largest first: a length rounded to one of them moves by 10% at most.
    """
    return [size for size in sorted(UNIT_MS.values(), reverse=True) if 10 * size <= length]


def find_hot_keys(plan: PartPlan, queries: Sequence[DataFrame], reach: int, max_rows: int,
                  *, rows: int | None = None, seed: int = 0) -> KeySplit:
    """Find the part's keys with more than ``max_rows`` rows in one sweep, from a sample.

    ``queries`` holds, for each sweep of these events (each part that shares the GroupBy),
    the key columns and :data:`TIME` of the queries it receives: every left row that rides
    it, duplicates kept, or its distinct queries. A key's rows in a sweep are its events and
    its queries there; it is hot when they exceed ``max_rows`` in any one sweep.

    One Spark job: a Bernoulli sample of the events and queries, rated so that a key at the
    limit is expected to show :data:`SAMPLED_AT_LIMIT` times, grouped by key. Only the keys
    over the limit come back to the driver: about ``rows / max_rows`` of them at most. The
    estimates are the sampled counts over the rate; a miss costs only speed, never a wrong
    result. Each hot key's chunk length is fitted on its sampled times (:func:`chunk_length`),
    with the queries of every sweep together. The sampled times of every key meet in the
    aggregation before the hot ones are kept: about ``rows · 1,000 / max_rows`` of them, thinned
    to :data:`MAX_SAMPLED_TIMES` when ``rows`` (the events and queries searched, if known)
    says there would be more.
    """
    rate = min(1.0, SAMPLED_AT_LIMIT / max_rows)
    tagged = plan.events.select(*plan.keys, TIME, F.lit(-1).alias(_SIDE))
    for index, asked in enumerate(queries):  # the union widens a narrower key
        tagged = tagged.unionByName(asked.select(*plan.keys, TIME, F.lit(index).alias(_SIDE)))
    draw = F.rand(seed)
    sampled = tagged.select("*", draw.alias(_DRAW)).where(F.col(_DRAW) < rate)
    thin = 1.0 if rows is None else min(1.0, MAX_SAMPLED_TIMES / max(rows * rate, 1))
    timed = F.col(_DRAW) < rate * thin  # a sub-sample of the sample: its times are kept
    key_types = tuple(sampled.schema[key].dataType for key in plan.keys)
    is_event = F.col(_SIDE) == -1
    counts = [F.count_if(F.col(_SIDE) == index) for index in range(len(queries))] or [F.lit(0)]
    most_asked = counts[0] if len(counts) == 1 else F.greatest(*counts)  # the fullest sweep
    cut: list[HotKey] = []
    whole: list[HotKey] = []
    for row in (sampled.groupBy(*(_collected(key, kind).alias(key)
                                  for key, kind in zip(plan.keys, key_types, strict=True)))
                .agg(F.count_if(is_event).alias("_events"), most_asked.alias("_asked"),
                     F.min(TIME).alias("_first"), F.max(TIME).alias("_last"),
                     F.collect_list(F.when(is_event & timed, F.col(TIME))).alias("_event_times"),
                     F.collect_list(F.when(~is_event & timed, F.col(TIME))).alias("_query_times"))
                .where(F.col("_events") + F.col("_asked") > max_rows * rate)
                .collect()):  # the hot keys only: few rows
        events, queried = round(row["_events"] / rate), round(row["_asked"] / rate)
        times = (np.sort(np.asarray(row["_event_times"], dtype=np.int64)),
                 np.sort(np.asarray(row["_query_times"], dtype=np.int64)))
        length = chunk_length(times[0], times[1], reach, max_rows * rate * thin)
        hot = HotKey(tuple(row[key] for key in plan.keys), events, int(row["_first"]),
                     int(row["_last"]), length, left_rows=queried)
        shortest = shortest_chunk(reach, len(times[0]), len(times[1]))
        fullest = chunk_load(*times, reach, shortest)  # the most that cutting can gain
        worth = fullest <= WORTH_CUTTING * (len(times[0]) + len(times[1]))
        (cut if worth else whole).append(hot)
    return KeySplit(tuple(sorted(cut, key=lambda hot: -hot.rows)), reach, key_types,
                    tuple(sorted(whole, key=lambda hot: -hot.rows)))


def with_chunks(rows: DataFrame, keys: Sequence[str], split: KeySplit, is_event: Column, *,
                case_limit: int = CASE_LIMIT) -> DataFrame:
    """Add :data:`CHUNK` to the sweep's union of events and queries, copying events.

    A query of a hot key gets the chunk of its time; an event of a hot key one row per chunk
    that can see it, from its own to the chunk of ``time + reach``. Rows of other keys get
    chunk 0. Keys compare as ``<=>`` does (null to null, NaN to NaN), across the integer
    widths that a left key and an event key may differ by. The hot keys' chunk lengths come
    from a CASE expression when it needs at most ``case_limit`` comparisons (hot keys × key
    columns), else from a broadcast join; both give the same rows.
    """
    if len(split.hot) * len(keys) <= case_limit:
        length: Column = F.lit(None).cast("long")
        for hot in reversed(split.hot):
            length = F.when(_same_key(keys, hot.key, split.key_types), F.lit(hot.chunk_ms)
                            ).otherwise(length)
        keyed = rows.withColumn(_CHUNK_LENGTH, length)
    else:
        keyed = _joined_lengths(rows, keys, split)
    own = _chunk_of(f"`{TIME}`")
    seen_until = f"(least(`{TIME}`, {MAX_TIME - split.reach}) + {split.reach})"  # saturated
    chunks = F.when(F.col(_CHUNK_LENGTH).isNull(), F.array(F.lit(0).cast("long"))).when(
        is_event, F.sequence(own, _chunk_of(seen_until))
    ).otherwise(F.array(own))
    return keyed.withColumn(CHUNK, F.explode(chunks)).select(*rows.columns, CHUNK)


def _same_key(keys: Sequence[str], value: tuple[object, ...],
              types: tuple[T.DataType, ...]) -> Column:
    """Return a column true where the row's ``keys`` equal ``value`` (null-safe)."""
    same = F.lit(True)
    for key, part, kind in zip(keys, value, types, strict=True):
        same &= F.col(key).eqNullSafe(key_literal(F.lit(part), kind))
    return same


def _joined_lengths(rows: DataFrame, keys: Sequence[str], split: KeySplit) -> DataFrame:
    """Return ``rows`` with the chunk length of each hot key's rows, by a broadcast join."""
    renamed = [f"_tt_hot_{index}" for index in range(len(keys))]
    schema = T.StructType([*(T.StructField(name, _exact_type(kind)) for name, kind in
                             zip(renamed, split.key_types, strict=True)),
                           T.StructField(_CHUNK_LENGTH, T.LongType(), False)])
    collected = rows.sparkSession.createDataFrame(
        [(*hot.key, hot.chunk_ms) for hot in split.hot], schema)
    lengths = collected.select(
        *(key_literal(F.col(name), kind).alias(name)
          for name, kind in zip(renamed, split.key_types, strict=True)),
        _CHUNK_LENGTH).dropDuplicates(renamed)  # a key twice would copy its rows
    on = F.lit(True)
    for key, name in zip(keys, renamed, strict=True):
        on &= rows[key].eqNullSafe(lengths[name])
    return rows.join(F.broadcast(lengths), on=on, how="left").drop(*renamed)


def _chunk_of(time: str) -> Column:
    """Return the chunk holding ``time`` (a SQL expression), by exact floor division.

    ``div`` truncates toward zero, so a negative time off a chunk boundary is one chunk lower;
    nothing overflows, even at the first and last int64 milliseconds.
    """
    length = f"`{_CHUNK_LENGTH}`"
    return F.expr(f"({time} div {length}) - CAST({time} % {length} < 0 AS BIGINT)")
