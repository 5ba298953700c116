"""The server store: Redis, for production serving (DESIGN §5).

Layout, per table and key (key names are binary-safe: the key's raw bytes go in as they are):

- a record is a string ``tt:{table}:r:{key}``, read with one ``MGET`` and written with
  pipelined ``SET`` in a ``MULTI``/``EXEC`` (a :meth:`RedisStore.multi_put` is atomic);
- a key's tiles are a hash ``tt:{table}:t:{key}``, whose field is the tile start as 8 bytes
  big-endian of ``start + 2**63`` (so negative starts sort first) followed by the member, and
  whose value is the tile; plus a sorted set ``tt:{table}:z:{key}`` of the same fields scored
  by tile start, for range reads. Fields of equal score sort bytewise, which is (tile start,
  member) order;
- per table, a sorted set ``tt:{table}:o`` of the keys that have tiles, each scored by its
  oldest tile start: expiry reads there which keys hold tiles to delete, so it touches those
  keys only, never the rest of the database. ``tt:{table}:indexed`` marks a table whose
  older tiles (written before the index existed) have been indexed: the first expiry of a
  table without it scans the database once (``SCAN``) and indexes them.

:meth:`RedisStore.get_tiles` costs two round trips for any number of keys: one pipeline of
``ZRANGEBYSCORE``, then one of ``HMGET``. :meth:`RedisStore.put_tiles` is one
``MULTI``/``EXEC``: a reader sees all of a put or none of it, and a put cut short leaves
nothing behind (entries are idempotent: replay it). It lowers a key's score in the index
only (``ZADD LT``, Redis 6.2 or later); expiry raises it again, per key, in a Lua script
that reads the key's new oldest entry and writes it in one step, so a put running beside it
cannot be left unindexed.

The server must not evict keys (``maxmemory-policy noeviction``, Redis's default): an evicted
record loses features silently, and an evicted index leaves its tiles to no expiry.

Scores are doubles, exact for tile starts up to 2**53 ms (285,000 years); past that the
range bounds are widened by the rounding and the exact filter runs on the client.

Errors: a refused connection, a timeout (2 s by default), a server still loading or one
without the URL's database raise :class:`~timetile.store.kv.StoreUnavailable` naming
the URL (password hidden) and the fix; a URL redis-py would misread (a database path that
is no number, an option its connection does not take) raises ValueError before any
connection (:func:`check_redis_url`). The parser is hiredis when it is installed (redis-py
picks it itself).
"""

from __future__ import annotations

import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import cast

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from timetile.store.kv import KVStore, StoreUnavailable, Tile, check_table, redacted_uri

_SIGN = 1 << 63
#: Tile starts up to this magnitude are exact as Redis scores (doubles).
_EXACT = 1 << 53
#: Keys per expiry round trip.
_EXPIRE_PAGE = 500
#: Fields per ``ZREM``/``HDEL`` command when a key has many tiles to expire.
_DELETE_CHUNK = 1_000

#: Re-index one key after its old tiles went: its oldest remaining tile start, or no entry
#: once it has none. KEYS: the key's sorted set, the table's index; ARGV: the key.
_REINDEX = """
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[1] then
  redis.call('ZADD', KEYS[2], oldest[2], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 0
"""


def _field(start: int, member: bytes) -> bytes:
    """Return a tile's hash field: its start, order-preserving in 8 bytes, then the member."""
    if not -_SIGN <= start < _SIGN:
        raise ValueError(f"tile start {start} is outside the signed 64-bit range")
    return (start + _SIGN).to_bytes(8, "big") + member


def _nonempty(key: bytes) -> bytes:
    """Return ``key``; raise ValueError when it is empty (no store accepts empty keys)."""
    if not key:
        raise ValueError("keys must not be empty")
    return key


#: The URL forms a Redis store or stream takes, for messages.
_URL_FORMS = "redis://[[user]:password@]host:port/db, rediss://... or unix:///path?db=N"


