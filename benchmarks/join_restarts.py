"""The streaming interval join killed with ``kill -9`` and restarted: exactly the batch join's rows.

One command runs everything and writes the section ``stream join restarts`` of RESULTS.md:

    .venv/bin/python benchmarks/join_restarts.py              # 5 kills, 20,000 rows per input
    .venv/bin/python benchmarks/join_restarts.py --kills 8 --rows 50000 --no-results

Orders and deliveries (Zipf-skewed users, deliveries 0-2 h after their order, both inputs out
of order by up to 10 minutes, so with a lateness of 15 minutes no row is late) land as
JSON-lines files, 40 per input, then a last file on each input far in the future that joins
nothing and moves the watermark past every bound. ``timetile join stream`` runs in its own
process group with a 0.5 s trigger and one file per input per micro-batch; it is SIGKILLed
(JVM, Python workers and all) ``--kills`` times, each once a random number of micro-batches
more are committed and a random moment (0-1.5 s) later, each time restarted from its
checkpoint; a last run ``--until-idle`` drains the files. Its output must hold exactly
the rows of the batch join (``timetile join run``'s) on the same rows: when no row is late
the uninterrupted stream writes those (tests/streaming/test_interval_join_stream.py), so
any row lost, written twice, or wrongly null-padded across the kills shows as a difference.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

from _report import run_lines, verdict, write_section

from timetile.cli.common import load_interval_joins
from timetile.spark.interval_join import joined_rows
from timetile.spark.session import local_session
from timetile.streaming.file_source import land_json_lines
from timetile.streaming.interval_join import LATE, read_join_output

HOUR_MS = 3_600_000
START = 1_704_067_200_000  # 2024-01-01
FAR = START + 3_650 * 24 * HOUR_MS
DEFS = '''
import timetile as tt

delivered = tt.IntervalJoin(
    name="delivered",
    left=tt.EventSource("{data}/orders", time_column="order_time"),
    right=tt.EventSource("{data}/deliveries", time_column="delivery_time"),
    on=["user_id"], how="full",
    condition="r.delivery_time BETWEEN l.order_time AND l.order_time + INTERVAL 1 HOUR")
'''


def inputs(rows: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """Orders and their deliveries, each in time order but for up to 10 minutes' disorder."""
    rng = np.random.default_rng(seed)
    users = rng.zipf(1.3, rows * 3)
    users = users[users <= 20_000][:rows].astype(np.int64)
    order_time = np.sort(rng.integers(START, START + 48 * HOUR_MS, rows))
    delivered = rng.random(rows) < 0.8
    delivery_time = order_time + rng.integers(0, 2 * HOUR_MS, rows)
    orders = pa.table({"user_id": users, "order_time": _shuffled(order_time, rng),
                       "amount": np.round(rng.exponential(30.0, rows), 2)})
    deliveries = pa.table({"user_id": users[delivered],
                           "delivery_time": _shuffled(np.sort(delivery_time[delivered]), rng)})
    return orders, deliveries


def _shuffled(times: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sorted ``times`` moved by up to 5 minutes each: out of order by up to 10 minutes."""
    return times + rng.integers(-5 * 60_000, 5 * 60_000, len(times))


def _landed(work: Path, rows: int, files: int, seed: int) -> Path:
    """Write the inputs as tables and as landed files; return the definitions file."""
    orders, deliveries = inputs(rows, seed)
    for name, table in (("orders", orders), ("deliveries", deliveries)):
        (work / "data" / name).mkdir(parents=True)
        pq.write_table(table, work / "data" / name / "part-0.parquet")
        land_json_lines(work / "landing" / name, table.to_pylist(), files)
        column = "order_time" if name == "orders" else "delivery_time"
        land_json_lines(work / "landing" / name, [{"user_id": -1, column: FAR}], 1,
                        first=files)
    defs = work / "defs.py"
    defs.write_text(DEFS.format(data=work / "data"))
    return defs


def _committed(commits: Path) -> int:
    """How many micro-batches the checkpoint has committed."""
    return len(list(commits.glob("[0-9]*"))) if commits.exists() else 0


def main(argv: list[str] | None = None) -> int:
    """Run the kills; print and record whether the output equals the batch join's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-results", action="store_true",
                        help="print only; leave RESULTS.md as it is")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="timetile-join-restarts-"))
    defs = _landed(work, args.rows, args.files, args.seed)
    command = [sys.executable, "-m", "timetile", "join", "stream", str(defs),
               "--left", f"dir:{work / 'landing' / 'orders'}?maxFilesPerTrigger=1",
               "--right", f"dir:{work / 'landing' / 'deliveries'}?maxFilesPerTrigger=1",
               "--output", str(work / "out"), "--checkpoint", str(work / "checkpoint"),
               "--lateness", "15m", "--trigger-seconds", "0.5"]
    began = time.perf_counter()
    killed_at = []
    commits = work / "checkpoint" / "commits"
    for kill in range(args.kills):
        # each run until a random number of micro-batches more are committed, then killed a
        # random moment later: mid-batch, between batches, or while it commits
        done = _committed(commits)
        target = done + rng.randint(1, max(1, 2 * args.files // args.kills))
        with (work / f"run-{kill}.log").open("w") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            deadline = time.monotonic() + 120
            while _committed(commits) < target and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        killed_at.append(_committed(commits))
        print(f"kill {kill + 1}: after {killed_at[-1]} committed micro-batches", flush=True)
    with (work / "run-last.log").open("w") as log:
        subprocess.run([*command, "--until-idle"], stdout=log, stderr=subprocess.STDOUT,
                       check=True)
    seconds = time.perf_counter() - began
    spark = local_session("join-restarts")
    join = load_interval_joins(defs)["delivered"]
    columns = ["l_user_id", "l_order_time", "l_amount", "r_user_id", "r_delivery_time",
               "joined_at"]
    expected = Counter(map(tuple, joined_rows(spark, join).select(*columns).collect()))
    written = read_join_output(spark, str(work / "out")).where(
        "coalesce(l_user_id, r_user_id) <> -1").select(*columns).collect()
    got = Counter(map(tuple, written))
    late = read_join_output(spark, str(work / "out"), LATE).count()
    same = got == expected and late == 0
    lines = [f"kills after {killed_at} committed micro-batches; {len(written):,} rows written, "
             f"{sum(expected.values()):,} expected, {late} late; "
             f"missing {sum((expected - got).values())}, extra {sum((got - expected).values())}"
             f"; {seconds:.0f} s in all"]
    print(lines[0])
    if not args.no_results:
        write_section(Path(__file__).parent / "RESULTS.md", "stream join restarts", [
            *run_lines("join_restarts.py", argv), "", *lines, "",
            verdict(f"{args.kills} kill -9 and restarts write exactly the batch join's rows",
                    same, f"{sum(got.values()):,} rows")])
    spark.stop()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
