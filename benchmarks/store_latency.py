"""Latency of multi_get on the online stores: LMDB, Redis, and SQLite for comparison.

Puts N records (default 100K) of 300 random bytes into each store, then times multi_get of
1, 10 and 100 random keys that exist: p50 and p99 over 2,000 calls each, in microseconds,
after 200 warm-up calls. Also times the load (records per second, batches of 10,000, each
batch one durable commit). Prints a Markdown table.

- ``lmdb``: :class:`timetile.store.lmdb_store.LmdbStore` in a temporary directory,
  ``sync=True`` (fsync per commit);
- ``redis``: :class:`timetile.store.redis_store.RedisStore` on a throwaway local
  ``redis-server`` (no persistence) over TCP on 127.0.0.1, or ``--redis-url``;
- ``sqlite``: stdlib ``sqlite3``, WAL mode, ``synchronous=FULL``, a ``WITHOUT ROWID`` table
  keyed by the key, read with ``SELECT k, v FROM kv WHERE k IN (?, ...)``: the obvious
  embedded alternative.

    .venv/bin/python benchmarks/store_latency.py
    .venv/bin/python benchmarks/store_latency.py --records 10000 --calls 500 --only lmdb,sqlite
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from functools import partial

from timetile.store.lmdb_store import LmdbStore
from timetile.store.redis_store import RedisStore
from timetile.testing import RedisServer

Getter = Callable[[Sequence[bytes]], list[bytes | None]]
Loader = Callable[[list[tuple[bytes, bytes]]], None]


class SqliteKV:
    """The SQLite contender: one connection, WAL, records in a WITHOUT ROWID table."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def put(self, items: list[tuple[bytes, bytes]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", items)
        self.db.execute("COMMIT")

    def get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        marks = ",".join("?" * len(keys))
        found = dict(self.db.execute(f"SELECT k, v FROM kv WHERE k IN ({marks})", keys))
        return [found.get(key) for key in keys]


def percentiles(samples: list[int]) -> tuple[float, float]:
    """p50 and p99 of nanosecond samples, in microseconds."""
    ordered = sorted(samples)
    return (ordered[len(ordered) // 2] / 1e3, ordered[int(len(ordered) * 0.99)] / 1e3)


def cpu_model() -> str:
    """The CPU's model name (Linux), else the machine type."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def measure(name: str, load: Loader, get: Getter, args: argparse.Namespace) -> list[str]:
    rng = random.Random(args.seed)
    keys = [b"user:%012d" % i for i in range(args.records)]
    began = time.perf_counter()
    for low in range(0, args.records, 10_000):
        load([(key, rng.randbytes(args.value_size)) for key in keys[low:low + 10_000]])
    rate = args.records / (time.perf_counter() - began)
    cells = [name, f"{rate:,.0f}"]
    for size in args.sizes:
        batches = [rng.sample(keys, size) for _ in range(args.calls + 200)]
        for batch in batches[:200]:
            get(batch)
        samples = []
        for batch in batches[200:]:
            start = time.perf_counter_ns()
            values = get(batch)
            samples.append(time.perf_counter_ns() - start)
            assert len(values) == size
            assert None not in values
        p50, p99 = percentiles(samples)
        cells.append(f"{p50:,.0f} / {p99:,.0f}")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-size", type=int, default=300)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 10, 100])
    parser.add_argument("--only", default="lmdb,redis,sqlite")
    parser.add_argument("--redis-url", help="use this server instead of starting one")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = []
    with ExitStack() as stack:
        where = stack.enter_context(tempfile.TemporaryDirectory(prefix="timetile-bench-"))
        for name in args.only.split(","):
            if name == "lmdb":
                lmdb_store = LmdbStore(os.path.join(where, "lmdb"))
                stack.enter_context(lmdb_store)
                rows.append(measure("LMDB (sync)", partial(lmdb_store.multi_put, "t"),
                                    partial(lmdb_store.multi_get, "t"), args))
            elif name == "redis":
                url = args.redis_url or stack.enter_context(RedisServer()).url
                redis_store = RedisStore(url)
                stack.enter_context(redis_store)
                redis_store.flush()
                rows.append(measure("Redis (TCP, localhost)", partial(redis_store.multi_put, "t"),
                                    partial(redis_store.multi_get, "t"), args))
            elif name == "sqlite":
                sqlite = SqliteKV(os.path.join(where, "kv.sqlite"))
                stack.callback(sqlite.db.close)
                rows.append(measure("SQLite (WAL, sync FULL)", sqlite.put, sqlite.get, args))
            else:
                parser.error(f"unknown store {name!r}: use lmdb, redis, sqlite")
    print(f"{args.records:,} records of {args.value_size} B; multi_get p50 / p99 in µs over "
          f"{args.calls:,} calls; {os.cpu_count()} cores, {cpu_model()}, "
          f"Python {platform.python_version()}\n")
    head = ["store", "load (records/s)", *(f"get {size} keys" for size in args.sizes)]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