def check_redis_url(url: str) -> None:
    """Raise ValueError naming the fix where redis-py would read ``url`` wrong or fail late.

    redis-py opens database 0 for a path that is no number (``redis://host:6379/abc``), and
    takes an unknown option (``?foo=1``) as an argument its connection refuses only when it
    first connects, with a TypeError; a password holding ``/``, ``?`` or ``#`` that is not
    percent-encoded splits the URL elsewhere (refused without echoing it). Reads the URL
    only: nothing connects.

    >>> check_redis_url("redis://cache:6379/prod")
    Traceback (most recent call last):
    ValueError: Redis URL redis://cache:6379/prod: '/prod' is no database number. Fix: end the URL with the number, e.g. redis://host:6379/0
    """  # noqa: E501  (a doctest's output is one line)
    parts = urllib.parse.urlsplit(url)
    after_host = (parts.query + parts.fragment if parts.scheme == "unix"
                  else parts.path + parts.query + parts.fragment)
    if "@" in after_host:  # the URL is not echoed: its password would show
        raise ValueError(f"a {parts.scheme}:// URL has an '@' after its host: a password "
                         "holding '/', '?', '#' or '@' must be percent-encoded. Fix: write it "
                         "as urllib.parse.quote(password, safe='')")
    path = urllib.parse.unquote(parts.path).strip("/")
    query = urllib.parse.parse_qs(parts.query)
    if parts.scheme != "unix" and path and not path.isdecimal() and "db" not in query:
        raise ValueError(f"Redis URL {redacted_uri(url)}: {parts.path!r} is no database "
                         "number. Fix: end the URL with the number, e.g. redis://host:6379/0")
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.connection_class(**pool.connection_kwargs)  # the arguments' check; no connection
    except TypeError as error:  # an option no connection takes
        raise ValueError(f"Redis URL {redacted_uri(url)}: {error}. Fix: remove the option; "
                         "redis-py's URL options are its connection's, e.g. "
                         "?socket_timeout=5") from None
    except (ValueError, redis.RedisError) as error:  # a value redis-py cannot read
        raise ValueError(f"Redis URL {redacted_uri(url)}: {str(error).rstrip('.')}. Fix: "
                         f"write it as {_URL_FORMS}, with options as redis-py reads them "
                         "(e.g. ?socket_timeout=5)") from None


