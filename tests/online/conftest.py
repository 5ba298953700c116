"""Fixtures of the online tests: each store fresh (the redis-server is the root conftest's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from timetile.store.kv import KVStore
from timetile.store.lmdb_store import LmdbStore
from timetile.store.redis_store import RedisStore


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
