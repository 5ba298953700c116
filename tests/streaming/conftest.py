"""Fixtures of the streaming tests: a real redis-server for the session.

No mocks: the Redis Streams source is read from a real server (:class:`RedisServer`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from timetile.testing import RedisServer


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of a redis-server started for the test session (no persistence)."""
    with RedisServer() as server:
        yield server.url
