"""Entity GroupBys online: each key's rows as of the upload, and the mutations streamed since.

An entity source's feature at ``a`` aggregates the table's rows at ``a`` (DESIGN §2): the
snapshot of the day before plus that day's mutations before ``a``. Online, for an entity
GroupBy ``g`` the store holds, in the tables of :mod:`timetile.store.layout`:

- ``tt_batch.g``: per key, its *entity record* (:class:`EntityRecord`): the upload's day
  end and the key's rows in the snapshot partition of that day, each a row image with its
  time, and the upload's generation and definition signature (a record of an earlier
  upload reads as empty: :func:`~timetile.core.batch_record.answers_for`);
- ``tt_tiles.g``: per key, per hour of mutation time, per writer batch: that batch's
  mutations (:class:`Mutation`), written by :class:`MutationWriter`.

A fetch replays them with :class:`~timetile.core.entity_state.EntityReplay`, the class the
backfill's entity executor runs (:meth:`EntityServing.answer`): the record's rows, then the
mutations in ``[day end, as_of)`` one millisecond at a time (insertions first, then
retractions), then the answer at ``as_of``. Both sides agree by construction. Past the slack
(the next upload is late) the record still answers, with every mutation since: equal to the
backfill when each snapshot is the one before with the day's mutations applied, and the
fetch says it is stale, as for events.

Row images hold plain scalars: timestamp and date columns become epoch milliseconds and
epoch days (:func:`plain_column`, the one conversion: the upload's and the stream's
executors and :func:`put_mutations` all run it on Arrow data), so a snapshot row and its
retraction compare equal. A lookup returns its columns as they are, so a lookup of a
timestamp or date column is refused online (upload names it). A fetch at a time before the
record's day end cannot undo its day's mutations: it answers the empty table's values and
says it is stale, never rows from after the fetch time.

Cost of one key's fetch: O(rows + m log m) for m mutations, plus O(rows) per windowed
feature.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import groupby
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.errors import DefinitionError
from timetile.api.group_by import GroupBy
from timetile.api.sources import EntitySource
from timetile.core.aggregators.codec import (
    decode_versioned,
    encode,
    expect_int,
    older_version,
)
from timetile.core.batch_record import answers_for, split_series
from timetile.core.entity_state import EntityFeature, EntityReplay, Image
from timetile.store.kv import KVStore
from timetile.store.layout import GroupByMeta, online_features
from timetile.store.tiles import (
    Placement,
    StreamWriter,
    TileWriteReport,
    arrow_coarse_type,
    millis,
    read_meta,
    timestamp_millis,
)

#: The coarse types a row column of an entity source served online may have.
ROW_TYPES = ("int", "float", "string", "bool", "timestamp", "date")
#: The coarse types a lookup column served online may have (it is returned as stored).
LOOKUP_TYPES = ("int", "float", "string", "bool")
#: In a stream of mutations, the row's own time (the stream's time is the mutation time).
ROW_TIME = "_tt_row_time"
_RECORD_VERSION = 2  # 2: the upload's generation and signature
_MUTATIONS_VERSION = 1

#: A row of an entity table: its image and its time (epoch ms, or None).
Row = tuple[Image, int | None]


@dataclass(frozen=True)
class EntityRecord:
    """One key's rows as of an upload.

    Attributes:
        day_end: the upload's as-of time, epoch ms.
        rows: the key's rows in the snapshot of the upload's day.
        generation: the upload's generation (:class:`~timetile.store.layout.GroupByMeta`).
        signature: the upload's definition signature.

    """

    day_end: int
    rows: tuple[Row, ...]
    generation: int = 0
    signature: str = ""

    def covers(self, at: int, slack: int) -> bool:
        """Whether a fetch at ``at`` is exact from this record (plus the mutations since)."""
        return self.day_end <= at < self.day_end + slack

    def to_bytes(self) -> bytes:
        """Encode for the store.

        >>> record = EntityRecord(86_400_000, (((7, "gold", 2.5), 5), ((7, None, 1.0), None)))
        >>> EntityRecord.from_bytes(record.to_bytes()) == record
        True
        """
        return encode((_RECORD_VERSION, self.day_end, self.rows, self.generation,
                       self.signature))

    @classmethod
    def from_bytes(cls, data: bytes, *, signature: str | None = None,
                   generation: int | None = None) -> EntityRecord:
        """Decode what :meth:`to_bytes` wrote.

        A record of an upload before the served one, ``generation`` (with ``signature``:
        :func:`~timetile.core.batch_record.answers_for`), comes back without rows; so does
        one of an earlier record version.

        Raises:
            ValueError: the bytes are not an entity record of this version, or are of
                another ``signature`` and not older than ``generation``.

        """
        try:
            day_end, rows, written_by, written_for = decode_versioned(
                data, _RECORD_VERSION, 4, "a timetile entity record", "re-run upload")
        except ValueError:
            if generation is not None and older_version(data, _RECORD_VERSION):
                return cls(0, (), -1)  # an earlier build's: older than any upload
            raise
        try:
            record = cls(int(day_end), tuple((tuple(image), time) for image, time in rows),
                         expect_int(written_by, "generation"), str(written_for))
        except (TypeError, ValueError):
            raise ValueError("a malformed timetile entity record. Fix: re-run upload") from None
        if answers_for(record.generation, record.signature, served=generation,
                       served_signature=signature):
            return record
        return replace(record, rows=())


@dataclass(frozen=True)
class Mutation:
    """One row image of a change to an entity table.

    Attributes:
        at: when the change happened, epoch ms.
        before: True for the image before the change (a retraction), False for the one
            after it (an insertion).
        image: the row's values, in the upload's row column order.
        time: the row's time, epoch ms (None when it has none).

    """

    at: int
    before: bool
    image: Image
    time: int | None


def encode_mutations(mutations: Iterable[Mutation]) -> bytes:
    """Encode one writer batch's mutations of one (key, tile); O(values)."""
    return encode((_MUTATIONS_VERSION, tuple((m.at, m.before, m.image, m.time)
                                             for m in mutations)))


