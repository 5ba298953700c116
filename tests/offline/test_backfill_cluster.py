"""``timetile backfill`` through ``spark-submit`` on a local cluster equals the same backfill here.

A local cluster (``local-cluster[2,1,1024]``) runs the driver and two executors in separate
JVMs, each with its own Python workers, as a cluster does: what only local mode lets work
(driver state read on the executors, paths or settings only the driver sees) fails here. The
Join is both examples' parts together (sweep, interval tree, entity parts, derivations) and a
part of short windows, run as ``auto`` with hot keys cut into chunks of time; the part of
short windows alone is run again with stored hop partials (the tiled executor, whose
partials the executors write). Each output must equal, row for row (as Spark compares
rows: ``-0.0`` equals ``0.0``, NaN equals NaN), the backfill this test's own session
computes with the same options.

Both runs go through one ``spark-submit``, one after the other in one cluster session (the
command line takes the active session, as under a notebook), so the cluster's JVMs and
Python workers start once. Each backfill is computed here first, which also leaves numba's
caches of the kernels written for the executors' workers to load instead of compiling.
Spark runs in a process of its own, so the tests are marked ``spark`` by hand.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import timetile as tt
import timetile.__main__
from timetile.cli.common import load_joins
from timetile.demo import data as demo
from timetile.testing.local_cluster import run_on_local_cluster

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

START, END = "2024-02-01", "2024-02-29"
#: The sweep cuts keys with more rows than this: the demo's most active users.
MAX_KEY_EVENTS = 200

DEFS = '''
"""Both example Joins' parts in one Join, read from $TIMETILE_DEMO_DATA."""
import runpy
from pathlib import Path

import timetile as tt
import timetile.demo

HERE = Path(timetile.demo.__file__).parent
checkouts = runpy.run_path(str(HERE / "checkout_model.py"))
ratings = runpy.run_path(str(HERE / "listing_ratings.py"))["listing_ratings"]
# Short windows, so that the busiest users' rows can be cut into chunks of time
recent_views = tt.GroupBy("recent_views", checkouts["views"], ["user_id"], [
    tt.Aggregation("duration", op, windows=["1h", "1d"]) for op in ("sum", "max", "last")])
both = tt.Join("cluster_check", left=checkouts["checkouts"],
               parts=[*checkouts["checkout_model"].parts, recent_views, *ratings.parts],
               derivations=ratings.derivations)
recent = tt.Join("cluster_partials", left=checkouts["checkouts"], parts=[recent_views])
'''

#: What spark-submit runs: ``timetile/__main__.py`` once per argument list, as spark-submit
#: would run it, in the session of the cluster (made first, so every run takes it).
DRIVER = '''
import json
import runpy
import sys

from pyspark.sql import SparkSession

