"""Interval join transcripts: a join, its inputs step by step, and what must come out.

A transcript is a text file (STYLE 7), read by :func:`read_transcript`::

    # seed 004's worked example: join2 of orders (o), deliveries (d) and returns (t)
    condition: r.t BETWEEN l.d - 1 AND l.d + 4
    how: inner                # inner (the default), left, right or full
    left: o d                 # the left input's watermarked time fields
    right: t                  # the right input's
    keys: user=user           # optional: equi-keys, left column = right column
    max_buffered: 100         # optional: the cap on buffered rows

    l o=102 d=101             # a row of the left input: column=value ...
    wm l.o 103                # a watermark of one field
    > wm l.o 102              # an output watermark
    r t=100
    > join o=102 d=101 | t=100    # a joined row: left | right; "null" for a padded side
    restart                   # snapshot, then continue on a processor restored from it
    = late=0 buffered=1       # counts so far: rows, late, joined, padded, buffered

The header (``name: value`` lines) comes first; ``#`` starts a comment. The ``>`` lines after
an input line are everything that input lets out, in any order. Values are JSON (``102``,
``"a b"``, ``null``, ``true``); a bare word is a string.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from timetile.core.interval_join.condition import LEFT, RIGHT, parse_condition
from timetile.core.interval_join.processor import (
    BufferFullError,
    IntervalJoinProcessor,
    Joined,
    JoinSpec,
    Output,
    Watermark,
)


class TranscriptError(ValueError):
    """A transcript that cannot be read; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Step:
    """One line of input (a row, a watermark, a restart or a counts check) and its outputs."""

    line: int
    kind: str  # "row", "watermark", "restart" or "counts"
    text: str = ""  # the line as written, without its comment
    alias: str = ""
    row: dict[str, Any] = field(default_factory=dict)
    time_field: tuple[str, str] = ("", "")
    value: int = 0
    expected: tuple[Output, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Transcript:
    """A parsed transcript: the join it runs and its steps."""

    path: str
    spec: JoinSpec
    steps: tuple[Step, ...]


def read_transcript(path: str | Path) -> Transcript:
    """Parse a transcript file (format in the module docstring).

    Raises:
        TranscriptError: naming the line and the fix.

    """
    name = str(path)
    header: dict[str, str] = {}
    steps: list[Step] = []
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        text = _uncommented(raw).strip()
        if not text:
            continue
        where = f"{name}:{number}"
        if not steps and ":" in text.split()[0] and not text.startswith((">", "=")):
            key, _, value = text.partition(":")
            header[key.strip()] = value.strip()
            continue
        if text.startswith(">"):
            if not steps or steps[-1].kind not in ("row", "watermark"):
                raise TranscriptError(f"{where}: an output line follows no input line. Fix: "
                                      "put it after the row or watermark that lets it out")
            last = steps[-1]
            try:
                output = _output(text[1:], where)
            except ValueError as error:
                raise TranscriptError(f"{where}: {text!r}: {error}") from None
            steps[-1] = Step(**{**vars(last), "expected": (*last.expected, output)})
        else:
            try:
                step = _input(text, number, where)
            except ValueError as error:  # a number that is none
                raise TranscriptError(f"{where}: {text!r}: {error}") from None
            steps.append(Step(**{**vars(step), "text": text}))
    try:
        spec = _spec(header, name)
    except ValueError as error:  # the condition, the kind or the cap (ConditionError too)
        raise TranscriptError(f"{name}: the header: {error}") from None
    return Transcript(name, spec, tuple(steps))


def _uncommented(line: str) -> str:
    quoted = False
    for index, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == "#" and not quoted:
            return line[:index]
    return line


def _spec(header: dict[str, str], name: str) -> JoinSpec:
    missing = [key for key in ("condition", "left", "right") if key not in header]
    if missing:
        raise TranscriptError(f"{name}: the header lacks {', '.join(missing)}. Fix: start the "
                              "file with condition:, left: and right: lines")
    times = {LEFT: header["left"].split(), RIGHT: header["right"].split()}
    keys = [tuple(pair.split("=", 1)) for pair in header.get("keys", "").split()]
    if any(len(pair) != 2 for pair in keys):
        raise TranscriptError(f"{name}: keys {header['keys']!r}: write left=right pairs")
    cap = header.get("max_buffered")
    return JoinSpec(parse_condition(header["condition"], times), times,
                    [(k[0], k[1]) for k in keys], header.get("how", "inner"),
                    None if cap is None else int(cap))


def _values(tokens: Iterable[str], where: str) -> dict[str, Any]:
    row = {}
    for token in tokens:
        column, equals, text = token.partition("=")
        if not equals or not column:
            raise TranscriptError(f"{where}: {token!r} is not column=value")
        try:
            row[column] = json.loads(text)
        except json.JSONDecodeError:
            row[column] = text
    return row


def _field(text: str, where: str) -> tuple[str, str]:
    alias, dot, column = text.partition(".")
    if not dot or alias not in (LEFT, RIGHT) or not column:
        raise TranscriptError(f"{where}: {text!r} is no field: write l.<column> or r.<column>")
    return alias, column


def _input(text: str, number: int, where: str) -> Step:
    tokens = shlex.split(text, posix=False)
    head = tokens[0]
    if head in (LEFT, RIGHT):
        return Step(number, "row", alias=head, row=_values(tokens[1:], where))
    if head == "wm" and len(tokens) == 3:
        return Step(number, "watermark", time_field=_field(tokens[1], where),
                    value=int(tokens[2]))
    if head == "restart" and len(tokens) == 1:
        return Step(number, "restart")
    if head == "=":
        return Step(number, "counts", counts={k: int(v) for k, v in
                                              _values(tokens[1:], where).items()})
    raise TranscriptError(f"{where}: {text!r} is no step. Fix: write 'l col=value ...', "
                          "'r col=value ...', 'wm l.col N', 'restart' or '= late=N ...'")


def _output(text: str, where: str) -> Output:
    tokens = shlex.split(text.strip(), posix=False)
    if tokens[:1] == ["wm"] and len(tokens) == 3:
        return Watermark(_field(tokens[1], where), int(tokens[2]))
    if tokens[:1] == ["join"] and "|" in tokens:
        bar = tokens.index("|")
        sides = [tokens[1:bar], tokens[bar + 1:]]
        left, right = (None if side == ["null"] else _values(side, where) for side in sides)
        return Joined(left, right)
    raise TranscriptError(f"{where}: {text!r} is no output. Fix: write '> join a=1 | b=2', "
                          "'> join a=1 | null' or '> wm l.col N'")


def replay(transcript: Transcript, restarts: Iterable[int] = ()) -> list[list[Output]]:
    """Run the transcript through a processor; return each step's outputs.

    ``restarts`` names more step indexes (0-based) before which the processor is snapshotted
    and restored, as the transcript's own ``restart`` lines are.

    Raises:
        TranscriptError: a step the processor refuses (a field of no input, a full buffer).
        AssertionError: a ``=`` counts line that does not hold.

    """
    extra = set(restarts)
    processor = IntervalJoinProcessor(transcript.spec)
    produced: list[list[Output]] = []
    for index, step in enumerate(transcript.steps):
        if index in extra or step.kind == "restart":
            processor = IntervalJoinProcessor.restore(transcript.spec, processor.snapshot())
        try:
            if step.kind == "row":
                produced.append(processor.row(step.alias, step.row))
            elif step.kind == "watermark":
                produced.append(processor.watermark(step.time_field, step.value))
        except (ValueError, BufferFullError) as error:  # a field of no input, a full buffer
            raise TranscriptError(f"{transcript.path}:{step.line}: {error}") from None
        if step.kind in ("row", "watermark"):
            continue
        produced.append([])
        if step.kind == "counts":
            _check_counts(transcript, step, processor)
    return produced


def settled(transcript: Transcript, end: int) -> tuple[dict[str, list[dict[str, Any]]],
                                                     list[Joined]]:
    """Replay the transcript's rows and watermarks, then raise every field's watermark to ``end``.

    Returns the rows the processor did not drop as late, per input (``l``, ``r``), and every
    joined and null-padded row it let out: what a join of those rows alone gives once no row
    can still match (the batch join; the streaming join once its watermark passes ``end``).
    O(steps) processor calls.
    """
    processor = IntervalJoinProcessor(transcript.spec)
    kept: dict[str, list[dict[str, Any]]] = {LEFT: [], RIGHT: []}
    outputs: list[Output] = []
    for step in transcript.steps:
        if step.kind == "row":
            late = processor.counts.late
            outputs += processor.row(step.alias, step.row)
            if processor.counts.late == late:
                kept[step.alias].append(step.row)
        elif step.kind == "watermark":
            outputs += processor.watermark(step.time_field, step.value)
    for time_field in transcript.spec.fields:
        outputs += processor.watermark(time_field, end)
    return kept, [output for output in outputs if isinstance(output, Joined)]


def check(transcript: Transcript, restarts: Iterable[int] = ()) -> None:
    """Replay the transcript and raise AssertionError at the first step that differs."""
    for step, outputs in zip(transcript.steps, replay(transcript, restarts), strict=True):
        if Counter(map(describe, outputs)) != Counter(map(describe, step.expected)):
            raise AssertionError(
                f"{transcript.path}:{step.line}: expected "
                f"{sorted(map(describe, step.expected))}, got {sorted(map(describe, outputs))}")


def _check_counts(transcript: Transcript, step: Step, processor: IntervalJoinProcessor) -> None:
    actual = {name: processor.buffered if name == "buffered" else getattr(processor.counts, name)
              for name in step.counts}
    if actual != step.counts:
        raise AssertionError(f"{transcript.path}:{step.line}: expected counts {step.counts}, "
                             f"got {actual}")


def describe(output: Output) -> str:
    """Write an output as a transcript's ``>`` line does (for comparing and printing).

    >>> describe(Watermark(("l", "t"), 3)), describe(Joined({"t": 1}, None))
    ('wm l.t 3', 'join t=1 | null')
    """
    if isinstance(output, Watermark):
        return f"wm {output.field[0]}.{output.field[1]} {output.value}"

    def side(row: Any) -> str:
        return "null" if row is None else " ".join(
            f"{k}={json.dumps(v)}" for k, v in sorted(row.items()))
    return f"join {side(output.left)} | {side(output.right)}"
