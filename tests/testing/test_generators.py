"""The generators keep every promise of their docstrings, for the smallest n too."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.testing import (
    EVENT_SCHEMA,
    MIN_EVENTS,
    MUTATION_SCHEMA,
    QUERY_SCHEMA,
    SNAPSHOT_SCHEMA,
    min_queries,
    random_entities,
    random_events,
    random_queries,
    to_spark,
)

LENGTHS = (HOUR_MS, DAY_MS)


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (pyarrow's equals says NaN != NaN)."""
    return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())


def is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


@pytest.fixture(params=[MIN_EVENTS, 300], ids=["min", "300"])
def events(request: pytest.FixtureRequest) -> pa.Table:
    return random_events(request.param, 8, seed=request.param)


def test_events_shape_and_determinism(events: pa.Table) -> None:
    assert events.schema == EVENT_SCHEMA
    n = events.num_rows
    assert same(random_events(n, 8, seed=n), events)
    assert not same(random_events(n, 8, seed=n + 1), events)
    base = date_to_ms("2024-01-01")
    assert all(1 <= row["user_id"] <= 8 for row in rows(events) if row["user_id"] is not None)
    assert all(base <= row["ts"] < base + 7 * DAY_MS for row in rows(events)
               if row["ts"] is not None)


def test_events_edge_cases(events: pa.Table) -> None:
    table = rows(events)
    placed = [row for row in table if row["user_id"] is not None and row["ts"] is not None]
    at_time = Counter((row["user_id"], row["ts"]) for row in placed)
    tied = [key for key, count in at_time.items() if count >= 3]
    assert tied, "several events of one user at one time"
    tied_amounts = [row["amount"] for row in placed if (row["user_id"], row["ts"]) in tied]
    assert any(is_nan(a) for a in tied_amounts)
    assert len({a for a in tied_amounts if a is not None and not is_nan(a)}) >= 2
    assert any(count >= 2 for count in Counter(
        tuple("NaN" if is_nan(v) else v for v in row.values()) for row in table).values())
    assert any(row["ts"] % DAY_MS == 0 for row in placed)
    assert any(row["ts"] % HOUR_MS == 0 and row["ts"] % DAY_MS for row in placed)
    assert any(row["ts"] % DAY_MS == DAY_MS - 1 for row in placed)
    assert {1, 2} <= {row["user_id"] for row in placed}

    amounts = [row["amount"] for row in table]
    assert None in amounts
    assert any(is_nan(a) for a in amounts)
    assert math.inf in amounts
    assert -math.inf in amounts
    assert any(a == 0 and math.copysign(1, a) < 0 for a in amounts if a is not None)
    assert any(a == 0 and math.copysign(1, a) > 0 for a in amounts if a is not None)
    finite = [a for a in amounts if a is not None and math.isfinite(a)]
    assert len(finite) > len(set(finite)), "duplicate amounts"

    items = [row["item"] for row in table]
    assert {None, ""} <= set(items)
    assert any(item and not item.isascii() for item in items)
    assert any(item and any(ord(ch) > 0xFFFF for ch in item) for item in items)  # an emoji
    assert None in [row["quantity"] for row in table]
    assert {None, True, False} <= {row["flag"] for row in table}
    assert None in [row["user_id"] for row in table]
    assert None in [row["ts"] for row in table]


def test_events_reject_too_few_rows() -> None:
    with pytest.raises(ValueError, match="n >="):
        random_events(MIN_EVENTS - 1, 8, seed=0)


def test_events_zipf_skew() -> None:
    def share_of_key_1(exponent: float | None) -> float:
        users = random_events(3000, 20, seed=5, zipf_exponent=exponent,
                              null_fraction=0).column("user_id").to_pylist()
        return users.count(1) / len(users)

    assert share_of_key_1(1.3) > 0.25
    assert share_of_key_1(None) < 0.1


