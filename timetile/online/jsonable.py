"""Feature values as strict JSON: the one encoding of the HTTP service and the response log.

JSON has no NaN or infinities, and its object keys are strings. So:

- a non-finite float becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (the
  spellings JavaScript's ``Number()`` and Python's ``float()`` read back), wherever it sits;
- a map (``histogram``, bucketed aggregations) becomes a JSON object whose keys are the map
  keys as strings (``{"3": 2}`` for the int item 3; ``true``/``false``/``null`` keys as
  ``"true"``/``"false"``/``"null"``);
- a list, a tuple or a numpy array becomes an array; numpy scalars become numbers;
- ``None`` is ``null``; bytes become base64 text.

>>> to_json_value({"mean": float("nan"), "top": (3, 1), "hist": {7: 2}})
{'mean': 'NaN', 'top': [3, 1], 'hist': {'7': 2}}
>>> dumps({"x": float("-inf")})
'{"x":"-Infinity"}'
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: How each non-finite float is written.
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def to_json_value(value: Any) -> Any:
    """Return ``value`` as plain JSON types (see the module docstring); O(size of value)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE[repr(value)]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {_key(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [to_json_value(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def _key(key: Any) -> str:
    """Return a map key as JSON object keys are: a string."""
    if isinstance(key, np.generic):
        key = key.item()
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, float):
        return repr(key) if math.isfinite(key) else NON_FINITE[repr(key)]
    return str(key)


def dumps(value: Any) -> str:
    """Encode ``value`` as compact strict JSON (never ``NaN``), UTF-8 text kept as is."""
    return json.dumps(to_json_value(value), allow_nan=False, ensure_ascii=False,
                      separators=(",", ":"))
