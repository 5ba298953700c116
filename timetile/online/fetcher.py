"""The Fetcher: a Join's features for many keys at one time, from a key-value store.

For each part, one ``multi_get`` reads the batch records of every requested key and one
``get_tiles`` the events streamed since the upload's day end; each feature then merges its
record's body and edges with those events (:meth:`BatchRecord.state`) and finalizes, with
the same aggregators the backfill runs (DESIGN §5). A key with no record and no events gets
the empty-window values: count 0, everything else null. A record that no longer covers the
fetch time (the next upload is late) still answers, and the result says so in ``stale``.

An entity source's part replays each key's rows as of the upload with the mutations streamed
since (:mod:`timetile.store.entity_records`), as the backfill's entity executor does; a
fetch before the record's day end gets the empty table's values and is stale.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Generic, TypeVar

import numpy as np

from timetile.api.errors import DefinitionError, expect_argument
from timetile.api.group_by import GroupBy
from timetile.api.join import Join, JoinPart
from timetile.core.aggregators.base import ResultOverflowError, refused
from timetile.core.batch_record import (
    BatchRecord,
    OnlineFeature,
    Series,
    read_record,
    split_series,
)
from timetile.core.entity_state import EntityFeature
from timetile.core.series_folds import SeriesFolds
from timetile.core.windows import MAX_TIME, MIN_TIME
from timetile.store.entity_records import EntityRecord, EntityServing, decode_mutations
from timetile.store.kv import KVStore, Tile
from timetile.store.layout import (
    META_TABLE,
    GroupByMeta,
    KeyValueError,
    batch_table,
    decode_events,
    encode_key,
    feature_signature,
    online_features,
    series_dtypes,
    served_definition,
    tile_table,
)

#: Bytes of encoded records (and as many of tiles, and of the tiles kept per key with their
#: events) whose decoded form a fetcher keeps: they never change until the next upload (a
#: new record is new bytes), so hot keys skip decoding and reuse the states kept of their
#: long runs.
CACHE_BYTES = 256 * 2**20
log = logging.getLogger(__name__)
K = TypeVar("K")


class _DecodeCache(Generic[K]):
    """Keys → decoded values, least recently used out first. Thread-safe.

    Bounded by the total length of the encoded data each value came from (decoded values
    are a small multiple, plus the states kept of long runs: see
    :class:`~timetile.core.series_folds.SeriesFolds`). The sizes and encoded data sit apart
    from the values, in maps the garbage collector does not track: no object per entry
    besides the value (docs/online.md, "Pauses").
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self._items: OrderedDict[K, Any] = OrderedDict()
        self._sizes: dict[K, int] = {}
        self._encoded: dict[K, bytes] = {}  # what the values of decoded() came from
        self._lock = threading.Lock()

    def peek(self, key: K) -> Any:
        """Return the value kept under ``key``, or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: Any, size: int) -> None:
        """Keep ``value``, decoded from ``size`` bytes, under ``key`` in place of any other.

        Then the least recently used values go while the cache holds more than its capacity.
        A value of more bytes than the capacity is not kept (nor any other under ``key``).
        """
        with self._lock:
            self._keep(key, value, size, None)

    def _keep(self, key: K, value: Any, size: int, encoded: bytes | None) -> None:
        self._forget(key)
        if size > self.capacity:  # kept by none: evicting the others would not make room
            return
        self._items[key] = value
        self._sizes[key] = size
        if encoded is not None:
            self._encoded[key] = encoded
        self.held += size
        while self.held > self.capacity:  # the others: the newest fits alone
            self._forget(next(iter(self._items)))

    def _forget(self, key: K) -> None:
        if key in self._items:
            del self._items[key]
            self.held -= self._sizes.pop(key)
            self._encoded.pop(key, None)

    def drop(self, unwanted: Callable[[K], bool]) -> None:
        """Let go of the values whose keys are ``unwanted``. O(values kept)."""
        with self._lock:
            for key in [key for key in self._items if unwanted(key)]:
                self._forget(key)

    def values(self) -> list[Any]:
        """Return the kept values, least recently used first."""
        with self._lock:
            return list(self._items.values())

    def get(self, key: K, decode: Callable[[K], Any], size: int) -> Any:
        """Return the value of ``key``, decoded once from ``size`` bytes."""
        value = self.peek(key)
        if value is None:
            value = decode(key)
            self.put(key, value, size)
        return value

    def decoded(self, slot: K, data: bytes, decode: Callable[[bytes], Any]) -> Any:
        """Return ``decode(data)``, kept under ``slot`` (a store key) while its data is ``data``.

        The kept data is compared with ``data`` byte for byte, where a cache keyed by the data
        would hash it: a hot key's record of hundreds of kilobytes, read at every fetch, costs
        a ``memcmp`` (several times faster than the hash), and a new upload's record, other
        bytes, is decoded anew. O(len(data)).
        """
        with self._lock:
            value = self._items.get(slot)
            if value is not None and self._encoded.get(slot) == data:
                self._items.move_to_end(slot)
                return value
        value = decode(data)
        with self._lock:
            self._keep(slot, value, len(data), data)
        return value


def _warm_up(features: Iterable[OnlineFeature | EntityFeature]) -> None:
    """Load what each feature's merge compiles now, not in the first fetch."""
    for feature in features:
        feature.aggregator.warm_up()


