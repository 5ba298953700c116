"""The demo's definitions, which ship inside the package as ``timetile.examples.checkout_model``.

Run them with ``timetile backfill examples/checkout_model.py --start … --end … --output …``
after ``timetile demo`` has written the data (see that module for the Join and its parts).
"""

from timetile.examples.checkout_model import checkout_model

__all__ = ["checkout_model"]
