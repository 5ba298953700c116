"""Whole groups from sorted Arrow batches: the partition-level pattern of every Spark job here.

Spark's grouped UDFs (``applyInArrow``) call Python once per group, which is ruinous when
there are millions of tiny groups (one hop of one key). Instead a job (the backfill's
executors, the upload, the stream's micro-batches) repartitions by the group columns, sorts
within partitions, and streams each partition through ``mapInArrow``; :func:`whole_groups`
re-cuts the stream so that every table it yields holds only whole groups, and
:func:`group_bounds` finds them. Memory is bounded by the largest group plus one batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:  # the workers that run the rest of this module need no Spark session
    from pyspark.sql import DataFrame


def sorted_by_groups(frame: DataFrame, groups: Sequence[str], *then: str) -> DataFrame:
    """Shuffle ``frame`` by the hash of ``groups``, and sort each partition by them, then ``then``.

    This is the input :func:`whole_groups` expects from ``mapInArrow``: every group in one
    partition, its rows contiguous. Spark chooses how many partitions: it starts from
    ``spark.sql.shuffle.partitions``, and adaptive query execution (on by default in batch
    jobs, off in streaming ones) merges neighbouring partitions that turn out small, which
    keeps every group whole; it never merges those of a repartition to a given number. Each
    task pays a Python worker's hand-off, so small jobs gain (see ``benchmarks/RESULTS.md``).

    Raises:
        ValueError: if ``groups`` is empty.

    """
    if not groups:
        raise ValueError("sorted_by_groups needs at least one group column")
    return frame.repartition(*groups).sortWithinPartitions(*groups, *then)


def _differs(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Tell, for each row after the first, whether its value differs from the previous one.

    Nulls equal nulls and NaN equals NaN (as Spark groups them), for any Arrow type.
    """
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    after, before = column.slice(1), column.slice(0, len(column) - 1)
    differs = pc.fill_null(pc.not_equal(after, before), False)
    if pa.types.is_floating(column.type):
        both_nan = pc.fill_null(pc.and_(pc.is_nan(after), pc.is_nan(before)), False)
        differs = pc.and_(differs, pc.invert(both_nan))
    validity = pc.not_equal(pc.is_valid(after), pc.is_valid(before))
    changed: np.ndarray = pc.or_(differs, validity).to_numpy(zero_copy_only=False)
    return changed


def group_starts(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Row indices where a new group starts (rows with equal ``columns`` are contiguous).

    Nulls compare equal to nulls and NaN to NaN. O(rows · columns), vectorized.

    >>> t = pa.table({"k": ["a", "a", None, None, "b"], "h": [0.0, 0.0, float("nan"),
    ...                                                      float("nan"), 1.0]})
    >>> group_starts(t, ["k", "h"]).tolist()
    [0, 2, 4]
    """
    rows = table.num_rows
    if rows == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(rows, dtype=bool)
    change[0] = True
    for name in columns:
        change[1:] |= _differs(table.column(name))
    return np.flatnonzero(change)


def group_bounds(table: pa.Table, columns: Sequence[str]) -> list[tuple[int, int]]:
    """Return the ``(start, end)`` row ranges of the groups of a table sorted by ``columns``."""
    starts = group_starts(table, columns).tolist()
    return list(zip(starts, [*starts[1:], table.num_rows], strict=True))


def whole_groups(
    batches: Iterator[pa.RecordBatch], columns: Sequence[str]
) -> Iterator[pa.Table]:
    """Re-cut a stream of batches sorted by ``columns`` into tables of whole groups.

    The last group of each batch is held back until a later batch shows where it ends.
    O(rows): each batch is scanned once, and a group spanning many batches is concatenated
    once, when it closes.
    """
    pending: list[pa.Table] = []  # the unfinished last group, possibly over many batches
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch])
        starts = group_starts(table, columns)
        continues = bool(pending) and len(group_starts(
            pa.concat_tables([pending[-1].slice(pending[-1].num_rows - 1), table.slice(0, 1)]),
            columns)) == 1
        if pending and not continues:
            yield pa.concat_tables(pending)
            pending = []
        inner = starts[starts > 0] if continues else starts
        if len(inner) == 0:  # the pending group goes on through this whole batch
            pending.append(table)
            continue
        last_start = int(inner[-1])
        done = [*pending, table.slice(0, last_start)] if last_start > 0 else pending
        if done:
            yield pa.concat_tables(done)
        pending = [table.slice(last_start)]
    if pending:
        yield pa.concat_tables(pending)


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
