"""The batch record: one key's state as of the end of a day, for online fetches (DESIGN §5).

``upload`` writes one record per (GroupBy, key) as of ``day_end``; a fetch at any time
``t`` in ``[day_end, day_end + slack)`` merges it with the events that arrived since
(streaming tiles) and gets exactly what a backfill would give at ``t``. Per feature the part
of its window before ``day_end``, ``[start(t), min(end(t), day_end))``, splits in two:

- the **body**: the events no window start can pass before ``day_end + slack``,
  ``[start(day_end + slack), end(day_end))``, collapsed into one aggregator state;
- the **edge**: the events the window start slides over during the slack, and the last
  partial hop of a hopping window, kept raw (per column, shared by the features of that
  column), so a start or end at any millisecond is exact.

A lifetime feature keeps everything before ``day_end`` in its body. A fetch after
``day_end + slack`` is still answered, from the edges and the recent events alone: the body
no longer fits the window, so the value is incomplete. :meth:`BatchRecord.covers` says so,
and the fetcher flags the response stale.

Size: one state per feature plus the raw events of each column's edges, at most one slack
of events per distinct window length. Fetch cost: O(features · log n) to find each feature's
runs of edge and new events, plus their folds: once its states are kept
(:mod:`timetile.core.series_folds`), a run that keeps one end from fetch to fetch folds
about ``4 * sqrt(n)`` of its ``n`` events, and a run whose ends both move (a window that
begins after ``day_end``) about twice that, so a hot key's fetch within the slack no longer
folds days of events per feature (for ``unique_count``, ``histogram``,
``approx_percentile`` and bucketed features it still folds the runs whole).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from timetile.core.aggregators import Aggregator
from timetile.core.aggregators.codec import decode_versioned, encode, older_version
from timetile.core.series_folds import SeriesFolds
from timetile.core.timeutil import DAY_MS
from timetile.core.types import ValueType
from timetile.core.windows import WindowKind, window_interval

#: The first element of every encoded record; bump it when the layout changes.
RECORD_VERSION = 3  # 2: the definition's signature; 3: the upload's generation
#: How long after ``day_end`` a record answers exactly: past the next daily upload.
#: Two days: the upload of day D can only start once D has ended, and the previous record
#: must still answer exactly until the new one lands.
DEFAULT_SLACK_MS = 2 * DAY_MS

#: A column's non-null values and their event times, sorted by time.
Series = tuple[np.ndarray, np.ndarray]
#: A run of one series' events: (series, lo, hi, the end that stays put or None).
_Run = tuple[SeriesFolds, int, int, int | None]


@dataclass(frozen=True)
class OnlineFeature:
    """One output column of a GroupBy, as the online side computes it.

    Attributes:
        name: the column name without any join-part prefix.
        series: the values it reads: the aggregated column's name, or for a bucketed
            feature its column and bucket joined by :data:`SERIES_SEPARATOR` (see
            :func:`series_name`).
        aggregator: the op (a ``Bucketed`` one for a bucketed feature).
        window: (kind, length, hop) of the window.
        value_type: the column's type.

    """

    name: str
    series: str
    aggregator: Aggregator[Any]
    window: tuple[WindowKind, int | None, int | None]
    value_type: ValueType

    def interval(self, at: int) -> tuple[int, int]:
        """Return the window ``[start, end)`` of a query at ``at``."""
        return window_interval(at, *self.window)

    def regions(self, day_end: int, slack: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """Return the body ``[lo, hi)`` (empty when ``lo >= hi``) and the raw edge span."""
        if self.window[0] is WindowKind.LIFETIME:
            return (np.iinfo(np.int64).min, day_end), (day_end, day_end)
        first_start, first_end = self.interval(day_end)
        last_start, _ = self.interval(day_end + slack)
        body = (max(last_start, first_start), first_end)
        return body, (first_start, day_end)


#: Joins a bucketed feature's column and bucket column in its series name: a NUL, which no
#: Spark column name holds, so the split is never ambiguous.
SERIES_SEPARATOR = "\x00"


def series_name(column: str, bucket: str | None) -> str:
    """Return the name of the values a feature reads: its column, or column and bucket.

    >>> split_series(series_name("amount", "category"))
    ('amount', 'category')
    """
    return column if bucket is None else f"{column}{SERIES_SEPARATOR}{bucket}"


def split_series(series: str) -> tuple[str, str | None]:
    """Return the (column, bucket column or None) of a series name."""
    column, separator, bucket = series.partition(SERIES_SEPARATOR)
    return column, (bucket if separator else None)


def _in(times: np.ndarray, low: int, high: int) -> np.ndarray:
    return (times >= low) & (times < high)


def encode_series(values: np.ndarray, times: np.ndarray) -> tuple[str, bytes, Any]:
    """Return a series as encodable parts: (kind, times, values); see :func:`decode_series`.

    Numbers travel as little-endian arrays, other values as tuples; O(n).
    """
    kind = "bucketed" if values.dtype.names else values.dtype.str
    return kind, times.astype("<i8").tobytes(), _encode_values(values)


def decode_series(kind: str, times: bytes, values: Any, dtype: np.dtype[Any]) -> Series:
    """Return the (values, times) that :func:`encode_series` encoded, values as ``dtype``."""
    if kind == "bucketed":
        array = np.empty(len(values), dtype=dtype)
        if values:
            array[:] = list(values)
    elif isinstance(values, bytes):
        array = np.frombuffer(values, dtype=kind).astype(dtype)
    else:
        array = np.array(values, dtype=dtype)
    return array, np.frombuffer(times, dtype="<i8").astype(np.int64)


def _encode_values(values: np.ndarray) -> Any:
    if values.dtype.names:  # bucketed: (bucket, value) pairs
        return tuple((str(b), v.item() if hasattr(v, "item") else v)
                     for b, v in zip(values[values.dtype.names[0]],
                                     values[values.dtype.names[1]], strict=True))
    if values.dtype.kind in "if":
        return values.astype(values.dtype.newbyteorder("<")).tobytes()
    return tuple(v.item() if hasattr(v, "item") else v for v in values)


def answers_for(generation: int, signature: str, *, served: int | None,
                served_signature: str | None) -> bool:
    """Whether a record of upload ``generation`` answers for the served upload.

    ``signature`` is the record's definition; ``served`` and ``served_signature`` the served
    upload's generation and definition (None: any). Every upload of a GroupBy into a store
    takes a generation above all earlier ones and stamps it on each record it writes. A
    record of an earlier generation is one the served upload did not rewrite: its key had
    no row in the served upload's source, so the record reads as empty (False). One of the
    served generation or a later one answers (True): a later one is an upload under way,
    whose records are as good as the served ones when they hold the same features.

    Raises:
        ValueError: the record is not older than the served upload and holds another
            definition's features: an upload of a changed definition is under way.

    """
    if served is not None and generation < served:
        return False
    if served_signature is not None and signature != served_signature:
        raise ValueError("a record newer than the served upload, of another definition: "
                         "an upload of a changed definition is under way. Fix: once it is "
                         "done, serve the new definition")
    return True


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A decoded batch record: body states per feature and raw edge events per series.

    ``generation`` is the writing upload's (:func:`answers_for`).
    """

    day_end: int
    slack: int
    bodies: Mapping[str, Any]  # feature name → its body's state
    edges: Mapping[str, SeriesFolds]  # series → its values and times (none if no events)
    generation: int = 0

    def covers(self, at: int) -> bool:
        """Whether a fetch at ``at`` is exact from this record (plus what came since)."""
        return self.day_end <= at < self.day_end + self.slack

    def state(self, feature: OnlineFeature, at: int, recent: Series | None) -> Any:
        """Return ``feature``'s state at ``at``: body, edge events and ``recent`` events.

        ``recent`` holds the series' events since ``day_end`` (from streaming tiles).
        """
        streamed = {} if recent is None else {feature.series: SeriesFolds(*recent)}
        return self.states([feature], at, streamed)[0]

    def states(self, features: Sequence[OnlineFeature], at: int,
               recent: Mapping[str, SeriesFolds]) -> list[Any]:
        """Return every feature's state at ``at`` (see :meth:`state`).

        Per feature: its body, then its runs of edge and recent events, which features of
        the same series and window find once (O(log n) each). A long run comes mostly as a
        kept state (:class:`~timetile.core.series_folds.SeriesFolds`): from a checkpoint
        when it keeps one end from fetch to fetch (the edge's up to the body, the recent
        events' from the day end), else from blocks. So a hot key folds about ``4 * sqrt(n)``
        of its events per feature (twice that for a run with neither end fixed), not all.
        """
        found: dict[tuple[str, Any], tuple[bool, list[_Run]]] = {}
        states = []
        for feature in features:
            group = (feature.series, feature.window)
            if group not in found:
                found[group] = self._runs(feature, at, recent.get(feature.series))
            use_body, runs = found[group]
            aggregator = feature.aggregator
            state = (self.bodies[feature.name] if use_body and feature.name in self.bodies
                     else aggregator.init())  # a state may be None: max over no events
            rest: list[Series] = []
            for folds, lo, hi, anchor in runs:
                kept, pieces = folds.cover(aggregator, lo, hi, anchor)
                if kept is not None:
                    state = aggregator.merge(state, kept)
                rest += [(folds.values[a:b], folds.times[a:b]) for a, b in pieces]
            if rest:
                state = aggregator.update(state, *_joined(rest))
            states.append(state)
        return states

    def _runs(self, feature: OnlineFeature, at: int,
              recent: SeriesFolds | None) -> tuple[bool, list[_Run]]:
        """Whether the body applies at ``at``, and the runs of edge and recent events to fold.

        Each run is ``(series, lo, hi, anchor)``: positions, and the end that is the same at
        every fetch within the slack (None if neither is).
        """
        low, high = feature.interval(at)
        (body_low, body_high), _ = feature.regions(self.day_end, self.slack)
        use_body = body_low < body_high and low <= body_low and body_high <= high
        runs: list[_Run] = []
        edge = self.edges.get(feature.series)
        end = min(high, self.day_end)
        if edge is not None and len(edge):
            if use_body:  # the edge up to where the body begins, and after the body's end
                lo, hi = edge.span(low, body_low)
                runs.append((edge, lo, hi, hi))
                lo, hi = edge.span(body_high, end)
                runs.append((edge, lo, hi, lo))
            else:
                lo, hi = edge.span(low, end)
                runs.append((edge, lo, hi, hi if end == self.day_end else None))
        if recent is not None and len(recent):
            start = max(low, self.day_end)
            lo, hi = recent.span(start, high)
            runs.append((recent, lo, hi, lo if start == self.day_end else None))
        return use_body, [run for run in runs if run[1] < run[2]]