main_file, runs = sys.argv[1], json.loads(sys.argv[2])
spark = SparkSession.builder.getOrCreate()
print("application", spark.sparkContext.applicationId, flush=True)
for index, args in enumerate(runs):
    print(f"=== run {index}", flush=True)
    sys.argv = [main_file, *args]
    try:
        runpy.run_path(main_file, run_name="__main__")
    except SystemExit as done:
        if done.code:
            raise
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # and the driver
print(f"=== master {spark.sparkContext.master}, {executors} executors", flush=True)
spark.stop()
'''


@dataclass(frozen=True)
class Run:
    """One backfill on the cluster: its command line's output and where it wrote."""

    stdout: str
    output: Path


@pytest.fixture(scope="module")
def defs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's tables (20,000 views) and a definitions file that reads them."""
    root = tmp_path_factory.mktemp("cluster")
    demo.generate(spark, root / "data", events=20_000)
    path = root / "defs.py"
    path.write_text(DEFS)
    return path


def here(spark: SparkSession, defs: Path, join: str, **options: Any) -> DataFrame:
    """The same backfill in this test's session (its definitions loaded as the CLI loads them),
    computed once and kept (``localCheckpoint``) for the comparisons."""
    previous = os.environ.get("TIMETILE_DEMO_DATA")
    os.environ["TIMETILE_DEMO_DATA"] = str(defs.parent / "data")
    try:
        loaded = load_joins(defs)[join]
    finally:
        if previous is None:
            del os.environ["TIMETILE_DEMO_DATA"]
        else:
            os.environ["TIMETILE_DEMO_DATA"] = previous
    return tt.backfill(loaded, spark, START, END, **options).localCheckpoint()


@pytest.fixture(scope="module")
def expected(spark: SparkSession, defs: Path) -> dict[str, DataFrame]:
    """Each run's backfill here, computed before the cluster's (see the module's docstring)."""
    return {"auto": here(spark, defs, "cluster_check", max_key_events=MAX_KEY_EVENTS),
            "partials": here(spark, defs, "cluster_partials", executor="tiled")}


@pytest.fixture(scope="module")
def cluster(defs: Path, expected: dict[str, DataFrame],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Run both backfills with one spark-submit on a local cluster."""
    root = tmp_path_factory.mktemp("cluster-runs")
    common = ["backfill", str(defs), "--start", START, "--end", END]
    runs = {"auto": [*common, "--join", "cluster_check", "--output", str(root / "auto"),
                     "--max-key-events", str(MAX_KEY_EVENTS)],
            "partials": [*common, "--join", "cluster_partials", "--output", str(root / "tiled"),
                         "--partials", str(root / "partials")]}
    driver = root / "driver.py"
    driver.write_text(DRIVER)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    done = run_on_local_cluster(
        [str(spark_submit), "--master", "local-cluster[2,1,1024]",
         "--conf", "spark.executor.memory=768m", "--conf", "spark.sql.shuffle.partitions=4",
         "--conf", "spark.sql.session.timeZone=UTC",
         # one garbage collector thread per JVM: three JVMs share two cores here
         "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC",
         "--conf", "spark.executor.extraJavaOptions=-XX:+UseSerialGC",
         str(driver), timetile.__main__.__file__,
         json.dumps(list(runs.values()))],
        env={"COLUMNS": "200", "TIMETILE_DEMO_DATA": str(defs.parent / "data")})
    _, *outputs, cluster_line = re.split(r"^=== ", done.stdout, flags=re.MULTILINE)
    assert cluster_line.startswith("master local-cluster[2,1,1024], 2 executors"), cluster_line
    return {name: Run(stdout, Path(args[args.index("--output") + 1]))
            for (name, args), stdout in zip(runs.items(), outputs, strict=True)}


def assert_same_rows(spark: SparkSession, output: Path, expected: DataFrame) -> None:
    """Every row of the cluster's output is one of ``expected``'s, duplicates counted."""
    written = spark.read.parquet(str(output))
    local = expected.select(*written.columns)
    assert written.count() == local.count() > 100
    assert written.exceptAll(local).count() == 0
    assert local.exceptAll(written).count() == 0


def test_auto_with_hot_keys_on_a_cluster(spark: SparkSession, cluster: dict[str, Run],
                                         expected: dict[str, DataFrame]) -> None:
    run = cluster["auto"]
    path = " ".join(run.stdout.split())
    for chosen in ("user_views: sweep+interval_tree", "user_purchases: sweep",
                   "listing_rating: entity"):
        assert chosen in path
    assert "swept in chunks of time" in path  # the busiest users' rows, cut
    assert_same_rows(spark, run.output, expected["auto"])


def test_stored_partials_on_a_cluster(spark: SparkSession, cluster: dict[str, Run],
                                      expected: dict[str, DataFrame]) -> None:
    run = cluster["partials"]
    assert "recent_views: tiled" in " ".join(run.stdout.split())
    partials = run.output.parent / "partials"
    assert [path.name for path in partials.iterdir()] == ["recent_views"]
    assert list((partials / "recent_views").rglob("*.parquet"))  # written by the executors
    assert_same_rows(spark, run.output, expected["partials"])
