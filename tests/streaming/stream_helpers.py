"""Shared data and checks of the streaming tests: one uploaded world, landed files, equality."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.store.kv import Tile, open_store
from timetile.store.layout import encode_key, tile_table
from timetile.store.tiles import read_meta
from timetile.streaming.file_source import land_json_lines
from timetile.testing import random_events, same_value, to_spark

DS = "2024-01-02"
DAY_END = date_to_ms(DS) + DAY_MS
STREAMED_UNTIL = DAY_END + 20 * HOUR_MS
WINDOWS = ["1h", "1d", tt.Window("1d", hop="1h"), tt.Window("1d", hop="6h", kind="hopping")]
COLUMNS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "amount": [("sum", {}), ("avg", {}), ("min", {}), ("max", {}), ("variance", {}),
               ("top_k", {"k": 2})],
    "quantity": [("count", {}), ("first", {}), ("last", {})],
    "item": [("last_k", {"k": 3}), ("unique_count", {}), ("histogram", {})],
    "flag": [("count", {})],
}
KEYS = [1, 2, 3, 5, 10, 99]  # 99 has no event at all


def aggregations() -> list[tt.Aggregation]:
    made = []
    for column, ops in COLUMNS.items():
        for op, params in ops:
            made.append(tt.Aggregation(column, op, windows=WINDOWS, **params))
            made.append(tt.Aggregation(column, op, **params))
    made.append(tt.Aggregation("amount", "sum", windows=["1d"], buckets=["item"]))
    return made


@dataclass
class World:
    """Day DS uploaded, day DS + 1 (up to STREAMED_UNTIL) landed as files, and the truth."""

    table: pa.Table  # every event: days DS - 1 to DS + 1
    group_by: tt.GroupBy
    join: tt.Join
    uploaded: Path  # an LMDB store holding the upload: copy it, never write it
    rows: list[dict[str, Any]]  # the streamed rows, in time order (null times first)
    files: list[Path]
    times: list[int]
    truth: dict[tuple[int, int], Any]

    def store(self, folder: Path) -> str:
        """Return the URI of a fresh copy of the uploaded store."""
        shutil.copytree(self.uploaded, folder)
        return f"lmdb://{folder}"

    @property
    def usable(self) -> int:
        return sum(row["ts"] is not None and row["user_id"] is not None for row in self.rows)

    @property
    def unusable(self) -> int:
        return len(self.rows) - self.usable


def make_world(spark: Any, folder: Path, *, files: int = 5) -> World:
    table = random_events(500, 10, seed=61, start="2024-01-01", days=3)
    users = tt.GroupBy("users", tt.EventSource(to_spark(spark, table)), ["user_id"],
                       aggregations())
    uploaded = folder / "uploaded"
    upload(users, spark, DS, f"lmdb://{uploaded}")
    times = pc.fill_null(table.column("ts"), -1)
    keep = pc.or_(pc.equal(times, -1), pc.and_(pc.greater_equal(times, DAY_END),
                                                pc.less(times, STREAMED_UNTIL)))
    rows = sorted(table.filter(keep).to_pylist(),
                  key=lambda row: -1 if row["ts"] is None else row["ts"])
    landed = write_files(folder / "landing", rows, files)
    stamps = [row["ts"] for row in rows if row["ts"] is not None]
    at = sorted({DAY_END, STREAMED_UNTIL, DAY_END + 6 * HOUR_MS, *stamps[::40],
                 *(t + 1 for t in stamps[5::60])})
    queries = spark.createDataFrame([(k, t) for k in KEYS for t in at], "user_id long, ts long")
    join = tt.Join("online", tt.EventSource(queries), [users])
    truth = {(row["user_id"], row["ts"]): row for row in tt.backfill(join, spark).collect()}
    return World(table, users, join, uploaded, rows, landed, at, truth)


def write_files(folder: Path, rows: list[dict[str, Any]], parts: int,
                start: int = 0) -> list[Path]:
    """Land ``rows`` as ``parts`` JSON-lines files, in order (see ``land_json_lines``)."""
    return land_json_lines(folder, rows, parts, first=start)


def mismatches(world: World, store_uri: str, times: list[int] | None = None) -> list[Any]:
    """Return every (feature, key, time, fetched, backfilled) that differ."""
    bad = []
    with open_store(store_uri) as store:
        fetcher = Fetcher(world.join, store)
        for moment in times or world.times:
            results = fetcher.fetch([{"user_id": k} for k in KEYS], at=moment)
            for key, result in zip(KEYS, results, strict=True):
                assert result.stale == []
                expected = world.truth[(key, moment)]
                bad += [(name, key, moment, value, expected[name])
                        for name, value in result.features.items()
                        if not same_value(value, expected[name])]
    return bad


def all_tiles(store_uri: str, group_by: tt.GroupBy) -> list[list[Tile]]:
    """Every tile entry of the test keys, raw: two stores hold the same data iff equal."""
    with open_store(store_uri) as store:
        meta = read_meta(store, group_by)
        keys = [encode_key([k], meta.key_types) for k in range(1, 11)]
        return store.get_tiles(tile_table(group_by.name), keys, -(1 << 62), 1 << 62)
