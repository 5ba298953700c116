"""The KVStore contract, run against LMDB and a real Redis server alike (DESIGN §5).

Then what only one store has: LMDB's several store objects and processes on one directory,
its readers in threads and its growing map; Redis's errors when the server is not there.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from timetile.store.kv import KVStore, StoreUnavailable, Tile, open_store, redacted_uri
from timetile.store.lmdb_store import MAX_MEMBER, MAX_TABLES, LmdbStore
from timetile.store.redis_store import RedisStore
from timetile.streaming.sources import parse_source

MIN, MAX = -(1 << 63), (1 << 63) - 1


# --- records ---------------------------------------------------------------------------------


def test_multi_get_missing_keys_and_order(store: KVStore) -> None:
    store.multi_put("users", [(b"b", b"2"), (b"a", b"1"), (b"c", b"3")])
    assert store.multi_get("users", [b"c", b"x", b"a", b"a", b"b"]) == [
        b"3", None, b"1", b"1", b"2"]
    assert store.multi_get("users", [b"nobody"]) == [None]
    assert store.multi_get("users", []) == []


def test_binary_keys_and_values(store: KVStore) -> None:
    keys = [b"\x00", b"\x00\x00", b"a\x00b", b"a", b"a\x00", b"\xff\xfe\x80", b":r:x", b"\n "]
    store.multi_put("bin", [(key, b"\x00v" + key) for key in keys])
    assert store.multi_get("bin", keys) == [b"\x00v" + key for key in keys]
    assert store.multi_get("bin", [b"\xff", b"a\x00c"]) == [None, None]


def test_large_values(store: KVStore) -> None:
    big = random.Random(1).randbytes(1 << 20)
    store.multi_put("big", [(b"k", big), (b"small", b"s")])
    store.put_tiles("big_tiles", [(b"k", 0, b"m", big)])
    assert store.multi_get("big", [b"k", b"small"]) == [big, b"s"]
    assert store.get_tiles("big_tiles", [b"k"], 0, 1) == [[(0, b"m", big)]]


def _count(data: bytes | None) -> bytes:
    return str(int(data or b"0") + 1).encode()


def test_update_reads_and_writes_one_record(store: KVStore) -> None:
    assert store.update("counters", b"c", _count) == b"1"
    assert store.update("counters", b"c", _count) == b"2"
    store.multi_put("counters", [(b"d", b"41")])
    assert store.update("counters", b"d", _count) == b"42"
    assert store.multi_get("counters", [b"c", b"d"]) == [b"2", b"42"]
    with pytest.raises(ValueError, match="empty"):
        store.update("counters", b"", _count)


def test_updates_side_by_side_never_take_the_same_number(store: KVStore) -> None:
    """Threads counting one record: every number taken once, none lost.

    A read, then a write (two calls) lets two threads read the same value; ``update`` must
    not. The sleep inside ``change`` holds the window open so a racy store fails reliably.
    """
    taken: list[bytes] = []

    def change(data: bytes | None) -> bytes:
        time.sleep(0.001)
        return _count(data)

    def count() -> None:
        taken.extend(store.update("counters", b"shared", change) for _ in range(15))

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(int(n) for n in taken) == list(range(1, 61))
    assert store.multi_get("counters", [b"shared"]) == [b"60"]


def test_an_update_retries_over_a_write_between_its_read_and_its_write(
        store: KVStore) -> None:
    """Another writer changes the record while ``change`` runs: its write is not lost."""
    calls: list[bytes | None] = []
    writer = threading.Thread(target=lambda: store.multi_put("counters", [(b"raced", b"10")]))

    def change(data: bytes | None) -> bytes:
        calls.append(data)
        if len(calls) == 1:  # another writer, from another thread, in the middle
            writer.start()
            writer.join(timeout=0.5)  # LMDB blocks it until this write commits
        return _count(data)

    assert store.update("counters", b"raced", change) in (b"1", b"11")
    writer.join()
    final = store.multi_get("counters", [b"raced"])[0]
    # Either the other write came first and was counted on (a retry read 10), or it came
    # after this update (LMDB serialises writers); never a count on a stale read overwriting it.
    assert (calls, final) in (([None, b"10"], b"11"), ([None], b"10"))


def test_put_replaces_and_empty_value(store: KVStore) -> None:
    store.multi_put("users", [(b"a", b"old"), (b"b", b"old")])
    store.multi_put("users", [(b"a", b"new"), (b"b", b"")])
    assert store.multi_get("users", [b"a", b"b"]) == [b"new", b""]


def test_empty_writes_are_no_ops(store: KVStore) -> None:
    store.multi_put("users", [])
    store.put_tiles("clicks", iter([]))
    assert store.multi_get("users", [b"a"]) == [None]
    assert store.get_tiles("clicks", [b"a"], MIN, MAX) == [[]]


def test_tables_are_separate(store: KVStore) -> None:
    store.multi_put("one", [(b"k", b"1")])
    store.multi_put("two", [(b"k", b"2")])
    store.put_tiles("one", [(b"k", 0, b"", b"tile")])
    assert store.multi_get("one", [b"k"]) == [b"1"]
    assert store.multi_get("two", [b"k"]) == [b"2"]
    assert store.get_tiles("two", [b"k"], MIN, MAX) == [[]]
    assert store.get_tiles("one", [b"k"], MIN, MAX) == [[(0, b"", b"tile")]]


def test_unknown_table_reads(store: KVStore) -> None:
    assert store.multi_get("never_written", [b"a", b"b"]) == [None, None]
    assert store.get_tiles("never_written", [b"a", b"b"], MIN, MAX) == [[], []]


def test_bad_table_names_and_empty_keys(store: KVStore) -> None:
    for table in ["", "a:b", "a b", "x" * 201]:
        with pytest.raises(ValueError, match="bad table name"):
            store.multi_get(table, [b"k"])
    with pytest.raises(ValueError, match="empty"):
        store.multi_put("users", [(b"", b"v")])
    with pytest.raises(ValueError, match="empty"):
        store.put_tiles("clicks", [(b"", 0, b"m", b"v")])


# --- tiles -----------------------------------------------------------------------------------


def test_tile_range_is_start_inclusive_end_exclusive(store: KVStore) -> None:
    store.put_tiles("clicks", [(b"k", start, b"", b"%d" % start) for start in range(0, 50, 10)])
    got = store.get_tiles("clicks", [b"k", b"k"], 10, 40)
    assert got[0] == got[1] == [(10, b"", b"10"), (20, b"", b"20"), (30, b"", b"30")]
    assert store.get_tiles("clicks", [b"k"], 10, 11) == [[(10, b"", b"10")]]
    assert store.get_tiles("clicks", [b"k"], 11, 20) == [[]]
    assert store.get_tiles("clicks", [b"k"], 40, 40) == [[]]
    assert store.get_tiles("clicks", [b"k"], 40, 10) == [[]]
    assert [t[0] for t in store.get_tiles("clicks", [b"k"], MIN, MAX)[0]] == [0, 10, 20, 30, 40]


def test_negative_and_extreme_tile_starts(store: KVStore) -> None:
    starts = [MIN, -(1 << 40) - 1, -1, 0, 1, 1 << 53, (1 << 53) + 1, MAX]
    store.put_tiles("clicks", [(b"k", start, b"", b"v") for start in reversed(starts)])
    assert [t[0] for t in store.get_tiles("clicks", [b"k"], MIN, MAX)[0]] == starts[:-1]
    assert [t[0] for t in store.get_tiles("clicks", [b"k"], -1, 1)[0]] == [-1, 0]
    assert [t[0] for t in store.get_tiles("clicks", [b"k"], MIN, -1)[0]] == starts[:2]
    assert [t[0] for t in store.get_tiles("clicks", [b"k"], (1 << 53) + 1, 1 << 64)[0]] == [
        (1 << 53) + 1, MAX]
    with pytest.raises(ValueError, match="64-bit"):
        store.put_tiles("clicks", [(b"k", 1 << 63, b"", b"v")])


def test_tiles_sort_by_start_then_member(store: KVStore) -> None:
    members = [b"", b"a", b"a\x00", b"ab", b"b", b"\xff", b"\x00"]
    entries = [(b"k", start, member, start.to_bytes(2, "big", signed=True) + member)
               for start in (-5, 0, 5) for member in members]
    random.Random(7).shuffle(entries)
    store.put_tiles("clicks", entries)
    expected = sorted((start, member, value) for _, start, member, value in entries)
    assert store.get_tiles("clicks", [b"k"], -5, 6) == [expected]


def test_reput_of_the_same_entry_replaces_it(store: KVStore) -> None:
    store.put_tiles("clicks", [(b"k", 0, b"batch-1", b"old"), (b"k", 0, b"batch-2", b"x")])
    store.put_tiles("clicks", [(b"k", 0, b"batch-1", b"old")])  # a replayed micro-batch
    store.put_tiles("clicks", [(b"k", 0, b"batch-1", b"new")])
    assert store.get_tiles("clicks", [b"k"], 0, 1) == [[(0, b"batch-1", b"new"),
                                                        (0, b"batch-2", b"x")]]


def test_many_keys_in_one_get_tiles(store: KVStore) -> None:
    # Keys that prefix one another, or differ by a NUL, must not see each other's tiles.
    keys = [b"k", b"k\x00", b"kk", b"k\x00\x00", b"\xff" * 40] + [b"u%d" % i for i in range(200)]
    store.put_tiles("clicks", [(key, i, b"m", key) for i, key in enumerate(keys) if i % 3])
    asked = [*keys, b"none", b"k"]
    got = store.get_tiles("clicks", asked, MIN, MAX)
    assert len(got) == len(asked)
    for key, tiles in zip(asked, got, strict=True):
        i = keys.index(key) if key in keys else -1
        assert tiles == ([(i, b"m", key)] if i >= 0 and i % 3 else [])


def test_expiry_of_tiles(store: KVStore) -> None:
    assert store.expire_tiles("clicks", 0) == 0  # a table never written
    store.put_tiles("clicks", [(key, start, member, b"v") for key in (b"a", b"b")
                               for start in (MIN, -1, 0, 7, MAX) for member in (b"", b"m")])
    store.put_tiles("views", [(b"a", -1, b"", b"v")])
    assert store.expire_tiles("clicks", 7) == 12
    assert store.expire_tiles("clicks", 7) == 0
    assert store.get_tiles("clicks", [b"a"], MIN, MAX) == [[(7, b"", b"v"), (7, b"m", b"v")]]
    assert store.get_tiles("views", [b"a"], MIN, MAX) == [[(-1, b"", b"v")]]  # untouched


def test_expiry_is_exact_where_scores_round(store: KVStore) -> None:
    # Beyond 2**53 ms neighbouring starts share a double: the cut still falls between them.
    starts = [MAX - 3, MAX - 2, MAX - 1, MAX]
    store.put_tiles("clicks", [(key, start, b"", b"v") for key in (b"a", b"b") for start in starts])
    assert store.expire_tiles("clicks", MAX - 1) == 4
    assert store.expire_tiles("clicks", MAX - 1) == 0
    assert store.get_tiles("clicks", [b"a", b"b"], MIN, MAX) == [[(MAX - 1, b"", b"v")]] * 2
    assert store.expire_tiles("clicks", MAX) == 2
    assert store.get_tiles("clicks", [b"a"], MAX, MAX) == [[]]  # end is exclusive: MAX stays


def test_expiry_at_the_first_double_that_rounds(store: KVStore) -> None:
    # -2**53 - 1 rounds to -2**53's double: a cut at exactly -2**53 must still take it.
    store.put_tiles("clicks", [(b"a", start, b"", b"v") for start in (-2**53 - 1, -2**53)])
    assert store.expire_tiles("clicks", -2**53) == 1
    assert store.get_tiles("clicks", [b"a"], MIN, MAX) == [[(-2**53, b"", b"v")]]


def test_expiry_of_a_key_with_many_tiles(store: KVStore) -> None:
    store.put_tiles("clicks", [(b"a", start, b"m", b"v") for start in range(2_500)])
    assert store.expire_tiles("clicks", 2_400) == 2_400
    assert [tile[0] for tile in store.get_tiles("clicks", [b"a"], MIN, MAX)[0]] == list(
        range(2_400, 2_500))


def test_tiles_match_a_brute_force_oracle(store: KVStore) -> None:
    rng = random.Random(42)
    model: dict[tuple[bytes, int, bytes], bytes] = {}
    keys = [b"a", b"ab", b"b", b"\x00", b"a\xff", b"\xff"]  # \xff: no next prefix
    for _ in range(30):
        batch = [(rng.choice(keys), rng.randrange(-50, 50), rng.choice([b"", b"m", b"n"]),
                  rng.randbytes(rng.randrange(4))) for _ in range(rng.randrange(1, 20))]
        store.put_tiles("clicks", batch)
        for key, start, member, value in batch:
            model[key, start, member] = value
        if rng.random() < 0.2:  # an upload expires what its records hold
            before = rng.randrange(-60, 60)
            gone = [entry for entry in model if entry[1] < before]
            assert store.expire_tiles("clicks", before) == len(gone)
            for entry in gone:
                del model[entry]
        low = rng.randrange(-60, 60)
        high = low + rng.randrange(0, 40)
        expected: list[list[Tile]] = [
            sorted((s, m, v) for (k, s, m), v in model.items() if k == key and low <= s < high)
            for key in keys]
        assert store.get_tiles("clicks", keys, low, high) == expected


# --- lifecycle -------------------------------------------------------------------------------


def test_ping_and_close(store: KVStore) -> None:
    store.ping()
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreUnavailable):
        store.ping()
    with pytest.raises(StoreUnavailable):
        store.multi_get("users", [b"a"])


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_redis_on_a_closed_port_is_unavailable() -> None:
    url = f"redis://:secret@127.0.0.1:{_closed_port()}/0"
    began = time.monotonic()
    with RedisStore(url) as down:
        for call in (down.ping, lambda: down.multi_get("users", [b"a"]),
                     lambda: down.put_tiles("clicks", [(b"k", 0, b"", b"v")])):
            with pytest.raises(StoreUnavailable, match="start redis-server or check the URL") as e:
                call()
            assert "127.0.0.1" in str(e.value)
            assert "secret" not in str(e.value)
    with pytest.raises(StoreUnavailable):
        open_store(url)
    assert time.monotonic() - began < 10


def _commands(server: redis.Redis) -> dict[str, int]:
    """Return how many times the server ran each command, since its stats were reset."""
    stats = server.info("commandstats")
    return {name.removeprefix("cmdstat_"): entry["calls"] for name, entry in stats.items()}


def test_redis_expiry_reads_only_the_keys_with_old_tiles(redis_url: str) -> None:
    store = RedisStore(redis_url)
    store.flush()
    assert store.expire_tiles("clicks", 0) == 0  # the table's first expiry: its one SCAN
    store.put_tiles("clicks", [(b"k%d" % i, 100 + i, b"", b"v") for i in range(2_000)])
    store.put_tiles("clicks", [(b"old%d" % i, start, b"", b"v") for i in range(3)
                               for start in (1, 2, 200)])
    store.multi_put("clicks", [(b"k%d" % i, b"record") for i in range(2_000)])
    server = redis.Redis.from_url(redis_url)
    index = b"tt:clicks:o"
    assert server.zscore(index, b"old0") == 1
    assert server.zscore(index, b"k5") == 105
    server.config_resetstat()
    assert store.expire_tiles("clicks", 50) == 6
    calls = _commands(server)
    assert "scan" not in calls
    assert "keys" not in calls
    assert calls["zrangebyscore"] == 2 + 3  # two pages of the index, then each old key
    assert [server.zscore(index, key) for key in (b"old0", b"old2", b"k0")] == [200, 200, 100]
    assert server.zcard(index) == 2_003
    assert store.expire_tiles("clicks", 10_000) == 2_000 + 3
    assert server.exists(index) == 0  # no key holds tiles: the index is gone too
    assert store.multi_get("clicks", [b"k7"]) == [b"record"]  # records are not tiles
    server.close()
    store.close()


def test_redis_indexes_tiles_written_before_its_index_once(redis_url: str) -> None:
    store = RedisStore(redis_url)
    store.flush()
    store.put_tiles("clicks", [(key, start, b"", b"v") for key in (b"a", b"b\x00*")
                               for start in (1, 5, 9)])
    server = redis.Redis.from_url(redis_url)
    server.delete(b"tt:clicks:o", b"tt:clicks:indexed")  # as an older timetile left them
    assert store.expire_tiles("clicks", 6) == 4
    assert store.get_tiles("clicks", [b"a", b"b\x00*"], MIN, MAX) == [[(9, b"", b"v")]] * 2
    server.config_resetstat()
    store.put_tiles("clicks", [(b"c", 2, b"", b"v")])
    assert store.expire_tiles("clicks", 6) == 1
    assert "scan" not in _commands(server)  # indexed once: never scanned again
    server.close()
    store.close()


def test_redis_put_lowers_a_keys_oldest_start_only(redis_url: str) -> None:
    store = RedisStore(redis_url)
    store.flush()
    server = redis.Redis.from_url(redis_url)
    for start in (50, 80, 20, 60):
        store.put_tiles("clicks", [(b"a", start, b"", b"v")])
    assert server.zscore(b"tt:clicks:o", b"a") == 20
    assert store.expire_tiles("clicks", 30) == 1
    assert server.zscore(b"tt:clicks:o", b"a") == 50  # raised by expiry, to what is left
    server.close()
    store.close()


# --- open_store ------------------------------------------------------------------------------


def test_open_store_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.chdir(tmp_path)
    for uri in [f"lmdb://{tmp_path}/abs", "lmdb:relative/dir", "bare/dir", str(tmp_path / "p")]:
        with open_store(uri) as opened:
            assert isinstance(opened, LmdbStore)
            opened.multi_put("t", [(b"k", uri.encode())])
    assert (tmp_path / "abs" / "data.mdb").exists()
    assert (tmp_path / "relative" / "dir" / "data.mdb").exists()
    assert (tmp_path / "bare" / "dir" / "data.mdb").exists()
    with open_store("lmdb:relative/dir?readonly=1&sync=0") as reader:
        assert isinstance(reader, LmdbStore)
        assert reader.multi_get("t", [b"k"]) == [b"lmdb:relative/dir"]
        with pytest.raises(ValueError, match="read-only"):
            reader.multi_put("t", [(b"k", b"v")])
    with open_store(redis_url) as server:
        assert isinstance(server, RedisStore)


def test_redis_urls_redis_py_would_misread_are_refused(redis_url: str) -> None:
    """redis-py opened database 0 for ``/abc``, failed late with a TypeError on an unknown
    option, and a database the server lacks raised its ResponseError; a password given as an
    option was shown in messages."""
    base = redis_url.rsplit("/", 1)[0]  # redis://127.0.0.1:PORT
    for uri, message in [(f"{base}/abc", r"'/abc' is no database number. Fix: end the URL"),
                         (f"{base}/1?foo=bar", r"unexpected keyword argument 'foo'. Fix: remove"),
                         (f"{base}/1?socket_timeout=soon", r"'socket_timeout'.*Fix: write it "
                                                           r"as redis://")]:
        with pytest.raises(ValueError, match=message):
            open_store(uri)
        with pytest.raises(ValueError, match=message):
            parse_source(f"{uri}{'&' if '?' in uri else '?'}stream=events")
    with pytest.raises(StoreUnavailable, match=r"refused the connection \(DB index is out of "
                       r"range\): check the URL's database number"):
        open_store(f"{base}/99")
    with pytest.raises(StoreUnavailable) as down:
        open_store(f"redis://127.0.0.1:{_closed_port()}/0?password=s3cret")
    assert "s3cret" not in str(down.value)
    assert "password=***" in str(down.value)
    with pytest.raises(ValueError, match=r"Invalid value for 'protocol'|protocol must be"):
        open_store(f"{base}/0?protocol=7")  # redis-py's own error, no traceback


@pytest.mark.parametrize("uri", ["redis://:ab/cd+ef@cache:6379/0", "redis://:ab?cd@cache:6379/0",
                                 "redis://app:ab#cd@cache:6379/0"])
def test_a_password_that_splits_the_url_is_never_shown(uri: str) -> None:
    """A password holding '/', '?' or '#' not percent-encoded splits the URL elsewhere:
    redis-py's error then echoed it, and the redaction found no password to hide."""
    secret = uri.split("@", maxsplit=1)[0].rsplit(":", 1)[1]
    with pytest.raises(ValueError, match="must be percent-encoded") as refused:
        open_store(uri)
    assert secret not in str(refused.value)
    with pytest.raises(ValueError, match=r"percent-encoded|names no stream") as source:
        parse_source(f"{uri}?stream=ev" if "?" not in uri else f"{uri}&stream=ev")
    assert secret not in str(source.value)


