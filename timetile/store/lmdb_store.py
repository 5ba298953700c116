"""The embedded store: LMDB, a memory-mapped B+tree in one directory (DESIGN §5).

Layout. One LMDB environment per directory, shared by every :class:`LmdbStore` of that
directory in a process (LMDB forbids opening the same files twice in one process). Per table
two named sub-databases: ``r:{table}`` holds records (key → value) and ``t:{table}`` holds
tiles under the composite key ``len(key) as 2 bytes ‖ key ‖ tile start ‖ member``, where the
tile start is 8 bytes big-endian of ``start XOR 1 << 63`` (two's complement made unsigned,
so negative starts sort first). LMDB sorts keys bytewise, so one cursor range scan returns a
key's tiles in ``[start, end)`` ordered by (tile start, member). A sub-database is created
on its first write; reading a table that was never written returns None / no tiles.

Concurrency. Readers never block and never block the writer: each read runs in one read
transaction (a consistent snapshot), from any thread. Writers are serialized: LMDB allows
one write transaction at a time per environment, across all processes that open the
directory (a lock in ``lock.mdb``); a second writer, say another Spark executor, waits for
the first to commit. So many processes may open one directory (executors writing while a
server reads), but writes do not run in parallel: keep write transactions short and batch
them (one :meth:`LmdbStore.multi_put` per partition chunk, not one per record). Open the
store in the process that uses it: a child forked from a process that has the directory open
cannot open it (py-lmdb refuses, and LMDB forbids using the parent's handle), so fork first
or start workers with ``spawn``. Spark's Python workers are forked from a daemon that opens
nothing, so executors are fine.

Map size. LMDB maps the whole database into virtual memory, up to ``map_size``. The default,
64 GiB, costs address space only (the file grows with the data). When a write still finds
the map full, the store waits for this process's transactions to finish, doubles the map
and retries the write; another process that opened the directory adopts the grown map at
its next transaction.

Durability. With ``sync=True`` (the default) a commit returns after ``fsync``: a committed
write survives a power loss. ``sync=False`` skips the flush: much faster writes, and the
database stays consistent, but an OS crash or power loss may undo the last commits (a
process crash loses nothing). Records and tiles are idempotent, so a writer that can replay
its input (a Spark job, a stream from its checkpoint) may choose ``sync=False``.

Limits. LMDB keys are at most :attr:`LmdbStore.max_key_size` bytes (511 in the standard
build): a record key up to that, a tile's key + member up to 10 bytes fewer. Upload and the
stream write only the keys that :meth:`LmdbStore.fits` (481 bytes), and count the rest. Keys
must not be empty. Values may be large (overflow pages), up to the map size. A store holds
at most :data:`MAX_TABLES` tables: about 500 GroupBys, as each takes two (records, tiles).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import lmdb

from timetile.store.kv import KVStore, StoreUnavailable, Tile, check_table

#: Default map size: 64 GiB of address space, no disk until used.
DEFAULT_MAP_SIZE = 64 << 30
#: The most named tables (LMDB sub-databases) one store holds.
MAX_TABLES = 1024

_SIGN = 1 << 63
_MIN_START = -(1 << 63)
_MAX_START = (1 << 63) - 1
_TILE_OVERHEAD = 2 + 8  # key length prefix + tile start
#: The longest tile member :meth:`LmdbStore.fits` leaves room for: a micro-batch id.
MAX_MEMBER = len(str(-(2**63)))


def _start_bytes(start: int) -> bytes:
    """Encode a tile start (a signed 64-bit integer) so bytewise order is numeric order.

    8 bytes big-endian of ``start + 2**63``: the two's complement with its sign bit flipped.
    """
    if not _MIN_START <= start <= _MAX_START:
        raise ValueError(f"tile start {start} is outside the signed 64-bit range")
    return (start + _SIGN).to_bytes(8, "big")


def _successor(prefix: bytes) -> bytes | None:
    r"""Return the least byte string above every string that starts with ``prefix``.

    >>> _successor(b"ab"), _successor(b"a\xff"), _successor(b"\xff")
    (b'ac', b'b', None)
    """
    kept = prefix.rstrip(b"\xff")
    return kept[:-1] + bytes([kept[-1] + 1]) if kept else None


class _Env:
    """One process's LMDB environment on a directory, shared by its stores.

    Counts the transactions in flight so the map can be resized (doubled on MapFullError, or
    adopted from another process on MapResizedError) when none is: LMDB requires that no
    transaction of the process be active during ``mdb_env_set_mapsize``.
    """

    def __init__(self, path: str, *, map_size: int, readonly: bool, sync: bool) -> None:
        self.path = path
        self.readonly = readonly
        self.users = 0
        self.env = lmdb.open(path, map_size=map_size, readonly=readonly, sync=sync,
                             lock=True, max_dbs=MAX_TABLES, max_readers=512, subdir=True,
                             create=not readonly)
        self._cond = threading.Condition()
        self._open_lock = threading.Lock()  # mdb_dbi_open is not thread-safe
        self._active = 0
        self._resizing = False
        self._dbs: dict[bytes, Any] = {}

    @contextmanager
    def _counted(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                if not self._active:
                    self._cond.notify_all()

    def resize(self, seen: int, new_size: int) -> None:
        """Set the map size to ``new_size`` (0: adopt the file's) once no transaction runs.

        Does nothing when another thread resized since the caller saw the size ``seen``.
        """
        with self._cond:
            while self._resizing or self._active:
                self._cond.wait()
            if self.map_size() != seen:
                return
            self._resizing = True
            try:
                self.env.set_mapsize(new_size)
            finally:
                self._resizing = False
                self._cond.notify_all()

    def map_size(self) -> int:
        """Return the current map size in bytes."""
        return int(self.env.info()["map_size"])

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Any]:
        """Run a transaction that commits when the block ends normally, aborts otherwise."""
        for _ in range(8):
            with self._counted():
                try:
                    txn = self.env.begin(write=write)
                except lmdb.MapResizedError:
                    pass  # another process grew the map: adopt its size, then retry
                else:
                    with txn:
                        yield txn
                    return
            self.resize(self.map_size(), 0)
        raise StoreUnavailable(f"LMDB at {self.path}: the map keeps being resized")

    def db(self, name: bytes, *, create: bool) -> Any:
        """Return a named sub-database's handle; None when missing and not ``create``.

        A handle is opened once per process, outside any other transaction of the thread, in
        a write transaction unless the environment is read-only (LMDB keeps a handle opened
        in a read transaction of a writable environment only until that transaction ends).
        A missing sub-database is looked up in a read transaction first, so reading an
        unknown table never waits for the writer.
        """
        handle = self._dbs.get(name)
        if handle is not None:
            return handle
        with self._open_lock:
            handle = self._dbs.get(name)
            if handle is not None:
                return handle
            if not create and not self._exists(name):
                return None
            for _ in range(8):
                seen = self.map_size()
                try:
                    with self._counted():
                        handle = self.env.open_db(name, create=create)
                except lmdb.NotFoundError:
                    return None
                except lmdb.DbsFullError:
                    table = name.decode(errors="replace").partition(":")[2]
                    raise ValueError(
                        f"LMDB at {self.path} holds {MAX_TABLES} tables, its most, and "
                        f"{table!r} would be one more (each GroupBy takes two). Fix: serve "
                        "the other GroupBys from another store, or from Redis") from None
                except lmdb.MapResizedError:
                    self.resize(seen, 0)
                else:
                    self._dbs[name] = handle
                    return handle
            raise StoreUnavailable(f"LMDB at {self.path}: the map keeps being resized")

    def _exists(self, name: bytes) -> bool:
        """Tell whether a named sub-database exists.

        Its name is a key of the main database (LMDB 1.0 adds a trailing NUL, 0.9 does not).
        """
        with self.transaction(write=False) as txn:
            return txn.get(name) is not None or txn.get(name + b"\0") is not None


_ENVS: dict[tuple[int, str], _Env] = {}
_ENVS_LOCK = threading.Lock()


def _acquire(path: str, *, map_size: int, readonly: bool, sync: bool) -> _Env:
    """Return this process's environment of ``path``; the first opener's settings apply."""
    real = os.path.realpath(path)
    with _ENVS_LOCK:
        shared = _ENVS.get((os.getpid(), real))
        if shared is None:
            if any(other == real for _, other in _ENVS):
                raise StoreUnavailable(
                    f"LMDB at {path} was opened before this process forked, and LMDB cannot "
                    "open it again in the child: open stores after forking (or start "
                    "processes with the 'spawn' method)")
            try:
                if not readonly:
                    os.makedirs(real, exist_ok=True)
                shared = _Env(real, map_size=map_size, readonly=readonly, sync=sync)
            except (lmdb.Error, OSError) as error:
                raise StoreUnavailable(
                    f"cannot open LMDB at {path}: {error}; check that the directory exists "
                    "and is readable (and writable unless readonly=True)") from error
            _ENVS[os.getpid(), real] = shared
        elif shared.readonly and not readonly:
            raise ValueError(f"LMDB at {path} is already open read-only in this process; "
                             "open the writing store first, or close the read-only one")
        shared.users += 1
        return shared


def _release(shared: _Env) -> None:
    with _ENVS_LOCK:
        shared.users -= 1
        if shared.users == 0:
            _ENVS.pop((os.getpid(), shared.path), None)
            shared.env.close()


class LmdbStore(KVStore):
    """A :class:`~timetile.store.kv.KVStore` in an LMDB directory: embedded, no server.

    Args:
        path: the directory (created when missing, unless ``readonly``).
        map_size: the initial map size in bytes; it grows by doubling when full.
        readonly: refuse writes (``ValueError``); the directory may be read-only then.
        sync: fsync each commit (see the module docstring on durability).

    Stores of one directory in one process share one environment, opened with the first
    store's settings. Thread-safe. Reads cost O(k log n) for k keys in one read transaction,
    writes one write transaction per call (atomic).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as path, LmdbStore(path) as store:
    ...     store.multi_put("users", [(b"u1", b"v1")])
    ...     store.put_tiles("clicks", [(b"u1", -60_000, b"m", b"t")])
    ...     store.multi_get("users", [b"u1", b"u2"]), store.get_tiles("clicks", [b"u1"], -60_000, 0)
    ([b'v1', None], [[(-60000, b'm', b't')]])

    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE,
                 readonly: bool = False, sync: bool = True) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
        self._shared: _Env | None = _acquire(self.path, map_size=map_size, readonly=readonly,
                                             sync=sync)
        self.max_key_size: int = self._shared.env.max_key_size()

    def __repr__(self) -> str:
        return f"LmdbStore({self.path!r}, readonly={self.readonly})"

    def _env(self) -> _Env:
        if self._shared is None:
            raise StoreUnavailable(f"{self!r} is closed")
        return self._shared

    def fits(self, key: bytes) -> bool:
        """Whether ``key`` is short enough for a record and for a tile of any stream batch.

        One limit for both: :attr:`max_key_size` less a tile's overhead and the longest
        member a stream writes (:data:`MAX_MEMBER`, an int64 batch id), so a key is either
        served whole or left out whole, never recorded but not streamed.
        """
        return 0 < len(key) <= self.max_key_size - _TILE_OVERHEAD - MAX_MEMBER

    def _check_key(self, key: bytes, limit: int) -> None:
        if not key:
            raise ValueError("keys must not be empty")
        if len(key) > limit:
            raise ValueError(f"LMDB keys must be 1 to {limit} bytes here, got {len(key)}")

    def _write(self, name: bytes, work: Callable[[Any, Any], None]) -> None:
        """Run ``work(txn, db)`` in one write transaction, doubling the map when full."""
        if self.readonly:
            raise ValueError(f"{self!r} is read-only")
        shared = self._env()
        db = shared.db(name, create=True)
        while True:
            seen = shared.map_size()
            try:
                with shared.transaction(write=True) as txn:
                    work(txn, db)
            except lmdb.MapFullError:
                shared.resize(seen, 2 * seen)
            else:
                return

    def multi_get(self, table: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """Return each key's record, None where there is none; one read transaction."""
        shared = self._env()
        db = shared.db(b"r:" + check_table(table).encode(), create=False)
        if db is None:
            return [None] * len(keys)
        with shared.transaction(write=False) as txn:
            limit = self.max_key_size
            return [txn.get(key, db=db) if 0 < len(key) <= limit else None for key in keys]

    def multi_put(self, table: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Write (key, value) records in one write transaction (atomic), replacing."""
        pairs = list(items)
        for key, _ in pairs:
            self._check_key(key, self.max_key_size)

        def work(txn: Any, db: Any) -> None:
            for key, value in pairs:
                txn.put(key, value, db=db)

        self._write(b"r:" + check_table(table).encode(), work)

    def update(self, table: str, key: bytes,
               change: Callable[[bytes | None], bytes]) -> bytes:
        """Replace one record by ``change(value)`` in one write transaction; return it.

        LMDB runs one write transaction at a time, across processes too, so no other write
        falls between the read and the write. ``change`` runs again if the map grows.
        """
        self._check_key(key, self.max_key_size)
        written: list[bytes] = []

        def work(txn: Any, db: Any) -> None:
            value = change(txn.get(key, db=db))
            txn.put(key, value, db=db)
            written[:] = [value]

        self._write(b"r:" + check_table(table).encode(), work)
        return written[0]

    def put_tiles(self, table: str, items: Iterable[tuple[bytes, int, bytes, bytes]]) -> None:
        """Write (key, tile start, member, value) entries in one write transaction."""
        rows = []
        for key, start, member, value in items:
            self._check_key(key, self.max_key_size - _TILE_OVERHEAD - len(member))
            rows.append((len(key).to_bytes(2, "big") + key + _start_bytes(start) + member,
                         value))

        def work(txn: Any, db: Any) -> None:
            for composite, value in rows:
                txn.put(composite, value, db=db)

        self._write(b"t:" + check_table(table).encode(), work)

    def get_tiles(self, table: str, keys: Sequence[bytes], start: int,
                  end: int) -> list[list[Tile]]:
        """Return each key's tiles with ``start <= tile start < end``.

        Sorted by (tile start, member): one cursor range scan per key, all in one read
        transaction.
        """
        shared = self._env()
        db = shared.db(b"t:" + check_table(table).encode(), create=False)
        out: list[list[Tile]] = [[] for _ in keys]
        if db is None or start >= end or start > _MAX_START or end <= _MIN_START:
            return out
        low = _start_bytes(max(start, _MIN_START))
        limit = self.max_key_size - _TILE_OVERHEAD
        with shared.transaction(write=False) as txn:
            cursor = txn.cursor(db=db)
            for tiles, key in zip(out, keys, strict=True):
                prefix = len(key).to_bytes(2, "big") + key
                cut = len(prefix)
                if not 0 < len(key) <= limit or not cursor.set_range(prefix + low):
                    continue
                for composite, value in cursor:
                    if not composite.startswith(prefix):
                        break
                    tile = int.from_bytes(composite[cut:cut + 8], "big") - _SIGN
                    if tile >= end:
                        break
                    tiles.append((tile, composite[cut + 8:], value))
        return out

    def expire_tiles(self, table: str, before: int) -> int:
        """Delete the tile entries that start before ``before``; one write transaction.

        A key's entries sort by start, so the cursor deletes from the first of each key and
        jumps to the next key at the first entry it keeps: O(keys · log n + deleted).
        """
        name = b"t:" + check_table(table).encode()
        if self._env().db(name, create=False) is None:
            return 0
        removed = 0

        def work(txn: Any, db: Any) -> None:
            nonlocal removed
            removed = 0  # a retry after growing the map starts over
            cursor = txn.cursor(db=db)
            if not cursor.first():
                return
            while composite := cursor.key():
                cut = 2 + int.from_bytes(composite[:2], "big")
                if int.from_bytes(composite[cut:cut + 8], "big") - _SIGN < before:
                    cursor.delete()  # moves to the next entry
                    removed += 1
                    continue
                following = _successor(composite[:cut])
                if following is None or not cursor.set_range(following):
                    return

        self._write(name, work)
        return removed

    def ping(self) -> None:
        """Raise :class:`StoreUnavailable` when the store is closed or unreadable."""
        try:
            with self._env().transaction(write=False):
                pass
        except lmdb.Error as error:
            raise StoreUnavailable(f"{self!r}: {error}") from error

    def close(self) -> None:
        """Release this store's share of the environment; idempotent."""
        shared, self._shared = self._shared, None
        if shared is not None:
            _release(shared)
