"""One SparkSession for the whole test session: small, local, two cores."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The session-wide local SparkSession (2 threads, 2 shuffle partitions)."""
    from timetile.spark.session import local_session

    session = local_session("timetile-tests", cores=2, shuffle_partitions=2)
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the SparkSession, through any fixture, with ``spark``.

    So ``-m "not spark"`` (the fast lane, README) runs exactly the tests that start no Spark.
    A test that runs Spark in a process of its own (``spark-submit``) is marked by hand.
    """
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
