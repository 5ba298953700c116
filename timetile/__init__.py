"""timetile: point-in-time-correct windowed aggregations for machine learning.

Define features with :class:`GroupBy` and :class:`Join`, then compute training data with
:func:`backfill`::

    import timetile as tt

    views = tt.EventSource("events.views", time_column="ts")
    user_views = tt.GroupBy(
        name="user_views", source=views, keys=["user_id"],
        aggregations=[tt.Aggregation("duration", "sum", windows=["1h", "7d"])],
    )
    training = tt.Join(name="checkout_model",
                       left=tt.EventSource("events.checkouts", time_column="ts"),
                       parts=[user_views])
    frame = tt.backfill(training, spark=spark, start="2024-01-01", end="2024-03-31")

``spark`` is your session, or :func:`local_session`, the embedded default.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from timetile.api import (
    Accuracy,
    Aggregation,
    DefinitionError,
    EntitySource,
    EventSource,
    GroupBy,
    IntervalJoin,
    Join,
    JoinPart,
    Problem,
    Window,
)

if TYPE_CHECKING:
    from timetile import verify
    from timetile.offline.backfill import BackfillJob, backfill
    from timetile.offline.report import BadInputError, JobReport
    from timetile.spark.session import local_session

__version__ = "0.1.0"

#: The names that need Spark, imported on first use: a fetcher or an HTTP server that
#: imports ``timetile.online`` never loads PySpark.
_ON_FIRST_USE = {
    "BackfillJob": "timetile.offline.backfill",
    "backfill": "timetile.offline.backfill",
    "BadInputError": "timetile.offline.report",
    "JobReport": "timetile.offline.report",
    "local_session": "timetile.spark.session",
    "verify": "timetile.verify",  # the package, which a call runs as the check
}


def __getattr__(name: str) -> Any:
    """Import a Spark-backed name (see ``_ON_FIRST_USE``) the first time it is asked for."""
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'timetile' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if module == f"{__name__}.{name}" else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the public names, those imported on first use included."""
    return sorted({*globals(), *__all__})


__all__ = [
    "Accuracy",
    "Aggregation",
    "BackfillJob",
    "BadInputError",
    "DefinitionError",
    "EntitySource",
    "EventSource",
    "GroupBy",
    "IntervalJoin",
    "JobReport",
    "Join",
    "JoinPart",
    "Problem",
    "Window",
    "__version__",
    "backfill",
    "local_session",
    "verify",
]
