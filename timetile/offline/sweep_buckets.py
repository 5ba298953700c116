"""Bucketed features on the sweep: each (group, bucket) swept as a group of its own.

:class:`BucketedColumn` is what :mod:`.sweep_executor` reads a bucketed feature from.

A bucketed aggregation gives, per query, a map from each bucket value to the op's result over
that bucket's events in the window (:mod:`timetile.core.aggregators.bucketed`). The sweep's
kernels keep one running value per window, so a bucketed feature is rewritten into the plain
problem they already solve:

- the column's events that have both a value and a bucket are regrouped by (group, bucket),
  in time order within each such *subgroup*;
- every subgroup gets its own copy of the queries of its group that can see it: those whose
  window ends after the subgroup's first event and starts at or before its last (one
  contiguous run of the group's queries, since no window kind's bounds move back). The
  features over one column and bucket share their copies, made for the widest reach of
  their windows (per query, the earliest start and the latest end);
- the kernels answer every copy, and each query's map gathers the copies whose window held
  at least one of the bucket's events, buckets in code-point order (Arrow compares UTF-8
  bytes, which orders code points alike). A query without such a copy gets null.

Cost: O(n log n) to regroup n events (a sort), plus the kernels' cost over the copies. The
copies of a query are one per bucket its widest window sees, plus the buckets whose events
fall only in gaps within that reach: with sliding windows, about the size of the widest
window's output, and with a lifetime window exactly that (a bucket, once seen, stays in
every later map). Narrower windows of the same column and bucket sweep those copies too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.windows import Window
from timetile.core.kernels.sweep import window_runs
from timetile.core.types import ValueType
from timetile.offline.plan import Feature, query_bounds
from timetile.offline.sweep_columns import SweptColumn, feature_result, list_offsets


@dataclass(frozen=True)
class BucketLayout:
    """Events regrouped by (group, bucket), and the queries copied to each such subgroup.

    Attributes:
        event_order: for each regrouped event, its index among the events given, subgroup
            by subgroup, in time order within each.
        event_subgroups: the subgroup of each regrouped event (non-decreasing).
        subgroups: how many (group, bucket) pairs hold events.
        copy_queries: for each copy, the index of the query it copies; the copies of each
            subgroup are contiguous and in time order.
        copy_offsets: where each subgroup's copies start (length ``subgroups + 1``).
        copy_buckets: each copy's bucket, as an index into ``buckets``.
        buckets: the distinct bucket values, in code-point order.

    """

    event_order: np.ndarray
    event_subgroups: np.ndarray
    subgroups: int
    copy_queries: np.ndarray
    copy_offsets: np.ndarray
    copy_buckets: np.ndarray
    buckets: pa.Array

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
        ranks = self.copy_buckets[copies]
        # The copies come subgroup by subgroup, (group, bucket) ascending, so a stable sort
        # by query leaves each query's entries in bucket order.
        order = np.argsort(owners, kind="stable")
        per_query = np.bincount(owners, minlength=queries)
        offsets = np.concatenate([[0], np.cumsum(per_query)]).astype(np.int64)
        return offsets, copies[order], ranks[order]


def bucket_layout(buckets: pa.Array, groups: np.ndarray, times: np.ndarray, *,
                  query_offsets: np.ndarray, query_starts: np.ndarray,
                  query_ends: np.ndarray) -> BucketLayout:
    """Regroup events by (group, bucket) and copy each group's queries to its subgroups.

    ``buckets``, ``groups`` and ``times`` describe the events that have a value and a bucket
    (no nulls), grouped and in time order within each group; ``query_offsets`` delimits each
    group's queries (length groups + 1), whose windows are ``[query_starts, query_ends)``,
    in time order within each group. O((n + s) log n) for n events and s subgroups, plus the
    copies.
    """
    encoded = pc.dictionary_encode(buckets)
    order = pc.array_sort_indices(encoded.dictionary).to_numpy()
    rank_of_entry = np.empty(len(order), dtype=np.int64)
    rank_of_entry[order] = np.arange(len(order))
    ranks = rank_of_entry[encoded.indices.to_numpy(zero_copy_only=False)]
    pairs = groups.astype(np.int64) * max(len(order), 1) + ranks
    distinct, subgroup_of_event = np.unique(pairs, return_inverse=True)
    subgroup_of_event = subgroup_of_event.reshape(-1)
    event_order = np.argsort(subgroup_of_event, kind="stable")
    event_subgroups = subgroup_of_event[event_order]
    group_of_subgroup = distinct // max(len(order), 1)
    bucket_of_subgroup = distinct % max(len(order), 1)
    # The subgroups' first and last event times, and per group where its subgroups start.
    ordered_times = times[event_order]
    event_offsets = np.searchsorted(event_subgroups, np.arange(len(distinct) + 1))
    firsts = ordered_times[event_offsets[:-1]]
    lasts = ordered_times[event_offsets[1:] - 1]
    subgroup_offsets = np.searchsorted(group_of_subgroup, np.arange(len(query_offsets)))
    # A copy is needed where the window ends after the first event and starts at or before
    # the last: from the first query whose end passes `first` to the last whose start does
    # not pass `last`. Both searches read a group's query bounds, sorted within the group,
    # as window_runs reads a group's event times.
    query_offsets = query_offsets.astype(np.int64)
    after_first, _ = window_runs(query_ends.astype(np.int64), query_offsets,
                                 subgroup_offsets.astype(np.int64), firsts + 1, firsts + 1)
    through_last, _ = window_runs(query_starts.astype(np.int64), query_offsets,
                                  subgroup_offsets.astype(np.int64), lasts + 1, lasts + 1)
    counts = np.maximum(through_last - after_first, 0)
    copy_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    copy_queries = (np.repeat(after_first - copy_offsets[:-1], counts)
                    + np.arange(copy_offsets[-1], dtype=np.int64))
    return BucketLayout(event_order, event_subgroups, len(distinct), copy_queries,
                        copy_offsets, np.repeat(bucket_of_subgroup, counts),
                        encoded.dictionary.take(pa.array(order)))


class BucketedColumn:
    """One value column regrouped by (group, bucket), for the bucketed features over it.

    Events without a value or a bucket are left out. The copies of the queries are those
    that the widest of ``windows`` needs (per query, the earliest start and the latest end
    of its windows), shared by every window: a narrower window's copies that see nothing
    give no entry. One :class:`~timetile.offline.sweep_columns.SweptColumn` sweeps them
    all, so its caches (runs, sums, moments, value ranks) serve every feature over this
    column and bucket.
    """

    def __init__(self, values: pa.ChunkedArray, buckets: pa.ChunkedArray, *,
                 times: np.ndarray, groups: np.ndarray, value_type: ValueType,
                 windows: list[Window | None], query_times: np.ndarray,
                 query_offsets: np.ndarray) -> None:
        both = pc.and_(pc.is_valid(values), pc.is_valid(buckets))
        kept = both.to_numpy(zero_copy_only=False)
        bounds = [query_bounds(window, query_times) for window in windows]
        starts = np.minimum.reduce([start for start, _ in bounds])
        ends = np.maximum.reduce([end for _, end in bounds])
        self.layout = layout = bucket_layout(
            pc.filter(buckets, both).combine_chunks(), groups[kept], times[kept],
            query_offsets=query_offsets, query_starts=starts, query_ends=ends)
        self.column = SweptColumn(pc.filter(values, both).take(pa.array(layout.event_order)),
                                  times[kept][layout.event_order], layout.event_subgroups,
                                  layout.subgroups, value_type,
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
            offsets, copies, ranks = self.layout.entries(highs > lows, self.queries)
            self._entries[window] = (offsets, pa.array(copies),
                                     self.layout.buckets.take(pa.array(ranks)))
        offsets, copies, buckets = self._entries[window]
        label = f"{feature.aggregation.op} by {feature.bucket}"
        return pa.MapArray.from_arrays(list_offsets(offsets, label), buckets,
                                       feature_result(feature, self.column).take(copies),
                                       mask=pa.array(offsets[1:] == offsets[:-1]))
