"""The interval join processor (seed 004): transcripts, restarts, and a naive oracle.

Every transcript of ``transcripts/`` is replayed as written, and again with restarts
(snapshot, then restore) before random steps. Random streams of both inputs, out of order
within a lateness and with some rows late, go through every join kind with random restarts:
the output must be, as a multiset, the naive join of the rows that were not late (every pair
of equal keys satisfying the condition, plus the unmatched rows of an outer side,
null-padded) once final watermarks flush the buffers, and the output watermarks must never
go back, nor pass a row output after them.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from timetile.core.interval_join import (
    BufferFullError,
    IntervalJoinProcessor,
    Joined,
    JoinSpec,
    Watermark,
    parse_condition,
)
from timetile.core.interval_join.processor import OUTER_SIDES, joined_at
from timetile.core.interval_join.transcript import check, read_transcript

TRANSCRIPTS = sorted((Path(__file__).parent / "transcripts").glob("*.txt"))


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda path: path.stem)
def test_a_transcript_replays_as_written(path: Path) -> None:
    check(read_transcript(path))


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda path: path.stem)
def test_restarts_anywhere_change_nothing(path: Path) -> None:
    transcript = read_transcript(path)
    rng = random.Random(path.stem)
    steps = range(len(transcript.steps))
    for _ in range(20):
        check(transcript, restarts=rng.sample(steps, rng.randint(1, len(steps))))


def test_a_wrong_expectation_fails_and_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "wrong.txt"
    path.write_text("condition: l.t = r.t\nleft: t\nright: t\n\nl t=0\nr t=0\n> join t=0 | t=1\n")
    with pytest.raises(AssertionError, match=r"wrong.txt:6: expected"):
        check(read_transcript(path))


TIMES = {"l": ["t"], "r": ["t"]}
CONDITIONS = [
    "r.t BETWEEN l.t - 3 AND l.t + 5",
    "l.t = r.t",
    "r.t >= l.t AND r.t < l.t + INTERVAL 10 MILLISECONDS AND l.v > 2",
    "l.t BETWEEN r.t - 4 AND r.t + 4 AND l.v + r.v <> 7",
]


def _stream(rng: random.Random) -> list[tuple[str, Any, ...]]:
    """Rows of both inputs, out of order by up to 6, with watermarks that make some late."""
    steps: list[tuple[str, Any, ...]] = []
    highest = {"l": 0, "r": 0}
    for _ in range(rng.randint(5, 60)):
        alias = rng.choice("lr")
        t = max(0, highest[alias] + rng.randint(-6, 4))
        highest[alias] = max(highest[alias], t)
        key = rng.choice([1, 1, 1, 2, 3, None])
        value = rng.choice([None, *range(6)])
        steps.append(("row", alias, {"k": key, "t": t, "v": value}))
        if rng.random() < 0.25:
            steps.append(("wm", alias, highest[alias] - rng.randint(0, 5)))
    return steps


def _naive(steps: list[tuple[str, Any, ...]], spec: JoinSpec) -> Counter[str]:
    kept = _kept_rows(steps)
    condition, out = spec.condition, Counter[str]()
    used: set[tuple[str, int]] = set()
    for i, left in enumerate(kept["l"]):
        for j, right in enumerate(kept["r"]):
            if left["k"] is not None and left["k"] == right["k"] \
                    and condition.keeps("l", left) and condition.keeps("r", right) \
                    and condition.matches(left, right):
                out[_text(Joined(left, right))] += 1
                used |= {("l", i), ("r", j)}
    for alias in OUTER_SIDES[spec.how]:
        for index, row in enumerate(kept[alias]):
            if (alias, index) not in used:
                padded = Joined(row, None) if alias == "l" else Joined(None, row)
                out[_text(padded)] += 1
    return out


def _text(output: Joined) -> str:
    return repr((output.left and sorted(output.left.items()),
                 output.right and sorted(output.right.items())))


@pytest.mark.parametrize("how", list(OUTER_SIDES))
@pytest.mark.parametrize("condition", CONDITIONS)
def test_random_streams_with_restarts_equal_the_naive_join(how: str, condition: str) -> None:
    spec = JoinSpec(parse_condition(condition, TIMES), TIMES, keys=[("k", "k")], how=how)
    for seed in range(50):
        rng = random.Random(seed)
        steps = _stream(rng)
        processor = IntervalJoinProcessor(spec)
        rows: Counter[str] = Counter()
        emitted: dict[tuple[str, str], int] = {}
        for kind, alias, payload in [*steps, ("wm", "l", 10**6), ("wm", "r", 10**6)]:
            if rng.random() < 0.2:
                processor = IntervalJoinProcessor.restore(spec, processor.snapshot())
            outputs = (processor.row(alias, payload) if kind == "row"
                       else processor.watermark((alias, "t"), payload))
            for output in outputs:
                if isinstance(output, Watermark):
                    assert output.value > emitted.get(output.field, output.value - 1), seed
                    emitted[output.field] = output.value
                    continue
                rows[_text(output)] += 1
                for side, row in (("l", output.left), ("r", output.right)):
                    if row is not None and (side, "t") in emitted:
                        assert row["t"] >= emitted[(side, "t")], (seed, output, emitted)
        assert rows == _naive(steps, spec), seed
        assert processor.buffered == 0, seed
        late = processor.counts.late
        assert processor.counts.rows == sum(kind == "row" for kind, _, _ in steps)
        assert late == processor.counts.rows - sum(
            len(v) for v in _kept_rows(steps).values()), seed


def _kept_rows(steps: list[tuple[str, Any, ...]]) -> dict[str, list[Any]]:
    """The rows of each input that no earlier watermark of their time had passed."""
    received: dict[str, int] = {}
    kept: dict[str, list[Any]] = {"l": [], "r": []}
    for kind, alias, payload in steps:
        if kind == "wm":
            received[alias] = max(received.get(alias, payload), payload)
        elif alias not in received or payload["t"] >= received[alias]:
            kept[alias].append(payload)
    return kept


def test_a_full_buffer_fails_with_the_fix_and_changes_nothing() -> None:
    spec = JoinSpec(parse_condition("l.t = r.t", TIMES), TIMES, how="left", max_buffered=2)
    processor = IntervalJoinProcessor(spec)
    processor.row("l", {"t": 1})
    processor.row("l", {"t": 2})
    before = processor.snapshot()
    with pytest.raises(BufferFullError, match=r"max_buffered.*Fix: raise max_buffered"):
        processor.row("r", {"t": 1})
    assert processor.snapshot() == before
    # the left row that would have joined is still unused: padded once it is settled
    assert processor.watermark(("r", "t"), 5) == [Joined({"t": 1}, None), Joined({"t": 2}, None)]


def test_each_output_row_is_timed_when_it_is_certain() -> None:
    spec = JoinSpec(parse_condition("r.t BETWEEN l.t - 2 AND l.t + 10", TIMES), TIMES)
    assert joined_at(spec, Joined({"t": 5}, {"t": 3})) == 5
    assert joined_at(spec, Joined({"t": 5}, {"t": 14})) == 14
    assert joined_at(spec, Joined({"t": 5}, None)) == 15  # no right row past 15 can match
    assert joined_at(spec, Joined(None, {"t": 5})) == 7  # nor a left row past 7
    assert joined_at(spec, Joined({"t": None}, None)) is None


def test_bad_arguments_are_named() -> None:
    condition = parse_condition("l.t = r.t", TIMES)
    with pytest.raises(ValueError, match="how is 'outer': use one of inner, left"):
        JoinSpec(condition, TIMES, how="outer")
    processor = IntervalJoinProcessor(JoinSpec(condition, TIMES))
    with pytest.raises(ValueError, match="alias is 'x'"):
        processor.row("x", {"t": 1})
    with pytest.raises(ValueError, match="no watermarked field"):
        processor.watermark(("l", "u"), 1)
    with pytest.raises(ValueError, match="snapshot version"):
        IntervalJoinProcessor.restore(processor.spec, {"version": 0})


@pytest.mark.parametrize("seed", range(20))
def test_next_eviction_is_the_least_watermark_that_moves_a_buffered_row_out(seed: int) -> None:
    rng = random.Random(seed)
    times = {"l": ["t"], "r": ["t"]}
    condition = parse_condition(rng.choice(["r.t BETWEEN l.t AND l.t + 10",
                                            "r.t BETWEEN l.t - 3 AND l.t + 7",
                                            "l.t >= r.t - 5 AND r.t >= l.t - 2"]), times)
    spec = JoinSpec(condition, times, [("k", "k")], "full")
    join = IntervalJoinProcessor(spec)
    for _ in range(12):
        join.row(rng.choice("lr"), {"k": rng.randrange(3), "t": rng.randrange(40)})
    due = join.next_eviction()
    assert due is not None
    before = IntervalJoinProcessor.restore(spec, join.snapshot())
    for time_field in spec.fields:
        before.watermark(time_field, due - 1)
    assert before.buffered == join.buffered  # one less moves nothing out
    for time_field in spec.fields:
        join.watermark(time_field, due)
    assert join.buffered < before.buffered
