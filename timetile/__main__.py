"""``python -m timetile``: the command line, as the ``timetile`` command runs it.

Also the script ``spark-submit`` runs on a cluster (README, "On a cluster").
"""

from timetile.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