def _warn_of_derivations(join: Join) -> None:
    """Say that fetches return features, not derivations: most of all where names meet."""
    features = set(join.output_columns())
    shadowed = [name for name, _ in join.derivation_items if name in features]
    log.warning("Join %r has derivations, which run offline only: fetches return its feature "
                "columns, and a caller derives from them%s", join.name,
                f"; {', '.join(shadowed)} are derived offline under a feature's own name, so "
                "online they hold the feature, not what the backfill returns" if shadowed
                else "")


class NotUploadedError(LookupError):
    """A GroupBy of the Join has never been uploaded to the store."""


@dataclass
class FetchResult:
    """One requested row's features.

    Attributes:
        features: output column → value, named as ``backfill`` names them.
        stale: the GroupBys whose batch record is older than its slack at the fetch time:
            their values miss whatever the late upload would have corrected.
        definition: what served it, the :attr:`Fetcher.definition`: the response log
            writes it, so that the consistency job compares only the rows of the definition
            it is given.

    """

    features: dict[str, Any]
    stale: list[str] = field(default_factory=list)
    definition: str | None = None


@dataclass(frozen=True, slots=True)
class _Streamed:
    """One key's tiles as a fetch read them, and their events per series (see _recent)."""

    tiles: tuple[Tile, ...]
    series: Mapping[str, SeriesFolds]


@dataclass(frozen=True)
class _Served:
    """One GroupBy as the fetcher serves it: an event source's features, or an entity's."""

    group_by: GroupBy
    meta: GroupByMeta
    features: tuple[OnlineFeature, ...]
    dtypes: Mapping[str, np.dtype[Any]]
    entity: EntityServing | None


