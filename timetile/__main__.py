"""``python -m timetile``: the command line, as the ``timetile`` command runs it."""

from timetile.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
