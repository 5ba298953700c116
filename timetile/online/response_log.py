"""The response log: every served row, as Parquet files a Spark job can read back (DESIGN §5).

:meth:`ResponseLog.log` only appends the response to an in-memory queue, in O(1) and
without waiting on disk: when the queue already holds ``queue_size`` rows, the response is
dropped and counted instead. A background thread writes the queue out when it holds
``max_rows`` rows, when its oldest row has waited ``max_seconds``, and at :meth:`close`.

Files. One file per join per flush (more when a flush holds over ``max_rows`` rows of a join)::

    {log_dir}/{join}/part-{written at, epoch ms, 13 digits}-{seq, 6 digits}.parquet

A file is written under a hidden name (``.part-*.tmp``, which Spark skips), synced to disk
and then linked to its final name, so a reader never sees half a file, even after an OS
crash; names sort by time. Where the file system has no hard links it is renamed to a name
that also holds a random id (``part-...-{seq}-{id}.parquet``), which no other writer takes.
Rows still queued when the process is killed (``SIGKILL``, the OOM killer) are lost, up to
``max_seconds`` of traffic, uncounted: stop a server with ``SIGTERM`` (or Ctrl-C), which
writes them out. Read them with ``pyarrow.parquet.read_table(f"{log_dir}/{join}")`` or
``spark.read.parquet(literal_path(f"{log_dir}/{join}"))``
(:func:`~timetile.spark.sources.literal_path`: Spark reads ``[``, ``{``, ``*``, ``?`` as a
pattern).

Schema (:data:`SCHEMA`), flat, one row per requested row:

==============  ==================  ================================================
column          type                what
==============  ==================  ================================================
request_id      string              the request's id (one request, many rows)
join            string              the Join's name
row_index       int32               the row's position in its request, from 0
request_time    int64               the fetch time ``at``, epoch ms
served_at       int64               when the response was logged, epoch ms
keys            string              the row's key columns, a JSON object
features        string              the features, a JSON object encoded as the HTTP
                                    service encodes them (:mod:`timetile.online.jsonable`:
                                    ``"NaN"``/``"Infinity"`` strings, maps as objects)
stale           list<string>        the GroupBys whose batch record was late
definition      string              what served the row: its result's
                                    :attr:`~timetile.online.fetcher.FetchResult.definition`
                                    (:func:`~timetile.store.layout.served_definition`),
                                    null for a result no Fetcher made, and in files
                                    of earlier builds
==============  ==================  ================================================

The consistency job compares only the rows of the definition it is given; a row without
``definition`` it can only tell apart by its feature names.

Counters: :attr:`ResponseLog.written` and :attr:`ResponseLog.dropped` count rows (not
requests); rows a failed write loses (a full disk) count as dropped and are logged.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from timetile.api.errors import expect_argument
from timetile.api.group_by import IDENTIFIER
from timetile.online.fetcher import FetchResult
from timetile.online.jsonable import dumps

log = logging.getLogger(__name__)

#: The columns of every log file, in order.
SCHEMA = pa.schema([
    ("request_id", pa.string()),
    ("join", pa.string()),
    ("row_index", pa.int32()),
    ("request_time", pa.int64()),
    ("served_at", pa.int64()),
    ("keys", pa.string()),
    ("features", pa.string()),
    ("stale", pa.list_(pa.string())),
    ("definition", pa.string()),
])

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class _Entry:
    """One logged response, as queued: encoded to Parquet by the writer thread only."""

    request_id: str
    join: str
    at: int
    served_at: int
    rows: Sequence[Mapping[str, Any]]
    results: Sequence[FetchResult]
    queued: float  # time.monotonic() when queued


class ResponseLog:
    """Log served responses to Parquet files in ``log_dir``, from a background thread.

    Thread-safe: many request threads may call :meth:`log` at once. Use it as a context
    manager, or call :meth:`close`, so the last rows are written.

    Args:
        log_dir: the directory of the files (created if missing).
        max_rows: write when this many rows wait (also the most rows per file).
        max_seconds: write when the oldest waiting row has waited this long.
        queue_size: the most rows that may wait (being written included); past it,
            :meth:`log` drops the response and counts it in :attr:`dropped`.
        clock: epoch milliseconds now, for ``served_at`` and file names.

    """

    def __init__(self, log_dir: str | os.PathLike[str], *, max_rows: int = 10_000,
                 max_seconds: float = 5.0, queue_size: int = 100_000,
                 clock: Callable[[], int] = _now_ms) -> None:
        given: tuple[object, ...] = (max_rows, queue_size, max_seconds)
        for name, value in zip(("max_rows", "queue_size"), given, strict=False):
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"{name} is {value!r}: give an int of at least 1")
        max_rows, queue_size = int(max_rows), int(queue_size)  # numpy's ints too
        if isinstance(given[2], bool) or not isinstance(given[2], Real) \
                or not max_seconds > 0:
            raise ValueError(f"max_seconds is {max_seconds!r}: give a number above 0")
        expect_argument("log_dir", log_dir, (str, os.PathLike), "a folder",
                        "give the folder the response log writes to, e.g. 'logs/responses'")
        self.log_dir = Path(log_dir)
        if self.log_dir.exists() and not self.log_dir.is_dir():
            raise ValueError(f"log_dir {self.log_dir} is a file: give a folder for the "
                             "response log")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.max_rows = max_rows
        self.max_seconds = max_seconds
        self.queue_size = queue_size
        self._clock = clock
        self._wake = threading.Condition(threading.Lock())
        self._pending: list[_Entry] = []
        self._pending_rows = 0
        self._queued_rows = 0  # pending + being written: what queue_size bounds
        self._written = 0
        self._dropped = 0
        self._closed = False
        self._seq = itertools.count()
        self._thread = threading.Thread(target=self._run, name="timetile-response-log",
                                        daemon=True)
        self._thread.start()

    @property
    def written(self) -> int:
        """Rows written to files so far."""
        return self._written

    @property
    def dropped(self) -> int:
        """Rows dropped so far: the queue was full, or their write failed."""
        return self._dropped

    def log(self, request_id: str, join: str, at: int, rows: Sequence[Mapping[str, Any]],
            results: Sequence[FetchResult]) -> bool:
        """Queue one response; return False when it was dropped because the queue is full.

        O(1): never encodes, never touches the disk, never waits for the writer. ``rows``
        are logged as given (pass the key columns only) and must not change afterwards.
        ``request_id`` is a str and ``at`` an int of epoch milliseconds (numpy's ints too),
        checked here, so that every row the log counts as written has both. Each result's
        ``definition`` (what served it) is logged with it.

        Raises:
            TypeError: ``request_id`` is not a str, or ``at`` is not an int.
            ValueError: ``rows`` and ``results`` differ in length, ``join`` is no name, or
                ``at`` is outside int64.
            RuntimeError: the log is closed.

        """
        if not isinstance(request_id, str):
            raise TypeError(f"request_id is {request_id!r} ({type(request_id).__name__}), not "
                            "a str. Fix: pass the request's id as text, e.g. str(request_id)")
        if isinstance(at, bool) or not isinstance(at, Integral):
            raise TypeError(f"at is {at!r} ({type(at).__name__}), not an int. Fix: pass the "
                            "fetch time as an int of epoch milliseconds (UTC), the `at` given "
                            "to Fetcher.fetch")
        at = int(at)
        if not _INT64_MIN <= at <= _INT64_MAX:
            raise ValueError(f"at is {at}, outside int64. Fix: pass the fetch time as epoch "
                             "milliseconds (UTC), the `at` given to Fetcher.fetch")
        if len(rows) != len(results):
            raise ValueError(f"{len(rows)} rows but {len(results)} results")
        if not IDENTIFIER.match(join):
            raise ValueError(f"{join!r} is not a Join name")
        entry = _Entry(request_id, join, at, self._clock(), rows, results, time.monotonic())
        count = len(rows)
        with self._wake:
            if self._closed:
                raise RuntimeError("the response log is closed")
            if self._queued_rows + count > self.queue_size:
                self._dropped += count
                return False
            self._pending.append(entry)
            self._pending_rows += count
            self._queued_rows += count
            if len(self._pending) == 1 or self._pending_rows >= self.max_rows:
                self._wake.notify()
        return True

    def close(self) -> None:
        """Write what is queued, then stop the writer thread. Idempotent."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    def __enter__(self) -> ResponseLog:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # --- the writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and self._pending_rows < self.max_rows:
                    if not self._pending:
                        self._wake.wait()
                        continue
                    waited = time.monotonic() - self._pending[0].queued
                    if waited >= self.max_seconds:
                        break
                    self._wake.wait(self.max_seconds - waited)
                batch, self._pending, self._pending_rows = self._pending, [], 0
                closing = self._closed
            if batch:
                self._flush(batch)
            if closing:
                return

    def _flush(self, batch: list[_Entry]) -> None:
        """Write ``batch``, one file per join and ``max_rows`` rows; count what it did."""
        by_join: dict[str, list[_Entry]] = {}
        for entry in batch:
            by_join.setdefault(entry.join, []).append(entry)
        for join, entries in by_join.items():
            rows = sum(len(entry.rows) for entry in entries)
            table, unloggable = _loggable(entries)
            try:
                for offset in range(0, table.num_rows, self.max_rows):
                    self._write(join, table.slice(offset, self.max_rows))
            except Exception:
                log.exception("the response log lost %d rows of %s", rows, join)
                with self._wake:
                    self._dropped += rows
                    self._queued_rows -= rows
                continue
            with self._wake:
                self._written += rows - unloggable
                self._dropped += unloggable
                self._queued_rows -= rows

    def _write(self, join: str, table: pa.Table) -> Path:
        """Write one file of ``join`` atomically; return its path."""
        folder = self.log_dir / join
        folder.mkdir(parents=True, exist_ok=True)
        stamp = self._clock()
        # a name no other writer has, even one of the same process id on a shared volume
        unique = uuid.uuid4().hex
        temporary = folder / f".part-{unique}.tmp"
        try:
            pq.write_table(table, temporary)
            _sync(temporary)  # a file an OS crash leaves behind is whole, never empty
            while True:
                path = folder / f"part-{stamp:013d}-{next(self._seq):06d}.parquet"
                try:
                    os.link(temporary, path)
                except FileExistsError:  # another process wrote that name: take the next
                    continue
                except OSError:  # no hard links here: a rename to a name only we use
                    path = folder / f"part-{stamp:013d}-{next(self._seq):06d}-{unique}.parquet"
                    os.replace(temporary, path)
                _sync(folder, folder=True)  # the new name too
                return path
        finally:
            temporary.unlink(missing_ok=True)


#: What ``fsync`` answers where a file system cannot sync.
_CANNOT_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _sync(path: Path, *, folder: bool = False) -> None:
    """Flush ``path`` (a file, or with ``folder`` a folder's entries) to disk.

    Where the file system cannot (``fsync`` answers EINVAL or ENOTSUP: some FUSE and network
    mounts; a folder some systems cannot open), the write stays as durable as that system
    makes it. Any other error (EIO) is raised: the rows count as dropped.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(descriptor)
    except OSError as error:
        if not folder and error.errno not in _CANNOT_SYNC:
            raise
    finally:
        os.close(descriptor)


def _loggable(entries: Sequence[_Entry]) -> tuple[pa.Table, int]:
    """Return the log rows of ``entries``, and how many rows of theirs it left out.

    One table for all of them; should that fail (a value Arrow cannot hold), one per entry,
    so that a bad request loses only its own rows.
    """
    try:
        return _table(entries), 0
    except Exception:  # any value Arrow refuses: the entries are tried one by one
        tables = [_entry_table(entry) for entry in entries]
    kept = [table for table in tables if table is not None]
    lost = sum(len(entry.rows) for entry, table in zip(entries, tables, strict=True)
               if table is None)
    return (pa.concat_tables(kept) if kept else SCHEMA.empty_table()), lost


def _entry_table(entry: _Entry) -> pa.Table | None:
    """Return one entry's log rows, or None (logged) when Arrow cannot hold them."""
    try:
        return _table([entry])
    except Exception:
        log.exception("the response log lost the %d rows of request %s", len(entry.rows),
                      entry.request_id)
        return None


def _table(entries: Sequence[_Entry]) -> pa.Table:
    """Return the log rows of ``entries`` as a table of :data:`SCHEMA`."""
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for entry in entries:
        for index, (row, result) in enumerate(zip(entry.rows, entry.results, strict=True)):
            columns["request_id"].append(entry.request_id)
            columns["join"].append(entry.join)
            columns["row_index"].append(index)
            columns["request_time"].append(entry.at)
            columns["served_at"].append(entry.served_at)
            columns["keys"].append(dumps(row))
            columns["features"].append(dumps(result.features))
            columns["stale"].append(list(result.stale))
            columns["definition"].append(result.definition)
    return pa.table(columns, schema=SCHEMA)
