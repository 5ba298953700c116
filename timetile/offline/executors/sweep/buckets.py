"""Bucketed features on the sweep: each (group, bucket) swept as a group of its own.

:class:`BucketedColumn` is what :mod:`.executor` reads a bucketed feature from.

A bucketed aggregation gives, per query, a map from each bucket value to the op's result over
that bucket's events in the window (:mod:`timetile.core.aggregators.bucketed`). The sweep's
kernels keep one running value per window, so a bucketed feature is rewritten into the plain
problem they already solve:

- the column's events that have both a value and a bucket are regrouped by (group, bucket),
  in time order, and cut into *sessions* wherever two events of a pair lie at least the
  longest of the queries' windows apart (no window holds both; a lifetime window is never
  cut);
- every session gets its own copy of the queries of its group that can see it: those whose
  window ends after the session's first event and starts at or before its last (one
  contiguous run of the group's queries, since no window kind's bounds move back). The
  features over one column and bucket share their copies, made for the widest of their
  windows (per query, the earliest start and the latest end), so a query gets at most one
  copy per bucket: a window spanning two sessions would be longer than the longest;
- the kernels answer every copy, and each query's map gathers the copies whose window held
  at least one of the bucket's events, buckets in code-point order (Arrow compares UTF-8
  bytes, which orders code points alike). A query without such a copy gets null.

Cost: O(n log n) to regroup n events (one sort), plus the kernels' cost over the copies.
With sliding windows every copy holds an event of the widest window (a window as long as
the longest cannot fall in a gap shorter than it), so the copies are exactly the entries of
the widest window's maps; with a lifetime window, exactly those of its maps (a bucket, once
seen, stays in every later map). A hopping or sawtooth window's length varies with its
query, so a short one can fall in a gap within a session and give its copy nothing; still
at most one copy per query and bucket. Narrower windows of the same column and bucket sweep
the widest one's copies too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.windows import Window
from timetile.core.kernels.sweep import window_runs
from timetile.core.types import ValueType
from timetile.core.windows import MAX_TIME, MIN_TIME
from timetile.offline.executors.sweep.columns import (
    SweptColumn,
    dictionary_ranks,
    feature_result,
    list_offsets,
)
from timetile.offline.plan import Feature, query_bounds


@dataclass(frozen=True)
class BucketLayout:
    """Events regrouped into sessions of one (group, bucket), and the queries copied to each.

    Attributes:
        event_order: for each regrouped event, its index among the events given, session
            by session, in time order within each.
        event_sessions: the session of each regrouped event (non-decreasing).
        session_groups: the group of each session.
        session_buckets: the bucket of each session, as an index into ``buckets``.
        copy_queries: for each copy, the index of the query it copies; the copies of each
            session are contiguous and in time order.
        copy_offsets: where each session's copies start (length sessions + 1).
        buckets: the distinct bucket values, in code-point order.

    """

    event_order: np.ndarray
    event_sessions: np.ndarray
    session_groups: np.ndarray
    session_buckets: np.ndarray
    copy_queries: np.ndarray
    copy_offsets: np.ndarray
    buckets: pa.Array

    @property
    def sessions(self) -> int:
        """How many sessions hold events."""
        return len(self.session_groups)

    @cached_property
    def copy_buckets(self) -> np.ndarray:
        """The bucket of each copy, as an index into ``buckets``. O(c), once."""
        return np.repeat(self.session_buckets, np.diff(self.copy_offsets))

    def entries(self, held: np.ndarray, queries: int) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray]:
        """Return where the maps' entries come from: offsets, copies and buckets.

        Per query, the offsets of its entries (length ``queries + 1``); then for each entry,
        the copy whose result it holds and the index of its bucket. ``held`` is true for
        each copy whose window held at least one event; only those give an entry, the
        entries of a query in bucket order. O(c log c) for c copies.
        """
        copies = np.flatnonzero(held)
        owners = self.copy_queries[copies]
        buckets = self.copy_buckets[copies]
        # The copies come session by session, (group, bucket, time) ascending, and a query
        # has at most one per bucket, so a stable sort by query leaves them in bucket order.
        order = np.argsort(owners, kind="stable")
        per_query = np.bincount(owners, minlength=queries)
        offsets = np.concatenate([[0], np.cumsum(per_query)]).astype(np.int64)
        return offsets, copies[order], buckets[order]

    def _check(self, query_offsets: np.ndarray) -> None:
        """Assert the layout's invariants, for ``query_offsets`` as given. O(n + c log c)."""
        sessions = self.sessions
        assert np.all(np.diff(self.event_sessions) >= 0)
        assert np.array_equal(np.unique(self.event_sessions), np.arange(sessions))
        assert len(self.copy_offsets) == sessions + 1
        assert self.copy_offsets[0] == 0
        assert np.all(np.diff(self.copy_offsets) >= 0)
        assert self.copy_offsets[-1] == len(self.copy_queries)
        owner_groups = np.repeat(self.session_groups, np.diff(self.copy_offsets))
        assert np.all(query_offsets[owner_groups] <= self.copy_queries)
        assert np.all(self.copy_queries < query_offsets[owner_groups + 1])
        pairs = self.copy_queries * max(len(self.buckets), 1) + self.copy_buckets
        assert len(np.unique(pairs)) == len(pairs), "a query copied twice to one bucket"
        names = self.buckets.to_pylist()
        assert names == sorted(set(names)), "buckets not distinct, or not in code-point order"


