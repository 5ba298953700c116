"""Whole groups from sorted Arrow batches: the partition-level pattern of the tiled executor.

Spark's grouped UDFs (``applyInArrow``) call Python once per group, which is ruinous when
there are millions of tiny groups (one hop of one key). Instead the executor repartitions by
the group columns, sorts within partitions, and streams each partition through
``mapInArrow``; :func:`whole_groups` re-cuts the stream so that every table it yields holds
only whole groups, and :func:`group_bounds` finds them. Memory is bounded by the largest
group plus one batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa


def group_starts(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Row indices where a new group starts (rows with equal ``columns`` are contiguous).

    Nulls compare equal to nulls. O(rows · columns), vectorized.

    >>> t = pa.table({"k": [1, 1, 2, None, None], "h": [0, 0, 0, 5, 5]})
    >>> group_starts(t, ["k", "h"]).tolist()
    [0, 2, 3]
    """
    rows = table.num_rows
    if rows == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(rows, dtype=bool)
    change[0] = True
    for name in columns:
        column = table.column(name).combine_chunks()
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        values = column.fill_null(0).to_numpy(zero_copy_only=False)
        change[1:] |= (values[1:] != values[:-1]) | (valid[1:] != valid[:-1])
    return np.flatnonzero(change)


def group_bounds(table: pa.Table, columns: Sequence[str]) -> list[tuple[int, int]]:
    """``(start, end)`` row ranges of the groups of a table sorted by ``columns``."""
    starts = group_starts(table, columns).tolist()
    return list(zip(starts, [*starts[1:], table.num_rows], strict=True))


def whole_groups(
    batches: Iterator[pa.RecordBatch], columns: Sequence[str]
) -> Iterator[pa.Table]:
    """Re-cut a stream of batches sorted by ``columns`` into tables of whole groups.

    The last group of each batch is held back until the next batch shows where it ends.
    """
    pending: pa.Table | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch])
        if pending is not None:
            table = pa.concat_tables([pending, table])
        last_start = int(group_starts(table, columns)[-1])
        if last_start > 0:
            yield table.slice(0, last_start)
        pending = table.slice(last_start)
    if pending is not None and pending.num_rows:
        yield pending


#: Output rows under construction: column name → values.
Rows = dict[str, list[Any]]


def map_groups(
    batches: Iterator[pa.RecordBatch],
    columns: Sequence[str],
    schema: pa.Schema,
    handle: Callable[[pa.Table, Rows], None],
) -> Iterator[pa.RecordBatch]:
    """Call ``handle(group, rows)`` for every whole group; yield what it appended, as batches.

    ``group`` is a zero-copy slice holding one group's rows; ``rows`` has one list per column
    of ``schema``, to which ``handle`` appends the group's output rows.
    """
    for table in whole_groups(batches, columns):
        rows: Rows = {name: [] for name in schema.names}
        for begin, end in group_bounds(table, columns):
            handle(table.slice(begin, end - begin), rows)
        yield from pa.Table.from_pydict(rows, schema=schema).to_batches()
