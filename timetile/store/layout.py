"""How GroupBys live in a key-value store: tables, keys, metadata, records and tiles.

Per GroupBy ``g``, a store holds:

========================  ======================================================
table ``tt_meta``         key ``g``: the upload's metadata (:class:`GroupByMeta`)
table ``tt_upload``       key ``g``: the generation of the last upload started, an
                          encoded int, taken by :meth:`KVStore.update` (:data:`UPLOAD_TABLE`)
table ``tt_batch.g``      key: the entity key (:func:`encode_key`); value: its batch
                          record (:mod:`timetile.core.batch_record`), or for an entity
                          source the key's rows (:mod:`timetile.store.entity_records`)
tiles ``tt_tiles.g``      per entity key, per tile start (:data:`TILE_MS`), per writer
                          batch: that batch's events of that tile (:func:`encode_events`),
                          or for an entity source its mutations
========================  ======================================================

The feature list is not stored: both sides rebuild it from the definition and the column
types the upload recorded (:func:`online_features`), so a fetch runs exactly the aggregators
the backfill runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timetile.api.group_by import GroupBy
from timetile.api.join import Join
from timetile.api.sources import EntitySource, EventSource
from timetile.api.windows import window_spec
from timetile.core.aggregators import Bucketed, bucketed_values, make_aggregator
from timetile.core.aggregators.bucketed import bucketed_dtype
from timetile.core.aggregators.codec import decode_versioned, encode, expect_int
from timetile.core.batch_record import (
    OnlineFeature,
    Series,
    decode_series,
    encode_series,
    series_name,
    split_series,
)
from timetile.core.timeutil import HOUR_MS
from timetile.core.types import ValueType

META_TABLE = "tt_meta"
#: Per GroupBy, the generation of the last upload started, finished or not: the next one
#: takes a higher one, so records a failed upload left are older than its retry's.
UPLOAD_TABLE = "tt_upload"
#: The streaming job's records, one per GroupBy (:mod:`timetile.streaming.state`).
STREAM_TABLE = "tt_stream"
#: The stream record an upload leaves when a GroupBy's definition changed: it dropped the
#: tiles, so only a stream from a new checkpoint (which replays the landed events) may go on.
STREAM_RESET = b"reset: the definition changed"
#: Streaming tiles span this long: a fetch reads the tiles since the batch record's day end.
TILE_MS = HOUR_MS
_META_VERSION = 5
_TILE_VERSION = 1


def batch_table(group_by: str) -> str:
    """Return the table of a GroupBy's batch records."""
    return f"tt_batch.{group_by}"


def tile_table(group_by: str) -> str:
    """Return the tile table of a GroupBy's streamed events."""
    return f"tt_tiles.{group_by}"


@dataclass(frozen=True)
class GroupByMeta:
    """What an upload records about a GroupBy, for fetchers.

    Attributes:
        day_end: the upload's as-of time: the end of its day ``ds``, epoch ms.
        slack: how long after ``day_end`` its records answer exactly.
        key_types: the coarse type of each key column, in key order.
        value_types: the coarse type of each aggregated (or bucket) column.
        signature: the features the records hold (:func:`feature_signature`): a fetcher
            whose definition gives another one refuses to serve them.
        row_columns: for an entity source, the columns of a row image, in order (empty for
            an event source).
        row_types: the coarse type of each row column, in that order.
        generation: the upload's generation, above every earlier upload's of the GroupBy in
            the store; its records carry it, so a record an earlier upload left (of a key
            this one found no row of) reads as empty
            (:func:`timetile.core.batch_record.answers_for`).

    """

    day_end: int
    slack: int
    key_types: tuple[str, ...]
    value_types: Mapping[str, str]
    signature: str = ""
    row_columns: tuple[str, ...] = ()
    row_types: tuple[str, ...] = ()
    generation: int = 0

    def to_bytes(self) -> bytes:
        """Encode for the store."""
        return encode((_META_VERSION, self.day_end, self.slack, self.key_types,
                       tuple(sorted(self.value_types.items())), self.signature,
                       self.row_columns, self.row_types, self.generation))

    @classmethod
    def from_bytes(cls, data: bytes) -> GroupByMeta:
        """Decode what :meth:`to_bytes` wrote.

        Raises:
            ValueError: the bytes are not metadata of this version.

        """
        fields = decode_versioned(data, _META_VERSION, 8, "timetile upload metadata",
                                  "re-run upload")
        day_end, slack, keys, values, signature, row_columns, row_types, generation = fields
        try:
            return cls(day_end, slack, tuple(keys), dict(values), signature,
                       tuple(row_columns), tuple(row_types), expect_int(generation,
                                                                         "generation"))
        except (TypeError, ValueError):
            raise ValueError("malformed timetile upload metadata. Fix: re-run upload") from None


