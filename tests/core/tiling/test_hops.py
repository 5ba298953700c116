"""Window pieces for a hop size, and the choice of the hop size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.tiling import HOP_LADDER_MS, WindowPieces, choose_hop, split_windows
from timetile.core.timeutil import parse_duration
from timetile.core.windows import MIN_TIME, WindowKind

SLIDING, SAWTOOTH, HOPPING, LIFETIME = (
    WindowKind.SLIDING,
    WindowKind.SAWTOOTH,
    WindowKind.HOPPING,
    WindowKind.LIFETIME,
)


HopSpec = tuple[WindowKind, int | None, int | None]


def ms(text: str) -> int:
    return parse_duration(text)


def _pieces_of(pieces: WindowPieces, i: int) -> list[tuple[str, int, int]]:
    """Window i's pieces as (name, start, end) time intervals, in the order they are merged."""
    hop = pieces.hop_ms
    out = []
    if pieces.inner[i]:
        out.append(("inner", int(pieces.starts[i]), int(pieces.ends[i])))
    if pieces.edge[i]:
        out.append(("edge", int(pieces.starts[i]), int(pieces.edge_hop[i]) + hop))
    if pieces.tail_lo[i] < pieces.tail_hi[i]:
        out.append(("tail", int(pieces.tail_lo[i]), int(pieces.tail_hi[i])))
    if pieces.head[i]:
        out.append(("head", int(pieces.head_hop[i]), int(pieces.ends[i])))
    return out


_TIMES = st.integers(-(10**6), 10**6)


@settings(max_examples=300, deadline=None)
@given(
    windows=st.lists(
        st.tuples(st.one_of(st.just(MIN_TIME), _TIMES, _TIMES), _TIMES, st.integers(0, 2000)),
        max_size=8,
    ),
    hop=st.integers(1, 700),
)
def test_pieces_tile_each_window_exactly(windows: list[tuple[int, int, int]], hop: int) -> None:
    starts = np.array([s for s, _, _ in windows], dtype=np.int64)
    ends = np.array(
        [s + length if s != MIN_TIME else e for s, e, length in windows], dtype=np.int64
    )
    ends[::3] = [e for _, e, _ in windows][::3]  # some arbitrary ends, some empty windows
    pieces = split_windows(starts, ends, hop)
    assert len(pieces) == len(windows)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        found = _pieces_of(pieces, i)
        if s >= e:
            assert found == []
            continue
        names = [name for name, _, _ in found]
        assert names, "a non-empty window has pieces"
        assert "inner" not in names or names == ["inner"]
        position = s
        for name, lo, hi in found:
            assert lo < hi, f"{name} is empty"
            assert lo == position, f"{name} leaves a gap or overlaps"
            position = hi
            if name == "tail":
                assert hi % hop == 0
                assert lo == MIN_TIME or lo % hop == 0
            if name == "edge":
                assert s != MIN_TIME
                assert int(pieces.edge_hop[i]) < s < int(pieces.edge_hop[i]) + hop
            if name in ("head", "inner"):
                head_hop = int(pieces.head_hop[i])
                assert head_hop % hop == 0
                assert head_hop <= lo < hi < head_hop + hop
        assert position == e
        if "inner" in names:
            assert s % hop != 0, "an aligned start makes a head, not an inner piece"


def test_pieces_examples() -> None:
    starts = np.array([250, 200, MIN_TIME, 120, 100, 900, 450])
    ends = np.array([870, 800, 800, 180, 170, 900, 460])
    pieces = split_windows(starts, ends, 100)
    assert [_pieces_of(pieces, i) for i in range(len(starts))] == [
        [("edge", 250, 300), ("tail", 300, 800), ("head", 800, 870)],
        [("tail", 200, 800)],
        [("tail", MIN_TIME, 800)],
        [("inner", 120, 180)],
        [("head", 100, 170)],
        [],
        [("inner", 450, 460)],
    ]
    with pytest.raises(ValueError, match="positive"):
        split_windows(starts, ends, 0)
    with pytest.raises(ValueError, match="starts but"):
        split_windows(starts, ends[:2], 10)


