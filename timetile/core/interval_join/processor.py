"""The stream-to-stream interval join processor of seed 004, engine-free.

Rows and watermarks go in; joined rows, null-padded rows and watermarks come out, each as
soon as it is certain:

- A row is joined at once with every buffered row of the other input that has the same key
  and satisfies the condition. It is buffered while a row still to come could match it.
- A row leaves its buffer when any of its bounded fields falls below that field's limit in
  ``wm_state`` (seed 004's ``wmState``: per bounded field ``a`` and field ``b`` of the other
  input, the watermark of ``b`` less the bound's postpone time). An outer side's row that
  never joined is then emitted null-padded.
- A row that cannot match any row still to come (below a limit on arrival), or whose key is
  null, or that fails its input's own conjuncts, is joined with what is buffered and never
  buffered: an outer side's unmatched row is null-padded at once.
- A row with a watermarked field below that field's last received watermark is late:
  counted in :attr:`Counts.late` and dropped, never silently.
- The output watermark of a field is the fault-tolerant one of seed 004:
  ``min(last received, limit)``, where the limit of a bounded field is its ``wm_state`` and
  that of a field with no bound is the smallest value of it in the buffer. A watermark is
  emitted only when it rises; the last emitted is saved in snapshots, so it never goes back.

:meth:`IntervalJoinProcessor.snapshot` saves the buffers with each row's used flag, the
watermarks received and emitted, and the counts; :meth:`IntervalJoinProcessor.restore`
continues from them exactly: no joined row twice, no null-padded row for a row that joined.

Complexity: a row costs O(b) for the b buffered rows of its key on the other input; a
watermark O(B) for all B buffered rows. Memory is the buffered rows, at most
``max_buffered`` (seed 004's ``setMaxProcessorAccumulatedRecords``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from timetile.core.interval_join.condition import LEFT, RIGHT, Field, JoinCondition, Row

#: Join kinds and the inputs whose unmatched rows are kept, null-padded.
OUTER_SIDES = {"inner": (), "left": (LEFT,), "right": (RIGHT,), "full": (LEFT, RIGHT)}
SNAPSHOT_VERSION = 1


class BufferFullError(RuntimeError):
    """More rows are buffered than the join allows."""


@dataclass(frozen=True)
class JoinSpec:
    """What a processor joins.

    Attributes:
        condition: the parsed condition (its bounds, filters and predicate).
        time_fields: per alias (``l``, ``r``), the watermarked time columns of that input.
        keys: (left column, right column) pairs that must be equal (and not null).
        how: ``inner``, ``left``, ``right`` or ``full``.
        max_buffered: the most rows both buffers may hold together, or None for no limit.

    """

    condition: JoinCondition
    time_fields: Mapping[str, Sequence[str]]
    keys: Sequence[tuple[str, str]] = ()
    how: str = "inner"
    max_buffered: int | None = None

    def __post_init__(self) -> None:
        if self.how not in OUTER_SIDES:
            raise ValueError(f"how is {self.how!r}: use one of {', '.join(OUTER_SIDES)}")
        if self.max_buffered is not None and self.max_buffered < 1:
            raise ValueError(f"max_buffered is {self.max_buffered!r}: give a positive count "
                             "of rows, or None for no limit")

    @property
    def fields(self) -> list[Field]:
        """Every watermarked field, left input first, in declared order."""
        return [(alias, name) for alias in (LEFT, RIGHT) for name in self.time_fields[alias]]


@dataclass(frozen=True)
class Joined:
    """An output row: both inputs' rows, or one of them and None (null-padded)."""

    left: Row | None
    right: Row | None


@dataclass(frozen=True)
class Watermark:
    """An input or output watermark: no row to come has ``field`` below ``value``."""

    field: Field
    value: int


Output = Joined | Watermark


@dataclass
class Counts:
    """What a processor did with its input rows."""

    rows: int = 0
    late: int = 0  # below a watermark on arrival: dropped
    joined: int = 0  # joined output rows
    padded: int = 0  # null-padded output rows


@dataclass
class _Entry:
    row: Row
    used: bool = False


@dataclass
class _State:
    received: dict[Field, int] = field(default_factory=dict)
    emitted: dict[Field, int] = field(default_factory=dict)
    limits: dict[Field, dict[Field, int]] = field(default_factory=dict)  # wm_state
    buffers: dict[str, dict[tuple[Any, ...], list[_Entry]]] = field(
        default_factory=lambda: {LEFT: {}, RIGHT: {}})
    counts: Counts = field(default_factory=Counts)
    size: int = 0  # rows in both buffers


