"""The tiled executor's layout: its columns, a part's distinct aggregators and windows, its hop.

What the three stages of :mod:`.tiled` (planned on Spark) and :mod:`.tiled_passes` (run in
the tasks) share; the interval tree reads the same layout. It builds no Spark plan and runs
no job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from timetile.api.interval_join import is_interval_join
from timetile.api.windows import window_spec
from timetile.core.aggregators import Aggregator
from timetile.core.tiling import choose_hop
from timetile.core.timeutil import DAY_MS
from timetile.core.windows import WindowKind
from timetile.offline.executors.features import build_aggregator
from timetile.offline.plan import Feature, PartPlan

HOP = "_tt_hop"
BOUND = "_tt_bound"
SIDE = "_tt_side"
KIND = "_tt_kind"
HIGH = "_tt_high"
WINDOW = "_tt_window"
ORDER = "_tt_order"
QUERY = "_tt_query"  # the time of the query a scan or tail request serves
START = "_tt_start_"  # a window's start, by its index: _tt_start_0
END = "_tt_end_"
CUT = "_tt_cut_"  # a window's pieces, by name and index: _tt_cut_edge_hop_0

#: What a stage-1 output row holds: a hop's partial, a head's prefix, an edge's suffix.
PARTIAL, PREFIX, SUFFIX = 0, 1, 2
#: Order in which a window's pieces are merged: edge, tail, head (time order).
ANCHOR, EDGE, TAIL, HEAD = 0, 1, 2, 3


def state_column(index: int) -> str:
    """Name the column holding the state bytes of the ``index``-th distinct aggregator."""
    return f"_tt_state_{index}"


@dataclass(frozen=True)
class TiledLayout:
    """What the stages share: the part's distinct aggregators, windows and hop size."""

    keys: tuple[str, ...]
    features: tuple[Feature, ...]
    aggregations: tuple[Feature, ...]  # one representative feature per distinct aggregator
    feature_aggregator: tuple[int, ...]  # feature index → aggregator index
    windows: tuple[Any, ...]  # distinct windows (None = lifetime)
    feature_window: tuple[int, ...]  # feature index → window index

    @classmethod
    def of(cls, plan: PartPlan) -> TiledLayout:
        """Index a part's features by distinct aggregator and window."""
        aggregator_ids: dict[tuple[Any, ...], int] = {}
        window_ids: dict[Any, int] = {}
        representatives: list[Feature] = []
        for feature in plan.features:
            if feature.aggregator_key not in aggregator_ids:
                aggregator_ids[feature.aggregator_key] = len(aggregator_ids)
                representatives.append(feature)
            window_ids.setdefault(feature.window, len(window_ids))
        return cls(
            keys=tuple(plan.keys),
            features=plan.features,
            aggregations=tuple(representatives),
            feature_aggregator=tuple(aggregator_ids[f.aggregator_key] for f in plan.features),
            windows=tuple(window_ids),
            feature_window=tuple(window_ids[f.window] for f in plan.features),
        )

    @property
    def hop_ms(self) -> int:
        """The hop size of the tiled pass, computed when asked.

        The interval tree shares this layout and never asks: it takes windows of any length.

        Raises:
            ValueError: a sliding window shorter than two hops (:meth:`hop_problem`).

        """
        hop, problem = self._hop()
        if problem is not None:
            raise ValueError(f"{problem}: use executor 'auto' or 'interval_tree' for them")
        return hop

    @property
    def hop_problem(self) -> str | None:
        """Say why no hop suits the windows (None when one does).

        :func:`~timetile.core.tiling.choose_hop` keeps sliding windows at least four hops
        long where it can, and aligns sawtooth and hopping starts to the hop; a sliding
        window of less than two hops (1 ms, say) would need
        :func:`~timetile.core.tiling.split_windows`'s ``inner`` pieces, which the tiled pass
        has not got. O(windows).
        """
        return self._hop()[1]

    def _hop(self) -> tuple[int, str | None]:
        """Return the hop :func:`~timetile.core.tiling.choose_hop` picks, and its problem."""
        specs = [window_spec(window) for window in self.windows]
        hop = choose_hop(specs)
        short = [length for kind, length, _ in specs
                 if kind is WindowKind.SLIDING and length is not None and length < 2 * hop]
        if short:
            return hop, (f"the tiled executor's hop of {hop} ms leaves sliding windows of "
                         f"{short} ms without whole hops")
        return hop, None

    @property
    def signature(self) -> str:
        """What stored hop partials depend on: hop size, aggregations, their states' forms.

        A form is :attr:`~timetile.core.aggregators.base.Aggregator.state_version`.
        """
        parts = [(f.aggregation.column, f.aggregation.op, f.aggregation.k,
                  f.aggregation.percentiles, f.input_type.value, f.bucket)
                 # only a changed form adds its version: the other ops' partials stay valid
                 + ((aggregator.state_version,) if aggregator.state_version > 1 else ())
                 + (() if f.aggregation.half_life is None else (f.aggregation.half_life,))
                 for f, aggregator in zip(self.aggregations, self.aggregators(), strict=True)]
        return repr((self.hop_ms, parts))

    def aggregators(self) -> list[Aggregator[Any]]:
        """Fresh aggregators, one per distinct aggregation (built in each task)."""
        return [build_aggregator(feature) for feature in self.aggregations]

    @property
    def state_columns(self) -> list[str]:
        """The state columns, one per distinct aggregator."""
        return [state_column(i) for i in range(len(self.aggregations))]


def tileable(plan: PartPlan) -> bool:
    """Whether the tiled executor can compute ``plan``: a hop fits all its windows.

    A 1 ms sliding window has none (:attr:`TiledLayout.hop_problem`).
    """
    return TiledLayout.of(plan).hop_problem is None


def partials_problem(plan: PartPlan) -> str | None:
    """Say why ``plan``'s hop partials cannot be stored (None when they can).

    A stored day holds whole hops, so the tiled pass must have a hop, and one that divides a
    day. No job runs.
    """
    name = plan.part.group_by.name
    if is_interval_join(getattr(plan.part.group_by.source, "table", None)):
        return (f"GroupBy {name!r} reads an interval join, whose rows of a day depend on the "
                "other input's later rows: stored partials of it are not supported yet")
    layout = TiledLayout.of(plan)
    if layout.hop_problem is not None:
        return f"GroupBy {name!r}: {layout.hop_problem}"
    hop = layout.hop_ms
    if DAY_MS % hop:
        return (f"GroupBy {name!r}: its windows' hop is {hop:,} ms, which does not divide a "
                "day, and a stored day must hold whole hops")
    return None
