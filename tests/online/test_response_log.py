"""The response log: Parquet files of the documented schema, flushed by size, age and close,
and a ``log()`` that drops and counts instead of waiting when the writer falls behind."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timetile.online.fetcher import FetchResult
from timetile.online.response_log import SCHEMA, ResponseLog

AT = 1_709_294_400_000


def results(count: int, **features: Any) -> list[FetchResult]:
    return [FetchResult({"n": index, **features}) for index in range(count)]


def rows(count: int) -> list[dict[str, Any]]:
    return [{"user_id": index} for index in range(count)]


def read(folder: Path) -> pa.Table:
    return pq.read_table(folder, schema=SCHEMA).sort_by([("request_id", "ascending"),
                                                         ("row_index", "ascending")])


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_writes_the_documented_schema_and_values(tmp_path: Path) -> None:
    with ResponseLog(tmp_path, clock=lambda: 1_709_300_000_000) as log:
        assert log.log("r1", "model", AT, [{"user_id": 1, "seller_id": 7}, {"user_id": 2,
                                                                           "seller_id": 7}],
                       [FetchResult({"sum": float("nan"), "hist": {3: 2}, "last": [5, 4]}),
                        FetchResult({"sum": float("-inf"), "hist": None, "last": None},
                                    ["users"])])
        log.log("r2", "other_model", AT + 1, [{"user_id": "a"}],
                [FetchResult({"max": 1.5}, definition="0123456789abcdef")])
    assert (log.written, log.dropped) == (3, 0)
    model = pq.read_table(tmp_path / "model")
    assert model.schema == SCHEMA
    assert model.to_pylist() == [
        {"request_id": "r1", "join": "model", "row_index": 0, "request_time": AT,
         "served_at": 1_709_300_000_000, "keys": '{"user_id":1,"seller_id":7}',
         "features": '{"sum":"NaN","hist":{"3":2},"last":[5,4]}', "stale": [],
         "definition": None},
        {"request_id": "r1", "join": "model", "row_index": 1, "request_time": AT,
         "served_at": 1_709_300_000_000, "keys": '{"user_id":2,"seller_id":7}',
         "features": '{"sum":"-Infinity","hist":null,"last":null}', "stale": ["users"],
         "definition": None},
    ]
    other = pq.read_table(tmp_path / "other_model").to_pylist()
    assert [(row["join"], row["request_time"], json.loads(row["features"]), row["definition"])
            for row in other] == [("other_model", AT + 1, {"max": 1.5}, "0123456789abcdef")]
    names = sorted(path.name for path in tmp_path.rglob("*"))
    assert all(re.fullmatch(r"part-1709300000000-\d{6}\.parquet", name)
               for name in names if name not in ("model", "other_model")), names


def test_a_flush_splits_files_at_max_rows(tmp_path: Path) -> None:
    with ResponseLog(tmp_path, max_rows=2, max_seconds=60) as log:
        log.log("r1", "model", AT, rows(5), results(5))
    files = sorted((tmp_path / "model").iterdir())
    assert [pq.read_metadata(path).num_rows for path in files] == [2, 2, 1]
    assert read(tmp_path / "model").column("row_index").to_pylist() == [0, 1, 2, 3, 4]


def test_writes_when_max_rows_wait(tmp_path: Path) -> None:
    with ResponseLog(tmp_path, max_rows=3, max_seconds=60) as log:
        log.log("r1", "model", AT, rows(2), results(2))
        time.sleep(0.05)
        assert log.written == 0
        log.log("r2", "model", AT, rows(1), results(1))
        wait_until(lambda: log.written == 3)


def test_writes_when_the_oldest_row_is_max_seconds_old(tmp_path: Path) -> None:
    with ResponseLog(tmp_path, max_seconds=0.05) as log:
        log.log("r1", "model", AT, rows(1), results(1))
        wait_until(lambda: log.written == 1)
        assert read(tmp_path / "model").num_rows == 1


class SlowLog(ResponseLog):
    """A log whose writes wait until the test lets them go: a disk that stalls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        super().__init__(*args, **kwargs)

    def _write(self, join: str, table: pa.Table) -> Path:
        self.entered.set()
        assert self.release.wait(30)
        return super()._write(join, table)


def test_log_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    log = SlowLog(tmp_path, queue_size=4, max_seconds=0.01)
    try:
        assert log.log("r0", "model", AT, rows(1), results(1))
        assert log.entered.wait(10)  # the writer holds that row and is stuck
        assert log.log("r1", "model", AT, rows(3), results(3))  # 4 rows: the queue is full
        began = time.perf_counter()
        accepted = [log.log(f"x{index}", "model", AT, rows(2), results(2))
                    for index in range(1_000)]
        seconds = time.perf_counter() - began
        assert not any(accepted)
        assert log.dropped == 2_000
        assert seconds < 1.0  # 1,000 calls while the writer is stuck: no waiting
    finally:
        log.release.set()
        log.close()
    assert (log.written, log.dropped) == (4, 2_000)
    assert read(tmp_path / "model").column("request_id").to_pylist() == \
        ["r0", "r1", "r1", "r1"]


