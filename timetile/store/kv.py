"""The key-value store interface of online serving (DESIGN §5).

Two kinds of data live in a store, both as bytes in named tables:

- **records**: one value per key (a GroupBy's batch record per entity key, metadata), read
  many keys at a time with :meth:`KVStore.multi_get`, written with :meth:`KVStore.multi_put`
  (a put replaces: writes are idempotent);
- **tiles**: per key, values indexed by (tile start in epoch ms, member), read by time range
  with :meth:`KVStore.get_tiles`. A streaming micro-batch writes its events of one
  (key, tile) under its own member, so a replayed micro-batch rewrites the same entry and
  never double counts. Tiles older than the batch records need are deleted with
  :meth:`KVStore.expire_tiles` (``upload`` does it).

Implementations: :class:`timetile.store.lmdb_store.LmdbStore` (embedded, the default) and
:class:`timetile.store.redis_store.RedisStore`. :func:`open_store` picks one from a URI.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from timetile.api.errors import expect_argument

#: One tile entry: (tile start in epoch ms, member, value).
Tile = tuple[int, bytes, bytes]


class StoreUnavailable(RuntimeError):  # noqa: N818  (reads as a state, like TimeoutError)
    """The store cannot be reached (a server down, a path not readable)."""


class KVStore(ABC):
    """Bytes in named tables: records by key, and tiles by key and time. Thread-safe."""

    @abstractmethod
    def multi_get(self, table: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """Return the value of each key, None where there is none; one round trip."""

    @abstractmethod
    def multi_put(self, table: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Write (key, value) pairs, replacing what is there (atomic per call where possible)."""

    @abstractmethod
    def update(self, table: str, key: bytes,
               change: Callable[[bytes | None], bytes]) -> bytes:
        """Replace one record by ``change(its value, None if none)`` atomically; return it.

        No other write of the record falls between the read and the write, from any thread
        or process: two updates of a counter never take the same number (one may skip a
        number, where a store retries a write that went through). ``change`` may run more
        than once (a store retries when the record changed under it), so it must depend on
        its argument alone. LMDB: one write transaction; Redis: three round trips, again
        per retry.
        """

    @abstractmethod
    def put_tiles(self, table: str, items: Iterable[tuple[bytes, int, bytes, bytes]]) -> None:
        """Write (key, tile start, member, value) entries; the same triple replaces its value."""

    @abstractmethod
    def get_tiles(self, table: str, keys: Sequence[bytes], start: int,
                  end: int) -> list[list[Tile]]:
        """Return each key's tiles with ``start <= tile start < end``.

        Sorted by (tile start, member); a fixed number of round trips for all keys (LMDB:
        one read transaction; Redis: two pipelines).
        """

    @abstractmethod
    def expire_tiles(self, table: str, before: int) -> int:
        """Delete every tile entry of ``table`` whose tile start is before ``before``.

        Returns how many entries went. LMDB: one write transaction, O(keys · log n +
        deleted); Redis: the table's index of each key's oldest start names the keys with
        old tiles, O(keys touched · log n + deleted).
        """

    def fits(self, key: bytes) -> bool:
        """Return whether the store can hold ``key``, as a record's and as a tile's.

        Every non-empty key fits, unless a store limits them (LMDB: 481 bytes).
        """
        return bool(key)

    @abstractmethod
    def ping(self) -> None:
        """Raise :class:`StoreUnavailable` when the store cannot be used."""

    @abstractmethod
    def close(self) -> None:
        """Release connections and handles; the store cannot be used afterwards."""

    def __enter__(self) -> KVStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def open_store(uri: str | os.PathLike[str]) -> KVStore:
    """Open a store from a URI, and check that it can be used.

    Accepted forms:

    - ``lmdb:///abs/path``, ``lmdb:relative/path`` or a bare filesystem path (a ``str`` or
      a path-like object): an
      :class:`~timetile.store.lmdb_store.LmdbStore` on that directory. The ``lmdb:`` forms
      take options as a query: ``?readonly=1``, ``?sync=0``, ``?map_size=BYTES``;
    - ``redis://[[user]:password@]host:port/db``, ``rediss://...`` (TLS) and
      ``unix:///path/to/socket?db=N``: a :class:`~timetile.store.redis_store.RedisStore`.

    The backends are imported only when asked for.

    Raises:
        ValueError: the URI names no known store, or a Redis URL names no database number
            or an option redis-py's connection does not take.
        StoreUnavailable: the store cannot be reached, or refuses the connection (a
            database number the server does not have).

    >>> open_store("s3://bucket/store")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: unknown store URI 's3://bucket/store': use lmdb:///abs/path, ...

    """
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    expect_argument("uri", uri, str, "a store URI",
                    "give a str such as 'lmdb:/data/store' or 'redis://host:6379/0'")
    store: KVStore
    if uri.startswith(("redis://", "rediss://", "unix://")):
        from timetile.store.redis_store import RedisStore  # noqa: PLC0415  (lazy backend)

        store = RedisStore(uri)
    else:
        path, options = _lmdb_location(uri)
        from timetile.store.lmdb_store import LmdbStore  # noqa: PLC0415  (lazy backend)

        store = LmdbStore(path, **options)
    try:
        store.ping()
    except BaseException:
        store.close()
        raise
    return store


