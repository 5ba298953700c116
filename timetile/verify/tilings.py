"""Cuts of time for ``timetile verify``: which runs a tiling makes (seed 001). No Spark here.

A tiling cuts the checked range ``[low, high)`` into consecutive segments. Each segment is
one backfill: of the left rows in it, over the sources as they stood at its end (rows before
it), reusing the stored hop partials of the segments before it. A correct computation gives
every left row the same features under every tiling.

- ``one``: one segment, the whole range: a single batch backfill.
- ``daily``: one segment per UTC day (the incremental path a scheduled job takes).
- ``random:N``: ``N`` cuts at random milliseconds of the range (so ``N + 1`` segments),
  drawn from a seed: cuts fall inside days, hops and windows, where an off-by-one hides.
- ``stream``: no backfill: an upload as of the day before the range, then every source's
  rows of the range replayed in time order through the streaming job, each sampled left
  row fetched at its time as the online service would (:mod:`timetile.verify.replay`).
  It cannot be the reference, which is a batch: name another tiling first.

>>> [t.name for t in parse_tilings("one, daily,random:3")]
['one', 'daily', 'random:3']
>>> segments(Tiling("daily"), 0, 2 * DAY_MS, seed=0)
[(0, 86400000), (86400000, 172800000)]
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from timetile.core.timeutil import DAY_MS

__all__ = ["DEFAULT_STREAM_BATCH", "DEFAULT_TILINGS", "KINDS", "KNOWN_BEFORE", "Tiling",
           "parse_tilings", "segments"]

#: The tilings ``verify`` runs when none are named.
DEFAULT_TILINGS = "one,daily,random:3"
#: The ``stream`` tiling's rows per micro-batch, across all sources, when not given.
DEFAULT_STREAM_BATCH = 2_000
#: Each kind of tiling and what it means, for ``--help`` and errors.
KINDS = {
    "one": "one batch backfill of the whole range",
    "daily": "day by day, each day reusing the stored hop partials of the days before",
    "random:N": "N cuts at random milliseconds, each segment reusing the partials before it",
    "stream": "an upload of the day before, then the rows replayed through the streaming job "
              "and each row fetched at its time",
}
#: The name of the leak check (``verify(leaks=True)``) where reports list it beside the
#: tilings: each row recomputed over the rows known before its time.
KNOWN_BEFORE = "known before q"
_RANDOM = re.compile(r"random:(\d+)")
#: The most random cuts one tiling may make (each is a backfill).
MAX_RANDOM_CUTS = 1_000


@dataclass(frozen=True)
class Tiling:
    """One way to cut the range: ``kind`` is ``one``, ``daily``, ``random`` or ``stream``.

    Attributes:
        kind: the tiling's kind.
        cuts: for ``random``, how many cuts; else 0.

    """

    kind: str
    cuts: int = 0

    @property
    def name(self) -> str:
        """The tiling as written: ``one``, ``daily``, ``random:3``."""
        return f"random:{self.cuts}" if self.kind == "random" else self.kind

    @property
    def streamed(self) -> bool:
        """Whether it replays the sources through the streaming job and fetches online."""
        return self.kind == "stream"

    @property
    def incremental(self) -> bool:
        """Whether its segments run one after another on stored partials."""
        return self.kind in ("daily", "random")


def parse_tilings(text: str | Sequence[str], *, alone: bool = False) -> tuple[Tiling, ...]:
    """Read tilings from ``"one,daily,random:3"`` or a list of names; order kept.

    ``alone``: one tiling is enough, as when the leak check is its comparison.

    Raises:
        ValueError: an unknown or repeated tiling, or fewer than two (one has nothing to be
            compared with) unless ``alone``, naming ``tilings`` and the fix.

    """
    names = text.split(",") if isinstance(text, str) else list(text)
    fix = f"name tilings from {', '.join(KINDS)}, comma-separated, e.g. {DEFAULT_TILINGS!r}"
    made: list[Tiling] = []
    for raw in names:
        if not isinstance(raw, str):
            raise ValueError(f"tilings holds {raw!r}, not a name: {fix}")
        name = raw.strip().lower()
        found = _RANDOM.fullmatch(name)
        if name in ("one", "daily", "stream"):
            tiling = Tiling(name)
        elif found and 1 <= int(found.group(1)) <= MAX_RANDOM_CUTS:
            tiling = Tiling("random", int(found.group(1)))
        elif found:
            raise ValueError(f"tilings: {raw.strip()!r} asks for {found.group(1)} cuts: give "
                             f"random:N with N from 1 to {MAX_RANDOM_CUTS:,}")
        else:
            raise ValueError(f"tilings: {raw.strip()!r} is not a tiling: {fix}")
        if tiling in made:
            raise ValueError(f"tilings names {tiling.name!r} twice: name each once")
        made.append(tiling)
    if not made:
        raise ValueError(f"tilings is empty: {fix}")
    if made[0].streamed:
        rest = [tiling.name for tiling in made[1:]]
        raise ValueError("tilings names 'stream' first, but the first is the reference of "
                         "exact features, a batch backfill: name another first, e.g. "
                         f"{','.join([*(rest[:1] or ['one']), 'stream'])!r}")
    if len(made) == 1 and not alone:
        example = DEFAULT_TILINGS if made[0].name == "one" else f"one,{made[0].name}"
        raise ValueError(f"tilings names only {made[0].name!r}, which has nothing to be "
                         f"compared with: name two or more, the first the reference, e.g. "
                         f"{example!r}, or check leaks with it")
    return tuple(made)


def segments(tiling: Tiling, low: int, high: int, *, seed: int) -> list[tuple[int, int]]:
    """Return the ``[start, end)`` segments that cut ``[low, high)``, in time order.

    They cover the range exactly, without gaps or overlaps; none is empty. ``daily`` cuts at
    UTC midnights (a range that starts or ends inside a day keeps that part day); ``random:N``
    at ``min(N, high - low - 1)`` distinct milliseconds drawn from ``random.Random(seed)``.
    O(segments).
    """
    if high <= low:
        raise ValueError(f"the range [{low}, {high}) is empty")
    if tiling.streamed:
        raise ValueError("the stream tiling cuts the range into micro-batches of rows, not "
                         "segments: see timetile.verify.replay")
    if tiling.kind == "one":
        cuts: list[int] = []
    elif tiling.kind == "daily":
        first = (low // DAY_MS + 1) * DAY_MS
        cuts = list(range(first, high, DAY_MS))
    else:
        inside = high - low - 1  # the milliseconds a cut may fall on: low + 1 … high - 1
        cuts = sorted(low + 1 + offset for offset in
                      random.Random(seed).sample(range(inside), min(tiling.cuts, inside)))
    bounds = [low, *cuts, high]
    return list(itertools.pairwise(bounds))
