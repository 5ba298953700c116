"""One SparkSession per test process: small, local, two cores.

Under pytest-xdist (``-n``) every worker is a process of its own, so each starts its own
session, its own redis-server and its own temporary folders: nothing is shared but the
numba caches (written atomically) and hypothesis' example database.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# CI (the CI variable set) runs twice the examples of a laptop run.
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


#: Settings of the tests' session for their small data (see :func:`spark`): expressions
#: interpreted, and memory pages of 1 MB.
SMALL_DATA = (
    "spark.sql.codegen.wholeStage=false",
    "spark.sql.codegen.factoryMode=NO_CODEGEN",
    "spark.buffer.pageSize=1m",
)

#: The tests' JVM: garbage collected on one thread, and its optimizing compiler (C2) kept
#: lean (see :func:`spark`).
SESSION_JAVA_OPTIONS = ("-XX:+UseSerialGC -XX:-DoEscapeAnalysis -XX:InlineSmallCode=1000 "
                        "-XX:LoopUnrollLimit=0 -XX:MaxInlineLevel=6 -XX:FreqInlineSize=100")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """This process's local SparkSession (2 threads, 2 shuffle partitions).

    Its warehouse (where ``CREATE DATABASE`` without a location writes) is a temporary
    folder of this process, not ``spark-warehouse`` in the current folder, which every
    worker of a parallel run would share. Its JVM collects garbage on one thread (the
    serial collector): the tests' heaps are small, and the two workers of a parallel run
    share two cores, where the default collector's threads would contend.

    Spark evaluates expressions interpreted, not compiled to Java (whole-stage code
    generation off, ``spark.sql.codegen.factoryMode=NO_CODEGEN``): compiling each query's
    code costs more than running it on a test's few rows. Spark keeps both modes equal (and
    falls back to the interpreted one where code fails to compile); the compiled one, Spark's
    default, runs in the processes that tests start (``spark-submit`` in
    ``tests/test_cluster.py``, the stream killed with ``kill -9`` in
    ``tests/streaming/test_file_stream.py``) and in the benchmarks.

    Its memory pages (``spark.buffer.pageSize``) are 1 MB: Spark sizes them from the heap
    (up to 64 MB), and every sort and broadcast hash table of a test's few rows would
    allocate and zero whole pages, straight into the old generation, whose full
    collections they then set off.

    Its optimizing compiler inlines less and skips escape analysis and loop unrolling
    (:data:`SESSION_JAVA_OPTIONS`). A test process runs hundreds of small, different
    queries, so the JIT never settles: it kept recompiling Catalyst's rules and, in a loop
    of small backfills, spent more CPU than the queries' tasks. The lean compiler does as
    many backfills in the same time on less CPU.
    """
    from timetile.spark.session import local_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    previous = os.environ.get("PYSPARK_SUBMIT_ARGS")
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf {shlex.quote(f'spark.sql.warehouse.dir={warehouse}')} "
        + "".join(f"--conf {setting} " for setting in SMALL_DATA)
        + f"--driver-java-options {shlex.quote(SESSION_JAVA_OPTIONS)} pyspark-shell")
    try:
        session = local_session("timetile-tests", cores=2, shuffle_partitions=2)
    finally:
        if previous is None:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = previous
    yield session
    session.stop()



@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of a redis-server started for this process (no persistence).

    No mocks and no skips: when ``redis-server`` is missing, the Redis tests fail with
    :class:`~timetile.testing.RedisServer`'s message saying how to install it.
    """
    from timetile.testing import RedisServer

    with RedisServer() as server:
        yield server.url


@pytest.fixture
def empty_redis_url(redis_url: str) -> str:
    """The URL of this process's redis-server, flushed: the tests before wrote to it too (a
    GroupBy of the same name uploaded as of a later day refuses an earlier day's upload)."""
    from timetile.testing import emptied

    return emptied(redis_url)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the SparkSession, through any fixture, with ``spark``.

    So ``-m "not spark"`` (the fast lane, README) runs exactly the tests that start no Spark.
    A test that runs Spark in a process of its own (``spark-submit``) is marked by hand.

    The order of the modules is pytest-xdist's: a parallel run (``--dist loadscope``) runs
    each module whole on one worker and hands out the modules of most tests first.
    """
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


def _spark_started() -> bool:
    """Whether this process has launched Spark's JVM (it stays up after a session stops)."""
    pyspark = sys.modules.get("pyspark")
    context = getattr(pyspark, "SparkContext", None)
    return context is not None and context._gateway is not None


@pytest.fixture(scope="module", autouse=True)
def _cache_cleared_after_module() -> Iterator[None]:
    """Drop the DataFrames a module's tests left cached (the tiled pass keeps its first stage
    until :meth:`~timetile.offline.backfill.BackfillJob.release`, which ``tt.backfill``, what
    most tests call, gives no way to call): Spark would keep them in the heap until its
    storage memory filled (then on disk), and every full collection of the heap would walk
    them."""
    yield
    if _spark_started():
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.catalog.clearCache()


@pytest.fixture(autouse=True)
def _spark_only_where_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test not marked ``spark`` that starts Spark in this process all the same.

    It would slow the fast lane down by a JVM's start and hide among the tests that start no
    Spark. Checked where Spark is not yet up (always, in ``-m "not spark"``).
    """
    if request.node.get_closest_marker("spark") is not None or _spark_started():
        yield
        return
    yield
    if _spark_started():
        pytest.fail("this test started Spark without the spark fixture: ask for it (which "
                    "marks it spark) or keep Spark out of it", pytrace=False)
