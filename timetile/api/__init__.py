"""Definitions: sources, interval joins, windows, aggregations, GroupBy and Join (DESIGN §1–2).

Frozen dataclasses, validated on construction. No engine: this package imports only the
standard library and :mod:`timetile.core`.
"""

from timetile.api.aggregation import Aggregation
from timetile.api.errors import DefinitionError, Problem
from timetile.api.group_by import Accuracy, GroupBy
from timetile.api.interval_join import IntervalJoin
from timetile.api.join import Join, JoinPart
from timetile.api.sources import EntitySource, EventSource
from timetile.api.windows import Window

__all__ = [
    "Accuracy",
    "Aggregation",
    "DefinitionError",
    "EntitySource",
    "EventSource",
    "GroupBy",
    "IntervalJoin",
    "Join",
    "JoinPart",
    "Problem",
    "Window",
]
