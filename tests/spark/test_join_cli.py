"""``timetile join run`` and ``timetile join stream``: the same rows, from a definitions file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from timetile.cli.app import app
from timetile.streaming.file_source import land_json_lines

DEFS = '''
import timetile as tt

orders = tt.EventSource("{data}/orders", time_column="order_time")
deliveries = tt.EventSource("{data}/deliveries", time_column="delivery_time")
delivered = tt.IntervalJoin(
    name="delivered", left=orders, right=deliveries, on=["order_id"], how="left",
    condition="r.delivery_time BETWEEN l.order_time AND l.order_time + INTERVAL 1 HOUR")
'''
ORDERS = [{"order_id": 1, "order_time": 0, "amount": 5.0},
          {"order_id": 2, "order_time": 1_000, "amount": 7.0},
          {"order_id": 3, "order_time": 9_000_000, "amount": 1.0}]
DELIVERIES = [{"order_id": 1, "delivery_time": 60_000},
              {"order_id": 2, "delivery_time": 7_200_000},  # past order 2's hour
              {"order_id": 3, "delivery_time": 9_000_500}]
# order 2 is settled an hour after it (3,601,000), which order 3's times pass
EXPECTED = [(1, 0, 60_000, 60_000), (2, 1_000, None, 3_601_000),
            (3, 9_000_000, 9_000_500, 9_000_500)]


@pytest.fixture(scope="module")
def defs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("join_cli")
    spark.createDataFrame(ORDERS, "order_id bigint, order_time bigint, amount double") \
        .write.parquet(str(folder / "orders"))
    spark.createDataFrame(DELIVERIES, "order_id bigint, delivery_time bigint") \
        .write.parquet(str(folder / "deliveries"))
    path = folder / "defs.py"
    path.write_text(DEFS.format(data=folder))
    return path


def _rows(spark: SparkSession, path: Path) -> list[tuple[object, ...]]:
    frame = spark.read.parquet(str(path))
    if "_tt_kind" in frame.columns:
        frame = frame.where("_tt_kind = 'joined'")
    return sorted((r.l_order_id, r.l_order_time, r.r_delivery_time, r.joined_at)
                  for r in frame.collect())


def test_join_run_writes_the_batch_join(spark: SparkSession, defs: Path, tmp_path: Path) -> None:
    output = tmp_path / "rows"
    result = CliRunner().invoke(app, ["join", "run", str(defs), "--output", str(output),
                                      "--show", "2"])
    assert result.exit_code == 0, result.output
    assert "interval join 'delivered': 3 rows written" in " ".join(result.stdout.split())
    assert _rows(spark, output) == EXPECTED
    again = CliRunner().invoke(app, ["join", "run", str(defs), "--output", str(output)])
    assert again.exit_code == 2
    assert "already exists. Fix: add --overwrite" in again.stderr


def test_join_stream_writes_the_same_rows(spark: SparkSession, defs: Path,
                                          tmp_path: Path) -> None:
    land_json_lines(tmp_path / "orders", ORDERS, 1)
    land_json_lines(tmp_path / "deliveries", DELIVERIES, 1)
    # a later file on each input moves the watermark past order 2's hour; one row is late
    land_json_lines(tmp_path / "orders", [{"order_id": 9, "order_time": 20_000_000},
                                          {"order_id": 8, "order_time": 5}], 1, first=1)
    land_json_lines(tmp_path / "deliveries", [{"order_id": 9, "delivery_time": 20_000_000}],
                    1, first=1)
    with (tmp_path / "deliveries" / "events-0001.json").open("a") as file:
        file.write('{"order_id": 10, "delivery_time": "not a time"\n')  # torn: malformed
    output = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "join", "stream", str(defs), "--name", "delivered",
        "--left", f"dir:{tmp_path / 'orders'}?maxFilesPerTrigger=1",
        "--right", f"dir:{tmp_path / 'deliveries'}?maxFilesPerTrigger=1",
        "--output", str(output), "--checkpoint", str(tmp_path / "checkpoint"),
        "--lateness", "0", "--until-idle"])
    assert result.exit_code == 0, result.output
    assert [row for row in _rows(spark, output) if row[0] != 9] == EXPECTED
    assert "1 late rows and 1 malformed lines set aside" in " ".join(result.stdout.split())


def test_join_commands_name_the_fix(defs: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["join", "run", str(defs), "--name", "nope",
                                      "--output", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "no IntervalJoin named 'nope'; it defines: delivered" in result.stderr
    result = CliRunner().invoke(app, ["join", "stream", str(defs), "--left", "kafka:x",
                                      "--right", "dir:y", "--output", str(tmp_path / "o"),
                                      "--checkpoint", str(tmp_path / "c")])
    assert result.exit_code == 2
    assert "--left: unknown stream source 'kafka:x'" in result.stderr
