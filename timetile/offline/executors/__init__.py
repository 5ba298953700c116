"""The executors and the one table of what each can do (DESIGN §4; STYLE §9).

Every executor computes a part's features with the same aggregators of
:mod:`timetile.core`, and each is tested against the naive oracle; they differ in cost and
in what they accept, which :data:`EXECUTORS` declares:

| executor | takes | computes | notes |
| --- | --- | --- | --- |
| ``sweep`` | events | the ops of ``SWEEP_OPS`` | left rows ride through it; hot keys cut in time |
| ``interval_tree`` | events | every op | collects the part's distinct queries to the driver |
| ``tiled`` | events | every op | needs a hop for the windows; stores hop partials |
| ``reference`` | events | every op | brute force, O(q · w) per key |
| ``entity`` | entity sources | every op and lookups | per (key, day) replay |

:func:`route` picks the executor of each part (:class:`Route`), by the rules of
``executor="auto"`` or the one asked for; ``backfill`` runs the route. No capability is found
by trying: each is a declared field, read here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame

from timetile.offline.executors.entity import entity_features
from timetile.offline.executors.interval_tree import interval_tree_features
from timetile.offline.executors.reference import reference_features
from timetile.offline.executors.sweep import sweep_features, sweeps
from timetile.offline.executors.tiled import tiled_features
from timetile.offline.executors.tiled_layout import tileable
from timetile.offline.options import AUTO, BROADCAST_QUERY_LIMIT
from timetile.offline.plan import AnyPartPlan, ExecutorOptions, Feature, Source


def _every_feature(feature: Feature) -> bool:
    del feature
    return True


def _any_part(part: AnyPartPlan) -> bool:
    del part
    return True


@dataclass(frozen=True)
class Executor:
    """One way to compute a part's features, and what it accepts.

    Attributes:
        name: as ``backfill(executor=...)`` and the job report name it.
        run: ``run(part, queries, options)``: the part's features at each query. ``queries``
            are the part's distinct (keys, as-of time) queries, or, where ``rides``, the left
            rows themselves.
        source: the parts it takes.
        computes: whether it computes a feature (its op over its column's type).
        fits: whether it can take a part whose features it computes (the tiled executor
            needs a hop for the part's windows).
        rides: whether left rows can ride through it, duplicates and all, so that no
            distinct queries are made and nothing is joined back.
        cuts_hot_keys: whether it holds a key in one task unless told to cut the key's hot
            ones into chunks of time (:mod:`timetile.offline.hot_keys`): the backfill then
            looks for them.
        collects_queries: whether it collects the part's distinct queries to the driver;
            ``auto`` picks it only for at most :data:`BROADCAST_QUERY_LIMIT` of them.
        stores_partials: whether it can store and reuse hop partials (``partials_path``).

    """

    name: str
    run: Callable[[Any, DataFrame, ExecutorOptions], DataFrame]
    source: Source = Source.EVENTS
    computes: Callable[[Feature], bool] = _every_feature
    fits: Callable[[Any], bool] = _any_part
    rides: bool = False
    cuts_hot_keys: bool = False
    collects_queries: bool = False
    stores_partials: bool = False

    def takes(self, part: AnyPartPlan) -> bool:
        """Whether it computes every feature of ``part`` and fits its windows."""
        return (part.source is self.source and self.fits(part)
                and all(self.computes(feature) for feature in part.features))


#: The sweep: the fastest, for the ops it computes; ``auto`` splits a part it mostly takes.
SWEEP = Executor("sweep", sweep_features, computes=sweeps, rides=True, cuts_hot_keys=True)
#: Every executor, by name. ``auto`` tries the event executors in this order (see
#: :func:`route`); an entity part always runs on ``entity``.
EXECUTORS: Mapping[str, Executor] = {executor.name: executor for executor in (
    SWEEP,
    Executor("interval_tree", interval_tree_features, collects_queries=True),
    Executor("tiled", tiled_features, fits=tileable, stores_partials=True),
    Executor("reference", reference_features),
    Executor("entity", entity_features, source=Source.ENTITY),
)}


@dataclass(frozen=True)
class Piece:
    """Some features of a part, and the executor that computes them."""

    executor: Executor
    part: AnyPartPlan


@dataclass(frozen=True)
class Route:
    """How one part is computed: one piece, or two (the sweep's features, then the rest)."""

    pieces: tuple[Piece, ...]

    @property
    def label(self) -> str:
        """The executors, as the report names them: ``sweep``, ``sweep+interval_tree``."""
        return "+".join(piece.executor.name for piece in self.pieces)


def route(part: AnyPartPlan, executor: str, queries_fit: Callable[[], bool]) -> Route:
    """Return how ``part`` is computed: by ``executor``, or under ``auto`` by its capabilities.

    ``auto`` takes the first event executor of :data:`EXECUTORS` that takes the whole part,
    passing over those that collect queries unless ``queries_fit()`` (asked only then: it may
    count them). A part whose features the sweep mostly computes, but not all, is split: the
    sweep computes its features, and the executor ``auto`` picks for the rest the others.
    A split pays one more pass over the events and a join, and saves the slower executor the
    swept features, whose cost grows with them (docs/engine.md); hence a split only when the
    sweep computes at least half of the features. An entity part runs on ``entity``,
    whatever was asked.
    """
    source = part.source
    if source is Source.ENTITY or executor != AUTO:
        chosen = (EXECUTORS[executor] if source is Source.EVENTS
                  else next(e for e in EXECUTORS.values() if e.source is source))
        return Route((Piece(chosen, part),))
    whole = _first_taking(part, queries_fit)
    swept = tuple(feature for feature in part.features if SWEEP.computes(feature))
    if whole is SWEEP or 2 * len(swept) < len(part.features):
        return Route((Piece(whole, part),))
    rest = replace(part, features=tuple(f for f in part.features if not SWEEP.computes(f)))
    return Route((Piece(SWEEP, replace(part, features=swept)),
                  Piece(_first_taking(rest, queries_fit), rest)))


def _first_taking(part: AnyPartPlan, queries_fit: Callable[[], bool]) -> Executor:
    """Return the first event executor that takes ``part`` (``reference`` takes any)."""
    return next(executor for executor in EXECUTORS.values()
                if executor.source is Source.EVENTS and executor.takes(part)
                and (not executor.collects_queries or queries_fit()))


__all__ = ["BROADCAST_QUERY_LIMIT", "EXECUTORS", "SWEEP", "Executor", "Piece", "Route", "Source",
           "route"]
