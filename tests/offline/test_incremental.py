"""Incremental backfills: day by day with stored hop partials equals one run (seed 001)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import timetile as tt
from timetile.core.timeutil import DAY_MS, date_to_ms
from timetile.testing import random_events, random_queries, to_spark

pytestmark = pytest.mark.spark

DAYS = ["2024-01-02", "2024-01-03", "2024-01-04"]
AGGREGATIONS = [
    tt.Aggregation("amount", "sum", windows=["1d", tt.Window("2d", hop="1h")]),
    tt.Aggregation("item", "last_k", k=2, windows=["1d"]),
    tt.Aggregation("quantity", "max"),
]


def rows(frame: Any) -> list[str]:
    return sorted(repr(tuple(row)) for row in frame.collect())


def test_day_by_day_with_stored_partials_equals_one_run(spark: Any, tmp_path: Path) -> None:
    events_table = random_events(400, 6, seed=21, days=4)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 80, seed=22)))
    store = str(tmp_path / "partials")

    whole = tt.GroupBy("spend", tt.EventSource(events), ["user_id"], AGGREGATIONS)
    one_run = rows(tt.backfill(tt.Join("daily", queries, [whole]), spark, start=DAYS[0],
                               end=DAYS[-1], executor="tiled"))

    by_day: list[str] = []
    notes: list[str] = []
    for day in DAYS:  # each run sees only the events that have landed by the end of its day
        landed = tt.EventSource(events.where(events.ts < date_to_ms(day) + DAY_MS))
        group_by = tt.GroupBy("spend", landed, ["user_id"], AGGREGATIONS)
        job = tt.BackfillJob(tt.Join("daily", queries, [group_by]), spark, start=day, end=day,
                             partials_path=store)
        by_day += rows(job.dataframe())
        notes += job.report.notes

    assert sorted(by_day) == one_run
    computed = [note.split(" reused, ")[1].split(" computed")[0] for note in notes
                if "hop partials" in note]
    assert computed == ["2", "1", "1"]  # days 1 and 2 first, then one new day per run
    assert any(path.name.startswith("epoch_day=") for path in Path(store).rglob("*"))


def test_a_changed_filter_never_reads_stale_partials(spark: Any, tmp_path: Path) -> None:
    events_table = random_events(200, 4, seed=8, days=2)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 40, seed=9)))
    store = str(tmp_path / "partials")
    outputs = []
    for where in (None, "amount > 0"):
        group_by = tt.GroupBy("spend", tt.EventSource(events, where=where), ["user_id"],
                              AGGREGATIONS)
        join = tt.Join("filtered", queries, [group_by])
        outputs.append(rows(tt.backfill(join, spark, partials_path=store)))
        assert outputs[-1] == rows(tt.backfill(join, spark, executor="reference"))
    assert outputs[0] != outputs[1]


def test_a_rerun_rewrites_and_never_double_counts(spark: Any, tmp_path: Path) -> None:
    events_table = random_events(200, 4, seed=5, days=2)
    events = to_spark(spark, events_table)
    queries = tt.EventSource(to_spark(spark, random_queries(events_table, 40, seed=6)))
    join = tt.Join("rerun", queries, [tt.GroupBy("spend", tt.EventSource(events), ["user_id"],
                                                 AGGREGATIONS)])
    store = str(tmp_path / "partials")
    first = rows(tt.backfill(join, spark, partials_path=store))
    second = rows(tt.backfill(join, spark, partials_path=store))
    assert first == second == rows(tt.backfill(join, spark, executor="reference"))


def test_a_changed_key_never_reads_stale_partials(spark: Any, tmp_path: Path) -> None:
    events = spark.createDataFrame([(1, 2, 10, 100.0), (1, 1, 20, 1.0)],
                                   "u long, v long, ts long, amount double")
    store = str(tmp_path / "partials")
    for key in ("u", "v"):
        queries = spark.createDataFrame([(1, 30)], f"{key} long, ts long")
        group_by = tt.GroupBy("spend", tt.EventSource(events), [key],
                              [tt.Aggregation("amount", "sum", windows=["1d"])])
        join = tt.Join("keyed", tt.EventSource(queries), [group_by])
        assert rows(tt.backfill(join, spark, partials_path=store)) == rows(
            tt.backfill(join, spark, executor="reference"))


def test_partials_of_an_older_state_form_are_never_read(spark: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed state form (moments' version 2, with the mean's low word) changes the
    signature that stored partials live under; ops whose form never changed keep theirs."""
    from timetile.core.aggregators.moments import Variance
    from timetile.offline.plan import plan_backfill
    from timetile.offline.tiled_executor import TiledLayout

    events = spark.createDataFrame([(1, 10, 1.0)], "u long, ts long, amount double")
    queries = tt.EventSource(spark.createDataFrame([(1, 30)], "u long, ts long"))

    def signature(op: str) -> str:
        group_by = tt.GroupBy("spend", tt.EventSource(events), ["u"],
                              [tt.Aggregation("amount", op, windows=["1d"])])
        (part,) = plan_backfill(tt.Join("versions", queries, [group_by]), spark).parts
        return TiledLayout.of(part).signature  # type: ignore[arg-type]

    current = signature("variance")
    monkeypatch.setattr(Variance, "state_version", 1)
    assert signature("variance") != current
    assert signature("sum") == repr((DAY_MS // 24, [("amount", "sum", None, None, "float",
                                                      None)]))