def joined_at(spec: JoinSpec, output: Joined) -> int | None:
    """Return when an output row is certain, its time as a feature source (no leak).

    A joined row is certain once both its rows exist: at the latest of their times. A
    null-padded row once no row of the other input can still match it: at the least
    ``row[field] + c`` over its input's bounds (:meth:`JoinCondition.settled_after`). None
    when the times it needs are null.

    >>> from timetile.core.interval_join.condition import parse_condition
    >>> times = {"l": ["t"], "r": ["t"]}
    >>> spec = JoinSpec(parse_condition("r.t BETWEEN l.t AND l.t + 60", times), times)
    >>> joined_at(spec, Joined({"t": 0}, {"t": 40})), joined_at(spec, Joined({"t": 0}, None))
    (40, 60)
    """
    if output.left is not None and output.right is not None:
        times = [row.get(name) for alias, row in ((LEFT, output.left), (RIGHT, output.right))
                 for name in spec.time_fields[alias]]
        present = [time for time in times if time is not None]
        return max(present) if present else None
    alias, row = (LEFT, output.left) if output.left is not None else (RIGHT, output.right)
    assert row is not None
    settled = [row[field[1]] + c for field, c in spec.condition.settled_after(alias)
               if row.get(field[1]) is not None]
    return min(settled) if settled else None


