"""The streaming-tile write path: events since the last upload, as tiles in the store.

The streaming job (:mod:`timetile.streaming.job`) writes each micro-batch through a
:class:`TileWriter`; users with their own stream processor, and tests, call
:func:`put_events`. Events are grouped by (entity key, tile of
:data:`~timetile.online.layout.TILE_MS`) and each group is written under the batch's id, so
writing the same batch again replaces its entries: a replayed micro-batch never double
counts. Events older than the upload's day end are already in the batch records (or, if they
arrived late, the next upload adds them): they are counted and not written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.group_by import GroupBy
from timetile.core.batch_record import split_series
from timetile.online.layout import (
    META_TABLE,
    TILE_MS,
    GroupByMeta,
    check_servable,
    encode_events,
    encode_key,
    online_features,
    series_rows,
    tile_table,
)
from timetile.online.store import KVStore


@dataclass(frozen=True)
class TileWriteReport:
    """What one write of events did; every event lands in exactly one count.

    Attributes:
        written: events written into tiles.
        late: events before the upload's day end: not written (the next upload has them).
        unusable: events with a null time or a null key: not written.
        tiles: (key, tile) entries written.
        behind_watermark: events at or after the day end but before the stream's watermark:
            not written (the next upload has them). Always 0 without a watermark.

    """

    written: int
    late: int
    unusable: int
    tiles: int
    behind_watermark: int = 0


def _millis(column: pa.ChunkedArray, name: str) -> list[int | None]:
    """Return event times as epoch milliseconds (None where null).

    Accepts what the batch side accepts: integers (epoch ms), timestamps and ISO-8601
    strings (UTC when they carry no offset).

    Raises:
        ValueError: a string that is not an ISO-8601 time, naming the column.

    """
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if text is None else _iso_millis(text, name) for text in column.to_pylist()]
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("ms")), pa.int64())
    return [None if t is None else int(t) for t in column.to_pylist()]


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _iso_millis(text: str, name: str) -> int:
    """Return an ISO-8601 time as epoch ms; one without an offset is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"time column {name!r} holds {text!r}, which is not an ISO-8601 time. "
                         "Fix: send epoch milliseconds, timestamps or ISO-8601 strings") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def read_meta(store: KVStore, group_by: GroupBy) -> GroupByMeta:
    """Return the metadata the last upload of ``group_by`` wrote to ``store``.

    Raises:
        LookupError: ``group_by`` was never uploaded to ``store``.

    """
    data = store.multi_get(META_TABLE, [group_by.name.encode()])[0]
    if data is None:
        raise LookupError(f"GroupBy {group_by.name!r} has no upload in this store. Fix: run "
                          "`timetile upload` for it first")
    return GroupByMeta.from_bytes(data)