def decode_mutations(data: bytes) -> tuple[Mutation, ...]:
    """Decode :func:`encode_mutations`.

    >>> decode_mutations(encode_mutations([Mutation(9, True, (1, "x"), None)]))
    (Mutation(at=9, before=True, image=(1, 'x'), time=None),)

    Raises:
        ValueError: the bytes are not mutations of this version.

    """
    (mutations,) = decode_versioned(data, _MUTATIONS_VERSION, 1,
                                    "timetile entity mutations", "restart the stream with a "
                                    "fresh checkpoint after the next upload")
    try:
        return tuple(Mutation(*mutation) for mutation in mutations)
    except TypeError:
        raise ValueError("malformed timetile entity mutations. Fix: restart the stream with a "
                         "fresh checkpoint after the next upload") from None


@dataclass(frozen=True)
class EntityServing:
    """One entity GroupBy as a fetch replays it.

    Attributes:
        names: the output columns without any join-part prefix: the features, or a
            lookup's columns.
        features: the aggregations over a row image.
        lookup: for a lookup, the image positions of its columns (else empty).

    """

    names: tuple[str, ...]
    features: tuple[EntityFeature, ...]
    lookup: tuple[int, ...]

    @classmethod
    def of(cls, group_by: GroupBy, meta: GroupByMeta) -> EntityServing:
        """Build what the backfill's entity executor builds, from the upload's column types."""
        columns = list(meta.row_columns)
        online = online_features(group_by, meta.value_types)
        features = []
        for feature in online:
            column, bucket = split_series(feature.series)
            features.append(EntityFeature(columns.index(column), feature.aggregator,
                                          feature.value_type.numpy_dtype, feature.window,
                                          name=feature.name, source_column=column,
                                          bucket=None if bucket is None else columns.index(bucket)))
        names = [feature.name for feature in online]
        names += [f"{group_by.name}_{column}" for column in group_by.lookup_columns]
        lookup = tuple(columns.index(column) for column in group_by.lookup_columns)
        return cls(tuple(names), tuple(features), lookup)

    def answer(self, record: EntityRecord, mutations: Iterable[Mutation], when: int
               ) -> tuple[list[Any], int]:
        """Return every output at ``when``, and the retractions of rows that were not there.

        The record's rows, changed by the ``mutations`` in ``[record.day_end, when)``, one
        millisecond at a time. ``when`` before the record's day end gets the empty table's
        values: the record holds that day's later changes, which cannot be undone.
        O(rows + m log m) for m mutations, plus O(rows) per windowed feature.
        """
        replay = EntityReplay(self.features, self.lookup, self.lookup)
        if when >= record.day_end:
            replay.insert(list(record.rows))
            applied = sorted((m for m in mutations if record.day_end <= m.at < when),
                             key=attrgetter("at"))
            for _, moment in groupby(applied, key=attrgetter("at")):
                changes = list(moment)
                replay.apply([(m.image, m.time) for m in changes if not m.before],
                             [(m.image, m.time) for m in changes if m.before])
        return replay.answer(when), replay.unmatched


