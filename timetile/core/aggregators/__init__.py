"""The aggregator algebra: every op of DESIGN §2 behind one contract (:mod:`.base`).

Which op is which class, and which parameters it needs, is a table (:data:`OPS`), not a
cascade of ifs (STYLE §9).

>>> import numpy as np
>>> from timetile.core.types import ValueType
>>> agg = make_aggregator("last_k", ValueType.INT, k=2)
>>> agg.finalize(agg.fold(np.array([5, 7, 6]), np.array([1, 3, 2])))
[7, 6]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from timetile.core.aggregators.base import Aggregator
from timetile.core.aggregators.bucketed import Bucketed, bucketed_values
from timetile.core.aggregators.counting import Avg, Count, Sum
from timetile.core.aggregators.decayed import DecayedAvg, DecayedCount, DecayedSum
from timetile.core.aggregators.distinct import Histogram, UniqueCount
from timetile.core.aggregators.extremes import First, Last, Max, Min
from timetile.core.aggregators.moments import Kurtosis, Skew, Stddev, Variance
from timetile.core.aggregators.ranked import BottomK, FirstK, LastK, TopK
from timetile.core.aggregators.sketches import ApproxPercentile, ApproxUniqueCount
from timetile.core.types import ValueType


@dataclass(frozen=True)
class OpSpec:
    """One op: its aggregator class and the keyword parameters it requires."""

    name: str
    factory: type[Aggregator[Any]]
    params: tuple[str, ...] = ()

    @property
    def numeric_only(self) -> bool:
        """Whether the op needs a numeric column."""
        return self.factory.numeric_only

    @property
    def invertible(self) -> bool:
        """Whether the op can retract values."""
        return self.factory.invertible


OPS: Mapping[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec("count", Count),
        OpSpec("sum", Sum),
        OpSpec("avg", Avg),
        OpSpec("min", Min),
        OpSpec("max", Max),
        OpSpec("first", First),
        OpSpec("last", Last),
        OpSpec("first_k", FirstK, ("k",)),
        OpSpec("last_k", LastK, ("k",)),
        OpSpec("top_k", TopK, ("k",)),
        OpSpec("bottom_k", BottomK, ("k",)),
        OpSpec("variance", Variance),
        OpSpec("stddev", Stddev),
        OpSpec("skew", Skew),
        OpSpec("kurtosis", Kurtosis),
        OpSpec("unique_count", UniqueCount),
        OpSpec("approx_unique_count", ApproxUniqueCount),
        OpSpec("approx_percentile", ApproxPercentile, ("percentiles",)),
        OpSpec("histogram", Histogram),
        OpSpec("decayed_count", DecayedCount, ("half_life",)),
        OpSpec("decayed_sum", DecayedSum, ("half_life",)),
        OpSpec("decayed_avg", DecayedAvg, ("half_life",)),
    )
}


def make_aggregator(
    op: str,
    input_type: ValueType,
    *,
    k: int | None = None,
    percentiles: Sequence[float] | None = None,
    half_life: int | None = None,
) -> Aggregator[Any]:
    """Build the aggregator for ``op`` over a column of ``input_type``.

    ``k`` and ``percentiles`` are the k-ops' and ``approx_percentile``'s parameters;
    ``half_life`` (milliseconds) the decayed ops'.

    Raises:
        KeyError: for an unknown op.
        TypeError: for a numeric op over a non-numeric column, or a missing parameter.

    """
    spec = OPS[op]
    given: dict[str, Any] = {"k": k, "percentiles": percentiles, "half_life": half_life}
    kwargs = {name: given[name] for name in spec.params}
    missing = [name for name, value in kwargs.items() if value is None]
    if missing:
        raise TypeError(f"{op} needs {', '.join(missing)}")
    return spec.factory(input_type, **kwargs)


__all__ = ["OPS", "Aggregator", "Bucketed", "OpSpec", "bucketed_values", "make_aggregator"]
