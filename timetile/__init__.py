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
"""

from timetile.api import (
    Accuracy,
    Aggregation,
    DefinitionError,
    EntitySource,
    EventSource,
    GroupBy,
    Join,
    JoinPart,
    Problem,
    Window,
)
from timetile.offline.backfill import BackfillJob, backfill
from timetile.offline.report import BadInputError, JobReport

__version__ = "0.1.0"

__all__ = [
    "Accuracy",
    "Aggregation",
    "BackfillJob",
    "BadInputError",
    "DefinitionError",
    "EntitySource",
    "EventSource",
    "GroupBy",
    "JobReport",
    "Join",
    "JoinPart",
    "Problem",
    "Window",
    "__version__",
    "backfill",
]
