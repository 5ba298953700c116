"""The demo: its data, its serving step and its example definitions, in one place.

- :mod:`.data` (and :mod:`.ratings`): the marketplace tables, generated in Spark;
- :mod:`.serving`: the demo's online step (upload, stream the landed morning, fetch);
- ``checkout_model.py`` and ``listing_ratings.py``: the example definitions, which
  ``timetile backfill timetile/demo/checkout_model.py ...`` and the other commands read, and
  which ``timetile demo`` runs.

This module says where the examples read their tables. Free of Spark, so the command line
can show these defaults without loading it.
"""

from __future__ import annotations

from pathlib import Path

#: The environment variable that tells the examples where the demo's data is.
DATA_ENV = "TIMETILE_DEMO_DATA"
#: Where the data goes by default, relative to the current directory.
DEFAULT_DATA_DIR = "timetile-demo/data"


def example_path(name: str = "checkout_model") -> Path:
    """Return a definitions file of the demo: ``timetile/demo/{name}.py``.

    They ship inside the package, so the demo runs from a clone and from an installed wheel.
    """
    path = Path(__file__).parent / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: reinstall timetile (pip install -e .)")
    return path