def test_redacted_uri_hides_every_password() -> None:
    assert redacted_uri("redis://:ab/cd@cache:6379/0") == "redis://:***@cache:6379/0"
    assert redacted_uri("rediss://h:6379/0?ssl_password=k3y&ssl_ca_certs=/a b.pem") == (
        "rediss://h:6379/0?ssl_password=***&ssl_ca_certs=/a b.pem")  # the rest as written
    assert redacted_uri("redis://user@h:6379/0") == "redis://user@h:6379/0"  # no password
    with pytest.raises(ValueError, match="names no stream") as unnamed:
        parse_source("redis://:s3cret@h:6379/0")
    assert "s3cret" not in str(unnamed.value)


@pytest.mark.parametrize("uri", ["", "s3://bucket/x", "lmdb://host/x", "lmdb:", "ftp:x",
                                 "postgres://h/db", "lmdb:x?verbose=1", "lmdb:x?sync=maybe"])
def test_open_store_rejects_unknown_uris(uri: str) -> None:
    with pytest.raises(ValueError, match=r"lmdb:///abs/path|unknown LMDB option"):
        open_store(uri)


def test_open_store_on_a_missing_read_only_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="cannot open LMDB"):
        open_store(f"lmdb://{tmp_path}/missing?readonly=1")


