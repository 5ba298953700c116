"""Cutting windows into hop-aligned pieces, and choosing the hop size (DESIGN §4, seed 000).

For a hop size ``H``, hop ``h`` (a multiple of ``H``) holds the events in ``[h, h + H)``. A
window ``[s, e)`` with ``s < e`` is, in time order:

- a **tail edge** ``[s, floor(s, H) + H)``: the end of hop ``floor(s, H)``; absent when ``s``
  is aligned or the window is a lifetime one (``s == MIN_TIME``);
- a **tail**: the whole hops with starts in ``[tail_lo, tail_hi)``, ``tail_lo = ceil(s, H)``
  (``MIN_TIME`` for lifetime windows), ``tail_hi = floor(e, H)``; possibly none;
- a **head** ``[floor(e, H), e)``: the start of hop ``floor(e, H)``; absent when ``e`` is
  aligned;

except when ``s`` and ``e`` fall inside the same hop with ``s`` not aligned: then the window is
one **inner** piece ``[s, e)`` of hop ``floor(e, H)``, neither a prefix nor a suffix of it. An
empty window (``s >= e``) has no piece at all.

Tails come from hop partials, heads from prefix scans and edges from suffix scans of one hop's
events (:mod:`.scans`), so no step needs more than one hop of raw events of one key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from timetile.core.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, SECOND_MS
from timetile.core.windows import ARRAYS, MIN_TIME, TimeArithmetic, WindowKind

Int64s = npt.NDArray[np.int64]
T = TypeVar("T")

#: Hop sizes :func:`choose_hop` prefers, largest first: 1d, 1h, 5m, 1m, 1s.
HOP_LADDER_MS: tuple[int, ...] = (DAY_MS, HOUR_MS, 5 * MINUTE_MS, MINUTE_MS, SECOND_MS)

#: A sliding window of length ``L`` gets a hop of at most ``L / SLIDING_HOPS``, so its head
#: and tail edge (raw events, scanned per query) span at most a quarter of the window each.
SLIDING_HOPS = 4


@dataclass(frozen=True)
class WindowPieces(Generic[T]):
    """The pieces of each window ``[starts[i], ends[i])`` for hop size ``hop_ms``.

    Every field is aligned with the windows: int64 arrays from :func:`split_windows`, Spark
    columns from :func:`window_pieces` with ``timetile.spark.time_columns.COLUMNS``. Flags
    say which pieces a window has; the times beside them are only meaningful where the flag
    is set.

    Attributes:
        hop_ms: the hop size ``H``.
        starts: window starts (``MIN_TIME`` for lifetime windows).
        ends: window ends (exclusive).
        edge: whether the window has a tail edge ``[starts[i], edge_hop[i] + H)``.
        edge_hop: ``floor(s, H)``, the hop holding the edge (``MIN_TIME`` for lifetime).
        tail_lo: the first tail hop, ``ceil(s, H)`` (``MIN_TIME`` for lifetime windows).
        tail_hi: one past the last tail hop, ``floor(e, H)``; the tail is the hops ``h`` with
            ``tail_lo <= h < tail_hi``, none when ``tail_lo >= tail_hi`` (always so for inner
            and empty windows).
        head: whether the window has a head ``[head_hop[i], ends[i])``.
        head_hop: ``floor(e, H)``, the hop holding the head or the inner piece.
        inner: whether the window is one inner piece ``[starts[i], ends[i])`` of hop
            ``head_hop[i]`` (then it has no edge, tail or head).

    """

    hop_ms: int
    starts: T
    ends: T
    edge: Any
    edge_hop: T
    tail_lo: T
    tail_hi: T
    head: Any
    head_hop: T
    inner: Any

    def __len__(self) -> int:
        """Return the number of windows (of arrays)."""
        return len(self.starts)  # type: ignore[arg-type]


def window_pieces(times: TimeArithmetic[T], starts: T, ends: T, hop_ms: int) -> WindowPieces[T]:
    """Cut each window ``[starts, ends)`` into edge, tail and head (or one inner piece).

    The rule of the module docstring, once, over a :class:`~timetile.core.windows.
    TimeArithmetic` of many windows at a time: int64 arrays for the kernels, Spark columns
    for the tiled executor's plan (not Python ints: the flags combine with ``&`` and ``~``,
    elementwise on arrays and columns, bitwise on a bool). A start of ``MIN_TIME`` marks a
    lifetime window. Floors and ceilings saturate at
    the ends of int64, so nothing overflows. O(n) for n windows.

    Raises:
        ValueError: if ``hop_ms`` is not positive.

    """
    if hop_ms <= 0:
        raise ValueError(f"the hop size must be positive, got {hop_ms}")
    lifetime = starts == MIN_TIME
    nonempty = starts < ends  # type: ignore[operator]
    first_hop = times.floor(starts, hop_ms)  # MIN_TIME for a lifetime window
    last_hop = times.floor(ends, hop_ms)
    aligned = starts == first_hop
    inner = nonempty & ~lifetime & ~aligned & (first_hop == last_hop)
    spans = nonempty & ~inner
    tail_lo = times.where(lifetime, times.constant(int(MIN_TIME), starts),
                          times.ceil(starts, hop_ms))
    return WindowPieces(
        hop_ms=hop_ms,
        starts=starts,
        ends=ends,
        edge=spans & ~lifetime & ~aligned,
        edge_hop=first_hop,
        tail_lo=times.where(spans, tail_lo, last_hop),
        tail_hi=last_hop,
        head=spans & (ends != last_hop),
        head_hop=last_hop,
        inner=inner,
    )


def split_windows(starts: Int64s, ends: Int64s, hop_ms: int) -> WindowPieces[Int64s]:
    """:func:`window_pieces` of int64 arrays: each window cut into edge, tail and head.

    >>> pieces = split_windows(np.array([250, MIN_TIME, 120]), np.array([870, 870, 180]), 100)
    >>> pieces.edge.tolist(), [int(a[0]) for a in (pieces.edge_hop, pieces.tail_lo, pieces.tail_hi)]
    ([True, False, False], [200, 300, 800])
    >>> pieces.head.tolist(), pieces.head_hop.tolist(), pieces.inner.tolist()
    ([True, True, False], [800, 800, 100], [False, False, True])

    Window 0 is the edge ``[250, 300)``, the hops 300..700 and the head ``[800, 870)``; window 1
    every hop before 800 and the same head; window 2 lies inside hop 100.

    Raises:
        ValueError: if ``hop_ms`` is not positive or the arrays differ in length.

    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if s.shape != e.shape:
        raise ValueError(f"{len(s)} starts but {len(e)} ends")
    return window_pieces(ARRAYS, s, e, hop_ms)


