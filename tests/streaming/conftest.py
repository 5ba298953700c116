"""Fixtures of the streaming tests: a real redis-server, and one uploaded world.

No mocks: the Redis Streams source is read from a real server (:class:`RedisServer`).
"""

from __future__ import annotations

from typing import Any

import pytest
from stream_helpers import World, make_world


@pytest.fixture(scope="session")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> World:
    """Day DS uploaded, day DS + 1 landed as JSON-lines files, and the backfill's answers."""
    return make_world(spark, tmp_path_factory.mktemp("world"))