def online_features(group_by: GroupBy, value_types: Mapping[str, str]) -> tuple[OnlineFeature, ...]:
    """Return the features of ``group_by`` as the online side computes them.

    Names carry no join-part prefix; ``value_types`` gives each column's coarse type.
    Features of one op over one series (its windows) share one aggregator, which keys the
    states a fetcher keeps of long runs (:class:`~timetile.core.series_folds.SeriesFolds`):
    windows whose runs start at the same event share them.
    """
    features = []
    shared: dict[tuple[Any, ...], Any] = {}
    for aggregation in group_by.aggregations or ():
        value_type = ValueType(value_types[aggregation.column])
        for name, window, bucket in aggregation.outputs(group_by.name, None):
            op = (*aggregation.op_key, value_type, bucket)
            aggregator = shared.get(op)
            if aggregator is None:
                aggregator = make_aggregator(aggregation.op, value_type, **aggregation.params)
                if bucket is not None:
                    aggregator = Bucketed(aggregator)
                shared[op] = aggregator
            features.append(OnlineFeature(name, series_name(aggregation.column, bucket),
                                          aggregator, window_spec(window), value_type))
    return tuple(features)


#: What a source of default settings gives :func:`feature_signature`, per kind of source.
_DEFAULT_SHAPES: dict[type, tuple[object, ...]] = {
    EventSource: ((), None, ("ts", None)),
    EntitySource: ((), None, (None, "mutation_ts", "is_before", "ds")),
}


def feature_signature(group_by: GroupBy) -> str:
    """Return a digest of what a GroupBy's records and tiles hold.

    Its features, keys and floors, and which rows of its source it reads and how it places
    them in time: the source's kind, ``where``, ``select`` and time columns (not the table:
    moving a table is no change of definition). Upload stores it; a fetcher and a stream
    compare it with their own definition's, so a definition changed since the upload (a
    window added, a ``where`` changed) is refused, not served wrong, and an upload of a
    changed definition drops the tiles streamed under the old one.
    """
    source = group_by.source
    placed: tuple[object, ...] = (
        (source.time_column, source.period) if isinstance(source, EventSource) else
        (source.time_column, source.mutation_time_column, source.is_before_column,
         source.partition_column))
    parts = [group_by.name, type(source).__name__, repr(tuple(group_by.keys)),
             repr(group_by.floors), repr(group_by.lookup_columns)]
    shape = (source.filters, source.projection, placed)
    if shape != _DEFAULT_SHAPES[type(source)]:  # a source of defaults keeps its digest of
        parts.append(repr(shape))  # earlier builds, which held no shape: no re-upload
    parts.extend(repr((a.column, a.op, a.k, a.percentiles, a.buckets,
                       [None if w is None else w.name for w in a.window_list])
                      # a half-life where given: the other ops keep their digests
                      + (() if a.half_life is None else (a.half_life,)))
                 for a in group_by.aggregations or ())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def part_signatures(join: Join) -> dict[str, str]:
    """Return, per part of a Join (by its label), a digest of what the part serves.

    The part's GroupBy's :func:`feature_signature`, its prefix and its key mapping. The
    response log writes them in every row it logs (:func:`served_definition`), so the
    consistency job compares only the rows its own parts would have served, each part as
    defined now, and leaves out those of another definition, even one with the same feature
    names (a ``where`` added to a source). What the Fetcher does not serve is not in them:
    the left source, the derivations, the parts' order, the Join's name.
    """
    return {part.label: hashlib.sha256(repr((part.prefix, part.mapping,
                                            feature_signature(part.group_by))).encode()
                                       ).hexdigest()[:16]
            for part in join.join_parts}


def served_definition(join: Join) -> str:
    """Return what a Fetcher of ``join`` logs as its ``definition``: its parts' digests.

    A JSON object of :func:`part_signatures`, its keys sorted: ``{"users":"4f0c…"}``.
    """
    return json.dumps(part_signatures(join), sort_keys=True, separators=(",", ":"))


def series_dtypes(features: Sequence[OnlineFeature]) -> dict[str, np.dtype[Any]]:
    """Return the numpy dtype of each series the features read."""
    return {feature.series: (bucketed_dtype(feature.value_type)
                             if split_series(feature.series)[1] is not None
                             else feature.value_type.numpy_dtype) for feature in features}


def _cast_key(value: Any, kind: str) -> Any:
    """Return a key value as its column's type, refusing lossy readings.

    Raises:
        ValueError: the value cannot be read as ``kind``.

    """
    if hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    if kind in _KEY_CASTS:
        return _KEY_CASTS[kind](value)
    return _string_key(value, kind)  # strings, and the kinds read from their text