@pytest.mark.parametrize("n", [min_queries(), 200])
def test_queries_edge_cases(n: int) -> None:
    events = random_events(100, 8, seed=3)
    queries = random_queries(events, n, seed=4)
    assert queries.schema == QUERY_SCHEMA
    assert queries.num_rows == n
    assert same(random_queries(events, n, seed=4), queries)

    placed = {(row["user_id"], row["ts"]) for row in rows(events)
              if row["user_id"] is not None and row["ts"] is not None}
    event_keys = {key for key, _ in placed}
    first = min(ts for _, ts in placed)
    last = max(ts for _, ts in placed)
    table = rows(queries)
    timed = [(row["user_id"], row["ts"]) for row in table
             if row["user_id"] is not None and row["ts"] is not None]
    assert any(query in placed for query in timed), "a query exactly at an event"
    for length in LENGTHS:
        assert any((key, ts - length) in placed for key, ts in timed), "event at q - length"
        assert any((key, ts - length - 1) in placed for key, ts in timed), "event at q-length-1"
    assert any(count >= 2 for count in Counter(tuple(row.values()) for row in table).values())
    assert any(ts < first for _, ts in timed)
    assert any(ts == first for _, ts in timed)
    assert any(ts > last for _, ts in timed)
    assert any(ts % DAY_MS == 0 for _, ts in timed)
    assert any(ts % HOUR_MS == 0 for _, ts in timed)
    assert any(row["user_id"] not in event_keys and row["user_id"] is not None for row in table)
    assert None in [row["user_id"] for row in table]
    assert None in [row["ts"] for row in table]


def test_queries_reject_too_few_rows() -> None:
    with pytest.raises(ValueError, match="n >="):
        random_queries(random_events(MIN_EVENTS, 2, seed=0), min_queries() - 1, seed=0)


def _state(snapshots: list[dict[str, Any]], ds: str) -> Counter[tuple[Any, ...]]:
    return Counter((r["user_id"], r["balance"], r["tier"]) for r in snapshots if r["ds"] == ds)


def test_entities_are_consistent_and_hold_their_edge_cases() -> None:
    tables = random_entities(5, seed=9, days=3)
    assert tables.snapshots.schema == SNAPSHOT_SCHEMA
    assert tables.mutations.schema == MUTATION_SCHEMA
    assert same(random_entities(5, seed=9, days=3).mutations, tables.mutations)
    snapshots = rows(tables.snapshots)
    mutations = rows(tables.mutations)
    days = ["2023-12-31", "2024-01-01", "2024-01-02", "2024-01-03"]
    assert sorted({row["ds"] for row in snapshots}) == days
    for before, day in itertools.pairwise(days):
        state = _state(snapshots, before)
        start = date_to_ms(day)
        by_ms: dict[int, list[dict[str, Any]]] = {}
        for row in mutations:
            if start <= row["mutation_ts"] < start + DAY_MS:
                by_ms.setdefault(row["mutation_ts"], []).append(row)
        for ms in sorted(by_ms):  # one millisecond's images apply together
            for row in by_ms[ms]:
                image = (row["user_id"], row["balance"], row["tier"])
                state[image] += -1 if row["is_before"] else 1
            assert all(count >= 0 for count in state.values()), f"retracts a missing row at {ms}"
        assert +state == _state(snapshots, day)
        assert all(count == 1 for count in Counter(key for key, *_ in +state).values())

    first_day = date_to_ms("2024-01-01")
    day0 = [row for row in mutations if row["mutation_ts"] < first_day + DAY_MS]
    per_ms = Counter(row["mutation_ts"] for row in day0 if not row["is_before"])
    assert any(count >= 3 for count in per_ms.values()), "several mutations in one ms"
    assert any(row["mutation_ts"] == first_day and row["user_id"] == 1 for row in day0)
    assert any(row["mutation_ts"] == first_day + DAY_MS - 1 for row in day0)
    (deleted, before), (inserted, after) = sorted(
        (row["mutation_ts"], row["is_before"]) for row in day0 if row["user_id"] == 2)
    assert (before, after) == (True, False), "key 2 deleted (a before image only)"
    assert deleted < inserted, "then re-inserted later (an after image only)"
    assert 6 not in {row["user_id"] for row in snapshots if row["ds"] == days[0]}
    assert any(row["user_id"] == 6 and not row["is_before"] for row in day0)
    assert None in {row["balance"] for row in snapshots}
    assert "" in {row["tier"] for row in snapshots}


@pytest.mark.spark
def test_to_spark_keeps_types_and_nulls(spark: Any) -> None:
    table = random_events(MIN_EVENTS, 3, seed=1)
    frame = to_spark(spark, table)
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("user_id", "bigint"), ("ts", "bigint"), ("amount", "double"), ("quantity", "bigint"),
        ("item", "string"), ("flag", "boolean")]
    collected = [row.asDict() for row in frame.collect()]
    assert [row["user_id"] for row in collected] == table.column("user_id").to_pylist()
    assert [row["item"] for row in collected] == table.column("item").to_pylist()
