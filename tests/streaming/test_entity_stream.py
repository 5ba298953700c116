"""A change stream (CDC) of an entity source through ``timetile stream``: upload the snapshot of
day D, land D+1's mutations as files, stream them with a crash and a restart in the middle,
and every fetch equals ``tt.backfill``; every mutation is counted once, and the consistency
job over the logged responses finds every feature matching.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.online.response_log import ResponseLog
from timetile.store.kv import open_store
from timetile.streaming.file_source import FileSource, land_json_lines
from timetile.streaming.job import BatchReport, stream_group_by
from timetile.testing import random_entities, same_value, to_spark
from timetile.verify.consistency import consistency

DS = "2024-01-01"
DAY_END = date_to_ms(DS) + DAY_MS
KEYS = [1, 2, 3, 5, 10, 99]


def test_change_stream_with_a_restart_serves_what_the_backfill_computes(
        spark: Any, tmp_path: Path) -> None:
    tables = random_entities(9, seed=71, start=DS, days=2, mutations_per_day=40)
    source = tt.EntitySource(to_spark(spark, tables.snapshots),
                             mutation_table=to_spark(spark, tables.mutations),
                             time_column="since")
    accounts = tt.GroupBy("accounts", source, ["user_id"], [
        tt.Aggregation("balance", "count"), tt.Aggregation("balance", "sum"),
        tt.Aggregation("balance", "sum", windows=["6h"]), tt.Aggregation("tier", "last"),
        tt.Aggregation("tier", "histogram")])
    uri = f"lmdb://{tmp_path / 'store'}"
    upload(accounts, spark, DS, uri)
    stamps = pc.fill_null(tables.mutations.column("mutation_ts"), -1)
    next_day = tables.mutations.filter(pc.and_(pc.greater_equal(stamps, DAY_END),
                                               pc.less(stamps, DAY_END + DAY_MS)))
    rows = sorted(next_day.to_pylist(), key=lambda row: row["mutation_ts"])
    late = tables.mutations.filter(pc.less(stamps, DAY_END)).slice(0, 2).to_pylist()
    rows[3:3] = [*late, {**rows[0], "mutation_ts": None}]
    files = land_json_lines(tmp_path / "landing", rows, 4)
    checkpoint = str(tmp_path / "checkpoint")
    stream_source = FileSource(str(files[0].parent), "json", max_files_per_trigger=1)

    def crash(report: BatchReport) -> None:  # batch 1 is written, not committed
        if report.batch == 1:
            raise RuntimeError("simulated crash after writing batch 1")

    first = stream_group_by(accounts, spark, stream_source, uri, checkpoint, until_idle=True,
                            on_batch=crash)
    with pytest.raises(Exception, match="simulated crash"):
        first.await_termination()
    second = stream_group_by(accounts, spark, stream_source, uri, checkpoint, until_idle=True)
    second.await_termination()
    assert [(b.batch, b.replay) for b in second.batches] == [(1, True), (2, False), (3, False)]
    totals = second.totals
    assert (totals.written, totals.late, totals.unusable) == (next_day.num_rows, 2, 1)

    at = sorted({DAY_END, DAY_END + DAY_MS - 1, *(row["mutation_ts"] for row in rows[::5]
                                                   if row["mutation_ts"] is not None)})
    at = [t for t in at if t >= DAY_END]
    queries = spark.createDataFrame([(k, t) for k in KEYS for t in at], "user_id long, ts long")
    join = tt.Join("accounts", tt.EventSource(queries), [accounts])
    truth = {(row["user_id"], row["ts"]): row for row in tt.backfill(join, spark).collect()}
    bad = []
    rows = [{"user_id": k} for k in KEYS]
    with open_store(uri) as store, ResponseLog(tmp_path / "logs") as log:
        fetcher = Fetcher(join, store)
        for moment in at:
            results = fetcher.fetch(rows, at=moment)
            log.log(f"r{moment}", join.name, moment, rows, results)
            for key, result in zip(KEYS, results, strict=True):
                bad += [(name, key, moment, value, truth[(key, moment)][name])
                        for name, value in result.features.items()
                        if not same_value(value, truth[(key, moment)][name])]
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"
    report = consistency(join, spark, str(tmp_path / "logs"))
    assert report.rows == len(at) * len(KEYS)
    assert [entry for entry in report.features if entry.matches != entry.rows] == []


def test_an_entity_source_without_mutations_cannot_stream(spark: Any, tmp_path: Path) -> None:
    tables = random_entities(3, seed=72, start=DS, days=1)
    source = tt.EntitySource(to_spark(spark, tables.snapshots))
    users = tt.GroupBy("users", source, ["user_id"], [tt.Aggregation("balance", "count")])
    with pytest.raises(tt.DefinitionError, match="mutation_table: is not set"):
        stream_group_by(users, spark, f"dir:{tmp_path}", f"lmdb://{tmp_path / 's'}",
                        str(tmp_path / "c"))