def test_a_failed_write_counts_as_dropped_and_the_log_goes_on(tmp_path: Path) -> None:
    (tmp_path / "model").write_text("a file where the join's folder should be")
    with ResponseLog(tmp_path) as log:
        log.log("r1", "model", AT, rows(2), results(2))
        log.log("r2", "other", AT, rows(1), results(1))
    assert (log.written, log.dropped) == (1, 2)
    assert read(tmp_path / "other").num_rows == 1


@pytest.mark.parametrize("links", [True, False])
def test_writers_sharing_a_folder_never_overwrite_each_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool) -> None:
    """Two logs of one process (as two containers that are each process 1 on a shared
    volume) writing in the same millisecond: where the file system has no hard links, the
    second's rename replaced the first's file (50 of 100 rows on disk, all counted written)."""
    if not links:
        def no_hard_links(*_: Any) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr("os.link", no_hard_links)
    same_millisecond = lambda: AT  # noqa: E731
    first = ResponseLog(tmp_path, max_rows=1, clock=same_millisecond)
    second = ResponseLog(tmp_path, max_rows=1, clock=same_millisecond)
    with first, second:
        for index in range(50):
            first.log(f"a{index}", "model", AT, rows(1), results(1))
            second.log(f"b{index}", "model", AT, rows(1), results(1))
    assert first.written + second.written == 100
    assert read(tmp_path / "model").num_rows == 100
    assert not list((tmp_path / "model").glob(".part-*"))  # no temporary file left


@pytest.mark.parametrize(("code", "written"), [(errno.EINVAL, 2), (errno.EIO, 0)])
def test_a_file_system_that_cannot_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        code: int, written: int) -> None:
    """fsync answering EINVAL (some FUSE and network mounts) leaves the write as durable as
    the system makes it; EIO loses the rows, counted. No temporary file stays either way."""
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        if stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(code, os.strerror(code))
        real_fsync(descriptor)

    monkeypatch.setattr("os.fsync", fsync)
    with ResponseLog(tmp_path) as log:
        log.log("r1", "model", AT, rows(2), results(2))
    assert (log.written, log.dropped) == (written, 2 - written)
    assert not list((tmp_path / "model").glob(".part-*"))


def test_a_row_arrow_cannot_hold_loses_only_its_own_request(tmp_path: Path) -> None:
    """A key with a lone surrogate cannot be written as UTF-8: that request alone is lost."""
    with ResponseLog(tmp_path, max_seconds=60) as log:
        log.log("r1", "model", AT, rows(2), results(2))
        log.log("bad", "model", AT, [{"user_id": "\ud800"}], results(1))
        log.log("r2", "model", AT, rows(1), results(1))
    assert (log.written, log.dropped) == (3, 1)
    assert read(tmp_path / "model").column("request_id").to_pylist() == ["r1", "r1", "r2"]


def test_bad_calls(tmp_path: Path) -> None:
    log = ResponseLog(tmp_path)
    with pytest.raises(ValueError, match="2 rows but 1 results"):
        log.log("r1", "model", AT, rows(2), results(1))
    with pytest.raises(ValueError, match="is not a Join name"):
        log.log("r1", "../model", AT, rows(1), results(1))
    log.close()
    log.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        log.log("r1", "model", AT, rows(1), results(1))
    with pytest.raises(ValueError, match="at least 1"):
        ResponseLog(tmp_path, queue_size=0)


def test_request_id_and_at_are_checked_before_they_are_queued(tmp_path: Path) -> None:
    """A row counted as written has a request id and a time: a bad one is refused in log(),
    not lost in the writer thread nor written with a null or truncated time."""
    with ResponseLog(tmp_path, max_seconds=60) as log:
        for request_id in (None, 7):
            with pytest.raises(TypeError, match=r"request_id is .*, not a str\. Fix: pass"):
                log.log(request_id, "model", AT, rows(1), results(1))  # type: ignore[arg-type]
        for at in (None, 5.7, True, "5"):
            with pytest.raises(TypeError, match=r"at is .*, not an int\. Fix: pass the fetch "
                                                "time as an int of epoch milliseconds"):
                log.log("r", "model", at, rows(1), results(1))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"at is 9223372036854775808, outside int64"):
            log.log("r", "model", 2**63, rows(1), results(1))
        assert log.log("r1", "model", np.int64(AT), rows(1), results(1))  # type: ignore[arg-type]
        assert log.log("r2", "model", -(2**63), rows(1), results(1))
    assert (log.written, log.dropped) == (2, 0)
    assert read(tmp_path / "model").column("request_time").to_pylist() == [AT, -(2**63)]


@pytest.mark.spark
def test_spark_reads_the_files_back(spark: Any, tmp_path: Path) -> None:
    with ResponseLog(tmp_path) as log:
        log.log("r1", "model", AT, rows(3), results(3, avg=float("inf")))
    frame = spark.read.parquet(str(tmp_path / "model"))
    assert frame.dtypes == [("request_id", "string"), ("join", "string"), ("row_index", "int"),
                            ("request_time", "bigint"), ("served_at", "bigint"),
                            ("keys", "string"), ("features", "string"),
                            ("stale", "array<string>"), ("definition", "string")]
    got = frame.selectExpr("row_index", "get_json_object(keys, '$.user_id') AS user",
                           "get_json_object(features, '$.avg') AS avg").orderBy("row_index")
    assert [tuple(row) for row in got.collect()] == [(0, "0", "Infinity"), (1, "1", "Infinity"),
                                                     (2, "2", "Infinity")]