def _largest_divisor_at_most(number: int, limit: int) -> int:
    """Return the largest divisor of ``number > 0`` at most ``limit`` (1 at least). O(√number)."""
    best = 1
    for small in range(1, math.isqrt(number) + 1):
        if number % small == 0:
            for divisor in (small, number // small):
                if best < divisor <= limit:
                    best = divisor
    return best


def choose_hop(windows: Sequence[tuple[WindowKind, int | None, int | None]]) -> int:
    """Return the hop size (ms) for a GroupBy's windows, given as ``(kind, length, hop)``.

    The hop ``H`` must divide every sawtooth and hopping window's hop, so their starts (and
    hopping ends) are hop-aligned and need no edge or head; and it should be at most
    ``length / 4`` (:data:`SLIDING_HOPS`) for every sliding window, so that window's head and
    edge, which are scanned from raw events, stay small next to its tail of hop partials.
    Lifetime windows do not constrain ``H``.

    The choice is the largest size of :data:`HOP_LADDER_MS` (1d, 1h, 5m, 1m, 1s) that meets
    both rules: large hops mean few partials per key. When no ladder size does (hops that
    are not whole seconds, sliding windows under 4s), it is the largest divisor of the gcd of
    the hops that meets the sliding bound (any size up to that bound when there are no hops,
    1 ms at least). Lifetime-only GroupBys get 1d. O(windows + sqrt(gcd)).

    >>> from timetile.core.timeutil import parse_duration as ms
    >>> choose_hop([(WindowKind.SLIDING, ms("7d"), None), (WindowKind.SLIDING, ms("1h"), None)])
    300000
    >>> choose_hop([(WindowKind.SAWTOOTH, ms("30d"), ms("1d")), (WindowKind.LIFETIME, None, None)])
    86400000
    >>> choose_hop([(WindowKind.HOPPING, ms("1h"), 1500), (WindowKind.SLIDING, ms("2s"), None)])
    500

    Raises:
        ValueError: if a sliding window lacks a positive length, or a sawtooth or hopping
            window a positive hop.

    """
    hops: list[int] = []
    lengths: list[int] = []
    for kind, length, hop in windows:
        if kind is WindowKind.SLIDING:
            if length is None or length <= 0:
                raise ValueError(f"a sliding window needs a positive length, got {length}")
            lengths.append(length)
        elif kind in (WindowKind.SAWTOOTH, WindowKind.HOPPING):
            if hop is None or hop <= 0:
                raise ValueError(f"a {kind.value} window needs a positive hop, got {hop}")
            hops.append(hop)
    bound = min(lengths) // SLIDING_HOPS if lengths else None
    for size in HOP_LADDER_MS:
        if all(hop % size == 0 for hop in hops) and (bound is None or size <= bound):
            return size
    limit = max(1, bound) if bound is not None else None
    if not hops:
        return limit if limit is not None else HOP_LADDER_MS[0]
    common = math.gcd(*hops)
    return common if limit is None else _largest_divisor_at_most(common, limit)
