"""``timetile verify --leaks``: rows that arrive late are caught and named, per feature.

Planted faults: an event source whose rows are known two hours after their time, and an
entity source whose mutations are known two hours after they happened. Beside them, sources
whose rows are known at once give no leak, so a report that flagged everything would fail.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from typer.testing import CliRunner

import timetile as tt
from timetile.api.errors import DefinitionError
from timetile.cli.app import app
from timetile.cli.verify import MISMATCH_EXIT
from timetile.core.timeutil import HOUR_MS
from timetile.offline.plan import plan_backfill
from timetile.testing import random_entities, random_events, random_queries, to_spark
from timetile.verify.tilings import KNOWN_BEFORE

pytestmark = pytest.mark.spark

LATE = 2 * HOUR_MS


def test_late_events_and_late_mutations_are_leaks_and_prompt_ones_are_not(
        spark: Any, tmp_path: Path) -> None:
    table = random_events(400, 8, seed=51, days=2)
    events = to_spark(spark, table)
    # every third event is known two hours after its time; the others at once
    late = events.withColumn("ingested", F.when(F.col("amount").isNull() | (F.col("ts") % 3 == 0),
                                                F.col("ts") + LATE).otherwise(F.col("ts")))
    prompt = events.withColumn("ingested", F.col("ts"))
    entities = random_entities(6, seed=52, days=2, mutations_per_day=20)
    mutations = to_spark(spark, entities.mutations)
    accounts = tt.EntitySource(
        to_spark(spark, entities.snapshots),
        mutation_table=mutations.withColumn("known", F.col("mutation_ts") + LATE),
        known_at="known")
    join = tt.Join("leaky", tt.EventSource(to_spark(spark, random_queries(table, 120, seed=53))),
                   [tt.GroupBy("late", tt.EventSource(late, known_at="ingested"), ["user_id"],
                               [tt.Aggregation("amount", "sum", windows=["1d"]),
                                tt.Aggregation("item", "last")]),
                    tt.GroupBy("prompt", tt.EventSource(prompt, known_at="ingested"),
                               ["user_id"], [tt.Aggregation("amount", "sum", windows=["1d"])]),
                    tt.GroupBy("account", accounts, ["user_id"],
                               [tt.Aggregation("balance", "sum")]),
                    tt.GroupBy("row", replace(accounts, select=["user_id", "tier"]),
                               ["user_id"])])  # a lookup: the key's row

    report = tt.verify(join, spark, "2024-01-02", "2024-01-02", tilings="one,stream",
                       leaks=True, output=tmp_path, stream_batch=100)

    assert not report.passed
    assert [run.tiling for run in report.runs] == ["one", "stream", KNOWN_BEFORE]
    assert report.runs[2].rows == report.runs[1].rows == report.rows
    # The stream replays rows as they became known: a fetch made after a micro-batch
    # boundary that falls between a late row's time and its arrival misses it, as online.
    streamed = {entry.feature: entry.mismatches for entry in report.features
                if entry.tiling == "stream"}
    assert {name for name, bad in streamed.items() if bad} <= {
        "late_amount_sum_1d", "late_item_last", "account_balance_sum", "row_tier"}
    assert streamed["late_amount_sum_1d"] > 0, streamed
    leaking = {entry.feature: entry for entry in report.features
               if entry.tiling == KNOWN_BEFORE}
    assert {name for name, entry in leaking.items() if entry.mismatches} == {
        "late_amount_sum_1d", "late_item_last", "account_balance_sum", "row_tier"}
    assert all(entry.compared == report.rows for entry in leaking.values())
    moved = leaking["late_amount_sum_1d"].moved
    assert moved is not None
    assert moved > 0
    assert "leaks: account_balance_sum, late_amount_sum_1d, late_item_last, row_tier" in (
        report.summary())
    assert KNOWN_BEFORE in (tmp_path / "report.md").read_text()
    rows = pq.read_table(tmp_path / "mismatches.parquet").to_pylist()
    assert {row["tiling"] for row in rows} == {"stream", KNOWN_BEFORE}


def test_the_cli_exits_non_zero_on_a_leak(spark: Any, tmp_path: Path) -> None:
    table = random_events(200, 4, seed=61, days=2)
    late = table.append_column("ingested", pa.compute.add(table.column("ts"), LATE))
    pq.write_table(late, tmp_path / "events.parquet")
    pq.write_table(random_queries(table, 40, seed=62), tmp_path / "queries.parquet")
    defs = tmp_path / "defs.py"
    defs.write_text(
        "import timetile as tt\n"
        f"events = tt.EventSource({str(tmp_path / 'events.parquet')!r}, known_at='ingested')\n"
        "spend = tt.GroupBy('spend', events, ['user_id'], [tt.Aggregation('item', 'count')])\n"
        f"model = tt.Join('model', tt.EventSource({str(tmp_path / 'queries.parquet')!r}), "
        "[spend])\n")
    result = CliRunner().invoke(app, ["verify", str(defs), "--start", "2024-01-02",
                                      "--end", "2024-01-02", "--tilings", "one", "--leaks"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == MISMATCH_EXIT, result.output
    assert "spend_item_count" in result.output
    assert "leaks: spend_item_count" in " ".join(result.output.split())


def test_known_at_naming_a_missing_or_non_time_column_is_refused_before_any_job(
        spark: Any) -> None:
    events = spark.createDataFrame([(1, 1_700_000_000_000, 2.5)],
                                   "user_id long, ts long, amount double")
    entities = random_entities(3, seed=71, days=1)
    queries = tt.EventSource(events)

    def refusal(source: tt.EventSource | tt.EntitySource) -> str:
        join = tt.Join("bad", queries, [tt.GroupBy("g", source, ["user_id"],
                                                   [tt.Aggregation("amount", "sum")])])
        with pytest.raises(DefinitionError) as raised:
            plan_backfill(join, spark)
        return str(raised.value)

    said = refusal(tt.EventSource(events, known_at="ingested_at"))
    assert "parts[0].source.known_at" in said
    assert "'ingested_at' is not a column" in said
    said = refusal(tt.EventSource(events, known_at="amount"))
    assert "parts[0].source.known_at" in said
    assert "not a time" in said
    accounts = tt.EntitySource(to_spark(spark, entities.snapshots),
                               mutation_table=to_spark(spark, entities.mutations),
                               known_at="delivered")
    join = tt.Join("bad", queries, [tt.GroupBy("g", accounts, ["user_id"],
                                               [tt.Aggregation("balance", "sum")])])
    with pytest.raises(DefinitionError, match=r"parts\[0\]\.source\.known_at"):
        plan_backfill(join, spark)
    with pytest.raises(DefinitionError, match="known_at"):
        tt.EntitySource("snapshots", known_at="known")  # no mutation table
    with pytest.raises(DefinitionError, match="known_at"):
        tt.EventSource("events", known_at="")


def test_a_cut_entity_source_keeps_a_lookups_columns(spark: Any) -> None:
    """A lookup's columns are its source's selected ones: a cut (by a tiling or per row)
    keeps the select's names, so the lookup outputs the same columns."""
    from timetile.verify.cuts import Cut, source_as_of

    entities = random_entities(3, seed=81, days=1)
    accounts = tt.EntitySource(to_spark(spark, entities.snapshots),
                               mutation_table=to_spark(spark, entities.mutations),
                               select={"user_id": "user_id", "level": "upper(tier)"})
    lookup = tt.GroupBy("row", accounts, ["user_id"])
    cut = source_as_of(spark, accounts, "parts[0].source", Cut(F.lit(1_704_153_600_000)))
    assert replace(lookup, source=cut).lookup_columns == lookup.lookup_columns == ("level",)


