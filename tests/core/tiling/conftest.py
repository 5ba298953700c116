"""Make the shared aggregator strategies (``tests/core/aggregator_strategies.py``) importable."""

from __future__ import annotations

import sys
from pathlib import Path

_CORE_TESTS = str(Path(__file__).resolve().parent.parent)
if _CORE_TESTS not in sys.path:
    sys.path.insert(0, _CORE_TESTS)
