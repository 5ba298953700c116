"""Fixtures of the online tests: a real redis-server for the session, and each store fresh.

No mocks and no skips: when ``redis-server`` is missing, the Redis tests fail with
:class:`~timetile.testing.RedisServer`'s message saying how to install it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from timetile.store.kv import KVStore
from timetile.store.lmdb_store import LmdbStore
from timetile.store.redis_store import RedisStore
from timetile.testing import RedisServer


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of a redis-server started for the test session (no persistence)."""
    with RedisServer() as server:
        yield server.url


@pytest.fixture
def empty_redis_url(redis_url: str) -> str:
    """The URL of the session's redis-server, flushed: the tests before wrote to it too (a
    GroupBy of the same name uploaded as of a later day refuses an earlier day's upload)."""
    redis_store = RedisStore(redis_url)
    redis_store.flush()
    redis_store.close()
    return redis_url


@pytest.fixture(params=["lmdb", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KVStore]:
    """A fresh, empty store of each kind: LMDB in a temporary directory, Redis flushed."""
    fresh: KVStore
    if request.param == "lmdb":
        fresh = LmdbStore(tmp_path / "lmdb")
    else:
        fresh = RedisStore(request.getfixturevalue("empty_redis_url"))
    yield fresh
    fresh.close()


@pytest.fixture(params=["lmdb", "redis"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URI of a fresh, empty store of each kind, for code that opens stores itself."""
    if request.param == "lmdb":
        yield f"lmdb://{tmp_path / 'store'}"
        return
    yield request.getfixturevalue("empty_redis_url")
