"""Spark Structured Streaming jobs that keep the online store fresh (DESIGN §6).

- :mod:`~timetile.streaming.job`: :func:`~timetile.streaming.job.stream_group_by`, a query
  that folds each micro-batch of a GroupBy's events into the store's tiles, on the
  executors, restart-safe, counting late events;
- :mod:`~timetile.streaming.sources`: stream sources and their URIs:
  :mod:`~timetile.streaming.file_source` (a directory of JSON lines or Parquet, the embedded
  default) and :mod:`~timetile.streaming.redis_source` (Redis Streams, through PySpark's
  Python data source API);
- :mod:`~timetile.streaming.state`: the stream's record in the store (watermark, counts,
  owner), which makes a replayed micro-batch decide as the first run did.

Not here yet: entity (CDC) streams, and the stream-stream joins of seed 004.
"""
