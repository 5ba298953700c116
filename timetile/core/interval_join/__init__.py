"""Time-bounded stream-to-stream joins (seed 004), engine-free.

:mod:`.condition` parses a join condition into time bounds, one-input filters and a
predicate; :mod:`.processor` is the join processor (rows and watermarks in, joined rows,
null-padded rows and watermarks out, snapshots); :mod:`.transcript` reads and replays the
transcript files that state its behaviour.
"""

from timetile.core.interval_join.condition import (
    ConditionError,
    JoinCondition,
    TimeBound,
    parse_condition,
)
from timetile.core.interval_join.processor import (
    BufferFullError,
    Counts,
    IntervalJoinProcessor,
    Joined,
    JoinSpec,
    Watermark,
)

__all__ = [
    "BufferFullError",
    "ConditionError",
    "Counts",
    "IntervalJoinProcessor",
    "JoinCondition",
    "JoinSpec",
    "Joined",
    "TimeBound",
    "Watermark",
    "parse_condition",
]