def _joined(runs: Sequence[Series]) -> Series:
    """Return the events of ``runs`` as one (values, times) pair."""
    if len(runs) == 1:
        return runs[0]
    return (np.concatenate([values for values, _ in runs]),
            np.concatenate([times for _, times in runs]))


def build_record(features: Sequence[OnlineFeature], columns: Mapping[str, Series],
                 day_end: int, slack: int = DEFAULT_SLACK_MS, *, signature: str = "",
                 generation: int = 0) -> bytes:
    """Encode the batch record of one key from its events before ``day_end``.

    ``signature`` names the definition the features come from (the upload's
    ``feature_signature``): a reader of another definition knows the record is not its own.
    ``generation`` is the writing upload's (:func:`answers_for`).

    ``columns`` maps each feature's series to its non-null values and times (as the
    feature's aggregator takes them); events at or after ``day_end`` must not be passed.
    O(events).
    """
    bodies = []
    edge_spans: dict[str, list[tuple[int, int, int, int]]] = {}
    for feature in features:
        values, times = columns[feature.series]
        (body_low, body_high), edge = feature.regions(day_end, slack)
        state = None
        if body_low < body_high:
            inside = _in(times, body_low, body_high)
            state = feature.aggregator.to_bytes(
                feature.aggregator.fold(values[inside], times[inside]))
        bodies.append((feature.name, body_low, body_high, state))
        edge_spans.setdefault(feature.series, []).append((*edge, body_low, body_high))
    edges = []
    for column, spans in edge_spans.items():
        values, times = columns[column]
        keep = np.zeros(len(times), dtype=bool)
        for low, high, body_low, body_high in spans:
            keep |= _in(times, low, high) & ~_in(times, body_low, body_high)
        edges.append((column, *encode_series(values[keep], times[keep])))
    return encode((RECORD_VERSION, day_end, slack, generation, signature, tuple(bodies),
                   tuple(edges)))