def plain_column(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """Return a column's values as row images hold them.

    Timestamps become epoch ms (floored; one without a zone reads as UTC), dates epoch
    days, everything else Python scalars.

    >>> import datetime as dt
    >>> plain_column(pa.array([dt.date(1970, 1, 3), None]))
    [2, None]
    """
    if pa.types.is_timestamp(column.type):
        return timestamp_millis(column)
    if pa.types.is_date(column.type):
        column = pc.cast(pc.cast(column, pa.date32()), pa.int32())
    values: list[Any] = column.to_pylist()
    return values


class MutationWriter(StreamWriter):
    """Writes an entity GroupBy's mutations as tiles, as of one upload.

    Args:
        group_by: the definition, of an entity source.
        meta: the upload's metadata (:func:`~timetile.store.tiles.read_meta`): its day end
            and row columns.
        mutation_time_column: when each change happened (epoch ms, a timestamp or an
            ISO-8601 string); the source's by default.
        is_before_column: true for a before image; the source's by default.
        row_time_column: the row's time; the source's ``time_column`` by default (None
            without one).

    Raises:
        DefinitionError: ``group_by`` aggregates an event source.

    """

    def __init__(self, group_by: GroupBy, meta: GroupByMeta, *,
                 mutation_time_column: str | None = None, is_before_column: str | None = None,
                 row_time_column: str | None = None) -> None:
        source = group_by.source
        if not isinstance(source, EntitySource):
            raise DefinitionError.single(
                f"GroupBy {group_by.name!r}", "group_by.source", "is an event source, whose "
                "stream holds events, not mutations", "write its events with put_events")
        super().__init__(group_by, meta, mutation_time_column or source.mutation_time_column)
        self.is_before_column = is_before_column or source.is_before_column
        self.row_time_column = row_time_column or source.time_column
        self.row_columns = meta.row_columns
        self.row_types = dict(zip(meta.row_columns, meta.row_types, strict=True))

    @property
    def columns(self) -> list[str]:
        """The columns a write reads.

        The row columns, the mutation time, ``is_before``, and the row time if any.
        """
        extra = [self.row_time_column] if self.row_time_column is not None else []
        return [*self.row_columns, self.time_column, self.is_before_column, *extra]

    def check(self, events: pa.Table) -> None:
        """Refuse rows missing a column, or with row columns of other types than the snapshot's.

        Their images would never match the snapshot's rows.

        Raises:
            ValueError: naming the columns, their types and the fix.

        """
        super().check(events)
        wrong = [f"{name!r} is {arrow_coarse_type(events.schema.field(name).type)}, the "
                 f"snapshot's is {kind}" for name, kind in self.row_types.items()
                 if arrow_coarse_type(events.schema.field(name).type) not in (kind, "null")]
        if wrong:
            raise ValueError(f"the mutations of GroupBy {self.name!r} do not fit its upload: "
                             f"{'; '.join(wrong)}. Fix: send the row columns with the "
                             "snapshot's types (cast them in the producer)")

    def usable(self, events: pa.Table) -> np.ndarray:
        """Return the rows with an ``is_before`` flag: a mutation needs one."""
        return np.asarray(pc.is_valid(self._flags(events)).to_numpy(zero_copy_only=False))

    def _flags(self, events: pa.Table) -> pa.ChunkedArray:
        column = events.column(self.is_before_column)
        try:
            return pc.cast(column, pa.bool_())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ValueError(f"column {self.is_before_column!r} holds values that are not "
                             "booleans. Fix: send true for a before image, false for an "
                             "after image") from None

    def encode(self, events: pa.Table, placement: Placement) -> list[bytes]:
        """Encode each group's mutations; only the placed rows are converted. O(rows)."""
        rows = sorted(row for group in placement.groups.values() for row in group)
        placed = events.take(pa.array(rows, type=pa.int64()))
        position = {row: index for index, row in enumerate(rows)}
        images = (list(zip(*(plain_column(placed.column(c)) for c in self.row_columns),
                           strict=True)) if self.row_columns else [()] * len(rows))
        flags = pc.cast(placed.column(self.is_before_column), pa.bool_()).to_pylist()
        times = (millis(placed.column(self.row_time_column), self.row_time_column)
                 if self.row_time_column is not None else [None] * len(rows))
        stamps = placement.stamps
        return [encode_mutations(Mutation(int(stamps[row]), bool(flags[position[row]]),
                                          images[position[row]], times[position[row]])
                                 for row in group)
                for group in placement.groups.values()]


def put_mutations(store: KVStore, group_by: GroupBy, mutations: pa.Table,
                  batch: str) -> TileWriteReport:
    """Write one batch of an entity GroupBy's mutations as streaming tiles.

    Reads the upload's metadata, then :meth:`MutationWriter.write` (see
    :meth:`~timetile.store.tiles.StreamWriter.write` for the promises).

    Args:
        store: the store ``upload`` wrote to (its metadata gives the row columns).
        group_by: the definition, of an entity source.
        mutations: the mutation table's rows after the source's ``select`` and ``where``:
            the row columns, the mutation time and ``is_before`` columns, and the time
            column if the source has one.
        batch: the batch's id, stable across replays (e.g. the micro-batch id).

    Raises:
        LookupError: ``group_by`` was never uploaded to ``store``.
        DefinitionError: ``group_by`` aggregates an event source.

    """
    return MutationWriter(group_by, read_meta(store, group_by)).write(store, mutations, batch)
