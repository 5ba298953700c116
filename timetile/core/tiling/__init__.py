"""Windowing on top of the aggregator algebra: hops, scans, range indexes, interval tiles.

Everything here calls only the algebra of :mod:`timetile.core.aggregators` (STYLE §2) and
knows no engine (DESIGN §3, §4):

- :mod:`.hops`: cut windows into tail edge, tail and head for a hop size; choose the hop size.
- :mod:`.scans`: prefix and suffix scans of one hop's events, and :func:`tiled_windows`, the
  whole tiled algorithm for one key, equal to the brute force reference.
- :mod:`.segment_tree`: range merges over hop partials (segment tree, prefix differences).
- :mod:`.intervals`: the interval-tree tiling of sorted queries (seed 000).

>>> import numpy as np
>>> from timetile.core.aggregators import make_aggregator
>>> from timetile.core.types import ValueType
>>> from timetile.core.windows import WindowKind, window_bounds
>>> agg = make_aggregator("max", ValueType.INT)
>>> times = np.array([0, 40, 90, 130, 170])
>>> starts, ends = window_bounds(np.array([100, 175]), WindowKind.SLIDING, 100, None)
>>> hop = choose_hop([(WindowKind.SLIDING, 100, None)])
>>> hop, [agg.finalize(s) for s in tiled_windows(agg, times, times, starts, ends, hop_ms=hop)]
(25, [90, 170])
"""

from timetile.core.tiling.hops import (
    HOP_LADDER_MS,
    SLIDING_HOPS,
    WindowPieces,
    choose_hop,
    split_windows,
    window_pieces,
)
from timetile.core.tiling.intervals import QueryTiling, generate_tiles
from timetile.core.tiling.scans import (
    prefix_states,
    range_states,
    suffix_states,
    tiled_windows,
)
from timetile.core.tiling.segment_tree import PrefixStates, RangeIndex, SegmentTree, range_index

__all__ = [
    "HOP_LADDER_MS",
    "SLIDING_HOPS",
    "PrefixStates",
    "QueryTiling",
    "RangeIndex",
    "SegmentTree",
    "WindowPieces",
    "choose_hop",
    "generate_tiles",
    "prefix_states",
    "range_index",
    "range_states",
    "split_windows",
    "suffix_states",
    "tiled_windows",
    "window_pieces",
]