def read_record(data: bytes, features: Sequence[OnlineFeature],
                value_types: Mapping[str, np.dtype[Any]], *, signature: str | None = None,
                generation: int | None = None) -> BatchRecord:
    """Decode a record written by :func:`build_record` for the same ``features``.

    ``value_types`` maps each series to the dtype its aggregators take. A record of an
    upload before the served one, ``generation`` (:func:`answers_for`), comes back with no
    bodies and no edges, undecoded: the served upload found no event of its key. So does one
    of an earlier record version (an earlier build's), older than any upload that stamps
    generations.

    Raises:
        ValueError: the bytes are not a record of this version, or are of another
            ``signature`` and not older than ``generation`` (an upload of a changed
            definition is under way).

    """
    try:
        day_end, slack, written_by, written_for, raw_bodies, raw_edges = decode_versioned(
            data, RECORD_VERSION, 6, "a timetile batch record",
            "re-run upload with this timetile version")
    except ValueError:
        if generation is not None and older_version(data, RECORD_VERSION):
            return BatchRecord(0, 0, {}, {}, -1)  # an earlier build's: older than any upload
        raise
    if not answers_for(written_by, written_for, served=generation, served_signature=signature):
        return BatchRecord(day_end, slack, {}, {}, written_by)
    by_name = {feature.name: feature for feature in features}
    bodies = {}
    for name, _, _, state in raw_bodies:  # each body's span is the feature's: regions()
        feature = by_name.get(name)
        if feature is not None and state is not None:
            bodies[name] = feature.aggregator.from_bytes(state)
    edges: dict[str, SeriesFolds] = {}
    for series, kind, times, values in raw_edges:
        if times:  # an edge with no events folds nothing
            edges[series] = SeriesFolds(*decode_series(kind, times, values, value_types[series]))
    return BatchRecord(day_end, slack, bodies, edges, written_by)
