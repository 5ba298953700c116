"""The online store: its record layout and its backends, free of Spark (DESIGN §3, §5).

The upload (a Spark job, :mod:`timetile.offline.upload`), the streaming job
(:mod:`timetile.streaming`) and the fetcher (:mod:`timetile.online`) meet here, and only here:

- :mod:`~timetile.store.kv`: the :class:`~timetile.store.kv.KVStore` interface and
  :func:`~timetile.store.kv.open_store` (a URI to a store);
- :mod:`~timetile.store.lmdb_store` (embedded, the default) and
  :mod:`~timetile.store.redis_store` (a server, for production);
- :mod:`~timetile.store.layout`: the tables, keys and versioned records of a GroupBy, and the
  metadata an upload writes;
- :mod:`~timetile.store.tiles`: the streaming tiles, written per micro-batch;
- :mod:`~timetile.store.entity_records`: an entity source's records and its change log.

The bytes inside a record are the aggregators' own (:mod:`timetile.core`), so every writer
and reader agrees by construction.
"""
