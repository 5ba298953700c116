"""``timetile backfill`` and ``upload`` through ``spark-submit`` on a local cluster.

Each backfill equals the same backfill here, and the upload writes every record from the
executors. A local cluster (``local-cluster[1,2,1024]``) runs the driver and an executor of two
cores in separate JVMs, each with its own Python workers, as a cluster does: what only local
mode lets work (driver state read on the executors, paths or settings only the driver sees)
fails here. One executor is enough for that, and a third JVM would only compete for the two
cores of a test machine. The Join is both examples' parts together (sweep, interval tree,
entity parts, derivations) and a part of short windows, run as ``auto`` with hot keys cut
into chunks of time; the part of short windows alone is run again with stored hop partials
(the tiled executor, whose partials the executors write). Each output must equal, row for
row (as Spark compares rows: ``-0.0`` equals ``0.0``, NaN equals NaN), the backfill this
test's own session computes with the same options.

The upload writes 10,000 keys of 4 events (about 2.9 MB of records) to Redis under a driver
result limit of 1 MB, which holds for the whole session: neither the backfills nor the
upload may bring event-sized data to the driver.

Every run goes through one ``spark-submit``, one after the other in one cluster session (the
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
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.demo import data as demo
from timetile.online.fetcher import Fetcher
from timetile.store.kv import open_store
from timetile.testing import SHORT_RUN_JAVA_OPTIONS, emptied
from timetile.testing.local_cluster import run_on_local_cluster

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

START, END = "2024-02-01", "2024-02-29"
#: The sweep cuts keys with more rows than this: the demo's most active users.
MAX_KEY_EVENTS = 100
#: The upload's keys, of 4 events each: about 2.9 MB of records, nearly three times the
#: driver's result limit.
UPLOAD_KEYS = 10_000
UPLOAD_DS = "2024-01-01"

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
# The upload's own events: many keys with long records
upload_events = tt.EventSource(f"{checkouts['DATA']}/upload_events")
users = tt.GroupBy("users", upload_events, ["user_id"], [
    tt.Aggregation("amount", "sum", windows=["1d"]), tt.Aggregation("amount", "last_k", k=50)])
uploads = tt.Join("cluster_upload", left=upload_events, parts=[users])
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
    """The demo's tables (8,000 views), the upload's events, and a definitions file."""
    root = tmp_path_factory.mktemp("cluster")
    demo.generate(spark, root / "data", events=8_000)
    start = date_to_ms(UPLOAD_DS)
    spark.range(4 * UPLOAD_KEYS, numPartitions=4).selectExpr(
        f"id % {UPLOAD_KEYS} AS user_id", f"{start} + id * 500 AS ts",
        "CAST(id % 7 AS DOUBLE) AS amount").write.parquet(str(root / "data" / "upload_events"))
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
def cluster_redis(redis_url: str) -> str:
    """This process's redis-server, flushed once for the module: the upload writes to it."""
    return emptied(redis_url)


@pytest.fixture(scope="module")
def cluster(defs: Path, expected: dict[str, DataFrame], cluster_redis: str,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Run both backfills and the upload with one spark-submit on a local cluster."""
    root = tmp_path_factory.mktemp("cluster-runs")
    common = ["backfill", str(defs), "--start", START, "--end", END]
    runs = {"auto": [*common, "--join", "cluster_check", "--output", str(root / "auto"),
                     "--max-key-events", str(MAX_KEY_EVENTS)],
            "partials": [*common, "--join", "cluster_partials", "--output", str(root / "tiled"),
                         "--partials", str(root / "partials")],
            "upload": ["upload", str(defs), "--join", "cluster_upload", "--ds", UPLOAD_DS,
                       "--store", cluster_redis]}
    driver = root / "driver.py"
    driver.write_text(DRIVER)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    done = run_on_local_cluster(
        [str(spark_submit), "--master", "local-cluster[1,2,1024]",
         "--conf", "spark.executor.memory=768m", "--conf", "spark.sql.shuffle.partitions=4",
         "--conf", "spark.driver.maxResultSize=1m",  # the upload's records are several MB
         "--conf", "spark.sql.session.timeZone=UTC",
         # the cluster's two JVMs and this test's share two cores, for about a minute
         "--conf", f"spark.driver.extraJavaOptions={SHORT_RUN_JAVA_OPTIONS}",
         "--conf", f"spark.executor.extraJavaOptions={SHORT_RUN_JAVA_OPTIONS}",
         str(driver), timetile.__main__.__file__,
         json.dumps(list(runs.values()))],
        env={"COLUMNS": "200", "TIMETILE_DEMO_DATA": str(defs.parent / "data")})
    _, *outputs, cluster_line = re.split(r"^=== ", done.stdout, flags=re.MULTILINE)
    assert cluster_line.startswith("master local-cluster[1,2,1024], 1 executors"), cluster_line
    return {name: Run(stdout, root / name if "--output" not in args
                      else Path(args[args.index("--output") + 1]))
            for (name, args), stdout in zip(runs.items(), outputs, strict=True)}


def assert_same_rows(spark: SparkSession, output: Path, expected: DataFrame) -> None:
    """Every row of the cluster's output is one of ``expected``'s, duplicates counted."""
    written = spark.read.parquet(str(output))
    local = expected.select(*written.columns)
    assert written.count() == local.count() > 50
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


def test_upload_writes_from_executors_on_a_cluster(cluster: dict[str, Run],
                                                   cluster_redis: str) -> None:
    written = re.search(r"^\s*users\W+([\d,]+)\W+([\d,]+)\s*$", cluster["upload"].stdout,
                        flags=re.MULTILINE)  # the table's row: users │ 10,000 │ 2,910,000
    assert written, cluster["upload"].stdout
    keys, size = (int(number.replace(",", "")) for number in written.groups())
    assert keys == UPLOAD_KEYS
    assert size > 2 * 1024 * 1024  # more than the driver may receive
    users = tt.GroupBy("users", tt.EventSource("unused"), ["user_id"], [
        tt.Aggregation("amount", "sum", windows=["1d"]), tt.Aggregation("amount", "last_k", k=50)])
    join = tt.Join("check", tt.EventSource("unused"), [users])
    start = date_to_ms(UPLOAD_DS)
    with open_store(cluster_redis) as store:
        result = Fetcher(join, store).fetch([{"user_id": 5}], at=start + DAY_MS)[0]
    ids = [5 + UPLOAD_KEYS * i for i in range(4)]  # the events of key 5
    assert result.features["users_amount_sum_1d"] == float(sum(i % 7 for i in ids))
    assert result.features["users_amount_last_k"] == [float(i % 7) for i in reversed(ids)]
