"""The streaming-tile write path: rows since the last upload, as tiles in the store.

The streaming job (:mod:`timetile.streaming.job`) writes each micro-batch through a
:class:`StreamWriter`: a :class:`TileWriter` for events, a
:class:`~timetile.store.entity_records.MutationWriter` for an entity source's mutations.
Users with their own stream processor, and tests, call :func:`put_events` (or
``put_mutations``). Rows are grouped by (entity key, tile of
:data:`~timetile.store.layout.TILE_MS`) and each group is written under the batch's id, so
writing the same batch again replaces its entries: a replayed micro-batch never double
counts. Rows older than the upload's day end are already in the batch records (or, if they
arrived late, the next upload adds them): they are counted and not written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.errors import DefinitionError
from timetile.api.group_by import GroupBy
from timetile.api.sources import EventSource
from timetile.core.batch_record import split_series
from timetile.core.time_text import TimeTextError, text_millis
from timetile.store.kv import KVStore
from timetile.store.layout import (
    META_TABLE,
    TILE_MS,
    GroupByMeta,
    encode_events,
    encode_key,
    online_features,
    series_rows,
    tile_table,
)


@dataclass(frozen=True)
class TileWriteReport:
    """What one write of rows (events or mutations) did; every row lands in exactly one count.

    Attributes:
        written: rows written into tiles.
        late: rows before the upload's day end: not written (the next upload has them).
        unusable: rows with a null time or a null key (or, for a mutation, no ``is_before``),
            or a key longer than the store's keys may be: not written.
        tiles: (key, tile) entries written.
        behind_watermark: rows at or after the day end but before the stream's watermark:
            not written (the next upload has them). Always 0 without a watermark.

    """

    written: int
    late: int
    unusable: int
    tiles: int
    behind_watermark: int = 0


def millis(column: pa.ChunkedArray, name: str) -> list[int | None]:
    """Return times as epoch milliseconds (None where null or, as on the batch side, unusable).

    Integers (epoch ms), timestamps and ISO-8601 strings, each placed at the millisecond the
    batch side places it: a string as Spark's cast reads it (UTC when it carries no offset;
    None where that cast gives null), see :func:`~timetile.core.time_text.text_millis`.

    Raises:
        ValueError: a string outside the forms read exactly as Spark reads them, or a type
            the batch side refuses as a time (int32 seconds, a float, a date), naming the
            column.

    """
    if pa.types.is_null(column.type):  # a column of nulls only, as pyarrow types it
        return [None] * len(column)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if text is None else _text_millis(text, name) for text in column.to_pylist()]
    if pa.types.is_timestamp(column.type):
        return timestamp_millis(column)
    if pa.types.is_int64(column.type):
        times: list[int | None] = column.to_pylist()
        return times
    raise ValueError(f"time column {name!r} is {column.type}, which the batch side does not "
                     "read as a time. Fix: send epoch milliseconds as int64, a timestamp, or "
                     "ISO-8601 text")


_UNITS_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}


def timestamp_millis(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """Return timestamps as epoch milliseconds, floored as Spark's ``unix_millis`` floors.

    Any unit; a timestamp without a zone (Spark's TIMESTAMP_NTZ) reads as UTC, as the batch
    side reads it (it refuses other session zones). O(rows), vectorized.

    >>> import datetime as dt
    >>> timestamp_millis(pa.array([dt.datetime(1970, 1, 1, 0, 0, 0, 1500), None]))
    [1, None]
    """
    unit = column.type.unit
    raw = pc.cast(column, pa.int64())
    valid = np.asarray(pc.is_valid(raw).to_numpy(zero_copy_only=False))
    stored = np.asarray(pc.fill_null(raw, 0).to_numpy(zero_copy_only=False))
    values = stored * 1000 if unit == "s" else stored // _UNITS_PER_MS[unit]
    return [int(value) if ok else None for value, ok in zip(values.tolist(), valid, strict=True)]


def _text_millis(text: str, name: str) -> int | None:
    """Return a time string as epoch ms, as the batch side reads it, or raise naming ``name``."""
    try:
        return text_millis(text)
    except TimeTextError as error:
        raise ValueError(f"time column {name!r}: {error}. Fix: send epoch milliseconds, "
                         "timestamps or ISO-8601 strings such as 2024-03-01T12:00:00.250Z"
                         ) from None


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


@dataclass(frozen=True)
class Placement:
    """Where the rows of one write go: each usable row to its (encoded key, tile).

    Attributes:
        groups: (key bytes, tile start) → the row positions of that tile, ascending.
        stamps: every row's time in epoch ms (0 where it has none).
        report: the counts, ``tiles`` included.

    """

    groups: dict[tuple[bytes, int], list[int]]
    stamps: np.ndarray
    report: TileWriteReport


def arrow_coarse_type(data_type: pa.DataType) -> str:
    """Return the coarse type name (as :mod:`timetile.api.schema` names it) of an Arrow type.

    >>> arrow_coarse_type(pa.int32()), arrow_coarse_type(pa.timestamp("us", tz="UTC"))
    ('int', 'timestamp')
    """
    checks = ((pa.types.is_integer, "int"), (pa.types.is_floating, "float"),
              (pa.types.is_boolean, "bool"), (pa.types.is_timestamp, "timestamp"),
              (pa.types.is_date, "date"), (pa.types.is_null, "null"),
              (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"))
    return next((name for check, name in checks if check(data_type)), str(data_type))


class StreamWriter(ABC):
    """Writes one GroupBy's streamed rows as tiles of the store, as of one upload.

    :class:`TileWriter` writes events, :class:`~timetile.store.entity_records.MutationWriter`
    an entity source's mutations; both place each row by (key, tile of its time) and write
    one entry per (key, tile, batch). Built on the driver; holds only names, the upload's
    metadata and what its encoding needs, never the definition (whose source may be a
    DataFrame), so it pickles to Spark executors.
    """

    def __init__(self, group_by: GroupBy, meta: GroupByMeta, time_column: str) -> None:
        self.name = group_by.name
        self.table = tile_table(group_by.name)
        self.keys = tuple(group_by.keys)
        self.time_column = time_column
        self.meta = meta

    @property
    @abstractmethod
    def columns(self) -> list[str]:
        """The columns a write reads."""

    def check(self, events: pa.Table) -> None:
        """Refuse rows that lack one of :attr:`columns`.

        Raises:
            ValueError: naming the missing columns and the fix.

        """
        missing = [column for column in self.columns if column not in events.column_names]
        if missing:
            raise ValueError(f"the rows lack the columns {missing} of GroupBy "
                             f"{self.name!r}. Fix: send the source's rows after its select, "
                             f"with {', '.join(self.columns)}")

    def usable(self, events: pa.Table) -> np.ndarray:
        """Return which rows can be placed besides having a time and keys (all, here)."""
        return np.ones(events.num_rows, dtype=bool)

    @abstractmethod
    def encode(self, events: pa.Table, placement: Placement) -> list[bytes]:
        """Encode each group of ``placement`` (one key, one tile) as one entry, in order."""

    def write(self, store: KVStore, events: pa.Table, batch: str, *,
              watermark: int | None = None) -> TileWriteReport:
        """Write one batch of rows as tiles under the member ``batch``; one ``put_tiles``.

        Every row of one (key, tile) must be in this call: the entry of (key, tile,
        ``batch``) is replaced, not added to. Writing the same rows under the same ``batch``
        again rewrites the same entries. O(rows) Python work plus the encoding.

        Args:
            store: where to write.
            events: the source's rows after its ``select`` and ``where``: at least
                :attr:`columns`.
            batch: the batch's id, stable across replays (e.g. the micro-batch id).
            watermark: epoch ms; rows at or after the day end but before it are counted
                in ``behind_watermark`` and not written. None: no such cut.

        Raises:
            ValueError: ``events`` does not pass :meth:`check`, or a time cannot be read.

        """
        self.check(events)
        placement = self.place(events, watermark)
        member = batch.encode()
        entries = []
        unfit = rows = 0  # a key too long for the store: its rows count as a null key's
        for (key, tile), value in zip(placement.groups, self.encode(events, placement),
                                      strict=True):
            if store.fits(key):
                entries.append((key, tile, member, value))
            else:
                unfit, rows = unfit + 1, rows + len(placement.groups[key, tile])
        if entries:
            store.put_tiles(self.table, entries)
        report = placement.report
        return replace(report, written=report.written - rows, unusable=report.unusable + rows,
                       tiles=report.tiles - unfit) if unfit else report

    def place(self, events: pa.Table, watermark: int | None) -> Placement:
        """Place every row, or count why it is not written. O(rows)."""
        meta = self.meta
        times = millis(events.column(self.time_column), self.time_column)
        keys = list(zip(*(events.column(key).to_pylist() for key in self.keys), strict=True))
        usable = self.usable(events) & np.array(
            [t is not None and all(k is not None for k in key)
             for t, key in zip(times, keys, strict=True)], dtype=bool)
        stamps = np.array([t if t is not None else 0 for t in times], dtype=np.int64)
        late = usable & (stamps < meta.day_end)
        behind = (usable & ~late & (stamps < watermark) if watermark is not None
                  else np.zeros_like(usable))
        kept = np.flatnonzero(usable & ~late & ~behind)
        groups: dict[tuple[bytes, int], list[int]] = {}
        encoded: dict[tuple[Any, ...], bytes] = {}  # each distinct key is encoded once
        for row in kept:
            key = encoded.get(keys[row])
            if key is None:
                key = encoded[keys[row]] = encode_key(keys[row], meta.key_types)
            tile = int(stamps[row] - stamps[row] % TILE_MS)
            groups.setdefault((key, tile), []).append(int(row))
        report = TileWriteReport(len(kept), int(late.sum()), int((~usable).sum()), len(groups),
                                 int(behind.sum()))
        return Placement(groups, stamps, report)


class TileWriter(StreamWriter):
    """Writes one GroupBy's events as streaming tiles, as of one upload.

    Args:
        group_by: the definition, of an event source.
        meta: the upload's metadata (:func:`read_meta`): its day end and column types.
        time_column: the events' time column (epoch ms or a timestamp); the source's
            ``time_column`` by default.

    Raises:
        DefinitionError: ``group_by`` aggregates an entity source (its stream is of
            mutations: :class:`~timetile.store.entity_records.MutationWriter`).

    """

    def __init__(self, group_by: GroupBy, meta: GroupByMeta, *,
                 time_column: str | None = None) -> None:
        if not isinstance(group_by.source, EventSource):
            raise DefinitionError.single(
                f"GroupBy {group_by.name!r}", "group_by.source", "is an entity source, whose "
                "stream holds mutations, not events", "write its mutations with put_mutations")
        super().__init__(group_by, meta, time_column or group_by.time_column or "")
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
        """The event columns a write reads: keys, time, then aggregated and bucket columns.

        Each once: a key or the time column may be aggregated too.
        """
        return list(dict.fromkeys([*self.keys, self.time_column, *self.value_columns]))

    @property
    def value_columns(self) -> list[str]:
        """The aggregated and bucket columns, sorted: each once."""
        return sorted({part for name in self.series for part in split_series(name)
                       if part is not None})

    def check(self, events: pa.Table) -> None:
        """Refuse rows missing a column, or with value columns of other types than uploaded.

        Aggregated and bucket columns of another type would be cast silently by numpy (7.9
        to 7, a uint64 around to -1, b"1" to "b'1'"), or fail every later fetch.

        Raises:
            ValueError: naming the columns, their types and the fix.

        """
        super().check(events)
        types = {name: events.schema.field(name).type for name in self.value_columns}
        wrong = [f"{name!r} is {data_type}, the upload's is {self.meta.value_types[name]}"
                 for name, data_type in types.items()
                 if not _holds(data_type, self.meta.value_types[name])]
        if wrong:
            raise ValueError(f"the events of GroupBy {self.name!r} do not fit its upload: "
                             f"{'; '.join(wrong)}. Fix: send the aggregated and bucket columns "
                             "with the upload's types (cast them in the producer)")

    def encode(self, events: pa.Table, placement: Placement) -> list[bytes]:
        """Encode each group's events: per series, a slice of one batch-wide pass.

        Every series of the whole batch is gathered at once, its rows ordered group by
        group, so each group's values are a slice: no per-group Arrow work.
        """
        groups = list(placement.groups.values())
        order = np.array([row for rows in groups for row in rows], dtype=np.int64)
        ordered_times = placement.stamps[order]
        cuts = np.cumsum([0, *(len(rows) for rows in groups)])
        whole = {name: (values, ordered_times[rows], np.searchsorted(rows, cuts))
                 for name, (values, rows) in series_rows(
                     events.take(pa.array(order, type=pa.int64())), self.series).items()}
        return [encode_events({name: (values[bounds[index]:bounds[index + 1]],
                                      times[bounds[index]:bounds[index + 1]])
                               for name, (values, times, bounds) in whole.items()})
                for index in range(len(groups))]


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
        DefinitionError: ``group_by`` aggregates an entity source.

    """
    return TileWriter.from_store(store, group_by).write(store, events, batch)


def _holds(data_type: pa.DataType, kind: str) -> bool:
    """Whether a column of ``data_type`` reads as the upload's coarse type ``kind`` exactly.

    All nulls fit any; integers fit a float column (as Spark's union widens them) but a
    uint64 fits nothing, since it may not fit a bigint.
    """
    if pa.types.is_uint64(data_type):
        return False
    coarse = arrow_coarse_type(data_type)
    return coarse in (kind, "null") or (kind == "float" and coarse == "int")
