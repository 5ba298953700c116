"""Fetch latency of one hot key, by where its windows' runs of events begin and end.

One key holds ``--events-per-day`` events (default 50,000) for two days before the upload's
day end ``D``, and as many per day streamed after it, one tile per hour for 40 hours, in an
LMDB store built without Spark (a batch record and tiles, as ``upload`` and the stream write
them). Its GroupBy: count, sum, max, approx_unique_count and last_k (k = 3) of one column over a
1-hour and a 1-day sliding window (10 features). Fetches at random times in two spans:

- ``6-16 h`` after ``D``: the 1-day window's run of streamed events begins at ``D``, one end
  fixed (kept checkpoints); the 1-hour window's moves both ends, but it is too short for
  blocks (at most ``FREE_RUN_BLOCKS`` of them) and is folded whole;
- ``30-40 h`` after ``D``: the 1-day window's run moves both ends too, and spans dozens of
  blocks (:mod:`timetile.core.series_folds`).

Per span: the first fetch of a fresh fetcher (which reads and decodes the record and
tiles, and builds the states it keeps; the median of ``--first`` fetchers); then
``--fetches`` fetches at random times in time order, as a server's clock moves (each hour a
new tile: its kept states carry over); then the same fetches again, in a random order (a
server's steady state). Milliseconds, in process: the first fetch's median, and each
pass's p50 and p99. Compare two trees with ``PYTHONPATH`` (a ``git worktree`` of the older
commit).

    .venv/bin/python benchmarks/hot_key_fetch.py
    .venv/bin/python benchmarks/hot_key_fetch.py --events-per-day 200000 --fetches 500
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS
from timetile.online.fetcher import Fetcher
from timetile.store.kv import KVStore, open_store
from timetile.store.tiles import put_events
from timetile.testing.hand_upload import upload_key

DAY_END = 100 * DAY_MS
STREAMED_HOURS = 40
SPANS = {"6-16 h": (6, 16), "30-40 h": (30, 40)}
OPS = ("count", "sum", "max", "approx_unique_count")  # and last_k


def definition() -> tt.Join:
    """The hot key's Join: one GroupBy of 10 features over column ``x``."""
    aggregations = [tt.Aggregation("x", op, windows=["1h", "1d"]) for op in OPS]
    aggregations.append(tt.Aggregation("x", "last_k", k=3, windows=["1h", "1d"]))
    source = tt.EventSource("events.parquet", time_column="ts")
    return tt.Join("hot", source, [tt.GroupBy("g", source, ["k"], aggregations)])


def fill(store: KVStore, join: tt.Join, per_day: int, rng: np.random.Generator) -> None:
    """Write the key's batch record as of ``DAY_END`` and its hourly tiles since."""
    [group_by] = [part.group_by for part in join.join_parts]
    times = np.sort(rng.integers(DAY_END - 2 * DAY_MS, DAY_END, 2 * per_day)).astype(np.int64)
    upload_key(store, group_by, DAY_END, {"x": (rng.integers(0, 10**6, len(times)), times)},
               value_types={"x": "int"})
    for hour in range(STREAMED_HOURS):
        start = DAY_END + hour * HOUR_MS
        times = np.sort(rng.integers(start, start + HOUR_MS, per_day // 24)).astype(np.int64)
        put_events(store, group_by, pa.table({"k": np.ones(len(times), dtype=np.int64),
                                              "ts": times,
                                              "x": rng.integers(0, 10**6, len(times))}),
                   f"b{hour:04d}")


def fetch_ms(fetcher: Fetcher, at: int) -> float:
    """Return the milliseconds one fetch of the hot key at ``at`` takes."""
    started = time.perf_counter()
    fetcher.fetch([{"k": 1}], at=at)
    return (time.perf_counter() - started) * 1000


def quantiles(millis: list[float]) -> tuple[float, float]:
    """Return the p50 and p99 of ``millis``."""
    ordered = sorted(millis)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--events-per-day", type=int, default=50_000,
                        help="the hot key's events per day, before and after the day end")
    parser.add_argument("--fetches", type=int, default=300, help="timed fetches per span")
    parser.add_argument("--first", type=int, default=5,
                        help="fresh fetchers whose first fetch is timed, per span")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    join = definition()
    rows = []
    with tempfile.TemporaryDirectory() as folder, open_store(f"lmdb://{folder}/store") as store:
        fill(store, join, args.events_per_day, rng)
        for span, (begin, end) in SPANS.items():
            ats = [int(at) for at in rng.integers(DAY_END + begin * HOUR_MS,
                                                  DAY_END + end * HOUR_MS, args.fetches)]
            firsts = [fetch_ms(Fetcher(join, store), at) for at in ats[:args.first]]
            fetcher = Fetcher(join, store)
            onward = [fetch_ms(fetcher, at) for at in sorted(ats)]
            warm = [fetch_ms(fetcher, at) for at in ats]
            rows.append((span, statistics.median(firsts), *quantiles(onward),
                         *quantiles(warm)))
    commit = subprocess.run(["git", "-C", str(Path(tt.__file__).parent), "rev-parse", "--short",
                             "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"hot key: {args.events_per_day:,} events per day; {args.fetches} fetches per span; "
          f"timetile {tt.__file__} ({commit}); Python {platform.python_version()}\n")
    print("| fetch times after D | first fetch | in time order p50 | p99 | again p50 | p99 |")
    print("|---|---:|---:|---:|---:|---:|")
    for span, *millis in rows:
        print(f"| {span} | " + " | ".join(f"{ms:.2f}" for ms in millis) + " |")


if __name__ == "__main__":
    main()
