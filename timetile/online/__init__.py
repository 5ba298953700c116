"""Online serving: key-value stores, batch upload, streaming tiles, the fetcher, HTTP (DESIGN §5).

- :mod:`~timetile.online.store`: the store interface and :func:`~timetile.online.store.open_store`
  (LMDB embedded by default, Redis for production);
- :mod:`~timetile.online.upload`: the Spark job writing each key's batch record as of a day;
- :mod:`~timetile.online.tiles`: the streaming-tile write path;
- :mod:`~timetile.online.fetcher`: :class:`~timetile.online.fetcher.Fetcher`, a Join's
  features for many keys at a time, equal to the backfill at that millisecond;
- :mod:`~timetile.online.server`: the HTTP service, with response logs.
"""
