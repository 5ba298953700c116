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
    cache.put("e", ["too big"], 11)  # more than the capacity: kept by none, and the
    assert (cache.held, cache.values()) == (6, [["dd"]])  # others stay
    cache.put("d", ["too big"], 11)  # nor does what was under its key
    assert (cache.held, cache.values()) == (0, [])


def test_an_entry_costs_the_collector_its_value_only() -> None:
    """A full pass of the garbage collector walks every tracked object of a server's caches,
    every thread stopped: an entry adds nothing tracked besides its value."""
    cache: _DecodeCache[bytes] = _DecodeCache(capacity=1 << 20)
    for key in range(1_000):
        cache.put(str(key).encode(), [key], 10)
    assert tracked_objects([cache]) <= 1_000 + 10  # the values, and the cache's own parts


def test_a_slot_is_decoded_again_only_when_its_bytes_change() -> None:
    """A record is kept under its (GroupBy, key) with the bytes it came from; a fetch that
    reads the same bytes (another object, equal) reuses it, one that reads a new upload's
    decodes those."""
    decoded: list[bytes] = []

    def decode(data: bytes) -> list[bytes]:
        decoded.append(data)
        return [data]

    cache: _DecodeCache[tuple[str, bytes]] = _DecodeCache(capacity=100)
    slot = ("views", b"k1")
    first = bytes(bytearray(b"record-1"))
    assert cache.decoded(slot, first, decode) == [b"record-1"]
    assert cache.decoded(slot, bytes(bytearray(b"record-1")), decode) == [b"record-1"]
    assert decoded == [b"record-1"]  # equal bytes: decoded once
    assert cache.decoded(slot, b"record-2!", decode) == [b"record-2!"]
    assert cache.decoded(("carts", b"k1"), b"record-1", decode) == [b"record-1"]  # its own
    assert decoded == [b"record-1", b"record-2!", b"record-1"]
    assert (cache.held, cache.values()) == (17, [[b"record-2!"], [b"record-1"]])
    cache.drop(lambda key: key[0] == "views")
    assert cache.decoded(slot, b"record-2!", decode) == [b"record-2!"]  # dropped: again
    assert len(decoded) == 4
    assert cache.decoded(("big", b"k"), b"x" * 101, decode) == [b"x" * 101]  # kept by none
    assert cache.decoded(("big", b"k"), b"x" * 101, decode) == [b"x" * 101]
    assert len(decoded) == 6
    assert cache.held == 17
    cache.decoded(slot, b"x" * 101, decode)  # what the slot held goes, its bytes too
    assert (cache.held, cache.values(), cache._encoded) == (8, [[b"record-1"]], {
        ("carts", b"k1"): b"record-1"})
