"""The embedded default: a local SparkSession configured for timetile."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

#: Settings every timetile session gets; a cluster session can set them in spark-submit.
#: Arrow batches of up to 100,000 rows (Spark's default is 10,000), capped at 64 MiB for
#: wide rows: the sweep and the other executors pay Python work per batch, so fewer, larger
#: batches run faster (measured on the uniform backfill: benchmarks/HISTORY.md). PySpark's
#: DataFrame debugging off (a static setting, read once per process): with it on, every
#: ``Column`` method and operator (and ``functions.col``) asks the JVM for the session and
#: a setting and sets and clears a call site, several round trips each, while a backfill's
#: plan is thousands of such calls. Spark's error messages then lack the Python line that
#: built a failing expression: a session of your own can turn it back on for your code.
DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(64 << 20),
    "spark.ui.showConsoleProgress": "false",
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def local_session(
    app_name: str = "timetile",
    *,
    cores: int | None = None,
    shuffle_partitions: int | None = None,
    driver_memory: str = "2g",
) -> SparkSession:
    """Return a local-mode SparkSession: the embedded default that needs no cluster.

    Args:
        app_name: shown in Spark's UI and logs.
        cores: worker threads; all cores by default.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; twice the cores by default,
            which suits the small data of a laptop better than Spark's 200.
        driver_memory: the JVM heap of the local driver.

    """
    threads = cores or os.cpu_count() or 2
    # Python workers must run this interpreter (and so see this environment's packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(f"local[{threads}]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or 2 * threads))
        .config("spark.ui.enabled", "false")
    )
    for key, value in DEFAULT_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def remote_master(spark: SparkSession) -> str | None:
    """Return the session's master when its executors may run on other machines, else None.

    Only ``local[...]`` keeps them in this process; a ``local-cluster`` starts executor JVMs
    as a cluster does. An embedded (LMDB) store is one folder on one machine, so work that
    executors write to it needs None here.
    """
    master = spark.sparkContext.master or "local"
    return master if not master.startswith("local") or master.startswith("local-cluster") \
        else None
