"""The streaming-tile write path: events since the last upload, as tiles in the store.

The streaming job writes each micro-batch through :func:`put_events`; users with their own
stream processor, and tests, call it directly. Events are grouped by (entity key, tile of
:data:`~timetile.online.layout.TILE_MS`) and each group is written under the batch's id, so
writing the same batch again replaces its entries: a replayed micro-batch never double
counts. Events older than the upload's day end are already in the batch records (or, if they
arrived late, the next upload adds them): they are counted and not written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.group_by import GroupBy
from timetile.core.aggregators import bucketed_values
from timetile.core.batch_record import Series
from timetile.core.types import ValueType
from timetile.online.layout import (
    META_TABLE,
    TILE_MS,
    GroupByMeta,
    check_servable,
    encode_events,
    encode_key,
    online_features,
    tile_table,
)
from timetile.online.store import KVStore


@dataclass(frozen=True)
class TileWriteReport:
    """What one :func:`put_events` call did.

    Attributes:
        written: events written into tiles.
        late: events before the upload's day end: not written (the next upload has them).
        unusable: events with a null time or a null key: not written.
        tiles: (key, tile) entries written.

    """

    written: int
    late: int
    unusable: int
    tiles: int


def _millis(column: pa.ChunkedArray) -> list[int | None]:
    """Return event times as epoch milliseconds (None where null)."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("ms")), pa.int64())
    return [None if t is None else int(t) for t in column.to_pylist()]


def put_events(store: KVStore, group_by: GroupBy, events: pa.Table, batch: str) -> TileWriteReport:
    """Write one batch of ``group_by``'s events as streaming tiles.

    Args:
        store: the store ``upload`` wrote to (its metadata gives the column types).
        group_by: the definition.
        events: the source's rows after its ``select`` and ``where``: the key columns, the
            time column (epoch ms or a timestamp) and the aggregated columns.
        batch: the batch's id, stable across replays (e.g. the micro-batch id).

    Raises:
        LookupError: ``group_by`` was never uploaded to ``store``.

    """
    check_servable(group_by)
    data = store.multi_get(META_TABLE, [group_by.name.encode()])[0]
    if data is None:
        raise LookupError(f"GroupBy {group_by.name!r} has no upload in this store. Fix: run "
                          "`timetile upload` for it first")
    meta = GroupByMeta.from_bytes(data)
    features = online_features(group_by, meta.value_types)
    time_column = group_by.time_column
    assert time_column is not None
    times = _millis(events.column(time_column))
    keys = list(zip(*(events.column(key).to_pylist() for key in group_by.keys), strict=True))
    usable = np.array([t is not None and all(k is not None for k in key)
                       for t, key in zip(times, keys, strict=True)], dtype=bool)
    stamp = np.array([t if t is not None else 0 for t in times], dtype=np.int64)
    late = usable & (stamp < meta.day_end)
    kept = np.flatnonzero(usable & ~late)
    groups: dict[tuple[bytes, int], list[int]] = {}
    for row in kept:
        key = encode_key(keys[row], meta.key_types)
        groups.setdefault((key, int(stamp[row] - stamp[row] % TILE_MS)), []).append(int(row))
    columns = {name: events.column(name).to_pylist()
               for name in {*meta.value_types} if name in events.column_names}
    entries = []
    for (key, tile), rows in groups.items():
        series: dict[str, Series] = {}
        for feature in features:
            if feature.series not in series:
                series[feature.series] = _series(feature.series, feature.value_type, columns,
                                                 rows, stamp)
        entries.append((key, tile, batch.encode(), encode_events(series)))
    store.put_tiles(tile_table(group_by.name), entries)
    return TileWriteReport(len(kept), int(late.sum()), int((~usable).sum()), len(entries))


def _series(name: str, value_type: ValueType, columns: dict[str, list[Any]],
            rows: list[int], stamp: np.ndarray) -> Series:
    """Return a series' non-null values (with buckets for ``column/bucket``) and times."""
    column, _, bucket = name.partition("/")
    values = columns[column]
    buckets = columns[bucket] if bucket else None
    kept = [row for row in rows if values[row] is not None
            and (buckets is None or buckets[row] is not None)]
    array = np.array([values[row] for row in kept], dtype=value_type.numpy_dtype)
    if buckets is not None:
        array = bucketed_values([buckets[row] for row in kept], array, value_type)
    return array, stamp[kept]