class TileWriter:
    """Writes one GroupBy's events as streaming tiles, as of one upload.

    Built on the driver from the definition and the upload's metadata; it holds only names,
    the metadata and the features, never the definition (whose source may be a DataFrame),
    so it pickles to Spark executors.

    Args:
        group_by: the definition.
        meta: the upload's metadata (:func:`read_meta`): its day end and column types.
        time_column: the events' time column (epoch ms or a timestamp); the source's
            ``time_column`` by default.

    Raises:
        DefinitionError: ``group_by`` cannot be served online.

    """

    def __init__(self, group_by: GroupBy, meta: GroupByMeta, *,
                 time_column: str | None = None) -> None:
        check_servable(group_by)
        time_column = time_column or group_by.time_column
        assert time_column is not None
        self.name = group_by.name
        self.table = tile_table(group_by.name)
        self.keys = tuple(group_by.keys)
        self.time_column = time_column
        self.meta = meta
        self.series = {feature.series: feature.value_type
                       for feature in online_features(group_by, meta.value_types)}

    @classmethod
    def from_store(cls, store: KVStore, group_by: GroupBy, *,
                   time_column: str | None = None) -> TileWriter:
        """Return a writer as of the last upload of ``group_by`` to ``store``.

        Raises:
            LookupError: ``group_by`` was never uploaded to ``store``.

        """
        return cls(group_by, read_meta(store, group_by), time_column=time_column)

    @property
    def columns(self) -> list[str]:
        """The event columns a write reads: keys, time, then aggregated and bucket columns."""
        values = sorted({part for name in self.series for part in split_series(name)
                         if part is not None})
        return [*self.keys, self.time_column, *values]

    def write(self, store: KVStore, events: pa.Table, batch: str, *,
              watermark: int | None = None) -> TileWriteReport:
        """Write one batch of events as tiles under the member ``batch``; one ``put_tiles``.

        Every event of one (key, tile) must be in this call: the entry of (key, tile,
        ``batch``) is replaced, not added to. Writing the same events under the same ``batch``
        again rewrites the same entries. O(rows) Python work plus the encoding.

        Args:
            store: where to write.
            events: the source's rows after its ``select`` and ``where``: at least
                :attr:`columns`.
            batch: the batch's id, stable across replays (e.g. the micro-batch id).
            watermark: epoch ms; events at or after the day end but before it are counted
                in ``behind_watermark`` and not written. None: no such cut.

        """
        meta = self.meta
        missing = [column for column in self.columns if column not in events.column_names]
        if missing:
            raise ValueError(f"the events lack the columns {missing} of GroupBy "
                             f"{self.name!r}. Fix: send the source's rows after its select, "
                             f"with {', '.join(self.columns)}")
        times = _millis(events.column(self.time_column), self.time_column)
        keys = list(zip(*(events.column(key).to_pylist() for key in self.keys), strict=True))
        usable = np.array([t is not None and all(k is not None for k in key)
                           for t, key in zip(times, keys, strict=True)], dtype=bool)
        stamp = np.array([t if t is not None else 0 for t in times], dtype=np.int64)
        late = usable & (stamp < meta.day_end)
        behind = (usable & ~late & (stamp < watermark) if watermark is not None
                  else np.zeros_like(usable))
        kept = np.flatnonzero(usable & ~late & ~behind)
        groups: dict[tuple[bytes, int], list[int]] = {}
        encoded: dict[tuple[Any, ...], bytes] = {}  # each distinct key is encoded once
        for row in kept:
            key = encoded.get(keys[row])
            if key is None:
                key = encoded[keys[row]] = encode_key(keys[row], meta.key_types)
            groups.setdefault((key, int(stamp[row] - stamp[row] % TILE_MS)), []).append(int(row))
        # Every series of the whole batch at once, its rows ordered group by group; then each
        # group's values are a slice: no per-group Arrow work.
        order = np.array([row for rows in groups.values() for row in rows], dtype=np.int64)
        ordered_times = stamp[order]
        cuts = np.cumsum([0, *(len(rows) for rows in groups.values())])
        whole = {name: (values, ordered_times[rows], np.searchsorted(rows, cuts))
                 for name, (values, rows) in series_rows(
                     events.take(pa.array(order, type=pa.int64())), self.series).items()}
        entries = []
        for index, (key, tile) in enumerate(groups):
            series = {name: (values[bounds[index]:bounds[index + 1]],
                             kept_times[bounds[index]:bounds[index + 1]])
                      for name, (values, kept_times, bounds) in whole.items()}
            entries.append((key, tile, batch.encode(), encode_events(series)))
        if entries:
            store.put_tiles(self.table, entries)
        return TileWriteReport(len(kept), int(late.sum()), int((~usable).sum()), len(entries),
                               int(behind.sum()))


def put_events(store: KVStore, group_by: GroupBy, events: pa.Table, batch: str) -> TileWriteReport:
    """Write one batch of ``group_by``'s events as streaming tiles.

    Reads the upload's metadata, then :meth:`TileWriter.write` (see there for the promises).

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
    return TileWriter.from_store(store, group_by).write(store, events, batch)
