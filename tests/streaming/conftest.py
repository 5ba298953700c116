"""Fixtures of the streaming tests: a real redis-server, and one uploaded world.

No mocks: the Redis Streams source is read from a real server (:class:`RedisServer`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from stream_helpers import World, make_world

from timetile.testing import RedisServer


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of a redis-server started for the test session (no persistence)."""
    with RedisServer() as server:
        yield server.url


@pytest.fixture(scope="session")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> World:
    """Day DS uploaded, day DS + 1 landed as JSON-lines files, and the backfill's answers."""
    return make_world(spark, tmp_path_factory.mktemp("world"))