class Fetcher:
    """Fetch a Join's features from a store. Thread-safe; reuse one per Join.

    A fetch returns every feature column, as a backfill without derivations does: a Join's
    ``derivations`` are Spark SQL and run offline only (a warning says so when it has any).

    Args:
        join: the definition (the one ``upload`` ran).
        store: where ``upload`` and the tile writers put the data.
        clock: epoch milliseconds now, for fetches without ``at``.

    Raises:
        NotUploadedError: a GroupBy has no upload in the store.

    """

    def __init__(self, join: Join, store: KVStore,
                 clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        expect_argument("join", join, Join, "a tt.Join",
                        "serve a Join: tt.Join(name, left=..., parts=[group_by])")
        expect_argument("store", store, KVStore, "an open store",
                        "open it first: timetile.store.kv.open_store(uri)")
        self.join = join
        #: What this Fetcher serves (:func:`~timetile.store.layout.served_definition`),
        #: in each of its results (:attr:`FetchResult.definition`).
        self.definition = served_definition(join)
        self.store = store
        self.clock = clock
        self._served: dict[str, _Served] = {}
        # (GroupBy, key) → its decoded record, while the store holds the same bytes for it.
        self._records: _DecodeCache[tuple[str, bytes]] = _DecodeCache(CACHE_BYTES)
        self._tiles: _DecodeCache[bytes] = _DecodeCache(CACHE_BYTES)
        # (GroupBy, key, day end) → the key's latest tiles read and their events, with the
        # states kept of their runs (see _recent).
        self._streamed: _DecodeCache[tuple[str, bytes, int]] = _DecodeCache(CACHE_BYTES)
        self._lock = threading.Lock()
        #: Per entity GroupBy, the streamed retractions of rows it did not hold, ignored
        #: (counted once per distinct key of a fetch).
        self.unmatched: dict[str, int] = {}
        self.refresh()
        if join.derivation_items:
            _warn_of_derivations(join)

    def refresh(self) -> None:
        """Re-read the upload metadata (after a new daily upload)."""
        group_bys = {part.group_by.name: part.group_by for part in self.join.join_parts}
        names = list(group_bys)
        metas = self.store.multi_get(META_TABLE, [name.encode() for name in names])
        missing = [name for name, meta in zip(names, metas, strict=True) if meta is None]
        if missing:
            raise NotUploadedError(
                f"GroupBy {', '.join(missing)} of Join {self.join.name!r} has no upload in "
                f"this store. Fix: run `timetile upload` for it first")
        served = {}
        for name, data in zip(names, metas, strict=True):
            assert data is not None
            try:
                meta = GroupByMeta.from_bytes(data)
            except ValueError as error:
                raise NotUploadedError(f"GroupBy {name}: {error}") from None
            if meta.signature != feature_signature(group_bys[name]):
                raise NotUploadedError(
                    f"GroupBy {name} changed since its upload (features, keys, accuracy "
                    f"or the source's where, select or time columns differ from the "
                    f"upload's). Fix: run `timetile upload` for it")
            group_by = group_bys[name]
            if meta.row_columns:
                entity = EntityServing.of(group_by, meta)
                _warm_up(entity.features)
                served[name] = _Served(group_by, meta, (), {}, entity)
                continue
            before = self._served.get(name)
            if before is not None and before.meta.day_end != meta.day_end:
                # A new upload: the streamed events kept since the old day end are done.
                self._streamed.drop(functools.partial(_of_another_day, name, meta.day_end))
            if before is not None and before.entity is None and (
                    before.meta.value_types == meta.value_types):
                # The same aggregators: the states kept of long runs (keyed by them) hold.
                served[name] = _Served(group_by, meta, before.features, before.dtypes, None)
                continue
            features = online_features(group_by, meta.value_types)
            _warm_up(features)
            served[name] = _Served(group_by, meta, features, series_dtypes(features), None)
        self._served = served

    def day_end(self, group_by: str) -> int:
        """Return the day end of GroupBy ``group_by``'s upload (epoch ms).

        A fetch is exact from it until its slack has passed; before it, the store holds no
        state, and the GroupBy is stale.
        """
        return self._served[group_by].meta.day_end

    @property
    def kept_states(self) -> int:
        """How many states the fetcher keeps of hot keys' long runs of events.

        Over its cached records and streamed events (:class:`SeriesFolds`): the memory they
        take beyond the cached bytes, about ``sqrt(n) / 4`` states per op for a run of ``n``
        events (about twice that after tiles land), and as many for the blocks of runs with
        no fixed end (not counting their index's nodes). O(cached keys).
        """
        series = [folds for record in self._records.values()
                  if isinstance(record, BatchRecord) for folds in record.edges.values()]
        series += [folds for streamed in self._streamed.values()
                   for folds in streamed.series.values()]
        return sum(folds.kept_states for folds in series)

    @property
    def key_columns(self) -> list[str]:
        """The left columns a request row must carry, in part order, each once."""
        return list(dict.fromkeys(key for part in self.join.join_parts
                                  for key in part.left_keys))

    def fetch(self, rows: Sequence[Mapping[str, Any]], at: int | None = None
              ) -> list[FetchResult]:
        """Return the features of each row (a mapping holding :attr:`key_columns`) at ``at``.

        ``at`` is epoch milliseconds, now by default. Cost: per part, one ``multi_get`` and
        one ``get_tiles`` for all rows, then O(features + edge and new events) per distinct
        key (rows that repeat a key share its answer, each with its own lists and maps).

        Raises:
            DefinitionError: a row lacks a key column, or a key value has the wrong type.

        """
        if isinstance(rows, (Mapping, str)) or not isinstance(rows, Sequence):
            raise DefinitionError.single(
                f"fetch of Join {self.join.name!r}", "rows", f"{type(rows).__name__} is not a "
                "list of rows", "pass a list of mappings, e.g. [{'user_id': 1}]")
        if at is not None and (isinstance(at, bool) or not isinstance(at, Integral)
                               or not MIN_TIME <= int(at) <= MAX_TIME):
            raise DefinitionError.single(
                f"fetch of Join {self.join.name!r}", "at", f"{at!r} is not epoch milliseconds"
                + (" in int64" if isinstance(at, Integral) and not isinstance(at, bool) else ""),
                "pass an int of milliseconds since the epoch (UTC), or None for now")
        for index, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise DefinitionError.single(
                    f"fetch of Join {self.join.name!r}", f"rows[{index}]",
                    f"{type(row).__name__} is not a row", "pass a mapping of the key columns, "
                    f"e.g. {{{', '.join(repr(c) + ': …' for c in self.key_columns)}}}")
        at = self.clock() if at is None else int(at)
        results = [FetchResult({}, definition=self.definition) for _ in rows]
        for part in self.join.join_parts:
            self._fetch_part(part, rows, at, results)
        return results

    def _keys(self, part: JoinPart, rows: Sequence[Mapping[str, Any]],
              meta: GroupByMeta) -> list[bytes]:
        keys = []
        for index, row in enumerate(rows):
            missing = [column for column in part.left_keys if column not in row]
            if missing:
                raise DefinitionError.single(
                    f"fetch of Join {self.join.name!r}", f"rows[{index}]",
                    f"lacks the key column {', '.join(missing)}",
                    f"give every row the key columns {', '.join(self.key_columns)}")
            try:
                keys.append(encode_key([row[column] for column in part.left_keys],
                                       meta.key_types))
            except KeyValueError as error:
                column = part.left_keys[error.index]
                raise DefinitionError.single(
                    f"fetch of Join {self.join.name!r}", f"rows[{index}].{column}", str(error),
                    f"give {column} as {meta.key_types[error.index]}",
                ) from None
        return keys

    def _fetch_part(self, part: JoinPart, rows: Sequence[Mapping[str, Any]], at: int,
                    results: list[FetchResult]) -> None:
        """Answer each distinct key of the rows once, then copy its answer to its rows.

        Rows that repeat a key (one user against many candidate listings) share one read and
        one computation; a list or map value is copied per row, so no two rows share one.
        """
        served = self._served[part.group_by.name]
        meta, group_by = served.meta, part.group_by
        keys = self._keys(part, rows, meta)
        distinct = list(dict.fromkeys(keys))
        answers = [FetchResult({}) for _ in distinct]
        when = group_by.as_of(at)
        records = self.store.multi_get(batch_table(group_by.name), distinct)
        tiles = self.store.get_tiles(tile_table(group_by.name), distinct, meta.day_end,
                                     when + 1)
        prefix = f"{part.prefix}_" if part.prefix else ""
        if served.entity is not None:
            self._entity_part(served, distinct, records, tiles, when=when, prefix=prefix,
                              results=answers)
        else:
            self._event_part(served, distinct, records, tiles, when=when, prefix=prefix,
                             results=answers)
        answer_of = dict(zip(distinct, answers, strict=True))
        answered: set[bytes] = set()
        for result, key in zip(results, keys, strict=True):
            answer = answer_of[key]
            if key in answered:
                result.features.update((name, copy.deepcopy(value) if isinstance(
                    value, (list, dict)) else value) for name, value in answer.features.items())
            else:
                result.features.update(answer.features)
                answered.add(key)
            result.stale.extend(name for name in answer.stale if name not in result.stale)

    def _event_part(self, served: _Served, keys: Sequence[bytes],
                    records: Sequence[bytes | None], tiles: Sequence[Sequence[Tile]], *,
                    when: int, prefix: str, results: list[FetchResult]) -> None:
        """Merge each key's batch record with its events streamed since (``store.tiles``)."""
        meta, group_by = served.meta, served.group_by
        empty = BatchRecord(meta.day_end, meta.slack, {}, {})
        for result, key, data, key_tiles in zip(results, keys, records, tiles, strict=True):
            record = empty if data is None else self._records.decoded(
                (group_by.name, key), data, lambda raw: read_record(
                    raw, served.features, served.dtypes, signature=meta.signature,
                    generation=meta.generation))
            if record.generation < meta.generation:  # the served upload found no event of
                record = empty  # this key (a newer one is an upload under way: it answers)
            if not record.covers(when) and group_by.name not in result.stale:
                result.stale.append(group_by.name)
            recent = self._recent(served, key, record.day_end, key_tiles, when)
            states = record.states(served.features, when, recent)
            try:
                for feature, state in zip(served.features, states, strict=True):
                    result.features[prefix + feature.name] = feature.aggregator.finalize_at(
                        state, when)
            except ResultOverflowError as error:  # the backfill refuses it too
                column, _ = split_series(feature.series)
                raise refused(prefix + feature.name, column, error) from None

    def _recent(self, served: _Served, key: bytes, since: int, tiles: Sequence[Tile],
                when: int) -> Mapping[str, SeriesFolds]:
        """Return one key's events streamed in ``tiles`` from ``since`` on, per series.

        One set of tiles is kept per key, the latest read, with the states kept of its runs
        (:class:`SeriesFolds`). A fetch takes it whole when it read the same tiles, or the
        kept ones but for tiles that start after ``when`` (an earlier fetch time: their
        events lie outside all its windows). A read that adds tiles to the kept ones (the
        stream's next batches, a later fetch time) carries their kept states over, so a hot
        key folds only its new events; any other read replaces them.
        """
        if not tiles:
            return {}
        name = (served.group_by.name, key, since)
        read = tuple(tiles)
        kept: _Streamed | None = self._streamed.peek(name)
        before: Mapping[str, SeriesFolds] = {}
        if kept is not None:
            shared = kept.tiles[:len(read)]
            if shared == read and all(start > when for start, _, _ in kept.tiles[len(read):]):
                return kept.series
            if read[:len(kept.tiles)] == kept.tiles:
                before = kept.series
        series = _series_since([self._tiles.get(value, lambda raw: decode_events(
            raw, served.dtypes), len(value)) for _, _, value in read], since, before)
        self._streamed.put(name, _Streamed(read, series),
                           sum(len(value) for _, _, value in read))
        return series

    def _entity_part(self, served: _Served, keys: Sequence[bytes],
                     records: Sequence[bytes | None], tiles: Sequence[Sequence[Tile]], *,
                     when: int, prefix: str, results: list[FetchResult]) -> None:
        """Replay each key's rows and the mutations since (:mod:`timetile.store.entity_records`)."""
        meta, name, entity = served.meta, served.group_by.name, served.entity
        assert entity is not None
        unmatched = 0
        for result, key, data, key_tiles in zip(results, keys, records, tiles, strict=True):
            record = (None if data is None else self._records.decoded(
                (name, key), data, lambda raw: EntityRecord.from_bytes(
                    raw, signature=meta.signature, generation=meta.generation)))
            if record is None or record.generation < meta.generation:  # the key was not in
                record = EntityRecord(meta.day_end, ())  # the served upload's snapshot
            if not record.covers(when, meta.slack) and name not in result.stale:
                result.stale.append(name)
            mutations = [m for _, _, value in key_tiles
                         for m in self._tiles.get(value, decode_mutations, len(value))]
            try:
                answers, missed = entity.answer(record, mutations, when)
            except ResultOverflowError as error:  # the backfill refuses it too, named
                raise ResultOverflowError(f"{prefix}{error}") from None
            unmatched += missed
            for column, value in zip(entity.names, answers, strict=True):
                result.features[prefix + column] = value
        if unmatched:
            self._count_unmatched(name, unmatched)

    def _count_unmatched(self, name: str, count: int) -> None:
        """Count retractions of rows that were not there; warn the first time per GroupBy."""
        with self._lock:
            first = name not in self.unmatched
            self.unmatched[name] = self.unmatched.get(name, 0) + count
        if first:
            log.warning("%s: a streamed mutation retracts a row the entity does not hold "
                        "(ignored, as the backfill ignores it); Fetcher.unmatched counts them",
                        name)


def _of_another_day(group_by: str, day_end: int, kept: tuple[str, bytes, int]) -> bool:
    """Whether ``kept``, a key of the streamed events, is of ``group_by`` since another day."""
    return kept[0] == group_by and kept[2] != day_end


def _series_since(tiles: Sequence[Mapping[str, Series]], since: int,
                  before: Mapping[str, SeriesFolds]) -> dict[str, SeriesFolds]:
    """Gather the streamed events from ``since`` on per series, sorted by time.

    A fetch takes the runs its windows hold (:meth:`BatchRecord.states`), so events after
    the fetch time stay here: the set of tiles read, not the fetch time, names the result.
    ``before`` holds the series of the first of these tiles: their kept states carry over
    where the other tiles' events all come after theirs.
    """
    parts: dict[str, list[Series]] = {}
    for tile in tiles:
        for name, (values, times) in tile.items():
            keep = times >= since
            parts.setdefault(name, []).append((values[keep], times[keep]))
    merged = {}
    for name, pieces in parts.items():
        values = np.concatenate([values for values, _ in pieces])
        times = np.concatenate([times for _, times in pieces])
        if len(times) >= 2 and not bool(np.all(times[1:] >= times[:-1])):  # out of order
            order = np.argsort(times, kind="stable")
            values, times = values[order], times[order]
        merged[name] = SeriesFolds(values, times, after=before.get(name))
    return merged
