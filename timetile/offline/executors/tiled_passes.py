"""The tiled executor's three stages as they run in the tasks, one partition at a time.

:mod:`.tiled` plans them on Spark; each pass here is the function its ``mapInArrow`` calls,
over partitions sorted by :func:`~timetile.spark.sorted_groups.sorted_by_groups`, beside the
accumulator that reports their largest (key, hop) group (:class:`LargestGroup`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.accumulators import Accumulator, AccumulatorParam

from timetile.core.aggregators import Aggregator
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.tiling import prefix_states, range_index, suffix_states
from timetile.core.timeutil import ms_to_iso
from timetile.offline.executors.features import kept_feature_values, refused
from timetile.offline.executors.tiled_layout import (
    BOUND,
    HIGH,
    HOP,
    KIND,
    PARTIAL,
    PREFIX,
    QUERY,
    SIDE,
    SUFFIX,
    WINDOW,
    TiledLayout,
    state_column,
)
from timetile.spark.result_types import arrow_value
from timetile.spark.sorted_groups import Rows, group_starts, map_groups, whole_groups
from timetile.spark.sources import TIME


class LargestGroup(AccumulatorParam[tuple[int, str]]):
    """A Spark accumulator of the largest (key, hop) group: (events, description)."""

    def zero(self, value: tuple[int, str]) -> tuple[int, str]:
        """Return no group."""
        del value
        return (0, "")

    def addInPlace(  # noqa: N802  (PySpark's name)
        self, value1: tuple[int, str], value2: tuple[int, str]
    ) -> tuple[int, str]:
        """Keep the larger group (idempotent, so retried tasks do no harm)."""
        return max(value1, value2)


def largest_group_gauge(accumulator: Accumulator[tuple[int, str]]) -> Callable[[], str | None]:
    """Render the accumulator for the job report; None until a task has run."""

    def read() -> str | None:
        events, where = accumulator.value
        return f"{events:,} events at {where}" if events else None

    return read


class HopPass:
    """Stage 1 over one partition: per (key, hop), the partial and the requested scans."""

    def __init__(self, layout: TiledLayout, schema: pa.Schema,
                 largest: Accumulator[tuple[int, str]] | None = None) -> None:
        self.layout = layout
        self.schema = schema
        self.largest = largest

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield stage-1 rows for every whole (key, hop) group of the partition."""
        aggregators = self.layout.aggregators()
        for table in whole_groups(batches, [*self.layout.keys, HOP]):
            yield from self._groups(table, aggregators).to_batches()

    def _groups(self, table: pa.Table, aggregators: list[Aggregator[Any]]) -> pa.Table:
        """Return the stage-1 rows of a table of whole (key, hop) groups.

        Per group its partial, and per request row (one per query and window) its prefix or
        suffix state. The columns
        are read out of Arrow once per table and each group folds a slice of them: O(rows)
        vectorized, then per group one ``fold`` of each aggregator and, where the group
        has requests, one ``update`` per distinct request bound.
        """
        starts = group_starts(table, [*self.layout.keys, HOP])
        is_request = table.column(KIND).to_numpy(zero_copy_only=False) == 1
        events = table.filter(pa.array(~is_request))
        requests = table.filter(pa.array(is_request))
        event_cuts = _group_cuts(~is_request, starts)  # group g: events[cuts[g]:cuts[g + 1]]
        request_cuts = _group_cuts(is_request, starts)
        times = events.column(TIME).to_numpy().astype(np.int64)
        bounds = requests.column(TIME).to_numpy().astype(np.int64)
        sides = requests.column(SIDE).to_numpy(zero_copy_only=False)
        firsts = table.take(pa.array(starts))
        if self.largest is not None and len(starts):
            sizes = np.diff(event_cuts)
            most = int(np.argmax(sizes))
            keys = tuple(firsts.column(key)[most].as_py() for key in self.layout.keys)
            hop = ms_to_iso(firsts.column(HOP)[most].as_py())
            self.largest.add((int(sizes[most]), f"key {keys}, hop {hop}"))
        partials: list[list[bytes]] = []
        scans: list[list[bytes]] = []
        for aggregator, feature in zip(aggregators, self.layout.aggregations, strict=True):
            values, kept = kept_feature_values(events, feature)
            kept_times = times[kept]
            value_cuts = _group_cuts(kept, event_cuts[:-1])
            partial: list[bytes] = []
            scanned: list[bytes] = [b""] * requests.num_rows
            for group in range(len(starts)):
                low, high = value_cuts[group], value_cuts[group + 1]
                group_values, group_times = values[low:high], kept_times[low:high]
                partial.append(aggregator.to_bytes(aggregator.fold(group_values, group_times)))
                first, last = request_cuts[group], request_cuts[group + 1]
                if first == last:
                    continue
                for side, scan in ((PREFIX, prefix_states), (SUFFIX, suffix_states)):
                    at = first + np.flatnonzero(sides[first:last] == side)
                    for position, state in zip(
                            at.tolist(), scan(aggregator, group_times, group_values, bounds[at]),
                            strict=True):
                        scanned[position] = aggregator.to_bytes(state)
            partials.append(partial)
            scans.append(scanned)
        return pa.concat_tables([
            self._rows(firsts, np.full(len(starts), PARTIAL), partials, requested=False),
            self._rows(requests, sides, scans, requested=True)])

    def _rows(self, source: pa.Table, sides: np.ndarray, states: list[list[bytes]], *,
              requested: bool) -> pa.Table:
        """Stage-1 rows: ``source``'s keys and hop, sides and states; a request's query too.

        A partial's row (``requested`` false) has null bound, query and window.
        """
        columns = {name: source.column(name) for name in (*self.layout.keys, HOP)}
        for name in (BOUND, QUERY, WINDOW):
            columns[name] = (source.column(TIME if name == BOUND else name) if requested
                             else pa.nulls(len(sides)))
        columns[SIDE] = pa.array(np.asarray(sides, dtype=np.int32))
        columns |= {state_column(index): pa.array(column, pa.binary())
                    for index, column in enumerate(states)}
        return pa.table([columns[field.name].cast(field.type) for field in self.schema],
                        schema=self.schema)


