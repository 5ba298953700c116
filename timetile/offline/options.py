"""The values a backfill's options take: the executors' names and the defaults.

Free of Spark, so that the command line can show them in ``--help`` and check ``--executor``
without loading PySpark (``timetile serve`` and ``fetch`` never need it).
:mod:`timetile.offline.backfill` maps these names to the executors themselves.
"""

from __future__ import annotations

#: ``executor="auto"`` picks an executor per part (see ``timetile.offline.backfill``).
AUTO = "auto"
DEFAULT_EXECUTOR = AUTO

#: The executors ``executor=`` may name, in the order of the capability table
#: (``timetile.offline.backfill.CHOOSABLE``, which a test holds this to).
EXECUTOR_NAMES = ("sweep", "interval_tree", "tiled", "reference")

#: Rows (events and queries) one sweep task may hold for one key before the key is split.
#: Chosen so that a chunk at the limit fits the memory overhead a cluster gives a Python
#: worker next to its JVM executor, by the sweep's peak memory per row (sum, count and max;
#: a moment op adds its tree, an op by value rank a rank per event and a count per distinct
#: value). The peaks measured, whole keys against chunks, are in benchmarks/RESULTS.md,
#: "hot key"; how keys are cut, :mod:`timetile.offline.hot_keys`.
DEFAULT_MAX_KEY_EVENTS = 2_000_000

#: Left rows up to which a backfill treats its queries as small enough to broadcast: ``auto``
#: may then route a part to the interval tree (which collects them), and the tiled executor
#: filters its events or stored partials to the queried keys with a broadcast join.
BROADCAST_QUERY_LIMIT = 200_000
