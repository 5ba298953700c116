"""``upload`` runs on the executors: a local cluster of separate executor JVMs writes every
record to Redis, with a driver result limit far below the records' total size.

Spark runs in a process of its own here, so the test is marked ``spark`` by hand."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.online.fetcher import Fetcher
from timetile.store.kv import open_store
from timetile.testing.local_cluster import run_on_local_cluster

pytestmark = pytest.mark.spark

#: 10,000 keys of 4 events: about 2.9 MB of records, nearly three times the driver's limit.
KEYS = 10_000
SCRIPT = """
import sys
from pyspark.sql import SparkSession, functions as F
import timetile as tt
from timetile.offline.upload import upload

spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
         .config("spark.executor.memory", "512m")
         .config("spark.driver.maxResultSize", "1m")  # the records are several MB
         .config("spark.sql.shuffle.partitions", "4").getOrCreate())
print("application", spark.sparkContext.applicationId, flush=True)
start = {start}
events = spark.range({events}, numPartitions=4).select(
    (F.col("id") % {keys}).alias("user_id"),
    (F.lit(start) + F.col("id") * 500).alias("ts"),
    (F.col("id") % 7).cast("double").alias("amount"))
users = tt.GroupBy("users", tt.EventSource(events), ["user_id"], [
    tt.Aggregation("amount", "sum", windows=["1d"]), tt.Aggregation("amount", "last_k", k=50)])
report = upload(users, spark, "2024-01-01", sys.argv[1])
print("written", report.written["users"][0], report.written["users"][1])
spark.stop()
"""


def test_upload_writes_from_executors_on_a_local_cluster(tmp_path: Path,
                                                         empty_redis_url: str) -> None:
    start = date_to_ms("2024-01-01")
    script = tmp_path / "upload_job.py"
    script.write_text(textwrap.dedent(SCRIPT.format(start=start, events=4 * KEYS, keys=KEYS)))
    done = run_on_local_cluster([sys.executable, str(script), empty_redis_url], timeout=300)
    written = next(line for line in done.stdout.splitlines() if line.startswith("written"))
    keys, size = map(int, written.split()[1:])
    assert keys == KEYS
    assert size > 2 * 1024 * 1024  # more than the driver may receive
    users = tt.GroupBy("users", tt.EventSource("unused"), ["user_id"], [
        tt.Aggregation("amount", "sum", windows=["1d"]), tt.Aggregation("amount", "last_k", k=50)])
    join = tt.Join("check", tt.EventSource("unused"), [users])
    with open_store(empty_redis_url) as store:
        result = Fetcher(join, store).fetch([{"user_id": 5}], at=start + DAY_MS)[0]
    ids = [5 + KEYS * i for i in range(4)]  # the events of key 5
    assert result.features["users_amount_sum_1d"] == float(sum(i % 7 for i in ids))
    assert result.features["users_amount_last_k"] == [float(i % 7) for i in reversed(ids)]
