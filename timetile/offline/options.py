"""The values a backfill's options take: the executors' names and the defaults.

Free of Spark, so that the command line can show them in ``--help`` and check ``--executor``
without loading PySpark (``timetile serve`` and ``fetch`` never need it).
:mod:`timetile.offline.backfill` maps these names to the executors themselves.
"""

from __future__ import annotations

#: ``executor="auto"`` picks an executor per part (see ``timetile.offline.backfill``).
AUTO = "auto"
DEFAULT_EXECUTOR = AUTO

#: The executors' names, in the order of ``timetile.offline.backfill.EXECUTORS``.
EXECUTOR_NAMES = ("tiled", "sweep", "interval_tree", "reference")

#: Rows (events and queries) one sweep task may hold for one key before the key is split.
#: The sweep's Python worker peaks near 170 bytes per event (3.4 GB for a 20M-event key,
#: measured with ``benchmarks/hot_key.py``), so a chunk at the limit takes about 350 MB:
#: within the memory overhead a cluster gives a Python worker next to its JVM executor.
#: A key of events alone gets chunks of at least two reaches, so a denser key gets bigger
#: ones: in ``hot_key.py`` (20M events over 60 days, a 7-day window) a chunk and its reach
#: hold about 7M events, 1.7 GB at the peak measured, against 3.4 GB whole. A key of 1M
#: events and 30M left rows peaks at 0.99 GB in chunks of 84 hours, against 2.41 GB in
#: chunks of two reaches. Those peaks are of sum, count and max; a column with a moment op
#: (``variance`` to ``kurtosis``) adds its tree, 104 bytes per event, and one with an op by
#: value rank (``unique_count``, ``histogram``, ``top_k``, ``bottom_k``) an 8-byte rank per
#: event, a sort's scratch and 16 bytes per distinct value. See
#: :mod:`timetile.offline.hot_keys`.
DEFAULT_MAX_KEY_EVENTS = 2_000_000
