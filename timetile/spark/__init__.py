"""Spark plumbing that the offline, online and streaming engines share (DESIGN §3).

Reading a source the one way every engine reads it, so that a backfill, an upload and a
stream see the same rows: its ``where`` and ``select``, and its time as epoch milliseconds
(:mod:`~timetile.spark.sources`); entity snapshots and mutations
(:mod:`~timetile.spark.entities`); and whole groups from the sorted Arrow batches of a
``mapInArrow`` (:mod:`~timetile.spark.sorted_groups`). It imports only ``api`` and
``core``, so the three engines still meet only through those layers and this one, never
through each other.
"""
