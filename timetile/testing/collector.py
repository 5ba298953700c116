"""What values cost Python's cyclic garbage collector, for tests that bound it.

Each full pass of the collector walks every object it tracks, every thread stopped, so a
server's pauses grow with the tracked objects its fetcher's caches hold (docs/online.md,
"Pauses"). Arrays, numbers, strings, and tuples and dicts holding only those, are not
tracked (the collector stops tracking such tuples and dicts as it finds them); instances of
classes, named tuples included, and the containers holding them are.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Iterable
from typing import Any

#: What every value shares and the collector walks once, whatever a cache holds.
_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def tracked_objects(values: Iterable[Any]) -> int:
    """Return how many distinct tracked objects ``values`` hold, themselves included.

    After a full collection, which stops tracking the tuples and dicts it finds holding only
    untracked objects. Classes, modules and functions are not counted.
    """
    gc.collect()
    seen: set[int] = set()
    pending = list(values)
    while pending:
        value = pending.pop()
        if id(value) in seen or not gc.is_tracked(value) or isinstance(value, _SHARED):
            continue
        seen.add(id(value))
        pending.extend(gc.get_referents(value))
    return len(seen)