def _group_cuts(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Return where each group's rows of ``mask`` begin among them, and their total last.

    The groups start at the rows ``starts`` (ascending, the first at 0); group ``g`` holds
    the masked rows ``[cuts[g], cuts[g + 1])`` of those ``mask`` selects. O(rows).
    """
    counts = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])
    cuts: np.ndarray = counts[np.append(starts, len(mask))]
    return cuts


class TailPass:
    """Stage 2 over one partition: per key, every tail from a range index over its partials."""

    def __init__(self, layout: TiledLayout, schema: pa.Schema) -> None:
        self.layout = layout
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield one row per tail request (a query's window) of every whole key group."""
        aggregators = self.layout.aggregators()
        return map_groups(batches, list(self.layout.keys), self.schema,
                          lambda group, rows: self._key(group, aggregators, rows))

    def _key(self, group: pa.Table, aggregators: list[Aggregator[Any]], rows: Rows) -> None:
        is_request = group.column(KIND).to_numpy(zero_copy_only=False) == 1
        partials = group.filter(pa.array(~is_request))
        requests = group.filter(pa.array(is_request))
        if requests.num_rows == 0:
            return
        hops = partials.column(HOP).to_numpy().astype(np.int64)
        lows = np.searchsorted(hops, requests.column(HOP).to_numpy().astype(np.int64))
        highs = np.searchsorted(hops, requests.column(HIGH).to_numpy().astype(np.int64))
        for name in (*self.layout.keys, QUERY, WINDOW):
            rows[name].extend(requests.column(name).to_pylist())
        for index, aggregator in enumerate(aggregators):
            states = [aggregator.from_bytes(data)
                      for data in partials.column(state_column(index)).to_pylist()]
            index_structure = range_index(aggregator, states)
            rows[state_column(index)].extend(
                aggregator.to_bytes(index_structure.query(int(low), int(high)))
                for low, high in zip(lows.tolist(), highs.tolist(), strict=True))


class Assembly:
    """Stage 3 over one partition: per query, merge each window's pieces and finalize."""

    def __init__(self, layout: TiledLayout, schema: pa.Schema) -> None:
        self.layout = layout
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield one finished row per query."""
        aggregators = self.layout.aggregators()
        return map_groups(batches, [*self.layout.keys, TIME], self.schema,
                          lambda group, rows: self._query(group, aggregators, rows))

    def _query(self, group: pa.Table, aggregators: list[Aggregator[Any]], rows: Rows) -> None:
        for name in (*self.layout.keys, TIME):
            rows[name].append(group.column(name)[0].as_py())
        at = rows[TIME][-1]
        windows = group.column(WINDOW).to_pylist()
        state_lists = [group.column(name).to_pylist() for name in self.layout.state_columns]
        for index, feature in enumerate(self.layout.features):
            aggregator = aggregators[self.layout.feature_aggregator[index]]
            window = self.layout.feature_window[index]
            state = aggregator.init()
            for row_window, data in zip(
                    windows, state_lists[self.layout.feature_aggregator[index]], strict=True):
                if row_window == window and data is not None:
                    state = aggregator.merge(state, aggregator.from_bytes(data))
            try:
                rows[feature.name].append(arrow_value(aggregator.finalize_at(state, at)))
            except ResultOverflowError as error:
                raise refused(feature, error) from None