class RedisStore(KVStore):
    """A :class:`~timetile.store.kv.KVStore` on a Redis server.

    Construction does not connect: the first call does (use :meth:`ping` to check).
    Thread-safe: calls share a pool of connections. A dropped connection is retried twice
    with a short backoff before :class:`~timetile.store.kv.StoreUnavailable`.

    Args:
        url: ``redis://[[user]:password@]host:port/db``, ``rediss://...`` (TLS) or
            ``unix:///path/to/socket?db=N``, as redis-py's ``from_url`` reads it.
        timeout: seconds to connect and to wait for each reply.
        max_connections: the connection pool's size; a thread takes one per call.

    """

    def __init__(self, url: str, *, timeout: float = 2.0, max_connections: int = 64) -> None:
        check_redis_url(url)
        self.url = url
        self._pool: redis.ConnectionPool | None = redis.ConnectionPool.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout,
            max_connections=max_connections, health_check_interval=30,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2))
        self._client = redis.Redis(connection_pool=self._pool)
        self._reindex = self._client.register_script(_REINDEX)

    def __repr__(self) -> str:
        return f"RedisStore({redacted_uri(self.url)!r})"

    @contextmanager
    def _guard(self) -> Iterator[redis.Redis]:
        """Yield the client; turn connection errors and timeouts into StoreUnavailable."""
        if self._pool is None:
            raise StoreUnavailable(f"{self!r} is closed")
        try:
            yield self._client
        except (redis.ConnectionError, redis.TimeoutError) as error:
            raise StoreUnavailable(
                f"Redis at {redacted_uri(self.url)} is unavailable ({error}): start redis-server "
                "or check the URL") from error

    def _name(self, table: str, kind: bytes, key: bytes) -> bytes:
        return b"tt:" + check_table(table).encode() + kind + key

    def multi_get(self, table: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """Return each key's record, None where there is none: one ``MGET``."""
        prefix = self._name(table, b":r:", b"")
        if not keys:
            return []
        with self._guard() as client:
            values = client.mget([prefix + key for key in keys])
        return cast("list[bytes | None]", values)  # bytes: decode_responses is off

    def multi_put(self, table: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Write (key, value) records: pipelined ``SET`` in one ``MULTI``/``EXEC``."""
        prefix = self._name(table, b":r:", b"")
        pairs = [(prefix + _nonempty(key), value) for key, value in items]
        if not pairs:
            return
        with self._guard() as client:
            pipe = client.pipeline(transaction=True)
            for name, value in pairs:
                pipe.set(name, value)
            pipe.execute()

    def update(self, table: str, key: bytes,
               change: Callable[[bytes | None], bytes]) -> bytes:
        """Replace one record by ``change(value)``: ``WATCH``, ``GET``, then ``MULTI``/``EXEC``.

        ``EXEC`` fails when another client wrote the record after the ``WATCH``; redis-py
        then runs the whole again, ``change`` included, until one goes through.
        """
        name = self._name(table, b":r:", _nonempty(key))
        written: list[bytes] = []

        def attempt(pipe: redis.client.Pipeline) -> None:
            written[:] = [change(cast("bytes | None", pipe.get(name)))]
            pipe.multi()
            pipe.set(name, written[0])

        with self._guard() as client:
            client.transaction(attempt, name)
        return written[0]

    def put_tiles(self, table: str, items: Iterable[tuple[bytes, int, bytes, bytes]]) -> None:
        """Write (key, tile start, member, value) entries in one ``MULTI``/``EXEC``.

        One ``HSET`` and one ``ZADD`` per distinct key, then one ``ZADD LT`` of the keys'
        oldest starts into the table's index; the same (key, tile start, member) replaces its
        value.
        """
        values: dict[bytes, dict[bytes, bytes]] = defaultdict(dict)
        scores: dict[bytes, dict[bytes, int]] = defaultdict(dict)
        for key, start, member, value in items:
            field = _field(start, member)
            values[_nonempty(key)][field] = value
            scores[key][field] = start
        if not values:
            return
        hashes = self._name(table, b":t:", b"")
        zsets = self._name(table, b":z:", b"")
        with self._guard() as client:
            pipe = client.pipeline(transaction=True)
            for key, fields in values.items():
                pipe.hset(hashes + key, mapping=fields)  # type: ignore[arg-type]
                pipe.zadd(zsets + key, scores[key])
            pipe.zadd(self._name(table, b":o", b""),
                      {key: min(starts.values()) for key, starts in scores.items()}, lt=True)
            pipe.execute()

    def get_tiles(self, table: str, keys: Sequence[bytes], start: int,
                  end: int) -> list[list[Tile]]:
        """Return each key's tiles with ``start <= tile start < end``.

        Sorted by (tile start, member). Two round trips for all keys: a pipeline of
        ``ZRANGEBYSCORE`` (bounds inclusive, filtered exactly here), then one of ``HMGET``.
        """
        hashes = self._name(table, b":t:", b"")
        zsets = self._name(table, b":z:", b"")
        out: list[list[Tile]] = [[] for _ in keys]
        start, end = max(start, -_SIGN), min(end, _SIGN)
        if start >= end or not keys:
            return out
        low, high = _field(start, b""), _field(end - 1, b"")
        with self._guard() as client:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.zrangebyscore(zsets + key, start, end)
            found = [[field for field in fields if low <= field[:8] <= high]
                     for fields in pipe.execute()]
            pipe = client.pipeline(transaction=False)
            for key, fields in zip(keys, found, strict=True):
                if fields:
                    pipe.hmget(hashes + key, fields)
            values = iter(pipe.execute())
        for tiles, fields in zip(out, found, strict=True):
            if fields:
                for field, value in zip(fields, next(values), strict=True):
                    if value is not None:
                        tiles.append((int.from_bytes(field[:8], "big") - _SIGN, field[8:], value))
        return out

    def expire_tiles(self, table: str, before: int) -> int:
        """Delete the tile entries that start before ``before``.

        The table's index of oldest starts names the keys that hold such entries, 500 at a
        time; per page one pipeline of ``ZRANGEBYSCORE``, then one of ``ZREM`` + ``HDEL`` and
        the keys' re-indexing. O(log n + deleted + keys touched): the keys without old tiles
        and the rest of the database are never read, except by a table's first expiry, which
        indexes the tiles written before the index existed (one ``SCAN``). The index entry
        of a tile goes before its value: a value whose index entry is gone is never read.
        """
        index = self._name(table, b":o", b"")
        removed = 0
        with self._guard() as client:
            self._index_older_tiles(client, table)
            # Scores are doubles: the keys scored below before's double page out (each page's
            # keys move to an oldest start >= before, so the loop ends).
            while page := client.zrangebyscore(index, "-inf", f"({before}", start=0,
                                               num=_EXPIRE_PAGE):
                removed += self._expire_keys(client, table, cast("list[bytes]", page), before)
            if abs(before) >= _EXACT:  # only there can an older start share before's double
                tied: list[bytes] = []
                while page := client.zrangebyscore(index, before, before, start=len(tied),
                                                   num=_EXPIRE_PAGE):
                    tied.extend(cast("list[bytes]", page))
                for at in range(0, len(tied), _EXPIRE_PAGE):
                    removed += self._expire_keys(client, table, tied[at:at + _EXPIRE_PAGE],
                                                 before)
        return removed

    def _index_older_tiles(self, client: redis.Redis, table: str) -> None:
        """Index the tiles of ``table`` written before its index existed; once per table.

        A ``SCAN`` of the database's key names for the table's sorted sets, adding each one's
        oldest start with ``ZADD LT``; then the table is marked, and never scanned again.
        """
        marker = self._name(table, b":indexed", b"")
        if client.exists(marker):
            return
        index = self._name(table, b":o", b"")
        zsets = self._name(table, b":z:", b"")
        names = list(dict.fromkeys(  # SCAN may return a name twice
            cast("list[bytes]", client.scan_iter(match=zsets + b"*", count=_EXPIRE_PAGE))))
        for at in range(0, len(names), _EXPIRE_PAGE):
            page = names[at:at + _EXPIRE_PAGE]
            pipe = client.pipeline(transaction=False)
            for name in page:
                pipe.zrange(name, 0, 0, withscores=True)
            oldest = {name[len(zsets):]: first[0][1]
                      for name, first in zip(page, pipe.execute(), strict=True) if first}
            if oldest:
                client.zadd(index, oldest, lt=True)
        client.set(marker, b"1")

    def _expire_keys(self, client: redis.Redis, table: str, keys: list[bytes],
                     before: int) -> int:
        """Expire the entries before ``before`` of ``keys``, re-index them; return how many."""
        index = self._name(table, b":o", b"")
        hashes = self._name(table, b":t:", b"")
        zsets = self._name(table, b":z:", b"")
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.zrangebyscore(zsets + key, "-inf", before)
        found = [[field for field in fields if int.from_bytes(field[:8], "big") - _SIGN < before]
                 for fields in pipe.execute()]
        pipe = client.pipeline(transaction=False)
        for key, fields in zip(keys, found, strict=True):
            for at in range(0, len(fields), _DELETE_CHUNK):
                chunk = fields[at:at + _DELETE_CHUNK]
                pipe.zrem(zsets + key, *chunk)
                pipe.hdel(hashes + key, *chunk)
            self._reindex(keys=[zsets + key, index], args=[key], client=pipe)
        pipe.execute()
        return sum(map(len, found))

    def ping(self) -> None:
        """Raise :class:`~timetile.store.kv.StoreUnavailable` unless the server answers."""
        with self._guard() as client:
            try:
                client.ping()
            except redis.ResponseError as error:  # e.g. a database the server does not have
                raise StoreUnavailable(
                    f"Redis at {redacted_uri(self.url)} refused the connection ({error}): "
                    "check the URL's database number and options") from error

    def flush(self) -> None:
        """Delete every key of the URL's database (``FLUSHDB``), not only timetile's.

        For tests and scratch servers only.
        """
        with self._guard() as client:
            client.flushdb()

    def close(self) -> None:
        """Close the pool's connections; idempotent."""
        pool, self._pool = self._pool, None
        if pool is not None:
            self._client.close()
            pool.disconnect()
