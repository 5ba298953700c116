"""What expiring old tiles costs, as the store grows around the few keys that have them.

Each store gets N keys with a fresh tile each and, on M of them, an old tile too; then one
``expire_tiles`` removes the M old ones. Run at N and 10·N with the same M: an expiry that
reads only the keys with old tiles (Redis, from its index of oldest starts) costs about the
same at both sizes; one that visits every key (LMDB's cursor, one jump per key; Redis's
``SCAN`` before the index) costs ten times more. Prints a Markdown table of milliseconds,
best of ``--repeat``.

    .venv/bin/python benchmarks/tile_expiry.py
    .venv/bin/python benchmarks/tile_expiry.py --keys 20000 --old 100 --only redis
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack

from timetile.store.kv import KVStore
from timetile.store.lmdb_store import LmdbStore
from timetile.store.redis_store import RedisStore
from timetile.testing import RedisServer

TABLE = "tiles"
FRESH, OLD, CUT = 1_000, 1, 500  # tile starts: fresh ones survive the cut, old ones go
BATCH = 10_000


def fill(store: KVStore, keys: int, old: int) -> None:
    """Give ``keys`` keys a fresh tile each, and ``old`` of them, evenly spread, an old one."""
    for at in range(0, keys, BATCH):
        store.put_tiles(TABLE, [(b"k%d" % i, FRESH + i % 60, b"m", b"v" * 32)
                                for i in range(at, min(keys, at + BATCH))])
    store.put_tiles(TABLE, [(b"k%d" % (n * keys // old), OLD, b"m", b"v") for n in range(old)])


def expiry_ms(store: KVStore, keys: int, old: int, repeat: int) -> float:
    """Return the best time of one ``expire_tiles`` that removes ``old`` tiles, in ms.

    The table's first expiry runs untimed before: on Redis it indexes, once, the tiles
    written before the index existed (a ``SCAN``).
    """
    store.expire_tiles(TABLE, CUT)
    best = float("inf")
    for _ in range(repeat):
        fill(store, keys, old)
        started = time.perf_counter()
        removed = store.expire_tiles(TABLE, CUT)
        best = min(best, time.perf_counter() - started)
        if removed != old:
            raise RuntimeError(f"expired {removed} tiles, expected {old}")
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--keys", type=int, default=20_000, help="N, the smaller store")
    parser.add_argument("--old", type=int, default=100, help="M, keys with an old tile")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="lmdb,redis")
    args = parser.parse_args()
    if args.old < 1 or args.keys < args.old:
        parser.error("give 1 <= --old <= --keys")
    sizes = (args.keys, 10 * args.keys)
    print(f"| store | {sizes[0]:,} keys (ms) | {sizes[1]:,} keys (ms) | ratio |")
    print("|---|---:|---:|---:|")
    with ExitStack() as stack:
        for name in args.only.split(","):
            times = []
            for keys in sizes:
                store: KVStore
                if name == "lmdb":
                    store = LmdbStore(stack.enter_context(tempfile.TemporaryDirectory()))
                elif name == "redis":
                    redis_store = RedisStore(stack.enter_context(RedisServer()).url)
                    redis_store.flush()
                    store = redis_store
                else:
                    parser.error(f"unknown store {name!r}: use lmdb or redis")
                with store:
                    times.append(expiry_ms(store, keys, args.old, args.repeat))
            print(f"| {name} | {times[0]:.1f} | {times[1]:.1f} | {times[1] / times[0]:.2f}× |",
                  flush=True)


if __name__ == "__main__":
    main()
