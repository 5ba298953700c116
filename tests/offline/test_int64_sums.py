"""An integer ``sum`` past int64 is refused the same way on every path, offline and online.

One rule, owned by ``Sum`` (``finalize`` and ``finalize_many``): an INT column's sum outside
int64 raises ``ResultOverflowError`` naming the feature and the fix (cast to double), as
Spark SQL's ``sum`` raises ``ARITHMETIC_OVERFLOW`` under ANSI mode. The state stays exact, so
a window whose running sums pass int64 but whose own sum does not is answered exactly; and
``avg`` of the same values is a double, never refused. Checked on each executor (sweep, tiled,
interval tree, reference, entity), in the fetcher and over HTTP.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession
from typer.testing import CliRunner

import timetile as tt
from timetile.cli import app
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.online.server import create_app
from timetile.store.kv import open_store

DAY = date_to_ms("2024-01-02")
BIG = 2**62
#: Two events of 2^62 an hour apart, then one of -2^62: the 1h window never holds both big
#: ones, the 1d window does until the third event brings it back into int64.
EVENTS = [(1, DAY + HOUR_MS, BIG), (1, DAY + 2 * HOUR_MS, BIG), (1, DAY + 3 * HOUR_MS, -BIG)]
#: Queries: inside int64 (1h), past it (1d, after the second event), back inside (after all).
QUERIES = {"one": DAY + 2 * HOUR_MS + 1, "past": DAY + 3 * HOUR_MS, "back": DAY + 4 * HOUR_MS}


def _join(spark: SparkSession, windows: list[str], asked: tuple[str, ...] = tuple(QUERIES)
          ) -> tt.Join:
    events = spark.createDataFrame(EVENTS, "k long, ts long, v long")
    queries = spark.createDataFrame([(1, QUERIES[name], name) for name in asked],
                                    "k long, ts long, q string")
    group_by = tt.GroupBy("big", tt.EventSource(events), ["k"], [
        tt.Aggregation("v", "sum", windows=windows), tt.Aggregation("v", "avg", windows=windows),
        tt.Aggregation("v", "sum")])
    return tt.Join("big", tt.EventSource(queries), [group_by])


@pytest.mark.parametrize("executor", ["sweep", "tiled", "interval_tree", "reference"])
def test_every_executor_refuses_the_same_window_and_sums_the_others_exactly(
        spark: SparkSession, executor: str) -> None:
    """Past int64 at ``past`` (1d): refused, naming the feature and the fix. At ``back`` the
    1d and lifetime sums passed int64 on the way but are back inside: exact; the 1h one
    never left it; ``avg`` is a double."""
    with pytest.raises(Exception, match=r"big_v_sum_1d \(column 'v'\): an integer sum is "
                                        r"past int64.*Fix: cast the column to double"):
        tt.backfill(_join(spark, ["1d"], ("past",)), spark, executor=executor).collect()
    [row] = tt.backfill(_join(spark, ["1h", "1d"], ("back",)), spark,
                        executor=executor).collect()
    assert (row["big_v_sum_1h"], row["big_v_sum_1d"], row["big_v_sum"]) == (-BIG, BIG, BIG)
    assert (row["big_v_avg_1h"], row["big_v_avg_1d"]) == (-float(BIG), BIG / 3)


def test_spark_sql_refuses_such_a_sum_too(spark: SparkSession) -> None:
    """The rule is Spark SQL's own under ANSI mode, its default."""
    events = spark.createDataFrame(EVENTS[:2], "k long, ts long, v long")
    with pytest.raises(Exception, match="ARITHMETIC_OVERFLOW"):
        events.groupBy("k").sum("v").collect()


def test_an_entity_sum_past_int64_is_refused(spark: SparkSession) -> None:
    snapshots = spark.createDataFrame([("2024-01-01", 1, BIG, 1), ("2024-01-01", 1, BIG, 2)],
                                      "ds string, k long, v long, row_id long")
    mutations = spark.createDataFrame([(1, -BIG, 3, DAY + HOUR_MS, False)],
                                      "k long, v long, row_id long, mutation_ts long, "
                                      "is_before boolean")
    queries = spark.createDataFrame([(1, DAY + 1, "past"), (1, DAY + 2 * HOUR_MS, "back")],
                                    "k long, ts long, q string")
    group_by = tt.GroupBy("ent", tt.EntitySource(snapshots, mutation_table=mutations), ["k"],
                          [tt.Aggregation("v", "sum")])
    join = tt.Join("ent", tt.EventSource(queries), [group_by])
    with pytest.raises(Exception, match=r"ent_v_sum \(column 'v'\): an integer sum is past int64"):
        tt.backfill(join, spark).collect()
    later = tt.Join("ent", tt.EventSource(queries.where("q = 'back'")), [group_by])
    assert [row["ent_v_sum"] for row in tt.backfill(later, spark).collect()] == [BIG]


def test_the_fetcher_and_the_server_refuse_it_as_the_backfill_does(
        spark: SparkSession, tmp_path: Path) -> None:
    join = _join(spark, ["1h", "1d"])
    store = f"lmdb://{tmp_path / 'store'}"
    upload(join, spark, "2024-01-01", store)  # the events are all streamed-free: day after
    with open_store(store) as kv:
        fetcher = Fetcher(join, kv)
        # Before any event, and the day's events are not in the day-before upload: zero.
        assert fetcher.fetch([{"k": 1}], at=DAY)[0].features["big_v_sum_1d"] is None
    upload(join, spark, "2024-01-02", store)
    with open_store(store) as kv:
        fetcher = Fetcher(join, kv)
        answer = fetcher.fetch([{"k": 1}], at=DAY + DAY_MS - 1)[0]  # inside int64 again
        assert answer.features["big_v_sum_1d"] == BIG
        with pytest.raises(ResultOverflowError,
                           match=r"big_v_sum_1d \(column 'v'\): an integer sum is past"):
            fetcher.fetch([{"k": 1}], at=QUERIES["past"])
        client = TestClient(create_app({"big": join}, kv))
        response = client.post("/v1/features/big", json={"rows": [{"k": 1}],
                                                         "at": QUERIES["past"]})
        assert response.status_code == 422
        body = response.json()
        assert body["error"].startswith("big_v_sum_1d (column 'v'): an integer sum is past int64")
        assert body["fix"].startswith("cast the column to double")


def test_the_command_line_reports_it_as_a_user_error(spark: SparkSession,
                                                      tmp_path: Path) -> None:
    """In a backfill the refusal is raised in a Spark task; the CLI prints its line, exit 2."""
    spark.createDataFrame(EVENTS, "k long, ts long, v long").write.parquet(
        str(tmp_path / "events"))
    spark.createDataFrame([(1, QUERIES["past"])], "k long, ts long").write.parquet(
        str(tmp_path / "queries"))
    defs = tmp_path / "defs.py"
    defs.write_text(
        "import timetile as tt\n"
        f"events = tt.EventSource({str(tmp_path / 'events')!r}, time_column='ts')\n"
        "big = tt.GroupBy('big', events, ['k'], [tt.Aggregation('v', 'sum', windows=['1d'])])\n"
        f"join = tt.Join('big', tt.EventSource({str(tmp_path / 'queries')!r}, "
        "time_column='ts'), [big])\n")
    result = CliRunner().invoke(app, ["backfill", str(defs), "--start", "2024-01-02", "--end",
                                      "2024-01-02", "--output", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert message.startswith("A feature cannot be computed: big_v_sum_1d (column 'v'): an "
                              "integer sum is past int64"), message
    assert "Fix: cast the column to double" in message
