"""The stream's own record in the online store: its watermark, its counts, who owns the tiles.

Spark's checkpoint says which events each micro-batch holds; this record, one per GroupBy in
table :data:`STREAM_TABLE`, says what the stream decided about them, so that a replayed
micro-batch decides the same. It holds the last micro-batch written: its id, the watermark
and the allowed lateness it ran with, the greatest event time seen through it, and the event
counts before it and of it. From the record of batch ``n - 1`` the next batch's
watermark follows (Spark's rule: the greatest event time of the earlier batches minus the
lateness batch ``n - 1`` ran with, never moving back), so a batch run again after a crash
gets the watermark it first ran with even under a changed lateness, and a changed lateness
applies from the second batch after a restart, as in Spark's own watermark (its commit
log); the record of batch ``n`` itself answers a replay of ``n`` (:func:`begin`).

The record also names the Spark query (its id survives restarts from the same checkpoint)
that owns the GroupBy's tiles: tile members are micro-batch ids, so a second checkpoint
writing into the same tiles would overwrite some and double count others. It is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from timetile.core.aggregators.codec import decode_versioned, encode, older_version
from timetile.store.kv import KVStore
from timetile.store.layout import STREAM_RESET, STREAM_TABLE

_VERSION = 2
#: Records of version 1 lack the lateness: the next batch takes the current one.
_FIELDS = {1: 6, 2: 7}


@dataclass(frozen=True)
class StreamCounts:
    """Events of one micro-batch or many, by what became of them; each event counts once.

    Attributes:
        written: written into tiles.
        late: before the upload's day end (the batch records, or the next upload, have them).
        behind_watermark: at or after the day end but older than the watermark (the next
            upload has them).
        unusable: a null or unparseable time, or a null key: never aggregated, offline
            either.
        tiles: (key, tile) entries written.

    >>> StreamCounts(3, 1, 0, 0, 2) + StreamCounts(1, 0, 2, 1, 1)
    StreamCounts(written=4, late=1, behind_watermark=2, unusable=1, tiles=3)

    """

    written: int = 0
    late: int = 0
    behind_watermark: int = 0
    unusable: int = 0
    tiles: int = 0

    def __add__(self, other: StreamCounts) -> StreamCounts:
        return StreamCounts(*(getattr(self, f.name) + getattr(other, f.name)
                              for f in fields(self)))

    @property
    def not_written(self) -> int:
        """Events left to the next upload: ``late + behind_watermark``."""
        return self.late + self.behind_watermark


class StreamOwnershipError(RuntimeError):
    """A checkpoint and a store that do not belong together.

    Another checkpoint (Spark query) already writes this GroupBy's tiles in the store, or the
    store has no record of this checkpoint's past batches (a store newer than the checkpoint,
    or one that missed some of its batches).
    """


@dataclass(frozen=True)
class StreamState:
    """The record of the last micro-batch a stream wrote for one GroupBy.

    Attributes:
        query_id: the Spark query's id (stable across restarts from one checkpoint).
        batch: the micro-batch id.
        watermark: the watermark that batch ran with, epoch ms; None before any event.
        max_time: the greatest event time seen through that batch, epoch ms; None if none.
        before: the counts of all earlier batches of this query.
        counts: that batch's counts.
        lateness_ms: the allowed lateness that batch ran with; None in records of earlier
            builds.

    """

    query_id: str
    batch: int
    watermark: int | None
    max_time: int | None
    before: StreamCounts
    counts: StreamCounts
    lateness_ms: int | None = None

    @property
    def totals(self) -> StreamCounts:
        """Counts of every batch through this one."""
        return self.before + self.counts

    def to_bytes(self) -> bytes:
        """Encode for the store."""
        return encode((_VERSION, self.query_id, self.batch, self.watermark, self.max_time,
                       _tuple(self.before), _tuple(self.counts), self.lateness_ms))

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamState:
        """Decode what :meth:`to_bytes` wrote.

        Reads the records of earlier builds too (version 1: no lateness).

        Raises:
            ValueError: the bytes are not a stream record of a version this build reads.

        """
        version = 1 if older_version(data, _VERSION) else _VERSION
        fields = decode_versioned(data, version, _FIELDS[version], "a timetile stream record",
                                  "start the stream with a fresh checkpoint and store")
        query_id, batch, watermark, max_time, before, counts, *lateness = fields
        return cls(query_id, batch, watermark, max_time, StreamCounts(*before),
                   StreamCounts(*counts), *lateness)


#: The record after an upload of a changed definition (:data:`STREAM_RESET` in the store):
#: owned by no query, so a stream from a new checkpoint starts afresh (see :func:`begin`).
RESET = StreamState("", -1, None, None, StreamCounts(), StreamCounts())


def _tuple(counts: StreamCounts) -> tuple[int, ...]:
    return tuple(getattr(counts, f.name) for f in fields(counts))


def read_state(store: KVStore, group_by: str) -> StreamState | None:
    """Return the stream record of GroupBy ``group_by``, None when no stream wrote one.

    :data:`RESET` when an upload of a changed definition dropped the tiles since.
    """
    data = store.multi_get(STREAM_TABLE, [group_by.encode()])[0]
    if data == STREAM_RESET:
        return RESET
    return None if data is None else StreamState.from_bytes(data)


def write_state(store: KVStore, group_by: str, state: StreamState) -> None:
    """Replace the stream record of GroupBy ``group_by``."""
    store.multi_put(STREAM_TABLE, [(group_by.encode(), state.to_bytes())])


def begin(previous: StreamState | None, group_by: str, query_id: str, batch: int,
          lateness_ms: int) -> tuple[int | None, StreamCounts]:
    """Return (watermark, counts before it) for micro-batch ``batch``, replays included.

    A replay of the recorded batch gets the recorded answer; the next batch gets the
    watermark advanced by the recorded batch, with the lateness that batch ran with (the
    record's; ``lateness_ms`` for a record of an earlier build). Without a record (a new
    stream) there is no watermark yet. O(1).

    >>> first = StreamState("q", 0, None, 10_000, StreamCounts(), StreamCounts(written=5))
    >>> begin(first, "g", "q", 1, 3_000), begin(first, "g", "q", 0, 3_000)
    ((7000, StreamCounts(written=5, late=0, behind_watermark=0, unusable=0, tiles=0)), \
(None, StreamCounts(written=0, late=0, behind_watermark=0, unusable=0, tiles=0)))

    Raises:
        StreamOwnershipError: the record belongs to another query, or to a later batch of
            this one (the checkpoint is older than the store: restored from a copy); or to
            an earlier batch than the one before, or there is none past batch 0 (the store
            is older than the checkpoint, or new: the batches between would be lost).

    """
    if previous is RESET:
        if batch > 0:
            raise StreamOwnershipError(
                f"GroupBy {group_by!r} was uploaded with a changed definition, which dropped "
                "the tiles streamed under the old one, but this checkpoint has streamed "
                f"{batch} micro-batches already and would not replay their events. Fix: "
                "restart the stream from a new checkpoint: it replays the landed events")
        return None, StreamCounts()
    if previous is None:
        if batch > 0:  # the record is written before Spark commits a batch: a new store
            raise StreamOwnershipError(
                f"GroupBy {group_by!r} has no stream record in this store, but this "
                f"checkpoint has streamed {batch} micro-batches already: the store was made "
                "anew or restored from a copy, and the events of those batches would never "
                "reach it. Fix: restart the stream from a new checkpoint (it replays the "
                "landed events), or use the store this checkpoint wrote")
        return None, StreamCounts()
    if previous.query_id != query_id:
        raise StreamOwnershipError(
            f"GroupBy {group_by!r}'s tiles in this store are written by another streaming "
            f"query ({previous.query_id}, at batch {previous.batch}); this one is {query_id}. "
            "Two checkpoints writing one GroupBy's tiles would double count. Fix: restart with "
            "the first query's checkpoint, or stream into a fresh store (upload it first)")
    if previous.batch == batch:
        return previous.watermark, previous.before
    if previous.batch > batch:
        raise StreamOwnershipError(
            f"GroupBy {group_by!r}: this store already holds batch {previous.batch} of query "
            f"{query_id}, but the checkpoint asks for batch {batch}: the checkpoint is older "
            "than the store. Fix: restart with the checkpoint that wrote the store, or stream "
            "into a fresh store")
    if previous.batch < batch - 1:
        raise StreamOwnershipError(
            f"GroupBy {group_by!r}: this store's stream record is of batch {previous.batch} "
            f"of query {query_id}, but the checkpoint asks for batch {batch}: the store is "
            "older than the checkpoint (restored from a copy), and the events of the batches "
            "between would never reach it. Fix: use the store this checkpoint wrote, or "
            "stream into a fresh store (upload it first) from a new checkpoint")
    ran_with = lateness_ms if previous.lateness_ms is None else previous.lateness_ms
    return advance(previous.watermark, previous.max_time, ran_with), previous.totals


def advance(watermark: int | None, max_time: int | None, lateness_ms: int) -> int | None:
    """Return the next watermark: ``max_time - lateness``, never moving back.

    >>> advance(None, None, 5), advance(None, 100, 5), advance(120, 100, 5)
    (None, 95, 120)
    """
    if max_time is None:
        return watermark
    candidate = max_time - lateness_ms
    return candidate if watermark is None else max(watermark, candidate)