def _int_key(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{_shown(value)} is a boolean, not an int")
    readable = (isinstance(value, int) or (isinstance(value, float) and value.is_integer())
                or (isinstance(value, str) and value.isascii()
                    and value.strip().lstrip("-").isdigit()))
    if not readable:
        raise ValueError(f"{_shown(value)} cannot be read as int")
    if isinstance(value, float) and abs(value) >= 2**53:  # 2**53 + 1 reads as 2**53 too
        raise ValueError(f"{_shown(value)} is a float at or beyond 2**53, where floats cannot "
                         "tell neighbouring ints apart: send it as an integer or a digit string")
    number = int(value)
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"{_shown(value)} is beyond a 64-bit int, which no key column holds")
    return number


def _bool_key(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{_shown(value)} cannot be read as bool")


def _float_key(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or (
            isinstance(value, str) and "_" in value):  # Python's 1_000 is null in Spark
        raise ValueError(f"{_shown(value)} cannot be read as float")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{_shown(value)} is beyond a double") from None
    # One key for every NaN and for both zeros, as Spark groups them (the backfill).
    return math.nan if math.isnan(number) else number + 0.0  # -0.0 + 0.0 is 0.0


def _string_key(value: Any, kind: str = "string") -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ValueError(f"{_shown(value)} cannot be read as {kind}")
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no Spark string holds one
        raise ValueError(f"{_shown(value)} is not Unicode text (it holds a lone surrogate)"
                         ) from None
    return text


def _shown(value: Any) -> str:
    """``repr(value)``, cut short: an error message need not hold a 400-digit number."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"


_SHOWN_CHARS = 40
_KEY_CASTS: dict[str, Callable[[Any], Any]] = {"int": _int_key, "bool": _bool_key,
                                               "float": _float_key}


class KeyValueError(ValueError):
    """A key value that cannot be read as its column's type; ``index`` says which column."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def encode_key(values: Sequence[Any], key_types: Sequence[str]) -> bytes:
    """Encode an entity key's values as store bytes, each cast to its column's type.

    Ints accept integral numbers and digit strings (never booleans), bools accept
    ``true``/``false``, strings accept strings and ints: nothing lossy is read. Floats are
    one key where Spark groups them as one: ``-0.0`` is ``0.0``, and every NaN one NaN.

    >>> encode_key([7], ["int"]) == encode_key(["7"], ["int"]) == encode_key([7.0], ["int"])
    True
    >>> encode_key([-0.0], ["float"]) == encode_key([0.0], ["float"])
    True

    Raises:
        KeyValueError: a value cannot be read as its key column's type (its ``index``
            names the column's position).

    """
    return encode(tuple(_cast_at(index, value, kind) for index, (value, kind)
                        in enumerate(zip(values, key_types, strict=True))))


def _cast_at(index: int, value: Any, kind: str) -> Any:
    """Return the key column ``index``'s value cast (None stays None), or raise naming it."""
    if value is None:
        return None
    try:
        return _cast_key(value, kind)
    except ValueError as error:
        raise KeyValueError(index, str(error)) from None


def series_rows(table: pa.Table, series: Mapping[str, ValueType]
                ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Return, per series, the values of ``table``'s rows that have one, and those rows.

    A row has a value for ``column`` when it is not null, and for a bucketed series
    (``column`` and ``bucket``) when its bucket is not null either; bucketed values come
    paired with their buckets (:func:`bucketed_values`), as the aggregators take them. The
    rows are positions in ``table``, ascending. Vectorized: O(rows) per series.
    """
    out = {}
    for name, value_type in series.items():
        column, bucket = split_series(name)
        valid = pc.is_valid(table.column(column))
        if bucket is not None:
            valid = pc.and_(valid, pc.is_valid(table.column(bucket)))
        rows = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
        values = pc.filter(table.column(column), valid).to_numpy(zero_copy_only=False)
        values = values.astype(value_type.numpy_dtype)
        if bucket is not None:
            buckets = pc.filter(table.column(bucket), valid).to_numpy(zero_copy_only=False)
            values = bucketed_values(buckets, values, value_type)
        out[name] = (values, rows)
    return out


def table_series(table: pa.Table, times: np.ndarray, series: Mapping[str, ValueType]
                 ) -> dict[str, Series]:
    """Return, per series, the values of the rows that have one and their ``times``.

    ``times`` is aligned with ``table``'s rows; see :func:`series_rows`.
    """
    return {name: (values, times[rows])
            for name, (values, rows) in series_rows(table, series).items()}


def encode_events(series: Mapping[str, Series]) -> bytes:
    """Encode one writer batch's events of one (key, tile): per series, values and times."""
    return encode((_TILE_VERSION, tuple((name, *encode_series(values, times))
                                        for name, (values, times) in series.items())))


def decode_events(data: bytes, dtypes: Mapping[str, np.dtype[Any]]) -> dict[str, Series]:
    """Decode :func:`encode_events`; series the features do not read are skipped."""
    (series,) = decode_versioned(data, _TILE_VERSION, 1, "a timetile tile",
                                 "restart the stream with a fresh checkpoint")
    return {name: decode_series(kind, times, values, dtypes[name])
            for name, kind, times, values in series if name in dtypes}