@pytest.mark.parametrize(
    ("windows", "want"),
    [
        ([], "1d"),
        ([(LIFETIME, None, None)], "1d"),
        ([(SLIDING, ms("7d"), None)], "1d"),
        ([(SLIDING, ms("7d"), None), (SLIDING, ms("1h"), None)], "5m"),
        ([(SLIDING, ms("1d"), None)], "1h"),
        ([(SLIDING, ms("10m"), None)], "1m"),
        ([(SLIDING, ms("1m"), None)], "1s"),
        ([(SAWTOOTH, ms("30d"), ms("1d")), (LIFETIME, None, None)], "1d"),
        ([(SAWTOOTH, ms("7d"), ms("1h"))], "1h"),
        ([(HOPPING, ms("7d"), ms("90m"))], "5m"),
        ([(SAWTOOTH, ms("30d"), ms("1d")), (SLIDING, ms("2h"), None)], "5m"),
        ([(HOPPING, ms("1d"), ms("7s"))], "1s"),
    ],
)
def test_choose_hop_from_the_ladder(windows: list[HopSpec], want: str) -> None:
    assert choose_hop(windows) == ms(want)


@pytest.mark.parametrize(
    ("windows", "want"),
    [
        ([(SLIDING, ms("3s"), None)], 750),  # under 4s: length / 4
        ([(SLIDING, 2, None)], 1),  # 1 ms at least
        ([(HOPPING, ms("1h"), 1500)], 1500),  # not whole seconds: the gcd of the hops
        ([(SAWTOOTH, ms("1h"), 1500), (HOPPING, ms("1d"), 2500)], 500),
        ([(HOPPING, ms("1h"), 1500), (SLIDING, ms("2s"), None)], 500),  # a divisor under 2s/4
        ([(HOPPING, ms("1h"), 1500), (SLIDING, ms("1s"), None)], 250),
        ([(HOPPING, ms("1h"), 1499), (SLIDING, ms("1s"), None)], 1),  # a prime hop
    ],
)
def test_choose_hop_falls_back_to_the_gcd(windows: list[HopSpec], want: int) -> None:
    assert choose_hop(windows) == want


_KINDS = st.sampled_from([SLIDING, SAWTOOTH, HOPPING, LIFETIME])
_SIZES = st.one_of(
    st.sampled_from([ms(t) for t in ("1s", "5s", "1m", "5m", "10m", "1h", "2h", "1d", "7d")]),
    st.integers(1, 10**9),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_KINDS, _SIZES, _SIZES), max_size=5))
def test_choose_hop_keeps_its_promises(windows: list[tuple[WindowKind, int, int]]) -> None:
    hop = choose_hop(windows)
    hops = [h for kind, _, h in windows if kind in (SAWTOOTH, HOPPING)]
    lengths = [length for kind, length, _ in windows if kind is SLIDING]
    bound = max(1, min(lengths) // 4) if lengths else None
    assert hop >= 1
    assert all(h % hop == 0 for h in hops)
    assert bound is None or hop <= bound
    fitting = [
        size
        for size in HOP_LADDER_MS
        if all(h % size == 0 for h in hops) and (bound is None or size <= bound)
    ]
    if fitting:
        assert hop == fitting[0]
    elif hops:  # no larger divisor of the hops fits under the bound
        bigger = range(hop + 1, min(bound or hop, 10**5) + 1)
        assert not any(all(h % size == 0 for h in hops) for size in bigger)


def test_choose_hop_rejects_incomplete_windows() -> None:
    with pytest.raises(ValueError, match="sliding window needs a positive length"):
        choose_hop([(SLIDING, None, None)])
    with pytest.raises(ValueError, match="hopping window needs a positive hop"):
        choose_hop([(HOPPING, ms("1d"), None)])
    with pytest.raises(ValueError, match="sawtooth window needs a positive hop"):
        choose_hop([(SAWTOOTH, ms("1d"), 0)])