def test_snapshot_days_stay_listed_when_no_row_of_them_is_asked_for(
        spark: Any, tmp_path: Path) -> None:
    """The backfill lists an entity's snapshot days before its ``where``: a day whose rows
    the ``where`` drops, or whose rows are all of keys no sampled row asks for, still exists
    (it is not a missing snapshot). Each row's own cut keeps every day listed, so nothing
    differs: no false leak. And a lookup's columns stay the same under the rewrite."""
    from timetile.verify.leaks import as_known

    entities = random_entities(3, seed=91, days=2)
    snapshots = to_spark(spark, entities.snapshots)
    mutations = to_spark(spark, entities.mutations)
    nothing = tt.EntitySource(snapshots, mutation_table=mutations, where="balance > 1e18")
    accounts = tt.EntitySource(snapshots, mutation_table=mutations,
                               select={"user_id": "user_id", "level": "upper(tier)"})
    left = spark.createDataFrame(
        [(99, 1_704_160_800_000 + hour * 3_600_000) for hour in range(6)],  # 2024-01-02
        "user_id long, ts long")
    join = tt.Join("unasked", tt.EventSource(left), [
        tt.GroupBy("nothing", nothing, ["user_id"], [tt.Aggregation("balance", "count")]),
        tt.GroupBy("account", accounts, ["user_id"], [tt.Aggregation("level", "count")]),
        tt.GroupBy("row", accounts, ["user_id"])])
    report = tt.verify(join, spark, "2024-01-02", "2024-01-02", tilings="one", leaks=True)
    assert report.passed, report.markdown()
    rewritten = as_known(join, spark, left.withColumn("n", F.lit(0)), "n", "ts")
    assert [part.group_by.lookup_columns for part in rewritten.join_parts] == [
        part.group_by.lookup_columns for part in join.join_parts]
