"""The sorted sweep: the ops of :data:`SWEEP_OPS` without per-group Python (docs/engine.md).

:mod:`.executor` is the Spark side (one shuffle of events and queries by key, then
``mapInArrow``); :mod:`.columns` the arithmetic on one table of whole keys, by the compiled
kernels of :mod:`timetile.core.kernels`; :mod:`.buckets` the same for bucketed features.
"""

from timetile.offline.executors.sweep.executor import (
    SWEEP_OPS,
    sweep_features,
    sweepable,
    sweeps,
)

__all__ = ["SWEEP_OPS", "sweep_features", "sweepable", "sweeps"]