def local_store_path(uri: str) -> str | None:
    """Return the directory of an embedded (LMDB) store URI, None for a Redis one.

    Lets a reader (``fetch``, ``serve``, ``stream``) tell a mistyped path from an empty
    store before :func:`open_store` creates one there.

    Raises:
        ValueError: the URI names no known store.

    """
    if uri.startswith(("redis://", "rediss://", "unix://")):
        return None
    return _lmdb_location(uri)[0]


def absolute_uri(uri: str) -> str:
    """Return ``uri`` with a relative LMDB directory made absolute, from this process's folder.

    For URIs sent to Spark's executors: their Python workers keep the folder the JVM started
    in, which a ``chdir`` on the driver does not move, so a relative path would name another
    store there.

    Raises:
        ValueError: the URI names no known store.

    """
    path = local_store_path(uri)
    if path is None or os.path.isabs(path):
        return uri
    if not uri.startswith("lmdb:"):  # a bare path
        return os.path.abspath(path)
    query = uri.partition("?")[2]
    return (f"lmdb://{urllib.parse.quote(os.path.abspath(path))}"
            + (f"?{query}" if query else ""))


_ACCEPTED = ("lmdb:///abs/path, lmdb:relative/path, a bare directory path, redis://host:port/db, "
             "rediss://host:port/db or unix:///path/to/redis.sock")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def _lmdb_location(uri: str) -> tuple[str, dict[str, Any]]:
    """Split an LMDB URI (or bare path) into its directory and LmdbStore keyword options."""
    bad = ValueError(f"unknown store URI {uri!r}: use {_ACCEPTED}")
    if not uri.startswith("lmdb:"):
        if not uri or "://" in uri or _SCHEME.match(uri):
            raise bad
        return uri, {}
    rest = uri[len("lmdb:"):]
    if rest.startswith("//"):
        rest = rest[2:]
        if not rest.startswith("/"):  # lmdb://host/... names a host, not a path
            raise bad
    path, _, query = rest.partition("?")
    if not path:
        raise bad
    options: dict[str, Any] = {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if name in ("readonly", "sync") and value.lower() in _TRUE + _FALSE:
            options[name] = value.lower() in _TRUE
        elif name == "map_size" and value.isdigit():
            options[name] = int(value)
        else:
            raise ValueError(f"unknown LMDB option {name}={value!r} in {uri!r}: use readonly=0|1, "
                             "sync=0|1 or map_size=BYTES")
    return urllib.parse.unquote(path), options


_TABLE = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")


def check_table(table: str) -> str:
    """Return ``table`` when it is a valid table name, else raise ValueError.

    A name is 1 to 200 of ``A-Z a-z 0-9 _ . -``: no ``:``, which separates the parts of a
    Redis key name, so no two (table, key) pairs share one.

    >>> check_table("tt_batch.purchases")
    'tt_batch.purchases'
    """
    if not isinstance(table, str) or not _TABLE.match(table):
        raise ValueError(f"bad table name {table!r}: use 1 to 200 of A-Z a-z 0-9 _ . -")
    return table


#: An option holding a password, as a URL's query writes it.
_PASSWORD_OPTION = re.compile(r"(?<=[?&])([^=&#]*password)=[^&#]*")


def redacted_uri(uri: str) -> str:
    """Return ``uri`` with its password, if any, replaced by ``***``: for logs and messages.

    A password is hidden in the URL's user part, up to the URL's last ``@`` (a password
    holding ``/``, ``?`` or ``#`` not percent-encoded included), and in every option whose
    name ends in ``password`` (redis-py reads ``password`` and ``ssl_password``); the rest
    is kept as written.

    >>> redacted_uri("redis://:s3cret@cache:6379/0"), redacted_uri("lmdb:/data/store")
    ('redis://:***@cache:6379/0', 'lmdb:/data/store')
    >>> redacted_uri("redis://cache:6379/0?password=s3cret&db=1")
    'redis://cache:6379/0?password=***&db=1'
    >>> redacted_uri("redis://app:ab/c?d@cache:6379/0")
    'redis://app:***@cache:6379/0'
    """
    scheme, slashes, rest = uri.partition("://")
    if slashes and "@" in rest:
        credentials, _, place = rest.rpartition("@")
        user, colon, _ = credentials.partition(":")
        if colon:
            uri = f"{scheme}://{user}:***@{place}"
    return _PASSWORD_OPTION.sub(r"\1=***", uri)