class IntervalJoinProcessor:
    """Seed 004's stream-to-stream join processor; see the module docstring.

    >>> from timetile.core.interval_join.condition import parse_condition
    >>> times = {"l": ["t"], "r": ["t"]}
    >>> join = IntervalJoinProcessor(JoinSpec(parse_condition("l.t = r.t", times), times,
    ...                                       how="left"))
    >>> join.row("l", {"t": 0})
    []
    >>> join.row("r", {"t": 0})
    [Joined(left={'t': 0}, right={'t': 0})]
    >>> join.watermark(("l", "t"), 1)  # the right row leaves; l.t waits for r.t's watermark
    []
    >>> join.watermark(("r", "t"), 1)
    [Watermark(field=('l', 't'), value=1), Watermark(field=('r', 't'), value=1)]

    """

    def __init__(self, spec: JoinSpec) -> None:
        self.spec = spec
        self._outer = OUTER_SIDES[spec.how]
        self._bounded = {alias: spec.condition.bounded(alias) for alias in (LEFT, RIGHT)}
        self._state = _State(limits={bound.later: {} for bound in spec.condition.bounds})

    @property
    def counts(self) -> Counts:
        """The rows seen, dropped as late, joined and null-padded so far."""
        return self._state.counts

    @property
    def buffered(self) -> int:
        """How many rows both buffers hold."""
        return self._state.size

    def next_eviction(self) -> int | None:
        """Return the least watermark that, given to every field, moves a buffered row out.

        A buffered row leaves once a bounded field of it falls below that field's limit:
        ``row[x] < w - c`` for the smallest postpone time ``c`` of a bound on ``x``, so at
        ``w = row[x] + c + 1``. None when nothing is buffered. An engine with one watermark
        for every field (Spark's) sets its timer here. O(B) for the B buffered rows.
        """
        times = [entry.row[later[1]] + c + 1
                 for alias in (LEFT, RIGHT)
                 for entries in self._state.buffers[alias].values() for entry in entries
                 for later, c in self.spec.condition.settled_after(alias)]
        return min(times) if times else None

    def row(self, alias: str, row: Row) -> list[Output]:
        """Take a row of input ``alias`` (``l`` or ``r``); return what it lets out."""
        if alias not in (LEFT, RIGHT):
            raise ValueError(f"alias is {alias!r}: use 'l' (left) or 'r' (right)")
        state = self._state
        received = state.received
        late = any(row.get(name) is not None and (alias, name) in received
                   and row[name] < received[(alias, name)]
                   for name in self.spec.time_fields[alias])
        key = self._key(alias, row)
        kept = not late and key is not None and self.spec.condition.keeps(alias, row)
        if kept and self._waits(alias, row):
            self._check_room()  # before any change: a full buffer leaves the state as it was
        state.counts.rows += 1
        if late:
            state.counts.late += 1
            return []
        entry = _Entry(row)
        out: list[Output] = []
        if kept and key is not None:
            other = RIGHT if alias == LEFT else LEFT
            for buffered in state.buffers[other].get(key, ()):
                pair = (row, buffered.row) if alias == LEFT else (buffered.row, row)
                if self.spec.condition.joins(*pair):
                    entry.used = buffered.used = True
                    out.append(Joined(*pair))
            if self._waits(alias, row):
                self._buffer(alias, key, entry)
                state.counts.joined += len(out)
                return out
        state.counts.joined += len(out)
        if not entry.used and alias in self._outer:
            out.append(self._padded(alias, row))
        return out

    def watermark(self, time_field: Field, value: int) -> list[Output]:
        """Take a watermark of one input's time field; return the rows and watermarks out."""
        if time_field not in self.spec.fields:
            raise ValueError(f"{time_field!r} is no watermarked field: use one of "
                             f"{self.spec.fields}")
        state = self._state
        if time_field in state.received and value <= state.received[time_field]:
            return []
        state.received[time_field] = value
        for later, postpone in self.spec.condition.postponements(time_field):
            limits = state.limits[later]
            limits[time_field] = max(limits.get(time_field, value - postpone), value - postpone)
        out: list[Output] = []
        for alias in (LEFT, RIGHT):
            out += self._evict(alias)
        for watched in self.spec.fields:
            level = self._output_level(watched)
            if level is not None and level > state.emitted.get(watched, level - 1):
                state.emitted[watched] = level
                out.append(Watermark(watched, level))
        return out

    def snapshot(self, *, deep: bool = True) -> dict[str, Any]:
        """Return the whole state as plain values (rows as given), to :meth:`restore` from.

        ``deep=False`` shares the buffered rows instead of copying them: for a caller that
        serializes the snapshot before the processor changes (O(B) saved either way).
        """
        state = self._state
        snapshot = {
            "version": SNAPSHOT_VERSION,
            "received": [[list(k), v] for k, v in state.received.items()],
            "emitted": [[list(k), v] for k, v in state.emitted.items()],
            "limits": [[list(later), [[list(e), v] for e, v in limits.items()]]
                       for later, limits in state.limits.items()],
            "buffers": {alias: [[dict(entry.row), entry.used] for entries in buffer.values()
                                for entry in entries]
                        for alias, buffer in state.buffers.items()},
            "counts": dict(vars(state.counts)),
        }
        return copy.deepcopy(snapshot) if deep else snapshot

    @classmethod
    def restore(cls, spec: JoinSpec, snapshot: Mapping[str, Any], *,
                deep: bool = True) -> IntervalJoinProcessor:
        """Return a processor that continues exactly where ``snapshot`` was taken.

        ``deep=False`` takes the snapshot's rows as they are, for a snapshot no one else
        holds (one just deserialized).
        """
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version {snapshot.get('version')!r} is not "
                             f"{SNAPSHOT_VERSION}: restart the join from its inputs")
        processor = cls(spec)
        state, saved = processor._state, copy.deepcopy(dict(snapshot)) if deep else snapshot
        state.received = {(k[0], k[1]): v for k, v in saved["received"]}
        state.emitted = {(k[0], k[1]): v for k, v in saved["emitted"]}
        for later, limits in saved["limits"]:
            state.limits[(later[0], later[1])] = {(e[0], e[1]): v for e, v in limits}
        for alias, entries in saved["buffers"].items():
            for row, used in entries:
                key = processor._key(alias, row)
                if key is None:
                    raise ValueError(f"snapshot buffers a row of {alias} without its keys "
                                     f"({row!r}): restart the join from its inputs")
                processor._buffer(alias, key, _Entry(row, used))
        state.counts = Counts(**saved["counts"])
        return processor

    def _key(self, alias: str, row: Row) -> tuple[Any, ...] | None:
        position = 0 if alias == LEFT else 1
        key = tuple(row.get(pair[position]) for pair in self.spec.keys)
        return None if any(value is None for value in key) else key

    def _below_limit(self, alias: str, row: Row) -> bool:
        """Tell whether a bounded field of the row is below its limit (or null)."""
        for later in self._bounded[alias]:
            value, limits = row.get(later[1]), self._state.limits[later]
            if value is None or (limits and value < max(limits.values())):
                return True
        return False

    def _waits(self, alias: str, row: Row) -> bool:
        return not self._below_limit(alias, row)

    def _check_room(self) -> None:
        limit = self.spec.max_buffered
        if limit is not None and self._state.size >= limit:
            raise BufferFullError(
                f"the interval join buffers {limit:,} rows, its max_buffered: watermarks lag "
                "too far behind the rows, or the time bounds are wide for this traffic. Fix: "
                "raise max_buffered, narrow the bounds, or send watermarks more often")

    def _buffer(self, alias: str, key: tuple[Any, ...], entry: _Entry) -> None:
        self._state.buffers[alias].setdefault(key, []).append(entry)
        self._state.size += 1

    def _evict(self, alias: str) -> list[Output]:
        out: list[Output] = []
        buffer = self._state.buffers[alias]
        for key in list(buffer):
            kept = []
            for entry in buffer[key]:
                if not self._below_limit(alias, entry.row):
                    kept.append(entry)
                    continue
                self._state.size -= 1
                if not entry.used and alias in self._outer:
                    out.append(self._padded(alias, entry.row))
            if kept:
                buffer[key] = kept
            else:
                del buffer[key]
        return out

    def _output_level(self, watched: Field) -> int | None:
        state = self._state
        received = state.received.get(watched)
        if received is None:
            return None
        if watched in state.limits:  # a bounded field: min(last received, wm_state)
            limits = state.limits[watched]
            return min(received, max(limits.values())) if limits else None
        values: list[int] = [entry.row[watched[1]] for entries in state.buffers[watched[0]].values()
                  for entry in entries if entry.row.get(watched[1]) is not None]
        return min([received, *values])

    def _padded(self, alias: str, row: Row) -> Joined:
        self._state.counts.padded += 1
        return Joined(row, None) if alias == LEFT else Joined(None, row)
