"""The fetcher's cache of decoded values: least recently used out first, by encoded bytes."""

from __future__ import annotations

from timetile.online.fetcher import _DecodeCache
from timetile.testing.collector import tracked_objects


def test_the_least_recently_used_go_first_and_bytes_add_up() -> None:
    cache: _DecodeCache[str] = _DecodeCache(capacity=10)
    cache.put("a", ["a"], 4)
    cache.put("b", ["b"], 4)
    assert cache.peek("a") == ["a"]  # now the most recently used
    cache.put("b", ["b2"], 5)  # replaced, and now the most recently used
    assert cache.held == 9
    cache.put("c", ["c"], 3)  # 12 bytes: "a" goes
    assert (cache.peek("a"), cache.held, cache.values()) == (None, 8, [["b2"], ["c"]])
    assert cache.get("c", lambda key: ["never decoded"], 3) == ["c"]
    assert cache.get("d", lambda key: [key * 2], 6) == ["dd"]  # 14 bytes: "b" goes
    assert (cache.held, cache.values()) == (9, [["c"], ["dd"]])
    cache.drop(lambda key: key == "c")
    assert (cache.held, cache.values()) == (6, [["dd"]])
    cache.put("e", ["too big"], 11)  # more than the capacity: kept by none
    assert (cache.held, cache.values()) == (0, [])


def test_an_entry_costs_the_collector_its_value_only() -> None:
    """A full pass of the garbage collector walks every tracked object of a server's caches,
    every thread stopped: an entry adds nothing tracked besides its value."""
    cache: _DecodeCache[bytes] = _DecodeCache(capacity=1 << 20)
    for key in range(1_000):
        cache.put(str(key).encode(), [key], 10)
    assert tracked_objects([cache]) <= 1_000 + 10  # the values, and the cache's own parts
