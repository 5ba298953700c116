"""``timetile backfill`` through ``spark-submit`` on a local cluster equals the same backfill here.

A local cluster (``local-cluster[2,1,1024]``) runs the driver and two executors in separate
JVMs, each with its own Python workers, as a cluster does: what only local mode lets work
(driver state read on the executors, paths or settings only the driver sees) fails here. The
Join is both examples' parts together (sweep, interval tree, entity parts, derivations) and a
part of short windows, run once as ``auto`` with hot keys cut into chunks of time and once
with stored hop partials (the tiled executor, whose partials the executors write); each
output must equal, row for row (as Spark compares rows: ``-0.0`` equals ``0.0``, NaN equals
NaN), the backfill this test's own session computes with the same options.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import timetile as tt
import timetile.__main__
from timetile.demo import data as demo
from timetile.cli.common import load_joins

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
'''


@pytest.fixture(scope="module")
def defs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's tables (20,000 views) and a definitions file that reads them."""
    root = tmp_path_factory.mktemp("cluster")
    demo.generate(spark, root / "data", events=20_000)
    path = root / "defs.py"
    path.write_text(DEFS)
    return path


def submit(defs: Path, output: Path, *options: str) -> str:
    """Run ``timetile backfill`` with spark-submit on a local cluster; return its stdout."""
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "TIMETILE_DEMO_DATA": str(defs.parent / "data")}
    done = subprocess.run(
        [str(spark_submit), "--master", "local-cluster[2,1,1024]",
         "--conf", "spark.executor.memory=768m", "--conf", "spark.sql.shuffle.partitions=4",
         "--conf", "spark.sql.session.timeZone=UTC", timetile.__main__.__file__, "backfill", str(defs),
         "--join", "cluster_check", "--start", START, "--end", END, "--output", str(output),
         *options],
        capture_output=True, text=True, timeout=400, env=env, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def here(spark: SparkSession, defs: Path, monkeypatch: pytest.MonkeyPatch,
         **options: Any) -> DataFrame:
    """The same backfill in this test's session (its definitions loaded as the CLI loads them)."""
    monkeypatch.setenv("TIMETILE_DEMO_DATA", str(defs.parent / "data"))
    join = load_joins(defs)["cluster_check"]
    return tt.backfill(join, spark, START, END, **options)


def assert_same_rows(spark: SparkSession, output: Path, expected: DataFrame) -> None:
    """Every row of the cluster's output is one of ``expected``'s, duplicates counted."""
    written = spark.read.parquet(str(output))
    local = expected.select(*written.columns)
    assert written.count() == local.count() > 100
    assert written.exceptAll(local).count() == 0
    assert local.exceptAll(written).count() == 0


def test_auto_with_hot_keys_on_a_cluster(spark: SparkSession, defs: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = submit(defs, tmp_path / "out", "--max-key-events", str(MAX_KEY_EVENTS))
    path = " ".join(stdout.split())
    for chosen in ("user_views: sweep+interval_tree", "user_purchases: sweep",
                   "listing_rating: entity"):
        assert chosen in path
    assert "swept in chunks of time" in path  # the busiest users' rows, cut
    assert_same_rows(spark, tmp_path / "out",
                     here(spark, defs, monkeypatch, max_key_events=MAX_KEY_EVENTS))


def test_stored_partials_on_a_cluster(spark: SparkSession, defs: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    partials = tmp_path / "partials"
    stdout = submit(defs, tmp_path / "out", "--partials", str(partials))
    assert "user_views: tiled" in " ".join(stdout.split())
    assert sorted(path.name for path in partials.iterdir()) == [
        "recent_views", "user_purchases", "user_views"]
    assert_same_rows(spark, tmp_path / "out", here(spark, defs, monkeypatch, executor="tiled"))