def bucket_layout(buckets: pa.Array, groups: np.ndarray, times: np.ndarray, *,
                  query_offsets: np.ndarray, query_starts: np.ndarray,
                  query_ends: np.ndarray) -> BucketLayout:
    """Regroup events into sessions of one (group, bucket); copy queries to each session.

    ``buckets``, ``groups`` and ``times`` describe the events that have a value and a bucket
    (no nulls), grouped and in time order within each group. Each group's queries,
    delimited by ``query_offsets`` (length groups + 1) and in time order, have the windows
    ``[query_starts, query_ends)``, which no window kind moves back; a lifetime window
    starts at :data:`~timetile.core.windows.MIN_TIME`. Two events of one (group, bucket)
    at least the longest window apart fall in different sessions (with a lifetime window,
    never). O(n log n + s log q) for n events, s sessions and q queries, plus O(1) per copy.
    """
    ranks, by_rank = dictionary_ranks(buckets)
    width = max(len(by_rank), 1)  # (group, bucket) as one integer
    pairs = groups.astype(np.int64) * width + ranks
    event_order = np.argsort(pairs, kind="stable")  # time order within each pair stays
    pairs, ordered_times = pairs[event_order], times[event_order]
    starts = np.ones(len(pairs), dtype=bool)
    starts[1:] = pairs[1:] != pairs[:-1]
    lifetime = bool((query_starts == MIN_TIME).any())
    if len(query_starts) and not lifetime:  # no window holds two events this far apart
        longest = int((query_ends - query_starts).max())
        # Within a pair the gaps are >= 0 and may pass int64's last value: read as unsigned.
        starts[1:] |= np.diff(ordered_times).view(np.uint64) >= longest
    first_events = np.flatnonzero(starts)
    event_offsets = np.append(first_events, len(pairs))
    session_groups, session_buckets = np.divmod(pairs[first_events], width)
    firsts = ordered_times[first_events]
    lasts = ordered_times[event_offsets[1:] - 1]
    # A copy is needed where the window ends after the first event and starts at or before
    # the last: from the first query whose end passes `first` to the last whose start does
    # not pass `last`. Both searches read a group's query bounds, sorted within the group,
    # as window_runs reads a group's event times.
    # The + 1 saturates at int64's last time: no window starts there (each starts before its
    # query), and a window ending there may get a copy of a session it cannot see (no entry).
    query_offsets = query_offsets.astype(np.int64)
    session_offsets = np.searchsorted(session_groups, np.arange(len(query_offsets)))
    first_after = np.minimum(firsts, MAX_TIME - 1) + 1
    last_after = np.minimum(lasts, MAX_TIME - 1) + 1
    after_first, _ = window_runs(query_ends.astype(np.int64), query_offsets,
                                 session_offsets.astype(np.int64), first_after, first_after)
    through_last, _ = window_runs(query_starts.astype(np.int64), query_offsets,
                                  session_offsets.astype(np.int64), last_after, last_after)
    counts = np.maximum(through_last - after_first, 0)
    copy_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    copy_queries = (np.repeat(after_first - copy_offsets[:-1], counts)
                    + np.arange(copy_offsets[-1], dtype=np.int64))
    return BucketLayout(event_order, np.cumsum(starts) - 1, session_groups, session_buckets,
                        copy_queries, copy_offsets, by_rank)


class BucketedColumn:
    """One value column regrouped by (group, bucket), for the bucketed features over it.

    Events without a value or a bucket are left out. The copies of the queries are those
    that the widest of ``windows`` needs (per query, the earliest start and the latest end
    of its windows), shared by every window: a narrower window's copies that see nothing
    give no entry. One :class:`~timetile.offline.executors.sweep.columns.SweptColumn` sweeps them
    all, so its caches (runs, sums, moments, value ranks) serve every feature over this
    column and bucket. Building costs what :func:`bucket_layout` costs; each feature
    then costs its op's kernels over the copies, plus O(c log c) once per window to
    gather c copies into maps.
    """

    def __init__(self, values: pa.ChunkedArray, buckets: pa.ChunkedArray, *,
                 times: np.ndarray, groups: np.ndarray, value_type: ValueType,
                 windows: list[Window | None], query_times: np.ndarray,
                 query_offsets: np.ndarray) -> None:
        both = pc.and_(pc.is_valid(values), pc.is_valid(buckets))
        kept = both.to_numpy(zero_copy_only=False)
        bounds = [query_bounds(window, query_times) for window in windows]
        times = times[kept]
        self.layout = layout = bucket_layout(
            pc.filter(buckets, both).combine_chunks(), groups[kept], times,
            query_offsets=query_offsets,
            query_starts=np.minimum.reduce([start for start, _ in bounds]),
            query_ends=np.maximum.reduce([end for _, end in bounds]))
        self.column = SweptColumn(pc.filter(values, both).take(pa.array(layout.event_order)),
                                  times[layout.event_order], layout.event_sessions,
                                  layout.sessions, value_type,
                                  query_times=query_times[layout.copy_queries],
                                  query_offsets=layout.copy_offsets)
        self.queries = len(query_times)
        self._entries: dict[Window | None, tuple[np.ndarray, pa.Array, pa.Array]] = {}

    def result(self, feature: Feature) -> pa.Array:
        """Return ``feature``'s maps, bucket → the op's result.

        An entry for each bucket with an event in the window; null where there is none.
        """
        window = feature.window
        if window not in self._entries:  # once per window, for every op
            lows, highs = self.column.runs(window)
            offsets, copies, buckets = self.layout.entries(highs > lows, self.queries)
            self._entries[window] = (offsets, pa.array(copies),
                                     self.layout.buckets.take(pa.array(buckets)))
        offsets, copies, buckets = self._entries[window]
        label = f"{feature.aggregation.op} by {feature.bucket}"
        return pa.MapArray.from_arrays(list_offsets(offsets, label, bucketed=True), buckets,
                                       feature_result(feature, self.column).take(copies),
                                       mask=pa.array(offsets[1:] == offsets[:-1]))
