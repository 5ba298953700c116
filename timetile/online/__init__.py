"""Online serving: the fetcher, the HTTP service and its response logs (DESIGN §5). No Spark.

- :mod:`~timetile.online.fetcher`: :class:`~timetile.online.fetcher.Fetcher`, a Join's
  features for many keys at a time, read from a store (:mod:`timetile.store`) and equal to
  the backfill at that millisecond;
- :mod:`~timetile.online.server`: the HTTP service (FastAPI), with its request and response
  models in :mod:`~timetile.online.server_models`;
- :mod:`~timetile.online.response_log`: every response, logged as Parquet for the
  consistency check (:mod:`timetile.verify`).

The records it reads are written by the upload (:mod:`timetile.offline.upload`) and the
streaming job (:mod:`timetile.streaming`), through the same store layout.
"""