# --- LMDB: one directory, many store objects, threads and processes ---------------------------


def test_lmdb_stores_on_one_directory_share_commits(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as writer, LmdbStore(tmp_path, readonly=True) as reader:
        assert reader.multi_get("t", [b"k"]) == [None]  # the table is created after this read
        writer.multi_put("t", [(b"k", b"1")])
        writer.put_tiles("z", [(b"k", 0, b"", b"t")])
        assert reader.multi_get("t", [b"k"]) == [b"1"]
        assert reader.get_tiles("z", [b"k"], 0, 1) == [[(0, b"", b"t")]]
        with pytest.raises(ValueError, match="read-only"):
            reader.put_tiles("z", [(b"k", 0, b"", b"t")])
    with LmdbStore(tmp_path, readonly=True) as reader:  # a fresh open sees the files
        assert reader.multi_get("t", [b"k"]) == [b"1"]
        with pytest.raises(ValueError, match="already open read-only"):
            LmdbStore(tmp_path)


def test_lmdb_concurrent_readers_see_whole_commits(tmp_path: Path) -> None:
    keys = [b"k%d" % i for i in range(50)]
    errors: list[str] = []
    done = threading.Event()
    with LmdbStore(tmp_path, sync=False) as store:
        store.multi_put("t", [(key, b"0") for key in keys])

        def read() -> None:
            last = 0
            with LmdbStore(tmp_path) as mine:  # another store object on the same directory
                while not done.is_set():
                    seen = {int(v or b"-1") for v in mine.multi_get("t", keys)}
                    if len(seen) != 1 or min(seen) < last:
                        errors.append(f"torn or stale read: {sorted(seen)} after {last}")
                    last = min(seen)

        readers = [threading.Thread(target=read) for _ in range(4)]
        for thread in readers:
            thread.start()
        for version in range(1, 200):
            store.multi_put("t", [(key, b"%d" % version) for key in keys])
        done.set()
        for thread in readers:
            thread.join()
        assert store.multi_get("t", keys[:1]) == [b"199"]
    assert errors == []


def test_lmdb_map_grows_when_full(tmp_path: Path) -> None:
    value = b"x" * 100_000
    with LmdbStore(tmp_path, map_size=1 << 20) as store:
        store.multi_put("t", [(b"%d" % i, value) for i in range(80)])  # 8 MB into 1 MiB
        store.put_tiles("z", [(b"k", i, b"", value) for i in range(40)])
        assert store.multi_get("t", [b"0", b"79"]) == [value, value]
        assert len(store.get_tiles("z", [b"k"], 0, 40)[0]) == 40


def test_lmdb_another_process_writes_and_grows_the_map(tmp_path: Path) -> None:
    with LmdbStore(tmp_path, map_size=1 << 20) as reader:
        reader.multi_put("t", [(b"mine", b"1")])
        script = ("import sys; from timetile.store.lmdb_store import LmdbStore\n"
                  "with LmdbStore(sys.argv[1], map_size=1 << 20) as s:\n"
                  "    s.multi_put('t', [(b'%d' % i, b'y' * 100_000) for i in range(80)])\n")
        root = str(Path(__file__).parents[2])
        subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": root})
        assert reader.multi_get("t", [b"mine", b"79"]) == [b"1", b"y" * 100_000]
        reader.multi_put("t", [(b"after", b"2")])
        assert reader.multi_get("t", [b"after"]) == [b"2"]


def test_lmdb_key_size_limit(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as store:
        top = store.max_key_size
        store.multi_put("t", [(b"k" * top, b"v")])
        assert store.multi_get("t", [b"k" * top, b"k" * (top + 1)]) == [b"v", None]
        with pytest.raises(ValueError, match="LMDB keys"):
            store.multi_put("t", [(b"k" * (top + 1), b"v")])
        with pytest.raises(ValueError, match="LMDB keys"):
            store.put_tiles("z", [(b"k" * (top - 10), 0, b"m", b"v")])
        store.put_tiles("z", [(b"k" * (top - 11), 0, b"m", b"v")])
        assert store.get_tiles("z", [b"k" * (top - 11), b"k" * top], 0, 1) == [
            [(0, b"m", b"v")], []]


def test_lmdb_in_a_forked_child_says_to_open_after_forking(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as parent:
        parent.multi_put("t", [(b"k", b"v")])
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report the error's message, then leave at once
            try:
                LmdbStore(tmp_path)
                message = b"opened"
            except StoreUnavailable as error:
                message = str(error).encode()
            os.write(write, message)
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            message = pipe.read()
        os.waitpid(pid, 0)
        assert b"open stores after forking" in message
        assert parent.multi_get("t", [b"k"]) == [b"v"]


def test_a_key_that_fits_fits_every_tile(tmp_path: Path) -> None:
    """One limit for records and tiles, with room for the longest batch id."""
    with LmdbStore(str(tmp_path / "store")) as store:
        longest = b"k" * (store.max_key_size - 10 - MAX_MEMBER)
        assert store.fits(longest)
        assert not store.fits(longest + b"k")
        assert not store.fits(b"")
        store.multi_put("t", [(longest, b"v")])
        store.put_tiles("t", [(longest, 0, str(-(2**63)).encode(), b"v")])
        assert store.get_tiles("t", [longest], 0, 1) == [[(0, str(-(2**63)).encode(), b"v")]]


def test_lmdb_table_limit_is_named_with_a_fix(tmp_path: Path) -> None:
    """About 500 GroupBys fill a store's tables; the next one gets the limit and a fix, not a
    raw lmdb error whose advice (max_dbs=) no URI option offers."""
    with LmdbStore(str(tmp_path / "store")) as store:
        for index in range(MAX_TABLES):
            store.multi_put(f"t{index}", [(b"k", b"v")])
        with pytest.raises(ValueError, match=rf"holds {MAX_TABLES} tables, its most, and 'more' "
                           r"would be one more.*Fix: serve the other GroupBys from another"):
            store.multi_put("more", [(b"k", b"v")])
        assert store.multi_get("t0", [b"k"]) == [b"v"]
