"""The state of a mutable table over one day, replayed from a snapshot and its mutations.

An entity source's value at time ``a`` (DESIGN §2) aggregates the table's rows at ``a``:
the snapshot of the day before, plus that day's mutations before ``a``. :class:`EntityReplay`
holds one key's rows for one day and moves them forward through the day's mutations; at
each query it answers every feature:

- a lifetime feature is kept up to date incrementally: an insertion is an ``update``, a
  retraction a ``retract`` where the op is invertible; a retraction under an op that is not
  marks the feature stale, and the next query recomputes it from the rows;
- a windowed feature keeps the rows whose time lies in the window at ``a``, recomputed per
  query: O(rows) each;
- a lookup returns the row that sorts last by (time, columns), nulls first.

Mutations of one millisecond apply together: their insertions first, then their retractions,
so a row inserted and deleted in the same millisecond is fine. A retraction of a row that is
not there is counted (:attr:`EntityReplay.unmatched`) and ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from timetile.core.aggregators import Aggregator, bucketed_values
from timetile.core.aggregators.base import ResultOverflowError, refused
from timetile.core.windows import WindowKind, window_interval

#: A row image: the values of the row columns, in order.
Image = tuple[Any, ...]


def _canonical(value: Any) -> Any:
    """Return a value as a dict key where NaN equals NaN, as Spark groups values.

    Arrays become tuples and maps sorted tuples of pairs, recursively, so a row with nested
    columns is a key too.
    """
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    if isinstance(value, (list, tuple)):
        return ("[]", *map(_canonical, value))
    if isinstance(value, dict):
        return ("{}", *sorted((repr(k), _canonical(v)) for k, v in value.items()))
    return value


def _last_first_key(value: Any) -> tuple[Any, ...]:
    """Sort key in Spark's ascending order, at every depth.

    Nulls first, NaN above every number, arrays element by element (a prefix first),
    structs field by field.

    >>> sorted([[1.0, None], None, [float("nan")], [1.0], [1.0, 2.0]], key=_last_first_key)
    [None, [1.0], [1.0, None], [1.0, 2.0], [nan]]
    """
    if value is None:
        return (0,)
    if isinstance(value, float) and math.isnan(value):
        return (2,)
    if isinstance(value, dict):  # a struct, fields in order
        return (1, tuple(map(_last_first_key, value.values())))
    if isinstance(value, (list, tuple)):  # an array (or a map's entries: Spark orders none)
        return (1, tuple(map(_last_first_key, value)))
    return (1, value)


class RowMultiset:
    """Row images with multiplicities; images equal as Spark groups them (NaN = NaN)."""

    def __init__(self) -> None:
        self._rows: dict[Image, list[Any]] = {}  # canonical → [count, image, time]

    def add(self, image: Image, time: int | None) -> None:
        """Insert one copy of ``image``, written at ``time``."""
        key = tuple(map(_canonical, image))
        entry = self._rows.get(key)
        if entry is None:
            self._rows[key] = [1, image, time]
        else:
            entry[0] += 1

    def remove(self, image: Image) -> bool:
        """Retract one copy of ``image``; False (and no change) when there is none."""
        key = tuple(map(_canonical, image))
        entry = self._rows.get(key)
        if entry is None:
            return False
        entry[0] -= 1
        if entry[0] == 0:
            del self._rows[key]
        return True

    def rows(self) -> Iterable[tuple[Image, int | None, int]]:
        """Every distinct image with its time and multiplicity."""
        for count, image, time in self._rows.values():
            yield image, time, count

    def __len__(self) -> int:
        return sum(entry[0] for entry in self._rows.values())


@dataclass(frozen=True)
class EntityFeature:
    """One aggregation over the rows of an entity.

    Attributes:
        column: the index of the aggregated column in a row image.
        aggregator: the op.
        dtype: the numpy dtype of the values the aggregator takes.
        window: (kind, length, hop) of the window over the rows' times.
        bucket: for a bucketed aggregation, the index of the bucket column (rows with a
            null bucket are left out, as null values are).
        name: the output column, and ``source_column`` the aggregated one, by which a
            result the op refuses is named (:func:`~timetile.core.aggregators.base.refused`).

    """

    column: int
    aggregator: Aggregator[Any]
    dtype: np.dtype[Any]
    window: tuple[WindowKind, int | None, int | None]
    name: str
    source_column: str
    bucket: int | None = None

    @property
    def lifetime(self) -> bool:
        """Whether the feature sees every row, whatever its time."""
        return self.window[0] is WindowKind.LIFETIME


class EntityReplay:
    """One key's rows through one day: load the snapshot, apply mutations, answer queries.

    Args:
        features: the aggregations to answer.
        lookup: for a lookup, the image indices of the returned columns (else empty).
        order: for a lookup, the image indices that order rows after their time.

    """

    def __init__(self, features: Sequence[EntityFeature], lookup: Sequence[int] = (),
                 order: Sequence[int] = ()) -> None:
        self.features = tuple(features)
        self.lookup = tuple(lookup)
        self.order = tuple(order)
        self.rows = RowMultiset()
        self.unmatched = 0
        self._states: list[Any] = [f.aggregator.init() for f in self.features]
        self._stale = [False] * len(self.features)

    def _values(self, feature: EntityFeature, images: Sequence[tuple[Image, int | None]]
                ) -> tuple[np.ndarray, np.ndarray]:
        column, bucket = feature.column, feature.bucket
        timed = feature.aggregator.needs_times()  # a decayed op weighs rows by their time
        kept = [(image, time) for image, time in images if image[column] is not None
                and (bucket is None or image[bucket] is not None)
                and (time is not None or not timed)]
        values = np.array([image[column] for image, _ in kept], dtype=feature.dtype)
        times = np.array([time if time is not None else np.iinfo(np.int64).min
                          for _, time in kept], dtype=np.int64)
        if bucket is not None:
            values = bucketed_values([image[bucket] for image, _ in kept], values,
                                     feature.aggregator.input_type)
        return values, times

    def insert(self, rows: Sequence[tuple[Image, int | None]]) -> None:
        """Insert row images (a snapshot, or a millisecond's after images)."""
        for image, time in rows:
            self.rows.add(image, time)
        for index, feature in enumerate(self.features):
            if feature.lifetime and not self._stale[index]:
                values, times = self._values(feature, rows)
                self._states[index] = feature.aggregator.update(self._states[index], values,
                                                                times)

    def retract(self, rows: Sequence[tuple[Image, int | None]]) -> None:
        """Retract row images (a millisecond's before images); count the ones not there."""
        present = []
        for image, time in rows:
            if self.rows.remove(image):
                present.append((image, time))
            else:
                self.unmatched += 1
        if not present:
            return
        for index, feature in enumerate(self.features):
            if not feature.lifetime or self._stale[index]:
                continue
            if feature.aggregator.invertible:
                values, times = self._values(feature, present)
                self._states[index] = feature.aggregator.retract(self._states[index], values,
                                                                 times)
            else:
                self._stale[index] = True

    def apply(self, afters: Sequence[tuple[Image, int | None]],
              befores: Sequence[tuple[Image, int | None]]) -> None:
        """Apply one millisecond's mutations: insertions first, then retractions."""
        self.insert(afters)
        self.retract(befores)

    def _all_rows(self) -> list[tuple[Image, int | None]]:
        return [(image, time) for image, time, count in self.rows.rows()
                for _ in range(count)]

    def answer(self, as_of: int) -> list[Any]:
        """Every feature's result at ``as_of`` (then the lookup's values, if any).

        Raises:
            ResultOverflowError: a result its op refuses (an integer sum past int64),
                naming the feature.

        """
        everything: list[tuple[Image, int | None]] | None = None
        results: list[Any] = []
        for index, feature in enumerate(self.features):
            aggregator = feature.aggregator
            if feature.lifetime:
                if self._stale[index]:
                    everything = self._all_rows() if everything is None else everything
                    self._states[index] = aggregator.fold(*self._values(feature, everything))
                    self._stale[index] = False
                state = self._states[index]
            else:
                everything = self._all_rows() if everything is None else everything
                low, high = window_interval(as_of, *feature.window)
                state = aggregator.fold(*self._values(feature, [
                    (image, time) for image, time in everything
                    if time is not None and low <= time < high]))
            try:
                results.append(aggregator.finalize_at(state, as_of))
            except ResultOverflowError as error:
                raise refused(feature.name, feature.source_column, error) from None
        if self.lookup:
            results.extend(self._lookup())
        return results

    def _lookup(self) -> list[Any]:
        best: tuple[Any, ...] | None = None
        chosen: Image | None = None
        for image, time, _ in self.rows.rows():
            rank = (_last_first_key(time), *(_last_first_key(image[i]) for i in self.order))
            if best is None or rank > best:
                best, chosen = rank, image
        if chosen is None:
            return [None] * len(self.lookup)
        return [chosen[i] for i in self.lookup]
