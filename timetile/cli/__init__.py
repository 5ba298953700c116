"""The ``timetile`` command line (DESIGN §1): one module per command, see :mod:`.app`.

:func:`main` is the console script; ``python -m timetile`` and ``spark-submit
timetile/__main__.py`` run the same.
"""

from timetile.cli.app import app, main

__all__ = ["app", "main"]
