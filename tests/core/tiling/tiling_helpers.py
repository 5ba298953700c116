"""Test-only helpers for the tiling tests: an order-revealing aggregator and random leaves."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from timetile.core.aggregators import Aggregator, codec, make_aggregator
from timetile.core.types import ResultType, Shape, ValueType

#: Ops the structure stress tests run: cheap, order-sensitive, multiset and sketch states.
STRESS_OPS = ("sum", "max", "first", "last_k", "unique_count", "approx_unique_count")
INVERTIBLE_OPS = ("count", "sum", "avg", "unique_count", "histogram")


class Concat(Aggregator[tuple[int, ...]]):
    """Every value in arrival order: merge is concatenation, so any reordering shows."""

    op: ClassVar[str] = "concat"

    def result_type(self) -> ResultType:
        return ResultType(ValueType.INT, Shape.ARRAY)

    def init(self) -> tuple[int, ...]:
        return ()

    def update(self, state: tuple[int, ...], values: Any, times: Any) -> tuple[int, ...]:
        return state + tuple(int(v) for v in values.tolist())

    def merge(self, left: tuple[int, ...], right: tuple[int, ...]) -> tuple[int, ...]:
        return left + right

    def finalize(self, state: tuple[int, ...]) -> list[int]:
        return list(state)

    def to_bytes(self, state: tuple[int, ...]) -> bytes:
        return codec.encode(state)

    def from_bytes(self, data: bytes) -> tuple[int, ...]:
        decoded = codec.expect_tuple(codec.decode(data), "concat")
        return tuple(codec.expect_int(item, "concat item") for item in decoded)


def aggregator(op: str) -> Aggregator[Any]:
    """The op over an INT column (``concat`` is :class:`Concat`)."""
    if op == "concat":
        return Concat(ValueType.INT)
    return make_aggregator(op, ValueType.INT, k=3, percentiles=(0.5,))


def random_batches(
    rng: np.random.Generator, count: int, max_size: int = 3, value_range: int = 100
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` small (values, times) batches, some empty, many ties in value and time."""
    out = []
    for _ in range(count):
        size = int(rng.integers(0, max_size + 1))
        values = rng.integers(-value_range, value_range, size=size).astype(np.int64)
        times = np.sort(rng.integers(0, 50, size=size)).astype(np.int64)
        out.append((values, times))
    return out


def fold_range(agg: Aggregator[Any], parts: list[tuple[np.ndarray, np.ndarray]]) -> Any:
    """The brute force: one fold of the concatenated batches."""
    if not parts:
        return agg.init()
    values = np.concatenate([values for values, _ in parts])
    times = np.concatenate([times for _, times in parts])
    return agg.fold(values, times)


def random_ranges(rng: np.random.Generator, n: int, count: int) -> list[tuple[int, int]]:
    """Random ``[lo, hi)`` in ``[0, n]``, with empty, reversed, full and one-element ranges."""
    ranges = [(0, n), (0, 0), (n, n)]
    if n:
        ranges += [(0, 1), (n - 1, n), (n, 0)]
    for _ in range(count):
        lo, hi = (int(x) for x in rng.integers(0, n + 1, size=2))
        ranges.append((min(lo, hi), max(lo, hi)) if rng.random() < 0.9 else (lo, hi))
    return ranges


class MergeCounter:
    """Counts the merges of an aggregator: ``counter.calls`` since the last ``reset()``."""

    def __init__(self, agg: Aggregator[Any]) -> None:
        self.calls = 0
        merge = agg.merge

        def counting(left: Any, right: Any) -> Any:
            self.calls += 1
            return merge(left, right)

        agg.merge = counting  # type: ignore[method-assign]

    def reset(self) -> int:
        """Return the merges counted so far, and start again from zero."""
        calls, self.calls = self.calls, 0
        return calls
